// SPDX-License-Identifier: GPL-2.0
/*
 * A user stack of a known shape for the rkf_stack tests, built with frame pointers so that
 * the kernel's frame-pointer walk of the user stack goes through every level.
 */
#include <time.h>

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
