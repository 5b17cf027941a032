// SPDX-License-Identifier: GPL-2.0

//! Every slab allocation of an attach, and of a detach, failing in turn: the kernel's
//! fault injection (`/proc/thread-self/fail-nth` with failslab, Documentation/
//! fault-injection/ in the kernel tree) fails the Nth slab allocation (kmalloc() up to
//! two pages, kmem_cache_alloc()) of this thread, for N = 1, 2, ... until the operation
//! makes fewer than N.  Page allocations (vmalloc()'s pages, the images' text) are not
//! failed.  kmemleak's own objects are slab allocations too: when one fails, kmemleak
//! takes it from its pool, and the operation goes on unharmed.
//!
//! Beside a link A that stays, a link B of each kind ([`cases`]: an fentry, a session on
//! module functions, a sleepable fentry) is attached and detached so.  An attach that
//! fails for want of memory fails with `ENOMEM` and leaves nothing behind: no link, no
//! hooked function, no program run, A's runs and trampolines as they were.  A detach
//! cannot fail (nobody could be told): it must leave the link gone every time.  After
//! each sweep the reference counts of rkf_multi (and of rkf_testmod, whose functions the
//! session's link held) are what they were, the programs go once their fds are closed
//! (no reference leaked), and at the end the runner's kmemleak scan sees no leak.
//!
//! Only the test kernel has fault injection (Debian's config has `CONFIG_FAULT_INJECTION`
//! off), so the Makefile runs this test there only; on a kernel without it, it fails.
//! The same knobs make a generation fail on purpose for another test
//! ([`attach_with_generation_failed()`]).

mod cases;

use std::{
    collections::HashMap,
    fs::{File, OpenOptions},
    mem::MaybeUninit,
    os::{fd::AsFd, unix::fs::FileExt},
    path::PathBuf,
};

use anyhow::{bail, Context, Result};

use super::{
    held::Held,
    tramps::{callers, check_tramps, Tramp},
};
use crate::{check, check_eq, diag, lifecycle::MULTI};
use rkf::multi::{self, attach_request, Func, Link};
use rkf_core::abi::AttachRequest;

/// The module whose functions the session's link holds, beside rkf_multi.
const TESTMOD: &str = "rkf_testmod";

/// More allocations than an attach of a few functions makes: past it the test fails
/// instead of looping on.
const MAX_NTH: u32 = 5_000;

/// The functions of a sweep, in the order a run counts them: link A holds `..a_end`,
/// link B `b_start..b_end`, and they share those between; the functions past `b_end`,
/// which the run calls too, no link holds.  An attach of B moves A's functions `moves`
/// to new images: those B shares, and with them those of A's image that would keep it
/// alone, fewer than half of its functions (rust/multi/table.rs).
///
/// Each of link B's allocations fails in turn, and an attach allocates for each function
/// it hooks or moves: so the links are as small as the paths they take allow, which keeps
/// the test within CI's time under KASAN in TCG (with A on five functions and B on seven,
/// eleven for the module session, the test took 1,236 s on one machine, 4 minutes of
/// them a fourth sweep with rkf_multi reloaded with `generate=0`).
struct Layout {
    funcs: Vec<Func>,
    a_end: usize,
    b_start: usize,
    b_end: usize,
    moves: std::ops::Range<usize>,
}

impl Layout {
    /// Link A's functions.
    fn a(&self) -> &[Func] {
        &self.funcs[..self.a_end]
    }

    /// Link B's functions.
    fn b(&self) -> &[Func] {
        &self.funcs[self.b_start..self.b_end]
    }

    /// The functions' names, for messages.
    fn names(&self) -> String {
        let names: Vec<&str> = self.funcs.iter().map(|f| f.name.as_str()).collect();
        names.join(", ")
    }
}

/// One kind of link B, beside link A: their programs, their functions and a run of them.
trait Case {
    /// The kind of link B, for messages.
    fn name(&self) -> &'static str;
    /// The functions, and which of them each link holds.
    fn layout(&self) -> &Layout;
    /// Attaches link A, which the sweep keeps.
    fn attach_a(&self) -> Result<Link>;
    /// Link B's request; the case owns the arrays it points into.
    fn request_b(&self) -> AttachRequest;
    /// Calls each function once: the runs of link A's program and of link B's on each.
    fn run(&mut self) -> Result<(Vec<u64>, Vec<u64>)>;
}

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

