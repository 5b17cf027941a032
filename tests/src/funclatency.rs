// SPDX-License-Identifier: GPL-2.0

//! `rkf funclatency`: calls of a known length are counted once each, in the slot of their
//! length in each unit, with their time.

use std::{
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context, Result};
use nix::{
    sys::time::TimeSpec,
    time::{clock_nanosleep, ClockId, ClockNanosleepFlags},
};

use crate::{check, check_eq, diag, harness::Test};
use rkf::{
    funclatency::{self, Options, Unit, SLOTS},
    modules, multi,
};

pub const TESTS: &[Test] = &[Test {
    name: "funclatency_known_latency",
    run: known_latency,
}];

/// The sleeper thread's name.
const SLEEPER: &str = "rkf-fl-sleep";
/// Sleeps, each of `SLEEP`.
const SLEEPS: u32 = 5;
const SLEEP: Duration = Duration::from_millis(20);
/// Each unit, and the slot where a call of at least 20 ms (`SLEEP`) and under the slot's
/// end is counted in it: 16,777,216 to 33,554,431 ns, 16,384 to 32,767 us, 16 to 31 ms.
const UNITS: [(Unit, usize); 3] = [(Unit::Nsecs, 24), (Unit::Usecs, 14), (Unit::Msecs, 4)];

/// In each unit of [`UNITS`] (`-n`, `-u`, `-m`), one recording: a thread sleeps `SLEEPS`
/// times for `SLEEP` (clock_nanosleep(), CLOCK_MONOTONIC, relative) while funclatency
/// times do_nanosleep() in this process only (`-p` of its own pid).  Nothing else in the
/// process calls nanosleep(2) meanwhile: the runner waits in a join, and funclatency in a
/// futex wait.
///
/// Each call takes at least `SLEEP`: do_nanosleep() arms its timer itself, after the
/// program took the entry time, to expire `SLEEP` after that on CLOCK_MONOTONIC (which
/// `bpf_ktime_get_ns()` reads too), and returns only once the timer has fired, since no
/// signal comes to interrupt it (each clock_nanosleep() must return 0).  Each call takes
/// at most what the thread measured around it on CLOCK_MONOTONIC.  So call `i` is counted
/// in a slot from the unit's slot of 20 ms (in microseconds 14, 16,384 to 32,767 us) to
/// the slot of the thread's measurement `i` in that unit: in microseconds slot 14 alone
/// when the wake-up came less than 12.768 ms late, a later one allowed for a late wake-up
/// on a loaded host, but only as many calls in slots at or past any slot as there were
/// measurements that reach it.
///
/// So: exactly `SLEEPS` calls of do_nanosleep (none of another process that sleeps as
/// often meanwhile: the pid filter; no early return: no signal), counted in slots the
/// measurements allow as above and in no slot before the unit's slot of 20 ms; in all at
/// least `SLEEPS` x 20 ms and at most the sum of the thread's measurements, and the
/// report's total that sum in the unit; no exit of a function without a histogram; and
/// no link left once it returns.
fn known_latency() -> Result<()> {
    modules::require("rkf_multi")?;
    for (unit, slot) in UNITS {
        check_eq!(
            slot_in(SLEEP, unit)?,
            slot,
            "the slot of {SLEEP:?} in {}",
            unit.label()
        );
        known_latency_in(unit, slot).with_context(|| format!("in {}", unit.label()))?;
    }
    Ok(())
}

