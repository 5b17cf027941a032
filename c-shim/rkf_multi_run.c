// SPDX-License-Identifier: GPL-2.0
/*
 * rkf_multi's hot path: what programs are verified against, and what the trampolines
 * call to run them.  It must be C: the program run (__bpf_prog_run()'s), the run context,
 * the recursion guard and preemption control are inline, and the template needs BTF.
 * The table it reads is built and owned by Rust (rust/multi/table.rs), which publishes
 * it here.
 */

#include <linux/bpf.h>
#include <linux/btf.h>
#include <linux/btf_ids.h>
#include <linux/filter.h>
#include <linux/hash.h>
#include <linux/rcupdate.h>
#include <linux/srcu.h>
#include <linux/rcupdate_trace.h>
#include <linux/wait_bit.h>

#include "rkf.h"

/* ctx[i] is at rbp + RKF_MULTI_FRAME_CTX + 8 * i: the slots the C below indexes. */
static_assert(RKF_MULTI_FRAME_CTX - RKF_MULTI_FRAME_NR_ARGS == 8);	/* ctx[-1] */
static_assert(RKF_MULTI_FRAME_CTX - RKF_MULTI_FRAME_FUNC_IP == 16);	/* ctx[-2] */
static_assert(RKF_MULTI_FRAME_RET - RKF_MULTI_FRAME_CTX == 8 * RKF_MULTI_MAX_ARGS);
static_assert(RKF_MULTI_MAX_ARGS <= U8_MAX);	/* struct rkf_multi_func's @nr_args, @ctx_args */
static_assert(sizeof(struct rkf_multi_func) == 24);	/* one per traced function */
static_assert(sizeof(struct rkf_multi_prog) == RKF_MULTI_SLOT_SIZE);
static_assert(RKF_MULTI_FRAME_FIRST_SLOT == RKF_MULTI_FRAME_RET);
static_assert(RKF_MULTI_MCOUNT_INSN_SIZE == MCOUNT_INSN_SIZE);
#define RKF_MULTI_CTX_RET	RKF_MULTI_MAX_ARGS			/* ctx[12] */
#define RKF_MULTI_CTX_RET6	RKF_MULTI_REG_ARGS			/* ctx[6] */
/* The seventh argument, where the traced function's caller passed it. */
#define RKF_MULTI_STACK_ARGS(ctx)	\
	((const u64 *)((unsigned long)(ctx) - RKF_MULTI_FRAME_CTX + RKF_MULTI_FRAME_STACK_ARGS))

/**
 * rkf_multi_tmpl6() - what rkf_multi programs are loaded against
 * @a0: the first argument of the traced function, as a u64
 * @a1: the second
 * @a2: the third
 * @a3: the fourth
 * @a4: the fifth
 * @a5: the sixth
 *
 * SEC("fentry/rkf_multi_tmpl6"), SEC("fexit/rkf_multi_tmpl6") or
 * SEC("fsession/rkf_multi_tmpl6"), or their sleepable "fentry.s/", "fexit.s/" and
 * "fsession.s/" forms: the program reads the traced function's arguments as six u64
 * (and, in fexit and fsession, its return value) through ctx, which is the trampoline's
 * frame.
 * Never called, never traced.
 *
 * Return: 0.
 */
noinline notrace u64 rkf_multi_tmpl6(u64 a0, u64 a1, u64 a2, u64 a3, u64 a4, u64 a5)
{
	barrier();
	return 0;
}

/**
 * rkf_multi_tmpl12() - what rkf_multi programs for functions of up to 12 arguments are
 * loaded against
 * @a0: the first argument of the traced function, as a u64
 * @a1: the second
 * @a2: the third
 * @a3: the fourth
 * @a4: the fifth
 * @a5: the sixth
 * @a6: the seventh, the first the caller passes on the stack
 * @a7: the eighth
 * @a8: the ninth
 * @a9: the tenth
 * @a10: the eleventh
 * @a11: the twelfth
 *
 * As rkf_multi_tmpl6(), with the SEC() names of rkf_multi_tmpl12: the program reads
 * twelve u64 arguments (0 past the traced function's own, beyond the sixth, but on exit
 * the return value at ctx[6] below six arguments) and, in
 * fexit and fsession, the return value through bpf_get_func_ret() (or the u64 after
 * the last argument: ctx[12] is past what the verifier lets a program read).  Never
 * called, never traced.
 *
 * Return: 0.
 */
