// SPDX-License-Identifier: GPL-2.0
/*
 * rkf_multi selftest of the links a function takes: one fentry program, loaded once per
 * link, as upstream's tracing_multi_rollback.c loads its "filler" programs, counting its
 * runs on one function.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "rkf.bpf.h"

/* Inputs: the function counted, as bpf_get_func_ip() returns it; the task counted. */
__u64 target_ip;
__u32 target_pid;
/* Output: runs on it, and runs on any other function. */
__u64 hits;
__u64 other;

RKF_MULTI_FENTRY
int BPF_PROG(filler)
{
	if ((__u32)bpf_get_current_pid_tgid() != target_pid)
		return 0;
	if (bpf_get_func_ip(ctx) == target_ip)
		__sync_fetch_and_add(&hits, 1);
	else
		__sync_fetch_and_add(&other, 1);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
