// SPDX-License-Identifier: GPL-2.0

//! rkf_stack: `bpf_rkf_get_stack()` and `bpf_rkf_get_stack_kprobe()` against
//! `bpf_get_stack()`, on the same event, in the same program.

use std::{
    mem::MaybeUninit,
    os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd},
    sync::atomic::{fence, Ordering},
    time::Duration,
};

mod sleepable;
mod task;

use anyhow::{Context, Result};
use libbpf_rs::ProgramInput;

use crate::{
    check, check_eq, diag,
    harness::Test,
    skel::stack::{types, StackSkel, StackSkelBuilder},
};
use rkf::{
    kallsyms::KernelSymbolizer,
    modules,
    perf::{
        self, open_cpu_clock, open_cpu_clock_precise, Exclude, Sampling, Target,
        PERF_SAMPLE_CALLCHAIN,
    },
    skeleton,
};

pub const TESTS: &[Test] = &[
    Test {
        name: "stack_kernel_differential",
        run: kernel_differential,
    },
    Test {
        name: "stack_user_differential",
        run: user_differential,
    },
    Test {
        name: "stack_build_id_differential",
        run: build_id_differential,
    },
    Test {
        name: "stack_errno_table",
        run: errno_table,
    },
    Test {
        name: "stack_kernel_symbols",
        run: kernel_symbols,
    },
    Test {
        name: "stack_perf_event_differential",
        run: perf_event_differential,
    },
    Test {
        name: "stack_perf_event_precise",
        run: perf_event_precise,
    },
    Test {
        name: "stack_perf_event_task_stack_keeps_the_sample",
        run: perf_event_task_stack,
    },
    Test {
        name: "stack_perf_event_kfunc_only_in_perf_event_programs",
        run: pe_only_in_perf_event_programs,
    },
    Test {
        name: "stack_deep_kernel_differential",
        run: deep_kernel_differential,
    },
    Test {
        name: "stack_no_stack_lost",
        run: no_stack_lost,
    },
    Test {
        name: "stack_upstream_get_stack_rawtp",
        run: upstream_get_stack_rawtp,
    },
    Test {
        name: "stack_task_differential",
        run: task::differential,
    },
    Test {
        name: "stack_task_untrusted_refused",
        run: task::untrusted_refused,
    },
    Test {
        name: "stack_upstream_get_stack_rawtp_err",
        run: upstream_get_stack_rawtp_err,
    },
    Test {
        name: "stack_sleepable_build_id_untouched_elf",
        run: sleepable::untouched_elf,
    },
];

const F_USER_STACK: u64 = 1 << 8;
const F_USER_BUILD_ID: u64 = 1 << 11;
const DEPTH: usize = 64;
const BUF: u32 = (DEPTH * 8) as u32;

/// The program kinds of stack.bpf.c, in its `enum kind` order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
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
struct Sample<K = Kind> {
    kind: K,
    kf_ret: i64,
    h_ret: i64,
    kf: Vec<u8>,
    h: Vec<u8>,
}

fn bytes(words: &[u64]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_ne_bytes()).collect()
}

fn words(b: &[u8]) -> Vec<u64> {
    b.chunks_exact(8)
        .map(|c| u64::from_ne_bytes(c.try_into().unwrap()))
        .collect()
}

