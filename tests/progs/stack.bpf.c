// SPDX-License-Identifier: GPL-2.0
/*
 * rkf_stack differential tests: on one event, one program calls the kfunc and
 * bpf_get_stack() with the same flags and size, into buffers of its own.  User space arms
 * the programs, triggers the event from the test thread, and compares.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "rkf.bpf.h"

#define DEPTH 64

enum kind { FENTRY, FEXIT, TP_BTF, RAW_TP, TRACEPOINT, KPROBE, SYSCALL, PERF_EVENT, NR_KINDS };

extern void bpf_rcu_read_lock(void) __ksym;
extern void bpf_rcu_read_unlock(void) __ksym;

struct stack_sample {
	long kf_ret;
	long h_ret;
	__u64 kf[DEPTH];	/* bytes, as ips or struct bpf_stack_build_id */
	__u64 h[DEPTH];
};

/* Inputs: the test thread, the only one whose events the programs take. */
__u32 target_tid;
__u64 flags;
__u32 size;
__u32 armed[NR_KINDS];
/*
 * Added to the tracepoint program's skip for the kfunc only: the frames between the
 * program and the tracepoint, where the helper's stack starts (rkf.bpf.h).
 */
__u32 tp_skip;

/* Outputs. */
struct stack_sample samples[NR_KINDS];
/* Set once a program has written its sample, both calls' results in it. */
__u32 done[NR_KINDS];

/*
 * The kfunc's flags in the tracepoint program: for a kernel stack, tp_skip more frames
 * skipped, saturated at the field's maximum (more than any stack has).
 */
static __always_inline __u64 tracepoint_flags(void)
{
	__u64 skip = (flags & BPF_F_SKIP_FIELD_MASK) + tp_skip;

	if (flags & BPF_F_USER_STACK)
		return flags;
	if (skip > BPF_F_SKIP_FIELD_MASK)
		skip = BPF_F_SKIP_FIELD_MASK;
	return (flags & ~BPF_F_SKIP_FIELD_MASK) | skip;
}

static __always_inline int take(enum kind k, void *ctx)
{
	struct stack_sample *s = &samples[k];
	__u32 sz = size;

	if (k != SYSCALL && (__u32)bpf_get_current_pid_tgid() != target_tid)
		return 0;
	if (!armed[k])
		return 0;
	armed[k] = 0;
	if (sz > sizeof(s->kf))
		sz = sizeof(s->kf);
	if (k == KPROBE)
		s->kf_ret = bpf_rkf_get_stack_kprobe(ctx, s->kf, sz, flags);
	else if (k == PERF_EVENT)
		s->kf_ret = bpf_rkf_get_stack_pe(ctx, s->kf, sz, flags);
	else if (k == TRACEPOINT)
		s->kf_ret = bpf_rkf_get_stack(s->kf, sz, tracepoint_flags());
	else
		s->kf_ret = bpf_rkf_get_stack(s->kf, sz, flags);
	/*
	 * Syscall programs get raw_tp's helper, which calls get_perf_callchain() without
	 * rcu_read_lock() (lockdep: suspicious RCU usage, kernel/events/callchain.c) in a
	 * program that runs outside RCU: hold it for the helper here.
	 */
	if (k == SYSCALL) {
		bpf_rcu_read_lock();
		s->h_ret = bpf_get_stack(ctx, s->h, sz, flags);
		bpf_rcu_read_unlock();
	} else {
		s->h_ret = bpf_get_stack(ctx, s->h, sz, flags);
	}
	/* A locked add: after the sample's stores for the reader (armed: once). */
	__sync_fetch_and_add(&done[k], 1);
	return 0;
}

SEC("fentry/hrtimer_nanosleep")
int BPF_PROG(fentry_prog)
{
	return take(FENTRY, ctx);
}

SEC("fexit/hrtimer_nanosleep")
int BPF_PROG(fexit_prog)
{
	return take(FEXIT, ctx);
}

SEC("tp_btf/sched_switch")
int BPF_PROG(tp_btf_prog, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	return take(TP_BTF, ctx);
}

SEC("raw_tp/sched_switch")
int raw_tp_prog(void *ctx)
{
	return take(RAW_TP, ctx);
}

SEC("tracepoint/sched/sched_switch")
int tracepoint_prog(void *ctx)
{
	return take(TRACEPOINT, ctx);
}

SEC("kprobe/hrtimer_nanosleep")
int kprobe_prog(struct pt_regs *ctx)
{
	return take(KPROBE, ctx);
}

SEC("syscall")
int syscall_prog(void *ctx)
{
	return take(SYSCALL, ctx);
}

SEC("perf_event")
int perf_event_prog(struct bpf_perf_event_data *ctx)
{
	return take(PERF_EVENT, ctx);
}

/*
 * The kfunc alone, on a precise event: the kernel refuses to attach perf_event_prog
 * there without a full sampled callchain, as it calls the helper; it cannot tell that
 * this one calls the kfunc, which must refuse the call itself (-EPROTO).
 */
struct stack_sample pe_kfunc_sample;
__u32 pe_kfunc_armed;
__u32 pe_kfunc_done;

SEC("perf_event")
int perf_event_kfunc_prog(struct bpf_perf_event_data *ctx)
{
	struct stack_sample *s = &pe_kfunc_sample;
	__u32 sz = size;

	if ((__u32)bpf_get_current_pid_tgid() != target_tid || !pe_kfunc_armed)
		return 0;
	pe_kfunc_armed = 0;
	if (sz > sizeof(s->kf))
		sz = sizeof(s->kf);
	s->kf_ret = bpf_rkf_get_stack_pe(ctx, s->kf, sz, flags);
	/* A locked add: after the sample's stores for the reader. */
	__sync_fetch_and_add(&pe_kfunc_done, 1);
	return 0;
}

/*
 * bpf_rkf_get_task_stack() of the current task in a perf_event program, between two
 * copies of the sample's kernel callchain: a user stack is refused (-EOPNOTSUPP), as its
 * walk would overwrite the per-cpu entry that holds the sample's callchain (which the
 * helper's does); a kernel stack is taken.  The sample reads the same after either.
 * With pe_task_helper, bpf_get_task_stack() in its place: the control.
 */
struct pe_task_sample {
	long task_ret;
	long before_ret;
	long after_ret;
	__u64 task[DEPTH];
	__u64 before[DEPTH];
	__u64 after[DEPTH];
};

struct pe_task_sample pe_task_sample;
__u64 pe_task_flags;
__u32 pe_task_helper;
__u32 pe_task_armed;
__u32 pe_task_done;

SEC("perf_event")
int perf_event_task_prog(struct bpf_perf_event_data *ctx)
{
	struct pe_task_sample *s = &pe_task_sample;

	if ((__u32)bpf_get_current_pid_tgid() != target_tid || !pe_task_armed)
		return 0;
	pe_task_armed = 0;
	s->before_ret = bpf_rkf_get_stack_pe(ctx, s->before, sizeof(s->before), 0);
	if (pe_task_helper)
		s->task_ret = bpf_get_task_stack(bpf_get_current_task_btf(), s->task,
						 sizeof(s->task), pe_task_flags);
	else
		s->task_ret = bpf_rkf_get_task_stack(bpf_get_current_task_btf(), s->task,
						     sizeof(s->task), pe_task_flags);
	s->after_ret = bpf_rkf_get_stack_pe(ctx, s->after, sizeof(s->after), 0);
	/* A locked add: after the sample's stores for the reader. */
	__sync_fetch_and_add(&pe_task_done, 1);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