/// Attaches `prog` to `funcs` (vmlinux functions) with one slab allocation after another
/// failing, the first, the second, ..., until an attach gets over its failure with every
/// one of `funcs` on the shared trampoline, its generation having failed: returns the
/// file that holds that link.  An attach that fails must fail with `ENOMEM`, and one that
/// succeeds must leave each function on one of rkf_multi's trampolines; one that left a
/// function on a generated trampoline is detached, and the next allocation tried.  An
/// attach with no failure injected fails the test: none of its allocations made the
/// generation fail.
pub(crate) fn attach_with_generation_failed(prog: &impl AsFd, funcs: &[Func]) -> Result<File> {
    let _knobs = Failslab::set()?;
    let nth = FailNth::open()?;
    let request = cases::Request::new(funcs, None);
    for n in 1..=MAX_NTH {
        let file = device()?;
        let mut req = request.of(prog);
        nth.arm(n)?;
        let r = attach_request(&file, &mut req);
        let fired = nth.disarm()?;
        match r {
            Err(e) => check_eq!(
                (e.raw_os_error(), fired),
                (Some(libc::ENOMEM), true),
                "attach with allocation {n} failing: errno, and whether the failure was \
                 injected ({e})"
            ),
            Ok(()) => {
                check!(
                    fired,
                    "none of the attach's {} allocations left its functions on the shared \
                     trampoline",
                    n - 1
                );
                let on = callers(funcs)?;
                let kinds: Vec<_> = on
                    .iter()
                    .map(|c| c.as_deref().and_then(Tramp::of))
                    .collect();
                check!(
                    kinds.iter().all(Option::is_some),
                    "attach with allocation {n} failing: the functions' callers {on:?}"
                );
                if kinds.iter().all(|&k| k == Some(Tramp::Shared)) {
                    return Ok(file);
                }
            }
        }
    }
    bail!(
        "no attach with one of its first {MAX_NTH} allocations failing left its functions \
         on the shared trampoline"
    )
}

/// A new file of rkf_multi's device, for one link.
fn device() -> Result<File> {
    Ok(OpenOptions::new()
        .read(true)
        .write(true)
        .open(multi::DEVICE)?)
}

/// The state with link A alone: a run counts A's program once on each of A's functions
/// and nothing else, A's functions call a generated rkf_multi trampoline (or the shared
/// one where a generation failed for want of memory and fell back to it), and no other
/// function is hooked.
fn only_a(case: &mut dyn Case, a: u64, what: &str) -> Result<()> {
    let ids: Vec<u64> = multi::links()?.iter().map(|l| l.id).collect();
    check_eq!(ids, vec![a], "{what}: rkf_multi's links");
    let (n, a_end) = (case.layout().funcs.len(), case.layout().a_end);
    check_eq!(
        case.run()?,
        (ones(n, 0, a_end), vec![0; n]),
        "{what}: runs of link A's and link B's programs on {}",
        case.layout().names()
    );
    check_hooks(&case.layout().funcs, a_end, what)
}

/// A run's count on each of `n` functions: 1 on `lo..hi`, 0 elsewhere.
fn ones(n: usize, lo: usize, hi: usize) -> Vec<u64> {
    (0..n).map(|i| u64::from(lo <= i && i < hi)).collect()
}

