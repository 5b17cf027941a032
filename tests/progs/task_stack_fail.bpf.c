// SPDX-License-Identifier: GPL-2.0
/*
 * bpf_rkf_get_task_stack() on a task it may not take: an fentry program's argument, an
 * untrusted pointer (kernel/bpf/btf.c's prog_args_trusted() trusts the arguments of
 * tp_btf and iterator programs only).  The verifier refuses the kfunc's call ("must be
 * a rcu pointer": the kfunc is KF_RCU) and admits the helper's, which takes it.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "rkf.bpf.h"

__u64 buf[8];
long ret;

SEC("fentry/wake_up_process")
int BPF_PROG(kfunc_untrusted_task, struct task_struct *p)
{
	ret = bpf_rkf_get_task_stack(p, buf, sizeof(buf), 0);
	return 0;
}

/* The control: the same call of the helper loads. */
SEC("fentry/wake_up_process")
int BPF_PROG(helper_untrusted_task, struct task_struct *p)
{
	ret = bpf_get_task_stack(p, buf, sizeof(buf), 0);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
