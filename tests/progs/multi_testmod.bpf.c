// SPDX-License-Identifier: GPL-2.0
/*
 * rkf_multi selftests on functions of another module: one call each of rkf_testmod's
 * rkf_testmod_multi_test*(), with known arguments, from a syscall program (the tracing
 * programs are in multi.bpf.c and, for functions of more than six arguments,
 * multi_wide.bpf.c).  Apart from multi.bpf.c so that the rkf_multi tests on vmlinux do
 * not need rkf_testmod.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

extern int bpf_rkf_testmod_multi_run(void) __ksym;
extern int bpf_rkf_testmod_multi_run_wide(void) __ksym;

/*
 * What the kfuncs returned: a bit per function that returned a wrong value, those of
 * bpf_rkf_testmod_multi_run() (test1, 2, 3 and 6) in bits 0-3, those of
 * bpf_rkf_testmod_multi_run_wide() (test7, 11 and 12, the functions of more than six
 * arguments) in bits 4-6.
 */
int bad_returns = -1;

SEC("syscall")
int run_testmod_targets(void *ctx)
{
	bad_returns = bpf_rkf_testmod_multi_run() | bpf_rkf_testmod_multi_run_wide() << 4;
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
