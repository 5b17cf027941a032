// SPDX-License-Identifier: GPL-2.0

//! Privilege: what a task without CAP_BPF and CAP_PERFMON can do with rkf.
//!
//! Capabilities belong to a thread, so each case runs in a thread of its own that drops
//! them with capset(2) (through the caps crate; unlike setuid(2), glibc does not broadcast
//! it to the other threads); the test process keeps its capabilities.
//!
//! The programs here are raw instructions, loaded with BPF_PROG_LOAD and the modules'
//! BTF fds taken while privileged: libbpf finds module kfuncs by walking the BTF ids,
//! which needs CAP_SYS_ADMIN, and CAP_SYS_ADMIN counts as CAP_PERFMON.  A loader without
//! it would fail in libbpf before the kernel had a say.

use std::{
    io,
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
};

use anyhow::{Context, Result};
use caps::{CapSet, Capability, CapsHashSet};
use libbpf_rs::libbpf_sys as sys;

use crate::{check_eq, diag, harness::Test};
use rkf::{btf, btf::KernelBtf, modules};

pub const TESTS: &[Test] = &[Test {
    name: "kfunc_programs_need_capabilities",
    run: kfunc_programs,
}];

/// One way of holding CAP_BPF and CAP_PERFMON, for the tests of what each allows.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CapCase {
    /// What the case holds, for messages.
    pub name: &'static str,
    /// CAP_BPF.
    pub bpf: bool,
    /// CAP_PERFMON.
    pub perfmon: bool,
}

/// Every case: without either capability, with one of them, with both.
pub(crate) const CAP_CASES: [CapCase; 4] = [
    CapCase {
        name: "no capabilities",
        bpf: false,
        perfmon: false,
    },
    CapCase {
        name: "CAP_BPF only",
        bpf: true,
        perfmon: false,
    },
    CapCase {
        name: "CAP_PERFMON only",
        bpf: false,
        perfmon: true,
    },
    CapCase {
        name: "CAP_BPF and CAP_PERFMON",
        bpf: true,
        perfmon: true,
    },
];

impl CapCase {
    /// Whether the case holds both capabilities.
    pub fn both(&self) -> bool {
        self.bpf && self.perfmon
    }

    /// Runs `f` in a new thread whose effective and permitted capabilities are this
    /// case's only.
    pub fn run<T: Send>(&self, f: impl FnOnce() -> T + Send) -> Result<T> {
        std::thread::scope(|s| {
            s.spawn(|| -> Result<T> {
                self.drop_others()?;
                Ok(f())
            })
            .join()
            .expect("a thread with dropped capabilities panicked")
        })
        .with_context(|| format!("with {}", self.name))
    }

    /// Drops every capability of this thread but the case's.
    fn drop_others(&self) -> Result<()> {
        let keep: CapsHashSet = [
            (self.bpf, Capability::CAP_BPF),
            (self.perfmon, Capability::CAP_PERFMON),
        ]
        .into_iter()
        .filter_map(|(held, cap)| held.then_some(cap))
        .collect();
        caps::clear(None, CapSet::Inheritable).context("capset: clearing the inheritable set")?;
        // Effective first: it must stay a subset of the permitted set.
        for set in [CapSet::Effective, CapSet::Permitted] {
            caps::set(None, set, &keep).with_context(|| format!("capset: {set:?} to {keep:?}"))?;
        }
        Ok(())
    }
}

pub(crate) fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> sys::bpf_insn {
    let mut i = sys::bpf_insn {
        code,
        off,
        imm,
        ..Default::default()
    };
    i.set_dst_reg(dst);
    i.set_src_reg(src);
    i
}

pub(crate) const BPF_PSEUDO_KFUNC_CALL: u8 = 2;

/// r0 = 0; exit
pub(crate) fn ret0() -> [sys::bpf_insn; 2] {
    [insn(0xb7, 0, 0, 0, 0), insn(0x95, 0, 0, 0, 0)]
}

/// Zeroes the `words` u64 of the stack below r10: `*(u64 *)(r10 - 8 * words + 8i) = 0`.
pub(crate) fn zero_stack(words: i16) -> Vec<sys::bpf_insn> {
    (0..words)
        .map(|i| insn(0x7a, 10, 0, -8 * words + 8 * i, 0))
        .collect()
}

