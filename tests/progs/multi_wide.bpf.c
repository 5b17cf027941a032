// SPDX-License-Identifier: GPL-2.0
/*
 * rkf_multi selftests of programs against rkf_multi_tmpl12(), the template of twelve
 * arguments (tests/src/multi/wide.rs): an fentry, an fexit and a session program that
 * record what they see of each function, indexed by its attach cookie, and a program
 * that tail-calls one that does.  Apart from multi_testmod.bpf.c, which calls
 * rkf_testmod's kfuncs, so that the ioctl fuzz can load these programs without
 * rkf_testmod.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "rkf.bpf.h"

#define WIDE_FUNCS 8
#define WIDE_KINDS 5
#define EINVAL 22

/*
 * A record per kind: 0 fentry, 1 fexit, 2 the session's entry run, 3 its exit run, 4 the
 * fentry program wide_tail tail-calls.
 */
struct wide_rec {
	__u64 hits;
	__u64 ip;
	__u64 nr_args;
	/* the twelve u64 of ctx */
	__u64 args[12];
	/* bpf_get_func_arg(ctx, j): its result and the value */
	__s64 helper_err[12];
	__u64 helper_args[12];
	/* bpf_get_func_ret() */
	__u64 helper_ret;
	/* the session's cookie as the run found it */
	__u64 cookie;
};

struct wide_rec wide_recs[WIDE_KINDS][WIDE_FUNCS];
__u32 bad_cookie;

static __always_inline void wide_record(__u64 *ctx, __u32 kind, bool exit)
{
	__u64 i = bpf_get_attach_cookie(ctx);
	struct wide_rec *r;
	__u64 v;
	int j;

	if (i >= WIDE_FUNCS || kind >= WIDE_KINDS) {
		bad_cookie++;
		return;
	}
	r = &wide_recs[kind][i];
	r->hits++;
	r->ip = bpf_get_func_ip(ctx);
	r->nr_args = bpf_get_func_arg_cnt(ctx);
	for (j = 0; j < 12; j++) {
		v = 0;
		r->args[j] = ctx[j];
		r->helper_err[j] = bpf_get_func_arg(ctx, j, &v);
		r->helper_args[j] = v;
	}
	if (exit) {
		v = 0;
		bpf_get_func_ret(ctx, &v);
		r->helper_ret = v;
	}
}

RKF_MULTI_FENTRY12
int wide_fentry(__u64 *ctx)
{
	wide_record(ctx, 0, false);
	return 0;
}

RKF_MULTI_FEXIT12
int wide_fexit(__u64 *ctx)
{
	wide_record(ctx, 1, true);
	return 0;
}

RKF_MULTI_FSESSION12
int wide_session(__u64 *ctx)
{
	bool exit = bpf_session_is_return(ctx);
	__u64 *cookie = bpf_session_cookie(ctx);
	__u64 i = bpf_get_attach_cookie(ctx);

	wide_record(ctx, exit ? 3 : 2, true);
	if (i < WIDE_FUNCS)
		wide_recs[exit ? 3 : 2][i].cookie = *cookie;
	if (!exit)
		*cookie = 0x5e55000000000000ULL | i;
	return 0;
}

struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} wide_jmp SEC(".maps");

/*
 * Reads nothing of ctx but tail-calls wide_tail_callee (wide_jmp[0]), which reads all of
 * it: the trampolines fill every slot for a program that may tail-call.
 */
RKF_MULTI_FENTRY12
int wide_tail(__u64 *ctx)
{
	bpf_tail_call(ctx, &wide_jmp, 0);
	return 0;
}

RKF_MULTI_FENTRY12
int wide_tail_callee(__u64 *ctx)
{
	wide_record(ctx, 4, false);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
