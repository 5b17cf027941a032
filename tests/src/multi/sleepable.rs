// SPDX-License-Identifier: GPL-2.0

//! Sleepable programs (`RKF_MULTI_FENTRY_S`, `RKF_MULTI_FEXIT_S`,
//! `RKF_MULTI_FSESSION_S`), after upstream's sleepable tracing_multi subtests: exact
//! counts, cookies and return values on syscall wrappers, a `bpf_copy_from_user()` that
//! has to fault a page in (where a non-sleepable program's `bpf_probe_read_user()`
//! cannot), and the refusal of functions that may not sleep.

use std::{fs::File, io::Write, mem::MaybeUninit, os::fd::AsFd, ptr};

use anyhow::{bail, Context, Result};

use super::{
    attach, refusal,
    tramps::{check_tramps, Tramp},
};
use crate::{
    check, check_eq, diag,
    skel::multi_sleepable::{types::bss, MultiSleepableSkel, MultiSleepableSkelBuilder},
};
use rkf::{
    modules,
    multi::{self, Func},
    skeleton,
};
use rkf_core::{abi::Kind, multi::Reason};

/// The syscall wrappers traced: both may sleep by the verifier's rule.
const TARGETS: [&str; 2] = ["__x64_sys_write", "__x64_sys_getpgid"];
/// What the buffer of each write(2) holds.
const MAGIC: u64 = 0x5ee9_ab1e_c0de_4711;
/// write(2) and getpgid(2) calls of the first phase.
const WRITES: u64 = 5;
const GETPGIDS: u64 = 3;
/// write(2) calls of the second phase, each from a page that is not present.
const FAULTING_WRITES: u64 = 3;
/// `value` before a program writes it.
const UNSET: u64 = u64::MAX;
/// The storm's functions: two the caller calls, two more the churn hooks now and then.
const STORM: [&str; 4] = [
    "__x64_sys_getpgid",
    "__x64_sys_getsid",
    "__x64_sys_getpriority",
    "__x64_sys_sched_getscheduler",
];
/// `bpf_probe_read_user()` of a page that is not present.
const EFAULT: i64 = -(libc::EFAULT as i64);

/// The functions, `TARGETS` in that order.
fn targets() -> Result<Vec<Func>> {
    resolve_in_order(&TARGETS)
}

/// The storm's functions, `STORM` in that order.
pub(super) fn storm_targets() -> Result<Vec<Func>> {
    resolve_in_order(&STORM)
}

/// `names`, resolved, in that order.
pub(super) fn resolve_in_order(names: &[&str]) -> Result<Vec<Func>> {
    let mut r = multi::resolve(names)?;
    check_eq!(
        r.nr_skipped(),
        0,
        "syscall wrappers left out: {:?}",
        r.skipped
    );
    let mut funcs = Vec::new();
    for &name in names {
        let i = r
            .funcs
            .iter()
            .position(|f| f.name == name)
            .with_context(|| format!("{name}: not resolved"))?;
        funcs.push(r.funcs.remove(i));
    }
    Ok(funcs)
}

pub(super) fn load<'o>(
    obj: &'o mut MaybeUninit<libbpf_rs::OpenObject>,
    funcs: &[Func],
) -> Result<MultiSleepableSkel<'o>> {
    modules::require("rkf_multi")?;
    let tid = nix::unistd::gettid().as_raw() as u32;
    skeleton::load::<MultiSleepableSkelBuilder>(obj, "multi_sleepable.bpf.c", |open| {
        let bss = open.maps.bss_data.as_deref_mut().context("no .bss")?;
        for (i, f) in funcs.iter().enumerate() {
            bss.ips[i] = f.addr;
        }
        bss.target_pid = tid;
        bss.target_tgid = std::process::id();
        bss.write_slot = 0;
        Ok(())
    })
}

