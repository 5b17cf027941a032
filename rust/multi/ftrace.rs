// SPDX-License-Identifier: GPL-2.0

//! rkf_multi in ftrace: its one direct `ftrace_ops`, the sites of functions, and the
//! batched updates that hook, move and unhook them.
//!
//! An operation turns the routes of the published table (each traced function's site and
//! the trampoline it calls) into those of the next; [`Updates`] is the difference,
//! computed by `rkf_core::multi::plan_updates()`, and each kind is a run of calls of
//! `update_ftrace_direct_add()`, `_mod()` or `_del()` over the sites it names (export
//! patch 0002/0003), each sized by the time the one before it took
//! (`rkf_core::multi::next_batch()`).

use kernel::{
    bindings,
    error::to_result,
    prelude::*,
    sync::atomic::{Atomic, Relaxed},
    time::{delay::fsleep, Delta, Instant, Monotonic},
    types::Opaque,
};

use super::{area::AreaVec, shared};
use crate::{
    multi_batch,
    multi_table::{self, Route, Update},
    rkf_h,
};

/// The ftrace site of the function at `addr`, if ftrace can hook it.
pub(crate) fn site_of(addr: u64) -> Option<u64> {
    // SAFETY: any address may be asked about.
    let site = unsafe { bindings::ftrace_location(addr as usize) };
    (site != 0).then_some(site as u64)
}

/// Whether another direct trampoline than rkf_multi's (an in-kernel BPF trampoline, for
/// example) owns `site`; for a site no link of rkf_multi holds.
pub(crate) fn site_is_taken(site: u64) -> bool {
    // SAFETY: any site may be asked about; the answer is a trampoline address or 0.
    unsafe { bindings::ftrace_find_rec_direct(site as usize) != 0 }
}

/// rkf_multi's direct `ftrace_ops`: `update_ftrace_direct_add()` registers it with its
/// first site, the anchor's (c-shim's `rkf_multi_anchor()`, hooked before the first
/// link's sites), and `update_ftrace_direct_del()` unregisters it with its last, the
/// anchor's, when the module unloads.  Without the anchor, the detach of the last link
/// unregistered it, and ftrace_shutdown() waited for an RCU tasks rude and an RCU tasks
/// grace period there (for an ops outside the core kernel's data).
///
/// # Invariants
///
/// `ops` is zeroed or in ftrace's hands; while its filter has sites, ftrace calls the
/// trampolines they were given, so the ops outlives every link (the module state drops
/// it after everything but the sleepable template's registration, which it does not
/// need).  `anchored` says whether the anchor's site is in its filter.  Every update
/// through it, and every use of `first` and `anchored`, runs under the registry's lock
/// (through [`super::registry::Services`], which only `Registry::attach()` and
/// `Registry::detach()` use, with `&mut Registry`), or in its drop, when nothing else
/// reaches it.
#[pin_data(PinnedDrop)]
pub(crate) struct FtraceOps {
    #[pin]
    ops: Opaque<bindings::ftrace_ops>,
    /// The size of the first update of the next hook or unhook run
    /// (`rkf_core::multi::first_batch()`).
    first: Atomic<usize>,
    anchored: Atomic<bool>,
}

// SAFETY: rkf_multi's uses of the ops are serialised by the registry's lock (type
// invariant): `update_ftrace_direct_del()` and `_mod()` read the ops before they take
// ftrace's `direct_mutex`, which serialises them only against other ftrace users.
unsafe impl Sync for FtraceOps {}
// SAFETY: the ops is not tied to a task.
unsafe impl Send for FtraceOps {}

impl FtraceOps {
    /// A zeroed ops, as `update_ftrace_direct_add()` wants one to register.
    pub(crate) fn new() -> impl PinInit<Self> {
        // INVARIANT: zeroed.
        pin_init!(Self {
            ops <- Opaque::zeroed(),
            first: Atomic::new(multi_batch::BATCH_FIRST),
            anchored: Atomic::new(false),
        })
    }

    /// The anchor's site, with the shared trampoline: nothing calls the anchor, and if
    /// anything did, the trampoline would find no function of that site to run.
    fn anchor_hash() -> Result<Hash> {
        let addr = rkf_h::rkf_multi_anchor as *const () as usize as u64;
        let site = site_of(addr).ok_or(ENOENT)?;
        let hash = Hash::new(1)?;
        hash.add(site, shared::address_of(0))?;
        Ok(hash)
    }

