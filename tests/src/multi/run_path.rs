// SPDX-License-Identifier: GPL-2.0

//! Nothing traceable on rkf_multi's program-run path but what its deny list refuses.
//!
//! A traceable function that the trampolines call on their way to a program would count
//! a run of every other link's program if a link traced it, and get a recursion miss for
//! every run if the link also holds the function being traced.  `bpf_prog_run()` did that
//! once: its `cant_migrate()` calls the traceable `__cant_migrate()` under
//! CONFIG_DEBUG_ATOMIC_SLEEP (include/linux/kernel.h), which a BPF trampoline never calls.
//! Which functions the path calls out of line depends on the kernel's config (PREEMPT_RCU,
//! KASAN, DEBUG_ATOMIC_SLEEP, ...), so the test asks the kernel: the function graph
//! tracer, started at the traced functions, records the hooked functions the trampolines
//! call.  The generated and shared trampolines call rkf_multi's run functions (not on
//! ftrace's list), the function's body and the return thunk; everything the path calls
//! out of line in the kernel is therefore an import of rkf_multi.ko.  The tracer hooks the
//! roots, every traceable import, and rkf_multi's own traceable functions (its attach
//! code is on ftrace's list; the path must not call it either), not every function of the
//! kernel: what an untraceable import (lockdep's `lock_acquire()`, RCU's debug checks,
//! `preempt_schedule_notrace()`) calls in turn is left out, as are helpers that a program
//! calls.  Under TCG, hooking every function, or matching a few dozen names against every
//! one, takes one write(2) longer than RCU tasks' 10 s report threshold and holds back any
//! grace period waiting meanwhile; the filter is written by index (the lines of
//! available_filter_functions), which finds each function without a search, and read
//! back.

use std::{
    collections::{BTreeMap, BTreeSet},
    mem::MaybeUninit,
    path::PathBuf,
};

use anyhow::{Context, Result};

use super::{
    attach,
    basic::{reset, setup, trigger},
    tramps::{check_tramps, Tramp},
};
use crate::{check, check_eq, diag};
use rkf::{kallsyms::Kallsyms, multi, skeleton};

/// What the kernel's `__bpf_prog_enter_sleepable_recur()` and
/// `__bpf_prog_exit_sleepable_recur()` (notrace, imports of rkf_multi.ko that generated
/// trampolines call around a sleepable program) call out of line and is traceable on
/// some config: not imports of rkf_multi.ko, so hooked by name, where it is traceable.
/// The first is `might_fault()`'s under CONFIG_DEBUG_ATOMIC_SLEEP or
/// CONFIG_PROVE_LOCKING: on such a kernel it shows under the fentry.s program's root
/// through a generated trampoline, and only there.
const KERNEL_RUN_CALLS: [&str; 3] = ["__might_fault", "__might_sleep", "__might_resched"];

/// Calls of each traced function per phase: a function counts as on the path when it is
/// called under every one of them (an interrupt's or a preemption's functions, recorded
/// now and then, are not).
const RUNS: usize = 5;

/// Functions rkf_multi's path called on some kernel and no longer does (the C shim runs
/// programs without `bpf_prog_run()`'s `cant_migrate()`), each with the option that
/// builds it and a function built under the same option: a kernel that has the latter
/// must have the function (kernel/sched/core.c, `CONFIG_DEBUG_ATOMIC_SLEEP`, on the
/// test flavour; Debian's config has it off).
const OFF_THE_PATH: &[(&str, &str, &str)] = &[(
    "__cant_migrate",
    "CONFIG_DEBUG_ATOMIC_SLEEP",
    "__might_sleep",
)];

/// The counters' slot for a function of `OFF_THE_PATH` (multi.bpf.c's `ips`; the targets
/// take the first nine).
const WATCH_SLOT: usize = 15;

/// The traceable function multi.bpf.c's `calls_helper` program and multi_sleepable.bpf.c's
/// `path_control` call on every run, which the graph tracer also hooks: the control, seen
/// under a traced function that runs the program, and under none otherwise.
const CONTROL: &str = "bpf_get_current_pid_tgid";

/// The function graph tracer, hooking the functions at `hooked` (indexes of
/// available_filter_functions, from 1) and started at `roots` with interrupts left out,
/// for as long as this lives; the tracer is `nop` again and the filters empty after.
struct GraphTrace {
    dir: PathBuf,
}

