// SPDX-License-Identifier: GPL-2.0

//! rkf_multi's links: the ioctl interface, the validation of every request, the registry
//! of links and the table the trampoline reads.
//!
//! Each open file of `/dev/rkf_multi` is one link.  `RKF_MULTI_IOC_ATTACH` attaches it
//! once, to a program and a set of functions; closing the file (or exiting) detaches it.
//! Any number of links may share functions, fentry and fexit mixed: every function has
//! one entry in one table, listing its programs in attach order, and the table is
//! replaced whole, under RCU, on every attach and detach.  A function with fentry
//! programs only has a trampoline generated for it (rkf_core::tramp), which the shared
//! trampoline's lookup does not slow down; the others use the shared one.  ftrace only
//! sees functions gaining their first link, losing their last, or changing trampoline, in
//! one batched update of each kind per operation.

use core::{
    ffi::CStr,
    ptr,
    sync::atomic::{AtomicU64, Ordering},
};

use kernel::{
    alloc::KVVec,
    fs::File,
    ioctl::{_IOC_SIZE, _IOWR},
    miscdevice::{MiscDevice, MiscDeviceRegistration},
    prelude::*,
    sync::{Arc, GlobalGuard},
    transmute::{AsBytes, FromBytes},
    uaccess::{UserPtr, UserSlice},
};

use crate::multi_rules::{self as core_rules, Reason, MAX_LINKS_PER_FUNC};
use crate::multi_table::{self as table_rules, Group, Route, Slot, Update};
use crate::tramp_core;

/// `MCOUNT_INSN_SIZE`: the trampoline's return address is the site plus the call.
const MCOUNT_INSN_SIZE: u64 = 5;

// The items of c-shim/rkf.h for rkf_multi, and the exports of the rkf export patch.
mod shim {
    use kernel::ffi::{c_char, c_int, c_void};

    /// `struct bpf_prog`, opaque.
    #[repr(C)]
    pub(super) struct BpfProgC {
        _opaque: [u8; 0],
    }

    /// `struct btf`, opaque.
    #[repr(C)]
    pub(super) struct BtfC {
        _opaque: [u8; 0],
    }

    /// `struct module`, opaque.
    #[repr(C)]
    pub(super) struct ModuleC {
        _opaque: [u8; 0],
    }

    /// `struct rkf_multi_image`, opaque.
    #[repr(C)]
    pub(super) struct ImageC {
        _opaque: [u8; 0],
    }

    /// `RKF_MULTI_HOOK`, `RKF_MULTI_UNHOOK`, `RKF_MULTI_MOVE` of c-shim/rkf.h.
    pub(super) const HOOK: u32 = 0;
    pub(super) const UNHOOK: u32 = 1;
    pub(super) const MOVE: u32 = 2;

    /// `struct rkf_multi_attach_request`.
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    pub(super) struct AttachC {
        pub(super) prog_fd: u32,
        pub(super) cnt: u32,
        pub(super) btf_ids: u64,
        pub(super) addrs: u64,
        pub(super) cookies: u64,
        pub(super) btf_fds: u64,
        pub(super) flags: u32,
        pub(super) bad_index: u32,
        pub(super) reason: u32,
        pub(super) pad: u32,
    }

    /// `struct rkf_multi_func_info`.
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    pub(super) struct FuncInfoC {
        pub(super) addr: u64,
        pub(super) cookie: u64,
        pub(super) hits: u64,
        pub(super) misses: u64,
    }

    /// `struct rkf_multi_link_info`.
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    pub(super) struct LinkInfoC {
        pub(super) id: u64,
        pub(super) prog_id: u32,
        pub(super) fexit: u32,
        pub(super) cnt: u32,
        pub(super) buf_cnt: u32,
        pub(super) funcs: u64,
        pub(super) next_id: u64,
    }

    /// `struct rkf_multi_stats`: two `atomic64_t`.
    #[repr(C)]
    pub(super) struct StatsC {
        pub(super) hits: kernel::sync::atomic::Atomic<i64>,
        pub(super) misses: kernel::sync::atomic::Atomic<i64>,
    }

    /// `struct rkf_multi_prog`.
    #[repr(C)]
    pub(super) struct ProgC {
        pub(super) prog: *mut BpfProgC,
        pub(super) cookie: u64,
        pub(super) stats: *const StatsC,
    }

    /// `struct rkf_multi_func`.
    #[repr(C)]
    pub(super) struct FuncC {
        pub(super) key: usize,
        pub(super) addr: usize,
        pub(super) nr_args: u32,
        pub(super) nr_fentry: u32,
        pub(super) nr_progs: u32,
        pub(super) first: u32,
    }

    /// `struct rkf_multi_table`.
    #[repr(C)]
    pub(super) struct TableC {
        pub(super) nr_funcs: u32,
        pub(super) bits: u32,
        pub(super) index: *const u32,
        pub(super) funcs: *const FuncC,
        pub(super) progs: *const ProgC,
    }

    /// `struct rkf_multi_shape`.
    #[repr(C)]
    pub(super) struct ShapeC {
        pub(super) name: *const c_char,
        pub(super) nr_params: u32,
        pub(super) varargs: u32,
        pub(super) kind: [u32; 8],
        pub(super) size: [u32; 8],
    }

