// SPDX-License-Identifier: GPL-2.0

//! Functions of more than six arguments, after upstream's module subtests of
//! tracing_multi (tools/testing/selftests/bpf/prog_tests/tracing_multi.c, on
//! bpf_testmod's 7- and 11-argument functions): rkf_testmod's `rkf_testmod_multi_test7()`,
//! `_test11()` and `_test12()`, beside its functions of 1 to 6 arguments, traced by
//! programs loaded against `rkf_multi_tmpl12()` (tests/progs/multi_wide.bpf.c): fentry
//! and fexit programs, then a session beside an fexit, through generated trampolines,
//! then all again through the shared one (rkf_multi reloaded with `generate=0`).

use std::{
    mem::MaybeUninit,
    os::fd::{AsFd, AsRawFd},
};

use anyhow::{Context, Result};
use libbpf_rs::{MapCore, MapFlags};
use rkf::{
    multi::{self, Func, Skip},
    skeleton,
};
use rkf_core::multi::Reason;

use super::{
    attach,
    basic::load,
    refusal,
    testmod::{load_testmod, run_testmod_targets, Masked, TESTMOD_CALLS},
    tramps::{check_tramps, Tramp},
};
use crate::{
    check_eq, diag,
    skel::{
        multi_testmod::MultiTestmodSkel,
        multi_wide::{types::wide_rec, MultiWideSkel, MultiWideSkelBuilder},
    },
};

const ALL: u64 = u64::MAX;

/// The arguments bpf_rkf_testmod_multi_run_wide() passes (c-shim/rkf_testmod_shim.c;
/// test7 takes the first seven, test11 eleven), at their C types: u64, s8, u16, s32,
/// void *, s16, s64, u8, s32, u64, s64, u64.  A narrow argument leaves the upper bits of
/// its register or stack slot undefined; the others are compared whole.
const ARGS12: [Masked; 12] = [
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
    (ALL, 0x0123_4567_89ab_cdef),
];

/// What the first `nr` of them sum to as signed values of their types: what test7,
/// test11 and test12 return.
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
        0x0123_4567_89ab_cdef,
    ];
    signed[..nr].iter().fold(0u64, |s, &v| s.wrapping_add(v))
}

/// `-EINVAL`, as bpf_get_func_arg() returns it past the last argument.
const EINVAL: i64 = -(libc::EINVAL as i64);

/// The record kinds of multi_wide.bpf.c: fentry, fexit, the session's entry and exit,
/// the program a tail call reaches.
const FENTRY: usize = 0;
const FEXIT: usize = 1;
const SESSION_ENTRY: usize = 2;
const SESSION_EXIT: usize = 3;
const TAIL: usize = 4;

/// What wide_session writes into its cookie on entry, for function `i`.
const SESSION_COOKIE: u64 = 0x5e55_0000_0000_0000;

/// A target with what it must see: its arguments at their types and its return value.
struct Target {
    func: Func,
    args: Vec<Masked>,
    ret: Masked,
}

/// rkf_testmod's targets of 1, 2, 3, 6, 7, 11 and 12 arguments, resolved for a program of
/// twelve arguments; the attach cookie of each is its index here.
fn targets() -> Result<Vec<Target>> {
    rkf::modules::require("rkf_testmod")?;
    let all = multi::resolve_wide(&["rkf_testmod:rkf_testmod_multi_test*"])?.funcs;
    let narrow = TESTMOD_CALLS.map(|(nr, args, ret)| (nr as usize, args.to_vec(), ret));
    let wide = [7, 11, 12].map(|nr| (nr, ARGS12[..nr].to_vec(), (ALL, sum(nr))));
    let mut out = Vec::new();
    for (nr, args, ret) in narrow.into_iter().chain(wide) {
        let name = format!("rkf_testmod_multi_test{nr}");
        let func = all
            .iter()
            .find(|f| f.name == name)
            .with_context(|| format!("resolve_wide() left out {name}: {all:?}"))?
            .clone();
        check_eq!(func.nr_args, nr as u32, "{name}: arguments in BTF");
        out.push(Target { func, args, ret });
    }
    check_eq!(out.len(), all.len(), "rkf_testmod's targets: {all:?}");
    Ok(out)
}