noinline notrace u64 rkf_multi_tmpl12(u64 a0, u64 a1, u64 a2, u64 a3, u64 a4, u64 a5,
				      u64 a6, u64 a7, u64 a8, u64 a9, u64 a10, u64 a11)
{
	barrier();
	return 0;
}

/**
 * rkf_multi_anchor() - the site that keeps rkf_multi's ftrace_ops registered
 *
 * Hooked to the shared trampoline before the first site of the first link, and unhooked
 * when the module unloads (rust/multi/ftrace.rs), so that unhooking a link's last site
 * does not unregister the ops: ftrace_shutdown() waits for an RCU tasks rude and an RCU
 * tasks grace period for an ops outside the core kernel's data, in every detach of the
 * last link.  Traceable, for its ftrace site; never called.
 */
noinline void rkf_multi_anchor(void)
{
	barrier();
}

/*
 * The verifier lets a tracing program be sleepable only on a function that may sleep
 * (btf_id_allow_sleepable() in kernel/bpf/verifier.c): one on the error injection list,
 * or in an fmodret set with KF_SLEEPABLE.  The templates are the latter; which functions a
 * sleepable program may then trace is rkf_multi's check at attach time, as upstream's
 * tracing_multi checks its targets at attach time.  The set also makes the template a
 * target the verifier takes for fmod_ret programs; attaching one fails, as the template
 * is notrace.
 */
BTF_SET8_START(rkf_multi_fmodret_ids)
BTF_ID_FLAGS(func, rkf_multi_tmpl6, KF_SLEEPABLE)
BTF_ID_FLAGS(func, rkf_multi_tmpl12, KF_SLEEPABLE)
BTF_SET8_END(rkf_multi_fmodret_ids)

const struct btf_kfunc_id_set rkf_multi_fmodret_set = {
	.owner = THIS_MODULE,
	.set = &rkf_multi_fmodret_ids,
};

/* The traced functions; NULL when there are none.  Written under the registry's lock. */
static const struct rkf_multi_table __rcu *rkf_multi_table;

/*
 * Shared-trampoline frames that may sleep, fexit calls and sleepable program runs: the
 * frame is on their stacks until they return, and RCU tasks takes a sleeping task for
 * one that left the trampoline.
 */
static atomic_long_t rkf_multi_frames = ATOMIC_LONG_INIT(0);
static bool rkf_multi_unloading;

/* The return address into @f, whose table keeps its low 32 bits. */
static __always_inline unsigned long rkf_multi_ret_ip(const struct rkf_multi_func *f)
{
	return RKF_MULTI_TEXT_HIGH | f->ret_ip;
}

/*
 * The binary search of rkf_core::multi::lookup(): @t's function at @ret_ip, or NULL.  Out
 * of line: only a function the index has not got comes here (rkf_multi_lookup()).  The
 * functions are sorted by their return addresses, whose high 32 bits are all the same.
 */
static noinline notrace __no_stack_protector const struct rkf_multi_func *
rkf_multi_search(const struct rkf_multi_table *t, unsigned long ret_ip)
{
	u32 lo = 0, hi = t->nr_funcs, mid;

	while (lo < hi) {
		mid = lo + (hi - lo) / 2;
		if (rkf_multi_ret_ip(&t->funcs[mid]) < ret_ip)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo < t->nr_funcs && rkf_multi_ret_ip(&t->funcs[lo]) == ret_ip)
		return &t->funcs[lo];
	return NULL;
}

/*
 * rkf_core::multi::lookup(), which the host tests check against a linear search.  The
 * index holds the functions that take the shared trampoline in @t (rust/multi/table.rs);
 * the others are found by a binary search of @t's functions.  A function with a
 * generated trampoline comes here only while its site moves between trampolines, or on
 * the way out of a call that entered the shared trampoline before its site moved; a
 * function of no table (a site hooked before its table is published, or not unhooked yet
 * after a detach published the table without it, or left hooked by an undo that failed)
 * is searched for and not found.  The index always has an empty bucket
 * (rkf_core::multi::index_bits()); the probes are bounded all the same.
 */