    extern "C" {
        pub(super) fn rkf_multi_prog_get(fd: u32, fexit: *mut bool, id: *mut u32) -> *mut BpfProgC;
        pub(super) fn rkf_multi_prog_put(prog: *mut BpfProgC);
        pub(super) fn rkf_multi_prog_ctx_args(prog: *const BpfProgC) -> u32;
        pub(super) fn rkf_multi_prog_btf(prog: *const BpfProgC) -> *const BtfC;
        pub(super) fn rkf_multi_shape(btf: *const BtfC, btf_id: u32, shape: *mut ShapeC) -> c_int;
        pub(super) fn rkf_multi_btf_get(fd: c_int) -> *mut BtfC;
        pub(super) fn rkf_multi_btf_put(btf: *mut BtfC);
        pub(super) fn rkf_multi_btf_module(btf: *const BtfC) -> *mut ModuleC;
        pub(super) fn rkf_multi_module_put(module: *mut ModuleC);
        pub(super) fn rkf_multi_is_symbol(
            addr: usize,
            name: *const c_char,
            module: *mut ModuleC,
        ) -> bool;
        pub(super) fn rkf_multi_site(addr: usize) -> usize;
        pub(super) fn rkf_multi_site_owner(site: usize) -> usize;
        pub(super) fn rkf_multi_ftrace_update(
            sites: *const usize,
            tramps: *const usize,
            n: u32,
            op: u32,
        ) -> c_int;
        pub(super) fn rkf_multi_run_fentry(p: *const ProgC, ctx: *mut u64);
        pub(super) fn rkf_multi_tramps_supported() -> bool;
        pub(super) fn rkf_multi_image_alloc(size: u32, seq: u64, code: *mut usize) -> *mut ImageC;
        pub(super) fn rkf_multi_image_commit(im: *mut ImageC, buf: *const c_void) -> c_int;
        pub(super) fn rkf_multi_image_free(im: *mut ImageC);
        pub(super) fn rkf_multi_publish(table: *const TableC) -> *const TableC;
        pub(super) fn rkf_multi_defer(garbage: *mut c_void, tasks: bool);
        pub(super) fn rkf_multi_sync(tasks: bool);
        pub(super) fn rkf_multi_pin();
        pub(super) fn rkf_multi_init_deferred() -> c_int;
        pub(super) fn rkf_multi_exit_deferred();
        pub(super) fn rkf_multi_wait_inflight();
        pub(super) fn rkf_multi_capable() -> bool;
        pub(super) fn rkf_multi_ibt_enabled() -> bool;
    }
}

use shim::{AttachC, FuncC, FuncInfoC, LinkInfoC, ProgC, ShapeC, StatsC, TableC};

// SAFETY: plain integers, any bit pattern is valid, no padding.
unsafe impl FromBytes for AttachC {}
// SAFETY: plain integers without padding.
unsafe impl AsBytes for AttachC {}
// SAFETY: plain integers, any bit pattern is valid, no padding.
unsafe impl FromBytes for LinkInfoC {}
// SAFETY: plain integers without padding.
unsafe impl AsBytes for LinkInfoC {}
// SAFETY: plain integers without padding.
unsafe impl AsBytes for FuncInfoC {}

const IOC_ATTACH: u32 = _IOWR::<AttachC>('r' as u32, 1);
const IOC_INFO: u32 = _IOWR::<LinkInfoC>('r' as u32, 2);

/// A reference on a program, from `rkf_multi_prog_get()`.
///
/// # Invariants
///
/// `ptr` is a program whose reference this object owns.
struct ProgRef {
    ptr: *mut shim::BpfProgC,
}

// SAFETY: a program reference may be dropped from any task.
unsafe impl Send for ProgRef {}

impl ProgRef {
    /// Takes the program `fd`, checked to be an rkf_multi program: returns it, whether it
    /// is fexit, and its id.
    fn get(fd: u32) -> Result<(Self, bool, u32)> {
        let (mut fexit, mut id) = (false, 0u32);
        // SAFETY: the out-pointers are valid; the shim checks everything about `fd`.
        let p = unsafe { shim::rkf_multi_prog_get(fd, &mut fexit, &mut id) };
        let p = kernel::error::from_err_ptr(p)?;
        // INVARIANT: the shim returned a reference.
        Ok((Self { ptr: p }, fexit, id))
    }
}

impl Drop for ProgRef {
    fn drop(&mut self) {
        // SAFETY: this object owns the reference (type invariant).
        unsafe { shim::rkf_multi_prog_put(self.ptr) };
    }
}

/// A reference on a module's BTF object, from an fd that user space passed.
///
/// # Invariants
///
/// `ptr` is a BTF object whose reference this object owns.
struct BtfRef {
    ptr: *mut shim::BtfC,
}

impl BtfRef {
    /// Takes the BTF object of `fd`: `EBADF` if `fd` is not open, `EINVAL` if it is not
    /// a BTF object.
    fn get(fd: i32) -> Result<Self> {
        // SAFETY: any fd may be asked about.
        let p = kernel::error::from_err_ptr(unsafe { shim::rkf_multi_btf_get(fd) })?;
        // INVARIANT: the shim returned a reference.
        Ok(Self { ptr: p })
    }
}

impl Drop for BtfRef {
    fn drop(&mut self) {
        // SAFETY: this object owns the reference (type invariant).
        unsafe { shim::rkf_multi_btf_put(self.ptr) };
    }
}

/// A reference on a module whose functions a link traces: the module stays loaded while
/// the link exists, as with a BPF trampoline on a module function.
///
/// # Invariants
///
/// `ptr` is a module whose reference this object owns.
struct ModuleRef {
    ptr: *mut shim::ModuleC,
}

// SAFETY: a module reference may be dropped from any task.
unsafe impl Send for ModuleRef {}

impl ModuleRef {
    /// The module `btf` describes, if it is a live module's BTF.
    fn of(btf: &BtfRef) -> Option<Self> {
        // SAFETY: `btf` is a valid BTF object (type invariant of `BtfRef`).
        let p = unsafe { shim::rkf_multi_btf_module(btf.ptr) };
        // INVARIANT: a non-NULL result comes with a reference.
        (!p.is_null()).then_some(Self { ptr: p })
    }
}

impl Drop for ModuleRef {
    fn drop(&mut self) {
        // SAFETY: this object owns the reference (type invariant).
        unsafe { shim::rkf_multi_module_put(self.ptr) };
    }
}

/// The module BTF objects of a request: one per distinct fd, sorted by fd.
struct ModuleBtfs {
    /// The fd, its BTF object, and the module.
    by_fd: KVVec<(i32, BtfRef, ModuleRef)>,
}

/// The BTF object a function's id is in, and its module (`None`: vmlinux or rkf_multi).
#[derive(Clone, Copy)]
struct TargetBtf {
    btf: *const shim::BtfC,
    module: *mut shim::ModuleC,
}

