// SPDX-License-Identifier: GPL-2.0

//! Which program types may call which of rkf_stack's kfuncs, the filter of its kfunc set:
//! `bpf_rkf_get_stack_pe()` in perf_event programs only, `bpf_rkf_get_stack()` outside
//! them.

use anyhow::Result;

use crate::{check_eq, diag};
use rkf::modules;

/// bpf_rkf_get_stack_pe() reads a perf_event program's context, and the kernel gives
/// bpf_get_stack_pe() to perf_event programs only: the other program types of the kfunc
/// hooks rkf_stack registers its set for (tracing, which serves tracepoint, raw_tp and
/// LSM programs too, and syscall) cannot call it (EACCES, the set's filter), with the
/// same instructions that load as a perf_event program, nor with a zeroed `struct
/// bpf_perf_event_data` of their own, which outside a perf_event program the verifier
/// takes as plain memory (a struct of scalars) and the kfunc would read a `struct
/// perf_event` pointer from.  And the reverse: a perf_event program cannot call
/// bpf_rkf_get_stack() (a `void *ctx` program would), whose walk would start in the
/// overflow handler instead of at the sampled registers and would overwrite the
/// sample's own callchain (EACCES, the same filter), while a raw_tp program can.
pub(super) fn pe_only_in_perf_event_programs() -> Result<()> {
    use crate::privilege::{
        find_func, get_stack_prog, insn, ret0, stack_kfunc_call, zero_stack, Prog,
    };
    use libbpf_rs::libbpf_sys as sys;
    use rkf::{btf, btf::KernelBtf};

    modules::require("rkf_stack")?;
    let vmlinux = KernelBtf::vmlinux()?;
    let stack_btf = KernelBtf::module(&vmlinux, "rkf_stack")?;
    let stack_fd = btf::object_fd("rkf_stack")?;
    let pe = find_func(&stack_btf, "bpf_rkf_get_stack_pe")?;
    let plain = find_func(&stack_btf, "bpf_rkf_get_stack")?;
    let fentry_test1 = find_func(&vmlinux, "bpf_fentry_test1")?;
    // bpf_rkf_get_stack_pe(ctx, buf, 64, 0) on a zeroed stack buffer.
    let mut insns = zero_stack(8);
    insns.extend(stack_kfunc_call(2, pe));
    insns.extend(ret0());
    // The same with r1 a zeroed struct bpf_perf_event_data (23 words) on the stack.
    let mut fake = zero_stack(8 + 23);
    fake.extend([
        insn(0xbf, 1, 10, 0, 0),   // r1 = r10
        insn(0x07, 1, 0, 0, -248), // r1 += -248
    ]);
    fake.extend_from_slice(&insns[8..]);
    let prog = |what, prog_type, attach_type, attach, insns: &Vec<_>| Prog {
        what,
        prog_type,
        attach_type,
        attach,
        kfunc_btf: Some(&stack_fd),
        insns: insns.clone(),
        cap_bpf_enough: false,
    };
    let fentry = |what, insns| {
        prog(
            what,
            sys::BPF_PROG_TYPE_TRACING,
            sys::BPF_TRACE_FENTRY,
            Some((fentry_test1, None)),
            insns,
        )
    };
    let plain_insns = get_stack_prog(plain);
    const PE: &str = "bpf_rkf_get_stack_pe";
    const PLAIN: &str = "bpf_rkf_get_stack";
    let rows = [
        (
            prog("perf_event", sys::BPF_PROG_TYPE_PERF_EVENT, 0, None, &insns),
            PE,
            0,
        ),
        (fentry("fentry", &insns), PE, libc::EACCES),
        (fentry("fentry (its own struct)", &fake), PE, libc::EACCES),
        (
            prog("raw_tp", sys::BPF_PROG_TYPE_RAW_TRACEPOINT, 0, None, &insns),
            PE,
            libc::EACCES,
        ),
        (
            prog("tracepoint", sys::BPF_PROG_TYPE_TRACEPOINT, 0, None, &insns),
            PE,
            libc::EACCES,
        ),
        (
            prog("syscall", sys::BPF_PROG_TYPE_SYSCALL, 0, None, &insns),
            PE,
            libc::EACCES,
        ),
        (
            prog(
                "syscall (its own struct)",
                sys::BPF_PROG_TYPE_SYSCALL,
                0,
                None,
                &fake,
            ),
            PE,
            libc::EACCES,
        ),
        (
            prog(
                "perf_event",
                sys::BPF_PROG_TYPE_PERF_EVENT,
                0,
                None,
                &plain_insns,
            ),
            PLAIN,
            libc::EACCES,
        ),
        (
            prog(
                "raw_tp",
                sys::BPF_PROG_TYPE_RAW_TRACEPOINT,
                0,
                None,
                &plain_insns,
            ),
            PLAIN,
            0,
        ),
    ];
    for (p, kfunc, want) in rows {
        let (errno, log) = p.load();
        // The filter's refusal, not one of the argument checks after it, which also give
        // EACCES to some of these programs.
        let refused = format!("calling kernel function {kfunc} is not allowed");
        let filtered = log.contains(&refused);
        if errno != want || filtered != (want != 0) {
            diag!("verifier log of the {} program calling {kfunc}():", p.what);
            for l in log.lines() {
                diag!("  {l}");
            }
        }
        check_eq!(
            std::io::Error::from_raw_os_error(errno).to_string(),
            std::io::Error::from_raw_os_error(want).to_string(),
            "a {} program calling {kfunc}()",
            p.what
        );
        check_eq!(
            filtered,
            want != 0,
            "the {} program's log says \"{refused}\"",
            p.what
        );
    }
    Ok(())
}
