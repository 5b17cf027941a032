// SPDX-License-Identifier: GPL-2.0

//! The trampoline's lookup of a function in the table's index, in Rust: the model that
//! the host tests check the index against.  rkf_multi runs the same loop in C, in its hot
//! path (c-shim rkf_multi_lookup()), so the module does not build this file.

use super::bucket;

/// Finds `key` through an index of [`build_index()`](super::build_index), as the trampoline does in C
/// (rkf_multi_lookup()): the position of the key, or `None`.
pub fn lookup(index: &[u32], bits: u32, keys: &[u64], key: u64) -> Option<usize> {
    let mask = (1usize << bits) - 1;
    let mut b = bucket(key, bits);
    // At most every bucket once, even if the index had no empty one.
    for _ in 0..=mask {
        let pos = (*index.get(b)? as usize).checked_sub(1)?;
        if keys[pos] == key {
            return Some(pos);
        }
        b = (b + 1) & mask;
    }
    None
}
