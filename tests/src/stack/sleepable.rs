// SPDX-License-Identifier: GPL-2.0

//! Sleepable programs parse build ids where a page fault is allowed, as
//! `bpf_get_stack_sleepable()` does; non-sleepable ones fall back to the ip when the
//! ELF file's build id is not in the page cache (stack_sleepable.bpf.c).

use std::{
    fs::{self, File},
    mem::MaybeUninit,
    os::{
        fd::{AsFd, AsRawFd},
        unix::fs::FileExt,
    },
    path::{Path, PathBuf},
    ptr::NonNull,
};

use anyhow::{Context, Result};
use nix::sys::mman::{mmap, munmap, MapFlags, ProtFlags};
use object::Object;

use super::compare::check_same;
use crate::{
    check, check_eq, diag,
    skel::stack_sleepable::{types, StackSleepableSkelBuilder},
};
use rkf::{kallsyms::KernelSymbolizer, modules, skeleton};

/// `mov $39 (getpid), %eax; syscall; ret`: glibc's getpid(), position independent, so it
/// runs from a copy of libc mapped without relocations.
const GETPID: [u8; 8] = [0xb8, 0x27, 0, 0, 0, 0x0f, 0x05, 0xc3];
/// glibc's syscall(): the arguments moved into place, `syscall`, and on success `ret`
/// (its error path reads errno's TLS offset from the GOT, which the copy lacks).
const SYSCALL: [u8; 25] = [
    0x48, 0x89, 0xf8, 0x48, 0x89, 0xf7, 0x48, 0x89, 0xd6, 0x48, 0x89, 0xca, 0x4d, 0x89, 0xc2, 0x4d,
    0x89, 0xc8, 0x4c, 0x8b, 0x4c, 0x24, 0x08, 0x0f, 0x05,
];
/// The offset in syscall() of the instruction after `syscall`.
const SYSCALL_RET: u64 = 25;
const STATUS_VALID: i32 = 1;
const STATUS_IP: i32 = 2;
const PAGE: usize = 4096;

/// The file that holds `addr` in this process (libc, for a libc function) and `addr`'s
/// offset in it.
fn libc_of(addr: u64) -> Result<(PathBuf, u64)> {
    let maps = fs::read_to_string("/proc/self/maps")?;
    for line in maps.lines() {
        // start-end perms offset dev inode path
        let f: Vec<&str> = line.split_whitespace().collect();
        let [range, _, off, _, _, path] = f[..] else {
            continue;
        };
        let (start, end) = range.split_once('-').context("maps range")?;
        let (start, end) = (
            u64::from_str_radix(start, 16)?,
            u64::from_str_radix(end, 16)?,
        );
        if (start..end).contains(&addr) {
            let off = u64::from_str_radix(off, 16)?;
            return Ok((path.into(), addr - start + off));
        }
    }
    anyhow::bail!("{addr:#x} is in no file mapping")
}

/// Whether the first page of the mapping at `base` is in the page cache.
fn first_page_cached(base: NonNull<libc::c_void>) -> Result<bool> {
    let mut vec = 0u8;
    // SAFETY: `base` is a page-aligned mapping of at least one page, and `vec` has room
    // for the one page asked about.
    let r = unsafe { libc::mincore(base.as_ptr(), PAGE, &mut vec) };
    check_eq!(r, 0, "mincore()");
    Ok(vec & 1 != 0)
}

/// A buffer of `struct bpf_stack_build_id` entries, as bytes.
fn bytes(words: &[u64]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_ne_bytes()).collect()
}

fn status(e: &[u8]) -> i32 {
    i32::from_ne_bytes(e[0..4].try_into().expect("4 bytes"))
}

fn id_or_ip(e: &[u8]) -> u64 {
    u64::from_ne_bytes(e[24..32].try_into().expect("8 bytes"))
}

/// The first entry of a buffer.
fn frame0(b: &[u8]) -> Vec<u8> {
    b[..32].to_vec()
}

