/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The one surface between the rkf C shims and the rkf Rust crates.
 *
 * The shims hold only what must be C: __bpf_kfunc entry points and their BTF_KFUNCS sets
 * (Rust code gets no BTF), functions that BPF programs attach to or are verified against,
 * per-cpu variables that BPF programs reach as typed __ksym, inline and macro-only kernel
 * APIs, and rkf_multi's hot path and trampoline.  Everything else is Rust.
 *
 * The Rust declarations of each module's section are generated from this header by
 * scripts/gen-bindings.sh into rust/bindings/<module>.rs, which are kept in the tree;
 * `make lint` fails when they are stale.  The section of a module also names the kernel
 * exports it uses that the kernel crate's bindings lack (kernel::bindings has the rest).
 *
 * The ABI with user space (the /dev/rkf_multi requests, rkf_percpu's probe) is defined
 * here for C and in rust/core/src/abi.rs for Rust; the modules assert at build time that
 * the generated bindings of this header have the same sizes, offsets and numbers.
 */
#ifndef _RKF_H
#define _RKF_H

/*
 * The frame of rkf_multi's trampolines (c-shim/rkf_multi_tramp.S and the generated ones
 * of rust/core/src/tramp.rs), as offsets from rbp.  It is the BPF trampoline's
 * (arch/x86/net/bpf_jit_comp.c), so that programs and the helpers the verifier inlines
 * read it as they read the kernel's: ctx = rbp + RKF_MULTI_FRAME_CTX.
 *
 *	rbp + 24	arguments 7..12, where the function's caller passed them
 *	rbp + 16	the traced function's return address (after an fentry call)
 *	rbp +  8	the return address into the traced function: its site + 5
 *	rbp +  0	saved rbp
 *
 * ctx[0..11] are the arguments (0 past the function's own beyond the registers, as far
 * as its programs read, but the return value slots below on exit), ctx[12]
 * the return value, kept there by the trampolines with an exit, or, in the code that
 * functions without one share, the function's first program slot (no program reads it:
 * the verifier allows MAX_BPF_FUNC_ARGS u64 of ctx).  bpf_get_func_ret() reads it at ctx[nr_args],
 * and programs against rkf_multi_tmpl6() at ctx[6], which gets it too for a function of
 * at most six arguments (wider functions take only rkf_multi_tmpl12()'s programs).
 */
#define RKF_MULTI_FRAME_RET	(-8)	/* ctx[12]: the return value */
#define RKF_MULTI_FRAME_CTX	(-104)	/* ctx[0..11]: rdi, rsi, rdx, rcx, r8, r9, stack */
#define RKF_MULTI_FRAME_NR_ARGS	(-112)	/* ctx[-1]: the count, bpf_get_func_arg_cnt() */
#define RKF_MULTI_FRAME_FUNC_IP	(-120)	/* ctx[-2]: the function, bpf_get_func_ip() */
#define RKF_MULTI_FRAME_SIZE	120	/* bytes below rbp: generated trampolines */
#define RKF_MULTI_FRAME_STACK_ARGS 24	/* rbp + 24: the seventh argument */
#define RKF_MULTI_FRAME_FIRST_SLOT (-8)	/* ctx[12] in shared code: the first slot */
#define RKF_MULTI_MCOUNT_INSN_SIZE 5	/* MCOUNT_INSN_SIZE: the site's call */
/* The argument slots of ctx: six registers, then the stack, as MAX_BPF_FUNC_ARGS. */
#define RKF_MULTI_MAX_ARGS	12
#define RKF_MULTI_REG_ARGS	6

/*
 * The shared trampoline's frame goes on below, with what session programs need: a cookie
 * for each (ctx[-3 - k], bpf_session_cookie(): the verifier inlines it as
 * &ctx[-((ctx[-1] >> BPF_TRAMP_COOKIE_INDEX_SHIFT) & 0xff)]), the link each cookie
 * belongs to, and how many sessions ran on entry.
 */
#define RKF_MULTI_MAX_SESSIONS		8	/* session programs on one function */
#define RKF_MULTI_FRAME_COOKIES		(-128)	/* ctx[-3 - k]: cookie k */
#define RKF_MULTI_FRAME_SESSION_LINKS	(-192)	/* ctx[-11 - k]: cookie k's link id */
#define RKF_MULTI_FRAME_NR_SESSIONS	(-256)	/* ctx[-19]: cookies in use */
#define RKF_MULTI_FRAME_FEXIT		(-264)	/* whether the exit programs wait */
#define RKF_MULTI_SHARED_FRAME_SIZE	272	/* bytes below rbp: the shared trampoline */
/*
 * ctx[-1] of a session program's run, as the JIT writes it (include/linux/bpf.h's
 * BPF_TRAMP_*_SHIFT): the argument count, the cookie's index, on exit the is-return bit.
 * A generated trampoline's frame (rust/core/src/tramp.rs) is RKF_MULTI_FRAME_SIZE plus
 * 8 bytes for each session program's cookie, from RKF_MULTI_FRAME_COOKIES down.
 */
#define RKF_MULTI_COOKIE_INDEX_SHIFT	8
#define RKF_MULTI_IS_RETURN_SHIFT	63
/*
 * A generated trampoline that runs sleepable programs itself, as the JIT's
 * invoke_bpf_prog() (a function whose programs are all fentry ones: no session cookies
 * there), keeps what __bpf_prog_enter_sleepable_recur() returned and the run context
 * (struct bpf_tramp_run_ctx) below RKF_MULTI_FRAME_SIZE.
 */
#define RKF_MULTI_FRAME_START		(-128)	/* the start time */
#define RKF_MULTI_FRAME_RUN_CTX		(-144)	/* struct bpf_tramp_run_ctx */
#define RKF_MULTI_RUN_CTX_COOKIE	0	/* its bpf_cookie */
#define RKF_MULTI_RUN_CTX_SIZE		16

#ifndef __ASSEMBLY__

#include <linux/btf.h>
#include <linux/ioctl.h>
#include <linux/perf_event.h>
#include <linux/percpu-defs.h>
#include <linux/types.h>

/*
 * Marks a function without preconditions: any caller in process context may call it
 * with any arguments.  scripts/gen-bindings.sh declares it `safe` for Rust.
 */
#define __rkf_safe

/* ---- rkf_percpu ------------------------------------------------------------------ */

#define RKF_PERCPU_PROBE_MAGIC 0x726b6670 /* "rkfp" */

/**
 * struct rkf_percpu_probe - rkf_percpu's own per-cpu variable, for tests and examples
 * @cpu:   the cpu this copy belongs to
 * @magic: %RKF_PERCPU_PROBE_MAGIC once the module has initialised the copy
 * @self:  the address of this copy, as the module resolved it
 */
struct rkf_percpu_probe {
	u32 cpu;
	u32 magic;
	u64 self;
};

DECLARE_PER_CPU(struct rkf_percpu_probe, rkf_percpu_probe);

/* The kfunc set of rkf_percpu, registered from Rust. */
extern const struct btf_kfunc_id_set rkf_percpu_kfunc_set;

/* Implemented in Rust (rust/percpu.rs). */
void *rkf_percpu_resolve(const void *ptr, u32 cpu);

/* ---- rkf_stack ------------------------------------------------------------------- */

struct mm_struct;
struct vm_area_struct;

/* The kfunc sets of rkf_stack: for the tracing hook, and for kprobe programs. */
extern const struct btf_kfunc_id_set rkf_stack_tracing_kfunc_set;
extern const struct btf_kfunc_id_set rkf_stack_kprobe_kfunc_set;
int rkf_stack_kfunc_filter_init(void);

struct mm_struct *rkf_stack_mm_lock(void **cookie);
void rkf_stack_mm_unlock(struct mm_struct *mm, void *cookie);
__rkf_safe struct vm_area_struct *rkf_stack_vma_lock(unsigned long ip);
void rkf_stack_vma_unlock(struct vm_area_struct *vma);
void rkf_stack_mm_init(void);
__rkf_safe void rkf_stack_mm_drain(void);

/**
 * struct rkf_stack_walk - what to walk, as the flags and size of one call ask
 * @user:      the user stack instead of the kernel stack
 * @build_id:  build-id entries instead of ips
 * @skip:      frames to drop from the top
 * @max_depth: how deep to walk, skipped frames included
 * @elem_size: 8 for ips, sizeof(struct bpf_stack_build_id) for build-id entries
 * @may_fault: build ids may be parsed where a page fault is allowed (the caller is a
 *             sleepable program), as bpf_get_stack_sleepable() parses them
 */
struct rkf_stack_walk {
	bool user;
	bool build_id;
	bool may_fault;
	u32 skip;
	u32 max_depth;
	u32 elem_size;
};

/* Implemented in Rust (rust/stack/entry.rs). */
long rkf_stack_prepare(void *buf, u32 size, u64 flags, bool may_fault,
		       struct rkf_stack_walk *walk);
long rkf_stack_finish(void *buf, u32 size, const struct rkf_stack_walk *walk, long nr);
long rkf_stack_get_sampled(const u64 *ips, u64 nr, void *buf, u32 size, u64 flags);
long rkf_stack_check_task(const struct rkf_stack_walk *walk, bool is_current, bool user_regs,
			  bool perf_event);

/*
 * Exported by scripts/kernel/patches/0001 and declared by linux/perf_event.h, but not in
 * the kernel crate's bindings: get_callchain_buffers(), put_callchain_buffers(),
 * sysctl_perf_event_max_stack.  Taking a reference (or failing to) needs nothing of the
 * caller.
 */
__rkf_safe int get_callchain_buffers(int max_stack);

/* ---- rkf_multi ------------------------------------------------------------------- */

/*
 * The ioctl ABI of /dev/rkf_multi (rust/core/src/abi.rs for Rust).  Each open file is
 * one link: RKF_MULTI_IOC_ATTACH attaches it once, closing the file detaches it.
 */

/**
 * struct rkf_multi_attach_request - attach a program to a set of functions
 * @prog_fd:   a TRACING program loaded as fentry, fexit or fsession (or their sleepable
 *             forms) against rkf_multi_tmpl6() (functions of up to six arguments)
 *             or rkf_multi_tmpl12() (up to twelve)
 * @cnt:       how many functions
 * @btf_ids:   __u32[@cnt]: the functions' BTF ids
 * @addrs:     __u64[@cnt]: their addresses, as /proc/kallsyms gives them
 * @cookies:   __u64[@cnt]: bpf_get_attach_cookie() for each, or 0 for none
 * @btf_fds:   __s32[@cnt]: for each function, an fd of the BTF object of the module it
 *             is in (BPF_BTF_GET_FD_BY_ID), or 0 for vmlinux (and rkf_multi itself),
 *             so fd 0 cannot name a BTF object, as with BPF's attach_btf_obj_fd;
 *             or 0 for none: every function in vmlinux.  The fds are checked before
 *             the functions; a bad one is refused naming the first function given it
 * @flags:     RKF_MULTI_F_COUNT or 0
 * @bad_index: out: the function a refusal is about, or ~0
 * @reason:    out: why it was refused (enum Reason of rust/core/src/multi/rules.rs), or 0
 * @pad:       0
 */
struct rkf_multi_attach_request {
	__u32 prog_fd;
	__u32 cnt;
	__u64 btf_ids;
	__u64 addrs;
	__u64 cookies;
	__u64 btf_fds;
	__u32 flags;
	__u32 bad_index;
	__u32 reason;
	__u32 pad;
};

/*
 * struct rkf_multi_attach_request.flags: keep a count of the program's runs and of the
 * runs the recursion guard skipped on each function (struct rkf_multi_func_info's @hits
 * and @misses), 24 bytes a function (with its cookie, which a link that counts keeps
 * there) and an atomic increment on every run.  Without it
 * a link keeps no count of its own: the kernel's statistics of the program
 * (bpf_prog_info's run_cnt under kernel.bpf_stats_enabled, and recursion_misses)
 * count its runs on all its functions, as they count a BPF trampoline's.
 */
#define RKF_MULTI_F_COUNT	1U

/**
 * struct rkf_multi_func_info - one function of a link, for introspection
 * @addr:   the function
 * @cookie: its cookie
 * @hits:   program runs, or 0 if the link does not count them (RKF_MULTI_F_COUNT)
 * @misses: runs skipped by the recursion guard, or 0 likewise
 */
struct rkf_multi_func_info {
	__u64 addr;
	__u64 cookie;
	__u64 hits;
	__u64 misses;
};

/**
 * struct rkf_multi_link_info - a link, for introspection
 * @id:      in: 0 for this file's link, or N for the first link whose id is N or more;
 *           out: its id (ids start at 1 and grow)
 * @prog_id: out: the program's id
 * @kind:    out: RKF_MULTI_KIND_FENTRY, _FEXIT or _SESSION
 * @cnt:     out: its functions
 * @buf_cnt: in: the room in @funcs
 * @funcs:   in: struct rkf_multi_func_info[@buf_cnt], filled with the first ones
 * @next_id: out: the id of the next link, or 0 if it is the last
 * @flags:   out: the flags it was attached with (RKF_MULTI_F_COUNT)
 * @pad:     out: 0
 */
struct rkf_multi_link_info {
	__u64 id;
	__u32 prog_id;
	__u32 kind;
	__u32 cnt;
	__u32 buf_cnt;
	__u64 funcs;
	__u64 next_id;
	__u32 flags;
	__u32 pad;
};

/* What a link's program runs on: struct rkf_multi_link_info.kind. */
#define RKF_MULTI_KIND_FENTRY	0	/* entry: fentry, fentry.s */
#define RKF_MULTI_KIND_FEXIT	1	/* exit: fexit, fexit.s */
#define RKF_MULTI_KIND_SESSION	2	/* both: fsession, fsession.s */

#define RKF_MULTI_IOC_TYPE	'r'
#define RKF_MULTI_IOC_NR_ATTACH	1
#define RKF_MULTI_IOC_NR_INFO	2
#define RKF_MULTI_IOC_ATTACH	\
	_IOWR(RKF_MULTI_IOC_TYPE, RKF_MULTI_IOC_NR_ATTACH, struct rkf_multi_attach_request)
#define RKF_MULTI_IOC_INFO	\
	_IOWR(RKF_MULTI_IOC_TYPE, RKF_MULTI_IOC_NR_INFO, struct rkf_multi_link_info)

/* Kernel side. */

struct bpf_prog;
struct btf;
struct module;
struct workqueue_struct;

/**
 * struct rkf_multi_stats - counters and cookie of one program on one function, for a
 * link that counts (RKF_MULTI_F_COUNT)
 * @hits:   runs
 * @misses: runs skipped because the program was already running on this cpu
 * @cookie: its cookie on the function
 */
struct rkf_multi_stats {
	atomic64_t hits;
	atomic64_t misses;
	u64 cookie;
};

/**
 * struct rkf_multi_link_state - a link's program, id and detached flag, named by all its
 * slots
 * @prog:     its program (the link holds the reference until it is freed): read only
 *            by a run that saw @detached clear under RCU or RCU tasks trace, or that
 *            took the slot from a published table under them, as the link is freed
 *            only after their grace periods; a generated trampoline that runs a
 *            sleepable program itself has it built in, and passes it to the kernel's
 *            entry once it saw @detached clear, before any read side (such a link is
 *            freed after an RCU tasks grace period too, which the task holds back until
 *            it sleeps inside the program's RCU tasks trace read side)
 * @id:       its id, which no other published link has (an id is taken for good once its
 *            attach succeeds): what a session's exit run finds the cookie of its entry
 *            run by
 * @detached: set once the link is detached (or its attach failed): a generated
 *            trampoline's run reads it first and runs nothing once it is set, so a call
 *            that was in flight inside the function meanwhile runs the program no more on
 *            the way out (nor, past a sleepable program, on the way in)
 * @counted:  the link counts its runs (RKF_MULTI_F_COUNT): its slots hold their
 *            counters, not their cookies (struct rkf_multi_prog's @data); set before
 *            the state is shared, never changed
 *
 * One per link: it lives as long as the link does, and as long as any image whose slots
 * name it.
 */
struct rkf_multi_link_state {
	struct bpf_prog *prog;
	u64 id;
	bool detached;
	bool counted;
};

/**
 * struct rkf_multi_prog - one program on one function
 * @link: its link's program, id and flags, which every slot of the link names
 * @data: for a link that does not count, the program's cookie on the function; for one
 *        that counts (@link's @counted), the address of its struct rkf_multi_stats
 *        there (counters and cookie, which the link owns), read only by a run that saw
 *        the link's @detached clear or took the slot from the published table, as the
 *        link's program
 *
 * RKF_MULTI_SLOT_SIZE bytes, one for each program on each function, but that functions
 * of one image that run the same shared code with the same programs (the same links, the
 * same cookies, and none that counts) share one copy of them (rust/multi/image.rs): the
 * code functions without an exit share finds a function's program k at its first slot
 * plus k times that.
 */
struct rkf_multi_prog {
	const struct rkf_multi_link_state *link;
	u64 data;
};

#define RKF_MULTI_SLOT_SIZE	16

/*
 * The high 32 bits of every address of kernel or module text, and of rkf_multi's
 * generated trampolines: x86-64 keeps text in the top 2 GiB of the address space
 * (__START_KERNEL_map to MODULES_END, the kernel's code model), so a table keeps only
 * the low 32 bits of such an address.
 */
#define RKF_MULTI_TEXT_HIGH	0xffffffff00000000UL

/**
 * struct rkf_multi_func - one traced function, as the trampoline sees it
 * @progs:     its programs: the slots of its generated trampoline, in the image that
 *             the table keeps (functions alike may share them), or, where it takes the
 *             shared trampoline, an array the table keeps (rust/multi/table.rs)
 * @ret_ip:    the low 32 bits of the return address into it, its ftrace site +
 *             MCOUNT_INSN_SIZE (rkf_multi_ret_ip()): what the shared trampoline finds
 *             it by
 * @tramp:     the low 32 bits of its generated trampoline, or 0 where it takes the shared
 *             one: what its ftrace site calls once the table is published, which only
 *             rkf_multi (rust/multi/table.rs) reads
 * @nr_args:   its argument count (bpf_get_func_arg_cnt())
 * @ctx_args:  the argument slots of ctx its trampoline fills: @nr_args, or more if one
 *             of its programs reads more (rkf_multi_prog_ctx_args()), at most
 *             RKF_MULTI_MAX_ARGS; the slots past @nr_args are 0 on entry
 * @sleepable: 1 if one of its programs is sleepable, which runs under RCU tasks trace
 *             instead of RCU
 * @nr_session: session programs (at most RKF_MULTI_MAX_SESSIONS), after the fentry ones
 * @nr_fentry: fentry programs, first in @progs, in attach order
 * @nr_progs:  all programs (at most MAX_LINKS_PER_FUNC of rust/core/src/multi/rules.rs):
 *             the session ones follow the fentry ones, and the fexit ones the session
 *             ones
 * @site_offset: how far its ftrace site is into it (0, or 4 past an ENDBR; at most
 *             255): its address, bpf_get_func_ip(), is rkf_multi_ret_ip() -
 *             MCOUNT_INSN_SIZE - @site_offset
 *
 * 24 bytes, one per traced function.
 */
struct rkf_multi_func {
	const struct rkf_multi_prog *progs;
	u32 ret_ip;
	u32 tramp;
	u8 nr_args;
	u8 ctx_args;
	u8 sleepable;
	u8 nr_session;
	u8 nr_fentry;
	u8 nr_progs;
	u8 site_offset;
};

/**
 * struct rkf_multi_table - every traced function; replaced whole, under RCU
 * @nr_funcs: functions
 * @bits:     log2 of the buckets of @index
 * @index:    open addressing by @ret_ip, linear probing from hash_64(ret_ip, @bits): a
 *            bucket holds the position in @funcs plus one, or 0
 *            (rkf_core::multi::build_index()); it holds only the functions that take the
 *            shared trampoline, and the trampoline finds the others by a binary search
 *            of @funcs
 * @funcs:    sorted by @ret_ip
 */
struct rkf_multi_table {
	u32 nr_funcs;
	u32 bits;
	const u32 *index;
	const struct rkf_multi_func *funcs;
};

/**
 * struct rkf_multi_shape - a function's BTF, reduced to what decides if it is traceable
 * @name:      its name
 * @nr_params: its parameters (varargs count as one more)
 * @varargs:   it takes varargs
 * @kind:      BTF kind of the return type ([0], 0 for void) and of up to
 *             RKF_MULTI_MAX_ARGS parameters, typedefs and qualifiers skipped
 * @size:      their sizes, where the kind has one
 */
struct rkf_multi_shape {
	const char *name;
	u32 nr_params;
	u32 varargs;
	u32 kind[1 + RKF_MULTI_MAX_ARGS];
	u32 size[1 + RKF_MULTI_MAX_ARGS];
};

/* c-shim/rkf_multi_tramp.S: the shared trampoline. */
void rkf_multi_tramp(void);

/* c-shim/rkf_multi_run.c: what programs are verified against, and the hot path. */
u64 rkf_multi_tmpl6(u64 a0, u64 a1, u64 a2, u64 a3, u64 a4, u64 a5);
u64 rkf_multi_tmpl12(u64 a0, u64 a1, u64 a2, u64 a3, u64 a4, u64 a5,
		     u64 a6, u64 a7, u64 a8, u64 a9, u64 a10, u64 a11);
void rkf_multi_anchor(void);
u64 rkf_multi_shared_fentry(u64 *ctx, unsigned long ret_ip);
void rkf_multi_shared_fexit(u64 *ctx, unsigned long ret_ip);
void rkf_multi_run_prog(const struct rkf_multi_prog *p, u64 *ctx);
void rkf_multi_run_sleepable_slot(const struct rkf_multi_prog *p, u64 *ctx);
const struct rkf_multi_table *rkf_multi_publish(const struct rkf_multi_table *table);
void rkf_multi_wait_frames(void);

/* c-shim/rkf_multi_check.c: programs and functions, checked. */
extern const struct btf_kfunc_id_set rkf_multi_fmodret_set;
struct bpf_prog *rkf_multi_prog_get(u32 fd, u32 *kind, bool *sleepable, u32 *id,
				    u32 *max_args);
u32 rkf_multi_prog_ctx_args(const struct bpf_prog *prog);
const struct btf *rkf_multi_prog_btf(const struct bpf_prog *prog);
int rkf_multi_shape(const struct btf *btf, u32 btf_id, struct rkf_multi_shape *shape);
bool rkf_multi_is_symbol(unsigned long addr, const char *name, struct module *mod);

/*
 * What the error injection list says of a function, for rkf_core::multi::may_sleep()
 * (enum ErrorInjection there).
 */
#define RKF_MULTI_EI_UNCONFIGURED	0	/* no CONFIG_FUNCTION_ERROR_INJECTION */
#define RKF_MULTI_EI_LISTED		1
#define RKF_MULTI_EI_NOT_LISTED		2
#define RKF_MULTI_EI_UNKNOWN		3	/* vmlinux's part: no exported lookup */
u32 rkf_multi_error_injection(unsigned long addr, struct module *mod);

/* c-shim/rkf_multi_image.c: generated trampolines in BPF text. */
struct rkf_multi_image;

/**
 * struct rkf_multi_prog_code - a sleepable program as a generated trampoline runs it
 * itself, with everything built in (rust/core/src/tramp.rs, Direct)
 * @prog:     the program
 * @func:     its code, prog->bpf_func, called directly
 * @insnsi:   its instructions, the second argument of @func
 * @detached: its link's detached flag (a byte)
 * @enter:    __bpf_prog_enter_sleepable_recur()
 * @exit:     __bpf_prog_exit_sleepable_recur()
 */
struct rkf_multi_prog_code {
	u64 prog;
	u64 func;
	u64 insnsi;
	u64 detached;
	u64 enter;
	u64 exit;
};

bool rkf_multi_prog_code(const struct rkf_multi_link_state *link,
			 struct rkf_multi_prog_code *code);
__rkf_safe unsigned long rkf_multi_return_thunk(void);
u32 rkf_multi_call_depth_account(u8 *buf, u32 room, unsigned long ip);
struct rkf_multi_image *rkf_multi_image_alloc(u32 size, u64 seq, bool counted,
					      unsigned long *code);
int rkf_multi_image_commit(struct rkf_multi_image *im, const void *buf);
void rkf_multi_image_free(struct rkf_multi_image *im);
unsigned long rkf_multi_image_inflight(struct rkf_multi_image *im);
unsigned long rkf_multi_image_dead(struct rkf_multi_image *im);
void rkf_multi_image_retire(struct rkf_multi_image *im, void *garbage,
			    void (*free)(void *garbage));
void rkf_multi_image_drain_exit(void);

/* c-shim/rkf_multi_deferred.c: freeing after grace periods, in process context. */
__rkf_safe struct workqueue_struct *rkf_multi_deferred_init(void);
void rkf_multi_defer(struct workqueue_struct *wq, void *garbage, void (*free)(void *garbage),
		     bool tasks, bool trace);
__rkf_safe void rkf_multi_sync(bool tasks, bool trace);
__rkf_safe void rkf_multi_tasks_rcu_qs(void);
void rkf_multi_deferred_drain(struct workqueue_struct *wq);

/* ---- rkf_testmod (selftests and benchmarks only) ----------------------------------- */

/* Deep enough for stacks past perf_event_max_stack, shallow for a 16 KiB kernel stack. */
#define RKF_TESTMOD_MAX_DEPTH 256

/* The longest bpf_rkf_testmod_wait_step() sleeps, in seconds. */
#define RKF_TESTMOD_WAIT_MAX 120

/*
 * For syscall programs; for tracing programs, bpf_rkf_testmod_recurse() (a program on
 * rkf_testmod_recurse() that calls its own function again) and the sleepable
 * bpf_rkf_testmod_wait_step().  One set per program type: the kernel takes one set of a
 * module per hook.
 */
extern const struct btf_kfunc_id_set rkf_testmod_kfunc_set;
extern const struct btf_kfunc_id_set rkf_testmod_tracing_kfunc_set;

u64 rkf_testmod_leaf(u64 depth);
u64 rkf_testmod_recurse(u32 depth);
int rkf_testmod_multi_test1(int a);
u64 rkf_testmod_multi_test2(s8 a, u64 b);
s64 rkf_testmod_multi_test3(u16 a, s32 b, u64 c);
u64 rkf_testmod_multi_test6(u64 a, u64 b, u64 c, u64 d, u64 e, u64 f);
s64 rkf_testmod_multi_test7(u64 a, s8 b, u16 c, s32 d, void *e, s16 f, s64 g);
u64 rkf_testmod_multi_test11(u64 a, s8 b, u16 c, s32 d, void *e, s16 f, s64 g,
			     u8 h, s32 i, u64 j, s64 k);
u64 rkf_testmod_multi_test12(u64 a, s8 b, u16 c, s32 d, void *e, s16 f, s64 g,
			     u8 h, s32 i, u64 j, s64 k, u64 l);

#endif /* !__ASSEMBLY__ */
#endif /* _RKF_H */
