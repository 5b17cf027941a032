// SPDX-License-Identifier: GPL-2.0
/*
 * A user stack of a known shape for the rkf_stack tests, built with frame pointers so that
 * the kernel's frame-pointer walk of the user stack goes through every level.
 */
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

__attribute__((noinline)) int rkf_stack_target(int depth)
{
	struct timespec ts = { 0, 1000 };
	volatile int r;

	if (depth > 0) {
		r = rkf_stack_target(depth - 1);
		return r + 1;
	}
	/* clock_nanosleep: hrtimer_nanosleep() runs, and the task switches out. */
	nanosleep(&ts, NULL);
	return 0;
}

/*
 * Distinct user stacks for the "no stack lost" test: @variant picks one of eight leaf
 * functions, @depth the recursion above it.
 */
#define LEAF(n)								\
	__attribute__((noinline)) static int leaf##n(void)		\
	{								\
		struct timespec ts = { 0, 1000 + n };			\
		volatile int r = nanosleep(&ts, NULL);			\
		return r + n;						\
	}
LEAF(0) LEAF(1) LEAF(2) LEAF(3) LEAF(4) LEAF(5) LEAF(6) LEAF(7)

static int (*const leaves[8])(void) = {
	leaf0, leaf1, leaf2, leaf3, leaf4, leaf5, leaf6, leaf7,
};

__attribute__((noinline)) int rkf_stack_variant(int depth, int variant)
{
	volatile int r;

	if (depth > 0) {
		r = rkf_stack_variant(depth - 1, variant);
		return r + 1;
	}
	return leaves[variant & 7]();
}

/* getpgid(0) from @depth frames of this function: the user stack of the benchmark. */
__attribute__((noinline)) long rkf_stack_syscall_at(int depth)
{
	volatile long r;

	if (depth > 0) {
		r = rkf_stack_syscall_at(depth - 1);
		return r + 1;
	}
	return syscall(SYS_getpgid, 0);
}

/*
 * Calls @fn, a function that sets up no frame of its own (glibc's getpid()), with rbp
 * pointing to a frame whose return address is @ret and after which there is none: the
 * kernel's frame-pointer walk of the user stack from inside @fn finds @ret as a caller.
 * The stack is moved past the red zone and aligned first, as this function is a leaf to
 * the compiler; rbp is saved and restored around the call.  @fn may change only the
 * registers the clobbers name: no vector or x87 register, as getpid() changes none.
 */
int rkf_call_with_bogus_caller(int (*fn)(void), unsigned long ret)
{
	unsigned long frame[2] = { 0, ret };	/* next frame: none; return address */
	unsigned long *fp = frame;
	int r;

	asm volatile("mov %%rsp, %%r12\n\t"
		     "sub $128, %%rsp\n\t"
		     "and $-16, %%rsp\n\t"
		     "push %%rbp\n\t"
		     "sub $8, %%rsp\n\t"
		     "mov %%rsi, %%rbp\n\t"
		     "call *%%rdi\n\t"
		     "mov 8(%%rsp), %%rbp\n\t"
		     "mov %%r12, %%rsp\n\t"
		     : "=a" (r), "+D" (fn), "+S" (fp)
		     :
		     : "r12", "rcx", "rdx", "r8", "r9", "r10", "r11", "memory", "cc");
	return r;
}
