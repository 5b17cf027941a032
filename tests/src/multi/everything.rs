// SPDX-License-Identifier: GPL-2.0

//! One fentry program on every function rkf_multi can attach to, while a workload runs,
//! then an fexit program on every one of them beside it: upstream's `bench_attach` of
//! tools/testing/selftests/bpf/prog_tests/tracing_multi.c, with exact counts.
//!
//! fexit on every function runs through generated trampolines: a task that exits inside
//! a function (`get_signal()` and `kthread()` reach `do_exit()`) never comes back, and
//! when rkf_multi unloads, the image its call was counted in is left behind, dead, and
//! the unload does not wait (README, rkf_multi).  When fexit took the shared trampoline,
//! whose frames are module text, the runner's rmmod of rkf_multi waited for such a frame
//! for good after this test.

use std::{
    io::Read,
    mem::MaybeUninit,
    sync::atomic::{AtomicBool, AtomicU64, Ordering},
    time::Instant,
};

use anyhow::{bail, Context, Result};
use nix::{
    sched::{sched_getaffinity, sched_setaffinity, CpuSet},
    unistd::{getpgid, Pid},
};

use super::{
    attach,
    basic::{load, reset, targets},
    preempt_rt, test_run_fd,
};
use crate::{check, check_eq, diag};
use rkf::multi::{self, Func, LinkInfo};

/// Runs of bpf_fentry_test1..9 (through `BPF_PROG_TEST_RUN`) with each set of links.
const RUNS: u64 = 10;
/// getpgid(2) calls this process makes with each set of links.
const GETPGIDS: u64 = 7;
/// The counters of multi.bpf.c used: `count_fentry0` and `count_fexit3`.
const FENTRY: usize = 0;
const FEXIT: usize = 4 + 3;
/// The slot of `__x64_sys_getpgid` in the program's `ips`, after the nine targets.
const GETPGID_SLOT: usize = 9;

/// Keeps the calling thread, and the threads it spawns, on one cpu until dropped, then
/// gives the thread back its cpus.
struct Pinned(CpuSet);

impl Pinned {
    fn to_current_cpu() -> Result<Self> {
        let old = sched_getaffinity(Pid::from_raw(0)).context("sched_getaffinity")?;
        let mut one = CpuSet::new();
        // SAFETY: sched_getcpu() has no preconditions.
        let cpu = unsafe { libc::sched_getcpu() };
        let cpu = usize::try_from(cpu).context("sched_getcpu")?;
        one.set(cpu).context("CpuSet::set")?;
        sched_setaffinity(Pid::from_raw(0), &one).context("sched_setaffinity")?;
        Ok(Self(old))
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        // The thread's own mask, given back: it cannot fail.
        sched_setaffinity(Pid::from_raw(0), &self.0).expect("restoring the cpu mask");
    }
}

/// A workload of varied syscalls (files of procfs and sysfs, a pipe, short sleeps, new
/// threads) until `done`, counting its rounds in `rounds`.  It never calls getpgid(2) or
/// the BPF syscall, whose calls the test counts.
fn workload(done: &AtomicBool, rounds: &AtomicU64) -> Result<()> {
    let mut buf = Vec::new();
    while !done.load(Ordering::Relaxed) {
        for path in [
            "/proc/self/stat",
            "/proc/meminfo",
            "/sys/kernel/mm/transparent_hugepage/enabled",
        ] {
            buf.clear();
            if let Ok(mut f) = std::fs::File::open(path) {
                f.read_to_end(&mut buf)
                    .with_context(|| format!("reading {path}"))?;
            }
        }
        let (r, w) = nix::unistd::pipe().context("pipe")?;
        nix::unistd::write(&w, b"rkf").context("write to a pipe")?;
        let mut got = [0u8; 3];
        nix::unistd::read(&r, &mut got).context("read from a pipe")?;
        std::thread::sleep(std::time::Duration::from_millis(1));
        std::thread::spawn(|| ())
            .join()
            .map_err(|_| anyhow::anyhow!("a workload thread panicked"))?;
        rounds.fetch_add(1, Ordering::Relaxed);
    }
    Ok(())
}

