// SPDX-License-Identifier: GPL-2.0

//! stack.bpf.c: its program kinds, loaded and attached, armed and run on this thread's
//! events, and what each program saw, as a [`Sample`].

use std::{
    mem::MaybeUninit,
    sync::atomic::{fence, Ordering},
    time::Duration,
};

use anyhow::{Context, Result};
use libbpf_rs::ProgramInput;

use super::{compare::sym, BUF, DEPTH};
use crate::{
    check, check_eq, diag,
    skel::stack::{types, StackSkel, StackSkelBuilder},
};
use rkf::{kallsyms::KernelSymbolizer, modules, skeleton};

/// The program kinds of stack.bpf.c, in its `enum kind` order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    Fentry,
    Fexit,
    TpBtf,
    RawTp,
    Tracepoint,
    Kprobe,
    Syscall,
    PerfEvent,
}

const KINDS: [Kind; 7] = [
    Kind::Fentry,
    Kind::Fexit,
    Kind::TpBtf,
    Kind::RawTp,
    Kind::Tracepoint,
    Kind::Kprobe,
    Kind::Syscall,
];

extern "C" {
    /// tests/helpers/stack_target.c: recurses `depth` times, then sleeps 1 us.
    fn rkf_stack_target(depth: i32) -> i32;
}

/// One program's result: both return values and both buffers, as bytes.  `K` names the
/// program: this file's [`Kind`], or the task-stack tests' own.
#[derive(Clone, Debug)]
pub(super) struct Sample<K = Kind> {
    pub(super) kind: K,
    pub(super) kf_ret: i64,
    pub(super) h_ret: i64,
    pub(super) kf: Vec<u8>,
    pub(super) h: Vec<u8>,
}

pub(super) fn bytes(words: &[u64]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_ne_bytes()).collect()
}

pub(super) fn words(b: &[u8]) -> Vec<u64> {
    b.chunks_exact(8)
        .map(|c| u64::from_ne_bytes(c.try_into().unwrap()))
        .collect()
}

/// Loads and attaches stack.bpf.c; returns it with a symbolizer made afterwards, so that
/// the programs' own symbols are in it.
pub(super) fn load<'o>(
    obj: &'o mut MaybeUninit<libbpf_rs::OpenObject>,
) -> Result<(StackSkel<'o>, KernelSymbolizer)> {
    modules::require("rkf_stack")?;
    let mut skel = skeleton::load_and_attach::<StackSkelBuilder>(obj, "stack.bpf.c", |open| {
        open.maps
            .bss_data
            .as_deref_mut()
            .context("no .bss")?
            .target_tid = nix::unistd::gettid().as_raw() as u32;
        Ok(())
    })?;
    let k = KernelSymbolizer::new();
    calibrate_tracepoint(&mut skel, &k)?;
    Ok((skel, k))
}

