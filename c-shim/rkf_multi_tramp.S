/* SPDX-License-Identifier: GPL-2.0 */
/*
 * rkf_multi's shared trampoline: every function rkf_multi traces has its ftrace site
 * calling here, directly (or, when other ftrace users share the site, through
 * ftrace_regs_caller, which returns here with the same stack).
 *
 * The frame is the BPF trampoline's (arch/x86/net/bpf_jit_comp.c), so that programs and
 * the helpers the verifier inlines read it as they read the kernel's:
 *
 *	rbp + 16	the traced function's return address
 *	rbp +  8	the return address into the traced function (site + 5): the key
 *	rbp +  0	saved rbp
 *	rbp -  8	ctx[6]: the return value, for fexit programs
 *	rbp - 56	ctx[0..5]: rdi, rsi, rdx, rcx, r8, r9
 *	rbp - 64	ctx[-1]: the argument count (bpf_get_func_arg_cnt())
 *	rbp - 72	ctx[-2]: the function's address (bpf_get_func_ip())
 *	rbp - 80	whether fexit programs wait
 *
 * Every argument register is restored as it came, whatever BTF says the function takes.
 * fexit calls the rest of the function indirectly: with IBT the target would need an
 * ENDBR, so the config fragment turns IBT off (README).
 */

#include <linux/linkage.h>
#include <asm/nospec-branch.h>
#include <asm/unwind_hints.h>

	.code64
	.section .text, "ax"

SYM_FUNC_START(rkf_multi_tramp)
	pushq	%rbp
	movq	%rsp, %rbp
	subq	$80, %rsp
	movq	%rdi, -56(%rbp)
	movq	%rsi, -48(%rbp)
	movq	%rdx, -40(%rbp)
	movq	%rcx, -32(%rbp)
	movq	%r8, -24(%rbp)
	movq	%r9, -16(%rbp)
	movq	$0, -8(%rbp)

	leaq	-56(%rbp), %rdi
	movq	8(%rbp), %rsi
	call	rkf_multi_enter
	movq	%rax, -80(%rbp)

	movq	-56(%rbp), %rdi
	movq	-48(%rbp), %rsi
	movq	-40(%rbp), %rdx
	movq	-32(%rbp), %rcx
	movq	-24(%rbp), %r8
	movq	-16(%rbp), %r9
	cmpq	$0, -80(%rbp)
	jne	.Lrkf_multi_fexit
	leave
	RET

.Lrkf_multi_fexit:
	/* Run the rest of the function, then the fexit programs. */
	movq	8(%rbp), %r11
	CALL_NOSPEC r11
	movq	%rax, -8(%rbp)
	leaq	-56(%rbp), %rdi
	movq	8(%rbp), %rsi
	call	rkf_multi_exit
	movq	-8(%rbp), %rax
	leave
	/* Return to the function's caller: drop the return address into its body. */
	addq	$8, %rsp
	UNWIND_HINT_FUNC
	RET
SYM_FUNC_END(rkf_multi_tramp)
