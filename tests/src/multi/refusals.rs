// SPDX-License-Identifier: GPL-2.0

//! Every refusal of an attach: the errno, the function named and why, and nothing left
//! behind (no link, nothing hooked, nothing run); the functions of each kind it takes;
//! rkf_multi's anchor, denied to links; and [`listed()`], whether ftrace hooks a function,
//! which many rooms use.

use std::{collections::HashSet, mem::MaybeUninit, os::fd::AsFd};

use anyhow::{bail, Context, Result};

use super::{
    attach,
    basic::{run_once, setup},
    refusal,
    tramps::{check_tramps, Tramp},
};
use crate::{check, check_eq, diag, skel::multi::MultiSkel};
use rkf::{
    btf::KernelBtf,
    kallsyms::Kallsyms,
    multi::{self, Func, Link},
};
use rkf_core::{
    abi::{self, AttachRequest},
    multi::Reason,
};

/// A function that BTF and kallsyms know, that ftrace cannot hook (notrace).
fn notrace_function(funcs: &[Func]) -> Result<Func> {
    vmlinux_function(funcs, "notrace", |f, traceable| {
        f.nr_params > 0
            && !traceable
            && rkf_core::multi::check_shape(TMPL6, f.nr_params, f.varargs, &f.kind, &f.size).is_ok()
    })
}

/// A traceable vmlinux function of at most six parameters that rkf_multi refuses for its
/// shape alone: an argument or return value that is not passed in a register (a struct or
/// union by value, a float, varargs), and not denied.
fn not_in_registers_function(funcs: &[Func]) -> Result<Func> {
    vmlinux_function(funcs, "argument not in registers", |f, traceable| {
        traceable
            && !rkf_core::multi::denied(f.name.as_bytes())
            && rkf_core::multi::check_shape(TMPL6, f.nr_params, f.varargs, &f.kind, &f.size)
                == Err(Reason::NotInRegisters)
    })
}

/// The template of six arguments.
const TMPL6: u32 = rkf_core::multi::TMPL6_ARGS;

/// The first vmlinux function in BTF order, of at most six parameters, not one of
/// `funcs`, that kallsyms knows by its name alone and that `wanted` takes (given whether
/// ftrace can hook it); `what` names the kind for the error.
fn vmlinux_function(
    funcs: &[Func],
    what: &str,
    wanted: impl Fn(&rkf::btf::FuncShape, bool) -> bool,
) -> Result<Func> {
    let ftrace = multi::ftrace_functions()?;
    let k = Kallsyms::load()?;
    let btf = KernelBtf::vmlinux()?;
    let known: HashSet<&str> = funcs.iter().map(|f| f.name.as_str()).collect();
    for f in btf.funcs()? {
        if f.nr_params > 6
            || known.contains(f.name.as_str())
            || !wanted(&f, ftrace.contains_key(&f.name))
        {
            continue;
        }
        if let Ok(addr) = k.lookup(&f.name, None) {
            return Ok(Func {
                name: f.name,
                module: None,
                btf_id: f.btf_id,
                addr,
                nr_args: f.nr_params,
            });
        }
    }
    bail!("no {what} function found in vmlinux's BTF")
}

/// `rkf_multi_anchor()`, the function nothing calls that keeps rkf_multi's ftrace_ops
/// registered between links, is hooked to the shared trampoline while rkf_multi has had a
/// link, and denied to links: a glob over rkf_multi's functions leaves it out as denied,
/// its exact name is refused by `resolve()`, and by the kernel with `EINVAL` naming it.
pub(super) fn anchor_denied() -> Result<()> {
    const ANCHOR: &str = "rkf_multi_anchor";
    let mut obj = MaybeUninit::uninit();
    let (skel, funcs) = setup(&mut obj)?;
    let _link = attach(&skel.progs.count_fentry0, &funcs[..1], None)?;
    let vmlinux = KernelBtf::vmlinux()?;
    let btf = KernelBtf::module(&vmlinux, "rkf_multi")?;
    let shape = btf
        .funcs()?
        .into_iter()
        .find(|f| f.name == ANCHOR)
        .with_context(|| format!("{ANCHOR} is not in rkf_multi's BTF"))?;
    let anchor = Func {
        addr: Kallsyms::load()?.lookup(ANCHOR, Some("rkf_multi"))?,
        nr_args: shape.nr_params,
        btf_id: shape.btf_id,
        module: Some("rkf_multi".into()),
        name: ANCHOR.into(),
    };
    let qualified = anchor.qualified_name();
    check_tramps(
        std::slice::from_ref(&anchor),
        Tramp::Shared,
        "the anchor with a link attached",
    )?;
    let r = multi::resolve(&["rkf_multi:rkf_multi_*"])?;
    let denied = r
        .skipped
        .get(&multi::Skip::Rule(Reason::Denied))
        .cloned()
        .unwrap_or_default();
    check!(
        denied.contains(&qualified),
        "rkf_multi:rkf_multi_* does not leave out {qualified} as denied: {denied:?}"
    );
    check!(
        r.funcs.iter().all(|f| f.name != ANCHOR),
        "rkf_multi:rkf_multi_* resolved {ANCHOR}"
    );
    let e = multi::resolve(&[&format!("rkf_multi:{ANCHOR}")])
        .err()
        .context("resolve() of the anchor by name")?;
    check!(
        e.to_string().contains(&qualified),
        "resolve() of the anchor: {e}"
    );
    // The kernel's own refusal, for a request that names it anyway.
    refusal(
        &skel.progs.count_fentry1,
        &[anchor],
        None,
        (libc::EINVAL, Some((0, Reason::Denied))),
        "a link on the anchor",
    )?;
    Ok(())
}

