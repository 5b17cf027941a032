// SPDX-License-Identifier: GPL-2.0
/*
 * Upstream's tools/testing/selftests/bpf/progs/test_get_stack_rawtp_err.c, twice: as it
 * is (helper_prog2, bpf_get_stack()) and with only the helper's name changed to
 * rkf.bpf.h's rkf_get_stack() (bpf_prog2, upstream's name); the loops' braces are
 * dropped for checkpatch.  Upstream's prog_tests/get_stack_raw_tp.c expects the verifier
 * to refuse it: it cannot prove the return value non-negative, so the endless loop of the
 * error path is reachable.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "rkf.bpf.h"

#define MAX_STACK_RAWTP 10

SEC("raw_tracepoint/sys_enter")
int bpf_prog2(void *ctx)
{
	__u64 stack[MAX_STACK_RAWTP];
	int error;

	/* set all the flags which should return -EINVAL */
	error = rkf_get_stack(ctx, stack, 0, -1);
	if (error < 0)
		goto loop;

	return error;
loop:
	while (1)
		error++;
}

SEC("raw_tracepoint/sys_enter")
int helper_prog2(void *ctx)
{
	__u64 stack[MAX_STACK_RAWTP];
	int error;

	/* set all the flags which should return -EINVAL */
	error = bpf_get_stack(ctx, stack, 0, -1);
	if (error < 0)
		goto loop;

	return error;
loop:
	while (1)
		error++;
}

char _license[] SEC("license") = "GPL";
