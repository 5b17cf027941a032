// SPDX-License-Identifier: GPL-2.0

//! rkf_multi's per-function trampolines: x86-64 code generated for each traced function
//! whose programs are all fentry.
//!
//! The shared trampoline (c-shim/rkf_multi_tramp.S) serves every function: it saves all
//! six argument registers, looks the function up in a hash index and loops over its
//! programs, about twice what a BPF trampoline costs.  A function with fentry programs
//! only gets its own code instead, as a BPF trampoline does (arch/x86/net/bpf_jit_comp.c),
//! with its argument count, its address and its programs built in:
//!
//! ```text
//! [account]                                     call depth tracking: the entry's call
//! push rbp; mov rbp, rsp; sub rsp, 80           the shared trampoline's frame
//! mov [rbp-56+8*i], <arg i>   (i < saved)       ctx[i]
//! mov qword [rbp-64], nr_args                   ctx[-1]: bpf_get_func_arg_cnt()
//! movabs rax, addr; mov [rbp-72], rax           ctx[-2]: bpf_get_func_ip()
//! for each program:
//!     movabs rdi, &slot; lea rsi, [rbp-56]
//!     [account]; call run                       run(slot, ctx)
//! mov <arg i>, [rbp-56+8*i]   (i < nr_args)
//! leave; ret; int3            or  leave; jmp <return thunk>
//! ```
//!
//! It carries what the JIT emits on cpus with mitigations ([`Mitigations`]): call depth
//! accounting (`x86_call_depth_emit_accounting()`) for the call that entered it and
//! before each call it makes, and a `jmp` to the return thunk (`x86_return_thunk`)
//! instead of `ret` where the cpu wants return thunks.  Every branch in it is direct, to
//! a target it names: it is entered by a direct call from the traced function's ftrace
//! site (or by ftrace's `ret` into it), so it needs no ENDBR under IBT, as the JIT's
//! direct-call trampolines have none.
//!
//! `run` is `rkf_multi_run_prog()` (c-shim/rkf_multi_run.c): the recursion guard, run
//! context, program and counters of one program, whose slot (`struct rkf_multi_prog`)
//! lives in kernel data, not in the code.  Like a BPF trampoline, the code restores the
//! argument registers BTF says the function takes.  It saves at least those, and as many
//! more as the programs read through ctx (the verifier's `max_ctx_offset`): programs are
//! verified against six u64, and read the registers as they came, as through the shared
//! trampoline, never stale stack.

/// The frame, as c-shim/rkf.h defines it (`RKF_MULTI_FRAME_*`, asserted by rkf_multi):
/// `ctx[0]` is at `rbp - 56`.
pub const CTX: i8 = -56;
/// `ctx[-1]`, the argument count.
pub const NR_ARGS: i8 = -64;
/// `ctx[-2]`, the function's address.
pub const FUNC_IP: i8 = -72;
/// Bytes below rbp.
pub const FRAME: u8 = 80;

/// The argument registers, in order: rdi, rsi, rdx, rcx, r8, r9 (ModRM reg field, REX.R).
const ARG_REGS: [(u8, bool); 6] = [
    (7, false),
    (6, false),
    (2, false),
    (1, false),
    (0, true),
    (1, true),
];

/// The argument registers a trampoline saves and restores at most.
pub const MAX_ARGS: u32 = ARG_REGS.len() as u32;

/// Call depth accounting, as `x86_call_depth_emit_accounting()` writes it before a call.
#[derive(Clone, Copy, Debug)]
pub struct CallDepth {
    /// Its length, the same at every address.
    pub len: usize,
    /// Writes it into `out` (`len` bytes), for code that will run at `ip`; false if it
    /// could not.
    pub emit: fn(ip: u64, out: &mut [u8]) -> bool,
}

