/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * rkf.bpf.h: the BPF side of the rkf kfuncs.
 *
 * Include after vmlinux.h and <bpf/bpf_helpers.h>.  Programs that call rkf kfuncs must be
 * GPL-compatible and need CAP_BPF and CAP_PERFMON to load.
 */
#ifndef __RKF_BPF_H
#define __RKF_BPF_H

#ifndef __ksym
#error "include <bpf/bpf_helpers.h> before rkf.bpf.h"
#endif

/* ---- rkf_percpu --------------------------------------------------------------------
 *
 * bpf_rkf_per_cpu_ptr() and bpf_rkf_this_cpu_ptr() return the address of a cpu's copy of a
 * per-cpu variable, or NULL (cpu >= nr_cpu_ids, cpu not possible, or a NULL pointer such as
 * an unresolved weak __ksym).  To the verifier the result is a scalar: it cannot be
 * dereferenced as it is.  Use the macros below, which turn it into a typed, read-only,
 * fault-safe pointer and make the NULL check mandatory.  They take the arguments of
 * bpf_per_cpu_ptr() and bpf_this_cpu_ptr(), so a program written against the helpers
 * needs only the names changed:
 *
 *	extern const struct rq runqueues __ksym;
 *
 *	const struct rq *rq = rkf_per_cpu_ptr(&runqueues, cpu);
 *	if (rq)
 *		nr = rq->nr_running;
 *
 * rkf_this_cpu_ptr(), like bpf_this_cpu_ptr(), needs no NULL check.  Loads through the
 * pointers are BPF_PROBE_MEM loads: a bad address reads as zero instead of oopsing, and
 * writes through them are rejected at load time.
 */

extern void *bpf_rkf_per_cpu_ptr(const void *ptr__ign, __u32 cpu) __ksym __weak;
extern void *bpf_rkf_this_cpu_ptr(const void *ptr__ign) __ksym __weak;

extern void *bpf_rdonly_cast(const void *obj__ign, __u32 btf_id__k) __ksym __weak;

/*
 * Returns @p as untrusted read-only memory (any offset, fault-safe loads), or NULL.
 *
 * Why the NULL branch: a pointer from bpf_rdonly_cast() is never "maybe NULL" to the
 * verifier, so without it a missing check would go unnoticed and read zeros.  Returning
 * the kfunc's scalar on the NULL path makes a dereference there "invalid mem access
 * 'scalar'", so a program that forgets the check fails to load.  barrier_var() keeps clang
 * from proving the value NULL and deleting that path as undefined behaviour.
 */
static __always_inline const void *__rkf_untrusted(void *p)
{
	if (!p) {
		barrier_var(p);
		return p;
	}
	return bpf_rdonly_cast(p, 0);
}

/* Typed, fault-safe pointer to @cpu's copy of the per-cpu variable at @ptr, or NULL. */
#define rkf_per_cpu_ptr(ptr, cpu)					\
	((const typeof(*(ptr)) *)__rkf_untrusted(bpf_rkf_per_cpu_ptr((ptr), (cpu))))

/*
 * Typed, fault-safe pointer to the current cpu's copy of the per-cpu variable at @ptr.
 * As bpf_this_cpu_ptr(), it needs no NULL check: the current cpu always has a copy, so
 * the result is NULL only for an unresolved weak __ksym, and loads through it are
 * fault-safe (a NULL reads as zero).
 */
#define rkf_this_cpu_ptr(ptr)						\
	((const typeof(*(ptr)) *)bpf_rdonly_cast(bpf_rkf_this_cpu_ptr(ptr), 0))

/*
 * For a per-cpu struct of vmlinux only: a pointer the verifier types as that struct
 * (PTR_TO_BTF_ID | PTR_UNTRUSTED), through bpf_rdonly_cast() with the type's vmlinux BTF
 * id.  Module types have no vmlinux BTF id; use rkf_per_cpu_ptr() for them.
 */
