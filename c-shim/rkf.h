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

struct mm_struct *rkf_stack_mm_lock(void **cookie);
void rkf_stack_mm_unlock(struct mm_struct *mm, void *cookie);
void rkf_stack_mm_init(void);
void rkf_stack_mm_exit(void);

/**
 * struct rkf_stack_plan - what to walk, as the flags and size of one call ask
 * @user:      the user stack instead of the kernel stack
 * @build_id:  build-id entries instead of ips
 * @skip:      frames to drop from the top
 * @max_depth: how deep to walk, skipped frames included
 * @elem_size: 8 for ips, sizeof(struct bpf_stack_build_id) for build-id entries
 */
struct rkf_stack_plan {
	bool user;
	bool build_id;
	u32 skip;
	u32 max_depth;
	u32 elem_size;
};

/* Implemented in Rust (rust/stack.rs). */
long rkf_stack_plan(void *buf, u32 size, u64 flags, struct rkf_stack_plan *plan);
long rkf_stack_finish(void *buf, u32 size, const struct rkf_stack_plan *plan, long nr);
long rkf_stack_get_sampled(const u64 *ips, u64 nr, void *buf, u32 size, u64 flags);

/* ---- rkf_testmod (selftests and benchmarks only) ----------------------------------- */

/* Deep enough for stacks past perf_event_max_stack, shallow for a 16 KiB kernel stack. */
#define RKF_TESTMOD_MAX_DEPTH 256

extern const struct btf_kfunc_id_set rkf_testmod_kfunc_set;

u64 rkf_testmod_leaf(u64 depth);
u64 rkf_testmod_recurse(u32 depth);

#endif /* _RKF_H */
