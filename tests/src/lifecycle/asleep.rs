// SPDX-License-Identifier: GPL-2.0

//! A sleepable program asleep inside a traced call: its link detached meanwhile, and
//! rkf_multi unloaded meanwhile; a generated trampoline's image retired while a call
//! sleeps in it ([`image_kept_by_its_count()`]); and a call asleep on the shared
//! trampoline while its function moves to a generated one ([`shared_exit_after_move()`]).
//!
//! The program (tests/progs/multi_asleep.bpf.c) sleeps in rkf_testmod's
//! `bpf_rkf_testmod_wait_step(1)` on one task's `getpgid(2)` until the test sets
//! rkf_testmod's parameter `step` to 1; a non-sleepable fexit program on the same function
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

use super::{
    blocked_in, bpf_text_symbols, kernel_stack, leaked_images, module_state, pin, task_stat, MULTI,
};
use crate::{
    check, check_eq, diag,
    kmod::{insmod_with, moddir, rmmod, rmmod_wait},
    multi::{
        held::Held,
        tramps::{check_tramps, Tramp},
    },
    skel::{
        multi_asleep::{types::bss, MultiAsleepSkel, MultiAsleepSkelBuilder},
        multi_filler::{types::bss as filler_bss, MultiFillerSkelBuilder},
    },
};
use rkf::{
    multi::{self, Func, Link},
    skeleton,
};

/// Where the programs sleep.
const WAIT: &str = "bpf_rkf_testmod_wait_step";
/// rkf_testmod's parameter that wakes them.
const STEP: &str = "/sys/module/rkf_testmod/parameters/step";

/// Sets `step` to `n`: the programs waiting for `n` or less wake.
fn step(n: u32) -> Result<()> {
    std::fs::write(STEP, n.to_string()).with_context(|| format!("write {n} to {STEP}"))
}

/// Wakes every program when the test ends, also on failure: a task asleep in one would
/// hold up the unload of rkf_multi, and the runner's exit, for two minutes.
struct Wake;

impl Wake {
    /// Sets `step` to 0, so that the programs sleep until the test moves it on, and
    /// returns the guard that wakes them all.
    fn from_step_0() -> Result<Self> {
        step(0)?;
        Ok(Self)
    }
}

impl Drop for Wake {
    fn drop(&mut self) {
        let _ = step(u32::MAX);
    }
}

/// The value of a program's .bss, read through the map: it outlives the skeleton while
/// the programs hold the map.
///
/// # Safety
///
/// `T` is the map's value type, a plain C struct of integers: any bytes are a `T`.
unsafe fn read_value<T>(map: &MapHandle) -> Result<T> {
    let v = map
        .lookup(&0u32.to_ne_bytes(), MapFlags::ANY)?
        .context("no .bss value")?;
    check_eq!(v.len(), size_of::<T>(), ".bss size");
    // SAFETY: `v` holds `size_of::<T>()` bytes, and any bytes are a `T` (the function's
    // contract).
    Ok(unsafe { std::ptr::read_unaligned(v.as_ptr().cast::<T>()) })
}

/// multi_asleep.bpf.c's .bss.
fn read_bss(map: &MapHandle) -> Result<bss> {
    // SAFETY: `bss` is the skeleton's type of the map's value, integers only.
    unsafe { read_value(map) }
}

