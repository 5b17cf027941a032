// SPDX-License-Identifier: GPL-2.0

//! rkf_percpu: `bpf_rkf_per_cpu_ptr()` and `bpf_rkf_this_cpu_ptr()`.
//!
//! A port of the upstream ksyms_btf checks (tools/testing/selftests/bpf/prog_tests/
//! ksyms_btf.c) to the kfuncs, with the in-kernel helpers as the oracle in the same program.

use std::{mem::MaybeUninit, time::Duration};

use anyhow::{Context, Result};
use libbpf_rs::{Link, ProgramInput, ProgramType};

use crate::{
    check, check_eq, diag,
    harness::{load_refused, verifier_says, Test},
    skel::{percpu::*, percpu_fail::*, percpu_types::*, percpu_weak::*},
};
use rkf::{
    cpus,
    kallsyms::Kallsyms,
    modules, percpu as cli,
    perf::{self, open_cpu_clock, Sampling, Target},
    skeleton,
};
use rkf_core::abi::PERCPU_PROBE_MAGIC;

/// `MAX_CPUS` of percpu.bpf.c.
const MAX_CPUS: u32 = 64;

pub const TESTS: &[Test] = &[
    Test {
        name: "percpu_module_btf",
        run: module_btf,
    },
    Test {
        name: "percpu_upstream_ksyms_btf",
        run: upstream_ksyms_btf,
    },
    Test {
        name: "percpu_every_possible_cpu",
        run: every_possible_cpu,
    },
    Test {
        name: "percpu_this_cpu",
        run: this_cpu,
    },
    Test {
        name: "percpu_prog_active",
        run: prog_active,
    },
    Test {
        name: "percpu_kallsyms",
        run: kallsyms,
    },
    Test {
        name: "percpu_out_of_range",
        run: out_of_range,
    },
    Test {
        name: "percpu_unresolved_weak_ksym",
        run: unresolved_weak_ksym,
    },
    Test {
        name: "percpu_module_variable",
        run: module_variable,
    },
    Test {
        name: "percpu_differential",
        run: differential,
    },
    Test {
        name: "percpu_null_check_enforced",
        run: null_check_enforced,
    },
    Test {
        name: "percpu_raw_result_is_scalar",
        run: raw_result_is_scalar,
    },
    Test {
        name: "percpu_read_only",
        run: read_only,
    },
    Test {
        name: "percpu_prog_type_not_registered",
        run: prog_type_not_registered,
    },
    Test {
        name: "percpu_prog_types",
        run: prog_types,
    },
    Test {
        name: "percpu_cli_read",
        run: cli_read,
    },
    Test {
        name: "percpu_cli_struct_members",
        run: cli_struct_members,
    },
    Test {
        name: "percpu_cli_errors",
        run: cli_errors,
    },
];

/// Everything percpu_all() wrote, for one run.
#[derive(Clone, Copy)]
pub(crate) struct All {
    nr_cpus: u32,
    bss: crate::skel::percpu::types::bss,
}

/// The first successful run of percpu_all() in this process, which the tests that only
/// check what it wrote share: loading percpu.bpf.c and reading /proc/kallsyms took about
/// 25 s a run on the test kernel (KASAN, lockdep) under TCG.  A failed run is not kept:
/// the next test runs it again.
fn shared_run() -> Result<All> {
    static RUN: std::sync::Mutex<Option<All>> = std::sync::Mutex::new(None);
    // A panic in run_all() left no run behind: run it again.
    let mut run = RUN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(all) = *run {
        return Ok(all);
    }
    let all = run_all()?;
    *run = Some(all);
    Ok(all)
}

/// One run of percpu_all(), fresh (the lifecycle tests run it after a reload).
pub(crate) fn run_all() -> Result<All> {
    modules::require("rkf_percpu")?;
    let nr_cpus = cpus::nr_cpu_ids()?;
    check!(
        nr_cpus <= MAX_CPUS,
        "percpu.bpf.c handles at most {MAX_CPUS} cpus, the system has {nr_cpus}"
    );
    let ksyms = Kallsyms::load()?;
    let per_cpu_offset_addr = ksyms.lookup("__per_cpu_offset", None)?;
    let mut obj = MaybeUninit::uninit();
    let skel = skeleton::load::<PercpuSkelBuilder>(&mut obj, "percpu.bpf.c", |open| {
        let bss = open.maps.bss_data.as_deref_mut().context("no .bss")?;
        bss.nr_cpus = nr_cpus;
        bss.per_cpu_offset_addr = per_cpu_offset_addr;
        // Not NULL: the program must write each of them.
        bss.null_results = [1; 4];
        Ok(())
    })?;
    let out = skel.progs.percpu_all.test_run(ProgramInput::default())?;
    check_eq!(out.return_value, 0, "percpu_all() return value");
    let bss = *skel.maps.bss_data.as_deref().context("no .bss")?;
    Ok(All { nr_cpus, bss })
}

