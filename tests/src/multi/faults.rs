// SPDX-License-Identifier: GPL-2.0

//! Every slab allocation of an attach, and of a detach, failing in turn: the kernel's
//! fault injection (`/proc/thread-self/fail-nth` with failslab, Documentation/
//! fault-injection/ in the kernel tree) fails the Nth slab allocation (kmalloc() up to
//! two pages, kmem_cache_alloc()) of this thread, for N = 1, 2, ... until the operation
//! makes fewer than N.  Page allocations (vmalloc()'s pages, the images' text) are not
//! failed.  kmemleak's own objects are slab allocations too: when one fails, kmemleak
//! takes it from its pool, and the operation goes on unharmed.  An attach that fails for
//! want of memory fails with `ENOMEM` and leaves nothing behind: no link, no hooked
//! function, no program run, the other link's runs and trampolines as they were.  A detach
//! cannot fail (nobody could be told): it must leave the link gone every time.  At the end
//! rkf_multi's reference count is what it was, the programs go once their fds are closed
//! (no reference leaked), and the runner's kmemleak scan sees no leak.
//!
//! Only the test kernel has fault injection (Debian's config has `CONFIG_FAULT_INJECTION`
//! off), so the Makefile runs this test there only; on a kernel without it, it fails.

use std::{
    collections::HashMap,
    fs::{File, OpenOptions},
    mem::MaybeUninit,
    os::{fd::AsFd, fd::AsRawFd, unix::fs::FileExt},
    path::PathBuf,
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};

use super::{attach, check_tramps, run_once, setup, MultiSkel, Tramp};
use crate::{check, check_eq, diag};
use rkf::multi::{self, attach_request, Func};
use rkf_core::abi::AttachRequest;

/// The fentry and fexit counters of multi.bpf.c's `count_fentry0` and `count_fexit0`.
const FENTRY0: usize = 0;
const FEXIT0: usize = 4;

/// More allocations than an attach of a few functions makes: past it the test fails
/// instead of looping on.
const MAX_NTH: u32 = 5_000;

/// failslab's debugfs knobs, set for the test and put back when dropped: count sleeping
/// allocations too (by default failslab leaves every `GFP_KERNEL` one alone) and print
/// nothing when failing one (by default a notice and a stack dump, which the VM runner
/// would take for a splat).
struct Failslab(Vec<(PathBuf, String)>);

impl Failslab {
    const DIR: &'static str = "/sys/kernel/debug/failslab";

    fn set() -> Result<Self> {
        let mut saved = Self(Vec::new());
        for (knob, value) in [("ignore-gfp-wait", "N"), ("verbose", "0")] {
            let path = PathBuf::from(Self::DIR).join(knob);
            let old = std::fs::read_to_string(&path).with_context(|| {
                format!(
                    "{}: the kernel has no failslab (CONFIG_FAILSLAB, \
                     CONFIG_FAULT_INJECTION_DEBUG_FS; the test flavour has them)",
                    path.display()
                )
            })?;
            std::fs::write(&path, value).with_context(|| format!("{}", path.display()))?;
            saved.0.push((path, old.trim().to_owned()));
        }
        Ok(saved)
    }
}

impl Drop for Failslab {
    fn drop(&mut self) {
        for (path, old) in self.0.drain(..).rev() {
            if let Err(e) = std::fs::write(&path, &old) {
                diag!("{} not put back to {old}: {e}", path.display());
            }
        }
    }
}

/// This thread's `/proc/thread-self/fail-nth`, open once: arming and reading it then
/// allocates nothing itself.  Disarmed when dropped, on the way out of a failure too.
struct FailNth(File);

impl FailNth {
    fn open() -> Result<Self> {
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .open("/proc/thread-self/fail-nth")
            .context("/proc/thread-self/fail-nth: the kernel has no CONFIG_FAULT_INJECTION")?;
        Ok(Self(f))
    }

    /// Makes the `n`th allocation of this thread from now fail.
    fn arm(&self, n: u32) -> Result<()> {
        self.0
            .write_at(n.to_string().as_bytes(), 0)
            .context("arming fail-nth")?;
        Ok(())
    }

    /// Disarms it; returns whether the failure was injected (the count reached 0).
    fn disarm(&self) -> Result<bool> {
        let mut buf = [0u8; 16];
        let read = self.0.read_at(&mut buf, 0);
        self.0.write_at(b"0", 0).context("disarming fail-nth")?;
        let n = read.context("reading fail-nth")?;
        let left: u32 = std::str::from_utf8(&buf[..n])?
            .trim()
            .parse()
            .context("fail-nth")?;
        Ok(left == 0)
    }
}

impl Drop for FailNth {
    fn drop(&mut self) {
        if let Err(e) = self.0.write_at(b"0", 0) {
            diag!("fail-nth not disarmed: {e}");
        }
    }
}

/// `/sys/module/rkf_multi/refcnt`.
fn refcnt() -> Result<u64> {
    let s = std::fs::read_to_string("/sys/module/rkf_multi/refcnt")?;
    Ok(s.trim().parse()?)
}

