// SPDX-License-Identifier: GPL-2.0

//! `rkf profile`: on-CPU stacks sampled with a perf_event program and rkf_stack.
//!
//! A cpu-clock event on every online cpu runs user/bpf/profile.bpf.c, which calls
//! `bpf_rkf_get_stack_pe()` to write the interrupted task's kernel and user stacks straight
//! into a ring buffer record.  Each sample counts as one period of cpu time.

use std::{
    mem::MaybeUninit,
    time::{Duration, Instant},
};

use anyhow::{ensure, Context, Result};
use libbpf_rs::Link;

use super::{
    names::{self, taken, Names, RawStacks, BUILD_ID_ENTRY},
    record::collect,
    Kind, Stacks,
};
use crate::{
    cpus, limits, modules,
    perf::{self, open_cpu_clock, Sampling, Target},
    skel::profile::ProfileSkelBuilder,
    skeleton,
};

/// What to sample.
#[derive(Clone, Debug)]
pub struct Options {
    /// Samples per second on each cpu.
    pub frequency: u64,
    /// How long to sample.
    pub duration: Duration,
    /// Only this process (all its threads); every task when `None`.
    pub pid: Option<u32>,
    /// Take kernel stacks.
    pub kernel: bool,
    /// Take user stacks.
    pub user: bool,
    /// Count the idle tasks too.
    pub include_idle: bool,
}

impl Options {
    /// Checks the options, saying what is wrong.
    pub fn validate(&self) -> Result<()> {
        limits::check_frequency(self.frequency).map_err(anyhow::Error::msg)?;
        limits::check_duration(self.duration).map_err(anyhow::Error::msg)?;
        ensure!(
            self.kernel || self.user,
            "nothing to sample: neither kernel nor user stacks"
        );
        limits::check_pid(self.pid).map_err(anyhow::Error::msg)
    }
}

/// `struct rkf_profile_sample` of profile.bpf.c, as the skeleton defines it.
type Sample = crate::skel::profile::types::rkf_profile_sample;

// SAFETY: the skeleton's `rkf_profile_sample` is a `repr(C)` struct of integers and arrays
// of integers, so every bit pattern of its size is a valid value.
unsafe impl plain::Plain for Sample {}

/// A recorded profile.
#[derive(Debug)]
pub struct Profile {
    /// The stacks, each sample counted as its period of cpu time.
    pub stacks: Stacks,
    /// Samples received.
    pub samples: u64,
    /// Samples lost to a full ring buffer.
    pub dropped: u64,
    /// Stacks the kfunc could not take (negative return), kernel and user: each shows as
    /// a `[Missed Kernel Stack]` or `[Missed User Stack]` frame, as bcc names a lost one.
    pub stack_errors: u64,
    /// Cpus sampled.
    pub cpus: usize,
}

/// Samples stacks as `opts` says, for `opts.duration`.
///
/// Needs the rkf_stack module, CAP_BPF and CAP_PERFMON.
pub fn record(opts: &Options) -> Result<Profile> {
    record_then(opts, || ())
}

/// [`record()`], calling `started` once the program is attached to every cpu: what runs
/// after that is sampled.
pub fn record_then(opts: &Options, started: impl FnOnce()) -> Result<Profile> {
    opts.validate()?;
    modules::require("rkf_stack")?;
    let mut obj = MaybeUninit::uninit();
    let skel = skeleton::load::<ProfileSkelBuilder>(&mut obj, "profile.bpf.c", |open| {
        let bss = open
            .maps
            .bss_data
            .as_deref_mut()
            .context("profile.bpf.c has no .bss")?;
        bss.target_tgid = opts.pid.unwrap_or(0);
        bss.want_kernel = opts.kernel.into();
        bss.want_user = opts.user.into();
        bss.include_idle = opts.include_idle.into();
        Ok(())
    })
    .context("the profile program (needs CAP_BPF and CAP_PERFMON)")?;

    // Names first: reading the kernel's symbols takes seconds under a slow kernel.
    let mut names = Names::new().context("reading the kernel's symbols")?;
    let cpus = cpus::online()?;
    // Each link owns its event's fd.
    let mut events: Vec<Link> = Vec::with_capacity(cpus.len());
    for &cpu in &cpus {
        let fd = open_cpu_clock(Target::Cpu(cpu), Sampling::Frequency(opts.frequency), 0)?;
        let link = perf::attach(&skel.progs.profile, fd)
            .with_context(|| format!("attaching the profile program to cpu {cpu}"))?;
        events.push(link);
    }
    started();

    let period_ns = 1_000_000_000 / opts.frequency;
    let mut raw = RawStacks::new();
    let (mut samples, mut stack_errors) = (0, 0);
    let started = Instant::now();
    collect(
        &skel.maps.samples,
        opts.duration,
        || drop(events),
        |s: Sample| {
            samples += 1;
            stack_errors += u64::from(s.kernel_ret < 0) + u64::from(s.user_ret < 0);
            let comm = s.comm.map(|c| c as u8);
            let stack = names.raw(
                &comm,
                s.tgid,
                taken(&s.kernel, s.kernel_ret, 8),
                taken(&s.user, s.user_ret, BUILD_ID_ENTRY),
            );
            names::add(&mut raw, stack, period_ns);
        },
    )?;
    let duration = started.elapsed();
    let mut stacks = names.finish(Kind::OnCpu { period_ns }, raw);
    stacks.duration_ns = duration_ns(duration);
    Ok(Profile {
        stacks,
        samples,
        dropped: skel
            .maps
            .bss_data
            .as_deref()
            .context("profile.bpf.c has no .bss")?
            .dropped,
        stack_errors,
        cpus: cpus.len(),
    })
}

/// `d` in nanoseconds, saturated.
pub(super) fn duration_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}
