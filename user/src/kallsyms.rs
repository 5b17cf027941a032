// SPDX-License-Identifier: GPL-2.0

//! /proc/kallsyms lookups.

use anyhow::{bail, Context, Result};

/// One /proc/kallsyms line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Symbol {
    /// The address; zero when the reader may not see addresses.
    pub addr: u64,
    /// The nm-style type letter (`T`, `t`, `D`, `d`, `b`, ...).
    pub kind: char,
    /// The symbol name.
    pub name: String,
    /// The module that owns the symbol; `None` for vmlinux.
    pub module: Option<String>,
}

/// The kernel's symbol table.
pub struct Kallsyms {
    syms: Vec<Symbol>,
    /// Indices of the text symbols, sorted by address, for [`Kallsyms::symbolize`].
    text: Vec<usize>,
}

impl Kallsyms {
    /// Reads /proc/kallsyms.  Fails when the addresses are hidden (not root, or
    /// `kernel.kptr_restrict` forbids them), since every lookup would then give zero.
    pub fn load() -> Result<Self> {
        let text = std::fs::read_to_string("/proc/kallsyms").context("reading /proc/kallsyms")?;
        let k = Self::parse(&text)?;
        if k.syms.iter().all(|s| s.addr == 0) {
            bail!("/proc/kallsyms shows only zero addresses: run as root (CAP_SYSLOG) with kernel.kptr_restrict < 2");
        }
        Ok(k)
    }

    /// Parses the text of /proc/kallsyms.
    pub fn parse(text: &str) -> Result<Self> {
        let mut syms = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let mut it = line.split_whitespace();
            let (Some(addr), Some(kind), Some(name)) = (it.next(), it.next(), it.next()) else {
                bail!("/proc/kallsyms line {}: {line:?}", n + 1);
            };
            let module = it
                .next()
                .map(|m| m.trim_start_matches('[').trim_end_matches(']').to_owned());
            syms.push(Symbol {
                addr: u64::from_str_radix(addr, 16)
                    .with_context(|| format!("/proc/kallsyms line {}: {line:?}", n + 1))?,
                kind: kind.chars().next().unwrap_or('?'),
                name: name.to_owned(),
                module,
            });
        }
        let mut text: Vec<usize> = (0..syms.len())
            .filter(|&i| matches!(syms[i].kind, 'T' | 't' | 'W' | 'w'))
            .collect();
        // Among symbols at one address, section markers (`__sched_text_start`, `_stext`)
        // sort first, so that the function, last, is the one `symbolize()` names.
        let marker = |n: &str| n.ends_with("_start") || n.ends_with("_text") || n == "_stext";
        text.sort_by_key(|&i| (syms[i].addr, !marker(&syms[i].name)));
        Ok(Self { syms, text })
    }

    /// The text symbol `addr` falls in, and the offset into it: the last text symbol at
    /// or below `addr`.  (Kallsyms has no sizes; an address past a function's end is
    /// attributed to it.)
    pub fn symbolize(&self, addr: u64) -> Option<(&Symbol, u64)> {
        let pos = self.text.partition_point(|&i| self.syms[i].addr <= addr);
        let sym = &self.syms[*self.text.get(pos.checked_sub(1)?)?];
        Some((sym, addr - sym.addr))
    }

    /// Every symbol, in /proc/kallsyms order.
    pub fn symbols(&self) -> &[Symbol] {
        &self.syms
    }

    /// The address of `name` in `module` (`None`: vmlinux), if the symbol is unique there.
    pub fn lookup(&self, name: &str, module: Option<&str>) -> Result<u64> {
        let mut found = self
            .syms
            .iter()
            .filter(|s| s.name == name && s.module.as_deref() == module);
        let where_ = module.unwrap_or("vmlinux");
        match (found.next(), found.next()) {
            (Some(s), None) => Ok(s.addr),
            (None, _) => bail!("no symbol {name} in {where_} (/proc/kallsyms)"),
            (Some(_), Some(_)) => bail!("symbol {name} is not unique in {where_} (/proc/kallsyms)"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "\
ffffffff81000000 T _text
0000000000032a40 D runqueues
ffffffff82a4b020 t dup
ffffffff82a4b040 t dup
ffffffffc0002000 T bpf_rkf_per_cpu_ptr\t[rkf_percpu]
ffffffffc0004000 d rkf_percpu_probe\t[rkf_percpu]
";

    #[test]
    fn lookups() {
        let k = Kallsyms::parse(TEXT).unwrap();
        assert_eq!(k.lookup("runqueues", None).unwrap(), 0x32a40);
        assert_eq!(
            k.lookup("rkf_percpu_probe", Some("rkf_percpu")).unwrap(),
            0xffffffffc0004000
        );
        assert!(k.lookup("rkf_percpu_probe", None).is_err());
        assert!(k
            .lookup("dup", None)
            .unwrap_err()
            .to_string()
            .contains("not unique"));
        assert!(k.lookup("nope", None).is_err());
    }

    #[test]
    fn symbolize() {
        let k = Kallsyms::parse(TEXT).unwrap();
        let (s, off) = k.symbolize(0xffffffff81000010).unwrap();
        assert_eq!((s.name.as_str(), off), ("_text", 0x10));
        let (s, off) = k.symbolize(0xffffffffc0002004).unwrap();
        assert_eq!(
            (s.name.as_str(), s.module.as_deref(), off),
            ("bpf_rkf_per_cpu_ptr", Some("rkf_percpu"), 4)
        );
        assert!(k.symbolize(0x1000).is_none());
    }

    #[test]
    fn bad_line() {
        assert!(Kallsyms::parse("ffff T\n").is_err());
        assert!(Kallsyms::parse("zz T x\n").is_err());
    }
}
