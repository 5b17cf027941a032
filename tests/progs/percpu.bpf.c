// SPDX-License-Identifier: GPL-2.0
/*
 * rkf_percpu kselftests: the checks of the upstream ksyms_btf test, on the kfuncs, with the
 * in-kernel bpf_per_cpu_ptr()/bpf_this_cpu_ptr() helpers as the oracle in the same program.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include "rkf.bpf.h"

#define MAX_CPUS 64

extern const struct rq runqueues __ksym;
extern const int bpf_prog_active __ksym;
extern const struct rkf_percpu_probe rkf_percpu_probe __ksym;

/* Inputs. */
__u32 nr_cpus;			/* nr_cpu_ids */
__u64 per_cpu_offset_addr;	/* &__per_cpu_offset, from /proc/kallsyms */

/* What the program sees as the symbols' addresses. */
__u64 runqueues_addr, prog_active_addr, probe_addr;

/* Per cpu: kfunc and helper results, and values read through each. */
__u64 pcpu_offset[MAX_CPUS];
__u64 rq_kfunc[MAX_CPUS], rq_helper[MAX_CPUS];
__s32 rq_cpu[MAX_CPUS], rq_cpu_btf[MAX_CPUS], rq_cpu_helper[MAX_CPUS];
__u64 active_kfunc[MAX_CPUS], active_helper[MAX_CPUS];
__s32 active_val[MAX_CPUS], active_val_helper[MAX_CPUS];
__u64 probe_kfunc[MAX_CPUS], probe_self[MAX_CPUS];
__u32 probe_cpu[MAX_CPUS], probe_magic[MAX_CPUS];

/* The current cpu. */
__u32 this_cpu;
__u64 this_rq_kfunc, this_rq_helper, this_active_kfunc, this_active_helper;
__s32 this_rq_cpu, this_active_val, this_active_val_helper;

/*
 * Resolutions that must give NULL: cpu == nr_cpu_ids, nr_cpu_ids + 1, U32_MAX, NULL ptr.
 * Set to 1 before load, so that a result the program did not write is not taken for NULL.
 */
__u64 null_results[4];

SEC("syscall")
int percpu_all(void *ctx)
{
	__u32 cpu;

	runqueues_addr = (__u64)&runqueues;
	prog_active_addr = (__u64)&bpf_prog_active;
	probe_addr = (__u64)&rkf_percpu_probe;

	for (cpu = 0; cpu < MAX_CPUS && cpu < nr_cpus; cpu++) {
		const struct rq *rq, *rq_btf, *rq_h;
		const struct rkf_percpu_probe *probe;
		const int *active, *active_h;

		bpf_probe_read_kernel(&pcpu_offset[cpu], sizeof(__u64),
				      (void *)(per_cpu_offset_addr + cpu * sizeof(__u64)));

		rq_kfunc[cpu] = (__u64)bpf_rkf_per_cpu_ptr(&runqueues, cpu);
		rq_h = bpf_per_cpu_ptr(&runqueues, cpu);
		rq_helper[cpu] = (__u64)rq_h;
		rq_cpu_helper[cpu] = rq_h ? rq_h->cpu : -1;
		rq = rkf_per_cpu_ptr(&runqueues, cpu);
		rq_cpu[cpu] = rq ? rq->cpu : -1;
		rq_btf = rkf_per_cpu_btf_ptr(&runqueues, cpu);
		rq_cpu_btf[cpu] = rq_btf ? rq_btf->cpu : -1;

		active_kfunc[cpu] = (__u64)bpf_rkf_per_cpu_ptr(&bpf_prog_active, cpu);
		active_h = bpf_per_cpu_ptr(&bpf_prog_active, cpu);
		active_helper[cpu] = (__u64)active_h;
		active_val_helper[cpu] = active_h ? *active_h : -1;
		active = rkf_per_cpu_ptr(&bpf_prog_active, cpu);
		active_val[cpu] = active ? *active : -1;

		probe_kfunc[cpu] = (__u64)bpf_rkf_per_cpu_ptr(&rkf_percpu_probe, cpu);
		probe = rkf_per_cpu_ptr(&rkf_percpu_probe, cpu);
		if (probe) {
			probe_cpu[cpu] = probe->cpu;
			probe_magic[cpu] = probe->magic;
			probe_self[cpu] = probe->self;
		}
	}

	this_cpu = bpf_get_smp_processor_id();
	this_rq_kfunc = (__u64)bpf_rkf_this_cpu_ptr(&runqueues);
	this_rq_helper = (__u64)bpf_this_cpu_ptr(&runqueues);
	/* No NULL check, as with bpf_this_cpu_ptr(): the program must load so. */
	this_rq_cpu = rkf_this_cpu_ptr(&runqueues)->cpu;
	this_active_kfunc = (__u64)bpf_rkf_this_cpu_ptr(&bpf_prog_active);
	this_active_helper = (__u64)bpf_this_cpu_ptr(&bpf_prog_active);
	this_active_val = *rkf_this_cpu_ptr(&bpf_prog_active);
	this_active_val_helper = *(const int *)bpf_this_cpu_ptr(&bpf_prog_active);

	null_results[0] = (__u64)bpf_rkf_per_cpu_ptr(&runqueues, nr_cpus);
	null_results[1] = (__u64)bpf_rkf_per_cpu_ptr(&runqueues, nr_cpus + 1);
	null_results[2] = (__u64)bpf_rkf_per_cpu_ptr(&runqueues, 0xffffffff);
	null_results[3] = (__u64)bpf_rkf_per_cpu_ptr((void *)0, 0);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