/// Every refusal: errno, the function named, and nothing left behind (the good functions
/// then attach and count exactly).
pub(super) fn refusals() -> Result<()> {
    let mut obj = MaybeUninit::uninit();
    let (mut skel, funcs) = setup(&mut obj)?;
    let good = &funcs[..5];
    let with = |i: usize, bad: Func| {
        let mut v = good.to_vec();
        v.insert(i, bad);
        v
    };
    let mut wrong_addr = funcs[1].clone();
    wrong_addr.addr = funcs[2].addr;
    let mut not_func = funcs[0].clone();
    not_func.btf_id = 1; // an INT type in vmlinux BTF
    not_func.name = "btf id 1".into();
    let notrace = notrace_function(&funcs)?;
    diag!("notrace function for the test: {}", notrace.name);
    let unshaped = not_in_registers_function(&funcs)?;
    diag!(
        "function with an argument not in registers: {}",
        unshaped.name
    );
    // (what, the functions, errno, the function refused and why)
    type Case<'a> = (&'a str, Vec<Func>, i32, Option<(usize, Reason)>);
    let cases: Vec<Case<'_>> = vec![
        (
            "duplicate",
            with(5, funcs[2].clone()),
            libc::EINVAL,
            Some((5, Reason::Duplicate)),
        ),
        (
            "address of another function",
            with(2, wrong_addr),
            libc::EINVAL,
            Some((2, Reason::WrongAddress)),
        ),
        (
            "not a function",
            with(0, not_func),
            libc::ENOENT,
            Some((0, Reason::NotAFunction)),
        ),
        (
            "notrace",
            with(3, notrace),
            libc::ENOENT,
            Some((3, Reason::NotTraceable)),
        ),
        (
            "an argument or return value not in registers",
            with(1, unshaped),
            libc::EINVAL,
            Some((1, Reason::NotInRegisters)),
        ),
        ("none", Vec::new(), libc::EINVAL, None),
        (
            "too many",
            vec![funcs[0].clone(); rkf_core::multi::MAX_FUNCS as usize + 1],
            libc::E2BIG,
            None,
        ),
    ];
    for (what, set, errno, refused) in cases {
        refusal(
            &skel.progs.count_fentry0,
            &set,
            None,
            (errno, refused),
            what,
        )?;
        nothing_attached(&mut skel, &funcs, what)?;
    }
    // Raw requests for the good set, each through a file of its own.
    let ids: Vec<u32> = good.iter().map(|f| f.btf_id).collect();
    let addrs: Vec<u64> = good.iter().map(|f| f.addr).collect();
    let request = |prog_fd: u32, cnt: u32| AttachRequest {
        prog_fd,
        cnt,
        btf_ids: ids.as_ptr() as u64,
        addrs: addrs.as_ptr() as u64,
        ..Default::default()
    };
    let device = || {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(multi::DEVICE)
    };
    let errno_of = |file: &std::fs::File, req: &mut AttachRequest| {
        multi::attach_request(file, req).map_or_else(|e| e.raw_os_error().unwrap_or(-1), |()| 0)
    };
    // A program fd that is not open: EBADF, before any function is looked at.
    {
        const CLOSED: i32 = 9999;
        // SAFETY: F_GETFD only asks about the fd.
        let open = unsafe { libc::fcntl(CLOSED, libc::F_GETFD) } >= 0;
        check!(!open, "fd {CLOSED} is open in the runner");
        let mut req = request(CLOSED as u32, good.len() as u32);
        let errno = errno_of(&device()?, &mut req);
        check_eq!(errno, libc::EBADF, "a program fd that is not open");
        check_eq!(
            (req.bad_index, req.reason),
            (u32::MAX, 0),
            "a program fd that is not open: no function refused"
        );
        nothing_attached(&mut skel, &funcs, "a program fd that is not open")?;
    }
    // Upstream's fail case: a count of INT_MAX is E2BIG before anything is read (the
    // arrays hold five entries).
    {
        use std::os::fd::AsRawFd;
        let file = device()?;
        let prog_fd = skel.progs.count_fentry0.as_fd().as_raw_fd() as u32;
        let mut req = request(prog_fd, i32::MAX as u32);
        let errno = errno_of(&file, &mut req);
        check_eq!(errno, libc::E2BIG, "a count of INT_MAX");
        // A good request the kernel cannot write back (bad_index, reason) to: EFAULT, and
        // no link, although every function was fine.
        req.cnt = good.len() as u32;
        let page = ReadOnly::new(&req)?;
        // SAFETY: the request is a whole one, in a page the kernel may read.
        let r = unsafe { libc::ioctl(file.as_raw_fd(), abi::IOC_ATTACH as _, page.ptr()) };
        let errno = if r < 0 {
            std::io::Error::last_os_error().raw_os_error().unwrap_or(-1)
        } else {
            0
        };
        check_eq!(errno, libc::EFAULT, "a good request in read-only memory");
        nothing_attached(&mut skel, &funcs, "a good request in read-only memory")?;
        // A good one: from writable memory, through the same file, it attaches.
        let mut again = req;
        multi::attach_request(&file, &mut again)
            .context("the same request from writable memory")?;
        check_eq!(
            multi::links()?.len(),
            1,
            "links after the same request from writable memory"
        );
        // A second attach through a file that holds a link: EBUSY, and the link stays,
        // alone.
        let errno = errno_of(&file, &mut req);
        check_eq!(errno, libc::EBUSY, "a second attach through one file");
        check_eq!(
            multi::links()?.len(),
            1,
            "links after a second attach through one file"
        );
        good_set_counted(&mut skel, &funcs, "after a second attach through one file")?;
    }
    // Programs that are not rkf_multi programs.
    for (what, fd) in [
        (
            "an ordinary fentry program",
            skel.progs.plain_fentry.as_fd(),
        ),
        ("a map", skel.maps.bss.as_fd()),
    ] {
        let e = Link::attach(&fd, good, None)
            .err()
            .with_context(|| format!("{what}: attached"))?;
        diag!("{what}: {e}");
        check_eq!(e.errno, libc::EINVAL, "{what}: errno");
    }
    // And then the good set works, exactly, and ftrace lists it hooked (the check every
    // "nothing attached" above relies on).
    let _l = attach(&skel.progs.count_fentry0, good, None)?;
    let enabled = multi::enabled_functions()?;
    for f in good {
        check!(
            listed(&enabled, f),
            "{} is not in enabled_functions while attached",
            f.name
        );
    }
    good_set_counted(&mut skel, &funcs, "after the refusals")
}

