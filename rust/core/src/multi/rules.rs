// SPDX-License-Identifier: GPL-2.0

//! rkf_multi's request rules: limits, refusals and their errnos, the deny list, and the
//! function shapes the trampolines can trace.
//!
//! Built into rkf_multi, which applies them to every request, and into user space, which
//! checks functions before asking.  Nothing here allocates.

/// `EINVAL`.
pub const EINVAL: i32 = 22;
/// `E2BIG`.
pub const E2BIG: i32 = 7;
/// `ENOENT`.
pub const ENOENT: i32 = 2;
/// `EBUSY`.
pub const EBUSY: i32 = 16;
/// `EBADF`.
pub const EBADF: i32 = 9;

/// The most functions one link may attach to.  Bounds every allocation of an attach
/// request before it is made (16 bytes of input and about 64 bytes of state a function).
pub const MAX_FUNCS: u32 = 1 << 16;

/// The most links on one function, the limit of BPF trampolines (`BPF_MAX_TRAMP_LINKS`).
pub const MAX_LINKS_PER_FUNC: u32 = 38;

/// The most session programs on one function: the cookies of the trampolines' frames
/// (`RKF_MULTI_MAX_SESSIONS`).
pub const MAX_SESSIONS_PER_FUNC: u32 = 8;

/// The most arguments a target may take, as a BPF trampoline's (`MAX_BPF_FUNC_ARGS`): a
/// program loaded against `rkf_multi_tmpl12()` reads twelve.
pub const MAX_ARGS: u32 = 12;

/// The arguments a program loaded against `rkf_multi_tmpl6()` reads: the registers.  Its
/// fexit programs read the return value at `ctx[6]`, which is the seventh argument of a
/// wider function, so it traces functions of at most six.
pub const TMPL6_ARGS: u32 = 6;

/// The kinds and sizes [`check_shape()`] takes: the return type's, then up to
/// [`MAX_ARGS`] parameters'.
pub const SHAPE_SLOTS: usize = 1 + MAX_ARGS as usize;

/// Why a function cannot be attached.  The numbers are the ABI of
/// `struct rkf_multi_attach_request.reason` (c-shim/rkf.h).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u32)]
pub enum Reason {
    /// The BTF id is not a function (`ENOENT`).
    NotAFunction = 1,
    /// The address is not the start of the function the BTF id names (`EINVAL`).
    WrongAddress = 2,
    /// More arguments than the program's template takes: six (`rkf_multi_tmpl6()`) or
    /// twelve (`rkf_multi_tmpl12()`) (`EINVAL`).
    TooManyArgs = 3,
    /// A struct, union or floating-point argument or return value, or variable arguments
    /// (`EINVAL`).
    NotInRegisters = 4,
    /// Not in ftrace's `available_filter_functions`: notrace, inlined, or init text
    /// (`ENOENT`).
    NotTraceable = 5,
    /// Another direct trampoline (for example an in-kernel BPF trampoline) owns the
    /// function (`EBUSY`).
    Busy = 6,
    /// The same function twice in one request (`EINVAL`).
    Duplicate = 7,
    /// Functions the trampoline itself runs, or that never return to an fexit
    /// program, as the verifier's deny lists (`EINVAL`).
    Denied = 8,
    /// Already `MAX_LINKS_PER_FUNC` links on the function (`E2BIG`).
    TooManyLinks = 9,
    /// The program is already attached to the function through another link (`EBUSY`).
    SameProgram = 10,
    /// The fd given for the function's BTF object is not the BTF of a loaded module (it
    /// is vmlinux's, a program's, or not a BTF object), or its module is going away
    /// (`EINVAL`).
    NotModuleBtf = 11,
    /// The fd given for the function's BTF object is not open (`EBADF`).
    BadFd = 12,
    /// The program is sleepable and the function may not sleep ([`may_sleep()`])
    /// (`EINVAL`).
    MayNotSleep = 13,
    /// Already `MAX_SESSIONS_PER_FUNC` session programs on the function: the
    /// trampolines' frames have that many cookies (`E2BIG`).
    TooManySessions = 14,
}

