// SPDX-License-Identifier: GPL-2.0

//! Freeing what a publication replaced once no cpu can read it (and, for generated
//! trampolines, once no task runs them), without blocking the caller or a worker: the
//! chain of c-shim/rkf_multi_deferred.c around a workqueue this type owns.

use kernel::{bindings, ffi::c_void, prelude::*};

use crate::rkf_h;

/// The workqueue that frees deferred garbage.
///
/// # Invariants
///
/// `wq` is a workqueue from `rkf_multi_deferred_init()` that this object owns, drained
/// and destroyed only by its drop.
pub(crate) struct Deferred {
    wq: *mut bindings::workqueue_struct,
}

// SAFETY: work may be queued on a workqueue from any task.
unsafe impl Sync for Deferred {}
// SAFETY: the workqueue is not tied to a task.
unsafe impl Send for Deferred {}

impl Deferred {
    /// Sets up the workqueue.
    pub(crate) fn new() -> Result<Self> {
        let wq = rkf_h::rkf_multi_deferred_init();
        if wq.is_null() {
            return Err(ENOMEM);
        }
        // INVARIANT: allocated above.
        Ok(Self { wq })
    }

    /// Drops `garbage` after an RCU grace period and, with `tasks`, an RCU tasks grace
    /// period, and with `trace` an RCU tasks trace one, from a worker; without memory for
    /// that, waits for them here.
    pub(crate) fn defer<T: Send + 'static>(&self, garbage: T, tasks: bool, trace: bool) {
        match KBox::<T>::new_uninit(GFP_KERNEL) {
            Ok(b) => {
                let b = KBox::write(b, garbage);
                // SAFETY: the workqueue is ours (type invariant); `free::<T>` takes the
                // box back exactly once, in process context.
                unsafe {
                    rkf_h::rkf_multi_defer(
                        self.wq,
                        KBox::into_raw(b).cast(),
                        Some(free::<T>),
                        tasks,
                        trace,
                    )
                };
            }
            Err(_) => {
                // No memory to defer: wait for the grace periods here.
                rkf_h::rkf_multi_sync(tasks, trace);
                drop(garbage);
            }
        }
    }
}

/// Frees garbage that [`Deferred::defer()`] boxed.
///
/// # Safety
///
/// `garbage` comes from `KBox::<T>::into_raw()` in [`Deferred::defer()`], and is freed
/// once.
unsafe extern "C" fn free<T>(garbage: *mut c_void) {
    // SAFETY: by the function's contract.
    drop(unsafe { KBox::from_raw(garbage.cast::<T>()) });
}

impl Drop for Deferred {
    fn drop(&mut self) {
        // SAFETY: the workqueue is ours (type invariant); nothing defers to it any more
        // (the module state drops it after the device and the registry).
        unsafe { rkf_h::rkf_multi_deferred_drain(self.wq) };
    }
}
