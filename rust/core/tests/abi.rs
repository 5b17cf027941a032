// SPDX-License-Identifier: GPL-2.0

//! Host tests of the user/kernel ABI (rkf_core::abi): the layout that c-shim/rkf.h
//! defines for C (the modules assert the same against its generated bindings), and the
//! ioctl numbers as `_IOWR()` of include/uapi/asm-generic/ioctl.h encodes them.

use std::mem::{offset_of, size_of};

use rkf_core::abi::*;

#[test]
fn attach_request_layout() {
    assert_eq!(size_of::<AttachRequest>(), 56);
    assert_eq!(offset_of!(AttachRequest, prog_fd), 0);
    assert_eq!(offset_of!(AttachRequest, cnt), 4);
    assert_eq!(offset_of!(AttachRequest, btf_ids), 8);
    assert_eq!(offset_of!(AttachRequest, addrs), 16);
    assert_eq!(offset_of!(AttachRequest, cookies), 24);
    assert_eq!(offset_of!(AttachRequest, btf_fds), 32);
    assert_eq!(offset_of!(AttachRequest, flags), 40);
    assert_eq!(offset_of!(AttachRequest, bad_index), 44);
    assert_eq!(offset_of!(AttachRequest, reason), 48);
    assert_eq!(offset_of!(AttachRequest, pad), 52);
}

#[test]
fn info_layouts() {
    assert_eq!(size_of::<FuncInfo>(), 32);
    assert_eq!(offset_of!(FuncInfo, misses), 24);
    assert_eq!(size_of::<LinkInfo>(), 48);
    assert_eq!(offset_of!(LinkInfo, prog_id), 8);
    assert_eq!(offset_of!(LinkInfo, kind), 12);
    assert_eq!(offset_of!(LinkInfo, cnt), 16);
    assert_eq!(offset_of!(LinkInfo, buf_cnt), 20);
    assert_eq!(offset_of!(LinkInfo, funcs), 24);
    assert_eq!(offset_of!(LinkInfo, next_id), 32);
    assert_eq!(offset_of!(LinkInfo, flags), 40);
    assert_eq!(offset_of!(LinkInfo, pad), 44);
    assert_eq!(size_of::<PercpuProbe>(), 16);
    assert_eq!(offset_of!(PercpuProbe, self_addr), 8);
}

#[test]
fn ioctl_numbers() {
    // _IOWR('r', 1, 56 bytes) and _IOWR('r', 2, 48 bytes).
    assert_eq!(IOC_ATTACH, 0xc038_7201);
    assert_eq!(IOC_INFO, 0xc030_7202);
    assert_eq!(F_COUNT, 1);
    assert_eq!(PERCPU_PROBE_MAGIC.to_be_bytes(), *b"rkfp");
}
