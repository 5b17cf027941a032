// SPDX-License-Identifier: GPL-2.0

//! `bpf_get_stack()` and `bpf_get_task_stack()` as kfuncs: `bpf_rkf_get_stack()`,
//! `bpf_rkf_get_stack_kprobe()`, `bpf_rkf_get_stack_pe()` and `bpf_rkf_get_task_stack()`.
//!
//! The C shim fetches the regs and takes the callchain; this file applies the helper's
//! rules around it (rust/core/src/stack.rs) and resolves build ids.

use core::ptr;

use kernel::{
    bindings,
    ffi::{c_long, c_void},
    page::PAGE_SHIFT,
    prelude::*,
};

use crate::stack_core::{self, AddressSpace, Vma, BUILD_ID_SIZE};
use crate::{kfunc::KfuncSet, rkf_h};

/// The kfunc set for the tracing hook: `bpf_rkf_get_stack()`, `bpf_rkf_get_stack_pe()`,
/// `bpf_rkf_get_task_stack()`.
pub(crate) static TRACING_KFUNCS: KfuncSet =
    // SAFETY: the shim defines `rkf_stack_tracing_kfunc_set` with `BTF_KFUNCS_START/END`, as a
    // const object, never written.
    unsafe { KfuncSet::new(&rkf_h::rkf_stack_tracing_kfunc_set) };

/// The kfunc set for kprobe programs: `bpf_rkf_get_stack_kprobe()`,
/// `bpf_rkf_get_task_stack()`.
pub(crate) static KPROBE_KFUNCS: KfuncSet =
    // SAFETY: the shim defines `rkf_stack_kprobe_kfunc_set` with `BTF_KFUNCS_START/END`, as a
    // const object, never written.
    unsafe { KfuncSet::new(&rkf_h::rkf_stack_kprobe_kfunc_set) };

/// Finds what the tracing set's filter refuses (`bpf_rkf_get_stack_pe()` to any program
/// but a perf_event one), before the set is registered.
///
/// # Safety
///
/// Called from the module's init only (the ids it finds are `__ro_after_init`), before the
/// tracing set is registered (the filter reads them without a lock).
pub(crate) unsafe fn kfunc_filter_init() -> Result {
    // SAFETY: the caller runs in the module's init, before the tracing set is registered,
    // as the function's contract requires.
    kernel::error::to_result(unsafe { rkf_h::rkf_stack_kfunc_filter_init() }).inspect_err(|e| {
        pr_err!(
            "bpf_rkf_get_stack_pe() or bpf_rkf_get_stack() is not in rkf_stack's BTF: {:?}\n",
            e
        )
    })
}

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

/// The per-cpu irq_work slots that defer `mmap_read_unlock()` when irqs are disabled.
///
/// # Invariants
///
/// `rkf_stack_mm_init()` ran for this object; dropping it waits for pending unlocks.
pub(crate) struct MmUnlockWork {
    _private: (),
}

impl MmUnlockWork {
    /// Sets up the slots.
    ///
    /// # Safety
    ///
    /// Called once, from the module's init, before any kfunc can run: initialising a slot
    /// that is queued would corrupt the irq_work list.
    pub(crate) unsafe fn new() -> Self {
        // SAFETY: no slot is in use while it is initialised (this function's contract).
        unsafe { rkf_h::rkf_stack_mm_init() };
        // INVARIANT: just initialised.
        Self { _private: () }
    }
}

impl Drop for MmUnlockWork {
    fn drop(&mut self) {
        // The slots were initialised (type invariant); no program can call the kfuncs
        // any more when the module goes, so no new work is queued.
        rkf_h::rkf_stack_mm_drain();
    }
}

/// `READ_ONCE(sysctl_perf_event_max_stack)`.
fn sysctl_max_stack() -> u32 {
    // SAFETY: an exported int, read once; it only changes through its sysctl handler.
    let v = unsafe { ptr::read_volatile(&raw const rkf_h::sysctl_perf_event_max_stack) };
    v.max(0) as u32
}

/// `current->mm`, read-locked, as an address space for build-id resolution without
/// faults.
///
/// # Invariants
///
/// `mm` and `cookie` come from a successful `rkf_stack_mm_lock()`, so `mm` is read-locked
/// while `self` lives; `found` is 0 or the vma of `mm` that `find_vma()` returned last.
struct LockedMm {
    mm: *mut bindings::mm_struct,
    cookie: *mut c_void,
    found: usize,
}

