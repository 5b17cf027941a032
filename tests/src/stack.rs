// SPDX-License-Identifier: GPL-2.0

//! rkf_stack: `bpf_rkf_get_stack()` and `bpf_rkf_get_stack_kprobe()` against
//! `bpf_get_stack()`, on the same event, in the same program.
//!
//! The root: the table of tests and the flags and sizes the rooms share.  The rooms:
//!
//! - `samples`: stack.bpf.c loaded, its programs run on this thread's events, what they saw;
//! - `compare`: the checks of the kfunc's results against the helper's;
//! - `differential`: kernel, user, build-id and deep kernel stacks, the kernel stack's
//!   symbols, one event for the tests that reload the module, and no stack lost;
//! - `errno`: the table of errors, programs nested past the per-cpu slots included;
//! - `perf_event`: perf_event programs, precise events, the task stack in them;
//! - `filter`: which program types may call which of the kfuncs;
//! - `rawtp`: upstream's get_stack_raw_tp programs;
//! - `task`: `bpf_rkf_get_task_stack()` against `bpf_get_task_stack()`;
//! - `sleepable`: build ids in sleepable programs, where a page fault is allowed.

mod compare;
pub(crate) mod differential;
mod errno;
mod filter;
mod perf_event;
mod rawtp;
mod samples;
mod sleepable;
mod task;

use crate::harness::Test;

pub const TESTS: &[Test] = &[
    Test {
        name: "stack_kernel_differential",
        run: differential::kernel_differential,
    },
    Test {
        name: "stack_user_differential",
        run: differential::user_differential,
    },
    Test {
        name: "stack_build_id_differential",
        run: differential::build_id_differential,
    },
    Test {
        name: "stack_errno_table",
        run: errno::errno_table,
    },
    Test {
        name: "stack_kernel_symbols",
        run: differential::kernel_symbols,
    },
    Test {
        name: "stack_perf_event_differential",
        run: perf_event::perf_event_differential,
    },
    Test {
        name: "stack_perf_event_precise",
        run: perf_event::perf_event_precise,
    },
    Test {
        name: "stack_perf_event_task_stack_keeps_the_sample",
        run: perf_event::perf_event_task_stack,
    },
    Test {
        name: "stack_perf_event_kfunc_only_in_perf_event_programs",
        run: filter::pe_only_in_perf_event_programs,
    },
    Test {
        name: "stack_deep_kernel_differential",
        run: differential::deep_kernel_differential,
    },
    Test {
        name: "stack_no_stack_lost",
        run: differential::no_stack_lost,
    },
    Test {
        name: "stack_upstream_get_stack_rawtp",
        run: rawtp::upstream_get_stack_rawtp,
    },
    Test {
        name: "stack_task_differential",
        run: task::differential,
    },
    Test {
        name: "stack_task_untrusted_refused",
        run: task::untrusted_refused,
    },
    Test {
        name: "stack_upstream_get_stack_rawtp_err",
        run: rawtp::upstream_get_stack_rawtp_err,
    },
    Test {
        name: "stack_sleepable_build_id_untouched_elf",
        run: sleepable::untouched_elf,
    },
];

const F_USER_STACK: u64 = 1 << 8;
const F_USER_BUILD_ID: u64 = 1 << 11;
const DEPTH: usize = 64;
const BUF: u32 = (DEPTH * 8) as u32;