static __always_inline const struct rkf_multi_func *
rkf_multi_lookup(const struct rkf_multi_table *t, unsigned long ret_ip)
{
	u32 mask, b, pos, n;

	if (!t)
		return NULL;
	mask = (1U << t->bits) - 1;
	b = hash_64_generic(ret_ip, t->bits);
	for (n = 0; n <= mask; n++, b = (b + 1) & mask) {
		pos = t->index[b];
		if (!pos)
			break;
		if (rkf_multi_ret_ip(&t->funcs[pos - 1]) == ret_ip)
			return &t->funcs[pos - 1];
	}
	return rkf_multi_search(t, ret_ip);
}

/* The index is built in Rust with the 64-bit generic hash_64(). */
static_assert(BITS_PER_LONG == 64);

/*
 * What programs run under: RCU, and no migration, as rcu_read_lock_dont_migrate() gives
 * a BPF trampoline.  That disables migration only with PREEMPT_RCU (elsewhere
 * rcu_read_lock() disables preemption), and vmlinux inlines migrate_disable() and
 * migrate_enable(), but a module calls them out of line (include/linux/sched.h: the
 * inline ones need runqueues): about 20 instructions a program, a fifth of a single
 * fentry's whole cost on the distro kernel.  So off PREEMPT_RT, preemption is disabled
 * instead, inline, as rcu_read_lock() does without PREEMPT_RCU and as kprobe programs
 * run: a non-sleepable program needs no more (it then cannot be preempted either, as a
 * kprobe program cannot).  The _notrace variants stay inline with DEBUG_PREEMPT too.
 * PREEMPT_RT keeps migrate_disable(), as there a program may take spinlock_t locks,
 * which sleep.
 */
static __always_inline void rkf_multi_run_lock(void)
{
	if (IS_ENABLED(CONFIG_PREEMPT_RT)) {
		rcu_read_lock_dont_migrate();
	} else {
		preempt_disable_notrace();
		rcu_read_lock();
	}
}

static __always_inline void rkf_multi_run_unlock(void)
{
	if (IS_ENABLED(CONFIG_PREEMPT_RT)) {
		rcu_read_unlock_migrate();
	} else {
		rcu_read_unlock();
		preempt_enable_notrace();
	}
}

/*
 * bpf_prog_run() (include/linux/filter.h) without its cant_migrate(), as a BPF
 * trampoline calls a program: with CONFIG_DEBUG_ATOMIC_SLEEP that calls the traceable
 * __cant_migrate(), and a link on it would then count every other link's runs.  The
 * caller holds rkf_multi_run_lock(), which is what cant_migrate() checks.
 */
static __always_inline void rkf_multi_prog_run(const struct bpf_prog *prog, u64 *ctx)
{
	if (static_branch_unlikely(&bpf_stats_enabled_key)) {
		struct bpf_prog_stats *stats;
		u64 duration, start = sched_clock();
		unsigned long flags;

		prog->bpf_func(ctx, prog->insnsi);
		duration = sched_clock() - start;
		if (likely(prog->stats)) {
			stats = this_cpu_ptr(prog->stats);
			flags = u64_stats_update_begin_irqsave(&stats->syncp);
			u64_stats_inc(&stats->cnt);
			u64_stats_add(&stats->nsecs, duration);
			u64_stats_update_end_irqrestore(&stats->syncp, flags);
		}
	} else {
		prog->bpf_func(ctx, prog->insnsi);
	}
}

/*
 * bpf_prog_inc_misses_counter() of kernel/bpf/syscall.c (not exported): a run the
 * recursion guard skipped, in the program's own statistics (bpf_prog_info's
 * recursion_misses), as the kernel's trampolines count it.
 */
static __always_inline void rkf_multi_prog_missed(const struct bpf_prog *prog)
{
	struct bpf_prog_stats *stats;
	unsigned long flags;

	if (unlikely(!prog->stats))
		return;
	stats = this_cpu_ptr(prog->stats);
	flags = u64_stats_update_begin_irqsave(&stats->syncp);
	u64_stats_inc(&stats->misses);
	u64_stats_update_end_irqrestore(&stats->syncp, flags);
}

