// SPDX-License-Identifier: GPL-2.0
/*
 * rkf_testmod: kernel code of a known shape for the rkf selftests and benchmarks, as
 * tools/testing/selftests/bpf/bpf_testmod does for upstream.  Not for production kernels.
 *
 * bpf_rkf_testmod_recurse(depth), a kfunc for syscall programs, recurses @depth frames
 * deep through rkf_testmod_recurse() and then calls rkf_testmod_leaf(), where fentry
 * programs take kernel stacks of a chosen depth.  These must be C: fentry attaches
 * through the function's BTF, and Rust code has none.
 */

#include <linux/bpf.h>
#include <linux/btf.h>
#include <linux/btf_ids.h>
#include <linux/compiler.h>

#include "rkf.h"

/**
 * rkf_testmod_leaf() - the innermost frame of a rkf_testmod_recurse() chain
 * @depth: the depth of the chain that called it
 *
 * Return: @depth, so that the call has a use.
 */
noinline u64 rkf_testmod_leaf(u64 depth)
{
	/* Keep the call: the function has no side effect the compiler could see. */
	barrier();
	return depth;
}

/**
 * rkf_testmod_recurse() - @depth nested frames, then rkf_testmod_leaf()
 * @depth: how many frames of this function to stack up
 *
 * The result goes through OPTIMIZER_HIDE_VAR() after each call returns, so the compiler
 * can neither turn the recursion into a loop nor a call into a tail call: every level,
 * the last included, leaves its return address on the stack.
 *
 * Return: @depth.
 */
noinline u64 rkf_testmod_recurse(u32 depth)
{
	u64 ret;

	if (!depth)
		ret = rkf_testmod_leaf(0);
	else
		ret = rkf_testmod_recurse(depth - 1) + 1;
	OPTIMIZER_HIDE_VAR(ret);
	return ret;
}

__bpf_kfunc_start_defs();

/**
 * bpf_rkf_testmod_recurse() - run rkf_testmod_recurse() from a syscall program
 * @depth: the number of rkf_testmod_recurse() frames, at most RKF_TESTMOD_MAX_DEPTH
 *
 * Return: @depth, or -E2BIG when @depth is above RKF_TESTMOD_MAX_DEPTH.
 */
__bpf_kfunc s64 bpf_rkf_testmod_recurse(u32 depth)
{
	if (depth > RKF_TESTMOD_MAX_DEPTH)
		return -E2BIG;
	return rkf_testmod_recurse(depth);
}

__bpf_kfunc_end_defs();

BTF_KFUNCS_START(rkf_testmod_kfunc_ids)
BTF_ID_FLAGS(func, bpf_rkf_testmod_recurse)
BTF_KFUNCS_END(rkf_testmod_kfunc_ids)

const struct btf_kfunc_id_set rkf_testmod_kfunc_set = {
	.owner = THIS_MODULE,
	.set = &rkf_testmod_kfunc_ids,
};
