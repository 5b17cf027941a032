// SPDX-License-Identifier: GPL-2.0
/*
 * rkf_stack selftest of sleepable programs: build ids parsed where a page fault is allowed.
 *
 * Programs on one function of an ELF file whose first page (ELF header, program headers,
 * build-id note) is not in the page cache, each taking the user stack as build id +
 * offset, each into its own slot of takes[]:
 *
 *   untouched_atomic   uprobe     the kfuncs (bpf_rkf_get_stack_kprobe(), then
 *                                 bpf_rkf_get_task_stack() of the current task), then
 *                                 the helpers (bpf_get_stack(), bpf_get_task_stack())
 *   untouched_rcu      uprobe.s   the kfuncs, inside bpf_rcu_read_lock(): no sleeping
 *   untouched_preempt  uprobe.s   the kfuncs, inside bpf_preempt_disable(): likewise
 *   untouched_irq      uprobe.s   the kfuncs, inside bpf_local_irq_save(): likewise
 *   untouched_kf       uprobe.s   bpf_rkf_get_stack_kprobe() alone
 *   untouched_kf_task  uprobe.s   bpf_rkf_get_task_stack() alone
 *   untouched_helpers  uprobe.s   the helpers alone, which the verifier gives their
 *                                 sleepable forms here
 *   untouched_syscall  syscall    bpf_rkf_get_stack() (the tracing flavour) alone
 *
 * so that each sleepable take is the one that reads the first page in.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "rkf.bpf.h"

extern void bpf_rcu_read_lock(void) __ksym;
extern void bpf_rcu_read_unlock(void) __ksym;
extern void bpf_preempt_disable(void) __ksym;
extern void bpf_preempt_enable(void) __ksym;
extern void bpf_local_irq_save(unsigned long *flags) __ksym;
extern void bpf_local_irq_restore(unsigned long *flags) __ksym;

#define FRAMES 4
/* struct bpf_stack_build_id entries, as u64 words for the skeleton's plain arrays */
#define WORDS (FRAMES * sizeof(struct bpf_stack_build_id) / sizeof(__u64))
#define FLAGS (BPF_F_USER_STACK | BPF_F_USER_BUILD_ID)

struct take {
	__u32 runs;
	long kf_ret;
	long h_ret;
	long kf_task_ret;
	long h_task_ret;
	__u64 kf[WORDS];
	__u64 h[WORDS];
	__u64 kf_task[WORDS];
	__u64 h_task[WORDS];
};

enum slot { ATOMIC, RCU, KF, KF_TASK, HELPERS, SYSCALL, PREEMPT, IRQ, SLOTS };

__u32 target_tid;
struct take takes[SLOTS];

static __always_inline bool mine(void)
{
	return (__u32)bpf_get_current_pid_tgid() == target_tid;
}

static __always_inline void take_kfuncs(struct pt_regs *ctx, struct take *t)
{
	struct task_struct *task = bpf_get_current_task_btf();

	t->kf_ret = rkf_get_stack(ctx, t->kf, sizeof(t->kf), FLAGS);
	t->kf_task_ret = rkf_get_task_stack(task, t->kf_task, sizeof(t->kf_task), FLAGS);
}

static __always_inline void take_helpers(struct pt_regs *ctx, struct take *t)
{
	struct task_struct *task = bpf_get_current_task_btf();

	t->h_ret = bpf_get_stack(ctx, t->h, sizeof(t->h), FLAGS);
	t->h_task_ret = bpf_get_task_stack(task, t->h_task, sizeof(t->h_task), FLAGS);
}

SEC("uprobe")
int BPF_UPROBE(untouched_atomic)
{
	struct take *t = &takes[ATOMIC];

	if (!mine())
		return 0;
	take_kfuncs(ctx, t);
	take_helpers(ctx, t);
	t->runs++;
	return 0;
}

SEC("uprobe.s")
int BPF_UPROBE(untouched_rcu)
{
	struct take *t = &takes[RCU];

	if (!mine())
		return 0;
	bpf_rcu_read_lock();
	take_kfuncs(ctx, t);
	bpf_rcu_read_unlock();
	t->runs++;
	return 0;
}

SEC("uprobe.s")
int BPF_UPROBE(untouched_preempt)
{
	struct take *t = &takes[PREEMPT];

	if (!mine())
		return 0;
	bpf_preempt_disable();
	take_kfuncs(ctx, t);
	bpf_preempt_enable();
	t->runs++;
	return 0;
}

SEC("uprobe.s")
int BPF_UPROBE(untouched_irq)
{
	struct take *t = &takes[IRQ];
	unsigned long flags;

	if (!mine())
		return 0;
	bpf_local_irq_save(&flags);
	take_kfuncs(ctx, t);
	bpf_local_irq_restore(&flags);
	t->runs++;
	return 0;
}

SEC("uprobe.s")
int BPF_UPROBE(untouched_kf)
{
	struct take *t = &takes[KF];

	if (!mine())
		return 0;
	t->kf_ret = rkf_get_stack(ctx, t->kf, sizeof(t->kf), FLAGS);
	t->runs++;
	return 0;
}

SEC("uprobe.s")
int BPF_UPROBE(untouched_kf_task)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct take *t = &takes[KF_TASK];

	if (!mine())
		return 0;
	t->kf_task_ret = rkf_get_task_stack(task, t->kf_task, sizeof(t->kf_task), FLAGS);
	t->runs++;
	return 0;
}

SEC("uprobe.s")
int BPF_UPROBE(untouched_helpers)
{
	struct take *t = &takes[HELPERS];

	if (!mine())
		return 0;
	take_helpers(ctx, t);
	t->runs++;
	return 0;
}

SEC("syscall")
int untouched_syscall(void *ctx)
{
	struct take *t = &takes[SYSCALL];

	if (!mine())
		return 0;
	t->kf_ret = rkf_get_stack(ctx, t->kf, sizeof(t->kf), FLAGS);
	t->runs++;
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