impl GraphTrace {
    fn write(&self, file: &str, what: &str) -> Result<()> {
        std::fs::write(self.dir.join(file), what)
            .with_context(|| format!("write {what:?} to {}", self.dir.join(file).display()))
    }

    fn start(roots: &[&str], hooked: &Hooked) -> Result<Self> {
        let t = Self {
            dir: multi::tracefs()?,
        };
        t.write("tracing_on", "0")?;
        t.write("current_tracer", "nop")?;
        let indexes: Vec<String> = hooked.keys().map(usize::to_string).collect();
        t.write("set_ftrace_filter", &indexes.join(" "))?;
        let filter = std::fs::read_to_string(t.dir.join("set_ftrace_filter"))?;
        let mut got: Vec<&str> = filter.lines().filter(|l| !l.starts_with('#')).collect();
        let mut want: Vec<&str> = hooked.values().map(String::as_str).collect();
        got.sort_unstable();
        want.sort_unstable();
        check_eq!(got, want, "set_ftrace_filter after writing the indexes");
        t.write("set_graph_function", &roots.join(" "))?;
        t.write("current_tracer", "function_graph")?;
        t.write("trace_options", "nofuncgraph-irqs")?;
        // Opening `trace` for writing clears the buffer.
        t.write("trace", "")?;
        t.write("tracing_on", "1")?;
        Ok(t)
    }

    /// Stops tracing and returns, for each root, the set of functions called directly
    /// under it in each of its calls.
    fn calls(&self) -> Result<BTreeMap<String, Vec<BTreeSet<String>>>> {
        self.write("tracing_on", "0")?;
        let text = std::fs::read_to_string(self.dir.join("trace"))?;
        Ok(parse(&text))
    }
}

impl Drop for GraphTrace {
    fn drop(&mut self) {
        // Best effort: a failure here leaves the tracer on, which the next test's own
        // start() resets.
        // The option first: it belongs to function_graph, and nop has none.
        let _ = self.write("trace_options", "funcgraph-irqs");
        let _ = self.write("current_tracer", "nop");
        let _ = self.write("set_graph_function", "");
        let _ = self.write("set_ftrace_filter", "");
        let _ = self.write("tracing_on", "1");
    }
}

/// The function graph tracer's lines (`" 0)   0.123 us    |    name();"`): after the
/// first `|`, two spaces of indent per depth, then the function.  Depth 0 starts a call
/// of a root; depth 1 is a function it called.
fn parse(text: &str) -> BTreeMap<String, Vec<BTreeSet<String>>> {
    let mut out: BTreeMap<String, Vec<BTreeSet<String>>> = BTreeMap::new();
    let mut root: Option<String> = None;
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((_, rest)) = line.split_once('|') else {
            continue;
        };
        let indent = rest.len() - rest.trim_start().len();
        let Some((name, _)) = rest.trim_start().split_once('(') else {
            continue;
        };
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_alphanumeric() || "_.".contains(c))
        {
            continue;
        }
        match indent {
            2 => {
                out.entry(name.to_string())
                    .or_default()
                    .push(BTreeSet::new());
                root = Some(name.to_string());
            }
            4 => {
                if let Some(set) = root.as_ref().and_then(|r| out.get_mut(r)?.last_mut()) {
                    set.insert(name.to_string());
                }
            }
            _ => {}
        }
    }
    out
}

/// Functions of available_filter_functions by index (from 1), each with its line.
type Hooked = BTreeMap<usize, String>;

/// What the graph tracer hooks: the roots, the traceable functions of vmlinux that
/// rkf_multi.ko calls (its undefined symbols that ftrace can hook), rkf_multi's own
/// traceable functions if it has any, which the path must not call either, and
/// [`CONTROL`].
fn hooked(roots: &[&str]) -> Result<Hooked> {
    use object::{Object, ObjectSymbol};

    let ko = crate::kmod::moddir()?.join("rkf_multi.ko");
    let data = std::fs::read(&ko).with_context(|| format!("read {}", ko.display()))?;
    let file = object::File::parse(&*data).with_context(|| format!("parse {}", ko.display()))?;
    let imports: BTreeSet<&str> = file
        .symbols()
        .filter(|s| s.is_undefined())
        .filter_map(|s| s.name().ok())
        .collect();
    let out: Hooked = multi::ftrace_function_lines()?
        .into_iter()
        .enumerate()
        .filter(|(_, l)| {
            imports.contains(l.as_str())
                || roots.contains(&l.as_str())
                || l == CONTROL
                || l.ends_with(" [rkf_multi]")
                || KERNEL_RUN_CALLS.contains(&l.as_str())
        })
        .map(|(i, l)| (i + 1, l))
        .collect();
    // rkf_multi frees what it allocates: without kfree() the symbols were not read.
    check!(
        out.values().any(|l| l == "kfree"),
        "{} imports no traceable kfree(): {out:?}",
        ko.display()
    );
    for r in roots.iter().chain([&CONTROL]) {
        check!(out.values().any(|l| l == r), "{r} is not traceable");
    }
    Ok(out)
}

