// SPDX-License-Identifier: GPL-2.0

//! perf_event programs: `bpf_rkf_get_stack_pe()` against `bpf_get_stack()` on cpu-clock
//! samples, on precise events, and `bpf_rkf_get_task_stack()` keeping the sample's own
//! callchain.

use std::{
    mem::MaybeUninit,
    os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd},
    sync::atomic::{fence, Ordering},
    time::Duration,
};

use anyhow::{Context, Result};

use super::{
    compare::{compare, Want},
    samples::{bytes, load, Kind, Sample},
    BUF, DEPTH, F_USER_BUILD_ID, F_USER_STACK,
};
use crate::{
    check, check_eq, diag,
    skel::stack::{types, StackSkel},
};
use rkf::perf::{
    self, open_cpu_clock, open_cpu_clock_precise, Exclude, Sampling, Target, PERF_SAMPLE_CALLCHAIN,
};

/// One perf_event sample (cpu-clock on this thread, with or without perf's own callchain)
/// through the kfunc and the helper, with `flags` and `size`.
fn perf_event_sample(
    skel: &mut StackSkel<'_>,
    sample_type: u64,
    flags: u64,
    size: u32,
) -> Result<Sample> {
    let fd = open_cpu_clock(Target::ThisThread, Sampling::Period(100_000), sample_type)?;
    let pe = Kind::PerfEvent as usize;
    {
        let bss = skel.maps.bss_data.as_deref_mut().context("no .bss")?;
        bss.flags = flags;
        bss.size = size;
        let s = &mut bss.samples[pe];
        s.kf = [0xaaaa_aaaa_aaaa_aaaa; DEPTH];
        s.h = [0xaaaa_aaaa_aaaa_aaaa; DEPTH];
        bss.armed[pe] = 1;
    }
    let link = perf::attach(&skel.progs.perf_event_prog, fd)
        .context("attaching the perf_event program")?;
    until_sampled(|| Ok(skel.maps.bss_data.as_deref().context("no .bss")?.armed[pe] != 0))?;
    drop(link);
    let bss = skel.maps.bss_data.as_deref().context("no .bss")?;
    let s = &bss.samples[pe];
    Ok(Sample {
        kind: Kind::PerfEvent,
        kf_ret: s.kf_ret,
        h_ret: s.h_ret,
        kf: bytes(&s.kf),
        h: bytes(&s.h),
    })
}

pub(super) fn perf_event_differential() -> Result<()> {
    let mut obj = MaybeUninit::uninit();
    let (mut skel, k) = load(&mut obj)?;
    for (sample_type, what) in [(0, "regs"), (PERF_SAMPLE_CALLCHAIN, "sampled callchain")] {
        // (flags, size, what the helper returns).  The sample may interrupt this thread
        // in user space, where it has no kernel stack (0 bytes, or -EFAULT past a skip),
        // but always a user one: a kernel row is sampled again until the helper finds
        // kernel frames, each sample compared.
        let einval = Want::Error(-i64::from(libc::EINVAL));
        let efault = -i64::from(libc::EFAULT);
        for (flags, size, want) in [
            (0u64, BUF, Want::Frames),
            (1, BUF, Want::Frames),
            (F_USER_STACK, BUF, Want::Frames),
            (F_USER_STACK | 1, BUF, Want::Skipped),
            (F_USER_STACK | F_USER_BUILD_ID, 8 * 32, Want::Frames),
            (1 << 9, BUF, einval),
            (0, 12, einval),
        ] {
            let (s, user_samples) = kernel_sample(
                &format!("perf_event ({what}), flags {flags:#x}"),
                || perf_event_sample(&mut skel, sample_type, flags, size),
                |s| flags & F_USER_STACK != 0 || (s.h_ret != 0 && s.h_ret != efault),
                |s| {
                    compare(s, flags, size as usize, &k).with_context(|| {
                        format!("perf_event ({what}), flags {flags:#x}, a sample in user space")
                    })
                },
            )?;
            diag!(
                "perf_event ({what}), flags {flags:#x}: kfunc {} helper {} ({user_samples} \
                 samples in user space before)",
                s.kf_ret,
                s.h_ret
            );
            want.check(
                s.h_ret,
                &format!("perf_event ({what}), flags {flags:#x}, size {size}: the helper"),
            )?;
            compare(&s, flags, size as usize, &k)
                .with_context(|| format!("perf_event ({what}), flags {flags:#x}, size {size}"))?;
        }
    }
    Ok(())
}

