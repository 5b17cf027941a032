// SPDX-License-Identifier: GPL-2.0

//! rkf_multi, after the upstream tracing_multi selftests
//! (tools/testing/selftests/bpf/prog_tests/tracing_multi.c): fentry, fexit and both on one
//! set; arguments and return values of known calls; cookies; func_ip; overlapping links in
//! every combination; rollback; every refusal; coexistence with in-kernel trampolines.
//!
//! The targets are vmlinux's bpf_fentry_test1..9 (net/bpf/test_run.c), which
//! BPF_PROG_TEST_RUN of any fentry program calls once each with known arguments, and which
//! it checks the return values of: a trampoline that corrupted one fails the run.
//! (bpf_fentry_test10() returns its argument and has no side effect: clang folds the
//! call away, so it never runs on this kernel.)

mod alike;
mod everything;
pub(crate) mod faults;
mod limits;
mod recursion;
mod run_path;
mod session;
mod sleepable;
mod storm;
mod wide;

use std::{collections::HashSet, mem::MaybeUninit, os::fd::AsFd};

use anyhow::{bail, Context, Result};
use libbpf_rs::ProgramInput;

use crate::{
    check, check_eq, diag,
    harness::Test,
    lifecycle::MULTI,
    privilege::CAP_CASES,
    skel::multi::{MultiSkel, MultiSkelBuilder},
    upstream,
};
use rkf::{
    btf::KernelBtf,
    funccount,
    kallsyms::{Kallsyms, KernelSymbolizer},
    modules,
    multi::{self, Func, Link},
    skeleton,
};
use rkf_core::{
    abi::{self, AttachRequest},
    multi::Reason,
};

pub(crate) use storm::set_storm_cycles;

pub const TESTS: &[Test] = &[
    Test {
        name: "multi_fentry_args_cookies_func_ip",
        run: fentry_args,
    },
    Test {
        name: "multi_fexit_return_values",
        run: fexit_ret,
    },
    Test {
        name: "multi_fentry_fexit_one_set",
        run: fentry_fexit_one_set,
    },
    Test {
        name: "multi_intersect_every_combination",
        run: intersect,
    },
    Test {
        name: "multi_generated_trampolines",
        run: generated_trampolines,
    },
    Test {
        name: "multi_refusals_and_rollback",
        run: refusals,
    },
    Test {
        name: "multi_link_limit_refused_whole",
        run: limits::link_limit_refused_whole,
    },
    Test {
        name: "multi_attach_detach_allocation_failures",
        run: faults::allocation_failures,
    },
    Test {
        name: "multi_anchor_denied",
        run: anchor_denied,
    },
    Test {
        name: "multi_coexistence_with_bpf_trampolines",
        run: coexistence,
    },
    Test {
        name: "multi_exact_counts_under_attach_storm",
        run: storm::shared_storm,
    },
    Test {
        name: "multi_generated_exact_counts_under_attach_storm",
        run: storm::generated_storm,
    },
    Test {
        name: "multi_unprivileged_eperm",
        run: unprivileged,
    },
    Test {
        name: "multi_module_targets",
        run: module_targets,
    },
    Test {
        name: "multi_wide_module_targets",
        run: wide::wide_module_targets,
    },
    Test {
        name: "multi_funccount_glob",
        run: funccount_glob,
    },
    Test {
        name: "multi_resolve_patterns",
        run: resolve_patterns,
    },
    Test {
        name: "multi_ioctl_fuzz",
        run: ioctl_fuzz,
    },
    Test {
        name: "multi_run_path_calls_only_denied",
        run: run_path::run_path_calls_only_denied,
    },
    Test {
        name: "multi_sleepable_run_path_calls_only_denied",
        run: run_path::sleepable_run_path_calls_only_denied,
    },
    Test {
        name: "multi_run_stats_kept",
        run: run_path::run_stats_kept,
    },
    Test {
        name: "multi_recursion_misses_counted",
        run: recursion::recursion_misses_counted,
    },
    Test {
        name: "multi_sleepable_fentry_fexit",
        run: sleepable::sleepable_fentry_fexit,
    },
    Test {
        name: "multi_uncounted_links",
        run: sleepable::uncounted_links,
    },
    Test {
        name: "multi_alike_functions_share_code",
        run: alike::alike_functions_share_code,
    },
    Test {
        name: "multi_sleepable_refusals",
        run: sleepable::sleepable_refusals,
    },
    Test {
        name: "multi_sleepable_session",
        run: sleepable::sleepable_session,
    },
    Test {
        name: "multi_sleepable_exact_counts_under_attach_storm",
        run: sleepable::sleepable_storm,
    },
    Test {
        name: "multi_session_vmlinux_and_module",
        run: session::session_vmlinux_and_module,
    },
    Test {
        name: "multi_session_attach_detach_in_flight",
        run: session::session_in_flight,
    },
    Test {
        name: "multi_session_cookies_per_program_and_limit",
        run: session::session_limit,
    },
    Test {
        name: "multi_attach_everything_fentry_fexit",
        run: everything::attach_everything,
    },
];