/// The functions called under every call of `root`, after checking it was called `RUNS`
/// times.
fn on_path(
    calls: &BTreeMap<String, Vec<BTreeSet<String>>>,
    root: &str,
) -> Result<BTreeSet<String>> {
    let c = calls.get(root).map_or(&[][..], Vec::as_slice);
    check_eq!(c.len(), RUNS, "calls of {root} the graph tracer recorded");
    Ok(c.iter().skip(1).fold(c[0].clone(), |acc, s| {
        acc.intersection(s).cloned().collect()
    }))
}

/// An fentry link on bpf_fentry_test1, an fexit link on bpf_fentry_test2 and a session
/// link on bpf_fentry_test3, through generated trampolines, then again through the shared
/// one (rkf_multi reloaded with `generate=0`).  Without them, the graph tracer sees the
/// three functions call nothing; with them, every hooked
/// function (see the module's doc) the trampolines call
/// directly in every run is on rkf's deny list (what those call in turn, and slow paths
/// such as a preemption at `preempt_enable()`, are the kernel's, as for its own
/// trampolines and kprobes: the recursion guard bounds them).  Then, for each function of
/// `OFF_THE_PATH` this kernel has, a link on it and bpf_fentry_test1 sees its program run
/// without calling it, and without a recursion miss (a kernel without one must be
/// without its option: without the other function `OFF_THE_PATH` names for it).  The
/// control: with a link of a program that calls [`CONTROL`] on bpf_fentry_test1 alone,
/// the tracer sees that call under it beside what its fentry trampoline called before,
/// and nothing under the other two.
pub(super) fn run_path_calls_only_denied() -> Result<()> {
    Tramp::run_both(calls_only_denied)
}

fn calls_only_denied(tramp: Tramp) -> Result<()> {
    let mut obj = MaybeUninit::uninit();
    let (mut skel, funcs) = setup(&mut obj)?;
    let roots = [
        funcs[0].name.as_str(),
        funcs[1].name.as_str(),
        funcs[2].name.as_str(),
    ];
    let hooked = hooked(&roots)?;
    diag!(
        "the graph tracer hooks the 3 roots, {CONTROL} and {} functions rkf_multi.ko (or the \
         kernel's sleepable program entry) calls or has",
        hooked.len() - roots.len() - 1
    );
    let phase = |skel: &mut crate::skel::multi::MultiSkel<'_>| {
        trace(&roots, &hooked, || {
            for _ in 0..RUNS {
                trigger(skel)?;
            }
            Ok(())
        })
    };
    uncalled(&phase(&mut skel)?)?;
    let path = {
        let _fentry = attach(&skel.progs.count_fentry0, &funcs[..1], None)?;
        let _fexit = attach(&skel.progs.count_fexit0, &funcs[1..2], None)?;
        let _session = attach(&skel.progs.session0, &funcs[2..3], None)?;
        check_tramps(&funcs[..3], tramp, "fentry, fexit, session")?;
        only_denied(phase(&mut skel)?, tramp)?
    };
    {
        let _control = attach(&skel.progs.calls_helper, &funcs[..1], None)?;
        check_tramps(&funcs[..1], tramp, "the control")?;
        control(&roots, &path, phase(&mut skel)?, tramp)?;
    }
    // One link holds bpf_fentry_test1 and the function: a run of its program that called
    // the function would recurse into it, a miss there.  The fexit link's runs, from this
    // thread, would be hits of that program on it, which counts this thread's calls only
    // (the function has callers all over the kernel).
    let tid = nix::unistd::gettid().as_raw() as u32;
    let k = Kallsyms::load()?;
    for &(name, option, sibling) in OFF_THE_PATH {
        if k.lookup(name, None).is_err() {
            check!(
                k.lookup(sibling, None).is_err(),
                "{name}: not in kallsyms, but {sibling}, built under the same {option}, is"
            );
            diag!("{name}: not in this kernel ({option} is off: no {sibling} either)");
            continue;
        }
        let f = multi::resolve(&[name])?.funcs.remove(0);
        {
            let bss = skel.maps.bss_data.as_deref_mut().context("no .bss")?;
            bss.ips[WATCH_SLOT] = f.addr;
            bss.target_pid = tid;
            bss.task_only = true;
        }
        let watch = attach(
            &skel.progs.count_fentry1,
            &[funcs[0].clone(), f.clone()],
            None,
        )?;
        let _fexit = attach(&skel.progs.count_fexit0, &funcs[1..2], None)?;
        // Counted from here: the attach calls above allocate, and with KASAN, kmemleak
        // or SLUB debugging an allocation saves its stack in the stack depot under
        // printk_deferred_enter(), which calls the function.  The test runs allocate
        // nothing.
        reset(&mut skel)?;
        for _ in 0..RUNS {
            trigger(&skel)?;
        }
        let bss = skel.maps.bss_data.as_deref().context("no .bss")?;
        check_eq!(
            (
                bss.counts[1][0],
                bss.counts[1][WATCH_SLOT],
                bss.counts[super::basic::NR_COUNTERS][1]
            ),
            (RUNS as u64, 0, RUNS as u64),
            "this thread's runs of the program on ({}, {name}) and of the fexit program on {}",
            roots[0],
            roots[1]
        );
        let info = watch.info()?;
        let of = |addr: u64| {
            info.funcs
                .iter()
                .find(|fi| fi.addr == addr)
                .map(|fi| (fi.hits, fi.misses))
        };
        check_eq!(
            of(funcs[0].addr),
            Some((RUNS as u64, 0)),
            "(hits, misses) of the link on {}",
            roots[0]
        );
        check_eq!(
            of(f.addr).map(|(_, misses)| misses),
            Some(0),
            "recursion misses of the link on {name}"
        );
        diag!(
            "a link on {} and {name}: {RUNS} runs, none of them calling {name}",
            roots[0]
        );
    }
    Ok(())
}