impl ModuleBtfs {
    /// Takes the BTF object and module of every distinct non-zero fd of `fds`.  The fds
    /// are checked before the functions: a bad one is refused naming the first function
    /// (in request order) given it; with several bad fds, the one of the earliest function.
    fn get(fds: &[i32]) -> Result<Self, AttachError> {
        let mut sorted = KVVec::<i32>::with_capacity(fds.len(), GFP_KERNEL)?;
        for &fd in fds.iter().filter(|&&fd| fd != 0) {
            sorted.push(fd, GFP_KERNEL)?;
        }
        table_rules::sort_by_key(&mut sorted, |&fd| fd);
        let mut by_fd = KVVec::new();
        let mut bad = KVVec::<(i32, Reason)>::new();
        for (k, &fd) in sorted.iter().enumerate() {
            if k > 0 && sorted[k - 1] == fd {
                continue;
            }
            let why = match BtfRef::get(fd) {
                Err(e) if e == EBADF => Reason::BadFd,
                Err(e) if e == EINVAL => Reason::NotModuleBtf,
                Err(e) => return Err(e.into()),
                Ok(btf) => match ModuleRef::of(&btf) {
                    Some(module) => {
                        by_fd.push((fd, btf, module), GFP_KERNEL)?;
                        continue;
                    }
                    None => Reason::NotModuleBtf,
                },
            };
            bad.push((fd, why), GFP_KERNEL)?;
        }
        if !bad.is_empty() {
            for (i, fd) in fds.iter().enumerate() {
                if let Ok(b) = bad.binary_search_by_key(fd, |&(f, _)| f) {
                    return Err(AttachError::Refused(Refused::new(i, bad[b].1)));
                }
            }
        }
        Ok(Self { by_fd })
    }

    /// The BTF object and module of `fd` (0: the program's BTF, `prog_btf`).  Valid while
    /// `self` is.
    fn target_btf(&self, fd: i32, prog_btf: *const shim::BtfC) -> Option<TargetBtf> {
        if fd == 0 {
            return Some(TargetBtf {
                btf: prog_btf,
                module: ptr::null_mut(),
            });
        }
        let i = self.by_fd.binary_search_by_key(&fd, |(f, _, _)| *f).ok()?;
        Some(TargetBtf {
            btf: self.by_fd[i].1.ptr,
            module: self.by_fd[i].2.ptr,
        })
    }

    /// The modules, for the link to hold; the BTF objects are dropped.
    fn into_modules(self) -> Result<KVVec<ModuleRef>> {
        let mut out = KVVec::with_capacity(self.by_fd.len(), GFP_KERNEL)?;
        for (_, _, m) in self.by_fd {
            out.push(m, GFP_KERNEL)?;
        }
        Ok(out)
    }
}

/// One function of a link.
#[derive(Clone, Copy)]
struct Target {
    /// The ftrace site.
    site: u64,
    /// The function's address.
    addr: u64,
    nr_args: u32,
    cookie: u64,
}

/// An attached link.
struct Link {
    id: u64,
    prog: ProgRef,
    prog_id: u32,
    fexit: bool,
    /// Sorted by site.
    targets: KVVec<Target>,
    /// The counters of each target, in the same order; the table points into them, so
    /// the vector is never resized.
    stats: KVVec<StatsC>,
    /// The modules (other than rkf_multi) whose functions it traces.
    modules: KVVec<ModuleRef>,
}

/// Generated trampolines (rkf_core::tramp) in BPF text: one image per operation, holding
/// the trampolines of the functions whose programs it changed, and their slots.
///
/// # Invariants
///
/// `ptr` is an image from `rkf_multi_image_alloc()` that this object owns.  Its code is
/// run only while a table holds the image: tables are dropped only after every site left
/// the trampolines only they hold and no task can be running them (rkf_multi_defer() with
/// `tasks`), or, for a table never published, before any site called them.
struct Image {
    ptr: *mut shim::ImageC,
    /// The programs the code names, by address: `struct rkf_multi_prog` in kernel data,
    /// not in the executable image.  Never resized.
    slots: KVVec<ProgC>,
    /// Functions whose trampolines were generated into it.
    funcs: u32,
}

// SAFETY: an image is freed once, from any task, when the last table using it goes; its
// slots name programs and counters that outlive it (they go with the same garbage).
unsafe impl Send for Image {}
// SAFETY: shared images are only read (their address, their slots), never written.
unsafe impl Sync for Image {}

impl Drop for Image {
    fn drop(&mut self) {
        // SAFETY: this object owns the image and no code runs in it any more (type
        // invariant).
        unsafe { shim::rkf_multi_image_free(self.ptr) };
    }
}

/// The trampoline a traced function's site calls.
#[derive(Clone)]
enum Tramp {
    /// c-shim/rkf_multi_tramp.S, which finds the function in the table.
    Shared,
    /// Its own, at `addr`, in `image` (which it keeps).
    Own { image: Arc<Image>, addr: usize },
}

impl Tramp {
    /// Its address for rkf_multi_ftrace_update(): 0 for the shared one.
    fn addr(&self) -> u64 {
        match self {
            Tramp::Shared => 0,
            Tramp::Own { addr, .. } => *addr as u64,
        }
    }
}

/// The storage of a published table.
struct Published {
    table: KBox<TableC>,
    _index: KVVec<u32>,
    funcs: KVVec<FuncC>,
    progs: KVVec<ProgC>,
    /// The trampoline of each function of `funcs`.
    tramps: KVVec<Tramp>,
}

impl Published {
    /// Every function's route: its site and trampoline, sorted by site.
    fn routes(&self) -> impl Iterator<Item = Route> + '_ {
        self.funcs
            .iter()
            .zip(self.tramps.iter())
            .map(|(f, t)| Route {
                site: f.key as u64 - MCOUNT_INSN_SIZE,
                tramp: t.addr(),
            })
    }

    /// The generated trampoline of a function with key `f.key` in this table, if it has
    /// one and it runs exactly `progs` on the same function: it can serve on.
    fn reusable(&self, f: &FuncC, progs: &[ProgC]) -> Option<Tramp> {
        let i = self.funcs.binary_search_by_key(&f.key, |o| o.key).ok()?;
        let o = &self.funcs[i];
        let old = progs_of(&self.progs, o);
        let same = o.addr == f.addr
            && o.nr_args == f.nr_args
            && old.len() == progs.len()
            && old.iter().zip(progs).all(|(a, b)| {
                a.prog == b.prog && a.cookie == b.cookie && ptr::eq(a.stats, b.stats)
            });
        match &self.tramps[i] {
            t @ Tramp::Own { .. } if same => Some(t.clone()),
            _ => None,
        }
    }
}

// SAFETY: the raw pointers point into the vectors owned alongside them, or to programs
// and counters the registry keeps alive while the table is published.
unsafe impl Send for Published {}

