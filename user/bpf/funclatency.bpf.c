// SPDX-License-Identifier: GPL-2.0
/*
 * rkf funclatency: how long each call of each function takes, as a log2 histogram per
 * function, as bcc's funclatency measures it.  One rkf_multi session program on every
 * function that matches: on entry it keeps the time in the call's session cookie, on
 * exit it adds the time since to the histogram of the function bpf_get_func_ip() names.
 * A cookie is the call's own, so nested and recursive calls, and calls of several traced
 * functions one inside the other, are each timed whole (bcc keeps one start time per
 * thread).  User space fills the map with every function's address before attaching, so
 * the program only adds.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "rkf.bpf.h"
#include "log2.bpf.h"

/* 2^47 ns is more than a day, the longest -d: a call timed never needs the last slot. */
#define MAX_SLOTS 48

/*
 * One function's histogram; user space (user/src/funclatency.rs) reads it as the
 * skeleton's type.  slots[i] counts the calls whose time, in the unit asked for, is in
 * [2^i, 2^(i+1) - 1] (slot 0 also counts 0); the last slot counts every longer one too.
 */
struct rkf_funclatency_hist {
	__u64 slots[MAX_SLOTS];
	__u64 count;
	__u64 total_ns;		/* in nanoseconds whatever the unit: user space divides */
};

/* Never used: a global of the type makes the skeleton define it. */
struct rkf_funclatency_hist _hist_type = {};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);	/* user space sets it to the number of functions */
	__type(key, __u64);		/* the function's address */
	__type(value, struct rkf_funclatency_hist);
} hists SEC(".maps");

/* Inputs, set before load. */
__u32 target_tgid;	/* 0: every task */
__u64 unit_ns;		/* 1, 1000 or 1000000: the histograms' unit */

/* Outputs. */
__u64 unknown;	/* exits of a function that has no histogram */

/* Against rkf_multi_tmpl12(): functions of up to twelve arguments. */
RKF_MULTI_FSESSION12
int BPF_PROG(funclatency)
{
	__u64 *start = bpf_session_cookie(ctx);
	struct rkf_funclatency_hist *h;
	__u64 ip, delta;
	__u32 slot;

	if (!start)
		return 0;
	if (!bpf_session_is_return(ctx)) {
		/* A call of another process keeps its cookie 0: its exit is skipped. */
		if (target_tgid && bpf_get_current_pid_tgid() >> 32 != target_tgid)
			return 0;
		*start = bpf_ktime_get_ns();
		return 0;
	}
	if (!*start)
		return 0;
	delta = bpf_ktime_get_ns() - *start;
	ip = bpf_get_func_ip(ctx);
	h = bpf_map_lookup_elem(&hists, &ip);
	if (!h) {
		__sync_fetch_and_add(&unknown, 1);
		return 0;
	}
	slot = log2_u64(delta / unit_ns);
	if (slot >= MAX_SLOTS)
		slot = MAX_SLOTS - 1;
	__sync_fetch_and_add(&h->slots[slot], 1);
	__sync_fetch_and_add(&h->count, 1);
	__sync_fetch_and_add(&h->total_ns, delta);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
