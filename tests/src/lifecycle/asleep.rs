// SPDX-License-Identifier: GPL-2.0

//! A sleepable program asleep inside a traced call: its link detached meanwhile, and
//! rkf_multi unloaded meanwhile; and a generated trampoline's image retired while a call
//! sleeps in it ([`image_kept_by_its_count()`]).
//!
//! The program (tests/progs/multi_asleep.bpf.c) sleeps in rkf_testmod's
//! `bpf_rkf_testmod_wait_release()` on one task's `getpgid(2)` until the test sets
//! rkf_testmod's parameter `release`; a non-sleepable fexit program on the same function
//! records the call's return, and a non-sleepable fentry program attached after it counts
//! the runs that follow the sleep.  A generated trampoline counts such a call in flight
//! from entry to return (without the fexit, which it then does not call the function
//! for, from the first program's run to the last's), and runs every program of the
//! function only while its link is attached (`rkf_multi_run_sleepable_slot()`); the
//! shared one counts its frame, runs the programs after the sleep only while their links
//! are attached, and looks the function up again on the way out.  Every link that shared
//! the function with the sleepable program is freed after an RCU tasks trace grace
//! period, so that the sleeper can still read its flag (the test kernel's KASAN would see
//! it otherwise).

use std::{
    mem::MaybeUninit,
    sync::mpsc,
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};
use libbpf_rs::{MapCore, MapFlags, MapHandle};

use super::{blocked_in, kernel_stack, leaked_images, module_state, MULTI};
use crate::{
    check, check_eq, diag,
    kmod::{insmod_with, moddir, rmmod, rmmod_wait},
    multi::{check_tramps, Tramp},
    skel::multi_asleep::{types::bss, MultiAsleepSkel, MultiAsleepSkelBuilder},
};
use rkf::{
    multi::{self, Func, Link},
    skeleton,
};

/// Where the program sleeps.
const WAIT: &str = "bpf_rkf_testmod_wait_release";
/// rkf_testmod's parameter that wakes it.
const RELEASE: &str = "/sys/module/rkf_testmod/parameters/release";

/// Sets `release` to `on`.
fn release(on: bool) -> Result<()> {
    std::fs::write(RELEASE, if on { "1" } else { "0" }).with_context(|| format!("write {RELEASE}"))
}

/// Wakes the program when the test ends, also on failure: a task asleep in it would hold
/// up the unload of rkf_multi, and the runner's exit, for two minutes.
struct Wake;

impl Drop for Wake {
    fn drop(&mut self) {
        let _ = release(true);
    }
}

/// The program's .bss, read through the map: it outlives the skeleton while the programs
/// hold the map.
fn read_bss(map: &MapHandle) -> Result<bss> {
    let v = map
        .lookup(&0u32.to_ne_bytes(), MapFlags::ANY)?
        .context("no .bss value")?;
    check_eq!(v.len(), size_of::<bss>(), ".bss size");
    // SAFETY: `v` holds the bytes of one `bss`, a plain C struct of integers.
    Ok(unsafe { std::ptr::read_unaligned(v.as_ptr().cast::<bss>()) })
}

/// A thread that calls getpgid(2) once, its program's target, when told; returns what
/// the call returned.
struct Caller {
    tid: i32,
    go: mpsc::Sender<()>,
    thread: std::thread::JoinHandle<i32>,
}

