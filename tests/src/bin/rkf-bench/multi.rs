// SPDX-License-Identifier: GPL-2.0

//! rkf_multi against the kernel's ways of putting one program on many functions.

use std::{
    mem::MaybeUninit,
    os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd},
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};
use libbpf_rs::libbpf_sys as sys;
use nix::{
    sys::resource::{setrlimit, Resource},
    unistd::{getpgid, gettid},
};
use rkf::{
    multi::{self, Func, Link},
    skeleton,
};

use crate::{
    kmem,
    skel::bench_multi::{types::bss as BenchMultiBss, BenchMultiSkel, BenchMultiSkelBuilder},
    upstream::{empty_tracing_prog, tracing_multi_link, TRACE_FENTRY_MULTI},
};

/// getpgid() calls per timed loop.
const CALLS: u64 = 20_000;
/// Timed loops per per-call figure, which is the least of them ([`getpgid_loop()`]).
const LOOPS: u64 = 5;

/// A BPF_LINK_CREATE of prog `fd` with no options: attaches a fentry program.
fn link_create(fd: &OwnedFd, attach_type: u32) -> Result<OwnedFd> {
    // SAFETY: a program fd; NULL options.
    let r = unsafe { sys::bpf_link_create(fd.as_raw_fd(), 0, attach_type, std::ptr::null()) };
    if r < 0 {
        bail!("BPF_LINK_CREATE: {}", std::io::Error::from_raw_os_error(-r));
    }
    // SAFETY: a new fd.
    Ok(unsafe { OwnedFd::from_raw_fd(r) })
}

/// Attach time, detach time and memory per function of one method on `n` functions.
struct Cost {
    attach: Duration,
    detach: Duration,
    /// What the kernel holds for the attached method ([`kmem::between()`] of settled
    /// readings), per function.
    bytes_per_func: i64,
    /// What it had allocated when the attach returned, per function: with what the
    /// attach freed after grace periods (old copies of ftrace's hashes, for example)
    /// still there.
    bytes_at_attach: i64,
    /// Of `bytes_per_func`, the executable text asked for, per function.
    text_per_func: u64,
}

/// The kernel's allocations before an attach, when it returned, and once they settled
/// with the method attached.
struct Readings {
    before: (u64, kmem::Text),
    at_attach: (u64, kmem::Text),
    attached: (u64, kmem::Text),
}

impl Cost {
    fn new(attach: Duration, detach: Duration, r: &Readings, n: usize) -> Self {
        let (bytes, text) = kmem::between(r.before, r.attached);
        let (at_attach, _) = kmem::between(r.before, r.at_attach);
        Cost {
            attach,
            detach,
            bytes_per_func: bytes / n as i64,
            bytes_at_attach: at_attach / n as i64,
            text_per_func: text / n as u64,
        }
    }
}

/// bench_multi.bpf.c's counts of executable memory, read now.
fn text(skel: &BenchMultiSkel<'_>) -> Result<kmem::Text> {
    use libbpf_rs::MapCore;
    // This task, which makes every attach, is inside no execmem_alloc() now: a key of it
    // left in the map (a return the kretprobe missed) would count its later vmalloc
    // areas as text.
    let task = (u64::from(std::process::id()) << 32) | u64::from(gettid().as_raw() as u32);
    if skel
        .maps
        .in_text_alloc
        .lookup(&task.to_ne_bytes(), libbpf_rs::MapFlags::ANY)?
        .is_some()
    {
        bail!("the kretprobe of execmem_alloc() missed a return of this task: its text counts are wrong");
    }
    let bss: *const BenchMultiBss = skel.maps.bss_data.as_deref().context("no .bss")?;
    // SAFETY: `bss` points to the program's .bss, mapped for as long as `skel` lives; the
    // probes write these fields meanwhile, so they are read through the pointer, each
    // afresh, with no reference to them held.
    let (areas, asked) = unsafe {
        (
            std::ptr::read_volatile(&raw const (*bss).exec_vmalloc_bytes),
            std::ptr::read_volatile(&raw const (*bss).text_bytes),
        )
    };
    Ok(kmem::Text { areas, asked })
}

