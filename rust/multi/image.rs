// SPDX-License-Identifier: GPL-2.0

//! Generated trampolines (rkf_core::tramp) in BPF text: one image per operation, holding
//! the code of the functions whose programs it changed, and their program slots.

use core::ptr;

use kernel::{ffi::c_void, prelude::*, sync::Arc};

use super::{
    area::AreaVec,
    link::{self, LinkState},
};
use crate::{
    multi_table, rkf_h,
    tramp_core::{self, CallDepth, Mitigations},
};

// Shared code finds a function's program k at its first slot + k * SLOT.
const _: () = assert!(size_of::<rkf_h::rkf_multi_prog>() == tramp_core::SLOT as usize);

/// Generated trampolines in BPF text.
///
/// # Invariants
///
/// `ptr` is an image from `rkf_multi_image_alloc()` that this object owns, and `data`
/// is `Some` until it is dropped.  Its code is entered only while a table holds the
/// image: tables are dropped only after every site left the trampolines only they hold
/// and no task can be entering them (a deferred free with `tasks`), or, for a table never
/// published, before any site called them.  An image that counts calls in flight
/// (`counts_calls`: trampolines with exits, for fexit or session programs, or with
/// sleepable programs) may still have calls inside their functions, or asleep in a
/// sleepable program, then: c-shim/rkf_multi_image.c frees it, and `data`, once they
/// have all come back.
pub(crate) struct Image {
    ptr: *mut rkf_h::rkf_multi_image,
    data: Option<KBox<ImageData>>,
    /// Where its code starts.
    code: usize,
    /// The bytes of its code.
    size: usize,
    /// Functions whose trampolines were generated into it (those that share one stub
    /// each counted).
    funcs: u32,
    /// Whether it has trampolines that count calls in flight: from entry to return
    /// (an exit) or around their programs (sleepable fentry programs, no exit).
    counts_calls: bool,
}

/// What an image's code names, in kernel data.
struct ImageData {
    /// The programs, by address: `struct rkf_multi_prog`.  Never resized.  The tables
    /// holding the image point their functions to them too: the shared trampoline runs
    /// them (a call of a function moving between trampolines) under RCU, or RCU tasks
    /// trace, from a table that holds the image.
    slots: AreaVec<rkf_h::rkf_multi_prog>,
    /// The states (program, id and detached flag) of the links at the time, which the
    /// slots name, kept as long as the image: a run reads its slot's flag first, however
    /// long after the link went: on the way out of a call in flight, past a sleepable
    /// program, or on the way in by a task that was preempted in the image's code while
    /// its function moved to the shared trampoline (a generation that failed), whose link
    /// may then be freed after an RCU grace period only (no trampoline of its retired).
    _links: AreaVec<Arc<LinkState>>,
}

// SAFETY: an image is freed once, from any task, when the last table using it goes (or
// its calls in flight came back); its slots name programs and counters that outlive the
// runs of them: every run only while its link's flag, read under RCU (or RCU tasks
// trace), says attached (a link is freed an RCU grace period after it was marked, and an
// RCU tasks trace one if it or a program beside it is sleepable); entry runs only while
// a table holds the image or a task is still in its code, and every run only once it
// read its link's flag, which the image keeps; the shared trampoline's runs of them through a
// table, only under RCU (or RCU tasks trace) from a table that holds the image, which
// frees its links after those grace periods.
unsafe impl Send for Image {}
// SAFETY: shared images are only read (their address, their slots), never written.
unsafe impl Sync for Image {}

impl Image {
    /// Functions whose trampolines it holds.
    pub(crate) fn funcs(&self) -> u32 {
        self.funcs
    }

    /// Where its code starts.
    pub(crate) fn code(&self) -> usize {
        self.code
    }

    /// Whether `addr` is in its code.
    pub(crate) fn contains(&self, addr: usize) -> bool {
        addr.wrapping_sub(self.code) < self.size
    }
}

impl Drop for Image {
    fn drop(&mut self) {
        let data = self.data.take();
        if let (true, Some(d)) = (self.counts_calls, data) {
            // SAFETY: this object owns the image and no site calls it (type invariant);
            // `free_data` takes the box back once, in process context, when the image's
            // calls in flight have come back.
            unsafe {
                rkf_h::rkf_multi_image_retire(self.ptr, KBox::into_raw(d).cast(), Some(free_data))
            };
            return;
        }
        // SAFETY: this object owns the image and no code runs in it any more (type
        // invariant: it counts no call, so no call stays inside it).
        unsafe { rkf_h::rkf_multi_image_free(self.ptr) };
    }
}

