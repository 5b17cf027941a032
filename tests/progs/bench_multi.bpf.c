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
 * Executable memory, for the memory column (tests/src/bin/rkf-bench/kmem.rs).
 * /proc/meminfo sees the text of BPF trampolines and of rkf_multi's images only in whole
 * 2 MiB steps: one pack of the BPF pack allocator (kernel/bpf/core.c) holds the text of
 * many, and text of every kind comes from 2 MiB chunks of the execmem ROX cache
 * (mm/execmem.c) on x86, so an attach adds a step or nothing, whatever it took.  These
 * count, meanwhile, the vmalloc areas made inside an execmem_alloc() of text (taken out
 * of the meminfo figure) and the text each caller asked for (put back): BPF text as the
 * pack allocator rounds it, 64-byte chunks in a pack and pages beyond one, other text
 * (ftrace's and kprobes' trampolines) in pages.  Module data is neither: a BPF
 * trampoline update takes a page of it for a moment (arch_bpf_trampoline_size()), which
 * meminfo does not see either.  Both are counted on entry, as asked for: an attempt
 * that fails counts too.
 */
__u64 pack_size;		/* BPF_PROG_PACK_SIZE, set before the load */
__u64 exec_vmalloc_bytes;
__u64 text_bytes;

#define TEXT_PAGE	4096ULL
#define TEXT_CHUNK	64ULL

/* The tasks inside an execmem_alloc() of text. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u64);
	__type(value, __u8);
} in_text_alloc SEC(".maps");

static __always_inline __u64 round_to(__u64 n, __u64 to)
{
	return (n + to - 1) & ~(to - 1);
}

SEC("kprobe/execmem_alloc")
int BPF_KPROBE(text_alloc, enum execmem_type type, __u64 size)
{
	__u64 task = bpf_get_current_pid_tgid();
	__u8 one = 1;

	if (type != EXECMEM_MODULE_TEXT && type != EXECMEM_KPROBES && type != EXECMEM_FTRACE &&
	    type != EXECMEM_BPF)
		return 0;
	/* BPF text is counted in bpf_text(), as asked for, not as the packs it fills. */
	if (type != EXECMEM_BPF)
		__sync_fetch_and_add(&text_bytes, round_to(size, TEXT_PAGE));
	bpf_map_update_elem(&in_text_alloc, &task, &one, BPF_ANY);
	return 0;
}

SEC("kretprobe/execmem_alloc")
int BPF_KRETPROBE(text_alloc_done)
{
	__u64 task = bpf_get_current_pid_tgid();

	bpf_map_delete_elem(&in_text_alloc, &task);
	return 0;
}

SEC("kprobe/__vmalloc_node_range_noprof")
int BPF_KPROBE(exec_vmalloc, unsigned long size)
{
	__u64 task = bpf_get_current_pid_tgid();

	if (bpf_map_lookup_elem(&in_text_alloc, &task))
		__sync_fetch_and_add(&exec_vmalloc_bytes, round_to(size, TEXT_PAGE));
	return 0;
}

SEC("kprobe/bpf_prog_pack_alloc")
int BPF_KPROBE(bpf_text, __u32 size)
{
	__u64 n = size <= pack_size ? round_to(size, TEXT_CHUNK) : round_to(size, TEXT_PAGE);

	__sync_fetch_and_add(&text_bytes, n);
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