    /// Hooks the anchor, if it is not yet: the ops then stays registered until the module
    /// unloads.  Without it (no memory), the ops is unregistered with the last link's
    /// sites and registered again with the next link's, as if there were no anchor.
    fn anchor(&self) {
        if !self.anchored.load(Relaxed) {
            // SAFETY: the shared trampoline is the module's text, and the anchor's site is
            // unhooked before the module's text goes (the drop below).
            let hooked = Self::anchor_hash().and_then(|h| unsafe { self.update(Update::Hook, &h) });
            self.anchored.store(hooked.is_ok(), Relaxed);
        }
    }

    /// Applies `op` to `sites`, each with its trampoline in `tramps`, in ftrace updates
    /// each sized by `rkf_core::multi::next_batch()` from the time the one before took
    /// (so that none keeps this task from a quiescent state for long), the first of a
    /// hook or unhook run by `rkf_core::multi::first_batch()` from the last update of
    /// the hook or unhook run before (a move run's by `BATCH_FIRST`), with an RCU tasks
    /// quiescent state before each.  All or nothing: when an update (or the
    /// memory for the next one) fails, the updates before it are undone (a lack of
    /// memory for that waited out), and only if undoing fails otherwise does a site stay
    /// changed ([`Failed::partial`]).  A site that
    /// moves never misses a call: ftrace calls through its list function while
    /// trampolines change.  `update_ftrace_direct_del()` checks each site's current
    /// trampoline, `update_ftrace_direct_mod()` does not (and skips sites that are not
    /// direct calls).
    ///
    /// Fails with `EINVAL` when a site to hook has another direct trampoline (or, to
    /// unhook, is not rkf_multi's with that trampoline), or `ENOMEM`.
    ///
    /// # Safety
    ///
    /// Every trampoline a site may be pointed to is code that can be called at that site,
    /// and stays so while the site may call it and while a call is in it: until the site
    /// is moved off or unhooked, an RCU tasks grace period after, and, for a trampoline
    /// that calls the function or runs sleepable programs, until every call that entered
    /// it has left.  Those are the trampolines of `tramps` for a hook or a move and, as a
    /// failure undoes what was done, those the sites have now for a move or an unhook.
    unsafe fn apply(
        &self,
        op: Update,
        (sites, tramps): &(AreaVec<u64>, AreaVec<u64>),
    ) -> Result<(), Failed> {
        if op == Update::Hook && !sites.is_empty() {
            self.anchor();
        }
        // The updates applied, each with the hash that undoes it for a move.  Each but
        // the last has at least `BATCH_MIN` sites.
        let mut done = AreaVec::<(Hash, Option<Hash>)>::with_capacity(
            sites.len().div_ceil(multi_batch::BATCH_MIN),
            GFP_KERNEL,
        )?;
        // Moves start small whatever came before: each also registers and unregisters a
        // temporary ops on its sites, and with every function traced they cost up to
        // milliseconds a site (rkf_core::multi::first_batch()).
        let carried = op != Update::Move;
        let first = if carried {
            self.first.load(Relaxed)
        } else {
            multi_batch::BATCH_FIRST
        };
        let (mut at, mut size) = (0, first);
        while at < sites.len() {
            let end = sites.len().min(at + size);
            let batch = match (sites.get(at..end), tramps.get(at..end)) {
                (Some(sites), Some(tramps)) => Self::batch(op, sites, tramps),
                _ => Err(EINVAL),
            };
            let result = batch.and_then(|batch| {
                // Room was made for every batch: no memory is asked for here.
                done.push_within_capacity(batch).map_err(|_| EINVAL)?;
                // Before every update, the first included: the one before it may have
                // been the last of another run (an attach hooks, then moves).
                rkf_h::rkf_multi_tasks_rcu_qs();
                let start = Instant::<Monotonic>::now();
                let (hash, _) = done.last().ok_or(EINVAL)?;
                // SAFETY: `hash` points the batch's sites to trampolines of `tramps`, which
                // the caller keeps as the function's contract says.
                if let Err(err) = unsafe { self.update(op, hash) } {
                    done.pop();
                    return Err(err);
                }
                let took = u64::try_from(start.elapsed().as_nanos()).unwrap_or(0);
                size = multi_batch::next_batch(end - at, took);
                if carried {
                    self.first
                        .store(multi_batch::first_batch(end - at, took), Relaxed);
                }
                Ok(())
            });
            if let Err(err) = result {
                return Err(Failed {
                    err,
                    // SAFETY: `done` puts the sites back on the trampolines they had,
                    // which the caller keeps as the function's contract says.
                    partial: !unsafe { self.undo(op, &done) },
                });
            }
            at = end;
        }
        Ok(())
    }

