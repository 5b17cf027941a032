// SPDX-License-Identifier: GPL-2.0

//! A program that calls its own traced function again: the nested run is skipped by the
//! recursion guard (`bpf_prog_get_recursion_context()`, as `__bpf_prog_enter_recur()`)
//! and counted, in the link's misses on the function and in the program's
//! `recursion_misses` (`struct bpf_prog_info`), exactly as the kernel's own fentry, fexit
//! and fsession trampolines count it for the same program on the same function
//! (tests/progs/multi_recursion.bpf.c): the kernel's figures are taken first, in the same
//! boot, and rkf_multi's must be equal to them and to what the nesting gives.

use std::{mem::MaybeUninit, os::fd::AsFd};

use anyhow::{Context, Result};
use libbpf_rs::{query::LinkInfo, ProgramInput, ProgramMut};

use super::{
    attach,
    tramps::{check_tramps, Tramp},
};
use crate::{
    check_eq, diag,
    skel::multi_recursion::{MultiRecursionSkel, MultiRecursionSkelBuilder},
};
use rkf::{
    modules,
    multi::{self, Func},
    skeleton,
};

/// Outer calls of `rkf_testmod_recurse(0)` per case.
const CALLS: u64 = 3;

/// A kind of program.
#[derive(Clone, Copy)]
enum Kind {
    Fentry,
    Fexit,
    Session,
}

impl Kind {
    /// Its name, for messages.
    fn name(self) -> &'static str {
        match self {
            Kind::Fentry => "fentry",
            Kind::Fexit => "fexit",
            Kind::Session => "session",
        }
    }

    /// The kernel's program of this kind and rkf_multi's.
    fn progs<'a, 'obj>(
        self,
        skel: &'a MultiRecursionSkel<'obj>,
    ) -> (&'a ProgramMut<'obj>, &'a ProgramMut<'obj>) {
        let p = &skel.progs;
        match self {
            Kind::Fentry => (&p.single_fentry, &p.rkf_fentry),
            Kind::Fexit => (&p.single_fexit, &p.rkf_fexit),
            Kind::Session => (&p.single_session, &p.rkf_session),
        }
    }
}

/// The kinds of program, and per outer call the runs that got past the guard and those it
/// skipped: the nested call meets the guard once (its entry, or its exit for fexit), a
/// session's twice (it recurses from its entry run, inside which the nested call's entry
/// and exit runs both come), and a session's outer call runs it twice.
const KINDS: [(Kind, u64, u64); 3] = [
    (Kind::Fentry, 1, 1),
    (Kind::Fexit, 1, 1),
    (Kind::Session, 2, 2),
];

pub(super) fn recursion_misses_counted() -> Result<()> {
    modules::require("rkf_testmod")?;
    let target = multi::resolve(&["rkf_testmod:rkf_testmod_recurse"])?.funcs;
    check_eq!(target.len(), 1, "functions named rkf_testmod_recurse");
    let kernel = {
        let mut obj = MaybeUninit::uninit();
        let mut skel = load(&mut obj)?;
        let mut kernel = Vec::new();
        for (kind, runs, missed) in KINDS {
            let kind_name = kind.name();
            let link = kind
                .progs(&skel)
                .0
                .attach()
                .with_context(|| format!("the kernel's {kind_name} on rkf_testmod_recurse"))?;
            let id = LinkInfo::from_fd(link.as_fd())?.prog_id;
            let counts = calls(&mut skel, id)?;
            diag!("the kernel's {kind_name}: {counts:?} (runs, recursion_misses)");
            check_eq!(
                counts,
                (CALLS * runs, CALLS * missed),
                "the kernel's {kind_name}: (runs, recursion_misses) of {CALLS} calls"
            );
            kernel.push(counts);
        }
        kernel
    };
    // Loaded anew for each kind of trampoline: its rkf_multi programs hold rkf_multi,
    // which Tramp::run_both() reloads.
    Tramp::run_both(|tramp| {
        let mut obj = MaybeUninit::uninit();
        let mut skel = load(&mut obj)?;
        for ((kind, ..), want) in KINDS.into_iter().zip(&kernel) {
            rkf_case(&mut skel, &target, tramp, kind, *want)?;
        }
        Ok(())
    })
}

/// tests/progs/multi_recursion.bpf.c.
fn load(obj: &mut MaybeUninit<libbpf_rs::OpenObject>) -> Result<MultiRecursionSkel<'_>> {
    skeleton::load::<MultiRecursionSkelBuilder>(obj, "multi_recursion.bpf.c", skeleton::as_built)
}

/// An rkf_multi link of `kind` on `target`: its runs and its program's recursion_misses,
/// and its link's hits and misses on the function, must be `want` (the kernel's).
fn rkf_case(
    skel: &mut MultiRecursionSkel<'_>,
    target: &[Func],
    tramp: Tramp,
    kind: Kind,
    want: (u64, u64),
) -> Result<()> {
    let what = format!("rkf_multi {} ({tramp:?} trampoline)", kind.name());
    let link = attach(kind.progs(skel).1, target, None)?;
    check_tramps(target, tramp, &what)?;
    let counts = calls(skel, link.info()?.prog_id)?;
    check_eq!(counts, want, "{what}: (runs, recursion_misses)");
    let info = link.info()?;
    let per_func: Vec<(u64, u64)> = info.funcs.iter().map(|f| (f.hits, f.misses)).collect();
    check_eq!(per_func, vec![want], "{what}: the link's (hits, misses)");
    Ok(())
}

/// Makes `CALLS` outer calls of `rkf_testmod_recurse(0)`; returns the runs of the
/// programs that got past the guard meanwhile and what program `id`'s recursion_misses
/// grew by.
fn calls(skel: &mut MultiRecursionSkel<'_>, id: u32) -> Result<(u64, u64)> {
    let misses_before = recursion_misses(id)?;
    skel.maps.bss_data.as_deref_mut().context("no .bss")?.runs = 0;
    for _ in 0..CALLS {
        skel.progs
            .call_once
            .test_run(ProgramInput::default())
            .context("BPF_PROG_TEST_RUN of call_once")?;
    }
    let runs = skel.maps.bss_data.as_deref().context("no .bss")?.runs;
    Ok((runs, recursion_misses(id)? - misses_before))
}

/// Program `id`'s `recursion_misses`.
fn recursion_misses(id: u32) -> Result<u64> {
    libbpf_rs::query::ProgInfoIter::default()
        .find(|p| p.id == id)
        .map(|p| p.recursion_misses)
        .with_context(|| format!("program {id} is not listed"))
}
