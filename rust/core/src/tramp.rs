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
//! push rbp; mov rbp, rsp; sub rsp, 80           the shared trampoline's frame
//! mov [rbp-56+8*i], <arg i>   (i < nr_args)     ctx[i]
//! mov qword [rbp-64], nr_args                   ctx[-1]: bpf_get_func_arg_cnt()
//! movabs rax, addr; mov [rbp-72], rax           ctx[-2]: bpf_get_func_ip()
//! for each program:
//!     movabs rdi, &slot; lea rsi, [rbp-56]; call run    run(slot, ctx)
//! mov <arg i>, [rbp-56+8*i]   (i < nr_args)
//! leave; ret; int3
//! slots: struct rkf_multi_prog { prog, cookie, stats } per program, 8-aligned
//! ```
//!
//! `run` is `rkf_multi_run_fentry()` (c-shim/rkf_multi_shim.c): the recursion guard,
//! run context, program and counters of one program.  Like a BPF trampoline, the code
//! saves and restores the argument registers BTF says the function takes, and programs
//! read `ctx[i]` only for `i < bpf_get_func_arg_cnt()`.  The slots sit in the same
//! read-only image as the code, so code and data live and die together.

/// The frame, as in c-shim/rkf_multi_tramp.S: `ctx[0]` is at `rbp - 56`.
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

/// Bytes of one slot, `struct rkf_multi_prog`.
pub const SLOT: usize = 24;

/// One program of a trampoline: the fields of its `struct rkf_multi_prog` slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Prog {
    /// `struct bpf_prog *`.
    pub prog: u64,
    /// Its cookie on this function.
    pub cookie: u64,
    /// `struct rkf_multi_stats *`.
    pub stats: u64,
}

/// Why a trampoline cannot be generated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EmitError {
    /// More than six arguments, or no program.
    BadShape,
    /// The buffer is not `len()` bytes.
    BadBuffer,
    /// `run` is out of reach of a rel32 call from the code.
    TooFar,
}

fn code_len(nr_args: usize, nr_progs: usize) -> usize {
    // prologue 1+3+4, stores 4 each, count 8, address 10+4, per program 10+4+5,
    // loads 4 each, leave, ret, int3.
    8 + 4 * nr_args + 8 + 14 + 19 * nr_progs + 4 * nr_args + 3
}

fn align8(n: usize) -> usize {
    (n + 7) & !7
}

/// Bytes of the trampoline of a function with `nr_args` arguments and `nr_progs`
/// programs: code, padded to 8, then the slots.
pub fn len(nr_args: u32, nr_progs: u32) -> usize {
    align8(code_len(nr_args as usize, nr_progs as usize)) + SLOT * nr_progs as usize
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

/// Writes the trampoline of a function into `buf`, which will be executed at address
/// `at` (`buf` is `len(nr_args, progs.len())` bytes).  `addr` is the function's address,
/// `run` that of `rkf_multi_run_fentry()`.
pub fn emit(
    buf: &mut [u8],
    at: u64,
    nr_args: u32,
    addr: u64,
    progs: &[Prog],
    run: u64,
) -> Result<(), EmitError> {
    let n = nr_args as usize;
    if n > ARG_REGS.len() || progs.is_empty() {
        return Err(EmitError::BadShape);
    }
    if buf.len() != len(nr_args, progs.len() as u32) {
        return Err(EmitError::BadBuffer);
    }
    let slots = at + align8(code_len(n, progs.len())) as u64;
    let mut o = Out { buf, pos: 0 };
    // push rbp; mov rbp, rsp; sub rsp, FRAME
    o.bytes(&[0x55, 0x48, 0x89, 0xe5, 0x48, 0x83, 0xec, FRAME]);
    for (i, &reg) in ARG_REGS.iter().take(n).enumerate() {
        o.rbp_mov(reg, CTX + 8 * i as i8, true);
    }
    // mov qword [rbp+NR_ARGS], imm32
    o.bytes(&[0x48, 0xc7, 0x45, NR_ARGS as u8]);
    o.u32(nr_args);
    // movabs rax, addr; mov [rbp+FUNC_IP], rax
    o.bytes(&[0x48, 0xb8]);
    o.u64(addr);
    o.rbp_mov((0, false), FUNC_IP, true);
    for k in 0..progs.len() {
        // movabs rdi, slot; lea rsi, [rbp+CTX]; call run
        o.bytes(&[0x48, 0xbf]);
        o.u64(slots + (SLOT * k) as u64);
        o.bytes(&[0x48, 0x8d, 0x75, CTX as u8, 0xe8]);
        let next = at.wrapping_add(o.pos as u64 + 4);
        let rel = run.wrapping_sub(next) as i64;
        let rel = i32::try_from(rel).map_err(|_| EmitError::TooFar)?;
        o.u32(rel as u32);
    }
    for (i, &reg) in ARG_REGS.iter().take(n).enumerate() {
        o.rbp_mov(reg, CTX + 8 * i as i8, false);
    }
    // leave; ret; int3
    o.bytes(&[0xc9, 0xc3, 0xcc]);
    // int3 up to the slots.
    while !o.pos.is_multiple_of(8) {
        o.bytes(&[0xcc]);
    }
    for p in progs {
        o.u64(p.prog);
        o.u64(p.cookie);
        o.u64(p.stats);
    }
    debug_assert_eq!(o.pos, o.buf.len());
    Ok(())
}
