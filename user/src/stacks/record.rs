// SPDX-License-Identifier: GPL-2.0

//! The ring buffer loop that both stack programs deliver their records through.

use std::{
    cell::RefCell,
    time::{Duration, Instant},
};

use anyhow::Result;
use libbpf_rs::{MapCore, RingBufferBuilder};

/// Reads records of type `S` from the ring buffer `map` for `duration`, handing them to
/// `take` about every 100 ms, so that user frames are symbolised while their processes
/// still run.  Then calls `stop` (which must stop the program writing) and hands over
/// what is left.  A record too short to be an `S` is not handed over.
pub(super) fn collect<S: plain::Plain + Default>(
    map: &dyn MapCore,
    duration: Duration,
    stop: impl FnOnce(),
    mut take: impl FnMut(S),
) -> Result<()> {
    let raw: RefCell<Vec<S>> = RefCell::new(Vec::new());
    let mut rb = RingBufferBuilder::new();
    rb.add(map, |data: &[u8]| {
        let mut s = S::default();
        if plain::copy_from_bytes(&mut s, data).is_ok() {
            raw.borrow_mut().push(s);
        }
        0
    })?;
    let rb = rb.build()?;
    let drain = |take: &mut dyn FnMut(S)| raw.borrow_mut().drain(..).for_each(take);
    let end = Instant::now() + duration;
    while let Some(left) = end.checked_duration_since(Instant::now()) {
        if crate::interrupt::interrupted() {
            break;
        }
        match rb.poll(left.min(Duration::from_millis(100))) {
            // A signal: the loop reads the flag again.
            Err(e) if e.kind() == libbpf_rs::ErrorKind::Interrupted => {}
            r => r?,
        }
        drain(&mut take);
    }
    stop();
    rb.consume()?;
    drain(&mut take);
    Ok(())
}
