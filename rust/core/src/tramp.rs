// SPDX-License-Identifier: GPL-2.0

//! rkf_multi's per-function trampolines: x86-64 code generated for each traced function,
//! whatever its programs (fentry, fexit, session, sleepable or not).
//!
//! The shared trampoline (c-shim/rkf_multi_tramp.S) can serve every function: it saves all
//! six argument registers, looks the function up in a hash index and loops over its
//! programs, about twice what a BPF trampoline costs.  A function gets its own code
//! instead, as a BPF trampoline does
//! (arch/x86/net/bpf_jit_comp.c), with its argument count, its address and its programs
//! built in:
//!
//! ```text
//! [account]                                     call depth tracking: the entry's call
//! push rbp; mov rbp, rsp; sub rsp, 120+8*ns     the shared trampoline's frame, and a
//!                                               cookie for each of ns sessions (144
//!                                               with a run of its own, see below)
//! mov [rbp-104+8*i], <arg i>  (i < saved, i < 6)          ctx[i]: the registers
//! mov rax, [rbp+24+8*(i-6)]; mov [rbp-104+8*i], rax       ctx[i]: the stack arguments
//!                             (6 <= i < nr_args)
//! mov qword [rbp-104+8*i], 0  (nr_args, 6 <= i < saved)   ctx[i]: no such argument
//! mov qword [rbp-112], nr_args                  ctx[-1]: bpf_get_func_arg_cnt()
//! movabs rax, addr; mov [rbp-120], rax          ctx[-2]: bpf_get_func_ip()
//! [movabs rax, &inflight; inc qword gs:[rax]]   with an exit, or sleepable fentry
//!                                               programs: a call in flight
//! for each fentry program:
//!     movabs rdi, &slot; lea rsi, [rbp-104]
//!     [account]; call run                       run(slot, ctx)
//!     (or, for a sleepable one with no exit, the JIT's run of it: [`Direct`])
//! [movabs rax, &inflight; dec qword gs:[rax]]   sleepable fentry programs, no exit
//! with session programs:
//!     mov qword [rbp-128-8*k], 0  (k < ns)      ctx[-3-k]: session k's cookie
//!     mov qword [rbp-104+8*nr_args], 0; [mov qword [rbp-56], 0]   the return value: 0
//!     for each session program k:
//!         movabs rax, meta(k); mov [rbp-112], rax     ctx[-1]: count, cookie index 3+k
//!         movabs rdi, &slot; lea rsi, [rbp-104]
//!         [account]; call run                   run(slot, ctx)
//! mov <arg i>, [rbp-104+8*i]  (i < nr_args, i < 6)
//! with an exit (session or fexit programs):
//!     push qword [rbp+24+8*(i-6)]  (i = nr_args - 1 down to 6)   the stack arguments
//!     [account]; call <site + 5>                the rest of the function
//!     [add rsp, 8*(nr_args-6)]
//!     mov [rbp-8], rax                          ctx[12]: the return value, kept
//!     [mov [rbp-104+8*nr_args], rax]            nr_args < 12: bpf_get_func_ret()
//!     [mov [rbp-56], rax]                       nr_args < 6: ctx[6], rkf_multi_tmpl6's
//!     movabs rax, &dead; cmp byte [rax], 0; jne out
//!     for each session program k:
//!         movabs rax, meta(k) | is-return; mov [rbp-112], rax
//!         movabs rdi, &slot; lea rsi, [rbp-104]
//!         [account]; call run                   run(slot, ctx)
//!     [mov qword [rbp-112], nr_args]            sessions, then fexit programs
//!     for each fexit program:
//!         movabs rdi, &slot; lea rsi, [rbp-104]
//!         [account]; call run                   run(slot, ctx)
//! out: movabs rax, &inflight; dec qword gs:[rax]; mov rax, [rbp-8]
//!     leave; add rsp, 8                         back to the function's caller
//! else: leave
//! ret; int3                   or  jmp <return thunk>
//! ```
//!
//! It carries what the JIT emits on cpus with mitigations ([`Mitigations`]): call depth
//! accounting (`x86_call_depth_emit_accounting()`) for the call that entered it and
//! before each call it makes, and a `jmp` to the return thunk (`x86_return_thunk`)
//! instead of `ret` where the cpu wants return thunks.  Every branch in it is direct, to
//! a target it names: it is entered by a direct call from the traced function's ftrace
//! site (or by ftrace's `ret` into it), so it needs no ENDBR under IBT, as the JIT's
//! direct-call trampolines have none, and it calls the function's body directly, as the
//! JIT does (the body has no ENDBR, and needs none for a direct call).
//!
//! `run` is `rkf_multi_run_prog()` (c-shim/rkf_multi_run.c): the link check, recursion
//! guard, run context, program and counters of one program, whose slot (`struct
//! rkf_multi_prog`) lives in kernel data, not in the code; it first checks that the
//! slot's link is still attached, as a call may have slept in the function for any time
//! before its exit runs.  The code calls the same `run` on entry and on exit.  A task may
//! sleep inside a sleepable program as inside the function, and RCU tasks takes a
//! sleeping task for one outside the code: a function with a sleepable program counts
//! its calls in flight, from entry to return if it has an exit, and otherwise (sleepable
//! fentry programs, no fexit or session) around its programs only, as the kernel's
//! fentry.s trampoline does not call the function either; its `run` is then
//! `rkf_multi_run_sleepable_slot()`, which checks the link and runs a sleepable program
//! under RCU tasks trace, and such a function's sleepable fentry programs are run by the
//! code itself, as the JIT runs them ([`Direct`]).  Session
//! programs run as the JIT runs fsession programs (`invoke_bpf()`): ctx[-1] carries the
//! argument count, the index of the program's cookie (`bpf_session_cookie()` is
//! `&ctx[-index]`, inlined by the verifier) and on exit the is-return bit
//! (`bpf_session_is_return()`); each cookie is zeroed on entry and lives in the frame
//! until the exit run, which, the code being the function's, is always that of the same
//! program.
//!
//! A function without an exit (fentry programs only) need not have code of its own: the
//! functions of one shape in an image share one copy of it ([`Shared`],
//! [`emit_shared()`]), and each has a 16-byte stub that hands it the function's first
//! slot ([`emit_stub()`]).  The function's address, the one constant such code cannot
//! build in, it takes from the return address into the function: functions whose slots
//! would hold the same programs and cookies, through links that count nothing (a link
//! that counts has counters per function), can share one stub and one copy of their
//! slots too (rust/multi/image.rs does where they are in one image).
//!
//! Like a BPF trampoline, the code restores the argument registers BTF says the function
//! takes, and for a function of more than six arguments copies the ones the caller
//! passed on the stack into ctx, and again onto its own stack to call the body
//! (arch/x86/net/bpf_jit_comp.c, `save_args()` and `arch_prepare_bpf_trampoline()`
//! do the same).  It fills at least the function's arguments, and as many more slots as
//! the programs read through ctx (the verifier's `max_ctx_offset`): programs are verified
//! against six or twelve u64, and read the registers as they came, as through the shared
//! trampoline, and 0 past the function's arguments beyond the registers (on exit, the
//! return value slots), never stale stack.  Unlike the JIT, it does not pad the stack
//! arguments it pushes to a 16-byte boundary: the kernel is built for 8
//! (`-mpreferred-stack-boundary=3`).  The calls in flight are counted per image, as a BPF
//! trampoline counts them on its image's percpu_ref (`__bpf_tramp_enter()`), so that an
//! image is freed only once no call can come back into it: a counter per cpu, which the
//! code adds to and subtracts from through `%gs` as `this_cpu_inc()` and
//! `this_cpu_dec()` do, with no lock and no cache line that cpus share (a call may come
//! back on another cpu: only the sum counts, c-shim/rkf_multi_image.c); a call that comes
//! back after the image was declared dead (rkf_multi unloading meanwhile) goes straight
//! back to the function's caller.