/// A reading of the kernel's allocations with the executable memory counts: once
/// settled, or now.
fn reading(skel: &BenchMultiSkel<'_>, settle: bool) -> Result<(u64, kmem::Text)> {
    let bytes = if settle {
        kmem::settled()?
    } else {
        kmem::allocated()?
    };
    Ok((bytes, text(skel)?))
}

/// Times the attach and the detach (dropping what `attach` returned) of a method on `n`
/// functions, and takes the kernel's allocations before (once settled: the frees of the
/// previous method after grace periods done), when the attach returned, and once settled
/// again with the method attached: what it holds, without what its attach freed after
/// grace periods (rkf_multi's batched ftrace updates each leave a copy of ftrace's
/// `direct_functions` hash to an RCU tasks grace period).
fn measure<T>(
    skel: &BenchMultiSkel<'_>,
    n: usize,
    attach: impl FnOnce() -> Result<T>,
) -> Result<Cost> {
    let before = reading(skel, true)?;
    let t0 = Instant::now();
    let held = attach()?;
    let attach = t0.elapsed();
    let at_attach = reading(skel, false)?;
    let attached = reading(skel, true)?;
    let t1 = Instant::now();
    drop(held);
    let detach = t1.elapsed();
    let r = Readings {
        before,
        at_attach,
        attached,
    };
    Ok(Cost::new(attach, detach, &r, n))
}

/// Single fentry links, one for each of `progs`: [`measure()`] with the links made and
/// closed 100 at a time, a short sleep between two hundreds left out of the times.
/// 1,000 links back to back kept this task in the kernel for 18 s of guest time without
/// a voluntary switch, holding back an RCU tasks grace period (which the VM runner
/// fails on); the sleep reports the quiescent state.
fn measure_single_links(skel: &BenchMultiSkel<'_>, progs: &[OwnedFd]) -> Result<Cost> {
    const AT_ONCE: usize = 100;
    let pause = || std::thread::sleep(Duration::from_millis(1));
    let before = reading(skel, true)?;
    let (mut attach, mut detach) = (Duration::ZERO, Duration::ZERO);
    let mut links = Vec::with_capacity(progs.len());
    for chunk in progs.chunks(AT_ONCE) {
        let t = Instant::now();
        for p in chunk {
            links.push(link_create(p, sys::BPF_TRACE_FENTRY)?);
        }
        attach += t.elapsed();
        pause();
    }
    let at_attach = reading(skel, false)?;
    let attached = reading(skel, true)?;
    while !links.is_empty() {
        let rest = links.split_off(links.len().saturating_sub(AT_ONCE));
        let t = Instant::now();
        drop(rest);
        detach += t.elapsed();
        pause();
    }
    let r = Readings {
        before,
        at_attach,
        attached,
    };
    Ok(Cost::new(attach, detach, &r, progs.len()))
}

/// The cost per call that the loop `d` took above the loop `base`.
fn per_call(d: Duration, base: Duration) -> f64 {
    (d.as_nanos() as f64 - base.as_nanos() as f64) / CALLS as f64
}

