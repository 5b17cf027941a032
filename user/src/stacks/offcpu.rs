// SPDX-License-Identifier: GPL-2.0

//! `rkf offcputime`: time spent off a cpu, by stack, as bcc's offcputime measures it.
//!
//! user/bpf/offcputime.bpf.c runs on every `sched_switch` (tp_btf).  A task's off-CPU
//! interval runs from its switch-out to its next switch-in; both its stacks are taken at
//! the switch-out, when it is still current: the kernel stack from the program, with
//! `bpf_rkf_get_stack()`, cut here to start at `__schedule()` (the caller of the
//! tracepoint), and the user stack with `bpf_rkf_get_task_stack()`.  Every interval of
//! at least the minimum length, and at most the maximum, is delivered, weighted by its
//! length in microseconds.

use std::{
    mem::MaybeUninit,
    time::{Duration, Instant},
};

use anyhow::{ensure, Context, Result};

use super::{
    names::{self, taken, Names, RawStacks, BUILD_ID_ENTRY},
    profile::duration_ns,
    record::collect,
    Kind, Stacks,
};
use crate::{limits, modules, skel::offcputime::OffcputimeSkelBuilder, skeleton};

/// What to record.
#[derive(Clone, Debug)]
pub struct Options {
    /// How long to record.
    pub duration: Duration,
    /// Only this process (all its threads); every task when `None`.
    pub pid: Option<u32>,
    /// Only intervals at least this long (microseconds).
    pub min_us: u64,
    /// Only intervals at most this long (microseconds, as bcc compares them: up to 999 ns
    /// longer).
    pub max_us: u64,
    /// Only intervals of tasks whose state (`task->__state`, a bitmask of
    /// include/linux/sched.h: 0 runnable, 1 `TASK_INTERRUPTIBLE`, 2
    /// `TASK_UNINTERRUPTIBLE`, ...) was exactly this as they left the cpu, as bcc's and
    /// libbpf-tools' `--state` compare it; every state when `None`.
    pub state: Option<u32>,
    /// Take kernel stacks.
    pub kernel: bool,
    /// Take user stacks.
    pub user: bool,
}

impl Options {
    /// Checks the options, saying what is wrong.
    pub fn validate(&self) -> Result<()> {
        limits::check_duration(self.duration).map_err(anyhow::Error::msg)?;
        ensure!(
            self.kernel || self.user,
            "nothing to record: neither kernel nor user stacks"
        );
        ensure!(
            self.min_us > 0,
            "the minimum interval must be at least 1 us (an interval is weighted in whole \
             microseconds)"
        );
        ensure!(
            self.min_us <= self.max_us,
            "the minimum interval ({} us) is longer than the maximum ({} us)",
            self.min_us,
            self.max_us
        );
        ensure!(
            self.max_us <= u64::MAX / 1000,
            "the maximum interval ({} us) does not fit in nanoseconds",
            self.max_us
        );
        limits::check_pid(self.pid).map_err(anyhow::Error::msg)
    }
}

/// `struct rkf_offcpu_sample` of offcputime.bpf.c, as the skeleton defines it.
type Sample = crate::skel::offcputime::types::rkf_offcpu_sample;

// SAFETY: the skeleton's `rkf_offcpu_sample` is a `repr(C)` struct of integers and arrays
// of integers, so every bit pattern of its size is a valid value.
unsafe impl plain::Plain for Sample {}

/// A recorded off-CPU profile.
#[derive(Debug)]
pub struct OffCpu {
    /// The stacks, each interval weighted by its length in microseconds.
    pub stacks: Stacks,
    /// Intervals received.
    pub intervals: u64,
    /// Intervals lost to a full ring buffer.
    pub dropped: u64,
    /// Switch-outs that found no task storage to keep their time in.
    pub untracked: u64,
    /// Stacks the kfunc could not take (negative return), kernel and user: each shows as
    /// a `[Missed Kernel Stack]` or `[Missed User Stack]` frame, as bcc names a lost one.
    pub stack_errors: u64,
}

/// Records off-CPU intervals as `opts` says, for `opts.duration`.
///
/// Needs the rkf_stack module and CAP_BPF with CAP_PERFMON.
pub fn record(opts: &Options) -> Result<OffCpu> {
    record_then(opts, || ())
}

/// [`record()`], calling `started` once the program is attached: a task that leaves a
/// cpu after that is seen.
pub fn record_then(opts: &Options, started: impl FnOnce()) -> Result<OffCpu> {
    opts.validate()?;
    modules::require("rkf_stack")?;
    let mut obj = MaybeUninit::uninit();
    let skel = skeleton::load::<OffcputimeSkelBuilder>(&mut obj, "offcputime.bpf.c", |open| {
        let bss = open
            .maps
            .bss_data
            .as_deref_mut()
            .context("offcputime.bpf.c has no .bss")?;
        bss.target_tgid = opts.pid.unwrap_or(0);
        bss.want_kernel = opts.kernel.into();
        bss.want_user = opts.user.into();
        bss.min_ns = opts.min_us * 1000;
        // bcc's test, `delta_us > max_us`, in nanoseconds.
        bss.max_ns = (opts.max_us * 1000).saturating_add(999);
        bss.filter_state = opts.state.is_some().into();
        bss.state = opts.state.unwrap_or(0);
        Ok(())
    })
    .context("the offcputime program (needs CAP_BPF and CAP_PERFMON)")?;
    let mut names = Names::new().context("reading the kernel's symbols")?;
    let link = skel
        .progs
        .offcpu_switch
        .attach()
        .context("attaching the offcputime program to sched_switch")?;
    started();

    let mut raw = RawStacks::new();
    let (mut intervals, mut stack_errors) = (0, 0);
    let started = Instant::now();
    collect(
        &skel.maps.samples,
        opts.duration,
        || drop(link),
        |s: Sample| {
            intervals += 1;
            stack_errors += u64::from(s.kernel_ret < 0) + u64::from(s.user_ret < 0);
            let comm = s.comm.map(|c| c as u8);
            let kernel = taken(&s.kernel, s.kernel_ret, 8).map(|k| names.outward_from_schedule(k));
            let stack = names.raw(
                &comm,
                s.tgid,
                kernel,
                taken(&s.user, s.user_ret, BUILD_ID_ENTRY),
            );
            names::add(&mut raw, stack, s.off_ns / 1000);
        },
    )?;
    let duration = started.elapsed();
    let mut stacks = names.finish(Kind::OffCpu, raw);
    stacks.duration_ns = duration_ns(duration);
    let bss = skel
        .maps
        .bss_data
        .as_deref()
        .context("offcputime.bpf.c has no .bss")?;
    Ok(OffCpu {
        stacks,
        intervals,
        dropped: bss.dropped,
        untracked: bss.untracked,
        stack_errors,
    })
}
