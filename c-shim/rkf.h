/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The surface between the rkf C shims and the rkf Rust crates.
 *
 * The shims hold only what must be C: __bpf_kfunc entry points and their BTF_KFUNCS sets
 * (Rust code gets no BTF), and per-cpu variables that BPF programs reach as typed __ksym.
 * Everything else is Rust.  rust/shim.rs declares the same items for Rust; keep the two
 * in step.
 */
#ifndef _RKF_H
#define _RKF_H

#include <linux/btf.h>
#include <linux/percpu-defs.h>
#include <linux/types.h>

/* ---- rkf_percpu ------------------------------------------------------------------ */

#define RKF_PERCPU_PROBE_MAGIC 0x726b6670 /* "rkfp" */

/**
 * struct rkf_percpu_probe - rkf_percpu's own per-cpu variable, for tests and examples
 * @cpu:   the cpu this copy belongs to
 * @magic: %RKF_PERCPU_PROBE_MAGIC once the module has initialised the copy
 * @self:  the address of this copy, as the module resolved it
 */
struct rkf_percpu_probe {
	u32 cpu;
	u32 magic;
	u64 self;
};

DECLARE_PER_CPU(struct rkf_percpu_probe, rkf_percpu_probe);

/* The kfunc set of rkf_percpu, registered from Rust. */
extern const struct btf_kfunc_id_set rkf_percpu_kfunc_set;

/* Implemented in Rust (rust/percpu.rs). */
void *rkf_percpu_resolve(const void *ptr, u32 cpu);
void *rkf_percpu_resolve_this(const void *ptr);

/* ---- rkf_stack ------------------------------------------------------------------- */

struct mm_struct;
struct pt_regs;

/* The kfunc sets of rkf_stack: for the tracing hook, and for kprobe programs. */
extern const struct btf_kfunc_id_set rkf_stack_tracing_kfunc_set;
extern const struct btf_kfunc_id_set rkf_stack_kprobe_kfunc_set;

long rkf_stack_capture(struct pt_regs *regs, bool user, u32 max_depth, u32 skip,
		       void *buf, u32 elem_size);
struct mm_struct *rkf_stack_mm_lock(void **cookie);
void rkf_stack_mm_unlock(struct mm_struct *mm, void *cookie);
void rkf_stack_mm_init(void);
void rkf_stack_mm_exit(void);

/* Implemented in Rust (rust/stack.rs). */
long rkf_stack_get(struct pt_regs *regs, void *buf, u32 size, u64 flags);
long rkf_stack_get_sampled(const u64 *ips, u64 nr, void *buf, u32 size, u64 flags);

#endif /* _RKF_H */
