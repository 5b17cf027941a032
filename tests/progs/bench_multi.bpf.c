// SPDX-License-Identifier: GPL-2.0
/*
 * rkf_multi benchmark: empty programs, so that what is measured is the attach machinery
 * and the per-call cost of each way into a program.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "rkf.bpf.h"

RKF_MULTI_FENTRY
int BPF_PROG(rkf_fentry)
{
	return 0;
}

RKF_MULTI_FEXIT
int BPF_PROG(rkf_fexit)
{
	return 0;
}

SEC("fentry/__x64_sys_getpgid")
int BPF_PROG(single_fentry)
{
	return 0;
}

SEC("fexit/__x64_sys_getpgid")
int BPF_PROG(single_fexit)
{
	return 0;
}

SEC("kprobe.multi")
int kprobe_multi(struct pt_regs *ctx)
{
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
