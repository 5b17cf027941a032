// SPDX-License-Identifier: GPL-2.0

//! The targets and the basic tests.  The targets are vmlinux's bpf_fentry_test1..9
//! (net/bpf/test_run.c), which BPF_PROG_TEST_RUN of any fentry program calls once each with
//! known arguments, and which it checks the return values of: a trampoline that corrupted one
//! fails the run.  (bpf_fentry_test10() returns its argument and has no side effect: clang
//! folds the call away, so it never runs on this kernel.)
//!
//! Here too the skeleton of tests/progs/multi.bpf.c with the targets in its table, its runs
//! and the checks of what its programs saw, which the other rooms use; and the tests: fentry,
//! fexit and both on one set, arguments and return values of known calls, cookies, func_ip,
//! overlapping links in every combination.

use std::mem::MaybeUninit;

use anyhow::{bail, Context, Result};
use libbpf_rs::ProgramInput;

use super::attach;
use crate::{
    check, check_eq, diag,
    skel::multi::{MultiSkel, MultiSkelBuilder},
};
use rkf::{
    modules,
    multi::{self, Func},
    skeleton,
};

/// What an argument of a known call must be.
#[derive(Clone, Copy)]
pub(super) enum Want {
    /// A value: its width in bits by its C type, and the value.
    Val(u32, u64),
    /// A pointer to a local of the caller, a kernel address, through which the programs
    /// read (argument 0 only) a 0 of the width in bits given: bpf_fentry_test8()'s
    /// `struct bpf_fentry_test_t` (a NULL pointer) and bpf_fentry_test9()'s `u32`.
    ZeroedLocal(u32),
}

use Want::{Val, ZeroedLocal};

/// The counters of tests/progs/multi.bpf.c: `counts[k]` fentry, `counts[NR_COUNTERS + k]`
/// fexit.
pub(crate) const NR_COUNTERS: usize = 4;

/// (arguments, return value) of bpf_fentry_testN(), as bpf_prog_test_run_tracing() calls
/// them.
pub(super) const CALLS: [(&[Want], u64); 9] = [
    (&[Val(32, 1)], 2),
    (&[Val(32, 2), Val(64, 3)], 5),
    (&[Val(8, 4), Val(32, 5), Val(64, 6)], 15),
    (&[Val(64, 7), Val(8, 8), Val(32, 9), Val(64, 10)], 34),
    (
        &[
            Val(64, 11),
            Val(64, 12),
            Val(16, 13),
            Val(32, 14),
            Val(64, 15),
        ],
        65,
    ),
    (
        &[
            Val(64, 16),
            Val(64, 17),
            Val(16, 18),
            Val(32, 19),
            Val(64, 20),
            Val(64, 21),
        ],
        111,
    ),
    (&[Val(64, 0)], 0),
    (&[ZeroedLocal(64)], 0),
    (&[ZeroedLocal(32)], 0),
];

/// bpf_fentry_test1..9, resolved once (BTF and kallsyms are slow to read under KASAN).
pub(super) fn targets() -> Result<Vec<Func>> {
    static TARGETS: std::sync::OnceLock<Vec<Func>> = std::sync::OnceLock::new();
    if let Some(t) = TARGETS.get() {
        return Ok(t.clone());
    }
    let t = resolve_targets()?;
    Ok(TARGETS.get_or_init(|| t).clone())
}

pub(super) fn resolve_targets() -> Result<Vec<Func>> {
    let names: Vec<String> = (1..=9).map(|i| format!("bpf_fentry_test{i}")).collect();
    let r = multi::resolve(&names.iter().map(String::as_str).collect::<Vec<_>>())?;
    // resolve() keeps BTF order; put them in call order.
    let mut out = Vec::new();
    for n in &names {
        out.push(
            r.funcs
                .iter()
                .find(|f| &f.name == n)
                .with_context(|| format!("{n} not resolved"))?
                .clone(),
        );
    }
    Ok(out)
}

