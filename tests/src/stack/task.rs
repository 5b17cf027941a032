// SPDX-License-Identifier: GPL-2.0

//! `bpf_rkf_get_task_stack()` against `bpf_get_task_stack()`, on the same task, in the
//! same program: iter/task, tp_btf, fentry and raw_tp programs (task_stack.bpf.c), with
//! the task as a trusted pointer and, from iter/task, as an RCU-protected one.

use std::{mem::MaybeUninit, sync::Arc, time::Duration};

use anyhow::{Context, Result};
use nix::sys::eventfd::EventFd;

use super::{
    compare::{check_same, check_untouched_past, sym},
    samples::words,
    BUF, DEPTH, F_USER_BUILD_ID, F_USER_STACK,
};
use crate::{
    check, check_eq, diag,
    skel::task_stack::{types, TaskStackSkel, TaskStackSkelBuilder},
};
use rkf::{kallsyms::KernelSymbolizer, modules, skeleton};

/// The program kinds of task_stack.bpf.c, in its `enum kind` order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Iter,
    TpBtf,
    Fentry,
    RawTp,
    /// iter/task, on the `real_parent` of the task it is given.
    IterParent,
}

const KINDS: [Kind; 5] = [
    Kind::Iter,
    Kind::TpBtf,
    Kind::Fentry,
    Kind::RawTp,
    Kind::IterParent,
];

impl Kind {
    /// Whether the program runs as the task iterator is read.
    fn iter(self) -> bool {
        matches!(self, Kind::Iter | Kind::IterParent)
    }
}

/// Whose stack: a task asleep in a known kernel path, by its thread id or as the parent
/// of a child of its own (by the child's id), or the current one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Whose {
    Other(u32),
    ParentOf(u32),
    Current,
}

impl Whose {
    /// The programs that can take this task's stack: raw_tp programs have no trusted
    /// task but the current one; an iter/task program runs in the reader, which is no
    /// other task's.
    fn kinds(self) -> &'static [Kind] {
        match self {
            Whose::Other(_) => &[Kind::Iter, Kind::TpBtf, Kind::Fentry],
            Whose::ParentOf(_) => &[Kind::IterParent],
            Whose::Current => &[Kind::TpBtf, Kind::Fentry, Kind::RawTp],
        }
    }
}

/// One program's result.
type Sample = super::samples::Sample<Kind>;

/// Arms the programs that can take `whose`'s stack with `flags` and `size`, triggers
/// them from this thread (1 ms nanosleep()s for fentry and sched_switch, a read of the
/// task iterator), and returns what each saw.
fn run(skel: &mut TaskStackSkel<'_>, whose: Whose, flags: u64, size: u32) -> Result<Vec<Sample>> {
    run_kinds(skel, whose, whose.kinds(), flags, size)
}

/// [`run`] with the programs `kinds` only.
fn run_kinds(
    skel: &mut TaskStackSkel<'_>,
    whose: Whose,
    kinds: &[Kind],
    flags: u64,
    size: u32,
) -> Result<Vec<Sample>> {
    {
        let bss = skel.maps.bss_data.as_deref_mut().context("no .bss")?;
        bss.target_tid = match whose {
            Whose::Other(tid) | Whose::ParentOf(tid) => tid,
            Whose::Current => 0,
        };
        bss.self_tid = nix::unistd::gettid().as_raw() as u32;
        bss.flags = flags;
        bss.size = size;
        for s in bss.samples.iter_mut() {
            // A pattern, so that what is not written, or not zeroed, shows.
            s.kf = [0xaaaa_aaaa_aaaa_aaaa; DEPTH];
            s.h = [0xaaaa_aaaa_aaaa_aaaa; DEPTH];
            s.kf_ret = 0x7777;
            s.h_ret = 0x7777;
        }
        bss.armed = [0; KINDS.len()];
        for &k in kinds {
            bss.armed[k as usize] = 1;
        }
    }
    // Sleep until the fentry and sched_switch programs have run: a sleep whose timer
    // expires before schedule() (a vCPU the host held up) does not switch out.  Each
    // program takes one sample and disarms itself.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        std::thread::sleep(Duration::from_millis(1));
        let bss = skel.maps.bss_data.as_deref().context("no .bss")?;
        if kinds
            .iter()
            .all(|&k| k.iter() || bss.armed[k as usize] == 0)
        {
            break;
        }
        if std::time::Instant::now() > deadline {
            // The check below names the program that did not run.
            break;
        }
    }
    for &kind in kinds.iter().filter(|k| k.iter()) {
        let link = match kind {
            Kind::Iter => skel.links.iter_prog.as_ref(),
            _ => skel.links.iter_parent_prog.as_ref(),
        }
        .with_context(|| format!("{kind:?}: iter/task not attached"))?;
        let mut it = libbpf_rs::Iter::new(link).context("opening the task iterator")?;
        std::io::Read::read_to_end(&mut it, &mut Vec::new())
            .context("reading the task iterator")?;
    }
    let bss = skel.maps.bss_data.as_deref().context("no .bss")?;
    kinds
        .iter()
        .map(|&kind| {
            check_eq!(bss.armed[kind as usize], 0, "the {kind:?} program ran");
            let s: &types::task_sample = &bss.samples[kind as usize];
            Ok(Sample {
                kind,
                kf_ret: s.kf_ret,
                h_ret: s.h_ret,
                kf: super::samples::bytes(&s.kf),
                h: super::samples::bytes(&s.h),
            })
        })
        .collect()
}

