// SPDX-License-Identifier: GPL-2.0
/*
 * rkf_multi selftest of a sleepable program asleep: on one task's call of the traced
 * function, an fentry.s program sleeps in rkf_testmod's bpf_rkf_testmod_wait_step(1)
 * until the test sets the module parameter "step" to 1; a non-sleepable fexit program on
 * the same function records the call's return, and a non-sleepable fentry program after
 * it counts the runs that follow the sleep.  Two more fentry.s programs sleep one after
 * the other on the same call, in bpf_rkf_testmod_wait_step() for steps 1 and 2.  Needs
 * rkf_testmod.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "rkf.bpf.h"

extern int bpf_rkf_testmod_wait_step(__u32 step) __ksym;

/* Input: the task whose call sleeps. */
__u32 target_pid;

/* Outputs: the fentry.s runs that went to sleep and came back, and what the wait said. */
__u64 asleep;
__u64 woke;
long wait_err;
/* The runs of the fentry program after the sleeping one. */
__u64 late_runs;
/* The fexit runs of the task's calls, and the return value the last one saw. */
__u64 fexit_runs;
__u64 fexit_ret;
/* The runs of the two programs that sleep one after the other: asleep, woken, errors. */
__u64 step_asleep[2];
__u64 step_woke[2];
long step_err[2];

static __always_inline bool wanted(void)
{
	return (__u32)bpf_get_current_pid_tgid() == target_pid;
}

RKF_MULTI_FENTRY_S
int BPF_PROG(asleep_fentry, u64 a0, u64 a1, u64 a2, u64 a3, u64 a4, u64 a5)
{
	if (!wanted())
		return 0;
	__sync_fetch_and_add(&asleep, 1);
	wait_err = bpf_rkf_testmod_wait_step(1);
	__sync_fetch_and_add(&woke, 1);
	return 0;
}

/* Sleeps until rkf_testmod's "step" is at least @i + 1. */
static __always_inline void sleep_step(__u32 i)
{
	if (!wanted())
		return;
	__sync_fetch_and_add(&step_asleep[i], 1);
	step_err[i] = bpf_rkf_testmod_wait_step(i + 1);
	__sync_fetch_and_add(&step_woke[i], 1);
}

RKF_MULTI_FENTRY_S
int BPF_PROG(step1_fentry)
{
	sleep_step(0);
	return 0;
}

RKF_MULTI_FENTRY_S
int BPF_PROG(step2_fentry)
{
	sleep_step(1);
	return 0;
}

RKF_MULTI_FENTRY
int BPF_PROG(late_fentry)
{
	if (wanted())
		__sync_fetch_and_add(&late_runs, 1);
	return 0;
}

RKF_MULTI_FEXIT
int BPF_PROG(asleep_fexit, u64 a0, u64 a1, u64 a2, u64 a3, u64 a4, u64 a5, u64 ret)
{
	if (!wanted())
		return 0;
	__sync_fetch_and_add(&fexit_runs, 1);
	fexit_ret = ret;
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
