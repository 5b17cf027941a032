// SPDX-License-Identifier: GPL-2.0

//! The patterns that name functions: `resolve()` of globs and names, and `rkf funccount`
//! over them, through the library.

use anyhow::{Context, Result};

use crate::{check, check_eq, diag};
use rkf::{funccount, kallsyms::Kallsyms, modules, multi};

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
pub(super) fn funccount_glob() -> Result<()> {
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
pub(super) fn resolve_patterns() -> Result<()> {
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
