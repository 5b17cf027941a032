// SPDX-License-Identifier: GPL-2.0

//! `rkf funclatency`: how long kernel functions take, a log2 histogram per function, as
//! bcc's funclatency prints them, for thousands of functions through one rkf_multi link.
//!
//! user/bpf/funclatency.bpf.c is one session program (`RKF_MULTI_FSESSION`): on a
//! function's entry it keeps the time in the call's session cookie, on its exit it adds
//! the time since to that function's histogram, in a hash map keyed by the function's
//! address that [`record()`] fills before it attaches.  Each call is timed with its own
//! cookie, so calls nested in calls (of the same function or of another traced one) are
//! each timed whole.

use std::{
    collections::BTreeMap,
    fmt::Write as _,
    mem::{size_of, MaybeUninit},
    time::{Duration, Instant},
};

use anyhow::{anyhow, Context, Result};
use libbpf_rs::{MapCore, MapFlags};

use crate::{
    limits,
    multi::{self, Link, Skip},
    skel::funclatency::FunclatencySkelBuilder,
    skeleton,
};

/// The slots of a histogram: slot `i` counts the calls that took 2^i to 2^(i+1) - 1
/// units (slot 0 also those that took 0), and the last slot every longer call too.
/// 2^47 ns is more than a day, the longest recording, so no call timed needs the last.
pub const SLOTS: usize = 48;

/// The unit of the histograms and of the averages and totals printed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Unit {
    /// Nanoseconds (bcc's default).
    #[default]
    Nsecs,
    /// Microseconds (`-u`).
    Usecs,
    /// Milliseconds (`-m`).
    Msecs,
}

impl Unit {
    /// Nanoseconds in one unit: what the program divides a call's time by.
    pub fn ns(self) -> u64 {
        match self {
            Self::Nsecs => 1,
            Self::Usecs => 1_000,
            Self::Msecs => 1_000_000,
        }
    }

    /// Its name in the histogram's header and the averages, as bcc names it.
    pub fn label(self) -> &'static str {
        match self {
            Self::Nsecs => "nsecs",
            Self::Usecs => "usecs",
            Self::Msecs => "msecs",
        }
    }
}

/// What to record.
#[derive(Clone, Debug)]
pub struct Options {
    /// How long to record.
    pub duration: Duration,
    /// The histograms' unit.
    pub unit: Unit,
    /// Only calls made by this process (any of its threads); every task's when `None`.
    pub pid: Option<u32>,
}

impl Options {
    /// Checks the options, saying what is wrong.
    pub fn validate(&self) -> Result<()> {
        limits::check_duration(self.duration).map_err(anyhow::Error::msg)?;
        limits::check_pid(self.pid).map_err(anyhow::Error::msg)
    }
}

/// The calls of one function.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Histogram {
    /// The function, `name` or `name [module]`.
    pub name: String,
    /// Its address.
    pub addr: u64,
    /// Calls by time, in the unit asked for ([`SLOTS`], [`slot_of()`]).
    pub slots: [u64; SLOTS],
    /// Calls timed.
    pub count: u64,
    /// Their time in all, in nanoseconds whatever the unit.
    pub total_ns: u64,
}

/// What [`record()`] timed.
#[derive(Debug)]
pub struct Latencies {
    /// The histograms' unit.
    pub unit: Unit,
    /// The process recorded, or `None` for every task.
    pub pid: Option<u32>,
    /// Functions attached.
    pub attached: usize,
    /// Functions left out, by reason.
    pub skipped: BTreeMap<Skip, Vec<String>>,
    /// How long the attach took (the ioctl).
    pub attach_time: Duration,
    /// How long the link was attached.
    pub duration: Duration,
    /// Every function attached, the most called first (then by name).
    pub funcs: Vec<Histogram>,
    /// Exits of a function that had no histogram (none is expected: every function
    /// attached has one).
    pub unknown: u64,
    /// Program runs that rkf_multi's recursion guard skipped: calls not timed, or not
    /// looked at.
    pub missed: u64,
}

/// `struct rkf_funclatency_hist` of funclatency.bpf.c, as the skeleton defines it.
type Hist = crate::skel::funclatency::types::rkf_funclatency_hist;

// SAFETY: the skeleton's `rkf_funclatency_hist` is a `repr(C)` struct of `u64`s and an
// array of `u64`s, so every bit pattern of its size is a valid value.
unsafe impl plain::Plain for Hist {}

/// Times every call of every function matching `patterns` (names and globs, as
/// [`multi::resolve_wide()`] takes them) as `opts` says, through one rkf_multi link.
///
/// Needs the rkf_multi module, with session programs, and CAP_BPF with CAP_PERFMON.
pub fn record(patterns: &[&str], opts: &Options) -> Result<Latencies> {
    record_then(patterns, opts, || ())
}

