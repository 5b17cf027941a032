// SPDX-License-Identifier: GPL-2.0

//! Functions of more than six arguments, after upstream's module subtests of
//! tracing_multi (tools/testing/selftests/bpf/prog_tests/tracing_multi.c, on
//! bpf_testmod's 7- and 11-argument functions): rkf_testmod's
//! `rkf_testmod_multi_test7()` and `_test11()`, traced by programs loaded against
//! `rkf_multi_tmpl12()` (tests/progs/multi_testmod.bpf.c) through a generated trampoline
//! (fentry and fexit) and through the shared one (a session beside an fexit).

use std::mem::MaybeUninit;

use anyhow::{Context, Result};
use libbpf_rs::ProgramInput;
use rkf::{
    multi::{self, Func, Skip},
    skeleton,
};
use rkf_core::multi::Reason;

use super::{attach, load};
use crate::{
    check, check_eq,
    skel::multi_testmod::{types::wide_rec, MultiTestmodSkel, MultiTestmodSkelBuilder},
};

/// A value compared at its C type: (mask, value).  A narrow argument leaves the upper
/// bits of its register or stack slot undefined; u64, s64 and pointers are compared whole.
type Typed = (u64, u64);
const ALL: u64 = u64::MAX;

/// The arguments bpf_rkf_testmod_multi_run_wide() passes (c-shim/rkf_testmod_shim.c;
/// test7 takes the first seven), at their types: u64, s8, u16, s32, void *, s16, s64, u8,
/// s32, u64, s64.
const ARGS11: [Typed; 11] = [
    (ALL, 0xfedc_ba98_7654_3210),
    (0xff, -7i8 as u8 as u64),
    (0xffff, 0xfff0),
    (0xffff_ffff, -100_000i32 as u32 as u64),
    (ALL, 0xffff_8880_1234_5678),
    (0xffff, -300i16 as u16 as u64),
    (ALL, -0x0123_4567_89ab_cdefi64 as u64),
    (0xff, 0xfe),
    (0xffff_ffff, -2i32 as u32 as u64),
    (ALL, 0x8000_0000_0000_0001),
    (ALL, -0x7fff_ffff_ffff_ffffi64 as u64),
];

/// What each returns: the sum of its arguments as signed values of their types.
fn sum(nr: usize) -> u64 {
    let signed = [
        0xfedc_ba98_7654_3210,
        -7i64 as u64,
        0xfff0,
        -100_000i64 as u64,
        0xffff_8880_1234_5678,
        -300i64 as u64,
        -0x0123_4567_89ab_cdefi64 as u64,
        0xfe,
        -2i64 as u64,
        0x8000_0000_0000_0001,
        -0x7fff_ffff_ffff_ffffi64 as u64,
    ];
    signed[..nr].iter().fold(0u64, |s, &v| s.wrapping_add(v))
}

/// `EINVAL` as bpf_get_func_arg() returns it past the last argument.
const EINVAL: i64 = -(libc::EINVAL as i64);

/// The record kinds of multi_testmod.bpf.c: fentry, fexit, the session's entry and exit.
const FENTRY: usize = 0;
const FEXIT: usize = 1;
const SESSION_ENTRY: usize = 2;
const SESSION_EXIT: usize = 3;

/// What wide_session writes into its cookie on entry, for function `i`.
const SESSION_COOKIE: u64 = 0x5e55_0000_0000_0000;

/// rkf_testmod_multi_test7 and _test11, resolved for a program of twelve arguments.
fn wide_targets() -> Result<Vec<Func>> {
    rkf::modules::require("rkf_testmod")?;
    let all = multi::resolve_wide(&["rkf_testmod:rkf_testmod_multi_test*"])?.funcs;
    let mut funcs = Vec::new();
    for (name, nr) in [
        ("rkf_testmod_multi_test7", 7),
        ("rkf_testmod_multi_test11", 11),
    ] {
        let f = all
            .iter()
            .find(|f| f.name == name)
            .with_context(|| format!("resolve_wide() left out {name}: {all:?}"))?;
        check_eq!(f.nr_args, nr, "{name}: arguments in BTF");
        funcs.push(f.clone());
    }
    Ok(funcs)
}

