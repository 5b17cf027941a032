// SPDX-License-Identifier: GPL-2.0

//! `rkf profile`: on-CPU stacks sampled with a perf_event program and rkf_stack.
//!
//! A cpu-clock event on every online cpu runs user/bpf/profile.bpf.c, which calls
//! `bpf_rkf_get_stack_pe()` to write the interrupted task's kernel and user stacks straight
//! into a ring buffer record.  Here the records are symbolised with blazesym (kernel
//! frames through kallsyms, user frames through the process's mappings, while it still
//! runs) and counted as folded stacks, which inferno renders as a flame graph.

use std::{
    cell::RefCell,
    collections::{BTreeMap, HashMap},
    mem::MaybeUninit,
    os::fd::{AsRawFd, OwnedFd},
    path::Path,
    time::{Duration, Instant},
};

use anyhow::{bail, ensure, Context, Result};
use blazesym::{
    symbolize::{
        source::{Process, Source},
        Input, Symbolized, Symbolizer,
    },
    Pid,
};
use libbpf_rs::{Link, RingBufferBuilder};

use crate::{
    cpus,
    kallsyms::KernelSymbolizer,
    limits, modules,
    perf::{open_cpu_clock, Sampling, Target},
    skel::profile::ProfileSkelBuilder,
    skeleton,
};

/// What to sample.
#[derive(Clone, Debug)]
pub struct Options {
    /// Samples per second on each cpu.
    pub frequency: u64,
    /// How long to sample.
    pub duration: Duration,
    /// Only this process (all its threads); every task when `None`.
    pub pid: Option<u32>,
    /// Take kernel stacks.
    pub kernel: bool,
    /// Take user stacks.
    pub user: bool,
    /// Count the idle tasks too.
    pub include_idle: bool,
}

impl Options {
    /// Checks the options, saying what is wrong.
    pub fn validate(&self) -> Result<()> {
        limits::check_frequency(self.frequency).map_err(anyhow::Error::msg)?;
        limits::check_duration(self.duration).map_err(anyhow::Error::msg)?;
        ensure!(
            self.kernel || self.user,
            "nothing to sample: neither kernel nor user stacks"
        );
        if let Some(pid) = self.pid {
            ensure!(
                pid != 0 && Path::new("/proc").join(pid.to_string()).exists(),
                "no process {pid}"
            );
        }
        Ok(())
    }
}

/// `struct rkf_profile_sample` of profile.bpf.c, as the skeleton defines it.
type Sample = crate::skel::profile::types::rkf_profile_sample;

// SAFETY: the skeleton's `rkf_profile_sample` is a `repr(C)` struct of integers and arrays
// of integers, so every bit pattern of its size is a valid value.
unsafe impl plain::Plain for Sample {}

/// A ring buffer record as a sample; `None` if it is too short to be one.
fn parse_sample(data: &[u8]) -> Option<Sample> {
    let mut s = Sample::default();
    plain::copy_from_bytes(&mut s, data).ok()?;
    Some(s)
}

/// The frames of a stack that the kfunc returned `ret` bytes of, innermost first.
fn frames(stack: &[u64], ret: i32) -> &[u64] {
    let n = usize::try_from(ret).unwrap_or(0) / 8;
    &stack[..n.min(stack.len())]
}

/// A recorded profile: folded stacks and their sample counts.
#[derive(Debug, Default)]
pub struct Profile {
    /// `comm;outermost;...;innermost` to samples.
    pub stacks: BTreeMap<String, u64>,
    /// Samples received.
    pub samples: u64,
    /// Samples lost to a full ring buffer.
    pub dropped: u64,
    /// Stacks the kfunc could not take (negative return), kernel and user.
    pub stack_errors: u64,
    /// Cpus sampled.
    pub cpus: usize,
}

/// Symbolises addresses, caching names: kernel addresses once, user addresses per process.
struct Names {
    kernel_symbolizer: KernelSymbolizer,
    symbolizer: Symbolizer,
    kernel: HashMap<u64, String>,
    user: HashMap<(u32, u64), String>,
}

const UNKNOWN: &str = "[unknown]";

/// A frame name for a folded line: no `;`, which separates frames.
fn frame_name(s: &Symbolized<'_>) -> String {
    match s {
        Symbolized::Sym(sym) => sym.name.replace(';', ":"),
        Symbolized::Unknown(_) => UNKNOWN.to_string(),
    }
}

impl Names {
    fn new() -> Self {
        Self {
            kernel_symbolizer: KernelSymbolizer::new(),
            symbolizer: Symbolizer::new(),
            kernel: HashMap::new(),
            user: HashMap::new(),
        }
    }

    fn learn_kernel(&mut self, addrs: &[u64]) {
        let mut new: Vec<u64> = addrs
            .iter()
            .copied()
            .filter(|a| !self.kernel.contains_key(a))
            .collect();
        if new.is_empty() {
            return;
        }
        new.sort_unstable();
        new.dedup();
        let names: Vec<String> = match self.kernel_symbolizer.symbolize(&new) {
            Ok(frames) => frames
                .into_iter()
                .map(|f| f.map_or_else(|| UNKNOWN.to_string(), |f| f.name.replace(';', ":")))
                .collect(),
            Err(_) => vec![UNKNOWN.to_string(); new.len()],
        };
        self.kernel.extend(new.into_iter().zip(names));
    }

