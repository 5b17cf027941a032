// SPDX-License-Identifier: GPL-2.0
/*
 * rkf_stack task-stack differential tests: one program calls bpf_rkf_get_task_stack() and
 * bpf_get_task_stack() on the same task with the same flags and size, into buffers of its
 * own.  The task is another one, asleep in a known kernel path (found by its thread id,
 * or as the parent of a child it started), or the current one.  User space arms the
 * programs, triggers them and compares.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "rkf.bpf.h"

#define DEPTH 64

enum kind { ITER, TP_BTF, FENTRY, RAW_TP, ITER_PARENT, NR_KINDS };

struct task_sample {
	long kf_ret;
	long h_ret;
	__u64 kf[DEPTH];	/* bytes, as ips or struct bpf_stack_build_id */
	__u64 h[DEPTH];
};

struct task_struct *bpf_task_from_pid(s32 pid) __ksym;
void bpf_task_release(struct task_struct *p) __ksym;

/*
 * Inputs: the task to take (0: the current one; for ITER_PARENT, its child), the thread
 * that triggers the events.
 */
__u32 target_tid;
__u32 self_tid;
__u64 flags;
__u32 size;
__u32 armed[NR_KINDS];

/* Outputs. */
struct task_sample samples[NR_KINDS];

static __always_inline void take(enum kind k, struct task_struct *task)
{
	struct task_sample *s = &samples[k];
	__u32 sz = size;

	armed[k] = 0;
	if (sz > sizeof(s->kf))
		sz = sizeof(s->kf);
	s->kf_ret = bpf_rkf_get_task_stack(task, s->kf, sz, flags);
	s->h_ret = bpf_get_task_stack(task, s->h, sz, flags);
}

/* The target, or the current task, acquired and taken. */
static __always_inline void take_target(enum kind k)
{
	struct task_struct *task;

	if (!target_tid) {
		take(k, bpf_get_current_task_btf());
		return;
	}
	task = bpf_task_from_pid(target_tid);
	if (!task)
		return;
	take(k, task);
	bpf_task_release(task);
}

SEC("iter/task")
int iter_prog(struct bpf_iter__task *ctx)
{
	struct task_struct *task = ctx->task;

	if (!task || !armed[ITER] || task->pid != target_tid)
		return 0;
	take(ITER, task);
	return 0;
}

/*
 * The parent of the target, an RCU-protected pointer (task->real_parent in a program that
 * runs under RCU, kernel/bpf/verifier.c's BTF_TYPE_SAFE_RCU(struct task_struct)), not a
 * trusted one: bpf_rkf_get_task_stack() is KF_RCU.
 */
SEC("iter/task")
int iter_parent_prog(struct bpf_iter__task *ctx)
{
	struct task_struct *task = ctx->task;

	if (!task || !armed[ITER_PARENT] || task->pid != target_tid)
		return 0;
	take(ITER_PARENT, task->real_parent);
	return 0;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(tp_btf_prog, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	if (!armed[TP_BTF] || prev->pid != self_tid)
		return 0;
	take_target(TP_BTF);
	return 0;
}

SEC("fentry/hrtimer_nanosleep")
int BPF_PROG(fentry_prog)
{
	if (!armed[FENTRY] || (__u32)bpf_get_current_pid_tgid() != self_tid)
		return 0;
	take_target(FENTRY);
	return 0;
}

/* Raw tracepoint programs have no trusted task but the current one. */
SEC("raw_tp/sched_switch")
int raw_tp_prog(void *ctx)
{
	if (!armed[RAW_TP] || (__u32)bpf_get_current_pid_tgid() != self_tid)
		return 0;
	take(RAW_TP, bpf_get_current_task_btf());
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
