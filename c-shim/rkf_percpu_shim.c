// SPDX-License-Identifier: GPL-2.0
/*
 * rkf_percpu: kfunc entry points and BTF set.  The logic is in rust/percpu.rs, but for
 * this_cpu_ptr(), a macro (one per-cpu load and an add, inline here as in the helper).
 *
 * A typed per-cpu __ksym (&runqueues) is a PTR_TO_BTF_ID | MEM_PERCPU register, which
 * every checked kfunc argument class rejects (kernel/bpf/verifier.c, get_kfunc_arg_type
 * and its callers).  The only way in is a pointer argument named *__ign, which the
 * verifier does not check at all.  The kfuncs therefore return void *, a scalar to the
 * verifier: the program cannot dereference the result until it has cast it with
 * bpf_rdonly_cast(), which makes every load fault-safe (BPF_PROBE_MEM).  rkf.bpf.h wraps
 * this in rkf_per_cpu_ptr() / rkf_this_cpu_ptr().
 */

#include <linux/bpf.h>
#include <linux/btf.h>
#include <linux/btf_ids.h>
#include <linux/percpu.h>

#include "rkf.h"

/* Read by programs and tests at these offsets (rust/percpu.rs asserts rkf-core's copy). */
static_assert(sizeof(struct rkf_percpu_probe) == 16);
static_assert(offsetof(struct rkf_percpu_probe, self) == 8);

DEFINE_PER_CPU(struct rkf_percpu_probe, rkf_percpu_probe);

__bpf_kfunc_start_defs();

/**
 * bpf_rkf_per_cpu_ptr() - resolve a per-cpu pointer for one cpu
 * @ptr__ign: address of a per-cpu variable, usually &sym of a typed __ksym
 * @cpu:      the cpu whose copy to return
 *
 * Return: the address of @cpu's copy of @ptr__ign, or NULL when @ptr__ign is NULL (an
 * unresolved weak __ksym), @cpu >= nr_cpu_ids or @cpu is not a possible cpu.  The result
 * is a scalar to the verifier; cast it with bpf_rdonly_cast() to read through it.
 */
__bpf_kfunc void *bpf_rkf_per_cpu_ptr(const void *ptr__ign, u32 cpu)
{
	return rkf_percpu_resolve(ptr__ign, cpu);
}

/**
 * bpf_rkf_this_cpu_ptr() - resolve a per-cpu pointer for the current cpu
 * @ptr__ign: address of a per-cpu variable, usually &sym of a typed __ksym
 *
 * BPF programs run with migration disabled, so the cpu cannot change under the caller.
 *
 * Return: the address of the current cpu's copy, or NULL when @ptr__ign is NULL.
 */
__bpf_kfunc void *bpf_rkf_this_cpu_ptr(const void *ptr__ign)
{
	if (!ptr__ign)
		return NULL;
	return this_cpu_ptr((void __percpu *)(uintptr_t)ptr__ign);
}

__bpf_kfunc_end_defs();

/*
 * KF_PERFMON: the result is a kernel address as a scalar, which a program could store
 * anywhere; only bpf_rdonly_cast() (itself KF_PERFMON) makes it a pointer to read
 * through.  The helpers' typed result is a pointer the verifier keeps a program without
 * CAP_PERFMON from leaking (allow_ptr_leaks), so they need only CAP_BPF.
 */
BTF_KFUNCS_START(rkf_percpu_kfunc_ids)
BTF_ID_FLAGS(func, bpf_rkf_per_cpu_ptr, KF_PERFMON)
BTF_ID_FLAGS(func, bpf_rkf_this_cpu_ptr, KF_PERFMON)
BTF_KFUNCS_END(rkf_percpu_kfunc_ids)

const struct btf_kfunc_id_set rkf_percpu_kfunc_set = {
	.owner = THIS_MODULE,
	.set = &rkf_percpu_kfunc_ids,
};
