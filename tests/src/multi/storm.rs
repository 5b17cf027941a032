// SPDX-License-Identifier: GPL-2.0

//! The attach storms: links that stay account for exactly the calls made while another
//! thread attaches and detaches links for hundreds or thousands of cycles, through the
//! shared trampoline (the table changes under running calls) and through generated ones (images
//! are made and retired while other images run).
//!
//! Multi-threaded TCG (the VM's accelerator) mishandles the kernel's patching of code
//! that another vCPU runs in a loop (README, "Known problem"), and a function with its
//! own trampoline has its ftrace site patched whenever its programs change: so a storm
//! never changes the programs of a function with its own trampoline while the callers
//! call it, and hooks and unhooks only functions nobody else calls meanwhile.

use std::{
    mem::MaybeUninit,
    os::fd::{AsFd, AsRawFd, BorrowedFd},
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        OnceLock,
    },
    time::Instant,
};

use anyhow::{Context, Result};

use super::{
    attach, attach_uncounted,
    basic::{reset, setup, NR_COUNTERS},
    kmemleak_kernel, preempt_rt, test_run_fd,
    testmod::testmod_targets,
    tramps::{callers, check_tramps, with_shared_only, Tramp},
    wide,
};
use crate::{check, check_eq, diag, skel::multi::MultiSkel};
use rkf::multi::{Func, Link};

/// The storms' cycles the run was given (`rkf-selftests --storm-cycles` and
/// `--generated-storm-cycles`), each if any.
static CYCLES: OnceLock<(Option<usize>, Option<usize>)> = OnceLock::new();

/// Sets the storms' attach and detach cycles for this run, in place of the defaults:
/// `storm` those of [`storm_cycles()`], `generated` those of [`generated_storm_cycles()`];
/// at most once.
pub(crate) fn set_storm_cycles(storm: Option<usize>, generated: Option<usize>) {
    CYCLES
        .set((storm, generated))
        .expect("the storms' cycles are set once, before any test");
}

/// Attach and detach cycles of the storm tests: 10,000, or 500 on a kernel with kmemleak
/// (the test kernel, whose KASAN, lockdep and kmemleak bookkeeping make a cycle take 20
/// to 100 times as long under TCG: 1,000 took 209 s there); or what the run was given.
pub(super) fn storm_cycles() -> usize {
    if let Some(&(Some(n), _)) = CYCLES.get() {
        n
    } else if kmemleak_kernel() {
        500
    } else {
        10_000
    }
}

/// Cycles of the generated storm: a twentieth of [`storm_cycles()`] (500, or 25 on a
/// kernel with kmemleak), at least one, or what the run was given.  Each cycle generates
/// images and hooks and unhooks its functions in ftrace, which the shared storm's cycles
/// do once in a hundred: a cycle took 0.2 to 0.5 s on the distro kernel under TCG and 2
/// s on the test kernel, where the shared storm's took 0.006 and 0.2 s.  `make vm-storm`
/// runs the 10,000 of the other storms.
fn generated_storm_cycles() -> usize {
    match CYCLES.get() {
        Some(&(_, Some(n))) => n,
        _ => (storm_cycles() / 20).max(1),
    }
}

/// Permanent fentry and fexit links on five functions, and a session link on the first,
/// account for exactly the calls both vCPUs make, while another thread attaches and
/// detaches overlapping links in `storm_cycles()` cycles (fentry, fexit and session, one
/// in a hundred also hooking and unhooking rkf_testmod's four targets in ftrace, which
/// nothing calls meanwhile).
///
/// The called functions stay on the shared trampoline (rkf_multi reloaded with
/// `generate=0`), so that the storm changes the table only, not their ftrace sites (see
/// this file's header).
///
/// Every call must be a hit, which the program counts and the link reports, or a miss,
/// a run the recursion guard skipped: hits + misses = calls, exactly.  rkf_multi runs
/// programs with preemption disabled off PREEMPT_RT (c-shim/rkf_multi_run.c), so no two
/// callers meet inside a program on one cpu and, as nothing here calls the functions from
/// an interrupt, there is no miss at all.  On PREEMPT_RT, where programs run with only
/// migration disabled (as from an in-kernel trampoline), one caller preempted inside the
/// program makes the other's run a miss; there fewer than a tenth of the runs may miss.
pub(super) fn shared_storm() -> Result<()> {
    with_shared_only(|| {
        let mut obj = MaybeUninit::uninit();
        let (mut skel, funcs) = setup(&mut obj)?;
        reset(&mut skel)?;
        let permanent = &funcs[..5];
        // The churn's functions: the permanent ones, then cold ones, hooked and unhooked.
        let churn_funcs: Vec<Func> = permanent
            .iter()
            .cloned()
            .chain(testmod_targets()?)
            .collect();
        let links = Permanent::attach(&skel, permanent)?;
        check_tramps(permanent, Tramp::Shared, "rkf_multi loaded with generate=0")?;
        let churn_progs = [
            skel.progs.count_fentry1.as_fd(),
            skel.progs.count_fexit2.as_fd(),
            skel.progs.session1.as_fd(),
        ];
        let cycles = storm_cycles();
        let (churned, runs) = with_callers(&skel, || {
            churn(
                &churn_progs,
                &churn_funcs,
                permanent.len(),
                cycles,
                0x2545_f491,
            )
        })?;
        diag!("{churned} links attached and detached in {cycles} cycles");
        links.check(&skel, permanent, runs)
    })
}

