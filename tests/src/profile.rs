// SPDX-License-Identifier: GPL-2.0

//! `rkf profile`: the library behind the CLI samples a known workload, and its flame graph
//! names the kernel functions the workload runs; a busy process outside `-p` is left out.

use std::{
    fs::File,
    io::Read,
    process::{Child, Command, Stdio},
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    thread,
    time::Duration,
};

use anyhow::{Context, Result};

use crate::{check, diag, harness::Test, lifecycle::stat_fields};
use rkf::stacks::profile::{self, Options};

pub const TESTS: &[Test] = &[Test {
    name: "profile_flamegraph_names_kernel_function",
    run: flamegraph_names_kernel_function,
}];

/// A thread of this process reads /dev/zero while the profile runs: its samples must
/// run `ksys_read -> vfs_read -> read_zero` in the kernel (drivers/char/mem.c: /dev/zero
/// has a ->read, which vfs_read() prefers to ->read_iter), the folded stacks must mark
/// those frames `_[k]`, and the SVG must name them (the mark chooses a frame's colour and
/// is not shown).  Meanwhile a dd(1) process reads /dev/zero as busily: the profile is of
/// this process only (`-p`), so no sample may be dd's, and dd must have had at least
/// `OTHER_LEAST_TICKS` clock ticks of cpu time while the profile sampled, or the
/// exclusion was not tried.
fn flamegraph_names_kernel_function() -> Result<()> {
    let other = Reaped(
        Command::new("dd")
            .args(["if=/dev/zero", "of=/dev/null", "bs=64k"])
            .stderr(Stdio::null())
            .spawn()
            .context("starting dd")?,
    );
    let dd = other.0.id();
    // dd's cpu time once sampling started, and `WINDOW` later: still inside the
    // `DURATION` of sampling.
    let mut window = None;
    let recorded = record_busy(|| {
        let at_start = cpu_ticks(dd);
        let later = thread::spawn(move || {
            thread::sleep(WINDOW);
            cpu_ticks(dd)
        });
        window = Some((at_start, later));
    });
    let (at_start, later) = window.context("the profile did not start")?;
    let at_end = later
        .join()
        .expect("the thread reading dd's cpu time panicked");
    drop(other);
    let p = recorded?;
    let (at_start, at_end) = (at_start?, at_end?);
    let ticks = at_end
        .checked_sub(at_start)
        .with_context(|| format!("dd's cpu time went back from {at_start} to {at_end} ticks"))?;
    diag!("dd had {ticks} clock ticks of cpu time in the first {WINDOW:?} of sampling");
    check!(
        ticks >= OTHER_LEAST_TICKS,
        "dd had {ticks} clock ticks of cpu time in the first {WINDOW:?} of sampling, under \
         {OTHER_LEAST_TICKS}: the exclusion was not tried"
    );
    let of_other: Vec<_> = p.stacks.stacks.keys().filter(|s| s.comm == "dd").collect();
    check!(
        of_other.is_empty(),
        "{} stacks of dd, a process outside -p: {:?}",
        of_other.len(),
        of_other.first()
    );
    check_profile(&p)
}

/// How long the profile samples.
const DURATION: Duration = Duration::from_secs(2);
/// The stretch of sampling over which dd's cpu time is measured.
const WINDOW: Duration = Duration::from_millis(1800);
/// The least cpu time, in clock ticks (`USER_HZ`, 100 a second on x86), dd must have had
/// in `WINDOW`: 0.2 s, 40 samples at 199 Hz.
const OTHER_LEAST_TICKS: u64 = 20;

/// A child process, killed and reaped when dropped (on the way out of a failure too), so
/// that no busy dd outlives the test.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        // It may have exited: only the wait matters then.
        let _ = self.0.kill();
        if let Err(e) = self.0.wait() {
            diag!("dd not reaped: {e}");
        }
    }
}

