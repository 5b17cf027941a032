// SPDX-License-Identifier: GPL-2.0

//! The `rkf` command as a user runs it (the binary beside this runner, in the kselftest
//! package as in the build tree): a timed command that Ctrl-C (SIGINT) interrupts ends
//! early, reports what it recorded, exits 0 and leaves nothing attached, as bcc's tools
//! end on Ctrl-C.

use std::{
    path::PathBuf,
    process::{Command, Output, Stdio},
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

/// Runs `rkf args`, runs `meanwhile()` once `recording()` says it records, then sends it
/// SIGINT, and returns its output and how long it took to exit after the signal; fails
/// unless it exits 0 within 60 s of the signal.
fn interrupted(
    args: &[&str],
    recording: impl Fn() -> Result<bool>,
    meanwhile: impl FnOnce() -> Result<()>,
) -> Result<(Output, Duration)> {
    let mut child = Command::new(rkf()?)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("running rkf {args:?}"))?;
    let start = Instant::now();
    let waited = loop {
        if recording()? {
            break Ok(());
        }
        if let Some(s) = child.try_wait()? {
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
        let _ = child.kill();
        let out = child.wait_with_output()?;
        bail!("{e}; stderr: {}", String::from_utf8_lossy(&out.stderr));
    }
    let pid = Pid::from_raw(i32::try_from(child.id())?);
    kill(pid, Signal::SIGINT).context("kill(SIGINT)")?;
    let sent = Instant::now();
    while child.try_wait()?.is_none() {
        if sent.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            bail!("rkf {args:?} still running 60 s after SIGINT");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let took = sent.elapsed();
    let out = child.wait_with_output()?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    check!(
        out.status.success(),
        "rkf {args:?} after SIGINT: {}; stderr: {stderr}",
        out.status
    );
    diag!("rkf {args:?} ended {took:?} after SIGINT");
    Ok((out, took))
}

/// `rkf funccount -d 600` interrupted once its link is attached and this process read a
/// file 100 times: it prints its counts (vfs_read among them) and the time it really
/// counted, and detaches.
fn funccount_interrupted() -> Result<()> {
    modules::require("rkf_multi")?;
    check!(
        multi::links()?.is_empty(),
        "a link is there before the test"
    );
    let secs = ASKED.as_secs().to_string();
    let (out, _) = interrupted(
        &["funccount", "-d", &secs, "vfs_read"],
        || Ok(!multi::links()?.is_empty()),
        || {
            for _ in 0..100 {
                std::fs::read("/proc/self/stat")?;
            }
            Ok(())
        },
    )?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let counted: f64 = stdout
        .split_once("counted for ")
        .and_then(|(_, r)| r.split_once(" s"))
        .and_then(|(n, _)| n.parse().ok())
        .with_context(|| format!("no \"counted for N s\" in its output: {stdout}"))?;
    check!(
        counted.total_cmp(&ASKED.as_secs_f64()).is_lt(),
        "it says it counted for {counted} s of the {secs} asked after SIGINT"
    );
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

/// `rkf profile -d 600` interrupted once its program is loaded: it writes the folded
/// stacks it took and unloads its program.
fn profile_interrupted() -> Result<()> {
    modules::require("rkf_stack")?;
    let profile_loaded = || {
        libbpf_rs::query::ProgInfoIter::default().any(|p| p.name.as_encoded_bytes() == b"profile")
    };
    check!(
        !profile_loaded(),
        "a program named profile is there before the test"
    );
    let dir = std::env::temp_dir().join(format!("rkf-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let folded = dir.join("profile.folded");
    let path = folded
        .to_str()
        .context("a temporary path that is not UTF-8")?;
    let secs = ASKED.as_secs().to_string();
    let r = interrupted(
        &["profile", "-d", &secs, "--folded", path],
        || Ok(profile_loaded()),
        || Ok(()),
    );
    let written = std::fs::metadata(&folded).map(|m| m.len());
    let _ = std::fs::remove_dir_all(&dir);
    r?;
    check!(
        written.is_ok(),
        "no folded stacks written after SIGINT: {written:?}"
    );
    check!(
        !profile_loaded(),
        "the profile program is left after the interrupted profile"
    );
    Ok(())
}
