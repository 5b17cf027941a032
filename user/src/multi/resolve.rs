// SPDX-License-Identifier: GPL-2.0

//! Resolving patterns to functions: [`Func`], [`resolve()`] and [`resolve_wide()`] with
//! what they leave out ([`Skip`], [`Resolved`]), and the check of patterns against
//! /proc/kallsyms for the tools with a counter per function.

use std::{
    collections::{BTreeMap, HashMap},
    fmt,
};

use anyhow::{bail, Context, Result};
use rkf_core::multi::{self as rules, Reason};

use super::ftrace::{direct_holders, ftrace_functions};
use crate::{btf::KernelBtf, kallsyms::Kallsyms};

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
}
