// SPDX-License-Identifier: GPL-2.0
/*
 * rkf offcputime: how long tasks wait off a cpu, and where, as bcc's offcputime measures it
 * (time from switch-out to switch-in, per task), with every stack delivered: no stack map.
 *
 * At switch-out, the task leaving the cpu is current, so both its stacks are taken then,
 * as libbpf-tools' offcputime takes them, and kept with the time in the task's local
 * storage: the kernel stack through perf's callchain walk from this program
 * (bpf_rkf_get_stack()), which keeps the scheduler's and the locks' own functions
 * (__schedule(), schedule(), mutex_lock(), do_nanosleep(), ...) that a walk of a task
 * switched out leaves out (stack_trace_save_tsk(), as /proc/PID/stack), with the
 * tracing frames above __schedule() on top, which user space cuts off
 * (user/src/stacks/offcpu.rs).  At switch-in, the interval and the stacks go to a ring
 * buffer.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "rkf.bpf.h"

#define MAX_FRAMES 127
#define TASK_COMM_LEN 16
#define PF_KTHREAD 0x00200000	/* include/linux/sched.h */

/* One off-cpu interval; user space (user/src/stacks/offcpu.rs) reads it as the skeleton's type. */
struct rkf_offcpu_sample {
	__u32 tgid;
	__u32 pid;
	__u64 off_ns;		/* switch-out to switch-in */
	__s32 kernel_ret;	/* bytes written, or -errno */
	__s32 user_ret;
	char comm[TASK_COMM_LEN];
	__u64 kernel[MAX_FRAMES];
	/* struct bpf_stack_build_id entries (BPF_F_USER_BUILD_ID): build id + file offset */
	__u8 user[MAX_FRAMES * sizeof(struct bpf_stack_build_id)];
};

/* Never used: a global of the type makes the skeleton define it. */
struct rkf_offcpu_sample _sample_type = {};

/* What a task left the cpu with. */
struct switched_out {
	__u64 ts;		/* 0: not off a cpu since this program saw it leave */
	__s32 kernel_ret;
	__s32 user_ret;
	__u64 kernel[MAX_FRAMES];
	__u8 user[MAX_FRAMES * sizeof(struct bpf_stack_build_id)];
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct switched_out);
} start SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 16 << 20);
} samples SEC(".maps");

/* Inputs. */
__u32 target_tgid;	/* 0: every task */
__u32 want_kernel;
__u32 want_user;
__u64 min_ns;
__u64 max_ns;
/* Only tasks whose state (task->__state) was this one as they left, if filter_state. */
__u32 filter_state;
__u32 state;

/* Outputs. */
__u64 dropped;		/* intervals lost to a full ring buffer */
__u64 untracked;	/* switch-outs with no task storage to keep them in */

static bool wanted(const struct task_struct *t)
{
	/* The idle tasks are never off a cpu waiting: they run when nothing else does. */
	if (!t->pid)
		return false;
	return !target_tgid || t->tgid == target_tgid;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(offcpu_switch, bool preempt, struct task_struct *prev,
	     struct task_struct *next, unsigned int prev_state)
{
	struct rkf_offcpu_sample *s;
	struct switched_out *out;
	__u64 now = bpf_ktime_get_ns(), off;

	if (wanted(prev) && (!filter_state || prev->__state == state)) {
		out = bpf_task_storage_get(&start, prev, NULL,
					   BPF_LOCAL_STORAGE_GET_F_CREATE);
		if (out) {
			out->ts = now;
			out->kernel_ret = want_kernel ?
				rkf_get_stack(ctx, out->kernel, sizeof(out->kernel), 0) : 0;
			/* A kernel thread has no user stack: 0 frames, not an error. */
			out->user_ret = want_user && !(prev->flags & PF_KTHREAD) ?
				rkf_get_task_stack(prev, out->user, sizeof(out->user),
						   BPF_F_USER_STACK | BPF_F_USER_BUILD_ID) : 0;
		} else {
			__sync_fetch_and_add(&untracked, 1);
		}
	}

	/* A task left out as it left has no interval: none began with a state left out. */
	if (!wanted(next))
		return 0;
	out = bpf_task_storage_get(&start, next, NULL, 0);
	if (!out || !out->ts)
		return 0;
	off = now - out->ts;
	out->ts = 0;
	if (off < min_ns || off > max_ns)
		return 0;
	s = bpf_ringbuf_reserve(&samples, sizeof(*s), 0);
	if (!s) {
		__sync_fetch_and_add(&dropped, 1);
		return 0;
	}
	s->tgid = next->tgid;
	s->pid = next->pid;
	s->off_ns = off;
	bpf_probe_read_kernel_str(s->comm, sizeof(s->comm), next->comm);
	s->kernel_ret = out->kernel_ret;
	if (out->kernel_ret > 0)
		bpf_probe_read_kernel(s->kernel, sizeof(s->kernel), out->kernel);
	s->user_ret = out->user_ret;
	if (out->user_ret > 0)
		bpf_probe_read_kernel(s->user, sizeof(s->user), out->user);
	bpf_ringbuf_submit(s, 0);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
