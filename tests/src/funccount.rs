// SPDX-License-Identifier: GPL-2.0

//! `rkf funccount -p` and `-i`: the calls of one process only, and the calls of each
//! interval, counted exactly.

use std::{
    mem::MaybeUninit,
    os::fd::{AsFd, AsRawFd},
    time::Duration,
};

use anyhow::{Context, Result};
use nix::{
    sys::wait::{waitpid, WaitStatus},
    unistd::{fork, ForkResult},
};

use crate::{
    check, check_eq, diag,
    harness::Test,
    multi::test_run_fd,
    skel::multi_filler::{MultiFillerSkel, MultiFillerSkelBuilder},
};
use rkf::{
    funccount::{self, Interval, Options},
    modules, skeleton,
};

pub const TESTS: &[Test] = &[Test {
    name: "multi_funccount_pid_and_intervals",
    run: pid_and_intervals,
}];

/// The function counted: BPF_PROG_TEST_RUN of a tracing program calls it once a run
/// (net/bpf/test_run.c, `bpf_prog_test_run_tracing()`), in the caller's task.
const FUNC: &str = "bpf_fentry_test1";
/// Calls this process makes while the count starts.
const OURS: u64 = 10;
/// Calls another process makes meanwhile.
const THEIRS: u64 = 1_000;
/// The intervals of the interval count: its duration is five of them.
const INTERVALS: u32 = 5;
const EVERY: Duration = Duration::from_millis(100);

/// `rkf funccount -p` of this process and `-i`, through the library, on [`FUNC`], which
/// nothing but BPF_PROG_TEST_RUN calls.
///
/// Once the link is attached, this process calls [`FUNC`] [`OURS`] times, and a child
/// process [`THEIRS`] times.  Then, after interval `k` was read, this process calls it
/// `k + 1` more times, which the next interval counts, and none after the last.  So,
/// counting this process only, interval 0 has `OURS` calls, interval `k` has `k`, and the
/// whole count their sum: exactly, whenever the intervals end, as none of these calls is
/// made while an interval could end.  There are [`INTERVALS`] of them, numbered in turn,
/// each ending at least its length after the one before (the duration is five of them),
/// the last marked last and ending once the duration is over.  Then, counting every task,
/// the same calls of both processes are all counted (other tasks may add some).  No run
/// is missed and none lands on a function without a counter.
fn pid_and_intervals() -> Result<()> {
    modules::require("rkf_multi")?;
    let mut obj = MaybeUninit::uninit();
    let trigger =
        skeleton::load::<MultiFillerSkelBuilder>(&mut obj, "multi_filler.bpf.c", |_| Ok(()))?;
    let opts = Options {
        duration: EVERY * INTERVALS,
        pid: Some(std::process::id()),
        interval: Some(EVERY),
    };
    let mut started: Option<Result<()>> = None;
    let mut intervals: Vec<Interval> = Vec::new();
    let mut made: Option<Result<()>> = None;
    let c = funccount::count_with(
        &[FUNC],
        &opts,
        |a| started = Some(check_attached(a).and_then(|()| both_call(&trigger))),
        |i: &Interval| {
            intervals.push(i.clone());
            if !i.last && made.as_ref().is_none_or(Result::is_ok) {
                made = Some(calls(&trigger, u64::from(i.index) + 1));
            }
        },
    )?;
    started.context("the count did not start")??;
    made.transpose()?;
    for i in &intervals {
        diag!(
            "interval {}: ended at {:?}, last {}, {:?}",
            i.index,
            i.end,
            i.last,
            i.counts
        );
    }
    check_eq!(
        intervals.len(),
        INTERVALS as usize,
        "intervals of {EVERY:?} in {:?}",
        opts.duration
    );
    let mut total = 0;
    for (k, i) in (0u32..).zip(&intervals) {
        let want = if k == 0 { OURS } else { u64::from(k) };
        check_eq!(i.index, k, "interval {k}'s index");
        check_eq!(
            i.counts,
            vec![(FUNC.to_string(), want)],
            "interval {k}: the calls of this process"
        );
        check!(
            i.end >= EVERY * (k + 1) || i.last,
            "interval {k} ended at {:?}, before {:?}",
            i.end,
            EVERY * (k + 1)
        );
        check_eq!(i.last, k + 1 == INTERVALS, "interval {k} marked last");
        total += want;
    }
    let last_end = intervals.last().context("no interval")?.end;
    check!(
        last_end >= opts.duration,
        "the last interval ended at {last_end:?}, before the duration ({:?}) was over",
        opts.duration
    );
    check_eq!(c.pid, opts.pid, "the process counted");
    check_eq!(
        c.counts,
        vec![(FUNC.to_string(), total)],
        "the calls of this process in the whole count"
    );
    check_eq!(
        (c.missed, c.unknown),
        (0, 0),
        "runs missed, runs on no counter"
    );

    // Every task's calls: both processes' are counted.
    let every = Options {
        duration: EVERY,
        pid: None,
        interval: None,
    };
    let mut started: Option<Result<()>> = None;
    let c = funccount::count_with(
        &[FUNC],
        &every,
        |a| started = Some(check_attached(a).and_then(|()| both_call(&trigger))),
        |_| (),
    )?;
    started.context("the count did not start")??;
    diag!("every task: {:?}", c.counts);
    let n = c.counts.iter().find(|(f, _)| f == FUNC).map_or(0, |x| x.1);
    check!(
        n >= OURS + THEIRS,
        "{n} calls of {FUNC} by every task, fewer than the {} of the two processes",
        OURS + THEIRS
    );
    check_eq!(
        (c.missed, c.unknown),
        (0, 0),
        "runs missed, runs on no counter"
    );
    Ok(())
}