/// The attach storm through generated trampolines: the permanent links of
/// `shared_storm()` on their own trampolines account for exactly the calls both vCPUs
/// make, while another thread attaches, runs and detaches links of twelve-argument
/// fentry, fexit and session programs on a random subset of rkf_testmod's seven targets
/// (of 1 to 12 arguments) in each of `generated_storm_cycles()` cycles: a generated trampoline of
/// each kind made, hooked in ftrace, run and retired in every cycle, beside images in
/// use.  The churning thread calls the targets itself, between its attach and its detach,
/// and every run must see every argument and return value at its type (the checks of
/// `multi_wide_module_targets`), once for each chosen function and never for the others.
/// The permanent functions' programs never change, so their sites are never patched
/// (see this file's header).
pub(super) fn generated_storm() -> Result<()> {
    let mut obj = MaybeUninit::uninit();
    let (mut skel, funcs) = setup(&mut obj)?;
    reset(&mut skel)?;
    let permanent = &funcs[..5];
    let links = Permanent::attach(&skel, permanent)?;
    check_tramps(permanent, Tramp::Generated, "the permanent links")?;
    let images = callers(permanent)?;
    let cycles = generated_storm_cycles();
    let (churned, runs) = with_callers(&skel, || wide::churn(cycles, 0x6e9e_57a1))?;
    diag!("{churned} links of generated trampolines attached, run and detached in {cycles} cycles");
    check_eq!(
        callers(permanent)?,
        images,
        "the permanent functions' trampolines after the storm, against before it"
    );
    links.check(&skel, permanent, runs)
}

/// The links that stay through a storm: fentry and fexit on every permanent function, a
/// session on the first.
struct Permanent {
    fentry: Link,
    fexit: Link,
    session: Link,
}

impl Permanent {
    fn attach(skel: &MultiSkel<'_>, permanent: &[Func]) -> Result<Self> {
        Ok(Self {
            fentry: attach(&skel.progs.count_fentry0, permanent, None)?,
            fexit: attach(&skel.progs.count_fexit3, permanent, None)?,
            session: attach(&skel.progs.session0, &permanent[..1], None)?,
        })
    }

    /// Each link's counts against the `runs` calls of each function (see
    /// `shared_storm()` for the misses allowed).
    fn check(&self, skel: &MultiSkel<'_>, permanent: &[Func], runs: u64) -> Result<()> {
        check!(runs > 0, "the callers made no call");
        let preempt_rt = preempt_rt()?;
        let bss = skel.maps.bss_data.as_deref().context("no .bss")?;
        let mut misses = 0;
        // A session's program runs twice a call, on entry and on exit: its runs are its
        // entries and its exits.
        let session_runs = [bss.sess_entry[0] + bss.sess_exit[0]];
        for (what, link, counts, per_call) in [
            ("fentry", &self.fentry, &bss.counts[0][..], 1),
            ("fexit", &self.fexit, &bss.counts[NR_COUNTERS + 3][..], 1),
            ("session", &self.session, &session_runs[..], 2),
        ] {
            let info = link.info()?;
            let funcs = &permanent[..counts.len().min(permanent.len())];
            check_eq!(info.funcs.len(), funcs.len(), "{what} link's functions");
            for (i, f) in funcs.iter().enumerate() {
                let fi = info
                    .funcs
                    .iter()
                    .find(|fi| fi.addr == f.addr)
                    .with_context(|| format!("{what} link does not list {}", f.name))?;
                check_eq!(
                    counts[i],
                    fi.hits,
                    "permanent {what} link on {}: the program's count against the link's hits",
                    f.name
                );
                check_eq!(
                    fi.hits + fi.misses,
                    runs * per_call,
                    "permanent {what} link on {}: hits ({}) + misses ({}) against the runs",
                    f.name,
                    fi.hits,
                    fi.misses
                );
                if preempt_rt {
                    check!(
                        fi.misses < runs / 10,
                        "permanent {what} link on {}: {} of {runs} runs missed",
                        f.name,
                        fi.misses
                    );
                } else {
                    check_eq!(
                        fi.misses,
                        0,
                        "permanent {what} link on {}: runs the recursion guard skipped (of {runs})",
                        f.name
                    );
                }
                misses += fi.misses;
            }
        }
        // Off PREEMPT_RT every call ran the session on entry and on exit, and found on
        // exit the cookie its entry wrote into a zeroed one.
        if !preempt_rt {
            check_eq!(bss.sess_exit[0], runs, "permanent session's exit runs");
            check_eq!(
                bss.sess_cookie_ok[0],
                runs,
                "permanent session's cookies back"
            );
        }
        check_eq!(
            bss.sess_nonzero_cookie[0],
            0,
            "permanent session: cookies not zeroed on entry"
        );
        diag!("recursion-guard misses on the permanent links: {misses} (PREEMPT_RT: {preempt_rt})");
        Ok(())
    }
}