    /// The hash of one update of `op` on `sites` (each with its trampoline in
    /// `tramps`), and for a move the hash that puts the sites back.
    fn batch(op: Update, sites: &[u64], tramps: &[u64]) -> Result<(Hash, Option<Hash>)> {
        let hash = Hash::new(sites.len())?;
        let back = match op {
            Update::Move => Some(Hash::new(sites.len())?),
            Update::Hook | Update::Unhook => None,
        };
        for (&site, &tramp) in sites.iter().zip(tramps.iter()) {
            hash.add(site, shared::address_of(tramp))?;
            if let Some(back) = &back {
                // The site's trampoline now.  The site is rkf_multi's, and by convention
                // (ftrace does not check the ops of a move) only rkf_multi moves it,
                // under the registry's lock.
                // SAFETY: any site may be asked about: ftrace_find_rec_direct() reads
                // ftrace's direct hash without sleeping, and ftrace frees a replaced hash
                // after an RCU tasks grace period.
                let now = unsafe { bindings::ftrace_find_rec_direct(site as usize) };
                back.add(site, now as u64)?;
            }
        }
        Ok((hash, back))
    }

    /// Undoes the updates `done` of `op`, the last first.  Returns whether every one was
    /// undone.  Each update copies ftrace's hashes, so an undo may fail for want of
    /// memory as the update it undoes did: that is waited out ([`wait_out_enomem()`]), as
    /// a detach waits (rust/multi/registry.rs), so that a lack of memory never leaves a
    /// site changed.  Undoing restores what ftrace had: it fails otherwise only if
    /// ftrace is broken.
    ///
    /// # Safety
    ///
    /// The trampolines the sites of `done` had before it (those of the entries of an
    /// unhook, and a move's hash back) are kept as [`FtraceOps::apply()`] says.
    unsafe fn undo(&self, op: Update, done: &[(Hash, Option<Hash>)]) -> bool {
        let mut undone = true;
        for (hash, back) in done.iter().rev() {
            let result = wait_out_enomem(
                format_args!("undoing a failed ftrace update"),
                |e: &Error| *e == ENOMEM,
                || {
                    rkf_h::rkf_multi_tasks_rcu_qs();
                    // SAFETY: undoing a hook unhooks; the trampolines of `hash` (an unhook
                    // undone) and of `back` (a move undone) are kept by our caller.
                    unsafe {
                        match (op, back) {
                            (Update::Hook, _) => self.update(Update::Unhook, hash),
                            (Update::Unhook, _) => self.update(Update::Hook, hash),
                            (Update::Move, Some(back)) => self.update(Update::Move, back),
                            (Update::Move, None) => Err(EINVAL),
                        }
                    }
                },
            );
            undone &= result.is_ok();
        }
        undone
    }

    /// One ftrace update of `op` with the entries of `hash`.
    ///
    /// # Safety
    ///
    /// For a hook or a move, the trampoline of each entry of `hash` is code that can be
    /// called at its site, kept as [`FtraceOps::apply()`] says.
    unsafe fn update(&self, op: Update, hash: &Hash) -> Result {
        let ops = self.ops.get();
        // SAFETY: `ops` is ours (type invariant) and `hash` a valid hash that outlives
        // the call, whose trampolines the caller keeps callable.  Adding and removing
        // copy what ftrace keeps of it; moving lends it to a temporary ops of ftrace's,
        // registered and unregistered within the call (kernel/trace/ftrace.c,
        // update_ftrace_direct_mod()), and nothing reads it after: the kernel's own
        // caller frees its hash the same way
        // (kernel/bpf/trampoline.c, direct_ops_mod()).
        to_result(unsafe {
            match op {
                Update::Hook => bindings::update_ftrace_direct_add(ops, hash.0),
                Update::Move => bindings::update_ftrace_direct_mod(ops, hash.0, true),
                Update::Unhook => bindings::update_ftrace_direct_del(ops, hash.0),
            }
        })
    }
}

