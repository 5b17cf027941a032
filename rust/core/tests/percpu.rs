// SPDX-License-Identifier: GPL-2.0

//! Host tests of the per-cpu resolution rule.

use proptest::prelude::*;
use rkf_core::percpu::{resolve, CpuLayout};

/// A system whose possible cpus are the set bits of `possible`.
#[derive(Debug)]
struct Layout {
    nr_cpu_ids: u32,
    possible: u64,
    offsets: Vec<usize>,
}

impl CpuLayout for Layout {
    fn nr_cpu_ids(&self) -> u32 {
        self.nr_cpu_ids
    }
    fn is_possible(&self, cpu: u32) -> bool {
        assert!(
            cpu < self.nr_cpu_ids,
            "is_possible({cpu}) asked beyond nr_cpu_ids"
        );
        self.possible & (1 << cpu) != 0
    }
    fn offset(&self, cpu: u32) -> usize {
        assert!(
            self.is_possible(cpu),
            "offset({cpu}) asked for an impossible cpu"
        );
        self.offsets[cpu as usize]
    }
}

fn layout() -> impl Strategy<Value = Layout> {
    (
        1u32..=64,
        any::<u64>(),
        proptest::collection::vec(any::<usize>(), 64),
    )
        .prop_map(|(nr, mask, offsets)| {
            // The highest possible cpu is nr_cpu_ids - 1, as in the kernel.
            let possible = (mask | 1 << (nr - 1)) & (u64::MAX >> (64 - nr));
            Layout {
                nr_cpu_ids: nr,
                possible,
                offsets,
            }
        })
}

#[test]
fn two_cpus() {
    let l = Layout {
        nr_cpu_ids: 2,
        possible: 0b11,
        offsets: vec![0x1000, 0x2000],
    };
    assert_eq!(resolve(&l, 0xffff_8000, 0), Some(0xffff_9000));
    assert_eq!(resolve(&l, 0xffff_8000, 1), Some(0xffff_a000));
    assert_eq!(resolve(&l, 0xffff_8000, 2), None);
    assert_eq!(resolve(&l, 0xffff_8000, u32::MAX), None);
    assert_eq!(resolve(&l, 0, 0), None);
}

#[test]
fn hole_in_possible_mask() {
    let l = Layout {
        nr_cpu_ids: 3,
        possible: 0b101,
        offsets: vec![1, 2, 3],
    };
    assert_eq!(resolve(&l, 100, 1), None);
    assert_eq!(resolve(&l, 100, 2), Some(103));
}

proptest! {
    #[test]
    fn resolves_exactly_the_possible_cpus(l in layout(), addr in 1usize.., cpu in any::<u32>()) {
        let got = resolve(&l, addr, cpu);
        let valid = cpu < l.nr_cpu_ids && l.possible & (1 << cpu) != 0;
        prop_assert_eq!(got.is_some(), valid);
        if let Some(p) = got {
            prop_assert_eq!(p, addr.wrapping_add(l.offsets[cpu as usize]));
        }
    }

    #[test]
    fn null_never_resolves(l in layout(), cpu in any::<u32>()) {
        prop_assert_eq!(resolve(&l, 0, cpu), None);
    }
}