/// Frees what an image that counts calls in flight named, once it was drained.
///
/// # Safety
///
/// `data` comes from `KBox::<ImageData>::into_raw()` in [`Image::drop()`], and is freed
/// once.
unsafe extern "C" fn free_data(data: *mut c_void) {
    // SAFETY: by the function's contract.
    drop(unsafe { KBox::from_raw(data.cast::<ImageData>()) });
}

/// The retired images that count calls in flight: at unload, the ones no call is in any more
/// are freed, and the others declared dead and left behind (c-shim/rkf_multi_image.c).
///
/// # Invariants
///
/// There is one, a field of the module state, dropped at unloading or when the module's
/// init fails after making it, either way after the registry and the deferred frees:
/// nothing retires an image after it.
pub(crate) struct ImageDrain {
    _private: (),
}

impl ImageDrain {
    /// The retired images.
    ///
    /// # Safety
    ///
    /// One object, the module state's, dropped (at unloading, or when the module's init
    /// fails) only after the registry and the deferred frees: nothing may retire an image
    /// after it.
    pub(crate) unsafe fn new() -> Self {
        // INVARIANT: the caller's guarantee.
        Self { _private: () }
    }
}

impl Drop for ImageDrain {
    fn drop(&mut self) {
        // SAFETY: this is rkf_multi's unloading or failed init, after its registry and
        // deferred frees are gone: nothing retires an image any more (by the type
        // invariant).
        unsafe { rkf_h::rkf_multi_image_drain_exit() };
    }
}

/// What the trampoline of one function runs: everything generation needs, taken from
/// the table being built.
///
/// # Invariants
///
/// `nr_fentry + nr_session <= progs.len()`: the fentry programs come first in `progs`,
/// then the session ones, then the fexit ones.
pub(crate) struct FuncCode<'a> {
    /// The function's argument count.
    pub(crate) nr_args: u32,
    /// The argument slots of ctx its programs read, at least `nr_args`.
    pub(crate) ctx_args: u32,
    /// How far its ftrace site is into it: `ret_ip` is its address + this + 5.
    pub(crate) site_offset: u32,
    /// Its ftrace site + 5: where its body goes on.
    pub(crate) ret_ip: u64,
    /// Its programs, fentry, session then fexit, in the order they run.
    pub(crate) progs: &'a [rkf_h::rkf_multi_prog],
    /// How many of them are fentry programs.
    pub(crate) nr_fentry: usize,
    /// How many of them are session programs, after the fentry ones.
    pub(crate) nr_session: usize,
    /// Whether one of them is sleepable.
    pub(crate) sleepable: bool,
}

/// A shape of shared code: functions whose programs are all fentry ones, none sleepable,
/// with the same argument count, ctx slots filled, program count and ftrace site offset,
/// share one code in an image and have a stub each (`tramp_core::Shared`).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Shape {
    nr_args: u32,
    saved: u32,
    nr_fentry: u32,
    site_offset: u32,
}