/// `CALLS` getpgid() calls, timed `LOOPS` times: the least of the times.  Under
/// -icount every vCPU's instructions advance the clock, so work on the other vCPU
/// meanwhile (rkf_multi frees old tables and trampolines after RCU and RCU tasks grace
/// periods; the guest has its own work early after boot) adds to a loop and never takes
/// from it: the least time is the loop's own, once the other vCPU was idle through one
/// of them.  Each loop first sleeps a little, so that such work can finish first.  Where
/// the median loop took more than 10% longer than the least, which then may not be free
/// of such work either, it says so on stderr (the VM's output, beside the table).
fn getpgid_loop() -> Duration {
    let mut times: Vec<Duration> = (0..LOOPS)
        .map(|i| {
            std::thread::sleep(Duration::from_millis(if i == 0 { 300 } else { 100 }));
            let t = Instant::now();
            for _ in 0..CALLS {
                // The result is known: this process's group.
                let _ = getpgid(None);
            }
            t.elapsed()
        })
        .collect();
    times.sort_unstable();
    let (least, median) = (times[0], times[times.len() / 2]);
    if median.as_nanos() * 10 > least.as_nanos() * 11 {
        eprintln!(
            "rkf-bench: {LOOPS} loops of {CALLS} getpgid() calls took {times:?}: the median is more than 10% above the least, which another vCPU's work may have lengthened too"
        );
    }
    least
}

fn open(obj: &mut MaybeUninit<libbpf_rs::OpenObject>) -> Result<BenchMultiSkel<'_>> {
    rkf::modules::require("rkf_multi")?;
    let pack_size = pack_size()?;
    skeleton::load::<BenchMultiSkelBuilder>(obj, "bench_multi.bpf.c", |o| {
        o.maps.bss_data.as_deref_mut().context("no .bss")?.pack_size = pack_size;
        Ok(())
    })
}

/// `BPF_PROG_PACK_SIZE` (kernel/bpf/core.c): 2 MiB for each possible NUMA node.
fn pack_size() -> Result<u64> {
    let nodes = match std::fs::read_to_string("/sys/devices/system/node/possible") {
        Ok(list) => rkf::cpus::parse_cpu_list(list.trim())?.len() as u64,
        // No NUMA: one node.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => 1,
        Err(e) => return Err(e).context("reading /sys/devices/system/node/possible"),
    };
    Ok((2 << 20) * nodes)
}

/// The program `prog` of a link on `__x64_sys_getpgid` alone runs on each of the
/// `LOOPS * CALLS` calls of one more [`getpgid_loop()`], once (twice for a session: on
/// entry and on exit), and no run was missed since `timed` (its statistics before the
/// loop the row timed): a row measures the program's run, not a skip.  The link counts
/// nothing (as rkf's tools attach them), so the program's own statistics count the
/// runs, with the kernel's statistics on for this loop alone (`BPF_ENABLE_STATS`), not
/// for the loop the row timed; its misses are counted always.
fn ran_every_call(name: &str, prog: &impl AsFd, l: &Link, timed: multi::ProgStats) -> Result<()> {
    let info = l.info()?;
    let calls = LOOPS * CALLS;
    let runs = if info.kind == rkf_core::abi::Kind::Session {
        2 * calls
    } else {
        calls
    };
    // SAFETY: no pointer arguments.
    let fd = unsafe { sys::bpf_enable_stats(sys::BPF_STATS_RUN_TIME) };
    if fd < 0 {
        bail!(
            "BPF_ENABLE_STATS: {}",
            std::io::Error::from_raw_os_error(-fd)
        );
    }
    // SAFETY: a new fd that nothing else owns; the statistics stay on while it is open.
    let stats_on = unsafe { OwnedFd::from_raw_fd(fd) };
    let before = multi::prog_stats(prog)?;
    getpgid_loop();
    let after = multi::prog_stats(prog)?;
    drop(stats_on);
    let got = (after.runs - before.runs, after.misses - timed.misses);
    if got != (runs, 0) {
        bail!(
            "{name}: the program must run {runs} times in {calls} calls, with no miss in these and the timed ones; its statistics say {got:?} (runs, misses)"
        );
    }
    Ok(())
}

/// The per-call table alone.
pub(crate) fn per_call_only() -> Result<()> {
    let mut obj = MaybeUninit::uninit();
    let skel = open(&mut obj)?;
    per_call_table(&skel, &getpgid_target()?)
}