/*
 * __bpf_prog_enter_recur() and __bpf_prog_exit_recur() of kernel/bpf/trampoline.c, or
 * their _sleepable_ forms, for the program @prog with @cookie, counting in @stats if
 * not NULL: the caller holds rkf_multi_run_lock(), or RCU tasks trace.  A run the
 * recursion guard skips counts in the program's statistics (and in @stats).
 *
 * What the trampolines call to run programs is notrace and __no_stack_protector: never
 * traced, and without a stack canary.  The only local of theirs whose address is taken
 * is the run context below (struct bpf_tramp_run_ctx), which the BPF run-context helpers
 * read and write field by field; a BPF trampoline keeps the same struct in its frame
 * with no canary either.  On a kernel with CONFIG_STACKPROTECTOR_STRONG (Debian's) a
 * canary costs six instructions a run.
 */
static __always_inline void rkf_multi_run_with(struct bpf_prog *prog, u64 *ctx, u64 cookie,
					       struct rkf_multi_stats *stats)
{
	struct bpf_tramp_run_ctx run_ctx = { .bpf_cookie = cookie };

	run_ctx.saved_run_ctx = bpf_set_run_ctx(&run_ctx.run_ctx);
	if (likely(bpf_prog_get_recursion_context(prog))) {
		rkf_multi_prog_run(prog, ctx);
		if (stats)
			atomic64_inc(&stats->hits);
	} else {
		if (stats)
			atomic64_inc(&stats->misses);
		rkf_multi_prog_missed(prog);
	}
	bpf_prog_put_recursion_context(prog);
	bpf_reset_run_ctx(run_ctx.saved_run_ctx);
}

/*
 * rkf_multi_run_with() for the program of slot @p, whose link is @link (@p->link, which
 * the caller read once it saw the link's flag clear, or took the slot from the published
 * table): with the slot's cookie, or, where the link counts (its @counted), with the
 * counters @p->data then points to and their cookie.  Each case is its own copy of the
 * run, so that a link that does not count pays one test of the flag, not one per
 * counter.
 */
static __always_inline void rkf_multi_run(const struct rkf_multi_prog *p,
					  const struct rkf_multi_link_state *link, u64 *ctx)
{
	struct rkf_multi_stats *stats;

	if (likely(!link->counted)) {
		rkf_multi_run_with(link->prog, ctx, p->data, NULL);
		return;
	}
	stats = (struct rkf_multi_stats *)(unsigned long)p->data;
	rkf_multi_run_with(link->prog, ctx, stats->cookie, stats);
}

/*
 * Only the module's unloading waits, and then nothing is traced any more: wake_up_var()
 * calls functions a link could trace, which would recurse through here.
 */
static __always_inline void rkf_multi_frame_done(void)
{
	if (atomic_long_dec_and_test(&rkf_multi_frames) && READ_ONCE(rkf_multi_unloading))
		wake_up_var(&rkf_multi_frames);
}

/*
 * One program of a function with sleepable programs, under RCU tasks trace: a sleepable
 * one as __bpf_prog_enter_sleepable_recur() runs it, without migration, the others as
 * always.  Its might_fault() is left out: with DEBUG_ATOMIC_SLEEP that calls the
 * traceable __might_fault(), and the run path calls nothing traceable that is not denied
 * (rkf_core::multi::DENY); what faults in a program, bpf_copy_from_user(), checks it.
 * A link detached while the call slept in an earlier program runs no more; it is still
 * there, as every link that shared a function with a sleepable program is freed after
 * an RCU tasks trace grace period (rust/multi/registry.rs).
 */
static notrace __no_stack_protector void
rkf_multi_run_any(const struct rkf_multi_prog *p, u64 *ctx)
{
	const struct rkf_multi_link_state *link = p->link;
	struct bpf_prog *prog;

	if (unlikely(READ_ONCE(link->detached)))
		return;
	prog = link->prog;
	if (prog->sleepable) {
		migrate_disable();
		rkf_multi_run(p, link, ctx);
		migrate_enable();
	} else {
		rkf_multi_run_lock();
		rkf_multi_run(p, link, ctx);
		rkf_multi_run_unlock();
	}
}