/// What the cpu wants of generated code, as the BPF JIT emits it there.
#[derive(Clone, Copy, Debug, Default)]
pub struct Mitigations {
    /// Call depth tracking is on: account for each call.
    pub call_depth: Option<CallDepth>,
    /// The cpu wants return thunks: return through `jmp` to this one.
    pub return_thunk: Option<u64>,
}

impl Mitigations {
    fn account_len(&self) -> usize {
        self.call_depth.map_or(0, |c| c.len)
    }

    fn return_len(&self) -> usize {
        // jmp rel32, or ret; int3.
        if self.return_thunk.is_some() {
            5
        } else {
            2
        }
    }
}

/// One trampoline to generate.
#[derive(Clone, Copy, Debug)]
pub struct Spec<'a> {
    /// The function's argument count (`bpf_get_func_arg_cnt()`), the registers restored.
    pub nr_args: u32,
    /// The argument registers saved to ctx: at least `nr_args`, at most six.
    pub saved: u32,
    /// The function's address (`bpf_get_func_ip()`).
    pub addr: u64,
    /// The address of each program's slot, in the order they run.
    pub slots: &'a [u64],
    /// The address of `rkf_multi_run_prog()`.
    pub run: u64,
    /// What the cpu wants of the code.
    pub mitigations: Mitigations,
}

/// Why a trampoline cannot be generated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EmitError {
    /// More than six registers, fewer saved than restored, or no program.
    BadShape,
    /// The buffer is not `len()` bytes.
    BadBuffer,
    /// `run` or the return thunk is out of reach of a rel32 branch from the code.
    TooFar,
    /// The call depth accounting could not be written (the buffer then holds part of a
    /// trampoline, to be discarded).
    Accounting,
}

/// Where trampolines start in an image: ftrace takes bit 0 of a direct trampoline's
/// address as "jump, do not call" (`ftrace_is_jmp()`, CONFIG_DYNAMIC_FTRACE_WITH_JMP), and
/// 16 is the kernel's function alignment.
pub const ALIGN: usize = 16;

/// `off`, rounded up to the next trampoline start.
pub fn align(off: usize) -> usize {
    (off + ALIGN - 1) & !(ALIGN - 1)
}

/// Bytes of the code of a trampoline that saves `saved` and restores `nr_args` argument
/// registers and runs `nr_progs` programs, on a cpu that wants `m`.
pub fn len(nr_args: u32, saved: u32, nr_progs: u32, m: &Mitigations) -> usize {
    // accounting, prologue 1+3+4, stores 4 each, count 8, address 10+4, per program
    // 10+4 + accounting + 5, loads 4 each, leave, the return.
    let a = m.account_len();
    a + 8
        + 4 * saved as usize
        + 8
        + 14
        + (19 + a) * nr_progs as usize
        + 4 * nr_args as usize
        + 1
        + m.return_len()
}

/// A cursor over the output.
struct Out<'a> {
    buf: &'a mut [u8],
    pos: usize,
}

impl Out<'_> {
    fn bytes(&mut self, b: &[u8]) {
        self.buf[self.pos..self.pos + b.len()].copy_from_slice(b);
        self.pos += b.len();
    }

    fn u32(&mut self, v: u32) {
        self.bytes(&v.to_le_bytes());
    }

    fn u64(&mut self, v: u64) {
        self.bytes(&v.to_le_bytes());
    }

    /// `mov [rbp+disp], reg` (`store`) or `mov reg, [rbp+disp]`.
    fn rbp_mov(&mut self, reg: (u8, bool), disp: i8, store: bool) {
        let rex = 0x48 | if reg.1 { 0x04 } else { 0 };
        let op = if store { 0x89 } else { 0x8b };
        self.bytes(&[rex, op, 0x45 | (reg.0 << 3), disp as u8]);
    }
}

/// The rel32 of a call ending at `next` to `target`, if it reaches.
fn rel32(next: u64, target: u64) -> Option<u32> {
    i32::try_from(target.wrapping_sub(next) as i64)
        .ok()
        .map(|r| r as u32)
}