/// multi_filler.bpf.c's .bss.
fn read_filler_bss(map: &MapHandle) -> Result<filler_bss> {
    // SAFETY: `filler_bss` is the skeleton's type of the map's value, integers only.
    unsafe { read_value(map) }
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
        // A frame reads `symbol+offset` (kernel_stack()).
        let via = |f: &String| Tramp::of(f.split('+').next().unwrap_or_default()) == Some(tramp);
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

/// multi_asleep.bpf.c loaded for `caller`'s calls, and its .bss map, which outlives the
/// skeleton.
fn load_for<'o>(
    obj: &'o mut MaybeUninit<libbpf_rs::OpenObject>,
    caller: &Caller,
) -> Result<(MultiAsleepSkel<'o>, MapHandle)> {
    let skel = skeleton::load::<MultiAsleepSkelBuilder>(obj, "multi_asleep.bpf.c", |o| {
        o.maps
            .bss_data
            .as_deref_mut()
            .context("no .bss")?
            .target_pid = caller.tid as u32;
        Ok(())
    })?;
    let map = MapHandle::try_from(&skel.maps.bss).context("the .bss map")?;
    Ok((skel, map))
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
    let attach = |prog| crate::multi::attach(prog, funcs, None);
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

/// What getpgid(2) returns to the calls of this process, which the calls of the tests
/// must return too.
fn own_pgid() -> Result<i32> {
    // SAFETY: getpgid(2) has no memory arguments.
    let pgid = unsafe { libc::getpgid(0) };
    check!(pgid > 0, "getpgid(0): {pgid}");
    Ok(pgid)
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
///    out, which this test cannot catch; [`image_kept_by_its_count()`] has the count
///    keep an image through a second program's sleep);
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
    let pgid = own_pgid()?;
    let wake = Wake::from_step_0()?;

    // 1. Detached while asleep.
    let caller = Caller::spawn()?;
    let mut obj = MaybeUninit::uninit();
    let (mut skel, map) = load_for(&mut obj, &caller)?;
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
    // Without the fexit no function is hooked any more; with it, its link hooks each.
    let enabled = multi::enabled_functions()?;
    for f in &funcs {
        check_eq!(
            crate::multi::refusals::listed(&enabled, f),
            fexit,
            "{} in ftrace's enabled_functions after the detaches",
            f.name
        );
    }
    // Time for the grace periods of links that no call had slept beside: the ones
    // detached must still be there when the call wakes (the test kernel's KASAN watches).
    std::thread::sleep(Duration::from_secs(3));
    check!(
        !caller.thread.is_finished(),
        "the call returned before the program was woken"
    );
    step(1)?;
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
    step(0)?;
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
        let refcnt = crate::multi::held::module_refcnt(MULTI)?;
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
    step(1)?;
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
    crate::multi::basic::smoke().context("rkf_multi after reload")
}

/// Whether the BPF text symbol `name` (a generated trampoline's image) is in kallsyms:
/// an image's symbol goes when it is freed.
fn image_present(name: &str) -> Result<bool> {
    Ok(!bpf_text_symbols(|s| s == name)?.is_empty())
}

/// The first two cpus this process may run on: the call goes in on one and out on the
/// other.
fn two_cpus() -> Result<(usize, usize)> {
    let set = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0))
        .context("sched_getaffinity")?;
    let mut cpus = (0..nix::sched::CpuSet::count()).filter(|&c| set.is_set(c).unwrap_or(false));
    match (cpus.next(), cpus.next()) {
        (Some(a), Some(b)) => Ok((a, b)),
        _ => bail!("the test moves a call from one cpu to another, and this process has one"),
    }
}

/// The cpus task `tid` of this process may run on, as a list
/// (/proc/self/task/TID/status, `Cpus_allowed_list`).
fn cpus_allowed(tid: i32) -> Result<String> {
    let path = format!("/proc/self/task/{tid}/status");
    let status = std::fs::read_to_string(&path).with_context(|| path.clone())?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .map(|v| v.trim().to_string())
        .with_context(|| format!("no Cpus_allowed_list in {path}"))
}