/*
 * Session programs keep a cookie each in the shared trampoline's frame, from the entry
 * run to the exit run of a call, and the id of the link it belongs to (c-shim/rkf.h):
 * the exit finds a session's cookie by its link, in whatever table is published then.
 */
#define RKF_MULTI_COOKIE(ctx, k)	((ctx)[-3 - (long)(k)])
#define RKF_MULTI_SESSION_LINK(ctx, k)	((ctx)[-3 - RKF_MULTI_MAX_SESSIONS - (long)(k)])
#define RKF_MULTI_NR_SESSIONS(ctx)	((ctx)[-3 - 2 * RKF_MULTI_MAX_SESSIONS])
static_assert(RKF_MULTI_FRAME_CTX - RKF_MULTI_FRAME_COOKIES == 8 * 3);	/* ctx[-3] */
static_assert(RKF_MULTI_FRAME_COOKIES - RKF_MULTI_FRAME_SESSION_LINKS == 8 * 8);
static_assert(RKF_MULTI_FRAME_SESSION_LINKS - RKF_MULTI_FRAME_NR_SESSIONS == 8 * 8);
static_assert(RKF_MULTI_FRAME_NR_SESSIONS - RKF_MULTI_FRAME_FEXIT == 8);
static_assert(RKF_MULTI_SHARED_FRAME_SIZE + RKF_MULTI_FRAME_FEXIT == 8);
static_assert(RKF_MULTI_MAX_SESSIONS == 8);
static_assert(RKF_MULTI_COOKIE_INDEX_SHIFT == BPF_TRAMP_COOKIE_INDEX_SHIFT);
static_assert(RKF_MULTI_IS_RETURN_SHIFT == BPF_TRAMP_IS_RETURN_SHIFT);
/* A cookie's index (3 + k) fits the 8 bits the verifier reads it from. */
static_assert(3 + RKF_MULTI_MAX_SESSIONS <= 0xff);

/*
 * ctx[-1] for session program @k: the argument count, the cookie's index as
 * bpf_session_cookie() reads it, and on exit the is-return bit, as the JIT's invoke_bpf()
 * writes them for fsession programs.
 */
static __always_inline u64 rkf_multi_session_meta(const struct rkf_multi_func *f, u32 k, bool exit)
{
	u64 meta = f->nr_args | (u64)(3 + k) << BPF_TRAMP_COOKIE_INDEX_SHIFT;

	return exit ? meta | BIT_ULL(BPF_TRAMP_IS_RETURN_SHIFT) : meta;
}

/* One program; @any: as rkf_multi_run_any(), under RCU tasks trace only. */
static __always_inline void rkf_multi_run_one(const struct rkf_multi_prog *p, u64 *ctx,
					      bool any)
{
	if (any)
		rkf_multi_run_any(p, ctx);
	else
		rkf_multi_run(p, p->link, ctx);
}

/*
 * The entry runs of the session programs @s of function @f: each with a zeroed cookie of
 * its own.  On entry a session reads 0 as the return value, in ctx[6] (below seven
 * arguments) and in ctx[nr_args] where bpf_get_func_ret() reads it, as a BPF
 * trampoline zeroes its return value slot; ctx[nr_args] is an argument register's slot
 * below six arguments, and gets its value back for the call.  Out of line: functions
 * without sessions do not pay for it.
 */
static noinline notrace __no_stack_protector void
rkf_multi_sessions_enter(const struct rkf_multi_func *f, const struct rkf_multi_prog *s, u64 *ctx,
			 bool any)
{
	u32 i, n = min_t(u32, f->nr_session, RKF_MULTI_MAX_SESSIONS);
	u64 reg;

	for (i = 0; i < n; i++) {
		RKF_MULTI_COOKIE(ctx, i) = 0;
		RKF_MULTI_SESSION_LINK(ctx, i) = s[i].link->id;
	}
	RKF_MULTI_NR_SESSIONS(ctx) = n;
	reg = ctx[f->nr_args];
	ctx[f->nr_args] = 0;
	for (i = 0; i < n; i++) {
		ctx[-1] = rkf_multi_session_meta(f, i, false);
		rkf_multi_run_one(&s[i], ctx, any);
	}
	ctx[-1] = f->nr_args;
	ctx[f->nr_args] = reg;
}

