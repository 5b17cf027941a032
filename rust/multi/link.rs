// SPDX-License-Identifier: GPL-2.0

//! A link: one program on a set of functions, with a cookie for each (and counters, if
//! it counts), and the modules whose functions it traces.

use core::ptr;

use kernel::{
    bindings,
    prelude::*,
    sync::{
        atomic::{Atomic, Relaxed, Release},
        Arc,
    },
    types::Opaque,
};

use super::{
    area::AreaVec,
    refs::{ModuleRef, ProgRef},
    request::Target,
};
use crate::{
    abi::{FuncInfo, Kind},
    rkf_h,
};

/// A link's program, id and detached flag (`struct rkf_multi_link_state`), which every
/// slot of it names.  Every image that has slots of the link keeps it for as long as the
/// image lives, as a run reads the flag however long after the link went.
///
/// # Invariants
///
/// `prog` is the link's program, which the link keeps (its [`ProgRef`]) until the link is
/// freed, after the grace periods that follow its detach (or failed attach).  Only C
/// reads it, and only while the link is there: the run path after seeing `detached`
/// clear, under RCU or RCU tasks trace, or from a slot of a published table, read under
/// RCU (or RCU tasks trace), whose links are freed only after those grace periods; and
/// `rkf_multi_prog_code()`, for an image generated while the link is attached, whose
/// code passes the program to the kernel's sleepable program entry only after seeing
/// `detached` clear, the link being freed only after an RCU tasks and an RCU tasks trace
/// grace period then ([`Link::needs_trace_gp()`]).
#[repr(C)]
pub(crate) struct LinkState {
    /// The program.
    prog: *mut bindings::bpf_prog,
    /// The link's id: ids start at 1 and grow, so older links have smaller ones.
    id: u64,
    /// Set once the link is detached (or its attach failed): every run of a generated
    /// trampoline reads it through its slot first (for a call in flight, on the way out
    /// too).
    detached: Atomic<bool>,
}

// The C side reads it as `struct rkf_multi_link_state`.
crate::abi_check::assert_same_layout!(LinkState, rkf_h::rkf_multi_link_state, prog, id, detached);
const _: () = assert!(size_of::<Atomic<bool>>() == size_of::<bool>());

// SAFETY: the state owns nothing (the link holds the program's reference) and has no
// `Drop`; Rust never dereferences `prog` (the C run path reads it, by the type
// invariant); `detached` is atomic and `id` does not change.
unsafe impl Send for LinkState {}
// SAFETY: as for `Send`: shared references only read `id` and the pointer's value, and
// access `detached` atomically.
unsafe impl Sync for LinkState {}

impl LinkState {
    /// The state of a new link `id` of the program `prog`: not detached.
    pub(crate) fn new(id: u64, prog: &ProgRef) -> Result<Arc<Self>> {
        Ok(Arc::new(
            Self {
                // INVARIANT: the link made with this state keeps `prog`.
                prog: prog.as_ptr(),
                id,
                detached: Atomic::new(false),
            },
            GFP_KERNEL,
        )?)
    }

    /// What a slot names: the C view of `self`, valid for as long as `self` is.
    pub(crate) fn as_ptr(&self) -> *const rkf_h::rkf_multi_link_state {
        ptr::from_ref(self).cast()
    }
}

