// SPDX-License-Identifier: GPL-2.0

//! rkf_multi from user space: choosing the functions, attaching links, reading them back.
//!
//! A program for rkf_multi is a TRACING fentry or fexit program loaded against the
//! module's `rkf_multi_tmpl6()` (`RKF_MULTI_FENTRY`/`RKF_MULTI_FEXIT` in rkf.bpf.h), or
//! against `rkf_multi_tmpl12()` for functions of up to twelve arguments
//! (`RKF_MULTI_FENTRY12`/`RKF_MULTI_FEXIT12`), with auto-attach off.  [`resolve()`] (or
//! [`resolve_wide()`]) turns names and globs into functions, skipping (with a reason) those
//! the trampoline cannot trace honestly; [`Link::attach()`] attaches the
//! program to them through `/dev/rkf_multi`; dropping the [`Link`] detaches it.

use std::{
    collections::{BTreeMap, HashMap},
    fmt,
    fs::{File, OpenOptions},
    os::fd::{AsFd, AsRawFd, OwnedFd},
    path::PathBuf,
};

use anyhow::{bail, Context, Result};
use rkf_core::{
    abi,
    multi::{self as rules, Reason},
};

use crate::{btf::KernelBtf, kallsyms::Kallsyms};

/// The device.
pub const DEVICE: &str = "/dev/rkf_multi";

pub use rkf_core::abi::{AttachRequest, FuncInfo};

/// A function to attach to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Func {
    /// Its name.
    pub name: String,
    /// The module it is in, or `None` for vmlinux.
    pub module: Option<String>,
    /// Its BTF id, in vmlinux's BTF or its module's.
    pub btf_id: u32,
    /// Its address.
    pub addr: u64,
    /// Its argument count.
    pub nr_args: u32,
}

/// A kernel function as ftrace and kallsyms name it: `name` for vmlinux, `name [module]`
/// for a module's.
pub fn qualified_name(name: &str, module: Option<&str>) -> String {
    match module {
        Some(m) => format!("{name} [{m}]"),
        None => name.to_string(),
    }
}

impl Func {
    /// [`qualified_name()`] of this function.
    pub fn qualified_name(&self) -> String {
        qualified_name(&self.name, self.module.as_deref())
    }
}

/// Why a function matched by a glob was left out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Skip {
    /// What rkf_multi would refuse.
    Rule(Reason),
    /// Two kernel functions have the name (static functions of different files), in
    /// /proc/kallsyms or in available_filter_functions: the address is ambiguous.
    Ambiguous,
    /// In BTF but not in /proc/kallsyms.
    NoSymbol,
}

impl fmt::Display for Skip {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Rule(r) => f.write_str(r.describe()),
            Self::Ambiguous => f.write_str(
                "the name is not unique (in /proc/kallsyms or available_filter_functions)",
            ),
            Self::NoSymbol => f.write_str("not in /proc/kallsyms"),
        }
    }
}

/// Functions chosen by [`resolve()`], and those left out.
#[derive(Debug, Default)]
pub struct Resolved {
    /// The functions, in BTF order.
    pub funcs: Vec<Func>,
    /// Left out, by reason.
    pub skipped: BTreeMap<Skip, Vec<String>>,
}

impl Resolved {
    /// How many were left out.
    pub fn nr_skipped(&self) -> usize {
        self.skipped.values().map(Vec::len).sum()
    }

    /// The entries of a map with one for each function (`max_entries`).
    pub fn map_entries(&self) -> Result<u32> {
        u32::try_from(self.funcs.len())
            .with_context(|| format!("{} functions are too many for a map", self.funcs.len()))
    }
}

/// The tracefs directory: where the kernel mounts it (/sys/kernel/tracing), or its old
/// place under debugfs.
pub fn tracefs() -> Result<PathBuf> {
    ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"]
        .iter()
        .map(PathBuf::from)
        .find(|d| d.join("current_tracer").exists())
        .context("no tracefs (mount it: mount -t tracefs nodev /sys/kernel/tracing)")
}

/// The functions that another direct trampoline holds (an in-kernel BPF trampoline,
/// tracing_multi's), as ftrace's `enabled_functions` shows them, each (`name`, or
/// `name [module]`) with the holder's symbol; rkf_multi's own trampolines are left out.
pub fn direct_holders() -> Result<HashMap<String, String>> {
    Ok(holders(direct_callers()?))
}

/// Every function with a direct caller, rkf_multi's own trampolines (`rkf_multi_tramp`,
/// the shared one; `rkf_multi_image_<n>`, generated) included, each with the caller's
/// symbol ([`parse_direct_callers()`], its ends resolved by [`resolve_ends()`]).
///
/// The symbol an end is given by can be freed between the read of `enabled_functions` and
/// that of `/proc/kallsyms` (an image retired after its grace period, just below the one
/// that follows it): then `enabled_functions` is read again, and again while it changes
/// ([`DIRECT_CALLER_READS`] reads at most), until every end resolves.  A symbol that is
/// missing from kallsyms for good (BPF symbols are left out with
/// `net.core.bpf_jit_kallsyms=0` or JIT hardening) leaves its end as it is, at the cost of
/// one more read.
pub fn direct_callers() -> Result<HashMap<String, String>> {
    let (mut text, mut reads) = (enabled_functions()?, 1);
    loop {
        let mut callers = parse_direct_callers(&text);
        let resolved = !callers.values().any(|c| c.contains('+'))
            || resolve_ends(&mut callers, &Kallsyms::load()?) == 0;
        if resolved || reads == DIRECT_CALLER_READS {
            return Ok(callers);
        }
        let again = enabled_functions()?;
        reads += 1;
        if again == text {
            return Ok(callers);
        }
        text = again;
    }
}

