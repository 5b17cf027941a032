// SPDX-License-Identifier: GPL-2.0

//! What tracefs says: the direct calls of `enabled_functions` and the functions they hold,
//! and the functions of available_filter_functions.

use std::{collections::HashMap, path::PathBuf};

use anyhow::{Context, Result};

use crate::kallsyms::Kallsyms;

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

#[cfg(test)]
mod tests {
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
