// SPDX-License-Identifier: GPL-2.0

//! `rkf profile`: the library behind the CLI samples a known workload, and its flame graph
//! names the kernel functions the workload runs.

use std::{
    fs::File,
    io::Read,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    thread,
    time::Duration,
};

use anyhow::{Context, Result};

use crate::{check, diag, harness::Test};
use rkf::stacks::profile::{self, Options};

pub const TESTS: &[Test] = &[Test {
    name: "profile_flamegraph_names_kernel_function",
    run: flamegraph_names_kernel_function,
}];

/// A thread of this process reads /dev/zero while the profile runs: its samples must
/// run `ksys_read -> vfs_read -> read_zero` in the kernel (drivers/char/mem.c: /dev/zero
/// has a ->read, which vfs_read() prefers to ->read_iter), the folded stacks must mark
/// those frames `_[k]`, and the SVG must name them (the mark chooses a frame's colour and
/// is not shown).
fn flamegraph_names_kernel_function() -> Result<()> {
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
        duration: Duration::from_secs(2),
        pid: Some(std::process::id()),
        kernel: true,
        user: true,
        include_idle: false,
    };
    let recorded = profile::record(&opts);
    stop.store(true, Ordering::Relaxed);
    let reads = worker.join().expect("the reader thread panicked")?;
    let p = recorded?;
    diag!(
        "{} reads of 64 KiB; {} samples, {} distinct stacks, {} dropped, {} stacks not taken",
        reads,
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
