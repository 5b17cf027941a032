// SPDX-License-Identifier: GPL-2.0

//! rkf_multi, after the upstream tracing_multi selftests
//! (tools/testing/selftests/bpf/prog_tests/tracing_multi.c): fentry, fexit and both on one
//! set; arguments and return values of known calls; cookies; func_ip; overlapping links in
//! every combination; rollback; every refusal; coexistence with in-kernel trampolines.
//!
//! The root: the table of tests and the helpers the rooms share (attaches, expected refusals,
//! test runs by fd, facts about the kernel).  The rooms:
//!
//! - `basic`: the targets, bpf_fentry_test1..9, the skeleton of multi.bpf.c with them, and
//!   the basic tests;
//! - `generated`: generated trampolines in kallsyms and in stacks;
//! - `refusals`: every refusal, the rollback, and the anchor denied;
//! - `coexistence`: beside in-kernel BPF trampolines and tracing_multi links;
//! - `unprivileged`: EPERM without CAP_BPF and CAP_PERFMON;
//! - `testmod`: rkf_testmod's functions, a module's, as targets;
//! - `wide`: functions of more than six arguments;
//! - `tramps`: which trampoline a function runs through, and the shared one only;
//! - `patterns`: resolve()'s patterns and `rkf funccount` over them;
//! - `held`: the programs and module references a test must give back;
//! - `fuzz`: random and mutated ioctl requests;
//! - `limits`, `faults`, `storm`: the link limit, allocation failures, attach storms;
//! - `run_path`, `recursion`: the program-run path, recursion misses;
//! - `sleepable`, `session`, `alike`, `everything`: sleepable programs, session programs,
//!   functions that share their trampoline, every function at once.

mod alike;
pub(crate) mod basic;
mod coexistence;
mod everything;
pub(crate) mod faults;
mod fuzz;
mod generated;
pub(crate) mod held;
mod limits;
mod patterns;
mod recursion;
pub(crate) mod refusals;
mod run_path;
mod session;
mod sleepable;
mod storm;
pub(crate) mod testmod;
pub(crate) mod tramps;
mod unprivileged;
mod wide;

use std::os::fd::AsFd;

use anyhow::{bail, Result};

use crate::{check, check_eq, diag, harness::Test};
use rkf::multi::{self, Func, Link};
use rkf_core::multi::Reason;

pub(crate) use storm::set_storm_cycles;

pub const TESTS: &[Test] = &[
    Test {
        name: "multi_fentry_args_cookies_func_ip",
        run: basic::fentry_args,
    },
    Test {
        name: "multi_fexit_return_values",
        run: basic::fexit_ret,
    },
    Test {
        name: "multi_fentry_fexit_one_set",
        run: basic::fentry_fexit_one_set,
    },
    Test {
        name: "multi_intersect_every_combination",
        run: basic::intersect,
    },
    Test {
        name: "multi_generated_trampolines",
        run: generated::generated_trampolines,
    },
    Test {
        name: "multi_refusals_and_rollback",
        run: refusals::refusals,
    },
    Test {
        name: "multi_link_limit_refused_whole",
        run: limits::link_limit_refused_whole,
    },
    Test {
        name: "multi_attach_detach_allocation_failures",
        run: faults::allocation_failures,
    },
    Test {
        name: "multi_anchor_denied",
        run: refusals::anchor_denied,
    },
    Test {
        name: "multi_coexistence_with_bpf_trampolines",
        run: coexistence::coexistence,
    },
    Test {
        name: "multi_exact_counts_under_attach_storm",
        run: storm::shared_storm,
    },
    Test {
        name: "multi_generated_exact_counts_under_attach_storm",
        run: storm::generated_storm,
    },
    Test {
        name: "multi_unprivileged_eperm",
        run: unprivileged::unprivileged,
    },
    Test {
        name: "multi_module_targets",
        run: testmod::module_targets,
    },
    Test {
        name: "multi_wide_module_targets",
        run: wide::wide_module_targets,
    },
    Test {
        name: "multi_funccount_glob",
        run: patterns::funccount_glob,
    },
    Test {
        name: "multi_resolve_patterns",
        run: patterns::resolve_patterns,
    },
    Test {
        name: "multi_ioctl_fuzz",
        run: fuzz::ioctl_fuzz,
    },
    Test {
        name: "multi_run_path_calls_only_denied",
        run: run_path::run_path_calls_only_denied,
    },
    Test {
        name: "multi_sleepable_run_path_calls_only_denied",
        run: run_path::sleepable_run_path_calls_only_denied,
    },
    Test {
        name: "multi_run_stats_kept",
        run: run_path::run_stats_kept,
    },
    Test {
        name: "multi_recursion_misses_counted",
        run: recursion::recursion_misses_counted,
    },
    Test {
        name: "multi_sleepable_fentry_fexit",
        run: sleepable::sleepable_fentry_fexit,
    },
    Test {
        name: "multi_uncounted_links",
        run: sleepable::uncounted_links,
    },
    Test {
        name: "multi_alike_functions_share_code",
        run: alike::alike_functions_share_code,
    },
    Test {
        name: "multi_sleepable_refusals",
        run: sleepable::sleepable_refusals,
    },
    Test {
        name: "multi_sleepable_session",
        run: sleepable::sleepable_session,
    },
    Test {
        name: "multi_sleepable_exact_counts_under_attach_storm",
        run: sleepable::sleepable_storm,
    },
    Test {
        name: "multi_session_vmlinux_and_module",
        run: session::session_vmlinux_and_module,
    },
    Test {
        name: "multi_session_attach_detach_in_flight",
        run: session::session_in_flight,
    },
    Test {
        name: "multi_session_cookies_per_program_and_limit",
        run: session::session_limit,
    },
    Test {
        name: "multi_attach_everything_fentry_fexit",
        run: everything::attach_everything,
    },
];