/// Fails unless both the kfunc and the helper returned `want`, an error or 0, with the
/// kfunc's `size` bytes zeroed and nothing past them written.
fn check_error(what: &str, s: &Sample, size: u32, want: i64) -> Result<()> {
    check_eq!(s.h_ret, want, "{what}: the helper's return ({:?})", s.kind);
    check_eq!(s.kf_ret, want, "{what}: the kfunc's return ({:?})", s.kind);
    let size = size as usize;
    check_untouched_past(&format!("{what} ({:?})", s.kind), &s.kf, size, size)
}

/// The frames of `ips` as `function+0xoffset`, as /proc/PID/stack prints them.
fn describe(k: &KernelSymbolizer, ips: &[u64]) -> Vec<String> {
    ips.iter().map(|&ip| sym(k, ip)).collect()
}

/// Every kind, another task (thread `tid` of this process, reached as `whose` says): the
/// kfunc's buffer and return value are the helper's, byte for byte, whatever the flags.
fn other_task(
    skel: &mut TaskStackSkel<'_>,
    whose: Whose,
    tid: u32,
    k: &KernelSymbolizer,
) -> Result<()> {
    // The kernel stack at every skip, and truncated.
    for (skip, size) in [(0u64, BUF), (1, BUF), (2, BUF), (5, BUF), (1, 24)] {
        for s in run(skel, whose, skip, size)? {
            let what = format!("{:?}, {whose:?}, skip {skip}, size {size}", s.kind);
            check_eq!(s.kf_ret, s.h_ret, "{what}: return value (kfunc vs helper)");
            check_same(
                &what,
                &s.kf[..size as usize],
                &s.h[..size as usize],
                false,
                k,
            )?;
            check!(s.kf_ret > 0, "{what}: a stack ({} bytes)", s.kf_ret);
            check!(
                s.kf[size as usize..].iter().all(|&b| b == 0xaa),
                "{what}: the kfunc wrote past its {size} bytes"
            );
        }
    }
    // The path it sleeps in, frame for frame as the kernel prints it.
    let s = &run(skel, whose, 0, BUF)?[0];
    let frames = describe(k, &words(&s.kf[..s.kf_ret as usize]));
    diag!("{whose:?}: {}", frames.join(" < "));
    // The kernel's own walk of the same stack (stack_trace_save_tsk(), as both).
    let proc = crate::lifecycle::kernel_stack(tid as i32)?;
    check_eq!(
        frames,
        proc,
        "{whose:?}: the kfunc's stack vs /proc/self/task/{tid}/stack"
    );
    let mut at = 0;
    for want in ["eventfd_read", "vfs_read", "ksys_read", "do_syscall_64"] {
        let pos = frames[at..]
            .iter()
            .position(|f| f.starts_with(&format!("{want}+")))
            .with_context(|| {
                format!("{whose:?}: {want} in the stack, after frame {at}: {frames:?}")
            })?;
        at += pos + 1;
    }
    // Errors, each zeroing the buffer: (what, flags, size, expected return).
    let rows: &[(&str, u64, u32, i64)] = &[
        ("another task's user stack", F_USER_STACK, BUF, -95),
        (
            "another task's user build ids",
            F_USER_STACK | F_USER_BUILD_ID,
            512,
            -95,
        ),
        ("unknown flag bit 12", 1 << 12, BUF, -22),
        ("size not a multiple of 8", 0, 12, -22),
        ("skip beyond the stack", 255, BUF, -14),
        ("zero size", 0, 0, 0),
    ];
    for &(what, flags, size, want) in rows {
        for s in run(skel, whose, flags, size)? {
            check_error(&format!("{whose:?}, {what}"), &s, size, want)?;
        }
    }
    Ok(())
}