fn module_btf() -> Result<()> {
    modules::require("rkf_percpu")?;
    let var = rkf::btf::PercpuVar::find("rkf_percpu_probe")?;
    check_eq!(
        var.module.as_deref(),
        Some("rkf_percpu"),
        "owner of rkf_percpu_probe"
    );
    check_eq!(
        var.type_name,
        "struct rkf_percpu_probe".to_string(),
        "type of rkf_percpu_probe"
    );
    Ok(())
}

fn every_possible_cpu() -> Result<()> {
    let a = shared_run()?;
    let possible = cpus::possible()?;
    check!(
        possible.len() >= 2,
        "the VM should have 2 vCPUs, /sys says {possible:?}"
    );
    for cpu in possible {
        let c = cpu as usize;
        diag!(
            "cpu {cpu}: per_cpu_ptr(&runqueues) = {:#x}, ->cpu = {}",
            a.bss.rq_kfunc[c],
            a.bss.rq_cpu[c]
        );
        check_eq!(
            a.bss.rq_cpu[c],
            cpu as i32,
            "rkf_per_cpu_ptr(&runqueues, {cpu})->cpu"
        );
        check_eq!(
            a.bss.rq_cpu_btf[c],
            cpu as i32,
            "rkf_per_cpu_btf_ptr(&runqueues, {cpu})->cpu"
        );
    }
    Ok(())
}

/// The this-cpu pointers of a run on each online cpu: the run's thread is pinned to it.
fn this_cpu() -> Result<()> {
    for cpu in cpus::online()? {
        let a = std::thread::spawn(move || -> Result<All> {
            crate::lifecycle::pin(0, cpu as usize)?;
            run_all()
        })
        .join()
        .map_err(|_| anyhow::anyhow!("the run on cpu {cpu} panicked"))??;
        check_eq!(
            a.bss.this_cpu,
            cpu,
            "bpf_get_smp_processor_id() in a run pinned to cpu {cpu}"
        );
        this_cpu_of(&a)?;
    }
    Ok(())
}

fn this_cpu_of(a: &All) -> Result<()> {
    let b = &a.bss;
    let cpu = b.this_cpu;
    check_eq!(
        b.this_rq_kfunc,
        b.rq_kfunc[cpu as usize],
        "this_cpu_ptr(&runqueues) vs per_cpu_ptr(.., {cpu})"
    );
    check_eq!(
        b.this_rq_kfunc,
        b.this_rq_helper,
        "bpf_rkf_this_cpu_ptr vs bpf_this_cpu_ptr (runqueues)"
    );
    check_eq!(
        b.this_rq_cpu,
        cpu as i32,
        "rkf_this_cpu_ptr(&runqueues)->cpu"
    );
    Ok(())
}

fn prog_active() -> Result<()> {
    let a = shared_run()?;
    let b = &a.bss;
    check_eq!(
        b.this_active_kfunc,
        b.this_active_helper,
        "this-cpu &bpf_prog_active, kfunc vs helper"
    );
    check_eq!(
        b.this_active_val,
        b.this_active_val_helper,
        "this-cpu bpf_prog_active read through the typed pointer"
    );
    for cpu in cpus::possible()? {
        let c = cpu as usize;
        diag!(
            "cpu {cpu}: bpf_prog_active = {} (helper {})",
            b.active_val[c],
            b.active_val_helper[c]
        );
        check_eq!(
            b.active_val[c],
            b.active_val_helper[c],
            "bpf_prog_active of cpu {cpu}"
        );
        check!(
            (0..1000).contains(&b.active_val[c]),
            "bpf_prog_active of cpu {cpu} is a small count"
        );
    }
    Ok(())
}

