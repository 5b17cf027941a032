// SPDX-License-Identifier: GPL-2.0

//! Reading per-cpu variables through rkf_percpu, for `rkf percpu SYMBOL[.FIELD]`.

use std::mem::MaybeUninit;

use anyhow::{bail, Context, Result};
use libbpf_rs::ProgramInput;

use crate::{
    btf::{Field, PercpuVar, ValueKind},
    cpus,
    kallsyms::Kallsyms,
    modules,
    skel::percpu_read::PercpuReadSkelBuilder,
    skeleton,
};

/// The most bytes read per cpu (`RKF_MAX_VALUE` in percpu_read.bpf.c).
pub const MAX_VALUE: u64 = 64;
/// The most cpus read (`RKF_MAX_CPUS` in percpu_read.bpf.c).
pub const MAX_CPUS: u32 = 256;

/// A per-cpu variable, or one field of it, resolved to an address and a size.
#[derive(Debug)]
pub struct Target {
    /// The variable.
    pub var: PercpuVar,
    /// The field path after the symbol (`nr_running` in `runqueues.nr_running`).
    pub path: Vec<String>,
    /// What to read.
    pub field: Field,
    /// The per-cpu address of the variable, from /proc/kallsyms.
    pub symbol_addr: u64,
}

impl Target {
    /// Resolves `SYMBOL[.FIELD...]` through BTF and /proc/kallsyms.
    pub fn resolve(spec: &str) -> Result<Self> {
        let mut parts = spec.split('.');
        let sym = parts.next().filter(|s| !s.is_empty());
        let Some(sym) = sym else {
            bail!("expected SYMBOL[.FIELD], got {spec:?}")
        };
        let path: Vec<String> = parts.map(str::to_owned).collect();
        if path.iter().any(String::is_empty) {
            bail!("empty field name in {spec:?}");
        }
        let var = PercpuVar::find(sym)?;
        let refs: Vec<&str> = path.iter().map(String::as_str).collect();
        let field = var.field(&refs)?;
        let symbol_addr = Kallsyms::load()?.lookup(sym, var.module.as_deref())?;
        Ok(Self {
            var,
            path,
            field,
            symbol_addr,
        })
    }

    /// `SYMBOL.FIELD` as given.
    pub fn spec(&self) -> String {
        std::iter::once(self.var.name.as_str())
            .chain(self.path.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join(".")
    }
}

/// One cpu's value.
#[derive(Clone, Debug)]
pub struct Reading {
    /// The cpu.
    pub cpu: u32,
    /// The address of the cpu's copy of the field, as bpf_rkf_per_cpu_ptr() resolved it.
    pub addr: u64,
    /// The bytes read, or the error of bpf_probe_read_kernel().
    pub value: std::result::Result<Vec<u8>, i32>,
}

/// Reads `target` on every possible cpu with the percpu_read BPF program.
pub fn read(target: &Target) -> Result<Vec<Reading>> {
    modules::require("rkf_percpu")?;
    let nr = cpus::nr_cpu_ids()?;
    if nr > MAX_CPUS {
        bail!("this system has {nr} cpu ids; rkf percpu reads at most {MAX_CPUS}");
    }
    let size = target.field.size.min(MAX_VALUE);

    let mut obj = MaybeUninit::uninit();
    let skel = skeleton::load::<PercpuReadSkelBuilder>(&mut obj, "percpu_read.bpf.c", |open| {
        let bss = open
            .maps
            .bss_data
            .as_deref_mut()
            .context("percpu_read has no .bss")?;
        bss.target_addr = target.symbol_addr.wrapping_add(target.field.offset);
        bss.value_size = size as u32;
        bss.nr_cpus = nr;
        Ok(())
    })
    .context("the percpu_read program (needs CAP_BPF and CAP_PERFMON)")?;
    let out = skel
        .progs
        .read_percpu
        .test_run(ProgramInput::default())
        .context("running the percpu_read BPF program")?;
    if out.return_value != 0 {
        bail!("percpu_read failed: {}", out.return_value as i32);
    }
    let bss = skel
        .maps
        .bss_data
        .as_deref()
        .context("percpu_read has no .bss")?;
    Ok(cpus::possible()?
        .into_iter()
        .map(|cpu| {
            let c = cpu as usize;
            let value = match bss.read_err[c] {
                0 => Ok(bss.value[c][..size as usize].to_vec()),
                e => Err(e),
            };
            Reading {
                cpu,
                addr: bss.cpu_addr[c],
                value,
            }
        })
        .collect())
}

/// Formats bytes read from the target according to `kind` (little-endian); integers in
/// hexadecimal if `hex`.
pub fn format_value(kind: ValueKind, bytes: &[u8], hex: bool) -> String {
    let mut word = [0u8; 8];
    let n = bytes.len().min(8);
    word[..n].copy_from_slice(&bytes[..n]);
    let raw = u64::from_le_bytes(word);
    let sign_extend = |v: u64, bits: u32| ((v << (64 - bits)) as i64) >> (64 - bits);
    match kind {
        ValueKind::Int { signed } if (1..=8).contains(&bytes.len()) => {
            let bits = bytes.len() as u32 * 8;
            if hex {
                format!("{raw:#x}")
            } else if signed {
                sign_extend(raw, bits).to_string()
            } else {
                raw.to_string()
            }
        }
        ValueKind::Ptr => format!("{raw:#018x}"),
        ValueKind::Bitfield {
            shift,
            bits,
            signed,
        } if bits > 0 && shift + bits <= 64 => {
            let v = (raw >> shift) & (u64::MAX >> (64 - bits));
            if hex {
                format!("{v:#x}")
            } else if signed {
                sign_extend(v, bits).to_string()
            } else {
                v.to_string()
            }
        }
        _ => bytes
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<Vec<_>>()
            .join(" "),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        let i = |signed| ValueKind::Int { signed };
        assert_eq!(format_value(i(false), &[1, 0, 0, 0], false), "1");
        let magic = rkf_core::abi::PERCPU_PROBE_MAGIC;
        assert_eq!(
            format_value(i(true), &magic.to_le_bytes(), true),
            format!("{magic:#x}")
        );
        assert_eq!(
            format_value(i(true), &[0xff, 0xff, 0xff, 0xff], false),
            "-1"
        );
        assert_eq!(
            format_value(i(false), &[0xff, 0xff, 0xff, 0xff], false),
            "4294967295"
        );
        assert_eq!(format_value(i(true), &[0xfe], false), "-2");
        assert_eq!(
            format_value(ValueKind::Ptr, &[0x10, 0, 0, 0, 0, 0x80, 0xff, 0xff], false),
            "0xffff800000000010"
        );
        let bf = ValueKind::Bitfield {
            shift: 4,
            bits: 3,
            signed: false,
        };
        assert_eq!(format_value(bf, &[0x70, 0, 0, 0, 0, 0, 0, 0], false), "7");
        let bf = ValueKind::Bitfield {
            shift: 4,
            bits: 3,
            signed: true,
        };
        assert_eq!(format_value(bf, &[0x70, 0, 0, 0, 0, 0, 0, 0], false), "-1");
        assert_eq!(
            format_value(ValueKind::Bytes, &[0xde, 0xad], false),
            "de ad"
        );
    }
}