/// The frame, as c-shim/rkf.h defines it (`RKF_MULTI_FRAME_*`, asserted by rkf_multi):
/// `ctx[0]` is at `rbp - 104`.
pub const CTX: i8 = -104;
/// `ctx[-1]`, the argument count.
pub const NR_ARGS: i8 = -112;
/// `ctx[-2]`, the function's address.
pub const FUNC_IP: i8 = -120;
/// `ctx[12]`, where the trampoline keeps the return value (past the twelve u64 of ctx the
/// verifier lets a program read).
pub const RET: i8 = -8;
/// `ctx[6]`, the return value as `rkf_multi_tmpl6()`'s programs read it, for a function
/// of at most six arguments.
pub const RET6: i8 = CTX + 8 * REG_ARGS as i8;
/// Bytes below rbp, for a function without session programs.
pub const FRAME: u8 = 120;
/// Where a trampoline that runs sleepable programs itself ([`Direct`]) keeps what
/// `__bpf_prog_enter_sleepable_recur()` returned (the start time), below [`FRAME`].
pub const START: i8 = -128;
/// Where it keeps the run context (`struct bpf_tramp_run_ctx`: the cookie at
/// [`RUN_CTX_COOKIE`], then the saved run context), below [`START`].
pub const RUN_CTX: i32 = -144;
/// The offset of the cookie in `struct bpf_tramp_run_ctx` (its `struct bpf_run_ctx` is
/// empty), asserted by rkf_multi.
pub const RUN_CTX_COOKIE: i32 = 0;
/// Bytes of `struct bpf_tramp_run_ctx`, asserted by rkf_multi.
pub const RUN_CTX_SIZE: u32 = 16;
/// Bytes below rbp, for a function with [`Direct`] runs.
pub const DIRECT_FRAME: u32 = -RUN_CTX as u32;
/// `ctx[-3 - k]`, session program k's cookie (`RKF_MULTI_FRAME_COOKIES`), below
/// [`FRAME`]: a function with session programs has a frame 8 bytes larger for each.
pub const COOKIES: i32 = CTX as i32 - 24;
/// The most session programs a function has: their cookies' index (3 + k) in ctx[-1] is
/// one byte.
pub const MAX_SESSIONS: u32 = 8;
/// Where ctx[-1] carries a session program's cookie index, and its is-return bit, as the
/// verifier inlines `bpf_session_cookie()` and `bpf_session_is_return()` from it
/// (`BPF_TRAMP_COOKIE_INDEX_SHIFT`, `BPF_TRAMP_IS_RETURN_SHIFT` of include/linux/bpf.h).
pub const COOKIE_INDEX_SHIFT: u32 = 8;
/// See [`COOKIE_INDEX_SHIFT`].
pub const IS_RETURN_SHIFT: u32 = 63;

/// ctx[-1] for session program `k` of a function of `nr_args` arguments, on entry or on
/// `exit`: what the JIT's `invoke_bpf()` writes for an fsession program.
pub fn session_meta(nr_args: u32, k: u32, exit: bool) -> u64 {
    let meta = u64::from(nr_args) | (u64::from(3 + k) << COOKIE_INDEX_SHIFT);
    if exit {
        meta | (1 << IS_RETURN_SHIFT)
    } else {
        meta
    }
}

/// Bytes below rbp for a function with `sessions` session programs.
pub fn frame(sessions: u32) -> u32 {
    u32::from(FRAME) + 8 * sessions
}

/// Bytes below rbp for a trampoline with `sessions` session programs, or with `direct`
/// runs ([`Direct`]; never beside sessions, which a function without an exit has none of).
fn frame_size(sessions: u32, direct: bool) -> u32 {
    if direct {
        DIRECT_FRAME
    } else {
        frame(sessions)
    }
}

/// The ftrace call at a function's site (`MCOUNT_INSN_SIZE`): the return address into a
/// traced function is its site plus this.
pub const MCOUNT_INSN_SIZE: u64 = 5;