/// The user and system time of process `pid` so far, in clock ticks (proc(5):
/// /proc/PID/stat's utime and stime, the 14th and 15th fields).
fn cpu_ticks(pid: u32) -> Result<u64> {
    let fields = stat_fields(&format!("/proc/{pid}/stat"))?;
    match (fields.get(14 - 3), fields.get(15 - 3)) {
        (Some(u), Some(s)) => Ok(u.parse::<u64>()? + s.parse::<u64>()?),
        _ => anyhow::bail!("the stat of process {pid} has fewer than 15 fields: {fields:?}"),
    }
}

/// The profile of this process while a thread of it reads /dev/zero; `started` is called
/// once it samples.
fn record_busy(started: impl FnOnce()) -> Result<profile::Profile> {
    let stop = Arc::new(AtomicBool::new(false));
    let worker = {
        let stop = stop.clone();
        thread::spawn(move || -> Result<u64> {
            let mut zero = File::open("/dev/zero").context("opening /dev/zero")?;
            let mut buf = vec![1u8; 64 << 10];
            let mut reads = 0;
            while !stop.load(Ordering::Relaxed) {
                zero.read_exact(&mut buf)?;
                reads += 1;
            }
            Ok(reads)
        })
    };
    let opts = Options {
        frequency: 199,
        duration: DURATION,
        pid: Some(std::process::id()),
        kernel: true,
        user: true,
        include_idle: false,
    };
    let recorded = profile::record_then(&opts, started);
    stop.store(true, Ordering::Relaxed);
    let reads = worker.join().expect("the reader thread panicked")?;
    let p = recorded?;
    diag!("{reads} reads of 64 KiB");
    Ok(p)
}

/// The checks of [`flamegraph_names_kernel_function()`] on the profile of this process.
fn check_profile(p: &profile::Profile) -> Result<()> {
    diag!(
        "{} samples, {} distinct stacks, {} dropped, {} stacks not taken",
        p.samples,
        p.stacks.len(),
        p.dropped,
        p.stack_errors
    );
    check!(
        p.samples >= 20,
        "too few samples ({}) of a busy thread",
        p.samples
    );
    check!(p.dropped == 0, "{} samples dropped", p.dropped);
    // Both stacks of every sample were taken.
    check!(
        p.stack_errors == 0,
        "{} samples whose kernel or user stack was not taken",
        p.stack_errors
    );
    let (top, c) = p
        .stacks
        .stacks
        .iter()
        .max_by_key(|(_, c)| c.count)
        .context("no stacks")?;
    diag!("hottest stack ({} samples): {top:?}", c.count);
    let in_read = p
        .stacks
        .stacks
        .keys()
        .filter(|s| s.runs_kernel_path(&["ksys_read", "vfs_read", "read_zero"]))
        .count();
    check!(
        in_read > 0,
        "no stack runs ksys_read -> vfs_read -> read_zero in the kernel"
    );
    // The reads' stacks go on into the thread's user stack: at least the frame the
    // syscall was made from, in a known object (libc's read(), or this program).
    let with_user = p
        .stacks
        .stacks
        .keys()
        .filter(|s| s.runs_kernel_path(&["ksys_read", "vfs_read", "read_zero"]))
        .filter(|s| {
            s.frames
                .iter()
                .any(|f| !f.kernel && &*f.object != "[unknown]")
        })
        .count();
    check!(
        with_user > 0,
        "no stack of the reads has a user frame in a known object: {top:?}"
    );
    let folded = p.stacks.folded();
    let svg = String::from_utf8(p.stacks.flamegraph("rkf selftest")?)?;
    check!(svg.starts_with("<?xml"), "the flame graph is not SVG");
    for f in ["ksys_read", "vfs_read", "read_zero"] {
        let marked = format!(";{f}_[k]");
        check!(folded.contains(&marked), "no folded line has {marked}");
        let unmarked = folded.lines().find(|l| {
            let stack = l.rsplit_once(' ').map_or(*l, |(s, _)| s);
            stack.split(';').skip(1).any(|frame| frame == f)
        });
        check!(
            unmarked.is_none(),
            "a folded line has {f} unmarked: {unmarked:?}"
        );
        check!(
            svg.contains(&format!("<title>{f} (")),
            "the flame graph does not name {f}"
        );
    }
    Ok(())
}
