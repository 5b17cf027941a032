// SPDX-License-Identifier: GPL-2.0

//! The kfunc against the helper on stack.bpf.c's events: kernel, user and build-id stacks,
//! the kernel stack's symbols, one event for the tests that reload the module; on deep
//! kernel stacks (bench_stack.bpf.c); and every stack delivered where a stack map loses
//! some (stack_lost.bpf.c).

use std::mem::MaybeUninit;

use anyhow::{Context, Result};
use libbpf_rs::ProgramInput;

use super::{
    compare::{check_same, compare, hex, sym, Want},
    samples::{load, run, words, Kind},
    BUF, F_USER_BUILD_ID, F_USER_STACK,
};
use crate::{check, check_eq, diag};
use rkf::{kallsyms::KernelSymbolizer, modules, skeleton};

pub(super) fn kernel_differential() -> Result<()> {
    let mut obj = MaybeUninit::uninit();
    let (mut skel, k) = load(&mut obj)?;
    for skip in [0u32, 1, 2, 5] {
        for s in run(&mut skel, u64::from(skip), BUF, 2)? {
            diag!(
                "{:?} skip {skip}: {} bytes, top {}",
                s.kind,
                s.kf_ret,
                sym(&k, words(&s.kf)[0])
            );
            // Every program runs in the kernel: a stack of at least one frame, or past
            // a skip perhaps none (0, or -EFAULT when the skip passes its end); the
            // two must not agree on anything else.
            let want = if skip == 0 {
                Want::Frames
            } else {
                Want::Skipped
            };
            want.check(s.h_ret, &format!("{:?} skip {skip}: the helper", s.kind))?;
            compare(&s, u64::from(skip), BUF as usize, &k)?;
        }
    }
    // A size smaller than the stack: both truncate the same way.
    for s in run(&mut skel, 1, 24, 2)? {
        compare(&s, 1, 24, &k)?;
        check_eq!(
            s.kf_ret,
            24,
            "{:?}: a 3-entry buffer holds 3 frames",
            s.kind
        );
    }
    Ok(())
}

pub(super) fn user_differential() -> Result<()> {
    let mut obj = MaybeUninit::uninit();
    let (mut skel, k) = load(&mut obj)?;
    for (skip, depth) in [(0u32, 0), (0, 4), (2, 4), (1, 12)] {
        for s in run(&mut skel, F_USER_STACK | u64::from(skip), BUF, depth)? {
            diag!(
                "{:?} user skip {skip} depth {depth}: kfunc {} helper {}",
                s.kind,
                s.kf_ret,
                s.h_ret
            );
            // The events of stack_target.c's sleep see its user stack; the sched_switch
            // ones may be any switch of this thread, with any stack.
            if matches!(s.kind, Kind::Fentry | Kind::Fexit | Kind::Kprobe) {
                check!(
                    s.h_ret >= 8 * (i64::from(depth) + 2 - i64::from(skip)),
                    "{:?}: the user stack of stack_target.c (got {} bytes)",
                    s.kind,
                    s.h_ret
                );
            }
            compare(&s, F_USER_STACK | u64::from(skip), BUF as usize, &k)?;
        }
    }
    // The frame-pointer walk sees every level of stack_target.c.
    let deep = run(&mut skel, F_USER_STACK, BUF, 12)?;
    let shallow = run(&mut skel, F_USER_STACK, BUF, 2)?;
    let (d, s) = (
        &deep[Kind::Fentry as usize],
        &shallow[Kind::Fentry as usize],
    );
    diag!(
        "user stack: {} frames at depth 12, {} at depth 2",
        d.kf_ret / 8,
        s.kf_ret / 8
    );
    check_eq!(
        d.kf_ret - s.kf_ret,
        10 * 8,
        "user frames added by 10 more levels of recursion"
    );
    Ok(())
}

/// The GNU build id of this executable, from its ELF note.
fn own_build_id() -> Result<Vec<u8>> {
    use object::Object;
    let data = std::fs::read("/proc/self/exe")?;
    let file = object::File::parse(&*data)?;
    Ok(file
        .build_id()?
        .context("rkf-selftests has no build id note")?
        .to_vec())
}

