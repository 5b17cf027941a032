// SPDX-License-Identifier: GPL-2.0

//! The `rkf` command as a user runs it (the binary beside this runner, in the kselftest
//! package as in the build tree): a timed command that Ctrl-C (SIGINT) interrupts ends
//! early, reports what it recorded, exits 0 and leaves nothing attached, as bcc's tools
//! end on Ctrl-C.

use std::{
    path::PathBuf,
    process::{Child, Command, Output, Stdio},
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};
use nix::{
    sys::signal::{kill, Signal},
    unistd::Pid,
};

use crate::{check, diag, harness::Test};
use rkf::{modules, multi};

pub const TESTS: &[Test] = &[
    Test {
        name: "multi_funccount_cli_interrupted",
        run: funccount_interrupted,
    },
    Test {
        name: "multi_funccount_cli_intervals",
        run: funccount_intervals,
    },
    Test {
        name: "stack_profile_cli_interrupted",
        run: profile_interrupted,
    },
];

/// How long the commands are asked to run: far longer than the tests wait.
const ASKED: Duration = Duration::from_secs(600);

/// The `rkf` binary beside this runner.
fn rkf() -> Result<PathBuf> {
    let p = std::env::current_exe()?.with_file_name("rkf");
    check!(
        p.is_file(),
        "no rkf command beside the runner: {}",
        p.display()
    );
    Ok(p)
}

