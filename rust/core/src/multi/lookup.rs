// SPDX-License-Identifier: GPL-2.0

//! The trampoline's lookup of a function in the table, in Rust: the model that the host
//! tests check the index against.  rkf_multi runs the same code in C, in its hot path
//! (c-shim rkf_multi_lookup()), so the module does not build this file.

use super::bucket;

/// Finds `key` among `keys` (sorted, distinct) as the trampoline does in C
/// (rkf_multi_lookup()): through an index of [`build_index()`](super::build_index), which
/// may hold only some of the keys, and by a binary search of `keys` where the index has
/// not got it.  The position of the key, or `None`.
pub fn lookup(index: &[u32], bits: u32, keys: &[u64], key: u64) -> Option<usize> {
    let mask = (1usize << bits) - 1;
    let mut b = bucket(key, bits);
    // At most every bucket once, even if the index had no empty one.
    for _ in 0..=mask {
        let Some(pos) = index.get(b).and_then(|&v| (v as usize).checked_sub(1)) else {
            break;
        };
        if keys[pos] == key {
            return Some(pos);
        }
        b = (b + 1) & mask;
    }
    search(keys, key)
}

/// The binary search of rkf_multi_search(): the position of `key` in `keys` (sorted), or
/// `None`.
fn search(keys: &[u64], key: u64) -> Option<usize> {
    let (mut lo, mut hi) = (0, keys.len());
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if keys[mid] < key {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    (lo < keys.len() && keys[lo] == key).then_some(lo)
}