/// Every link, and the table built from them.
pub(crate) struct Registry {
    /// In attach order (ids increase).
    links: KVVec<Link>,
    next_id: u64,
    table: Option<Published>,
    /// Functions with fentry programs only get generated trampolines.
    own_tramps: bool,
    /// Images generated so far, to name the next.
    images: u64,
}

impl Registry {
    const fn new() -> Self {
        Self {
            links: KVVec::new(),
            next_id: 1,
            table: None,
            own_tramps: false,
            images: 0,
        }
    }
}

kernel::sync::global_lock! {
    // SAFETY: initialised by `init()` from module init, before the device exists.
    unsafe(uninit) static LINKS: Mutex<Registry> = Registry::new();
}

/// Sets up the registry.  Fails if rkf_multi cannot work on this kernel.
///
/// # Safety
///
/// Called once, from module init, before anything else here.
pub(crate) unsafe fn init() -> Result {
    // SAFETY: no preconditions.
    if unsafe { shim::rkf_multi_ibt_enabled() } {
        pr_err!("IBT is enabled: the trampoline's fexit call would fault; boot with ibt=off or build without CONFIG_X86_KERNEL_IBT\n");
        return Err(ENODEV);
    }
    // SAFETY: no preconditions.
    kernel::error::to_result(unsafe { shim::rkf_multi_init_deferred() })?;
    // SAFETY: called once, before first use (this function's contract).
    unsafe { LINKS.init() };
    // SAFETY: no preconditions.
    LINKS.lock().own_tramps = unsafe { shim::rkf_multi_tramps_supported() };
    Ok(())
}

/// Waits, at module exit, until no task is still inside the trampoline, and frees what
/// the registry still holds (statics are not dropped when a module goes).
pub(crate) fn exit() {
    // SAFETY: no preconditions; no link exists any more (each holds a module reference
    // through its program).
    unsafe { shim::rkf_multi_wait_inflight() };
    let mut reg = LINKS.lock();
    let links = core::mem::replace(&mut reg.links, KVVec::new());
    let table = reg.table.take();
    drop(reg);
    drop((links, table));
    // SAFETY: no more garbage can be queued: nothing attaches or detaches any more.
    unsafe { shim::rkf_multi_exit_deferred() };
}

/// A refusal of one function of a request.
struct Refused {
    index: u32,
    why: Reason,
}

impl Refused {
    fn new(index: usize, why: Reason) -> Self {
        Self {
            index: index as u32,
            why,
        }
    }
}

/// How an attach failed: a plain errno, or a refusal naming a function.
enum AttachError {
    Errno(Error),
    Refused(Refused),
}

impl From<Error> for AttachError {
    fn from(e: Error) -> Self {
        Self::Errno(e)
    }
}

impl From<kernel::alloc::AllocError> for AttachError {
    fn from(_: kernel::alloc::AllocError) -> Self {
        Self::Errno(ENOMEM)
    }
}

/// Reads `n` values of `T` (a plain integer) from user address `addr`.  Large requests
/// (up to `MAX_FUNCS` entries) go to vmalloc, so that they never need a high-order page.
fn read_array<T: FromBytes + Copy + Default>(addr: u64, n: usize) -> Result<KVVec<T>> {
    let bytes = n.checked_mul(size_of::<T>()).ok_or(E2BIG)?;
    let mut raw = KVVec::<u8>::with_capacity(bytes, GFP_KERNEL)?;
    UserSlice::new(UserPtr::from_addr(addr as usize), bytes).read_all(&mut raw, GFP_KERNEL)?;
    let mut out = KVVec::with_capacity(n, GFP_KERNEL)?;
    for chunk in raw.chunks_exact(size_of::<T>()) {
        // SAFETY: `chunk` holds `size_of::<T>()` bytes and `T` is valid for any bits.
        let v = unsafe { ptr::read_unaligned(chunk.as_ptr().cast::<T>()) };
        out.push(v, GFP_KERNEL)?;
    }
    Ok(out)
}

/// Checks one function: its BTF shape, its address, and that ftrace can hook it for us.
///
/// # Safety
///
/// `target.btf` is a valid BTF object and `target.module` a module (or NULL), both alive
/// for the duration of the call.
unsafe fn check_target(
    target: TargetBtf,
    index: usize,
    btf_id: u32,
    addr: u64,
) -> Result<Target, Refused> {
    let refuse = |why| Refused::new(index, why);
    let mut shape = ShapeC {
        name: ptr::null(),
        nr_params: 0,
        varargs: 0,
        kind: [0; 8],
        size: [0; 8],
    };
    // SAFETY: `target.btf` is alive (this function's contract), `shape` is valid for
    // writes.
    if unsafe { shim::rkf_multi_shape(target.btf, btf_id, &mut shape) } != 0 || shape.name.is_null()
    {
        return Err(refuse(Reason::NotAFunction));
    }
    let nr_args = core_rules::check_shape(
        shape.nr_params,
        shape.varargs != 0,
        &shape.kind,
        &shape.size,
    )
    .map_err(refuse)?;
    // SAFETY: the name is a NUL-terminated string of `target.btf`, alive for this call.
    let name = unsafe { CStr::from_char_ptr(shape.name) };
    if core_rules::denied(name.to_bytes()) {
        return Err(refuse(Reason::Denied));
    }
    // SAFETY: `name` is NUL-terminated; any address may be asked about; the module, if
    // any, is alive (this function's contract).
    if !unsafe { shim::rkf_multi_is_symbol(addr as usize, name.as_char_ptr(), target.module) } {
        return Err(refuse(Reason::WrongAddress));
    }
    // SAFETY: any address may be asked about.
    let site = unsafe { shim::rkf_multi_site(addr as usize) } as u64;
    if site == 0 {
        return Err(refuse(Reason::NotTraceable));
    }
    Ok(Target {
        site,
        addr,
        nr_args,
        cookie: 0,
    })
}