/// Calls every target once: rkf_testmod's kfuncs check what each returned.
fn run(tm: &MultiTestmodSkel<'_>, wide: &mut MultiWideSkel<'_>) -> Result<()> {
    let bss = wide.maps.bss_data.as_deref_mut().context("no .bss")?;
    for kind in bss.wide_recs.iter_mut() {
        for r in kind.iter_mut() {
            *r = wide_rec::default();
        }
    }
    bss.bad_cookie = 0;
    run_testmod_targets(tm)?;
    let bss = wide.maps.bss_data.as_deref().context("no .bss")?;
    check_eq!(bss.bad_cookie, 0, "runs with an unknown cookie");
    Ok(())
}

/// One run of a program on target `t`: one hit at its address; its argument count;
/// every argument at its type through ctx, and bpf_get_func_arg() giving exactly ctx's
/// value below the count and `-EINVAL` from it on; ctx[6..11] past the arguments 0; and
/// on exit (`ret`: the return value it must see, 0 on a session's entry) the return
/// value in the slot after the arguments (below twelve), in `ctx[6]` below six (for
/// rkf_multi_tmpl6's programs), and through bpf_get_func_ret().  Argument registers past
/// the function's own hold whatever they held, unchecked.
fn check_rec(what: &str, t: &Target, r: &wide_rec, ret: Option<Masked>) -> Result<()> {
    let (f, nr) = (&t.func, t.args.len());
    check_eq!(r.hits, 1, "{what} {}: runs", f.name);
    check_eq!(r.ip, f.addr, "{what} {}: bpf_get_func_ip()", f.name);
    check_eq!(
        r.nr_args,
        nr as u64,
        "{what} {}: bpf_get_func_arg_cnt()",
        f.name
    );
    for (j, &(mask, v)) in t.args.iter().enumerate() {
        check_eq!(
            r.args[j] & mask,
            v,
            "{what} {}: ctx[{j}] at its type",
            f.name
        );
    }
    for j in 0..12 {
        let (err, value) = (r.helper_err[j], r.helper_args[j]);
        if j < nr {
            check_eq!(err, 0, "{what} {}: bpf_get_func_arg({j})", f.name);
            check_eq!(value, r.args[j], "{what} {}: bpf_get_func_arg({j})", f.name);
        } else {
            check_eq!(err, EINVAL, "{what} {}: bpf_get_func_arg({j})", f.name);
        }
    }
    for j in nr..12 {
        let holds_ret = ret.is_some() && (j == nr || (j == 6 && nr < 6));
        match ret {
            Some((mask, v)) if holds_ret => {
                check_eq!(
                    r.args[j] & mask,
                    v,
                    "{what} {}: ctx[{j}], the return value",
                    f.name
                );
            }
            _ if j >= 6 => check_eq!(r.args[j], 0, "{what} {}: ctx[{j}]", f.name),
            // An argument register the function does not take.
            _ => {}
        }
    }
    if let Some((mask, v)) = ret {
        check_eq!(
            r.helper_ret & mask,
            v,
            "{what} {}: bpf_get_func_ret()",
            f.name
        );
        if nr < 12 {
            check_eq!(
                r.helper_ret,
                r.args[nr],
                "{what} {}: bpf_get_func_ret() against ctx[{nr}]",
                f.name
            );
        }
    }
    Ok(())
}

pub(super) fn wide_module_targets() -> Result<()> {
    Tramp::run_both(wide_targets)
}