impl LockedMm {
    fn lock() -> Option<Self> {
        let mut cookie = ptr::null_mut();
        // SAFETY: `cookie` is a valid place for the shim to write.
        let mm = unsafe { rkf_h::rkf_stack_mm_lock(&mut cookie) };
        // Not `then_some()`: that would build, and so drop (unlock), a `LockedMm` for a
        // NULL mm.
        if mm.is_null() {
            None
        } else {
            // INVARIANT: locked above; no vma found yet.
            Some(Self {
                mm,
                cookie,
                found: 0,
            })
        }
    }
}

impl Drop for LockedMm {
    fn drop(&mut self) {
        // SAFETY: `mm` and `cookie` come from a successful `rkf_stack_mm_lock()` (type
        // invariant).
        unsafe { rkf_h::rkf_stack_mm_unlock(self.mm, self.cookie) };
    }
}

/// The vma of `mm` that `find_vma()` gives for `ip`, if any.
///
/// # Safety
///
/// `mm` is read-locked, and stays so while the result's `handle` is used.
unsafe fn vma_at(
    mm: *mut bindings::mm_struct,
    ip: u64,
) -> Option<(Vma, *mut bindings::vm_area_struct)> {
    // SAFETY: `mm` is read-locked (the caller's contract), as find_vma() requires.
    let vma = unsafe { bindings::find_vma(mm, ip as usize) };
    if vma.is_null() {
        return None;
    }
    // SAFETY: `vma` belongs to the read-locked mm and stays valid while it is locked.
    let v = unsafe { &*vma };
    // SAFETY: the first union member of a live vma holds `vm_start`/`vm_end`.
    let range = unsafe { v.__bindgen_anon_1.__bindgen_anon_1 };
    let found = Vma {
        start: range.vm_start as u64,
        end: range.vm_end as u64,
        pgoff: v.vm_pgoff as u64,
        anonymous: v.vm_ops.is_null(),
        handle: vma as usize,
    };
    Some((found, vma))
}

impl AddressSpace for LockedMm {
    fn find_vma(&mut self, ip: u64) -> Option<Vma> {
        // SAFETY: `self.mm` is read-locked while `self` lives (type invariant).
        let (v, vma) = unsafe { vma_at(self.mm, ip) }?;
        // INVARIANT: the vma `find_vma()` returned last.
        self.found = vma as usize;
        Some(v)
    }

    fn build_id(&mut self, vma: &Vma, out: &mut [u8; BUILD_ID_SIZE]) -> bool {
        // Only the vma this lookup found: any other `handle` is not known to be one.
        if vma.handle == 0 || vma.handle != self.found {
            return false;
        }
        // SAFETY: `handle` is the vma of the read-locked mm that `find_vma()` returned
        // last (type invariant) and `out` has room for BUILD_ID_SIZE_MAX bytes.
        let r = unsafe {
            bindings::build_id_parse_nofault(
                vma.handle as *mut bindings::vm_area_struct,
                out.as_mut_ptr(),
                ptr::null_mut(),
            )
        };
        r == 0
    }
}

/// `current->mm` for build ids read where a page fault is allowed (a sleepable program),
/// as 7.3's `stack_map_get_build_id_offset_sleepable()` reads them: each lookup
/// read-locks the mm (a trylock), takes the vma that holds `ip` (`vma_lookup()`), pins
/// its file and unlocks; the build id is then read from the pinned file with no lock
/// held.  Reading a file may take the filesystem's locks (an inode lock, under which a
/// direct read pins user pages and so takes the mmap lock), which must not nest inside
/// the mmap lock.  A vma of the file read last (another mapping of the same ELF: text,
/// rodata) takes the build id read from it instead of reading the file again, and a vma
/// without a file in between (JIT code, anonymous memory) leaves it pinned for the next,
/// as 7.3's helper keeps its last resolved file.
///
/// # Invariants
///
/// `file` is NULL or holds a reference taken by `get_file()`, dropped when a lookup
/// finds a vma of another file, or with `self`.  `id` is the build id read from `file`
/// once it has been read, and `None` before that and while `file` is NULL.  `at_file`:
/// the vma the last successful lookup found is one of `file`'s.
struct PinningMm {
    file: *mut bindings::file,
    id: Option<[u8; BUILD_ID_SIZE]>,
    at_file: bool,
}

impl PinningMm {
    fn new() -> Self {
        // INVARIANT: no file yet, and no vma.
        Self {
            file: ptr::null_mut(),
            id: None,
            at_file: false,
        }
    }

