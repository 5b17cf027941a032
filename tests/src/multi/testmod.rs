// SPDX-License-Identifier: GPL-2.0

//! Functions of another module, rkf_testmod's rkf_testmod_multi_test*(), called once each
//! with known arguments by bpf_rkf_testmod_multi_run(), which checks their return values:
//! arguments, argument counts, cookies and return values through ctx and the helpers;
//! then the refusals of BTF objects that are not a module's.
//!
//! Here too the targets and tests/progs/multi_testmod.bpf.c, which calls them, for the
//! other rooms that trace rkf_testmod.

use std::{mem::MaybeUninit, os::fd::AsFd};

use anyhow::{Context, Result};
use libbpf_rs::ProgramInput;

use super::{
    attach,
    basic::{load, reset, targets},
};
use crate::{check, check_eq, diag};
use rkf::{
    modules,
    multi::{self, Func},
    skeleton,
};
use rkf_core::{abi::AttachRequest, multi::Reason};

/// A value compared at its type: (mask, value).  Narrow arguments and return values
/// leave the register's upper bits undefined.
pub(super) type Masked = (u64, u64);
const W32: u64 = 0xffff_ffff;

/// rkf_testmod_multi_test1, 2, 3 and 6 as bpf_rkf_testmod_multi_run() calls them: the
/// argument count, each argument and the return value, compared at their types.
pub(super) const TESTMOD_CALLS: [(u64, &[Masked], Masked); 4] = [
    (1, &[(W32, 1)], (W32, 2)),
    (2, &[(0xff, 0xfe), (u64::MAX, 3)], (u64::MAX, 1)),
    (
        3,
        &[(0xffff, 4), (W32, 0xffff_fffb), (u64::MAX, 6)],
        (u64::MAX, 5),
    ),
    (
        6,
        &[
            (u64::MAX, 1),
            (u64::MAX, 2),
            (u64::MAX, 3),
            (u64::MAX, 4),
            (u64::MAX, 5),
            (u64::MAX, 6),
        ],
        (u64::MAX, 21),
    ),
];

/// rkf_testmod's four test targets of at most six arguments (the glob leaves out the
/// wider ones, which the default template cannot take), in [`TESTMOD_CALLS`]' order: the
/// call fails otherwise.
pub(super) fn testmod_targets() -> Result<Vec<Func>> {
    modules::require("rkf_testmod")?;
    let mut funcs = multi::resolve(&["rkf_testmod:rkf_testmod_multi_test*"])?.funcs;
    funcs.sort_by(|a, b| a.name.cmp(&b.name));
    let names: Vec<&str> = funcs.iter().map(|f| f.name.as_str()).collect();
    check_eq!(
        names,
        [
            "rkf_testmod_multi_test1",
            "rkf_testmod_multi_test2",
            "rkf_testmod_multi_test3",
            "rkf_testmod_multi_test6"
        ],
        "rkf_testmod's test targets"
    );
    Ok(funcs)
}

/// tests/progs/multi_testmod.bpf.c, which calls rkf_testmod's targets.
pub(super) fn load_testmod(
    obj: &mut MaybeUninit<libbpf_rs::OpenObject>,
) -> Result<crate::skel::multi_testmod::MultiTestmodSkel<'_>> {
    use crate::skel::multi_testmod::MultiTestmodSkelBuilder;
    skeleton::load::<MultiTestmodSkelBuilder>(obj, "multi_testmod.bpf.c", skeleton::as_built)
}

/// Calls each rkf_testmod target once, those of more than six arguments too; fails if
/// one returned a wrong value.
pub(super) fn run_testmod_targets(
    tm: &crate::skel::multi_testmod::MultiTestmodSkel<'_>,
) -> Result<()> {
    tm.progs
        .run_testmod_targets
        .test_run(ProgramInput::default())
        .context("BPF_PROG_TEST_RUN of run_testmod_targets")?;
    let bad = tm
        .maps
        .data_data
        .as_deref()
        .context("no .data")?
        .bad_returns;
    check_eq!(
        bad,
        0,
        "functions that returned a wrong value (bit mask: test1, 2, 3, 6 in bits 0-3, test7, \
         11, 12 in bits 4-6)"
    );
    Ok(())
}

/// One link on rkf_testmod's targets, each called once: each runs the program once (for
/// the tests that reload rkf_testmod).
pub(crate) fn testmod_smoke() -> Result<()> {
    let funcs = testmod_targets()?;
    check!(!funcs.is_empty(), "no rkf_testmod target resolved");
    let mut obj = MaybeUninit::uninit();
    let mut skel = load(&mut obj, &funcs)?;
    let mut tobj = MaybeUninit::uninit();
    let tm = load_testmod(&mut tobj)?;
    let _link = attach(&skel.progs.count_fentry0, &funcs, None)?;
    reset(&mut skel)?;
    run_testmod_targets(&tm)?;
    let bss = skel.maps.bss_data.as_deref().context("no .bss")?;
    check_eq!(
        bss.counts[0][..funcs.len()],
        vec![1; funcs.len()][..],
        "runs on rkf_testmod's targets {:?}",
        funcs.iter().map(|f| f.name.as_str()).collect::<Vec<_>>()
    );
    Ok(())
}

