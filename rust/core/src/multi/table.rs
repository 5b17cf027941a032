// SPDX-License-Identifier: GPL-2.0

//! The table of traced functions: in which order the programs of overlapping links run
//! on one function, which ftrace updates a link operation makes, and the hash index the
//! shared trampoline finds the functions it serves by (the others by a binary search,
//! [`lookup()`](fn@super::lookup)).
//!
//! Built into rkf_multi (rust/multi/table.rs builds the table with it) and tested on the
//! host against models.  Nothing here allocates, so the kernel calls it on its own
//! vectors.

use crate::abi::Kind;

/// One program attached to one function through one link, as the table builder sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot {
    /// The function (its ftrace site).
    pub site: u64,
    /// What the program runs on.
    pub kind: Kind,
    /// The link's attach order: older links run first.
    pub seq: u64,
    /// The caller's reference to the attachment.
    pub idx: u32,
}

/// Where programs of `kind` come in a function's programs: fentry, then session, then
/// fexit.  The trampoline runs the first two on entry and the last two on exit, so a
/// session's exit run comes before the fexit programs, as its entry run after the fentry
/// ones (BPF trampolines run fsession programs in both the fentry and the fexit list).
pub fn phase(kind: Kind) -> u8 {
    match kind {
        Kind::Fentry => 0,
        Kind::Session => 1,
        Kind::Fexit => 2,
    }
}

/// Orders slots the way the trampoline runs them: by function, fentry programs before
/// session ones before fexit ones ([`phase()`]), each in attach order.
pub fn order_slots(slots: &mut [Slot]) {
    sort_by_key(slots, |s| (s.site, phase(s.kind), s.seq, s.idx));
}

/// Heapsort by `key`: in place, O(n log n), no allocation.
///
/// Not `slice::sort_unstable_by_key()`: its ord-violation panic path is a function
/// objtool does not know to be noreturn, and it warns about every instantiation in a
/// module.
pub fn sort_by_key<T, K: Ord>(v: &mut [T], key: impl Fn(&T) -> K) {
    let n = v.len();
    for start in (0..n / 2).rev() {
        sift_down(v, start, n, &key);
    }
    for end in (1..n).rev() {
        v.swap(0, end);
        sift_down(v, 0, end, &key);
    }
}

fn sift_down<T, K: Ord>(v: &mut [T], mut root: usize, end: usize, key: &impl Fn(&T) -> K) {
    loop {
        let mut child = 2 * root + 1;
        if child >= end {
            return;
        }
        if child + 1 < end && key(&v[child]) < key(&v[child + 1]) {
            child += 1;
        }
        if key(&v[root]) >= key(&v[child]) {
            return;
        }
        v.swap(root, child);
        root = child;
    }
}

/// One function of an ordered slot array: `slots[start..end]`, fentry programs first,
/// then session ones, then fexit ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Group {
    /// The function.
    pub site: u64,
    /// Its first slot.
    pub start: usize,
    /// One past its last slot.
    pub end: usize,
    /// How many of its slots are fentry programs (they come first).
    pub fentry: usize,
    /// How many are session programs (they come next).
    pub session: usize,
}

/// The functions of slots ordered by [`order_slots()`], in site order.
pub fn groups(slots: &[Slot]) -> Groups<'_> {
    Groups { slots, at: 0 }
}

/// Iterator of [`groups()`].
pub struct Groups<'a> {
    slots: &'a [Slot],
    at: usize,
}

impl Iterator for Groups<'_> {
    type Item = Group;

    fn next(&mut self) -> Option<Group> {
        let first = self.slots.get(self.at)?;
        let start = self.at;
        let len = self.slots[start..]
            .iter()
            .position(|s| s.site != first.site)
            .unwrap_or(self.slots.len() - start);
        let end = start + len;
        let count = |k| {
            self.slots[start..end]
                .iter()
                .filter(|s| s.kind == k)
                .count()
        };
        let (fentry, session) = (count(Kind::Fentry), count(Kind::Session));
        self.at = end;
        Some(Group {
            site: first.site,
            start,
            end,
            fentry,
            session,
        })
    }
}

/// What an operation does to one traced function in ftrace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Update {
    /// Its first program came: hook the site to its trampoline.
    Hook,
    /// Its programs changed, and with them its trampoline: move the site to the new one.
    Move,
    /// Its last program went: unhook the site from its trampoline.
    Unhook,
}

/// One traced function's route: its ftrace site and the trampoline the site calls (0 for
/// the shared one).  An operation turns the routes before it into the routes after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Route {
    /// The ftrace site.
    pub site: u64,
    /// The trampoline, or 0 for the shared one.
    pub tramp: u64,
}

