// SPDX-License-Identifier: GPL-2.0

//! `perf_event_open(2)`: cpu-clock sampling events, the trigger of perf_event programs.

use std::os::fd::{FromRawFd, OwnedFd};

use anyhow::{bail, Result};

/// `PERF_SAMPLE_CALLCHAIN`.
pub const PERF_SAMPLE_CALLCHAIN: u64 = 1 << 5;

const PERF_TYPE_SOFTWARE: u32 = 1;
const PERF_COUNT_SW_CPU_CLOCK: u64 = 0;
/// `perf_event_attr.freq`: `sample_period` is a frequency in Hz.
const ATTR_FLAG_FREQ: u64 = 1 << 10;

// struct perf_event_attr (include/uapi/linux/perf_event.h): the fields up to the flags
// word, then zeroes up to the 128 bytes of PERF_ATTR_SIZE_VER8.
#[repr(C)]
struct PerfEventAttr {
    type_: u32,
    size: u32,
    config: u64,
    sample_period_or_freq: u64,
    sample_type: u64,
    read_format: u64,
    flags: u64,
    rest: [u64; 10],
}

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
    let (value, flags) = match sampling {
        Sampling::Period(ns) => (ns, 0),
        Sampling::Frequency(hz) => (hz, ATTR_FLAG_FREQ),
    };
    if value == 0 {
        bail!("perf_event_open(cpu-clock): a sample period or frequency of 0 samples nothing");
    }
    let attr = PerfEventAttr {
        type_: PERF_TYPE_SOFTWARE,
        size: std::mem::size_of::<PerfEventAttr>() as u32,
        config: PERF_COUNT_SW_CPU_CLOCK,
        sample_period_or_freq: value,
        sample_type,
        read_format: 0,
        flags,
        rest: [0; 10],
    };
    let (pid, cpu) = match target {
        Target::ThisThread => (0, -1),
        Target::Cpu(c) => (-1, c as i32),
    };
    // SAFETY: `attr` is a valid perf_event_attr of the size it says; no group, no flags.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            &attr as *const PerfEventAttr,
            pid,
            cpu,
            -1,
            0,
        )
    };
    if fd < 0 {
        bail!(
            "perf_event_open(cpu-clock, {target:?}, {sampling:?}): {}",
            std::io::Error::last_os_error()
        );
    }
    // SAFETY: a new fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}
