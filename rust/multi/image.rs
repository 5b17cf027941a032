// SPDX-License-Identifier: GPL-2.0

//! Generated trampolines (rkf_core::tramp) in BPF text: one image per operation, holding
//! the code of the functions whose programs it changed, and their program slots.

use core::ptr;

use kernel::{alloc::KVVec, prelude::*, sync::Arc};

use crate::{
    rkf_h,
    tramp_core::{self, CallDepth, Mitigations},
};

/// The trampoline a traced function's site calls.
#[derive(Clone)]
pub(crate) enum Trampoline {
    /// c-shim/rkf_multi_tramp.S, which finds the function in the table.
    Shared,
    /// Its own, at `addr`, in `image` (which it keeps).
    Generated { image: Arc<Image>, addr: usize },
}

impl Trampoline {
    /// Its address in a route: 0 for the shared one.
    pub(crate) fn route_addr(&self) -> u64 {
        match self {
            Trampoline::Shared => 0,
            Trampoline::Generated { addr, .. } => *addr as u64,
        }
    }
}

/// Generated trampolines in BPF text.
///
/// # Invariants
///
/// `ptr` is an image from `rkf_multi_image_alloc()` that this object owns.  Its code is
/// run only while a table holds the image: tables are dropped only after every site left
/// the trampolines only they hold and no task can be running them (a deferred free with
/// `tasks`), or, for a table never published, before any site called them.
pub(crate) struct Image {
    ptr: *mut rkf_h::rkf_multi_image,
    /// The programs the code names, by address: `struct rkf_multi_prog` in kernel data,
    /// not in the executable image.  Never resized.
    slots: KVVec<rkf_h::rkf_multi_prog>,
    /// Functions whose trampolines were generated into it.
    funcs: u32,
}

// SAFETY: an image is freed once, from any task, when the last table using it goes; its
// slots name programs and counters that outlive it (they go with the same garbage).
unsafe impl Send for Image {}
// SAFETY: shared images are only read (their address, their slots), never written.
unsafe impl Sync for Image {}

impl Image {
    /// Functions whose trampolines it holds.
    pub(crate) fn funcs(&self) -> u32 {
        self.funcs
    }
}

impl Drop for Image {
    fn drop(&mut self) {
        // SAFETY: this object owns the image and no code runs in it any more (type
        // invariant).
        unsafe { rkf_h::rkf_multi_image_free(self.ptr) };
    }
}

/// What the trampoline of one function runs: everything generation needs, taken from
/// the table being built.
pub(crate) struct FuncCode<'a> {
    /// The function's argument count.
    pub(crate) nr_args: u32,
    /// Its address.
    pub(crate) addr: u64,
    /// Its programs, all fentry, in the order they run.
    pub(crate) progs: &'a [rkf_h::rkf_multi_prog],
}

/// What this cpu wants of generated code, as the BPF JIT emits it here: call depth
/// accounting where call depth tracking is on, and the return thunk where the cpu wants
/// one.
pub(crate) fn mitigations() -> Mitigations {
    let mut scratch = [0u8; 64];
    // SAFETY: `scratch` has room for the bytes it says.
    let len = unsafe {
        rkf_h::rkf_multi_call_depth_account(scratch.as_mut_ptr(), scratch.len() as u32, 0)
    } as usize;
    let thunk = rkf_h::rkf_multi_return_thunk();
    Mitigations {
        call_depth: (len > 0).then_some(CallDepth { len, emit: account }),
        return_thunk: (thunk != 0).then_some(thunk as u64),
    }
}

/// Writes the kernel's call depth accounting for code at `ip` into `out`.
fn account(ip: u64, out: &mut [u8]) -> bool {
    // SAFETY: `out` has room for the bytes it says.
    let n = unsafe {
        rkf_h::rkf_multi_call_depth_account(out.as_mut_ptr(), out.len() as u32, ip as usize)
    };
    n as usize == out.len()
}

/// Generates, in one new image named `rkf_multi_fentry_<seq>`, the trampolines of
/// `funcs` for a cpu that wants `m`: returns the image and the address of each
/// function's trampoline.
pub(crate) fn generate(
    seq: u64,
    funcs: &[FuncCode<'_>],
    m: &Mitigations,
) -> Result<(Arc<Image>, KVVec<usize>)> {
    // Per function: its offset in the code, the registers to save and its length.
    let mut layout = KVVec::<(usize, u32, usize)>::with_capacity(funcs.len(), GFP_KERNEL)?;
    let (mut size, mut nr_slots) = (0usize, 0usize);
    for f in funcs {
        let mut saved = f.nr_args;
        for p in f.progs {
            // SAFETY: the table's programs are held by their links.
            saved = saved.max(unsafe { rkf_h::rkf_multi_prog_ctx_args(p.prog) });
        }
        size = tramp_core::align(size);
        let len = tramp_core::len(f.nr_args, saved, f.progs.len() as u32, m);
        layout.push((size, saved, len), GFP_KERNEL)?;
        size += len;
        nr_slots += f.progs.len();
    }
    // The slots, in kernel data: `slots` is never resized, so they stay put.
    let mut slots = KVVec::<rkf_h::rkf_multi_prog>::with_capacity(nr_slots, GFP_KERNEL)?;
    for f in funcs {
        for p in f.progs {
            slots.push(rkf_h::rkf_multi_prog { ..*p }, GFP_KERNEL)?;
        }
    }
    let size32 = u32::try_from(size).map_err(|_| E2BIG)?;
    let mut code = 0usize;
    // SAFETY: `code` is valid for writes.
    let im = unsafe { rkf_h::rkf_multi_image_alloc(size32, seq, &mut code) };
    if im.is_null() {
        return Err(ENOMEM);
    }
    // INVARIANT: the image is ours; dropping `image` frees it, committed or not.
    let image = Image {
        ptr: im,
        slots,
        funcs: funcs.len() as u32,
    };
    // int3 between the trampolines.
    let mut buf = KVVec::<u8>::from_elem(0xcc, size, GFP_KERNEL)?;
    let run = rkf_h::rkf_multi_run_prog as *const () as usize as u64;
    let mut first_slot = 0usize;
    let mut slot_addrs = KVVec::<u64>::new();
    for (f, &(at, saved, len)) in funcs.iter().zip(layout.iter()) {
        let n = f.progs.len();
        slot_addrs.clear();
        for s in &image.slots[first_slot..first_slot + n] {
            slot_addrs.push(ptr::from_ref(s) as u64, GFP_KERNEL)?;
        }
        first_slot += n;
        let spec = tramp_core::Spec {
            nr_args: f.nr_args,
            saved,
            addr: f.addr,
            slots: &slot_addrs,
            run,
            mitigations: *m,
        };
        tramp_core::emit(&mut buf[at..at + len], (code + at) as u64, &spec).map_err(|_| ERANGE)?;
    }
    // SAFETY: `buf` holds the image's `size` bytes.
    kernel::error::to_result(unsafe {
        rkf_h::rkf_multi_image_commit(image.ptr, buf.as_ptr().cast())
    })?;
    let mut addrs = KVVec::with_capacity(funcs.len(), GFP_KERNEL)?;
    for &(at, _, _) in layout.iter() {
        addrs.push(code + at, GFP_KERNEL)?;
    }
    Ok((Arc::new(image, GFP_KERNEL)?, addrs))
}
