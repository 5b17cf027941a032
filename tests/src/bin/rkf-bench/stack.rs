// SPDX-License-Identifier: GPL-2.0

//! rkf_stack: the stack kfuncs against `bpf_get_stack()`.

use std::mem::MaybeUninit;

use anyhow::{bail, ensure, Context, Result};
use libbpf_rs::ProgramInput;
use rkf::skeleton;

use crate::{
    median,
    skel::bench_stack::{BenchStackSkel, BenchStackSkelBuilder},
};

const F_USER_STACK: u64 = 1 << 8;
const F_USER_BUILD_ID: u64 = 1 << 11;
/// `struct bpf_stack_build_id`.
const BUILD_ID_ENTRY: u32 = 32;
/// bench_stack.bpf.c: calls per loop.
const CALLS: u64 = 32;
/// Frames of stack_target.c above getpgid() in the user-stack cases.
const USER_DEPTH: i32 = 30;

extern "C" {
    /// tests/helpers/stack_target.c: `depth` frames, then getpgid(0).
    fn rkf_stack_syscall_at(depth: i32) -> i64;
}

/// Where the stack of a case comes from.
#[derive(Clone, Copy)]
enum Source {
    /// `rkf_testmod_leaf()` under this many `rkf_testmod_recurse()` frames.
    Testmod(u32),
    /// getpgid() from `USER_DEPTH` frames of user code.
    Syscall,
}

struct Case {
    name: String,
    source: Source,
    flags: u64,
    size: u32,
}

/// The median cost per call of the kfunc and of the helper, and the frames written.
struct Cost {
    kfunc: u64,
    helper: u64,
    frames: u64,
}

/// One event: both loops in one program run, `helper_first` choosing the order.
fn once(skel: &mut BenchStackSkel<'_>, case: &Case, helper_first: bool) -> Result<(u64, u64, i64)> {
    {
        let bss = skel.maps.bss_data.as_deref_mut().context("no .bss")?;
        bss.flags = case.flags;
        bss.size = case.size;
        bss.helper_first = helper_first.into();
        bss.kfunc_ns = 0;
        bss.helper_ns = 0;
        bss.armed = 1;
        if let Source::Testmod(d) = case.source {
            bss.depth = d;
            bss.recurse_ret = -1;
        }
    }
    match case.source {
        Source::Testmod(d) => {
            let out = skel.progs.recurse.test_run(ProgramInput::default())?;
            ensure!(out.return_value == 0, "recurse: {}", out.return_value);
            let ret = skel
                .maps
                .bss_data
                .as_deref()
                .context("no .bss")?
                .recurse_ret;
            ensure!(ret == i64::from(d), "bpf_rkf_testmod_recurse({d}): {ret}");
        }
        // SAFETY: a plain C function.
        Source::Syscall => _ = unsafe { rkf_stack_syscall_at(USER_DEPTH) },
    }
    let bss = skel.maps.bss_data.as_deref().context("no .bss")?;
    ensure!(bss.armed == 0, "{}: the program did not run", case.name);
    ensure!(
        bss.kfunc_ret == bss.helper_ret && bss.kfunc_ret > 0,
        "{}: kfunc returned {}, helper {}",
        case.name,
        bss.kfunc_ret,
        bss.helper_ret
    );
    // Frame 0 of a kernel stack is the call site in the program, different for the two
    // loops; the selftests check it names the same program.
    let (from, n) = (
        if case.flags & F_USER_STACK == 0 { 8 } else { 0 },
        bss.kfunc_ret as usize,
    );
    ensure!(
        bss.kbuf[from..n] == bss.hbuf[from..n],
        "{}: kfunc and helper wrote different stacks",
        case.name
    );
    Ok((bss.kfunc_ns, bss.helper_ns, bss.kfunc_ret))
}

fn measure(skel: &mut BenchStackSkel<'_>, case: &Case, rounds: usize) -> Result<Cost> {
    // One warm-up event: page faults, cold caches of the build-id reader.
    once(skel, case, false)?;
    let (mut k, mut h) = (Vec::new(), Vec::new());
    let mut ret = 0;
    for r in 0..rounds {
        let (kn, hn, rv) = once(skel, case, r % 2 == 1)?;
        k.push(kn);
        h.push(hn);
        ret = rv;
    }
    let elem = if case.flags & F_USER_BUILD_ID != 0 {
        BUILD_ID_ENTRY
    } else {
        8
    };
    Ok(Cost {
        kfunc: median(k) / CALLS,
        helper: median(h) / CALLS,
        frames: ret as u64 / u64::from(elem),
    })
}

/// The depth of the kernel stack at `rkf_testmod_leaf()` with `d` recursion frames.
fn frames_at(skel: &mut BenchStackSkel<'_>, d: u32) -> Result<u64> {
    let case = Case {
        name: format!("probe {d}"),
        source: Source::Testmod(d),
        flags: 0,
        size: 4096,
    };
    Ok(once(skel, &case, false)?.2 as u64 / 8)
}

pub(crate) fn bench(rounds: usize) -> Result<()> {
    rkf::modules::require("rkf_stack")?;
    rkf::modules::require("rkf_testmod")?;
    let mut obj = MaybeUninit::uninit();
    let mut skel = skeleton::load_and_attach::<BenchStackSkelBuilder>(
        &mut obj,
        "bench_stack.bpf.c",
        |open| {
            open.maps
                .bss_data
                .as_deref_mut()
                .context("no .bss")?
                .target_tgid = std::process::id();
            Ok(())
        },
    )?;

    // The frames below rkf_testmod_recurse() (syscall entry, test_run, the programs).
    let base = frames_at(&mut skel, 0)?;
    let mut cases = vec![Case {
        name: "kernel, getpgid() entry".into(),
        source: Source::Syscall,
        flags: 0,
        size: 1024,
    }];
    for want in [32, 127] {
        if want <= base {
            bail!("the kernel stack at rkf_testmod_leaf() is already {base} frames deep");
        }
        cases.push(Case {
            name: format!("kernel, rkf_testmod +{}", want - base),
            source: Source::Testmod((want - base) as u32),
            flags: 0,
            size: 1024,
        });
    }
    cases.push(Case {
        name: format!("user, {USER_DEPTH} frames + libc"),
        source: Source::Syscall,
        flags: F_USER_STACK,
        size: 1024,
    });
    cases.push(Case {
        name: "user, build-id".into(),
        source: Source::Syscall,
        flags: F_USER_STACK | F_USER_BUILD_ID,
        size: 128 * BUILD_ID_ENTRY,
    });

    println!("rkf_stack: cost per call of bpf_rkf_get_stack() and bpf_get_stack(), same event, same flags");
    println!("(-icount shift=0: 1 ns of guest time is one instruction; median of {rounds} events x {CALLS} calls)");
    println!();
    println!("| case                           | frames | kfunc (ns) | helper (ns) | ratio |");
    println!("|--------------------------------|-------:|-----------:|------------:|------:|");
    let mut worst: f64 = 0.0;
    for case in &cases {
        let c = measure(&mut skel, case, rounds)?;
        let ratio = c.kfunc as f64 / c.helper as f64;
        worst = worst.max(ratio);
        println!(
            "| {:<30} | {:>6} | {:>10} | {:>11} | {:>4.3}x |",
            case.name, c.frames, c.kfunc, c.helper, ratio
        );
    }
    println!();
    println!("rkf_stack worst ratio {worst:.3}x (goal: at most 1.05x)");
    Ok(())
}