impl Caller {
    fn spawn() -> Result<Self> {
        let (tid_tx, tid_rx) = mpsc::channel();
        let (go, go_rx) = mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            let _ = tid_tx.send(nix::unistd::gettid().as_raw());
            if go_rx.recv().is_err() {
                return -1;
            }
            // SAFETY: getpgid(2) has no memory arguments.
            unsafe { libc::getpgid(0) }
        });
        let tid = tid_rx.recv().context("the caller's task id")?;
        Ok(Self { tid, go, thread })
    }

    /// Makes the call, and waits until the program sleeps in it (through the
    /// trampoline `tramp`).
    fn call_and_wait_asleep(&self, tramp: Tramp) -> Result<()> {
        self.go.send(()).context("starting the caller")?;
        self.wait_asleep(WAIT, tramp).map(drop)
    }

    /// Waits until the call sleeps in the kernel function `wait` (through the trampoline
    /// `tramp`), and returns its kernel stack then.
    fn wait_asleep(&self, wait: &str, tramp: Tramp) -> Result<Vec<String>> {
        let deadline = Instant::now() + Duration::from_secs(120);
        // The stack of a task asleep in the program, read once: a task that is running
        // shows none.
        let stack = loop {
            if blocked_in(self.tid, wait)? {
                let stack = kernel_stack(self.tid)?;
                if stack.iter().any(|f| f.starts_with(wait)) {
                    break stack;
                }
            }
            check!(
                !self.thread.is_finished(),
                "the call returned without the program sleeping"
            );
            check!(
                Instant::now() < deadline,
                "the program never slept in {wait}()"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        let via = |f: &String| match tramp {
            Tramp::Generated => f.starts_with("rkf_multi_image_"),
            Tramp::Shared => f.starts_with("rkf_multi_tramp"),
        };
        check!(
            stack.iter().any(via),
            "the asleep task's stack shows no {tramp:?} trampoline: {stack:?}"
        );
        Ok(stack)
    }

    /// Joins the caller, checks that its call returned `pgid`, and reads what the
    /// programs recorded.
    fn returned(self, pgid: i32, map: &MapHandle) -> Result<bss> {
        check_eq!(self.join()?, pgid, "getpgid(2) past the program that slept");
        read_bss(map)
    }

    fn join(self) -> Result<i32> {
        match self.thread.join() {
            Ok(r) => Ok(r),
            Err(_) => bail!("the caller panicked"),
        }
    }
}

/// The links of one round: the fexit program (if the round has it), the sleepable one,
/// and a plain fentry program after it, attached in that order.
struct Links {
    fexit: Option<Link>,
    sleeper: Link,
    late: Link,
}

/// Attaches the round's links on `funcs`, checks that their sites call the trampoline
/// `tramp`, and puts `caller`'s call to sleep in the program.
fn attach_and_sleep(
    skel: &MultiAsleepSkel<'_>,
    funcs: &[Func],
    caller: &Caller,
    tramp: Tramp,
    fexit: bool,
) -> Result<Links> {
    let attach = |prog| Link::attach(prog, funcs, None).map_err(|e| anyhow::anyhow!("{e}"));
    let links = Links {
        fexit: fexit
            .then(|| attach(&skel.progs.asleep_fexit))
            .transpose()?,
        sleeper: attach(&skel.progs.asleep_fentry)?,
        late: attach(&skel.progs.late_fentry)?,
    };
    let what = if fexit {
        "fexit, fentry.s and fentry"
    } else {
        "fentry.s and fentry"
    };
    check_tramps(funcs, tramp, what)?;
    caller.call_and_wait_asleep(tramp)?;
    Ok(links)
}

/// Whether the program with id `id` is still loaded.
fn prog_loaded(id: u32) -> Result<bool> {
    // SAFETY: no pointer argument; a returned fd is ours to close.
    let fd = unsafe { libbpf_rs::libbpf_sys::bpf_prog_get_fd_by_id(id) };
    if fd >= 0 {
        // SAFETY: `fd` was just returned to us and is not used after.
        unsafe { libc::close(fd) };
        return Ok(true);
    }
    match -fd {
        libc::ENOENT => Ok(false),
        e => bail!(
            "BPF_PROG_GET_FD_BY_ID {id}: {}",
            std::io::Error::from_raw_os_error(e)
        ),
    }
}

/// Loads rkf_multi again (with `generate=0` for the shared trampoline) when dropped if
/// the test unloaded it and did not get to load it back: the tests after it need it.
struct Reload(Tramp);

impl Reload {
    fn params(&self) -> &'static std::ffi::CStr {
        match self.0 {
            Tramp::Generated => c"",
            Tramp::Shared => c"generate=0",
        }
    }

    fn ensure(&self) -> Result<()> {
        if module_state(MULTI)?.is_none() {
            let ko = moddir()?.join(format!("{MULTI}.ko"));
            insmod_with(&ko, self.params()).context("insmod rkf_multi again")?;
        }
        Ok(())
    }
}