/// Where the caller put the seventh argument: past the saved rbp, the return address into
/// the function and the function's own return address.
pub const STACK_ARGS: i8 = 24;

/// The argument registers, in order: rdi, rsi, rdx, rcx, r8, r9 (ModRM reg field, REX.R).
const ARG_REGS: [(u8, bool); 6] = [
    (7, false),
    (6, false),
    (2, false),
    (1, false),
    (0, true),
    (1, true),
];

/// The arguments passed in registers.
pub const REG_ARGS: u32 = ARG_REGS.len() as u32;

/// The most arguments a trampoline takes, as a BPF trampoline (`MAX_BPF_FUNC_ARGS`): the
/// ones past [`REG_ARGS`] on the caller's stack.
pub const MAX_ARGS: u32 = 12;

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

/// What a trampoline does after its fentry programs when the function has session or
/// fexit programs: it runs the sessions' entry runs, calls the rest of the function
/// itself, as a BPF trampoline with `BPF_TRAMP_F_CALL_ORIG` does, then runs the
/// sessions' exit runs and the fexit programs, with the call counted in flight
/// throughout.
#[derive(Clone, Copy, Debug)]
pub struct Exit<'a> {
    /// The address of each session program's slot, in the order they run (at most
    /// [`MAX_SESSIONS`]), on entry and on exit through [`Spec::run`].
    pub sessions: &'a [u64],
    /// The address of each fexit program's slot, in the order they run.
    pub slots: &'a [u64],
    /// Where the function goes on after its ftrace site (the site + 5): called directly.
    pub body: u64,
    /// The image's counters of calls in flight (the per-cpu address of a `long`): this
    /// cpu's incremented on entry, and this cpu's decremented on the way out.
    pub inflight: u64,
    /// The image's dead flag (a byte): once set, a call that comes back from the function
    /// runs no exit run and calls nothing, so the image may outlive rkf_multi.
    pub dead: u64,
}

/// A sleepable fentry program that the trampoline runs itself, as the JIT's
/// `invoke_bpf_prog()` runs one, with everything built in, instead of calling
/// [`Spec::run`] with its slot:
///
/// ```text
/// movabs rax, &detached; cmp byte [rax], 0; jne skip      its link is detached
/// movabs rax, cookie; mov [rbp-144], rax                  the run context's cookie
/// movabs rdi, prog; lea rsi, [rbp-144]
/// [account]; call enter                                   start = enter(prog, &run_ctx)
/// mov [rbp-128], rax; test rax, rax; je miss              the recursion guard skips it
/// lea rdi, [rbp-104]; movabs rsi, insnsi
/// [account]; call func                                    func(ctx, insnsi)
/// movabs rax, stats; lock inc qword [rax]; jmp done       a hit, if the link counts
/// miss: movabs rax, stats; lock inc qword [rax+8]         a miss, likewise
/// done: movabs rdi, prog; mov rsi, [rbp-128]; lea rdx, [rbp-144]
/// [account]; call exit                                    exit(prog, start, &run_ctx)
/// skip:
/// ```
///
/// `enter` and `exit` are the kernel's `__bpf_prog_enter_sleepable_recur()` and
/// `__bpf_prog_exit_sleepable_recur()`: RCU tasks trace, no migration, the run context,
/// the recursion guard and the program's statistics, with `migrate_disable()` and
/// `migrate_enable()` inline, as a BPF trampoline takes them; `func` is the program's
/// `bpf_func`, called directly.  Without counters (a link that does not count), the hit
/// and the miss are left out and the recursion guard's `je` goes to `done`.  Every call
/// is direct, to a target named here.  The link's flag is read first, as the shared
/// trampoline's run reads it: the image keeps the link's state; a link that shared a
/// function with a sleepable program is freed only after an RCU tasks grace period and
/// then an RCU tasks trace one, and a task that saw its flag clear holds back the first
/// until it sleeps, which it does only in the program, inside `enter`'s RCU tasks trace
/// read side, which holds back the second.
#[derive(Clone, Copy, Debug)]
pub struct Direct {
    /// Its link's detached flag (a byte): once set, the program is not run.
    pub detached: u64,
    /// Its cookie on the function (`bpf_get_attach_cookie()`).
    pub cookie: u64,
    /// The program (`struct bpf_prog *`).
    pub prog: u64,
    /// Its instructions (`prog->insnsi`): the second argument of `func`.
    pub insnsi: u64,
    /// Its code (`prog->bpf_func`).
    pub func: u64,
    /// Its counters on the function: the hits, then the misses 8 bytes on; `None` where
    /// its link does not count.
    pub stats: Option<u64>,
    /// `__bpf_prog_enter_sleepable_recur()`.
    pub enter: u64,
    /// `__bpf_prog_exit_sleepable_recur()`.
    pub exit: u64,
}

/// One trampoline to generate.
#[derive(Clone, Copy, Debug)]
pub struct Spec<'a> {
    /// The function's argument count (`bpf_get_func_arg_cnt()`), at most [`MAX_ARGS`].
    pub nr_args: u32,
    /// The slots of ctx filled: at least `nr_args`, at most [`MAX_ARGS`].
    pub saved: u32,
    /// The function's address (`bpf_get_func_ip()`).
    pub addr: u64,
    /// The address of each fentry program's slot, in the order they run.
    pub slots: &'a [u64],
    /// The address of `rkf_multi_run_prog()` (`rkf_multi_run_sleepable_slot()` for a
    /// function with a sleepable program).
    pub run: u64,
    /// For a function with session or fexit programs: calling it and running its exit
    /// runs, the call counted in flight.
    pub exit: Option<Exit<'a>>,
    /// For a function without an exit whose fentry programs may sleep: the image's
    /// counters of calls in flight (as [`Exit::inflight`]), incremented before the
    /// programs and decremented after them, so that the image outlives a task asleep in one.  (With
    /// an exit, [`Exit::inflight`] counts the call from entry to return.)
    pub counted: Option<u64>,
    /// For each fentry program of `slots`, the same program run by the trampoline itself
    /// ([`Direct`]), or `None` to run it through `run`; empty, every one through `run`.
    /// Only for a function without an exit whose programs are `counted`.
    pub direct: &'a [Option<Direct>],
    /// What the cpu wants of the code.
    pub mitigations: Mitigations,
}

