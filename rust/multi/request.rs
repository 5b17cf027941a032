// SPDX-License-Identifier: GPL-2.0

//! An attach request, read from user space and checked function by function on its own:
//! the program, the BTF objects of the modules it names, and for every function its BTF
//! shape, its address and its ftrace site.  What depends on the other links is checked by
//! the registry, under its lock.

use core::{ffi::CStr, ptr};

use kernel::{
    bindings,
    prelude::*,
    transmute::FromBytes,
    uaccess::{UserPtr, UserSlice},
};

use super::{
    area::AreaVec,
    error::{AttachError, Refusal},
    ftrace,
    refs::{BtfRef, ModuleRef, Prog, ProgRef},
    table,
};
use crate::{
    abi::AttachRequest,
    multi_rules as rules,
    multi_rules::{ErrorInjection, Reason},
    multi_table, rkf_h,
};

/// One function of a link: 8 bytes, one of every function of every link (its cookie is
/// kept apart, by links that have cookies, or with its counters, by links that count).
///
/// # Invariants
///
/// The ftrace site is `table::text(site_lo)`: x86-64 kernel and module text lie in the
/// top 2 GiB of the address space (`__START_KERNEL_map` to `MODULES_END`, the kernel's
/// code model), whose addresses have their high 32 bits set.
#[derive(Clone, Copy)]
pub(crate) struct Target {
    /// The ftrace site's low 32 bits.
    site_lo: u32,
    /// How far the site is into the function.
    offset: u8,
    /// Its argument count.
    nr_args: u8,
}

const _: () = assert!(size_of::<Target>() == 8);

impl Target {
    /// The function whose ftrace site is `site`, `offset` bytes into it, of `nr_args`
    /// arguments; `None` for a site outside the top 2 GiB, which no text has.
    fn new(site: u64, offset: u8, nr_args: u8) -> Option<Self> {
        // INVARIANT: `text_lo_of()` gives the low bits of an address of the top 2 GiB.
        table::text_lo_of(site).map(|site_lo| Self {
            site_lo,
            offset,
            nr_args,
        })
    }

    /// The ftrace site.
    pub(crate) fn site(&self) -> u64 {
        table::text(self.site_lo)
    }

    /// How far the site is into the function.
    pub(crate) fn offset(&self) -> u8 {
        self.offset
    }

    /// Its argument count.
    pub(crate) fn nr_args(&self) -> u32 {
        self.nr_args.into()
    }

    /// The function's address.
    pub(crate) fn addr(&self) -> u64 {
        self.site() - u64::from(self.offset)
    }
}

/// A request that passed every check of its own.
pub(crate) struct Checked {
    /// The program.
    pub(crate) prog: Prog,
    /// The functions, sorted by site, each with its index in the request.
    pub(crate) targets: AreaVec<(Target, u32)>,
    /// Their cookies, in the same order, or none where every cookie is 0.
    pub(crate) cookies: AreaVec<u64>,
    /// The modules whose functions it names (other than rkf_multi).
    pub(crate) modules: AreaVec<ModuleRef>,
    /// Whether the link counts its program's runs on each function (`RKF_MULTI_F_COUNT`).
    pub(crate) counted: bool,
}

