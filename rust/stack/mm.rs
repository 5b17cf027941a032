// SPDX-License-Identifier: GPL-2.0

//! The current task's address space, for the build ids of user stacks: read-locked
//! where no page fault is allowed, or one vma at a time with its file pinned where one is
//! (a sleepable program), and the irq_work that unlocks it where irqs are disabled.

use core::ptr;

use kernel::{bindings, ffi::c_void, page::PAGE_SHIFT};

use crate::rkf_h;
use crate::stack_core::{self, AddressSpace, Vma, BUILD_ID_SIZE};

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
    Some((unsafe { vma_fields(vma) }, vma))
}

/// What the build-id pass reads of `vma`, its handle `vma` itself.
///
/// # Safety
///
/// `vma` is live and stable: its mm read-locked, or itself read-locked
/// (`lock_vma_under_rcu()`).
unsafe fn vma_fields(vma: *mut bindings::vm_area_struct) -> Vma {
    // SAFETY: `vma` is live and stable (the caller's contract).
    let v = unsafe { &*vma };
    // SAFETY: the first union member of a live vma holds `vm_start`/`vm_end`.
    let range = unsafe { v.__bindgen_anon_1.__bindgen_anon_1 };
    Vma {
        start: range.vm_start as u64,
        end: range.vm_end as u64,
        pgoff: v.vm_pgoff as u64,
        anonymous: v.vm_ops.is_null(),
        handle: vma as usize,
    }
}

/// The vma of `current->mm` that holds an address, read-locked by its own lock
/// (`lock_vma_under_rcu()`), with the mmap lock not taken.
///
/// # Invariants
///
/// `vma` comes from a successful `rkf_stack_vma_lock()` and is read-locked while `self`
/// lives.
struct LockedVma {
    vma: *mut bindings::vm_area_struct,
}

impl LockedVma {
    fn lock(ip: u64) -> Option<Self> {
        let vma = rkf_h::rkf_stack_vma_lock(ip as usize);
        // Not `then_some()`: that would build, and so drop (unlock), a `LockedVma` for a
        // NULL vma.
        if vma.is_null() {
            None
        } else {
            // INVARIANT: locked above.
            Some(Self { vma })
        }
    }
}

impl Drop for LockedVma {
    fn drop(&mut self) {
        // SAFETY: `vma` is read-locked by a successful `rkf_stack_vma_lock()` (type
        // invariant), and dropped once.
        unsafe { rkf_h::rkf_stack_vma_unlock(self.vma) };
    }
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
/// read-locks the vma that holds `ip` by its own lock (`lock_vma_under_rcu()`), or else
/// the mm (a trylock) and takes that vma (`vma_lookup()`), as `stack_map_lock_vma()`
/// does; it pins the vma's file and unlocks, and the build id is then read from the
/// pinned file with no lock held.  Reading a file may take the filesystem's locks (an
/// inode lock, under which a direct read pins user pages and so takes the mmap lock),
/// which must not nest inside the mmap lock (nor inside a vma's).  A vma of the file read
/// last (another mapping of the same ELF: text, rodata) takes the build id read from it
/// instead of reading the file again, and a vma without a file in between (JIT code,
/// anonymous memory) leaves it pinned for the next, as 7.3's helper keeps its last
/// resolved file.
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

    /// The fields of `vma` and its file (NULL for an anonymous vma), with a reference of
    /// ours taken on a file other than `self.file`, which the caller puts into
    /// `self.file` once the lock is dropped.
    ///
    /// # Safety
    ///
    /// `vma` is live and stable (its mm or itself read-locked) while this runs.
    unsafe fn snapshot(&self, vma: *mut bindings::vm_area_struct) -> (Vma, *mut bindings::file) {
        // SAFETY: `vma` is live and stable (the caller's contract).
        let found = unsafe { vma_fields(vma) };
        let file = if found.anonymous {
            ptr::null_mut()
        } else {
            // SAFETY: as above.
            unsafe { (*vma).vm_file }
        };
        if !file.is_null() && file != self.file {
            // SAFETY: `file` is the live vma's file, whose reference the vma holds while
            // it is locked; get_file() takes one of our own, which the caller puts into
            // `self.file`.
            unsafe { bindings::get_file(file) };
        }
        (found, file)
    }
}

impl Drop for PinningMm {
    fn drop(&mut self) {
        self.unpin();
    }
}

impl AddressSpace for PinningMm {
    fn find_vma(&mut self, ip: u64) -> Option<Vma> {
        let (found, file) = if let Some(locked) = LockedVma::lock(ip) {
            // SAFETY: the vma is read-locked until `locked` drops at the end of this block.
            unsafe { self.snapshot(locked.vma) }
        } else {
            let mm = LockedMm::lock()?;
            // SAFETY: `mm` is read-locked until it drops at the end of this block, and the
            // vma is used only before that.
            let (found, vma) = unsafe { vma_at(mm.mm, ip) }?;
            if ip < found.start {
                // vma_lookup(): no vma holds `ip`.
                return None;
            }
            // SAFETY: as above.
            unsafe { self.snapshot(vma) }
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

/// The build-id pass of `stack_map_get_build_id_offset()` over the first `n` entries,
/// parsing where a page fault is allowed if `may_fault`.
pub(super) fn resolve_build_ids(bytes: &mut [u8], n: u32, may_fault: bool) {
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