/// Builds the table of `links`, or `None` if there is nothing to trace.  Functions with
/// fentry programs only (if `reg.own_tramps`) keep their trampoline from `reg.table` if
/// their programs did not change, or get a new one, generated in one image.
fn build_table(reg: &mut Registry) -> Result<Option<Published>> {
    let links = &reg.links;
    let total: usize = links.iter().map(|l| l.targets.len()).sum();
    if total == 0 {
        return Ok(None);
    }
    // Slot::idx indexes `refs`: (link, target).
    let mut refs = KVVec::<(u32, u32)>::with_capacity(total, GFP_KERNEL)?;
    let mut slots = KVVec::<Slot>::with_capacity(total, GFP_KERNEL)?;
    for (li, l) in links.iter().enumerate() {
        for (ti, t) in l.targets.iter().enumerate() {
            slots.push(
                Slot {
                    site: t.site,
                    fexit: l.fexit,
                    seq: l.id,
                    idx: refs.len() as u32,
                },
                GFP_KERNEL,
            )?;
            refs.push((li as u32, ti as u32), GFP_KERNEL)?;
        }
    }
    table_rules::order_slots(&mut slots);
    let mut progs = KVVec::<ProgC>::with_capacity(total, GFP_KERNEL)?;
    for s in slots.iter() {
        let (li, ti) = refs[s.idx as usize];
        let l = &links[li as usize];
        progs.push(
            ProgC {
                prog: l.prog.ptr,
                cookie: l.targets[ti as usize].cookie,
                stats: &l.stats[ti as usize],
            },
            GFP_KERNEL,
        )?;
    }
    let nr_funcs = table_rules::groups(&slots).count();
    let mut funcs = KVVec::<FuncC>::with_capacity(nr_funcs, GFP_KERNEL)?;
    for Group {
        site,
        start,
        end,
        fentry,
    } in table_rules::groups(&slots)
    {
        let (li, ti) = refs[slots[start].idx as usize];
        let t = &links[li as usize].targets[ti as usize];
        funcs.push(
            FuncC {
                key: (site + MCOUNT_INSN_SIZE) as usize,
                addr: t.addr as usize,
                nr_args: t.nr_args,
                nr_fentry: fentry as u32,
                nr_progs: (end - start) as u32,
                first: start as u32,
            },
            GFP_KERNEL,
        )?;
    }
    let bits = table_rules::index_bits(nr_funcs);
    let mut index = KVVec::<u32>::from_elem(0, 1 << bits, GFP_KERNEL)?;
    table_rules::build_index(funcs.iter().map(|f| f.key as u64), &mut index, bits);
    let tramps = build_tramps(reg, &funcs, &progs)?;
    let table = KBox::new(
        TableC {
            nr_funcs: nr_funcs as u32,
            bits,
            index: index.as_ptr(),
            funcs: funcs.as_ptr(),
            progs: progs.as_ptr(),
        },
        GFP_KERNEL,
    )?;
    Ok(Some(Published {
        table,
        _index: index,
        funcs,
        progs,
        tramps,
    }))
}

/// The programs of `f`, a function whose programs are in `progs` (a table's).
fn progs_of<'a>(progs: &'a [ProgC], f: &FuncC) -> &'a [ProgC] {
    &progs[f.first as usize..][..f.nr_progs as usize]
}

/// The trampoline of each of `funcs` (with `progs`), for [`build_table()`].  Generating
/// trampolines never fails an operation: a function it fails for (no memory for an
/// image, or rkf_multi_run_fentry() out of reach) takes the shared trampoline.
fn build_tramps(reg: &mut Registry, funcs: &[FuncC], progs: &[ProgC]) -> Result<KVVec<Tramp>> {
    let mut tramps = KVVec::with_capacity(funcs.len(), GFP_KERNEL)?;
    // What each function could keep, and how many functions would keep each image: an
    // image most of whose functions moved on is not kept alive by the few that stay
    // (they get new trampolines), so images hold at most twice the live code.
    let mut kept = KVVec::<(*const Image, u32)>::new();
    let mut cands = KVVec::<Option<Tramp>>::with_capacity(funcs.len(), GFP_KERNEL)?;
    // Functions with fentry programs only get their own trampoline, where it can run.
    let own = |f: &FuncC| reg.own_tramps && f.nr_fentry == f.nr_progs;
    for f in funcs {
        let cand = if own(f) {
            reg.table
                .as_ref()
                .and_then(|o| o.reusable(f, progs_of(progs, f)))
        } else {
            None
        };
        if let Some(Tramp::Own { image, .. }) = &cand {
            let p = Arc::as_ptr(image);
            match kept.iter_mut().find(|(q, _)| *q == p) {
                Some((_, n)) => *n += 1,
                None => kept.push((p, 1), GFP_KERNEL)?,
            }
        }
        cands.push(cand, GFP_KERNEL)?;
    }
    let mut fresh = KVVec::<u32>::new();
    for (i, (f, cand)) in funcs.iter().zip(cands).enumerate() {
        let t = match cand {
            Some(Tramp::Own { image, addr })
                if kept
                    .iter()
                    .any(|&(p, n)| p == Arc::as_ptr(&image) && 2 * n >= image.funcs) =>
            {
                Tramp::Own { image, addr }
            }
            _ => {
                if own(f) {
                    fresh.push(i as u32, GFP_KERNEL)?;
                }
                Tramp::Shared
            }
        };
        tramps.push(t, GFP_KERNEL)?;
    }
    if !fresh.is_empty() {
        reg.images += 1;
        if let Err(e) = generate(reg.images, funcs, progs, &fresh, &mut tramps) {
            pr_warn!(
                "{} functions keep the shared trampoline: generating theirs failed: {:?}\n",
                fresh.len(),
                e
            );
        }
    }
    Ok(tramps)
}