/// A call of the stack kfunc with BTF id `id` of module BTF `fd_array[1]`, whose
/// arguments end with `(buf, size, flags)`: register `buf` (1 to 3) points to the 64 bytes
/// below r10 (the program zeroes them first, [`zero_stack`]), the next one is 64, the one
/// after it 0; the registers before `buf` are set by the caller.
pub(crate) fn stack_kfunc_call(buf: u8, id: u32) -> [sys::bpf_insn; 5] {
    [
        insn(0xbf, buf, 10, 0, 0),     // r<buf> = r10
        insn(0x07, buf, 0, 0, -64),    // r<buf> += -64
        insn(0xb7, buf + 1, 0, 0, 64), // r<buf + 1> = 64
        insn(0xb7, buf + 2, 0, 0, 0),  // r<buf + 2> = 0
        insn(0x85, 0, BPF_PSEUDO_KFUNC_CALL, 1, id as i32),
    ]
}

/// The BTF id of function `name` in `btf`.
pub(crate) fn find_func(btf: &KernelBtf, name: &str) -> Result<u32> {
    btf.find_func(name)?
        .with_context(|| format!("no BTF function {name} in {}", btf.object()))
}

/// `bpf_rkf_get_stack(buf, 64, 0)` on a zeroed stack buffer: the kfunc of module BTF
/// `fd_array[1]` with BTF id `id`.
pub(crate) fn get_stack_prog(id: u32) -> Vec<sys::bpf_insn> {
    let mut p = zero_stack(8);
    p.extend(stack_kfunc_call(1, id));
    p.extend(ret0());
    p
}

/// `bpf_rkf_per_cpu_ptr(0, 0)`, the kfunc with BTF id `id` of module BTF `fd_array[1]`.
fn per_cpu_ptr_prog(id: u32) -> Vec<sys::bpf_insn> {
    let mut p = vec![
        insn(0xb7, 1, 0, 0, 0),
        insn(0xb7, 2, 0, 0, 0),
        insn(0x85, 0, BPF_PSEUDO_KFUNC_CALL, 1, id as i32),
    ];
    p.extend(ret0());
    p
}

/// `bpf_rkf_this_cpu_ptr(0)`, the kfunc with BTF id `id` of module BTF `fd_array[1]`.
fn this_cpu_ptr_prog(id: u32) -> Vec<sys::bpf_insn> {
    let mut p = vec![
        insn(0xb7, 1, 0, 0, 0),
        insn(0x85, 0, BPF_PSEUDO_KFUNC_CALL, 1, id as i32),
    ];
    p.extend(ret0());
    p
}

/// `bpf_rkf_get_task_stack(task, buf, 64, 0)` on init's task, taken with
/// `bpf_task_from_pid(1)` and given back with `bpf_task_release()` (vmlinux kfuncs
/// `from_pid` and `release`), into a zeroed stack buffer: `id` is the kfunc of module BTF
/// `fd_array[1]`.
fn get_task_stack_prog(id: u32, from_pid: u32, release: u32) -> Vec<sys::bpf_insn> {
    let mut p = zero_stack(8);
    p.extend([
        insn(0xb7, 1, 0, 0, 1), // r1 = 1
        insn(0x85, 0, BPF_PSEUDO_KFUNC_CALL, 0, from_pid as i32),
        insn(0x15, 0, 0, 9, 0), // if r0 == 0 goto exit
        insn(0xbf, 6, 0, 0, 0), // r6 = r0
        insn(0xbf, 1, 6, 0, 0), // r1 = r6
    ]);
    p.extend(stack_kfunc_call(2, id));
    p.extend([
        insn(0xbf, 1, 6, 0, 0), // r1 = r6
        insn(0x85, 0, BPF_PSEUDO_KFUNC_CALL, 0, release as i32),
    ]);
    p.extend(ret0());
    p
}