impl Reason {
    /// The errno the request fails with.
    pub fn errno(self) -> i32 {
        match self {
            Self::NotAFunction | Self::NotTraceable => ENOENT,
            Self::Busy | Self::SameProgram => EBUSY,
            Self::TooManyLinks | Self::TooManySessions => E2BIG,
            Self::WrongAddress | Self::TooManyArgs | Self::NotInRegisters | Self::Duplicate => {
                EINVAL
            }
            Self::Denied | Self::NotModuleBtf | Self::MayNotSleep => EINVAL,
            Self::BadFd => EBADF,
        }
    }
}

/// Functions the trampoline's own path calls, which would recurse without bound if traced,
/// and functions that never return, where fexit makes no sense: the verifier's
/// `btf_id_deny` and `noreturn_deny` lists (kernel/bpf/verifier.c), and what the
/// program-run path (c-shim/rkf_multi_run.c) calls out of line on some config (the
/// selftest `multi_run_path_calls_only_denied` asks the function graph tracer).
///
/// `rcu_read_unlock_special()` too: under PREEMPT_RCU the run path's `rcu_read_unlock()`
/// calls it whenever the task has a quiescent state to report (kernel/rcu/tree_plugin.h),
/// and with preemption off it leaves that state pending, so the next unlock calls it
/// again: traced, it recursed through its own trampoline until the stack overflowed (a
/// double fault on the distro kernel, attaching every function).  What it calls there:
/// `rcu_unlock_needs_exp_handling()` every time, denied too for a build that does not
/// inline it; `raise_softirq_irqoff()` and `irq_work_queue_on()` once per pending state
/// (`defer_qs_pending` is set first), so those recurse one level and stop.
///
/// A generated trampoline runs a sleepable program between the kernel's
/// `__bpf_prog_enter_sleepable_recur()` and `__bpf_prog_exit_sleepable_recur()`
/// (kernel/bpf/trampoline.c, notrace), as a BPF trampoline does: what they call out of
/// line is denied too: `__might_fault()` (their `might_fault()` under
/// CONFIG_DEBUG_ATOMIC_SLEEP or CONFIG_PROVE_LOCKING) with the `__might_sleep()` and
/// `__might_resched()` it calls (`bpf_prog_inc_misses_counter()`, on a run the recursion
/// guard skips, is notrace).
///
/// `rkf_multi_anchor()` too: rkf_multi's own site, which keeps its ftrace_ops registered
/// (rust/multi/ftrace.rs) and nothing calls; a glob over rkf_multi's functions leaves it
/// out instead of failing on it as a site another trampoline holds.
pub const DENY: &[&str] = &[
    "rkf_multi_anchor",
    "rcu_read_unlock_special",
    "rcu_unlock_needs_exp_handling",
    "migrate_disable",
    "migrate_enable",
    "___migrate_enable",
    "rcu_read_unlock_strict",
    "preempt_count_add",
    "preempt_count_sub",
    "__rcu_read_lock",
    "__rcu_read_unlock",
    "__bpf_prog_enter_recur",
    "__bpf_prog_exit_recur",
    "__might_fault",
    "__might_sleep",
    "__might_resched",
    "bpf_dispatcher_xdp_func",
    "__kasan_check_read",
    "__kasan_check_write",
    "do_exit",
    "do_group_exit",
    "make_task_dead",
    "__x64_sys_exit",
    "__x64_sys_exit_group",
    "__ia32_sys_exit",
    "__ia32_sys_exit_group",
    "kthread_complete_and_exit",
    "kthread_exit",
    "__module_put_and_kthread_exit",
];

/// Whether `name` is on the deny list.
pub fn denied(name: &[u8]) -> bool {
    DENY.iter().any(|d| d.as_bytes() == name)
}

/// What the kernel's error injection list says of a function (c-shim/rkf.h
/// `RKF_MULTI_EI_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum ErrorInjection {
    /// The kernel has no `CONFIG_FUNCTION_ERROR_INJECTION`.
    Unconfigured = 0,
    /// A module's function on its part of the list.
    Listed = 1,
    /// A module's function not on it.
    NotListed = 2,
    /// A function of vmlinux, whose part of the list has no exported lookup.
    Unknown = 3,
}

