// SPDX-License-Identifier: GPL-2.0
/*
 * rkf_testmod: kernel code of a known shape for the rkf selftests and benchmarks, as
 * tools/testing/selftests/bpf/bpf_testmod does for upstream.  Not for production kernels.
 *
 * bpf_rkf_testmod_recurse(depth), a kfunc for syscall and tracing programs, recurses
 * @depth frames deep through rkf_testmod_recurse() and then calls rkf_testmod_leaf(),
 * where fentry programs take kernel stacks of a chosen depth; a tracing program on
 * rkf_testmod_recurse() that calls it recurses into its own trampoline.
 * bpf_rkf_testmod_multi_run() calls rkf_multi's test targets in a module,
 * rkf_testmod_multi_test*(), with known arguments and checks what they return, as
 * net/bpf/test_run.c does with bpf_fentry_test*() for vmlinux.
 * bpf_rkf_testmod_wait_step(n), a sleepable kfunc for tracing programs, sleeps until the
 * module parameter "step" reaches @n: a sleepable program asleep for as long as a test
 * wants, or two programs of one call asleep one after the other, as the test moves the
 * parameter on.  These must be C: fentry and rkf_multi attach through the
 * function's BTF, and Rust code has none; kfuncs are C entry points.
 */

#include <linux/bits.h>
#include <linux/bpf.h>
#include <linux/btf.h>
#include <linux/btf_ids.h>
#include <linux/compiler.h>
#include <linux/moduleparam.h>
#include <linux/sched.h>
#include <linux/wait.h>

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

/*
 * rkf_multi's test targets in a module.  Not static, so that the compiler can neither
 * fold a call nor assume what a call returns; barrier() keeps each a real function.
 * Each returns the sum of its arguments, which bpf_rkf_testmod_multi_run() and
 * bpf_rkf_testmod_multi_run_wide() check.
 */

/**
 * rkf_testmod_multi_test1() - a target of one argument
 * @a: an int
 *
 * Return: @a + 1.
 */
noinline int rkf_testmod_multi_test1(int a)
{
	barrier();
	return a + 1;
}

/**
 * rkf_testmod_multi_test2() - a target of two arguments of different widths
 * @a: a signed byte
 * @b: a u64
 *
 * Return: @a + @b.
 */
noinline u64 rkf_testmod_multi_test2(s8 a, u64 b)
{
	barrier();
	return a + b;
}

/**
 * rkf_testmod_multi_test3() - a target of three arguments of different widths
 * @a: a u16
 * @b: an s32
 * @c: a u64
 *
 * Return: @a + @b + @c.
 */
noinline s64 rkf_testmod_multi_test3(u16 a, s32 b, u64 c)
{
	barrier();
	return a + b + c;
}

/**
 * rkf_testmod_multi_test6() - a target of six arguments, all in registers
 * @a: the first
 * @b: the second
 * @c: the third
 * @d: the fourth
 * @e: the fifth
 * @f: the sixth
 *
 * Return: their sum.
 */
noinline u64 rkf_testmod_multi_test6(u64 a, u64 b, u64 c, u64 d, u64 e, u64 f)
{
	barrier();
	return a + b + c + d + e + f;
}

/**
 * rkf_testmod_multi_test7() - a target of seven arguments, the seventh on the stack
 * @a: a u64
 * @b: an s8
 * @c: a u16
 * @d: an s32
 * @e: a pointer
 * @f: an s16
 * @g: an s64, on the caller's stack
 *
 * Return: their sum.
 */
noinline s64 rkf_testmod_multi_test7(u64 a, s8 b, u16 c, s32 d, void *e, s16 f, s64 g)
{
	barrier();
	return a + b + c + d + (unsigned long)e + f + g;
}

/**
 * rkf_testmod_multi_test11() - a target of eleven arguments, five on the stack
 * @a: a u64
 * @b: an s8
 * @c: a u16
 * @d: an s32
 * @e: a pointer
 * @f: an s16
 * @g: an s64, on the caller's stack, as the ones after it
 * @h: a u8
 * @i: an s32
 * @j: a u64
 * @k: an s64
 *
 * Return: their sum.
 */
noinline u64 rkf_testmod_multi_test11(u64 a, s8 b, u16 c, s32 d, void *e, s16 f, s64 g,
				      u8 h, s32 i, u64 j, s64 k)
{
	barrier();
	return a + b + c + d + (unsigned long)e + f + g + h + i + j + k;
}

/**
 * rkf_testmod_multi_test12() - a target of twelve arguments, the most a BPF trampoline
 * takes (MAX_BPF_FUNC_ARGS)
 * @a: a u64
 * @b: an s8
 * @c: a u16
 * @d: an s32
 * @e: a pointer
 * @f: an s16
 * @g: an s64, on the caller's stack, as the ones after it
 * @h: a u8
 * @i: an s32
 * @j: a u64
 * @k: an s64
 * @l: a u64
 *
 * Return: their sum.
 */
noinline u64 rkf_testmod_multi_test12(u64 a, s8 b, u16 c, s32 d, void *e, s16 f, s64 g,
				      u8 h, s32 i, u64 j, s64 k, u64 l)
{
	barrier();
	return a + b + c + d + (unsigned long)e + f + g + h + i + j + k + l;
}

static unsigned int rkf_testmod_step;
static DECLARE_WAIT_QUEUE_HEAD(rkf_testmod_step_wq);

/* Sets the parameter, and wakes the programs asleep in bpf_rkf_testmod_wait_step(). */
static int rkf_testmod_step_set(const char *val, const struct kernel_param *kp)
{
	int err = param_set_uint(val, kp);

	if (!err)
		wake_up_all(&rkf_testmod_step_wq);
	return err;
}

