// SPDX-License-Identifier: GPL-2.0
/*
 * rkf_multi selftests on functions of another module: one call each of rkf_testmod's
 * rkf_testmod_multi_test*(), with known arguments, from a syscall program.  Apart from
 * multi.bpf.c so that the rkf_multi tests on vmlinux do not need rkf_testmod.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "rkf.bpf.h"

extern int bpf_rkf_testmod_multi_run(void) __ksym;
extern int bpf_rkf_testmod_multi_run_wide(void) __ksym;

/* The kfunc's result: a bit per function that returned a wrong value. */
int bad_returns = -1;

SEC("syscall")
int run_testmod_targets(void *ctx)
{
	bad_returns = bpf_rkf_testmod_multi_run();
	return 0;
}

/* bpf_rkf_testmod_multi_run_wide()'s result, as bad_returns. */
int bad_wide_returns = -1;

SEC("syscall")
int run_wide_targets(void *ctx)
{
	bad_wide_returns = bpf_rkf_testmod_multi_run_wide();
	return 0;
}

/*
 * What the programs against rkf_multi_tmpl12() saw on rkf_testmod_multi_test7() and
 * _test11(), indexed by their cookie (0 and 1): the twelve u64 of ctx (on exit the one
 * after the last argument holds the return value), what the helpers say, and for fexit
 * and sessions bpf_get_func_ret().  A kind per program: 0 fentry,
 * 1 fexit, 2 the session's entry run, 3 its exit run.
 */
#define WIDE_FUNCS 2
#define WIDE_KINDS 4

struct wide_rec {
	__u64 hits;
	__u64 ip;
	__u64 nr_args;
	__u64 args[12];
	__u64 helper_args[12];
	/* bpf_get_func_arg(nr_args): must fail */
	__s64 past_last;
	__s64 arg_err;
	__u64 helper_ret;
	__s64 ret_err;
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
		r->args[j] = ctx[j];
		if (j < r->nr_args) {
			if (bpf_get_func_arg(ctx, j, &v))
				r->arg_err++;
			r->helper_args[j] = v;
		}
	}
	r->past_last = bpf_get_func_arg(ctx, r->nr_args, &v);
	if (exit) {
		r->ret_err = bpf_get_func_ret(ctx, &v);
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

char LICENSE[] SEC("license") = "GPL";