pub(crate) fn bench() -> Result<()> {
    // 1,000 single fentry links are 2,000 fds (programs and links).
    setrlimit(Resource::RLIMIT_NOFILE, 8192, 8192).context("setrlimit(RLIMIT_NOFILE, 8192)")?;
    let mut obj = MaybeUninit::uninit();
    let skel = open(&mut obj)?;

    // Executable memory counted from here on (kmem.rs).
    // The return probe first: an execmem_alloc() that began before it would leave its
    // task in the map.
    let _text = [
        &skel.progs.text_alloc_done,
        &skel.progs.text_alloc,
        &skel.progs.exec_vmalloc,
        &skel.progs.bpf_text,
    ]
    .map(|p| {
        p.attach()
            .with_context(|| format!("attaching {}", p.name().to_string_lossy()))
    })
    .into_iter()
    .collect::<Result<Vec<_>>>()?;

    // Every function both rkf and the kernel's links can take.
    let pool = multi::resolve(&["*"])?;
    let funcs: Vec<Func> = pool.funcs;
    println!(
        "rkf_multi: attach and detach, against the kernel's ways (same boot, -icount shift=0)"
    );
    println!(
        "({} vmlinux functions can be attached; {} left out)",
        funcs.len(),
        pool.skipped.values().map(Vec::len).sum::<usize>()
    );
    println!();
    println!(
        "| functions | method | attach (ms) | detach (ms) | memory per function (bytes) | of which text | when the attach returned |"
    );
    println!(
        "|----------:|--------|------------:|------------:|----------------------------:|--------------:|-------------------------:|"
    );
    warm_up(&skel, &funcs[..100.min(funcs.len())])?;
    let mut costs = std::collections::HashMap::new();
    for n in [100usize, 1000, 10_000, funcs.len()] {
        if n > funcs.len() {
            println!(
                "| {n} | (only {} functions available) | | | | | |",
                funcs.len()
            );
            continue;
        }
        let set = &funcs[..n];
        let mut row = |name: &'static str, c: Result<Cost>| match c {
            Ok(c) => {
                println!(
                    "| {n} | {name} | {:.1} | {:.1} | {} | {} | {} |",
                    c.attach.as_secs_f64() * 1e3,
                    c.detach.as_secs_f64() * 1e3,
                    c.bytes_per_func,
                    c.text_per_func,
                    c.bytes_at_attach
                );
                costs.insert((n, name), c);
            }
            Err(e) => println!("| {n} | {name} | failed: {e:#} | | | | |"),
        };
        row(
            "rkf_multi",
            measure(&skel, n, || {
                Ok(Link::attach(&skel.progs.rkf_fentry, set, None)?)
            }),
        );
        let ids: Vec<u32> = set.iter().map(|f| f.btf_id).collect();
        row(
            "tracing_multi",
            empty_tracing_prog(TRACE_FENTRY_MULTI, 0)
                .and_then(|p| measure(&skel, n, || tracing_multi_link(&p, &ids))),
        );
        let syms: Vec<String> = set.iter().map(|f| f.name.clone()).collect();
        row(
            "kprobe_multi",
            measure(&skel, n, || {
                Ok(skel
                    .progs
                    .kprobe_multi
                    .attach_kprobe_multi(false, syms.clone())?)
            }),
        );
        if n <= 1000 {
            // One program per function, loaded beforehand: only the links are timed.
            let progs = set
                .iter()
                .map(|f| empty_tracing_prog(sys::BPF_TRACE_FENTRY, f.btf_id))
                .collect::<Result<Vec<_>>>();
            row(
                "single fentry links",
                progs.and_then(|progs| measure_single_links(&skel, &progs)),
            );
        }
    }
    println!();
    let both = |c: &Cost| (c.attach + c.detach).as_secs_f64() * 1e3;
    if let (Some(r), Some(k)) = (
        costs.get(&(10_000, "rkf_multi")),
        costs.get(&(10_000, "kprobe_multi")),
    ) {
        println!(
            "attach + detach of 10000 functions: rkf_multi {:.1} ms, kprobe_multi {:.1} ms (goal: rkf_multi faster)",
            both(r),
            both(k)
        );
    }
    for n in [10_000, funcs.len()] {
        if let Some(r) = costs.get(&(n, "rkf_multi")) {
            println!(
                "rkf_multi memory per function at {n} functions: {} bytes (goal: at most 128)",
                r.bytes_per_func
            );
        }
    }
    println!();

    // The frees of the table's last detach (43,506 functions' worth, after grace
    // periods) done before the loops begin.
    kmem::settled()?;
    let target = getpgid_target()?;
    per_call_table(&skel, &target)?;
    per_call_with_others(&skel, &funcs, &target)
}