impl FuncCode<'_> {
    /// Its address: `ret_ip` less the ftrace call and the site offset.
    fn addr(&self) -> u64 {
        self.ret_ip - tramp_core::MCOUNT_INSN_SIZE - u64::from(self.site_offset)
    }

    /// The shape of shared code it runs through, if it has no exit and no sleepable
    /// program (`tramp_core::emit()` is the code of one that has: its sleepable programs
    /// are run by the code itself, with the program built in, as the JIT runs them).
    fn shape(&self) -> Option<Shape> {
        let nr_fentry = u32::try_from(self.nr_fentry).ok()?;
        (self.exit().is_none()
            && !self.sleepable
            && self.site_offset <= tramp_core::MAX_SITE_OFFSET
            && nr_fentry <= tramp_core::MAX_SHARED_PROGS)
            .then_some(Shape {
                nr_args: self.nr_args,
                saved: self.ctx_args,
                nr_fentry,
                site_offset: self.site_offset,
            })
    }

    /// How its trampoline runs each of its fentry programs: `tramp_core::Direct` for a
    /// sleepable one, where its calls are counted around its programs
    /// ([`FuncCode::counted()`]); `None` for the others, run through
    /// [`FuncCode::runner()`].  Empty for a function that is not counted.
    fn direct(&self) -> Result<AreaVec<Option<tramp_core::Direct>>> {
        let mut direct = AreaVec::new();
        if !self.counted() {
            return Ok(direct);
        }
        for p in &self.progs[..self.nr_fentry] {
            let mut code = rkf_h::rkf_multi_prog_code {
                prog: 0,
                func: 0,
                insnsi: 0,
                detached: 0,
                enter: 0,
                exit: 0,
            };
            // SAFETY: `p.link` is the state of a live link (its slot was made from the
            // link, under the registry's lock, which the caller holds): its program is
            // held; `code` is valid for writes.
            let sleepable = unsafe { rkf_h::rkf_multi_prog_code(p.link, &mut code) };
            // SAFETY: as above: a slot made from a live link.
            let (cookie, stats) = unsafe { link::slot_parts(p) };
            let run = sleepable.then_some(tramp_core::Direct {
                detached: code.detached,
                cookie,
                prog: code.prog,
                insnsi: code.insnsi,
                func: code.func,
                stats,
                enter: code.enter,
                exit: code.exit,
            });
            direct.push(run, GFP_KERNEL)?;
        }
        Ok(direct)
    }

    /// The shape of its exit, if it has one: its session and fexit programs.
    fn exit(&self) -> Option<(u32, u32)> {
        let nr_fexit = self.progs.len() - self.nr_fentry - self.nr_session;
        (self.nr_session + nr_fexit > 0).then_some((self.nr_session as u32, nr_fexit as u32))
    }

    /// Whether its trampoline counts its calls in flight around its fentry programs: it
    /// has a sleepable program and no exit (which would count the call from entry to
    /// return).  As the kernel's fentry.s trampoline, it does not call the function.
    fn counted(&self) -> bool {
        self.sleepable && self.exit().is_none()
    }

    /// Whether its trampoline counts its calls in flight at all: with an exit, or
    /// [`FuncCode::counted()`].
    fn counts_calls(&self) -> bool {
        self.exit().is_some() || self.sleepable
    }

    /// What it runs its programs through, on entry and on exit.
    fn runner(&self) -> u64 {
        runner(self.sleepable)
    }
}

/// What a function runs its programs through, on entry and on exit
/// (c-shim/rkf_multi_run.c), with a `sleepable` program or without.
fn runner(sleepable: bool) -> u64 {
    let f: unsafe extern "C" fn(*const rkf_h::rkf_multi_prog, *mut u64) = if sleepable {
        rkf_h::rkf_multi_run_sleepable_slot
    } else {
        rkf_h::rkf_multi_run_prog
    };
    f as *const () as usize as u64
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

/// Where [`generate()`] put one function: its trampoline, and its first slot (a copy of
/// its programs, in order, which functions alike share), which the image keeps for as
/// long as it lives.
#[derive(Clone, Copy)]
pub(crate) struct Placed {
    /// The trampoline's address.
    pub(crate) addr: usize,
    /// The function's first slot.
    pub(crate) slots: *const rkf_h::rkf_multi_prog,
}

/// The shared code of `shape`, for a cpu that wants `m`.
fn shared(shape: &Shape, m: &Mitigations) -> tramp_core::Shared {
    tramp_core::Shared {
        nr_args: shape.nr_args,
        saved: shape.saved,
        nr_fentry: shape.nr_fentry,
        site_offset: shape.site_offset,
        run: runner(false),
        // Its functions have no sleepable program: their calls are not counted.
        counted: None,
        mitigations: *m,
    }
}

/// Whether two functions' programs, as their slots hold them, are the same: then they
/// can run the same slots (and a function can keep code made for the same programs).
pub(crate) fn same_progs(a: &[rkf_h::rkf_multi_prog], b: &[rkf_h::rkf_multi_prog]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(a, b)| ptr::eq(a.link, b.link) && a.data == b.data)
}

