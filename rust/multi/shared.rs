// SPDX-License-Identifier: GPL-2.0

//! The shared trampoline (c-shim/rkf_multi_tramp.S): the one that serves every function
//! without a generated trampoline of its own, and the frames it leaves in flight.

use crate::rkf_h;

/// The trampoline of a route: 0 names the shared one.
pub(crate) fn address_of(tramp: u64) -> u64 {
    match tramp {
        0 => rkf_h::rkf_multi_tramp as *const () as usize as u64,
        t => t,
    }
}

/// The shared trampoline's frames that may sleep: a task inside a traced function whose
/// fexit programs wait, or inside a sleepable program, returns through the trampoline's
/// text, however long it sleeps there.  Dropping this waits for every such frame, for the
/// module's text to go after it.
///
/// The module state drops it after the device and the registry: no site calls the
/// trampoline any more then (but the anchor's, rust/multi/ftrace.rs, which nothing
/// calls), and no new frame can start.
///
/// # Invariants
///
/// There is one, a field of the module state, dropped at unloading or when the module's
/// init fails after making it, either way once no function is hooked any more.
pub(crate) struct Frames {
    _private: (),
}

impl Frames {
    /// The frames of the shared trampoline.
    ///
    /// # Safety
    ///
    /// One object, the module state's, dropped (at unloading, or when the module's init
    /// fails) only once no function is hooked any more (after the device and the
    /// registry): the wait makes every frame's end wake it, which calls functions a link
    /// could trace.
    pub(crate) unsafe fn new() -> Self {
        // INVARIANT: the caller's guarantee.
        Self { _private: () }
    }
}

impl Drop for Frames {
    fn drop(&mut self) {
        // SAFETY: this is rkf_multi's unloading or failed init, with no function hooked
        // (by the type invariant).
        unsafe { rkf_h::rkf_multi_wait_frames() };
    }
}