/// The cpu task `tid` of this process last ran on (/proc/self/task/TID/stat, field 39).
fn last_cpu(tid: i32) -> Result<usize> {
    let fields = task_stat(tid)?;
    fields
        .get(39 - 3)
        .and_then(|f| f.parse().ok())
        .with_context(|| format!("no cpu in the stat of task {tid}: {fields:?}"))
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
/// Two fentry.s programs and a plain fentry after them (multi_filler.bpf.c's, an object
/// of its own without sleepable programs), on one task's `getpgid(2)`, in one generated
/// trampoline without an exit (the counted shape: the count is raised before the first
/// program and lowered after the last). The test first waits until the images that the
/// attaches replaced are freed: the RCU tasks trace grace periods that freed their
/// tables have ended, and none is left running that the one asked for below would have
/// to wait behind (seen: it then waited for the next one, which the second program's
/// sleep held off).
///
/// The first program sleeps in `bpf_rkf_testmod_wait_step(1)`; the plain fentry's link,
/// which alone holds its program, is detached: the function gets new code in a new
/// image, and the old table, which alone holds the old image, goes with that link after
/// RCU, RCU tasks and RCU tasks trace grace periods, the last held off by the first
/// program's run (checked: the detached program is still loaded 5 s later, time for
/// the first two). Woken, the first program's run ends and the second program's begins
/// and sleeps in `bpf_rkf_testmod_wait_step(2)`, in the old image still; its run is a
/// read section of its own, so the grace period ends now, the old table is freed
/// (checked: the detached program is freed with its link) and the old image is retired
/// with the call in flight in it. Only the count keeps it then: it must stay there (its
/// symbol in kallsyms, looked up every 100 ms for 5 s, and the sleeping task's stack in
/// it then), while rkf_multi's drain looks at it at once and after 100, 200, 400, 800
/// and 1,600 ms (were the count 0, it would free it an RCU tasks grace period after one
/// of those looks).
///
/// The count is a counter per cpu. The task makes the call, and the increment, on one
/// cpu; while the first program sleeps, its cpu mask is changed to another cpu (checked:
/// at once), and the move itself waits for the program's run to end, which runs with
/// migration disabled (checked: the call that moves it has not returned 200 ms later),
/// so that the decrement, after the second program, is on the other cpu's counter
/// (checked: the task last ran there when the second program sleeps).
///
/// Woken, the second program ends, the detached fentry does not run (its slot in the
/// old image says its link is detached: its program and counters are freed by then,
/// which the test kernel's KASAN would see read), the call returns what `getpgid(2)`
/// returns, and the old image is freed once the call has left it.
pub(super) fn image_kept_by_its_count() -> Result<()> {
    rkf::modules::require("rkf_testmod")?;
    let funcs = target()?;
    let func = funcs[0].qualified_name();
    let pgid = own_pgid()?;
    let (cpu_in, cpu_out) = two_cpus()?;
    let wake = Wake::from_step_0()?;

    let caller = Caller::spawn()?;
    pin(caller.tid, cpu_in)?;
    let mut obj = MaybeUninit::uninit();
    let (skel, map) = load_for(&mut obj, &caller)?;
    let mut late_obj = MaybeUninit::uninit();
    let late_skel =
        skeleton::load::<MultiFillerSkelBuilder>(&mut late_obj, "multi_filler.bpf.c", |o| {
            let b = o.maps.bss_data.as_deref_mut().context("no .bss")?;
            b.target_pid = caller.tid as u32;
            b.target_ip = funcs[0].addr;
            Ok(())
        })?;
    let late_map = MapHandle::try_from(&late_skel.maps.bss).context("the filler's .bss map")?;
    let caller_of = || -> Result<String> {
        multi::direct_callers()?
            .remove(&func)
            .with_context(|| format!("{func} has no direct caller"))
    };
    let attach = |prog| crate::multi::attach(prog, &funcs, None);
    let first = attach(&skel.progs.step1_fentry)?;
    let replaced_first = caller_of()?;
    let second = attach(&skel.progs.step2_fentry)?;
    let replaced_second = caller_of()?;
    let late = attach(&late_skel.progs.filler)?;
    let late_prog = multi::links()?
        .iter()
        .find(|l| l.id == late.id)
        .map(|l| l.prog_id)
        .context("the plain fentry's link is not listed")?;
    // Its link holds the program.
    drop(late_skel);
    check_tramps(&funcs, Tramp::Generated, "two fentry.s and an fentry")?;
    let old = caller_of()?;
    for im in [&replaced_first, &replaced_second] {
        wait_for(
            60,
            &format!("{im}, replaced by an attach, was never freed"),
            || Ok(!image_present(im)?),
        )?;
    }

    // The first program asleep, in the old image.
    caller.go.send(()).context("starting the caller")?;
    let stack = caller.wait_asleep(WAIT, Tramp::Generated)?;
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
    check_eq!(
        last_cpu(caller.tid)?,
        cpu_in,
        "the cpu the call was made on"
    );
    drop(late);
    let new = caller_of()?;
    check!(
        new != old && new.starts_with("rkf_multi_image_"),
        "{func} after the detach called through {new}, not a new image (the old one: {old})"
    );
    std::thread::sleep(Duration::from_secs(5));
    check!(
        prog_loaded(late_prog)?,
        "the detached program was freed while the first program slept beside its link"
    );

    // Moved to the other cpu once the first program's run ends; the second program
    // asleep, in the old image, which is then retired.
    let tid = caller.tid;
    let mover = std::thread::spawn(move || pin(tid, cpu_out));
    let early = |mover: std::thread::JoinHandle<Result<()>>| {
        let r = mover.join().map_err(|_| anyhow::anyhow!("it panicked"));
        anyhow::anyhow!(
            "the move to cpu {cpu_out} returned while the first program's run, which runs \
             with migration disabled, had not ended: {:?}",
            r.and_then(|r| r)
        )
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while cpus_allowed(tid)? != cpu_out.to_string() {
        if mover.is_finished() {
            return Err(early(mover));
        }
        check!(
            Instant::now() < deadline,
            "the call's cpu mask never changed"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(200));
    if mover.is_finished() {
        return Err(early(mover));
    }
    step(1)?;
    wait_for(120, "the second program never started", || {
        let b = read_bss(&map)?;
        Ok(b.step_woke[0] == 1 && b.step_asleep[1] == 1)
    })?;
    caller.wait_asleep(WAIT, Tramp::Generated)?;
    match mover.join() {
        Ok(r) => r?,
        Err(_) => bail!("the thread moving the call panicked"),
    }
    check_eq!(
        last_cpu(caller.tid)?,
        cpu_out,
        "the cpu the call went on to, past the first program"
    );
    wait_for(
        60,
        "the detached program was not freed while the second program slept (the RCU tasks \
         trace grace period that frees it with the old table did not start during the \
         first program's sleep, or something else holds the table)",
        || Ok(!prog_loaded(late_prog)?),
    )?;
    // The drain looks at a retired image at once, and again after 100, 200, 400 ms and
    // on; one it finds with no call in flight is freed after an RCU tasks grace period.
    let kept = Instant::now();
    while kept.elapsed() < Duration::from_secs(5) {
        check!(
            image_present(&old)?,
            "{old}, retired with a call asleep in it, was freed"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
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
    let late_bss = read_filler_bss(&late_map)?;
    check_eq!(
        (late_bss.hits, late_bss.other),
        (0, 0),
        "runs of the fentry detached during the call"
    );
    wait_for(
        30,
        "the old image was not freed once its call had left",
        || Ok(!image_present(&old)?),
    )?;
    drop((first, second));
    drop(wake);
    diag!(
        "{old}: retired with a call asleep in it, kept by its count (in on cpu {cpu_in}, \
         out on cpu {cpu_out}), freed once it left"
    );
    Ok(())
}

/// A call in flight on the shared trampoline whose function moves to a generated one: on
/// the way out, the shared trampoline looks the function up in the table published then,
/// whose hash index holds only the functions that take the shared trampoline, none here,
/// and must find it by the binary search of the table (c-shim rkf_multi_search(), from
/// rkf_multi_lookup()), or the fexit program, attached all along, would miss the call.
///
/// Needs the kernel's fault injection (the test kernel): the sleepable program's link is
/// attached on `getpgid(2)` first, through a generated trampoline; then the fexit
/// program's with one slab allocation after another failing until its attach gets over a
/// failure by leaving the function on the shared trampoline, its generation failed
/// (checked). The call goes to sleep in the sleepable program, through the shared
/// trampoline (checked on its stack). A plain fentry program is attached meanwhile, on the
/// function and on [`NEIGHBOURS`], the wrappers of eight other syscalls, some below its
/// address and some above it (checked), whose attach generates every one's trampoline
/// (checked: their sites call them), so that the search has nine functions to narrow
/// down. Woken, the call ends its entry runs from the table it entered with (the late
/// fentry does not run on it), returns what `getpgid(2)` returns, and its fexit program
/// runs once and sees that value. rkf_multi's module references are what they were after.
pub(super) fn shared_exit_after_move() -> Result<()> {
    rkf::modules::require("rkf_testmod")?;
    Held::given_back(&[MULTI], shared_exit_after_move_once)
}

/// Syscall wrappers beside `__x64_sys_getpgid` in kernel/sys.c, which the caller does not
/// call; all with arguments (`__x64_sys_getppid`, of `SYSCALL_DEFINE0`, has no function
/// in the test kernel's BTF).
const NEIGHBOURS: [&str; 8] = [
    "__x64_sys_setpriority",
    "__x64_sys_getpriority",
    "__x64_sys_getresuid",
    "__x64_sys_setpgid",
    "__x64_sys_getsid",
    "__x64_sys_getrlimit",
    "__x64_sys_getrusage",
    "__x64_sys_umask",
];

fn shared_exit_after_move_once() -> Result<()> {
    let funcs = target()?;
    let neighbours = multi::resolve(&NEIGHBOURS)?.funcs;
    check_eq!(
        neighbours.len(),
        NEIGHBOURS.len(),
        "{NEIGHBOURS:?} resolved"
    );
    let at = funcs[0].addr;
    check!(
        neighbours.iter().any(|f| f.addr < at) && neighbours.iter().any(|f| f.addr > at),
        "{NEIGHBOURS:?} are not on both sides of __x64_sys_getpgid"
    );
    let around: Vec<Func> = funcs.iter().chain(&neighbours).cloned().collect();
    let pgid = own_pgid()?;
    let wake = Wake::from_step_0()?;
    let caller = Caller::spawn()?;
    let mut obj = MaybeUninit::uninit();
    let (skel, map) = load_for(&mut obj, &caller)?;
    let sleeper = crate::multi::attach(&skel.progs.asleep_fentry, &funcs, None)?;
    check_tramps(&funcs, Tramp::Generated, "fentry.s")?;
    let fexit =
        crate::multi::faults::attach_with_generation_failed(&skel.progs.asleep_fexit, &funcs)
            .context("the fexit link, its generation failing")?;
    caller.call_and_wait_asleep(Tramp::Shared)?;
    let late = crate::multi::attach(&skel.progs.late_fentry, &around, None)?;
    check_tramps(
        &around,
        Tramp::Generated,
        "fentry.s, fexit and fentry, the last attached with the call asleep",
    )?;
    step(1)?;
    let bss = caller.returned(pgid, &map)?;
    check_eq!(
        (bss.asleep, bss.woke, bss.wait_err),
        (1, 1, 0),
        "the sleepable program's run: asleep, woken, the wait's error"
    );
    check_eq!(
        bss.late_runs,
        0,
        "runs of the fentry attached after the call entered"
    );
    check_eq!(
        (bss.fexit_runs, bss.fexit_ret),
        (1, pgid as u64),
        "the fexit program's runs on the way out through the shared trampoline, and the \
         return value it saw"
    );
    drop((late, fexit, sleeper));
    drop(wake);
    Ok(())
}