/// Why a trampoline cannot be generated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EmitError {
    /// More than [`MAX_ARGS`] slots, fewer filled than arguments, more than
    /// [`MAX_SESSIONS`] sessions, no program, an exit without exit runs, or a count
    /// around the programs with an exit or without fentry programs; for [`Shared`] code,
    /// more than [`MAX_SHARED_PROGS`] programs or a site more than [`MAX_SITE_OFFSET`]
    /// bytes into its functions.
    BadShape,
    /// The buffer is not `len()` bytes.
    BadBuffer,
    /// A call or the return thunk is out of reach of a rel32 branch from the code.
    TooFar,
    /// The call depth accounting could not be written.
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

/// Bytes of the code of a trampoline for a function of `nr_args` arguments that fills
/// `saved` slots of ctx, runs `nr_entry` fentry programs, those of `direct` that are
/// `Some` itself ([`Spec::direct`]), and, with `exit` (session programs, fexit programs),
/// calls the function and runs that many session and fexit programs, or without it, with
/// its programs `counted` ([`Spec::counted`]; [`emit()`] refuses a count with an exit),
/// on a cpu that wants `m`.
pub fn len(
    nr_args: u32,
    saved: u32,
    nr_entry: u32,
    direct: &[Option<Direct>],
    exit: Option<(u32, u32)>,
    counted: bool,
    m: &Mitigations,
) -> usize {
    // Accounting, prologue 1+3+4 (or +7 for a frame past 127 bytes), a register slot 4
    // and any other slot 8, count 8, address 10+4, per program 10+4 + accounting + 5
    // (a direct one: direct_len()), register loads 4 each.
    let a = m.account_len();
    let prog = 19 + a;
    let regs = |n: u32| n.min(REG_ARGS) as usize;
    let beyond = |n: u32| n.saturating_sub(REG_ARGS) as usize;
    let sessions = exit.map_or(0, |(s, _)| s as usize);
    let direct_runs = || direct.iter().take(nr_entry as usize).flatten();
    let nr_direct = direct_runs().count();
    // sub rsp, imm8 (sign-extended) or imm32.
    let sub = if i8::try_from(frame_size(sessions as u32, nr_direct > 0)).is_ok() {
        4
    } else {
        7
    };
    let head = a + 4 + sub + 4 * regs(saved) + 8 * beyond(saved) + 8 + 14;
    let direct_bytes: usize = direct_runs().map(|d| direct_len(m, d)).sum();
    let mut entry = prog * (nr_entry as usize - nr_direct) + direct_bytes + 4 * regs(nr_args);
    if sessions > 0 {
        // Each cookie zeroed 11, the return value slots zeroed 8 each, each entry run's
        // ctx[-1] 10+4 and its call.
        entry += 11 * sessions + 8 * entry_ret_slots(nr_args).1 + (14 + prog) * sessions;
    }
    let tail = match exit {
        // The count up and down 10+4 each, leave, the return.
        None => 28 * usize::from(counted) + 1 + m.return_len(),
        // The count up 10+4 (before the programs), the stack arguments pushed 3 each, the
        // call, dropping them 4, the return value to ctx[12] and maybe ctx[nr_args] and
        // ctx[6], the dead check 10+3+6, the exit runs, the count down 10+4, the return
        // value back, leave, skipping the return into the function 4, the return.
        Some((_, n)) => {
            let pushed = beyond(nr_args);
            let drop = if pushed > 0 { 4 } else { 0 };
            let call = 3 * pushed + a + 5 + drop + 4 + ret_slots(nr_args).1 * 4;
            let exit = 19 + exit_runs(sessions, n as usize, m) + 14 + 4;
            14 + call + exit + 1 + 4 + m.return_len()
        }
    };
    head + entry + tail
}

/// Bytes of the [`Direct`] run `d`: the flag's check 10+3+6, the cookie 10+7, the enter
/// call's arguments 10+7, three calls with their accounting, the start kept 4 and tested
/// 3+6, the program's arguments 4+10, with counters the hit 10+4 and the jump past the
/// miss 5 and the miss 10+5, the exit call's arguments 10+4+7.
fn direct_len(m: &Mitigations, d: &Direct) -> usize {
    let counters = if d.stats.is_some() { 14 + 5 + 15 } else { 0 };
    19 + 17 + 17 + 3 * (m.account_len() + 5) + 4 + 9 + 14 + counters + 21
}

/// Bytes of the exit runs: each session's ctx[-1] 10+4 and its call, ctx[-1] back to the
/// argument count 8 if fexit programs follow sessions, each fexit program's call.
fn exit_runs(sessions: usize, fexit: usize, m: &Mitigations) -> usize {
    let prog = 19 + m.account_len();
    let back = if sessions > 0 && fexit > 0 { 8 } else { 0 };
    (14 + prog) * sessions + back + prog * fexit
}

/// Where the return value goes besides `ctx[12]` (`RET`): `ctx[nr_args]`, where
/// `bpf_get_func_ret()` reads it, below twelve arguments, and `ctx[6]`, where
/// `rkf_multi_tmpl6()`'s programs read it, below six: their displacements from rbp, and
/// how many of them are in use.
pub fn ret_slots(nr_args: u32) -> ([i8; 2], usize) {
    match nr_args {
        n if n < REG_ARGS => ([CTX + 8 * n as i8, RET6], 2),
        n if n < MAX_ARGS => ([CTX + 8 * n as i8, 0], 1),
        _ => ([0; 2], 0),
    }
}