static const struct kernel_param_ops rkf_testmod_step_ops = {
	.set = rkf_testmod_step_set,
	.get = param_get_uint,
};
module_param_cb(step, &rkf_testmod_step_ops, &rkf_testmod_step, 0600);
MODULE_PARM_DESC(step, "Wakes the programs asleep in bpf_rkf_testmod_wait_step() for it or less");

__bpf_kfunc_start_defs();

/**
 * bpf_rkf_testmod_recurse() - run rkf_testmod_recurse() from a syscall or tracing program
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

/**
 * bpf_rkf_testmod_multi_run() - call rkf_testmod_multi_test*() once each, from a syscall
 * program, with the arguments tests/progs/multi.bpf.c expects
 *
 * Return: 0 if each returned what it must, else a bit per function that did not (bit 0
 * for test1, 1 for test2, 2 for test3, 3 for test6): a trampoline that corrupted an
 * argument or the return value shows here.
 */
__bpf_kfunc int bpf_rkf_testmod_multi_run(void)
{
	int bad = 0;

	if (rkf_testmod_multi_test1(1) != 2)
		bad |= BIT(0);
	if (rkf_testmod_multi_test2(-2, 3) != 1)
		bad |= BIT(1);
	if (rkf_testmod_multi_test3(4, -5, 6) != 5)
		bad |= BIT(2);
	if (rkf_testmod_multi_test6(1, 2, 3, 4, 5, 6) != 21)
		bad |= BIT(3);
	return bad;
}

/**
 * bpf_rkf_testmod_multi_run_wide() - call rkf_testmod_multi_test7(), _test11() and
 * _test12() once each, from a syscall program, with the arguments tests/src/multi/wide.rs
 * expects
 *
 * Return: 0 if each returned the sum of its arguments, else a bit per function that did
 * not (bit 0 for test7, 1 for test11, 2 for test12): a trampoline that corrupted a stack
 * argument or the return value shows here.
 */
__bpf_kfunc int bpf_rkf_testmod_multi_run_wide(void)
{
	/* Every bit of each type in use, and signs that extend. */
	u64 a = 0xfedcba9876543210ULL, j = 0x8000000000000001ULL, l = 0x0123456789abcdefULL;
	s64 g = -0x123456789abcdefLL, k = -0x7fffffffffffffffLL;
	void *e = (void *)0xffff888012345678UL;
	s32 d = -100000, i = -2;
	u16 c = 0xfff0;
	s16 f = -300;
	s8 b = -7;
	u8 h = 0xfe;
	u64 sum7 = a + b + c + d + (unsigned long)e + f + g;
	int bad = 0;

	if ((u64)rkf_testmod_multi_test7(a, b, c, d, e, f, g) != sum7)
		bad |= BIT(0);
	if (rkf_testmod_multi_test11(a, b, c, d, e, f, g, h, i, j, k) != sum7 + h + i + j + k)
		bad |= BIT(1);
	if (rkf_testmod_multi_test12(a, b, c, d, e, f, g, h, i, j, k, l) !=
	    sum7 + h + i + j + k + l)
		bad |= BIT(2);
	return bad;
}

/**
 * bpf_rkf_testmod_wait_step() - sleep until the module parameter "step" is at least @step
 * @step: the value to wait for
 *
 * For sleepable tracing programs: a program asleep for as long as a test wants, which
 * moves the parameter on once it has seen what it looks for, or two programs of one call
 * that wait for steps 1 and 2, asleep one after the other.  The task sleeps until then
 * (each write of the parameter wakes it to look, and it sleeps again if its step is not
 * reached), for at most RKF_TESTMOD_WAIT_MAX seconds.
 *
 * Return: 0 once the parameter reached @step, -ETIMEDOUT after RKF_TESTMOD_WAIT_MAX
 * seconds, or -EINTR if the task has a signal pending.
 */
__bpf_kfunc int bpf_rkf_testmod_wait_step(u32 step)
{
	long left = wait_event_interruptible_timeout(rkf_testmod_step_wq,
						     READ_ONCE(rkf_testmod_step) >= step,
						     RKF_TESTMOD_WAIT_MAX * HZ);

	if (left < 0)
		return -EINTR;
	return left ? 0 : -ETIMEDOUT;
}

__bpf_kfunc_end_defs();

BTF_KFUNCS_START(rkf_testmod_kfunc_ids)
BTF_ID_FLAGS(func, bpf_rkf_testmod_recurse)
BTF_ID_FLAGS(func, bpf_rkf_testmod_multi_run)
BTF_ID_FLAGS(func, bpf_rkf_testmod_multi_run_wide)
BTF_KFUNCS_END(rkf_testmod_kfunc_ids)

const struct btf_kfunc_id_set rkf_testmod_kfunc_set = {
	.owner = THIS_MODULE,
	.set = &rkf_testmod_kfunc_ids,
};

BTF_KFUNCS_START(rkf_testmod_tracing_kfunc_ids)
BTF_ID_FLAGS(func, bpf_rkf_testmod_recurse)
BTF_ID_FLAGS(func, bpf_rkf_testmod_wait_step, KF_SLEEPABLE)
BTF_KFUNCS_END(rkf_testmod_tracing_kfunc_ids)

const struct btf_kfunc_id_set rkf_testmod_tracing_kfunc_set = {
	.owner = THIS_MODULE,
	.set = &rkf_testmod_tracing_kfunc_ids,
};
