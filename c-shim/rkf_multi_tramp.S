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
 * Arguments 7..12 of a wider function stay where its caller passed them, above the
 * return addresses; rkf_multi_shared_fentry() copies them into ctx, and for fexit they
 * are copied again below this frame, for the rest of the function to find them above its
 * return address.
 *
 * Nothing here branches indirectly, so it is safe under IBT.  It is entered by a direct
 * call from the ftrace site (or by ftrace_regs_caller's ret into it) and needs no ENDBR,
 * as the BPF JIT's direct-call trampolines have none.  For fexit it runs the rest of the
 * function the way ftrace's return_to_handler returns to an address it only has in a
 * register (arch/x86/kernel/ftrace_64.S): a direct call to rkf_multi_call_r11() pushes
 * the return address into this trampoline, and a push and ret there go to the function;
 * an indirect call would need an ENDBR in the function body, which it has not.  Where
 * call depth tracking is on, the trampoline accounts for the call that entered it, as
 * the JIT does.  The call to rkf_multi_call_r11() is a direct call of a module function,
 * which the kernel routes through its call thunk (callthunks_patch_module_calls()), so
 * it is counted too, and the ret into the function through the return thunk uncounts it:
 * the depth counter moves as the return stack does (return_to_handler's plain ret pairs
 * with a call that is not counted, ANNOTATE_INTRA_FUNCTION_CALL).  Every return goes
 * through RET: the return thunk where the cpu wants one.
 */

#include <linux/linkage.h>
#include <linux/objtool.h>
#include <asm/alternative.h>
#include <asm/nospec-branch.h>
#include <asm/unwind_hints.h>

#include "rkf.h"

#define CTX(i)	(RKF_MULTI_FRAME_CTX + 8 * (i))(%rbp)

	.code64
	.section .text, "ax"

SYM_FUNC_START(rkf_multi_tramp)
	ANNOTATE_NOENDBR
	CALL_DEPTH_ACCOUNT
	pushq	%rbp
	movq	%rsp, %rbp
	subq	$RKF_MULTI_SHARED_FRAME_SIZE, %rsp
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
	cmpq	$RKF_MULTI_REG_ARGS, RKF_MULTI_FRAME_NR_ARGS(%rbp)
	ja	.Lrkf_multi_fexit_stack
	movq	8(%rbp), %r11
	call	rkf_multi_call_r11
.Lrkf_multi_returned:
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

.Lrkf_multi_fexit_stack:
	/*
	 * More than six arguments: ctx[6..11] as its stack (past its own arguments,
	 * slots it does not read).
	 */
	subq	$8 * (RKF_MULTI_MAX_ARGS - RKF_MULTI_REG_ARGS), %rsp
	.irp i, 0, 1, 2, 3, 4, 5
	movq	CTX(RKF_MULTI_REG_ARGS + \i), %r10
	movq	%r10, 8 * \i(%rsp)
	.endr
	movq	8(%rbp), %r11
	call	rkf_multi_call_r11
	addq	$8 * (RKF_MULTI_MAX_ARGS - RKF_MULTI_REG_ARGS), %rsp
	jmp	.Lrkf_multi_returned
SYM_FUNC_END(rkf_multi_tramp)

/*
 * Calls the code at r11, for a caller that cannot call it indirectly: [rsp] is the
 * return address into the caller, as if r11 had been called.  Its RET ends the counted
 * call that entered it (call depth tracking), as any return thunk returns to [rsp].
 */
SYM_FUNC_START_LOCAL(rkf_multi_call_r11)
	pushq	%r11
	UNWIND_HINT_FUNC
	RET
SYM_FUNC_END(rkf_multi_call_r11)