/// What an argument of a known call must be.
#[derive(Clone, Copy)]
enum Want {
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
const CALLS: [(&[Want], u64); 9] = [
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
fn targets() -> Result<Vec<Func>> {
    static TARGETS: std::sync::OnceLock<Vec<Func>> = std::sync::OnceLock::new();
    if let Some(t) = TARGETS.get() {
        return Ok(t.clone());
    }
    let t = resolve_targets()?;
    Ok(TARGETS.get_or_init(|| t).clone())
}

fn resolve_targets() -> Result<Vec<Func>> {
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

fn load<'o>(
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

/// BPF_PROG_TEST_RUN of an fentry program: one call of each bpf_fentry_testN(), whose
/// return values the kernel checks (-EFAULT if one is wrong).
fn trigger(skel: &MultiSkel<'_>) -> Result<()> {
    skel.progs
        .plain_fentry
        .test_run(ProgramInput::default())
        .context("BPF_PROG_TEST_RUN (a bpf_fentry_testN() returned a wrong value?)")?;
    Ok(())
}

/// [`Link::attach_counted()`], its error as an [`anyhow::Error`]: the tests check the
/// link's counters of each function.
pub(crate) fn attach(prog: &impl AsFd, funcs: &[Func], cookies: Option<&[u64]>) -> Result<Link> {
    Link::attach_counted(prog, funcs, cookies).map_err(|e| anyhow::anyhow!("{e}"))
}

/// [`Link::attach()`]: a link that does not count, as rkf's tools attach them.
pub(crate) fn attach_uncounted(
    prog: &impl AsFd,
    funcs: &[Func],
    cookies: Option<&[u64]>,
) -> Result<Link> {
    Link::attach(prog, funcs, cookies).map_err(|e| anyhow::anyhow!("{e}"))
}

/// Attaches `prog` to `funcs` with `cookies`, which rkf_multi must refuse as `want` says:
/// the errno, and the function refused (its index in `funcs`) and why, or no function.  A
/// refusal that names a function must name it in its message too.  `what` names the
/// attach in the checks.  Returns the refusal, for checks of its message.
fn refusal(
    prog: &impl AsFd,
    funcs: &[Func],
    cookies: Option<&[u64]>,
    want: (i32, Option<(usize, Reason)>),
    what: &str,
) -> Result<multi::AttachError> {
    let e = match Link::attach(prog, funcs, cookies) {
        Ok(_) => bail!("{what}: attached"),
        Err(e) => e,
    };
    diag!("{what}: {e}");
    check_eq!(
        (e.errno, e.refused),
        want,
        "{what}: errno, the function refused and why"
    );
    if let Some((i, _)) = e.refused {
        let name = funcs[i].qualified_name();
        check!(
            e.message.contains(&format!("rkf_multi refused {name}: ")),
            "{what}: the message names {name}: {}",
            e.message
        );
    }
    Ok(e)
}

/// Clears the records, makes one BPF_PROG_TEST_RUN, and returns what the programs saw.
fn run_once<'s>(skel: &'s mut MultiSkel<'_>) -> Result<&'s crate::skel::multi::types::bss> {
    reset(skel)?;
    trigger(skel)?;
    skel.maps.bss_data.as_deref().context("no .bss")
}

fn reset(skel: &mut MultiSkel<'_>) -> Result<()> {
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
fn check_arg(
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

fn check_args(what: &str, f: &Func, r: &crate::skel::multi::types::rec, call: usize) -> Result<()> {
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

fn fentry_args() -> Result<()> {
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

fn fexit_ret() -> Result<()> {
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

fn fentry_fexit_one_set() -> Result<()> {
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
fn intersect() -> Result<()> {
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

/// The images of generated trampolines that kallsyms shows now.
fn tramp_images() -> Result<Vec<String>> {
    Ok(Kallsyms::load()?
        .symbols()
        .iter()
        .filter(|s| s.module.as_deref() == Some("bpf") && s.name.starts_with("rkf_multi_image_"))
        .map(|s| s.name.clone())
        .collect())
}

/// Waits until the images of generated trampolines that kallsyms shows are `done`: images
/// go once no task can run them any more (an RCU tasks grace period after their last user
/// went).
fn wait_tramp_images(what: &str, done: impl Fn(&[String]) -> bool) -> Result<()> {
    let start = std::time::Instant::now();
    loop {
        let left = tramp_images()?;
        if done(&left) {
            return Ok(());
        }
        if start.elapsed() > std::time::Duration::from_secs(60) {
            bail!("{what}: images in kallsyms after 60 s: {left:?}");
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

/// Functions run through trampolines generated for them, BPF text that kallsyms names
/// rkf_multi_image_<n>: a stack taken inside the program shows one, and walks on through
/// it to the traced function and its callers.  Images are shared by the functions of one
/// operation, replaced when a function's programs change, and freed once no link uses
/// them.
fn generated_trampolines() -> Result<()> {
    let mut obj = MaybeUninit::uninit();
    let (mut skel, funcs) = setup(&mut obj)?;
    wait_tramp_images("no image before the test", <[String]>::is_empty)?;
    let link = attach(&skel.progs.multi_stack, &funcs[..1], None)?;
    let images = tramp_images()?;
    check_eq!(images.len(), 1, "images with one fentry link: {images:?}");
    let bss = run_once(&mut skel)?;
    check!(
        bss.stack_len > 0,
        "bpf_get_stack() in the program: {}",
        bss.stack_len
    );
    let ks = KernelSymbolizer::new();
    let frames: Vec<String> = bss.stack[..bss.stack_len as usize / 8]
        .iter()
        .map(|&a| ks.name(a).unwrap_or_else(|| format!("{a:#x}")))
        .collect();
    diag!("stack: {}", frames.join(" <- "));
    let at = |name: &str| frames.iter().position(|f| f == name);
    let tramp = frames.iter().position(|f| f == &images[0]);
    check!(
        tramp.is_some(),
        "the stack shows the generated trampoline {}",
        images[0]
    );
    check!(
        at("bpf_fentry_test1") > tramp && at("bpf_prog_test_run_tracing") > at("bpf_fentry_test1"),
        "the stack walks through the trampoline to bpf_fentry_test1 and its caller"
    );
    // A second link on more functions: one new image, for the functions it changed; the
    // first image goes once no function uses it.  Closing the first link then changes
    // bpf_fentry_test1's programs again: it gets a third image.
    let counter = attach(&skel.progs.count_fentry0, &funcs, None)?;
    let new: Vec<String> = tramp_images()?
        .into_iter()
        .filter(|i| i != &images[0])
        .collect();
    check_eq!(new.len(), 1, "images the second link made: {new:?}");
    drop(link);
    let bss = run_once(&mut skel)?;
    check!(
        bss.counts[0][..funcs.len()].iter().all(|&c| c == 1),
        "one hit per function: {:?}",
        &bss.counts[0][..funcs.len()]
    );
    check_eq!(bss.stack_len, 0, "the closed link's program ran");
    wait_tramp_images("the first image gone", |left| !left.contains(&images[0]))?;
    // The one of the eight functions whose programs stayed, and bpf_fentry_test1's new one.
    let left = tramp_images()?;
    check_eq!(
        left.len(),
        2,
        "images after the first link closed: {left:?}"
    );
    // An fexit program on some of them gives those new trampolines, generated with the
    // fexit program too: still one hit per function for each program.  A session
    // program on one more gives it a generated session trampoline.
    let fexit = attach(&skel.progs.count_fexit2, &funcs[..3], None)?;
    let session = attach(&skel.progs.session0, &funcs[3..4], None)?;
    check_tramps(
        &funcs[..3],
        Tramp::Generated,
        "with fentry and fexit programs",
    )?;
    check_tramps(&funcs[3..4], Tramp::Generated, "with a session program")?;
    let bss = run_once(&mut skel)?;
    check!(
        bss.counts[0][..funcs.len()].iter().all(|&c| c == 1)
            && bss.counts[6][..3].iter().all(|&c| c == 1),
        "fentry and fexit counts with both links: {:?} {:?}",
        &bss.counts[0][..funcs.len()],
        &bss.counts[6][..3]
    );
    // The one call of the session's function: an entry run with a zeroed cookie, an exit
    // run that finds what the entry run wrote there.
    let session_runs = |b: &crate::skel::multi::types::bss| {
        (
            b.sess_entry[0],
            b.sess_exit[0],
            b.sess_cookie_ok[0],
            b.sess_nonzero_cookie[0],
        )
    };
    check_eq!(
        session_runs(bss),
        (1, 1, 1, 0),
        "the session's (entry runs, exit runs, cookies read back, cookies not zeroed)"
    );
    drop(fexit);
    drop(session);
    let bss = run_once(&mut skel)?;
    check!(
        bss.counts[0][..funcs.len()].iter().all(|&c| c == 1)
            && bss.counts[6].iter().all(|&c| c == 0),
        "counts after the fexit link closed: {:?} {:?}",
        &bss.counts[0][..funcs.len()],
        &bss.counts[6][..3]
    );
    check_eq!(
        session_runs(bss),
        (0, 0, 0, 0),
        "the session's runs after its link closed"
    );
    drop(counter);
    wait_tramp_images("no image after every link closed", <[String]>::is_empty)
}

/// A function that BTF and kallsyms know, that ftrace cannot hook (notrace).
fn notrace_function(funcs: &[Func]) -> Result<Func> {
    vmlinux_function(funcs, "notrace", |f, traceable| {
        f.nr_params > 0
            && !traceable
            && rkf_core::multi::check_shape(TMPL6, f.nr_params, f.varargs, &f.kind, &f.size).is_ok()
    })
}

/// A traceable vmlinux function of at most six parameters that rkf_multi refuses for its
/// shape alone: an argument or return value that is not passed in a register (a struct or
/// union by value, a float, varargs), and not denied.
fn not_in_registers_function(funcs: &[Func]) -> Result<Func> {
    vmlinux_function(funcs, "argument not in registers", |f, traceable| {
        traceable
            && !rkf_core::multi::denied(f.name.as_bytes())
            && rkf_core::multi::check_shape(TMPL6, f.nr_params, f.varargs, &f.kind, &f.size)
                == Err(Reason::NotInRegisters)
    })
}

/// The template of six arguments.
const TMPL6: u32 = rkf_core::multi::TMPL6_ARGS;

/// The first vmlinux function in BTF order, of at most six parameters, not one of
/// `funcs`, that kallsyms knows by its name alone and that `wanted` takes (given whether
/// ftrace can hook it); `what` names the kind for the error.
fn vmlinux_function(
    funcs: &[Func],
    what: &str,
    wanted: impl Fn(&rkf::btf::FuncShape, bool) -> bool,
) -> Result<Func> {
    let ftrace = multi::ftrace_functions()?;
    let k = Kallsyms::load()?;
    let btf = KernelBtf::vmlinux()?;
    let known: HashSet<&str> = funcs.iter().map(|f| f.name.as_str()).collect();
    for f in btf.funcs()? {
        if f.nr_params > 6
            || known.contains(f.name.as_str())
            || !wanted(&f, ftrace.contains_key(&f.name))
        {
            continue;
        }
        if let Ok(addr) = k.lookup(&f.name, None) {
            return Ok(Func {
                name: f.name,
                module: None,
                btf_id: f.btf_id,
                addr,
                nr_args: f.nr_params,
            });
        }
    }
    bail!("no {what} function found in vmlinux's BTF")
}

/// `rkf_multi_anchor()`, the function nothing calls that keeps rkf_multi's ftrace_ops
/// registered between links, is hooked to the shared trampoline while rkf_multi has had a
/// link, and denied to links: a glob over rkf_multi's functions leaves it out as denied,
/// its exact name is refused by `resolve()`, and by the kernel with `EINVAL` naming it.
fn anchor_denied() -> Result<()> {
    const ANCHOR: &str = "rkf_multi_anchor";
    let mut obj = MaybeUninit::uninit();
    let (skel, funcs) = setup(&mut obj)?;
    let _link = attach(&skel.progs.count_fentry0, &funcs[..1], None)?;
    let vmlinux = KernelBtf::vmlinux()?;
    let btf = KernelBtf::module(&vmlinux, "rkf_multi")?;
    let shape = btf
        .funcs()?
        .into_iter()
        .find(|f| f.name == ANCHOR)
        .with_context(|| format!("{ANCHOR} is not in rkf_multi's BTF"))?;
    let anchor = Func {
        addr: Kallsyms::load()?.lookup(ANCHOR, Some("rkf_multi"))?,
        nr_args: shape.nr_params,
        btf_id: shape.btf_id,
        module: Some("rkf_multi".into()),
        name: ANCHOR.into(),
    };
    let qualified = anchor.qualified_name();
    check_tramps(
        std::slice::from_ref(&anchor),
        Tramp::Shared,
        "the anchor with a link attached",
    )?;
    let r = multi::resolve(&["rkf_multi:rkf_multi_*"])?;
    let denied = r
        .skipped
        .get(&multi::Skip::Rule(Reason::Denied))
        .cloned()
        .unwrap_or_default();
    check!(
        denied.contains(&qualified),
        "rkf_multi:rkf_multi_* does not leave out {qualified} as denied: {denied:?}"
    );
    check!(
        r.funcs.iter().all(|f| f.name != ANCHOR),
        "rkf_multi:rkf_multi_* resolved {ANCHOR}"
    );
    let e = multi::resolve(&[&format!("rkf_multi:{ANCHOR}")])
        .err()
        .context("resolve() of the anchor by name")?;
    check!(
        e.to_string().contains(&qualified),
        "resolve() of the anchor: {e}"
    );
    // The kernel's own refusal, for a request that names it anyway.
    refusal(
        &skel.progs.count_fentry1,
        &[anchor],
        None,
        (libc::EINVAL, Some((0, Reason::Denied))),
        "a link on the anchor",
    )?;
    Ok(())
}

/// Every refusal: errno, the function named, and nothing left behind (the good functions
/// then attach and count exactly).
fn refusals() -> Result<()> {
    let mut obj = MaybeUninit::uninit();
    let (mut skel, funcs) = setup(&mut obj)?;
    let good = &funcs[..5];
    let with = |i: usize, bad: Func| {
        let mut v = good.to_vec();
        v.insert(i, bad);
        v
    };
    let mut wrong_addr = funcs[1].clone();
    wrong_addr.addr = funcs[2].addr;
    let mut not_func = funcs[0].clone();
    not_func.btf_id = 1; // an INT type in vmlinux BTF
    not_func.name = "btf id 1".into();
    let notrace = notrace_function(&funcs)?;
    diag!("notrace function for the test: {}", notrace.name);
    let unshaped = not_in_registers_function(&funcs)?;
    diag!(
        "function with an argument not in registers: {}",
        unshaped.name
    );
    // (what, the functions, errno, the function refused and why)
    type Case<'a> = (&'a str, Vec<Func>, i32, Option<(usize, Reason)>);
    let cases: Vec<Case<'_>> = vec![
        (
            "duplicate",
            with(5, funcs[2].clone()),
            libc::EINVAL,
            Some((5, Reason::Duplicate)),
        ),
        (
            "address of another function",
            with(2, wrong_addr),
            libc::EINVAL,
            Some((2, Reason::WrongAddress)),
        ),
        (
            "not a function",
            with(0, not_func),
            libc::ENOENT,
            Some((0, Reason::NotAFunction)),
        ),
        (
            "notrace",
            with(3, notrace),
            libc::ENOENT,
            Some((3, Reason::NotTraceable)),
        ),
        (
            "an argument or return value not in registers",
            with(1, unshaped),
            libc::EINVAL,
            Some((1, Reason::NotInRegisters)),
        ),
        ("none", Vec::new(), libc::EINVAL, None),
        (
            "too many",
            vec![funcs[0].clone(); rkf_core::multi::MAX_FUNCS as usize + 1],
            libc::E2BIG,
            None,
        ),
    ];
    for (what, set, errno, refused) in cases {
        refusal(
            &skel.progs.count_fentry0,
            &set,
            None,
            (errno, refused),
            what,
        )?;
        nothing_attached(&mut skel, &funcs, what)?;
    }
    // Raw requests for the good set, each through a file of its own.
    let ids: Vec<u32> = good.iter().map(|f| f.btf_id).collect();
    let addrs: Vec<u64> = good.iter().map(|f| f.addr).collect();
    let request = |prog_fd: u32, cnt: u32| AttachRequest {
        prog_fd,
        cnt,
        btf_ids: ids.as_ptr() as u64,
        addrs: addrs.as_ptr() as u64,
        ..Default::default()
    };
    let device = || {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(multi::DEVICE)
    };
    let errno_of = |file: &std::fs::File, req: &mut AttachRequest| {
        multi::attach_request(file, req).map_or_else(|e| e.raw_os_error().unwrap_or(-1), |()| 0)
    };
    // A program fd that is not open: EBADF, before any function is looked at.
    {
        const CLOSED: i32 = 9999;
        // SAFETY: F_GETFD only asks about the fd.
        let open = unsafe { libc::fcntl(CLOSED, libc::F_GETFD) } >= 0;
        check!(!open, "fd {CLOSED} is open in the runner");
        let mut req = request(CLOSED as u32, good.len() as u32);
        let errno = errno_of(&device()?, &mut req);
        check_eq!(errno, libc::EBADF, "a program fd that is not open");
        check_eq!(
            (req.bad_index, req.reason),
            (u32::MAX, 0),
            "a program fd that is not open: no function refused"
        );
        nothing_attached(&mut skel, &funcs, "a program fd that is not open")?;
    }
    // Upstream's fail case: a count of INT_MAX is E2BIG before anything is read (the
    // arrays hold five entries).
    {
        use std::os::fd::AsRawFd;
        let file = device()?;
        let prog_fd = skel.progs.count_fentry0.as_fd().as_raw_fd() as u32;
        let mut req = request(prog_fd, i32::MAX as u32);
        let errno = errno_of(&file, &mut req);
        check_eq!(errno, libc::E2BIG, "a count of INT_MAX");
        // A good request the kernel cannot write back (bad_index, reason) to: EFAULT, and
        // no link, although every function was fine.
        req.cnt = good.len() as u32;
        let page = ReadOnly::new(&req)?;
        // SAFETY: the request is a whole one, in a page the kernel may read.
        let r = unsafe { libc::ioctl(file.as_raw_fd(), abi::IOC_ATTACH as _, page.ptr()) };
        let errno = if r < 0 {
            std::io::Error::last_os_error().raw_os_error().unwrap_or(-1)
        } else {
            0
        };
        check_eq!(errno, libc::EFAULT, "a good request in read-only memory");
        nothing_attached(&mut skel, &funcs, "a good request in read-only memory")?;
        // A good one: from writable memory, through the same file, it attaches.
        let mut again = req;
        multi::attach_request(&file, &mut again)
            .context("the same request from writable memory")?;
        check_eq!(
            multi::links()?.len(),
            1,
            "links after the same request from writable memory"
        );
        // A second attach through a file that holds a link: EBUSY, and the link stays,
        // alone.
        let errno = errno_of(&file, &mut req);
        check_eq!(errno, libc::EBUSY, "a second attach through one file");
        check_eq!(
            multi::links()?.len(),
            1,
            "links after a second attach through one file"
        );
        good_set_counted(&mut skel, &funcs, "after a second attach through one file")?;
    }
    // Programs that are not rkf_multi programs.
    for (what, fd) in [
        (
            "an ordinary fentry program",
            skel.progs.plain_fentry.as_fd(),
        ),
        ("a map", skel.maps.bss.as_fd()),
    ] {
        let e = Link::attach(&fd, good, None)
            .err()
            .with_context(|| format!("{what}: attached"))?;
        diag!("{what}: {e}");
        check_eq!(e.errno, libc::EINVAL, "{what}: errno");
    }
    // And then the good set works, exactly, and ftrace lists it hooked (the check every
    // "nothing attached" above relies on).
    let _l = attach(&skel.progs.count_fentry0, good, None)?;
    let enabled = multi::enabled_functions()?;
    for f in good {
        check!(
            listed(&enabled, f),
            "{} is not in enabled_functions while attached",
            f.name
        );
    }
    good_set_counted(&mut skel, &funcs, "after the refusals")
}

/// Checks that one run counts count_fentry0 once on each of the refusal test's good set
/// (`funcs[..5]`) and on nothing else.
fn good_set_counted(skel: &mut MultiSkel<'_>, funcs: &[Func], what: &str) -> Result<()> {
    let bss = run_once(skel)?;
    for (i, f) in funcs.iter().enumerate() {
        check_eq!(bss.counts[0][i], u64::from(i < 5), "{what}: {}", f.name);
    }
    Ok(())
}

/// Whether ftrace's `enabled_functions` (its text, `enabled`) lists `f`: hooked by
/// anything, direct call or not.
pub(crate) fn listed(enabled: &str, f: &Func) -> bool {
    enabled.lines().any(|l| {
        l.strip_prefix(f.name.as_str())
            .is_some_and(|rest| rest.starts_with([' ', '\t']))
    })
}

/// Checks that a refused attach (`what`) left nothing behind: no link, none of `funcs`
/// hooked (in ftrace's `enabled_functions`, direct call or not), and none runs the
/// program.
fn nothing_attached(skel: &mut MultiSkel<'_>, funcs: &[Func], what: &str) -> Result<()> {
    let links = multi::links()?;
    check!(links.is_empty(), "{what}: links left: {links:?}");
    let enabled = multi::enabled_functions()?;
    for f in funcs {
        check!(!listed(&enabled, f), "{what}: {} is hooked", f.name);
    }
    let bss = run_once(skel)?;
    check!(
        bss.counts[0].iter().all(|&c| c == 0),
        "{what}: a function runs the program after a failed attach"
    );
    Ok(())
}

/// One page holding a copy of a value, mapped read-only.
struct ReadOnly(*mut libc::c_void);

impl ReadOnly {
    fn new<T: Copy>(value: &T) -> Result<Self> {
        let size = std::mem::size_of::<T>();
        anyhow::ensure!(size <= 4096, "larger than a page");
        // SAFETY: a new anonymous mapping; no existing memory is touched.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        anyhow::ensure!(
            p != libc::MAP_FAILED,
            "mmap: {}",
            std::io::Error::last_os_error()
        );
        let page = Self(p);
        // SAFETY: the page is ours, writable, and holds a `T`: 4096 bytes, page-aligned.
        unsafe { p.cast::<T>().write(*value) };
        // SAFETY: the page is ours.
        if unsafe { libc::mprotect(p, 4096, libc::PROT_READ) } != 0 {
            bail!("mprotect: {}", std::io::Error::last_os_error());
        }
        Ok(page)
    }

    fn ptr(&self) -> *mut libc::c_void {
        self.0
    }
}

impl Drop for ReadOnly {
    fn drop(&mut self) {
        // SAFETY: the mapping is ours, and nothing points into it any more.
        unsafe { libc::munmap(self.0, 4096) };
    }
}

/// An in-kernel fentry trampoline on a function, and then upstream's tracing_multi link
/// on it, makes rkf_multi refuse it (EBUSY, named, with its holder), a glob leave it out
/// (counted as busy) and attach the rest, and, for the in-kernel fentry, the reverse: an
/// in-kernel attach to an rkf_multi function fails, and neither breaks the other.
fn coexistence() -> Result<()> {
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

/// BPF_PROG_TEST_RUN by fd, for threads.
pub(crate) fn test_run_fd(fd: i32) -> Result<()> {
    let r = raw_test_run(fd);
    if r != 0 {
        bail!(
            "BPF_PROG_TEST_RUN: {}",
            std::io::Error::from_raw_os_error(-r)
        );
    }
    Ok(())
}

/// [`test_run_fd()`] with nothing but the system call (for a forked child of this
/// multi-threaded process, which must not allocate): 0, or a negative errno.
pub(crate) fn raw_test_run(fd: i32) -> i32 {
    use libbpf_rs::libbpf_sys::{bpf_prog_test_run_opts, bpf_test_run_opts};

    // An empty request: no input, one run.
    let mut opts = bpf_test_run_opts {
        sz: std::mem::size_of::<bpf_test_run_opts>() as _,
        ..Default::default()
    };
    // SAFETY: `fd` is a program fd kept open by the caller; `opts` is valid.
    unsafe { bpf_prog_test_run_opts(fd, &mut opts) }
}

/// Whether the kernel has kmemleak (the test kernel, with lockdep and KASAN): its
/// bookkeeping of every allocation makes each attach, detach and refused request many
/// times as slow under TCG, so the loops of the storm and fuzz tests run fewer rounds there.
fn kmemleak_kernel() -> bool {
    std::path::Path::new("/sys/kernel/debug/kmemleak").exists()
}

/// Whether the kernel is PREEMPT_RT: its version string (`uname -v`) names its preemption
/// model (init/Makefile).
fn preempt_rt() -> Result<bool> {
    let version = std::fs::read_to_string("/proc/sys/kernel/version")?;
    Ok(version.split_whitespace().any(|w| w == "PREEMPT_RT"))
}

/// Without both CAP_BPF and CAP_PERFMON every rkf_multi request gives EPERM, even on a
/// file opened while privileged; with both (and nothing else) an attach works.
fn unprivileged() -> Result<()> {
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

/// Functions of another module, rkf_testmod's rkf_testmod_multi_test*(), called once each
/// with known arguments by bpf_rkf_testmod_multi_run(), which checks their return values:
/// arguments, argument counts, cookies and return values through ctx and the helpers;
/// then the refusals of BTF objects that are not a module's.
/// A value compared at its type: (mask, value).  Narrow arguments and return values
/// leave the register's upper bits undefined.
type Masked = (u64, u64);
const W32: u64 = 0xffff_ffff;

/// rkf_testmod_multi_test1, 2, 3 and 6 as bpf_rkf_testmod_multi_run() calls them: the
/// argument count, each argument and the return value, compared at their types.
const TESTMOD_CALLS: [(u64, &[Masked], Masked); 4] = [
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
fn testmod_targets() -> Result<Vec<Func>> {
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
fn load_testmod(
    obj: &mut MaybeUninit<libbpf_rs::OpenObject>,
) -> Result<crate::skel::multi_testmod::MultiTestmodSkel<'_>> {
    use crate::skel::multi_testmod::MultiTestmodSkelBuilder;
    skeleton::load::<MultiTestmodSkelBuilder>(obj, "multi_testmod.bpf.c", skeleton::as_built)
}

/// Calls each rkf_testmod target once, those of more than six arguments too; fails if
/// one returned a wrong value.
fn run_testmod_targets(tm: &crate::skel::multi_testmod::MultiTestmodSkel<'_>) -> Result<()> {
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

fn module_targets() -> Result<()> {
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

/// The skeleton with bpf_fentry_test1..9 in its table, and the functions.
pub(crate) fn setup(
    obj: &mut MaybeUninit<libbpf_rs::OpenObject>,
) -> Result<(MultiSkel<'_>, Vec<Func>)> {
    let funcs = targets()?;
    Ok((load(obj, &funcs)?, funcs))
}

/// Runs `f` with rkf_multi reloaded with `generate=0`, every function on the shared
/// trampoline, then reloads it with its default parameters, as the runner loaded it,
/// however `f` ends (an error, a panic, rkf_multi unloaded by `f` itself): `f`'s error
/// comes first.
///
/// The attach storms need it: multi-threaded TCG mishandles the patching of an ftrace
/// site that another vCPU runs in a loop (README, "Known problem"), and a function with
/// its own trampoline has its site patched whenever its programs change.
pub(crate) fn with_shared_only<T>(f: impl FnOnce() -> Result<T>) -> Result<T> {
    use crate::kmod::{insmod, insmod_with, moddir, unload};

    /// Reloads rkf_multi with its default parameters: by `finish()`, or when dropped on
    /// the way out of a failure or a panic.
    struct Restore(Option<std::path::PathBuf>);
    impl Restore {
        fn reload(ko: &std::path::Path) -> Result<()> {
            unload(MULTI)?;
            insmod(ko).context("insmod rkf_multi again")
        }
        fn finish(mut self) -> Result<()> {
            self.0.take().map_or(Ok(()), |ko| Self::reload(&ko))
        }
    }
    impl Drop for Restore {
        fn drop(&mut self) {
            if let Some(ko) = self.0.take() {
                if let Err(e) = Self::reload(&ko) {
                    diag!("rkf_multi not restored: {e:#}");
                }
            }
        }
    }

    let ko = moddir()?.join(format!("{MULTI}.ko"));
    unload(MULTI)?;
    let restore = Restore(Some(ko.clone()));
    insmod_with(&ko, c"generate=0").context("insmod rkf_multi generate=0")?;
    let r = f();
    let back = restore.finish();
    let v = r?;
    back?;
    Ok(v)
}

/// Which of rkf_multi's trampolines a function's ftrace site calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Tramp {
    /// Its own, generated (`rkf_multi_image_<n>` in kallsyms).
    Generated,
    /// The shared one (`rkf_multi_tramp`).
    Shared,
}

impl Tramp {
    /// Runs `f` under rkf_multi as loaded (`Generated`), then reloaded with `generate=0`
    /// (`Shared`).
    pub(crate) fn run_both(f: impl Fn(Tramp) -> Result<()>) -> Result<()> {
        let generated = f(Tramp::Generated);
        let shared = with_shared_only(|| f(Tramp::Shared));
        generated.context("through generated trampolines")?;
        shared.context("through the shared trampoline (generate=0)")
    }

    /// The kind of rkf_multi trampoline `caller` is, a site's direct caller by symbol, or
    /// `None` if it is none of rkf_multi's.
    pub(crate) fn of(caller: &str) -> Option<Tramp> {
        if caller.starts_with("rkf_multi_image_") {
            Some(Tramp::Generated)
        } else if caller == "rkf_multi_tramp" {
            Some(Tramp::Shared)
        } else {
            None
        }
    }
}

/// The direct callers of `funcs`: the trampoline each one's site calls, if any.
pub(crate) fn callers(funcs: &[Func]) -> Result<Vec<Option<String>>> {
    let all = multi::direct_callers()?;
    Ok(funcs
        .iter()
        .map(|f| all.get(&f.qualified_name()).cloned())
        .collect())
}

/// Checks that each of `funcs` is called by rkf_multi's trampoline of kind `t`.
pub(crate) fn check_tramps(funcs: &[Func], t: Tramp, what: &str) -> Result<()> {
    let callers = multi::direct_callers()?;
    for f in funcs {
        let c = callers
            .get(&f.qualified_name())
            .map(String::as_str)
            .unwrap_or("none");
        check!(
            Tramp::of(c) == Some(t),
            "{what}: {} called through {c}, not the {t:?} trampoline",
            f.name
        );
    }
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

/// Options of `rkf funccount -d` for `duration`: every task's calls, no intervals.
fn counting(duration: std::time::Duration) -> funccount::Options {
    funccount::Options {
        duration,
        pid: None,
        interval: None,
    }
}

/// `rkf funccount vfs_*`, through the library: one link on every vfs_ function that can
/// be traced, the others left out with a reason; reads of a file while it counts show up
/// as vfs_read calls.
fn funccount_glob() -> Result<()> {
    use std::sync::atomic::{AtomicBool, Ordering};

    modules::require("rkf_multi")?;
    let stop = AtomicBool::new(false);
    let (c, reads) = std::thread::scope(|s| -> Result<_> {
        let reader = s.spawn(|| -> Result<u64> {
            let mut n = 0;
            let mut buf = [0u8; 64];
            while !stop.load(Ordering::Relaxed) {
                use std::io::Read;
                let _ = std::fs::File::open("/proc/self/stat")?.read(&mut buf)?;
                n += 1;
            }
            Ok(n)
        });
        let c = funccount::count(&["vfs_*"], &counting(std::time::Duration::from_secs(2)));
        stop.store(true, Ordering::Relaxed);
        let reads = reader.join().expect("reader panicked")?;
        Ok((c?, reads))
    })?;
    let skipped: usize = c.attach.skipped.values().map(Vec::len).sum();
    diag!(
        "vfs_*: {} attached in {:?}, {skipped} left out; {reads} reads; top: {:?}",
        c.attach.funcs,
        c.attach.time,
        &c.counts[..c.counts.len().min(5)]
    );
    for (why, names) in &c.attach.skipped {
        diag!("left out {}: {why} (e.g. {})", names.len(), names[0]);
    }
    check!(
        c.attach.funcs > 10,
        "only {} vfs_ functions attached",
        c.attach.funcs
    );
    let vfs_read = c
        .counts
        .iter()
        .find(|(n, _)| n == "vfs_read")
        .map_or(0, |x| x.1);
    check!(
        vfs_read > 0,
        "no vfs_read call counted during {reads} reads"
    );
    // No vfs_ function runs in interrupts, nor under one of the program's runs.
    check_eq!(
        (c.missed, c.unknown),
        (0, 0),
        "runs missed, and runs on a function without a counter"
    );
    check!(
        multi::links()?.is_empty(),
        "a link is left after funccount returned"
    );
    Ok(())
}

/// `resolve()` counts every pattern that matches a function, however patterns overlap,
/// and takes each function once; and it finds weak functions (`W` in /proc/kallsyms):
/// `arch_vma_name()`, kernel/signal.c's weak default, which reading /proc/self/maps calls
/// once per mapping, is counted by `rkf funccount`.
fn resolve_patterns() -> Result<()> {
    use std::sync::atomic::{AtomicBool, Ordering};

    modules::require("rkf_multi")?;
    let names = |r: &multi::Resolved| {
        let mut v: Vec<String> = r.funcs.iter().map(|f| f.name.clone()).collect();
        v.sort();
        v
    };
    let glob = names(&multi::resolve(&["bpf_fentry_test*"])?);
    for i in 1..=9 {
        let name = format!("bpf_fentry_test{i}");
        check!(
            glob.contains(&name),
            "bpf_fentry_test* resolved to {glob:?}, without {name}"
        );
    }
    for pats in [
        &["bpf_fentry_test*", "bpf_fentry_test1"][..],
        &["bpf_fentry_test1", "bpf_fentry_test*"],
        &["bpf_fentry_test*", "bpf_fentry_test*"],
    ] {
        let r = multi::resolve(pats).with_context(|| format!("resolve({pats:?})"))?;
        check_eq!(names(&r), glob, "resolve({pats:?})");
    }
    let r = multi::resolve(&["bpf_fentry_test1", "bpf_fentry_test1"])?;
    check_eq!(
        names(&r),
        vec!["bpf_fentry_test1".to_string()],
        "a name given twice"
    );

    const WEAK: &str = "arch_vma_name";
    let ksyms = Kallsyms::load()?;
    let kinds: Vec<char> = ksyms
        .symbols()
        .iter()
        .filter(|s| s.module.is_none() && s.name == WEAK)
        .map(|s| s.kind)
        .collect();
    check_eq!(kinds, vec!['W'], "{WEAK} in /proc/kallsyms");
    let stop = AtomicBool::new(false);
    let (c, reads) = std::thread::scope(|s| -> Result<_> {
        let reader = s.spawn(|| -> Result<u64> {
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                std::fs::read("/proc/self/maps")?;
                n += 1;
            }
            Ok(n)
        });
        let c = funccount::count(&[WEAK], &counting(std::time::Duration::from_millis(500)));
        stop.store(true, Ordering::Relaxed);
        let reads = reader.join().expect("reader panicked")?;
        Ok((c?, reads))
    })?;
    check_eq!(c.attach.funcs, 1, "{WEAK}: functions attached");
    let n = c.counts.iter().find(|(n, _)| n == WEAK).map_or(0, |x| x.1);
    diag!("{WEAK}: {n} calls in {reads} reads of /proc/self/maps");
    check!(n > 0, "no {WEAK} call counted during {reads} reads");
    Ok(())
}

/// The ids of every loaded BPF program.
pub(crate) fn prog_ids() -> Vec<u32> {
    libbpf_rs::query::ProgInfoIter::default()
        .map(|p| p.id)
        .collect()
}

/// What a test may take from the kernel and must give back: the BPF programs loaded and
/// the named modules' reference counts, as they were.
pub(crate) struct Held {
    progs: HashSet<u32>,
    refcnts: Vec<(&'static str, u64)>,
}

impl Held {
    /// Now, for `modules`, once what earlier tests gave back has settled: every program
    /// they loaded freed (frees wait for grace periods, and so do the module references
    /// their links drop with them), then the programs and reference counts the same for
    /// 1 s; for at most 20 s.
    pub(crate) fn now(modules: &[&'static str]) -> Result<Self> {
        let start = std::time::Instant::now();
        loop {
            let left = progs_loaded_since(crate::harness::progs_before_tests());
            if left.is_empty() {
                break;
            }
            check!(
                start.elapsed() < std::time::Duration::from_secs(20),
                "programs of earlier tests still loaded after 20 s: {left:?}"
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        let read = || -> Result<Self> {
            let mut refcnts = Vec::new();
            for &m in modules {
                refcnts.push((m, module_refcnt(m)?));
            }
            Ok(Self {
                progs: prog_ids().into_iter().collect(),
                refcnts,
            })
        };
        let mut last = read()?;
        let mut still = 0;
        while still < 4 {
            check!(
                start.elapsed() < std::time::Duration::from_secs(20),
                "loaded programs and module reference counts still changing after 20 s"
            );
            std::thread::sleep(std::time::Duration::from_millis(250));
            let now = read()?;
            still = if now.progs == last.progs && now.refcnts == last.refcnts {
                still + 1
            } else {
                0
            };
            last = now;
        }
        Ok(last)
    }

    /// Runs `f`, then [`Held::released()`] against what was held before it.
    pub(crate) fn given_back(
        modules: &[&'static str],
        f: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        let held = Self::now(modules)?;
        f()?;
        held.released()
    }

    /// Waits until every program loaded since is freed and every module's reference
    /// count is back, for at most 20 s (links free their programs and drop their module
    /// references after grace periods); fails naming what is left: a leaked reference.
    pub(crate) fn released(&self) -> Result<()> {
        let start = std::time::Instant::now();
        loop {
            let progs = progs_loaded_since(&self.progs);
            let mut refcnts = Vec::new();
            for &(m, was) in &self.refcnts {
                let now = module_refcnt(m)?;
                if now != was {
                    refcnts.push(format!("{m} {now} ({was} before)"));
                }
            }
            if progs.is_empty() && refcnts.is_empty() {
                return Ok(());
            }
            if start.elapsed() > std::time::Duration::from_secs(20) {
                bail!(
                    "20 s after their fds were closed (leaked references): programs still \
                     loaded {progs:?}, module reference counts {refcnts:?}"
                );
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
}

/// The ids of the programs loaded now that are not in `known`.
fn progs_loaded_since(known: &HashSet<u32>) -> Vec<u32> {
    prog_ids()
        .into_iter()
        .filter(|i| !known.contains(i))
        .collect()
}

/// `/sys/module/<name>/refcnt`.
pub(crate) fn module_refcnt(name: &str) -> Result<u64> {
    let path = format!("/sys/module/{name}/refcnt");
    let s = std::fs::read_to_string(&path).with_context(|| path.clone())?;
    s.trim().parse().with_context(|| path)
}

/// A raw ioctl of `cmd` with `req`: for the commands and sizes that
/// [`multi::ioctl`] does not define.
fn junk_ioctl(file: &std::fs::File, cmd: u32, req: &mut AttachRequest) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: `req` is a whole request; a wrong command or size only makes the kernel read
    // less of it, or refuse.
    let r = unsafe { libc::ioctl(file.as_raw_fd(), cmd as _, req as *mut AttachRequest) };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Checks what one request of [`ioctl_fuzz`], command `cmd`, gave: `code` (0 or an
/// errno) and the request as the kernel left it.  An attach gives 0 or an errno of the
/// README's table for `/dev/rkf_multi` attach.  Where the order in which the kernel reads
/// a request fixes the errno, it must be that one: junk in `flags` (a bit other than
/// `F_COUNT`) or `pad` is `EINVAL`
/// whatever else the request holds; then a count of 0 is `EINVAL` and one past
/// `MAX_FUNCS` `E2BIG`; then, with a count in range, a `bad_ptr` (an array at an address
/// no mapping holds) is `EFAULT` (every array is read before anything in them is
/// checked; a read past the end of a good one may fault first, with the same errno).
/// The kernel overwrites `bad_index` and
/// `reason` of every attach it reads, with `u32::MAX` and 0, or with the refused
/// function's index in the request (below `cnt`) and its reason.  Any other command or
/// size is `ENOTTY`.
fn check_fuzz_outcome(
    cmd: u32,
    code: i32,
    junk_fields: bool,
    bad_ptr: bool,
    cnt: u32,
    req: &AttachRequest,
) -> Result<()> {
    if cmd == abi::IOC_INFO {
        // A random command that happens to be INFO's: any outcome of a read of a link.
        return Ok(());
    }
    if cmd != abi::IOC_ATTACH {
        check_eq!(code, libc::ENOTTY, "ioctl command {cmd:#x}: errno");
        return Ok(());
    }
    const TABLE: [i32; 7] = [
        0,
        libc::EINVAL,
        libc::ENOENT,
        libc::EBUSY,
        libc::E2BIG,
        libc::EBADF,
        libc::EFAULT,
    ];
    check!(
        TABLE.contains(&code),
        "attach of {cnt} functions: errno {code}, not one of the table's {TABLE:?}"
    );
    let fixed = if junk_fields {
        Some((libc::EINVAL, "junk in flags or pad"))
    } else if cnt == 0 {
        Some((libc::EINVAL, "a count of 0"))
    } else if cnt > rkf_core::multi::MAX_FUNCS {
        Some((libc::E2BIG, "a count past MAX_FUNCS"))
    } else if bad_ptr {
        Some((libc::EFAULT, "an array at a bad address"))
    } else {
        None
    };
    if let Some((want, why)) = fixed {
        check_eq!(code, want, "attach of {cnt} functions with {why}: errno");
    }
    let refused = req.bad_index != u32::MAX;
    check!(
        if refused {
            code != 0 && req.bad_index < cnt && req.reason != 0
        } else {
            req.reason == 0
        },
        "attach of {cnt} functions gave errno {code}, bad_index {} and reason {}",
        req.bad_index,
        req.reason
    );
    if refused {
        // A function refused: the errno is its reason's.
        check_eq!(
            Reason::from_raw(req.reason).map(Reason::errno),
            Some(code),
            "attach of {cnt} functions refused for reason {}: errno",
            req.reason
        );
    }
    Ok(())
}

/// 50,000 random and mutated requests on both vCPUs (10,000 on a kernel with kmemleak,
/// where 30,000, about 900 of them attaching, took 435 to 616 s of the test kernel's run
/// under TCG, see [`kmemleak_kernel`]; 100,000 took 300 s on the distro kernel): bad fds,
/// wrong program types, fentry, fexit and session programs of six and twelve arguments,
/// sleepable ones among them, on bpf_fentry_test1..9 (which a sleepable program may not
/// trace) or on three syscalls (which it may), huge and short counts, bad pointers, random
/// ids and addresses, random commands, closes of files another thread attaches through.
/// Passes only if the kernel stays quiet (the run's splat check), every program that can
/// attach was attached by some request (and plain_fentry, no template's, by none), no
/// link is left, every program is freed once its fds are closed and rkf_multi's reference
/// count comes back (no leaked reference), and, later, the module unloads (lifecycle
/// tests) and kmemleak finds nothing.
fn ioctl_fuzz() -> Result<()> {
    use std::os::fd::AsRawFd;
    use std::sync::Mutex;

    let per_thread: u64 = if kmemleak_kernel() { 5_000 } else { 25_000 };
    // The programs (the first of the fds below), each of which some request must attach:
    // all but plain_fentry, an fentry program of bpf_fentry_test1 and no template's.
    const PROGS: usize = 8;
    const NEVER: usize = 3;
    // What a thread saw: errno -> count, and the requests that attached, by program.
    type Outcomes = (std::collections::BTreeMap<i32, u64>, [u64; PROGS]);

    let held = Held::now(&[MULTI])?;
    let mut outcomes = std::collections::BTreeMap::<i32, u64>::new();
    let mut attached_by = [0u64; PROGS];
    {
        let mut obj = MaybeUninit::uninit();
        let (skel, funcs) = setup(&mut obj)?;
        // Sleepable programs too, which may not trace bpf_fentry_testN but may trace
        // syscalls: a request names the first functions of one of two sets, those or
        // three syscalls nothing in the VM calls meanwhile (the sleepable storm's cold
        // ones and getsid(2)), which every program may trace.
        let mut sobj = MaybeUninit::uninit();
        let sskel = sleepable::load(&mut sobj, &[])?;
        let sets = [funcs.clone(), sleepable::storm_targets()?[1..].to_vec()];
        // Programs of twelve arguments (rkf_multi_tmpl12()): a wider frame to fill, in a
        // generated trampoline (fexit, session).
        let mut wobj = MaybeUninit::uninit();
        let wide = skeleton::load::<crate::skel::multi_wide::MultiWideSkelBuilder>(
            &mut wobj,
            "multi_wide.bpf.c",
            skeleton::as_built,
        )?;
        let null = std::fs::File::open("/dev/null")?;
        let fds: Vec<i32> = vec![
            skel.progs.count_fentry0.as_fd().as_raw_fd(),
            skel.progs.count_fexit2.as_fd().as_raw_fd(),
            skel.progs.multi_fentry.as_fd().as_raw_fd(),
            skel.progs.plain_fentry.as_fd().as_raw_fd(),
            sskel.progs.storm_fentry.as_fd().as_raw_fd(),
            sskel.progs.storm_fexit.as_fd().as_raw_fd(),
            wide.progs.wide_fexit.as_fd().as_raw_fd(),
            wide.progs.wide_session.as_fd().as_raw_fd(),
            skel.maps.bss.as_fd().as_raw_fd(),
            null.as_raw_fd(),
            9999,
            -1,
        ];
        let ids: Vec<Vec<u32>> = sets
            .iter()
            .map(|s| s.iter().map(|f| f.btf_id).collect())
            .collect();
        let addrs: Vec<Vec<u64>> = sets
            .iter()
            .map(|s| s.iter().map(|f| f.addr).collect())
            .collect();
        let cookies: Vec<u64> = (0..funcs.len() as u64).collect();

        // BTF fds for the functions: a module's (rkf_multi's own, which resolves vmlinux
        // ids too), vmlinux's (not a module's), and non-BTF fds.
        let module_btf = rkf::btf::object_fd("rkf_multi")?;
        let vmlinux_btf = rkf::btf::object_fd("vmlinux")?;
        let btf_fds: Vec<i32> = vec![
            module_btf.as_raw_fd(),
            vmlinux_btf.as_raw_fd(),
            fds[0],
            fds[4],
            9999,
            -1,
        ];
        let pool: Mutex<Vec<std::fs::File>> = Mutex::new(Vec::new());
        let trigger_fd = skel.progs.plain_fentry.as_fd().as_raw_fd();
        let results = std::thread::scope(|s| {
            let workers: Vec<_> = (0..2u64)
                .map(|t| {
                    let (fds, ids, addrs, cookies, pool, btf_fds) =
                        (&fds, &ids, &addrs, &cookies, &pool, &btf_fds);
                    s.spawn(move || -> Result<Outcomes> {
                        let mut rng = fastrand::Rng::with_seed(0x9e37_79b9_7f4a_7c15 ^ (t + 1));
                        let mut seen = std::collections::BTreeMap::new();
                        let mut attached_by = [0u64; PROGS];
                        let mut info_buf = vec![multi::FuncInfo::default(); 64];
                        for i in 0..per_thread {
                            let file = std::fs::OpenOptions::new()
                                .read(true)
                                .write(true)
                                .open(multi::DEVICE)?;
                            let set = rng.usize(..ids.len());
                            let (ids, addrs) = (&ids[set], &addrs[set]);
                            // Mutable copies the request points into, some entries
                            // mutated.
                            let mut ids_buf = ids.clone();
                            let mut addrs_buf = addrs.clone();
                            let mut btf_fds_buf = vec![0i32; ids.len()];
                            let n = ids.len();
                            for k in 0..n {
                                ids_buf[k] = match rng.u64(..8) {
                                    0 => rng.u32(..),
                                    1 => ids[rng.usize(..n)],
                                    _ => ids[k],
                                };
                                addrs_buf[k] = match rng.u64(..8) {
                                    0 => rng.u64(..),
                                    1 => addrs[rng.usize(..n)] + rng.u64(..16),
                                    _ => addrs[k],
                                };
                                btf_fds_buf[k] = match rng.u64(..4) {
                                    0 => btf_fds[rng.usize(..btf_fds.len())],
                                    _ => 0,
                                };
                            }
                            let cnt: u32 = match rng.u64(..10) {
                                0 => 0,
                                1 => u32::MAX,
                                2 => rkf_core::multi::MAX_FUNCS + 1,
                                3 => n as u32 + 1 + rng.u32(..64), // past the buffers
                                _ => 1 + rng.u32(..n as u32),
                            };
                            let ptr = |valid: u64, rng: &mut fastrand::Rng| match rng.u64(..12) {
                                0 => 0,
                                1 => 0x1000,
                                2 => u64::MAX - 7,
                                _ => valid,
                            };
                            let prog = rng.usize(..fds.len());
                            let prog_fd = fds[prog];
                            let mut req = AttachRequest {
                                prog_fd: prog_fd as u32,
                                cnt,
                                btf_ids: ptr(ids_buf.as_ptr() as u64, &mut rng),
                                addrs: ptr(addrs_buf.as_ptr() as u64, &mut rng),
                                cookies: match rng.u64(..3) {
                                    0 => 0,
                                    _ => ptr(cookies.as_ptr() as u64, &mut rng),
                                },
                                btf_fds: match rng.u64(..3) {
                                    0 => ptr(btf_fds_buf.as_ptr() as u64, &mut rng),
                                    _ => 0,
                                },
                                // Sometimes junk in `flags` and `bad_index` (which the
                                // kernel must refuse, and overwrite), and in the rest;
                                // sometimes the one flag there is.
                                flags: match rng.u64(..20) {
                                    0 => rng.u32(..),
                                    1 => abi::F_COUNT,
                                    _ => 0,
                                },
                                bad_index: if rng.u64(..20) == 0 { rng.u32(..) } else { 0 },
                                reason: if rng.u64(..40) == 0 { rng.u32(..) } else { 0 },
                                pad: if rng.u64(..40) == 0 { rng.u32(..) } else { 0 },
                            };
                            let junk_fields = req.flags & !abi::F_COUNT != 0 || req.pad != 0;
                            let cnt = req.cnt;
                            // An array the kernel reads at an address no mapping holds.
                            let bad_ptr = req.btf_ids != ids_buf.as_ptr() as u64
                                || req.addrs != addrs_buf.as_ptr() as u64
                                || (req.cookies != 0 && req.cookies != cookies.as_ptr() as u64)
                                || (req.btf_fds != 0 && req.btf_fds != btf_fds_buf.as_ptr() as u64);
                            // Mostly the request as RKF_MULTI_IOC_ATTACH; sometimes a random
                            // command, or ATTACH's number with a wrong size.
                            let cmd = match rng.u64(..20) {
                                0 => rng.u32(..),
                                1 => nix::request_code_readwrite!(
                                    abi::IOC_TYPE,
                                    abi::IOC_NR_ATTACH,
                                    rng.usize(..64)
                                ) as u32,
                                _ => abi::IOC_ATTACH,
                            };
                            let res = junk_ioctl(&file, cmd, &mut req);
                            let code = res.map_or_else(|e| e.raw_os_error().unwrap_or(-1), |()| 0);
                            check_fuzz_outcome(cmd, code, junk_fields, bad_ptr, cnt, &req)?;
                            *seen.entry(code).or_insert(0u64) += 1;
                            // Sometimes read it back, with a random buffer.
                            let attached = cmd == abi::IOC_ATTACH && code == 0;
                            if attached {
                                check!(
                                    prog < PROGS && prog != NEVER,
                                    "fd {prog_fd} (entry {prog} of the fds) attached"
                                );
                                attached_by[prog] += 1;
                            }
                            if rng.u64(..4) == 0 {
                                let valid = info_buf.as_mut_ptr() as u64;
                                let mut info = abi::LinkInfo {
                                    id: if rng.u64(..2) == 0 {
                                        0
                                    } else {
                                        rng.u64(..1 << 20)
                                    },
                                    // Room for 64 entries at most, or a bad pointer.
                                    buf_cnt: rng.u32(..64),
                                    funcs: ptr(valid, &mut rng),
                                    ..Default::default()
                                };
                                let (id, buf_cnt, bad) =
                                    (info.id, info.buf_cnt, info.funcs != valid);
                                // SAFETY: `funcs` is `info_buf`, with room for the
                                // `buf_cnt` entries the kernel may write, or an address no
                                // mapping can hold (0, 0x1000, the top of the address
                                // space), which the kernel refuses with EFAULT.
                                let r = unsafe { multi::ioctl::info(file.as_raw_fd(), &mut info) };
                                // Every link has a function: the kernel writes at least
                                // one entry when there is room for one.
                                let faults = buf_cnt > 0 && bad;
                                let what = format!(
                                    "RKF_MULTI_IOC_INFO of id {id} (this file attached: \
                                     {attached}) with room for {buf_cnt} at {:#x}",
                                    info.funcs
                                );
                                if id == 0 {
                                    // This file's own link: there exactly when this
                                    // request attached (a new file each time).
                                    let want = match (attached, faults) {
                                        (false, _) => Err(nix::errno::Errno::ENOENT),
                                        (true, true) => Err(nix::errno::Errno::EFAULT),
                                        (true, false) => Ok(()),
                                    };
                                    check_eq!(
                                        r.as_ref().map(|_| ()).map_err(|e| *e),
                                        want,
                                        "{what}"
                                    );
                                    if r.is_ok() {
                                        check_eq!(info.cnt, cnt, "{what}: the link's functions");
                                    }
                                } else {
                                    // Any link of either thread may have that id.
                                    let want: &[nix::errno::Errno] = if faults {
                                        &[nix::errno::Errno::ENOENT, nix::errno::Errno::EFAULT]
                                    } else {
                                        &[nix::errno::Errno::ENOENT]
                                    };
                                    check!(
                                        r.as_ref().map_or_else(|e| want.contains(e), |_| !faults),
                                        "{what}: {r:?}"
                                    );
                                }
                            }
                            // Keep some links open for a while; close others' links too.
                            let mut p = pool.lock().unwrap();
                            if rng.u64(..3) == 0 {
                                p.push(file);
                            }
                            if p.len() > 8 || rng.u64(..4) == 0 {
                                let victim = rng.usize(..p.len().max(1));
                                if victim < p.len() {
                                    p.swap_remove(victim);
                                }
                            }
                            drop(p);
                            if i % 1000 == 0 {
                                test_run_fd(trigger_fd)?;
                            }
                        }
                        Ok((seen, attached_by))
                    })
                })
                .collect();
            workers
                .into_iter()
                .map(|w| w.join().expect("a fuzz thread panicked"))
                .collect::<Result<Vec<_>>>()
        })?;
        for (seen, by) in results {
            for (k, v) in seen {
                *outcomes.entry(k).or_insert(0) += v;
            }
            for (sum, n) in attached_by.iter_mut().zip(by) {
                *sum += n;
            }
        }
        pool.into_inner().unwrap().clear();
        check!(
            multi::links()?.is_empty(),
            "links left after every file was closed"
        );
    }
    diag!("{} requests; errno -> count: {outcomes:?}", 2 * per_thread);
    diag!("attaches by program: {attached_by:?}");
    for (i, &n) in attached_by.iter().enumerate() {
        if i == NEVER {
            check_eq!(n, 0, "attaches of plain_fentry, no template's program");
        } else {
            check!(n > 0, "no request attached program {i} (the fds' order)");
        }
    }
    // Every program of the skeleton goes once its fds are closed, and rkf_multi's
    // references with the links: none leaked.
    held.released()
}
