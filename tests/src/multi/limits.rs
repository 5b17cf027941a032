// SPDX-License-Identifier: GPL-2.0

//! The links one function takes, after upstream's rollback subtest "unlink"
//! (`serial_test_tracing_multi_attach_rollback` in
//! tools/testing/selftests/bpf/prog_tests/tracing_multi.c): the last function of a set
//! already holds the most links it may (`MAX_LINKS_PER_FUNC`, 38, the kernel's
//! `BPF_MAX_TRAMP_LINKS` on x86-64), each with a program of its own, so a link on the set
//! is refused whole.  Upstream gets the trampolines of the first functions, then rolls
//! back; rkf_multi checks every function against the links there before it builds or
//! hooks anything, so there is nothing to roll back: the test checks that nothing runs
//! and no link is left, as upstream's does.

use std::mem::MaybeUninit;

use anyhow::{Context, Result};

use super::{
    attach,
    basic::{run_once, setup},
    refusal,
    tramps::{check_tramps, Tramp},
};
use crate::{
    check, check_eq,
    skel::multi::MultiSkel,
    skel::multi_filler::{MultiFillerSkel, MultiFillerSkelBuilder},
};
use rkf::{
    multi::{self, Func},
    skeleton,
};
use rkf_core::multi::{Reason, MAX_LINKS_PER_FUNC};

/// The fentry and fexit counters of multi.bpf.c's `count_fentry0` and `count_fexit0`.
const FENTRY0: usize = 0;
const FEXIT0: usize = 4;

/// Checks that each filler ran exactly `want` times on its function and never elsewhere,
/// then clears them.
fn check_fillers(fillers: &mut [MultiFillerSkel<'_>], want: u64, what: &str) -> Result<()> {
    for (i, f) in fillers.iter_mut().enumerate() {
        let bss = f.maps.bss_data.as_deref_mut().context("no .bss")?;
        check_eq!(
            (bss.hits, bss.other),
            (want, 0),
            "{what}: filler {i}'s runs (on it, elsewhere)"
        );
        bss.hits = 0;
    }
    Ok(())
}

/// The ids of rkf_multi's links.
fn link_ids() -> Result<Vec<u64>> {
    Ok(multi::links()?.iter().map(|l| l.id).collect())
}

/// Checks that `skel`'s `count_fentry0` (or, with `fexit`, `count_fexit0`) on `set` is
/// refused as `want` says (errno, the function refused and why), with no link left.
fn refused(
    skel: &MultiSkel<'_>,
    fexit: bool,
    set: &[Func],
    want: (i32, Option<(usize, Reason)>),
) -> Result<()> {
    let p = if fexit {
        &skel.progs.count_fexit0
    } else {
        &skel.progs.count_fentry0
    };
    let what = if fexit { "fexit" } else { "fentry" };
    let before = link_ids()?;
    refusal(
        p,
        set,
        None,
        want,
        &format!("{what} on a set whose last function is full"),
    )?;
    check_eq!(
        link_ids()?,
        before,
        "{what}: rkf_multi's links after the refusal"
    );
    Ok(())
}

/// Through generated trampolines, then the shared one: 38 links (fillers) on
/// bpf_fentry_test5, then an fentry and an fexit link on bpf_fentry_test1..5 are refused
/// (`E2BIG`, the fifth function, `TooManyLinks`), and neither runs anywhere while every
/// filler still runs once per call; a filler's program on a set with its function is
/// refused (`EBUSY`, `SameProgram`); with one filler gone, the fentry link attaches and
/// runs exactly once on each of the five.
pub(super) fn link_limit_refused_whole() -> Result<()> {
    Tramp::run_both(at_limit)
}

fn at_limit(tramp: Tramp) -> Result<()> {
    let mut obj = MaybeUninit::uninit();
    let (mut skel, funcs) = setup(&mut obj)?;
    let (set, last) = (&funcs[..5], &funcs[4..5]);
    let mut objs: Vec<MaybeUninit<libbpf_rs::OpenObject>> = (0..MAX_LINKS_PER_FUNC)
        .map(|_| MaybeUninit::uninit())
        .collect();
    let mut fillers = Vec::with_capacity(objs.len());
    for o in objs.iter_mut() {
        fillers.push(skeleton::load::<MultiFillerSkelBuilder>(
            o,
            "multi_filler.bpf.c",
            |open| {
                let bss = open.maps.bss_data.as_deref_mut().context("no .bss")?;
                bss.target_ip = last[0].addr;
                bss.target_pid = nix::unistd::gettid().as_raw() as u32;
                Ok(())
            },
        )?);
    }
    let mut links = Vec::with_capacity(fillers.len());
    for f in &fillers {
        links.push(attach(&f.progs.filler, last, None)?);
    }
    check_tramps(last, tramp, "the full function")?;
    let full = Some((4, Reason::TooManyLinks));
    refused(&skel, false, set, (libc::E2BIG, full))?;
    refused(&skel, true, set, (libc::E2BIG, full))?;
    // Nothing half-attached: the first four functions run no program, the fifth its
    // fillers only.
    let bss = run_once(&mut skel)?;
    check!(
        bss.counts[FENTRY0]
            .iter()
            .chain(bss.counts[FEXIT0].iter())
            .all(|&c| c == 0),
        "a refused link's program ran: fentry {:?}, fexit {:?}",
        bss.counts[FENTRY0],
        bss.counts[FEXIT0]
    );
    check_fillers(&mut fillers, 1, "beside the refused links")?;
    // The same program twice on a function.
    let before = link_ids()?;
    refusal(
        &fillers[0].progs.filler,
        &funcs[3..5],
        None,
        (libc::EBUSY, Some((1, Reason::SameProgram))),
        "a filler's program twice on its function",
    )?;
    check_eq!(link_ids()?, before, "rkf_multi's links after the refusal");
    // Room for one more.
    drop(links.pop());
    let _l = attach(&skel.progs.count_fentry0, set, None)?;
    check_tramps(set, tramp, "the set")?;
    let bss = run_once(&mut skel)?;
    check_eq!(
        bss.counts[FENTRY0][..funcs.len()],
        (0..funcs.len())
            .map(|i| u64::from(i < 5))
            .collect::<Vec<_>>()[..],
        "the fentry link's runs with room on the fifth function"
    );
    let n = links.len();
    check_fillers(&mut fillers[..n], 1, "the fillers still attached")?;
    check_fillers(&mut fillers[n..], 0, "the filler detached")?;
    Ok(())
}
