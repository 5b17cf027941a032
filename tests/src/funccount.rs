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
    errno::Errno,
    sys::wait::{waitpid, WaitStatus},
    unistd::{fork, ForkResult},
};

use crate::{
    check, check_eq, diag,
    harness::Test,
    multi::{raw_test_run, test_run_fd},
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
const EVERY: Duration = Duration::from_millis(500);

/// `rkf funccount -p` of this process and `-i`, through the library, on [`FUNC`], which
/// nothing but BPF_PROG_TEST_RUN calls.
///
/// Once the link is attached, this process calls [`FUNC`] [`OURS`] times (half from this
/// thread, half from another), and a child process [`THEIRS`] times.  Then, after
/// interval `k` was reported (but the last), a new thread of this process calls it
/// `k + 1` times, which the next interval counts.  So, counting this process only,
/// interval 0 has `OURS` calls and interval `k` has `k`, and the whole count their sum:
/// exactly, whenever the intervals end, as none of these calls is made while an interval
/// could end.  The intervals are numbered in turn; each but the last ends past a later
/// multiple of [`EVERY`] than the interval before, before the duration (five of them) is
/// over; the last is marked last and ends with the count, once the duration is over.  So
/// there are at most [`INTERVALS`] (the output says when there are fewer).  Then,
/// counting every task, exactly the calls of both processes are counted.  No run is
/// missed and none lands on a function without a counter.
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
    let c = funccount::count_with(
        &[FUNC],
        &opts,
        |a| started = Some(check_attached(a).and_then(|()| both_call(&trigger))),
        |i: &Interval| {
            intervals.push(i.clone());
            if i.last {
                return Ok(());
            }
            // From another thread: -p counts every thread of the process.
            std::thread::scope(|s| {
                s.spawn(|| calls(&trigger, i.index + 1))
                    .join()
                    .expect("a caller thread panicked")
            })
        },
    )?;
    started.context("the count did not start")??;
    for i in &intervals {
        diag!(
            "interval {}: ended at {:?}, last {}, {:?}",
            i.index,
            i.end,
            i.last,
            i.counts
        );
    }
    let n = u64::try_from(intervals.len())?;
    check!(
        (1..=u64::from(INTERVALS)).contains(&n),
        "{n} intervals of {EVERY:?} in {:?}",
        opts.duration
    );
    if n < u64::from(INTERVALS) {
        diag!("{n} intervals, not {INTERVALS}: a stall longer than {EVERY:?} merged some");
    }
    let mut total = 0;
    let mut multiple = 0;
    for (k, i) in (0u64..).zip(&intervals) {
        let want = if k == 0 { OURS } else { k };
        check_eq!(i.index, k, "interval {k}'s index");
        check_eq!(
            i.counts,
            vec![(FUNC.to_string(), want)],
            "interval {k}: the calls of this process"
        );
        check_eq!(i.last, k + 1 == n, "interval {k} marked last");
        if !i.last {
            let m = i.end.as_nanos() / EVERY.as_nanos();
            check!(
                m > multiple && i.end < opts.duration,
                "interval {k} ended at {:?}: not at a later multiple of {EVERY:?} than the \
                 interval before ({multiple}) before the duration ({:?}) was over",
                i.end,
                opts.duration
            );
            multiple = m;
        }
        total += want;
    }
    let last = intervals.last().context("no interval")?;
    check_eq!(last.end, c.duration, "the last interval's end, the count's");
    check!(
        last.end >= opts.duration,
        "the last interval ended at {:?}, before the duration ({:?}) was over",
        last.end,
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
        |_| Ok(()),
    )?;
    started.context("the count did not start")??;
    diag!("every task: {:?}", c.counts);
    check_eq!(
        c.counts,
        vec![(FUNC.to_string(), OURS + THEIRS)],
        "the calls of every task: those of both processes"
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

/// [`OURS`] calls of [`FUNC`] by this process, half from this thread and half from
/// another (`-p` counts a process's threads: a filter by thread id would miss one half),
/// then [`THEIRS`] by a child process, which has exited when this returns.
fn both_call(trigger: &MultiFillerSkel<'_>) -> Result<()> {
    calls(trigger, OURS / 2)?;
    std::thread::scope(|s| {
        s.spawn(|| calls(trigger, OURS - OURS / 2))
            .join()
            .expect("a caller thread panicked")
    })?;
    let fd = trigger.progs.filler.as_fd().as_raw_fd();
    // SAFETY: the child makes only system calls (BPF_PROG_TEST_RUN through libbpf's
    // bpf_prog_test_run_opts(), which allocates nothing, its symbol already bound by the
    // calls above) and leaves by _exit(): nothing that a lock held by another thread of
    // this process at the fork could block.
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
            let status = loop {
                match waitpid(child, None) {
                    Err(Errno::EINTR) => {}
                    r => break r.context("waitpid")?,
                }
            };
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