/// One untimed attach and detach of each multi-function method on `set`, before the
/// table: what the first attach of each allocates for good (rkf_multi's ftrace_ops and
/// its anchor's site, the first time ftrace hooks a site, workers of the workqueues that
/// free after grace periods) is then not counted in the first row, which is a few pages
/// of meminfo's and would read as hundreds of bytes per function.
fn warm_up(skel: &BenchMultiSkel<'_>, set: &[Func]) -> Result<()> {
    drop(Link::attach(&skel.progs.rkf_fentry, set, None)?);
    let ids: Vec<u32> = set.iter().map(|f| f.btf_id).collect();
    let prog = empty_tracing_prog(TRACE_FENTRY_MULTI, 0)?;
    drop(tracing_multi_link(&prog, &ids)?);
    let syms: Vec<String> = set.iter().map(|f| f.name.clone()).collect();
    drop(skel.progs.kprobe_multi.attach_kprobe_multi(false, syms)?);
    Ok(())
}

/// The traced function of the per-call tables.
fn getpgid_target() -> Result<Vec<Func>> {
    Ok(multi::resolve(&["__x64_sys_getpgid"])?.funcs)
}

/// The cost of each way of tracing one call of `getpgid()`.
fn per_call_table(skel: &BenchMultiSkel<'_>, target: &[Func]) -> Result<()> {
    println!();
    println!("Per call of getpgid() (__x64_sys_getpgid traced; the least of {LOOPS} loops of {CALLS} calls; ns = instructions):");
    println!();
    let base = getpgid_loop();
    let per = |d: Duration| per_call(d, base);
    let single = {
        let _l = skel.progs.single_fentry.attach().context("single fentry")?;
        per(getpgid_loop())
    };
    let single_fexit = {
        let _l = skel.progs.single_fexit.attach().context("single fexit")?;
        per(getpgid_loop())
    };
    let mut rows: Vec<(&str, f64)> =
        vec![("single fentry", single), ("single fexit", single_fexit)];
    for (name, prog) in [
        ("rkf_multi fentry", &skel.progs.rkf_fentry),
        ("rkf_multi fexit", &skel.progs.rkf_fexit),
    ] {
        let l = Link::attach(prog, target, None)?;
        let timed = multi::prog_stats(prog)?;
        rows.push((name, per(getpgid_loop())));
        ran_every_call(name, prog, &l, timed)?;
    }
    {
        let p = empty_tracing_prog(TRACE_FENTRY_MULTI, 0)?;
        let _l = tracing_multi_link(&p, &[target[0].btf_id])?;
        rows.push(("tracing_multi", per(getpgid_loop())));
    }
    {
        let _l = skel
            .progs
            .kprobe_multi
            .attach_kprobe_multi(false, vec!["__x64_sys_getpgid"])?;
        rows.push(("kprobe_multi", per(getpgid_loop())));
    }
    println!("| method | overhead per call (ns) | vs single fentry |");
    println!("|--------|-----------------------:|-----------------:|");
    for (name, ns) in &rows {
        println!("| {name} | {ns:.0} | {:.2}x |", ns / single);
    }
    let of = |name: &str| rows.iter().find(|r| r.0 == name).map_or(f64::NAN, |r| r.1);
    println!();
    println!(
        "rkf_multi fentry vs single fentry: {:.2}x (goal: at most 1.10x); rkf_multi fexit vs single fexit: {:.2}x; kprobe_multi vs rkf_multi fentry: {:.2}x (goal: at least 1.5x)",
        of("rkf_multi fentry") / single,
        of("rkf_multi fexit") / single_fexit,
        of("kprobe_multi") / of("rkf_multi fentry")
    );
    sleepable_table(skel, target)?;
    latency_table(skel, target)
}

