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

/// A link's program, id, detached flag and whether it counts
/// (`struct rkf_multi_link_state`), which every
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
    /// The link counts its runs: its slots hold the address of their counters (which
    /// hold the cookie), not the cookie ([`Link::slot()`]).
    counted: bool,
}

// The C side reads it as `struct rkf_multi_link_state`.
crate::abi_check::assert_same_layout!(
    LinkState,
    rkf_h::rkf_multi_link_state,
    prog,
    id,
    detached,
    counted
);
const _: () = assert!(size_of::<Atomic<bool>>() == size_of::<bool>());

// SAFETY: the state owns nothing (the link holds the program's reference) and has no
// `Drop`; Rust never dereferences `prog` (the C run path reads it, by the type
// invariant); `detached` is atomic and `id` and `counted` do not change.
unsafe impl Send for LinkState {}
// SAFETY: as for `Send`: shared references only read `id`, `counted` and the pointer's
// value, and access `detached` atomically.
unsafe impl Sync for LinkState {}

impl LinkState {
    /// The state of a new link `id` of the program `prog`, which counts its runs if
    /// `counted`: not detached.
    pub(crate) fn new(id: u64, prog: &ProgRef, counted: bool) -> Result<Arc<Self>> {
        Ok(Arc::new(
            Self {
                // INVARIANT: the link made with this state keeps `prog`.
                prog: prog.as_ptr(),
                id,
                detached: Atomic::new(false),
                counted,
            },
            GFP_KERNEL,
        )?)
    }

    /// What a slot names: the C view of `self`, valid for as long as `self` is.
    pub(crate) fn as_ptr(&self) -> *const rkf_h::rkf_multi_link_state {
        ptr::from_ref(self).cast()
    }
}

/// What the slot `p` holds besides its link: its cookie, and the address of its counters
/// if its link counts ([`Link::slot()`]).
///
/// # Safety
///
/// `p` was made by [`Link::slot()`] of a link that is still there.
pub(crate) unsafe fn slot_parts(p: &rkf_h::rkf_multi_prog) -> (u64, Option<u64>) {
    // SAFETY: `p.link` is the C view of the live link's state (this function's contract).
    let state = unsafe { &*p.link.cast::<LinkState>() };
    if state.counted {
        let stats = p.data as *const rkf_h::rkf_multi_stats;
        // SAFETY: the live link's counters of the slot's target (this function's
        // contract), whose cookie never changes (`Link`'s invariant).
        (unsafe { (*stats).cookie }, Some(p.data))
    } else {
        (p.data, None)
    }
}

/// An attached link.
///
/// # Invariants
///
/// `targets` is sorted by site (`traces()` searches it).  `stats` has one entry per
/// target, in the same order, if `state` says the link counts, and none otherwise;
/// `cookies` has one too, or none (always none where the link counts: its counters hold
/// the cookies).  Neither `targets` nor `stats` is resized after the link is made, as
/// tables and images point into `stats`.  The counters in `stats` are only ever
/// accessed atomically (atomic64_inc() in the trampolines, atomic loads here), and their
/// cookies never change.
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
    /// (most links have none) or the link counts (its counters hold the cookies): read
    /// through [`Link::cookie()`].
    pub(crate) cookies: AreaVec<u64>,
    /// The counters of each target, in the same order, which the trampolines increment,
    /// or none where the link does not count: tables point into them, so the vector is
    /// never resized.  Read through [`Link::stats()`].
    pub(crate) stats: AreaVec<Opaque<rkf_h::rkf_multi_stats>>,
    /// The modules (other than rkf_multi) whose functions it traces.
    pub(crate) modules: AreaVec<ModuleRef>,
    /// Its program, id, detached flag and whether it counts, which its slots name.
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
        if self.counted() {
            // SAFETY: the counters of a live target, whose cookie never changes once the
            // link is made (only the counters are written, atomically).
            unsafe { (*self.stats[i].get()).cookie }
        } else if self.cookies.is_empty() {
            0
        } else {
            self.cookies[i]
        }
    }

    /// Whether the link counts its program's runs on each function (`RKF_MULTI_F_COUNT`).
    pub(crate) fn counted(&self) -> bool {
        self.state.counted
    }

    /// The counters of target `i`, or null where the link does not count: valid for as
    /// long as the link is.
    fn stats(&self, i: usize) -> *mut rkf_h::rkf_multi_stats {
        if self.counted() {
            self.stats[i].get()
        } else {
            ptr::null_mut()
        }
    }

    /// The slot of its program on target `i`: its state, and its cookie or, if the link
    /// counts, the address of its counters, which hold the cookie.
    pub(crate) fn slot(&self, i: usize) -> rkf_h::rkf_multi_prog {
        rkf_h::rkf_multi_prog {
            link: self.state.as_ptr(),
            data: if self.counted() {
                self.stats(i) as u64
            } else {
                self.cookie(i)
            },
        }
    }

    /// Whether the link traces the function at `site`.
    pub(crate) fn traces(&self, site: u64) -> bool {
        self.targets
            .binary_search_by_key(&site, |t| t.site())
            .is_ok()
    }

    /// Zeroed counters for `n` targets, each with its cookie (`cookies`, or none where
    /// every cookie is 0).
    pub(crate) fn new_stats(
        n: usize,
        cookies: &[u64],
    ) -> Result<AreaVec<Opaque<rkf_h::rkf_multi_stats>>> {
        let mut stats = AreaVec::with_capacity(n, GFP_KERNEL)?;
        for i in 0..n {
            stats.push(
                Opaque::new(rkf_h::rkf_multi_stats {
                    hits: bindings::atomic64_t { counter: 0 },
                    misses: bindings::atomic64_t { counter: 0 },
                    cookie: cookies.get(i).copied().unwrap_or(0),
                }),
                GFP_KERNEL,
            )?;
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
