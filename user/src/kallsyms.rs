// SPDX-License-Identifier: GPL-2.0

//! The kernel's symbols: lookups by name in /proc/kallsyms, and symbolization of kernel
//! addresses through blazesym.
//!
//! blazesym's kallsyms symbolizer turns addresses into functions ([`KernelSymbolizer`]).
//! The lookups stay here: blazesym 0.2.7 has no inverse lookup of kallsyms (its
//! `inspect` sources are ELF and Breakpad files) and reports no module for a kallsyms
//! symbol, while rkf looks symbols up per module (`name [module]`) and refuses names
//! that are not unique.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use blazesym::{
    symbolize::{
        source::{Kernel, Source},
        Input, Symbolized, Symbolizer,
    },
    MaybeDefault,
};

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

impl Symbol {
    /// Whether the symbol is code (`T`, `t`, `W`, `w`).
    pub fn is_text(&self) -> bool {
        matches!(self.kind, 'T' | 't' | 'W' | 'w')
    }
}

/// The kernel's symbol table.
pub struct Kallsyms {
    syms: Vec<Symbol>,
}

impl Kallsyms {
    /// Reads /proc/kallsyms.  Fails when the addresses are hidden (not root, or
    /// `kernel.kptr_restrict` forbids them), since every lookup would then give zero.
    pub fn load() -> Result<Self> {
        Self::names()?.require_addresses()
    }

    /// Reads /proc/kallsyms as anyone may: the names, with the addresses only where the
    /// reader may see them (zero otherwise).
    pub fn names() -> Result<Self> {
        let text = std::fs::read_to_string("/proc/kallsyms").context("reading /proc/kallsyms")?;
        Self::parse(&text)
    }

    /// `self`, if its addresses are shown: fails when they were hidden from the reader.
    pub fn require_addresses(self) -> Result<Self> {
        if self.syms.iter().all(|s| s.addr == 0) {
            bail!("/proc/kallsyms shows only zero addresses: run as root (CAP_SYSLOG) with kernel.kptr_restrict < 2");
        }
        Ok(self)
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
        Ok(Self { syms })
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

    /// The function that starts at `addr`, as kallsyms names it first there (before any
    /// section marker at the same address: kallsyms sorts those after).
    pub fn function_at(&self, addr: u64) -> Option<&Symbol> {
        self.syms.iter().find(|s| s.addr == addr && s.is_text())
    }

    /// [`Kallsyms::function_at()`] for every address at once: the first function
    /// kallsyms names at each, for naming many addresses.
    pub fn functions_by_addr(&self) -> std::collections::HashMap<u64, &Symbol> {
        let mut by_addr = std::collections::HashMap::new();
        for s in self.syms.iter().filter(|s| s.is_text()) {
            by_addr.entry(s.addr).or_insert(s);
        }
        by_addr
    }
}

/// Kernel addresses to functions, with blazesym's kallsyms symbolizer.
///
/// The symbols are read at the first lookup and kept: make a new one to see symbols
/// that appeared since (programs loaded, modules loaded).
pub struct KernelSymbolizer {
    symbolizer: Symbolizer,
    source: Source<'static>,
}

/// A function that an address is in, and the offset of the address into it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    /// The function.
    pub name: String,
    /// The offset into it.
    pub offset: u64,
}

impl Default for KernelSymbolizer {
    fn default() -> Self {
        Self::new()
    }
}

impl KernelSymbolizer {
    /// A symbolizer over /proc/kallsyms.
    pub fn new() -> Self {
        Self::with_kallsyms(MaybeDefault::Default)
    }

    /// A symbolizer over a file in the format of /proc/kallsyms.
    pub fn from_file(path: impl Into<PathBuf>) -> Self {
        Self::with_kallsyms(MaybeDefault::Some(path.into()))
    }

    fn with_kallsyms(kallsyms: MaybeDefault<PathBuf>) -> Self {
        // kallsyms only: it has every symbol, modules and BPF programs included, and
        // matches the running kernel by construction.
        let source = Source::Kernel(Kernel {
            kallsyms,
            vmlinux: MaybeDefault::None,
            debug_syms: false,
            ..Kernel::default()
        });
        Self {
            symbolizer: Symbolizer::new(),
            source,
        }
    }

