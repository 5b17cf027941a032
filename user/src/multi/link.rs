// SPDX-License-Identifier: GPL-2.0

//! Links: attaching a program ([`Link`]), what rkf_multi reports of links ([`LinkInfo`],
//! [`links()`]), and a program's statistics ([`prog_stats()`]).

use std::{
    collections::BTreeMap,
    fmt,
    fs::File,
    os::fd::{AsFd, AsRawFd, OwnedFd},
};

use anyhow::{Context, Result};
use rkf_core::{
    abi::{self, AttachRequest, FuncInfo},
    multi::Reason,
};

use super::{
    device::{attach_request, info_request, open_device, DEVICE},
    ftrace::direct_holders,
    resolve::Func,
};

/// An attach that rkf_multi refused.
#[derive(Debug)]
pub struct AttachError {
    /// The errno.
    pub errno: i32,
    /// The function the refusal names, and why, if it names one.
    pub refused: Option<(usize, Reason)>,
    /// What to tell the user.
    pub message: String,
}

impl fmt::Display for AttachError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for AttachError {}

/// An attached link: the program runs on its functions until this is dropped.
pub struct Link {
    file: File,
    /// The link's id.
    pub id: u64,
    /// How long the attach ioctl took.
    pub attach_time: std::time::Duration,
}

/// What [`Link::info()`] and [`links()`] report.
#[derive(Clone, Debug)]
pub struct LinkInfo {
    /// The link's id.
    pub id: u64,
    /// Its program's id.
    pub prog_id: u32,
    /// What its program runs on.
    pub kind: rkf_core::abi::Kind,
    /// Whether it counts its program's runs and misses on each function
    /// ([`Link::attach_counted()`]): if not, every function's `hits` and `misses` are 0.
    pub counted: bool,
    /// Its functions, in site order.
    pub funcs: Vec<FuncInfo>,
}

impl LinkInfo {
    /// Runs of its program on all its functions, and runs the recursion guard skipped,
    /// if it counts them.
    pub fn counts(&self) -> Option<(u64, u64)> {
        self.counted.then(|| {
            self.funcs
                .iter()
                .fold((0, 0), |(h, m), f| (h + f.hits, m + f.misses))
        })
    }
}

/// A program's statistics (`struct bpf_prog_info`), on every function and attachment,
/// rkf_multi's included.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProgStats {
    /// Its runs (`run_cnt`): counted only while the kernel keeps BPF statistics
    /// (kernel.bpf_stats_enabled, or a `BPF_ENABLE_STATS` fd held).
    pub runs: u64,
    /// The runs the recursion guard skipped (`recursion_misses`), always counted.
    pub misses: u64,
}

/// The statistics of program `prog`.
pub fn prog_stats(prog: &impl AsFd) -> Result<ProgStats> {
    let mut info = libbpf_rs::libbpf_sys::bpf_prog_info::default();
    let mut len = size_of_val(&info) as u32;
    // SAFETY: `info` is a zeroed `struct bpf_prog_info` of `len` bytes, valid for writes;
    // with its array pointers 0 the kernel writes nothing else.
    let ret = unsafe {
        libbpf_rs::libbpf_sys::bpf_prog_get_info_by_fd(
            prog.as_fd().as_raw_fd(),
            &mut info,
            &mut len,
        )
    };
    if ret != 0 {
        return Err(std::io::Error::from_raw_os_error(-ret)).context("BPF_OBJ_GET_INFO_BY_FD");
    }
    Ok(ProgStats {
        runs: info.run_cnt,
        misses: info.recursion_misses,
    })
}

impl Link {
    /// Attaches `prog` (an rkf_multi fentry, fexit or session program) to `funcs`, with a
    /// cookie for each if `cookies` is given.  All or nothing.  The link keeps no counts
    /// of its own: the program's statistics count its runs ([`prog_stats()`]).
    pub fn attach(
        prog: &impl AsFd,
        funcs: &[Func],
        cookies: Option<&[u64]>,
    ) -> std::result::Result<Self, AttachError> {
        Self::attach_flags(prog, funcs, cookies, 0)
    }

    /// As [`Link::attach()`], the link counting its program's runs and misses on each
    /// function ([`LinkInfo::counts()`], [`FuncInfo::hits`]): 24 bytes a function more,
    /// and an atomic increment on every run.
    pub fn attach_counted(
        prog: &impl AsFd,
        funcs: &[Func],
        cookies: Option<&[u64]>,
    ) -> std::result::Result<Self, AttachError> {
        Self::attach_flags(prog, funcs, cookies, abi::F_COUNT)
    }

