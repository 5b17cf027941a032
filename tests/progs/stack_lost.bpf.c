// SPDX-License-Identifier: GPL-2.0
/*
 * "No stack lost": every stack of the test thread's sleeps goes through the kfunc into
 * a record of its own, and through bpf_get_stackid() into a small stack map, which loses
 * stacks whose hashes collide.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "rkf.bpf.h"

#define MAX_RECS	1200
#define DEPTH		127

struct rec {
	long ret;
	__u64 ips[DEPTH];
};

struct {
	__uint(type, BPF_MAP_TYPE_STACK_TRACE);
	__uint(max_entries, 64);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, DEPTH * sizeof(__u64));
} small_stackmap SEC(".maps");

__u32 target_tgid;
__u32 nr_recs;
__u64 stackid_ok, stackid_lost;
struct rec recs[MAX_RECS];

SEC("fentry/hrtimer_nanosleep")
int BPF_PROG(record)
{
	__u32 i = nr_recs;
	long id;

	if (bpf_get_current_pid_tgid() >> 32 != target_tgid)
		return 0;
	if (i >= MAX_RECS)
		return 0;
	nr_recs = i + 1;
	recs[i].ret = bpf_rkf_get_stack(recs[i].ips, sizeof(recs[i].ips), BPF_F_USER_STACK);
	id = bpf_get_stackid(ctx, &small_stackmap, BPF_F_USER_STACK);
	if (id >= 0)
		__sync_fetch_and_add(&stackid_ok, 1);
	else
		__sync_fetch_and_add(&stackid_lost, 1);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
