// SPDX-License-Identifier: GPL-2.0
/*
 * Programs the verifier must reject.  The test loads them one at a time and checks the
 * verifier's message.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include "rkf.bpf.h"

extern const struct rq runqueues __ksym;
extern const int bpf_prog_active __ksym;

__s32 out;

/* Dereferences the typed pointer without the NULL check. */
SEC("syscall")
int deref_without_null_check(void *ctx)
{
	const struct rq *rq = rkf_per_cpu_ptr(&runqueues, 0);

	out = rq->cpu;
	return 0;
}

/* The same for a scalar per-cpu variable. */
SEC("syscall")
int deref_scalar_without_null_check(void *ctx)
{
	out = *rkf_per_cpu_ptr(&bpf_prog_active, 1);
	return 0;
}

/* Dereferences the kfunc's raw result, a scalar. */
SEC("syscall")
int deref_raw_result(void *ctx)
{
	const int *p = bpf_rkf_per_cpu_ptr(&bpf_prog_active, 0);

	if (p)
		out = *p;
	return 0;
}

/* Writes through the read-only pointer. */
SEC("syscall")
int write_through_pointer(void *ctx)
{
	int *p = (int *)rkf_per_cpu_ptr(&bpf_prog_active, 0);

	if (p)
		*p = 1;
	return 0;
}

/* The kfuncs are not registered for socket filters. */
SEC("socket")
int socket_filter(void *ctx)
{
	out = bpf_rkf_per_cpu_ptr(&bpf_prog_active, 0) != 0;
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
