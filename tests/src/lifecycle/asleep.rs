// SPDX-License-Identifier: GPL-2.0

//! A sleepable program asleep inside a traced call: its link detached meanwhile, and
//! rkf_multi unloaded meanwhile.
//!
//! The program (tests/progs/multi_asleep.bpf.c) sleeps in rkf_testmod's
//! `bpf_rkf_testmod_wait_release()` on one task's `getpgid(2)` until the test sets
//! rkf_testmod's parameter `release`; a non-sleepable fexit program on the same function
//! records the call's return.  A generated trampoline counts such a call in flight from
//! entry to return, and runs every program of the function only while its link is
//! attached (`rkf_multi_run_sleepable_slot()`); the shared one counts its frame and looks
//! the function up again.

use std::{
    mem::MaybeUninit,
    sync::mpsc,
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};
use libbpf_rs::{MapCore, MapFlags, MapHandle};

use super::{blocked_in, kernel_stack, module_state, MULTI};
use crate::{
    check, check_eq, diag,
    kmod::{insmod_with, moddir, rmmod, rmmod_wait},
    multi::{check_tramps, Tramp},
    skel::multi_asleep::{types::bss, MultiAsleepSkelBuilder},
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
        let deadline = Instant::now() + Duration::from_secs(120);
        while !blocked_in(self.tid, WAIT)? {
            check!(
                !self.thread.is_finished(),
                "the call returned without the program sleeping"
            );
            check!(
                Instant::now() < deadline,
                "the program never slept in {WAIT}()"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let stack = kernel_stack(self.tid)?;
        let via = |f: &String| match tramp {
            Tramp::Generated => f.starts_with("rkf_multi_image_"),
            Tramp::Shared => f.starts_with("rkf_multi_tramp"),
        };
        check!(
            stack.iter().any(via),
            "the asleep task's stack shows no {tramp:?} trampoline: {stack:?}"
        );
        Ok(())
    }

    fn join(self) -> Result<i32> {
        match self.thread.join() {
            Ok(r) => Ok(r),
            Err(_) => bail!("the caller panicked"),
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
/// `generate=0`):
///
/// 1. The sleepable link is detached while its program sleeps: the detach returns, the
///    link is gone, the call stays asleep; once woken, the program ends its run, the call
///    returns what getpgid(2) returns, and the fexit program, still attached, runs once
///    and sees that value.
/// 2. Again asleep, both links and every fd of the programs closed: rmmod of rkf_multi is
///    refused (EAGAIN) while the program sleeps (the program pins the module until its
///    run ends and its link is freed, after an RCU tasks trace grace period); once woken,
///    rkf_multi unloads, the call returns the right value, and the fexit program, whose
///    link was detached during the call, never ran.  rkf_multi loads again.
pub(super) fn sleepable_program_asleep() -> Result<()> {
    rkf::modules::require("rkf_testmod")?;
    Tramp::run_both(asleep_through)
}

fn asleep_through(tramp: Tramp) -> Result<()> {
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
    let fexit =
        Link::attach(&skel.progs.asleep_fexit, &funcs, None).map_err(|e| anyhow::anyhow!("{e}"))?;
    let sleeper = Link::attach(&skel.progs.asleep_fentry, &funcs, None)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    check_tramps(&funcs, tramp, "fentry.s and fexit")?;
    caller.call_and_wait_asleep(tramp)?;
    let id = sleeper.id;
    drop(sleeper);
    check!(
        multi::links()?.iter().all(|l| l.id != id),
        "the sleepable link is still listed after its detach"
    );
    check!(
        !caller.thread.is_finished(),
        "the call returned before the program was woken"
    );
    release(true)?;
    check_eq!(
        caller.join()?,
        pgid,
        "getpgid(2) past the program that slept"
    );
    let b = read_bss(&map)?;
    check_eq!(
        (b.asleep, b.woke, b.wait_err, b.fexit_runs, b.fexit_ret),
        (1, 1, 0, 1, pgid as u64),
        "runs asleep, woken, the wait's error, fexit runs and the return value fexit saw"
    );
    drop(fexit);

    // 2. rmmod while asleep.
    release(false)?;
    let caller = Caller::spawn()?;
    {
        let b = skel.maps.bss_data.as_deref_mut().context("no .bss")?;
        (b.asleep, b.woke, b.wait_err, b.fexit_runs, b.fexit_ret) = (0, 0, 0, 0, 0);
        b.target_pid = caller.tid as u32;
    }
    let fexit =
        Link::attach(&skel.progs.asleep_fexit, &funcs, None).map_err(|e| anyhow::anyhow!("{e}"))?;
    let sleeper = Link::attach(&skel.progs.asleep_fentry, &funcs, None)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    check_tramps(&funcs, tramp, "fentry.s and fexit, again")?;
    caller.call_and_wait_asleep(tramp)?;
    drop((sleeper, fexit, skel));
    let e = rmmod(MULTI).err();
    check_eq!(
        e.and_then(|e| e.raw_os_error()),
        Some(libc::EAGAIN),
        "rmmod rkf_multi with a program asleep"
    );
    let state = module_state(MULTI)?;
    check_eq!(
        state.as_deref(),
        Some("live"),
        "rkf_multi after the refused rmmod"
    );
    release(true)?;
    drop(wake);
    rmmod_wait(MULTI, Duration::from_secs(120))?;
    check_eq!(
        caller.join()?,
        pgid,
        "getpgid(2) past the program that slept"
    );
    let b = read_bss(&map)?;
    check_eq!(
        (b.asleep, b.woke, b.wait_err, b.fexit_runs),
        (1, 1, 0, 0),
        "runs asleep, woken, the wait's error, and fexit runs of a link detached during the call"
    );
    drop(map);
    let params = match tramp {
        Tramp::Generated => c"",
        Tramp::Shared => c"generate=0",
    };
    let ko = moddir()?.join(format!("{MULTI}.ko"));
    insmod_with(&ko, params).context("insmod rkf_multi again")?;
    diag!(
        "{tramp:?}: a program asleep outlived its link's detach and held rkf_multi until it woke"
    );
    crate::multi::smoke().context("rkf_multi after reload")
}