impl Drop for Reload {
    fn drop(&mut self) {
        if let Err(e) = self.ensure() {
            diag!("rkf_multi not loaded again: {e:#}");
        }
    }
}

/// `__x64_sys_getpgid`, resolved.
fn target() -> Result<Vec<Func>> {
    let r = multi::resolve(&["__x64_sys_getpgid"])?;
    check_eq!(r.funcs.len(), 1, "__x64_sys_getpgid resolved");
    Ok(r.funcs)
}

/// Through generated trampolines, then the shared one (rkf_multi reloaded with
/// `generate=0`), then through a generated trampoline without the fexit (which then
/// neither calls the function nor has an exit):
///
/// 1. The sleepable link, and a plain fentry attached after it, are detached while the
///    program sleeps: the detaches return, the links are gone, the call stays asleep
///    (without the fexit, no function is hooked any more; the tables that held the
///    trampoline's image are freed only after an RCU tasks trace grace period, which the
///    sleeping program holds off, so the image is retired once the program's run ends,
///    and with this one sleepable program its count keeps it only for the rest of the way
///    out, which this test cannot catch: [`image_kept_by_its_count()`] does);
///    once woken, the program ends its run, the fentry after it does not run, the call
///    returns what getpgid(2) returns, and the fexit program, still attached, runs once
///    and sees that value.
/// 2. Again asleep, every link and every fd of the programs closed: rmmod of rkf_multi
///    is refused (EAGAIN) for as long as the program sleeps, which stays loaded (it pins
///    the module until its run ends and its link is freed, after an RCU tasks trace
///    grace period); once woken, rkf_multi unloads, the program is freed, the call
///    returns the right value, the programs of the links detached during the call never
///    ran, and no image was left behind: every call counted in flight counted its way
///    out.  (The woken call is past its program before rmmod can succeed, and the
///    module's exit waits for two RCU tasks grace periods before it looks at images, so
///    the unload's second look at an image, for a call still on its way out, is not
///    reached here.)  rkf_multi loads again.
pub(super) fn sleepable_program_asleep() -> Result<()> {
    rkf::modules::require("rkf_testmod")?;
    Tramp::run_both(|tramp| asleep_through(tramp, true))?;
    asleep_through(Tramp::Generated, false).context("without the fexit")
}

