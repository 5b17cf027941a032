// SPDX-License-Identifier: GPL-2.0

//! rkf_multi's requests without the capabilities they need: `EPERM` without both CAP_BPF
//! and CAP_PERFMON.

use std::{mem::MaybeUninit, os::fd::AsFd};

use anyhow::Result;

use super::basic::setup;
use crate::{check_eq, privilege::CAP_CASES};
use rkf::multi::{self, Link};

/// Without both CAP_BPF and CAP_PERFMON every rkf_multi request gives EPERM, even on a
/// file opened while privileged; with both (and nothing else) an attach works.
pub(super) fn unprivileged() -> Result<()> {
    let mut obj = MaybeUninit::uninit();
    let (skel, funcs) = setup(&mut obj)?;
    let prog = skel.progs.count_fentry0.as_fd();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(multi::DEVICE)?;
    let info_errno = || {
        multi::info_request(&file, 0, &mut [])
            .map_or_else(|e| e.raw_os_error().unwrap_or(-1), |_| 0)
    };
    for case in CAP_CASES {
        let (attach, info) = case.run(|| {
            let attach = Link::attach(&prog, &funcs[..1], None).map_or_else(|e| e.errno, |_| 0);
            (attach, info_errno())
        })?;
        let want = if case.both() { 0 } else { libc::EPERM };
        check_eq!(attach, want, "attach errno, {}", case.name);
        // The privileged file has no link: its info request is ENOENT once allowed.
        let want = if case.both() {
            libc::ENOENT
        } else {
            libc::EPERM
        };
        check_eq!(info, want, "info errno on a privileged file, {}", case.name);
    }
    Ok(())
}
