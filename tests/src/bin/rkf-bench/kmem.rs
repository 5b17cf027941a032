// SPDX-License-Identifier: GPL-2.0

//! What the kernel has allocated, from its own accounting: the bytes of every object in
//! use in the slab caches (/proc/slabinfo), of every vmalloc area (/proc/vmallocinfo:
//! BPF programs, trampolines, large tables) and of the per-cpu areas (`Percpu` of
//! /proc/meminfo).  A difference of two readings is what a method allocated in between,
//! without the page cache and the free lists that make `MemFree` deltas noise.

use std::time::Duration;

use anyhow::{bail, Context, Result};

/// Bytes of slab objects in use: `active_objs` x `objsize` summed over the caches of
/// /proc/slabinfo (version 2.1: name, active_objs, num_objs, objsize, ...).
fn slab_bytes(text: &str) -> Result<u64> {
    let mut lines = text.lines();
    match lines.next() {
        Some(v) if v.starts_with("slabinfo - version: 2.") => {}
        v => bail!("/proc/slabinfo: unknown version line {v:?}"),
    }
    let mut total = 0;
    for line in lines.filter(|l| !l.starts_with('#')) {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (Some(active), Some(size)) = (f.get(1), f.get(3)) else {
            bail!("/proc/slabinfo: a short line {line:?}");
        };
        let active: u64 = active
            .parse()
            .with_context(|| format!("/proc/slabinfo: {line:?}"))?;
        let size: u64 = size
            .parse()
            .with_context(|| format!("/proc/slabinfo: {line:?}"))?;
        total += active * size;
    }
    Ok(total)
}

/// Bytes of the vmalloc areas of /proc/vmallocinfo (`START-END SIZE CALLER ...`).  Left
/// out: ioremap, vmap and vm_map_ram mappings of memory not allocated for them, and the
/// areas already freed whose addresses wait to be purged ("unpurged vm_area").
fn vmalloc_bytes(text: &str) -> Result<u64> {
    let mut total = 0;
    for line in text.lines() {
        let mut f = line.split_whitespace();
        let (Some(_range), Some(size)) = (f.next(), f.next()) else {
            bail!("/proc/vmallocinfo: a short line {line:?}");
        };
        if [" ioremap", " vmap", "vm_map_ram", "unpurged vm_area"]
            .iter()
            .any(|w| line.contains(w))
        {
            continue;
        }
        total += size
            .parse::<u64>()
            .with_context(|| format!("/proc/vmallocinfo: {line:?}"))?;
    }
    Ok(total)
}

/// `Percpu` of /proc/meminfo, in bytes.
fn percpu_bytes(text: &str) -> Result<u64> {
    let line = text
        .lines()
        .find(|l| l.starts_with("Percpu:"))
        .context("/proc/meminfo has no Percpu line")?;
    let kb: u64 = line
        .split_whitespace()
        .nth(1)
        .context("/proc/meminfo: Percpu without a value")?
        .parse()
        .context("/proc/meminfo: Percpu")?;
    Ok(kb * 1024)
}

/// The kernel's allocated bytes now: slab objects, vmalloc areas and per-cpu areas.
pub(crate) fn allocated() -> Result<u64> {
    let read =
        |p: &str| std::fs::read_to_string(p).with_context(|| format!("reading {p} (needs root)"));
    Ok(slab_bytes(&read("/proc/slabinfo")?)?
        + vmalloc_bytes(&read("/proc/vmallocinfo")?)?
        + percpu_bytes(&read("/proc/meminfo")?)?)
}

/// [`allocated()`] once two readings 100 ms apart differ by less than 16 KiB, so that
/// what the last method freed after grace periods is gone before the next reading; the
/// last reading after 3 s if they never do.
pub(crate) fn settled() -> Result<u64> {
    let mut last = allocated()?;
    for _ in 0..30 {
        std::thread::sleep(Duration::from_millis(100));
        let now = allocated()?;
        if now.abs_diff(last) < 16 << 10 {
            return Ok(now);
        }
        last = now;
    }
    Ok(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_proc_files() {
        let slab = "slabinfo - version: 2.1\n\
# name            <active_objs> <num_objs> <objsize> <objperslab> <pagesperslab> : tunables <limit> <batchcount> <sharedfactor> : slabdata <active_slabs> <num_slabs> <sharedavail>\n\
kmalloc-64          1000   1024     64   64    1 : tunables    0    0    0 : slabdata     16     16      0\n\
task_struct          100    120   8192    4    8 : tunables    0    0    0 : slabdata     30     30      0\n";
        assert_eq!(slab_bytes(slab).unwrap(), 1000 * 64 + 100 * 8192);
        assert!(slab_bytes("slabinfo - version: 1.1\n").is_err());
        let vm = "0xffffc90000000000-0xffffc90000005000   20480 irq_init_percpu_irqstack+0x114/0x160 vmap\n\
0xffffc90000005000-0xffffc90000007000    8192 bpf_prog_alloc_no_stats+0x3b/0x1a0 pages=1 vmalloc N0=1\n\
0xffffc9000000a000-0xffffc9000000c000    8192 acpi_os_map_iomem+0x1b5/0x1e0 phys=0x00000000bffe0000 ioremap\n\
0xffffc9000000c000-0xffffc9000000e000    8192 unpurged vm_area\n";
        assert_eq!(vmalloc_bytes(vm).unwrap(), 8192);
        assert_eq!(
            percpu_bytes("MemFree: 1 kB\nPercpu:   12 kB\n").unwrap(),
            12 * 1024
        );
    }
}
