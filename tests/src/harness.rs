// SPDX-License-Identifier: GPL-2.0

//! A small KTAP test harness (Documentation/dev-tools/ktap.rst).
//!
//! Each test is a function returning `Result<()>`; an error or a panic fails it, and its
//! message goes out as KTAP diagnostic lines.  Assertions say what was expected and what
//! came back, as the ASSERT_* macros of the BPF selftests do.

use std::{
    io::Write,
    panic::{self, AssertUnwindSafe},
    sync::Mutex,
};

use anyhow::Result;

/// One test.
pub struct Test {
    /// The KTAP name.
    pub name: &'static str,
    /// The body.
    pub run: fn() -> Result<()>,
}

/// Prints a KTAP diagnostic line.
#[macro_export]
macro_rules! diag {
    ($($arg:tt)*) => {{
        println!("# {}", format!($($arg)*));
    }};
}

/// Fails the test unless `$got == $want`, naming both.
#[macro_export]
macro_rules! check_eq {
    ($got:expr, $want:expr, $($what:tt)+) => {{
        let (got, want) = (&$got, &$want);
        if got != want {
            anyhow::bail!("{}: expected {:?}, got {:?}", format!($($what)+), want, got);
        }
    }};
}

/// Fails the test unless `$cond`, with a message.
#[macro_export]
macro_rules! check {
    ($cond:expr, $($what:tt)+) => {{
        if !$cond {
            anyhow::bail!("{} (failed: {})", format!($($what)+), stringify!($cond));
        }
    }};
}

static LIBBPF_LOG: Mutex<String> = Mutex::new(String::new());

fn libbpf_print(_level: libbpf_rs::PrintLevel, msg: String) {
    LIBBPF_LOG.lock().unwrap().push_str(&msg);
}

/// Sends libbpf's messages, verifier logs included, to a buffer that tests can read.
pub fn capture_libbpf_log() {
    libbpf_rs::set_print(Some((libbpf_rs::PrintLevel::Debug, libbpf_print)));
}

/// Returns, and clears, what libbpf printed since the last call.
pub fn take_libbpf_log() -> String {
    std::mem::take(&mut *LIBBPF_LOG.lock().unwrap())
}

/// Runs `tests` (those whose name contains one of the comma-separated parts of `filter`,
/// if given) and prints KTAP.  Returns
/// the kselftest exit code: 0 all passed, 1 some failed, 4 nothing ran.
pub fn run(tests: &[Test], filter: Option<&str>) -> i32 {
    let selected: Vec<&Test> = tests
        .iter()
        .filter(|t| filter.is_none_or(|f| f.split(',').any(|p| t.name.contains(p))))
        .collect();
    println!("KTAP version 1");
    println!("1..{}", selected.len());
    let mut failed = 0;
    for (i, t) in selected.iter().enumerate() {
        take_libbpf_log();
        let start = std::time::Instant::now();
        let res = panic::catch_unwind(AssertUnwindSafe(t.run));
        println!("# {}: {:.1} s", t.name, start.elapsed().as_secs_f64());
        let err = match res {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(format!("{e:#}")),
            Err(p) => Some(
                p.downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "panic".into()),
            ),
        };
        match err {
            None => println!("ok {} {}", i + 1, t.name),
            Some(e) => {
                failed += 1;
                for line in e.lines() {
                    println!("# {}: {line}", t.name);
                }
                let log = take_libbpf_log();
                for line in log
                    .lines()
                    .rev()
                    .take(20)
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                {
                    println!("# libbpf: {line}");
                }
                println!("not ok {} {}", i + 1, t.name);
            }
        }
        std::io::stdout().flush().ok();
    }
    println!(
        "# totals: pass:{} fail:{failed} skip:0",
        selected.len() - failed
    );
    match (selected.len(), failed) {
        (0, _) => 4,
        (_, 0) => 0,
        _ => 1,
    }
}