/// The most reads of `enabled_functions` one [`direct_callers()`] makes.
pub const DIRECT_CALLER_READS: usize = 10;

/// The text of ftrace's `enabled_functions`: every function ftrace has hooked, a line
/// each (`name`, or `name [module]`, then its ops count and flags), and under a function
/// with a direct caller a tab-indented `direct-->` line naming it
/// ([`parse_direct_calls()`]).
pub fn enabled_functions() -> Result<String> {
    let path = tracefs()?.join("enabled_functions");
    std::fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))
}

/// The direct callers of [`direct_callers()`] that are not rkf_multi's.
pub fn holders(mut callers: HashMap<String, String>) -> HashMap<String, String> {
    callers.retain(|_, sym| !sym.starts_with("rkf_multi_") || sym.contains('+'));
    callers
}

/// A function's direct call, as its `direct-->` (or `direct(jmp)-->`) line of
/// `enabled_functions` names the target: `symbol+offset/size` (`%pS`), or an address
/// where kallsyms has no symbol.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DirectCall {
    /// The symbol `%pS` named the target by (the one before it, if the target is its end:
    /// [`DirectCall::at_end()`]), or the target's address (`0x...`) where it named none.
    pub sym: String,
    /// How far into `sym` the target is, and the size of `sym`; `None` for an address,
    /// and for a line whose `+offset/size` is not two hexadecimal numbers (`0x...`).
    pub place: Option<(u64, u64)>,
    /// Whether ftrace jumps to the target (`direct(jmp)-->`: the target must return for
    /// the function) instead of calling it.
    pub jmp: bool,
}

impl DirectCall {
    /// Whether the target is the end of `sym`, that is the first byte of whatever follows
    /// it (see [`parse_direct_callers()`]).
    pub fn at_end(&self) -> bool {
        matches!(self.place, Some((offset, size)) if offset != 0 && offset == size)
    }
}

impl core::fmt::Display for DirectCall {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.place {
            Some((offset, size)) => write!(f, "{}+{offset:#x}/{size:#x}", self.sym),
            None => write!(f, "{}", self.sym),
        }
    }
}

/// The direct call of every function that has one, from the text of `enabled_functions`
/// (kernel/trace/ftrace.c `t_show()`): a line per function, `name [module] (count)
/// flags`, the direct call on a line of its own after it,
/// `\tdirect-->symbol+offset/size [module]` (`direct(jmp)-->` for a jump), by the
/// function's name (`name`, or `name [module]`).
pub fn parse_direct_calls(text: &str) -> HashMap<String, DirectCall> {
    let hex = |s: &str| {
        s.strip_prefix("0x")
            .filter(|h| !h.is_empty() && h.bytes().all(|b| b.is_ascii_hexdigit()))
            .and_then(|h| u64::from_str_radix(h, 16).ok())
    };
    let mut out = HashMap::new();
    let mut current: Option<&str> = None;
    for line in text.lines() {
        match line.strip_prefix('\t') {
            Some(rest) => {
                let (Some(name), Some(arrow)) = (current, rest.find("-->")) else {
                    continue;
                };
                let kind = &rest[..arrow];
                if kind != "direct" && kind != "direct(jmp)" {
                    continue;
                }
                let target = &rest[arrow + 3..];
                let target = target.split(' ').next().unwrap_or(target);
                let (sym, at) = target.split_once('+').unwrap_or((target, ""));
                if sym.is_empty() {
                    continue;
                }
                let place = at
                    .split_once('/')
                    .and_then(|(offset, size)| Some((hex(offset)?, hex(size)?)));
                let call = DirectCall {
                    sym: sym.to_string(),
                    place,
                    jmp: kind == "direct(jmp)",
                };
                out.insert(name.to_string(), call);
            }
            None => current = line.find(" (").map(|i| &line[..i]),
        }
    }
    out
}

/// [`direct_callers()`] of the text of `enabled_functions`: each function's caller
/// ([`parse_direct_calls()`]), named by its symbol, or `symbol+offset` at the end of one.
///
/// A caller at the very end of a symbol ([`DirectCall::at_end()`]) is given as
/// `symbol+offset` (`offset` in hexadecimal, `0x...`): it is the first byte of whatever
/// follows, which `%pS` names by the symbol before it when both are BPF text (the BPF
/// ksym tree counts a symbol's end as its own, for return addresses after a final call:
/// `bpf_tree_comp()` in kernel/bpf/core.c), as a BPF trampoline allocated right after an
/// rkf_multi image in a pack.  [`resolve_ends()`] names it.
pub fn parse_direct_callers(text: &str) -> HashMap<String, String> {
    parse_direct_calls(text)
        .into_iter()
        .map(|(name, call)| {
            let caller = match call.place {
                Some((offset, _)) if call.at_end() => format!("{}+{offset:#x}", call.sym),
                _ => call.sym,
            };
            (name, caller)
        })
        .collect()
}

