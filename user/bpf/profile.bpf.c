// SPDX-License-Identifier: GPL-2.0
/*
 * rkf profile: on every cpu-clock sample, the kernel and user stacks of the interrupted
 * task, written by bpf_rkf_get_stack_pe() straight into a ring buffer record.  No stack
 * map: no stack is lost to a hash collision, and user space aggregates.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "rkf.bpf.h"

#define MAX_FRAMES 127
#define TASK_COMM_LEN 16

/* One sample; user space (user/src/profile.rs) reads it as the skeleton's type. */
struct rkf_profile_sample {
	__u32 tgid;
	__u32 pid;
	__s32 kernel_ret;	/* bytes written, or -errno */
	__s32 user_ret;
	char comm[TASK_COMM_LEN];
	__u64 kernel[MAX_FRAMES];
	/* struct bpf_stack_build_id entries (BPF_F_USER_BUILD_ID): build id + file offset */
	__u8 user[MAX_FRAMES * sizeof(struct bpf_stack_build_id)];
};

/* Never used: a global of the type makes the skeleton define it (types::rkf_profile_sample). */
struct rkf_profile_sample _sample_type = {};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 16 << 20);	/* about 3,200 samples of 5 KiB */
} samples SEC(".maps");

/* Inputs. */
__u32 target_tgid;	/* 0: every task */
__u32 want_kernel;
__u32 want_user;
__u32 include_idle;

/* Outputs. */
__u64 dropped;		/* samples lost to a full ring buffer */

SEC("perf_event")
int profile(struct bpf_perf_event_data *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct rkf_profile_sample *s;

	if (!(__u32)id && !include_idle)
		return 0;
	if (target_tgid && id >> 32 != target_tgid)
		return 0;
	s = bpf_ringbuf_reserve(&samples, sizeof(*s), 0);
	if (!s) {
		__sync_fetch_and_add(&dropped, 1);
		return 0;
	}
	s->tgid = id >> 32;
	s->pid = id;
	bpf_get_current_comm(s->comm, sizeof(s->comm));
	s->kernel_ret = 0;
	s->user_ret = 0;
	if (want_kernel)
		s->kernel_ret = bpf_rkf_get_stack_pe(ctx, s->kernel, sizeof(s->kernel), 0);
	if (want_user)
		s->user_ret = bpf_rkf_get_stack_pe(ctx, s->user, sizeof(s->user),
						   BPF_F_USER_STACK | BPF_F_USER_BUILD_ID);
	bpf_ringbuf_submit(s, 0);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
