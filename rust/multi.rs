// SPDX-License-Identifier: GPL-2.0

//! rkf_multi's links: the ioctl interface, the validation of every request, the registry
//! of links and the table the trampoline reads.
//!
//! Each open file of `/dev/rkf_multi` is one link.  `RKF_MULTI_IOC_ATTACH` attaches it
//! once, to a program and a set of functions; closing the file (or exiting) detaches it.
//! Any number of links may share functions, fentry and fexit mixed: every function has
//! one entry in one table, listing its programs in attach order, and the table is
//! replaced whole, under RCU, on every attach and detach.  ftrace only sees functions
//! gaining their first link or losing their last, in one batched update per operation.

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
    sync::GlobalGuard,
    transmute::{AsBytes, FromBytes},
    uaccess::{UserPtr, UserSlice},
};

use crate::multi_core::{self as core_rules, Group, Refusal, Slot, MAX_LINKS_PER_FUNC};

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

    /// `struct rkf_multi_attach`.
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
        pub(super) fn rkf_multi_site_busy(site: usize) -> bool;
        pub(super) fn rkf_multi_ftrace_update(sites: *const usize, n: u32, add: bool) -> c_int;
        pub(super) fn rkf_multi_publish(table: *const TableC) -> *const TableC;
        pub(super) fn rkf_multi_defer(garbage: *mut c_void);
        pub(super) fn rkf_multi_sync();
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
        core_rules::sort_by_key(&mut sorted, |&fd| fd);
        let mut by_fd = KVVec::new();
        let mut bad = KVVec::<(i32, Refusal)>::new();
        for (k, &fd) in sorted.iter().enumerate() {
            if k > 0 && sorted[k - 1] == fd {
                continue;
            }
            let why = match BtfRef::get(fd) {
                Err(e) if e == EBADF => Refusal::BadFd,
                Err(e) if e == EINVAL => Refusal::NotModuleBtf,
                Err(e) => return Err(e.into()),
                Ok(btf) => match ModuleRef::of(&btf) {
                    Some(module) => {
                        by_fd.push((fd, btf, module), GFP_KERNEL)?;
                        continue;
                    }
                    None => Refusal::NotModuleBtf,
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

/// The storage of a published table.
struct Published {
    table: KBox<TableC>,
    _index: KVVec<u32>,
    _funcs: KVVec<FuncC>,
    _progs: KVVec<ProgC>,
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
}

impl Registry {
    const fn new() -> Self {
        Self {
            links: KVVec::new(),
            next_id: 1,
            table: None,
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
    why: Refusal,
}

impl Refused {
    fn new(index: usize, why: Refusal) -> Self {
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
        return Err(refuse(Refusal::NotAFunction));
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
        return Err(refuse(Refusal::Denied));
    }
    // SAFETY: `name` is NUL-terminated; any address may be asked about; the module, if
    // any, is alive (this function's contract).
    if !unsafe { shim::rkf_multi_is_symbol(addr as usize, name.as_char_ptr(), target.module) } {
        return Err(refuse(Refusal::WrongAddress));
    }
    // SAFETY: any address may be asked about.
    let site = unsafe { shim::rkf_multi_site(addr as usize) } as u64;
    if site == 0 {
        return Err(refuse(Refusal::NotTraceable));
    }
    // SAFETY: any site may be asked about.
    if unsafe { shim::rkf_multi_site_busy(site as usize) } {
        return Err(refuse(Refusal::Busy));
    }
    Ok(Target {
        site,
        addr,
        nr_args,
        cookie: 0,
    })
}

/// Builds the table of `links`, or `None` if there is nothing to trace.
fn build_table(links: &[Link]) -> Result<Option<Published>> {
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
    core_rules::order_slots(&mut slots);
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
    let nr_funcs = core_rules::groups(&slots).count();
    let mut funcs = KVVec::<FuncC>::with_capacity(nr_funcs, GFP_KERNEL)?;
    for Group {
        site,
        start,
        end,
        fentry,
    } in core_rules::groups(&slots)
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
    let bits = core_rules::index_bits(nr_funcs);
    let mut index = KVVec::<u32>::from_elem(0, 1 << bits, GFP_KERNEL)?;
    core_rules::build_index(funcs.iter().map(|f| f.key as u64), &mut index, bits);
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
        _funcs: funcs,
        _progs: progs,
    }))
}

/// What a publication replaced: freed once no cpu can read the old table.
struct Garbage {
    _table: Option<Published>,
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

/// Makes `new` the table the trampoline reads.  The old table, and `gone` (a detached
/// link, which the old table may name), are freed after a grace period, without
/// waiting for it here.
fn publish(reg: &mut Registry, new: Option<Published>, gone: Option<Link>) {
    let raw = new
        .as_ref()
        .map_or(ptr::null(), |p| ptr::from_ref::<TableC>(&p.table));
    // SAFETY: `raw` is NULL or a complete table whose storage `reg` keeps until the next
    // publication; publications are serialised by the registry lock.
    unsafe { shim::rkf_multi_publish(raw) };
    let old = core::mem::replace(&mut reg.table, new);
    if old.is_none() && gone.is_none() {
        return;
    }
    let garbage = Garbage {
        _table: old,
        _link: gone,
    };
    match KBox::<Garbage>::new_uninit(GFP_KERNEL) {
        Ok(b) => {
            let b = KBox::write(b, garbage);
            // SAFETY: a box for rkf_multi_free_garbage(), handed over once.
            unsafe { shim::rkf_multi_defer(KBox::into_raw(b).cast()) };
        }
        Err(_) => {
            // No memory to defer: wait for the grace period here.
            // SAFETY: no preconditions.
            unsafe { shim::rkf_multi_sync() };
            drop(garbage);
        }
    }
}

/// Whether a link other than `links[skip]` holds `site`.
fn held_by_others(links: &[Link], skip: usize, site: u64) -> bool {
    links
        .iter()
        .enumerate()
        .any(|(i, l)| i != skip && l.targets.binary_search_by_key(&site, |t| t.site).is_ok())
}

/// Hooks or unhooks `sites` in one ftrace update.
fn ftrace_update(sites: &[u64], add: bool) -> Result {
    let mut raw = KVVec::<usize>::with_capacity(sites.len(), GFP_KERNEL)?;
    for &s in sites {
        raw.push(s as usize, GFP_KERNEL)?;
    }
    // SAFETY: `raw` holds `sites.len()` sites from `rkf_multi_site()`.
    kernel::error::to_result(unsafe {
        shim::rkf_multi_ftrace_update(raw.as_ptr(), raw.len() as u32, add)
    })
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
    core_rules::sort_by_key(&mut targets, |(t, i)| (t.site, *i));
    if let Some(d) = targets.windows(2).position(|w| w[0].0.site == w[1].0.site) {
        return Err(AttachError::Refused(Refused::new(
            targets[d + 1].1 as usize,
            Refusal::Duplicate,
        )));
    }

    let mut new_sites = KVVec::from_elem(0u64, n, GFP_KERNEL)?;
    let mut nr_new = 0;
    let modules = modules.into_modules()?;
    let mut reg = LINKS.lock();
    // Limits per function, against the links already there, and in the same pass the
    // functions no link holds yet: those the attach hooks in ftrace.
    for (t, i) in targets.iter() {
        let mut on_site = 0u32;
        for l in reg.links.iter() {
            if l.targets.binary_search_by_key(&t.site, |x| x.site).is_ok() {
                if l.prog.ptr == prog.ptr {
                    return Err(AttachError::Refused(Refused::new(
                        *i as usize,
                        Refusal::SameProgram,
                    )));
                }
                on_site += 1;
            }
        }
        if on_site >= MAX_LINKS_PER_FUNC {
            return Err(AttachError::Refused(Refused::new(
                *i as usize,
                Refusal::TooManyLinks,
            )));
        }
        if on_site == 0 {
            new_sites[nr_new] = t.site;
            nr_new += 1;
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
    let table = match build_table(&reg.links) {
        Ok(t) => t,
        Err(e) => {
            undo(&mut reg);
            return Err(e.into());
        }
    };
    // First hook the new functions (the trampoline finds nothing for them in the old
    // table), then publish: a failure leaves nothing behind, and functions shared with
    // other links never miss a call.
    if let Err(e) = ftrace_update(&new_sites[..nr_new], true) {
        undo(&mut reg);
        // -EINVAL from update_ftrace_direct_add(): a site gained another direct
        // trampoline since check_target().
        return Err(if e == EINVAL { EBUSY } else { e }.into());
    }
    reg.next_id += 1;
    publish(&mut reg, table, None);
    Ok(id)
}

/// Detaches link `id`.
fn detach(id: u64) {
    let mut reg = LINKS.lock();
    let Some(pos) = reg.links.iter().position(|l| l.id == id) else {
        return;
    };
    let links = &reg.links;
    let Ok(mut out) = KVVec::from_elem(0u64, links[pos].targets.len(), GFP_KERNEL) else {
        pr_err!("out of memory detaching link {}: it stays attached\n", id);
        return;
    };
    let n = core_rules::transitions(
        links[pos].targets.iter().map(|t| t.site),
        |s| held_by_others(links, pos, s),
        &mut out,
    );
    let gone = (out, n);
    let Ok(mut link) = reg.links.remove(pos) else {
        return;
    };
    // The traced modules stay until their functions are unhooked, below.
    let modules = core::mem::replace(&mut link.modules, KVVec::new());
    let table = match build_table(&reg.links) {
        Ok(t) => t,
        Err(_) => {
            pr_err!("out of memory detaching link {}: it stays attached\n", id);
            // Put it back where it was.
            link.modules = modules;
            let _ = reg.links.insert_within_capacity(pos, link);
            return;
        }
    };
    // Publish first: once no table names them, the unhooked sites find nothing.  The
    // link (its program and counters) goes with the old table, after a grace period.
    publish(&mut reg, table, Some(link));
    if let Err(e) = ftrace_update(&gone.0[..gone.1], false) {
        pr_err!(
            "unhooking {} functions of link {}: {:?}; they stay hooked, running no program, and their modules stay loaded\n",
            gone.1,
            id,
            e
        );
        // A module must not go while ftrace still calls into its functions for us.
        core::mem::forget(modules);
        return;
    }
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