/// Checks that one run counts count_fentry0 once on each of the refusal test's good set
/// (`funcs[..5]`) and on nothing else.
fn good_set_counted(skel: &mut MultiSkel<'_>, funcs: &[Func], what: &str) -> Result<()> {
    let bss = run_once(skel)?;
    for (i, f) in funcs.iter().enumerate() {
        check_eq!(bss.counts[0][i], u64::from(i < 5), "{what}: {}", f.name);
    }
    Ok(())
}

/// Whether ftrace's `enabled_functions` (its text, `enabled`) lists `f`: hooked by
/// anything, direct call or not.
pub(crate) fn listed(enabled: &str, f: &Func) -> bool {
    enabled.lines().any(|l| {
        l.strip_prefix(f.name.as_str())
            .is_some_and(|rest| rest.starts_with([' ', '\t']))
    })
}

/// Checks that a refused attach (`what`) left nothing behind: no link, none of `funcs`
/// hooked (in ftrace's `enabled_functions`, direct call or not), and none runs the
/// program.
fn nothing_attached(skel: &mut MultiSkel<'_>, funcs: &[Func], what: &str) -> Result<()> {
    let links = multi::links()?;
    check!(links.is_empty(), "{what}: links left: {links:?}");
    let enabled = multi::enabled_functions()?;
    for f in funcs {
        check!(!listed(&enabled, f), "{what}: {} is hooked", f.name);
    }
    let bss = run_once(skel)?;
    check!(
        bss.counts[0].iter().all(|&c| c == 0),
        "{what}: a function runs the program after a failed attach"
    );
    Ok(())
}

/// One page holding a copy of a value, mapped read-only.
struct ReadOnly(*mut libc::c_void);

impl ReadOnly {
    fn new<T: Copy>(value: &T) -> Result<Self> {
        let size = std::mem::size_of::<T>();
        anyhow::ensure!(size <= 4096, "larger than a page");
        // SAFETY: a new anonymous mapping; no existing memory is touched.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        anyhow::ensure!(
            p != libc::MAP_FAILED,
            "mmap: {}",
            std::io::Error::last_os_error()
        );
        let page = Self(p);
        // SAFETY: the page is ours, writable, and holds a `T`: 4096 bytes, page-aligned.
        unsafe { p.cast::<T>().write(*value) };
        // SAFETY: the page is ours.
        if unsafe { libc::mprotect(p, 4096, libc::PROT_READ) } != 0 {
            bail!("mprotect: {}", std::io::Error::last_os_error());
        }
        Ok(page)
    }

    fn ptr(&self) -> *mut libc::c_void {
        self.0
    }
}

impl Drop for ReadOnly {
    fn drop(&mut self) {
        // SAFETY: the mapping is ours, and nothing points into it any more.
        unsafe { libc::munmap(self.0, 4096) };
    }
}