/// Sleepable programs (fentry.s, fexit.s) on getpgid(): the kernel's own trampoline for
/// one, against an rkf_multi link, whose generated trampoline counts each call in flight
/// and runs the program under RCU tasks trace.
fn sleepable_table(skel: &BenchMultiSkel<'_>, target: &[Func]) -> Result<()> {
    println!();
    println!(
        "Sleepable programs, per call of getpgid() (__x64_sys_getpgid traced; the least of {LOOPS} loops of {CALLS} calls; \
         ns = instructions):"
    );
    println!();
    let base = getpgid_loop();
    let per = |d: Duration| per_call(d, base);
    let single = {
        let _l = skel
            .progs
            .single_fentry_s
            .attach()
            .context("single fentry.s")?;
        per(getpgid_loop())
    };
    let single_fexit = {
        let _l = skel
            .progs
            .single_fexit_s
            .attach()
            .context("single fexit.s")?;
        per(getpgid_loop())
    };
    let mut rkf = Vec::new();
    for (name, prog) in [
        ("rkf_multi fentry.s", &skel.progs.rkf_fentry_s),
        ("rkf_multi fexit.s", &skel.progs.rkf_fexit_s),
    ] {
        let l = Link::attach(prog, target, None)?;
        let timed = multi::prog_stats(prog)?;
        rkf.push(per(getpgid_loop()));
        ran_every_call(name, prog, &l, timed)?;
    }
    println!("| method | overhead per call (ns) | vs the single link of its kind |");
    println!("|--------|-----------------------:|-------------------------------:|");
    for (name, ns, of) in [
        ("single fentry.s", single, single),
        ("rkf_multi fentry.s", rkf[0], single),
        ("single fexit.s", single_fexit, single_fexit),
        ("rkf_multi fexit.s", rkf[1], single_fexit),
    ] {
        println!("| {name} | {ns:.0} | {:.2}x |", ns / of);
    }
    println!();
    println!(
        "rkf_multi fentry.s vs single fentry.s: {:.2}x; \
         rkf_multi fexit.s vs single fexit.s: {:.2}x",
        rkf[0] / single,
        rkf[1] / single_fexit
    );
    Ok(())
}

