// SPDX-License-Identifier: GPL-2.0

//! rkf_stack: `bpf_get_stack()` as kfuncs, writing the stack straight into a buffer the
//! BPF program owns.
//!
//! `bpf_rkf_get_stack()` serves fentry/fexit, tp_btf, raw_tp and tracepoint programs (the
//! stack starts at the program, as the helper's does there); `bpf_rkf_get_stack_kprobe()`
//! serves kprobe programs (the stack starts at the probed instruction) and
//! `bpf_rkf_get_stack_pe()` perf_event programs (the sampled regs or callchain).  The kfunc entry
//! points are in c-shim/rkf_stack_shim.c.

use kernel::prelude::*;

mod kfunc;
mod shim;
mod stack;
#[path = "core/src/stack.rs"]
#[expect(
    unreachable_pub,
    reason = "shared with the rkf-core host crate, where it is public"
)]
mod stack_core;

use kfunc::{KfuncRegistration, ProgType};
use stack::{CallchainBuffers, MmUnlockWork};

module! {
    type: RkfStack,
    name: "rkf_stack",
    authors: ["rkf developers"],
    description: "rkf: bpf_get_stack() as kfuncs for BPF programs",
    license: "GPL",
}

// Fields are dropped in declaration order: the kfuncs go first (nothing to undo), then
// the callchain buffers, then the irq_work slots are drained.
struct RkfStack {
    _tracing: KfuncRegistration,
    _kprobe: KfuncRegistration,
    _buffers: CallchainBuffers,
    _mm_work: MmUnlockWork,
}

impl kernel::Module for RkfStack {
    fn init(module: &'static ThisModule) -> Result<Self> {
        // Everything the kfuncs use is set up before they are registered.
        let mm_work = MmUnlockWork::new();
        let buffers = CallchainBuffers::get()?;
        // The helper is there for syscall programs too (through the raw_tp proto).
        let tracing = KfuncRegistration::new(
            module,
            &stack::TRACING_KFUNCS,
            &[ProgType::Tracing, ProgType::Syscall],
        )?;
        let kprobe = KfuncRegistration::new(module, &stack::KPROBE_KFUNCS, &[ProgType::Kprobe])?;
        pr_info!("kfuncs bpf_rkf_get_stack, bpf_rkf_get_stack_kprobe and bpf_rkf_get_stack_pe registered\n");
        Ok(Self {
            _tracing: tracing,
            _kprobe: kprobe,
            _buffers: buffers,
            _mm_work: mm_work,
        })
    }
}