/// Names the callers [`parse_direct_callers()`] gave as `symbol+offset` (the end of
/// `symbol`) by the function that starts there in `ksyms`; one with no function there
/// stays as it is.  Returns how many stayed because `ksyms` has no `symbol` (freed since
/// the callers were read).
pub fn resolve_ends(callers: &mut HashMap<String, String>, ksyms: &Kallsyms) -> usize {
    let mut gone = 0;
    for caller in callers.values_mut() {
        let Some((sym, offset)) = caller.split_once('+') else {
            continue;
        };
        let Some(offset) = offset
            .strip_prefix("0x")
            .and_then(|o| u64::from_str_radix(o, 16).ok())
        else {
            continue;
        };
        let Some(start) = ksyms
            .symbols()
            .iter()
            .find(|s| s.name == sym && s.is_text())
        else {
            gone += 1;
            continue;
        };
        if let Some(next) = ksyms.function_at(start.addr + offset) {
            *caller = next.name.clone();
        }
    }
    gone
}

/// The lines of available_filter_functions in order (`name` for vmlinux, `name [module]`
/// for modules): line `i` is the function that index `i + 1` names in set_ftrace_filter.
pub fn ftrace_function_lines() -> Result<Vec<String>> {
    let path = tracefs()?.join("available_filter_functions");
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    Ok(text.lines().map(str::to_string).collect())
}

/// The functions ftrace can hook, with counts: the lines of available_filter_functions,
/// `name` for vmlinux and `name [module]` for modules.
pub fn ftrace_functions() -> Result<HashMap<String, u32>> {
    let mut m = HashMap::new();
    for line in ftrace_function_lines()? {
        *m.entry(line).or_insert(0) += 1;
    }
    Ok(m)
}

/// Splits `MODULE:GLOB` into the module and the glob; a pattern without `:` is vmlinux's.
fn split_pattern(p: &str) -> (Option<&str>, &str) {
    match p.split_once(':') {
        Some((m, g)) => (Some(m), g),
        None => (None, p),
    }
}

/// Resolves `patterns` to functions: names or globs such as `vfs_*` for vmlinux, and
/// `MODULE:NAME` or `MODULE:GLOB` (for example `rkf_testmod:rkf_testmod_multi_*`) for a
/// loaded module's functions.
///
/// Patterns may overlap: a function several match is taken once, and counts as named
/// exactly if one of them names it.  Addresses come from /proc/kallsyms, weak functions'
/// (`W`) too.
///
/// A function named exactly must be attachable: otherwise this fails, saying why (one
/// that another direct trampoline holds is left for the kernel to refuse, `EBUSY`, and
/// the error names the holder).  A glob leaves out what cannot be attached, functions
/// another direct trampoline holds among them ([`direct_holders()`]; one that gains a
/// holder before the attach still fails it), and says how many and why in
/// [`Resolved::skipped`].  Fails if nothing is left.
///
/// The functions are for a program loaded against `rkf_multi_tmpl6()` (`RKF_MULTI_FENTRY`
/// and the like): at most six arguments.  [`resolve_wide()`] takes up to twelve.
pub fn resolve(patterns: &[&str]) -> Result<Resolved> {
    resolve_up_to(patterns, rules::TMPL6_ARGS)
}

/// [`resolve()`] for a program loaded against `rkf_multi_tmpl12()` (`RKF_MULTI_FENTRY12`
/// and the like), which reads twelve arguments: functions of up to twelve.
pub fn resolve_wide(patterns: &[&str]) -> Result<Resolved> {
    resolve_up_to(patterns, rules::MAX_ARGS)
}

fn resolve_up_to(patterns: &[&str], max_args: u32) -> Result<Resolved> {
    resolve_with(patterns, max_args, &Kallsyms::load()?)
}