/// rkf funclatency's measurement per call: an rkf_multi session, a kprobe_multi
/// session and the kernel's fsession on getpgid() each time every call into a
/// histogram; each must count exactly the calls of the loop.
fn latency_table(skel: &BenchMultiSkel<'_>, target: &[Func]) -> Result<()> {
    use libbpf_rs::MapCore;

    println!();
    println!(
        "rkf funclatency's measurement per call of getpgid() (a session program timing each call into a log2 histogram; the least of {LOOPS} loops of {CALLS} calls; ns = instructions):"
    );
    println!();
    let base = getpgid_loop();
    let key = target[0].addr.to_ne_bytes();
    let zero = vec![0u8; std::mem::size_of::<crate::skel::bench_multi::types::lat_hist>()];
    let hists = &skel.maps.lat_hists;
    let mut rows: Vec<(&str, f64)> = Vec::new();
    // The histogram counted every call of the timed loops, once each.
    let counted_every_call = |name: &str| -> Result<()> {
        let h = hists
            .lookup(&key, libbpf_rs::MapFlags::ANY)?
            .context("the histogram of getpgid()")?;
        // struct lat_hist: 32 slots, then count.
        let count = u64::from_ne_bytes(h[32 * 8..33 * 8].try_into()?);
        anyhow::ensure!(
            count == LOOPS * CALLS,
            "{name}: the histogram counts {count} calls of getpgid(), the loops made {}",
            LOOPS * CALLS
        );
        Ok(())
    };
    for name in ["rkf_multi fsession", "kprobe.session", "single fsession"] {
        hists.update(&key, &zero, libbpf_rs::MapFlags::ANY)?;
        let ns = match name {
            "rkf_multi fsession" => {
                let l = Link::attach(&skel.progs.rkf_latency, target, None)?;
                let timed = multi::prog_stats(&skel.progs.rkf_latency)?;
                let ns = per_call(getpgid_loop(), base);
                counted_every_call(name)?;
                // One more loop, with statistics on: the histogram counts it too.
                ran_every_call(name, &skel.progs.rkf_latency, &l, timed)?;
                ns
            }
            "kprobe.session" => {
                let _l = skel.progs.kprobe_latency.attach().context(name)?;
                let ns = per_call(getpgid_loop(), base);
                counted_every_call(name)?;
                ns
            }
            _ => {
                let _l = skel.progs.single_latency.attach().context(name)?;
                let ns = per_call(getpgid_loop(), base);
                counted_every_call(name)?;
                ns
            }
        };
        rows.push((name, ns));
    }
    let unknown = skel
        .maps
        .bss_data
        .as_deref()
        .context("no .bss")?
        .lat_unknown;
    anyhow::ensure!(
        unknown == 0,
        "exits of a function without a histogram: {unknown}"
    );
    println!("| method | overhead per call (ns) | vs rkf_multi fsession |");
    println!("|--------|-----------------------:|----------------------:|");
    let rkf = rows[0].1;
    for (name, ns) in &rows {
        println!("| {name} | {ns:.0} | {:.2}x |", ns / rkf);
    }
    Ok(())
}

/// The same hit with many other functions attached.
fn per_call_with_others(skel: &BenchMultiSkel<'_>, funcs: &[Func], target: &[Func]) -> Result<()> {
    // The same hit with many other functions attached: what the lookup of the traced
    // function costs as the set grows.  The others are attached first and the loop
    // timed as the baseline, so that calls to them do not count.
    println!();
    println!("Per call of getpgid() with other functions attached (ns = instructions):");
    println!();
    println!(
        "| functions attached besides | rkf_multi fentry (ns) | rkf_multi fexit (ns) | kprobe_multi (ns) |"
    );
    println!(
        "|---------------------------:|----------------------:|---------------------:|------------------:|"
    );
    let others: Vec<Func> = funcs
        .iter()
        .filter(|f| f.name != "__x64_sys_getpgid")
        .cloned()
        .collect();
    for n in [1000usize, 10_000] {
        if n > others.len() {
            continue;
        }
        let set = &others[..n];
        let rkf = |prog| -> Result<f64> {
            let _others = Link::attach(prog, set, None)?;
            let base = getpgid_loop();
            let _l = Link::attach(prog, target, None)?;
            Ok(per_call(getpgid_loop(), base))
        };
        let (rkf_fentry, rkf_fexit) = (rkf(&skel.progs.rkf_fentry)?, rkf(&skel.progs.rkf_fexit)?);
        let kprobe = {
            let syms: Vec<String> = set.iter().map(|f| f.name.clone()).collect();
            let _others = skel.progs.kprobe_multi.attach_kprobe_multi(false, syms)?;
            let base = getpgid_loop();
            let _l = skel
                .progs
                .kprobe_multi
                .attach_kprobe_multi(false, vec!["__x64_sys_getpgid"])?;
            per_call(getpgid_loop(), base)
        };
        println!("| {n} | {rkf_fentry:.0} | {rkf_fexit:.0} | {kprobe:.0} |");
    }
    Ok(())
}
