// SPDX-License-Identifier: GPL-2.0
/*
 * rkf_multi selftests: fentry, fexit and session programs on many functions through one
 * link each.
 * Each records, per function (found by bpf_get_func_ip()), what it saw: the arguments
 * through ctx and through bpf_get_func_arg(), the argument count, the cookie, and for
 * fexit the return value both ways.  Four more pairs of programs count hits only, for the
 * tests of overlapping links.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "rkf.bpf.h"

#define MAX_FUNCS 16
#define NR_COUNTERS 4

struct rec {
	__u64 hits;
	__u64 args[6];
	__u64 helper_args[6];
	__u64 nr_args;
	__u64 cookie;
	__u64 ret;
	__u64 helper_ret;
	long arg_err;
	/* What argument 0 points to (8 bytes), where it is a pointer, and the read's error */
	__u64 pointee;
	long pointee_err;
};

/* Inputs: the functions' addresses, as bpf_get_func_ip() returns them. */
__u64 ips[MAX_FUNCS];
/*
 * 0: every task; otherwise only this one's calls (for real vmlinux functions), and with
 * task_only, only its own: not those of an interrupt that arrives while it runs.
 */
__u32 target_pid;
/*
 * Off where every function counted is called in task context only (syscalls,
 * BPF_PROG_TEST_RUN): in_task() reads the preemption counter through bpf_this_cpu_ptr(),
 * a helper, and on every function a helper is traced too.
 */
bool task_only;

/* The preemption counter's context bits (include/linux/preempt.h). */
#define SOFTIRQ_OFFSET	0x00000100
#define HARDIRQ_MASK	0x000f0000
#define NMI_MASK	0x00f00000

/*
 * An unsigned long in the kernel (arch/x86/include/asm/preempt.h); the count is in its low
 * 32 bits, read as an int as bpf_experimental.h's get_preempt_count() reads it.
 */
extern int __preempt_count __ksym;

/* Outputs. */
struct rec fentry_recs[MAX_FUNCS];
struct rec fexit_recs[MAX_FUNCS];
__u64 counts[2 * NR_COUNTERS][MAX_FUNCS];
__u64 unknown_ip;

static __always_inline int slot_of(__u64 ip)
{
	for (int i = 0; i < MAX_FUNCS; i++)
		if (ips[i] == ip)
			return i;
	return -1;
}

/*
 * in_task() (include/linux/preempt.h): no NMI, no hard interrupt, not serving a softirq
 * (a task with bottom halves disabled is still itself).  Not PREEMPT_RT's, where softirqs
 * run in tasks: none of these tests runs on RT.
 */
static __always_inline bool in_task(void)
{
	int pc = *(int *)bpf_this_cpu_ptr(&__preempt_count);

	return !(pc & (NMI_MASK | HARDIRQ_MASK | SOFTIRQ_OFFSET));
}

/*
 * The thread id through bpf_get_current_task_btf(), which the verifier inlines on x86-64
 * (kernel/bpf/verifier.c), and in_task() only for the target's calls: on every function,
 * a helper the program calls is a traced function too, and each of its calls would
 * enter a trampoline (and count a miss) for every run of the program.
 */
static __always_inline bool wanted(void)
{
	if (!target_pid)
		return true;
	return (__u32)bpf_get_current_task_btf()->pid == target_pid && (!task_only || in_task());
}

static __always_inline void record(struct rec *r, void *ctx, __u64 *a)
{
	__u64 n = bpf_get_func_arg_cnt(ctx);

	__sync_fetch_and_add(&r->hits, 1);
	r->nr_args = n;
	r->cookie = bpf_get_attach_cookie(ctx);
	for (int i = 0; i < 6; i++) {
		r->args[i] = a[i];
		if (i < n && bpf_get_func_arg(ctx, i, &r->helper_args[i]))
			r->arg_err = -1;
	}
	/* Fails where argument 0 is no kernel address: the test reads only pointers' */
	r->pointee_err = bpf_probe_read_kernel(&r->pointee, sizeof(r->pointee), (void *)a[0]);
}

