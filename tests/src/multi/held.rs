// SPDX-License-Identifier: GPL-2.0

//! What a test takes from the kernel and must give back: the BPF programs loaded and the
//! modules' reference counts.

use std::collections::HashSet;

use anyhow::{bail, Context, Result};

use crate::check;

/// The ids of every loaded BPF program.
pub(crate) fn prog_ids() -> Vec<u32> {
    libbpf_rs::query::ProgInfoIter::default()
        .map(|p| p.id)
        .collect()
}

/// What a test may take from the kernel and must give back: the BPF programs loaded and
/// the named modules' reference counts, as they were.
pub(crate) struct Held {
    progs: HashSet<u32>,
    refcnts: Vec<(&'static str, u64)>,
}

impl Held {
    /// Now, for `modules`, once what earlier tests gave back has settled: every program
    /// they loaded freed (frees wait for grace periods, and so do the module references
    /// their links drop with them), then the programs and reference counts the same for
    /// 1 s; for at most 20 s.
    pub(crate) fn now(modules: &[&'static str]) -> Result<Self> {
        let start = std::time::Instant::now();
        loop {
            let left = progs_loaded_since(crate::harness::progs_before_tests());
            if left.is_empty() {
                break;
            }
            check!(
                start.elapsed() < std::time::Duration::from_secs(20),
                "programs of earlier tests still loaded after 20 s: {left:?}"
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        let read = || -> Result<Self> {
            let mut refcnts = Vec::new();
            for &m in modules {
                refcnts.push((m, module_refcnt(m)?));
            }
            Ok(Self {
                progs: prog_ids().into_iter().collect(),
                refcnts,
            })
        };
        let mut last = read()?;
        let mut still = 0;
        while still < 4 {
            check!(
                start.elapsed() < std::time::Duration::from_secs(20),
                "loaded programs and module reference counts still changing after 20 s"
            );
            std::thread::sleep(std::time::Duration::from_millis(250));
            let now = read()?;
            still = if now.progs == last.progs && now.refcnts == last.refcnts {
                still + 1
            } else {
                0
            };
            last = now;
        }
        Ok(last)
    }

    /// Runs `f`, then [`Held::released()`] against what was held before it.
    pub(crate) fn given_back(
        modules: &[&'static str],
        f: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        let held = Self::now(modules)?;
        f()?;
        held.released()
    }

    /// Waits until every program loaded since is freed and every module's reference
    /// count is back, for at most 20 s (links free their programs and drop their module
    /// references after grace periods); fails naming what is left: a leaked reference.
    pub(crate) fn released(&self) -> Result<()> {
        let start = std::time::Instant::now();
        loop {
            let progs = progs_loaded_since(&self.progs);
            let mut refcnts = Vec::new();
            for &(m, was) in &self.refcnts {
                let now = module_refcnt(m)?;
                if now != was {
                    refcnts.push(format!("{m} {now} ({was} before)"));
                }
            }
            if progs.is_empty() && refcnts.is_empty() {
                return Ok(());
            }
            if start.elapsed() > std::time::Duration::from_secs(20) {
                bail!(
                    "20 s after their fds were closed (leaked references): programs still \
                     loaded {progs:?}, module reference counts {refcnts:?}"
                );
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
}

/// The ids of the programs loaded now that are not in `known`.
fn progs_loaded_since(known: &HashSet<u32>) -> Vec<u32> {
    prog_ids()
        .into_iter()
        .filter(|i| !known.contains(i))
        .collect()
}

/// `/sys/module/<name>/refcnt`.
pub(crate) fn module_refcnt(name: &str) -> Result<u64> {
    let path = format!("/sys/module/{name}/refcnt");
    let s = std::fs::read_to_string(&path).with_context(|| path.clone())?;
    s.trim().parse().with_context(|| path)
}