#define rkf_per_cpu_btf_ptr(ptr, cpu) ({					\
	void *__p = bpf_rkf_per_cpu_ptr((ptr), (cpu));				\
	if (__p)								\
		__p = bpf_rdonly_cast(__p, bpf_core_type_id_kernel(typeof(*(ptr)))); \
	else									\
		barrier_var(__p);						\
	(const typeof(*(ptr)) *)__p;						\
})

/*
 * rkf_percpu's own per-cpu variable (c-shim/rkf.h), for tests and examples: @magic is
 * RKF_PERCPU_PROBE_MAGIC of that header once the module has set the copy up.
 */
struct rkf_percpu_probe {
	__u32 cpu;
	__u32 magic;
	__u64 self;
} __attribute__((preserve_access_index));

/* ---- rkf_stack ----------------------------------------------------------------------
 *
 * bpf_get_stack() as kfuncs: the same flags (skip in BPF_F_SKIP_FIELD_MASK,
 * BPF_F_USER_STACK, BPF_F_USER_BUILD_ID), the same buffer layout (u64 ips, or
 * struct bpf_stack_build_id), the same return value and errnos, the tail zeroed.
 *
 *	program type                          kfunc                        stack starts at
 *	fentry/fexit, tp_btf, raw_tp,         bpf_rkf_get_stack()          the program
 *	tracepoint, syscall
 *	kprobe                                bpf_rkf_get_stack_kprobe()   the probed instruction
 *	perf_event                            bpf_rkf_get_stack_pe()       the sampled regs, or the
 *	                                                                   sample's callchain
 *
 * For fentry/fexit, tp_btf and raw_tp programs this is where the helper's stack starts
 * too.  For tracepoint programs the helper starts at the tracepoint, 4 frames further
 * down (the program, trace_call_bpf(), perf_trace_run_bpf_submit(),
 * perf_trace_<event>()): add 4 to the skip count for the helper's stack.  These three
 * kfuncs need CAP_PERFMON-loaded programs only for uninitialised stack buffers;
 * initialise the buffer otherwise.
 *
 * In a sleepable program (uprobe.s, fentry.s, iter.s, lsm.s, syscall) the kfuncs parse
 * build ids where a page fault is allowed, as bpf_get_stack_sleepable() and
 * bpf_get_task_stack_sleepable() do: a mapped ELF file whose build-id note is not in the
 * page cache still gives its build id.  They learn that the program is sleepable from
 * its aux, which the verifier passes them (KF_IMPLICIT_ARGS; it is not an argument
 * here).  Inside bpf_rcu_read_lock(), bpf_preempt_disable() or bpf_local_irq_save(),
 * where the program may not sleep, they parse without faults, as non-sleepable programs
 * do.
 */
extern long bpf_rkf_get_stack(void *buf, __u32 buf__sz, __u64 flags) __ksym __weak;
extern long bpf_rkf_get_stack_kprobe(struct pt_regs *ctx, void *buf, __u32 buf__sz,
				     __u64 flags) __ksym __weak;
extern long bpf_rkf_get_stack_pe(struct bpf_perf_event_data *ctx, void *buf, __u32 buf__sz,
				 __u64 flags) __ksym __weak;

/*
 * bpf_get_task_stack() as a kfunc, for every program type above: the stack of @task, a
 * trusted pointer (bpf_get_current_task_btf(), bpf_task_from_pid(), an iter/task
 * program's ctx->task, a tp_btf argument) or an RCU-protected one (task->real_parent
 * under RCU), not an untrusted one (an fentry argument: acquire it with
 * bpf_task_from_pid()).  Another task's kernel stack is the one it was
 * switched out with; a user stack is the current task's only (another task's:
 * -EOPNOTSUPP; a kernel thread's: -EFAULT), and not in a perf_event program (-EOPNOTSUPP:
 * its walk would overwrite the sample's callchain, which the helper's does; take it with
 * bpf_rkf_get_stack_pe()).  Flags, layout, the zeroed tail and the other errnos are
 * bpf_get_task_stack()'s (the README lists where it differs).  Programs that call it need CAP_PERFMON, as for the helper.
 */
