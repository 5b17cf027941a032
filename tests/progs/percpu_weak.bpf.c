// SPDX-License-Identifier: GPL-2.0
/*
 * rkf_percpu kselftest: a typed weak __ksym that no kernel defines, which libbpf leaves
 * unresolved (its address is 0), through the rkf.bpf.h macros, as upstream's
 * test_ksyms_weak.c takes one through the helpers.  rkf_this_cpu_ptr() needs no NULL
 * check, and a load through its NULL reads zero; rkf_per_cpu_ptr() gives NULL.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "rkf.bpf.h"

extern const int rkf_selftest_no_such_percpu_var __ksym __weak;

/* Set to something else than what the program must write. */
__u64 this_kfunc = 1, per_cpu_kfunc = 1;
__s32 this_val = -1, per_cpu_is_null = -1;

SEC("syscall")
int percpu_weak(void *ctx)
{
	this_kfunc = (__u64)bpf_rkf_this_cpu_ptr(&rkf_selftest_no_such_percpu_var);
	/* No NULL check, as with bpf_this_cpu_ptr(). */
	this_val = *rkf_this_cpu_ptr(&rkf_selftest_no_such_percpu_var);
	per_cpu_kfunc = (__u64)bpf_rkf_per_cpu_ptr(&rkf_selftest_no_such_percpu_var, 0);
	per_cpu_is_null = !rkf_per_cpu_ptr(&rkf_selftest_no_such_percpu_var, 0);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
