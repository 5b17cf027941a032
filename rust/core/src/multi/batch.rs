// SPDX-License-Identifier: GPL-2.0

//! How many sites rkf_multi puts in one ftrace update.
//!
//! An operation hooks, moves or unhooks its sites in a run of ftrace updates
//! (`update_ftrace_direct_add()`, `_mod()`, `_del()`), reporting an RCU tasks quiescent
//! state before each: a task counts for RCU tasks only once it switches voluntarily or
//! reports one, and an ftrace update does neither.  While one update runs, every RCU tasks
//! grace period waits for it, and the kernel reports a grace period older than 10 s
//! (`rcu_task_stall_info`, kernel/rcu/tasks.h).
//!
//! A fixed size does not bound the time.  Under TCG an update of 1,024 sites took under a
//! second for hooks on an idle kernel, about 4 s for moves with every function traced,
//! and over 10 s for moves with every function traced while a workload ran on a kernel
//! with return thunks (the patcher's own helpers, `insn_decode()` and others, are traced
//! then).  So each update's size follows the time the one before it took.
//!
//! Not in proportion, though: an update also has a cost of its own, whatever its size
//! (ftrace walks all its records and synchronises every cpu, and the updater shares its
//! cpu), and with every function traced under TCG that cost grew to most of a second.
//! Sizing every update to take half a second at the last one's rate shrank them to 16
//! sites, each still taking 0.85 to 1 s.  So the size doubles while an update takes under
//! [`BATCH_GROW_NS`], stays between that and [`BATCH_SHRINK_NS`], and above it shrinks to
//! what takes [`BATCH_GROW_NS`] at the last one's rate.  If an update costs a fixed part
//! plus a part per site, one of twice the sites takes at most twice as long, so after
//! the first update of a run none takes over twice [`BATCH_SHRINK_NS`] unless the kernel
//! slows down under it (one move update took 7.2 s), and then the next one is smaller.
//!
//! On a kernel that is not that busy, the fewer the updates the better: each also copies
//! the ops' filter and the kernel's direct hash whole, and walks every ftrace record, so
//! an operation of a few thousand sites paid more for its number of updates than for its
//! sites (the bench kernel: 13,891 hooks in seven updates took 205 ms, of 11.6 ms for the
//! first, 256 sites, up to 50 ms; unhooking them 250 ms before the last update).  An
//! update that took under [`BATCH_LEAP_NS`] makes the next one [`BATCH_LEAP`] times as
//! large, which by the same reasoning takes at most [`BATCH_GROW_NS`].
//!
//! A run of hooks or unhooks starts from the last update of the hook or unhook run before
//! it ([`first_batch()`]): as many sites as that update's rate does in [`BATCH_LEAP_NS`],
//! never fewer than [`BATCH_FIRST`].  Detaching a link of 10,000 functions then takes one
//! update where it took three, each of which copied the hashes whole.  A kernel that
//! slowed down between two runs (a link on every function attached in between) was
//! measured by the run that slowed it: its last updates start the next run small.  Moves
//! always start at [`BATCH_FIRST`]: each also registers and unregisters a temporary ops
//! on its sites, at up to milliseconds a site with every function traced, so a rate
//! measured on hooks says little of them.  What this does not bound is a kernel that
//! slows down by itself between two runs (a workload starting): the first update of the
//! next run is then as long as that slowdown makes it.

/// Sites in the first update of a move run, and of the first hook or unhook run; the
/// fewest in the first update of a later one.
pub const BATCH_FIRST: usize = 256;
/// The most sites one update takes: more than a distribution kernel has (Debian's: about
/// 54,000 in available_filter_functions).
pub const BATCH_MAX: usize = 1 << 16;
/// The fewest sites one update takes (the last one may take fewer: what is left).
pub const BATCH_MIN: usize = 16;
/// An update that took less than this (and at least [`BATCH_LEAP_NS`]) doubles the next
/// one.
pub const BATCH_GROW_NS: u64 = 1_000_000_000;
/// How much larger the next update is after one that took under [`BATCH_LEAP_NS`].
pub const BATCH_LEAP: usize = 8;
/// An update that took less than this makes the next one [`BATCH_LEAP`] times as large.
pub const BATCH_LEAP_NS: u64 = BATCH_GROW_NS / BATCH_LEAP as u64;
/// An update that took more than this shrinks the next one: a fifth of the 10 s after
/// which the kernel reports an RCU tasks grace period as stalled.
pub const BATCH_SHRINK_NS: u64 = 2_000_000_000;

/// The number of sites of the next update, after one of `size` sites took `took_ns`
/// nanoseconds: [`BATCH_LEAP`] times as many below [`BATCH_LEAP_NS`], twice as many below
/// [`BATCH_GROW_NS`], as many up to [`BATCH_SHRINK_NS`], and above it what takes
/// [`BATCH_GROW_NS`] at that rate; always within [`BATCH_MIN`]..=[`BATCH_MAX`].
pub fn next_batch(size: usize, took_ns: u64) -> usize {
    let next = if took_ns < BATCH_LEAP_NS {
        size.saturating_mul(BATCH_LEAP)
    } else if took_ns < BATCH_GROW_NS {
        size.saturating_mul(2)
    } else if took_ns <= BATCH_SHRINK_NS {
        size
    } else {
        // In u64 (the kernel has no 128-bit division): exact for every size up to
        // 2^33, and `took_ns` is over 2 s here.
        let at_rate = (size as u64).saturating_mul(BATCH_GROW_NS) / took_ns;
        usize::try_from(at_rate).unwrap_or(usize::MAX)
    };
    next.clamp(BATCH_MIN, BATCH_MAX)
}

/// The number of sites of the first update of the next run, after the last update of
/// this one, of `size` sites, took `took_ns` nanoseconds: what takes [`BATCH_LEAP_NS`] at
/// that rate, within [`BATCH_FIRST`]..=[`BATCH_MAX`].
pub fn first_batch(size: usize, took_ns: u64) -> usize {
    // In u64: `size` is at most BATCH_MAX, so the product fits.
    let at_rate = (size as u64).saturating_mul(BATCH_LEAP_NS) / took_ns.max(1);
    usize::try_from(at_rate)
        .unwrap_or(usize::MAX)
        .clamp(BATCH_FIRST, BATCH_MAX)
}