/// [`resolve_up_to()`] with the symbols `ksyms`, addresses and all.
fn resolve_with(patterns: &[&str], max_args: u32, ksyms: &Kallsyms) -> Result<Resolved> {
    let vmlinux = KernelBtf::vmlinux()?;
    let ftrace = ftrace_functions()?;
    let holders = direct_holders()?;
    let mut out = Resolved::default();
    let mut matched = vec![false; patterns.len()];
    // One pass per BTF object named, vmlinux's first.
    let mut objects: Vec<Option<&str>> = vec![None];
    for p in patterns {
        let (m, _) = split_pattern(p);
        if !objects.contains(&m) {
            objects.push(m);
        }
    }
    for object in objects {
        let mine: Vec<(usize, &str)> = patterns
            .iter()
            .enumerate()
            .map(|(i, p)| (i, split_pattern(p)))
            .filter(|(_, (m, _))| *m == object)
            .map(|(i, (_, g))| (i, g))
            .collect();
        if mine.is_empty() {
            continue;
        }
        let module_btf;
        let btf = match object {
            None => &vmlinux,
            Some(m) => {
                module_btf = KernelBtf::module(&vmlinux, m)
                    .with_context(|| format!("module {m} (is it loaded, with BTF?)"))?;
                &module_btf
            }
        };
        let mut addrs: HashMap<&str, (u64, u32)> = HashMap::new();
        for s in ksyms.symbols() {
            if s.module.as_deref() == object && s.is_text() {
                let e = addrs.entry(s.name.as_str()).or_insert((s.addr, 0));
                e.1 += 1;
            }
        }
        let mut seen = std::collections::HashSet::new();
        for f in btf.funcs()? {
            // Every pattern that matches counts as matched; the function is named exactly
            // if one of them is not a glob.
            let (mut any, mut exact) = (false, false);
            for &(pi, g) in &mine {
                if rules::glob_match(g.as_bytes(), f.name.as_bytes()) {
                    matched[pi] = true;
                    any = true;
                    exact |= !rules::is_glob(g.as_bytes());
                }
            }
            if !any {
                continue;
            }
            // BTF may describe a function twice (once per compilation unit that declares it).
            if !seen.insert(f.name.clone()) {
                continue;
            }
            let ftrace_name = qualified_name(&f.name, object);
            let skip = match rules::check_shape(max_args, f.nr_params, f.varargs, &f.kind, &f.size)
            {
                Err(r) => Some(Skip::Rule(r)),
                Ok(_) if rules::denied(f.name.as_bytes()) => Some(Skip::Rule(Reason::Denied)),
                Ok(_) => match (ftrace.get(&ftrace_name), addrs.get(f.name.as_str())) {
                    (None, _) => Some(Skip::Rule(Reason::NotTraceable)),
                    (_, None) => Some(Skip::NoSymbol),
                    (Some(&n), Some(&(_, c))) if n > 1 || c > 1 => Some(Skip::Ambiguous),
                    // Another direct trampoline's: a glob leaves it out; an exact name goes
                    // on to the kernel, whose EBUSY names the holder (AttachError).
                    _ if !exact && holders.contains_key(&ftrace_name) => {
                        Some(Skip::Rule(Reason::Busy))
                    }
                    _ => None,
                },
            };
            match skip {
                Some(why) if exact => {
                    bail!("cannot attach to {ftrace_name}: {why}");
                }
                Some(why) => out.skipped.entry(why).or_default().push(ftrace_name),
                None => out.funcs.push(Func {
                    addr: addrs[f.name.as_str()].0,
                    nr_args: f.nr_params,
                    btf_id: f.btf_id,
                    module: object.map(str::to_string),
                    name: f.name,
                }),
            }
        }
    }
    for (p, m) in patterns.iter().zip(&matched) {
        if !m {
            match split_pattern(p) {
                (Some(m), g) => bail!("no function of module {m} matches {g} (in its BTF)"),
                (None, _) => bail!("no function matches {p} (in vmlinux BTF)"),
            }
        }
    }
    if out.funcs.is_empty() {
        bail!(
            "nothing to attach: all {} matching functions were left out",
            out.nr_skipped()
        );
    }
    Ok(out)
}

/// An attach that rkf_multi refused.
#[derive(Debug)]
pub struct AttachError {
    /// The errno.
    pub errno: i32,
    /// The function the refusal names, and why, if it names one.
    pub refused: Option<(usize, Reason)>,
    /// What to tell the user.
    pub message: String,
}

impl fmt::Display for AttachError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for AttachError {}

/// An attached link: the program runs on its functions until this is dropped.
pub struct Link {
    file: File,
    /// The link's id.
    pub id: u64,
    /// How long the attach ioctl took.
    pub attach_time: std::time::Duration,
}

/// What [`Link::info()`] and [`links()`] report.
#[derive(Clone, Debug)]
pub struct LinkInfo {
    /// The link's id.
    pub id: u64,
    /// Its program's id.
    pub prog_id: u32,
    /// What its program runs on.
    pub kind: rkf_core::abi::Kind,
    /// Whether it counts its program's runs and misses on each function
    /// ([`Link::attach_counted()`]): if not, every function's `hits` and `misses` are 0.
    pub counted: bool,
    /// Its functions, in site order.
    pub funcs: Vec<FuncInfo>,
}

impl LinkInfo {
    /// Runs of its program on all its functions, and runs the recursion guard skipped,
    /// if it counts them.
    pub fn counts(&self) -> Option<(u64, u64)> {
        self.counted.then(|| {
            self.funcs
                .iter()
                .fold((0, 0), |(h, m), f| (h + f.hits, m + f.misses))
        })
    }
}

/// A program's statistics (`struct bpf_prog_info`), on every function and attachment,
/// rkf_multi's included.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProgStats {
    /// Its runs (`run_cnt`): counted only while the kernel keeps BPF statistics
    /// (kernel.bpf_stats_enabled, or a `BPF_ENABLE_STATS` fd held).
    pub runs: u64,
    /// The runs the recursion guard skipped (`recursion_misses`), always counted.
    pub misses: u64,
}