/// For each of `roots`, the functions the graph tracer saw called under each of its
/// `RUNS` calls by `run`.
fn trace(
    roots: &[&str],
    hooked: &Hooked,
    run: impl FnOnce() -> Result<()>,
) -> Result<BTreeMap<String, BTreeSet<String>>> {
    let t = GraphTrace::start(roots, hooked)?;
    run()?;
    let calls = t.calls()?;
    drop(t);
    roots
        .iter()
        .map(|r| Ok((r.to_string(), on_path(&calls, r)?)))
        .collect()
}

/// Checks that no root called a hooked function with no link on it.
fn uncalled(seen: &BTreeMap<String, BTreeSet<String>>) -> Result<()> {
    for (root, called) in seen {
        check!(
            called.is_empty(),
            "{root}() itself calls {called:?}: not a target here"
        );
    }
    Ok(())
}

/// Checks that what the tracer saw called under each root, with a link on it, is on
/// rkf's deny list, and returns it.
fn only_denied(
    path: BTreeMap<String, BTreeSet<String>>,
    tramp: Tramp,
) -> Result<BTreeMap<String, BTreeSet<String>>> {
    for (root, called) in &path {
        diag!("traceable functions rkf_multi calls under {root}() ({tramp:?}): {called:?}");
        for f in called {
            check!(
                rkf_core::multi::denied(f.as_bytes()),
                "the trampoline of {root}() calls {f}(), which a link may trace"
            );
        }
    }
    Ok(path)
}

/// The control: with a link of a program that calls [`CONTROL`] on the first root alone,
/// the tracer `seen` under it what its fentry trampoline called on `path` (the denied
/// functions this kernel's path calls) and the control, and nothing under the others.
fn control(
    roots: &[&str],
    path: &BTreeMap<String, BTreeSet<String>>,
    seen: BTreeMap<String, BTreeSet<String>>,
    tramp: Tramp,
) -> Result<()> {
    let mut want: BTreeMap<String, BTreeSet<String>> = roots
        .iter()
        .map(|r| (r.to_string(), BTreeSet::new()))
        .collect();
    let first = want.get_mut(roots[0]).context("the first root")?;
    first.extend(path.get(roots[0]).into_iter().flatten().cloned());
    first.insert(CONTROL.to_string());
    check_eq!(
        seen,
        want,
        "the control: what the tracer saw called under each root, with a link of a \
         program that calls {CONTROL}() on {} alone ({tramp:?})",
        roots[0]
    );
    diag!(
        "the control ({tramp:?}): {CONTROL}() seen under {}() only",
        roots[0]
    );
    Ok(())
}

