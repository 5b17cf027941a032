// SPDX-License-Identifier: GPL-2.0

//! rkf_percpu: the per-cpu kfuncs against `bpf_per_cpu_ptr()` and `bpf_this_cpu_ptr()`.

use std::mem::MaybeUninit;

use anyhow::{ensure, Context, Result};
use libbpf_rs::ProgramInput;
use rkf::skeleton;

use crate::{median, skel::bench_percpu::BenchPercpuSkelBuilder};

/// rkf_percpu: the cost per lookup (and one load through the pointer) of the rkf.bpf.h
/// macros and of the helpers, in one program run, net of the loop's own cost.
pub(crate) fn bench(rounds: usize) -> Result<()> {
    /// bench_percpu.bpf.c: lookups per loop.
    const CALLS: u64 = 64;

    rkf::modules::require("rkf_percpu")?;
    let nr_cpus = rkf::cpus::nr_cpu_ids()?;
    // The last cpu, so that a lookup that read zeros shows in the sums (cpu 0's rq->cpu is 0).
    ensure!(
        nr_cpus >= 2,
        "the per-cpu benchmark needs two cpus, the VM has {nr_cpus}"
    );
    let cpu = nr_cpus - 1;
    let mut obj = MaybeUninit::uninit();
    let mut skel =
        skeleton::load::<BenchPercpuSkelBuilder>(&mut obj, "bench_percpu.bpf.c", |open| {
            open.maps.bss_data.as_deref_mut().context("no .bss")?.cpu = cpu;
            Ok(())
        })?;
    // Per round, the four loops' costs less the empty loop's: per_cpu rkf, per_cpu helper,
    // this_cpu rkf, this_cpu helper.
    let mut net: [Vec<u64>; 4] = Default::default();
    let mut loop_ns = Vec::new();
    // One warm-up run, then `rounds`, alternating which of the two goes first.
    for r in 0..=rounds {
        skel.maps
            .bss_data
            .as_deref_mut()
            .context("no .bss")?
            .helper_first = (r % 2 == 1).into();
        skel.progs.bench.test_run(ProgramInput::default())?;
        let b = skel.maps.bss_data.as_deref().context("no .bss")?;
        let want = CALLS as i64 * i64::from(cpu);
        ensure!(
            b.rkf_sum == want && b.helper_sum == want,
            "per_cpu_ptr(runqueues, {cpu})->cpu summed over {CALLS} lookups: rkf {}, helper {}, expected {want}",
            b.rkf_sum,
            b.helper_sum
        );
        ensure!(
            b.this_rkf_sum == b.this_helper_sum
                && b.this_rkf_sum % CALLS as i64 == 0
                && b.this_rkf_sum / (CALLS as i64) < i64::from(nr_cpus),
            "this_cpu_ptr(runqueues)->cpu summed over {CALLS} lookups: rkf {}, helper {}",
            b.this_rkf_sum,
            b.this_helper_sum
        );
        ensure!(
            b.loop_sum == CALLS as i64,
            "the empty loop summed {}",
            b.loop_sum
        );
        if r == 0 {
            continue;
        }
        for (v, t) in net
            .iter_mut()
            .zip([b.rkf_ns, b.helper_ns, b.this_rkf_ns, b.this_helper_ns])
        {
            v.push(t.saturating_sub(b.loop_ns));
        }
        loop_ns.push(b.loop_ns);
    }
    let [rkf, helper, this_rkf, this_helper] = net.map(|v| median(v) as f64 / CALLS as f64);
    println!("rkf_percpu: cost per lookup of a per-cpu variable and one load through the pointer,");
    println!("the rkf.bpf.h macros against the helpers, in one syscall program run");
    println!(
        "(-icount shift=0; median of {rounds} runs x {CALLS} lookups, less the loop's own {:.1} ns per iteration)",
        median(loop_ns) as f64 / CALLS as f64
    );
    println!();
    println!("| lookup                                   | rkf (ns) | helper (ns) | ratio |");
    println!("|------------------------------------------|---------:|------------:|------:|");
    let mut worst: f64 = 0.0;
    for (name, k, h) in [
        ("per_cpu_ptr(runqueues, cpu)->cpu, checked", rkf, helper),
        ("this_cpu_ptr(runqueues)->cpu", this_rkf, this_helper),
    ] {
        let ratio = k / h;
        worst = worst.max(ratio);
        println!("| {name:<40} | {k:>8.1} | {h:>11.1} | {ratio:>4.2}x |");
    }
    println!();
    println!("rkf_percpu worst ratio {worst:.2}x (goal: at most 1.5x)");
    Ok(())
}
