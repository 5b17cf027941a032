// SPDX-License-Identifier: GPL-2.0

//! rkf_testmod: kernel code of a known shape for the rkf selftests and benchmarks, as
//! `bpf_testmod` is for the upstream BPF selftests.  Not for production kernels.
//!
//! It registers `bpf_rkf_testmod_recurse()` for syscall programs: a kernel stack of a
//! chosen depth, ending in `rkf_testmod_leaf()` where fentry programs attach.  The
//! functions are in c-shim/rkf_testmod_shim.c, because fentry needs their BTF.

use kernel::prelude::*;

#[expect(
    dead_code,
    reason = "shared with the other modules, which use the program types this one does not"
)]
mod kfunc;
mod shim;

use kfunc::{KfuncRegistration, ProgType};
use shim::{KfuncIdSetC, KfuncSet};

extern "C" {
    static rkf_testmod_kfunc_set: KfuncIdSetC;
}

/// The kfunc set of rkf_testmod (`rkf_testmod_kfunc_set`).
static KFUNCS: KfuncSet =
    // SAFETY: the shim defines `rkf_testmod_kfunc_set` as a const object, never written.
    KfuncSet::new(unsafe { &rkf_testmod_kfunc_set });

module! {
    type: RkfTestmod,
    name: "rkf_testmod",
    authors: ["rkf developers"],
    description: "rkf: test targets for the rkf selftests and benchmarks",
    license: "GPL",
}

struct RkfTestmod {
    _kfuncs: KfuncRegistration,
}

impl kernel::Module for RkfTestmod {
    fn init(module: &'static ThisModule) -> Result<Self> {
        let kfuncs = KfuncRegistration::new(module, &KFUNCS, &[ProgType::Syscall])?;
        Ok(Self { _kfuncs: kfuncs })
    }
}