/// bpf_rkf_get_task_stack() of the current task in a perf_event program on an event that
/// samples callchains (perf_event_task_prog).  A user stack would be walked with
/// get_perf_callchain() into the per-cpu callchain entry of the overflow handler's
/// context, the one that holds the sample's own callchain, which bpf_rkf_get_stack_pe()
/// and the sample's record read after the call: the kfunc refuses it with -EOPNOTSUPP and
/// a zeroed buffer.  A kernel stack is walked with stack_trace_save_tsk(), not into that
/// entry, and is taken.  Either way the sample's kernel callchain reads the same after the
/// call as before it, on a sample taken in the kernel (one with kernel frames: a sample
/// in user space has none, and is taken again).  The control: the helper,
/// bpf_get_task_stack(), takes the user stack there, and the sample's callchain reads
/// differently after it.
pub(super) fn perf_event_task_stack() -> Result<()> {
    let mut obj = MaybeUninit::uninit();
    let (mut skel, _) = load(&mut obj)?;
    let (s, _) = kernel_sample(
        "the control",
        || pe_task_sample(&mut skel, F_USER_STACK, true),
        |s| s.before_ret > 0,
        |_| Ok(()),
    )?;
    diag!(
        "the control, bpf_get_task_stack(current), a user stack: {}; the sample's \
         callchain {} bytes before, {} after",
        s.task_ret,
        s.before_ret,
        s.after_ret
    );
    check!(s.task_ret > 0, "the control: the helper took no user stack");
    check!(
        (s.after_ret, s.after) != (s.before_ret, s.before),
        "the control: the sample's callchain reads the same after the helper's walk"
    );
    let eopnotsupp = Want::Error(-i64::from(libc::EOPNOTSUPP));
    for (flags, want) in [
        (F_USER_STACK, eopnotsupp),
        (F_USER_STACK | F_USER_BUILD_ID, eopnotsupp),
        (0, Want::Frames),
        (1, Want::Frames),
    ] {
        let what = format!("bpf_rkf_get_task_stack(current), flags {flags:#x}");
        let (s, user_samples) = kernel_sample(
            &what,
            || pe_task_sample(&mut skel, flags, false),
            |s| s.before_ret != 0,
            |_| Ok(()),
        )?;
        diag!(
            "{what}: {} ({user_samples} samples in user space before); the sample's \
             callchain {} bytes before, {} after",
            s.task_ret,
            s.before_ret,
            s.after_ret
        );
        want.check(s.task_ret, &what)?;
        let taken = usize::try_from(s.task_ret).unwrap_or(0);
        check!(
            bytes(&s.task)[taken..].iter().all(|&b| b == 0),
            "{what}: the buffer past the {taken} bytes written is not zeroed"
        );
        check!(
            s.before_ret > 0,
            "bpf_rkf_get_stack_pe() before the call: {}",
            s.before_ret
        );
        check_eq!(
            (s.after_ret, s.after),
            (s.before_ret, s.before),
            "{what}: the sample's kernel callchain after the call, against before it"
        );
    }
    Ok(())
}

/// Takes samples with `sample` until `in_kernel` says one was taken in the kernel (a
/// sample that interrupted this thread in user space has no kernel frame), at most 100;
/// each one before it goes to `in_user_space` first.  Returns that sample and how many
/// were taken in user space before it.
fn kernel_sample<S>(
    what: &str,
    mut sample: impl FnMut() -> Result<S>,
    in_kernel: impl Fn(&S) -> bool,
    mut in_user_space: impl FnMut(&S) -> Result<()>,
) -> Result<(S, u32)> {
    let mut user_samples = 0;
    loop {
        let s = sample()?;
        if in_kernel(&s) {
            return Ok((s, user_samples));
        }
        in_user_space(&s)?;
        user_samples += 1;
        check!(
            user_samples < 100,
            "{what}: 100 samples without a kernel frame"
        );
    }
}

/// One sample of perf_event_task_prog (the helper in the kfunc's place if `helper`):
/// cpu-clock on this thread, with perf's callchain.
fn pe_task_sample(
    skel: &mut StackSkel<'_>,
    flags: u64,
    helper: bool,
) -> Result<types::pe_task_sample> {
    let fd = open_cpu_clock(
        Target::ThisThread,
        Sampling::Period(100_000),
        PERF_SAMPLE_CALLCHAIN,
    )?;
    {
        let bss = skel.maps.bss_data.as_deref_mut().context("no .bss")?;
        bss.pe_task_flags = flags;
        bss.pe_task_helper = helper.into();
        let s = &mut bss.pe_task_sample;
        s.task = [0xaaaa_aaaa_aaaa_aaaa; DEPTH];
        s.before = [0xaaaa_aaaa_aaaa_aaaa; DEPTH];
        s.after = [0xaaaa_aaaa_aaaa_aaaa; DEPTH];
        bss.pe_task_done = 0;
        fence(Ordering::SeqCst);
        bss.pe_task_armed = 1;
    }
    let link = perf::attach(&skel.progs.perf_event_task_prog, fd)
        .context("attaching perf_event_task_prog")?;
    until_sampled(|| {
        let bss = skel.maps.bss_data.as_deref().context("no .bss")?;
        // SAFETY: `pe_task_done` is in the mapped .bss, which the program writes.
        Ok(unsafe { std::ptr::read_volatile(&bss.pe_task_done) } == 0)
    })?;
    drop(link);
    // The sample, written before the flag.
    fence(Ordering::Acquire);
    let bss = skel.maps.bss_data.as_deref().context("no .bss")?;
    check_eq!(bss.pe_task_done, 1, "perf_event_task_prog's runs");
    Ok(bss.pe_task_sample)
}

