// SPDX-License-Identifier: GPL-2.0
/*
 * `rkf percpu`: read one value of a per-cpu variable on every cpu.
 *
 * User space resolves the symbol and field (BTF + kallsyms) to a per-cpu address and size;
 * bpf_rkf_per_cpu_ptr() turns that into each cpu's address, which is read with
 * bpf_probe_read_kernel().  The address goes in as a plain number: the kfunc's __ign
 * argument takes any value, and the kfunc never dereferences it.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "rkf.bpf.h"

#define RKF_MAX_CPUS	256
#define RKF_MAX_VALUE	64

/* Inputs, set by user space before each run. */
__u64 target_addr;
__u32 value_size;
__u32 nr_cpus;

/* Outputs, one slot per cpu. */
__u64 cpu_addr[RKF_MAX_CPUS];
__s32 read_err[RKF_MAX_CPUS];
__u8 value[RKF_MAX_CPUS][RKF_MAX_VALUE];

SEC("syscall")
int read_percpu(void *ctx)
{
	__u32 size = value_size;
	__u32 cpu;

	if (size == 0 || size > RKF_MAX_VALUE)
		return -22; /* -EINVAL */

	for (cpu = 0; cpu < RKF_MAX_CPUS && cpu < nr_cpus; cpu++) {
		void *p = bpf_rkf_per_cpu_ptr((const void *)target_addr, cpu);

		cpu_addr[cpu] = (__u64)p;
		read_err[cpu] = p ? bpf_probe_read_kernel(value[cpu], size, p) : 0;
	}
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