/// The slots a session's entry run reads the return value from, zeroed before it:
/// `ctx[nr_args]` (`bpf_get_func_ret()`; `RET` itself for a function of twelve) and
/// `ctx[6]` below six arguments, as [`ret_slots()`] gives them on exit.
pub fn entry_ret_slots(nr_args: u32) -> ([i8; 2], usize) {
    match ret_slots(nr_args) {
        (_, 0) => ([RET, 0], 1),
        slots => slots,
    }
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

/// The rel32 of a branch ending at `next` to `target`, if it reaches.
fn rel32(next: u64, target: u64) -> Option<u32> {
    i32::try_from(target.wrapping_sub(next) as i64)
        .ok()
        .map(|r| r as u32)
}

/// `movabs rax, imm64`.
const MOVABS_RAX: [u8; 2] = [0x48, 0xb8];
/// `movabs rdi, imm64`.
const MOVABS_RDI: [u8; 2] = [0x48, 0xbf];
/// `inc qword gs:[rax]`: this cpu's counter of a per-cpu address, as `this_cpu_inc()`
/// (x86-64 kernels keep this cpu's per-cpu offset in the GS base).
const INC_GS_RAX: [u8; 4] = [0x65, 0x48, 0xff, 0x00];
/// `dec qword gs:[rax]`, as `this_cpu_dec()`.
const DEC_GS_RAX: [u8; 4] = [0x65, 0x48, 0xff, 0x08];

impl Out<'_> {
    /// Call depth accounting for the call that follows (or the one that entered).
    fn account(&mut self, at: u64, m: &Mitigations) -> Result<(), EmitError> {
        if let Some(c) = m.call_depth {
            let ip = at.wrapping_add(self.pos as u64);
            if !(c.emit)(ip, &mut self.buf[self.pos..self.pos + c.len]) {
                return Err(EmitError::Accounting);
            }
            self.pos += c.len;
        }
        Ok(())
    }

    /// A branch (`op`, then rel32) to `target` from code at `at`.
    fn branch(&mut self, at: u64, op: &[u8], target: u64) -> Result<(), EmitError> {
        let next = at.wrapping_add((self.pos + op.len() + 4) as u64);
        let rel = rel32(next, target).ok_or(EmitError::TooFar)?;
        self.bytes(op);
        self.u32(rel);
        Ok(())
    }

    /// The call that entered the trampoline (ftrace's site calls it directly), then
    /// `push rbp; mov rbp, rsp; sub rsp, size`.
    fn prologue(&mut self, at: u64, m: &Mitigations, size: u32) -> Result<(), EmitError> {
        self.account(at, m)?;
        self.bytes(&[0x55, 0x48, 0x89, 0xe5]);
        match i8::try_from(size) {
            Ok(f) => self.bytes(&[0x48, 0x83, 0xec, f as u8]),
            Err(_) => {
                self.bytes(&[0x48, 0x81, 0xec]);
                self.u32(size);
            }
        }
        Ok(())
    }

    /// The `n` arguments into ctx, and 0 into its slots up to `saved`, then the argument
    /// count into ctx[-1]; uses rax.
    fn save_args(&mut self, n: usize, saved: usize) {
        let regs = REG_ARGS as usize;
        let slot = |i: usize| CTX + 8 * i as i8;
        for (i, &reg) in ARG_REGS.iter().take(saved).enumerate() {
            self.rbp_mov(reg, slot(i), true);
        }
        for i in regs..saved {
            if i < n {
                // mov rax, [rbp+STACK_ARGS+8*(i-6)]; mov [rbp+CTX+8*i], rax
                self.rbp_mov((0, false), STACK_ARGS + 8 * (i - regs) as i8, false);
                self.rbp_mov((0, false), slot(i), true);
            } else {
                // mov qword [rbp+CTX+8*i], 0
                self.bytes(&[0x48, 0xc7, 0x45, slot(i) as u8]);
                self.u32(0);
            }
        }
        // mov qword [rbp+NR_ARGS], imm32
        self.bytes(&[0x48, 0xc7, 0x45, NR_ARGS as u8]);
        self.u32(n as u32);
    }

    /// The argument registers of a function of `n` arguments, back from ctx.
    fn restore_args(&mut self, n: usize) {
        for (i, &reg) in ARG_REGS.iter().take(n).enumerate() {
            self.rbp_mov(reg, CTX + 8 * i as i8, false);
        }
    }

    /// `ret; int3`, or `jmp` to the return thunk where the cpu wants one.
    fn ret(&mut self, at: u64, m: &Mitigations) -> Result<(), EmitError> {
        match m.return_thunk {
            Some(thunk) => self.branch(at, &[0xe9], thunk),
            None => {
                self.bytes(&[0xc3, 0xcc]);
                Ok(())
            }
        }
    }

    /// `movabs rax, counter`, then `inc` or `dec` this cpu's (`op`).
    fn count(&mut self, counter: u64, op: &[u8; 4]) {
        self.bytes(&MOVABS_RAX);
        self.u64(counter);
        self.bytes(op);
    }

    /// Runs each of `slots` through `run`: `run(slot, ctx)`.
    fn progs(
        &mut self,
        at: u64,
        m: &Mitigations,
        slots: &[u64],
        run: u64,
    ) -> Result<(), EmitError> {
        for &slot in slots {
            // movabs rdi, slot; lea rsi, [rbp+CTX]; call run
            self.bytes(&MOVABS_RDI);
            self.u64(slot);
            self.bytes(&[0x48, 0x8d, 0x75, CTX as u8]);
            self.account(at, m)?;
            self.branch(at, &[0xe8], run)?;
        }
        Ok(())
    }

    /// The fentry programs `slots` run through `run`, or by the code itself where
    /// `direct` (empty, or one for each of `slots`) says how.
    fn fentry_progs(
        &mut self,
        at: u64,
        m: &Mitigations,
        slots: &[u64],
        direct: &[Option<Direct>],
        run: u64,
    ) -> Result<(), EmitError> {
        for (k, &slot) in slots.iter().enumerate() {
            match direct.get(k).copied().flatten() {
                Some(d) => self.direct(at, m, &d)?,
                None => self.progs(at, m, &[slot], run)?,
            }
        }
        Ok(())
    }

    /// `mov`/`lea` (`op`) between `reg` and `[rbp+disp32]`.
    fn rbp_op32(&mut self, op: u8, reg: u8, disp: i32) {
        self.bytes(&[0x48, op, 0x85 | (reg << 3)]);
        self.u32(disp as u32);
    }

    /// A [`Direct`] run ([`direct_len()`] bytes).
    fn direct(&mut self, at: u64, m: &Mitigations, d: &Direct) -> Result<(), EmitError> {
        let start = self.pos;
        let a = m.account_len();
        // Past the run, the miss (with counters), and the exit call after it.
        let skip = at.wrapping_add((start + direct_len(m, d)) as u64);
        let miss = at.wrapping_add((start + 109 + 2 * a) as u64);
        let done = match d.stats {
            Some(_) => at.wrapping_add((start + 124 + 2 * a) as u64),
            None => at.wrapping_add((start + 90 + 2 * a) as u64),
        };
        // movabs rax, &detached; cmp byte [rax], 0; jne skip
        self.bytes(&MOVABS_RAX);
        self.u64(d.detached);
        self.bytes(&[0x80, 0x38, 0x00]);
        self.branch(at, &[0x0f, 0x85], skip)?;
        // movabs rax, cookie; mov [rbp+RUN_CTX+RUN_CTX_COOKIE], rax
        self.bytes(&MOVABS_RAX);
        self.u64(d.cookie);
        self.rbp_op32(0x89, 0, RUN_CTX + RUN_CTX_COOKIE);
        // movabs rdi, prog; lea rsi, [rbp+RUN_CTX]; call enter
        self.bytes(&MOVABS_RDI);
        self.u64(d.prog);
        self.rbp_op32(0x8d, 6, RUN_CTX);
        self.account(at, m)?;
        self.branch(at, &[0xe8], d.enter)?;
        // mov [rbp+START], rax; test rax, rax; je miss (done without counters)
        self.rbp_mov((0, false), START, true);
        self.bytes(&[0x48, 0x85, 0xc0]);
        self.branch(
            at,
            &[0x0f, 0x84],
            if d.stats.is_some() { miss } else { done },
        )?;
        // lea rdi, [rbp+CTX]; movabs rsi, insnsi; call func
        self.bytes(&[0x48, 0x8d, 0x7d, CTX as u8]);
        self.bytes(&[0x48, 0xbe]);
        self.u64(d.insnsi);
        self.account(at, m)?;
        self.branch(at, &[0xe8], d.func)?;
        if let Some(stats) = d.stats {
            // movabs rax, stats; lock inc qword [rax]; jmp done
            self.bytes(&MOVABS_RAX);
            self.u64(stats);
            self.bytes(&[0xf0, 0x48, 0xff, 0x00]);
            self.branch(at, &[0xe9], done)?;
            // miss: movabs rax, stats; lock inc qword [rax+8]
            debug_assert_eq!(at.wrapping_add(self.pos as u64), miss);
            self.bytes(&MOVABS_RAX);
            self.u64(stats);
            self.bytes(&[0xf0, 0x48, 0xff, 0x40, 0x08]);
        }
        // done: movabs rdi, prog; mov rsi, [rbp+START]; lea rdx, [rbp+RUN_CTX]; call exit
        debug_assert_eq!(at.wrapping_add(self.pos as u64), done);
        self.bytes(&MOVABS_RDI);
        self.u64(d.prog);
        self.rbp_mov((6, false), START, false);
        self.rbp_op32(0x8d, 2, RUN_CTX);
        self.account(at, m)?;
        self.branch(at, &[0xe8], d.exit)?;
        debug_assert_eq!(at.wrapping_add(self.pos as u64), skip);
        Ok(())
    }

    /// The entry or `exit` runs of the session programs `slots` of a function of
    /// `nr_args` arguments through `run`, each with its ctx[-1].
    fn sessions(
        &mut self,
        at: u64,
        m: &Mitigations,
        nr_args: u32,
        slots: &[u64],
        run: u64,
        exit: bool,
    ) -> Result<(), EmitError> {
        for (k, &slot) in slots.iter().enumerate() {
            // movabs rax, meta; mov [rbp+NR_ARGS], rax
            self.bytes(&MOVABS_RAX);
            self.u64(session_meta(nr_args, k as u32, exit));
            self.rbp_mov((0, false), NR_ARGS, true);
            self.progs(at, m, &[slot], run)?;
        }
        Ok(())
    }
}

