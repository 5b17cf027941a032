/* SPDX-License-Identifier: GPL-2.0 */
/*
 * rkf_multi's shared trampoline: every function rkf_multi traces has its ftrace site
 * calling here, directly (or, when other ftrace users share the site, through
 * ftrace_regs_caller, which returns here with the same stack).
 *
 * The frame is the one c-shim/rkf.h defines (RKF_MULTI_FRAME_*): the BPF trampoline's
 * (arch/x86/net/bpf_jit_comp.c), so that programs and the helpers the verifier inlines
 * read it as they read the kernel's.  rbp + 8 holds the return address into the traced
 * function (its site + 5), by which rkf_multi_shared_fentry() finds it.
 *
 * Every argument register is restored as it came, whatever BTF says the function takes.
 * fexit calls the rest of the function indirectly: with IBT the target would need an
 * ENDBR, so the config fragment turns IBT off (README).
 */

#include <linux/linkage.h>
#include <asm/nospec-branch.h>
#include <asm/unwind_hints.h>

#include "rkf.h"

#define CTX(i)	(RKF_MULTI_FRAME_CTX + 8 * (i))(%rbp)

	.code64
	.section .text, "ax"

SYM_FUNC_START(rkf_multi_tramp)
	pushq	%rbp
	movq	%rsp, %rbp
	subq	$RKF_MULTI_FRAME_SIZE, %rsp
	movq	%rdi, CTX(0)
	movq	%rsi, CTX(1)
	movq	%rdx, CTX(2)
	movq	%rcx, CTX(3)
	movq	%r8, CTX(4)
	movq	%r9, CTX(5)
	movq	$0, RKF_MULTI_FRAME_RET(%rbp)

	leaq	CTX(0), %rdi
	movq	8(%rbp), %rsi
	call	rkf_multi_shared_fentry
	movq	%rax, RKF_MULTI_FRAME_FEXIT(%rbp)

	movq	CTX(0), %rdi
	movq	CTX(1), %rsi
	movq	CTX(2), %rdx
	movq	CTX(3), %rcx
	movq	CTX(4), %r8
	movq	CTX(5), %r9
	cmpq	$0, RKF_MULTI_FRAME_FEXIT(%rbp)
	jne	.Lrkf_multi_fexit
	leave
	RET

.Lrkf_multi_fexit:
	/* Run the rest of the function, then the fexit programs. */
	movq	8(%rbp), %r11
	CALL_NOSPEC r11
	movq	%rax, RKF_MULTI_FRAME_RET(%rbp)
	leaq	CTX(0), %rdi
	movq	8(%rbp), %rsi
	call	rkf_multi_shared_fexit
	movq	RKF_MULTI_FRAME_RET(%rbp), %rax
	leave
	/* Return to the function's caller: drop the return address into its body. */
	addq	$8, %rsp
	UNWIND_HINT_FUNC
	RET
SYM_FUNC_END(rkf_multi_tramp)