/// Spends time in the kernel (and in user space) while `waiting`: until a perf_event
/// program on this thread's cpu-clock took its sample.
fn until_sampled(waiting: impl Fn() -> Result<bool>) -> Result<()> {
    let start = std::time::Instant::now();
    let mut zero = std::fs::File::open("/dev/zero")?;
    let mut chunk = vec![0u8; 1 << 16];
    while waiting()? {
        check!(
            start.elapsed() < Duration::from_secs(10),
            "no cpu-clock sample in 10 s"
        );
        std::io::Read::read_exact(&mut zero, &mut chunk)?;
    }
    Ok(())
}

/// On a precise event (`precise_ip`) without a full sampled callchain, the kernel refuses
/// to attach a program that calls bpf_get_stack() with EPROTO (perf_event_set_bpf_handler()
/// in kernel/events/core.c: a walk from PEBS regs may upset the unwinder).  It cannot
/// tell a program that calls bpf_rkf_get_stack_pe() alone, which attaches: there the
/// kfunc must give -EPROTO and a zeroed buffer on every event the kernel refuses the
/// helper's program on, and a stack on the one it takes it on (a full callchain).
pub(super) fn perf_event_precise() -> Result<()> {
    let mut obj = MaybeUninit::uninit();
    let (mut skel, _) = load(&mut obj)?;
    for (sample_type, exclude, refused, what) in [
        (0, Exclude::Nothing, true, "no sampled callchain"),
        (
            PERF_SAMPLE_CALLCHAIN,
            Exclude::User,
            true,
            "no user callchain",
        ),
        (
            PERF_SAMPLE_CALLCHAIN,
            Exclude::Kernel,
            true,
            "no kernel callchain",
        ),
        (
            PERF_SAMPLE_CALLCHAIN,
            Exclude::Nothing,
            false,
            "full callchain",
        ),
    ] {
        let open = || {
            open_cpu_clock_precise(
                Target::ThisThread,
                Sampling::Period(100_000),
                sample_type,
                exclude,
            )
        };
        // The kernel's verdict on the helper's program, through BPF_LINK_CREATE.
        let fd = open()?;
        // SAFETY: a program fd and a perf event fd that outlive the call, no options.
        let r = unsafe {
            libbpf_rs::libbpf_sys::bpf_link_create(
                skel.progs.perf_event_prog.as_fd().as_raw_fd(),
                fd.as_raw_fd(),
                libbpf_rs::libbpf_sys::BPF_PERF_EVENT,
                std::ptr::null(),
            )
        };
        if r >= 0 {
            // SAFETY: a new link fd that nothing else owns; closing it detaches.
            drop(unsafe { OwnedFd::from_raw_fd(r) });
        }
        check_eq!(
            r,
            if refused { -libc::EPROTO } else { r.max(0) },
            "{what}: attaching the helper's program"
        );
        drop(fd);
        // The kfunc's.
        let fd = open()?;
        {
            let bss = skel.maps.bss_data.as_deref_mut().context("no .bss")?;
            // The user stack: a sample taken in user mode has no kernel frames, and
            // every sample of this thread has user ones.
            bss.flags = F_USER_STACK;
            bss.size = BUF;
            bss.pe_kfunc_sample.kf = [0xaaaa_aaaa_aaaa_aaaa; DEPTH];
            bss.pe_kfunc_sample.kf_ret = 0;
            bss.pe_kfunc_done = 0;
            bss.pe_kfunc_armed = 1;
        }
        let link = perf::attach(&skel.progs.perf_event_kfunc_prog, fd)
            .with_context(|| format!("{what}: attaching the kfunc's program"))?;
        until_sampled(|| {
            Ok(skel
                .maps
                .bss_data
                .as_deref()
                .context("no .bss")?
                .pe_kfunc_done
                == 0)
        })?;
        drop(link);
        let s = &skel
            .maps
            .bss_data
            .as_deref()
            .context("no .bss")?
            .pe_kfunc_sample;
        diag!("precise event, {what}: kfunc {}", s.kf_ret);
        if refused {
            check_eq!(
                s.kf_ret,
                -i64::from(libc::EPROTO),
                "{what}: the kfunc's result"
            );
            check!(
                s.kf.iter().all(|&w| w == 0),
                "{what}: the buffer is not zeroed: {:x?}",
                s.kf
            );
        } else {
            check!(
                s.kf_ret > 0 && s.kf_ret <= i64::from(BUF) && s.kf_ret % 8 == 0,
                "{what}: the kfunc's result {}",
                s.kf_ret
            );
        }
    }
    Ok(())
}