/*
 * The exit runs of the session programs @s of function @f that ran on entry, each with
 * the cookie it had there: a session attached since runs from the next call on.
 */
static noinline notrace __no_stack_protector void
rkf_multi_sessions_exit(const struct rkf_multi_func *f, const struct rkf_multi_prog *s, u64 *ctx,
			bool any)
{
	u32 i, k, entered = min_t(u64, RKF_MULTI_NR_SESSIONS(ctx), RKF_MULTI_MAX_SESSIONS);

	for (i = 0; i < f->nr_session; i++) {
		u64 id = s[i].link->id;

		for (k = 0; k < entered; k++)
			if (RKF_MULTI_SESSION_LINK(ctx, k) == id)
				break;
		if (k == entered)
			continue;
		ctx[-1] = rkf_multi_session_meta(f, k, true);
		rkf_multi_run_one(&s[i], ctx, any);
	}
	ctx[-1] = f->nr_args;
}

/*
 * The entry runs of function @f: its fentry programs, then the entry runs of its session
 * programs.
 */
static __always_inline void rkf_multi_enter(const struct rkf_multi_func *f, u64 *ctx,
					    bool any)
{
	const struct rkf_multi_prog *p = f->progs;
	const u64 *stack = RKF_MULTI_STACK_ARGS(ctx);
	u32 i;

	/*
	 * The slots past the argument registers that the function's programs read: the
	 * arguments the caller passed on the stack, then 0, as the generated trampolines
	 * fill them.  Most functions take six arguments or fewer, to programs that read no
	 * further, and skip this.
	 */
	if (unlikely(f->ctx_args > RKF_MULTI_REG_ARGS))
		for (i = RKF_MULTI_REG_ARGS; i < f->ctx_args; i++)
			ctx[i] = i < f->nr_args ? stack[i - RKF_MULTI_REG_ARGS] : 0;
	ctx[-1] = f->nr_args;
	ctx[-2] = rkf_multi_ret_ip(f) - RKF_MULTI_MCOUNT_INSN_SIZE - f->site_offset;
	for (i = 0; i < f->nr_fentry; i++)
		rkf_multi_run_one(&p[i], ctx, any);
	if (unlikely(f->nr_session))
		rkf_multi_sessions_enter(f, &p[f->nr_fentry], ctx, any);
	else
		RKF_MULTI_NR_SESSIONS(ctx) = 0;
}

/*
 * The exit runs of function @f, the return value in place: those of its session
 * programs, then its fexit programs.
 */
static __always_inline void rkf_multi_exit(const struct rkf_multi_func *f, u64 *ctx,
					   bool any)
{
	const struct rkf_multi_prog *p = f->progs;
	u32 i = max_t(u32, f->nr_args + 1, RKF_MULTI_CTX_RET6 + 1);

	/*
	 * The slots past the arguments and the return value read 0, also for a program
	 * attached while the call was in the function, which may read further than the
	 * ones of the table the entry saw, which filled ctx only as far as they read.
	 */
	for (; unlikely(i < f->ctx_args); i++)
		ctx[i] = 0;
	if (unlikely(f->nr_session))
		rkf_multi_sessions_exit(f, &p[f->nr_fentry], ctx, any);
	for (i = f->nr_fentry + f->nr_session; i < f->nr_progs; i++)
		rkf_multi_run_one(&p[i], ctx, any);
}

/*
 * The run of a function with sleepable programs, for rkf_multi_shared_fentry() (@entry:
 * its entry runs) and rkf_multi_shared_fexit() (its exit runs), with the frame counted
 * in flight (@in_flight: it already is, since the function's entry).  The function is
 * looked up again, under RCU and RCU tasks trace both: the table may have changed since
 * the caller's lookup.  Only a table in which the function still has a sleepable program
 * is freed after an RCU tasks trace grace period (rust/multi/registry.rs), so only then
 * may RCU be dropped for the run; otherwise the programs run under RCU, as in the
 * caller.  Returns whether the trampoline must come back for exit runs; the frame then
 * stays in flight.
 */