/// Upstream's own program, tools/testing/selftests/bpf/progs/test_ksyms_btf.c, with only
/// the helpers' names changed to rkf.bpf.h's (tests/progs/upstream_ksyms_btf.bpf.c): it
/// loads, and its results pass the checks of upstream's test_basic()
/// (prog_tests/ksyms_btf.c), made exact.  Upstream triggers it on sys_enter, where every
/// process's syscalls on both cpus race to write the results; here it runs once on each
/// cpu through BPF_PROG_TEST_RUN, so that each run's results are its own: the addresses
/// are /proc/kallsyms', rq_cpu and this_rq_cpu are that cpu, cpu_rq(0)->cpu is 0, and
/// bpf_prog_active reads the same through both.
fn upstream_ksyms_btf() -> Result<()> {
    use crate::skel::upstream_ksyms_btf::UpstreamKsymsBtfSkelBuilder;

    /// `BPF_F_TEST_RUN_ON_CPU`.
    const TEST_RUN_ON_CPU: u32 = 1;

    modules::require("rkf_percpu")?;
    let k = Kallsyms::load()?;
    let (rq, active) = (
        k.lookup("runqueues", None)?,
        k.lookup("bpf_prog_active", None)?,
    );
    let mut obj = MaybeUninit::uninit();
    let mut skel = skeleton::load::<UpstreamKsymsBtfSkelBuilder>(
        &mut obj,
        "upstream_ksyms_btf.bpf.c",
        skeleton::as_built,
    )?;
    for cpu in cpus::online()? {
        skel.progs.handler.test_run(ProgramInput {
            cpu,
            flags: TEST_RUN_ON_CPU,
            ..Default::default()
        })?;
        let d = skel.maps.data_data.as_deref_mut().context("no .data")?;
        check_eq!(d.out__runqueues_addr, rq, "runqueues_addr");
        check_eq!(d.out__bpf_prog_active_addr, active, "bpf_prog_active_addr");
        check_eq!(d.out__rq_cpu, cpu, "rq_cpu on cpu {cpu}");
        check!(
            d.out__bpf_prog_active >= 0,
            "bpf_prog_active on cpu {cpu}: got {}, expected >= 0",
            d.out__bpf_prog_active
        );
        check_eq!(d.out__cpu_0_rq_cpu, 0, "cpu_rq(0)->cpu");
        check_eq!(d.out__this_rq_cpu, cpu, "this_rq_cpu on cpu {cpu}");
        check_eq!(
            d.out__this_bpf_prog_active,
            d.out__bpf_prog_active,
            "this_bpf_prog_active on cpu {cpu}"
        );
        // Upstream's initial values, so that the next run must write every one again.
        d.out__rq_cpu = u32::MAX;
        d.out__this_rq_cpu = u32::MAX;
        d.out__cpu_0_rq_cpu = u32::MAX;
        d.out__bpf_prog_active = -1;
        d.out__this_bpf_prog_active = -1;
    }
    Ok(())
}

fn kallsyms() -> Result<()> {
    let a = shared_run()?;
    let b = &a.bss;
    let k = Kallsyms::load()?;
    let rq = k.lookup("runqueues", None)?;
    let active = k.lookup("bpf_prog_active", None)?;
    check_eq!(b.runqueues_addr, rq, "&runqueues vs /proc/kallsyms");
    check_eq!(
        b.prog_active_addr,
        active,
        "&bpf_prog_active vs /proc/kallsyms"
    );
    for cpu in cpus::possible()? {
        let c = cpu as usize;
        let off = b.pcpu_offset[c];
        diag!("cpu {cpu}: __per_cpu_offset = {off:#x}");
        check!(off != 0 || cpu == 0, "__per_cpu_offset[{cpu}] is set");
        check_eq!(
            b.rq_kfunc[c],
            rq.wrapping_add(off),
            "per_cpu_ptr(&runqueues, {cpu}) vs kallsyms + offset"
        );
        check_eq!(
            b.active_kfunc[c],
            active.wrapping_add(off),
            "per_cpu_ptr(&bpf_prog_active, {cpu}) vs kallsyms + offset"
        );
    }
    Ok(())
}

fn out_of_range() -> Result<()> {
    let a = shared_run()?;
    for (i, what) in [
        "cpu == nr_cpu_ids",
        "cpu == nr_cpu_ids + 1",
        "cpu == U32_MAX",
        "ptr == NULL",
    ]
    .iter()
    .enumerate()
    {
        check_eq!(
            a.bss.null_results[i],
            0,
            "bpf_rkf_per_cpu_ptr() with {what}"
        );
    }
    Ok(())
}