/// Runs `step` until it succeeds, or fails otherwise than for want of memory
/// (`no_memory`): a lack of memory is waited out, every 10 ms, and each second of it is
/// reported as `what`'s.  For what cannot fail, or be left half-done: a detach, an
/// undo, the unload.  The caller's step changes nothing when it fails for want of memory.
pub(crate) fn wait_out_enomem<T, E>(
    what: core::fmt::Arguments<'_>,
    no_memory: impl Fn(&E) -> bool,
    mut step: impl FnMut() -> Result<T, E>,
) -> Result<T, E> {
    const WAIT_MS: u32 = 10;
    const REPORT_EVERY: u32 = 1000 / WAIT_MS;
    let mut tries = 0u32;
    loop {
        match step() {
            Err(e) if no_memory(&e) => {
                tries = tries.saturating_add(1);
                if tries % REPORT_EVERY == 0 {
                    pr_warn!(
                        "{}: no memory for {} s, still trying\n",
                        what,
                        tries / REPORT_EVERY
                    );
                }
                fsleep(Delta::from_millis(WAIT_MS.into()));
            }
            r => return r,
        }
    }
}

/// An update that failed.
#[derive(Debug)]
pub(crate) struct Failed {
    /// The error of the batch that failed.
    pub(crate) err: Error,
    /// Undoing the batches before it failed too: some of their sites stay changed.
    pub(crate) partial: bool,
}

impl From<Error> for Failed {
    /// A failure before any site changed.
    fn from(err: Error) -> Self {
        Self {
            err,
            partial: false,
        }
    }
}

impl From<kernel::alloc::AllocError> for Failed {
    fn from(_: kernel::alloc::AllocError) -> Self {
        ENOMEM.into()
    }
}

#[pinned_drop]
impl PinnedDrop for FtraceOps {
    fn drop(self: Pin<&mut Self>) {
        // No link is left; the anchor's is the last site, and unhooking it unregisters
        // the ops.  The module's text goes after this, with the ops: only a lack of
        // memory is waited out (ftrace's other errors mean its state is not what
        // rkf_multi left, and are reported).
        if self.anchored.load(Relaxed) {
            if let Err(e) = wait_out_enomem(
                format_args!("unhooking rkf_multi_anchor at unload"),
                |e: &Error| *e == ENOMEM,
                // SAFETY: an unhook points no site to a trampoline.
                || Self::anchor_hash().and_then(|h| unsafe { self.update(Update::Unhook, &h) }),
            ) {
                pr_err!("unhooking rkf_multi_anchor at unload failed: {:?}\n", e);
            }
        }
        // Free what ftrace kept of its filters (it warns if the ops were still
        // registered).
        // SAFETY: the ops is ours (type invariant), and no link uses it any more.
        unsafe { bindings::ftrace_free_filter(self.ops.get()) };
    }
}

/// An ftrace hash of (site, trampoline) entries.
///
/// # Invariants
///
/// `.0` is a hash from `alloc_ftrace_hash()` that this object owns.
struct Hash(*mut bindings::ftrace_hash);

/// The most buckets of a [`Hash`], as log2: what ftrace gives its own hashes at most
/// (`FTRACE_HASH_MAX_BITS`, kernel/trace/ftrace.c), 32 KiB of buckets.
const HASH_MAX_BITS: u32 = 12;

impl Hash {
    /// An empty hash for `n` entries: a bucket for each, between ftrace's default and
    /// [`HASH_MAX_BITS`] (ftrace looks every site of its filter up in it).
    fn new(n: usize) -> Result<Self> {
        let bits = n
            .next_power_of_two()
            .trailing_zeros()
            .clamp(bindings::FTRACE_HASH_DEFAULT_BITS, HASH_MAX_BITS);
        // SAFETY: alloc_ftrace_hash() only allocates, and takes this size (at most 12
        // bits: 4,096 buckets).
        let h = unsafe { bindings::alloc_ftrace_hash(bits as i32) };
        if h.is_null() {
            return Err(ENOMEM);
        }
        // INVARIANT: allocated above.
        Ok(Self(h))
    }

    fn add(&self, site: u64, tramp: u64) -> Result {
        // SAFETY: the hash is ours (type invariant).
        let e = unsafe {
            bindings::add_ftrace_hash_entry_direct(self.0, site as usize, tramp as usize)
        };
        if e.is_null() {
            return Err(ENOMEM);
        }
        Ok(())
    }
}