pub(super) fn build_id_differential() -> Result<()> {
    let want = own_build_id()?;
    let mut obj = MaybeUninit::uninit();
    let (mut skel, k) = load(&mut obj)?;
    let size = 16 * 32;
    let samples = run(&mut skel, F_USER_STACK | F_USER_BUILD_ID, size, 4)?;
    for s in &samples {
        compare(s, F_USER_STACK | F_USER_BUILD_ID, size as usize, &k)?;
    }
    let s = &samples[Kind::Fentry as usize];
    let mut ours = 0;
    for (i, e) in s.kf[..s.kf_ret as usize].chunks_exact(32).enumerate() {
        let status = i32::from_ne_bytes(e[0..4].try_into().unwrap());
        let id = &e[4..24];
        let off = u64::from_ne_bytes(e[24..32].try_into().unwrap());
        diag!("frame {i}: status {status}, build id {}, {off:#x}", hex(id));
        if status == 1 && id[..want.len()] == want[..] {
            ours += 1;
        }
    }
    // stack_target.c recursed 4 times: at least those 5 frames are in this executable.
    check!(
        ours >= 5,
        "frames with this executable's build id {} (got {ours})",
        hex(&want)
    );
    // Past the entries written, the buffer is zero (status EMPTY).
    check!(
        s.kf[s.kf_ret as usize..size as usize]
            .iter()
            .all(|&b| b == 0),
        "tail zeroed"
    );
    Ok(())
}

pub(super) fn kernel_symbols() -> Result<()> {
    let mut obj = MaybeUninit::uninit();
    let (mut skel, k) = load(&mut obj)?;
    let samples = run(&mut skel, 0, BUF, 0)?;
    // (kind, functions expected in this order, below the program)
    let expect: &[(Kind, &[&str])] = &[
        (Kind::Fentry, &["bpf_trampoline_", "do_syscall_64"]),
        (Kind::Fexit, &["bpf_trampoline_", "do_syscall_64"]),
        (Kind::Kprobe, &["hrtimer_nanosleep", "do_syscall_64"]),
        (Kind::TpBtf, &["__traceiter_sched_switch", "__schedule"]),
        (Kind::RawTp, &["__traceiter_sched_switch", "__schedule"]),
    ];
    for &(kind, names) in expect {
        let s = &samples[kind as usize];
        let frames: Vec<String> = words(&s.kf[..s.kf_ret.max(0) as usize])
            .iter()
            .map(|&ip| k.name(ip).unwrap_or_else(|| format!("{ip:#x}")))
            .collect();
        diag!("{kind:?}: {}", frames.join(" < "));
        if kind != Kind::Kprobe {
            check!(
                frames.first().is_some_and(|f| f.starts_with("bpf_prog_")),
                "{kind:?}: frame 0 is the BPF program"
            );
        }
        let mut at = 0;
        for want in names {
            let pos = frames[at..]
                .iter()
                .position(|f| f.starts_with(want))
                .with_context(|| format!("{kind:?}: {want} in the stack, after frame {at}"))?;
            at += pos + 1;
        }
    }
    Ok(())
}

/// One event, checked against the helper: for the tests that reload the module.
pub(crate) fn smoke() -> Result<()> {
    let mut obj = MaybeUninit::uninit();
    let (mut skel, k) = load(&mut obj)?;
    for s in run(&mut skel, 1, BUF, 1)? {
        compare(&s, 1, BUF as usize, &k)?;
    }
    Ok(())
}

extern "C" {
    /// tests/helpers/stack_target.c: `depth` levels of recursion over leaf `variant`.
    fn rkf_stack_variant(depth: i32, variant: i32) -> i32;
}

/// 1,000 distinct user stacks (125 depths x 8 leaves): the kfunc delivers every one, a
/// 64-entry stack map with bpf_get_stackid() loses some.
pub(super) fn no_stack_lost() -> Result<()> {
    use crate::skel::stack_lost::StackLostSkelBuilder;

    modules::require("rkf_stack")?;
    let mut obj = MaybeUninit::uninit();
    let skel =
        skeleton::load_and_attach::<StackLostSkelBuilder>(&mut obj, "stack_lost.bpf.c", |open| {
            open.maps
                .bss_data
                .as_deref_mut()
                .context("no .bss")?
                .target_tgid = std::process::id();
            Ok(())
        })?;
    let mut want = std::collections::HashSet::new();
    for depth in 0..125 {
        for variant in 0..8 {
            // SAFETY: a plain C function.
            unsafe { rkf_stack_variant(depth, variant) };
            want.insert((depth, variant));
        }
    }
    let bss = skel.maps.bss_data.as_deref().context("no .bss")?;
    let n = bss.nr_recs as usize;
    check_eq!(n, want.len(), "stacks recorded through the kfunc");
    let mut distinct = std::collections::HashSet::new();
    for r in &bss.recs[..n] {
        check!(r.ret > 0, "the kfunc returned {}", r.ret);
        distinct.insert(r.ips[..r.ret as usize / 8].to_vec());
    }
    diag!(
        "kfunc: {} stacks, {} distinct; bpf_get_stackid into 64 entries: {} stored, {} lost",
        n,
        distinct.len(),
        bss.stackid_ok,
        bss.stackid_lost
    );
    check_eq!(
        distinct.len(),
        want.len(),
        "distinct stacks delivered by the kfunc"
    );
    check_eq!(
        bss.stackid_ok + bss.stackid_lost,
        n as u64,
        "bpf_get_stackid() calls, stored or lost"
    );
    check!(
        bss.stackid_ok > 0 && bss.stackid_lost > 0,
        "the small stack map stored some stacks and lost others: {} stored, {} lost",
        bss.stackid_ok,
        bss.stackid_lost
    );
    Ok(())
}