/// Checks that `funcs[..hooked]` call a generated rkf_multi trampoline (or the shared one
/// after a generation that failed for want of memory) and no other function of `funcs` is
/// hooked: not in ftrace's `enabled_functions` at all, direct call or not.
fn check_hooks(funcs: &[Func], hooked: usize, what: &str) -> Result<()> {
    // One read of enabled_functions serves both checks.
    let enabled = multi::enabled_functions()?;
    for f in &funcs[hooked..] {
        check!(
            !super::refusals::listed(&enabled, f),
            "{what}: {} is still in enabled_functions",
            f.name
        );
    }
    let callers: HashMap<String, String> = multi::parse_direct_callers(&enabled);
    for (i, f) in funcs.iter().enumerate() {
        let c = callers.get(&f.qualified_name()).map(String::as_str);
        let ok = match (i < hooked, c) {
            (false, c) => c.is_none(),
            (true, Some(c)) => c.starts_with("rkf_multi_image_") || c == "rkf_multi_tramp",
            (true, None) => false,
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

/// Checks that A's functions `moves` left the trampolines they had with A alone (`alone`,
/// of `funcs[..a_end]`), so that a detach moves them back.  (Whether the others keep
/// theirs depends on where the failures before left them: a function a failed generation
/// put on the shared trampoline gets an image of its own at the next change.)
fn check_moved(case: &dyn Case, alone: &[Option<String>], what: &str) -> Result<()> {
    let l = case.layout();
    let moves = l.moves.clone();
    let now = callers(&l.funcs[moves.clone()])?;
    for ((f, was), is) in l.funcs[moves.clone()].iter().zip(&alone[moves]).zip(&now) {
        check!(
            was != is,
            "{what}: {} did not move from {was:?} ({is:?})",
            f.name
        );
    }
    Ok(())
}

/// Every kind of link B, through generated trampolines.  Each sweep must give back every
/// program and module reference it took.
///
/// The shared trampoline is swept only where generation fails and an attach falls back
/// to it (some of the failures each sweep gets over), not with rkf_multi reloaded with
/// `generate=0` as well: that sweep (178 allocations with these links, 226 with the
/// larger ones before) took about 4 minutes of the test kernel's run, over CI's time, and
/// its table and ftrace paths are those the sweeps here fail.
pub(super) fn allocation_failures() -> Result<()> {
    Held::given_back(&[MULTI], || {
        let mut obj = MaybeUninit::uninit();
        let mut case = cases::Fentry::load(&mut obj)?;
        sweep(&mut case)
    })?;
    rkf::modules::require(TESTMOD)?;
    Held::given_back(&[MULTI, TESTMOD], || {
        let (mut obj, mut tobj) = (MaybeUninit::uninit(), MaybeUninit::uninit());
        let mut case = cases::ModuleSession::load(&mut obj, &mut tobj)?;
        sweep(&mut case)
    })?;
    Held::given_back(&[MULTI], || {
        let mut obj = MaybeUninit::uninit();
        let mut case = cases::Sleepable::load(&mut obj)?;
        sweep(&mut case)
    })
}

/// Link A stays; link B is attached with each of its allocations failing in turn, then
/// detached likewise.
fn sweep(case: &mut dyn Case) -> Result<()> {
    let _knobs = Failslab::set()?;
    let nth = FailNth::open()?;
    let l = case.layout();
    let (n_funcs, b_start, b_end) = (l.funcs.len(), l.b_start, l.b_end);
    let label = case.name();
    let a = case.attach_a()?;
    // A's trampolines, which a failed attach must leave exactly as they are.
    let mut a_callers = callers(case.layout().a())?;

    // Attach.
    let (mut failed, mut absorbed, mut n) = (0u32, 0u32, 1u32);
    loop {
        check!(
            n <= MAX_NTH,
            "{label}: attach: still failing at allocation {n}"
        );
        let file = device()?;
        let mut req = case.request_b();
        nth.arm(n)?;
        let r = attach_request(&file, &mut req);
        let fired = nth.disarm()?;
        let what = format!("{label}: attach with allocation {n} failing");
        match r {
            Err(e) => {
                check_eq!(
                    (e.raw_os_error(), fired),
                    (Some(libc::ENOMEM), true),
                    "{what}: errno, and whether the failure was injected ({e})"
                );
                // Checked with the file still open: a link it held would still be there.
                only_a(case, a.id, &what)?;
                check_eq!(
                    callers(case.layout().a())?,
                    a_callers,
                    "{what}: the trampolines of link A's functions"
                );
                drop(file);
                failed += 1;
            }
            Ok(()) => {
                // A failure the attach got over (a trampoline not generated, a free
                // waited for instead of deferred) or none: the link is whole.
                let a_end = case.layout().a_end;
                check_eq!(
                    case.run()?,
                    (ones(n_funcs, 0, a_end), ones(n_funcs, b_start, b_end)),
                    "{what}: attached; runs of link A's and link B's programs on {}",
                    case.layout().names()
                );
                check_hooks(&case.layout().funcs, b_end, &what)?;
                if !fired {
                    // Fewer than n allocations: nothing was failed, and every trampoline is
                    // a generated one.
                    check_tramps(&case.layout().funcs[..b_end], Tramp::Generated, &what)?;
                    check_moved(case, &a_callers, &what)?;
                    drop(file);
                    break;
                }
                absorbed += 1;
                drop(file);
                only_a(case, a.id, &format!("{what}, then detached"))?;
                // The detach gave A's functions new trampolines.
                a_callers = callers(case.layout().a())?;
            }
        }
        n += 1;
    }
    diag!("{label}: attach: {failed} allocations failed it with ENOMEM, {absorbed} it got over");
    check!(failed > 0, "{label}: attach: no allocation failed it");

    // Detach: the link's file closed with each allocation failing in turn.
    let mut n = 1u32;
    loop {
        check!(
            n <= MAX_NTH,
            "{label}: detach: still failing at allocation {n}"
        );
        let file = device()?;
        let mut req = case.request_b();
        let alone = callers(case.layout().a())?;
        attach_request(&file, &mut req).with_context(|| format!("{label}: attach of link B"))?;
        check_tramps(
            &case.layout().funcs[..b_end],
            Tramp::Generated,
            "link B attached",
        )?;
        check_moved(case, &alone, "link B attached")?;
        nth.arm(n)?;
        // The last reference: rkf_multi's release runs (from task work) before close()
        // returns.
        drop(file);
        let fired = nth.disarm()?;
        let what = format!("{label}: detach with allocation {n} failing");
        // A's functions may all get new trampolines: those B shared, and the others if
        // fewer than half of their image's functions keep it (rust/multi/table.rs).
        only_a(case, a.id, &what)?;
        if !fired {
            break;
        }
        n += 1;
    }
    diag!(
        "{label}: detach: {} allocations failed in turn, the link gone every time",
        n - 1
    );
    check!(n > 1, "{label}: detach: no allocation to fail");
    drop(a);
    Ok(())
}
