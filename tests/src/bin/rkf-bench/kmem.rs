// SPDX-License-Identifier: GPL-2.0

//! What the kernel has allocated, from its own accounting in /proc/meminfo: the pages of
//! the slab caches and of large kmalloc() allocations (`Slab`: both are counted in
//! `NR_SLAB_*`, mm/slub.c), the pages of vmalloc areas (`VmallocUsed`: BPF programs,
//! trampoline images, large tables, without guard pages) and the per-cpu areas
//! (`Percpu`).  A difference of two readings is what a method allocated in between,
//! without the page cache and the free lists that make `MemFree` deltas noise; whole
//! pages, so a few KiB either way for small sets.

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
    fn sums_the_fields() {
        let m = "MemFree:  100 kB\nSlab:   20 kB\nSReclaimable: 5 kB\nVmallocUsed: 3 kB\nPercpu:  1 kB\n";
        assert_eq!(bytes(m).unwrap(), (20 + 3 + 1) * 1024);
        assert!(bytes("Slab: 1 kB\nPercpu: 1 kB\n")
            .unwrap_err()
            .to_string()
            .contains("VmallocUsed"));
    }
}