/// Generates, in one new image numbered `seq`, the trampolines of `funcs[i]` for each `i`
/// of `fresh`, and routes them there in `tramps` (which they leave shared on failure).
fn generate(
    seq: u64,
    funcs: &[FuncC],
    progs: &[ProgC],
    fresh: &[u32],
    tramps: &mut [Tramp],
) -> Result {
    // Per function: its offset in the code, the registers to save and its length; then
    // the slots.
    let mut plan = KVVec::<(usize, u32, usize)>::with_capacity(fresh.len(), GFP_KERNEL)?;
    let (mut size, mut nr_slots) = (0usize, 0usize);
    for &i in fresh {
        let f = &funcs[i as usize];
        let mut saved = f.nr_args;
        for p in progs_of(progs, f) {
            // SAFETY: the table's programs are held by their links.
            saved = saved.max(unsafe { shim::rkf_multi_prog_ctx_args(p.prog) });
        }
        size = tramp_core::align(size);
        let len = tramp_core::len(f.nr_args, saved, f.nr_progs);
        plan.push((size, saved, len), GFP_KERNEL)?;
        size += len;
        nr_slots += f.nr_progs as usize;
    }
    // The slots, in kernel data: `slots` is never resized, so they stay put.
    let mut slots = KVVec::<ProgC>::with_capacity(nr_slots, GFP_KERNEL)?;
    for &i in fresh {
        for p in progs_of(progs, &funcs[i as usize]) {
            slots.push(
                ProgC {
                    prog: p.prog,
                    cookie: p.cookie,
                    stats: p.stats,
                },
                GFP_KERNEL,
            )?;
        }
    }
    let size32 = u32::try_from(size).map_err(|_| E2BIG)?;
    let mut code = 0usize;
    // SAFETY: `code` is valid for writes.
    let im = unsafe { shim::rkf_multi_image_alloc(size32, seq, &mut code) };
    if im.is_null() {
        return Err(ENOMEM);
    }
    // INVARIANT: the image is ours; dropping `image` frees it, committed or not.
    let image = Image {
        ptr: im,
        slots,
        funcs: fresh.len() as u32,
    };
    // int3 between the trampolines.
    let mut buf = KVVec::<u8>::from_elem(0xcc, size, GFP_KERNEL)?;
    let run = shim::rkf_multi_run_fentry as *const () as usize as u64;
    let mut first_slot = 0usize;
    let mut slot_addrs = KVVec::<u64>::new();
    for (&i, &(at, saved, len)) in fresh.iter().zip(plan.iter()) {
        let f = &funcs[i as usize];
        let n = f.nr_progs as usize;
        slot_addrs.clear();
        for s in &image.slots[first_slot..first_slot + n] {
            slot_addrs.push(ptr::from_ref(s) as u64, GFP_KERNEL)?;
        }
        first_slot += n;
        let t = tramp_core::Tramp {
            nr_args: f.nr_args,
            saved,
            addr: f.addr as u64,
            slots: &slot_addrs,
            run,
        };
        tramp_core::emit(&mut buf[at..at + len], (code + at) as u64, &t).map_err(|_| ERANGE)?;
    }
    // SAFETY: `buf` holds the image's `size` bytes.
    kernel::error::to_result(unsafe {
        shim::rkf_multi_image_commit(image.ptr, buf.as_ptr().cast())
    })?;
    let image = Arc::new(image, GFP_KERNEL)?;
    for (&i, &(at, _, _)) in fresh.iter().zip(plan.iter()) {
        tramps[i as usize] = Tramp::Own {
            image: image.clone(),
            addr: code + at,
        };
    }
    Ok(())
}

/// What a publication replaced: freed once no cpu can read the old table (and, if it
/// had generated trampolines that sites stopped calling, no task runs them).
struct Garbage {
    table: Option<Published>,
    _link: Option<Link>,
}

/// Frees garbage handed to `rkf_multi_defer()`, after a grace period, in a worker.
///
/// # Safety
///
/// `garbage` comes from `KBox::into_raw()` in [`publish()`], and is freed once.
#[no_mangle]
pub(crate) unsafe extern "C" fn rkf_multi_free_garbage(garbage: *mut c_void) {
    // SAFETY: by the function's contract.
    drop(unsafe { KBox::from_raw(garbage.cast::<Garbage>()) });
}

/// Makes `new` the table the trampoline reads; returns what it replaced, for [`defer()`]
/// once no site calls a generated trampoline only the old table has.
fn publish(reg: &mut Registry, new: Option<Published>, gone: Option<Link>) -> Garbage {
    let raw = new
        .as_ref()
        .map_or(ptr::null(), |p| ptr::from_ref::<TableC>(&p.table));
    // SAFETY: `raw` is NULL or a complete table whose storage `reg` keeps until the next
    // publication; publications are serialised by the registry lock.
    unsafe { shim::rkf_multi_publish(raw) };
    let old = core::mem::replace(&mut reg.table, new);
    Garbage {
        table: old,
        _link: gone,
    }
}

/// Frees `garbage` after a grace period (and, with `tasks`, once no task runs a generated
/// trampoline of it), without waiting for it here.
fn defer(garbage: Garbage, tasks: bool) {
    if garbage.table.is_none() && garbage._link.is_none() {
        return;
    }
    match KBox::<Garbage>::new_uninit(GFP_KERNEL) {
        Ok(b) => {
            let b = KBox::write(b, garbage);
            // SAFETY: a box for rkf_multi_free_garbage(), handed over once.
            unsafe { shim::rkf_multi_defer(KBox::into_raw(b).cast(), tasks) };
        }
        Err(_) => {
            // No memory to defer: wait for the grace periods here.
            // SAFETY: no preconditions.
            unsafe { shim::rkf_multi_sync(tasks) };
            drop(garbage);
        }
    }
}

/// The ftrace updates from the routes of `old` to those of `new`: the sites to hook, move
/// and unhook, each with its trampoline, and whether a generated trampoline retires.
struct Plan {
    hook: (KVVec<usize>, KVVec<usize>),
    moves: (KVVec<usize>, KVVec<usize>),
    unhook: (KVVec<usize>, KVVec<usize>),
    retired: bool,
}

impl Plan {
    fn new(old: Option<&Published>, new: Option<&Published>) -> Result<Self> {
        let mut plan = Plan {
            hook: (KVVec::new(), KVVec::new()),
            moves: (KVVec::new(), KVVec::new()),
            unhook: (KVVec::new(), KVVec::new()),
            retired: false,
        };
        let mut failed = false;
        plan.retired = table_rules::plan_updates(
            old.into_iter().flat_map(|p| p.routes()),
            new.into_iter().flat_map(|p| p.routes()),
            |u, r| {
                let (sites, tramps) = match u {
                    Update::Hook => &mut plan.hook,
                    Update::Move => &mut plan.moves,
                    Update::Unhook => &mut plan.unhook,
                };
                failed |= sites.push(r.site as usize, GFP_KERNEL).is_err()
                    || tramps.push(r.tramp as usize, GFP_KERNEL).is_err();
            },
        );
        if failed {
            return Err(ENOMEM);
        }
        Ok(plan)
    }
}