/// Calls `update` for every function whose route differs between `old` and `new` (both
/// sorted by site, one route per site), with the site and the trampoline to hook or move
/// to, or to unhook from.  Returns whether a generated trampoline (non-zero) of `old`
/// stops being called: then it must outlive every task that may still run it.
pub fn plan_updates(
    old: impl Iterator<Item = Route>,
    new: impl Iterator<Item = Route>,
    mut update: impl FnMut(Update, Route),
) -> bool {
    let (mut old, mut new) = (old.peekable(), new.peekable());
    let mut retired = false;
    loop {
        match (old.peek().copied(), new.peek().copied()) {
            (None, None) => return retired,
            (Some(o), n) if n.is_none_or(|n| o.site < n.site) => {
                update(Update::Unhook, o);
                retired |= o.tramp != 0;
                old.next();
            }
            (o, Some(n)) if o.is_none_or(|o| n.site < o.site) => {
                update(Update::Hook, n);
                new.next();
            }
            (Some(o), Some(n)) => {
                if o.tramp != n.tramp {
                    update(Update::Move, n);
                    retired |= o.tramp != 0;
                }
                old.next();
                new.next();
            }
            _ => unreachable!(),
        }
    }
}

/// `GOLDEN_RATIO_64` of include/linux/hash.h.
pub const GOLDEN_RATIO_64: u64 = 0x61C8_8646_80B5_83EB;

/// The home bucket of `key` in an index of `1 << bits` buckets: `hash_64(key, bits)` of
/// include/linux/hash.h, which the trampoline computes in C (c-shim rkf_multi_lookup()).
pub fn bucket(key: u64, bits: u32) -> usize {
    (key.wrapping_mul(GOLDEN_RATIO_64) >> (64 - bits)) as usize
}

/// The bits of the index for `n` functions: at least twice as many buckets as functions
/// (so that a lookup probes about 1.5 buckets), and at least 2.
pub fn index_bits(n: usize) -> u32 {
    let mut bits = 1;
    while (1usize << bits) < 2 * n {
        bits += 1;
    }
    bits
}

/// Folds `words` into one 64-bit key for [`firsts_alike()`]: equal sequences give equal
/// keys, and two sequences of one length that differ in one word give different keys
/// (each step is a bijection of the key so far: an xor, a multiplication by an odd
/// number, a rotation).
pub fn fold_key(words: impl Iterator<Item = u64>) -> u64 {
    words.fold(0, |h, w| {
        (h ^ w).wrapping_mul(GOLDEN_RATIO_64).rotate_left(29)
    })
}

/// For each of `first.len()` items, the first item alike: `first[i]` is the least `j`
/// with `alike(j, i)`, or `i` for an item with no key.  `key(i)` is the item's key
/// ([`fold_key()`]), `None` for an item that is alike to none; `alike` is an equivalence
/// of the items with keys, under which alike items have the same key.  `index` is an
/// open-addressing table of `1 << bits` buckets, zeroed by the caller, with more buckets
/// than items ([`index_bits()`]): a bucket ends up holding the first item of a kind,
/// plus one.  With fewer buckets, every item is left its own first (nothing is found
/// alike), as the probes could not end.  Linear in the items (for keys that spread over
/// the buckets), where sorting them to find the runs of alike ones was not: the kernel
/// calls it on every function an attach generates code for.
pub fn firsts_alike(
    key: impl Fn(usize) -> Option<u64>,
    alike: impl Fn(usize, usize) -> bool,
    index: &mut [u32],
    bits: u32,
    first: &mut [u32],
) {
    let room = index.len() == 1usize << bits && first.len() < index.len();
    let mask = (1usize << bits) - 1;
    for (i, first) in first.iter_mut().enumerate() {
        *first = i as u32;
        let Some(k) = key(i).filter(|_| room) else {
            continue;
        };
        let mut b = bucket(k, bits);
        loop {
            match index[b].checked_sub(1) {
                None => {
                    index[b] = i as u32 + 1;
                    break;
                }
                Some(j) if alike(j as usize, i) => {
                    *first = j;
                    break;
                }
                Some(_) => b = (b + 1) & mask,
            }
        }
    }
}

/// Builds the open-addressing index of `keys` (distinct), the key at each position or
/// `None` where that position is left out: `index` has `1 << bits` buckets, zeroed by the
/// caller; a bucket holds the position of a key plus one, or 0.  Linear probing from
/// [`bucket()`].  The keys indexed must be fewer than the buckets.
pub fn build_index(keys: impl Iterator<Item = Option<u64>>, index: &mut [u32], bits: u32) {
    let mask = (1usize << bits) - 1;
    for (pos, key) in keys.enumerate() {
        let Some(key) = key else {
            continue;
        };
        let mut b = bucket(key, bits);
        while index[b] != 0 {
            b = (b + 1) & mask;
        }
        index[b] = pos as u32 + 1;
    }
}