/// A child that is killed and reaped if the test leaves it behind: a 600 s recording left
/// running would hold its link or program into the next tests.
struct Running(Option<Child>);

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Runs `rkf args`, runs `meanwhile()` once `recording(pid)` says it records, then sends
/// it SIGINT, and returns its output and how long it took to exit after the signal; fails
/// unless it exits 0 within 60 s of the signal.
fn interrupted(
    args: &[&str],
    recording: impl Fn(u32) -> Result<bool>,
    meanwhile: impl FnOnce() -> Result<()>,
) -> Result<(Output, Duration)> {
    let mut child = Running(Some(
        Command::new(rkf()?)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("running rkf {args:?}"))?,
    ));
    let c = child.0.as_mut().expect("just spawned");
    let id = c.id();
    let start = Instant::now();
    let waited = loop {
        match recording(id) {
            Ok(true) => break Ok(()),
            Ok(false) => {}
            Err(e) => break Err(e),
        }
        if let Some(s) = c.try_wait()? {
            break Err(anyhow::anyhow!(
                "rkf {args:?} ended before it recorded: {s}"
            ));
        }
        if start.elapsed() > Duration::from_secs(120) {
            break Err(anyhow::anyhow!("rkf {args:?} did not record within 120 s"));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    if let Err(e) = waited.and_then(|()| meanwhile()) {
        let _ = c.kill();
        let out = child.0.take().expect("running").wait_with_output()?;
        bail!("{e}; stderr: {}", String::from_utf8_lossy(&out.stderr));
    }
    kill(Pid::from_raw(i32::try_from(id)?), Signal::SIGINT).context("kill(SIGINT)")?;
    let sent = Instant::now();
    while c.try_wait()?.is_none() {
        check!(
            sent.elapsed() < Duration::from_secs(60),
            "rkf {args:?} still running 60 s after SIGINT"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let took = sent.elapsed();
    let out = child.0.take().expect("running").wait_with_output()?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    check!(
        out.status.success(),
        "rkf {args:?} after SIGINT: {}; stderr: {stderr}",
        out.status
    );
    diag!("rkf {args:?} ended {took:?} after SIGINT");
    Ok((out, took))
}

/// Checks that `text` (a command's output after SIGINT) says, as "`label`N s", that it
/// recorded for less than the [`ASKED`] time.
fn less_than_asked(text: &str, label: &str) -> Result<()> {
    let secs: f64 = text
        .split_once(label)
        .and_then(|(_, r)| r.split_once(" s"))
        .and_then(|(n, _)| n.parse().ok())
        .with_context(|| format!("no \"{label}N s\" in its output: {text}"))?;
    check!(
        secs.total_cmp(&ASKED.as_secs_f64()).is_lt(),
        "it says \"{label}{secs} s\" of the {} s asked, after SIGINT",
        ASKED.as_secs()
    );
    Ok(())
}

/// `rkf funccount OPTIONS vfs_read` interrupted once its link is attached and this
/// process read a file 100 times, for at least `over` (a read every hundredth of it);
/// its output.
fn funccount_reading(options: &[&str], over: Duration) -> Result<String> {
    let args: Vec<&str> = ["funccount"]
        .iter()
        .chain(options)
        .chain(&["vfs_read"])
        .copied()
        .collect();
    let (out, _) = interrupted(
        &args,
        |_| Ok(!multi::links()?.is_empty()),
        || {
            for _ in 0..100 {
                std::fs::read("/proc/self/stat")?;
                std::thread::sleep(over / 100);
            }
            Ok(())
        },
    )?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `rkf funccount -d 600` interrupted once its link is attached and this process read a
/// file 100 times: it prints a vfs_read row and the time it really counted, and
/// detaches.
fn funccount_interrupted() -> Result<()> {
    modules::require("rkf_multi")?;
    check!(
        multi::links()?.is_empty(),
        "a link is there before the test"
    );
    let secs = ASKED.as_secs().to_string();
    let stdout = funccount_reading(&["-d", &secs], Duration::ZERO)?;
    less_than_asked(&stdout, "counted for ")?;
    check!(
        stdout.contains("vfs_read"),
        "no vfs_read row in its output: {stdout}"
    );
    check!(
        multi::links()?.is_empty(),
        "a link is left after the interrupted funccount"
    );
    Ok(())
}

/// `rkf funccount -i 0.2 -p PID vfs_read`, without `-d`, counts until SIGINT, as bcc's
/// funccount -i does: it says so before its first table, prints a table of this
/// process's calls at each 0.2 s while this process reads a file 100 times over a
/// second (at least three before the signal, at later times in turn), and the last one
/// when interrupted; the vfs_read rows add up to at least the 100 reads (each of a whole
/// file: one call or more), its last line says how long it counted, and it detaches.
/// (`multi_funccount_pid_and_intervals` checks the intervals' counts exactly, through the
/// library.)
fn funccount_intervals() -> Result<()> {
    modules::require("rkf_multi")?;
    check!(
        multi::links()?.is_empty(),
        "a link is there before the test"
    );
    let pid = std::process::id().to_string();
    let stdout = funccount_reading(&["-i", "0.2", "-p", &pid], Duration::from_secs(1))?;
    let lines: Vec<&str> = stdout.lines().collect();
    let first = format!("counting calls of pid {pid} every 0.2 s until Ctrl-C");
    let said = lines.iter().position(|l| *l == first);
    let tables: Vec<usize> = (0..lines.len())
        .filter(|&i| lines[i].starts_with("at "))
        .collect();
    check!(
        said.is_some_and(|s| tables.first().is_some_and(|&t| s < t)),
        "no line \"{first}\" before its first table: {stdout}"
    );
    let times: Vec<f64> = tables
        .iter()
        .map(|&i| {
            lines[i]
                .strip_prefix("at ")
                .and_then(|l| l.strip_suffix(" s:"))
                .and_then(|t| t.parse().ok())
                .with_context(|| format!("a table's line {:?}", lines[i]))
        })
        .collect::<Result<_>>()?;
    check!(
        times.len() >= 4 && times.windows(2).all(|w| w[0] < w[1]),
        "tables at {times:?} s: not three or more before the last, in turn: {stdout}"
    );
    let reads: u64 = lines
        .iter()
        .filter_map(|l| l.strip_prefix("vfs_read"))
        .map(|n| n.trim().parse::<u64>())
        .sum::<Result<u64, _>>()
        .with_context(|| format!("a vfs_read row without a count: {stdout}"))?;
    diag!("tables at {times:?} s, {reads} calls of vfs_read in all");
    check!(
        reads >= 100,
        "{reads} calls of vfs_read in its tables, fewer than the 100 reads: {stdout}"
    );
    check!(
        lines
            .last()
            .is_some_and(|l| l.starts_with("counted for ") && l.ends_with(&format!("(pid {pid})"))),
        "its last line is not \"counted for N s (pid {pid})\": {stdout}"
    );
    check!(
        multi::links()?.is_empty(),
        "a link is left after the interrupted funccount"
    );
    Ok(())
}

/// `rkf profile -d 600` interrupted once it samples (it holds its cpu-clock events, and
/// this process then ran for a second, while it waited in its ring buffer poll): it writes
/// the folded stacks it took, this process's among them, says it sampled for less than
/// asked, and unloads its program.
fn profile_interrupted() -> Result<()> {
    modules::require("rkf_stack")?;
    let profile_loaded = || {
        libbpf_rs::query::ProgInfoIter::default().any(|p| p.name.as_encoded_bytes() == b"profile")
    };
    check!(
        !profile_loaded(),
        "a program named profile is there before the test"
    );
    // Its perf events: one per online cpu, each held by its link.
    let cpus = rkf::cpus::online()?.len();
    let sampling = |pid: u32| -> Result<bool> {
        let mut events = 0;
        for e in std::fs::read_dir(format!("/proc/{pid}/fd"))? {
            let target = std::fs::read_link(e?.path()).unwrap_or_default();
            events += usize::from(target.as_os_str() == "anon_inode:[perf_event]");
        }
        Ok(events >= cpus)
    };
    let dir = std::env::temp_dir().join(format!("rkf-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let folded = dir.join("profile.folded");
    let path = folded
        .to_str()
        .context("a temporary path that is not UTF-8")?;
    let secs = ASKED.as_secs().to_string();
    let r = interrupted(
        &["profile", "-d", &secs, "--folded", path],
        sampling,
        || {
            let t = Instant::now();
            while t.elapsed() < Duration::from_secs(1) {
                std::hint::spin_loop();
            }
            Ok(())
        },
    );
    let written = std::fs::read_to_string(&folded);
    let _ = std::fs::remove_dir_all(&dir);
    let (out, _) = r?;
    let written = written.context("no folded stacks written after SIGINT")?;
    // The thread that spun: its name is what the folded stacks start with.
    let comm = std::fs::read_to_string("/proc/thread-self/comm")?;
    let comm = comm.trim_end();
    check!(
        written.lines().any(|l| l.starts_with(comm)),
        "no stack of this process ({comm}) among the folded stacks: {written}"
    );
    less_than_asked(&String::from_utf8_lossy(&out.stderr), " Hz for ")?;
    check!(
        !profile_loaded(),
        "the profile program is left after the interrupted profile"
    );
    Ok(())
}
