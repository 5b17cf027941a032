// SPDX-License-Identifier: GPL-2.0

//! `rkf funccount`: how often kernel functions are called, as bcc's funccount counts them,
//! for thousands of functions through one rkf_multi link.
//!
//! user/bpf/funccount.bpf.c is one fentry program: it adds one to the counter of the
//! function it runs on, in a hash map keyed by the function's address that [`count()`]
//! fills before it attaches; with a process to follow, it counts that process's calls
//! only.  The counters only grow, so each interval's calls (`-i`) are the difference of
//! two reads, and none is lost between them, where bcc's funccount clears its map after
//! each read and loses the calls made in between.

use std::{
    collections::BTreeMap,
    mem::MaybeUninit,
    time::{Duration, Instant},
};

use anyhow::{Context, Result};
use libbpf_rs::{MapCore, MapFlags};

use crate::{
    interrupt, limits,
    multi::{self, Func, Link, Skip},
    skel::funccount::FunccountSkelBuilder,
    skeleton,
};

/// What to count.
#[derive(Clone, Debug)]
pub struct Options {
    /// How long to count.
    pub duration: Duration,
    /// Only calls made by this process (any of its threads); every task's when `None`.
    pub pid: Option<u32>,
    /// Report the calls of each interval of this length as it ends (`-i`), the last one
    /// shorter if the duration is not a multiple of it or a signal ends the count, and
    /// one longer after a stall that made the count miss the end of an interval (see
    /// [`count_with()`]).
    pub interval: Option<Duration>,
}

impl Options {
    /// Checks the options, saying what is wrong.
    pub fn validate(&self) -> Result<()> {
        limits::check_duration(self.duration).map_err(anyhow::Error::msg)?;
        limits::check_pid(self.pid).map_err(anyhow::Error::msg)?;
        if let Some(i) = self.interval {
            limits::check_interval(i).map_err(anyhow::Error::msg)?;
        }
        Ok(())
    }
}

/// The calls of one interval (`-i`).
#[derive(Clone, Debug)]
pub struct Interval {
    /// Which one it is, from 0.
    pub index: u64,
    /// When it ended, from the start of the count (when [`count_with()`]'s `started`
    /// returned); the last one's is [`FuncCount::duration`].
    pub end: Duration,
    /// Whether it is the last one (the duration is over, or a signal ended the count),
    /// read after the detach.
    pub last: bool,
    /// (function, calls in the interval), most called first (then by name); functions not
    /// called in it are left out.
    pub counts: Vec<(String, u64)>,
}

/// What [`count_with()`] attached to.
#[derive(Debug)]
pub struct Attached {
    /// Functions attached: the link's, as rkf_multi lists them.
    pub funcs: usize,
    /// Functions left out, by reason.
    pub skipped: BTreeMap<Skip, Vec<String>>,
    /// How long the attach took (the ioctl).
    pub time: Duration,
}

/// Calls counted by [`count()`].
#[derive(Debug)]
pub struct FuncCount {
    /// The process counted, or `None` for every task.
    pub pid: Option<u32>,
    /// What it attached to.
    pub attach: Attached,
    /// How long it counted: from the start of the count (the attach, or when
    /// [`count_with()`]'s `started` returned) to the detach's start; less than asked if
    /// a signal ended it ([`crate::interrupt`]).
    pub duration: Duration,
    /// (function, calls), most called first (then by name); functions not called are
    /// left out.
    pub counts: Vec<(String, u64)>,
    /// Runs the recursion guard skipped, on all its functions (the program's
    /// `recursion_misses`: it is on this link alone).
    pub missed: u64,
    /// Runs on a function not in the counts map: none, unless `bpf_get_func_ip()`
    /// disagrees with the address attached.
    pub unknown: u64,
}

/// Counts calls to every function matching `patterns` (names and globs, as
/// [`multi::resolve_wide()`] takes them) as `opts` says, through one rkf_multi link.
///
/// Needs the rkf_multi module, and CAP_BPF with CAP_PERFMON.
pub fn count(patterns: &[&str], opts: &Options) -> Result<FuncCount> {
    count_with(patterns, opts, |_| (), |_| Ok(()))
}

