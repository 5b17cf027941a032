// SPDX-License-Identifier: GPL-2.0

//! What every rkf crate takes from its C shim: kfunc sets.
//!
//! Out-of-tree modules get no bindgen run of their own, so each module declares the items
//! of `c-shim/rkf.h` it uses by hand, next to the code that uses them (rust/percpu.rs,
//! rust/stack.rs), like `drivers/android/binder` does for its C files.  Keep them in step
//! with the header.

use kernel::bindings;

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
    /// Wraps the shim's set.
    pub(crate) const fn new(set: &'static KfuncIdSetC) -> Self {
        Self(set)
    }

    /// The `struct btf_kfunc_id_set`.
    pub(crate) fn as_raw(&self) -> *const bindings::btf_kfunc_id_set {
        core::ptr::from_ref(self.0).cast()
    }
}
