// SPDX-License-Identifier: GPL-2.0

//! `bpf_get_stack()` and `bpf_get_task_stack()` as kfuncs: `bpf_rkf_get_stack()`,
//! `bpf_rkf_get_stack_kprobe()`, `bpf_rkf_get_stack_pe()` and `bpf_rkf_get_task_stack()`.
//!
//! The C shim fetches the regs and takes the callchain; this module applies the helper's
//! rules around it (rust/core/src/stack.rs) and resolves build ids, a file per concern:
//! the kfunc sets (`sets`), the perf callchain buffers (`buffers`), the user address space
//! for build ids (`mm`) and the entry points the shim calls (`entry`).

mod buffers;
mod entry;
mod mm;
mod sets;

pub(crate) use buffers::CallchainBuffers;
pub(crate) use mm::MmUnlockWork;
pub(crate) use sets::{kfunc_filter_init, KPROBE_KFUNCS, TRACING_KFUNCS};
