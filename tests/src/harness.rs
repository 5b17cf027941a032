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

use anyhow::{Context, Result};

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

/// The ids of the BPF programs loaded before the first test ran: none of them a test's.
static PROGS_BEFORE: std::sync::OnceLock<std::collections::HashSet<u32>> =
    std::sync::OnceLock::new();

/// The ids of the BPF programs loaded before the first test ran.
pub fn progs_before_tests() -> &'static std::collections::HashSet<u32> {
    PROGS_BEFORE.get_or_init(|| crate::multi::held::prog_ids().into_iter().collect())
}

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

/// The errno of a failed libbpf call as libbpf-rs reports it: `Error::from_raw_os_error()`
/// of the call's negative return, which shows as `std::io::Error` shows an OS error
/// ("Permission denied (os error 13)"); libbpf-rs 0.27 has no accessor for it.
pub fn libbpf_errno(e: &libbpf_rs::Error) -> Option<i32> {
    let shown = e.to_string();
    let (_, n) = shown.rsplit_once("(os error ")?;
    n.strip_suffix(')')?.parse().ok()
}

/// Opens the skeleton of builder `B` (the object `what`) with only its program `prog` to
/// be loaded.
fn open_only<'obj, B>(
    obj: &'obj mut std::mem::MaybeUninit<libbpf_rs::OpenObject>,
    what: &str,
    prog: &str,
) -> Result<B::Output>
where
    B: libbpf_rs::skel::SkelBuilder<'obj> + Default,
{
    use libbpf_rs::skel::OpenSkel;

    let mut open = B::default().open(obj)?;
    let mut found = false;
    for mut p in open.open_object_mut().progs_mut() {
        let this = p.name() == prog;
        found |= this;
        p.set_autoload(this);
    }
    crate::check!(found, "{what} has a program {prog}");
    Ok(open)
}

/// Loads only the program `prog` of the skeleton of builder `B` (the object `what`),
/// which the verifier must accept: the control of a [`load_refused`] row.
pub fn load_only<'obj, B>(
    obj: &'obj mut std::mem::MaybeUninit<libbpf_rs::OpenObject>,
    what: &str,
    prog: &str,
) -> Result<()>
where
    B: libbpf_rs::skel::SkelBuilder<'obj> + Default,
{
    use libbpf_rs::skel::OpenSkel;

    open_only::<B>(obj, what, prog)?
        .load()
        .with_context(|| format!("{prog} of {what} must load"))?;
    Ok(())
}

/// Fails unless the verifier's `log` of a refused load has a line that says `why`, which
/// it reports (`what`: the program).
pub fn verifier_says(log: &str, why: &str, what: &str) -> Result<()> {
    match log.lines().find(|l| l.contains(why)) {
        Some(line) => {
            crate::diag!("{what}: refused: {}", line.trim());
            Ok(())
        }
        None => {
            let last = log.lines().rev().find(|l| !l.trim().is_empty());
            anyhow::bail!("{what}: the verifier log should say {why:?}; it ends with {last:?}")
        }
    }
}

/// Loads only the program `prog` of the skeleton of builder `B` (the object `what`), which
/// the verifier must refuse with `errno`, and returns the verifier's log.
pub fn load_refused<'obj, B>(
    obj: &'obj mut std::mem::MaybeUninit<libbpf_rs::OpenObject>,
    what: &str,
    prog: &str,
    errno: i32,
) -> Result<String>
where
    B: libbpf_rs::skel::SkelBuilder<'obj> + Default,
{
    use libbpf_rs::skel::OpenSkel;

    let open = open_only::<B>(obj, what, prog)?;
    take_libbpf_log();
    let got = match open.load() {
        Ok(_) => anyhow::bail!("{prog} of {what} loaded, but the verifier must refuse it"),
        Err(e) => libbpf_errno(&e).with_context(|| format!("{prog} of {what}: no errno in {e}"))?,
    };
    crate::check_eq!(got, errno, "{prog} of {what}: the load's errno");
    Ok(take_libbpf_log())
}

/// The parts of a comma-separated list of test names or name prefixes (`-t` or `-x`),
/// each of which must select a test of `tests`: a part that selects none is an error, so
/// that a renamed test cannot silently drop out of a list of names.
fn parts<'a>(tests: &[Test], flag: &str, list: &'a str) -> Result<Vec<&'a str>, String> {
    let parts: Vec<&str> = list.split(',').collect();
    if parts.iter().any(|p| p.is_empty()) {
        return Err(format!("{flag} {list:?}: an empty test name"));
    }
    let unknown: Vec<&str> = parts
        .iter()
        .copied()
        .filter(|&p| !tests.iter().any(|t| t.name.starts_with(p)))
        .collect();
    if !unknown.is_empty() {
        return Err(format!(
            "{flag}: no test is named, or has a name starting with, {} (--list shows the tests)",
            unknown.join(", ")
        ));
    }
    Ok(parts)
}