/// [`count()`], calling `started` once the program is attached (a call after that is
/// counted; `opts.duration` runs from when it returns), and `interval` as each interval
/// of `opts.interval` ends, with its calls; an error from `interval` ends the count
/// (the link detached) and is returned.
///
/// An interval ends at the first multiple of its length (from when `started` returned)
/// that has not passed yet when the one before was reported, or when the duration is over
/// or a signal ends the count ([`crate::interrupt`]): after a stall longer than an
/// interval (a blocked output, a stopped process), the next interval takes in the whole
/// stall, and no interval is reported twice at one time.  The last interval is read after
/// the detach, so that it and the whole count take in every call counted.
pub fn count_with(
    patterns: &[&str],
    opts: &Options,
    started: impl FnOnce(&Attached),
    mut interval: impl FnMut(&Interval) -> Result<()>,
) -> Result<FuncCount> {
    opts.validate()?;
    let (resolved, nr_funcs) = multi::resolve_for_counters(patterns)?;
    let mut obj = MaybeUninit::uninit();
    let skel = skeleton::load::<FunccountSkelBuilder>(&mut obj, "funccount.bpf.c", |open| {
        let bss = open
            .maps
            .bss_data
            .as_deref_mut()
            .context("funccount.bpf.c has no .bss")?;
        bss.target_tgid = opts.pid.unwrap_or(0);
        // A counter for each function, and no room for more.
        open.maps.counts.set_max_entries(nr_funcs)?;
        Ok(())
    })
    .context("the funccount program (needs rkf_multi, CAP_BPF and CAP_PERFMON)")?;
    for f in &resolved.funcs {
        skel.maps
            .counts
            .update(&f.addr.to_ne_bytes(), &0u64.to_ne_bytes(), MapFlags::ANY)
            .context("filling the counts map")?;
    }
    let read = || -> Result<Vec<u64>> {
        resolved
            .funcs
            .iter()
            .map(|f| counter(&skel.maps.counts, f))
            .collect()
    };
    // Each function's calls since `before`, most called first.
    let since = |now: &[u64], before: &[u64]| {
        // A counter only grows; the copy the lookup returns is not one atomic read,
        // so one torn by an add could read lower: none then.
        let calls = now.iter().zip(before).map(|(n, b)| n.saturating_sub(*b));
        called(&resolved.funcs, calls)
    };
    let link = Link::attach(&skel.progs.funccount, &resolved.funcs, None)?;
    // What the kernel says the link holds: every function asked for.
    let attached = link.info()?.funcs.len();
    anyhow::ensure!(
        attached == resolved.funcs.len(),
        "rkf_multi attached {attached} of the {} functions asked for",
        resolved.funcs.len()
    );
    let attach = Attached {
        funcs: attached,
        skipped: resolved.skipped.clone(),
        time: link.attach_time,
    };
    started(&attach);
    let counting = Instant::now();
    let mut before = vec![0; resolved.funcs.len()];
    let mut index = 0;
    if let Some(every) = opts.interval {
        loop {
            // The first multiple of the interval not passed yet, or the duration's end
            // (both at most a day, which a u64 of nanoseconds holds).
            let every_ns = every.as_nanos();
            let next = (counting.elapsed().as_nanos() / every_ns + 1) * every_ns;
            let target = u64::try_from(next)
                .map_or(opts.duration, Duration::from_nanos)
                .min(opts.duration);
            interrupt::wait(target.saturating_sub(counting.elapsed()));
            let end = counting.elapsed();
            if end >= opts.duration || interrupt::interrupted() {
                break;
            }
            let now = read()?;
            interval(&Interval {
                index,
                end,
                last: false,
                counts: since(&now, &before),
            })?;
            before = now;
            index += 1;
        }
    } else {
        interrupt::wait(opts.duration);
    }
    let duration = counting.elapsed();
    let missed = multi::prog_stats(&skel.progs.funccount)
        .context("reading the program's recursion misses")?
        .misses;
    drop(link);
    let total = read()?;
    if opts.interval.is_some() {
        interval(&Interval {
            index,
            end: duration,
            last: true,
            counts: since(&total, &before),
        })?;
    }
    let unknown = skel
        .maps
        .bss_data
        .as_deref()
        .context("funccount.bpf.c has no .bss")?
        .unknown;
    Ok(FuncCount {
        pid: opts.pid,
        attach,
        duration,
        counts: called(&resolved.funcs, total.into_iter()),
        missed,
        unknown,
    })
}

/// The counter of `f` in the counts map.
fn counter(counts: &impl MapCore, f: &Func) -> Result<u64> {
    let v = counts
        .lookup(&f.addr.to_ne_bytes(), MapFlags::ANY)?
        .with_context(|| format!("the counter of {} is gone", f.qualified_name()))?;
    let bytes: [u8; 8] = v
        .try_into()
        .map_err(|v: Vec<u8>| anyhow::anyhow!("a counter of {} bytes, not 8", v.len()))?;
    Ok(u64::from_ne_bytes(bytes))
}

/// (function, calls) of the functions of `funcs` with calls, most called first (then by
/// name).
fn called(funcs: &[Func], calls: impl Iterator<Item = u64>) -> Vec<(String, u64)> {
    let mut v: Vec<(String, u64)> = funcs
        .iter()
        .zip(calls)
        .filter(|&(_, n)| n > 0)
        .map(|(f, n)| (f.qualified_name(), n))
        .collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    v
}