/* The record of the function hit, or NULL (counted in unknown_ip). */
static __always_inline struct rec *rec_of(struct rec *recs, void *ctx)
{
	int s;

	if (!wanted())
		return NULL;
	s = slot_of(bpf_get_func_ip(ctx));
	if (s < 0 || s >= MAX_FUNCS) {
		unknown_ip = bpf_get_func_ip(ctx);
		return NULL;
	}
	return &recs[s];
}

RKF_MULTI_FENTRY
int BPF_PROG(multi_fentry, __u64 a0, __u64 a1, __u64 a2, __u64 a3, __u64 a4, __u64 a5)
{
	__u64 a[6] = { a0, a1, a2, a3, a4, a5 };
	struct rec *r = rec_of(fentry_recs, ctx);

	if (r)
		record(r, ctx, a);
	return 0;
}

RKF_MULTI_FEXIT
int BPF_PROG(multi_fexit, __u64 a0, __u64 a1, __u64 a2, __u64 a3, __u64 a4, __u64 a5,
	     __u64 ret)
{
	__u64 a[6] = { a0, a1, a2, a3, a4, a5 };
	struct rec *r = rec_of(fexit_recs, ctx);

	if (!r)
		return 0;
	record(r, ctx, a);
	r->ret = ret;
	if (bpf_get_func_ret(ctx, &r->helper_ret))
		r->arg_err = -2;
	return 0;
}

/* A kernel stack taken by an fentry program: it walks through the function's trampoline. */
__u64 stack[32];
long stack_len;

RKF_MULTI_FENTRY
int BPF_PROG(multi_stack)
{
	if (wanted() && !stack_len)
		stack_len = bpf_get_stack(ctx, stack, sizeof(stack), 0);
	return 0;
}