/// A typed weak `__ksym` that no kernel defines (percpu_weak.bpf.c): the program loads
/// with `rkf_this_cpu_ptr()` dereferenced without a NULL check, both kfuncs give NULL, the
/// load through `rkf_this_cpu_ptr()` reads 0, and `rkf_per_cpu_ptr()` is NULL.
fn unresolved_weak_ksym() -> Result<()> {
    modules::require("rkf_percpu")?;
    check!(
        Kallsyms::load()?
            .lookup("rkf_selftest_no_such_percpu_var", None)
            .is_err(),
        "the kernel has a rkf_selftest_no_such_percpu_var"
    );
    let mut obj = MaybeUninit::uninit();
    let skel =
        skeleton::load::<PercpuWeakSkelBuilder>(&mut obj, "percpu_weak.bpf.c", skeleton::as_built)?;
    let out = skel.progs.percpu_weak.test_run(ProgramInput::default())?;
    check_eq!(out.return_value, 0, "percpu_weak() return value");
    let d = skel.maps.data_data.as_deref().context("no .data")?;
    check_eq!(d.this_kfunc, 0, "bpf_rkf_this_cpu_ptr(&unresolved)");
    check_eq!(d.this_val, 0, "*rkf_this_cpu_ptr(&unresolved)");
    check_eq!(d.per_cpu_kfunc, 0, "bpf_rkf_per_cpu_ptr(&unresolved, 0)");
    check_eq!(d.per_cpu_is_null, 1, "!rkf_per_cpu_ptr(&unresolved, 0)");
    Ok(())
}

fn module_variable() -> Result<()> {
    // A fresh run: it is checked against where rkf_percpu is loaded now, which a test run
    // between it and the shared run would change if it reloaded the module (none does in
    // today's order; the lifecycle tests, which do, run last).
    let a = run_all()?;
    let b = &a.bss;
    let k = Kallsyms::load()?;
    check_eq!(
        b.probe_addr,
        k.lookup("rkf_percpu_probe", Some("rkf_percpu"))?,
        "&rkf_percpu_probe vs /proc/kallsyms"
    );
    for cpu in cpus::possible()? {
        let c = cpu as usize;
        check_eq!(
            b.probe_magic[c],
            PERCPU_PROBE_MAGIC,
            "rkf_percpu_probe.magic on cpu {cpu}"
        );
        check_eq!(b.probe_cpu[c], cpu, "rkf_percpu_probe.cpu on cpu {cpu}");
        check_eq!(
            b.probe_kfunc[c],
            b.probe_self[c],
            "kfunc result vs the module's own address on cpu {cpu}"
        );
    }
    Ok(())
}

fn differential() -> Result<()> {
    let a = shared_run()?;
    let b = &a.bss;
    for cpu in 0..a.nr_cpus {
        let c = cpu as usize;
        check_eq!(
            b.rq_kfunc[c],
            b.rq_helper[c],
            "&runqueues on cpu {cpu}: kfunc vs bpf_per_cpu_ptr"
        );
        check_eq!(
            b.active_kfunc[c],
            b.active_helper[c],
            "&bpf_prog_active on cpu {cpu}: kfunc vs bpf_per_cpu_ptr"
        );
        check_eq!(
            b.rq_cpu[c],
            b.rq_cpu_helper[c],
            "runqueues.cpu on cpu {cpu}: kfunc vs helper pointer"
        );
    }
    Ok(())
}

/// Loads only `prog` of percpu_fail.bpf.c and returns the verifier's complaint.  Every
/// refusal there is the verifier's `EACCES`: a bad memory access, a write into read-only
/// memory, a kfunc the program type may not call (kernel/bpf/verifier.c).
fn load_failing(prog: &str) -> Result<String> {
    modules::require("rkf_percpu")?;
    let mut obj = MaybeUninit::uninit();
    load_refused::<PercpuFailSkelBuilder>(&mut obj, "percpu_fail.bpf.c", prog, libc::EACCES)
}

fn expect_rejected(prog: &str, msg: &str) -> Result<()> {
    verifier_says(&load_failing(prog)?, msg, prog)
}

fn null_check_enforced() -> Result<()> {
    expect_rejected("deref_without_null_check", "invalid mem access 'scalar'")?;
    expect_rejected(
        "deref_scalar_without_null_check",
        "invalid mem access 'scalar'",
    )
}