static noinline notrace __no_stack_protector bool
rkf_multi_run_sleepable(u64 *ctx, unsigned long ret_ip, bool entry, bool in_flight)
{
	const struct rkf_multi_table *t;
	const struct rkf_multi_func *f;
	bool fexit = false;

	if (!in_flight)
		atomic_long_inc(&rkf_multi_frames);
	rcu_read_lock_trace();
	rkf_multi_run_lock();
	t = rcu_dereference(rkf_multi_table);
	f = rkf_multi_lookup(t, ret_ip);
	if (f && entry)
		fexit = f->nr_progs > f->nr_fentry;
	if (f && !f->sleepable) {
		if (entry)
			rkf_multi_enter(f, ctx, false);
		else
			rkf_multi_exit(f, ctx, false);
		rkf_multi_run_unlock();
	} else {
		rkf_multi_run_unlock();
		if (f && entry)
			rkf_multi_enter(f, ctx, true);
		else if (f)
			rkf_multi_exit(f, ctx, true);
	}
	rcu_read_unlock_trace();
	if (!fexit)
		rkf_multi_frame_done();
	return fexit;
}

/**
 * rkf_multi_shared_fentry() - the shared trampoline's call on function entry
 * @ctx:    the frame: ctx[0..5] the argument registers, ctx[12] the return value slot
 *          (zeroed); ctx[6..11] as far as the function's programs read, the stack
 *          arguments and 0 past them, ctx[-1] the argument count and ctx[-2] the
 *          function's address (set here), the session cookies below (c-shim/rkf.h)
 * @ret_ip: the return address into the traced function
 *
 * Runs the fentry programs of the function in attach order, then the entry runs of its
 * session programs.
 *
 * Return: 1 if the trampoline must call the function and come back for exit runs (a
 * frame is then in flight until rkf_multi_shared_fexit()), 0 otherwise.
 */
notrace __no_stack_protector u64 rkf_multi_shared_fentry(u64 *ctx, unsigned long ret_ip)
{
	const struct rkf_multi_table *t;
	const struct rkf_multi_func *f;
	u64 fexit = 0;

	rkf_multi_run_lock();
	/* Once: the function and its programs must come from the same table. */
	t = rcu_dereference(rkf_multi_table);
	f = rkf_multi_lookup(t, ret_ip);
	if (f && unlikely(f->sleepable)) {
		rkf_multi_run_unlock();
		return rkf_multi_run_sleepable(ctx, ret_ip, true, false);
	}
	if (f) {
		rkf_multi_enter(f, ctx, false);
		if (f->nr_progs > f->nr_fentry) {
			atomic_long_inc(&rkf_multi_frames);
			fexit = 1;
		}
	}
	rkf_multi_run_unlock();
	return fexit;
}

/**
 * rkf_multi_shared_fexit() - the shared trampoline's call after the function returned
 * @ctx:    as for rkf_multi_shared_fentry(); ctx[12] holds the return value
 * @ret_ip: as for rkf_multi_shared_fentry()
 *
 * Runs the exit runs the function has now: those of its session programs that ran on
 * entry, then its fexit programs (a link detached meanwhile runs no more).
 */
notrace __no_stack_protector void rkf_multi_shared_fexit(u64 *ctx, unsigned long ret_ip)
{
	const struct rkf_multi_table *t;
	const struct rkf_multi_func *f;

	/*
	 * bpf_get_func_ret() reads the slot after the last argument, rkf_multi_tmpl6()'s
	 * programs ctx[6] (a function of more than six arguments has none).
	 */
	ctx[ctx[-1] & 0xff] = ctx[RKF_MULTI_CTX_RET];
	if ((ctx[-1] & 0xff) < RKF_MULTI_REG_ARGS)
		ctx[RKF_MULTI_CTX_RET6] = ctx[RKF_MULTI_CTX_RET];
	rkf_multi_run_lock();
	t = rcu_dereference(rkf_multi_table);
	f = rkf_multi_lookup(t, ret_ip);
	if (f && unlikely(f->sleepable)) {
		rkf_multi_run_unlock();
		rkf_multi_run_sleepable(ctx, ret_ip, false, true);
		return;
	}
	if (f)
		rkf_multi_exit(f, ctx, false);
	rkf_multi_run_unlock();
	rkf_multi_frame_done();
}