/// Evicts the file's pages from the page cache and checks that the first is out:
/// `POSIX_FADV_DONTNEED`, or, on a kernel without it (`CONFIG_ADVISE_SYSCALLS=n`: the test
/// kernel), every clean page through /proc/sys/vm/drop_caches.
fn evict(file: &File, base: NonNull<libc::c_void>, copy: &Path) -> Result<()> {
    file.sync_all()?;
    // SAFETY: advice on an open file; no memory is involved.
    let r = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    let how = match r {
        0 => "fsync and POSIX_FADV_DONTNEED",
        libc::ENOSYS => {
            fs::write("/proc/sys/vm/drop_caches", "1").context("writing vm.drop_caches")?;
            "fsync and vm.drop_caches (no fadvise64() in this kernel)"
        }
        e => anyhow::bail!("posix_fadvise(DONTNEED): error {e}"),
    };
    check!(
        !first_page_cached(base)?,
        "the first page of {} is still in the page cache after {how}: set TMPDIR to a \
         directory on a disk-backed filesystem (not tmpfs)",
        copy.display()
    );
    Ok(())
}

/// A return address in no mapping (below `vm.mmap_min_addr`).
const BOGUS_CALLER: u64 = 0x10;

extern "C" {
    /// tests/helpers/stack_target.c: calls `f` below a frame whose caller is `ret`.
    fn rkf_call_with_bogus_caller(f: extern "C" fn() -> libc::pid_t, ret: u64) -> libc::pid_t;
}

/// The programs of stack_sleepable.bpf.c, in its `enum slot` order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Prog {
    Atomic,
    Rcu,
    Kf,
    KfTask,
    Helpers,
    Syscall,
    Preempt,
    Irq,
}

/// A copy of this process's libc in `$TMPDIR`, its first page out of the page cache, is
/// mapped, and its getpid() is called through the mapping under a uprobe, one program at
/// a time (stack_sleepable.bpf.c), the page evicted again before each sleepable one:
///
/// - non-sleepable: frame 0 is the ip (status IP): the build id cannot be read without a
///   fault; the kfuncs' stacks are the helpers', byte for byte;
/// - sleepable, inside bpf_rcu_read_lock(), bpf_preempt_disable() or
///   bpf_local_irq_save(): the ip too, where sleeping is not allowed (with irqs
///   disabled, the mmap lock is given back from an irq_work, which runs only once they
///   are enabled again: the second kfunc then takes no lock and gives ips only);
/// - sleepable, each kfunc alone (and bpf_rkf_get_stack() alone from a syscall program,
///   run through the copy's syscall()): build id + file offset (status VALID, libc's build
///   id, getpid()'s offset, or syscall()'s past its syscall instruction);
/// - sleepable, the helpers alone (their sleepable forms): the kfuncs' frame 0;
/// - non-sleepable again: the kfuncs' stacks the helpers', frame 0 build id + offset if
///   the helpers' read left the first page in the page cache, the ip if not.
pub(super) fn untouched_elf() -> Result<()> {
    modules::require("rkf_stack")?;
    let (libc_path, getpid_off) = libc_of(libc::getpid as *const () as u64)?;
    let (syscall_libc, syscall_off) = libc_of(libc::syscall as *const () as u64)?;
    check_eq!(
        syscall_libc,
        libc_path,
        "the file of syscall() and of getpid()"
    );
    let want_id = {
        let data = fs::read(&libc_path)?;
        let elf = object::File::parse(&*data)?;
        let id = elf.build_id()?.context("libc has no build id")?;
        let mut padded = [0u8; 20];
        padded[..id.len()].copy_from_slice(id);
        padded
    };
    let copy = std::env::temp_dir().join(format!("rkf-untouched-{}.so", std::process::id()));
    fs::copy(&libc_path, &copy).with_context(|| format!("copying {}", libc_path.display()))?;
    let result = with_copy(&copy, getpid_off, syscall_off, &want_id);
    fs::remove_file(&copy)?;
    result
}

