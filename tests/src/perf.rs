// SPDX-License-Identifier: GPL-2.0

//! `perf_event_open(2)` for the tests: a cpu-clock event on this thread.

use std::os::fd::{FromRawFd, OwnedFd};

use anyhow::Result;

use crate::check;

/// `PERF_SAMPLE_CALLCHAIN`.
pub(crate) const PERF_SAMPLE_CALLCHAIN: u64 = 1 << 5;

const PERF_TYPE_SOFTWARE: u32 = 1;
const PERF_COUNT_SW_CPU_CLOCK: u64 = 0;

// struct perf_event_attr (include/uapi/linux/perf_event.h): the fields up to sample_type,
// then zeroes up to the 128 bytes of PERF_ATTR_SIZE_VER8.
#[repr(C)]
struct PerfEventAttr {
    type_: u32,
    size: u32,
    config: u64,
    sample_period: u64,
    sample_type: u64,
    rest: [u64; 12],
}

/// Opens a cpu-clock event on this thread, any cpu, sampling every `sample_period` ns
/// with `sample_type`.
pub(crate) fn open_cpu_clock(sample_period: u64, sample_type: u64) -> Result<OwnedFd> {
    let attr = PerfEventAttr {
        type_: PERF_TYPE_SOFTWARE,
        size: std::mem::size_of::<PerfEventAttr>() as u32,
        config: PERF_COUNT_SW_CPU_CLOCK,
        sample_period,
        sample_type,
        rest: [0; 12],
    };
    // SAFETY: a valid attr; this thread, any cpu, no group, no flags.
    let fd = unsafe { libc::syscall(libc::SYS_perf_event_open, &attr as *const _, 0, -1, -1, 0) };
    check!(
        fd >= 0,
        "perf_event_open(cpu-clock): {}",
        std::io::Error::last_os_error()
    );
    // SAFETY: a new fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}