/// The statistics of program `prog`.
pub fn prog_stats(prog: &impl AsFd) -> Result<ProgStats> {
    let mut info = libbpf_rs::libbpf_sys::bpf_prog_info::default();
    let mut len = size_of_val(&info) as u32;
    // SAFETY: `info` is a zeroed `struct bpf_prog_info` of `len` bytes, valid for writes;
    // with its array pointers 0 the kernel writes nothing else.
    let ret = unsafe {
        libbpf_rs::libbpf_sys::bpf_prog_get_info_by_fd(
            prog.as_fd().as_raw_fd(),
            &mut info,
            &mut len,
        )
    };
    if ret != 0 {
        return Err(std::io::Error::from_raw_os_error(-ret)).context("BPF_OBJ_GET_INFO_BY_FD");
    }
    Ok(ProgStats {
        runs: info.run_cnt,
        misses: info.recursion_misses,
    })
}

fn open_device() -> std::io::Result<File> {
    OpenOptions::new().read(true).write(true).open(DEVICE)
}

/// The ioctls of `/dev/rkf_multi`, generated by nix from [`rkf_core::abi`]: the request
/// numbers from `IOC_TYPE`, `IOC_NR_*` and the size of each request's struct.
pub mod ioctl {
    use rkf_core::abi::{AttachRequest, LinkInfo, IOC_NR_ATTACH, IOC_NR_INFO, IOC_TYPE};

    nix::ioctl_readwrite!(
        /// `RKF_MULTI_IOC_ATTACH`: attaches the program of `data` through the file `fd`.
        ///
        /// # Safety
        ///
        /// `data` points to a request.  The kernel writes only into the request; it reads
        /// through the request's array pointers, and fails with `EFAULT` where they do not
        /// point into mapped memory.
        attach,
        IOC_TYPE,
        IOC_NR_ATTACH,
        AttachRequest
    );
    nix::ioctl_readwrite!(
        /// `RKF_MULTI_IOC_INFO`: describes a link.
        ///
        /// # Safety
        ///
        /// `data` points to a request whose `funcs` has room for `buf_cnt` entries: the
        /// kernel writes that many there.
        info,
        IOC_TYPE,
        IOC_NR_INFO,
        LinkInfo
    );
}

/// `RKF_MULTI_IOC_ATTACH` with `req` as it is, on `file`.
///
/// Any request is safe to send: the kernel only reads through its array pointers (a bad
/// one fails the request with `EFAULT`) and writes `bad_index` and `reason` into `req`.
pub fn attach_request(file: &File, req: &mut AttachRequest) -> std::io::Result<()> {
    // SAFETY: `req` is a whole request, valid for writes; the kernel writes nothing
    // through its pointers.
    unsafe { ioctl::attach(file.as_raw_fd(), req) }?;
    Ok(())
}

/// `RKF_MULTI_IOC_INFO` of link `id` (0: the file's own, N: the first with id N or more),
/// with its first functions written into `funcs`.
pub fn info_request(
    file: &File,
    id: u64,
    funcs: &mut [FuncInfo],
) -> std::io::Result<abi::LinkInfo> {
    let mut req = abi::LinkInfo {
        id,
        buf_cnt: u32::try_from(funcs.len()).unwrap_or(u32::MAX),
        funcs: funcs.as_mut_ptr() as u64,
        ..abi::LinkInfo::default()
    };
    // SAFETY: the kernel writes at most `buf_cnt` entries to `funcs`, which has room for
    // at least that many, and the request itself.
    unsafe { ioctl::info(file.as_raw_fd(), &mut req) }?;
    Ok(req)
}

impl Link {
    /// Attaches `prog` (an rkf_multi fentry, fexit or session program) to `funcs`, with a
    /// cookie for each if `cookies` is given.  All or nothing.  The link keeps no counts
    /// of its own: the program's statistics count its runs ([`prog_stats()`]).
    pub fn attach(
        prog: &impl AsFd,
        funcs: &[Func],
        cookies: Option<&[u64]>,
    ) -> std::result::Result<Self, AttachError> {
        Self::attach_flags(prog, funcs, cookies, 0)
    }

    /// As [`Link::attach()`], the link counting its program's runs and misses on each
    /// function ([`LinkInfo::counts()`], [`FuncInfo::hits`]): 24 bytes a function more,
    /// and an atomic increment on every run.
    pub fn attach_counted(
        prog: &impl AsFd,
        funcs: &[Func],
        cookies: Option<&[u64]>,
    ) -> std::result::Result<Self, AttachError> {
        Self::attach_flags(prog, funcs, cookies, abi::F_COUNT)
    }

