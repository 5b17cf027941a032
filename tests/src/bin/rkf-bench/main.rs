// SPDX-License-Identifier: GPL-2.0

//! rkf-bench: the rkf benchmarks, run in the bench VM (`make bench`).
//!
//! Each benchmark measures rkf against the in-kernel feature it replaces, in the same
//! boot.  The VM runs with `-icount shift=0`: guest time advances one nanosecond per
//! instruction, so the costs are instruction counts and their ratios repeat across hosts
//! and runs.

use anyhow::{ensure, Result};
use clap::Parser;

mod kmem;
mod multi;
mod percpu;
mod stack;
#[path = "../../upstream.rs"]
mod upstream;

mod skel {
    #![allow(clippy::all, missing_docs, non_camel_case_types)]
    pub mod bench_stack {
        include!(concat!(env!("OUT_DIR"), "/bench_stack.skel.rs"));
    }
    pub mod bench_multi {
        include!(concat!(env!("OUT_DIR"), "/bench_multi.skel.rs"));
    }
    pub mod bench_percpu {
        include!(concat!(env!("OUT_DIR"), "/bench_percpu.skel.rs"));
    }
}

#[derive(Parser)]
#[command(
    name = "rkf-bench",
    about = "rkf benchmarks against the in-kernel equivalents"
)]
struct Args {
    /// Rounds per case; the median is reported.
    #[arg(long, default_value_t = 15)]
    rounds: usize,
    /// Only rkf_multi's per-call table (for the boots on cpus with a mitigation turned on).
    #[arg(long)]
    per_call: bool,
}

/// The median of `v`, which is not empty.
fn median(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    v[v.len() / 2]
}

fn main() -> Result<()> {
    let args = Args::parse();
    ensure!(args.rounds > 0, "--rounds must be at least 1");
    if args.per_call {
        return multi::per_call_only();
    }
    stack::bench(args.rounds)?;
    println!();
    percpu::bench(args.rounds)?;
    println!();
    multi::bench()
}