/// Reads and checks `req` on its own: its fields, the program, the module BTF objects and
/// every function, in request order, so that the first bad one is named.
pub(crate) fn check(req: &AttachRequest) -> Result<Checked, AttachError> {
    if req.flags & !rkf_h::RKF_MULTI_F_COUNT != 0 || req.pad != 0 {
        return Err(EINVAL.into());
    }
    rules::check_count(req.cnt).map_err(|e| Error::from_errno(-e))?;
    let n = req.cnt as usize;
    let ids: AreaVec<u32> = read_array(req.btf_ids, n)?;
    let addrs: AreaVec<u64> = read_array(req.addrs, n)?;
    let cookies: Option<AreaVec<u64>> = match req.cookies {
        0 => None,
        a => Some(read_array(a, n)?),
    };
    let fds: Option<AreaVec<i32>> = match req.btf_fds {
        0 => None,
        a => Some(read_array(a, n)?),
    };
    let prog = ProgRef::get(req.prog_fd)?;
    let modules = ModuleBtfs::get(fds.as_deref().unwrap_or(&[]))?;
    let prog_btf = prog.prog.btf();

    let mut targets = AreaVec::<(Target, u32)>::with_capacity(n, GFP_KERNEL)?;
    for i in 0..n {
        let fd = fds.as_ref().map_or(0, |f| f[i]);
        let target = modules.target_btf(fd, prog_btf).ok_or(EINVAL)?;
        // SAFETY: `prog` holds the program's BTF, `modules` every module BTF object and
        // module, for as long as this loop runs.
        let t = unsafe { check_target(target, i, ids[i], addrs[i], &prog) }?;
        targets.push((t, i as u32), GFP_KERNEL)?;
    }
    multi_table::sort_by_key(&mut targets, |(t, i)| (t.site(), *i));
    if let Some(d) = rules::first_duplicate(&targets, |(t, _)| t.site()) {
        return Err(Refusal::new(targets[d].1 as usize, Reason::Duplicate).into());
    }
    // In the targets' order; none where every cookie is 0.
    let cookies = match cookies.filter(|c| c.iter().any(|&k| k != 0)) {
        Some(c) => {
            let mut sorted = AreaVec::with_capacity(n, GFP_KERNEL)?;
            for &(_, i) in targets.iter() {
                sorted.push(c[i as usize], GFP_KERNEL)?;
            }
            sorted
        }
        None => AreaVec::new(),
    };
    Ok(Checked {
        prog,
        targets,
        cookies,
        modules: modules.into_modules()?,
        counted: req.flags & rkf_h::RKF_MULTI_F_COUNT != 0,
    })
}

/// Reads `n` values of `T` (a plain integer) from user address `addr`.  Large requests
/// (up to `MAX_FUNCS` entries) go to vmalloc, so that they never need a high-order page.
fn read_array<T: FromBytes + Copy + Default>(addr: u64, n: usize) -> Result<AreaVec<T>> {
    let bytes = n.checked_mul(size_of::<T>()).ok_or(E2BIG)?;
    let mut raw = AreaVec::<u8>::with_capacity(bytes, GFP_KERNEL)?;
    UserSlice::new(UserPtr::from_addr(addr as usize), bytes).read_all(&mut raw, GFP_KERNEL)?;
    let mut out = AreaVec::with_capacity(n, GFP_KERNEL)?;
    for chunk in raw.chunks_exact(size_of::<T>()) {
        // SAFETY: `chunk` holds `size_of::<T>()` bytes and `T` is valid for any bits.
        let v = unsafe { ptr::read_unaligned(chunk.as_ptr().cast::<T>()) };
        out.push(v, GFP_KERNEL)?;
    }
    Ok(out)
}

/// The module BTF objects of a request: one per distinct fd, sorted by fd.
struct ModuleBtfs {
    /// The fd, its BTF object, and the module.
    by_fd: AreaVec<(i32, BtfRef, ModuleRef)>,
}

/// The BTF object a function's id is in, and its module (NULL: vmlinux or rkf_multi).
#[derive(Clone, Copy)]
struct TargetBtf {
    btf: *const bindings::btf,
    module: *mut bindings::module,
}