fn with_copy(copy: &Path, getpid_off: u64, syscall_off: u64, want_id: &[u8; 20]) -> Result<()> {
    let file = File::open(copy)?;
    let mut code = [0u8; 8];
    file.read_exact_at(&mut code, getpid_off)?;
    check_eq!(
        code,
        GETPID,
        "the code of getpid() at {getpid_off:#x} of {}",
        copy.display()
    );
    let mut code = [0u8; 25];
    file.read_exact_at(&mut code, syscall_off)?;
    check_eq!(
        code,
        SYSCALL,
        "the code of syscall() at {syscall_off:#x} of {}",
        copy.display()
    );
    let len = usize::try_from(file.metadata()?.len())?;
    // SAFETY: a new private mapping of the file, at an address of the kernel's choosing;
    // nothing else is at it, and it is unmapped below.
    let base = unsafe {
        mmap(
            None,
            len.try_into()?,
            ProtFlags::PROT_READ | ProtFlags::PROT_EXEC,
            MapFlags::MAP_PRIVATE,
            &file,
            0,
        )
    }?;
    let result = with_mapping(&file, copy, base, getpid_off, syscall_off, want_id);
    // SAFETY: the mapping made above, no longer used.
    unsafe { munmap(base, len) }?;
    result
}

fn with_mapping(
    file: &File,
    copy: &Path,
    base: NonNull<libc::c_void>,
    getpid_off: u64,
    syscall_off: u64,
    want_id: &[u8; 20],
) -> Result<()> {
    let at = |off: u64| base.as_ptr() as u64 + off;
    // SAFETY: glibc's getpid() (its bytes checked above) in an executable mapping that
    // lives until this function returns; the code uses no relocation.
    let getpid: extern "C" fn() -> libc::pid_t = unsafe { std::mem::transmute(at(getpid_off)) };
    // SAFETY: as above, glibc's syscall(), whose success path uses no relocation.
    let syscall: extern "C" fn(libc::c_long, libc::c_long, *mut u8, libc::c_long) -> libc::c_long =
        unsafe { std::mem::transmute(at(syscall_off)) };

    let mut obj = MaybeUninit::uninit();
    let mut skel =
        skeleton::load::<StackSleepableSkelBuilder>(&mut obj, "stack_sleepable.bpf.c", |o| {
            o.maps
                .bss_data
                .as_deref_mut()
                .context("no .bss")?
                .target_tid = nix::unistd::gettid().as_raw() as u32;
            Ok(())
        })?;
    let k = KernelSymbolizer::new();
    let pid = std::process::id();
    // Whether getpid() is called below a frame whose caller is in no mapping.
    let bogus_caller = std::cell::Cell::new(false);
    // Runs `prog` once: getpid() through the copy under its uprobe, or the syscall program
    // through the copy's syscall(); returns its take.
    let mut run = |prog: Prog| -> Result<types::take> {
        if prog == Prog::Syscall {
            // union bpf_attr's test: prog_fd first, everything else 0 (no context).
            let mut attr = [0u8; 80];
            let fd = skel.progs.untouched_syscall.as_fd().as_raw_fd();
            attr[..4].copy_from_slice(&fd.to_ne_bytes());
            let r = syscall(
                libc::SYS_bpf,
                libbpf_rs::libbpf_sys::BPF_PROG_TEST_RUN.into(),
                attr.as_mut_ptr(),
                attr.len() as libc::c_long,
            );
            check_eq!(r, 0, "BPF_PROG_TEST_RUN through the copy's syscall()");
        } else {
            let p = match prog {
                Prog::Atomic => &skel.progs.untouched_atomic,
                Prog::Rcu => &skel.progs.untouched_rcu,
                Prog::Preempt => &skel.progs.untouched_preempt,
                Prog::Irq => &skel.progs.untouched_irq,
                Prog::Kf => &skel.progs.untouched_kf,
                Prog::KfTask => &skel.progs.untouched_kf_task,
                _ => &skel.progs.untouched_helpers,
            };
            let link = p
                .attach_uprobe(false, -1, copy, usize::try_from(getpid_off)?)
                .with_context(|| format!("attaching {prog:?}"))?;
            let got = if bogus_caller.get() {
                // SAFETY: `getpid` sets up no frame and reads no argument; the helper
                // saves and restores every register it changes but those of the call.
                unsafe { rkf_call_with_bogus_caller(getpid, BOGUS_CALLER) }
            } else {
                getpid()
            };
            check_eq!(got as u32, pid, "getpid() through the copy");
            drop(link);
        }
        let bss = skel.maps.bss_data.as_deref_mut().context("no .bss")?;
        let t = bss.takes[prog as usize];
        bss.takes[prog as usize].runs = 0;
        check_eq!(t.runs, 1, "runs of {prog:?}");
        Ok(t)
    };
    let show = |what: &str, e: &[u8]| {
        diag!(
            "{what}: frame 0 status {}, {} {:#x}",
            status(e),
            if status(e) == STATUS_VALID {
                "offset"
            } else {
                "ip"
            },
            id_or_ip(e)
        )
    };
    let valid = |what: &str, e: &[u8], off: u64| -> Result<()> {
        show(what, e);
        check_eq!(status(e), STATUS_VALID, "{what}: frame 0 status");
        check_eq!(&e[4..24], &want_id[..], "{what}: frame 0 build id (libc's)");
        check_eq!(id_or_ip(e), off, "{what}: frame 0 file offset");
        Ok(())
    };

    evict(file, base, copy)?;
    let t = run(Prog::Atomic)?;
    let atomic = check_take("non-sleepable", &t, &k)?;
    show("non-sleepable, first page not cached", &atomic);
    check_eq!(
        status(&atomic),
        STATUS_IP,
        "non-sleepable, first page not cached: frame 0 status"
    );
    check_eq!(
        id_or_ip(&atomic),
        at(getpid_off),
        "non-sleepable: frame 0 ip"
    );
    check_eq!(
        &atomic[4..24],
        &[0u8; 20][..],
        "non-sleepable: frame 0 build id (none)"
    );
    check!(
        !first_page_cached(base)?,
        "the non-sleepable program read the first page in"
    );

    // Sleepable programs where they may not sleep: the ip, as in a non-sleepable one.
    for (prog, inside) in [
        (Prog::Rcu, "inside bpf_rcu_read_lock()"),
        (Prog::Preempt, "inside bpf_preempt_disable()"),
        (Prog::Irq, "inside bpf_local_irq_save()"),
    ] {
        let t = run(prog)?;
        check_eq!(t.kf_ret, t.kf_task_ret, "{inside}: both kfuncs' returns");
        check!(t.kf_ret >= 32, "{inside}: no user frame ({})", t.kf_ret);
        let task = bytes(&t.kf_task);
        if prog == Prog::Irq {
            // With irqs disabled, the first kfunc's mmap unlock waits in the cpu's
            // irq_work until they are enabled again; the second finds that slot busy,
            // takes no lock and gives every frame as an ip, as the helper does
            // (bpf_mmap_unlock_guard_get() in kernel/bpf/stackmap.c).
            check!(
                task[..usize::try_from(t.kf_task_ret)?]
                    .chunks(32)
                    .all(|e| status(e) == STATUS_IP),
                "{inside}: the task stack, taken with the unlock's slot busy, has a build id"
            );
            check_eq!(frame0(&task), atomic, "{inside}: the task stack's frame 0");
        } else {
            check_same(
                &format!("{inside}: stack and task stack"),
                &bytes(&t.kf),
                &task,
                true,
                &k,
            )?;
        }
        check_eq!(frame0(&bytes(&t.kf)), atomic, "{inside}: frame 0 (the ip)");
        check!(
            !first_page_cached(base)?,
            "a kfunc {inside} read the first page in"
        );
    }

    let t = run(Prog::Kf)?;
    check!(
        t.kf_ret >= 32,
        "bpf_rkf_get_stack_kprobe(): no user frame ({})",
        t.kf_ret
    );
    let kf = bytes(&t.kf);
    valid(
        "sleepable, bpf_rkf_get_stack_kprobe()",
        &frame0(&kf),
        getpid_off,
    )?;
    // A caller in no mapping: no vma holds it, by the vma's own lock
    // (lock_vma_under_rcu() gives none) or by the mmap lock, and it stays an ip, with no
    // build id; the frames before it keep theirs.
    bogus_caller.set(true);
    let t = run(Prog::Kf)?;
    bogus_caller.set(false);
    let what = format!("sleepable, a caller at {BOGUS_CALLER:#x}");
    let kf_bogus = bytes(&t.kf);
    let entries: Vec<&[u8]> = kf_bogus[..usize::try_from(t.kf_ret.max(0))?]
        .chunks(32)
        .collect();
    for (i, e) in entries.iter().enumerate() {
        diag!("{what}: frame {i} status {}, {:#x}", status(e), id_or_ip(e));
    }
    // getpid() sets up no frame: the walk finds its ip, then the fake frame's caller, and
    // stops at the fake frame's next one, 0.
    check_eq!(t.kf_ret, 64, "{what}: bytes (two frames)");
    valid(&what, &frame0(&kf_bogus), getpid_off)?;
    check_eq!(
        (status(entries[1]), id_or_ip(entries[1]), &entries[1][4..24]),
        (STATUS_IP, BOGUS_CALLER, &[0u8; 20][..]),
        "{what}: frame 1 (status, ip, build id)"
    );
    evict(file, base, copy)?;

    let t = run(Prog::KfTask)?;
    check!(
        t.kf_task_ret >= 32,
        "bpf_rkf_get_task_stack(): no user frame ({})",
        t.kf_task_ret
    );
    valid(
        "sleepable, bpf_rkf_get_task_stack()",
        &frame0(&bytes(&t.kf_task)),
        getpid_off,
    )?;
    evict(file, base, copy)?;

    let t = run(Prog::Syscall)?;
    check!(
        t.kf_ret >= 32,
        "bpf_rkf_get_stack(): no user frame ({})",
        t.kf_ret
    );
    // The user regs' ip is past the syscall instruction.
    valid(
        "sleepable syscall program, bpf_rkf_get_stack()",
        &frame0(&bytes(&t.kf)),
        syscall_off + SYSCALL_RET,
    )?;
    evict(file, base, copy)?;

    let t = run(Prog::Helpers)?;
    check_eq!(t.h_ret, t.h_task_ret, "sleepable helpers' returns");
    check_same(
        "sleepable helpers: stack and task stack",
        &bytes(&t.h),
        &bytes(&t.h_task),
        true,
        &k,
    )?;
    check_eq!(
        frame0(&bytes(&t.h)),
        frame0(&kf),
        "sleepable: the helpers' frame 0 and the kfuncs'"
    );

    // The helpers' read may have left the first page in the page cache (not on a
    // filesystem that caches no reads, as the VM's 9p share); a non-sleepable program's
    // frame 0 follows it.
    let cached = first_page_cached(base)?;
    let t = run(Prog::Atomic)?;
    let what = if cached { "cached" } else { "still not cached" };
    let after = check_take(&format!("non-sleepable, first page {what}"), &t, &k)?;
    let want = if cached { frame0(&kf) } else { atomic };
    check_eq!(after, want, "non-sleepable, first page {what}: frame 0");
    Ok(())
}

/// Checks a take of both kfuncs and both helpers: the kfuncs' stacks are the helpers',
/// byte for byte, and the stack and the task stack are one; returns frame 0.
fn check_take(what: &str, t: &types::take, k: &KernelSymbolizer) -> Result<Vec<u8>> {
    check_eq!(
        t.kf_ret,
        t.h_ret,
        "{what}: bpf_rkf_get_stack_kprobe() return"
    );
    check_eq!(
        t.kf_task_ret,
        t.h_task_ret,
        "{what}: bpf_rkf_get_task_stack() return"
    );
    check_eq!(t.kf_ret, t.kf_task_ret, "{what}: both kfuncs' returns");
    check!(t.kf_ret >= 32, "{what}: no user frame ({})", t.kf_ret);
    let kf = bytes(&t.kf);
    check_same(&format!("{what}: stack"), &kf, &bytes(&t.h), true, k)?;
    check_same(
        &format!("{what}: task stack"),
        &bytes(&t.kf_task),
        &bytes(&t.h_task),
        true,
        k,
    )?;
    check_same(
        &format!("{what}: stack and task stack"),
        &kf,
        &bytes(&t.kf_task),
        true,
        k,
    )?;
    Ok(frame0(&kf))
}