/// [`Link::attach_counted()`], its error as an [`anyhow::Error`]: the tests check the
/// link's counters of each function.
pub(crate) fn attach(prog: &impl AsFd, funcs: &[Func], cookies: Option<&[u64]>) -> Result<Link> {
    Link::attach_counted(prog, funcs, cookies).map_err(|e| anyhow::anyhow!("{e}"))
}

/// [`Link::attach()`]: a link that does not count, as rkf's tools attach them.
pub(crate) fn attach_uncounted(
    prog: &impl AsFd,
    funcs: &[Func],
    cookies: Option<&[u64]>,
) -> Result<Link> {
    Link::attach(prog, funcs, cookies).map_err(|e| anyhow::anyhow!("{e}"))
}

/// Attaches `prog` to `funcs` with `cookies`, which rkf_multi must refuse as `want` says:
/// the errno, and the function refused (its index in `funcs`) and why, or no function.  A
/// refusal that names a function must name it in its message too.  `what` names the
/// attach in the checks.  Returns the refusal, for checks of its message.
fn refusal(
    prog: &impl AsFd,
    funcs: &[Func],
    cookies: Option<&[u64]>,
    want: (i32, Option<(usize, Reason)>),
    what: &str,
) -> Result<multi::AttachError> {
    let e = match Link::attach(prog, funcs, cookies) {
        Ok(_) => bail!("{what}: attached"),
        Err(e) => e,
    };
    diag!("{what}: {e}");
    check_eq!(
        (e.errno, e.refused),
        want,
        "{what}: errno, the function refused and why"
    );
    if let Some((i, _)) = e.refused {
        let name = funcs[i].qualified_name();
        check!(
            e.message.contains(&format!("rkf_multi refused {name}: ")),
            "{what}: the message names {name}: {}",
            e.message
        );
    }
    Ok(e)
}

/// BPF_PROG_TEST_RUN by fd, for threads.
pub(crate) fn test_run_fd(fd: i32) -> Result<()> {
    let r = raw_test_run(fd);
    if r != 0 {
        bail!(
            "BPF_PROG_TEST_RUN: {}",
            std::io::Error::from_raw_os_error(-r)
        );
    }
    Ok(())
}

/// [`test_run_fd()`] with nothing but the system call (for a forked child of this
/// multi-threaded process, which must not allocate): 0, or a negative errno.
pub(crate) fn raw_test_run(fd: i32) -> i32 {
    use libbpf_rs::libbpf_sys::{bpf_prog_test_run_opts, bpf_test_run_opts};

    // An empty request: no input, one run.
    let mut opts = bpf_test_run_opts {
        sz: std::mem::size_of::<bpf_test_run_opts>() as _,
        ..Default::default()
    };
    // SAFETY: `fd` is a program fd kept open by the caller; `opts` is valid.
    unsafe { bpf_prog_test_run_opts(fd, &mut opts) }
}

/// Whether the kernel has kmemleak (the test kernel, with lockdep and KASAN): its
/// bookkeeping of every allocation makes each attach, detach and refused request many
/// times as slow under TCG, so the loops of the storm and fuzz tests run fewer rounds there.
fn kmemleak_kernel() -> bool {
    std::path::Path::new("/sys/kernel/debug/kmemleak").exists()
}

/// Whether the kernel is PREEMPT_RT: its version string (`uname -v`) names its preemption
/// model (init/Makefile).
fn preempt_rt() -> Result<bool> {
    let version = std::fs::read_to_string("/proc/sys/kernel/version")?;
    Ok(version.split_whitespace().any(|w| w == "PREEMPT_RT"))
}