    /// Reads the symbols now rather than at the first lookup.
    pub fn preload(&self) -> Result<()> {
        self.symbolize(&[0]).map(drop)
    }

    /// The function each of `addrs` is in (`None` where no symbol covers it).
    pub fn symbolize(&self, addrs: &[u64]) -> Result<Vec<Option<Frame>>> {
        let syms = self
            .symbolizer
            .symbolize(&self.source, Input::AbsAddr(addrs))
            .context("symbolizing kernel addresses (/proc/kallsyms)")?;
        Ok(syms
            .into_iter()
            .map(|s| match s {
                Symbolized::Sym(sym) => Some(Frame {
                    name: sym.name.into_owned(),
                    offset: sym.offset as u64,
                }),
                Symbolized::Unknown(_) => None,
            })
            .collect())
    }

    /// The function `addr` is in, if a symbol covers it.
    pub fn frame(&self, addr: u64) -> Option<Frame> {
        self.symbolize(&[addr]).ok()?.pop().flatten()
    }

    /// The name of the function `addr` is in, if a symbol covers it.
    pub fn name(&self, addr: u64) -> Option<String> {
        self.frame(addr).map(|f| f.name)
    }

    /// `function+0xoffset`, or the address in hex where no symbol covers it.
    pub fn describe(&self, addr: u64) -> String {
        match self.frame(addr) {
            Some(f) => format!("{}+{:#x}", f.name, f.offset),
            None => format!("{addr:#x}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "\
ffffffff81000000 T _text
0000000000032a40 D runqueues
ffffffff82000000 t __schedule
ffffffff82000000 T __sched_text_start
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
    fn function_at() {
        let k = Kallsyms::parse(TEXT).unwrap();
        let f = k.function_at(0xffffffffc0002000).unwrap();
        assert_eq!(
            (f.name.as_str(), f.module.as_deref()),
            ("bpf_rkf_per_cpu_ptr", Some("rkf_percpu"))
        );
        assert_eq!(
            k.function_at(0xffffffff82000000).unwrap().name,
            "__schedule"
        );
        assert_eq!(k.function_at(0xffffffffc0002001), None);
        assert_eq!(k.function_at(0x32a40), None);
        // functions_by_addr() names every address as function_at() does.
        let by_addr = k.functions_by_addr();
        for s in k.symbols() {
            assert_eq!(
                by_addr.get(&s.addr).copied(),
                k.function_at(s.addr),
                "{:#x}",
                s.addr
            );
        }
        assert_eq!(by_addr.get(&0xffffffffc0002001), None);
    }

    #[test]
    fn bad_line() {
        assert!(Kallsyms::parse("ffff T\n").is_err());
        assert!(Kallsyms::parse("zz T x\n").is_err());
    }

    /// kallsyms as the kernel sorts it (scripts/kallsyms.c puts section markers such as
    /// `__sched_text_start` after the function at their address), symbolized by blazesym.
    #[test]
    fn symbolize() {
        let path = std::env::temp_dir().join(format!("rkf-kallsyms-{}", std::process::id()));
        let sorted = "\
ffffffff81000000 T _text
ffffffff82000000 t __schedule
ffffffff82000000 T __sched_text_start
ffffffffc0002000 T bpf_rkf_per_cpu_ptr\t[rkf_percpu]
";
        std::fs::write(&path, sorted).unwrap();
        let s = KernelSymbolizer::from_file(&path);
        let frames = s
            .symbolize(&[
                0xffffffff81000010,
                0xffffffff82000040,
                0xffffffffc0002004,
                0x1000,
            ])
            .unwrap();
        std::fs::remove_file(&path).unwrap();
        let frame = |name: &str, offset| {
            Some(Frame {
                name: name.to_owned(),
                offset,
            })
        };
        assert_eq!(
            frames,
            [
                frame("_text", 0x10),
                frame("__schedule", 0x40),
                frame("bpf_rkf_per_cpu_ptr", 4),
                None
            ]
        );
    }
}