fn wide_targets(tramp: Tramp) -> Result<()> {
    let targets = targets()?;
    let funcs: Vec<Func> = targets.iter().map(|t| t.func.clone()).collect();
    let is_wide = |f: &Func| f.nr_args > 6;
    let wide: Vec<Func> = funcs.iter().filter(|f| is_wide(f)).cloned().collect();
    // A program of six arguments: resolve() leaves the wide ones out, and the kernel
    // refuses them, naming each.
    let narrow = multi::resolve(&["rkf_testmod:rkf_testmod_multi_test*"])?;
    let mut skipped = narrow
        .skipped
        .get(&Skip::Rule(Reason::TooManyArgs))
        .cloned()
        .unwrap_or_default();
    skipped.sort();
    let mut want: Vec<String> = wide.iter().map(Func::qualified_name).collect();
    want.sort();
    check_eq!(
        skipped,
        want,
        "resolve() for rkf_multi_tmpl6: left out for their arguments"
    );
    let mut obj = MaybeUninit::uninit();
    let skel = load(&mut obj, &funcs)?;
    for f in &wide {
        for (kind, prog) in [
            ("fentry", &skel.progs.multi_fentry),
            ("fexit", &skel.progs.multi_fexit),
        ] {
            refusal(
                prog,
                std::slice::from_ref(f),
                None,
                (libc::EINVAL, Some((0, Reason::TooManyArgs))),
                &format!("{kind} of rkf_multi_tmpl6 on {}", f.name),
            )?;
        }
    }
    drop(skel);

    let mut tobj = MaybeUninit::uninit();
    let tm = load_testmod(&mut tobj)?;
    let mut wobj = MaybeUninit::uninit();
    let mut wskel =
        skeleton::load::<MultiWideSkelBuilder>(&mut wobj, "multi_wide.bpf.c", skeleton::as_built)?;
    let cookies: Vec<u64> = (0..funcs.len() as u64).collect();

    // fentry and fexit.
    {
        let _fentry = attach(&wskel.progs.wide_fentry, &funcs, Some(&cookies))?;
        let _fexit = attach(&wskel.progs.wide_fexit, &funcs, Some(&cookies))?;
        check_tramps(&funcs, tramp, "fentry and fexit")?;
        run(&tm, &mut wskel)?;
        let bss = wskel.maps.bss_data.as_deref().context("no .bss")?;
        for (i, t) in targets.iter().enumerate() {
            check_rec("fentry", t, &bss.wide_recs[FENTRY][i], None)?;
            check_rec("fexit", t, &bss.wide_recs[FEXIT][i], Some(t.ret))?;
            check_eq!(bss.wide_recs[SESSION_ENTRY][i].hits, 0, "session runs");
        }
    }

    // A session and an fexit: the trampolines copy the stack arguments into ctx and again
    // for the call of the rest of the function.
    let session = attach(&wskel.progs.wide_session, &funcs, Some(&cookies))?;
    let fexit = attach(&wskel.progs.wide_fexit, &funcs, Some(&cookies))?;
    check_tramps(&funcs, tramp, "a session and an fexit")?;
    run(&tm, &mut wskel)?;
    let bss = wskel.maps.bss_data.as_deref().context("no .bss")?;
    for (i, t) in targets.iter().enumerate() {
        let name = &t.func.name;
        check_eq!(bss.wide_recs[FENTRY][i].hits, 0, "{name}: fentry runs");
        check_rec("fexit", t, &bss.wide_recs[FEXIT][i], Some(t.ret))?;
        check_rec(
            "session entry",
            t,
            &bss.wide_recs[SESSION_ENTRY][i],
            Some((ALL, 0)),
        )?;
        check_rec(
            "session exit",
            t,
            &bss.wide_recs[SESSION_EXIT][i],
            Some(t.ret),
        )?;
        check_eq!(
            bss.wide_recs[SESSION_ENTRY][i].cookie,
            0,
            "{name}: the session cookie on entry"
        );
        check_eq!(
            bss.wide_recs[SESSION_EXIT][i].cookie,
            SESSION_COOKIE | i as u64,
            "{name}: the session cookie on exit"
        );
    }
    drop((session, fexit));

    // A program that reads nothing of ctx but may tail-call: the program it reaches reads
    // every slot, which the trampolines fill (registers as they came, the stack arguments,
    // 0 past them) as for a program that reads them all itself.
    let key = 0u32.to_ne_bytes();
    let callee = wskel.progs.wide_tail_callee.as_fd().as_raw_fd() as u32;
    wskel
        .maps
        .wide_jmp
        .update(&key, &callee.to_ne_bytes(), MapFlags::ANY)
        .context("wide_jmp[0] = wide_tail_callee")?;
    let _tail = attach(&wskel.progs.wide_tail, &funcs, Some(&cookies))?;
    check_tramps(&funcs, tramp, "a program that tail-calls")?;
    run(&tm, &mut wskel)?;
    let bss = wskel.maps.bss_data.as_deref().context("no .bss")?;
    for (i, t) in targets.iter().enumerate() {
        check_rec("tail-called fentry", t, &bss.wide_recs[TAIL][i], None)?;
    }
    Ok(())
}

