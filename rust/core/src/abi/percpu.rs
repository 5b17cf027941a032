// SPDX-License-Identifier: GPL-2.0

//! rkf_percpu's probe variable, which tests and examples read from BPF (c-shim/rkf.h for
//! C, asserted by rkf_percpu).

/// `RKF_PERCPU_PROBE_MAGIC` ("rkfp"): the magic of an initialised [`PercpuProbe`].
pub const PERCPU_PROBE_MAGIC: u32 = 0x726b_6670;

/// `struct rkf_percpu_probe`: rkf_percpu's own per-cpu variable, for tests and examples.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PercpuProbe {
    /// The cpu this copy belongs to.
    pub cpu: u32,
    /// [`PERCPU_PROBE_MAGIC`] once the module has initialised the copy.
    pub magic: u32,
    /// The address of this copy, as the module resolved it.
    pub self_addr: u64,
}
