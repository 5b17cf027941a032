// SPDX-License-Identifier: GPL-2.0
/*
 * The rkf_percpu kfuncs from every program type they are registered for.  Each program
 * checks, in the test's thread only and while it is armed, that per_cpu(runqueues, this
 * cpu)->cpu and this_cpu(runqueues)->cpu are the cpu it runs on.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "rkf.bpf.h"

enum kind { FENTRY, KPROBE, RAW_TP, TP_BTF, TRACEPOINT, PERF_EVENT, NR_KINDS };

extern const struct rq runqueues __ksym;

__u32 target_tid;
bool armed;
__u64 hits[NR_KINDS];
__u64 bad[NR_KINDS];

static __always_inline void check(enum kind kind)
{
	__u32 cpu = bpf_get_smp_processor_id();
	const struct rq *rq, *this;

	if (!armed || (__u32)bpf_get_current_pid_tgid() != target_tid)
		return;
	rq = rkf_per_cpu_ptr(&runqueues, cpu);
	this = rkf_this_cpu_ptr(&runqueues);
	if (!rq || !this || rq->cpu != cpu || this->cpu != cpu)
		__sync_fetch_and_add(&bad[kind], 1);
	__sync_fetch_and_add(&hits[kind], 1);
}

SEC("fentry/hrtimer_nanosleep")
int BPF_PROG(fentry_prog)
{
	check(FENTRY);
	return 0;
}

SEC("kprobe/hrtimer_nanosleep")
int kprobe_prog(struct pt_regs *ctx)
{
	check(KPROBE);
	return 0;
}

SEC("raw_tp/sched_switch")
int raw_tp_prog(void *ctx)
{
	check(RAW_TP);
	return 0;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(tp_btf_prog, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	check(TP_BTF);
	return 0;
}

SEC("tracepoint/sched/sched_switch")
int tracepoint_prog(void *ctx)
{
	check(TRACEPOINT);
	return 0;
}

SEC("perf_event")
int perf_event_prog(void *ctx)
{
	check(PERF_EVENT);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
