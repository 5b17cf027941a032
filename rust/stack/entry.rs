// SPDX-License-Identifier: GPL-2.0

//! The functions the kfunc entry points of the C shim call: the rules of
//! `__bpf_get_stack()` and `__bpf_get_task_stack()` around the walk it takes.

use core::ptr;

use kernel::ffi::{c_long, c_void};

use super::{buffers::sysctl_max_stack, mm::resolve_build_ids};
use crate::{rkf_h, stack_core};

/// The checks of `__bpf_get_stack()`, before the walk: fills `walk`, or zeroes the buffer
/// and returns `-errno`.
///
/// Called by the kfunc entry points of the shim, which the verifier has checked: `buf` is
/// `size` bytes of writable memory.  The shim then walks the stack in the kfunc's own
/// frame (so that this function is not on the stack the unwinder walks) and hands the
/// result to [`rkf_stack_finish()`].
///
/// # Safety
///
/// `buf` is valid for writes of `size` bytes, and `walk` for a write of a
/// `struct rkf_stack_walk`; nothing else writes either during the call.  The shim
/// guarantees `walk` (its local); of `buf` the verifier guarantees that the program may
/// write it, and the rest is the program's part, as for the kernel's `bpf_get_stack()`:
/// a program that passes memory another cpu writes meanwhile (a shared map value) races
/// with it.
#[no_mangle]
pub(crate) unsafe extern "C" fn rkf_stack_prepare(
    buf: *mut c_void,
    size: u32,
    flags: u64,
    may_fault: bool,
    walk: *mut rkf_h::rkf_stack_walk,
) -> c_long {
    match stack_core::plan(flags, size, sysctl_max_stack()) {
        Ok(req) => {
            // SAFETY: `walk` is valid for writes (the caller's guarantee: the shim's local).
            unsafe {
                walk.write(rkf_h::rkf_stack_walk {
                    user: req.user,
                    build_id: req.build_id,
                    may_fault,
                    skip: req.skip,
                    max_depth: req.max_depth,
                    elem_size: req.elem_size,
                })
            };
            0
        }
        Err(errno) => {
            // SAFETY: `buf` is valid for writes of `size` bytes (the caller's guarantee:
            // the verifier checked that the program may write them).
            unsafe { ptr::write_bytes(buf.cast::<u8>(), 0, size as usize) };
            -(errno as c_long)
        }
    }
}

/// The end of `__bpf_get_stack()`, after the walk stored `nr` entries (or failed with
/// `-errno`): build ids, the return value and the zeroed tail.
///
/// `buf` and `size` are those of [`rkf_stack_prepare()`], `walk` what it filled; the shim
/// stored no more entries than the walk allows (`max_depth - skip`, which fit in `size`).
///
/// # Safety
///
/// `buf` is valid for reads and writes of `size` bytes, and `walk` points to a
/// `struct rkf_stack_walk` that [`rkf_stack_prepare()`] filled for `size`; nothing else
/// writes either during the call (of `buf`, the program's part, as in
/// [`rkf_stack_prepare()`]).
#[no_mangle]
pub(crate) unsafe extern "C" fn rkf_stack_finish(
    buf: *mut c_void,
    size: u32,
    walk: *const rkf_h::rkf_stack_walk,
    nr: c_long,
) -> c_long {
    // SAFETY: `buf` is `size` bytes, valid, and nothing else writes them during the call
    // (the caller's guarantee).
    let bytes = unsafe { core::slice::from_raw_parts_mut(buf.cast::<u8>(), size as usize) };
    if nr < 0 {
        bytes.fill(0);
        return nr;
    }
    // SAFETY: `walk` points to a filled walk (the caller's guarantee).
    let walk = unsafe { &*walk };
    let n = nr as u32;
    if walk.build_id {
        resolve_build_ids(bytes, n, walk.may_fault);
    }
    stack_core::finalize(bytes, n, walk.elem_size) as c_long
}