/// For each of `funcs`, with its shape of shared code in `shapes`, the first of them
/// whose code and slots it can run: the first function of its shape with the same
/// programs in its slots (the same links, and the same cookies, or none; never a link
/// that counts, whose slots name counters of their function), or itself.  Such functions
/// differ only in their address, which the shared code takes from the return address:
/// one stub and one copy of the slots serve them all.
fn firsts_alike(funcs: &[FuncCode<'_>], shapes: &[Option<Shape>]) -> Result<AreaVec<u32>> {
    let n = funcs.len();
    let bits = multi_table::index_bits(n);
    let mut index = AreaVec::<u32>::from_elem(0, 1 << bits, GFP_KERNEL)?;
    let mut first = AreaVec::<u32>::from_elem(0, n, GFP_KERNEL)?;
    let key = |i: usize| {
        let s = shapes[i]?;
        let shape = [s.nr_args, s.saved, s.nr_fentry, s.site_offset].map(u64::from);
        let slots = funcs[i].progs.iter().flat_map(|p| [p.link as u64, p.data]);
        Some(multi_table::fold_key(Iterator::chain(
            shape.into_iter(),
            slots,
        )))
    };
    let alike = |a: usize, b: usize| {
        shapes[a].is_some() && shapes[a] == shapes[b] && same_progs(funcs[a].progs, funcs[b].progs)
    };
    multi_table::firsts_alike(key, alike, &mut index, bits, &mut first);
    Ok(first)
}

/// Generates, in one new image named `rkf_multi_image_<seq>`, the trampolines of
/// `funcs` for a cpu that wants `m`, with the links' states `links` (program, id and
/// detached flag: what the slots name, kept as long as the image): returns the image and
/// where it put each function.  A function with an exit (fexit or session programs) or a
/// sleepable program gets code of its own; the others share code by shape, one copy per
/// shape at the start of the image, and each has a stub of `tramp_core::STUB` bytes that
/// jumps to it: 16 bytes a function instead of 64 to 112 for the same code of its own.
/// Functions of one shape with the same programs (one link that counts nothing on many
/// functions, with no cookies or the same ones) share one stub and one copy of their
/// slots ([`firsts_alike()`]): their sites call the same address, as ftrace's direct
/// calls allow (`register_ftrace_direct()` takes one address for a whole hash of sites),
/// and they hold no code or slots of their own.
pub(crate) fn generate(
    seq: u64,
    funcs: &[FuncCode<'_>],
    links: &[&Arc<LinkState>],
    m: &Mitigations,
) -> Result<(Arc<Image>, AreaVec<Placed>)> {
    // Each function's shape of shared code, if it has one.
    let mut shape_of = AreaVec::<Option<Shape>>::with_capacity(funcs.len(), GFP_KERNEL)?;
    for f in funcs {
        shape_of.push(f.shape(), GFP_KERNEL)?;
    }
    let first_alike = firsts_alike(funcs, &shape_of)?;
    let alike = |i: usize| first_alike[i] as usize != i;
    // The shapes of shared code, sorted, each once.
    let mut shapes = AreaVec::<Shape>::new();
    for shape in shape_of.iter().flatten() {
        shapes.push(*shape, GFP_KERNEL)?;
    }
    multi_table::sort_by_key(&mut shapes, |k| *k);
    let mut kept = 0;
    for i in 0..shapes.len() {
        if kept == 0 || shapes[kept - 1] != shapes[i] {
            shapes[kept] = shapes[i];
            kept += 1;
        }
    }
    shapes.truncate(kept);
    // Where each shape's code starts, and its length.
    let mut shape_at = AreaVec::<(usize, usize)>::with_capacity(shapes.len(), GFP_KERNEL)?;
    let mut size = 0usize;
    for shape in shapes.iter() {
        size = tramp_core::align(size);
        let len = tramp_core::shared_len(&shared(shape, m));
        shape_at.push((size, len), GFP_KERNEL)?;
        size += len;
    }
    // Per function: its offset in the code, the slots of ctx to fill and its length, the
    // shape it shares code with, if any, and how it runs its fentry programs (nothing for
    // one that runs the stub of a function alike before it).
    let mut layout =
        AreaVec::<(usize, u32, usize, Option<usize>, _)>::with_capacity(funcs.len(), GFP_KERNEL)?;
    let (mut nr_slots, mut counts_calls) = (0usize, false);
    for (i, f) in funcs.iter().enumerate() {
        let saved = f.ctx_args;
        if alike(i) {
            layout.push((0, saved, 0, None, AreaVec::new()), GFP_KERNEL)?;
            continue;
        }
        counts_calls |= f.counts_calls();
        size = tramp_core::align(size);
        let shape = shape_of[i].and_then(|k| shapes.binary_search(&k).ok());
        let direct = f.direct()?;
        let len = match shape {
            Some(_) => tramp_core::STUB,
            None => tramp_core::len(
                f.nr_args,
                saved,
                f.nr_fentry as u32,
                &direct,
                f.exit(),
                f.counted(),
                m,
            ),
        };
        layout.push((size, saved, len, shape, direct), GFP_KERNEL)?;
        size += len;
        nr_slots += f.progs.len();
    }
    // The slots, in kernel data: `slots` is never resized, so they stay put.
    let mut slots = AreaVec::<rkf_h::rkf_multi_prog>::with_capacity(nr_slots, GFP_KERNEL)?;
    for (_, f) in funcs.iter().enumerate().filter(|&(i, _)| !alike(i)) {
        for p in f.progs {
            slots.push(rkf_h::rkf_multi_prog { ..*p }, GFP_KERNEL)?;
        }
    }
    let mut states = AreaVec::with_capacity(links.len(), GFP_KERNEL)?;
    for &l in links {
        states.push(l.clone(), GFP_KERNEL)?;
    }
    let data = KBox::new(
        ImageData {
            slots,
            _links: states,
        },
        GFP_KERNEL,
    )?;
    let size32 = u32::try_from(size).map_err(|_| E2BIG)?;
    let mut code = 0usize;
    // SAFETY: `code` is valid for writes.
    let im = unsafe { rkf_h::rkf_multi_image_alloc(size32, seq, counts_calls, &mut code) };
    if im.is_null() {
        return Err(ENOMEM);
    }
    // INVARIANT: the image is ours; dropping `image` frees it, committed or not.
    let image = Image {
        ptr: im,
        data: Some(data),
        code,
        size,
        funcs: funcs.len() as u32,
        counts_calls,
    };
    let (inflight, dead) = if counts_calls {
        // SAFETY: `im` is a live image.
        unsafe {
            (
                rkf_h::rkf_multi_image_inflight(im) as u64,
                rkf_h::rkf_multi_image_dead(im) as u64,
            )
        }
    } else {
        (0, 0)
    };
    let slots = image.data.as_ref().map_or(&[][..], |d| &d.slots[..]);
    // int3 between the trampolines.
    let mut buf = AreaVec::<u8>::from_elem(0xcc, size, GFP_KERNEL)?;
    for (shape, &(at, len)) in shapes.iter().zip(shape_at.iter()) {
        let code_at = (code + at) as u64;
        tramp_core::emit_shared(&mut buf[at..at + len], code_at, &shared(shape, m))
            .map_err(|_| ERANGE)?;
    }
    let mut first_slot = 0usize;
    let mut slot_addrs = AreaVec::<u64>::new();
    let mut placed = AreaVec::with_capacity(funcs.len(), GFP_KERNEL)?;
    for (i, (f, (at, saved, len, shape, direct))) in funcs.iter().zip(layout.iter()).enumerate() {
        if alike(i) {
            // The stub and slots of the first function alike, placed before it.
            let first = placed[first_alike[i] as usize];
            placed.push(first, GFP_KERNEL)?;
            continue;
        }
        let (at, saved, len, shape) = (*at, *saved, *len, *shape);
        // Emitting every function's trampoline, with call depth accounting (whose kernel
        // helpers decode and relocate each sequence, and may be traced themselves), took
        // over 10 s under TCG: not in one stretch without an RCU tasks quiescent state
        // (process context, under no lock but the registry's mutex).
        rkf_h::rkf_multi_tasks_rcu_qs();
        let n = f.progs.len();
        let own = &slots[first_slot..first_slot + n];
        placed.push(
            Placed {
                addr: code + at,
                slots: own.as_ptr(),
            },
            GFP_KERNEL,
        )?;
        first_slot += n;
        let (out, ip) = (&mut buf[at..at + len], (code + at) as u64);
        if let Some(k) = shape {
            // Its first slot, to the code of its shape.
            let shared_at = (code + shape_at[k].0) as u64;
            tramp_core::emit_stub(out, ip, own.as_ptr() as u64, shared_at).map_err(|_| ERANGE)?;
            continue;
        }
        slot_addrs.clear();
        for s in own {
            slot_addrs.push(ptr::from_ref(s) as u64, GFP_KERNEL)?;
        }
        let (entry, rest) = slot_addrs.split_at(f.nr_fentry);
        let (sessions, exits) = rest.split_at(f.nr_session);
        let run = f.runner();
        let spec = tramp_core::Spec {
            nr_args: f.nr_args,
            saved,
            addr: f.addr(),
            slots: entry,
            run,
            exit: f.exit().map(|_| tramp_core::Exit {
                sessions,
                slots: exits,
                body: f.ret_ip,
                inflight,
                dead,
            }),
            counted: f.counted().then_some(inflight),
            direct,
            mitigations: *m,
        };
        tramp_core::emit(out, ip, &spec).map_err(|_| ERANGE)?;
    }
    // SAFETY: `buf` holds the image's `size` bytes.
    kernel::error::to_result(unsafe {
        rkf_h::rkf_multi_image_commit(image.ptr, buf.as_ptr().cast())
    })?;
    Ok((Arc::new(image, GFP_KERNEL)?, placed))
}