/* Counters k (fentry) and NR_COUNTERS + k (fexit), one program each. */
#define COUNTER(k)								\
RKF_MULTI_FENTRY								\
int BPF_PROG(count_fentry##k)							\
{										\
	int s = slot_of(bpf_get_func_ip(ctx));					\
										\
	if (wanted() && s >= 0 && s < MAX_FUNCS)				\
		__sync_fetch_and_add(&counts[k][s], 1);				\
	return 0;								\
}										\
RKF_MULTI_FEXIT									\
int BPF_PROG(count_fexit##k)							\
{										\
	int s = slot_of(bpf_get_func_ip(ctx));					\
										\
	if (wanted() && s >= 0 && s < MAX_FUNCS)				\
		__sync_fetch_and_add(&counts[NR_COUNTERS + k][s], 1);		\
	return 0;								\
}
COUNTER(0)
COUNTER(1)
COUNTER(2)
COUNTER(3)

/*
 * Session programs (upstream's test_session, tools/testing/selftests/bpf/progs/
 * tracing_multi_session_attach.c): per function, what the entry and the exit run saw.
 * The entry run finds its cookie zeroed and writes a value of the function's; the exit
 * run counts the calls whose cookie came back.
 */
struct srec {
	__u64 entries;
	__u64 exits;
	__u64 cookie_ok;
	__u64 nonzero_cookie;
	__u64 entry_ret;
	__u64 entry_helper_ret;
	__u64 exit_ret;
	__u64 exit_helper_ret;
	__u64 entry_args[6];
	__u64 exit_args[6];
	__u64 nr_args;
	__u64 attach_cookie;
	long err;
	/* As struct rec's, on entry */
	__u64 pointee;
	long pointee_err;
};

struct srec session_recs[MAX_FUNCS];

#define SESSION_COOKIE 0xbeafbeafbeafbeafULL

RKF_MULTI_FSESSION
int BPF_PROG(multi_session, __u64 a0, __u64 a1, __u64 a2, __u64 a3, __u64 a4, __u64 a5,
	     __u64 ret)
{
	__u64 a[6] = { a0, a1, a2, a3, a4, a5 };
	__u64 ip = bpf_get_func_ip(ctx);
	__u64 *cookie = bpf_session_cookie(ctx);
	struct srec *r;
	int s;

	if (!wanted())
		return 0;
	s = slot_of(ip);
	if (s < 0 || s >= MAX_FUNCS) {
		unknown_ip = ip;
		return 0;
	}
	r = &session_recs[s];
	if (!bpf_session_is_return(ctx)) {
		__sync_fetch_and_add(&r->entries, 1);
		if (*cookie)
			__sync_fetch_and_add(&r->nonzero_cookie, 1);
		*cookie = SESSION_COOKIE ^ ip;
		r->entry_ret = ret;
		if (bpf_get_func_ret(ctx, &r->entry_helper_ret))
			r->err = -1;
		r->nr_args = bpf_get_func_arg_cnt(ctx);
		r->attach_cookie = bpf_get_attach_cookie(ctx);
		for (int i = 0; i < 6; i++)
			r->entry_args[i] = a[i];
		r->pointee_err = bpf_probe_read_kernel(&r->pointee, sizeof(r->pointee),
						       (void *)a0);
	} else {
		__sync_fetch_and_add(&r->exits, 1);
		if (*cookie == (SESSION_COOKIE ^ ip))
			__sync_fetch_and_add(&r->cookie_ok, 1);
		r->exit_ret = ret;
		if (bpf_get_func_ret(ctx, &r->exit_helper_ret))
			r->err = -2;
		if (bpf_get_func_arg_cnt(ctx) != r->nr_args)
			r->err = -3;
		for (int i = 0; i < 6; i++)
			r->exit_args[i] = a[i];
	}
	return 0;
}

/*
 * Sessions k = 0..8 on one function each (a test gives them one): entry and exit runs,
 * and exits that found the cookie k + 1 the entry wrote into a zeroed cookie.
 */
#define NR_SESSIONS 9
__u64 sess_entry[NR_SESSIONS];
__u64 sess_exit[NR_SESSIONS];
__u64 sess_cookie_ok[NR_SESSIONS];
__u64 sess_nonzero_cookie[NR_SESSIONS];

#define SESSION(k)								\
RKF_MULTI_FSESSION								\
int BPF_PROG(session##k)							\
{										\
	__u64 *cookie = bpf_session_cookie(ctx);				\
										\
	if (!wanted())								\
		return 0;							\
	if (!bpf_session_is_return(ctx)) {					\
		__sync_fetch_and_add(&sess_entry[k], 1);			\
		if (*cookie)							\
			__sync_fetch_and_add(&sess_nonzero_cookie[k], 1);	\
		*cookie = k + 1;						\
	} else {								\
		__sync_fetch_and_add(&sess_exit[k], 1);				\
		if (*cookie == k + 1)						\
			__sync_fetch_and_add(&sess_cookie_ok[k], 1);		\
	}									\
	return 0;								\
}
SESSION(0)
SESSION(1)
SESSION(2)
SESSION(3)
SESSION(4)
SESSION(5)
SESSION(6)
SESSION(7)
SESSION(8)

/*
 * The control of the run-path test (tests/src/multi/run_path.rs): on every run a call of a
 * traceable function, bpf_get_current_pid_tgid() (a helper the verifier does not inline
 * on x86-64), which the test's graph tracer must see under the traced function.
 */
__u64 pid_tgid;

RKF_MULTI_FENTRY
int BPF_PROG(calls_helper)
{
	pid_tgid = bpf_get_current_pid_tgid();
	return 0;
}

/*
 * Not an rkf_multi program: an ordinary fentry program, for the refusal and coexistence
 * tests, which count its runs.
 */
__u64 plain_runs;

SEC("fentry/bpf_fentry_test1")
int BPF_PROG(plain_fentry, int a)
{
	if (wanted())
		__sync_fetch_and_add(&plain_runs, 1);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