/// Calls both once through bpf_rkf_testmod_multi_run_wide(); fails if one returned a
/// wrong value (a stack argument or the return value corrupted on the way).
fn run_wide(tm: &mut MultiTestmodSkel<'_>) -> Result<()> {
    let bss = tm.maps.bss_data.as_deref_mut().context("no .bss")?;
    for kind in bss.wide_recs.iter_mut() {
        for r in kind.iter_mut() {
            *r = wide_rec::default();
        }
    }
    bss.bad_cookie = 0;
    tm.progs
        .run_wide_targets
        .test_run(ProgramInput::default())
        .context("BPF_PROG_TEST_RUN of run_wide_targets")?;
    let bad = tm
        .maps
        .data_data
        .as_deref()
        .context("no .data")?
        .bad_wide_returns;
    check_eq!(
        bad,
        0,
        "bpf_rkf_testmod_multi_run_wide(): functions that returned a wrong value (bit mask)"
    );
    Ok(())
}

/// One run of a program on function `f` (index `i`): one hit at its address, its
/// argument count, every argument at its type through ctx and exactly as
/// bpf_get_func_arg() gives it, bpf_get_func_arg() past the last one failing, the slots
/// past the arguments 0, and on exit (`ret`: the return value it must see) the return
/// value through the slot after the arguments and bpf_get_func_ret().
fn check_rec(what: &str, f: &Func, r: &wide_rec, ret: Option<u64>) -> Result<()> {
    let nr = f.nr_args as usize;
    check_eq!(r.hits, 1, "{what} {}: runs", f.name);
    check_eq!(r.ip, f.addr, "{what} {}: bpf_get_func_ip()", f.name);
    check_eq!(
        r.nr_args,
        nr as u64,
        "{what} {}: bpf_get_func_arg_cnt()",
        f.name
    );
    check_eq!(r.arg_err, 0, "{what} {}: bpf_get_func_arg() errors", f.name);
    check_eq!(
        r.past_last,
        EINVAL,
        "{what} {}: bpf_get_func_arg({nr})",
        f.name
    );
    for (j, &(mask, v)) in ARGS11[..nr].iter().enumerate() {
        check_eq!(
            r.args[j] & mask,
            v,
            "{what} {}: ctx[{j}] at its type",
            f.name
        );
        check_eq!(
            r.helper_args[j],
            r.args[j],
            "{what} {}: bpf_get_func_arg({j}) against ctx",
            f.name
        );
    }
    for j in nr..12 {
        // On exit bpf_get_func_ret() reads ctx[nr_args].
        let want = match ret {
            Some(v) if j == nr => v,
            _ => 0,
        };
        check_eq!(
            r.args[j],
            want,
            "{what} {}: ctx[{j}], past the arguments",
            f.name
        );
    }
    if let Some(v) = ret {
        check_eq!(r.ret_err, 0, "{what} {}: bpf_get_func_ret() error", f.name);
        check_eq!(r.helper_ret, v, "{what} {}: bpf_get_func_ret()", f.name);
    }
    Ok(())
}