/// Writes trampoline `t` into `buf`, which will be executed at address `at` (`buf` is
/// [`len()`] bytes for `t`).  On error `buf` may hold part of a trampoline, to be
/// discarded.
pub fn emit(buf: &mut [u8], at: u64, t: &Spec<'_>) -> Result<(), EmitError> {
    let (n, saved, m) = (t.nr_args as usize, t.saved as usize, &t.mitigations);
    let no_exit_run = |e: Exit<'_>| e.slots.is_empty() && e.sessions.is_empty();
    if saved > MAX_ARGS as usize
        || n > saved
        || t.exit.is_some_and(no_exit_run)
        || (t.slots.is_empty() && t.exit.is_none())
        || (t.counted.is_some() && (t.exit.is_some() || t.slots.is_empty()))
        || (!t.direct.is_empty() && (t.direct.len() != t.slots.len() || t.counted.is_none()))
    {
        return Err(EmitError::BadShape);
    }
    let direct = t.direct.iter().any(|d| d.is_some());
    if t.exit
        .is_some_and(|e| e.sessions.len() > MAX_SESSIONS as usize)
    {
        return Err(EmitError::BadShape);
    }
    let shape = t
        .exit
        .map(|e| (e.sessions.len() as u32, e.slots.len() as u32));
    let total = len(
        t.nr_args,
        t.saved,
        t.slots.len() as u32,
        t.direct,
        shape,
        t.counted.is_some(),
        m,
    );
    if buf.len() != total {
        return Err(EmitError::BadBuffer);
    }
    let regs = REG_ARGS as usize;
    let stack_arg = |i: usize| STACK_ARGS + 8 * (i - regs) as i8;
    let mut o = Out { buf, pos: 0 };
    let sessions = t.exit.map_or(&[][..], |e| e.sessions);
    o.prologue(at, m, frame_size(sessions.len() as u32, direct))?;
    o.save_args(n, saved);
    // movabs rax, addr; mov [rbp+FUNC_IP], rax
    o.bytes(&MOVABS_RAX);
    o.u64(t.addr);
    o.rbp_mov((0, false), FUNC_IP, true);
    if let Some(c) = t.exit.map(|e| e.inflight).or(t.counted) {
        o.count(c, &INC_GS_RAX);
    }
    o.fentry_progs(at, m, t.slots, t.direct, t.run)?;
    if let Some(c) = t.counted {
        // Past the programs the task runs only the rest of this code, which an RCU tasks
        // grace period waits out.
        o.count(c, &DEC_GS_RAX);
    }
    if !sessions.is_empty() {
        // mov qword [rbp+COOKIES-8*k], 0: each session's cookie starts at 0.
        for k in 0..sessions.len() {
            o.bytes(&[0x48, 0xc7, 0x85]);
            o.u32((COOKIES - 8 * k as i32) as u32);
            o.u32(0);
        }
        // mov qword [rbp+d], 0: on entry a session reads 0 as the return value, as a BPF
        // trampoline zeroes its return value slot.  ctx[nr_args] is an argument
        // register's slot below six arguments, which no register is loaded from.
        let (ret_at, nr) = entry_ret_slots(t.nr_args);
        for &d in &ret_at[..nr] {
            o.bytes(&[0x48, 0xc7, 0x45, d as u8]);
            o.u32(0);
        }
        o.sessions(at, m, t.nr_args, sessions, t.run, false)?;
    }
    o.restore_args(n);
    if let Some(e) = &t.exit {
        // push qword [rbp+STACK_ARGS+8*(i-6)], the last first: the body finds its stack
        // arguments above its return address, as its caller left them.
        for i in (regs..n).rev() {
            o.bytes(&[0xff, 0x75, stack_arg(i) as u8]);
        }
        // call body; add rsp, 8*(nr_args-6)
        o.account(at, m)?;
        o.branch(at, &[0xe8], e.body)?;
        if n > regs {
            o.bytes(&[0x48, 0x83, 0xc4, 8 * (n - regs) as u8]);
        }
        // mov [rbp+RET], rax, and the other return value slots
        o.rbp_mov((0, false), RET, true);
        let (at_slots, nr) = ret_slots(t.nr_args);
        for &d in &at_slots[..nr] {
            o.rbp_mov((0, false), d, true);
        }
        // movabs rax, dead; cmp byte [rax], 0; jne out
        o.bytes(&MOVABS_RAX);
        o.u64(e.dead);
        o.bytes(&[0x80, 0x38, 0x00]);
        let runs = exit_runs(sessions.len(), e.slots.len(), m);
        let out = at.wrapping_add((o.pos + 6 + runs) as u64);
        o.branch(at, &[0x0f, 0x85], out)?;
        o.sessions(at, m, t.nr_args, sessions, t.run, true)?;
        if !sessions.is_empty() && !e.slots.is_empty() {
            // mov qword [rbp+NR_ARGS], nr_args: what the fexit programs read there.
            o.bytes(&[0x48, 0xc7, 0x45, NR_ARGS as u8]);
            o.u32(t.nr_args);
        }
        o.progs(at, m, e.slots, t.run)?;
        // out: movabs rax, inflight; dec qword gs:[rax]; mov rax, [rbp+RET]
        o.count(e.inflight, &DEC_GS_RAX);
        o.rbp_mov((0, false), RET, false);
    }
    // leave
    o.bytes(&[0xc9]);
    if t.exit.is_some() {
        // add rsp, 8: return to the function's caller, past the return into its body.
        o.bytes(&[0x48, 0x83, 0xc4, 0x08]);
    }
    o.ret(at, m)?;
    debug_assert_eq!(o.pos, o.buf.len());
    Ok(())
}

