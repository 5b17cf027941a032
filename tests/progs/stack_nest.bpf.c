// SPDX-License-Identifier: GPL-2.0
/*
 * Nesting past the per-cpu regs slots: NR_NEST fentry programs on get_perf_callchain()
 * each take a stack, through the kfunc or through bpf_get_stack() (whose tracing form is
 * the raw tracepoint one, with three regs slots per cpu, get_bpf_raw_tp_regs()).  Each
 * stack taken enters get_perf_callchain() again with its slot held, where the programs
 * not running yet run, one level deeper: past three levels the call must fail with
 * -EBUSY and leave the buffer as it was.  The syscall program starts it with a stack of
 * its own, the same way, which holds the first slot (a syscall program's bpf_get_stack()
 * is the raw tracepoint one too).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "rkf.bpf.h"

#define NR_NEST		4
#define WORDS		8
#define UNTOUCHED	0x5a5a5a5a5a5a5a5aULL
#define EBUSY		16

extern void bpf_rcu_read_lock(void) __ksym;
extern void bpf_rcu_read_unlock(void) __ksym;

/* Inputs. */
__u32 target_tgid;
__u32 use_helper;

/* Outputs, per program: its runs by what the call gave. */
__u64 busy_untouched[NR_NEST];
__u64 busy_touched[NR_NEST];
__u64 ok[NR_NEST];
__u64 other[NR_NEST];
long other_ret[NR_NEST];
long outer_ret;

__u64 bufs[NR_NEST][WORDS];
__u64 outer_buf[WORDS];

static __always_inline int nest(void *ctx, __u32 k)
{
	__u64 *buf = bufs[k];
	bool touched = false;
	long ret;
	int i;

	if (bpf_get_current_pid_tgid() >> 32 != target_tgid)
		return 0;
	for (i = 0; i < WORDS; i++)
		buf[i] = UNTOUCHED;
	if (use_helper)
		ret = bpf_get_stack(ctx, buf, WORDS * sizeof(__u64), 0);
	else
		ret = bpf_rkf_get_stack(buf, WORDS * sizeof(__u64), 0);
	for (i = 0; i < WORDS; i++)
		touched |= buf[i] != UNTOUCHED;
	if (ret == -EBUSY && !touched) {
		busy_untouched[k]++;
	} else if (ret == -EBUSY) {
		busy_touched[k]++;
	} else if (ret > 0 && ret <= WORDS * sizeof(__u64) && ret % sizeof(__u64) == 0) {
		ok[k]++;
	} else {
		other[k]++;
		other_ret[k] = ret;
	}
	return 0;
}

/* Program k of the NR_NEST, each with its own recursion guard. */
#define NEST_PROG(k)					\
SEC("fentry/get_perf_callchain")			\
int BPF_PROG(nest##k)					\
{							\
	return nest(ctx, k);				\
}

NEST_PROG(0)
NEST_PROG(1)
NEST_PROG(2)
NEST_PROG(3)

SEC("syscall")
int outer(void *ctx)
{
	/*
	 * The helper, raw_tp's, calls get_perf_callchain() without rcu_read_lock() (lockdep:
	 * suspicious RCU usage, kernel/events/callchain.c) in a program that runs outside
	 * RCU: hold it for the helper here, as stack.bpf.c does.
	 */
	if (use_helper) {
		bpf_rcu_read_lock();
		outer_ret = bpf_get_stack(ctx, outer_buf, sizeof(outer_buf), 0);
		bpf_rcu_read_unlock();
	} else {
		outer_ret = bpf_rkf_get_stack(outer_buf, sizeof(outer_buf), 0);
	}
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