/// An attached link.
///
/// # Invariants
///
/// `targets` is sorted by site (`traces()` searches it), `stats` has one entry per
/// target, in the same order, or none (a link that does not count, `RKF_MULTI_F_COUNT`),
/// and `cookies` one too or none; neither `targets` nor `stats` is resized after the link
/// is made, as tables and images point into `stats`.
/// The counters in `stats` are only ever accessed atomically (atomic64_inc() in the
/// trampolines, atomic loads here).
pub(crate) struct Link {
    /// The program.
    pub(crate) prog: ProgRef,
    /// The program's id.
    pub(crate) prog_id: u32,
    /// What the program runs on.
    pub(crate) kind: Kind,
    /// A sleepable program: what its runs read is freed after an RCU tasks trace grace
    /// period too.
    pub(crate) sleepable: bool,
    /// Sorted by site.
    pub(crate) targets: AreaVec<Target>,
    /// The cookie of each target, in the same order, or none where every cookie is 0
    /// (most links have none): read through [`Link::cookie()`].
    pub(crate) cookies: AreaVec<u64>,
    /// The counters of each target, in the same order, which the trampolines increment,
    /// or none where the link does not count: tables point into them, so the vector is
    /// never resized.  Read through [`Link::stats()`].
    pub(crate) stats: AreaVec<Opaque<rkf_h::rkf_multi_stats>>,
    /// The modules (other than rkf_multi) whose functions it traces.
    pub(crate) modules: AreaVec<ModuleRef>,
    /// Its program, id and detached flag, which its slots name.
    pub(crate) state: Arc<LinkState>,
    /// Set, for good, by the first table built (published or not) with one of its
    /// functions having a sleepable program: a task may then have slept in that program
    /// with the table's (or image's) slot of this link still ahead of it, under RCU tasks
    /// trace alone, so the link is freed after an RCU tasks trace grace period, whatever
    /// the table it leaves.
    pub(crate) beside_sleepable: Atomic<bool>,
}

impl Link {
    /// Its id: ids start at 1 and grow, so older links have smaller ones.
    pub(crate) fn id(&self) -> u64 {
        self.state.id
    }

    /// Says the link is detached: generated trampolines run its program no more, calls in
    /// flight inside its functions included.
    pub(crate) fn mark_detached(&self) {
        self.state.detached.store(true, Release);
    }

    /// Whether a task may have run, or still run, a program after the link's under RCU
    /// tasks trace alone: what the link holds must wait for its grace period.
    pub(crate) fn needs_trace_gp(&self) -> bool {
        self.sleepable || self.beside_sleepable.load(Relaxed)
    }

    /// The cookie of target `i`.
    pub(crate) fn cookie(&self, i: usize) -> u64 {
        if self.cookies.is_empty() {
            0
        } else {
            self.cookies[i]
        }
    }

    /// Whether the link counts its program's runs on each function (`RKF_MULTI_F_COUNT`).
    pub(crate) fn counted(&self) -> bool {
        !self.stats.is_empty()
    }

    /// The counters of target `i`, which a slot names, or null where the link does not
    /// count: valid for as long as the link is.
    pub(crate) fn stats(&self, i: usize) -> *mut rkf_h::rkf_multi_stats {
        if self.counted() {
            self.stats[i].get()
        } else {
            ptr::null_mut()
        }
    }

    /// Whether the link traces the function at `site`.
    pub(crate) fn traces(&self, site: u64) -> bool {
        self.targets
            .binary_search_by_key(&site, |t| t.site())
            .is_ok()
    }

    /// Zeroed counters for `n` targets.
    pub(crate) fn new_stats(n: usize) -> Result<AreaVec<Opaque<rkf_h::rkf_multi_stats>>> {
        let mut stats = AreaVec::with_capacity(n, GFP_KERNEL)?;
        for _ in 0..n {
            stats.push(Opaque::zeroed(), GFP_KERNEL)?;
        }
        Ok(stats)
    }

    /// Target `i` as user space sees it: its function, cookie and counters (0 where the
    /// link does not count).
    pub(crate) fn func_info(&self, i: usize) -> FuncInfo {
        let (t, s) = (&self.targets[i], self.stats(i));
        let (hits, misses) = if s.is_null() {
            (0, 0)
        } else {
            // SAFETY: `s` points to live counters of `self`, which are only ever accessed
            // atomically (by the type invariant).
            unsafe {
                (
                    Atomic::<i64>::from_ptr(&raw mut (*s).hits.counter).load(Relaxed),
                    Atomic::<i64>::from_ptr(&raw mut (*s).misses.counter).load(Relaxed),
                )
            }
        };
        FuncInfo {
            addr: t.addr(),
            cookie: self.cookie(i),
            hits: hits as u64,
            misses: misses as u64,
        }
    }
}
