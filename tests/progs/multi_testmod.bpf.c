// SPDX-License-Identifier: GPL-2.0
/*
 * rkf_multi selftests on functions of another module: one call each of rkf_testmod's
 * rkf_testmod_multi_test*(), with known arguments, from a syscall program.  Apart from
 * multi.bpf.c so that the rkf_multi tests on vmlinux do not need rkf_testmod.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

extern int bpf_rkf_testmod_multi_run(void) __ksym;
extern int bpf_rkf_testmod_multi_run_wide(void) __ksym;

/* The kfunc's result: a bit per function that returned a wrong value. */
int bad_returns = -1;

SEC("syscall")
int run_testmod_targets(void *ctx)
{
	bad_returns = bpf_rkf_testmod_multi_run();
	return 0;
}

/*
 * bpf_rkf_testmod_multi_run_wide()'s result, as bad_returns: rkf_testmod_multi_test7(),
 * _test11() and _test12(), the functions of more than six arguments (multi_wide.bpf.c
 * traces them).
 */
int bad_wide_returns = -1;

SEC("syscall")
int run_wide_targets(void *ctx)
{
	bad_wide_returns = bpf_rkf_testmod_multi_run_wide();
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