    /// `RKF_MULTI_IOC_ATTACH` of `prog` on `funcs` with `flags`.
    fn attach_flags(
        prog: &impl AsFd,
        funcs: &[Func],
        cookies: Option<&[u64]>,
        flags: u32,
    ) -> std::result::Result<Self, AttachError> {
        let plain = |errno: i32, what: String| AttachError {
            errno,
            refused: None,
            message: what,
        };
        let file = open_device().map_err(|e| {
            plain(
                e.raw_os_error().unwrap_or(0),
                format!("opening {DEVICE}: {e} (is rkf_multi loaded?)"),
            )
        })?;
        if let Some(c) = cookies {
            if c.len() != funcs.len() {
                return Err(plain(libc::EINVAL, "one cookie per function".into()));
            }
        }
        let ids: Vec<u32> = funcs.iter().map(|f| f.btf_id).collect();
        let addrs: Vec<u64> = funcs.iter().map(|f| f.addr).collect();
        // The BTF object of each module named, open for the request.
        let mut objects: BTreeMap<&str, OwnedFd> = BTreeMap::new();
        for m in funcs.iter().filter_map(|f| f.module.as_deref()) {
            if !objects.contains_key(m) {
                let fd = crate::btf::object_fd(m)
                    .map_err(|e| plain(libc::ENOENT, format!("the BTF of module {m}: {e:#}")))?;
                objects.insert(m, fd);
            }
        }
        let fds: Vec<i32> = funcs
            .iter()
            .map(|f| f.module.as_deref().map_or(0, |m| objects[m].as_raw_fd()))
            .collect();
        let mut req = AttachRequest {
            prog_fd: prog.as_fd().as_raw_fd() as u32,
            cnt: funcs.len() as u32,
            btf_ids: ids.as_ptr() as u64,
            addrs: addrs.as_ptr() as u64,
            cookies: cookies.map_or(0, |c| c.as_ptr() as u64),
            btf_fds: if objects.is_empty() {
                0
            } else {
                fds.as_ptr() as u64
            },
            flags,
            ..AttachRequest::default()
        };
        let start = std::time::Instant::now();
        let r = attach_request(&file, &mut req);
        let attach_time = start.elapsed();
        match r {
            Ok(()) => {
                let info = info_request(&file, 0, &mut [])
                    .map_err(|e| plain(e.raw_os_error().unwrap_or(0), format!("link info: {e}")))?;
                Ok(Self {
                    file,
                    id: info.id,
                    attach_time,
                })
            }
            Err(e) => {
                let errno = e.raw_os_error().unwrap_or(0);
                let refused = Reason::from_raw(req.reason)
                    .filter(|_| (req.bad_index as usize) < funcs.len())
                    .map(|r| (req.bad_index as usize, r));
                let message = match refused {
                    Some((i, Reason::Busy)) => {
                        let name = funcs[i].qualified_name();
                        // The holder's name only adds to the refusal: a failed read
                        // of enabled_functions is said, not made the error.
                        let holder = match direct_holders() {
                            Ok(h) => h.get(&name).map_or_else(String::new, |h| format!(": {h}")),
                            Err(err) => format!("; its holder unknown: {err:#};"),
                        };
                        format!(
                            "rkf_multi refused {name}: {}{holder} ({e})",
                            Reason::Busy.describe()
                        )
                    }
                    Some((i, r)) => format!(
                        "rkf_multi refused {}: {} ({e})",
                        funcs[i].qualified_name(),
                        r.describe()
                    ),
                    None => format!("rkf_multi attach of {} functions: {e}", funcs.len()),
                };
                Err(AttachError {
                    errno,
                    refused,
                    message,
                })
            }
        }
    }

    /// The link as rkf_multi reports it.
    pub fn info(&self) -> Result<LinkInfo> {
        info_of(&self.file, 0).map(|(i, _)| i)
    }
}

/// Reads link `id` (0: the file's own, N: the first with id N or more) and the next id.
fn info_of(file: &File, id: u64) -> Result<(LinkInfo, u64)> {
    // A link's functions are fixed, but the link found first may be closed before its
    // functions are read, and the second call then finds a later one: read again.
    let (req, funcs) = loop {
        let first = info_request(file, id, &mut []).context("RKF_MULTI_IOC_INFO")?;
        let mut funcs = vec![FuncInfo::default(); first.cnt as usize];
        let req = info_request(file, first.id, &mut funcs).context("RKF_MULTI_IOC_INFO")?;
        if req.id == first.id && req.cnt == first.cnt {
            break (req, funcs);
        }
    };
    Ok((
        LinkInfo {
            id: req.id,
            prog_id: req.prog_id,
            kind: rkf_core::abi::Kind::from_raw(req.kind)
                .with_context(|| format!("link {}: unknown kind {}", req.id, req.kind))?,
            counted: req.flags & abi::F_COUNT != 0,
            funcs,
        },
        req.next_id,
    ))
}

/// Every link, in id order.
pub fn links() -> Result<Vec<LinkInfo>> {
    let file = open_device().with_context(|| format!("opening {DEVICE} (is rkf_multi loaded?)"))?;
    let mut out = Vec::new();
    let mut next = 1;
    while next != 0 {
        match info_of(&file, next) {
            Ok((i, n)) => {
                out.push(i);
                next = n;
            }
            Err(e)
                if e.downcast_ref::<std::io::Error>()
                    .and_then(|e| e.raw_os_error())
                    == Some(libc::ENOENT) =>
            {
                break
            }
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}