pub(super) fn load<'o>(
    obj: &'o mut MaybeUninit<libbpf_rs::OpenObject>,
    funcs: &[Func],
) -> Result<MultiSkel<'o>> {
    modules::require("rkf_multi")?;
    skeleton::load::<MultiSkelBuilder>(obj, "multi.bpf.c", |open| {
        let bss = open.maps.bss_data.as_deref_mut().context("no .bss")?;
        for (i, f) in funcs.iter().enumerate() {
            bss.ips[i] = f.addr;
        }
        Ok(())
    })
}

/// The skeleton with bpf_fentry_test1..9 in its table, and the functions.
pub(crate) fn setup(
    obj: &mut MaybeUninit<libbpf_rs::OpenObject>,
) -> Result<(MultiSkel<'_>, Vec<Func>)> {
    let funcs = targets()?;
    Ok((load(obj, &funcs)?, funcs))
}

/// BPF_PROG_TEST_RUN of an fentry program: one call of each bpf_fentry_testN(), whose
/// return values the kernel checks (-EFAULT if one is wrong).
pub(super) fn trigger(skel: &MultiSkel<'_>) -> Result<()> {
    skel.progs
        .plain_fentry
        .test_run(ProgramInput::default())
        .context("BPF_PROG_TEST_RUN (a bpf_fentry_testN() returned a wrong value?)")?;
    Ok(())
}

/// Clears the records, makes one BPF_PROG_TEST_RUN, and returns what the programs saw.
pub(super) fn run_once<'s>(
    skel: &'s mut MultiSkel<'_>,
) -> Result<&'s crate::skel::multi::types::bss> {
    reset(skel)?;
    trigger(skel)?;
    skel.maps.bss_data.as_deref().context("no .bss")
}

pub(super) fn reset(skel: &mut MultiSkel<'_>) -> Result<()> {
    let bss = skel.maps.bss_data.as_deref_mut().context("no .bss")?;
    for r in bss.fentry_recs.iter_mut().chain(bss.fexit_recs.iter_mut()) {
        *r = Default::default();
    }
    for c in bss.counts.iter_mut() {
        c.fill(0);
    }
    for r in bss.session_recs.iter_mut() {
        *r = Default::default();
    }
    for a in [
        &mut bss.sess_entry,
        &mut bss.sess_exit,
        &mut bss.sess_cookie_ok,
        &mut bss.sess_nonzero_cookie,
    ] {
        a.fill(0);
    }
    bss.unknown_ip = 0;
    bss.stack_len = 0;
    bss.plain_runs = 0;
    Ok(())
}

/// Argument `i` of a known call, `arg` in ctx, against `want`: a value at its type (a
/// narrow one, char, short or int, leaves the register's upper bits undefined; a u64 or a
/// pointer is compared whole); a pointer to a zeroed local by the kernel address it must
/// be and by what the program read through it (`pointee`, `pointee_err`: argument 0's).
pub(super) fn check_arg(
    what: &str,
    i: usize,
    want: Want,
    arg: u64,
    pointee: u64,
    pointee_err: i64,
) -> Result<()> {
    match want {
        Val(bits, w) => {
            let at_type = arg & (u64::MAX >> (64 - bits));
            check_eq!(at_type, w, "{what}: ctx argument {i} ({bits} bits)");
        }
        ZeroedLocal(bits) => {
            check_eq!(i, 0, "{what}: the argument the programs read through");
            // x86-64's kernel half under 4-level paging: bits 63 to 47 set (the VM boots
            // with no5lvl, scripts/vm.sh; 5-level paging sets bits 63 to 56 only).
            check_eq!(
                arg >> 47,
                0x1_ffff,
                "{what}: ctx argument 0 ({arg:#x}), a kernel address"
            );
            check_eq!(
                pointee_err,
                0,
                "{what}: bpf_probe_read_kernel() through argument 0"
            );
            let at_type = pointee & (u64::MAX >> (64 - bits));
            check_eq!(
                at_type,
                0,
                "{what}: what argument 0 points to ({bits} bits)"
            );
        }
    }
    Ok(())
}