extern long bpf_rkf_get_task_stack(struct task_struct *task, void *buf, __u32 buf__sz,
				   __u64 flags) __ksym __weak;

/*
 * The result of a stack kfunc, bounded for the verifier as it bounds bpf_get_stack()'s:
 * at most @size (and at least -MAX_ERRNO).  The kfuncs never return anything outside,
 * but a kfunc's return value is unbounded to the verifier, which then refuses a second
 * stack written behind the first one in the same buffer (buf + n, size - n): "R2 min value
 * is negative".  The -EFAULT path is never taken.
 */
static __always_inline long __rkf_stack_bounded(long ret, __u32 size)
{
	if (ret < -4095 || ret > (long)size)
		return -14;
	return ret;
}

/*
 * rkf_get_stack(ctx, buf, size, flags): bpf_get_stack() with the helper's arguments and
 * result range, so that a program written against the helper needs only the name
 * changed.  It calls the kfunc for the program type of @ctx, by its C type:
 * bpf_rkf_get_stack_kprobe() for a struct pt_regs * (kprobe programs),
 * bpf_rkf_get_stack_pe() for a struct bpf_perf_event_data * (perf_event programs), and
 * bpf_rkf_get_stack() for any other (the rest, whose @ctx it does not need).
 */
#define rkf_get_stack(ctx, buf, size, flags) ({					\
	__u32 __rkf_sz = (size);						\
	long __rkf_ret = _Generic((ctx),					\
		struct pt_regs * :						\
			bpf_rkf_get_stack_kprobe((struct pt_regs *)(ctx), (buf),	\
						 __rkf_sz, (flags)),		\
		struct bpf_perf_event_data * :					\
			bpf_rkf_get_stack_pe((struct bpf_perf_event_data *)(ctx),	\
					     (buf), __rkf_sz, (flags)),		\
		default :							\
			bpf_rkf_get_stack((buf), __rkf_sz, (flags)));		\
	__rkf_stack_bounded(__rkf_ret, __rkf_sz);				\
})

/* bpf_get_task_stack(task, buf, size, flags), likewise bounded. */
#define rkf_get_task_stack(task, buf, size, flags) ({				\
	__u32 __rkf_sz = (size);						\
	__rkf_stack_bounded(bpf_rkf_get_task_stack((task), (buf), __rkf_sz, (flags)), \
			    __rkf_sz);						\
})

/* ---- rkf_multi ----------------------------------------------------------------------
 *
 * One fentry or fexit program on many functions.  Load the program against the template
 * rkf_multi_tmpl6() of the rkf_multi module, whose six u64 arguments are the traced
 * function's argument registers:
 *
 *	RKF_MULTI_FENTRY
 *	int BPF_PROG(on_entry, u64 a0, u64 a1, u64 a2, u64 a3, u64 a4, u64 a5)
 *
 *	RKF_MULTI_FEXIT
 *	int BPF_PROG(on_exit, u64 a0, u64 a1, u64 a2, u64 a3, u64 a4, u64 a5, u64 ret)
 *
 * then attach it with the rkf library (user/src/multi.rs), never through libbpf's own
 * attach (turn auto-attach off).  bpf_get_func_ip(), bpf_get_func_arg(),
 * bpf_get_func_arg_cnt(), bpf_get_func_ret() and bpf_get_attach_cookie() work as in any
 * fentry/fexit program, for the function actually hit.  Arguments past the function's
 * own count hold whatever the registers held.
 */
#define RKF_MULTI_FENTRY SEC("fentry/rkf_multi_tmpl6")
#define RKF_MULTI_FEXIT SEC("fexit/rkf_multi_tmpl6")

/*
 * Sleepable forms: the program may call bpf_copy_from_user() and other helpers that
 * sleep.  It may trace only functions that may sleep, by the verifier's rule for
 * sleepable fentry/fexit programs (without CONFIG_FUNCTION_ERROR_INJECTION, the syscall
 * wrappers __x64_*; with it, a module's ALLOW_ERROR_INJECTION() functions and vmlinux's
 * syscalls): attaching it to any other fails with EINVAL naming the function.
 */