/// Writes trampoline `t` into `buf`, which will be executed at address `at` (`buf` is
/// `len(t.nr_args, t.saved, t.slots.len(), &t.mitigations)` bytes).  Nothing is written
/// on error, but for [`EmitError::Accounting`].
pub fn emit(buf: &mut [u8], at: u64, t: &Spec<'_>) -> Result<(), EmitError> {
    let (n, saved, m) = (t.nr_args as usize, t.saved as usize, &t.mitigations);
    if saved > ARG_REGS.len() || n > saved || t.slots.is_empty() {
        return Err(EmitError::BadShape);
    }
    let total = len(t.nr_args, t.saved, t.slots.len() as u32, m);
    if buf.len() != total {
        return Err(EmitError::BadBuffer);
    }
    // The branches end at these offsets: check that the first and the last call, and the
    // return thunk's jump, reach before writing.
    let a = m.account_len();
    let first_call_end = a + 8 + 4 * saved + 8 + 14 + 14 + a + 5;
    let last_call_end = first_call_end + (19 + a) * (t.slots.len() - 1);
    for end in [first_call_end, last_call_end] {
        rel32(at.wrapping_add(end as u64), t.run).ok_or(EmitError::TooFar)?;
    }
    if let Some(thunk) = m.return_thunk {
        rel32(at.wrapping_add(total as u64), thunk).ok_or(EmitError::TooFar)?;
    }
    let mut o = Out { buf, pos: 0 };
    let account = |o: &mut Out<'_>| -> Result<(), EmitError> {
        if let Some(c) = m.call_depth {
            if !(c.emit)(
                at.wrapping_add(o.pos as u64),
                &mut o.buf[o.pos..o.pos + c.len],
            ) {
                return Err(EmitError::Accounting);
            }
            o.pos += c.len;
        }
        Ok(())
    };
    // The call that entered the trampoline: ftrace's site calls it directly.
    account(&mut o)?;
    // push rbp; mov rbp, rsp; sub rsp, FRAME
    o.bytes(&[0x55, 0x48, 0x89, 0xe5, 0x48, 0x83, 0xec, FRAME]);
    for (i, &reg) in ARG_REGS.iter().take(saved).enumerate() {
        o.rbp_mov(reg, CTX + 8 * i as i8, true);
    }
    // mov qword [rbp+NR_ARGS], imm32
    o.bytes(&[0x48, 0xc7, 0x45, NR_ARGS as u8]);
    o.u32(t.nr_args);
    // movabs rax, addr; mov [rbp+FUNC_IP], rax
    o.bytes(&[0x48, 0xb8]);
    o.u64(t.addr);
    o.rbp_mov((0, false), FUNC_IP, true);
    for &slot in t.slots {
        // movabs rdi, slot; lea rsi, [rbp+CTX]; call run
        o.bytes(&[0x48, 0xbf]);
        o.u64(slot);
        o.bytes(&[0x48, 0x8d, 0x75, CTX as u8]);
        account(&mut o)?;
        o.bytes(&[0xe8]);
        let next = at.wrapping_add(o.pos as u64 + 4);
        // Checked above: every call lies between the first and the last.
        o.u32(rel32(next, t.run).ok_or(EmitError::TooFar)?);
    }
    for (i, &reg) in ARG_REGS.iter().take(n).enumerate() {
        o.rbp_mov(reg, CTX + 8 * i as i8, false);
    }
    // leave
    o.bytes(&[0xc9]);
    match m.return_thunk {
        // jmp thunk (checked above)
        Some(thunk) => {
            o.bytes(&[0xe9]);
            let next = at.wrapping_add(o.pos as u64 + 4);
            o.u32(rel32(next, thunk).ok_or(EmitError::TooFar)?);
        }
        // ret; int3
        None => o.bytes(&[0xc3, 0xcc]),
    }
    debug_assert_eq!(o.pos, o.buf.len());
    Ok(())
}
