// SPDX-License-Identifier: GPL-2.0

//! Upstream's get_stack_raw_tp selftest: its programs, test_get_stack_rawtp.c and
//! test_get_stack_rawtp_err.c of tools/testing/selftests/bpf/progs/, with only the
//! helper's name changed to rkf_get_stack(), under the checks of its
//! prog_tests/get_stack_raw_tp.c.

use std::{mem::MaybeUninit, time::Duration};

use anyhow::{Context, Result};

use super::{compare::sym, samples::words};
use crate::{check, diag};
use rkf::{kallsyms::KernelSymbolizer, modules, skeleton};

/// `MAX_STACK_RAWTP` of upstream_get_stack_rawtp.bpf.c.
const MAX_STACK_RAWTP: usize = 100;
/// `sizeof(struct stack_trace_t)` there: four ints, then kernel and user ips and the
/// build-id entries, `MAX_STACK_RAWTP` of each.
const STACK_TRACE_T: usize = 16 + MAX_STACK_RAWTP * (8 + 8 + 32);
/// Where x86-64's kernel half of the address space starts.
const KERNEL_START: u64 = 0xffff_8000_0000_0000;

/// Upstream's tools/testing/selftests/bpf/progs/test_get_stack_rawtp_err.c, with only the
/// helper's name changed to rkf_get_stack(), is refused at load as upstream's
/// prog_tests/get_stack_raw_tp.c expects, for the reason the helper's original is: the
/// verifier cannot prove the return value non-negative, and reaches the endless loop
/// (tests/progs/upstream_get_stack_rawtp_err.bpf.c holds both): `EINVAL`, as
/// is_state_visited() in kernel/bpf/states.c returns for it.
pub(super) fn upstream_get_stack_rawtp_err() -> Result<()> {
    use crate::{
        harness::{load_refused, verifier_says},
        skel::upstream_get_stack_rawtp_err::UpstreamGetStackRawtpErrSkelBuilder,
    };

    modules::require("rkf_stack")?;
    const WHY: &str = "infinite loop detected";
    for prog in ["bpf_prog2", "helper_prog2"] {
        let mut obj = MaybeUninit::uninit();
        let log = load_refused::<UpstreamGetStackRawtpErrSkelBuilder>(
            &mut obj,
            "upstream_get_stack_rawtp_err.bpf.c",
            prog,
            libc::EINVAL,
        )?;
        verifier_says(&log, WHY, prog)?;
    }
    Ok(())
}

/// Upstream's own program, tools/testing/selftests/bpf/progs/test_get_stack_rawtp.c, with
/// only the helper's name changed to rkf.bpf.h's rkf_get_stack()
/// (tests/progs/upstream_get_stack_rawtp.bpf.c): it loads, user and kernel stacks placed
/// one behind the other in one buffer included, and what it sends passes the checks of
/// upstream's prog_tests/get_stack_raw_tp.c for a JIT kernel, made exact: every event
/// that holds a `struct stack_trace_t` has a non-empty kernel stack of kernel text that
/// starts at the program, and user and build-id stacks; every event of both stacks in one
/// buffer is a non-empty user stack followed by a kernel stack of kernel text from the
/// program down.
/// Like upstream, the thread runs on cpu 0, whose perf buffer the program writes, and
/// makes 10 nanosleep() calls.
pub(super) fn upstream_get_stack_rawtp() -> Result<()> {
    modules::require("rkf_stack")?;
    std::thread::scope(|s| {
        s.spawn(upstream_get_stack_rawtp_on_cpu0)
            .join()
            .map_err(|_| anyhow::anyhow!("the test thread panicked"))?
    })
}

fn upstream_get_stack_rawtp_on_cpu0() -> Result<()> {
    use crate::skel::upstream_get_stack_rawtp::UpstreamGetStackRawtpSkelBuilder;
    use std::cell::RefCell;

    /// `MAX_CNT_RAWTP` of prog_tests/get_stack_raw_tp.c.
    const MAX_CNT_RAWTP: usize = 10;

    crate::lifecycle::pin(0, 0)?;
    let mut obj = MaybeUninit::uninit();
    let skel = skeleton::load_and_attach::<UpstreamGetStackRawtpSkelBuilder>(
        &mut obj,
        "upstream_get_stack_rawtp.bpf.c",
        skeleton::as_built,
    )?;
    let events = RefCell::new(Vec::<Vec<u8>>::new());
    let lost = RefCell::new(0u64);
    let pb = libbpf_rs::PerfBufferBuilder::new(&skel.maps.perfmap)
        .pages(8)
        .sample_cb(|_cpu, data: &[u8]| events.borrow_mut().push(data.to_vec()))
        .lost_cb(|_cpu, n| *lost.borrow_mut() += n)
        .build()
        .context("perf buffer on perfmap")?;
    for _ in 0..MAX_CNT_RAWTP {
        std::thread::sleep(Duration::from_nanos(10));
    }
    let start = std::time::Instant::now();
    while events.borrow().len() < MAX_CNT_RAWTP {
        check!(
            start.elapsed() < Duration::from_secs(10),
            "{} events in 10 s, expected at least {MAX_CNT_RAWTP}",
            events.borrow().len()
        );
        pb.poll(Duration::from_millis(100))?;
    }
    drop(pb);
    // The program's symbol leaves kallsyms with the program: read the symbols first.
    let k = KernelSymbolizer::new();
    k.preload()?;
    drop(skel);
    let events = events.into_inner();
    let (mut whole, mut both) = (0, 0);
    for (i, e) in events.iter().enumerate() {
        if e.len() >= STACK_TRACE_T {
            whole += 1;
            let int = |at: usize| i32::from_ne_bytes(e[at..at + 4].try_into().unwrap());
            let (kern, user, build_id) = (int(4), int(8), int(12));
            check!(
                kern > 0 && kern % 8 == 0,
                "event {i}: kern_stack_size {kern}"
            );
            let ips = words(&e[16..16 + kern as usize]);
            check!(
                k.name(ips[0]).is_some_and(|n| n.starts_with("bpf_prog_")),
                "event {i}: kernel frame 0 is the program: {}",
                sym(&k, ips[0])
            );
            for (f, &ip) in ips.iter().enumerate() {
                check!(
                    k.frame(ip).is_some(),
                    "event {i}: kernel frame {f} is kernel text: {ip:#x}"
                );
            }
            check!(
                user > 0 && user % 8 == 0,
                "event {i}: user_stack_size {user}"
            );
            check!(
                build_id > 0 && build_id % 32 == 0,
                "event {i}: user_stack_buildid_size {build_id}"
            );
        } else {
            // Both stacks in one buffer (perf pads the raw sample to 8 bytes less its
            // 4-byte size field): the user stack, whatever a frame-pointer walk through
            // code without frame pointers found, then the kernel stack from the program.
            both += 1;
            let ips = words(e);
            let kernel = ips
                .iter()
                .position(|&ip| k.name(ip).is_some_and(|n| n.starts_with("bpf_prog_")));
            check!(
                kernel.is_some_and(|p| p > 0
                    && ips[p..]
                        .iter()
                        .all(|&ip| ip >= KERNEL_START && k.frame(ip).is_some())),
                "event {i}: a user stack, then a kernel stack of kernel text from the \
                 program: {ips:x?}"
            );
        }
    }
    diag!(
        "{} events: {whole} with a struct stack_trace_t, {both} with both stacks in one \
         buffer, {} lost",
        events.len(),
        lost.into_inner()
    );
    check!(
        whole > 0 && both > 0,
        "both kinds of event arrived ({whole} and {both})"
    );
    Ok(())
}
