// SPDX-License-Identifier: GPL-2.0

//! Registration of kfunc sets that a C shim defines.
//!
//! Kfuncs have to be C functions: Rust compilation units carry no BTF (pahole runs with
//! `--lang_exclude=rust`) and `BTF_KFUNCS_START`/`BTF_ID_FLAGS` are C inline assembly.  The
//! shim defines the functions and their `struct btf_kfunc_id_set`; this file registers the
//! set and turns the kernel's silent failure modes into load errors.

use core::ptr;

use kernel::{bindings, error::to_result, prelude::*, ThisModule};

/// A kfunc set a shim defines (`struct btf_kfunc_id_set`, declared in c-shim/rkf.h).
///
/// # Invariants
///
/// The set is a const object of a C shim (`BTF_KFUNCS_START`/`BTF_KFUNCS_END` or
/// `BTF_SET8_START`/`BTF_SET8_END`): its `set` points to a static `struct btf_id_set8`
/// with `cnt` pairs after its header, and neither is ever written.
pub(crate) struct KfuncSet(&'static bindings::btf_kfunc_id_set);

impl KfuncSet {
    /// Wraps the shim's set.
    ///
    /// # Safety
    ///
    /// `set` is a const object of a C shim whose `set` points to a static
    /// `struct btf_id_set8` with `cnt` pairs after its header; neither is ever written.
    pub(crate) const unsafe fn new(set: &'static bindings::btf_kfunc_id_set) -> Self {
        // INVARIANT: the caller's guarantee.
        Self(set)
    }

    /// The set, for the kernel.
    pub(crate) fn as_raw(&self) -> *const bindings::btf_kfunc_id_set {
        ptr::from_ref(self.0)
    }
}

// SAFETY: the set is never written (type invariant).
unsafe impl Sync for KfuncSet {}

/// A BPF program type, as far as kfunc registration is concerned.
///
/// Registration is per kfunc hook, not per program type: tracepoint, raw_tp and
/// perf_event programs share the hook of [`ProgType::Tracing`]
/// (`bpf_prog_type_to_kfunc_hook()` in kernel/bpf/btf.c).
#[derive(Clone, Copy, Debug)]
pub(crate) enum ProgType {
    /// fentry/fexit, tp_btf and LSM, and through the same hook tracepoint, raw_tp and
    /// perf_event programs.
    Tracing,
    /// kprobe, kprobe.multi and uprobe programs.
    Kprobe,
    /// Syscall programs (`SEC("syscall")`).
    Syscall,
}

impl ProgType {
    fn as_raw(self) -> bindings::bpf_prog_type {
        match self {
            Self::Tracing => bindings::bpf_prog_type_BPF_PROG_TYPE_TRACING,
            Self::Kprobe => bindings::bpf_prog_type_BPF_PROG_TYPE_KPROBE,
            Self::Syscall => bindings::bpf_prog_type_BPF_PROG_TYPE_SYSCALL,
        }
    }
}

/// Whether every BTF id of `set` was patched by resolve_btfids: the kernel would take an
/// unresolved one (0) silently.
pub(crate) fn ids_resolved(set: &KfuncSet) -> bool {
    // SAFETY: the set's `set` points to a static `btf_id_set8` with `cnt` entries after
    // its header, never written (type invariant of `KfuncSet`).
    let ids = unsafe {
        let set8 = set.0.set;
        core::slice::from_raw_parts((*set8).pairs.as_ptr(), (*set8).cnt as usize)
    };
    !ids.is_empty() && ids.iter().all(|p| p.id != 0)
}

/// A kfunc set registered with the BPF verifier.
///
/// There is nothing to unregister: the kernel drops a module's kfunc sets together with
/// the module's BTF when the module goes away.  A registration therefore only records that
/// the set was accepted.
pub(crate) struct KfuncRegistration {
    _private: (),
}

impl KfuncRegistration {
    /// Registers `set`, defined by the C shim of `module`, for every program type in `types`.
    ///
    /// Fails, instead of loading a module whose kfuncs no program can call, when the
    /// module has no BTF (it was built against a tree without `vmlinux`: the kernel would
    /// only warn "missing module BTF" and return 0) or when resolve_btfids did not patch
    /// the set's BTF ids.
    ///
    /// # Safety
    ///
    /// Called from the init of `module`, whose shim defines `set`, once for each set: the
    /// kernel takes a module's kfunc sets only from its init (register_btf_kfunc_id_set()
    /// reallocates the hook's set without a lock), and one set of a module per hook.
    pub(crate) unsafe fn new(
        module: &'static ThisModule,
        set: &'static KfuncSet,
        types: &[ProgType],
    ) -> Result<Self> {
        // SAFETY: this is a loadable module's init (this function's safety contract; the
        // crates are built only as modules, with -DMODULE), so `module` wraps its
        // `THIS_MODULE`, a valid `struct module`, not the null pointer of built-in code;
        // its `btf_data_size` is set at load, before init (kernel/module/main.c).
        let btf_size = unsafe { (*module.as_ptr()).btf_data_size };
        if btf_size == 0 {
            pr_err!("the module has no .BTF section: build it against a kernel tree that has vmlinux (with CONFIG_DEBUG_INFO_BTF_MODULES=y and pahole), or its kfuncs cannot register\n");
            return Err(ENOEXEC);
        }

        if !ids_resolved(set) {
            pr_err!(
                "the kfunc set has unresolved BTF ids: resolve_btfids did not run on the module\n"
            );
            return Err(EINVAL);
        }

        let set = set.as_raw();
        for &t in types {
            // SAFETY: `set` is a valid, 'static kfunc set (type invariant of `KfuncSet`),
            // defined by the shim of `module`, and this runs from that module's init, as
            // register_btf_kfunc_id_set() requires (this function's safety contract).
            to_result(unsafe { bindings::register_btf_kfunc_id_set(t.as_raw(), set) })
                .inspect_err(|e| {
                    pr_err!("cannot register kfuncs for {:?} programs: {:?}\n", t, e);
                })?;
        }
        Ok(Self { _private: () })
    }
}
