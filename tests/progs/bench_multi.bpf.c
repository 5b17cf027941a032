// SPDX-License-Identifier: GPL-2.0
/*
 * rkf_multi benchmark: empty programs, so that what is measured is the attach machinery
 * and the per-call cost of each way into a program; and rkf funclatency's measurement.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "rkf.bpf.h"
#include "../../user/bpf/log2.bpf.h"

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

/* Sleepable forms: what running under RCU tasks trace costs each way. */
RKF_MULTI_FENTRY_S
int BPF_PROG(rkf_fentry_s)
{
	return 0;
}

RKF_MULTI_FEXIT_S
int BPF_PROG(rkf_fexit_s)
{
	return 0;
}

SEC("fentry.s/__x64_sys_getpgid")
int BPF_PROG(single_fentry_s)
{
	return 0;
}

SEC("fexit.s/__x64_sys_getpgid")
int BPF_PROG(single_fexit_s)
{
	return 0;
}

SEC("kprobe.multi")
int kprobe_multi(struct pt_regs *ctx)
{
	return 0;
}

/*
 * rkf funclatency's measurement (user/bpf/funclatency.bpf.c) three ways: an rkf_multi
 * session, a kprobe_multi session (kprobe.session) and the kernel's own fsession on the
 * one function.  Each keeps the time in the call's cookie on entry and, on exit, adds
 * the time since to the log2 slot of the histogram of the function bpf_get_func_ip()
 * names (user space puts the function in the map).
 */
struct lat_hist {
	__u64 slots[32];
	__u64 count;
	__u64 total_ns;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4);
	__type(key, __u64);
	__type(value, struct lat_hist);
} lat_hists SEC(".maps");

__u64 lat_unknown;

static __always_inline int lat_run(void *ctx, bool exit, __u64 *start)
{
	struct lat_hist *h;
	__u64 ip, delta;
	__u32 slot;

	if (!exit) {
		*start = bpf_ktime_get_ns();
		return 0;
	}
	delta = bpf_ktime_get_ns() - *start;
	ip = bpf_get_func_ip(ctx);
	h = bpf_map_lookup_elem(&lat_hists, &ip);
	if (!h) {
		__sync_fetch_and_add(&lat_unknown, 1);
		return 0;
	}
	slot = log2_u64(delta);
	if (slot >= 32)
		slot = 31;
	__sync_fetch_and_add(&h->slots[slot], 1);
	__sync_fetch_and_add(&h->count, 1);
	__sync_fetch_and_add(&h->total_ns, delta);
	return 0;
}

RKF_MULTI_FSESSION
int BPF_PROG(rkf_latency)
{
	return lat_run(ctx, bpf_session_is_return(ctx), bpf_session_cookie(ctx));
}

SEC("kprobe.session/__x64_sys_getpgid")
int kprobe_latency(struct pt_regs *ctx)
{
	return lat_run(ctx, bpf_session_is_return(ctx), bpf_session_cookie(ctx));
}

SEC("fsession/__x64_sys_getpgid")
int BPF_PROG(single_latency)
{
	return lat_run(ctx, bpf_session_is_return(ctx), bpf_session_cookie(ctx));
}

char LICENSE[] SEC("license") = "GPL";