fn raw_result_is_scalar() -> Result<()> {
    expect_rejected("deref_raw_result", "invalid mem access 'scalar'")
}

fn read_only() -> Result<()> {
    expect_rejected(
        "write_through_pointer",
        "cannot write into rdonly_untrusted_mem",
    )
}

fn prog_type_not_registered() -> Result<()> {
    expect_rejected(
        "socket_filter",
        "calling kernel function bpf_rkf_per_cpu_ptr is not allowed",
    )
}

/// Every program type the kfuncs are registered for resolves this cpu's runqueue in
/// every run, armed around 20 sleeps of 1 ms, each followed by 5 ms of spinning, on this
/// thread only: the fentry and kprobe programs on hrtimer_nanosleep() ran once a sleep,
/// the three on sched_switch (raw_tp, tp_btf, tracepoint) once for each switch out, the
/// same number, at least the switches the kernel counted for the thread between two
/// readings inside the armed stretch and at most those between two outside it
/// (/proc/thread-self/status), and the perf_event program (cpu-clock samples of this
/// thread every 200 us) at least once.  (The kprobe and tracepoint programs would miss a
/// run where another task held bpf_prog_active on the cpu, in a map syscall: none runs.)
fn prog_types() -> Result<()> {
    const SLEEPS: u64 = 20;
    const KINDS: [(&str, ProgramType); 6] = [
        ("fentry", ProgramType::Tracing),
        ("kprobe", ProgramType::Kprobe),
        ("raw_tp", ProgramType::RawTracepoint),
        ("tp_btf", ProgramType::Tracing),
        ("tracepoint", ProgramType::Tracepoint),
        ("perf_event", ProgramType::PerfEvent),
    ];
    modules::require("rkf_percpu")?;
    let mut obj = MaybeUninit::uninit();
    let mut skel = skeleton::load_and_attach::<PercpuTypesSkelBuilder>(
        &mut obj,
        "percpu_types.bpf.c",
        |open| {
            open.maps
                .bss_data
                .as_deref_mut()
                .context("no .bss")?
                .target_tid = nix::unistd::gettid().as_raw() as u32;
            Ok(())
        },
    )?;
    let types = [
        skel.progs.fentry_prog.prog_type(),
        skel.progs.kprobe_prog.prog_type(),
        skel.progs.raw_tp_prog.prog_type(),
        skel.progs.tp_btf_prog.prog_type(),
        skel.progs.tracepoint_prog.prog_type(),
        skel.progs.perf_event_prog.prog_type(),
    ];
    for ((name, want), got) in KINDS.iter().zip(types) {
        check_eq!(got, *want, "program type of the {name} program");
    }
    let pfd = open_cpu_clock(Target::ThisThread, Sampling::Period(200_000), 0)?;
    let perf: Link =
        perf::attach(&skel.progs.perf_event_prog, pfd).context("attaching perf_event")?;
    // Sleep (fentry/kprobe on hrtimer_nanosleep, sched_switch) and spin (cpu-clock
    // samples).  One flag arms every program, so that the three on one sched_switch event
    // see the same value of it.
    let arm = |skel: &mut PercpuTypesSkel<'_>, on: bool| -> Result<()> {
        skel.maps.bss_data.as_deref_mut().context("no .bss")?.armed = on;
        Ok(())
    };
    let outer = ctxt_switches()?;
    arm(&mut skel, true)?;
    let inner = ctxt_switches()?;
    for _ in 0..SLEEPS {
        std::thread::sleep(Duration::from_millis(1));
        let t = std::time::Instant::now();
        while t.elapsed() < Duration::from_millis(5) {
            std::hint::spin_loop();
        }
    }
    let inner = ctxt_switches()? - inner;
    arm(&mut skel, false)?;
    let outer = ctxt_switches()? - outer;
    drop(perf);
    let bss = skel.maps.bss_data.as_deref().context("no .bss")?;
    for (i, (name, _)) in KINDS.iter().enumerate() {
        diag!("{name}: {} calls, {} wrong", bss.hits[i], bss.bad[i]);
        check_eq!(
            bss.bad[i],
            0,
            "{name}: calls where the resolved runqueue was not this cpu's"
        );
    }
    let [fentry, kprobe, raw_tp, tp_btf, tracepoint, perf_event] = bss.hits;
    check_eq!(
        (fentry, kprobe),
        (SLEEPS, SLEEPS),
        "runs of the fentry and kprobe programs on hrtimer_nanosleep()"
    );
    check_eq!(
        (tp_btf, tracepoint),
        (raw_tp, raw_tp),
        "runs of the tp_btf and tracepoint programs on sched_switch (the raw_tp one's)"
    );
    diag!("the thread switched out {inner} times inside the armed stretch, {outer} around it");
    check!(
        (inner..=outer).contains(&raw_tp),
        "the sched_switch programs ran {raw_tp} times; the thread switched out {inner} \
         times inside the armed stretch, {outer} around it"
    );
    check!(perf_event > 0, "the perf_event program ran");
    Ok(())
}