fn reset(skel: &mut MultiSleepableSkel<'_>) -> Result<()> {
    let bss = skel.maps.bss_data.as_deref_mut().context("no .bss")?;
    for c in bss.storm_counts.iter_mut() {
        c.fill(0);
    }
    for r in bss
        .sleepable_fentry_recs
        .iter_mut()
        .chain(bss.sleepable_fexit_recs.iter_mut())
        .chain(bss.plain_fentry_recs.iter_mut())
    {
        *r = Default::default();
        r.value = UNSET;
    }
    for r in bss
        .session_recs
        .iter_mut()
        .chain(bss.plain_session_recs.iter_mut())
    {
        *r = Default::default();
        r.value = UNSET;
    }
    bss.unknown_ip = 0;
    Ok(())
}

fn records<'s>(skel: &'s MultiSleepableSkel<'_>) -> Result<&'s bss> {
    let bss = skel.maps.bss_data.as_deref().context("no .bss")?;
    check_eq!(
        bss.unknown_ip,
        0,
        "runs with an unexpected bpf_get_func_ip()"
    );
    Ok(bss)
}

/// One write(2) of the 8 bytes at `buf` to `null`: 8 on success.
fn write_raw(null: &File, buf: *const u8) -> Result<u64> {
    use std::os::fd::AsRawFd;
    // SAFETY: write(2) only reads the 8 bytes at `buf`, which the caller keeps mapped;
    // /dev/null does not even read them.
    let n = unsafe { libc::write(null.as_raw_fd(), buf.cast(), 8) };
    if n < 0 {
        bail!("write(2): {}", std::io::Error::last_os_error());
    }
    Ok(n as u64)
}

/// A new anonymous page, never touched: the first access faults a zero page in.
/// Unmapped on drop.
struct Page(*mut u8);

