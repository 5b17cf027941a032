// SPDX-License-Identifier: GPL-2.0

//! rkf_percpu: per-cpu pointer kfuncs for BPF programs.
//!
//! `bpf_rkf_per_cpu_ptr(&sym, cpu)` and `bpf_rkf_this_cpu_ptr(&sym)` resolve the address
//! of a typed per-cpu `__ksym` of vmlinux or of a module, as the `bpf_per_cpu_ptr()` and
//! `bpf_this_cpu_ptr()` helpers do.  The kfunc entry points are in
//! c-shim/rkf_percpu_shim.c; the logic is here.

use kernel::prelude::*;

mod kfunc;
mod percpu;
#[path = "core/src/percpu.rs"]
#[expect(
    unreachable_pub,
    reason = "shared with the rkf-core host crate, where it is public"
)]
mod percpu_core;
mod shim;

use kfunc::{KfuncRegistration, ProgType};

module! {
    type: RkfPercpu,
    name: "rkf_percpu",
    authors: ["rkf developers"],
    description: "rkf: per-cpu pointer kfuncs for BPF programs",
    license: "GPL",
}

struct RkfPercpu {
    _kfuncs: KfuncRegistration,
}

impl kernel::Module for RkfPercpu {
    fn init(module: &'static ThisModule) -> Result<Self> {
        // The probe must be set up before the kfuncs become callable.
        percpu::init_probe();
        let kfuncs = KfuncRegistration::new(
            module,
            &percpu::KFUNCS,
            &[ProgType::Tracing, ProgType::Kprobe, ProgType::Syscall],
        )?;
        pr_info!("kfuncs bpf_rkf_per_cpu_ptr and bpf_rkf_this_cpu_ptr registered\n");
        Ok(Self { _kfuncs: kfuncs })
    }
}