/// kthreadd (pid 2), a kernel thread: its user stack is `-EFAULT` from both (no user
/// regs), the buffer zeroed.  (Not its kernel stack: kthreadd runs whenever a kernel
/// thread is made, and could between the two walks.)
fn kernel_thread(skel: &mut TaskStackSkel<'_>) -> Result<()> {
    for s in run(skel, Whose::Other(2), F_USER_STACK, BUF)? {
        check_error("kthreadd's user stack", &s, BUF, -14)?;
    }
    Ok(())
}

/// Every kind, the current task: the user stack is the helper's byte for byte (ips and
/// build ids); the kernel stack starts inside the kfunc and inside the helper, which
/// differ, and is the helper's from the calling program down.
fn current_task(skel: &mut TaskStackSkel<'_>, k: &KernelSymbolizer) -> Result<()> {
    for (flags, size) in [
        (F_USER_STACK, BUF),
        (F_USER_STACK | 1, BUF),
        (F_USER_STACK | F_USER_BUILD_ID, 16 * 32),
    ] {
        for s in run(skel, Whose::Current, flags, size)? {
            let what = format!("{:?}, the current task, flags {flags:#x}", s.kind);
            check_eq!(s.kf_ret, s.h_ret, "{what}: return value (kfunc vs helper)");
            check!(s.kf_ret > 0, "{what}: a stack ({} bytes)", s.kf_ret);
            check_same(
                &what,
                &s.kf[..size as usize],
                &s.h[..size as usize],
                flags & F_USER_BUILD_ID != 0,
                k,
            )?;
        }
    }
    for s in run(skel, Whose::Current, 0, BUF)? {
        let what = format!("{:?}, the current task's kernel stack", s.kind);
        check!(
            s.kf_ret > 0 && s.h_ret > 0,
            "{what}: kfunc {} and helper {} bytes",
            s.kf_ret,
            s.h_ret
        );
        let (kf, h) = (
            words(&s.kf[..s.kf_ret as usize]),
            words(&s.h[..s.h_ret as usize]),
        );
        let prog = |ips: &[u64]| {
            ips.iter()
                .position(|&ip| k.name(ip).is_some_and(|n| n.starts_with("bpf_prog_")))
        };
        let (i, j) = (
            prog(&kf).with_context(|| {
                format!(
                    "{what}: the program in the kfunc's stack {:?}",
                    describe(k, &kf)
                )
            })?,
            prog(&h).with_context(|| {
                format!(
                    "{what}: the program in the helper's stack {:?}",
                    describe(k, &h)
                )
            })?,
        );
        check_eq!(k.name(kf[i]), k.name(h[j]), "{what}: the program");
        check_same(
            &format!("{what}, below the program"),
            &super::samples::bytes(&kf[i + 1..]),
            &super::samples::bytes(&h[j + 1..]),
            false,
            k,
        )?;
    }
    Ok(())
}

