// SPDX-License-Identifier: GPL-2.0
/*
 * rkf_multi: images of generated trampolines in BPF text.  The code is generated in Rust
 * (rust/core/src/tramp.rs, rust/multi/image.rs); allocating executable memory, writing
 * it and naming it for kallsyms, perf and the unwinder take the BPF JIT's own helpers,
 * and kfree_rcu() is a macro.
 */

#include <linux/bpf.h>
#include <linux/filter.h>
#include <linux/rculist.h>
#include <linux/slab.h>
#include <asm/alternative.h>
#include <asm/cpufeature.h>
#include <asm/nospec-branch.h>

#include "rkf.h"

/**
 * struct rkf_multi_image - generated trampolines, in BPF text
 * @ksym: its symbol: kallsyms, perf and the unwinder know it as BPF text
 * @code: the text, from the BPF pack allocator
 * @size: its size
 * @rcu:  frees the image once no reader of the BPF ksym tree can see @ksym
 */
struct rkf_multi_image {
	struct bpf_ksym ksym;
	void *code;
	u32 size;
	struct rcu_head rcu;
};

/**
 * rkf_multi_return_thunk() - what generated code returns through
 *
 * As emit_return() of arch/x86/net/bpf_jit_comp.c: where the cpu wants return thunks
 * (cpu_wants_rethunk()), a jmp to the active one; otherwise a plain ret.
 *
 * Return: the address of x86_return_thunk, or 0 for a plain ret.
 */
unsigned long rkf_multi_return_thunk(void)
{
	if (IS_ENABLED(CONFIG_MITIGATION_RETHUNK) && cpu_feature_enabled(X86_FEATURE_RETHUNK))
		return (unsigned long)x86_return_thunk;
	return 0;
}

/**
 * rkf_multi_call_depth_account() - the call depth accounting before a call in generated code
 * @buf:  where to write it
 * @room: the bytes @buf has
 * @ip:   where @buf will run
 *
 * What x86_call_depth_emit_accounting() writes before each call of a BPF trampoline
 * (nothing where call depth tracking is off), relocated for @ip.
 *
 * Return: its length, or 0 if there is none or it does not fit in @room.
 */
u32 rkf_multi_call_depth_account(u8 *buf, u32 room, unsigned long ip)
{
	/* INCREMENT_CALL_DEPTH: one or two instructions (asm/nospec-branch.h). */
	u8 insn[64];
	u8 *p = insn;
	int len = x86_call_depth_emit_accounting(&p, NULL, (void *)ip);

	if (len <= 0 || len > room)
		return 0;
	memcpy(buf, insn, len);
	return len;
}

/**
 * rkf_multi_image_alloc() - allocate text for generated trampolines
 * @size: bytes
 * @seq:  a number for its symbol, rkf_multi_fentry_<seq>
 * @code: set to where the text will be, for the code to be generated for
 *
 * Return: the image, not yet executable, or NULL.
 */
struct rkf_multi_image *rkf_multi_image_alloc(u32 size, u64 seq, unsigned long *code)
{
	struct rkf_multi_image *im = kzalloc(sizeof(*im), GFP_KERNEL);

	if (!im)
		return NULL;
	im->code = arch_alloc_bpf_trampoline(size);
	if (!im->code) {
		kfree(im);
		return NULL;
	}
	im->size = size;
	INIT_LIST_HEAD_RCU(&im->ksym.lnode);
	snprintf(im->ksym.name, sizeof(im->ksym.name), "rkf_multi_fentry_%llu", seq);
	*code = (unsigned long)im->code;
	return im;
}

/**
 * rkf_multi_image_commit() - write generated code into its image and publish its symbol
 * @im:  from rkf_multi_image_alloc()
 * @buf: the code, @im->size bytes, generated for @im->code
 *
 * Return: 0, or the error of bpf_arch_text_copy().
 */
int rkf_multi_image_commit(struct rkf_multi_image *im, const void *buf)
{
	void *ret = bpf_arch_text_copy(im->code, (void *)buf, im->size);

	if (IS_ERR(ret))
		return PTR_ERR(ret);
	bpf_image_ksym_init(im->code, im->size, &im->ksym);
	bpf_image_ksym_add(&im->ksym);
	return 0;
}

/**
 * rkf_multi_image_free() - free an image no site calls and no task runs any more
 * @im: from rkf_multi_image_alloc(), committed or not
 */
void rkf_multi_image_free(struct rkf_multi_image *im)
{
	if (im->ksym.start)
		bpf_image_ksym_del(&im->ksym);
	arch_free_bpf_trampoline(im->code, im->size);
	/* bpf_ksym_find() walks the ksym tree under RCU (the unwinder, kallsyms). */
	kfree_rcu(im, rcu);
}