/// Bytes of a program's slot (`struct rkf_multi_prog`, asserted by rkf_multi): shared
/// code finds a function's program `k` at its first slot plus `k * SLOT`.
pub const SLOT: u32 = 16;

/// Where shared code keeps the function's first slot: `ctx[12]`, where a trampoline with
/// an exit keeps the return value, which no program of a function without one reads
/// (programs read at most twelve u64 of ctx).
pub const FIRST_SLOT: i8 = RET;

/// Bytes of a stub ([`emit_stub()`]), each at a trampoline start.
pub const STUB: usize = 16;

/// The code the functions of one shape share in an image, for functions whose programs
/// are all fentry ones (no exit): each function's own code is a stub
/// ([`emit_stub()`]) that puts its first slot in rax and jumps here.  It is what [`emit()`]
/// writes for such a function but for two things it cannot build in: it keeps the first
/// slot in the frame and finds program `k`'s at `k * SLOT` past it, and it takes the
/// function's address (`bpf_get_func_ip()`) from the return address into the function,
/// its ftrace site + 5, less 5 and `site_offset`, the same for every function of the
/// shape.
///
/// ```text
/// [account]                                     the entry's call
/// push rbp; mov rbp, rsp; sub rsp, 120
/// mov [rbp-8], rax                              the first slot
/// mov [rbp-104+8*i], <arg i> ...                as emit(), ctx[0..saved] and ctx[-1]
/// mov rax, [rbp+8]; sub rax, 5+site_offset; mov [rbp-120], rax    ctx[-2]
/// [movabs rax, &inflight; inc qword gs:[rax]]   counted
/// for each program k:
///     mov rdi, [rbp-8]; [add rdi, 16*k]; lea rsi, [rbp-104]
///     [account]; call run                       run(slot, ctx)
/// [movabs rax, &inflight; dec qword gs:[rax]]   counted
/// mov <arg i>, [rbp-104+8*i] ...
/// leave; ret; int3            or  leave; jmp <return thunk>
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Shared {
    /// Its functions' argument count, at most [`MAX_ARGS`].
    pub nr_args: u32,
    /// The slots of ctx filled: at least `nr_args`, at most [`MAX_ARGS`].
    pub saved: u32,
    /// The fentry programs each of its functions runs, at least one.
    pub nr_fentry: u32,
    /// How far into each of its functions the ftrace site is (0, or 4 past an ENDBR):
    /// `bpf_get_func_ip()` gives the function's address.
    pub site_offset: u32,
    /// The address of `rkf_multi_run_prog()` (`rkf_multi_run_sleepable_slot()` for
    /// functions with a sleepable program).
    pub run: u64,
    /// As [`Spec::counted`]: the image's counters of calls in flight, for functions whose
    /// fentry programs may sleep.
    pub counted: Option<u64>,
    /// What the cpu wants of the code.
    pub mitigations: Mitigations,
}

