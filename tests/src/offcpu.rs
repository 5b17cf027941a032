// SPDX-License-Identifier: GPL-2.0

//! `rkf offcputime`: a thread blocked in a known kernel path for a known time appears with
//! that path and that time.

use std::{
    fs::File,
    io::{Read, Write},
    os::fd::OwnedFd,
    process::Command,
    sync::mpsc,
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context, Result};

use crate::{check, check_eq, diag, harness::Test};
use rkf::stacks::offcpu::{self, Options};

pub const TESTS: &[Test] = &[
    Test {
        name: "offcputime_pipe_read_path_and_time",
        run: pipe_read_path_and_time,
    },
    Test {
        name: "offcputime_names_frames_of_exited_process",
        run: names_frames_of_exited_process,
    },
    Test {
        name: "offcputime_state_filter",
        run: state_filter,
    },
];

/// The reader thread's name, its comm in the stacks.
const READER: &str = "rkf-offcpu-rd";
/// Reads the reader blocks in, each until the writer writes, `GAP` later.
const READS: u32 = 5;
const GAP: Duration = Duration::from_millis(100);
/// Intervals shorter than this are left out (-m).
const MIN_US: u64 = 20_000;
/// The reader's kernel path, outermost first.
const PIPE_READ: [&str; 5] = [
    "ksys_read",
    "vfs_read",
    "anon_pipe_read",
    "schedule",
    "__schedule",
];

/// A thread reads a pipe that another thread writes a byte into every `GAP`: each read
/// blocks in fs/pipe.c's anon_pipe_read().  Its intervals must come with the kernel path
/// `ksys_read -> vfs_read -> anon_pipe_read -> schedule -> __schedule`, innermost
/// `__schedule` (the scheduler's own functions kept, the tracing frames above them cut
/// off), a user stack whose innermost frame is in libc,
/// one interval a read, and in all at most the time the reads took and at least 80% of
/// it.  No stack's intervals take less than the minimum asked for on average (the
/// recording keeps a sum and a count per stack, not each interval).
fn pipe_read_path_and_time() -> Result<()> {
    let (o, blocked) = pipe_reads(None)?;
    for (s, c) in &o.stacks.stacks {
        check!(
            c.value >= c.count * MIN_US,
            "{} intervals of {} us in all, shorter than -m {MIN_US} us on average: {s:?}",
            c.count,
            c.value
        );
    }

    let (mut off_us, mut intervals) = (0, 0);
    for (s, c) in o.stacks.stacks.iter().filter(|(s, _)| s.comm == READER) {
        diag!(
            "{READER}: {} us in {} intervals: {}",
            c.value,
            c.count,
            s.folded()
        );
        if !s.runs_kernel_path(&PIPE_READ) {
            continue;
        }
        off_us += c.value;
        intervals += c.count;
        let innermost = s.frames.last().map(|f| (&*f.name, f.kernel));
        check!(
            innermost == Some(("__schedule", true)),
            "the innermost frame is {innermost:?}, not the kernel's __schedule"
        );
        let user = s.user_frames().last().context("no user frame")?;
        check!(
            user.object.ends_with("/libc.so.6"),
            "the innermost user frame {} is in {}, not in libc",
            user.name,
            user.object
        );
    }
    let blocked_us = u64::try_from(blocked.as_micros())?;
    diag!("{READER} was off-CPU in anon_pipe_read for {off_us} us of the {blocked_us} us its reads took");
    check!(
        off_us > 0,
        "no interval of {READER} runs {}",
        PIPE_READ.join(" -> ")
    );
    check_eq!(
        intervals,
        u64::from(READS),
        "intervals in anon_pipe_read, one a read"
    );
    check!(
        off_us <= blocked_us,
        "{off_us} us off-CPU in anon_pipe_read, more than the {blocked_us} us the reads took"
    );
    check!(
        off_us * 10 >= blocked_us * 8,
        "{off_us} us off-CPU in anon_pipe_read, less than 80% of the {blocked_us} us the reads took"
    );
    Ok(())
}