/// A new file of rkf_multi's device, for one link.
fn device() -> Result<File> {
    Ok(OpenOptions::new()
        .read(true)
        .write(true)
        .open(multi::DEVICE)?)
}

/// The attach request of `prog` on `funcs` (vmlinux functions, no cookies).
fn request(prog: &impl AsFd, ids: &[u32], addrs: &[u64]) -> AttachRequest {
    AttachRequest {
        prog_fd: prog.as_fd().as_raw_fd() as u32,
        cnt: ids.len() as u32,
        btf_ids: ids.as_ptr() as u64,
        addrs: addrs.as_ptr() as u64,
        ..AttachRequest::default()
    }
}

/// The direct callers of `funcs`: the trampoline each one's site calls, if any.
fn callers(funcs: &[Func]) -> Result<Vec<Option<String>>> {
    let all: HashMap<String, String> = multi::direct_callers()?;
    Ok(funcs
        .iter()
        .map(|f| all.get(&f.qualified_name()).cloned())
        .collect())
}

/// The state with link A (`count_fexit0` on `funcs[..5]`) alone: one run counts A's fexit
/// once on each of its functions and nothing else, A's functions call an rkf_multi
/// trampoline (`tramp`'s kind, or the shared one where a generation failed for want of
/// memory and fell back to it), and no other function is hooked.
fn only_a(
    skel: &mut MultiSkel<'_>,
    funcs: &[Func],
    a: u64,
    tramp: Tramp,
    what: &str,
) -> Result<()> {
    let ids: Vec<u64> = multi::links()?.iter().map(|l| l.id).collect();
    check_eq!(ids, vec![a], "{what}: rkf_multi's links");
    let bss = run_once(skel)?;
    let fexit: Vec<u64> = (0..funcs.len()).map(|i| u64::from(i < 5)).collect();
    check_eq!(
        (
            bss.counts[FENTRY0][..funcs.len()].to_vec(),
            bss.counts[FEXIT0][..funcs.len()].to_vec()
        ),
        (vec![0; funcs.len()], fexit),
        "{what}: runs of the fentry and the fexit program on bpf_fentry_test1..9"
    );
    check_hooks(funcs, 5, tramp, what)
}

/// Checks that `funcs[..hooked]` call an rkf_multi trampoline (of `tramp`'s kind, or the
/// shared one after a generation that failed for want of memory) and no other function of
/// `funcs` is hooked: not in ftrace's `enabled_functions` at all, direct call or not.
fn check_hooks(funcs: &[Func], hooked: usize, tramp: Tramp, what: &str) -> Result<()> {
    // One read of enabled_functions serves both checks.
    let enabled = std::fs::read_to_string(multi::tracefs()?.join("enabled_functions"))?;
    for f in &funcs[hooked..] {
        let listed = enabled.lines().any(|l| {
            l.strip_prefix(f.name.as_str())
                .is_some_and(|rest| rest.starts_with([' ', '\t']))
        });
        check!(!listed, "{what}: {} is still in enabled_functions", f.name);
    }
    let callers: HashMap<String, String> = multi::parse_direct_callers(&enabled);
    for (i, f) in funcs.iter().enumerate() {
        let c = callers.get(&f.qualified_name()).map(String::as_str);
        let ok = match (i < hooked, tramp, c) {
            (false, _, c) => c.is_none(),
            (true, Tramp::Shared, c) => c == Some("rkf_multi_tramp"),
            (true, Tramp::Generated, Some(c)) => {
                c.starts_with("rkf_multi_image_") || c == "rkf_multi_tramp"
            }
            (true, Tramp::Generated, None) => false,
        };
        check!(
            ok,
            "{what}: {} called through {}",
            f.name,
            c.unwrap_or("nothing")
        );
    }
    Ok(())
}

/// Checks that through generated trampolines the functions link B shares with A
/// (bpf_fentry_test3..5) moved off the trampolines they had with A alone (`alone`), so
/// that a detach moves them back; through the shared one they stay on it.
fn check_moved(funcs: &[Func], alone: &[Option<String>], tramp: Tramp, what: &str) -> Result<()> {
    let now = callers(&funcs[2..5])?;
    for (i, (was, is)) in alone[2..5].iter().zip(&now).enumerate() {
        let moved = was != is;
        check_eq!(
            moved,
            tramp == Tramp::Generated,
            "{what}: {} moved from {was:?} to {is:?}",
            funcs[2 + i].name
        );
    }
    Ok(())
}

/// Through generated trampolines, then the shared one: link A, an fexit on
/// bpf_fentry_test1..5, stays; link B, an fentry on bpf_fentry_test3..9 (three functions
/// shared with A, whose generated trampolines change, and four hooked anew), is attached
/// with each of its allocations failing in turn, then detached likewise.
pub(super) fn allocation_failures() -> Result<()> {
    Tramp::run_both(attach_detach)
}