/// The most programs [`Shared`] code runs: far above what a function has
/// (`MAX_LINKS_PER_FUNC`), a bound on the code's length (about 20 bytes a program).
pub const MAX_SHARED_PROGS: u32 = 1024;

/// The largest [`Shared::site_offset`]: the distance from the return address to the
/// function's address is a 32-bit immediate.
pub const MAX_SITE_OFFSET: u32 = 1 << 20;

/// Bytes of shared code `s`.
pub fn shared_len(s: &Shared) -> usize {
    let a = s.mitigations.account_len();
    let regs = |n: u32| n.min(REG_ARGS) as usize;
    let beyond = |n: u32| n.saturating_sub(REG_ARGS) as usize;
    let nr = s.nr_fentry as usize;
    // Accounting, prologue 1+3+4, the first slot kept 4, a register slot 4 and any other
    // slot 8, count 8, address 4+6+4, the count up and down 10+4 each, per program 4+4
    // + accounting + 5 and 7 past the first, register loads 4 each, leave, the return.
    a + 8
        + 4
        + 4 * regs(s.saved)
        + 8 * beyond(s.saved)
        + 8
        + 14
        + 28 * usize::from(s.counted.is_some())
        + (13 + a) * nr
        + 7 * nr.saturating_sub(1)
        + 4 * regs(s.nr_args)
        + 1
        + s.mitigations.return_len()
}

/// Writes shared code `s` into `buf` (`shared_len()` bytes), which will be executed at
/// `at`.  On error `buf` may hold part of it, to be discarded.
pub fn emit_shared(buf: &mut [u8], at: u64, s: &Shared) -> Result<(), EmitError> {
    if s.saved > MAX_ARGS
        || s.nr_args > s.saved
        || s.nr_fentry == 0
        || s.nr_fentry > MAX_SHARED_PROGS
        || s.site_offset > MAX_SITE_OFFSET
    {
        return Err(EmitError::BadShape);
    }
    if buf.len() != shared_len(s) {
        return Err(EmitError::BadBuffer);
    }
    let m = &s.mitigations;
    let mut o = Out { buf, pos: 0 };
    o.prologue(at, m, u32::from(FRAME))?;
    // mov [rbp+FIRST_SLOT], rax: before the arguments, which use rax.
    o.rbp_mov((0, false), FIRST_SLOT, true);
    o.save_args(s.nr_args as usize, s.saved as usize);
    // mov rax, [rbp+8]; sub rax, 5+site_offset; mov [rbp+FUNC_IP], rax
    o.rbp_mov((0, false), 8, false);
    o.bytes(&[0x48, 0x2d]);
    o.u32(MCOUNT_INSN_SIZE as u32 + s.site_offset);
    o.rbp_mov((0, false), FUNC_IP, true);
    if let Some(c) = s.counted {
        o.count(c, &INC_GS_RAX);
    }
    for k in 0..s.nr_fentry {
        // mov rdi, [rbp+FIRST_SLOT]; add rdi, SLOT*k; lea rsi, [rbp+CTX]; call run
        o.rbp_mov((7, false), FIRST_SLOT, false);
        if k > 0 {
            o.bytes(&[0x48, 0x81, 0xc7]);
            o.u32(SLOT * k);
        }
        o.bytes(&[0x48, 0x8d, 0x75, CTX as u8]);
        o.account(at, m)?;
        o.branch(at, &[0xe8], s.run)?;
    }
    if let Some(c) = s.counted {
        o.count(c, &DEC_GS_RAX);
    }
    o.restore_args(s.nr_args as usize);
    // leave
    o.bytes(&[0xc9]);
    o.ret(at, m)?;
    debug_assert_eq!(o.pos, o.buf.len());
    Ok(())
}

/// Writes a function's stub into `buf` ([`STUB`] bytes), which will be executed at `at`:
/// `movabs rax, first_slot; jmp shared; int3`.  ftrace's site calls it directly, as it
/// would the function's own trampoline, and it goes on to the [`Shared`] code of the
/// function's shape by a direct jump: nothing on the way needs an ENDBR.
pub fn emit_stub(buf: &mut [u8], at: u64, first_slot: u64, shared: u64) -> Result<(), EmitError> {
    if buf.len() != STUB {
        return Err(EmitError::BadBuffer);
    }
    let mut o = Out { buf, pos: 0 };
    o.bytes(&MOVABS_RAX);
    o.u64(first_slot);
    o.branch(at, &[0xe9], shared)?;
    o.bytes(&[0xcc]);
    debug_assert_eq!(o.pos, o.buf.len());
    Ok(())
}