/// The table of the registry's links as they are now, and the ftrace updates from the
/// published table to it.
fn next_table(reg: &mut Registry) -> Result<(Option<Published>, Plan)> {
    let table = build_table(reg)?;
    let plan = Plan::new(reg.table.as_ref(), table.as_ref())?;
    Ok((table, plan))
}

/// Hooks, unhooks or moves (`op`) `sites` to or from `tramps`, in one ftrace update.
fn ftrace_update((sites, tramps): &(KVVec<usize>, KVVec<usize>), op: u32) -> Result {
    // SAFETY: both vectors hold `sites.len()` entries: sites from `rkf_multi_site()` and
    // trampolines that live while a table routes a function to them.
    kernel::error::to_result(unsafe {
        shim::rkf_multi_ftrace_update(sites.as_ptr(), tramps.as_ptr(), sites.len() as u32, op)
    })
}

/// Keeps rkf_multi, `garbage` and `modules` forever, after an ftrace update that failed
/// to take sites off trampolines that run their programs and code.
fn leak_after_failed_unhook(garbage: Garbage, modules: KVVec<ModuleRef>) {
    // SAFETY: no preconditions.
    unsafe { shim::rkf_multi_pin() };
    core::mem::forget(garbage);
    core::mem::forget(modules);
}

/// Attaches a new link as `req` asks; returns its id.
fn attach(req: &AttachC) -> Result<u64, AttachError> {
    if req.flags != 0 || req.pad != 0 {
        return Err(EINVAL.into());
    }
    core_rules::check_count(req.cnt).map_err(|e| Error::from_errno(-e))?;
    let n = req.cnt as usize;
    let ids: KVVec<u32> = read_array(req.btf_ids, n)?;
    let addrs: KVVec<u64> = read_array(req.addrs, n)?;
    let cookies: Option<KVVec<u64>> = match req.cookies {
        0 => None,
        a => Some(read_array(a, n)?),
    };
    let fds: Option<KVVec<i32>> = match req.btf_fds {
        0 => None,
        a => Some(read_array(a, n)?),
    };
    let (prog, fexit, prog_id) = ProgRef::get(req.prog_fd)?;
    let modules = ModuleBtfs::get(fds.as_deref().unwrap_or(&[]))?;
    // SAFETY: `prog` holds the program, and so its attach BTF.
    let prog_btf = unsafe { shim::rkf_multi_prog_btf(prog.ptr) };

    // Each function on its own, in request order, so that the first bad one is named.
    // (What depends on the other links is checked under their lock, below, in site order.)
    let mut targets = KVVec::<(Target, u32)>::with_capacity(n, GFP_KERNEL)?;
    for i in 0..n {
        let fd = fds.as_ref().map_or(0, |f| f[i]);
        let target = modules.target_btf(fd, prog_btf).ok_or(EINVAL)?;
        // SAFETY: `prog` holds the program's BTF, `modules` every module BTF object and
        // module, for as long as this loop runs.
        let mut t =
            unsafe { check_target(target, i, ids[i], addrs[i]) }.map_err(AttachError::Refused)?;
        t.cookie = cookies.as_ref().map_or(0, |c| c[i]);
        targets.push((t, i as u32), GFP_KERNEL)?;
    }
    table_rules::sort_by_key(&mut targets, |(t, i)| (t.site, *i));
    if let Some(d) = core_rules::first_duplicate(&targets, |(t, _)| t.site) {
        return Err(AttachError::Refused(Refused::new(
            targets[d].1 as usize,
            Reason::Duplicate,
        )));
    }

    let modules = modules.into_modules()?;
    let mut reg = LINKS.lock();
    // Limits per function, against the links already there, and in the same pass the
    // functions no link holds yet: another direct trampoline must not own them.
    for (t, i) in targets.iter() {
        let mut on_site = 0u32;
        for l in reg.links.iter() {
            if l.targets.binary_search_by_key(&t.site, |x| x.site).is_ok() {
                if l.prog.ptr == prog.ptr {
                    return Err(AttachError::Refused(Refused::new(
                        *i as usize,
                        Reason::SameProgram,
                    )));
                }
                on_site += 1;
            }
        }
        if on_site >= MAX_LINKS_PER_FUNC {
            return Err(AttachError::Refused(Refused::new(
                *i as usize,
                Reason::TooManyLinks,
            )));
        }
        // SAFETY: any site may be asked about.
        if on_site == 0 && unsafe { shim::rkf_multi_site_owner(t.site as usize) } != 0 {
            return Err(AttachError::Refused(Refused::new(
                *i as usize,
                Reason::Busy,
            )));
        }
    }

    let mut link_targets = KVVec::with_capacity(n, GFP_KERNEL)?;
    let mut stats = KVVec::with_capacity(n, GFP_KERNEL)?;
    for (t, _) in targets.iter() {
        link_targets.push(*t, GFP_KERNEL)?;
        stats.push(
            StatsC {
                hits: kernel::sync::atomic::Atomic::new(0),
                misses: kernel::sync::atomic::Atomic::new(0),
            },
            GFP_KERNEL,
        )?;
    }

    let id = reg.next_id;
    reg.links.push(
        Link {
            id,
            prog,
            prog_id,
            fexit,
            targets: link_targets,
            stats,
            modules,
        },
        GFP_KERNEL,
    )?;
    let undo = |reg: &mut GlobalGuard<LINKS>| {
        // Unpublished: the link was never visible, its program ref goes with it.
        drop(reg.links.pop());
    };
    let (table, plan) = match next_table(&mut reg) {
        Ok(tp) => tp,
        Err(e) => {
            undo(&mut reg);
            return Err(e.into());
        }
    };
    // First hook the new functions and move those whose trampoline changes (the shared
    // trampoline finds them in the old table, with their old programs), then publish: a
    // failure leaves nothing behind, and functions shared with other links never miss a
    // call.  Attaching unhooks nothing.
    if let Err(e) = ftrace_update(&plan.hook, shim::HOOK) {
        // Nothing was hooked; still, ftrace may have published the new sites' trampolines
        // to its list function for a moment: free them (and the link, whose program and
        // counters they name) only once no task can be running them.
        let garbage = Garbage {
            table,
            _link: reg.links.pop(),
        };
        defer(garbage, true);
        // -EINVAL from update_ftrace_direct_add(): a site gained another direct
        // trampoline since it was checked.
        return Err(if e == EINVAL { EBUSY } else { e }.into());
    }
    if let Err(e) = ftrace_update(&plan.moves, shim::MOVE) {
        // The new functions ran the new table's trampolines for a while: those, and the
        // link whose program and counters they name, go once no task runs them.
        let garbage = Garbage {
            table,
            _link: reg.links.pop(),
        };
        if let Err(u) = ftrace_update(&plan.hook, shim::UNHOOK) {
            pr_err!(
                "unhooking {} functions after a failed attach: {:?}; they stay hooked\n",
                plan.hook.0.len(),
                u
            );
            leak_after_failed_unhook(garbage, KVVec::new());
        } else {
            defer(garbage, true);
        }
        return Err(e.into());
    }
    reg.next_id += 1;
    let garbage = publish(&mut reg, table, None);
    defer(garbage, plan.retired);
    Ok(id)
}

