// SPDX-License-Identifier: GPL-2.0

//! The kfunc sets of rkf_stack, defined by its C shim, and what the tracing set's filter
//! needs before it is registered.

use kernel::prelude::*;

use crate::{kfunc::KfuncSet, rkf_h};

/// The kfunc set for the tracing hook: `bpf_rkf_get_stack()`, `bpf_rkf_get_stack_pe()`,
/// `bpf_rkf_get_task_stack()`.
pub(crate) static TRACING_KFUNCS: KfuncSet =
    // SAFETY: the shim defines `rkf_stack_tracing_kfunc_set` with `BTF_KFUNCS_START/END`, as a
    // const object, never written.
    unsafe { KfuncSet::new(&rkf_h::rkf_stack_tracing_kfunc_set) };

/// The kfunc set for kprobe programs: `bpf_rkf_get_stack_kprobe()`,
/// `bpf_rkf_get_task_stack()`.
pub(crate) static KPROBE_KFUNCS: KfuncSet =
    // SAFETY: the shim defines `rkf_stack_kprobe_kfunc_set` with `BTF_KFUNCS_START/END`, as a
    // const object, never written.
    unsafe { KfuncSet::new(&rkf_h::rkf_stack_kprobe_kfunc_set) };

/// Finds what the tracing set's filter refuses (`bpf_rkf_get_stack_pe()` to any program
/// but a perf_event one), before the set is registered.
///
/// # Safety
///
/// Called from the module's init only (the ids it finds are `__ro_after_init`), before the
/// tracing set is registered (the filter reads them without a lock).
pub(crate) unsafe fn kfunc_filter_init() -> Result {
    // SAFETY: the caller runs in the module's init, before the tracing set is registered,
    // as the function's contract requires.
    kernel::error::to_result(unsafe { rkf_h::rkf_stack_kfunc_filter_init() }).inspect_err(|e| {
        pr_err!(
            "bpf_rkf_get_stack_pe() or bpf_rkf_get_stack() is not in rkf_stack's BTF: {:?}\n",
            e
        )
    })
}
