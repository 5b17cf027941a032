// SPDX-License-Identifier: GPL-2.0

//! `perf_event_open(2)`: cpu-clock sampling events, the trigger of perf_event programs.
//!
//! `struct perf_event_attr` and the system call come from the perf-event-open-sys crate
//! (bindings generated from include/uapi/linux/perf_event.h); this module is the small
//! safe interface that rkf needs on top.

use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd};

use anyhow::{bail, Result};
use libbpf_rs::{Link, ProgramMut};
use perf_event_open_sys::{bindings as sys, perf_event_open};

/// `PERF_SAMPLE_CALLCHAIN`: the sample records perf's own callchain.
pub const PERF_SAMPLE_CALLCHAIN: u64 = sys::PERF_SAMPLE_CALLCHAIN as u64;

/// How often a cpu-clock event samples.
#[derive(Clone, Copy, Debug)]
pub enum Sampling {
    /// Every this many nanoseconds of cpu time.
    Period(u64),
    /// This many times per second of cpu time.
    Frequency(u64),
}

/// What a cpu-clock event counts.
#[derive(Clone, Copy, Debug)]
pub enum Target {
    /// The calling thread, on any cpu.
    ThisThread,
    /// Every task on one cpu (needs CAP_PERFMON, or perf_event_paranoid below 1).
    Cpu(u32),
}

/// Opens a cpu-clock event on `target` that samples as `sampling` says, with
/// `sample_type` (for example [`PERF_SAMPLE_CALLCHAIN`]).
pub fn open_cpu_clock(target: Target, sampling: Sampling, sample_type: u64) -> Result<OwnedFd> {
    open(target, sampling, sample_type, |_| {})
}

/// Attaches `prog` to the perf event `fd`, which the link then owns: libbpf closes the
/// event's fd when the link goes (`bpf_link_perf_detach()`), so the fd is handed over, not
/// lent.  On failure it is closed here (libbpf keeps it only once attached).
pub fn attach(prog: &ProgramMut<'_>, fd: OwnedFd) -> libbpf_rs::Result<Link> {
    let link = prog.attach_perf_event(fd.as_raw_fd())?;
    // The link closes it.
    let _ = fd.into_raw_fd();
    Ok(link)
}

/// What a precise event's sampled callchain leaves out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exclude {
    /// Nothing: kernel and user frames.
    Nothing,
    /// The user frames (`exclude_callchain_user`).
    User,
    /// The kernel frames (`exclude_callchain_kernel`).
    Kernel,
}

/// Opens a cpu-clock event as [`open_cpu_clock()`] does, asking for precise samples
/// (`precise_ip`, which a software event takes and ignores), with `exclude` left out of
/// its sampled callchains: the events on which the kernel refuses to attach a program
/// that calls `bpf_get_stack()`, unless they sample full callchains
/// (`perf_event_set_bpf_handler()` in kernel/events/core.c).
pub fn open_cpu_clock_precise(
    target: Target,
    sampling: Sampling,
    sample_type: u64,
    exclude: Exclude,
) -> Result<OwnedFd> {
    open(target, sampling, sample_type, |attr| {
        attr.set_precise_ip(1);
        attr.set_exclude_callchain_user((exclude == Exclude::User).into());
        attr.set_exclude_callchain_kernel((exclude == Exclude::Kernel).into());
    })
}

fn open(
    target: Target,
    sampling: Sampling,
    sample_type: u64,
    edit: impl FnOnce(&mut sys::perf_event_attr),
) -> Result<OwnedFd> {
    let mut attr = sys::perf_event_attr {
        type_: sys::PERF_TYPE_SOFTWARE,
        size: std::mem::size_of::<sys::perf_event_attr>() as u32,
        config: sys::PERF_COUNT_SW_CPU_CLOCK.into(),
        sample_type,
        ..Default::default()
    };
    edit(&mut attr);
    match sampling {
        Sampling::Period(ns) => attr.__bindgen_anon_1.sample_period = ns,
        Sampling::Frequency(hz) => {
            attr.__bindgen_anon_1.sample_freq = hz;
            attr.set_freq(1);
        }
    }
    if matches!(sampling, Sampling::Period(0) | Sampling::Frequency(0)) {
        bail!("perf_event_open(cpu-clock): a sample period or frequency of 0 samples nothing");
    }
    let (pid, cpu) = match target {
        Target::ThisThread => (0, -1),
        Target::Cpu(c) => (-1, c as i32),
    };
    // SAFETY: `attr` is a whole perf_event_attr, zeroed but for the fields set above and
    // by `edit`, of the size it says; no group and no flags.
    let fd = unsafe { perf_event_open(&mut attr, pid, cpu, -1, 0) };
    if fd < 0 {
        bail!(
            "perf_event_open(cpu-clock, {target:?}, {sampling:?}): {}",
            std::io::Error::last_os_error()
        );
    }
    // SAFETY: a new fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}
