// SPDX-License-Identifier: GPL-2.0

//! The possible cpus of the running system.

use anyhow::{bail, Context, Result};

/// Parses a kernel cpu list such as `0-3,8,10-11`.
pub fn parse_cpu_list(s: &str) -> Result<Vec<u32>> {
    let mut cpus = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        let (lo, hi) = match part.split_once('-') {
            Some((a, b)) => (a.parse::<u32>()?, b.parse::<u32>()?),
            None => {
                let c = part.parse::<u32>()?;
                (c, c)
            }
        };
        if lo > hi {
            bail!("bad cpu range {part:?}");
        }
        cpus.extend(lo..=hi);
    }
    Ok(cpus)
}

/// The possible cpus, from /sys/devices/system/cpu/possible.
pub fn possible() -> Result<Vec<u32>> {
    let path = "/sys/devices/system/cpu/possible";
    let s = std::fs::read_to_string(path).with_context(|| format!("reading {path}"))?;
    parse_cpu_list(&s).with_context(|| format!("parsing {path}: {s:?}"))
}

/// The online cpus, from /sys/devices/system/cpu/online.
pub fn online() -> Result<Vec<u32>> {
    let path = "/sys/devices/system/cpu/online";
    let s = std::fs::read_to_string(path).with_context(|| format!("reading {path}"))?;
    parse_cpu_list(&s).with_context(|| format!("parsing {path}: {s:?}"))
}

/// `nr_cpu_ids`: one more than the highest possible cpu.
pub fn nr_cpu_ids() -> Result<u32> {
    Ok(possible()?.last().map_or(0, |c| c + 1))
}

#[cfg(test)]
mod tests {
    use super::parse_cpu_list;

    #[test]
    fn lists() {
        assert_eq!(parse_cpu_list("0\n").unwrap(), vec![0]);
        assert_eq!(parse_cpu_list("0-3").unwrap(), vec![0, 1, 2, 3]);
        assert_eq!(parse_cpu_list("0-1,4,6-7").unwrap(), vec![0, 1, 4, 6, 7]);
        assert!(parse_cpu_list("3-1").is_err());
        assert!(parse_cpu_list("x").is_err());
    }
}