impl ErrorInjection {
    /// Decodes `rkf_multi_error_injection()`'s answer; an unknown number is
    /// [`ErrorInjection::NotListed`], which refuses.
    pub fn from_raw(v: u32) -> Self {
        match v {
            0 => Self::Unconfigured,
            1 => Self::Listed,
            3 => Self::Unknown,
            _ => Self::NotListed,
        }
    }
}

/// Whether a sleepable program may trace the function `name`: the verifier's rule for a
/// sleepable fentry or fexit program (`check_attach_sleepable()` in
/// kernel/bpf/verifier.c), or a part of it.  Without error injection that is every name
/// with the syscall wrappers' prefix `__x64_`, exactly.  With it, the kernel takes the
/// functions on the error injection list (but a few allocation hooks): a module's are
/// asked of its list, and of vmlinux's, whose list cannot be asked, the syscalls
/// (`__x64_sys_*`), which `SYSCALL_DEFINE` puts on it.
pub fn may_sleep(name: &[u8], ei: ErrorInjection) -> bool {
    match ei {
        ErrorInjection::Unconfigured => name.starts_with(b"__x64_"),
        ErrorInjection::Listed => true,
        ErrorInjection::NotListed => false,
        ErrorInjection::Unknown => name.starts_with(b"__x64_sys_"),
    }
}

/// BTF kinds (include/uapi/linux/btf.h) that [`check_shape()`] tells apart.
pub mod btf_kind {
    /// `BTF_KIND_INT`.
    pub const INT: u32 = 1;
    /// `BTF_KIND_PTR`.
    pub const PTR: u32 = 2;
    /// `BTF_KIND_ENUM`.
    pub const ENUM: u32 = 6;
    /// `BTF_KIND_ENUM64`.
    pub const ENUM64: u32 = 19;
}

/// Whether a value of BTF `kind` and `size` travels in one register.
fn in_register(kind: u32, size: u32) -> bool {
    match kind {
        btf_kind::PTR => true,
        btf_kind::INT | btf_kind::ENUM | btf_kind::ENUM64 => size <= 8,
        _ => false,
    }
}

/// Decides from a function's BTF whether the trampoline can trace it honestly for a
/// program that reads `max_args` arguments (its template's: [`TMPL6_ARGS`] or
/// [`MAX_ARGS`]), and returns its argument count.
///
/// `kind[0]`/`size[0]` describe the return type (kind 0: void), `kind[1..]` the
/// parameters, typedefs and qualifiers skipped (c-shim `rkf_multi_shape()`).  Every
/// argument and the return value must fit one register or stack slot: at most
/// `max_args` integer, enum or pointer arguments, no varargs, no struct, union or
/// floating point.
pub fn check_shape(
    max_args: u32,
    nr_params: u32,
    varargs: bool,
    kind: &[u32; SHAPE_SLOTS],
    size: &[u32; SHAPE_SLOTS],
) -> Result<u32, Reason> {
    if nr_params > max_args.min(MAX_ARGS) {
        return Err(Reason::TooManyArgs);
    }
    if varargs {
        return Err(Reason::NotInRegisters);
    }
    if kind[0] != 0 && !in_register(kind[0], size[0]) {
        return Err(Reason::NotInRegisters);
    }
    for i in 1..=nr_params as usize {
        if !in_register(kind[i], size[i]) {
            return Err(Reason::NotInRegisters);
        }
    }
    Ok(nr_params)
}

/// Checks the size of an attach request.
pub fn check_count(n: u32) -> Result<(), i32> {
    match n {
        0 => Err(EINVAL),
        n if n > MAX_FUNCS => Err(E2BIG),
        _ => Ok(()),
    }
}

/// The index of the first element whose `key` equals its predecessor's in `sorted`
/// (sorted by `key`), if any: the second of a request's duplicate functions.
pub fn first_duplicate<T, K: PartialEq>(sorted: &[T], key: impl Fn(&T) -> K) -> Option<usize> {
    sorted
        .windows(2)
        .position(|w| key(&w[0]) == key(&w[1]))
        .map(|i| i + 1)
}