/**
 * rkf_multi_run_prog() - run one program of a function, on entry or on exit, for a
 * generated trampoline
 * @p:   the program's slot in the trampoline's image: its link (program, id and flags),
 *       and its cookie or, where the link counts, its counters (@data)
 * @ctx: the trampoline's frame, as for rkf_multi_shared_fentry(), with the return value
 *       on exit
 *
 * The generated trampolines (rkf_core::tramp) call this once per program, as a BPF
 * trampoline calls __bpf_prog_enter_recur() and __bpf_prog_exit_recur().  A link
 * detached since the image was made runs no more.  On exit, the call may have slept
 * inside the traced function for any time, and on entry a task may have been preempted
 * in the image's code while its function moved to another trampoline: the link's program
 * and counters may be gone, its state (struct rkf_multi_link_state, which names the
 * program) is not, as the image keeps it.  On entry, the image may run on sites that an
 * attach that failed could not unhook (rust/multi/registry.rs), with slots of a link
 * that is not attached (its program kept, leaked with the image).  The flag is read
 * under RCU: a link is marked detached before the table without it is published, and
 * freed only after an RCU grace period after that, so a run that saw it attached ends
 * before its program and counters go.
 */
notrace __no_stack_protector void rkf_multi_run_prog(const struct rkf_multi_prog *p, u64 *ctx)
{
	const struct rkf_multi_link_state *link = p->link;

	rkf_multi_run_lock();
	if (likely(!READ_ONCE(link->detached)))
		rkf_multi_run(p, link, ctx);
	rkf_multi_run_unlock();
}

/**
 * rkf_multi_run_sleepable_slot() - run one program of a function with sleepable programs,
 * on entry or on exit, for a generated trampoline
 * @p:   the program's slot in the trampoline's image: its link (program, id and flags),
 *       and its cookie or, where the link counts, its counters (@data)
 * @ctx: the trampoline's frame
 *
 * The trampoline counts the call in flight, from entry to return or, without an exit,
 * around its programs, so its image and slots outlive a task asleep here.  The programs
 * are run as the shared trampoline runs those of a function with sleepable programs,
 * under RCU tasks trace (rkf_multi_run_any()): a link detached meanwhile runs no more,
 * and is still there to be read, as every link of the function was marked beside a
 * sleepable program when the image was generated for it, and is freed after an RCU
 * tasks trace grace period (rust/multi/registry.rs).  A trampoline without an exit runs
 * its sleepable programs itself, as a BPF trampoline does (rkf_multi_prog_code()), and
 * its other programs through here.
 */
notrace __no_stack_protector void
rkf_multi_run_sleepable_slot(const struct rkf_multi_prog *p, u64 *ctx)
{
	rcu_read_lock_trace();
	rkf_multi_run_any(p, ctx);
	rcu_read_unlock_trace();
}

/**
 * rkf_multi_publish() - make @table the one the shared trampoline reads
 * @table: the new table, or NULL
 *
 * The caller serialises publications and frees the old table only after
 * rkf_multi_sync().
 *
 * Return: the table it replaces.
 */
const struct rkf_multi_table *rkf_multi_publish(const struct rkf_multi_table *table)
{
	return unrcu_pointer(xchg(&rkf_multi_table, RCU_INITIALIZER(table)));
}

/**
 * rkf_multi_wait_frames() - wait until no shared-trampoline frame is in flight
 *
 * For the module's unloading.  With no function hooked any more (but rkf_multi_anchor(),
 * which nothing calls), no new call enters the trampoline after synchronize_rcu_tasks()
 * (which also covers tasks preempted inside it); tasks still inside a traced function or
 * a sleepable program return through it, and are waited for, and then for the last
 * instructions of their way out.
 */
void rkf_multi_wait_frames(void)
{
	WRITE_ONCE(rkf_multi_unloading, true);
	/* Orders the flag before the count read by wait_var_event(). */
	smp_mb();
	synchronize_rcu_tasks();
	wait_var_event(&rkf_multi_frames, !atomic_long_read(&rkf_multi_frames));
	/*
	 * A task that counted its frame done may have been preempted on its way out of the
	 * trampoline's text: no task is inside it after this.
	 */
	synchronize_rcu_tasks();
}
