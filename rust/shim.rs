// SPDX-License-Identifier: GPL-2.0

//! The C shims' side of the Rust/C surface, as declared in `c-shim/rkf.h`.
//!
//! Out-of-tree modules get no bindgen run of their own, so the items are declared here by
//! hand, like `drivers/android/binder` does for its C files.  Keep this in step with the
//! header.

use kernel::bindings;

/// `RKF_PERCPU_PROBE_MAGIC`.
pub(crate) const RKF_PERCPU_PROBE_MAGIC: u32 = 0x726b_6670;

/// `struct rkf_percpu_probe`.
#[repr(C)]
pub(crate) struct RkfPercpuProbe {
    pub(crate) cpu: u32,
    pub(crate) magic: u32,
    pub(crate) self_: u64,
}

extern "C" {
    /// The per-cpu variable `rkf_percpu_probe`; its address is a `__percpu` address.
    pub(crate) static mut rkf_percpu_probe: RkfPercpuProbe;

    static rkf_percpu_kfunc_set: KfuncIdSetC;
}

/// A `struct btf_kfunc_id_set` defined in a shim, as Rust sees it: an opaque C object.
///
/// (Declaring the extern static with the bindgen type would make rustc inspect the whole
/// `struct module` that it points to, which is not FFI-safe by its rules.)
#[repr(C)]
pub(crate) struct KfuncIdSetC {
    _opaque: [u8; 0],
}

/// A kfunc set of a shim.
pub(crate) struct KfuncSet(&'static KfuncIdSetC);

impl KfuncSet {
    /// The `struct btf_kfunc_id_set`.
    pub(crate) fn as_raw(&self) -> *const bindings::btf_kfunc_id_set {
        core::ptr::from_ref(self.0).cast()
    }
}

/// The kfunc set of rkf_percpu (`rkf_percpu_kfunc_set`).
pub(crate) static RKF_PERCPU_KFUNCS: KfuncSet =
    // SAFETY: the shim defines `rkf_percpu_kfunc_set` as a const object, never written.
    KfuncSet(unsafe { &rkf_percpu_kfunc_set });

// The shims call back into Rust through `#[no_mangle]` functions: `rkf_percpu_resolve()`
// and `rkf_percpu_resolve_this()` in rust/percpu.rs.
