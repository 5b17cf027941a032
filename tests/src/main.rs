// SPDX-License-Identifier: GPL-2.0

//! rkf-selftests: the rkf kselftests, printing KTAP.
//!
//! Runs on a machine (normally the test VM) with the rkf modules loaded, as root.
//! Exit status as kselftest expects: 0 all passed, 1 a test failed (or `-t` and `-x`
//! name no test, or leave none: a run of nothing would be a kselftest skip).

use std::io::Write;

use clap::Parser;

mod cli;
mod funccount;
mod funclatency;
mod harness;
mod kmod;
mod lifecycle;
mod multi;
mod offcpu;
mod percpu;
mod privilege;
mod profile;
mod stack;
mod upstream;

mod skel {
    #![allow(clippy::all, missing_docs, non_camel_case_types)]
    pub mod multi {
        include!(concat!(env!("OUT_DIR"), "/multi.skel.rs"));
    }
    pub mod multi_asleep {
        include!(concat!(env!("OUT_DIR"), "/multi_asleep.skel.rs"));
    }
    pub mod multi_filler {
        include!(concat!(env!("OUT_DIR"), "/multi_filler.skel.rs"));
    }
    pub mod multi_sleepable {
        include!(concat!(env!("OUT_DIR"), "/multi_sleepable.skel.rs"));
    }
    pub mod multi_recursion {
        include!(concat!(env!("OUT_DIR"), "/multi_recursion.skel.rs"));
    }
    pub mod multi_testmod {
        include!(concat!(env!("OUT_DIR"), "/multi_testmod.skel.rs"));
    }
    pub mod multi_wide {
        include!(concat!(env!("OUT_DIR"), "/multi_wide.skel.rs"));
    }
    pub mod percpu {
        include!(concat!(env!("OUT_DIR"), "/percpu.skel.rs"));
    }
    pub mod percpu_fail {
        include!(concat!(env!("OUT_DIR"), "/percpu_fail.skel.rs"));
    }
    pub mod percpu_weak {
        include!(concat!(env!("OUT_DIR"), "/percpu_weak.skel.rs"));
    }
    pub mod percpu_types {
        include!(concat!(env!("OUT_DIR"), "/percpu_types.skel.rs"));
    }
    pub mod stack {
        include!(concat!(env!("OUT_DIR"), "/stack.skel.rs"));
    }
    pub mod bench_stack {
        include!(concat!(env!("OUT_DIR"), "/bench_stack.skel.rs"));
    }
    pub mod stack_lost {
        include!(concat!(env!("OUT_DIR"), "/stack_lost.skel.rs"));
    }
    pub mod stack_nest {
        include!(concat!(env!("OUT_DIR"), "/stack_nest.skel.rs"));
    }
    pub mod upstream_get_stack_rawtp_err {
        include!(concat!(
            env!("OUT_DIR"),
            "/upstream_get_stack_rawtp_err.skel.rs"
        ));
    }
    pub mod stack_sleepable {
        include!(concat!(env!("OUT_DIR"), "/stack_sleepable.skel.rs"));
    }
    pub mod task_stack {
        include!(concat!(env!("OUT_DIR"), "/task_stack.skel.rs"));
    }
    pub mod task_stack_fail {
        include!(concat!(env!("OUT_DIR"), "/task_stack_fail.skel.rs"));
    }
    pub mod upstream_get_stack_rawtp {
        include!(concat!(
            env!("OUT_DIR"),
            "/upstream_get_stack_rawtp.skel.rs"
        ));
    }
    pub mod upstream_ksyms_btf {
        include!(concat!(env!("OUT_DIR"), "/upstream_ksyms_btf.skel.rs"));
    }
}

#[derive(Parser)]
#[command(name = "rkf-selftests", about = "rkf kselftests (KTAP)")]
struct Args {
    /// List the tests and exit.
    #[arg(long)]
    list: bool,
    /// Run only the tests named NAME, or whose name starts with NAME (`multi_` is every
    /// rkf_multi test); NAME,NAME,... for several.  A NAME that matches no test fails the
    /// run.
    #[arg(short = 't', long = "test", value_name = "NAME")]
    test: Option<String>,
    /// Leave out the tests named NAME, or whose name starts with NAME; NAME,NAME,... for
    /// several.  A NAME that matches no test fails the run.
    #[arg(short = 'x', long = "except", value_name = "NAME")]
    except: Option<String>,
    /// Attach and detach cycles of the rkf_multi storm tests, 100 to 1,000,000 (default
    /// 10,000, or 500 on a kernel with kmemleak); the storm through generated trampolines
    /// makes a twentieth of them, unless given `--generated-storm-cycles`.
    #[arg(long, value_name = "N", value_parser = storm_cycles)]
    storm_cycles: Option<usize>,
    /// Attach and detach cycles of the storm through generated trampolines, 100 to
    /// 1,000,000, in place of a twentieth of the other storms'.
    #[arg(long, value_name = "N", value_parser = storm_cycles)]
    generated_storm_cycles: Option<usize>,
}

/// `--storm-cycles` and `--generated-storm-cycles`: enough cycles for the storms' callers
/// to call before the churn ends.
fn storm_cycles(arg: &str) -> Result<usize, String> {
    match arg.parse::<usize>() {
        Ok(n) if (100..=1_000_000).contains(&n) => Ok(n),
        Ok(n) => Err(format!("{n} is not in 100..=1000000")),
        Err(e) => Err(e.to_string()),
    }
}

fn all_tests() -> Vec<&'static harness::Test> {
    // The lifecycle tests reload the modules: they go last.
    percpu::TESTS
        .iter()
        .chain(stack::TESTS)
        .chain(profile::TESTS)
        .chain(offcpu::TESTS)
        .chain(funclatency::TESTS)
        .chain(funccount::TESTS)
        .chain(multi::TESTS)
        .chain(cli::TESTS)
        .chain(privilege::TESTS)
        .chain(lifecycle::TESTS)
        .collect()
}

fn main() {
    let args = Args::parse();
    let tests: Vec<harness::Test> = all_tests()
        .into_iter()
        .map(|t| harness::Test {
            name: t.name,
            run: t.run,
        })
        .collect();
    if args.list {
        // Quietly stop when the reader goes away (`--list | head`).
        let mut out = std::io::stdout().lock();
        for t in &tests {
            if writeln!(out, "{}", t.name).is_err() {
                break;
            }
        }
        return;
    }
    multi::set_storm_cycles(args.storm_cycles, args.generated_storm_cycles);
    harness::capture_libbpf_log();
    std::process::exit(harness::run(
        &tests,
        args.test.as_deref(),
        args.except.as_deref(),
    ));
}