/// The context switches of this thread so far, voluntary and not
/// (/proc/thread-self/status), which __schedule() counts as it fires sched_switch.
fn ctxt_switches() -> Result<u64> {
    let status = std::fs::read_to_string("/proc/thread-self/status")?;
    let count = |key: &str| -> Result<u64> {
        let line = status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .with_context(|| format!("no {key} in /proc/thread-self/status"))?;
        Ok(line.trim().parse()?)
    };
    Ok(count("voluntary_ctxt_switches:")? + count("nonvoluntary_ctxt_switches:")?)
}

/// Reads `spec`, an int field that holds its cpu's number in each cpu's copy, with
/// `rkf percpu`: one reading for each possible cpu, each its own cpu's copy.
fn check_cpu_field(spec: &str) -> Result<()> {
    let t = cli::Target::resolve(spec)?;
    let readings = cli::read(&t)?;
    check_eq!(
        readings.len(),
        cpus::possible()?.len(),
        "readings of {spec}"
    );
    for r in readings {
        let v = cli::format_value(
            t.field.kind,
            r.value
                .as_ref()
                .map_err(|e| anyhow::anyhow!("read error {e}"))?,
            false,
        );
        check_eq!(v, r.cpu.to_string(), "rkf percpu {spec} on cpu {}", r.cpu);
    }
    Ok(())
}

fn cli_read() -> Result<()> {
    let t = cli::Target::resolve("runqueues.cpu")?;
    check_eq!(
        t.field.type_name,
        "int".to_string(),
        "type of runqueues.cpu"
    );
    check_cpu_field("runqueues.cpu")?;
    // Fields of a module's variable.
    check_cpu_field("rkf_percpu_probe.cpu")?;
    let t = cli::Target::resolve("rkf_percpu_probe.magic")?;
    for r in cli::read(&t)? {
        let v = cli::format_value(
            t.field.kind,
            r.value
                .as_ref()
                .map_err(|e| anyhow::anyhow!("read error {e}"))?,
            true,
        );
        check_eq!(
            v,
            format!("{PERCPU_PROBE_MAGIC:#x}"),
            "rkf percpu rkf_percpu_probe.magic on cpu {}",
            r.cpu
        );
    }
    Ok(())
}

fn cli_struct_members() -> Result<()> {
    let t = cli::Target::resolve("rkf_percpu_probe")?;
    check_eq!(
        t.field.members,
        ["cpu", "magic", "self"],
        "members of struct rkf_percpu_probe"
    );
    check_eq!(t.field.size, 16, "size of struct rkf_percpu_probe");
    let t = cli::Target::resolve("runqueues")?;
    check!(
        t.field.members.iter().any(|m| m == "nr_running"),
        "struct rq lists nr_running"
    );
    Ok(())
}

fn cli_errors() -> Result<()> {
    let cases = [
        (
            "no_such_symbol_rkf",
            "no per-cpu variable no_such_symbol_rkf",
        ),
        (
            "runqueues.no_such_field",
            "struct rq has no field no_such_field",
        ),
        (
            "runqueues.cpu.x",
            "runqueues.cpu is int, which has no fields",
        ),
        ("runqueues..cpu", "empty field name"),
        ("", "expected SYMBOL[.FIELD]"),
    ];
    for (spec, want) in cases {
        let err = match cli::Target::resolve(spec) {
            Ok(_) => anyhow::bail!("rkf percpu {spec:?} resolved, but must fail"),
            Err(e) => format!("{e:#}"),
        };
        diag!("rkf percpu {spec:?}: {err}");
        check!(
            err.contains(want),
            "rkf percpu {spec:?}: expected an error with {want:?}, got {err:?}"
        );
    }
    Ok(())
}