/// [`record()`], calling `started` once the program is attached: a call that begins
/// after that is timed.  `opts.duration` runs from when `started` returns.
pub fn record_then(patterns: &[&str], opts: &Options, started: impl FnOnce()) -> Result<Latencies> {
    opts.validate()?;
    let (resolved, nr_funcs) = multi::resolve_for_counters(patterns)?;
    let mut obj = MaybeUninit::uninit();
    let skel = skeleton::load::<FunclatencySkelBuilder>(&mut obj, "funclatency.bpf.c", |open| {
        let bss = open
            .maps
            .bss_data
            .as_deref_mut()
            .context("funclatency.bpf.c has no .bss")?;
        bss.target_tgid = opts.pid.unwrap_or(0);
        bss.unit_ns = opts.unit.ns();
        // A histogram for each function, and no room for more.
        open.maps.hists.set_max_entries(nr_funcs)?;
        Ok(())
    })
    .context(
        "the funclatency program (needs rkf_multi with session programs, CAP_BPF and CAP_PERFMON)",
    )?;
    let zero = vec![0u8; size_of::<Hist>()];
    for f in &resolved.funcs {
        skel.maps
            .hists
            .update(&f.addr.to_ne_bytes(), &zero, MapFlags::ANY)
            .context("filling the histograms map")?;
    }
    let link = Link::attach(&skel.progs.funclatency, &resolved.funcs, None)?;
    let attached_at = Instant::now();
    started();
    crate::interrupt::wait(opts.duration);
    let missed = multi::prog_stats(&skel.progs.funclatency)
        .context("reading the program's recursion misses")?
        .misses;
    let attach_time = link.attach_time;
    drop(link);
    let duration = attached_at.elapsed();

    let mut funcs = Vec::with_capacity(resolved.funcs.len());
    for f in &resolved.funcs {
        let bytes = skel
            .maps
            .hists
            .lookup(&f.addr.to_ne_bytes(), MapFlags::ANY)?
            .with_context(|| format!("the histogram of {} is gone", f.qualified_name()))?;
        let mut h = Hist::default();
        plain::copy_from_bytes(&mut h, &bytes).map_err(|_| {
            anyhow!(
                "a histogram of {} bytes, not {}",
                bytes.len(),
                size_of::<Hist>()
            )
        })?;
        funcs.push(Histogram {
            name: f.qualified_name(),
            addr: f.addr,
            slots: h.slots,
            count: h.count,
            total_ns: h.total_ns,
        });
    }
    funcs.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.name.cmp(&b.name)));
    let bss = skel
        .maps
        .bss_data
        .as_deref()
        .context("funclatency.bpf.c has no .bss")?;
    Ok(Latencies {
        unit: opts.unit,
        pid: opts.pid,
        attached: resolved.funcs.len(),
        skipped: resolved.skipped,
        attach_time,
        duration,
        funcs,
        unknown: bss.unknown,
        missed,
    })
}

/// The slot a call of `units` units is counted in: floor(log2), 0 for 0, at most the
/// last ([`SLOTS`]).  funclatency.bpf.c computes it with libbpf-tools' branch-free
/// log2 (bits.bpf.h).
pub fn slot_of(units: u64) -> usize {
    (units.checked_ilog2().unwrap_or(0) as usize).min(SLOTS - 1)
}

/// The range of units slot `i` stands for, as bcc prints it: 0 to 1 for slot 0, 2^i to
/// 2^(i+1) - 1 for the others (the last slot counts longer calls too).
pub fn slot_range(i: usize) -> (u64, u64) {
    let high = (1u64 << (i + 1)) - 1;
    let low = if i == 0 { 0 } else { 1 << i };
    (low, high)
}

/// The width of the distribution bars, in stars.
const STARS: u64 = 40;

/// A log2 histogram as bcc prints one (`_print_log2_hist()` of bcc's table.py; the rows
/// of libbpf-tools' `print_log2_hist()`): a header naming the unit, then a row per slot
/// up to the last that counted a call, with its range, its count and a bar of up to 40
/// stars scaled to the largest count.  Empty when no slot counted a call.  Past 32 slots
/// bcc switches to its wide layout (20-digit columns, 20 stars), and so does this.
pub fn log2_hist(slots: &[u64], label: &str) -> String {
    let Some(last) = slots.iter().rposition(|&n| n > 0) else {
        return String::new();
    };
    let max = slots.iter().copied().max().unwrap_or(1);
    let wide = last >= 32;
    let bar = if wide { STARS / 2 } else { STARS };
    let mut out = if wide {
        format!("               {label:<29} : count     distribution\n")
    } else {
        format!("     {label:<19} : count     distribution\n")
    };
    for (i, &n) in slots[..=last].iter().enumerate() {
        let (low, high) = slot_range(i);
        let stars = "*".repeat((u128::from(n) * u128::from(bar) / u128::from(max)) as usize);
        let _ = if wide {
            writeln!(out, "{low:>20} -> {high:<20} : {n:<8} |{stars:<20}|")
        } else {
            writeln!(out, "{low:>10} -> {high:<10} : {n:<8} |{stars:<40}|")
        };
    }
    out
}