fn attach_detach(tramp: Tramp) -> Result<()> {
    let progs_before: Vec<u32> = super::prog_ids();
    let before = refcnt()?;
    faults(tramp)?;
    // Nothing held: rkf_multi's references come back to what they were (deferred frees
    // run after grace periods), and every program of the skeleton goes once its fds are
    // closed.
    let start = Instant::now();
    loop {
        let now = refcnt()?;
        let left: Vec<u32> = super::prog_ids()
            .into_iter()
            .filter(|i| !progs_before.contains(i))
            .collect();
        if now == before && left.is_empty() {
            return Ok(());
        }
        if start.elapsed() > Duration::from_secs(20) {
            bail!(
                "20 s after the test: rkf_multi's refcnt is {now} ({before} before), programs \
                 still loaded (leaked references): {left:?}"
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn faults(tramp: Tramp) -> Result<()> {
    let mut obj = MaybeUninit::uninit();
    let (mut skel, funcs) = setup(&mut obj)?;
    let _knobs = Failslab::set()?;
    let nth = FailNth::open()?;
    let a = attach(&skel.progs.count_fexit0, &funcs[..5], None)?;
    // A's trampolines, which a failed attach must leave exactly as they are.
    let mut a_callers = callers(&funcs[..5])?;
    let b_funcs = &funcs[2..];
    let ids: Vec<u32> = b_funcs.iter().map(|f| f.btf_id).collect();
    let addrs: Vec<u64> = b_funcs.iter().map(|f| f.addr).collect();

    // Attach.
    let (mut failed, mut absorbed, mut n) = (0u32, 0u32, 1u32);
    loop {
        check!(n <= MAX_NTH, "attach: still failing at allocation {n}");
        let file = device()?;
        let mut req = request(&skel.progs.count_fentry0, &ids, &addrs);
        nth.arm(n)?;
        let r = attach_request(&file, &mut req);
        let fired = nth.disarm()?;
        let what = format!("attach with allocation {n} failing");
        match r {
            Err(e) => {
                check_eq!(
                    (e.raw_os_error(), fired),
                    (Some(libc::ENOMEM), true),
                    "{what}: errno, and whether the failure was injected ({e})"
                );
                // Checked with the file still open: a link it held would still be there.
                only_a(&mut skel, &funcs, a.id, tramp, &what)?;
                check_eq!(
                    callers(&funcs[..5])?,
                    a_callers,
                    "{what}: the trampolines of link A's functions"
                );
                drop(file);
                failed += 1;
            }
            Ok(()) => {
                // A failure the attach got over (a trampoline not generated, a free
                // waited for instead of deferred) or none: the link is whole.
                let bss = run_once(&mut skel)?;
                let want = |lo: usize, hi: usize| -> Vec<u64> {
                    (0..funcs.len())
                        .map(|i| u64::from(lo <= i && i < hi))
                        .collect()
                };
                check_eq!(
                    (
                        bss.counts[FENTRY0][..funcs.len()].to_vec(),
                        bss.counts[FEXIT0][..funcs.len()].to_vec()
                    ),
                    (want(2, 9), want(0, 5)),
                    "{what}: attached; runs of the fentry and the fexit program"
                );
                check_hooks(&funcs, funcs.len(), tramp, &what)?;
                if !fired {
                    // Fewer than n allocations: nothing was failed, and every trampoline is
                    // of its kind.
                    check_tramps(&funcs, tramp, &what)?;
                    check_moved(&funcs, &a_callers, tramp, &what)?;
                    drop(file);
                    break;
                }
                absorbed += 1;
                drop(file);
                only_a(
                    &mut skel,
                    &funcs,
                    a.id,
                    tramp,
                    &format!("{what}, then detached"),
                )?;
                // The detach gave A's functions new trampolines.
                a_callers = callers(&funcs[..5])?;
            }
        }
        n += 1;
    }
    diag!("{tramp:?}: attach: {failed} allocations failed it with ENOMEM, {absorbed} it got over");
    check!(failed > 0, "attach: no allocation failed it");

    // Detach: the link's file closed with each allocation failing in turn.
    let mut n = 1u32;
    loop {
        check!(n <= MAX_NTH, "detach: still failing at allocation {n}");
        let file = device()?;
        let mut req = request(&skel.progs.count_fentry0, &ids, &addrs);
        let alone = callers(&funcs[..5])?;
        attach_request(&file, &mut req).context("attach of link B")?;
        check_tramps(&funcs, tramp, "link B attached")?;
        check_moved(&funcs, &alone, tramp, "link B attached")?;
        nth.arm(n)?;
        // The last reference: rkf_multi's release runs (from task work) before close()
        // returns.
        drop(file);
        let fired = nth.disarm()?;
        let what = format!("detach with allocation {n} failing");
        // A's functions may all get new trampolines: those B shared, and the others if
        // fewer than half of their image's functions keep it (rust/multi/table.rs).
        only_a(&mut skel, &funcs, a.id, tramp, &what)?;
        if !fired {
            break;
        }
        n += 1;
    }
    diag!(
        "{tramp:?}: detach: {} allocations failed in turn, the link gone every time",
        n - 1
    );
    check!(n > 1, "detach: no allocation to fail");

    drop(a);
    Ok(())
}