/// One pass through trampolines of kind `tramp`, with the fexit program if `fexit`.
fn asleep_through(tramp: Tramp, fexit: bool) -> Result<()> {
    let funcs = target()?;
    // SAFETY: getpgid(2) has no memory arguments.
    let pgid = unsafe { libc::getpgid(0) };
    check!(pgid > 0, "getpgid(0): {pgid}");
    release(false)?;
    let wake = Wake;

    // 1. Detached while asleep.
    let caller = Caller::spawn()?;
    let mut obj = MaybeUninit::uninit();
    let mut skel = skeleton::load::<MultiAsleepSkelBuilder>(&mut obj, "multi_asleep.bpf.c", |o| {
        o.maps
            .bss_data
            .as_deref_mut()
            .context("no .bss")?
            .target_pid = caller.tid as u32;
        Ok(())
    })?;
    let map = MapHandle::try_from(&skel.maps.bss).context("the .bss map")?;
    let links = attach_and_sleep(&skel, &funcs, &caller, tramp, fexit)?;
    let ids = [links.sleeper.id, links.late.id];
    // The sleepable link first, then the one after it: what the call meets after its
    // sleep.
    drop(links.sleeper);
    drop(links.late);
    check!(
        multi::links()?.iter().all(|l| !ids.contains(&l.id)),
        "the detached links are still listed"
    );
    // Time for the grace periods of links that no call had slept beside: the ones
    // detached must still be there when the call wakes (the test kernel's KASAN watches).
    std::thread::sleep(Duration::from_secs(3));
    check!(
        !caller.thread.is_finished(),
        "the call returned before the program was woken"
    );
    release(true)?;
    let b = caller.returned(pgid, &map)?;
    check_eq!(
        (b.asleep, b.woke, b.wait_err, b.late_runs),
        (1, 1, 0, 0),
        "runs asleep, woken, the wait's error, and runs of the fentry detached meanwhile"
    );
    check_eq!(
        (b.fexit_runs, b.fexit_ret),
        if fexit { (1, pgid as u64) } else { (0, 0) },
        "runs of the fexit (attached: {fexit}), and the return value it saw"
    );
    drop(links.fexit);

    // 2. rmmod while asleep.
    release(false)?;
    let caller = Caller::spawn()?;
    {
        let b = skel.maps.bss_data.as_deref_mut().context("no .bss")?;
        (b.asleep, b.woke, b.wait_err, b.late_runs) = (0, 0, 0, 0);
        (b.fexit_runs, b.fexit_ret) = (0, 0);
        b.target_pid = caller.tid as u32;
    }
    let links = attach_and_sleep(&skel, &funcs, &caller, tramp, fexit)?;
    let prog = multi::links()?
        .iter()
        .find(|l| l.id == links.sleeper.id)
        .map(|l| l.prog_id)
        .context("the sleepable link is not listed")?;
    let reload = Reload(tramp);
    let leaked_before = leaked_images()?;
    drop((links, skel));
    // For 3 s of the program's sleep, long past the grace periods of links nothing slept
    // beside: it stays loaded, and rkf_multi pinned.  The count is read first: were it
    // 0, rmmod would go into the module's exit, which waits for the sleeper, so that the
    // test would hang instead of failing.
    for _ in 0..30 {
        let refcnt = crate::multi::module_refcnt(MULTI)?;
        check!(
            refcnt > 0,
            "rkf_multi's reference count with a program asleep: {refcnt}"
        );
        let e = rmmod(MULTI).err();
        check_eq!(
            e.and_then(|e| e.raw_os_error()),
            Some(libc::EAGAIN),
            "rmmod rkf_multi with a program asleep"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    check!(prog_loaded(prog)?, "the asleep program was freed");
    let state = module_state(MULTI)?;
    check_eq!(
        state.as_deref(),
        Some("live"),
        "rkf_multi after the refused rmmod"
    );
    release(true)?;
    drop(wake);
    rmmod_wait(MULTI, Duration::from_secs(120))?;
    check!(!prog_loaded(prog)?, "the program outlived rkf_multi");
    let b = caller.returned(pgid, &map)?;
    let leaked: Vec<(String, u64)> = leaked_images()?
        .into_iter()
        .filter(|l| !leaked_before.contains(l))
        .collect();
    check_eq!(
        leaked,
        Vec::new(),
        "images left behind by rkf_multi's unload (a call counted in flight never counted \
         its way out)"
    );
    check_eq!(
        (b.asleep, b.woke, b.wait_err, b.late_runs, b.fexit_runs),
        (1, 1, 0, 0, 0),
        "runs asleep, woken, the wait's error, and runs of the links detached during the call"
    );
    drop(map);
    reload.ensure()?;
    drop(reload);
    diag!(
        "{tramp:?}, fexit beside it {fexit}: a program asleep outlived its link's detach and \
         held rkf_multi until it woke"
    );
    crate::multi::smoke().context("rkf_multi after reload")
}

/// rkf_testmod's parameter that wakes the programs waiting for a step.
const STEP: &str = "/sys/module/rkf_testmod/parameters/step";
/// Where those programs sleep.
const WAIT_STEP: &str = "bpf_rkf_testmod_wait_step";

/// Sets `step` to `n`.
fn step(n: u32) -> Result<()> {
    std::fs::write(STEP, n.to_string()).with_context(|| format!("write {n} to {STEP}"))
}

/// Wakes both stepped programs when the test ends, also on failure.
struct WakeSteps;

impl Drop for WakeSteps {
    fn drop(&mut self) {
        let _ = step(u32::MAX);
    }
}

/// Whether the BPF text symbol `name` (a generated trampoline's image) is in kallsyms:
/// an image's symbol goes when it is freed.
fn image_present(name: &str) -> Result<bool> {
    Ok(rkf::kallsyms::Kallsyms::load()?
        .symbols()
        .iter()
        .any(|s| s.module.as_deref() == Some("bpf") && s.name == name))
}

/// Polls `cond` every 50 ms for up to `secs` seconds; fails with `what` if it never held.
fn wait_for(secs: u64, what: &str, mut cond: impl FnMut() -> Result<bool>) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !cond()? {
        check!(Instant::now() < deadline, "{what}, after {secs} s");
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

/// A generated trampoline's image kept by its count of calls in flight alone.
///
/// Two fentry.s programs and a plain fentry after them, on one task's `getpgid(2)`, in
/// one generated trampoline without an exit (the counted shape: the count is raised
/// before the first program and lowered after the last). The first program sleeps in
/// `bpf_rkf_testmod_wait_step(1)`; the plain fentry's link, which alone holds its
/// program, is detached: the function gets new code in a new image, and the old table, which alone
/// holds the old image, goes with that link after an RCU tasks trace grace period, which
/// the first program's run holds off (checked: the detached program is still loaded 5 s
/// later). Woken, the first program's run ends and the second program's begins and
/// sleeps in `bpf_rkf_testmod_wait_step(2)`, in the old image still; its run is a read
/// section of its own, so the grace period ends now, the old table is freed (checked:
/// the detached program is freed with its link) and the old image retired with the call
/// in flight in it. Only the count keeps it then: it must still be there (its symbol in
/// kallsyms, the sleeping task's stack in it) 1 s after it was retired, when
/// rkf_multi's drain has looked at it several times. Woken, the second program ends,
/// the detached fentry does not run (its slot in the old image says its link is
/// detached; the link itself is freed by then, which the test kernel's KASAN would see
/// read), the call returns what `getpgid(2)` returns, and the old image is freed once
/// the call has left it.
pub(super) fn image_kept_by_its_count() -> Result<()> {
    rkf::modules::require("rkf_testmod")?;
    let funcs = target()?;
    let func = funcs[0].qualified_name();
    // SAFETY: getpgid(2) has no memory arguments.
    let pgid = unsafe { libc::getpgid(0) };
    check!(pgid > 0, "getpgid(0): {pgid}");
    step(0)?;
    let wake = WakeSteps;

    let caller = Caller::spawn()?;
    let pid = caller.tid as u32;
    let set_pid = |o: &mut crate::skel::multi_asleep::OpenMultiAsleepSkel<'_>| {
        o.maps
            .bss_data
            .as_deref_mut()
            .context("no .bss")?
            .target_pid = pid;
        Ok(())
    };
    let mut obj = MaybeUninit::uninit();
    let skel = skeleton::load::<MultiAsleepSkelBuilder>(&mut obj, "multi_asleep.bpf.c", set_pid)?;
    let map = MapHandle::try_from(&skel.maps.bss).context("the .bss map")?;
    // The plain fentry from an object of its own, so that its program is freed with its
    // link.
    let mut late_obj = MaybeUninit::uninit();
    let late_skel =
        skeleton::load::<MultiAsleepSkelBuilder>(&mut late_obj, "multi_asleep.bpf.c", set_pid)?;
    let late_map = MapHandle::try_from(&late_skel.maps.bss).context("the other .bss map")?;
    let attach = |prog| Link::attach(prog, &funcs, None).map_err(|e| anyhow::anyhow!("{e}"));
    let first = attach(&skel.progs.step1_fentry)?;
    let second = attach(&skel.progs.step2_fentry)?;
    let late = attach(&late_skel.progs.late_fentry)?;
    let late_prog = multi::links()?
        .iter()
        .find(|l| l.id == late.id)
        .map(|l| l.prog_id)
        .context("the plain fentry's link is not listed")?;
    // Its link holds the program; the object's other programs, sleepable ones, go now,
    // with an RCU tasks trace grace period of their own.
    drop(late_skel);
    check_tramps(&funcs, Tramp::Generated, "two fentry.s and an fentry")?;
    let caller_of = || -> Result<String> {
        multi::direct_callers()?
            .remove(&func)
            .with_context(|| format!("{func} has no direct caller"))
    };
    let old = caller_of()?;
    // The tables the attaches replaced, and the programs just closed, go after RCU tasks
    // trace grace periods: let them end before a program sleeps. A grace period still
    // running when the detach below asks for one makes that one wait for the next, which
    // the second program's sleep holds off too (seen: the detached program was then
    // freed only after the second program's run).
    std::thread::sleep(Duration::from_secs(3));

    // The first program asleep, in the old image.
    caller.go.send(()).context("starting the caller")?;
    let stack = caller.wait_asleep(WAIT_STEP, Tramp::Generated)?;
    check!(
        stack.iter().any(|f| f.starts_with(&format!("{old}+"))),
        "the first program sleeps, but not in {old}: {stack:?}"
    );
    let b = read_bss(&map)?;
    check_eq!(
        (b.step_asleep, b.step_woke),
        ([1, 0], [0, 0]),
        "runs asleep and woken of the two programs, the first asleep"
    );
    drop(late);
    let new = caller_of()?;
    check!(
        new != old && new.starts_with("rkf_multi_image_"),
        "{func} after the detach called through {new}, not a new image (the old one: {old})"
    );
    // Long enough for the RCU and RCU tasks grace periods before the RCU tasks trace one
    // (c-shim/rkf_multi_deferred.c), so that the latter starts while the first program
    // sleeps.
    std::thread::sleep(Duration::from_secs(5));
    check!(
        prog_loaded(late_prog)?,
        "the detached program was freed while the first program slept beside its link"
    );

    // The second program asleep, in the old image, which is then retired.
    step(1)?;
    wait_for(120, "the second program never started", || {
        let b = read_bss(&map)?;
        Ok(b.step_woke[0] == 1 && b.step_asleep[1] == 1)
    })?;
    caller.wait_asleep(WAIT_STEP, Tramp::Generated)?;
    wait_for(60, "the detached program was never freed", || {
        Ok(!prog_loaded(late_prog)?)
    })?;
    std::thread::sleep(Duration::from_secs(1));
    check!(
        image_present(&old)?,
        "{old}, retired with a call asleep in it, was freed"
    );
    let stack = kernel_stack(caller.tid)?;
    check!(
        stack.iter().any(|f| f.starts_with(&format!("{old}+"))),
        "the second program sleeps, but not in {old}: {stack:?}"
    );

    step(2)?;
    let b = caller.returned(pgid, &map)?;
    check_eq!(
        (b.step_asleep, b.step_woke, b.step_err),
        ([1, 1], [1, 1], [0, 0]),
        "runs asleep, woken, and the waits' errors of the two programs"
    );
    check_eq!(
        read_bss(&late_map)?.late_runs,
        0,
        "runs of the fentry detached during the call"
    );
    wait_for(
        30,
        "the old image was not freed once its call had left",
        || Ok(!image_present(&old)?),
    )?;
    drop((first, second));
    drop(wake);
    diag!("{old}: retired with a call asleep in it, kept by its count, freed once it left");
    Ok(())
}