impl Page {
    fn new() -> Result<Self> {
        // SAFETY: a new private anonymous mapping; no memory of this process changes.
        let p = unsafe {
            libc::mmap(
                ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            bail!("mmap: {}", std::io::Error::last_os_error());
        }
        Ok(Self(p.cast()))
    }
}

impl Drop for Page {
    fn drop(&mut self) {
        // SAFETY: the mapping is ours and nothing refers to it any more.
        unsafe { libc::munmap(self.0.cast(), 4096) };
    }
}

/// A sleepable session (fsession.s) beside a non-sleepable one (fsession), as upstream's
/// test_session, on write(2) and getpgid(2): each runs once on entry and once on exit
/// per call of this thread, and reads back on exit the cookie it wrote on entry (the
/// sleepable one has the second cookie); the return value is 0 on entry and the
/// syscall's on exit; on entry the sleepable one copies write(2)'s buffer with
/// `bpf_copy_from_user()`, also from a page that is not present.  Through generated
/// trampolines, then through the shared one.
pub(super) fn sleepable_session() -> Result<()> {
    Tramp::run_both(session_through)
}

fn session_through(tramp: Tramp) -> Result<()> {
    let funcs = targets()?;
    let mut obj = MaybeUninit::uninit();
    let mut skel = load(&mut obj, &funcs)?;
    let plain = attach(&skel.progs.plain_session, &funcs, None)?;
    let session = attach(&skel.progs.sleepable_session, &funcs, None)?;
    check_tramps(&funcs, tramp, "fsession and fsession.s")?;
    check_eq!(plain.info()?.kind, Kind::Session, "the plain link's kind");
    check_eq!(session.info()?.kind, Kind::Session, "the link's kind");
    let null = File::options().write(true).open("/dev/null")?;
    // This thread writes nothing else (no diagnostics) until the records are read.
    reset(&mut skel)?;
    skel.maps.bss_data.as_deref_mut().context("no .bss")?.magic = MAGIC;
    let buf = MAGIC.to_ne_bytes();
    for _ in 0..WRITES {
        check_eq!((&null).write(&buf)?, 8, "write(2) to /dev/null");
    }
    let page = Page::new()?;
    check_eq!(
        write_raw(&null, page.0)?,
        8,
        "write(2) from a page not present"
    );
    let mut pgid = 0;
    for _ in 0..GETPGIDS {
        // SAFETY: getpgid(2) has no memory arguments.
        pgid = unsafe { libc::getpgid(0) };
    }
    check!(pgid > 0, "getpgid(0): {pgid}");
    let bss = records(&skel)?;
    for (what, r) in [
        ("fsession.s", &bss.session_recs),
        ("fsession", &bss.plain_session_recs),
    ] {
        for (i, (name, calls, ret)) in [
            (TARGETS[0], WRITES + 1, 8),
            (TARGETS[1], GETPGIDS, pgid as u64),
        ]
        .into_iter()
        .enumerate()
        {
            check_eq!(
                (
                    r[i].entries,
                    r[i].exits,
                    r[i].cookie_ok,
                    r[i].nonzero_cookie
                ),
                (calls, calls, calls, 0),
                "{what} {name}: entry runs, exit runs, cookies read back, cookies not zeroed"
            );
            check_eq!(
                r[i].entry_ret,
                0,
                "{what} {name}: the return value on entry"
            );
            check_eq!(r[i].ret, ret, "{what} {name}: the return value on exit");
        }
    }
    let r = &bss.session_recs;
    check_eq!(
        r[0].magic_reads,
        WRITES,
        "fsession.s write: buffers read on entry"
    );
    // The last write(2) was from the page that was not present: it reads its zeros.
    check_eq!(
        r[0].value,
        0,
        "fsession.s write: the last buffer read (a new page)"
    );
    check_eq!(
        r[0].err,
        0,
        "fsession.s write: bpf_copy_from_user()'s error"
    );
    check_eq!(r[1].value, UNSET, "fsession.s getpgid: read nothing");
    drop(page);
    Ok(())
}

/// A non-sleepable fentry, a sleepable fentry and a sleepable fexit program (attached in
/// that order, so run in that order) on write(2) and getpgid(2): exact hits for this
/// thread's calls, cookies, return values, and the buffer copied by each; then writes
/// from a page that is not present, which only the sleepable programs can read (faulting
/// it in), and the links' counters.  First without the fexit program (a generated
/// trampoline then runs the fentry.s program itself, as a BPF trampoline does, and the
/// fentry program through rkf_multi's run), then with it.  Through generated
/// trampolines, then through the shared one.
pub(super) fn sleepable_fentry_fexit() -> Result<()> {
    Tramp::run_both(|tramp| {
        fentry_fexit_through(tramp, false, true).context("fentry and fentry.s")?;
        fentry_fexit_through(tramp, true, true).context("fentry, fentry.s and fexit.s")
    })
}

/// The same runs through links that do not count (`RKF_MULTI_F_COUNT` clear, as rkf's
/// tools attach them): the programs run exactly as often, with the same cookies and
/// values, and the links report that they count nothing, every function's hits and
/// misses 0.  Without fexit.s, the generated trampoline runs fentry.s itself with no
/// counters in its code; the others run through `rkf_multi_run_prog()` with no
/// counters in their slots.
pub(super) fn uncounted_links() -> Result<()> {
    Tramp::run_both(|tramp| {
        fentry_fexit_through(tramp, false, false).context("fentry and fentry.s")?;
        fentry_fexit_through(tramp, true, false).context("fentry, fentry.s and fexit.s")
    })
}

fn fentry_fexit_through(tramp: Tramp, with_fexit: bool, counted: bool) -> Result<()> {
    let funcs = targets()?;
    let mut obj = MaybeUninit::uninit();
    let mut skel = load(&mut obj, &funcs)?;
    let cookie = |base: u64| -> Vec<u64> { (0..funcs.len() as u64).map(|i| base + i).collect() };
    let (fentry_cookies, fexit_cookies, plain_cookies) = (
        cookie(0x51ee_0000),
        cookie(0x51ee_1000),
        cookie(0x51ee_2000),
    );
    let attach = |prog: &_, funcs: &_, cookies| {
        if counted {
            super::attach(prog, funcs, cookies)
        } else {
            super::attach_uncounted(prog, funcs, cookies)
        }
    };
    let plain = attach(&skel.progs.plain_fentry, &funcs, Some(&plain_cookies))?;
    let fentry = attach(&skel.progs.sleepable_fentry, &funcs, Some(&fentry_cookies))?;
    let fexit = if with_fexit {
        Some(attach(
            &skel.progs.sleepable_fexit,
            &funcs,
            Some(&fexit_cookies),
        )?)
    } else {
        None
    };
    check_tramps(&funcs, tramp, "fentry, fentry.s (and fexit.s)")?;
    // The programs that run: the fexit one only if attached, whose records stay unset
    // otherwise.
    let fexit_hits = |n: u64| if with_fexit { n } else { 0 };
    let null = File::options().write(true).open("/dev/null")?;

    // This thread writes nothing else (no diagnostics) until the records are read.
    reset(&mut skel)?;
    let buf = MAGIC.to_ne_bytes();
    for _ in 0..WRITES {
        check_eq!((&null).write(&buf)?, 8, "write(2) to /dev/null");
    }
    let mut pgid = 0;
    for _ in 0..GETPGIDS {
        // SAFETY: getpgid(2) has no memory arguments.
        pgid = unsafe { libc::getpgid(0) };
    }
    check!(pgid > 0, "getpgid(0): {pgid}");
    let bss = records(&skel)?;
    let (w, g) = (0, 1);
    for (what, r, cookies, runs) in [
        (
            "fentry.s",
            &bss.sleepable_fentry_recs,
            Some(&fentry_cookies),
            true,
        ),
        (
            "fexit.s",
            &bss.sleepable_fexit_recs,
            Some(&fexit_cookies),
            with_fexit,
        ),
        ("fentry", &bss.plain_fentry_recs, Some(&plain_cookies), true),
    ] {
        if !runs {
            check_eq!(
                (r[w].hits, r[g].hits, r[w].value, r[w].cookie),
                (0, 0, UNSET, 0),
                "{what}, not attached: hits on {} and {}, the buffer read, cookie",
                TARGETS[w],
                TARGETS[g]
            );
            continue;
        }
        check_eq!(r[w].hits, WRITES, "{what} {}: hits", TARGETS[w]);
        check_eq!(r[g].hits, GETPGIDS, "{what} {}: hits", TARGETS[g]);
        check_eq!(r[w].value, MAGIC, "{what} {}: the buffer read", TARGETS[w]);
        check_eq!(r[w].err, 0, "{what} {}: the read's error", TARGETS[w]);
        check_eq!(r[g].value, UNSET, "{what} {}: read nothing", TARGETS[g]);
        for (i, name) in TARGETS.iter().enumerate() {
            let want = cookies.map_or(0, |c| c[i]);
            check_eq!(r[i].cookie, want, "{what} {name}: cookie");
        }
    }
    if with_fexit {
        let r = &bss.sleepable_fexit_recs;
        check_eq!(r[w].ret, 8, "fexit.s {}: return value", TARGETS[w]);
        check_eq!(
            r[g].ret,
            pgid as u64,
            "fexit.s {}: return value",
            TARGETS[g]
        );
    }

    // From a page that is not present: bpf_copy_from_user() faults it in, and reads the
    // zeros; bpf_probe_read_user(), which runs first, cannot.
    reset(&mut skel)?;
    for _ in 0..FAULTING_WRITES {
        // A new mapping each time (the test kernel has no madvise(2) to discard one).
        let page = Page::new()?;
        check_eq!(write_raw(&null, page.0)?, 8, "write(2) from the page");
    }
    let bss = records(&skel)?;
    for (what, r, err) in [
        ("fentry.s", &bss.sleepable_fentry_recs, 0),
        ("fexit.s", &bss.sleepable_fexit_recs, 0),
        ("fentry", &bss.plain_fentry_recs, EFAULT),
    ] {
        let n = if what == "fexit.s" {
            fexit_hits(FAULTING_WRITES)
        } else {
            FAULTING_WRITES
        };
        check_eq!(r[w].hits, n, "{what}, page not present: hits");
        if n == 0 {
            continue;
        }
        check_eq!(r[w].err, err, "{what}, page not present: the read's error");
        check_eq!(r[w].value, 0, "{what}, page not present: the buffer read");
    }

    // The links' own counters: every task's calls, this thread's among them.
    for (what, link) in [
        ("fentry", Some(&plain)),
        ("fentry.s", Some(&fentry)),
        ("fexit.s", fexit.as_ref()),
    ] {
        let Some(link) = link else { continue };
        let info = link.info()?;
        check_eq!(
            info.funcs.len(),
            funcs.len(),
            "{what}: functions of the link"
        );
        check_eq!(info.counted, counted, "{what}: the link counts");
        if !counted {
            for fi in &info.funcs {
                check_eq!(
                    (fi.hits, fi.misses),
                    (0, 0),
                    "{what} {:#x}: hits and misses of a link that does not count",
                    fi.addr
                );
            }
            continue;
        }
        for f in &funcs {
            // The link reports its functions in its own order (by ftrace site).
            let fi = info
                .funcs
                .iter()
                .find(|fi| fi.addr == f.addr)
                .with_context(|| format!("{what} {}: not in the link's info", f.name))?;
            let least = if f.name == TARGETS[w] {
                WRITES + FAULTING_WRITES
            } else {
                GETPGIDS
            };
            check!(
                fi.hits >= least,
                "{what} {}: {} hits, this thread made {least} calls",
                f.name,
                fi.hits
            );
        }
    }
    diag!(
        "write(2) and getpgid(2): exact runs of fentry, fentry.s{}{}; bpf_copy_from_user() faulted {FAULTING_WRITES} pages in",
        if with_fexit { " and fexit.s" } else { "" },
        if counted { "" } else { ", links not counting" }
    );
    Ok(())
}

/// A sleepable program (fentry.s, fexit.s or fsession.s) on a function that may not
/// sleep is refused, EINVAL naming it, with nothing attached; the same set takes a
/// non-sleepable program.
pub(super) fn sleepable_refusals() -> Result<()> {
    let mut funcs = targets()?;
    let mut r = multi::resolve(&["bpf_fentry_test1"])?;
    check_eq!(r.funcs.len(), 1, "bpf_fentry_test1 resolved");
    funcs.insert(1, r.funcs.remove(0));
    let mut obj = MaybeUninit::uninit();
    let skel = load(&mut obj, &funcs)?;
    let before: Vec<u64> = multi::links()?.iter().map(|l| l.id).collect();
    for (what, prog) in [
        ("fentry.s", &skel.progs.sleepable_fentry),
        ("fexit.s", &skel.progs.sleepable_fexit),
        ("fsession.s", &skel.progs.sleepable_session),
    ] {
        for (set, bad) in [(&funcs[..], 1), (&funcs[1..2], 0)] {
            refusal(
                prog,
                set,
                None,
                (libc::EINVAL, Some((bad, Reason::MayNotSleep))),
                &format!(
                    "{what} on bpf_fentry_test1{}",
                    if set.len() > 1 {
                        " and the syscalls"
                    } else {
                        " alone"
                    }
                ),
            )?;
        }
    }
    let after: Vec<u64> = multi::links()?.iter().map(|l| l.id).collect();
    check_eq!(after, before, "links after the refusals");
    // Sleepable programs on the syscalls alone, and a non-sleepable one on all three.
    let both = [funcs[0].clone(), funcs[2].clone()];
    let _s = attach(&skel.progs.sleepable_fentry, &both, None)?;
    let _p = attach(&skel.progs.plain_fentry, &funcs, None)?;
    Ok(())
}

/// The attach storm with sleepable programs: permanent links count exactly the calls a
/// thread makes of two syscalls, fentry.s and fexit.s ones on getsid(2) and a
/// non-sleepable fexit on both, while another thread attaches and detaches overlapping
/// links (fentry.s, fexit.s, a non-sleepable fentry and fsession.s, one cycle in a hundred also
/// hooking and unhooking two more syscalls).  So getpgid(2) keeps changing between a
/// function with sleepable programs, whose table is freed after an RCU tasks trace grace
/// period, and one without, whose table is not: a call that looked it up in one and finds
/// it again in the other must run its programs under the right lock (the sanitizers of
/// the test kernel watch).  rkf_multi is reloaded with `generate=0`, which keeps both on
/// the shared trampoline, so that this changes the table only, not the call at the
/// functions' ftrace sites (see the README's Known problem: generated trampolines
/// change with a function's programs).  A sleepable program runs without migration but
/// preemptible, so another task preempted inside it on the same cpu makes a run a miss
/// (as for the kernel's sleepable trampolines): one caller, and functions no other task
/// of the VM calls, keep every run a hit.
pub(super) fn sleepable_storm() -> Result<()> {
    super::tramps::with_shared_only(shared_sleepable_storm)
}

fn shared_sleepable_storm() -> Result<()> {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    let cycles = super::storm::storm_cycles();
    let funcs = storm_targets()?;
    let called = &funcs[..2];
    let sleepable = &funcs[1..2];
    let mut obj = MaybeUninit::uninit();
    let mut skel = load(&mut obj, &funcs)?;
    reset(&mut skel)?;
    let fentry = attach(&skel.progs.storm_fentry, sleepable, None)?;
    let fexit = attach(&skel.progs.storm_fexit, sleepable, None)?;
    let plain = attach(&skel.progs.storm_plain, called, None)?;
    super::tramps::check_tramps(
        called,
        super::tramps::Tramp::Shared,
        "rkf_multi loaded with generate=0",
    )?;
    let churn = [
        skel.progs.sleepable_fentry.as_fd(),
        skel.progs.sleepable_fexit.as_fd(),
        skel.progs.plain_fentry.as_fd(),
        skel.progs.sleepable_session.as_fd(),
    ];
    let runs = AtomicU64::new(0);
    let done = AtomicBool::new(false);
    let start = std::time::Instant::now();
    let churned = std::thread::scope(|s| -> Result<usize> {
        let caller = s.spawn(|| -> Result<()> {
            super::storm::as_background()?;
            while !done.load(Ordering::Relaxed) {
                // SAFETY: getpgid(2) and getsid(2) have no memory arguments.
                unsafe {
                    libc::getpgid(0);
                    libc::getsid(0);
                }
                runs.fetch_add(1, Ordering::Relaxed);
            }
            Ok(())
        });
        let result = super::storm::churn(&churn, &funcs, called.len(), cycles, 0x51ee_9ab1);
        done.store(true, Ordering::Relaxed);
        caller.join().expect("the caller thread panicked")?;
        result
    })?;
    let runs = runs.load(Ordering::Relaxed);
    diag!(
        "{churned} links attached and detached in {cycles} cycles, {:.1} s, while a thread made {runs} calls of each of 2 syscalls",
        start.elapsed().as_secs_f64()
    );
    check!(runs > 0, "the caller made no call");
    let preempt_rt = super::preempt_rt()?;
    for (what, link, which, permanent) in [
        ("fentry.s", &fentry, 0, sleepable),
        ("fexit.s", &fexit, 1, sleepable),
        ("fexit", &plain, 2, called),
    ] {
        // The program's runs of any task, read before and after the link's hits: another
        // task may call the syscalls meanwhile, and a run counts a hit after the program.
        let all_before = records(&skel)?.storm_runs[which];
        let info = link.info()?;
        let bss = records(&skel)?;
        let (counts, all) = (&bss.storm_counts[which], &bss.storm_runs[which]);
        check_eq!(info.funcs.len(), permanent.len(), "{what} link's functions");
        for f in permanent {
            // The slot of `f` in the programs' `ips`: its index in `funcs`.
            let i = funcs
                .iter()
                .position(|g| g.addr == f.addr)
                .context("a permanent function not among the storm's")?;
            let fi = info
                .funcs
                .iter()
                .find(|fi| fi.addr == f.addr)
                .with_context(|| format!("{what} link does not list {}", f.name))?;
            // Its program runs through this link only, once for each hit, for this
            // thread's calls (`counts`) and any other task's.
            check!(
                all_before[i] <= fi.hits && fi.hits <= all[i],
                "permanent {what} link on {}: {} hits, not within the program's {} to {} runs",
                f.name,
                fi.hits,
                all_before[i],
                all[i]
            );
            if preempt_rt {
                check!(
                    counts[i] + runs / 10 > runs && counts[i] <= runs,
                    "permanent {what} link on {}: {} runs of {runs} calls",
                    f.name,
                    counts[i]
                );
            } else {
                check_eq!(
                    counts[i],
                    runs,
                    "permanent {what} link on {}: the program's runs against the calls",
                    f.name
                );
                check_eq!(fi.misses, 0, "permanent {what} link on {}: misses", f.name);
            }
        }
    }
    Ok(())
}
