// SPDX-License-Identifier: GPL-2.0

//! The perf callchain buffers the walks use, and the depth they were sized for.

use core::ptr;

use kernel::prelude::*;

use crate::rkf_h;

/// A reference on the perf callchain buffers, held while the module is loaded.
///
/// The verifier takes one for each program that calls `bpf_get_stack()`; kfunc calls get
/// none, so the module holds its own.  While it is held, `kernel.perf_event_max_stack`
/// cannot change (the sysctl handler returns `EBUSY`), so the depth read at run time is
/// the one the buffers were sized for.
///
/// # Invariants
///
/// `get_callchain_buffers()` succeeded for this object and is undone only by its drop.
pub(crate) struct CallchainBuffers {
    _private: (),
}

impl CallchainBuffers {
    /// Takes the reference, sized for the current `kernel.perf_event_max_stack`.
    pub(crate) fn get() -> Result<Self> {
        let max = sysctl_max_stack();
        // `max` is the sysctl's own value, so this fails with EOVERFLOW only if a write
        // lowers it meanwhile (read unlocked, as stack_map_alloc() reads it): the load
        // then fails, and may be tried again.
        kernel::error::to_result(rkf_h::get_callchain_buffers(max as i32))
            .inspect_err(|e| pr_err!("cannot get the perf callchain buffers: {:?}\n", e))?;
        // INVARIANT: the reference was just taken.
        Ok(Self { _private: () })
    }
}

impl Drop for CallchainBuffers {
    fn drop(&mut self) {
        // SAFETY: by the type invariant, this object holds one reference.
        unsafe { rkf_h::put_callchain_buffers() };
    }
}

/// `READ_ONCE(sysctl_perf_event_max_stack)`.
pub(super) fn sysctl_max_stack() -> u32 {
    // SAFETY: an exported int, read once; it only changes through its sysctl handler.
    let v = unsafe { ptr::read_volatile(&raw const rkf_h::sysctl_perf_event_max_stack) };
    v.max(0) as u32
}
