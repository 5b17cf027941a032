// SPDX-License-Identifier: GPL-2.0

//! Where rkf_multi's arrays live: slab memory while they are small, a vmalloc area once
//! they are large, as `bpf_map_area_alloc()` (kernel/bpf/syscall.c) places a BPF map's.
//!
//! Most of rkf_multi's arrays have an entry per traced function: the table's functions,
//! programs, index and trampolines, an image's program slots, a link's targets and
//! counters, and what an attach computes on the way.  [`KVVec`](kernel::alloc::KVVec)'s
//! `kvmalloc()` tries kmalloc() at every size, and a kmalloc() larger than its caches
//! takes a power of two of pages: on the distro kernel an attach and detach of 43,713
//! functions asked for 25.8 MB in such arrays and were given 35.3 MB (the table's entries,
//! 32 bytes each then, 1.4 MB, took 2 MiB).  Past `PAGE_ALLOC_COSTLY_ORDER`, the order up to
//! which the page allocator tries hard, an [`Area`] takes a vmalloc area instead, whose
//! size is rounded up to a page only; below it, it is [`KVmalloc`] as it is.

use core::{alloc::Layout, ptr::NonNull};

use kernel::{
    alloc::{
        allocator::{KVmalloc, Vmalloc},
        AllocError, Allocator, Flags, NumaNode,
    },
    bindings,
    page::PAGE_SIZE,
};

/// The largest array kept in slab memory (or where [`KVmalloc`] puts it): as
/// `bpf_map_area_alloc()`, `PAGE_SIZE << PAGE_ALLOC_COSTLY_ORDER`.
pub(crate) const SLAB_MAX: usize = PAGE_SIZE << bindings::PAGE_ALLOC_COSTLY_ORDER;

/// The allocator of rkf_multi's arrays: [`KVmalloc`] up to [`SLAB_MAX`] bytes, [`Vmalloc`]
/// beyond.  An array that grows past [`SLAB_MAX`] moves into a vmalloc area; one in a
/// vmalloc area stays there.
pub(crate) struct Area;

/// An array of rkf_multi's, in an [`Area`].
pub(crate) type AreaVec<T> = kernel::alloc::Vec<T, Area>;

// SAFETY: every allocation is one of `KVmalloc` or of `Vmalloc`, valid until it is passed
// to `realloc` again: `KVmalloc` reallocates and frees both kinds (kvrealloc() and
// kvfree() tell them apart by their address, as `realloc` does), and a move from slab
// memory into a vmalloc area copies what `realloc` guarantees to keep before it frees the
// old one.  Both allocators align to at least `KVmalloc::MIN_ALIGN`.
unsafe impl Allocator for Area {
    const MIN_ALIGN: usize = <KVmalloc as Allocator>::MIN_ALIGN;

    unsafe fn realloc(
        ptr: Option<NonNull<u8>>,
        layout: Layout,
        old_layout: Layout,
        flags: Flags,
        nid: NumaNode,
    ) -> Result<NonNull<[u8]>, AllocError> {
        // An allocation of zero bytes is no allocation (`Allocator::realloc`).
        let old = ptr.filter(|_| old_layout.size() != 0);
        // SAFETY: is_vmalloc_addr() only compares the address with the vmalloc range.
        let in_area = old.is_some_and(|p| unsafe { bindings::is_vmalloc_addr(p.as_ptr().cast()) });
        if layout.size() <= SLAB_MAX || in_area {
            // SAFETY: the caller's guarantees, passed on: `ptr` is one of `KVmalloc`'s or
            // `Vmalloc`'s allocations, both of which `KVmalloc` takes.
            return unsafe { KVmalloc::realloc(ptr, layout, old_layout, flags, nid) };
        }
        let new = Vmalloc::alloc(layout, flags, nid)?;
        if let Some(old) = old {
            let keep = old_layout.size().min(layout.size());
            // SAFETY: `old` is valid for reads of its `old_layout.size()` bytes, `new` for
            // writes of `layout.size()`, and they are different allocations.
            unsafe {
                core::ptr::copy_nonoverlapping(old.as_ptr(), new.cast::<u8>().as_ptr(), keep)
            };
            // SAFETY: `old` is a slab allocation of `old_layout` (not in a vmalloc area),
            // which nothing reads after this call.
            unsafe { KVmalloc::free(old, old_layout) };
        }
        Ok(new)
    }
}