pub(super) fn check_args(
    what: &str,
    f: &Func,
    r: &crate::skel::multi::types::rec,
    call: usize,
) -> Result<()> {
    let (args, _) = CALLS[call];
    check_eq!(r.hits, 1, "{what} {}: hits", f.name);
    check_eq!(
        r.nr_args,
        u64::from(f.nr_args),
        "{what} {}: bpf_get_func_arg_cnt()",
        f.name
    );
    check_eq!(r.arg_err, 0, "{what} {}: helper errors", f.name);
    for (i, &want) in args.iter().enumerate() {
        check_arg(
            &format!("{what} {}", f.name),
            i,
            want,
            r.args[i],
            r.pointee,
            r.pointee_err,
        )?;
        check_eq!(
            r.helper_args[i],
            r.args[i],
            "{what} {}: bpf_get_func_arg({i}) against ctx",
            f.name
        );
    }
    Ok(())
}

pub(super) fn fentry_args() -> Result<()> {
    let mut obj = MaybeUninit::uninit();
    let (mut skel, funcs) = setup(&mut obj)?;
    let cookies: Vec<u64> = (0..funcs.len() as u64).map(|i| 0x1000 + i * 7).collect();
    // Requested by descending address: rkf_multi sorts a request's functions by site,
    // and each cookie must follow its function there.
    let mut order: Vec<usize> = (0..funcs.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(funcs[i].addr));
    let req: Vec<_> = order.iter().map(|&i| funcs[i].clone()).collect();
    let req_cookies: Vec<u64> = order.iter().map(|&i| cookies[i]).collect();
    let link = attach(&skel.progs.multi_fentry, &req, Some(&req_cookies))?;
    diag!(
        "attached to {} functions in {:?}",
        funcs.len(),
        link.attach_time
    );
    let bss = run_once(&mut skel)?;
    check_eq!(
        bss.unknown_ip,
        0,
        "calls with an unexpected bpf_get_func_ip()"
    );
    for (i, f) in funcs.iter().enumerate() {
        let r = &bss.fentry_recs[i];
        check_args("fentry", f, r, i)?;
        check_eq!(
            r.cookie,
            cookies[i],
            "fentry {}: bpf_get_attach_cookie()",
            f.name
        );
    }
    let info = link.info()?;
    check_eq!(info.funcs.len(), funcs.len(), "functions in the link info");
    check!(
        info.funcs.iter().all(|f| f.hits == 1 && f.misses == 0),
        "link info: one hit and no miss per function: {:?}",
        info.funcs
    );
    for fi in &info.funcs {
        let Some(i) = funcs.iter().position(|f| f.addr == fi.addr) else {
            bail!(
                "link info: {:#x} is none of the functions attached",
                fi.addr
            );
        };
        check_eq!(
            fi.cookie,
            cookies[i],
            "link info of {}: cookie",
            funcs[i].name
        );
    }
    drop(link);
    let bss = run_once(&mut skel)?;
    check!(
        bss.fentry_recs.iter().all(|r| r.hits == 0),
        "the program still runs after the link was closed"
    );
    Ok(())
}

pub(super) fn fexit_ret() -> Result<()> {
    let mut obj = MaybeUninit::uninit();
    let (mut skel, funcs) = setup(&mut obj)?;
    let _link = attach(&skel.progs.multi_fexit, &funcs, None)?;
    let bss = run_once(&mut skel)?;
    check_eq!(
        bss.unknown_ip,
        0,
        "calls with an unexpected bpf_get_func_ip()"
    );
    for (i, f) in funcs.iter().enumerate() {
        let r = &bss.fexit_recs[i];
        check_args("fexit", f, r, i)?;
        // bpf_fentry_test*() return int: its value is the register's low 32 bits (the
        // upper half is undefined), compared at that type.
        check_eq!(
            r.ret as u32,
            CALLS[i].1 as u32,
            "fexit {}: return value (ctx)",
            f.name
        );
        check_eq!(
            r.helper_ret,
            r.ret,
            "fexit {}: bpf_get_func_ret() against ctx",
            f.name
        );
        check_eq!(r.cookie, 0, "fexit {}: no cookie given", f.name);
    }
    Ok(())
}