/// An exited task whose stack is gone (a zombie child, not reaped), from the task
/// iterator (no other program can acquire an exited task): `-EFAULT` from both, the
/// buffer zeroed.
fn exited_task(skel: &mut TaskStackSkel<'_>) -> Result<()> {
    let mut child = std::process::Command::new("true")
        .spawn()
        .context("starting true(1)")?;
    let pid = child.id();
    // A zombie (state Z) whose stack is gone, which it gives up in its last switch after
    // it became one: /proc/PID/stack is then empty.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
        let zombie = stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z'));
        if zombie && std::fs::read_to_string(format!("/proc/{pid}/stack"))?.is_empty() {
            break;
        }
        check!(
            std::time::Instant::now() < deadline,
            "true(1), pid {pid}, did not exit"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let samples = run_kinds(skel, Whose::Other(pid), &[Kind::Iter], 0, BUF);
    child.wait().context("reaping true(1)")?;
    for s in samples? {
        check_error("an exited task", &s, BUF, -14)?;
    }
    Ok(())
}

/// The test: a thread of this process asleep in eventfd_read() is the other task, reached
/// by its id and as the parent of a child it started (sleep(1), which it kills when it
/// wakes).
pub(super) fn differential() -> Result<()> {
    modules::require("rkf_stack")?;
    let event = Arc::new(EventFd::new().context("eventfd")?);
    /// Releases the sleeper when the test ends, also on failure.
    struct Release(Arc<EventFd>);
    impl Drop for Release {
        fn drop(&mut self) {
            let _ = self.0.write(1);
        }
    }
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    let ev = event.clone();
    let sleeper = std::thread::spawn(move || -> Result<()> {
        // The child's real_parent is the thread that started it, not the thread group's
        // leader (copy_process()).
        let child = std::process::Command::new("sleep")
            .arg("3600")
            .spawn()
            .context("starting sleep(1)");
        let _ = tid_tx.send((
            nix::unistd::gettid().as_raw(),
            child.as_ref().map(|c| c.id()).ok(),
        ));
        let read = ev.read().context("the sleeper's read");
        let mut child = child?;
        child.kill().context("killing sleep(1)")?;
        child.wait().context("reaping sleep(1)")?;
        read.map(drop)
    });
    let release = Release(event.clone());
    let (tid, child) = tid_rx.recv().context("the sleeper's task id")?;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let result = (|| {
        let child = child.context("the sleeper started no child")?;
        while !crate::lifecycle::blocked_in(tid, "eventfd_read")? {
            check!(
                std::time::Instant::now() < deadline,
                "the sleeper never blocked in eventfd_read()"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        let mut obj = MaybeUninit::uninit();
        let mut skel = skeleton::load_and_attach::<TaskStackSkelBuilder>(
            &mut obj,
            "task_stack.bpf.c",
            skeleton::as_built,
        )?;
        let k = KernelSymbolizer::new();
        other_task(&mut skel, Whose::Other(tid as u32), tid as u32, &k)?;
        other_task(&mut skel, Whose::ParentOf(child), tid as u32, &k)?;
        kernel_thread(&mut skel)?;
        current_task(&mut skel, &k)?;
        exited_task(&mut skel)
    })();
    drop(release);
    let joined = sleeper
        .join()
        .map_err(|_| anyhow::anyhow!("the sleeper panicked"))
        .and_then(|r| r);
    result.and(joined)
}

/// An fentry program's task argument, an untrusted pointer, is refused to the kfunc at
/// load (`EINVAL`, "R1 must be a rcu pointer": it is KF_RCU) and taken by the helper
/// (task_stack_fail.bpf.c): README's "acquire it with `bpf_task_from_pid()` first".
pub(super) fn untrusted_refused() -> Result<()> {
    use crate::{
        harness::{load_only, load_refused, verifier_says},
        skel::task_stack_fail::TaskStackFailSkelBuilder,
    };

    modules::require("rkf_stack")?;
    const WHAT: &str = "task_stack_fail.bpf.c";
    const WHY: &str = "R1 must be a rcu pointer";
    let mut obj = MaybeUninit::uninit();
    let log = load_refused::<TaskStackFailSkelBuilder>(
        &mut obj,
        WHAT,
        "kfunc_untrusted_task",
        libc::EINVAL,
    )?;
    verifier_says(&log, WHY, "kfunc_untrusted_task")?;
    let mut obj = MaybeUninit::uninit();
    load_only::<TaskStackFailSkelBuilder>(&mut obj, WHAT, "helper_untrusted_task")
}