/// The tests to run, in the order of `tests`: those `only` selects (`-t`: a
/// comma-separated list of names or name prefixes, `multi_` being every rkf_multi test;
/// all of `tests` without it), less those `except` selects (`-x`, the same kind of list).
/// A selection that leaves no test is an error: a run of nothing would be a kselftest
/// skip, which runners count as green.
pub fn select<'t>(
    tests: &'t [Test],
    only: Option<&str>,
    except: Option<&str>,
) -> Result<Vec<&'t Test>, String> {
    let only = only.map(|l| parts(tests, "-t", l)).transpose()?;
    let except = except
        .map(|l| parts(tests, "-x", l))
        .transpose()?
        .unwrap_or_default();
    let selected: Vec<&Test> = tests
        .iter()
        .filter(|t| {
            only.as_ref()
                .is_none_or(|o| o.iter().any(|&p| t.name.starts_with(p)))
        })
        .filter(|t| !except.iter().any(|&p| t.name.starts_with(p)))
        .collect();
    if selected.is_empty() {
        return Err("-t and -x leave no test to run".into());
    }
    Ok(selected)
}

/// Runs `tests` (those [`select()`] chooses with `only` and `except`) and prints KTAP.  Returns the
/// kselftest exit code: 0 all passed, 1 some failed, or the filters name no test or
/// leave none.
pub fn run(tests: &[Test], only: Option<&str>, except: Option<&str>) -> i32 {
    let selected = match select(tests, only, except) {
        Ok(s) => s,
        Err(e) => {
            println!("KTAP version 1");
            println!("1..0");
            println!("# {e}");
            eprintln!("rkf-selftests: {e}");
            return 1;
        }
    };
    println!("KTAP version 1");
    println!("1..{}", selected.len());
    progs_before_tests();
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
                // libbpf's last lines first, then the failure: the reason stays next
                // to the "not ok" line, where a log excerpt looks.
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
                for line in e.lines() {
                    println!("# {}: {line}", t.name);
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
    i32::from(failed != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pass() -> Result<()> {
        Ok(())
    }

    const TESTS: &[Test] = &[
        Test {
            name: "multi_fentry_args_cookies_func_ip",
            run: pass,
        },
        Test {
            name: "multi_fexit_return_values",
            run: pass,
        },
        Test {
            name: "stack_kernel_differential",
            run: pass,
        },
        Test {
            name: "stack_deep_kernel_differential",
            run: pass,
        },
    ];

    fn names(filter: Option<&str>) -> Result<Vec<&'static str>, String> {
        Ok(select(TESTS, filter, None)?
            .iter()
            .map(|t| t.name)
            .collect())
    }

    #[test]
    fn exact_names_and_prefixes() {
        assert_eq!(names(None).unwrap().len(), 4);
        assert_eq!(
            names(Some("stack_kernel_differential")),
            Ok(vec!["stack_kernel_differential"])
        );
        assert_eq!(
            names(Some("multi_fentry_args,stack_")),
            Ok(vec![
                "multi_fentry_args_cookies_func_ip",
                "stack_kernel_differential",
                "stack_deep_kernel_differential"
            ])
        );
        // In the tests' order, each once.
        assert_eq!(
            names(Some("multi_fexit_return_values,multi_")),
            Ok(vec![
                "multi_fentry_args_cookies_func_ip",
                "multi_fexit_return_values"
            ])
        );
    }

    #[test]
    fn unknown_names_fail() {
        // A part of a name is not a prefix of it.
        let e = names(Some("stack_kernel_differential,differential,nope")).unwrap_err();
        assert!(e.contains("differential, nope"), "{e}");
        assert!(names(Some("multi_,"))
            .unwrap_err()
            .contains("an empty test name"));
        assert!(names(Some("")).unwrap_err().contains("an empty test name"));
    }

    #[test]
    fn except_leaves_out_and_fails_on_unknown_names() {
        let names = |only, except| -> Result<Vec<&str>, String> {
            Ok(select(TESTS, only, except)?
                .iter()
                .map(|t| t.name)
                .collect())
        };
        assert_eq!(
            names(None, Some("stack_,multi_fexit_return_values")),
            Ok(vec!["multi_fentry_args_cookies_func_ip"])
        );
        assert_eq!(
            names(Some("stack_"), Some("stack_deep_kernel_differential")),
            Ok(vec!["stack_kernel_differential"])
        );
        let e = names(None, Some("multi_,nope")).unwrap_err();
        assert!(e.starts_with("-x: ") && e.contains("nope"), "{e}");
        let e = names(Some("stack_"), Some("stack_")).unwrap_err();
        assert!(e.contains("leave no test"), "{e}");
    }

    /// The errno of an error as libbpf-rs makes one from a libbpf call's return, and none
    /// of one it made otherwise.
    #[test]
    fn libbpf_errno_of_an_os_error() {
        for errno in [libc::EACCES, libc::EINVAL, libc::E2BIG, libc::EPERM] {
            let e = libbpf_rs::Error::from_raw_os_error(errno);
            assert_eq!(libbpf_errno(&e), Some(errno), "{e}");
        }
        let e = libbpf_rs::Error::from(std::io::Error::other("no such program"));
        assert_eq!(libbpf_errno(&e), None, "{e}");
    }
}