/// The hits and misses `info` reports for `f`.
fn hits_of(info: &LinkInfo, f: &Func) -> Result<(u64, u64)> {
    let fi = info
        .funcs
        .iter()
        .find(|fi| fi.addr == f.addr)
        .with_context(|| format!("link {} does not list {}", info.id, f.name))?;
    Ok((fi.hits, fi.misses))
}

/// `count_fentry0` on every function `resolve(&["*"])` accepts, then `count_fexit3` on
/// every one of them beside it (each function then gets a generated trampoline with
/// both), while a workload runs.  The workload, the attacher and the callers
/// share one cpu: multi-threaded TCG mishandles a site patched while another vCPU runs it
/// (README, "Known problem"), and patching every function would otherwise patch some a
/// busy vCPU is in.
///
/// Checks, once both links are attached (`RUNS` runs and `GETPGIDS` calls after each
/// attach): each link lists exactly its functions; exactly `RUNS` runs of each program
/// per attach it saw on each of bpf_fentry_test1..9 (which only `BPF_PROG_TEST_RUN`
/// calls) by the program's counters and by the links' hit counts, no miss there (off
/// PREEMPT_RT; there a miss counts as a run the program skipped); exactly
/// `GETPGIDS` runs per attach on `__x64_sys_getpgid` for this thread's calls; and then no
/// link left.
/// The VM runner fails the run on any splat, a stalled RCU tasks grace period included.
pub(super) fn attach_everything() -> Result<()> {
    let all = multi::resolve(&["*"])?;
    diag!(
        "{} functions to attach to; {} left out: {}",
        all.funcs.len(),
        all.nr_skipped(),
        all.skipped
            .iter()
            .map(|(why, names)| format!("{} {why}", names.len()))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let mut watched = targets()?;
    watched.push(
        multi::resolve(&["__x64_sys_getpgid"])?
            .funcs
            .pop()
            .context("__x64_sys_getpgid not resolved")?,
    );
    for f in &watched {
        check!(
            all.funcs.iter().any(|g| g.addr == f.addr),
            "\"*\" left out {}",
            f.name
        );
    }
    let mut obj = MaybeUninit::uninit();
    let mut skel = load(&mut obj, &watched)?;
    reset(&mut skel)?;
    // `task_only` stays off: the functions counted (bpf_fentry_test1..9 and
    // `__x64_sys_getpgid`) run in task context only, and with it every call of this thread
    // (the attacher, whose ftrace updates call thousands of traced functions) would run
    // the traced helper bpf_this_cpu_ptr() and count a miss on it.
    skel.maps
        .bss_data
        .as_deref_mut()
        .context("no .bss")?
        .target_pid = u32::try_from(nix::unistd::gettid().as_raw())?;
    let trigger_fd = {
        use std::os::fd::{AsFd, AsRawFd};
        skel.progs.plain_fentry.as_fd().as_raw_fd()
    };

    let preempt_rt = preempt_rt()?;
    let _pinned = Pinned::to_current_cpu()?;
    let done = AtomicBool::new(false);
    let rounds = AtomicU64::new(0);
    std::thread::scope(|s| -> Result<()> {
        let worker = s.spawn(|| workload(&done, &rounds));
        let checked = (|| -> Result<()> {
            // The workload is running before the attach...
            let deadline = Instant::now() + std::time::Duration::from_secs(60);
            while rounds.load(Ordering::Relaxed) == 0 {
                check!(
                    Instant::now() < deadline,
                    "the workload made no round in 60 s"
                );
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            let before = rounds.load(Ordering::Relaxed);
            let t = Instant::now();
            let fentry = attach(&skel.progs.count_fentry0, &all.funcs, None)?;
            diag!(
                "fentry on {} functions: attached in {:.1} s",
                all.funcs.len(),
                t.elapsed().as_secs_f64()
            );
            calls(trigger_fd)?;
            let t = Instant::now();
            let fexit = attach(&skel.progs.count_fexit3, &all.funcs, None)?;
            diag!(
                "fexit on the same {} functions: attached in {:.1} s",
                all.funcs.len(),
                t.elapsed().as_secs_f64()
            );
            calls(trigger_fd)?;
            // Every function with both programs through its own code (see above).
            super::tramps::check_tramps(
                &all.funcs,
                super::tramps::Tramp::Generated,
                "fentry and fexit on every function",
            )?;

            let bss = skel.maps.bss_data.as_deref().context("no .bss")?;
            let fentry_info = fentry.info()?;
            let fexit_info = fexit.info()?;
            for (what, info, counter, runs, nr_funcs) in [
                ("fentry", &fentry_info, FENTRY, 2, all.funcs.len()),
                ("fexit", &fexit_info, FEXIT, 1, all.funcs.len()),
            ] {
                check_eq!(info.funcs.len(), nr_funcs, "functions of the {what} link");
                let mut listed: Vec<u64> = info.funcs.iter().map(|f| f.addr).collect();
                listed.sort_unstable();
                let mut want: Vec<u64> = all.funcs.iter().map(|f| f.addr).collect();
                want.sort_unstable();
                check!(
                    listed == want,
                    "the {what} link lists other functions than it was given"
                );
                for (i, f) in watched.iter().enumerate() {
                    let want = if i == GETPGID_SLOT { GETPGIDS } else { RUNS } * runs;
                    let (hits, misses) = hits_of(info, f)?;
                    check_eq!(
                        bss.counts[counter][i] + if i == GETPGID_SLOT { 0 } else { misses },
                        want,
                        "{what} runs on {} by this process, by the program's count",
                        f.name
                    );
                    if i == GETPGID_SLOT {
                        // Other processes may call getpgid(2) too.
                        check!(
                            hits >= want,
                            "{what} link's hits on {}: {hits}, fewer than this process's {want} calls",
                            f.name
                        );
                    } else {
                        check_eq!(hits + misses, want, "{what} link's runs on {}", f.name);
                        if !preempt_rt {
                            check_eq!(misses, 0, "{what} link's misses on {}", f.name);
                        }
                    }
                }
                let hit = info.funcs.iter().filter(|f| f.hits > 0).count();
                let missed: u64 = info.funcs.iter().map(|f| f.misses).sum();
                // Misses are the recursion guard's: a function the program itself
                // reaches (its helpers), or one an interrupt calls while it runs.
                let mut most: Vec<_> = info.funcs.iter().filter(|f| f.misses > 0).collect();
                most.sort_by_key(|f| std::cmp::Reverse(f.misses));
                let most: Vec<String> = most
                    .iter()
                    .take(3)
                    .map(|f| {
                        let name = all
                            .funcs
                            .iter()
                            .find(|g| g.addr == f.addr)
                            .map_or("?", |g| g.name.as_str());
                        format!("{name} {}", f.misses)
                    })
                    .collect();
                diag!(
                    "{what} link: {hit} functions hit, {missed} runs missed in all (most: {})",
                    most.join(", ")
                );
            }

            let t = Instant::now();
            drop(fexit);
            drop(fentry);
            diag!("both links detached in {:.1} s", t.elapsed().as_secs_f64());
            // ...and ran on while the links were attached and detached.
            let during = rounds.load(Ordering::Relaxed) - before;
            diag!("the workload made {during} rounds from the attach to the detach");
            check!(
                during > 0,
                "the workload made no round while the links were attached and detached"
            );
            Ok(())
        })();
        done.store(true, Ordering::Relaxed);
        let worked = worker
            .join()
            .map_err(|_| anyhow::anyhow!("the workload panicked"))?;
        checked?;
        worked
    })?;
    check!(
        multi::links()?.is_empty(),
        "a link is left after both were dropped"
    );
    Ok(())
}

/// `RUNS` runs of bpf_fentry_test1..9 and `GETPGIDS` getpgid(2) calls.
fn calls(trigger_fd: i32) -> Result<()> {
    for _ in 0..RUNS {
        test_run_fd(trigger_fd)?;
    }
    for _ in 0..GETPGIDS {
        let pgid = getpgid(None).context("getpgid")?;
        if pgid.as_raw() <= 0 {
            bail!("getpgid returned {pgid}");
        }
    }
    Ok(())
}