impl ModuleBtfs {
    /// Takes the BTF object and module of every distinct non-zero fd of `fds`.  The fds
    /// are checked before the functions: a bad one is refused naming the first function
    /// (in request order) given it; with several bad fds, the one of the earliest function.
    fn get(fds: &[i32]) -> Result<Self, AttachError> {
        let mut sorted = AreaVec::<i32>::with_capacity(fds.len(), GFP_KERNEL)?;
        for &fd in fds.iter().filter(|&&fd| fd != 0) {
            sorted.push(fd, GFP_KERNEL)?;
        }
        multi_table::sort_by_key(&mut sorted, |&fd| fd);
        let mut by_fd = AreaVec::new();
        let mut bad = AreaVec::<(i32, Reason)>::new();
        for (k, &fd) in sorted.iter().enumerate() {
            if k > 0 && sorted[k - 1] == fd {
                continue;
            }
            let reason = match BtfRef::get(fd) {
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
            bad.push((fd, reason), GFP_KERNEL)?;
        }
        if !bad.is_empty() {
            for (i, fd) in fds.iter().enumerate() {
                if let Ok(b) = bad.binary_search_by_key(fd, |&(f, _)| f) {
                    return Err(Refusal::new(i, bad[b].1).into());
                }
            }
        }
        Ok(Self { by_fd })
    }

    /// The BTF object and module of `fd` (0: the program's BTF, `prog_btf`).  Valid while
    /// `self` is.
    fn target_btf(&self, fd: i32, prog_btf: *const bindings::btf) -> Option<TargetBtf> {
        if fd == 0 {
            return Some(TargetBtf {
                btf: prog_btf,
                module: ptr::null_mut(),
            });
        }
        let i = self.by_fd.binary_search_by_key(&fd, |(f, _, _)| *f).ok()?;
        Some(TargetBtf {
            btf: self.by_fd[i].1.as_ptr(),
            module: self.by_fd[i].2.as_ptr(),
        })
    }

    /// The modules, for the link to hold; the BTF objects are dropped.
    fn into_modules(self) -> Result<AreaVec<ModuleRef>> {
        let mut out = AreaVec::with_capacity(self.by_fd.len(), GFP_KERNEL)?;
        for (_, _, m) in self.by_fd {
            out.push(m, GFP_KERNEL)?;
        }
        Ok(out)
    }
}

/// Checks one function for `prog`: its BTF shape (no more arguments than the program's
/// template reads), its address, that ftrace can hook it, and for a sleepable program,
/// that it may sleep.
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
    prog: &Prog,
) -> Result<Target, Refusal> {
    let refuse = |reason| Refusal::new(index, reason);
    let mut shape = rkf_h::rkf_multi_shape {
        name: ptr::null(),
        nr_params: 0,
        varargs: 0,
        kind: [0; rules::SHAPE_SLOTS],
        size: [0; rules::SHAPE_SLOTS],
    };
    // SAFETY: `target.btf` is alive (this function's contract), `shape` is valid for
    // writes.
    if unsafe { rkf_h::rkf_multi_shape(target.btf, btf_id, &mut shape) } != 0
        || shape.name.is_null()
    {
        return Err(refuse(Reason::NotAFunction));
    }
    let nr_args = rules::check_shape(
        prog.max_args,
        shape.nr_params,
        shape.varargs != 0,
        &shape.kind,
        &shape.size,
    )
    .map_err(refuse)?;
    // SAFETY: the name is a NUL-terminated string of `target.btf`, alive for this call.
    let name = unsafe { CStr::from_char_ptr(shape.name) };
    if rules::denied(name.to_bytes()) {
        return Err(refuse(Reason::Denied));
    }
    // SAFETY: `name` is NUL-terminated; any address may be asked about; the module, if
    // any, is alive (this function's contract).
    if !unsafe { rkf_h::rkf_multi_is_symbol(addr as usize, name.as_char_ptr(), target.module) } {
        return Err(refuse(Reason::WrongAddress));
    }
    let site = ftrace::site_of(addr).ok_or_else(|| refuse(Reason::NotTraceable))?;
    // ftrace_location() gives a site inside the function, at or after its address: at
    // it, or past its ENDBR (`struct rkf_multi_func` keeps the distance in a byte).
    let offset = site
        .checked_sub(addr)
        .and_then(|d| u8::try_from(d).ok())
        .ok_or_else(|| refuse(Reason::NotTraceable))?;
    if prog.sleepable {
        // SAFETY: the module, if any, is alive (this function's contract); any address
        // may be asked about.
        let ei = unsafe { rkf_h::rkf_multi_error_injection(addr as usize, target.module) };
        if !rules::may_sleep(name.to_bytes(), ErrorInjection::from_raw(ei)) {
            return Err(refuse(Reason::MayNotSleep));
        }
    }
    // At most `MAX_ARGS`: rules::check_shape().
    Target::new(site, offset, nr_args as u8).ok_or_else(|| refuse(Reason::NotTraceable))
}
