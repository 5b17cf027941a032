// SPDX-License-Identifier: GPL-2.0

//! The table of errors, kfunc against helper, and its row of programs nested past the
//! per-cpu regs slots (stack_nest.bpf.c).

use std::mem::MaybeUninit;

use anyhow::{Context, Result};
use libbpf_rs::ProgramInput;

use super::{
    compare::{check_untouched_past, compare},
    samples::{load, run},
    BUF, F_USER_BUILD_ID, F_USER_STACK,
};
use crate::{check, check_eq, diag};
use rkf::{modules, skeleton};

pub(super) fn errno_table() -> Result<()> {
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