/// What the count attached to: [`FUNC`], with nothing left out.
fn check_attached(a: &funccount::Attached) -> Result<()> {
    check_eq!(a.funcs, 1, "functions attached");
    check!(a.skipped.is_empty(), "left out: {:?}", a.skipped);
    Ok(())
}

/// [`OURS`] calls of [`FUNC`] by this process, then [`THEIRS`] by a child process, which
/// has exited when this returns.
fn both_call(trigger: &MultiFillerSkel<'_>) -> Result<()> {
    calls(trigger, OURS)?;
    let fd = trigger.progs.filler.as_fd().as_raw_fd();
    // SAFETY: the child makes only system calls (BPF_PROG_TEST_RUN through libbpf's
    // bpf_prog_test_run_opts(), which allocates nothing) and leaves by _exit(): nothing
    // that a lock held by another thread of this process at the fork could block.
    match unsafe { fork() }.context("fork")? {
        ForkResult::Child => {
            let mut ok = true;
            for _ in 0..THEIRS {
                ok &= raw_test_run(fd) == 0;
            }
            // SAFETY: _exit() ends the child without running this process's atexit
            // handlers or destructors.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) }
        }
        ForkResult::Parent { child } => {
            let status = waitpid(child, None).context("waitpid")?;
            check_eq!(
                status,
                WaitStatus::Exited(child, 0),
                "the other process's {THEIRS} calls"
            );
            Ok(())
        }
    }
}

/// `n` calls of [`FUNC`] by this task.
fn calls(trigger: &MultiFillerSkel<'_>, n: u64) -> Result<()> {
    let fd = trigger.progs.filler.as_fd().as_raw_fd();
    for _ in 0..n {
        test_run_fd(fd)?;
    }
    Ok(())
}

/// One BPF_PROG_TEST_RUN of `fd`, with nothing but the system call: 0 or a negative errno.
fn raw_test_run(fd: i32) -> i32 {
    use libbpf_rs::libbpf_sys::{bpf_prog_test_run_opts, bpf_test_run_opts};

    let mut opts = bpf_test_run_opts {
        sz: std::mem::size_of::<bpf_test_run_opts>() as _,
        ..Default::default()
    };
    // SAFETY: `fd` is a program fd the parent keeps open, inherited; `opts` is valid.
    unsafe { bpf_prog_test_run_opts(fd, &mut opts) }
}