pub(super) fn fentry_fexit_one_set() -> Result<()> {
    let mut obj = MaybeUninit::uninit();
    let (mut skel, funcs) = setup(&mut obj)?;
    let _a = attach(&skel.progs.multi_fentry, &funcs, None)?;
    let _b = attach(&skel.progs.multi_fexit, &funcs, None)?;
    reset(&mut skel)?;
    for _ in 0..3 {
        trigger(&skel)?;
    }
    let bss = skel.maps.bss_data.as_deref().context("no .bss")?;
    for (i, f) in funcs.iter().enumerate() {
        check_eq!(bss.fentry_recs[i].hits, 3, "fentry {}: hits", f.name);
        check_eq!(bss.fexit_recs[i].hits, 3, "fexit {}: hits", f.name);
        // A pointer argument: the same local on entry and on exit of the last call.
        if let [ZeroedLocal(_)] = CALLS[i].0 {
            check_eq!(
                bss.fexit_recs[i].args[0],
                bss.fentry_recs[i].args[0],
                "{}: the pointer argument on exit against entry",
                f.name
            );
        }
        // An int, compared at its type (as in fexit_ret()).
        check_eq!(
            bss.fexit_recs[i].ret as u32,
            CALLS[i].1 as u32,
            "fexit {}: return value",
            f.name
        );
    }
    Ok(())
}

/// Four links (two fentry, two fexit) on overlapping sets, attached in every combination
/// and in both orders: each function counts exactly one hit per link that holds it.
pub(super) fn intersect() -> Result<()> {
    let mut obj = MaybeUninit::uninit();
    let (mut skel, funcs) = setup(&mut obj)?;
    // Sets as bit masks over the nine functions (bit 9 names none).
    let sets: [u16; 4] = [
        0b00_0011_1111,
        0b11_1111_0000,
        0b01_0101_0101,
        0b10_1010_1010,
    ];
    let mut rounds = 0;
    for combo in 1u32..16 {
        for reverse in [false, true] {
            let mut order: Vec<usize> = (0..4).filter(|k| combo & (1 << k) != 0).collect();
            if reverse {
                order.reverse();
            }
            reset(&mut skel)?;
            let mut links = Vec::new();
            for &k in &order {
                let chosen: Vec<Func> = funcs
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| sets[k] & (1 << i) != 0)
                    .map(|(_, f)| f.clone())
                    .collect();
                let p = &skel.progs;
                let prog = match k {
                    0 => &p.count_fentry0,
                    1 => &p.count_fentry1,
                    2 => &p.count_fexit2,
                    _ => &p.count_fexit3,
                };
                links.push(attach(prog, &chosen, None)?);
            }
            trigger(&skel)?;
            let bss = skel.maps.bss_data.as_deref().context("no .bss")?;
            for (k, set) in sets.iter().enumerate() {
                // count_fentry0/1 count in rows 0/1, count_fexit2/3 in rows 4 + 2/3.
                let row = if k < 2 { k } else { 4 + k };
                for (i, f) in funcs.iter().enumerate() {
                    let want = u64::from(combo & (1 << k) != 0 && set & (1 << i) != 0);
                    check_eq!(
                        bss.counts[row][i],
                        want,
                        "links {order:?}: link {k} on {}",
                        f.name
                    );
                }
            }
            rounds += 1;
        }
    }
    diag!("{rounds} combinations of 4 overlapping links, exact counts");
    Ok(())
}

/// One link, one run: for the tests that reload the module.
pub(crate) fn smoke() -> Result<()> {
    let mut obj = MaybeUninit::uninit();
    let (mut skel, funcs) = setup(&mut obj)?;
    let _l = attach(&skel.progs.count_fentry0, &funcs, None)?;
    let bss = run_once(&mut skel)?;
    check!(
        bss.counts[0][..funcs.len()].iter().all(|&c| c == 1),
        "one hit per function: {:?}",
        &bss.counts[0][..funcs.len()]
    );
    Ok(())
}