/// One program to load.
pub(crate) struct Prog<'a> {
    pub what: &'static str,
    pub prog_type: sys::bpf_prog_type,
    pub attach_type: sys::bpf_attach_type,
    /// The function an fentry program attaches to, and the BTF object it is in (None:
    /// vmlinux).
    pub attach: Option<(u32, Option<&'a OwnedFd>)>,
    /// The module BTF of the kfunc the program calls.
    pub kfunc_btf: Option<&'a OwnedFd>,
    pub insns: Vec<sys::bpf_insn>,
    /// Whether an unprivileged (CAP_BPF-only) load may succeed: a syscall program calling
    /// bpf_rkf_get_stack(), as the kernel lets one call bpf_get_stack() with CAP_BPF
    /// alone (kernel/bpf/syscall.c, syscall_prog_func_proto(), through the raw_tp proto).
    pub cap_bpf_enough: bool,
}

impl Prog<'_> {
    /// Loads the program: 0, or the errno, and the verifier log on failure.
    pub fn load(&self) -> (i32, String) {
        let mut log = vec![0u8; 1 << 16];
        let fd_array = [0, self.kfunc_btf.map_or(-1, |f| f.as_raw_fd())];
        let mut opts = sys::bpf_prog_load_opts {
            sz: std::mem::size_of::<sys::bpf_prog_load_opts>() as _,
            expected_attach_type: self.attach_type,
            ..Default::default()
        };
        if let Some((id, obj)) = self.attach {
            opts.attach_btf_id = id;
            opts.attach_btf_obj_fd = obj.map_or(0, |f| f.as_raw_fd() as u32);
        }
        if self.kfunc_btf.is_some() {
            opts.fd_array = fd_array.as_ptr();
        }
        if self.prog_type == sys::BPF_PROG_TYPE_SYSCALL {
            opts.prog_flags = sys::BPF_F_SLEEPABLE;
        }
        opts.log_buf = log.as_mut_ptr().cast();
        opts.log_size = log.len() as u32;
        opts.log_level = 1;
        // SAFETY: valid instructions, license, log buffer and fd array for the call.
        let fd = unsafe {
            sys::bpf_prog_load(
                self.prog_type,
                std::ptr::null(),
                c"GPL".as_ptr(),
                self.insns.as_ptr(),
                self.insns.len() as _,
                &mut opts,
            )
        };
        if fd >= 0 {
            // SAFETY: a new fd that nothing else owns; closing it unloads the program.
            drop(unsafe { OwnedFd::from_raw_fd(fd) });
            return (0, String::new());
        }
        let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
        (-fd, String::from_utf8_lossy(&log[..end]).into_owned())
    }
}