/// Loads and attaches stack.bpf.c; returns it with a symbolizer made afterwards, so that
/// the programs' own symbols are in it.
fn load<'o>(
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
fn run(skel: &mut StackSkel<'_>, flags: u64, size: u32, depth: i32) -> Result<Vec<Sample>> {
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

fn sym(k: &KernelSymbolizer, addr: u64) -> String {
    k.describe(addr)
}

/// Fails unless the kfunc's bytes `kf` and the helper's `h` are equal, naming the first
/// entry that differs (an ip, or a `struct bpf_stack_build_id` in build-id stacks) and
/// both values.
fn check_same(what: &str, kf: &[u8], h: &[u8], build_id: bool, k: &KernelSymbolizer) -> Result<()> {
    check_eq!(kf.len(), h.len(), "{what}: bytes compared");
    let entry = if build_id { 32 } else { 8 };
    let Some(i) = kf
        .chunks(entry)
        .zip(h.chunks(entry))
        .position(|(a, b)| a != b)
    else {
        return Ok(());
    };
    let show = |e: &[u8]| match e.len() {
        32 => format!(
            "status {}, build id {}, offset {:#x}",
            i32::from_ne_bytes(e[0..4].try_into().unwrap()),
            hex(&e[4..24]),
            u64::from_ne_bytes(e[24..32].try_into().unwrap())
        ),
        8 if !build_id => {
            let ip = u64::from_ne_bytes(e.try_into().unwrap());
            format!("{ip:#x} ({})", sym(k, ip))
        }
        _ => format!("bytes {}", hex(e)),
    };
    let at = |b: &[u8]| show(&b[i * entry..b.len().min((i + 1) * entry)]);
    anyhow::bail!(
        "{what}: kfunc and helper differ first at entry {i} of {} ({entry} bytes each): \
         kfunc {}, helper {}",
        kf.len().div_ceil(entry),
        at(kf),
        at(h)
    )
}

/// Fails unless the first `zeroed` bytes of the kfunc's buffer `kf` are zero and those
/// past `size` still hold the 0xaa pattern the runs fill it with.
fn check_untouched_past(what: &str, kf: &[u8], zeroed: usize, size: usize) -> Result<()> {
    check!(
        kf[..zeroed].iter().all(|&b| b == 0),
        "{what}: buffer zeroed"
    );
    check!(
        kf[size..].iter().all(|&b| b == 0xaa),
        "{what}: nothing written past size"
    );
    Ok(())
}

/// Checks that one sample is the helper's: the same return value and the same `size`
/// bytes, and nothing past them written.  The one documented exception: for programs
/// whose kernel stack starts at the program, frame 0 is the return address of the call,
/// which differs between the two calls; it must name the same program for both.
/// (Tracepoint programs skip the frames above the tracepoint for the kfunc, see
/// [`calibrate_tracepoint`], and compare whole.)
fn compare(s: &Sample, flags: u64, size: usize, k: &KernelSymbolizer) -> Result<()> {
    let kind = s.kind;
    let (skip, user, build_id) = (
        flags & 0xff,
        flags & F_USER_STACK != 0,
        flags & F_USER_BUILD_ID != 0,
    );
    check_eq!(
        s.kf_ret,
        s.h_ret,
        "{kind:?}: return value (kfunc vs helper)"
    );
    check!(
        s.kf[size..].iter().all(|&b| b == 0xaa),
        "{kind:?}: the kfunc wrote past its {size} bytes"
    );
    let (kf, h) = (&s.kf[..size], &s.h[..size]);
    let starts_at_program = matches!(
        kind,
        Kind::Fentry | Kind::Fexit | Kind::TpBtf | Kind::RawTp | Kind::Syscall
    );
    if !user && skip == 0 && starts_at_program && s.h_ret > 0 {
        let (a, b) = (words(&kf[..8])[0], words(&h[..8])[0]);
        let (na, nb) = (k.name(a), k.name(b));
        let same_prog =
            matches!((&na, &nb), (Some(x), Some(y)) if x == y && x.starts_with("bpf_prog_"));
        check!(
            same_prog,
            "{kind:?}: frame 0 is the program for both: {} vs {}",
            sym(k, a),
            sym(k, b)
        );
        return check_same(
            &format!("{kind:?}: frames 1.."),
            &kf[8..],
            &h[8..],
            false,
            k,
        );
    }
    check_same(&format!("{kind:?}"), kf, h, build_id, k)
}

/// The kernel frames between a tracepoint program and its tracepoint: the helper's stack
/// starts at the tracepoint, the kfunc's walk at the program (rkf.bpf.h says to skip
/// these).  Finds the helper's first frame in the kfunc's stack, checks that exactly the
/// program, trace_call_bpf(), perf_trace_run_bpf_submit() and perf_trace_sched_switch()
/// are above it, and makes the tracepoint program skip them for the kfunc.
fn calibrate_tracepoint(skel: &mut StackSkel<'_>, k: &KernelSymbolizer) -> Result<()> {
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

fn kernel_differential() -> Result<()> {
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

fn user_differential() -> Result<()> {
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

fn build_id_differential() -> Result<()> {
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

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn errno_table() -> Result<()> {
    let mut obj = MaybeUninit::uninit();
    let (mut skel, k) = load(&mut obj)?;
    // (what, flags, size, expected return)
    let rows: &[(&str, u64, u32, i64)] = &[
        ("unknown flag BPF_F_FAST_STACK_CMP", 1 << 9, BUF, -22),
        ("unknown flag BPF_F_REUSE_STACKID", 1 << 10, BUF, -22),
        ("unknown flag bit 12", 1 << 12, BUF, -22),
        ("unknown flag bit 63", 1 << 63, BUF, -22),
        ("build id without user stack", F_USER_BUILD_ID, 64, -22),
        ("size not a multiple of 8", 0, 12, -22),
        (
            "build id, size not a multiple of 32",
            F_USER_STACK | F_USER_BUILD_ID,
            40,
            -22,
        ),
        ("skip beyond the stack", 255, BUF, -14),
        ("zero size", 0, 0, 0),
        ("zero size, user stack", F_USER_STACK, 0, 0),
    ];
    for &(what, flags, size, want) in rows {
        for s in run(&mut skel, flags, size, 1)? {
            diag!("{what}: {:?} kfunc {} helper {}", s.kind, s.kf_ret, s.h_ret);
            check_eq!(s.h_ret, want, "{what}: return ({:?})", s.kind);
            compare(&s, flags, size as usize, &k)?;
            // An error zeroes the buffer; nothing past `size` is touched either way.
            let zeroed = if want < 0 { size as usize } else { 0 };
            check_untouched_past(
                &format!("{what} ({:?})", s.kind),
                &s.kf,
                zeroed,
                size as usize,
            )?;
        }
    }
    nested_too_deep()
}

/// Per-cpu regs slots of the kfunc (c-shim/rkf_stack_shim.c) and of the helper's raw
/// tracepoint form (`get_bpf_raw_tp_regs()` in kernel/trace/bpf_trace.c).
const REGS_SLOTS: usize = 3;

/// The programs of stack_nest.bpf.c, on get_perf_callchain().
const NR_NEST: usize = 4;

/// What `nr` programs on one function give when each run holds one of `slots` per-cpu
/// slots while it takes a stack, and taking a stack enters the function again: there the
/// programs not running yet run, one level deeper (one already running misses, the
/// recursion guard of its trampoline), and a run with every slot held is refused.
/// Started by a caller that holds `held` slots: per program, its runs refused and its
/// runs that took a stack.
fn nest_model(nr: usize, slots: usize, held: usize) -> Vec<(u64, u64)> {
    fn enter(level: usize, slots: usize, running: &mut u32, out: &mut [(u64, u64)]) {
        for k in 0..out.len() {
            if *running & (1 << k) != 0 {
                continue;
            }
            *running |= 1 << k;
            if level == slots {
                out[k].0 += 1;
            } else {
                enter(level + 1, slots, running, out);
                out[k].1 += 1;
            }
            *running &= !(1 << k);
        }
    }
    let mut out = vec![(0, 0); nr];
    enter(held, slots, &mut 0, &mut out);
    out
}

/// The row "nested more than three deep on one cpu": four programs on get_perf_callchain()
/// take stacks inside each other's, started by a syscall program's own (stack_nest.bpf.c).
/// Each run past the three slots gives `-EBUSY` with its buffer untouched, every other
/// one a stack, in exactly the counts of [`nest_model()`], through the kfunc and, the
/// same way, through the helper.
fn nested_too_deep() -> Result<()> {
    use crate::skel::stack_nest::StackNestSkelBuilder;

    modules::require("rkf_stack")?;
    let want = nest_model(NR_NEST, REGS_SLOTS, 1);
    for helper in [false, true] {
        let what = if helper {
            "bpf_get_stack()"
        } else {
            "bpf_rkf_get_stack()"
        };
        let mut obj = MaybeUninit::uninit();
        let skel = skeleton::load_and_attach::<StackNestSkelBuilder>(
            &mut obj,
            "stack_nest.bpf.c",
            |open| {
                let bss = open.maps.bss_data.as_deref_mut().context("no .bss")?;
                bss.target_tgid = std::process::id();
                bss.use_helper = u32::from(helper);
                Ok(())
            },
        )?;
        let out = skel.progs.outer.test_run(ProgramInput::default())?;
        check_eq!(out.return_value, 0, "the outer program's return value");
        let bss = skel.maps.bss_data.as_deref().context("no .bss")?;
        check!(
            (8..=64).contains(&bss.outer_ret) && bss.outer_ret % 8 == 0,
            "{what} in the outer program: {} (a stack of 1 to 8 frames)",
            bss.outer_ret
        );
        for (k, &(busy, ok)) in want.iter().enumerate() {
            diag!(
                "{what}, nest{k}: {} runs -EBUSY, buffer untouched; {} stacks",
                bss.busy_untouched[k],
                bss.ok[k]
            );
            check_eq!(
                bss.other[k],
                0,
                "{what}, nest{k}: runs with neither -EBUSY nor a stack (the last: {})",
                bss.other_ret[k]
            );
            check_eq!(
                bss.busy_touched[k],
                0,
                "{what}, nest{k}: -EBUSY with the buffer written"
            );
            check_eq!(
                bss.busy_untouched[k],
                busy,
                "{what}, nest{k}: runs past {REGS_SLOTS} slots"
            );
            check_eq!(bss.ok[k], ok, "{what}, nest{k}: runs that took a stack");
        }
    }
    Ok(())
}

fn kernel_symbols() -> Result<()> {
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

/// One perf_event sample (cpu-clock on this thread, with or without perf's own callchain)
/// through the kfunc and the helper, with `flags` and `size`.
fn perf_event_sample(
    skel: &mut StackSkel<'_>,
    sample_type: u64,
    flags: u64,
    size: u32,
) -> Result<Sample> {
    let fd = open_cpu_clock(Target::ThisThread, Sampling::Period(100_000), sample_type)?;
    let pe = Kind::PerfEvent as usize;
    {
        let bss = skel.maps.bss_data.as_deref_mut().context("no .bss")?;
        bss.flags = flags;
        bss.size = size;
        let s = &mut bss.samples[pe];
        s.kf = [0xaaaa_aaaa_aaaa_aaaa; DEPTH];
        s.h = [0xaaaa_aaaa_aaaa_aaaa; DEPTH];
        bss.armed[pe] = 1;
    }
    let link = perf::attach(&skel.progs.perf_event_prog, fd)
        .context("attaching the perf_event program")?;
    until_sampled(|| Ok(skel.maps.bss_data.as_deref().context("no .bss")?.armed[pe] != 0))?;
    drop(link);
    let bss = skel.maps.bss_data.as_deref().context("no .bss")?;
    let s = &bss.samples[pe];
    Ok(Sample {
        kind: Kind::PerfEvent,
        kf_ret: s.kf_ret,
        h_ret: s.h_ret,
        kf: bytes(&s.kf),
        h: bytes(&s.h),
    })
}

/// What the helper returns for a row of a differential test, which the kfunc must then
/// return too: rows where both fail alike, or both find no stack, pass only where the
/// row says so.
#[derive(Clone, Copy, Debug)]
enum Want {
    /// A stack of at least one frame.
    Frames,
    /// A stack, perhaps empty (0 bytes), or -EFAULT where the skip passes its end
    /// (bpf_get_stack() in kernel/bpf/stackmap.c).
    Skipped,
    /// This error.
    Error(i64),
}

impl Want {
    fn check(self, ret: i64, what: &str) -> Result<()> {
        let ok = match self {
            Self::Frames => ret > 0,
            Self::Skipped => ret >= 0 || ret == -i64::from(libc::EFAULT),
            Self::Error(e) => ret == e,
        };
        check!(ok, "{what} returned {ret}, not {self:?}");
        Ok(())
    }
}

fn perf_event_differential() -> Result<()> {
    let mut obj = MaybeUninit::uninit();
    let (mut skel, k) = load(&mut obj)?;
    for (sample_type, what) in [(0, "regs"), (PERF_SAMPLE_CALLCHAIN, "sampled callchain")] {
        // (flags, size, what the helper returns).  The sample may interrupt this thread
        // in user space, where it has no kernel stack (0 bytes, or -EFAULT past a skip),
        // but always a user one: a kernel row is sampled again until the helper finds
        // kernel frames, each sample compared.
        let einval = Want::Error(-i64::from(libc::EINVAL));
        let efault = -i64::from(libc::EFAULT);
        for (flags, size, want) in [
            (0u64, BUF, Want::Frames),
            (1, BUF, Want::Frames),
            (F_USER_STACK, BUF, Want::Frames),
            (F_USER_STACK | 1, BUF, Want::Skipped),
            (F_USER_STACK | F_USER_BUILD_ID, 8 * 32, Want::Frames),
            (1 << 9, BUF, einval),
            (0, 12, einval),
        ] {
            let (s, user_samples) = kernel_sample(
                &format!("perf_event ({what}), flags {flags:#x}"),
                || perf_event_sample(&mut skel, sample_type, flags, size),
                |s| flags & F_USER_STACK != 0 || (s.h_ret != 0 && s.h_ret != efault),
                |s| {
                    compare(s, flags, size as usize, &k).with_context(|| {
                        format!("perf_event ({what}), flags {flags:#x}, a sample in user space")
                    })
                },
            )?;
            diag!(
                "perf_event ({what}), flags {flags:#x}: kfunc {} helper {} ({user_samples} \
                 samples in user space before)",
                s.kf_ret,
                s.h_ret
            );
            want.check(
                s.h_ret,
                &format!("perf_event ({what}), flags {flags:#x}, size {size}: the helper"),
            )?;
            compare(&s, flags, size as usize, &k)
                .with_context(|| format!("perf_event ({what}), flags {flags:#x}, size {size}"))?;
        }
    }
    Ok(())
}

/// bpf_rkf_get_task_stack() of the current task in a perf_event program on an event that
/// samples callchains (perf_event_task_prog).  A user stack would be walked with
/// get_perf_callchain() into the per-cpu callchain entry of the overflow handler's
/// context, the one that holds the sample's own callchain, which bpf_rkf_get_stack_pe()
/// and the sample's record read after the call: the kfunc refuses it with -EOPNOTSUPP and
/// a zeroed buffer.  A kernel stack is walked with stack_trace_save_tsk(), not into that
/// entry, and is taken.  Either way the sample's kernel callchain reads the same after the
/// call as before it, on a sample taken in the kernel (one with kernel frames: a sample
/// in user space has none, and is taken again).  The control: the helper,
/// bpf_get_task_stack(), takes the user stack there, and the sample's callchain reads
/// differently after it.
fn perf_event_task_stack() -> Result<()> {
    let mut obj = MaybeUninit::uninit();
    let (mut skel, _) = load(&mut obj)?;
    let (s, _) = kernel_sample(
        "the control",
        || pe_task_sample(&mut skel, F_USER_STACK, true),
        |s| s.before_ret > 0,
        |_| Ok(()),
    )?;
    diag!(
        "the control, bpf_get_task_stack(current), a user stack: {}; the sample's \
         callchain {} bytes before, {} after",
        s.task_ret,
        s.before_ret,
        s.after_ret
    );
    check!(s.task_ret > 0, "the control: the helper took no user stack");
    check!(
        (s.after_ret, s.after) != (s.before_ret, s.before),
        "the control: the sample's callchain reads the same after the helper's walk"
    );
    let eopnotsupp = Want::Error(-i64::from(libc::EOPNOTSUPP));
    for (flags, want) in [
        (F_USER_STACK, eopnotsupp),
        (F_USER_STACK | F_USER_BUILD_ID, eopnotsupp),
        (0, Want::Frames),
        (1, Want::Frames),
    ] {
        let what = format!("bpf_rkf_get_task_stack(current), flags {flags:#x}");
        let (s, user_samples) = kernel_sample(
            &what,
            || pe_task_sample(&mut skel, flags, false),
            |s| s.before_ret != 0,
            |_| Ok(()),
        )?;
        diag!(
            "{what}: {} ({user_samples} samples in user space before); the sample's \
             callchain {} bytes before, {} after",
            s.task_ret,
            s.before_ret,
            s.after_ret
        );
        want.check(s.task_ret, &what)?;
        let taken = usize::try_from(s.task_ret).unwrap_or(0);
        check!(
            bytes(&s.task)[taken..].iter().all(|&b| b == 0),
            "{what}: the buffer past the {taken} bytes written is not zeroed"
        );
        check!(
            s.before_ret > 0,
            "bpf_rkf_get_stack_pe() before the call: {}",
            s.before_ret
        );
        check_eq!(
            (s.after_ret, s.after),
            (s.before_ret, s.before),
            "{what}: the sample's kernel callchain after the call, against before it"
        );
    }
    Ok(())
}

/// Takes samples with `sample` until `in_kernel` says one was taken in the kernel (a
/// sample that interrupted this thread in user space has no kernel frame), at most 100;
/// each one before it goes to `in_user_space` first.  Returns that sample and how many
/// were taken in user space before it.
fn kernel_sample<S>(
    what: &str,
    mut sample: impl FnMut() -> Result<S>,
    in_kernel: impl Fn(&S) -> bool,
    mut in_user_space: impl FnMut(&S) -> Result<()>,
) -> Result<(S, u32)> {
    let mut user_samples = 0;
    loop {
        let s = sample()?;
        if in_kernel(&s) {
            return Ok((s, user_samples));
        }
        in_user_space(&s)?;
        user_samples += 1;
        check!(
            user_samples < 100,
            "{what}: 100 samples without a kernel frame"
        );
    }
}

/// One sample of perf_event_task_prog (the helper in the kfunc's place if `helper`):
/// cpu-clock on this thread, with perf's callchain.
fn pe_task_sample(
    skel: &mut StackSkel<'_>,
    flags: u64,
    helper: bool,
) -> Result<types::pe_task_sample> {
    let fd = open_cpu_clock(
        Target::ThisThread,
        Sampling::Period(100_000),
        PERF_SAMPLE_CALLCHAIN,
    )?;
    {
        let bss = skel.maps.bss_data.as_deref_mut().context("no .bss")?;
        bss.pe_task_flags = flags;
        bss.pe_task_helper = helper.into();
        let s = &mut bss.pe_task_sample;
        s.task = [0xaaaa_aaaa_aaaa_aaaa; DEPTH];
        s.before = [0xaaaa_aaaa_aaaa_aaaa; DEPTH];
        s.after = [0xaaaa_aaaa_aaaa_aaaa; DEPTH];
        bss.pe_task_done = 0;
        fence(Ordering::SeqCst);
        bss.pe_task_armed = 1;
    }
    let link = perf::attach(&skel.progs.perf_event_task_prog, fd)
        .context("attaching perf_event_task_prog")?;
    until_sampled(|| {
        let bss = skel.maps.bss_data.as_deref().context("no .bss")?;
        // SAFETY: `pe_task_done` is in the mapped .bss, which the program writes.
        Ok(unsafe { std::ptr::read_volatile(&bss.pe_task_done) } == 0)
    })?;
    drop(link);
    // The sample, written before the flag.
    fence(Ordering::Acquire);
    let bss = skel.maps.bss_data.as_deref().context("no .bss")?;
    check_eq!(bss.pe_task_done, 1, "perf_event_task_prog's runs");
    Ok(bss.pe_task_sample)
}

/// Spends time in the kernel (and in user space) while `waiting`: until a perf_event
/// program on this thread's cpu-clock took its sample.
fn until_sampled(waiting: impl Fn() -> Result<bool>) -> Result<()> {
    let start = std::time::Instant::now();
    let mut zero = std::fs::File::open("/dev/zero")?;
    let mut chunk = vec![0u8; 1 << 16];
    while waiting()? {
        check!(
            start.elapsed() < Duration::from_secs(10),
            "no cpu-clock sample in 10 s"
        );
        std::io::Read::read_exact(&mut zero, &mut chunk)?;
    }
    Ok(())
}

/// On a precise event (`precise_ip`) without a full sampled callchain, the kernel refuses
/// to attach a program that calls bpf_get_stack() with EPROTO (perf_event_set_bpf_handler()
/// in kernel/events/core.c: a walk from PEBS regs may upset the unwinder).  It cannot
/// tell a program that calls bpf_rkf_get_stack_pe() alone, which attaches: there the
/// kfunc must give -EPROTO and a zeroed buffer on every event the kernel refuses the
/// helper's program on, and a stack on the one it takes it on (a full callchain).
fn perf_event_precise() -> Result<()> {
    let mut obj = MaybeUninit::uninit();
    let (mut skel, _) = load(&mut obj)?;
    for (sample_type, exclude, refused, what) in [
        (0, Exclude::Nothing, true, "no sampled callchain"),
        (
            PERF_SAMPLE_CALLCHAIN,
            Exclude::User,
            true,
            "no user callchain",
        ),
        (
            PERF_SAMPLE_CALLCHAIN,
            Exclude::Kernel,
            true,
            "no kernel callchain",
        ),
        (
            PERF_SAMPLE_CALLCHAIN,
            Exclude::Nothing,
            false,
            "full callchain",
        ),
    ] {
        let open = || {
            open_cpu_clock_precise(
                Target::ThisThread,
                Sampling::Period(100_000),
                sample_type,
                exclude,
            )
        };
        // The kernel's verdict on the helper's program, through BPF_LINK_CREATE.
        let fd = open()?;
        // SAFETY: a program fd and a perf event fd that outlive the call, no options.
        let r = unsafe {
            libbpf_rs::libbpf_sys::bpf_link_create(
                skel.progs.perf_event_prog.as_fd().as_raw_fd(),
                fd.as_raw_fd(),
                libbpf_rs::libbpf_sys::BPF_PERF_EVENT,
                std::ptr::null(),
            )
        };
        if r >= 0 {
            // SAFETY: a new link fd that nothing else owns; closing it detaches.
            drop(unsafe { OwnedFd::from_raw_fd(r) });
        }
        check_eq!(
            r,
            if refused { -libc::EPROTO } else { r.max(0) },
            "{what}: attaching the helper's program"
        );
        drop(fd);
        // The kfunc's.
        let fd = open()?;
        {
            let bss = skel.maps.bss_data.as_deref_mut().context("no .bss")?;
            // The user stack: a sample taken in user mode has no kernel frames, and
            // every sample of this thread has user ones.
            bss.flags = F_USER_STACK;
            bss.size = BUF;
            bss.pe_kfunc_sample.kf = [0xaaaa_aaaa_aaaa_aaaa; DEPTH];
            bss.pe_kfunc_sample.kf_ret = 0;
            bss.pe_kfunc_done = 0;
            bss.pe_kfunc_armed = 1;
        }
        let link = perf::attach(&skel.progs.perf_event_kfunc_prog, fd)
            .with_context(|| format!("{what}: attaching the kfunc's program"))?;
        until_sampled(|| {
            Ok(skel
                .maps
                .bss_data
                .as_deref()
                .context("no .bss")?
                .pe_kfunc_done
                == 0)
        })?;
        drop(link);
        let s = &skel
            .maps
            .bss_data
            .as_deref()
            .context("no .bss")?
            .pe_kfunc_sample;
        diag!("precise event, {what}: kfunc {}", s.kf_ret);
        if refused {
            check_eq!(
                s.kf_ret,
                -i64::from(libc::EPROTO),
                "{what}: the kfunc's result"
            );
            check!(
                s.kf.iter().all(|&w| w == 0),
                "{what}: the buffer is not zeroed: {:x?}",
                s.kf
            );
        } else {
            check!(
                s.kf_ret > 0 && s.kf_ret <= i64::from(BUF) && s.kf_ret % 8 == 0,
                "{what}: the kfunc's result {}",
                s.kf_ret
            );
        }
    }
    Ok(())
}

/// bpf_rkf_get_stack_pe() reads a perf_event program's context, and the kernel gives
/// bpf_get_stack_pe() to perf_event programs only: the other program types of the kfunc
/// hooks rkf_stack registers its set for (tracing, which serves tracepoint, raw_tp and
/// LSM programs too, and syscall) cannot call it (EACCES, the set's filter), with the
/// same instructions that load as a perf_event program, nor with a zeroed `struct
/// bpf_perf_event_data` of their own, which outside a perf_event program the verifier
/// takes as plain memory (a struct of scalars) and the kfunc would read a `struct
/// perf_event` pointer from.  And the reverse: a perf_event program cannot call
/// bpf_rkf_get_stack() (a `void *ctx` program would), whose walk would start in the
/// overflow handler instead of at the sampled registers and would overwrite the
/// sample's own callchain (EACCES, the same filter), while a raw_tp program can.
fn pe_only_in_perf_event_programs() -> Result<()> {
    use crate::privilege::{
        find_func, get_stack_prog, insn, ret0, stack_kfunc_call, zero_stack, Prog,
    };
    use libbpf_rs::libbpf_sys as sys;
    use rkf::{btf, btf::KernelBtf};

    modules::require("rkf_stack")?;
    let vmlinux = KernelBtf::vmlinux()?;
    let stack_btf = KernelBtf::module(&vmlinux, "rkf_stack")?;
    let stack_fd = btf::object_fd("rkf_stack")?;
    let pe = find_func(&stack_btf, "bpf_rkf_get_stack_pe")?;
    let plain = find_func(&stack_btf, "bpf_rkf_get_stack")?;
    let fentry_test1 = find_func(&vmlinux, "bpf_fentry_test1")?;
    // bpf_rkf_get_stack_pe(ctx, buf, 64, 0) on a zeroed stack buffer.
    let mut insns = zero_stack(8);
    insns.extend(stack_kfunc_call(2, pe));
    insns.extend(ret0());
    // The same with r1 a zeroed struct bpf_perf_event_data (23 words) on the stack.
    let mut fake = zero_stack(8 + 23);
    fake.extend([
        insn(0xbf, 1, 10, 0, 0),   // r1 = r10
        insn(0x07, 1, 0, 0, -248), // r1 += -248
    ]);
    fake.extend_from_slice(&insns[8..]);
    let prog = |what, prog_type, attach_type, attach, insns: &Vec<_>| Prog {
        what,
        prog_type,
        attach_type,
        attach,
        kfunc_btf: Some(&stack_fd),
        insns: insns.clone(),
        cap_bpf_enough: false,
    };
    let fentry = |what, insns| {
        prog(
            what,
            sys::BPF_PROG_TYPE_TRACING,
            sys::BPF_TRACE_FENTRY,
            Some((fentry_test1, None)),
            insns,
        )
    };
    let plain_insns = get_stack_prog(plain);
    const PE: &str = "bpf_rkf_get_stack_pe";
    const PLAIN: &str = "bpf_rkf_get_stack";
    let rows = [
        (
            prog("perf_event", sys::BPF_PROG_TYPE_PERF_EVENT, 0, None, &insns),
            PE,
            0,
        ),
        (fentry("fentry", &insns), PE, libc::EACCES),
        (fentry("fentry (its own struct)", &fake), PE, libc::EACCES),
        (
            prog("raw_tp", sys::BPF_PROG_TYPE_RAW_TRACEPOINT, 0, None, &insns),
            PE,
            libc::EACCES,
        ),
        (
            prog("tracepoint", sys::BPF_PROG_TYPE_TRACEPOINT, 0, None, &insns),
            PE,
            libc::EACCES,
        ),
        (
            prog("syscall", sys::BPF_PROG_TYPE_SYSCALL, 0, None, &insns),
            PE,
            libc::EACCES,
        ),
        (
            prog(
                "syscall (its own struct)",
                sys::BPF_PROG_TYPE_SYSCALL,
                0,
                None,
                &fake,
            ),
            PE,
            libc::EACCES,
        ),
        (
            prog(
                "perf_event",
                sys::BPF_PROG_TYPE_PERF_EVENT,
                0,
                None,
                &plain_insns,
            ),
            PLAIN,
            libc::EACCES,
        ),
        (
            prog(
                "raw_tp",
                sys::BPF_PROG_TYPE_RAW_TRACEPOINT,
                0,
                None,
                &plain_insns,
            ),
            PLAIN,
            0,
        ),
    ];
    for (p, kfunc, want) in rows {
        let (errno, log) = p.load();
        // The filter's refusal, not one of the argument checks after it, which also give
        // EACCES to some of these programs.
        let refused = format!("calling kernel function {kfunc} is not allowed");
        let filtered = log.contains(&refused);
        if errno != want || filtered != (want != 0) {
            diag!("verifier log of the {} program calling {kfunc}():", p.what);
            for l in log.lines() {
                diag!("  {l}");
            }
        }
        check_eq!(
            std::io::Error::from_raw_os_error(errno).to_string(),
            std::io::Error::from_raw_os_error(want).to_string(),
            "a {} program calling {kfunc}()",
            p.what
        );
        check_eq!(
            filtered,
            want != 0,
            "the {} program's log says \"{refused}\"",
            p.what
        );
    }
    Ok(())
}

extern "C" {
    /// tests/helpers/stack_target.c: `depth` levels of recursion over leaf `variant`.
    fn rkf_stack_variant(depth: i32, variant: i32) -> i32;
}

/// 1,000 distinct user stacks (125 depths x 8 leaves): the kfunc delivers every one, a
/// 64-entry stack map with bpf_get_stackid() loses some.
fn no_stack_lost() -> Result<()> {
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
fn deep_kernel_differential() -> Result<()> {
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

/// `MAX_STACK_RAWTP` of upstream_get_stack_rawtp.bpf.c.
const MAX_STACK_RAWTP: usize = 100;
/// `sizeof(struct stack_trace_t)` there: four ints, then kernel and user ips and the
/// build-id entries, `MAX_STACK_RAWTP` of each.
const STACK_TRACE_T: usize = 16 + MAX_STACK_RAWTP * (8 + 8 + 32);
/// Where x86-64's kernel half of the address space starts.
const KERNEL_START: u64 = 0xffff_8000_0000_0000;

/// Upstream's tools/testing/selftests/bpf/progs/test_get_stack_rawtp_err.c, with only the
/// helper's name changed to rkf_get_stack(), is refused at load as upstream's
/// prog_tests/get_stack_raw_tp.c expects, for the reason the helper's original is: the
/// verifier cannot prove the return value non-negative, and reaches the endless loop
/// (tests/progs/upstream_get_stack_rawtp_err.bpf.c holds both): `EINVAL`, as
/// is_state_visited() in kernel/bpf/states.c returns for it.
fn upstream_get_stack_rawtp_err() -> Result<()> {
    use crate::{
        harness::{load_refused, verifier_says},
        skel::upstream_get_stack_rawtp_err::UpstreamGetStackRawtpErrSkelBuilder,
    };

    modules::require("rkf_stack")?;
    const WHY: &str = "infinite loop detected";
    for prog in ["bpf_prog2", "helper_prog2"] {
        let mut obj = MaybeUninit::uninit();
        let log = load_refused::<UpstreamGetStackRawtpErrSkelBuilder>(
            &mut obj,
            "upstream_get_stack_rawtp_err.bpf.c",
            prog,
            libc::EINVAL,
        )?;
        verifier_says(&log, WHY, prog)?;
    }
    Ok(())
}

/// Upstream's own program, tools/testing/selftests/bpf/progs/test_get_stack_rawtp.c, with
/// only the helper's name changed to rkf.bpf.h's rkf_get_stack()
/// (tests/progs/upstream_get_stack_rawtp.bpf.c): it loads, user and kernel stacks placed
/// one behind the other in one buffer included, and what it sends passes the checks of
/// upstream's prog_tests/get_stack_raw_tp.c for a JIT kernel, made exact: every event
/// that holds a `struct stack_trace_t` has a non-empty kernel stack of kernel text that
/// starts at the program, and user and build-id stacks; every event of both stacks in one
/// buffer is a non-empty user stack followed by a kernel stack of kernel text from the
/// program down.
/// Like upstream, the thread runs on cpu 0, whose perf buffer the program writes, and
/// makes 10 nanosleep() calls.
fn upstream_get_stack_rawtp() -> Result<()> {
    modules::require("rkf_stack")?;
    std::thread::scope(|s| {
        s.spawn(upstream_get_stack_rawtp_on_cpu0)
            .join()
            .map_err(|_| anyhow::anyhow!("the test thread panicked"))?
    })
}

fn upstream_get_stack_rawtp_on_cpu0() -> Result<()> {
    use crate::skel::upstream_get_stack_rawtp::UpstreamGetStackRawtpSkelBuilder;
    use std::cell::RefCell;

    /// `MAX_CNT_RAWTP` of prog_tests/get_stack_raw_tp.c.
    const MAX_CNT_RAWTP: usize = 10;

    crate::lifecycle::pin(0, 0)?;
    let mut obj = MaybeUninit::uninit();
    let skel = skeleton::load_and_attach::<UpstreamGetStackRawtpSkelBuilder>(
        &mut obj,
        "upstream_get_stack_rawtp.bpf.c",
        skeleton::as_built,
    )?;
    let events = RefCell::new(Vec::<Vec<u8>>::new());
    let lost = RefCell::new(0u64);
    let pb = libbpf_rs::PerfBufferBuilder::new(&skel.maps.perfmap)
        .pages(8)
        .sample_cb(|_cpu, data: &[u8]| events.borrow_mut().push(data.to_vec()))
        .lost_cb(|_cpu, n| *lost.borrow_mut() += n)
        .build()
        .context("perf buffer on perfmap")?;
    for _ in 0..MAX_CNT_RAWTP {
        std::thread::sleep(Duration::from_nanos(10));
    }
    let start = std::time::Instant::now();
    while events.borrow().len() < MAX_CNT_RAWTP {
        check!(
            start.elapsed() < Duration::from_secs(10),
            "{} events in 10 s, expected at least {MAX_CNT_RAWTP}",
            events.borrow().len()
        );
        pb.poll(Duration::from_millis(100))?;
    }
    drop(pb);
    // The program's symbol leaves kallsyms with the program: read the symbols first.
    let k = KernelSymbolizer::new();
    k.preload()?;
    drop(skel);
    let events = events.into_inner();
    let (mut whole, mut both) = (0, 0);
    for (i, e) in events.iter().enumerate() {
        if e.len() >= STACK_TRACE_T {
            whole += 1;
            let int = |at: usize| i32::from_ne_bytes(e[at..at + 4].try_into().unwrap());
            let (kern, user, build_id) = (int(4), int(8), int(12));
            check!(
                kern > 0 && kern % 8 == 0,
                "event {i}: kern_stack_size {kern}"
            );
            let ips = words(&e[16..16 + kern as usize]);
            check!(
                k.name(ips[0]).is_some_and(|n| n.starts_with("bpf_prog_")),
                "event {i}: kernel frame 0 is the program: {}",
                sym(&k, ips[0])
            );
            for (f, &ip) in ips.iter().enumerate() {
                check!(
                    k.frame(ip).is_some(),
                    "event {i}: kernel frame {f} is kernel text: {ip:#x}"
                );
            }
            check!(
                user > 0 && user % 8 == 0,
                "event {i}: user_stack_size {user}"
            );
            check!(
                build_id > 0 && build_id % 32 == 0,
                "event {i}: user_stack_buildid_size {build_id}"
            );
        } else {
            // Both stacks in one buffer (perf pads the raw sample to 8 bytes less its
            // 4-byte size field): the user stack, whatever a frame-pointer walk through
            // code without frame pointers found, then the kernel stack from the program.
            both += 1;
            let ips = words(e);
            let kernel = ips
                .iter()
                .position(|&ip| k.name(ip).is_some_and(|n| n.starts_with("bpf_prog_")));
            check!(
                kernel.is_some_and(|p| p > 0
                    && ips[p..]
                        .iter()
                        .all(|&ip| ip >= KERNEL_START && k.frame(ip).is_some())),
                "event {i}: a user stack, then a kernel stack of kernel text from the \
                 program: {ips:x?}"
            );
        }
    }
    diag!(
        "{} events: {whole} with a struct stack_trace_t, {both} with both stacks in one \
         buffer, {} lost",
        events.len(),
        lost.into_inner()
    );
    check!(
        whole > 0 && both > 0,
        "both kinds of event arrived ({whole} and {both})"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::nest_model;

    #[test]
    fn nest_model_counts() {
        // Alone, a program takes one stack and misses itself inside it.
        assert_eq!(nest_model(1, 3, 0), vec![(0, 1)]);
        // One slot: each program runs inside the other's stack, refused there.
        assert_eq!(nest_model(2, 1, 0), vec![(1, 1), (1, 1)]);
        // stack_nest.bpf.c's four programs, started with one slot held.
        assert_eq!(nest_model(4, 3, 1), vec![(6, 4); 4]);
    }
}