/// Syscall wrappers that a sleepable program may trace (they are on the error injection
/// list), that call nothing the graph tracer hooks on either kernel with the arguments of
/// [`call_sleepable_roots()`], and that have BTF (those of system calls without arguments
/// are aliases, which have none).  Nothing else in the VM calls them meanwhile: a call of
/// another task would be a root's extra call and a program's extra run, each of which
/// fails the test.
const SLEEPABLE_ROOTS: [&str; 3] = [
    "__x64_sys_personality",
    "__x64_sys_getcpu",
    "__x64_sys_sched_get_priority_max",
];

/// One call of each of [`SLEEPABLE_ROOTS`], each a system call for certain (glibc's
/// getcpu() may answer through the vDSO): personality(0xffffffff), which only reads the
/// persona, getcpu(NULL, NULL, NULL), which writes nothing, and
/// sched_get_priority_max(SCHED_FIFO), 99.
fn call_sleepable_roots() -> Result<()> {
    let null = std::ptr::null_mut::<libc::c_void>();
    // SAFETY: personality(2) takes no pointer; 0xffffffff asks and changes nothing.
    let persona = unsafe { libc::syscall(libc::SYS_personality, libc::c_ulong::from(u32::MAX)) };
    // SAFETY: getcpu(2) writes through its pointers only when they are not NULL.
    let getcpu = unsafe { libc::syscall(libc::SYS_getcpu, null, null, null) };
    // SAFETY: sched_get_priority_max(2) takes no pointer.
    let prio = unsafe { libc::syscall(libc::SYS_sched_get_priority_max, libc::SCHED_FIFO) };
    check_eq!(
        (persona >= 0, getcpu, prio),
        (true, 0, 99),
        "personality(0xffffffff) >= 0, getcpu(NULL, NULL, NULL), sched_get_priority_max(SCHED_FIFO)"
    );
    Ok(())
}

/// [`run_path_calls_only_denied()`] for the sleepable run path (rcu_read_lock_trace(),
/// migration disabled, the image's count of calls in flight): empty fentry.s, fexit.s
/// and fsession.s programs of multi_sleepable.bpf.c on personality(2), getcpu(2) and
/// sched_get_priority_max(2), then a sleepable control on personality(2) alone, through
/// generated trampolines and then the shared one.  Each program's runs are counted
/// exactly: `RUNS`, entry and exit apart for the session; the control's last
/// `bpf_get_current_pid_tgid()` is this thread's.
pub(super) fn sleepable_run_path_calls_only_denied() -> Result<()> {
    Tramp::run_both(sleepable_calls_only_denied)
}

fn sleepable_calls_only_denied(tramp: Tramp) -> Result<()> {
    use crate::skel::multi_sleepable::MultiSleepableSkelBuilder;

    let funcs = super::sleepable::resolve_in_order(&SLEEPABLE_ROOTS)?;
    let mut obj = MaybeUninit::uninit();
    let skel = skeleton::load::<MultiSleepableSkelBuilder>(
        &mut obj,
        "multi_sleepable.bpf.c",
        skeleton::as_built,
    )?;
    let hooked = hooked(&SLEEPABLE_ROOTS)?;
    let phase = || {
        trace(&SLEEPABLE_ROOTS, &hooked, || {
            for _ in 0..RUNS {
                call_sleepable_roots()?;
            }
            Ok(())
        })
    };
    uncalled(&phase()?)?;
    let path = {
        let p = &skel.progs;
        let _fentry = attach(&p.path_fentry, &funcs[..1], None)?;
        let _fexit = attach(&p.path_fexit, &funcs[1..2], None)?;
        let _session = attach(&p.path_session, &funcs[2..3], None)?;
        check_tramps(&funcs, tramp, "fentry.s, fexit.s, fsession.s")?;
        let path = only_denied(phase()?, tramp)?;
        // A generated trampoline runs the fentry.s program through the kernel's
        // sleepable entry, whose might_fault() calls __might_fault() on a kernel that
        // has it; rkf_multi's own runs (the other programs, the shared trampoline) do not.
        if hooked.values().any(|l| l == KERNEL_RUN_CALLS[0]) {
            for (k, root) in SLEEPABLE_ROOTS.iter().enumerate() {
                let seen = path
                    .get(*root)
                    .is_some_and(|c| c.contains(KERNEL_RUN_CALLS[0]));
                check_eq!(
                    seen,
                    k == 0 && tramp == Tramp::Generated,
                    "{}() under {root}() ({tramp:?})",
                    KERNEL_RUN_CALLS[0]
                );
            }
        }
        let bss = skel.maps.bss_data.as_deref().context("no .bss")?;
        check_eq!(
            bss.path_runs,
            [RUNS as u64, RUNS as u64, RUNS as u64, RUNS as u64, 0],
            "runs of fentry.s, fexit.s, fsession.s on entry and on exit, and of the control"
        );
        path
    };
    {
        let _control = attach(&skel.progs.path_control, &funcs[..1], None)?;
        check_tramps(&funcs[..1], tramp, "the control")?;
        control(&SLEEPABLE_ROOTS, &path, phase()?, tramp)?;
        let bss = skel.maps.bss_data.as_deref().context("no .bss")?;
        check_eq!(bss.path_runs[4], RUNS as u64, "runs of the control");
        let tgid_pid = (u64::from(std::process::id()) << 32)
            | u64::from(nix::unistd::gettid().as_raw() as u32);
        check_eq!(
            bss.control_pid_tgid,
            tgid_pid,
            "the control's bpf_get_current_pid_tgid()"
        );
    }
    Ok(())
}