/// Programs that use the rkf kfuncs, and rkf_multi programs, load only with CAP_BPF and
/// CAP_PERFMON: EPERM without capabilities, EPERM for every tracing, kprobe and rkf_multi
/// program with CAP_BPF alone.  A syscall program needs CAP_BPF only for
/// bpf_rkf_get_stack(), like bpf_get_stack() in it; bpf_rkf_get_task_stack() needs
/// CAP_PERFMON there too, as bpf_get_task_stack() does (kernel/bpf/helpers.c,
/// bpf_base_func_proto()), and so do the per-cpu kfuncs (KF_PERFMON: their result is an
/// address as a scalar, which a program could store anywhere, where the helpers' typed
/// pointer is one the verifier keeps a program without CAP_PERFMON from leaking).  Each
/// program loads with both capabilities, so the refusals are about privilege.
fn kfunc_programs() -> Result<()> {
    for m in ["rkf_stack", "rkf_percpu", "rkf_multi"] {
        modules::require(m)?;
    }
    let vmlinux = KernelBtf::vmlinux()?;
    let stack_btf = KernelBtf::module(&vmlinux, "rkf_stack")?;
    let percpu_btf = KernelBtf::module(&vmlinux, "rkf_percpu")?;
    let multi_btf = KernelBtf::module(&vmlinux, "rkf_multi")?;
    let stack_fd = btf::object_fd("rkf_stack")?;
    let percpu_fd = btf::object_fd("rkf_percpu")?;
    let multi_fd = btf::object_fd("rkf_multi")?;
    let get_stack = find_func(&stack_btf, "bpf_rkf_get_stack")?;
    let get_task_stack = find_func(&stack_btf, "bpf_rkf_get_task_stack")?;
    let per_cpu_ptr = find_func(&percpu_btf, "bpf_rkf_per_cpu_ptr")?;
    let this_cpu_ptr = find_func(&percpu_btf, "bpf_rkf_this_cpu_ptr")?;
    let task_from_pid = find_func(&vmlinux, "bpf_task_from_pid")?;
    let task_release = find_func(&vmlinux, "bpf_task_release")?;
    let fentry_test1 = find_func(&vmlinux, "bpf_fentry_test1")?;
    let tmpl6 = find_func(&multi_btf, "rkf_multi_tmpl6")?;

    let progs = [
        Prog {
            what: "fentry calling bpf_rkf_get_stack()",
            prog_type: sys::BPF_PROG_TYPE_TRACING,
            attach_type: sys::BPF_TRACE_FENTRY,
            attach: Some((fentry_test1, None)),
            kfunc_btf: Some(&stack_fd),
            insns: get_stack_prog(get_stack),
            cap_bpf_enough: false,
        },
        Prog {
            what: "syscall program calling bpf_rkf_get_stack()",
            prog_type: sys::BPF_PROG_TYPE_SYSCALL,
            attach_type: 0,
            attach: None,
            kfunc_btf: Some(&stack_fd),
            insns: get_stack_prog(get_stack),
            cap_bpf_enough: true,
        },
        Prog {
            what: "syscall program calling bpf_rkf_get_task_stack()",
            prog_type: sys::BPF_PROG_TYPE_SYSCALL,
            attach_type: 0,
            attach: None,
            kfunc_btf: Some(&stack_fd),
            insns: get_task_stack_prog(get_task_stack, task_from_pid, task_release),
            cap_bpf_enough: false,
        },
        Prog {
            what: "kprobe calling bpf_rkf_per_cpu_ptr()",
            prog_type: sys::BPF_PROG_TYPE_KPROBE,
            attach_type: 0,
            attach: None,
            kfunc_btf: Some(&percpu_fd),
            insns: per_cpu_ptr_prog(per_cpu_ptr),
            cap_bpf_enough: false,
        },
        Prog {
            what: "fentry calling bpf_rkf_per_cpu_ptr()",
            prog_type: sys::BPF_PROG_TYPE_TRACING,
            attach_type: sys::BPF_TRACE_FENTRY,
            attach: Some((fentry_test1, None)),
            kfunc_btf: Some(&percpu_fd),
            insns: per_cpu_ptr_prog(per_cpu_ptr),
            cap_bpf_enough: false,
        },
        Prog {
            what: "syscall program calling bpf_rkf_per_cpu_ptr()",
            prog_type: sys::BPF_PROG_TYPE_SYSCALL,
            attach_type: 0,
            attach: None,
            kfunc_btf: Some(&percpu_fd),
            insns: per_cpu_ptr_prog(per_cpu_ptr),
            cap_bpf_enough: false,
        },
        Prog {
            what: "syscall program calling bpf_rkf_this_cpu_ptr()",
            prog_type: sys::BPF_PROG_TYPE_SYSCALL,
            attach_type: 0,
            attach: None,
            kfunc_btf: Some(&percpu_fd),
            insns: this_cpu_ptr_prog(this_cpu_ptr),
            cap_bpf_enough: false,
        },
        Prog {
            what: "rkf_multi fexit program (on rkf_multi_tmpl6)",
            prog_type: sys::BPF_PROG_TYPE_TRACING,
            attach_type: sys::BPF_TRACE_FEXIT,
            attach: Some((tmpl6, Some(&multi_fd))),
            kfunc_btf: None,
            insns: ret0().to_vec(),
            cap_bpf_enough: false,
        },
    ];

    for case in CAP_CASES {
        let results = case.run(|| progs.iter().map(Prog::load).collect::<Vec<_>>())?;
        for (p, (errno, log)) in progs.iter().zip(results) {
            let want = if case.both() || (case.bpf && p.cap_bpf_enough) {
                0
            } else {
                libc::EPERM
            };
            if errno != want {
                diag!("verifier log of {}:", p.what);
                for l in log.lines() {
                    diag!("  {l}");
                }
            }
            check_eq!(
                io::Error::from_raw_os_error(errno).to_string(),
                io::Error::from_raw_os_error(want).to_string(),
                "{}, {}",
                p.what,
                case.name
            );
        }
    }
    Ok(())
}