    fn unpin(&mut self) {
        if !self.file.is_null() {
            // SAFETY: by the type invariant, `file` holds a reference of ours.
            unsafe { bindings::fput(self.file) };
            // INVARIANT: the reference is dropped, and its id with it.
            self.file = ptr::null_mut();
            self.id = None;
        }
    }
}

impl Drop for PinningMm {
    fn drop(&mut self) {
        self.unpin();
    }
}

impl AddressSpace for PinningMm {
    fn find_vma(&mut self, ip: u64) -> Option<Vma> {
        let (found, file) = {
            let mm = LockedMm::lock()?;
            // SAFETY: `mm` is read-locked until it drops at the end of this block, and the
            // vma is used only before that.
            let (found, vma) = unsafe { vma_at(mm.mm, ip) }?;
            if ip < found.start {
                // vma_lookup(): no vma holds `ip`.
                return None;
            }
            let file = if found.anonymous {
                ptr::null_mut()
            } else {
                // SAFETY: `vma` is live while the mm is locked.
                unsafe { (*vma).vm_file }
            };
            if !file.is_null() && file != self.file {
                // SAFETY: `file` is the live vma's file, whose reference the vma holds
                // while the mm is locked; get_file() takes one of our own, which goes
                // into `self.file` below.
                unsafe { bindings::get_file(file) };
            }
            (found, file)
        };
        // Unlocked: the file put, if it was the last reference, is not released under the
        // mmap lock.  The same file keeps its reference and its build id, and so does a
        // vma without a file.
        if !file.is_null() && file != self.file {
            self.unpin();
            // INVARIANT: the reference taken above; no id read from it yet.
            self.file = file;
        }
        // INVARIANT: whether this vma is one of `self.file`'s.
        self.at_file = !file.is_null();
        Some(Vma { handle: 0, ..found })
    }

    fn build_id(&mut self, _vma: &Vma, out: &mut [u8; BUILD_ID_SIZE]) -> bool {
        if !self.at_file {
            return false;
        }
        if let Some(id) = self.id {
            *out = id;
            return true;
        }
        // build_id_parse() reads nothing of its vma but `vm_file` (lib/buildid.c: it hands
        // `vma->vm_file` to __build_id_parse()); the vma itself may be gone once the mm is
        // unlocked, so it gets one that holds only the pinned file.  Exporting
        // build_id_parse_file(), which 7.3's helper calls, would let this go.
        // SAFETY: `vm_area_struct` is plain C data, for which all zeroes is a valid value.
        let mut vma: bindings::vm_area_struct = unsafe { core::mem::zeroed() };
        vma.vm_file = self.file;
        // SAFETY: `vma.vm_file` holds our reference (type invariant), `out` has room for
        // BUILD_ID_SIZE_MAX bytes, no lock is held, and the caller is a sleepable program
        // where it may sleep (`may_fault`), as build_id_parse() may fault and read the file.
        let read =
            unsafe { bindings::build_id_parse(&mut vma, out.as_mut_ptr(), ptr::null_mut()) == 0 };
        if read {
            // INVARIANT: the build id read from `file`.
            self.id = Some(*out);
        }
        read
    }
}

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
/// regs (see `bpf_rkf_get_task_stack()` in the shim).
///
/// # Safety
///
/// `walk` points to a `struct rkf_stack_walk` that [`rkf_stack_prepare()`] filled.
#[no_mangle]
pub(crate) unsafe extern "C" fn rkf_stack_check_task(
    walk: *const rkf_h::rkf_stack_walk,
    is_current: bool,
    user_regs: bool,
) -> c_long {
    // SAFETY: `walk` points to a filled walk (the caller's guarantee).
    let user = unsafe { (*walk).user };
    match stack_core::check_task(user, is_current, user_regs) {
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

/// The build-id pass of `stack_map_get_build_id_offset()` over the first `n` entries,
/// parsing where a page fault is allowed if `may_fault`.
fn resolve_build_ids(bytes: &mut [u8], n: u32, may_fault: bool) {
    if may_fault {
        let mut mm = PinningMm::new();
        stack_core::resolve_build_ids(&mut mm, bytes, n as usize, PAGE_SHIFT as u32);
        return;
    }
    match LockedMm::lock() {
        Some(mut mm) => {
            stack_core::resolve_build_ids(&mut mm, bytes, n as usize, PAGE_SHIFT as u32)
        }
        None => stack_core::fall_back_to_ips(bytes, n as usize),
    }
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
        rkf_h::rkf_stack_check_task as unsafe extern "C" fn(_, _, _) -> _,
        rkf_stack_check_task,
    ];
};
