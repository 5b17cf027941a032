// SPDX-License-Identifier: GPL-2.0

//! `rkf`: command-line front end of the rkf kernel modules.

use anyhow::Result;
use clap::{Parser, Subcommand};

use rkf::percpu::{self, Target};

#[derive(Parser)]
#[command(name = "rkf", version, about = "Use the rkf BPF kfunc modules")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Print a per-cpu variable, or one field of it, for every cpu (needs rkf_percpu).
    ///
    /// SYMBOL is a per-cpu variable of vmlinux or of a loaded module, with BTF; FIELD is a
    /// path of struct members, for example `runqueues.nr_running` or `runqueues.cfs.nr_queued`.
    Percpu {
        /// SYMBOL[.FIELD...]
        spec: String,
        /// Also print each cpu's address.
        #[arg(short, long)]
        addr: bool,
    },
}

fn main() -> Result<()> {
    match Cli::parse().cmd {
        Cmd::Percpu { spec, addr } => cmd_percpu(&spec, addr),
    }
}

fn cmd_percpu(spec: &str, show_addr: bool) -> Result<()> {
    let target = Target::resolve(spec)?;
    let readings = percpu::read(&target)?;
    let owner = target.var.module.as_deref().unwrap_or("vmlinux");
    println!(
        "{} ({}, {} bytes at +{:#x} of {} {}, {owner})",
        target.spec(),
        target.field.type_name,
        target.field.size,
        target.field.offset,
        target.var.type_name,
        target.var.name,
    );
    if show_addr {
        println!("{:>5}  {:>18}  {:>20}", "CPU", "ADDRESS", "VALUE");
    } else {
        println!("{:>5}  {:>20}", "CPU", "VALUE");
    }
    for r in readings {
        let value = match &r.value {
            Ok(bytes) => percpu::format_value(target.field.kind, bytes),
            Err(e) => format!("<read error {e}>"),
        };
        if show_addr {
            println!("{:>5}  {:>#18x}  {:>20}", r.cpu, r.addr, value);
        } else {
            println!("{:>5}  {:>20}", r.cpu, value);
        }
    }
    Ok(())
}