/// The run count and time of program `id` (`struct bpf_prog_info`).
fn run_stats(id: u32) -> Result<(u64, u64)> {
    libbpf_rs::query::ProgInfoIter::default()
        .find(|p| p.id == id)
        .map(|p| (p.run_cnt, p.run_time_ns))
        .with_context(|| format!("program {id} is not listed"))
}

/// Every kind of trampoline keeps `bpf_prog_run()`'s statistics (kernel.bpf_stats_enabled, or
/// `BPF_ENABLE_STATS` as here): with them off a program's run count stays 0, with them on
/// it counts every run and its time.
pub(super) fn run_stats_kept() -> Result<()> {
    Tramp::run_both(stats_kept)
}

fn stats_kept(tramp: Tramp) -> Result<()> {
    use std::os::fd::{FromRawFd, OwnedFd};

    let sysctl = std::fs::read_to_string("/proc/sys/kernel/bpf_stats_enabled")?;
    check_eq!(
        sysctl.trim(),
        "0",
        "kernel.bpf_stats_enabled (statistics must start off)"
    );
    let mut obj = MaybeUninit::uninit();
    let (skel, funcs) = setup(&mut obj)?;
    let fentry = attach(&skel.progs.count_fentry0, &funcs[..1], None)?;
    let fexit = attach(&skel.progs.count_fexit0, &funcs[1..2], None)?;
    let session = attach(&skel.progs.session0, &funcs[2..3], None)?;
    check_tramps(&funcs[..3], tramp, "fentry, fexit, session")?;
    let ids = [
        fentry.info()?.prog_id,
        fexit.info()?.prog_id,
        session.info()?.prog_id,
    ];
    for _ in 0..RUNS {
        trigger(&skel)?;
    }
    for id in ids {
        check_eq!(
            run_stats(id)?,
            (0, 0),
            "program {id}'s (runs, ns) with statistics off"
        );
    }
    {
        // SAFETY: no pointer is passed; the call returns a new fd or a negative errno.
        let fd = unsafe {
            libbpf_rs::libbpf_sys::bpf_enable_stats(libbpf_rs::libbpf_sys::BPF_STATS_RUN_TIME)
        };
        check!(
            fd >= 0,
            "BPF_ENABLE_STATS: {}",
            std::io::Error::from_raw_os_error(-fd)
        );
        // SAFETY: `fd` was just returned to this process and nothing else owns it.
        let _stats = unsafe { OwnedFd::from_raw_fd(fd) };
        for _ in 0..RUNS {
            trigger(&skel)?;
        }
    }
    for (id, kind) in ids.iter().zip(["fentry", "fexit", "session"]) {
        let what = format!("{kind} ({tramp:?} trampoline)");
        let (runs, ns) = run_stats(*id)?;
        // A session program runs twice a call: on entry and on exit.
        let per_call = if kind == "session" { 2 } else { 1 };
        check_eq!(
            runs,
            per_call * RUNS as u64,
            "{what} program {id}'s run count with statistics on"
        );
        check!(ns > 0, "{what} program {id}: {runs} runs took no time");
    }
    Ok(())
}