/// Arms every program with `flags` and `size`, triggers the events from this thread with
/// a user stack `depth` frames deep in stack_target.c, and returns what each program saw.
pub(super) fn run(
    skel: &mut StackSkel<'_>,
    flags: u64,
    size: u32,
    depth: i32,
) -> Result<Vec<Sample>> {
    {
        let bss = skel.maps.bss_data.as_deref_mut().context("no .bss")?;
        // Cleared before the programs are armed (an armed program may run at once, on a
        // switch of this thread), and the stores kept in that order.
        bss.done = [0; KINDS.len() + 1];
        fence(Ordering::SeqCst);
        bss.flags = flags;
        bss.size = size;
        for s in bss.samples.iter_mut() {
            // A pattern, so that what is not written, or not zeroed, shows.
            s.kf = [0xaaaa_aaaa_aaaa_aaaa; DEPTH];
            s.h = [0xaaaa_aaaa_aaaa_aaaa; DEPTH];
            s.kf_ret = 0x7777;
            s.h_ret = 0x7777;
        }
        fence(Ordering::SeqCst);
        bss.armed = [0; KINDS.len() + 1];
        bss.armed[..KINDS.len()].fill(1);
    }
    // SAFETY: a plain C function.
    unsafe { rkf_stack_target(depth) };
    skel.progs.syscall_prog.test_run(ProgramInput::default())?;
    // Another cpu may still be on its way through sched_switch: wait for every program
    // to have written its sample.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let bss = skel.maps.bss_data.as_deref().context("no .bss")?;
        // SAFETY: `done` is in the mapped .bss, which the programs write meanwhile.
        let done: Vec<u32> = (0..KINDS.len())
            .map(|i| unsafe { std::ptr::read_volatile(&bss.done[i]) })
            .collect();
        if done.iter().all(|&d| d == 1) {
            break;
        }
        check!(
            std::time::Instant::now() < deadline,
            "programs that wrote no sample in 10 s: {:?}",
            KINDS
                .iter()
                .zip(&done)
                .filter(|(_, &d)| d == 0)
                .map(|(k, _)| k)
                .collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    // The samples, written before each flag.
    fence(Ordering::Acquire);
    let bss = skel.maps.bss_data.as_deref().context("no .bss")?;
    // The perf_event program runs only in perf_event_differential().
    KINDS
        .iter()
        .enumerate()
        .map(|(i, &kind)| {
            let s: &types::stack_sample = &bss.samples[i];
            check_eq!(bss.armed[i], 0, "the {kind:?} program ran");
            Ok(Sample {
                kind,
                kf_ret: s.kf_ret,
                h_ret: s.h_ret,
                kf: bytes(&s.kf),
                h: bytes(&s.h),
            })
        })
        .collect()
}

/// The kernel frames between a tracepoint program and its tracepoint: the helper's stack
/// starts at the tracepoint, the kfunc's walk at the program (rkf.bpf.h says to skip
/// these).  Finds the helper's first frame in the kfunc's stack, checks that exactly the
/// program, trace_call_bpf(), perf_trace_run_bpf_submit() and perf_trace_sched_switch()
/// are above it, and makes the tracepoint program skip them for the kfunc.
pub(super) fn calibrate_tracepoint(skel: &mut StackSkel<'_>, k: &KernelSymbolizer) -> Result<()> {
    skel.maps
        .bss_data
        .as_deref_mut()
        .context("no .bss")?
        .tp_skip = 0;
    let s = run(skel, 0, BUF, 0)?.swap_remove(Kind::Tracepoint as usize);
    check!(
        s.kf_ret > 0 && s.h_ret > 0,
        "tracepoint kernel stacks: kfunc {}, helper {}",
        s.kf_ret,
        s.h_ret
    );
    let (kf, h) = (
        words(&s.kf[..s.kf_ret as usize]),
        words(&s.h[..s.h_ret as usize]),
    );
    let names = |ips: &[u64]| -> Vec<String> {
        ips.iter()
            .map(|&ip| k.name(ip).unwrap_or_else(|| format!("{ip:#x}")))
            .collect()
    };
    let above = kf.iter().position(|&ip| ip == h[0]).with_context(|| {
        format!(
            "the helper's first frame {} is not in the kfunc's stack {:?}",
            sym(k, h[0]),
            names(&kf)
        )
    })?;
    let frames = names(&kf[..above]);
    diag!("tracepoint: {above} frames above the tracepoint: {frames:?}");
    check!(
        frames.len() == 4
            && frames[0].starts_with("bpf_prog_")
            && frames[1..]
                == [
                    "trace_call_bpf",
                    "perf_trace_run_bpf_submit",
                    "perf_trace_sched_switch"
                ],
        "tracepoint: the frames above the helper's first are the program, trace_call_bpf, \
         perf_trace_run_bpf_submit and perf_trace_sched_switch: {frames:?}"
    );
    skel.maps
        .bss_data
        .as_deref_mut()
        .context("no .bss")?
        .tp_skip = above as u32;
    Ok(())
}