/// The churn of the generated attach storm (`storm::generated_storm()`): in each of
/// `cycles` cycles, a link of the fentry, fexit or session program (in turn) on a
/// reproducible random subset (seeded with `seed`) of rkf_testmod's targets, each with
/// its index as its cookie, is attached, run once and detached; the first link and every
/// hundredth after it are checked to be called through generated trampolines.  Each chosen
/// target must run the link's program exactly once (twice for the session, on entry and
/// on exit), with every argument, return value and cookie as in `wide_targets()`, and
/// no other target and no other kind may run at all.  Returns how many links it attached
/// (an empty subset attaches none).
pub(super) fn churn(cycles: usize, seed: u64) -> Result<usize> {
    let targets = targets()?;
    let mut tobj = MaybeUninit::uninit();
    let tm = load_testmod(&mut tobj)?;
    let mut wobj = MaybeUninit::uninit();
    let mut wskel =
        skeleton::load::<MultiWideSkelBuilder>(&mut wobj, "multi_wide.bpf.c", skeleton::as_built)?;
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut attached = 0;
    let start = std::time::Instant::now();
    for cycle in 0..cycles {
        if cycle % 100 == 0 {
            diag!("cycle {cycle} at {:.1} s", start.elapsed().as_secs_f64());
        }
        let x = rng.u32(..);
        let chosen: Vec<bool> = (0..targets.len()).map(|i| x & (1 << i) != 0).collect();
        let (funcs, cookies): (Vec<Func>, Vec<u64>) = targets
            .iter()
            .enumerate()
            .filter(|&(i, _)| chosen[i])
            .map(|(i, t)| (t.func.clone(), i as u64))
            .unzip();
        if funcs.is_empty() {
            continue;
        }
        // The record kinds the link's program writes.
        let (prog, kinds) = match cycle % 3 {
            0 => (&wskel.progs.wide_fentry, &[FENTRY][..]),
            1 => (&wskel.progs.wide_fexit, &[FEXIT][..]),
            _ => (
                &wskel.progs.wide_session,
                &[SESSION_ENTRY, SESSION_EXIT][..],
            ),
        };
        let link = attach(prog, &funcs, Some(&cookies))?;
        attached += 1;
        // The first link, then every hundredth.
        if attached % 100 == 1 {
            check_tramps(&funcs, Tramp::Generated, &format!("cycle {cycle}"))?;
        }
        run(&tm, &mut wskel)?;
        let recs = &wskel.maps.bss_data.as_deref().context("no .bss")?.wide_recs;
        for (i, t) in targets.iter().enumerate() {
            for kind in [FENTRY, FEXIT, SESSION_ENTRY, SESSION_EXIT, TAIL] {
                let want = u64::from(chosen[i] && kinds.contains(&kind));
                check_eq!(
                    recs[kind][i].hits,
                    want,
                    "cycle {cycle}: runs of record kind {kind} on {}",
                    t.func.name
                );
            }
            if !chosen[i] {
                continue;
            }
            let what = format!("cycle {cycle}:");
            match kinds {
                [FENTRY] => check_rec(&what, t, &recs[FENTRY][i], None)?,
                [FEXIT] => check_rec(&what, t, &recs[FEXIT][i], Some(t.ret))?,
                _ => {
                    let (entry, exit) = (&recs[SESSION_ENTRY][i], &recs[SESSION_EXIT][i]);
                    check_rec(&what, t, entry, Some((ALL, 0)))?;
                    check_rec(&what, t, exit, Some(t.ret))?;
                    check_eq!(entry.cookie, 0, "{what} {}: cookie on entry", t.func.name);
                    check_eq!(
                        exit.cookie,
                        SESSION_COOKIE | i as u64,
                        "{what} {}: cookie on exit",
                        t.func.name
                    );
                }
            }
        }
        drop(link);
    }
    Ok(attached)
}