impl Drop for Hash {
    fn drop(&mut self) {
        // SAFETY: the hash is ours (type invariant).
        unsafe { bindings::free_ftrace_hash(self.0) };
    }
}

/// The ftrace updates of an operation: the sites to hook, move and unhook, each with its
/// trampoline (0: the shared one), and whether a generated trampoline retires.
pub(crate) struct Updates {
    hook: (AreaVec<u64>, AreaVec<u64>),
    moves: (AreaVec<u64>, AreaVec<u64>),
    unhook: (AreaVec<u64>, AreaVec<u64>),
    /// A generated trampoline of the old routes stops being called: it must outlive every
    /// task that may still run it.
    pub(crate) retired: bool,
}

impl Updates {
    /// The updates from the routes `old` to the routes `new` (both sorted by site).
    pub(crate) fn between(
        old: impl Iterator<Item = Route>,
        new: impl Iterator<Item = Route>,
    ) -> Result<Self> {
        let mut u = Updates {
            hook: (AreaVec::new(), AreaVec::new()),
            moves: (AreaVec::new(), AreaVec::new()),
            unhook: (AreaVec::new(), AreaVec::new()),
            retired: false,
        };
        let mut failed = false;
        u.retired = multi_table::plan_updates(old, new, |kind, r| {
            let (sites, tramps) = match kind {
                Update::Hook => &mut u.hook,
                Update::Move => &mut u.moves,
                Update::Unhook => &mut u.unhook,
            };
            failed |= sites.push(r.site, GFP_KERNEL).is_err()
                || tramps.push(r.tramp, GFP_KERNEL).is_err();
        });
        if failed {
            return Err(ENOMEM);
        }
        Ok(u)
    }

    /// Sites to hook.
    pub(crate) fn hooks(&self) -> usize {
        self.hook.0.len()
    }

    /// Sites to move.
    pub(crate) fn moves(&self) -> usize {
        self.moves.0.len()
    }

    /// Sites to unhook.
    pub(crate) fn unhooks(&self) -> usize {
        self.unhook.0.len()
    }

    /// Hooks the new sites.
    ///
    /// # Safety
    ///
    /// The new routes' trampolines (of the `new` of [`Updates::between()`]) are code that
    /// can be called at their sites, kept as [`FtraceOps::apply()`] says: while a site may
    /// call them, and while a call is in them.
    pub(crate) unsafe fn hook(&self, ops: &FtraceOps) -> Result<(), Failed> {
        // SAFETY: the sites go to the new routes' trampolines, kept as our contract says;
        // a failure unhooks them.
        unsafe { ops.apply(Update::Hook, &self.hook) }
    }

    /// Moves the sites whose trampoline changes.
    ///
    /// # Safety
    ///
    /// As for [`Updates::hook()`], and the old routes' trampolines (of the `old` of
    /// [`Updates::between()`]) are kept so too: a failure moves the sites back to them.
    pub(crate) unsafe fn move_sites(&self, ops: &FtraceOps) -> Result<(), Failed> {
        // SAFETY: the sites go to the new routes' trampolines, or back to the old ones
        // after a failure, kept as our contract says.
        unsafe { ops.apply(Update::Move, &self.moves) }
    }

    /// Unhooks the sites no link holds any more.
    ///
    /// # Safety
    ///
    /// The old routes' trampolines are kept as for [`Updates::hook()`]: a failure hooks
    /// the sites again, to them.
    pub(crate) unsafe fn unhook(&self, ops: &FtraceOps) -> Result<(), Failed> {
        // SAFETY: only a failure points sites to trampolines, the old routes', kept as our
        // contract says.
        unsafe { ops.apply(Update::Unhook, &self.unhook) }
    }

    /// Unhooks the sites [`Updates::hook()`] hooked, after a later step failed.
    ///
    /// # Safety
    ///
    /// The new routes' trampolines are kept as for [`Updates::hook()`]: a failure hooks
    /// the sites again, to them.
    pub(crate) unsafe fn undo_hook(&self, ops: &FtraceOps) -> Result<(), Failed> {
        // SAFETY: only a failure points sites to trampolines, the new routes', kept as our
        // contract says.
        unsafe { ops.apply(Update::Unhook, &self.hook) }
    }
}