impl Latencies {
    /// The calls timed, of every function.
    pub fn calls(&self) -> u64 {
        self.funcs.iter().map(|h| h.count).sum()
    }

    /// The report, as bcc's funclatency prints a histogram per function: for each of the
    /// `top` most called functions `Function = NAME`, its histogram, and `avg = A unit,
    /// total: T unit, count: N` (rounded down); then a line of what was attached and
    /// timed, and what was left out and why.
    pub fn report(&self, top: usize) -> String {
        let unit = self.unit.label();
        let called: Vec<&Histogram> = self.funcs.iter().filter(|h| h.count > 0).collect();
        let mut out = String::new();
        for h in called.iter().take(top) {
            let _ = write!(
                out,
                "Function = {}\n{}\navg = {} {unit}, total: {} {unit}, count: {}\n\n",
                h.name,
                log2_hist(&h.slots, unit),
                h.total_ns / (self.unit.ns() * h.count),
                h.total_ns / self.unit.ns(),
                h.count
            );
        }
        if called.len() > top {
            let _ = writeln!(
                out,
                "... {} more functions were called (-T shows more)",
                called.len() - top
            );
        }
        let who = self
            .pid
            .map_or_else(|| "all tasks".to_string(), |p| format!("pid {p}"));
        let skipped: usize = self.skipped.values().map(Vec::len).sum();
        let _ = writeln!(
            out,
            "rkf funclatency: {} calls of {} functions by {who} in {:.1} s; {} functions attached in {:.1} ms ({skipped} left out); {} runs missed, {} exits unknown",
            self.calls(),
            called.len(),
            self.duration.as_secs_f64(),
            self.attached,
            self.attach_time.as_secs_f64() * 1e3,
            self.missed,
            self.unknown
        );
        for (why, names) in &self.skipped {
            let _ = writeln!(out, "  left out {}: {why} (e.g. {})", names.len(), names[0]);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// libbpf-tools' `log2()` and `log2l()` (bits.bpf.h), as funclatency.bpf.c has them,
    /// shift for shift.
    fn bits_log2l(v: u64) -> u64 {
        fn log2(mut v: u32) -> u32 {
            let mut r = u32::from(v > 0xFFFF) << 4;
            v >>= r;
            let mut shift = u32::from(v > 0xFF) << 3;
            v >>= shift;
            r |= shift;
            shift = u32::from(v > 0xF) << 2;
            v >>= shift;
            r |= shift;
            shift = u32::from(v > 0x3) << 1;
            v >>= shift;
            r |= shift;
            r | (v >> 1)
        }
        let hi = (v >> 32) as u32;
        u64::from(if hi != 0 {
            log2(hi) + 32
        } else {
            log2(v as u32)
        })
    }

    /// The slots of the values at and around each power of two, written out.
    #[test]
    fn slot_boundaries() {
        let cases: &[(u64, usize)] = &[
            (0, 0),
            (1, 0),
            (2, 1),
            (3, 1),
            (4, 2),
            (7, 2),
            (8, 3),
            (16_383, 13),
            (16_384, 14),
            (20_000, 14),
            (32_767, 14),
            (32_768, 15),
            (2_147_483_647, 30),
            (2_147_483_648, 31),
            (4_294_967_295, 31),
            (4_294_967_296, 32),
            (86_400_000_000_000, 46),
            (u64::MAX, 47),
        ];
        for &(v, slot) in cases {
            assert_eq!(slot_of(v), slot, "slot of {v}");
        }
        // The program's log2 is floor(log2) on every boundary; the clamp is slot_of()'s.
        for i in 0..64 {
            let p = 1u64 << i;
            for v in [p - 1, p, p + 1] {
                let floor = u64::from(v.checked_ilog2().unwrap_or(0));
                assert_eq!(bits_log2l(v), floor, "log2 of {v}");
            }
        }
        // Every slot's printed range holds exactly the values counted in it.
        for i in 0..SLOTS - 1 {
            let (low, high) = slot_range(i);
            assert_eq!(
                (slot_of(low), slot_of(high)),
                (i, i),
                "slot {i}: {low} -> {high}"
            );
            assert_eq!(slot_of(high + 1), i + 1, "after slot {i}");
        }
        assert_eq!(slot_range(0), (0, 1));
        assert_eq!(slot_range(14), (16_384, 32_767));
        assert_eq!(slot_range(31), (2_147_483_648, 4_294_967_295));
    }

    /// bcc's layout, row for row: right-aligned lows, left-aligned highs, counts in 8
    /// columns, bars of 40 stars scaled down (rounded down) to the largest count.
    #[test]
    fn histogram_layout() {
        let mut slots = [0u64; SLOTS];
        slots[0] = 1;
        slots[4] = 5;
        slots[5] = 10;
        let want = "     usecs               : count     distribution
         0 -> 1          : 1        |****                                    |
         2 -> 3          : 0        |                                        |
         4 -> 7          : 0        |                                        |
         8 -> 15         : 0        |                                        |
        16 -> 31         : 5        |********************                    |
        32 -> 63         : 10       |****************************************|
";
        assert_eq!(log2_hist(&slots, "usecs"), want);
        assert_eq!(log2_hist(&[0; SLOTS], "nsecs"), "");
    }

    /// The widest rows: slot 14 (the selftest's 20 ms sleeps in microseconds), counts
    /// wider than their column, and the last slot.
    #[test]
    fn histogram_wide_rows() {
        let mut slots = [0u64; SLOTS];
        slots[14] = 123_456_789;
        slots[31] = 3;
        let text = log2_hist(&slots, "nsecs");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 33);
        assert_eq!(
            lines[0],
            "     nsecs               : count     distribution"
        );
        assert_eq!(
            lines[15],
            "     16384 -> 32767      : 123456789 |****************************************|"
        );
        assert_eq!(
            lines[16],
            "     32768 -> 65535      : 0        |                                        |"
        );
        assert_eq!(
            lines[32],
            "2147483648 -> 4294967295 : 3        |                                        |"
        );
    }

    /// A call of more than 2^32 units: bcc's wide layout, 20-digit columns and 20 stars.
    #[test]
    fn histogram_wide_layout() {
        let mut slots = [0u64; SLOTS];
        slots[0] = 4;
        slots[33] = 2;
        let text = log2_hist(&slots, "nsecs");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 35);
        assert_eq!(
            lines[0],
            "               nsecs                         : count     distribution"
        );
        assert_eq!(
            lines[1],
            "                   0 -> 1                    : 4        |********************|"
        );
        assert_eq!(
            lines[34],
            "          8589934592 -> 17179869183          : 2        |**********          |"
        );
    }