pub(super) fn wide_module_targets() -> Result<()> {
    let funcs = wide_targets()?;
    // A program of six arguments: resolve() leaves them out, and the kernel refuses it.
    let narrow = multi::resolve(&["rkf_testmod:rkf_testmod_multi_test*"])?;
    let skipped = narrow
        .skipped
        .get(&Skip::Rule(Reason::TooManyArgs))
        .cloned()
        .unwrap_or_default();
    check_eq!(
        skipped,
        [
            "rkf_testmod_multi_test11 [rkf_testmod]",
            "rkf_testmod_multi_test7 [rkf_testmod]"
        ],
        "resolve() for rkf_multi_tmpl6: left out for their arguments"
    );
    let mut obj = MaybeUninit::uninit();
    let skel = load(&mut obj, &funcs)?;
    for (i, f) in funcs.iter().enumerate() {
        let e = match multi::Link::attach(&skel.progs.multi_fexit, &funcs[i..=i], None) {
            Ok(_) => anyhow::bail!("an fexit program of rkf_multi_tmpl6 attached to {}", f.name),
            Err(e) => e,
        };
        check_eq!(
            e.errno,
            libc::EINVAL,
            "rkf_multi_tmpl6 on {}: errno",
            f.name
        );
        check_eq!(
            e.refused,
            Some((0, Reason::TooManyArgs)),
            "rkf_multi_tmpl6 on {}: what is refused",
            f.name
        );
    }
    drop(skel);

    let mut tobj = MaybeUninit::uninit();
    let mut tm = skeleton::load::<MultiTestmodSkelBuilder>(
        &mut tobj,
        "multi_testmod.bpf.c",
        skeleton::as_built,
    )?;
    let cookies = [0u64, 1];
    let rets = [sum(7), sum(11)];

    // fentry and fexit: each function through a trampoline generated for it.
    {
        let _fentry = attach(&tm.progs.wide_fentry, &funcs, Some(&cookies))?;
        let _fexit = attach(&tm.progs.wide_fexit, &funcs, Some(&cookies))?;
        let trampolines = multi::direct_callers()?;
        for f in &funcs {
            let tramp = trampolines.get(&f.qualified_name()).map(String::as_str);
            check!(
                tramp.is_some_and(|t| t.starts_with("rkf_multi_image_")),
                "{}: called through {tramp:?}, not a generated trampoline",
                f.name
            );
        }
        run_wide(&mut tm)?;
        let bss = tm.maps.bss_data.as_deref().context("no .bss")?;
        check_eq!(bss.bad_cookie, 0, "runs with an unknown cookie");
        for (i, f) in funcs.iter().enumerate() {
            check_rec("fentry", f, &bss.wide_recs[FENTRY][i], None)?;
            check_rec("fexit", f, &bss.wide_recs[FEXIT][i], Some(rets[i]))?;
            check_eq!(bss.wide_recs[SESSION_ENTRY][i].hits, 0, "session runs");
        }
    }

    // A session and an fexit: the shared trampoline, which copies the stack arguments
    // into ctx and again for the call of the rest of the function.
    let _session = attach(&tm.progs.wide_session, &funcs, Some(&cookies))?;
    let _fexit = attach(&tm.progs.wide_fexit, &funcs, Some(&cookies))?;
    let trampolines = multi::direct_callers()?;
    for f in &funcs {
        let tramp = trampolines.get(&f.qualified_name()).map(String::as_str);
        check_eq!(
            tramp,
            Some("rkf_multi_tramp"),
            "{}: the trampoline of a function with a session",
            f.name
        );
    }
    run_wide(&mut tm)?;
    let bss = tm.maps.bss_data.as_deref().context("no .bss")?;
    check_eq!(bss.bad_cookie, 0, "runs with an unknown cookie");
    for (i, f) in funcs.iter().enumerate() {
        check_eq!(bss.wide_recs[FENTRY][i].hits, 0, "{}: fentry runs", f.name);
        check_rec("fexit", f, &bss.wide_recs[FEXIT][i], Some(rets[i]))?;
        check_rec(
            "session entry",
            f,
            &bss.wide_recs[SESSION_ENTRY][i],
            Some(0),
        )?;
        check_rec(
            "session exit",
            f,
            &bss.wide_recs[SESSION_EXIT][i],
            Some(rets[i]),
        )?;
        check_eq!(
            bss.wide_recs[SESSION_ENTRY][i].cookie,
            0,
            "{}: the session cookie on entry",
            f.name
        );
        check_eq!(
            bss.wide_recs[SESSION_EXIT][i].cookie,
            SESSION_COOKIE | i as u64,
            "{}: the session cookie on exit",
            f.name
        );
    }
    Ok(())
}
