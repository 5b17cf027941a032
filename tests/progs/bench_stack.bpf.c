// SPDX-License-Identifier: GPL-2.0
/*
 * rkf_stack benchmark: on one event, one program calls bpf_rkf_get_stack() and
 * bpf_get_stack() CALLS times each, with the same flags and size, and times both loops
 * with bpf_ktime_get_ns().  Booted with -icount shift=0, a guest nanosecond is one
 * instruction, so the two costs compare exactly within one boot.
 *
 * Kernel stacks of a chosen depth come from rkf_testmod: a syscall program recurses
 * through rkf_testmod_recurse() into rkf_testmod_leaf(), where the fentry program runs.
 * Shallow kernel stacks and user stacks come from getpgid(), traced at its entry.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "rkf.bpf.h"

#define CALLS 32
/* 128 struct bpf_stack_build_id entries; 512 ips. */
#define BUF_BYTES 4096

extern s64 bpf_rkf_testmod_recurse(u32 depth) __ksym;

/* Inputs. */
__u32 target_tgid;
__u64 flags;
__u32 size;
__u32 helper_first;
__u32 depth;
__u32 armed;

/* Outputs: time of each loop, the last return values, and whether the buffers agree. */
__u64 kfunc_ns;
__u64 helper_ns;
long kfunc_ret;
long helper_ret;
/* What bpf_rkf_testmod_recurse() returned, at its type. */
__s64 recurse_ret;

__u8 kbuf[BUF_BYTES];
__u8 hbuf[BUF_BYTES];

static __always_inline __u64 time_kfunc(__u32 sz)
{
	__u64 t0 = bpf_ktime_get_ns();

	for (int i = 0; i < CALLS; i++)
		kfunc_ret = bpf_rkf_get_stack(kbuf, sz, flags);
	return bpf_ktime_get_ns() - t0;
}

static __always_inline __u64 time_helper(void *ctx, __u32 sz)
{
	__u64 t0 = bpf_ktime_get_ns();

	for (int i = 0; i < CALLS; i++)
		helper_ret = bpf_get_stack(ctx, hbuf, sz, flags);
	return bpf_ktime_get_ns() - t0;
}

static __always_inline int measure(void *ctx)
{
	__u32 sz = size;

	if (!armed)
		return 0;
	armed = 0;
	if (sz > BUF_BYTES)
		sz = BUF_BYTES;
	if (helper_first) {
		helper_ns = time_helper(ctx, sz);
		kfunc_ns = time_kfunc(sz);
	} else {
		kfunc_ns = time_kfunc(sz);
		helper_ns = time_helper(ctx, sz);
	}
	return 0;
}

SEC("fentry/rkf_testmod_leaf")
int BPF_PROG(bench_deep)
{
	return measure(ctx);
}

SEC("fentry/__x64_sys_getpgid")
int BPF_PROG(bench_syscall)
{
	if (bpf_get_current_pid_tgid() >> 32 != target_tgid)
		return 0;
	return measure(ctx);
}

SEC("syscall")
int recurse(void *ctx)
{
	recurse_ret = bpf_rkf_testmod_recurse(depth);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