/// Kernel stacks of rkf_testmod_recurse() chains up to past `perf_event_max_stack`: the
/// kfunc and the helper agree byte for byte, skip included, and both stop at the sysctl.
pub(super) fn deep_kernel_differential() -> Result<()> {
    use crate::skel::bench_stack::BenchStackSkelBuilder;

    modules::require("rkf_stack")?;
    modules::require("rkf_testmod")?;
    let max_stack: usize = std::fs::read_to_string("/proc/sys/kernel/perf_event_max_stack")?
        .trim()
        .parse()?;
    let mut obj = MaybeUninit::uninit();
    let mut skel =
        skeleton::load::<BenchStackSkelBuilder>(&mut obj, "bench_stack.bpf.c", skeleton::as_built)?;
    let _link = skel
        .progs
        .bench_deep
        .attach()
        .context("attaching fentry/rkf_testmod_leaf")?;
    let k = KernelSymbolizer::new();
    for depth in [0u32, 40, 120, 250] {
        for skip in [0u64, 3, 200] {
            {
                let bss = skel.maps.bss_data.as_deref_mut().context("no .bss")?;
                bss.flags = skip;
                bss.size = 4096;
                bss.depth = depth;
                bss.recurse_ret = -1;
                bss.kbuf.fill(0xaa);
                bss.hbuf.fill(0x55);
                bss.armed = 1;
            }
            let out = skel.progs.recurse.test_run(ProgramInput::default())?;
            check_eq!(out.return_value, 0, "the recurse program's return value");
            let bss = skel.maps.bss_data.as_deref().context("no .bss")?;
            check_eq!(
                bss.recurse_ret,
                i64::from(depth),
                "bpf_rkf_testmod_recurse({depth})"
            );
            check_eq!(bss.armed, 0, "the fentry program ran");
            check_eq!(
                bss.kfunc_ret,
                bss.helper_ret,
                "depth {depth} skip {skip}: return value"
            );
            // Frame 0 is the call site in the program, which differs between the two
            // calls: the same program for both, then byte for byte.
            let from = if skip == 0 && bss.kfunc_ret > 0 {
                let (a, b) = (words(&bss.kbuf[..8])[0], words(&bss.hbuf[..8])[0]);
                let name = |ip| k.name(ip);
                check_eq!(name(a), name(b), "depth {depth}: frame 0");
                check!(
                    name(a).is_some_and(|n| n.starts_with("bpf_prog_")),
                    "frame 0 is the program: {}",
                    sym(&k, a)
                );
                8
            } else {
                0
            };
            check_same(
                &format!("depth {depth} skip {skip}"),
                &bss.kbuf[from..],
                &bss.hbuf[from..],
                false,
                &k,
            )?;
            let frames = words(&bss.kbuf[..bss.kfunc_ret.max(0) as usize]);
            let recurse = frames
                .iter()
                .filter(|&&ip| k.name(ip).is_some_and(|n| n == "rkf_testmod_recurse"))
                .count();
            if skip == 0 {
                diag!(
                    "depth {depth}: {} frames, {recurse} in rkf_testmod_recurse",
                    frames.len()
                );
                check!(
                    frames.len() <= max_stack,
                    "{} frames, more than perf_event_max_stack {max_stack}",
                    frames.len()
                );
                if depth >= max_stack as u32 {
                    check_eq!(frames.len(), max_stack, "depth {depth}: frames (capped)");
                } else {
                    // rkf_testmod_recurse(depth) down to rkf_testmod_recurse(0).
                    check_eq!(
                        recurse,
                        depth as usize + 1,
                        "depth {depth}: recursion frames"
                    );
                }
            }
        }
    }
    Ok(())
}
