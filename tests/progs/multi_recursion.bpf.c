// SPDX-License-Identifier: GPL-2.0
/*
 * rkf_multi selftests: a program that calls its own traced function again.  Each program
 * here, on rkf_testmod_recurse(), calls bpf_rkf_testmod_recurse(0) once per call it sees,
 * which calls rkf_testmod_recurse(0) inside the program's run: the trampoline's recursion
 * guard must skip that nested run and count it, in the link's misses and in the program's
 * recursion_misses, as the kernel's own fentry, fexit and fsession trampolines count it.
 * The rkf_multi programs and the kernel's (single_*) do the same; a session program
 * recurses on entry only, so that a nested call meets the guard on its entry and its exit.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "rkf.bpf.h"

extern s64 bpf_rkf_testmod_recurse(u32 depth) __ksym;

/* Runs of each program that got past the guard. */
__u64 runs;

static __always_inline void recurse(void)
{
	runs++;
	bpf_rkf_testmod_recurse(0);
}

/* A session recurses from its entry run only. */
static __always_inline void session(void *ctx)
{
	if (bpf_session_is_return(ctx))
		runs++;
	else
		recurse();
}

RKF_MULTI_FENTRY
int BPF_PROG(rkf_fentry)
{
	recurse();
	return 0;
}

RKF_MULTI_FEXIT
int BPF_PROG(rkf_fexit)
{
	recurse();
	return 0;
}

RKF_MULTI_FSESSION
int BPF_PROG(rkf_session)
{
	session(ctx);
	return 0;
}

SEC("fentry/rkf_testmod_recurse")
int BPF_PROG(single_fentry)
{
	recurse();
	return 0;
}

SEC("fexit/rkf_testmod_recurse")
int BPF_PROG(single_fexit)
{
	recurse();
	return 0;
}

SEC("fsession/rkf_testmod_recurse")
int BPF_PROG(single_session)
{
	session(ctx);
	return 0;
}

/* One call of rkf_testmod_recurse(0), from outside any traced function. */
SEC("syscall")
int call_once(void *ctx)
{
	bpf_rkf_testmod_recurse(0);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
