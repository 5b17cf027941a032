// SPDX-License-Identifier: GPL-2.0

//! The ABI of `/dev/rkf_multi`: its ioctl numbers and requests (c-shim/rkf.h for C,
//! asserted by rkf_multi).

use core::mem::size_of;

/// The ioctl type of `/dev/rkf_multi` (`'r'`).
pub const IOC_TYPE: u8 = b'r';
/// The number of `RKF_MULTI_IOC_ATTACH`.
pub const IOC_NR_ATTACH: u8 = 1;
/// The number of `RKF_MULTI_IOC_INFO`.
pub const IOC_NR_INFO: u8 = 2;

/// `_IOWR(type, nr, size)` of include/uapi/asm-generic/ioctl.h: read and write (3) in
/// bits 30-31, the size in bits 16-29, the type in bits 8-15, the number in bits 0-7.
pub const fn iowr(ty: u8, nr: u8, size: usize) -> u32 {
    (3 << 30) | ((size as u32) << 16) | ((ty as u32) << 8) | nr as u32
}

/// `RKF_MULTI_IOC_ATTACH`: attach the file's link once ([`AttachRequest`]).
pub const IOC_ATTACH: u32 = iowr(IOC_TYPE, IOC_NR_ATTACH, size_of::<AttachRequest>());
/// `RKF_MULTI_IOC_INFO`: describe a link ([`LinkInfo`]).
pub const IOC_INFO: u32 = iowr(IOC_TYPE, IOC_NR_INFO, size_of::<LinkInfo>());

/// `struct rkf_multi_attach_request`: attach a program to a set of functions.
///
/// The arrays are user addresses of `cnt` entries each.  On a refusal of one function,
/// `bad_index` names it and `reason` says why (`rkf_core::multi::Reason`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AttachRequest {
    /// A TRACING program loaded as fentry, fexit or fsession (or their sleepable forms)
    /// against `rkf_multi_tmpl6()` (functions of up to six arguments) or
    /// `rkf_multi_tmpl12()` (up to twelve).
    pub prog_fd: u32,
    /// How many functions.
    pub cnt: u32,
    /// `u32[cnt]`: the functions' BTF ids.
    pub btf_ids: u64,
    /// `u64[cnt]`: their addresses, as /proc/kallsyms gives them.
    pub addrs: u64,
    /// `u64[cnt]`: `bpf_get_attach_cookie()` for each, or 0 for none.
    pub cookies: u64,
    /// `i32[cnt]`: for each function, an fd of the BTF object of the module it is in, or
    /// 0 for vmlinux (so fd 0 cannot name a BTF object, as with BPF's
    /// `attach_btf_obj_fd`); or 0 for none: every function in vmlinux.
    pub btf_fds: u64,
    /// [`F_COUNT`] or 0.
    pub flags: u32,
    /// Out: the function a refusal is about, or `u32::MAX`.
    pub bad_index: u32,
    /// Out: why it was refused (`Reason`), or 0.
    pub reason: u32,
    /// 0.
    pub pad: u32,
}

/// `RKF_MULTI_F_COUNT` ([`AttachRequest::flags`], [`LinkInfo::flags`]): the link keeps a
/// count of its program's runs and misses on each function ([`FuncInfo::hits`] and
/// [`FuncInfo::misses`]), 24 bytes a function (with the cookie) and an atomic increment
/// on every run.
/// Without it, only the kernel's statistics of the program count its runs.
pub const F_COUNT: u32 = 1 << 0;

/// `struct rkf_multi_func_info`: one function of a link.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FuncInfo {
    /// The function's address.
    pub addr: u64,
    /// Its cookie.
    pub cookie: u64,
    /// Program runs on it, or 0 if the link does not count them ([`F_COUNT`]).
    pub hits: u64,
    /// Runs skipped by the recursion guard, or 0 likewise.
    pub misses: u64,
}

/// What a link's program runs on (`RKF_MULTI_KIND_*`, [`LinkInfo::kind`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u32)]
pub enum Kind {
    /// Function entry: fentry and fentry.s programs.
    Fentry = 0,
    /// Function exit: fexit and fexit.s programs.
    Fexit = 1,
    /// Both, with a cookie from entry to exit: fsession and fsession.s programs.
    Session = 2,
}

impl Kind {
    /// Decodes [`LinkInfo::kind`].
    pub fn from_raw(v: u32) -> Option<Self> {
        match v {
            0 => Some(Self::Fentry),
            1 => Some(Self::Fexit),
            2 => Some(Self::Session),
            _ => None,
        }
    }
}

/// `struct rkf_multi_link_info`: a link, for introspection.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkInfo {
    /// In: 0 for the file's own link, or N for the first link whose id is N or more.
    /// Out: its id (ids start at 1 and grow).
    pub id: u64,
    /// Out: the program's id.
    pub prog_id: u32,
    /// Out: what its program runs on ([`Kind`] as a number).
    pub kind: u32,
    /// Out: its functions.
    pub cnt: u32,
    /// In: the room in `funcs`.
    pub buf_cnt: u32,
    /// In: `FuncInfo[buf_cnt]`, filled with the first functions.
    pub funcs: u64,
    /// Out: the id of the next link, or 0 if it is the last.
    pub next_id: u64,
    /// Out: the flags it was attached with ([`F_COUNT`]).
    pub flags: u32,
    /// Out: 0.
    pub pad: u32,
}