/// `__bpf_get_task_stack()`'s checks of the task, after [`rkf_stack_prepare()`] filled
/// `walk`: 0, or `-errno` for the shim to finish with (which zeroes the buffer).
///
/// `is_current` tells whether the task is the current one, `user_regs` whether it has user
/// regs, `perf_event` whether the calling program is a perf_event one (see
/// `bpf_rkf_get_task_stack()` in the shim).
///
/// # Safety
///
/// `walk` points to a `struct rkf_stack_walk` that [`rkf_stack_prepare()`] filled.
#[no_mangle]
pub(crate) unsafe extern "C" fn rkf_stack_check_task(
    walk: *const rkf_h::rkf_stack_walk,
    is_current: bool,
    user_regs: bool,
    perf_event: bool,
) -> c_long {
    // SAFETY: `walk` points to a filled walk (the caller's guarantee).
    let user = unsafe { (*walk).user };
    match stack_core::check_task(user, is_current, user_regs, perf_event) {
        Ok(()) => 0,
        Err(errno) => -(errno as c_long),
    }
}

/// `bpf_get_stack_pe()` for an event that samples callchains: copies from the sample's
/// callchain `ips[..nr]` (`ips` is NULL when the sample has none).
///
/// Called by `bpf_rkf_get_stack_pe()`; `buf` is `size` bytes the verifier checked.
///
/// # Safety
///
/// `buf` is valid for reads and writes of `size` bytes, which nothing else writes during
/// the call (the program's part, as in [`rkf_stack_prepare()`]), and `ips` is NULL or
/// valid for reads of `nr` entries for the call.
#[no_mangle]
pub(crate) unsafe extern "C" fn rkf_stack_get_sampled(
    ips: *const u64,
    nr: u64,
    buf: *mut c_void,
    size: u32,
    flags: u64,
) -> c_long {
    // SAFETY: `buf` is `size` bytes, valid, and nothing else writes them during the call
    // (the caller's guarantee).
    let bytes = unsafe { core::slice::from_raw_parts_mut(buf.cast::<u8>(), size as usize) };
    // SAFETY: `ips` holds `nr` entries for the call (the caller's guarantee: the sample's
    // callchain, which outlives the program run that calls this).
    let ips = (!ips.is_null()).then(|| unsafe { core::slice::from_raw_parts(ips, nr as usize) });
    let s = match stack_core::plan_sampled(ips, flags, size, sysctl_max_stack()) {
        Ok(s) => s,
        Err(errno) => {
            bytes.fill(0);
            return -(errno as c_long);
        }
    };
    let ips = ips.unwrap_or_default();
    let chosen = &ips[s.start..s.start + s.n as usize];
    if s.build_id {
        for (i, &ip) in chosen.iter().enumerate() {
            stack_core::set_entry_ip(bytes, i, ip);
        }
        // perf_event programs are never sleepable.
        resolve_build_ids(bytes, s.n, false);
    } else {
        for (dst, &ip) in bytes.chunks_exact_mut(8).zip(chosen) {
            dst.copy_from_slice(&ip.to_ne_bytes());
        }
    }
    stack_core::finalize(bytes, s.n, s.elem_size) as c_long
}

// The definitions above have the prototypes c-shim/rkf.h declares.
const _: () = {
    let _ = [
        rkf_h::rkf_stack_prepare as unsafe extern "C" fn(_, _, _, _, _) -> _,
        rkf_stack_prepare,
    ];
    let _ = [
        rkf_h::rkf_stack_finish as unsafe extern "C" fn(_, _, _, _) -> _,
        rkf_stack_finish,
    ];
    let _ = [
        rkf_h::rkf_stack_get_sampled as unsafe extern "C" fn(_, _, _, _, _) -> _,
        rkf_stack_get_sampled,
    ];
    let _ = [
        rkf_h::rkf_stack_check_task as unsafe extern "C" fn(_, _, _, _) -> _,
        rkf_stack_check_task,
    ];
};