    /// `RKF_MULTI_IOC_ATTACH` of `prog` on `funcs` with `flags`.
    fn attach_flags(
        prog: &impl AsFd,
        funcs: &[Func],
        cookies: Option<&[u64]>,
        flags: u32,
    ) -> std::result::Result<Self, AttachError> {
        let plain = |errno: i32, what: String| AttachError {
            errno,
            refused: None,
            message: what,
        };
        let file = open_device().map_err(|e| {
            plain(
                e.raw_os_error().unwrap_or(0),
                format!("opening {DEVICE}: {e} (is rkf_multi loaded?)"),
            )
        })?;
        if let Some(c) = cookies {
            if c.len() != funcs.len() {
                return Err(plain(libc::EINVAL, "one cookie per function".into()));
            }
        }
        let ids: Vec<u32> = funcs.iter().map(|f| f.btf_id).collect();
        let addrs: Vec<u64> = funcs.iter().map(|f| f.addr).collect();
        // The BTF object of each module named, open for the request.
        let mut objects: BTreeMap<&str, OwnedFd> = BTreeMap::new();
        for m in funcs.iter().filter_map(|f| f.module.as_deref()) {
            if !objects.contains_key(m) {
                let fd = crate::btf::object_fd(m)
                    .map_err(|e| plain(libc::ENOENT, format!("the BTF of module {m}: {e:#}")))?;
                objects.insert(m, fd);
            }
        }
        let fds: Vec<i32> = funcs
            .iter()
            .map(|f| f.module.as_deref().map_or(0, |m| objects[m].as_raw_fd()))
            .collect();
        let mut req = AttachRequest {
            prog_fd: prog.as_fd().as_raw_fd() as u32,
            cnt: funcs.len() as u32,
            btf_ids: ids.as_ptr() as u64,
            addrs: addrs.as_ptr() as u64,
            cookies: cookies.map_or(0, |c| c.as_ptr() as u64),
            btf_fds: if objects.is_empty() {
                0
            } else {
                fds.as_ptr() as u64
            },
            flags,
            ..AttachRequest::default()
        };
        let start = std::time::Instant::now();
        let r = attach_request(&file, &mut req);
        let attach_time = start.elapsed();
        match r {
            Ok(()) => {
                let info = info_request(&file, 0, &mut [])
                    .map_err(|e| plain(e.raw_os_error().unwrap_or(0), format!("link info: {e}")))?;
                Ok(Self {
                    file,
                    id: info.id,
                    attach_time,
                })
            }
            Err(e) => {
                let errno = e.raw_os_error().unwrap_or(0);
                let refused = Reason::from_raw(req.reason)
                    .filter(|_| (req.bad_index as usize) < funcs.len())
                    .map(|r| (req.bad_index as usize, r));
                let message = match refused {
                    Some((i, Reason::Busy)) => {
                        let name = funcs[i].qualified_name();
                        // The holder's name only adds to the refusal: a failed read
                        // of enabled_functions is said, not made the error.
                        let holder = match direct_holders() {
                            Ok(h) => h.get(&name).map_or_else(String::new, |h| format!(": {h}")),
                            Err(err) => format!("; its holder unknown: {err:#};"),
                        };
                        format!(
                            "rkf_multi refused {name}: {}{holder} ({e})",
                            Reason::Busy.describe()
                        )
                    }
                    Some((i, r)) => format!(
                        "rkf_multi refused {}: {} ({e})",
                        funcs[i].qualified_name(),
                        r.describe()
                    ),
                    None => format!("rkf_multi attach of {} functions: {e}", funcs.len()),
                };
                Err(AttachError {
                    errno,
                    refused,
                    message,
                })
            }
        }
    }

    /// The link as rkf_multi reports it.
    pub fn info(&self) -> Result<LinkInfo> {
        info_of(&self.file, 0).map(|(i, _)| i)
    }
}

/// Reads link `id` (0: the file's own, N: the first with id N or more) and the next id.
fn info_of(file: &File, id: u64) -> Result<(LinkInfo, u64)> {
    // A link's functions are fixed, but the link found first may be closed before its
    // functions are read, and the second call then finds a later one: read again.
    let (req, funcs) = loop {
        let first = info_request(file, id, &mut []).context("RKF_MULTI_IOC_INFO")?;
        let mut funcs = vec![FuncInfo::default(); first.cnt as usize];
        let req = info_request(file, first.id, &mut funcs).context("RKF_MULTI_IOC_INFO")?;
        if req.id == first.id && req.cnt == first.cnt {
            break (req, funcs);
        }
    };
    Ok((
        LinkInfo {
            id: req.id,
            prog_id: req.prog_id,
            kind: rkf_core::abi::Kind::from_raw(req.kind)
                .with_context(|| format!("link {}: unknown kind {}", req.id, req.kind))?,
            counted: req.flags & abi::F_COUNT != 0,
            funcs,
        },
        req.next_id,
    ))
}