/// The recording of [`pipe_read_path_and_time()`]'s reads, with `--state state`, and the
/// time the reads took; checks that no interval was lost.
fn pipe_reads(state: Option<u32>) -> Result<(offcpu::OffCpu, Duration)> {
    let (rd, wr): (OwnedFd, OwnedFd) = nix::unistd::pipe().context("pipe")?;
    let (mut rd, mut wr) = (File::from(rd), File::from(wr));
    let (go_rd, wait_rd) = mpsc::channel::<()>();
    let (go_wr, wait_wr) = mpsc::channel::<()>();
    let reader =
        thread::Builder::new()
            .name(READER.into())
            .spawn(move || -> Result<Duration> {
                wait_rd.recv()?;
                let mut blocked = Duration::ZERO;
                let mut b = [0u8];
                for _ in 0..READS {
                    let t = Instant::now();
                    rd.read_exact(&mut b)?;
                    blocked += t.elapsed();
                }
                Ok(blocked)
            })?;
    let writer = thread::spawn(move || -> Result<()> {
        wait_wr.recv()?;
        for _ in 0..READS {
            thread::sleep(GAP);
            wr.write_all(b"x")?;
        }
        Ok(())
    });
    let opts = Options {
        duration: GAP * (READS + 10),
        pid: Some(std::process::id()),
        min_us: MIN_US,
        max_us: u64::MAX / 1000,
        state,
        kernel: true,
        user: true,
    };
    let recorded = offcpu::record_then(&opts, || {
        // Both wait until the program sees them leave a cpu.
        let _ = go_rd.send(());
        let _ = go_wr.send(());
    });
    // Without a recording, neither thread was let go: dropping the senders ends them.
    drop((go_rd, go_wr));
    let blocked = reader.join().expect("the reader panicked");
    writer.join().expect("the writer panicked")?;
    let o = recorded?;
    let blocked = blocked?;
    diag!(
        "{} intervals, {} distinct stacks, {} dropped, {} untracked, {} stacks not taken; the reads took {:?}",
        o.intervals,
        o.stacks.len(),
        o.dropped,
        o.untracked,
        o.stack_errors,
        blocked
    );
    check!(o.dropped == 0, "{} intervals dropped", o.dropped);
    check!(o.untracked == 0, "{} switch-outs untracked", o.untracked);
    Ok((o, blocked))
}

/// A child `sleep 0.3`, run through a symbolic link of a name of its own (its comm), runs
/// and is reaped before the recording's first poll: nothing reads its records, or its
/// mappings, while it lives.  Its user frames come from the kernel as build id + file
/// offset, and must still be named at the end of the run: its one interval, of at least
/// 290 ms and at most the time the child took from spawn to reaping, under the kernel
/// path `__x64_sys_clock_nanosleep -> hrtimer_nanosleep -> do_nanosleep -> schedule`
/// (do_nanosleep() is a `__sched` function, which a walk of a switched-out task, as
/// /proc/PID/stack, would leave out), has for innermost user frame the libc function
/// that makes the nanosleep system call.
fn names_frames_of_exited_process() -> Result<()> {
    let sleep = ["/usr/bin/sleep", "/bin/sleep"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .context("no sleep(1) in /usr/bin or /bin")?;
    let comm = format!("rkf-sl-{}", std::process::id());
    let link = std::env::temp_dir().join(&comm);
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(sleep, &link)?;
    let result = exited_process(&link, &comm);
    std::fs::remove_file(&link)?;
    result
}

fn exited_process(sleep: &std::path::Path, comm: &str) -> Result<()> {
    let opts = Options {
        duration: Duration::from_secs(1),
        pid: None,
        min_us: 100_000,
        max_us: u64::MAX / 1000,
        state: None,
        kernel: true,
        user: true,
    };
    let mut child = None;
    let o = offcpu::record_then(&opts, || {
        let t = Instant::now();
        child = Some((Command::new(sleep).arg("0.3").status(), t.elapsed()));
    })?;
    let (status, took) = child.context("the recording did not start")?;
    let status = status.context("running sleep")?;
    let took_us = u64::try_from(took.as_micros())?;
    check!(status.success(), "sleep 0.3 failed: {status}");
    let path = [
        "__x64_sys_clock_nanosleep",
        "hrtimer_nanosleep",
        "do_nanosleep",
        "schedule",
    ];
    let sleeps: Vec<_> = o
        .stacks
        .stacks
        .iter()
        .filter(|(s, _)| s.comm == comm && s.runs_kernel_path(&path))
        .collect();
    for (s, c) in &sleeps {
        diag!("{} us in {} intervals: {}", c.value, c.count, s.folded());
    }
    check_eq!(
        sleeps.iter().map(|(_, c)| c.count).sum::<u64>(),
        1,
        "intervals of {comm} in {}",
        path.join(" -> ")
    );
    let (s, c) = sleeps[0];
    check!(
        (290_000..=took_us).contains(&c.value),
        "sleep 0.3 was off-CPU for {} us; the child took {took_us} us",
        c.value
    );
    let user = s.user_frames().last().context("no user frame")?;
    check!(
        user.object.ends_with("/libc.so.6") && user.name.contains("nanosleep"),
        "the innermost user frame is {} in {}, not libc's nanosleep",
        user.name,
        user.object
    );
    Ok(())
}

/// `--state`: the reader of [`pipe_read_path_and_time()`] blocks in TASK_INTERRUPTIBLE
/// (1, `wait_event_interruptible_exclusive()` in anon_pipe_read()): with `--state 1` all
/// five of its reads are there, with `--state 2` (TASK_UNINTERRUPTIBLE) none is.
fn state_filter() -> Result<()> {
    for (state, want) in [(1, u64::from(READS)), (2, 0)] {
        let (o, _) = pipe_reads(Some(state))?;
        let intervals: u64 = o
            .stacks
            .stacks
            .iter()
            .filter(|(s, _)| s.comm == READER && s.runs_kernel_path(&PIPE_READ))
            .map(|(_, c)| c.count)
            .sum();
        check_eq!(
            intervals,
            want,
            "--state {state}: intervals of {READER} in {}",
            PIPE_READ.join(" -> ")
        );
    }
    Ok(())
}