    fn learn_user(&mut self, tgid: u32, addrs: &[u64]) {
        let mut new: Vec<u64> = addrs
            .iter()
            .copied()
            .filter(|a| !self.user.contains_key(&(tgid, *a)))
            .collect();
        if new.is_empty() {
            return;
        }
        new.sort_unstable();
        new.dedup();
        let mut process = Process::new(Pid::from(tgid));
        process.debug_syms = false;
        // A process that has exited by now can no longer be symbolised.
        let names: Vec<String> = match self
            .symbolizer
            .symbolize(&Source::Process(process), Input::AbsAddr(&new))
        {
            Ok(syms) => syms.iter().map(frame_name).collect(),
            Err(_) => vec![UNKNOWN.to_string(); new.len()],
        };
        self.user
            .extend(new.into_iter().map(|a| (tgid, a)).zip(names));
    }

    /// The folded line of a sample: comm, then user frames, then kernel frames, each
    /// outermost first.
    fn fold(&mut self, s: &Sample) -> String {
        let kernel = frames(&s.kernel, s.kernel_ret);
        let user = frames(&s.user, s.user_ret);
        self.learn_kernel(kernel);
        self.learn_user(s.tgid, user);
        let comm: Vec<u8> = s
            .comm
            .iter()
            .map(|&c| c as u8)
            .take_while(|&b| b != 0)
            .collect();
        let comm = String::from_utf8_lossy(&comm).replace(';', ":");
        let mut line = comm;
        for a in user.iter().rev() {
            line.push(';');
            line.push_str(&self.user[&(s.tgid, *a)]);
        }
        for a in kernel.iter().rev() {
            line.push(';');
            line.push_str(&self.kernel[a]);
        }
        line
    }
}

/// Samples stacks as `opts` says, for `opts.duration`.
///
/// Needs the rkf_stack module, CAP_BPF and CAP_PERFMON.
pub fn record(opts: &Options) -> Result<Profile> {
    opts.validate()?;
    modules::require("rkf_stack")?;
    let mut obj = MaybeUninit::uninit();
    let skel = skeleton::load::<ProfileSkelBuilder>(&mut obj, "profile.bpf.c", |open| {
        let bss = open
            .maps
            .bss_data
            .as_deref_mut()
            .context("profile.bpf.c has no .bss")?;
        bss.target_tgid = opts.pid.unwrap_or(0);
        bss.want_kernel = opts.kernel.into();
        bss.want_user = opts.user.into();
        bss.include_idle = opts.include_idle.into();
        Ok(())
    })
    .context("the profile program (needs CAP_BPF and CAP_PERFMON)")?;

    let raw: RefCell<Vec<Sample>> = RefCell::new(Vec::new());
    let mut rb = RingBufferBuilder::new();
    rb.add(&skel.maps.samples, |data: &[u8]| {
        if let Some(s) = parse_sample(data) {
            raw.borrow_mut().push(s);
        }
        0
    })?;
    let rb = rb.build()?;

    // The kernel's symbols are read before sampling starts: under a slow kernel (KASAN,
    // TCG) reading /proc/kallsyms takes seconds, during which the ring buffer would fill.
    let mut names = Names::new();
    names
        .kernel_symbolizer
        .preload()
        .context("reading the kernel's symbols")?;

    let cpus = cpus::online()?;
    let mut events: Vec<(OwnedFd, Link)> = Vec::with_capacity(cpus.len());
    for &cpu in &cpus {
        let fd = open_cpu_clock(Target::Cpu(cpu), Sampling::Frequency(opts.frequency), 0)?;
        let link = skel
            .progs
            .profile
            .attach_perf_event(fd.as_raw_fd())
            .with_context(|| format!("attaching the profile program to cpu {cpu}"))?;
        events.push((fd, link));
    }

    let mut profile = Profile {
        cpus: cpus.len(),
        ..Profile::default()
    };
    let mut take = |profile: &mut Profile| {
        for s in raw.borrow_mut().drain(..) {
            profile.samples += 1;
            profile.stack_errors += u64::from(s.kernel_ret < 0) + u64::from(s.user_ret < 0);
            *profile.stacks.entry(names.fold(&s)).or_default() += 1;
        }
    };
    let end = Instant::now() + opts.duration;
    while let Some(left) = end.checked_duration_since(Instant::now()) {
        rb.poll(left.min(Duration::from_millis(100)))?;
        // User frames are symbolised now, while their processes run.
        take(&mut profile);
    }
    // Stop sampling, then drain what is left.
    drop(events);
    rb.consume()?;
    take(&mut profile);
    profile.dropped = skel
        .maps
        .bss_data
        .as_deref()
        .context("profile.bpf.c has no .bss")?
        .dropped;
    Ok(profile)
}

impl Profile {
    /// The folded stacks (the `stackcollapse` format), one `stack count` per line.
    pub fn folded(&self) -> String {
        self.stacks
            .iter()
            .map(|(stack, n)| format!("{stack} {n}\n"))
            .collect()
    }

    /// A flame graph of the profile, as SVG, rendered by inferno.
    pub fn flamegraph(&self, title: &str) -> Result<Vec<u8>> {
        if self.stacks.is_empty() {
            bail!("no samples: nothing to draw (is the process running on a cpu?)");
        }
        let folded = self.folded();
        let mut opts = inferno::flamegraph::Options::default();
        opts.title = title.to_string();
        opts.count_name = "samples".to_string();
        let mut svg = Vec::new();
        inferno::flamegraph::from_lines(&mut opts, folded.lines(), &mut svg)
            .context("rendering the flame graph")?;
        Ok(svg)
    }
}