/// Every link, in id order.
pub fn links() -> Result<Vec<LinkInfo>> {
    let file = open_device().with_context(|| format!("opening {DEVICE} (is rkf_multi loaded?)"))?;
    let mut out = Vec::new();
    let mut next = 1;
    while next != 0 {
        match info_of(&file, next) {
            Ok((i, n)) => {
                out.push(i);
                next = n;
            }
            Err(e)
                if e.downcast_ref::<std::io::Error>()
                    .and_then(|e| e.raw_os_error())
                    == Some(libc::ENOENT) =>
            {
                break
            }
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

/// Fails, naming it, on a pattern that matches no function in `ksyms`: such a pattern
/// would attach nothing, since [`resolve_wide()`] takes every function's address from
/// /proc/kallsyms.  Needs neither BTF nor tracefs, nor any privilege: only the names.
/// `MODULE:GLOB` patterns are matched against that module's functions.
pub fn check_patterns(patterns: &[&str], ksyms: &Kallsyms) -> Result<()> {
    for p in patterns {
        let (module, glob) = match p.split_once(':') {
            Some((m, g)) => (Some(m), g),
            None => (None, *p),
        };
        let matches = ksyms.symbols().iter().any(|s| {
            s.is_text()
                && s.module.as_deref() == module
                && rules::glob_match(glob.as_bytes(), s.name.as_bytes())
        });
        if !matches {
            match module {
                Some(m) => bail!(
                    "no function of module {m} matches {glob} (in /proc/kallsyms; is {m} loaded?)"
                ),
                None => bail!("no function matches {p} (in /proc/kallsyms)"),
            }
        }
    }
    Ok(())
}

/// What a tool with one counter per function (`rkf funccount`, `rkf funclatency`)
/// attaches to: each pattern checked against the names of /proc/kallsyms
/// ([`check_patterns()`]: names only, so anyone may read them) before anything needs the
/// module, BTF, tracefs or privilege, then, with rkf_multi loaded, the functions of up to
/// twelve arguments they match (as [`resolve_wide()`], from the same read of
/// /proc/kallsyms: a program that reads no argument takes them all), and a map's entries
/// for one each.
pub fn resolve_for_counters(patterns: &[&str]) -> Result<(Resolved, u32)> {
    let ksyms = Kallsyms::names()?;
    check_patterns(patterns, &ksyms)?;
    crate::modules::require("rkf_multi")?;
    let resolved = resolve_with(patterns, rules::MAX_ARGS, &ksyms.require_addresses()?)?;
    let entries = resolved.map_entries()?;
    Ok((resolved, entries))
}

#[cfg(test)]
mod tests {
    use std::mem::size_of;

    use rkf_core::abi::{self, AttachRequest, LinkInfo};

    use super::{check_patterns, Kallsyms};

    /// Patterns that match no function of /proc/kallsyms fail, naming the pattern;
    /// data symbols and other objects' functions do not count.
    #[test]
    fn patterns_checked_against_kallsyms() {
        let k = Kallsyms::parse(
            "ffffffff81000000 T vfs_read\n\
             ffffffff81000100 t do_nanosleep\n\
             ffffffff82000000 D vfs_data\n\
             ffffffffc0000000 t modfn\t[mymod]\n",
        )
        .unwrap();
        check_patterns(&["vfs_*", "do_nanosleep", "mymod:mod*"], &k).unwrap();
        let err = |p: &str| {
            check_patterns(&["vfs_read", p], &k)
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            err("nosuch_*"),
            "no function matches nosuch_* (in /proc/kallsyms)"
        );
        assert_eq!(
            err("vfs_data"),
            "no function matches vfs_data (in /proc/kallsyms)"
        );
        assert_eq!(
            err("modfn"),
            "no function matches modfn (in /proc/kallsyms)"
        );
        assert_eq!(
            err("mymod:vfs_*"),
            "no function of module mymod matches vfs_* (in /proc/kallsyms; is mymod loaded?)"
        );
    }

    /// The request numbers nix generates [`super::ioctl`] with are the ABI's.
    #[test]
    fn ioctl_numbers() {
        let attach = nix::request_code_readwrite!(
            abi::IOC_TYPE,
            abi::IOC_NR_ATTACH,
            size_of::<AttachRequest>()
        );
        let info =
            nix::request_code_readwrite!(abi::IOC_TYPE, abi::IOC_NR_INFO, size_of::<LinkInfo>());
        assert_eq!(u32::try_from(attach), Ok(abi::IOC_ATTACH));
        assert_eq!(u32::try_from(info), Ok(abi::IOC_INFO));
    }

    /// enabled_functions as kernel/trace/ftrace.c prints it: direct callers on their own
    /// line, rkf_multi's own left out, module functions with their module.
    #[test]
    fn direct_holders_parsed() {
        let text = "bpf_fentry_test1 (1)      D       \n\
                    \tdirect-->bpf_trampoline_6442531112+0x0/0x1000 [bpf]\n\
                    bpf_fentry_test2 (1)      D       \n\
                    \tdirect-->rkf_multi_tramp+0x0/0x9d [rkf_multi]\n\
                    bpf_fentry_test3 (1)      D       \n\
                    \tdirect-->rkf_multi_image_7+0x40/0x1000 [bpf]\n\
                    vfs_read (2) R            \ttramp: 0xffffffffc0a01000 (function_trace_call+0x0/0x80) ->ftrace_ops_list_func+0x0/0x1a0\n\
                    foo [mod] (1)      D       \n\
                    \tdirect(jmp)-->bpf_trampoline_77+0x0/0x1000 [bpf]\n";
        let h = super::holders(super::parse_direct_callers(text));
        assert_eq!(h.len(), 2, "{h:?}");
        assert_eq!(h["bpf_fentry_test1"], "bpf_trampoline_6442531112");
        assert_eq!(h["foo [mod]"], "bpf_trampoline_77");
        let c = super::parse_direct_callers(text);
        assert_eq!(c.len(), 4, "{c:?}");
        assert_eq!(c["bpf_fentry_test2"], "rkf_multi_tramp");
        assert_eq!(c["bpf_fentry_test3"], "rkf_multi_image_7");
    }

    /// Each direct call's symbol, offset and size exactly, for a call and a jump, an
    /// address that kallsyms has no symbol for, and offsets that are not `%pS`'s.
    #[test]
    fn direct_calls_parsed() {
        let text = "bpf_fentry_test1 (1)      D       \n\
                    \tdirect-->rkf_multi_image_7+0x40/0x1000 [bpf]\n\
                    foo [mod] (1)      D       \n\
                    \tdirect(jmp)-->bpf_trampoline_77+0x0/0x1000 [bpf]\n\
                    bar (1)      D       \n\
                    \tdirect-->0xffffffffa0001000\n\
                    odd1 (1)      D       \n\
                    \tdirect-->s+0x+40/0x40\n\
                    odd2 (1)      D       \n\
                    \tdirect-->s+40/40\n\
                    odd3 (1)      D       \n\
                    \tdirect(call)-->s+0x40/0x40\n\
                    vfs_read (1) R            \ttramp: 0xffffffffc0a01000 (function_trace_call+0x0/0x80) ->ftrace_ops_list_func+0x0/0x1a0\n";
        let c = super::parse_direct_calls(text);
        let call = |sym: &str, place, jmp| super::DirectCall {
            sym: sym.to_string(),
            place,
            jmp,
        };
        assert_eq!(c.len(), 5, "{c:?}");
        let image = call("rkf_multi_image_7", Some((0x40, 0x1000)), false);
        assert_eq!(c["bpf_fentry_test1"], image);
        let tramp = call("bpf_trampoline_77", Some((0, 0x1000)), true);
        assert_eq!(c["foo [mod]"], tramp);
        assert_eq!(c["bar"], call("0xffffffffa0001000", None, false));
        assert_eq!(c["odd1"], call("s", None, false));
        assert_eq!(c["odd2"], call("s", None, false));
        assert_eq!(image.to_string(), "rkf_multi_image_7+0x40/0x1000");
        assert_eq!(c["bar"].to_string(), "0xffffffffa0001000");
        assert!(!image.at_end() && !tramp.at_end() && !c["bar"].at_end());
        assert!(call("s", Some((0x40, 0x40)), false).at_end());
        assert!(!call("s", Some((0, 0)), false).at_end());
        let callers = super::parse_direct_callers(text);
        assert_eq!(callers["bpf_fentry_test1"], "rkf_multi_image_7");
        assert_eq!(callers["odd1"], "s");
    }

    /// A caller at the very end of a BPF symbol is whatever starts there: a BPF
    /// trampoline right after an rkf_multi image (seen in a VM run: `%pS` named it
    /// `rkf_multi_image_1350+0xc0/0xc0`), or an rkf_multi image right after another.
    #[test]
    fn direct_callers_at_a_symbol_end() {
        let text = "bpf_fentry_test1 (1) R   D   M \ttramp: ftrace_regs_caller+0x0/0x58 (call_direct_funcs+0x0/0x30)\n\
                    \tdirect-->rkf_multi_image_1350+0xc0/0xc0\n\
                    bpf_fentry_test2 (1)      D       \n\
                    \tdirect(jmp)-->rkf_multi_image_7+0x40/0x40 [bpf]\n\
                    bpf_fentry_test3 (1)      D       \n\
                    \tdirect-->rkf_multi_image_9+0x40/0x40 [bpf]\n";
        let mut c = super::parse_direct_callers(text);
        assert_eq!(c["bpf_fentry_test1"], "rkf_multi_image_1350+0xc0");
        assert_eq!(c["bpf_fentry_test2"], "rkf_multi_image_7+0x40");
        // Unresolved, an end is no rkf_multi trampoline of its own: a holder.
        assert_eq!(super::holders(c.clone()).len(), 3);
        let ksyms = crate::kallsyms::Kallsyms::parse(
            "ffffffffa0001000 t rkf_multi_image_1350\t[bpf]\n\
             ffffffffa00010c0 t bpf_trampoline_6442490163\t[bpf]\n\
             ffffffffa0002000 t rkf_multi_image_7\t[bpf]\n\
             ffffffffa0002040 t rkf_multi_image_8\t[bpf]\n",
        )
        .unwrap();
        // rkf_multi_image_9 is not in kallsyms (freed since enabled_functions was read):
        // its end stays, counted.
        assert_eq!(super::resolve_ends(&mut c, &ksyms), 1);
        assert_eq!(c["bpf_fentry_test1"], "bpf_trampoline_6442490163");
        assert_eq!(c["bpf_fentry_test2"], "rkf_multi_image_8");
        assert_eq!(c["bpf_fentry_test3"], "rkf_multi_image_9+0x40");
        // Nothing starts at the end of a symbol still there: it stays, not counted.
        let mut end = std::collections::HashMap::from([(
            "f".to_string(),
            "rkf_multi_image_8+0x40".to_string(),
        )]);
        assert_eq!(super::resolve_ends(&mut end, &ksyms), 0);
        assert_eq!(end["f"], "rkf_multi_image_8+0x40");
        let h = super::holders(c);
        assert_eq!(h.len(), 2, "{h:?}");
        assert_eq!(h["bpf_fentry_test1"], "bpf_trampoline_6442490163");
    }
}
