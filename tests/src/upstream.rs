// SPDX-License-Identifier: GPL-2.0

//! The kernel's own ways of putting a program on a function, through raw bpf(2) calls
//! where libbpf 1.7 (libbpf-rs 0.27) has no API: an empty tracing program and
//! upstream 7.3's tracing_multi link.  For the benchmarks' baselines and the
//! selftests' coexistence checks (tests/src/bin/rkf-bench/main.rs includes this file).

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use anyhow::{bail, Result};
use libbpf_rs::libbpf_sys as sys;

/// `BPF_TRACE_FENTRY_MULTI` (include/uapi/linux/bpf.h).
pub(crate) const TRACE_FENTRY_MULTI: u32 = 59;
/// `BPF_LINK_CREATE`.
const LINK_CREATE: i64 = 28;

/// An empty program (`r0 = 0; exit`) of type TRACING for `attach_type`, loaded against
/// vmlinux BTF id `btf_id` (0 for the multi attach types).
pub(crate) fn empty_tracing_prog(attach_type: u32, btf_id: u32) -> Result<OwnedFd> {
    let insns = [
        // BPF_ALU64 | BPF_MOV | BPF_K: r0 = 0
        sys::bpf_insn {
            code: 0xb7,
            ..Default::default()
        },
        // BPF_JMP | BPF_EXIT
        sys::bpf_insn {
            code: 0x95,
            ..Default::default()
        },
    ];
    let mut opts = sys::bpf_prog_load_opts {
        sz: std::mem::size_of::<sys::bpf_prog_load_opts>() as _,
        expected_attach_type: attach_type,
        attach_btf_id: btf_id,
        ..Default::default()
    };
    // SAFETY: valid instructions, license and options for the duration of the call.
    let fd = unsafe {
        sys::bpf_prog_load(
            sys::BPF_PROG_TYPE_TRACING,
            std::ptr::null(),
            c"GPL".as_ptr(),
            insns.as_ptr(),
            2,
            &mut opts,
        )
    };
    if fd < 0 {
        bail!(
            "loading an empty tracing program (attach type {attach_type}, btf id {btf_id}): {}",
            std::io::Error::from_raw_os_error(-fd)
        );
    }
    // SAFETY: a new fd.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The kernel's tracing_multi link: libbpf 1.7 (libbpf-rs 0.27) has no API for it, so
/// a raw BPF_LINK_CREATE (`link_create.tracing_multi` of include/uapi/linux/bpf.h).
pub(crate) fn tracing_multi_link(prog: &OwnedFd, ids: &[u32]) -> Result<OwnedFd> {
    #[repr(C)]
    struct Attr {
        prog_fd: u32,
        target_fd: u32,
        attach_type: u32,
        flags: u32,
        ids: u64,
        cookies: u64,
        cnt: u32,
        pad: [u32; 7],
    }
    let attr = Attr {
        prog_fd: prog.as_raw_fd() as u32,
        target_fd: 0,
        attach_type: TRACE_FENTRY_MULTI,
        flags: 0,
        ids: ids.as_ptr() as u64,
        cookies: 0,
        cnt: ids.len() as u32,
        pad: [0; 7],
    };
    // SAFETY: a valid attr of the size given.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            LINK_CREATE,
            &attr,
            std::mem::size_of::<Attr>(),
        )
    };
    if r < 0 {
        bail!(
            "BPF_LINK_CREATE (tracing_multi): {}",
            std::io::Error::last_os_error()
        );
    }
    // SAFETY: a new fd.
    Ok(unsafe { OwnedFd::from_raw_fd(r as i32) })
}