/// rkf_testmod's functions through ctx and the helpers, then the refusals of BTF objects
/// that are not a module's (the tests this file's header names).
pub(super) fn module_targets() -> Result<()> {
    let funcs = testmod_targets()?;
    check!(
        funcs
            .iter()
            .all(|f| f.module.as_deref() == Some("rkf_testmod")),
        "resolved as rkf_testmod's: {funcs:?}"
    );
    let want = TESTMOD_CALLS;
    let mut obj = MaybeUninit::uninit();
    let mut skel = load(&mut obj, &funcs)?;
    let mut tobj = MaybeUninit::uninit();
    let tm = load_testmod(&mut tobj)?;
    let cookies: Vec<u64> = (0..funcs.len() as u64).map(|i| 0xc0de_0000 + i).collect();
    let fentry = attach(&skel.progs.multi_fentry, &funcs, Some(&cookies))?;
    let _fexit = attach(&skel.progs.multi_fexit, &funcs, Some(&cookies))?;
    let info = fentry.info()?;
    check_eq!(info.funcs.len(), funcs.len(), "functions of the link");
    reset(&mut skel)?;
    run_testmod_targets(&tm)?;
    let bss = skel.maps.bss_data.as_deref().context("no .bss")?;
    check_eq!(
        bss.unknown_ip,
        0,
        "calls with an unexpected bpf_get_func_ip()"
    );
    for (i, (f, (nr, args, (rmask, ret)))) in funcs.iter().zip(want).enumerate() {
        for (what, r) in [
            ("fentry", &bss.fentry_recs[i]),
            ("fexit", &bss.fexit_recs[i]),
        ] {
            check_eq!(r.hits, 1, "{what} {}: hits", f.name);
            check_eq!(r.nr_args, nr, "{what} {}: bpf_get_func_arg_cnt()", f.name);
            check_eq!(r.arg_err, 0, "{what} {}: helper errors", f.name);
            check_eq!(r.cookie, cookies[i], "{what} {}: cookie", f.name);
            for (j, &(mask, v)) in args.iter().enumerate() {
                check_eq!(r.args[j] & mask, v, "{what} {}: ctx argument {j}", f.name);
                check_eq!(
                    r.helper_args[j],
                    r.args[j],
                    "{what} {}: bpf_get_func_arg({j}) against ctx",
                    f.name
                );
            }
        }
        let r = &bss.fexit_recs[i];
        check_eq!(
            r.ret & rmask,
            ret,
            "fexit {}: return value through ctx",
            f.name
        );
        check_eq!(
            r.helper_ret,
            r.ret,
            "fexit {}: bpf_get_func_ret() against ctx",
            f.name
        );
    }
    drop(fentry);

    // BTF objects that are not a loaded module's.
    let vmlinux = rkf::btf::object_fd("vmlinux")?;
    let testmod = rkf::btf::object_fd("rkf_testmod")?;
    let prog_fd = std::os::fd::AsRawFd::as_raw_fd(&skel.progs.count_fentry1.as_fd());
    let n = funcs.len();
    let cases: [(&str, i32, (i32, u32, u32)); 3] = [
        (
            "vmlinux's BTF",
            std::os::fd::AsRawFd::as_raw_fd(&vmlinux),
            (libc::EINVAL, 1, Reason::NotModuleBtf as u32),
        ),
        (
            "a program fd",
            prog_fd,
            (libc::EINVAL, 1, Reason::NotModuleBtf as u32),
        ),
        ("no fd", 9999, (libc::EBADF, 1, Reason::BadFd as u32)),
    ];
    for (what, fd, want) in cases {
        // The bad fd on the second function, the others rkf_testmod's: the refusal
        // names the second.
        let mut fds = vec![std::os::fd::AsRawFd::as_raw_fd(&testmod); n];
        fds[1] = fd;
        let got = raw_attach(&skel.progs.count_fentry1, &funcs, &fds)?;
        diag!(
            "BTF fd of {what}: errno {}, function {}, reason {}",
            got.0,
            got.1,
            got.2
        );
        check_eq!(
            got,
            want,
            "attach with the BTF fd of {what}: (errno, index, reason)"
        );
    }
    // A vmlinux function through rkf_testmod's BTF (split on vmlinux's, so the id
    // resolves): the address is not rkf_testmod's, and the link would hold the wrong
    // module.
    let vmlinux_fn = &targets()?[..1];
    let got = raw_attach(
        &skel.progs.count_fentry1,
        vmlinux_fn,
        &[std::os::fd::AsRawFd::as_raw_fd(&testmod)],
    )?;
    check_eq!(
        got,
        (libc::EINVAL, 0, Reason::WrongAddress as u32),
        "{} through rkf_testmod's BTF: (errno, index, reason)",
        vmlinux_fn[0].name
    );
    // Nothing of those attempts runs.
    reset(&mut skel)?;
    tm.progs
        .run_testmod_targets
        .test_run(ProgramInput::default())?;
    let bss = skel.maps.bss_data.as_deref().context("no .bss")?;
    check_eq!(
        bss.counts[1][..n].iter().sum::<u64>(),
        0,
        "hits of refused links"
    );
    Ok(())
}

/// An attach request with the BTF fds given: the errno (0 if it attached, and then the
/// link is detached again), and the index and reason of a refusal.
fn raw_attach(prog: &impl AsFd, funcs: &[Func], btf_fds: &[i32]) -> Result<(i32, u32, u32)> {
    use std::os::fd::AsRawFd;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(multi::DEVICE)?;
    let ids: Vec<u32> = funcs.iter().map(|f| f.btf_id).collect();
    let addrs: Vec<u64> = funcs.iter().map(|f| f.addr).collect();
    let mut req = AttachRequest {
        prog_fd: prog.as_fd().as_raw_fd() as u32,
        cnt: funcs.len() as u32,
        btf_ids: ids.as_ptr() as u64,
        addrs: addrs.as_ptr() as u64,
        btf_fds: btf_fds.as_ptr() as u64,
        ..Default::default()
    };
    let errno = multi::attach_request(&file, &mut req)
        .map_or_else(|e| e.raw_os_error().unwrap_or(-1), |()| 0);
    Ok((errno, req.bad_index, req.reason))
}