/// Detaches link `id`.
fn detach(id: u64) {
    let mut reg = LINKS.lock();
    let Some(pos) = reg.links.iter().position(|l| l.id == id) else {
        return;
    };
    let Ok(mut link) = reg.links.remove(pos) else {
        return;
    };
    // The traced modules stay until their functions are unhooked, below.
    let modules = core::mem::replace(&mut link.modules, KVVec::new());
    let (table, plan) = match next_table(&mut reg) {
        Ok(tp) => tp,
        Err(_) => {
            pr_err!("out of memory detaching link {}: it stays attached\n", id);
            // Put it back where it was.
            link.modules = modules;
            let _ = reg.links.insert_within_capacity(pos, link);
            return;
        }
    };
    // Publish first: once no table names them, the functions the shared trampoline serves
    // run the link's program no more.  Then move and unhook the others; the old table and
    // the link (its program and counters) go once no cpu reads that table and no task
    // runs a trampoline it had.
    let garbage = publish(&mut reg, table, Some(link));
    let moved = ftrace_update(&plan.moves, shim::MOVE);
    let unhooked = ftrace_update(&plan.unhook, shim::UNHOOK);
    if moved.is_err() || unhooked.is_err() {
        pr_err!(
            "detaching link {}: moving {} functions: {:?}, unhooking {}: {:?}; they stay on their trampolines, with the link's program, and rkf_multi and their modules stay loaded\n",
            id,
            plan.moves.0.len(),
            moved,
            plan.unhook.0.len(),
            unhooked
        );
        leak_after_failed_unhook(garbage, modules);
        return;
    }
    defer(garbage, plan.retired);
    drop(modules);
}

/// Fills `info` for link `info.id` (or `own`, this file's link, if it is 0).
fn info(own: u64, info: &mut LinkInfoC) -> Result {
    let reg = LINKS.lock();
    // Links are in id order.
    let l = if info.id == 0 {
        reg.links.iter().find(|l| l.id == own)
    } else {
        reg.links.iter().find(|l| l.id >= info.id)
    }
    .ok_or(ENOENT)?;
    let want = l.id;
    info.id = l.id;
    info.prog_id = l.prog_id;
    info.fexit = l.fexit.into();
    info.cnt = l.targets.len() as u32;
    info.next_id = reg
        .links
        .iter()
        .map(|l| l.id)
        .find(|&i| i > want)
        .unwrap_or(0);
    let n = (info.buf_cnt as usize).min(l.targets.len());
    if n > 0 {
        let mut w = UserSlice::new(
            UserPtr::from_addr(info.funcs as usize),
            n * size_of::<FuncInfoC>(),
        )
        .writer();
        for (t, s) in l.targets.iter().zip(l.stats.iter()).take(n) {
            w.write(&FuncInfoC {
                addr: t.addr,
                cookie: t.cookie,
                hits: s.hits.load(kernel::sync::atomic::Relaxed) as u64,
                misses: s.misses.load(kernel::sync::atomic::Relaxed) as u64,
            })?;
        }
    }
    Ok(())
}

/// An open file of `/dev/rkf_multi`: at most one link, detached when the file goes.
pub(crate) struct LinkFile {
    /// The link's id, or 0.
    id: AtomicU64,
}

#[vtable]
impl MiscDevice for LinkFile {
    type Ptr = KBox<Self>;

    fn open(_file: &File, _misc: &MiscDeviceRegistration<Self>) -> Result<KBox<Self>> {
        Ok(KBox::new(
            Self {
                id: AtomicU64::new(0),
            },
            GFP_KERNEL,
        )?)
    }

    fn release(me: KBox<Self>, _file: &File) {
        let id = me.id.load(Ordering::Acquire);
        if id != 0 {
            detach(id);
        }
    }

    fn ioctl(me: &LinkFile, _file: &File, cmd: u32, arg: usize) -> Result<isize> {
        // SAFETY: no preconditions.
        if !unsafe { shim::rkf_multi_capable() } {
            return Err(EPERM);
        }
        let user = UserSlice::new(UserPtr::from_addr(arg), _IOC_SIZE(cmd));
        match cmd {
            IOC_ATTACH => {
                let (mut r, mut w) = user.reader_writer();
                let mut req: AttachC = r.read()?;
                if me.id.load(Ordering::Acquire) != 0 {
                    return Err(EBUSY);
                }
                req.bad_index = u32::MAX;
                req.reason = 0;
                let res = attach(&req);
                let ret = match res {
                    Ok(id) => {
                        if me
                            .id
                            .compare_exchange(0, id, Ordering::AcqRel, Ordering::Acquire)
                            .is_err()
                        {
                            // Two attaches raced on one file: keep the first.
                            detach(id);
                            return Err(EBUSY);
                        }
                        Ok(0)
                    }
                    Err(AttachError::Errno(e)) => Err(e),
                    Err(AttachError::Refused(r)) => {
                        req.bad_index = r.index;
                        req.reason = r.why as u32;
                        Err(Error::from_errno(-r.why.errno()))
                    }
                };
                w.write(&req)?;
                ret
            }
            IOC_INFO => {
                let (mut r, mut w) = user.reader_writer();
                let mut li: LinkInfoC = r.read()?;
                info(me.id.load(Ordering::Acquire), &mut li)?;
                w.write(&li)?;
                Ok(0)
            }
            _ => Err(ENOTTY),
        }
    }
}