/// [`known_latency()`] in `unit`, whose slot of `SLEEP` is `slot`.
fn known_latency_in(unit: Unit, slot: usize) -> Result<()> {
    let opts = Options {
        duration: Duration::from_millis(100),
        unit,
        pid: Some(std::process::id()),
    };
    let mut slept: Option<Result<Vec<Duration>>> = None;
    let mut other_status: Option<Result<std::process::ExitStatus>> = None;
    let l = funclatency::record_then(&["do_nanosleep"], &opts, || {
        // The sleeps all happen here, while the link is attached: funclatency waits its
        // duration only after this returns.  Another process sleeps as often meanwhile:
        // the pid filter must leave its calls out.
        let other = std::process::Command::new("sh")
            .args(["-c", "for i in 1 2 3 4 5; do sleep 0.02; done"])
            .spawn()
            .map_err(anyhow::Error::from);
        slept = Some(
            thread::Builder::new()
                .name(SLEEPER.into())
                .spawn(sleeps)
                .map_err(anyhow::Error::from)
                .and_then(|t| t.join().expect("the sleeper panicked")),
        );
        other_status = Some(other.and_then(|mut c| c.wait().map_err(anyhow::Error::from)));
    })?;
    let slept = slept.context("the recording did not start")??;
    let status = other_status.context("the other process did not start")??;
    check!(status.success(), "the other process's sleeps: {status}");
    diag!("the sleeper measured {slept:?}");
    for line in l.report(1).lines() {
        diag!("{line}");
    }

    check_eq!(l.attached, 1, "functions attached");
    check_eq!(l.unknown, 0, "exits of a function without a histogram");
    let h = l
        .funcs
        .iter()
        .find(|h| h.name == "do_nanosleep")
        .context("no histogram of do_nanosleep")?;
    diag!(
        "do_nanosleep: {} calls, {} ns in all; {} runs missed",
        h.count,
        h.total_ns,
        l.missed
    );
    // Nothing calls do_nanosleep() from inside a program run (an interrupt does not):
    // every run on every cpu ran.
    check_eq!(l.missed, 0, "runs the recursion guard skipped");
    check_eq!(
        h.count,
        u64::from(SLEEPS),
        "calls of do_nanosleep by this process"
    );
    let highest: Vec<usize> = slept
        .iter()
        .map(|&d| slot_in(d, unit))
        .collect::<Result<_>>()?;
    diag!("the measurements allow slots {slot} to {highest:?}");
    check_eq!(
        h.slots.iter().sum::<u64>(),
        u64::from(SLEEPS),
        "calls of do_nanosleep in the slots ({:?})",
        h.slots
    );
    check_eq!(
        h.slots[..slot].iter().sum::<u64>(),
        0,
        "calls of do_nanosleep counted before slot {slot}: under 20 ms ({:?})",
        h.slots
    );
    for s in slot..SLOTS {
        let counted: u64 = h.slots[s..].iter().sum();
        let allowed = highest.iter().filter(|&&top| top >= s).count();
        check!(
            counted <= u64::try_from(allowed)?,
            "{counted} calls of do_nanosleep counted in slot {s} or later, where only {allowed} of the thread's measurements reach ({:?})",
            h.slots
        );
    }
    let least = u64::try_from((SLEEP * SLEEPS).as_nanos())?;
    let most = u64::try_from(slept.iter().sum::<Duration>().as_nanos())?;
    check!(
        (least..=most).contains(&h.total_ns),
        "do_nanosleep took {} ns in all, not between {least} ns ({SLEEPS} x {SLEEP:?}) and the {most} ns the thread measured",
        h.total_ns
    );
    let label = unit.label();
    let total = format!(
        "total: {} {label}, count: {SLEEPS}\n",
        h.total_ns / unit.ns()
    );
    let report = l.report(1);
    check!(
        report.contains(&format!("     {label:<19} : count")) && report.contains(&total),
        "the report has no {label} histogram or no \"{}\": {report}",
        total.trim_end()
    );
    check!(
        multi::links()?.is_empty(),
        "a link is left after funclatency returned"
    );
    Ok(())
}

/// The slot a call of `d` is counted in, in `unit`.
fn slot_in(d: Duration, unit: Unit) -> Result<usize> {
    Ok(funclatency::slot_of(
        u64::try_from(d.as_nanos())? / unit.ns(),
    ))
}

/// Sleeps `SLEEPS` times for `SLEEP`, and returns how long each sleep took.
fn sleeps() -> Result<Vec<Duration>> {
    let ts = TimeSpec::from_duration(SLEEP);
    (0..SLEEPS)
        .map(|i| {
            let t = Instant::now();
            clock_nanosleep(ClockId::CLOCK_MONOTONIC, ClockNanosleepFlags::empty(), &ts)
                .with_context(|| format!("clock_nanosleep {i}"))?;
            Ok(t.elapsed())
        })
        .collect()
}
