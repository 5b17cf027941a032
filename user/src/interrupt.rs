// SPDX-License-Identifier: GPL-2.0

//! Ending a timed recording early on SIGINT or SIGTERM, as bcc's tools end on Ctrl-C and
//! still print what they gathered.
//!
//! [`on_signals()`] makes the first of those signals set a flag instead of ending the
//! process (a second one ends it at once); the library's timed waits ([`wait()`] and the
//! stack recorders' ring buffer polls) end when the flag is set, and what was recorded
//! until then is reported as usual, with the time it really took.  A process that does
//! not call it keeps the signals' default actions.  The handlers are signal-hook's.

use std::{
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, OnceLock,
    },
    time::{Duration, Instant},
};

use anyhow::{Context, Result};
use signal_hook::{
    consts::{SIGINT, SIGTERM},
    flag,
};

static FLAG: OnceLock<Arc<AtomicBool>> = OnceLock::new();

/// Makes SIGINT and SIGTERM end the timed waits of this process instead of the process:
/// the first sets the flag, a second one of either ends the process.
pub fn on_signals() -> Result<()> {
    let set = FLAG.get_or_init(|| Arc::new(AtomicBool::new(false)));
    for sig in [SIGINT, SIGTERM] {
        // First the exit on a second signal: it reads the flag before the other sets it.
        flag::register_conditional_shutdown(sig, 1, Arc::clone(set))
            .and_then(|_| flag::register(sig, Arc::clone(set)))
            .with_context(|| format!("installing a handler for signal {sig}"))?;
    }
    Ok(())
}

/// Whether a signal asked the timed waits to end ([`on_signals()`]).
pub fn interrupted() -> bool {
    FLAG.get().is_some_and(|f| f.load(Ordering::Relaxed))
}

/// Waits for `d`, or until [`interrupted()`], on a futex (`thread::park_timeout()`), not
/// in nanosleep(2) as `thread::sleep()` would: a recording of this very process (`-p` of
/// itself, as the selftests record) would time the wait in do_nanosleep() too.  A signal
/// interrupts the futex wait, and the flag is read again every 100 ms besides.
pub fn wait(d: Duration) {
    let end = Instant::now() + d;
    loop {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() || interrupted() {
            return;
        }
        std::thread::park_timeout(left.min(Duration::from_millis(100)));
    }
}
