// SPDX-License-Identifier: GPL-2.0

//! The sampling frequencies and durations rkf accepts, each checked by one function.
//!
//! The `parse_*` functions are the CLI's clap value parsers; the `check_*` functions are
//! what they and the library's own checks ([`crate::stacks::profile::Options::validate`]) run.

use std::time::Duration;

/// The highest sampling frequency accepted; the kernel caps it further with
/// `kernel.perf_event_max_sample_rate`.
pub const MAX_FREQUENCY: u64 = 10_000;
/// The longest duration accepted: a day.
pub const MAX_DURATION: Duration = Duration::from_secs(86_400);

/// Checks a sampling frequency in Hz: 1 to [`MAX_FREQUENCY`].
pub fn check_frequency(hz: u64) -> Result<u64, String> {
    if (1..=MAX_FREQUENCY).contains(&hz) {
        Ok(hz)
    } else {
        Err(format!(
            "the frequency must be 1 to {MAX_FREQUENCY} Hz, not {hz}"
        ))
    }
}

/// Parses and checks a sampling frequency in Hz (`-F`).
pub fn parse_frequency(s: &str) -> Result<u64, String> {
    let hz = s
        .parse::<u64>()
        .map_err(|e| format!("{s:?} is not a frequency in Hz: {e}"))?;
    check_frequency(hz)
}

/// Checks a duration: more than 0 and at most [`MAX_DURATION`].
pub fn check_duration(d: Duration) -> Result<Duration, String> {
    if !d.is_zero() && d <= MAX_DURATION {
        Ok(d)
    } else {
        Err(duration_error(d.as_secs_f64()))
    }
}

/// The shortest interval accepted (`rkf funccount -i`): a millisecond, the precision
/// it is printed with.
pub const MIN_INTERVAL: Duration = Duration::from_millis(1);

/// Checks an interval (`rkf funccount -i`): [`MIN_INTERVAL`] to [`MAX_DURATION`].
pub fn check_interval(d: Duration) -> Result<Duration, String> {
    if (MIN_INTERVAL..=MAX_DURATION).contains(&d) {
        Ok(d)
    } else {
        Err(interval_error(d.as_secs_f64()))
    }
}

fn interval_error(secs: f64) -> String {
    format!("the interval must be at least 0.001 s and at most a day, not {secs}")
}

/// Checks that a process to follow exists (`-p`); `None` follows every task.  A thread's
/// id is refused, naming its process: the programs follow a process by its tgid, and
/// /proc/TID exists for any thread.
pub fn check_pid(pid: Option<u32>) -> Result<(), String> {
    let Some(p) = pid else {
        return Ok(());
    };
    let status = match std::fs::read_to_string(format!("/proc/{p}/status")) {
        Ok(s) if p != 0 => s,
        _ => return Err(format!("no process {p}")),
    };
    let tgid = status
        .lines()
        .find_map(|l| l.strip_prefix("Tgid:"))
        .and_then(|v| v.trim().parse::<u32>().ok());
    match tgid {
        Some(t) if t == p => Ok(()),
        Some(t) => Err(format!(
            "{p} is a thread of process {t}: give the process id"
        )),
        None => Err(format!("no process {p} (no Tgid in /proc/{p}/status)")),
    }
}

fn duration_error(secs: f64) -> String {
    format!("the duration must be more than 0 and at most a day, not {secs}")
}

/// Parses a number of seconds, fractions allowed, into a [`Duration`]; `error` says
/// what is wrong with a number that is no length of time (NaN, an infinity, a negative
/// number).
fn parse_secs(s: &str, error: fn(f64) -> String) -> Result<Duration, String> {
    let secs = s
        .parse::<f64>()
        .map_err(|e| format!("{s:?} is not a number of seconds: {e}"))?;
    Duration::try_from_secs_f64(secs).map_err(|_| error(secs))
}

/// Parses and checks a duration in seconds, fractions allowed (`-d`).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    check_duration(parse_secs(s, duration_error)?)
}

/// Parses and checks an interval in seconds, fractions allowed (`rkf funccount -i`).
pub fn parse_interval(s: &str) -> Result<Duration, String> {
    check_interval(parse_secs(s, interval_error)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pids() {
        assert_eq!(check_pid(None), Ok(()));
        assert_eq!(check_pid(Some(std::process::id())), Ok(()));
        assert_eq!(check_pid(Some(0)), Err("no process 0".to_string()));
        assert_eq!(
            check_pid(Some(4_000_000_000)),
            Err("no process 4000000000".to_string())
        );
        // A thread of this process, running while it is checked.
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            // SAFETY: gettid() has no preconditions.
            tx.send(unsafe { libc::gettid() }).unwrap();
            done_rx.recv().ok();
        });
        let tid = rx.recv().unwrap() as u32;
        assert_eq!(
            check_pid(Some(tid)),
            Err(format!(
                "{tid} is a thread of process {}: give the process id",
                std::process::id()
            ))
        );
        done_tx.send(()).unwrap();
        t.join().unwrap();
    }

    #[test]
    fn frequencies() {
        assert_eq!(parse_frequency("49"), Ok(49));
        assert_eq!(parse_frequency("10000"), Ok(10_000));
        assert_eq!(
            parse_frequency("0"),
            Err("the frequency must be 1 to 10000 Hz, not 0".to_owned())
        );
        assert_eq!(
            parse_frequency("10001"),
            Err("the frequency must be 1 to 10000 Hz, not 10001".to_owned())
        );
        assert!(parse_frequency("x")
            .unwrap_err()
            .starts_with("\"x\" is not a frequency in Hz"));
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("5"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration("0.25"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("86400"), Ok(MAX_DURATION));
        for (s, shown) in [("0", "0"), ("nan", "NaN"), ("-1", "-1"), ("inf", "inf")] {
            assert_eq!(
                parse_duration(s),
                Err(format!(
                    "the duration must be more than 0 and at most a day, not {shown}"
                ))
            );
        }
        assert_eq!(
            parse_duration("86401"),
            Err("the duration must be more than 0 and at most a day, not 86401".to_owned())
        );
        // Less than a nanosecond is no time at all.
        assert_eq!(
            parse_duration("1e-10"),
            Err("the duration must be more than 0 and at most a day, not 0".to_owned())
        );
        assert!(parse_duration("5s")
            .unwrap_err()
            .starts_with("\"5s\" is not a number of seconds"));
    }

    /// Intervals of a millisecond to a day.
    #[test]
    fn intervals() {
        assert_eq!(parse_interval("0.5"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_interval("0.001"), Ok(MIN_INTERVAL));
        for (s, shown) in [
            ("0", "0"),
            ("0.0009", "0.0009"),
            ("nan", "NaN"),
            ("-1", "-1"),
        ] {
            assert_eq!(
                parse_interval(s),
                Err(format!(
                    "the interval must be at least 0.001 s and at most a day, not {shown}"
                ))
            );
        }
        assert_eq!(
            check_interval(MAX_DURATION + Duration::from_secs(1)),
            Err("the interval must be at least 0.001 s and at most a day, not 86401".to_owned())
        );
        assert_eq!(check_interval(MAX_DURATION), Ok(MAX_DURATION));
    }
}