/// Lowers the calling thread to nice 19, where the kernel's background threads run, so
/// that a storm's busy callers share the cpus with them instead of starving them: in one
/// run (`make vm-storm` on a busy host) khugepaged, at nice 19 and preempted inside the
/// kernel beside two callers at nice 0, got too little cpu to reach a voluntary switch
/// and held an RCU tasks grace period back past the 10 s after which the VM runner's
/// splat check fails on the distro kernel (rkf's own trampolines were not on its stack).
pub(super) fn as_background() -> Result<()> {
    // SAFETY: setpriority(2) takes no pointer; with PRIO_PROCESS and 0 it sets the nice
    // value of the calling thread alone (Linux keeps it per thread).
    let r = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, 19) };
    check_eq!(
        r,
        0,
        "setpriority(PRIO_PROCESS, 0, 19): {}",
        std::io::Error::last_os_error()
    );
    Ok(())
}

/// Runs `churn` while two threads call bpf_fentry_test1..9 through BPF_PROG_TEST_RUN;
/// returns what `churn` returned and how many times each function was called.
fn with_callers(
    skel: &MultiSkel<'_>,
    churn: impl FnOnce() -> Result<usize>,
) -> Result<(usize, u64)> {
    let trigger_fd = skel.progs.plain_fentry.as_fd().as_raw_fd();
    let runs = AtomicU64::new(0);
    let done = AtomicBool::new(false);
    let start = Instant::now();
    let churned = std::thread::scope(|s| -> Result<usize> {
        let callers: Vec<_> = (0..2)
            .map(|_| {
                s.spawn(|| -> Result<()> {
                    as_background()?;
                    while !done.load(Ordering::Relaxed) {
                        test_run_fd(trigger_fd)?;
                        runs.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(())
                })
            })
            .collect();
        let result = churn();
        done.store(true, Ordering::Relaxed);
        for c in callers {
            c.join().expect("a caller thread panicked")?;
        }
        result
    })?;
    let runs = runs.load(Ordering::Relaxed);
    diag!(
        "{:.1} s, while 2 threads made {runs} runs of the 9 functions",
        start.elapsed().as_secs_f64()
    );
    Ok((churned, runs))
}

/// The storms' churn: `cycles` attach-and-detach cycles of links of `progs` (in turn) on
/// a reproducible sequence of subsets (seeded with `seed`) of `funcs[..common]`, and one
/// cycle in a hundred of all of `funcs`, which ftrace then hooks and unhooks.  Each
/// program's links count their runs (`RKF_MULTI_F_COUNT`) every other time, so that
/// functions switch between slots of both kinds, beside the links that stay, which
/// count.  Returns how many links it attached (an empty subset attaches none).
pub(super) fn churn(
    progs: &[BorrowedFd<'_>],
    funcs: &[Func],
    common: usize,
    cycles: usize,
    seed: u64,
) -> Result<usize> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut attached = 0;
    for cycle in 0..cycles {
        let x = rng.u32(..);
        let span = if cycle % 100 == 0 {
            funcs.len()
        } else {
            common
        };
        let chosen: Vec<Func> = funcs[..span]
            .iter()
            .enumerate()
            .filter(|(i, _)| x & (1 << i) != 0)
            .map(|(_, f)| f.clone())
            .collect();
        if chosen.is_empty() {
            continue;
        }
        let prog = &progs[cycle % progs.len()];
        drop(if (cycle / progs.len()).is_multiple_of(2) {
            attach(prog, &chosen, None)?
        } else {
            attach_uncounted(prog, &chosen, None)?
        });
        attached += 1;
    }
    Ok(attached)
}
