// SPDX-License-Identifier: GPL-2.0
/*
 * rkf funccount: counts calls per function.  One rkf_multi fentry program on every
 * function that matches; bpf_get_func_ip() says which was hit.  User space fills the map
 * with the functions' addresses before attaching, so the program only adds, and reads
 * the counters while they run (-i): they only grow.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "rkf.bpf.h"

/* Sized by user space to the number of functions. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, __u64);
	__type(value, __u64);
} counts SEC(".maps");

/* Input, set before load. */
__u32 target_tgid;	/* 0: every task */

/* Output. */
__u64 unknown;	/* runs on a function that has no counter */

/* Against rkf_multi_tmpl12(): functions of up to twelve arguments. */
RKF_MULTI_FENTRY12
int BPF_PROG(funccount)
{
	__u64 ip, *n;

	if (target_tgid && bpf_get_current_pid_tgid() >> 32 != target_tgid)
		return 0;
	ip = bpf_get_func_ip(ctx);
	n = bpf_map_lookup_elem(&counts, &ip);
	if (n)
		__sync_fetch_and_add(n, 1);
	else
		__sync_fetch_and_add(&unknown, 1);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
