// SPDX-License-Identifier: GPL-2.0

//! What the kernel has allocated, from its own accounting in /proc/meminfo: the pages of
//! the slab caches and of large kmalloc() allocations (`Slab`: both are counted in
//! `NR_SLAB_*`, mm/slub.c), the pages of vmalloc areas (`VmallocUsed`: BPF programs,
//! trampoline images, large tables, without guard pages) and the per-cpu areas
//! (`Percpu`).  A difference of two readings is what a method allocated in between,
//! without the page cache and the free lists that make `MemFree` deltas noise; whole
//! pages, so a few KiB either way for small sets.
//!
//! Executable memory is the exception: the text of BPF trampolines and of rkf_multi's
//! images comes from 2 MiB packs (kernel/bpf/core.c), and text of every kind from 2 MiB
//! chunks of the execmem ROX cache (mm/execmem.c), so `VmallocUsed` moves by a whole
//! chunk or not at all, whatever a method took.  bench_multi.bpf.c's probes count the
//! vmalloc areas made for text and the text each caller asked for ([`Text`]): a
//! method's figure is the meminfo difference with the first replaced by the second.

use std::time::Duration;

use anyhow::{Context, Result};

/// The fields of /proc/meminfo counted, in kB there.
const FIELDS: [&str; 3] = ["Slab", "VmallocUsed", "Percpu"];

/// The bytes of [`FIELDS`] in the text of /proc/meminfo.
fn bytes(meminfo: &str) -> Result<u64> {
    FIELDS.iter().try_fold(0, |sum, field| {
        let line = meminfo
            .lines()
            .find(|l| l.split(':').next() == Some(field))
            .with_context(|| format!("/proc/meminfo has no {field} line"))?;
        let kb: u64 = line
            .split_whitespace()
            .nth(1)
            .and_then(|v| v.parse().ok())
            .with_context(|| format!("/proc/meminfo: {line:?}"))?;
        Ok(sum + kb * 1024)
    })
}

/// Executable memory, as bench_multi.bpf.c's probes count it since they were attached.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Text {
    /// Bytes of the vmalloc areas made inside an `execmem_alloc()` of text: in
    /// `VmallocUsed` too.
    pub(crate) areas: u64,
    /// Bytes of text asked for: BPF text in the pack allocator's 64-byte chunks (pages
    /// for one larger than a pack), any other in pages.
    pub(crate) asked: u64,
}

/// What was allocated between `before` and `after` (an [`allocated()`] reading with the
/// [`Text`] counts at the time): the meminfo difference, its executable areas replaced
/// by the text asked for; and that text.
pub(crate) fn between(before: (u64, Text), after: (u64, Text)) -> (i64, u64) {
    let areas = after.1.areas - before.1.areas;
    let asked = after.1.asked - before.1.asked;
    (
        after.0 as i64 - before.0 as i64 - areas as i64 + asked as i64,
        asked,
    )
}

/// The kernel's allocated bytes now: slab and large kmalloc pages, vmalloc pages and
/// per-cpu areas.
pub(crate) fn allocated() -> Result<u64> {
    bytes(&std::fs::read_to_string("/proc/meminfo").context("reading /proc/meminfo")?)
}

/// [`allocated()`] once it held still for a while: the last `STILL` readings, 250 ms
/// apart, within 16 KiB of each other.  What the previous method freed after grace
/// periods (RCU, then RCU tasks, then a worker: trampoline images, tables) is gone by
/// then; a reading that only waited for two quiet readings 100 ms apart still saw those
/// frees land during the next attach (negative figures).  The last reading after 30 s if
/// it never holds still.
pub(crate) fn settled() -> Result<u64> {
    const STILL: usize = 6;
    let mut last = std::collections::VecDeque::with_capacity(STILL);
    for _ in 0..120 {
        if last.len() == STILL {
            last.pop_front();
        }
        last.push_back(allocated()?);
        let (lo, hi) = (
            last.iter().copied().min().unwrap_or(0),
            last.iter().copied().max().unwrap_or(0),
        );
        if last.len() == STILL && hi - lo < 16 << 10 {
            break;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    last.back().copied().context("no reading")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_replaces_its_areas() {
        let t = |areas, asked| Text { areas, asked };
        // A new 2 MiB chunk for 10 KiB of text: the text counts, not the chunk.
        assert_eq!(
            between(
                (1 << 30, t(0, 0)),
                ((1 << 30) + (3 << 20), t(2 << 20, 10 << 10))
            ),
            ((1 << 20) + (10 << 10), 10 << 10)
        );
        // Text in a chunk that was there already: meminfo did not see it.
        assert_eq!(
            between((5 << 20, t(2 << 20, 64)), (6 << 20, t(2 << 20, 64 + 4096))),
            ((1 << 20) + 4096, 4096)
        );
        // Frees meanwhile still show, as a negative difference.
        assert_eq!(
            between((5 << 20, t(0, 0)), (4 << 20, t(0, 0))),
            (-(1 << 20), 0)
        );
    }

    #[test]
    fn sums_the_fields() {
        let m = "MemFree:  100 kB\nSlab:   20 kB\nSReclaimable: 5 kB\nVmallocUsed: 3 kB\nPercpu:  1 kB\n";
        assert_eq!(bytes(m).unwrap(), (20 + 3 + 1) * 1024);
        assert!(bytes("Slab: 1 kB\nPercpu: 1 kB\n")
            .unwrap_err()
            .to_string()
            .contains("VmallocUsed"));
    }
}
