// SPDX-License-Identifier: GPL-2.0

//! References on the kernel objects a link holds or a request names: the program, the
//! BTF objects of modules, and the modules whose functions a link traces.

use kernel::{bindings, prelude::*};

use crate::{abi::Kind, rkf_h};

/// A reference on an rkf_multi program, from `rkf_multi_prog_get()`.
///
/// # Invariants
///
/// `ptr` is a program whose reference this object owns.
pub(crate) struct ProgRef {
    ptr: *mut bindings::bpf_prog,
}

// SAFETY: a program reference may be dropped from any task.
unsafe impl Send for ProgRef {}

/// A program taken for a link, as [`ProgRef::get()`] returns it.
pub(crate) struct Prog {
    /// The reference.
    pub(crate) prog: ProgRef,
    /// What it runs on.
    pub(crate) kind: Kind,
    /// A sleepable program (fentry.s, fexit.s, fsession.s).
    pub(crate) sleepable: bool,
    /// Its id.
    pub(crate) id: u32,
    /// The arguments its template reads: the most a function it traces may take.
    pub(crate) max_args: u32,
}

impl ProgRef {
    /// Takes the program `fd`, checked to be an rkf_multi program.
    pub(crate) fn get(fd: u32) -> Result<Prog> {
        let (mut kind, mut sleepable, mut id, mut max_args) = (0u32, false, 0u32, 0u32);
        // SAFETY: the out-pointers are valid; the shim checks everything about `fd`.
        let p = unsafe {
            rkf_h::rkf_multi_prog_get(fd, &mut kind, &mut sleepable, &mut id, &mut max_args)
        };
        let p = kernel::error::from_err_ptr(p)?;
        // INVARIANT: the shim returned a reference.
        let prog = Self { ptr: p };
        // The shim only returns the three kinds.
        let kind = Kind::from_raw(kind).ok_or(EINVAL)?;
        Ok(Prog {
            prog,
            kind,
            sleepable,
            id,
            max_args,
        })
    }

    /// The program, valid while `self` is.
    pub(crate) fn as_ptr(&self) -> *mut bindings::bpf_prog {
        self.ptr
    }

    /// How many argument slots of ctx the program reads, as the verifier saw it: at most
    /// `RKF_MULTI_MAX_ARGS`.
    pub(crate) fn ctx_args(&self) -> u32 {
        // SAFETY: `ptr` is a program we hold (type invariant).
        unsafe { rkf_h::rkf_multi_prog_ctx_args(self.ptr) }
    }

    /// The BTF the program was verified against: rkf_multi's, split on vmlinux's, valid
    /// while `self` is.
    pub(crate) fn btf(&self) -> *const bindings::btf {
        // SAFETY: `ptr` is a program we hold (type invariant).
        unsafe { rkf_h::rkf_multi_prog_btf(self.ptr) }
    }
}

impl Drop for ProgRef {
    fn drop(&mut self) {
        // SAFETY: this object owns the reference (type invariant).
        unsafe { bindings::bpf_prog_put(self.ptr) };
    }
}

/// A reference on a BTF object, from an fd that user space passed.
///
/// # Invariants
///
/// `ptr` is a BTF object whose reference this object owns.
pub(crate) struct BtfRef {
    ptr: *mut bindings::btf,
}

impl BtfRef {
    /// Takes the BTF object of `fd`: `EBADF` if `fd` is not open, `EINVAL` if it is not
    /// a BTF object.
    pub(crate) fn get(fd: i32) -> Result<Self> {
        // SAFETY: any fd may be asked about; the result is a reference or an error.
        let p = kernel::error::from_err_ptr(unsafe { bindings::btf_get_by_fd(fd) })?;
        // INVARIANT: btf_get_by_fd() returned a reference.
        Ok(Self { ptr: p })
    }

    /// The object, valid while `self` is.
    pub(crate) fn as_ptr(&self) -> *mut bindings::btf {
        self.ptr
    }
}

impl Drop for BtfRef {
    fn drop(&mut self) {
        // SAFETY: this object owns the reference (type invariant).
        unsafe { bindings::btf_put(self.ptr) };
    }
}

/// A reference on a module whose functions a link traces: the module stays loaded while
/// the link exists, as with a BPF trampoline on a module function.
///
/// # Invariants
///
/// `ptr` is a module whose reference this object owns.
pub(crate) struct ModuleRef {
    ptr: *mut bindings::module,
}

// SAFETY: a module reference may be dropped from any task.
unsafe impl Send for ModuleRef {}

impl ModuleRef {
    /// The module `btf` describes, if it is a live module's BTF.
    pub(crate) fn of(btf: &BtfRef) -> Option<Self> {
        // SAFETY: `btf` is a valid BTF object (type invariant of `BtfRef`).
        let p = unsafe { bindings::btf_try_get_module(btf.ptr) };
        if p.is_null() {
            return None;
        }
        // INVARIANT: a non-NULL result comes with a reference.
        Some(Self { ptr: p })
    }

    /// The module, valid while `self` is.
    pub(crate) fn as_ptr(&self) -> *mut bindings::module {
        self.ptr
    }
}

impl Drop for ModuleRef {
    fn drop(&mut self) {
        // SAFETY: this object owns the reference (type invariant).
        unsafe { bindings::module_put(self.ptr) };
    }
}
