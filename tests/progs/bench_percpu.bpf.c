// SPDX-License-Identifier: GPL-2.0
/*
 * rkf_percpu benchmark: one syscall program times CALLS lookups of a per-cpu variable
 * through the rkf.bpf.h macros and through bpf_per_cpu_ptr()/bpf_this_cpu_ptr(), each
 * lookup followed by a load through the pointer, and a loop that only adds a global up, for
 * the loop's own cost.  Booted with -icount shift=0, a guest nanosecond is one
 * instruction, so the costs compare exactly within one boot.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "rkf.bpf.h"

#define CALLS 64

extern const struct rq runqueues __ksym;

/* Inputs. */
__u32 cpu;
__u32 helper_first;

/* Outputs: the time of each loop, and the sums of what was read (checked by rkf-bench). */
__u64 loop_ns, rkf_ns, helper_ns, this_rkf_ns, this_helper_ns;
__s64 loop_sum, rkf_sum, helper_sum, this_rkf_sum, this_helper_sum;

/* What the empty loop adds up. */
__s32 plain = 1;

static __always_inline void time_rkf(void)
{
	__u64 t0 = bpf_ktime_get_ns();
	__s64 sum = 0;

	for (int i = 0; i < CALLS; i++) {
		const struct rq *rq = rkf_per_cpu_ptr(&runqueues, cpu);

		if (rq)
			sum += rq->cpu;
	}
	rkf_ns = bpf_ktime_get_ns() - t0;
	rkf_sum = sum;

	t0 = bpf_ktime_get_ns();
	sum = 0;
	for (int i = 0; i < CALLS; i++)
		sum += rkf_this_cpu_ptr(&runqueues)->cpu;
	this_rkf_ns = bpf_ktime_get_ns() - t0;
	this_rkf_sum = sum;
}

static __always_inline void time_helper(void)
{
	__u64 t0 = bpf_ktime_get_ns();
	__s64 sum = 0;

	for (int i = 0; i < CALLS; i++) {
		const struct rq *rq = bpf_per_cpu_ptr(&runqueues, cpu);

		if (rq)
			sum += rq->cpu;
	}
	helper_ns = bpf_ktime_get_ns() - t0;
	helper_sum = sum;

	t0 = bpf_ktime_get_ns();
	sum = 0;
	for (int i = 0; i < CALLS; i++)
		sum += ((const struct rq *)bpf_this_cpu_ptr(&runqueues))->cpu;
	this_helper_ns = bpf_ktime_get_ns() - t0;
	this_helper_sum = sum;
}

SEC("syscall")
int bench(void *ctx)
{
	__u64 t0 = bpf_ktime_get_ns();
	__s64 sum = 0;

	for (int i = 0; i < CALLS; i++) {
		sum += plain;
		/* One add per iteration: the loop is not folded into a multiplication. */
		barrier_var(sum);
	}
	loop_ns = bpf_ktime_get_ns() - t0;
	loop_sum = sum;

	if (helper_first) {
		time_helper();
		time_rkf();
	} else {
		time_rkf();
		time_helper();
	}
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
