// SPDX-License-Identifier: GPL-2.0

//! Coexistence with the kernel's own BPF trampolines: an in-kernel fentry trampoline and
//! upstream's tracing_multi link beside rkf_multi's links, each refused where the other holds
//! a function.

use std::{mem::MaybeUninit, os::fd::AsFd};

use anyhow::{bail, Context, Result};

use super::{
    attach,
    basic::{run_once, setup},
    refusal,
};
use crate::{check, check_eq, diag, skel::multi::MultiSkel, upstream};
use rkf::multi::{self, Func, Link};
use rkf_core::multi::Reason;

/// An in-kernel fentry trampoline on a function, and then upstream's tracing_multi link
/// on it, makes rkf_multi refuse it (EBUSY, named, with its holder), a glob leave it out
/// (counted as busy) and attach the rest, and, for the in-kernel fentry, the reverse: an
/// in-kernel attach to an rkf_multi function fails, and neither breaks the other.
pub(super) fn coexistence() -> Result<()> {
    let mut obj = MaybeUninit::uninit();
    let (mut skel, funcs) = setup(&mut obj)?;
    {
        let _kernel = skel
            .progs
            .plain_fentry
            .attach()
            .context("in-kernel fentry on bpf_fentry_test1")?;
        let _g = refused_and_left_out(&skel, &funcs, "an in-kernel trampoline")?;
        // The rest attaches.
        let _l = attach(&skel.progs.count_fentry0, &funcs[1..3], None)?;
        let bss = run_once(&mut skel)?;
        check_eq!(
            bss.counts[0][..3],
            [0, 1, 1],
            "counts beside the in-kernel trampoline"
        );
        check_eq!(
            bss.plain_runs,
            1,
            "runs of the in-kernel fentry beside rkf_multi's links"
        );
        let glob: Vec<u64> = (0..funcs.len()).map(|i| u64::from(i > 0)).collect();
        check_eq!(
            bss.counts[1][..funcs.len()],
            glob[..],
            "the glob's link beside the in-kernel trampoline"
        );
    }
    // The same beside upstream's tracing_multi link, which holds each of its functions
    // with a BPF trampoline of its own (an empty program: its runs are not counted).
    {
        let prog = upstream::empty_tracing_prog(upstream::TRACE_FENTRY_MULTI, 0)?;
        let _tracing_multi = upstream::tracing_multi_link(&prog, &[funcs[0].btf_id])?;
        let _g = refused_and_left_out(&skel, &funcs, "a tracing_multi link")?;
        let bss = run_once(&mut skel)?;
        let glob: Vec<u64> = (0..funcs.len()).map(|i| u64::from(i > 0)).collect();
        check_eq!(
            bss.counts[1][..funcs.len()],
            glob[..],
            "the glob's link beside tracing_multi"
        );
    }
    let _l = attach(&skel.progs.count_fentry0, &funcs[..3], None)?;
    {
        use std::os::fd::AsRawFd;
        // The kernel's attach of an fentry program, for its errno: its trampoline goes
        // through update_ftrace_direct_add() (kernel/bpf/trampoline.c), which refuses a
        // site that has a direct trampoline already with EINVAL (kernel/trace/ftrace.c).
        let fd = skel.progs.plain_fentry.as_fd().as_raw_fd();
        // SAFETY: a program fd; no name for an fentry program; a returned fd is ours.
        let r = unsafe { libbpf_rs::libbpf_sys::bpf_raw_tracepoint_open(std::ptr::null(), fd) };
        if r >= 0 {
            // SAFETY: the link's fd, ours.
            unsafe { libc::close(r) };
            bail!("an in-kernel fentry attached to a function rkf_multi holds");
        }
        check_eq!(
            -r,
            libc::EINVAL,
            "the in-kernel fentry's attach over rkf_multi: errno"
        );
    }
    let bss = run_once(&mut skel)?;
    check_eq!(
        bss.counts[0][..3],
        [1, 1, 1],
        "rkf_multi counts after the refused in-kernel attach"
    );
    check_eq!(bss.plain_runs, 0, "runs of the refused in-kernel fentry");
    Ok(())
}

/// With another direct trampoline (`beside`) on bpf_fentry_test1 (`funcs[0]`): an
/// rkf_multi attach naming it is refused (EBUSY, the function and why, the holder's
/// `bpf_trampoline_<n>` in the message), and a glob leaves it out, counted as busy, and
/// attaches the rest (count_fentry1's link, returned).
fn refused_and_left_out(skel: &MultiSkel<'_>, funcs: &[Func], beside: &str) -> Result<Link> {
    let e = refusal(
        &skel.progs.count_fentry0,
        &funcs[..3],
        None,
        (libc::EBUSY, Some((0, Reason::Busy))),
        &format!("rkf_multi beside {beside}"),
    )?;
    if !e.message.contains(": bpf_trampoline_") {
        // What ftrace shows of the function (its `direct-->` line names the holder).
        let text = multi::enabled_functions()?;
        let lines: Vec<&str> = text.lines().collect();
        for (i, l) in lines.iter().enumerate() {
            if l.starts_with("bpf_fentry_test1 ") {
                diag!("enabled_functions: {l:?}, then {:?}", lines.get(i + 1));
            }
        }
        bail!(
            "the refusal beside {beside} does not name the holder: {}",
            e.message
        );
    }
    let r = multi::resolve(&["bpf_fentry_test*"])?;
    let busy = r.skipped.get(&multi::Skip::Rule(Reason::Busy));
    check_eq!(
        busy.map(Vec::as_slice),
        Some(&["bpf_fentry_test1".to_string()][..]),
        "functions a glob left out beside {beside}: {:?}",
        r.skipped
    );
    check!(
        r.funcs.iter().all(|f| f.name != "bpf_fentry_test1"),
        "the glob kept bpf_fentry_test1 beside {beside}"
    );
    attach(&skel.progs.count_fentry1, &r.funcs, None)
}