    /// The whole report: the most called first, averages and totals in the unit rounded
    /// down, a function never called left out, the summary and the left-out reasons last.
    #[test]
    fn report_layout() {
        let mut read = [0u64; SLOTS];
        read[1] = 2;
        read[2] = 1;
        let mut write = [0u64; SLOTS];
        write[0] = 1;
        let hist = |name: &str, slots: [u64; SLOTS], count, total_ns| Histogram {
            name: name.to_string(),
            addr: 0,
            slots,
            count,
            total_ns,
        };
        let l = Latencies {
            unit: Unit::Usecs,
            pid: Some(42),
            attached: 3,
            skipped: BTreeMap::from([(Skip::NoSymbol, vec!["vfs_gone".to_string()])]),
            attach_time: Duration::from_micros(1_240),
            duration: Duration::from_millis(2_000),
            funcs: vec![
                hist("vfs_read", read, 3, 12_999),
                hist("vfs_write [mod]", write, 1, 1_500),
                hist("vfs_open", [0; SLOTS], 0, 0),
            ],
            unknown: 0,
            missed: 2,
        };
        let want = "\
Function = vfs_read
     usecs               : count     distribution
         0 -> 1          : 0        |                                        |
         2 -> 3          : 2        |****************************************|
         4 -> 7          : 1        |********************                    |

avg = 4 usecs, total: 12 usecs, count: 3

Function = vfs_write [mod]
     usecs               : count     distribution
         0 -> 1          : 1        |****************************************|

avg = 1 usecs, total: 1 usecs, count: 1

rkf funclatency: 4 calls of 2 functions by pid 42 in 2.0 s; 3 functions attached in 1.2 ms (1 left out); 2 runs missed, 0 exits unknown
  left out 1: not in /proc/kallsyms (e.g. vfs_gone)
";
        assert_eq!(l.report(10), want);
        let short = l.report(1);
        assert!(
            short.contains(
                "count: 3\n\n... 1 more functions were called (-T shows more)\nrkf funclatency: 4 calls of 2 functions"
            ),
            "{short}"
        );
        assert!(!short.contains("vfs_write"), "{short}");
    }

    #[test]
    fn units() {
        assert_eq!(Unit::default(), Unit::Nsecs);
        let all = [Unit::Nsecs, Unit::Usecs, Unit::Msecs];
        assert_eq!(all.map(Unit::ns), [1, 1_000, 1_000_000]);
        assert_eq!(all.map(Unit::label), ["nsecs", "usecs", "msecs"]);
    }
}