#define RKF_MULTI_FENTRY_S SEC("fentry.s/rkf_multi_tmpl6")
#define RKF_MULTI_FEXIT_S SEC("fexit.s/rkf_multi_tmpl6")

/*
 * Session programs, as upstream's fsession: one program that runs on entry and on exit
 * of every function of its link.  bpf_session_is_return(ctx) tells the two runs apart,
 * and bpf_session_cookie(ctx) points to a u64 of this call, zeroed before the entry run
 * and read back on the exit run (the verifier inlines both).  On entry the return value
 * (the seventh u64, and bpf_get_func_ret()) reads 0.  A session that attaches while a
 * call is in flight runs on its next call, not on the exit of that one; one that
 * detaches runs no more, not even on the exit of calls it entered.
 *
 *	RKF_MULTI_FSESSION
 *	int BPF_PROG(on_both, u64 a0, u64 a1, u64 a2, u64 a3, u64 a4, u64 a5, u64 ret)
 *	{
 *		__u64 *start = bpf_session_cookie(ctx);
 *
 *		if (!bpf_session_is_return(ctx))
 *			*start = bpf_ktime_get_ns();
 *		else
 *			... bpf_ktime_get_ns() - *start ...
 *		return 0;
 *	}
 *
 * A function has room for RKF_MULTI_MAX_SESSIONS session programs (c-shim/rkf.h);
 * attaching one more fails with E2BIG naming it.
 */
#define RKF_MULTI_FSESSION SEC("fsession/rkf_multi_tmpl6")
#define RKF_MULTI_FSESSION_S SEC("fsession.s/rkf_multi_tmpl6")

/*
 * Functions of up to twelve arguments (MAX_BPF_FUNC_ARGS), the seventh and on passed on
 * the stack: load the program against rkf_multi_tmpl12(), which takes twelve u64, and
 * resolve the functions with rkf::multi::resolve_wide().  On exit the return value is
 * bpf_get_func_ret(), and the u64 right after the function's last argument (the
 * verifier lets a program read twelve u64 of ctx, MAX_BPF_FUNC_ARGS, as for the kernel's
 * own trampolines, so a function of twelve has its return value through the helper
 * only).  Other arguments past the function's own read 0 from the seventh on (but on
 * exit, ctx[6] holds the return value too below six arguments, for programs against
 * rkf_multi_tmpl6()).  A
 * program against rkf_multi_tmpl6() cannot trace a function of more than six arguments
 * (its return value would read the seventh): attaching it fails with EINVAL naming the
 * function.
 *
 *	RKF_MULTI_FEXIT12
 *	int BPF_PROG(on_exit, u64 a0, u64 a1, u64 a2, u64 a3, u64 a4, u64 a5, u64 a6,
 *		     u64 a7, u64 a8, u64 a9, u64 a10, u64 a11)
 *	{
 *		__u64 ret;
 *
 *		bpf_get_func_ret(ctx, &ret);
 *		...
 *	}
 */
#define RKF_MULTI_FENTRY12 SEC("fentry/rkf_multi_tmpl12")
#define RKF_MULTI_FEXIT12 SEC("fexit/rkf_multi_tmpl12")
#define RKF_MULTI_FSESSION12 SEC("fsession/rkf_multi_tmpl12")
#define RKF_MULTI_FENTRY12_S SEC("fentry.s/rkf_multi_tmpl12")
#define RKF_MULTI_FEXIT12_S SEC("fexit.s/rkf_multi_tmpl12")
#define RKF_MULTI_FSESSION12_S SEC("fsession.s/rkf_multi_tmpl12")

extern bool bpf_session_is_return(void *ctx) __ksym __weak;
extern __u64 *bpf_session_cookie(void *ctx) __ksym __weak;

#endif /* __RKF_BPF_H */
