// SPDX-License-Identifier: GPL-2.0
/*
 * rkf_multi selftests of sleepable programs: fentry.s, fexit.s and fsession.s programs on syscall
 * wrappers (struct pt_regs *regs their only argument).  On write(2) each copies the first
 * eight bytes of the task's buffer with bpf_copy_from_user(), which may fault the page
 * in; a non-sleepable fentry program on the same functions reads them with
 * bpf_probe_read_user(), which cannot.  Each records per function what it saw.  Three
 * more (two sleepable) count the runs of one process, for the attach storm, and four
 * sleepable ones, for the run path's test, call nothing but what the verifier inlines,
 * but for the control, which calls bpf_get_current_pid_tgid().
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "rkf.bpf.h"

#define MAX_FUNCS 4

struct srec {
	__u64 hits;
	__u64 value;
	long err;
	__u64 cookie;
	__u64 ret;
};

/* Inputs: the functions' addresses, as bpf_get_func_ip() returns them; the task. */
__u64 ips[MAX_FUNCS];
__u32 target_pid;
/* The slot of write(2): its programs read the buffer. */
__u32 write_slot;
/* The process whose calls storm_fentry and storm_fexit count. */
__u32 target_tgid;

/* Outputs. */
struct srec sleepable_fentry_recs[MAX_FUNCS];
struct srec sleepable_fexit_recs[MAX_FUNCS];
struct srec plain_fentry_recs[MAX_FUNCS];
__u64 storm_counts[3][MAX_FUNCS];
/* Every run of storm_fentry, storm_fexit and storm_plain, whatever the task. */
__u64 storm_runs[3][MAX_FUNCS];
__u64 unknown_ip;

static __always_inline int slot_of(void *ctx)
{
	__u64 ip = bpf_get_func_ip(ctx);

	for (int i = 0; i < MAX_FUNCS; i++)
		if (ips[i] == ip)
			return i;
	__sync_fetch_and_add(&unknown_ip, 1);
	return -1;
}

static __always_inline bool wanted(void)
{
	return (__u32)bpf_get_current_pid_tgid() == target_pid;
}

/* The slot of this run's function if the run is this task's, or -1. */
static __always_inline int target_slot(void *ctx)
{
	return wanted() ? slot_of(ctx) : -1;
}

/* The buffer argument of write(2): regs->si. */
static __always_inline void *write_buf(__u64 regs, long *err)
{
	__u64 buf = 0;

	*err = bpf_probe_read_kernel(&buf, sizeof(buf), &((struct pt_regs *)regs)->si);
	return (void *)buf;
}

static __always_inline void copy_buf(struct srec *r, int i, __u64 regs)
{
	long err;
	void *buf = write_buf(regs, &err);

	if (i != write_slot)
		return;
	if (!err)
		err = bpf_copy_from_user(&r->value, sizeof(r->value), buf);
	r->err = err;
}

/* A sleepable program's record of one run: NULL if not this task's, or not a target. */
static __always_inline struct srec *sleepable_run(struct srec *recs, void *ctx, __u64 regs)
{
	struct srec *r;
	int i;

	i = target_slot(ctx);
	if (i < 0)
		return NULL;
	r = &recs[i];
	__sync_fetch_and_add(&r->hits, 1);
	r->cookie = bpf_get_attach_cookie(ctx);
	copy_buf(r, i, regs);
	return r;
}

RKF_MULTI_FENTRY_S
int BPF_PROG(sleepable_fentry, u64 a0, u64 a1, u64 a2, u64 a3, u64 a4, u64 a5)
{
	sleepable_run(sleepable_fentry_recs, ctx, a0);
	return 0;
}

RKF_MULTI_FEXIT_S
int BPF_PROG(sleepable_fexit, u64 a0, u64 a1, u64 a2, u64 a3, u64 a4, u64 a5, u64 ret)
{
	struct srec *r = sleepable_run(sleepable_fexit_recs, ctx, a0);

	if (r)
		r->ret = ret;
	return 0;
}

/*
 * A sleepable session (fsession.s): on entry it copies the buffer of write(2) with
 * bpf_copy_from_user() and writes a cookie of the function's; on exit it counts the calls
 * whose cookie came back and keeps the return value.
 */
struct session_rec {
	__u64 entries;
	__u64 exits;
	__u64 cookie_ok;
	__u64 nonzero_cookie;
	__u64 entry_ret;
	__u64 ret;
	__u64 value;
	__u64 magic_reads;
	long err;
};

struct session_rec session_recs[MAX_FUNCS];
struct session_rec plain_session_recs[MAX_FUNCS];
/* Input: what the test writes; the session counts the entry runs that read it. */
__u64 magic;

/*
 * A session run of this task on a target: on exit, the count, the cookie read back (the
 * function's address ^ @tag) and the return value, and NULL; on entry, the count, the
 * cookie checked zeroed and written, the return value, and the record (its slot in
 * @slot).
 */
static __always_inline struct session_rec *session_run(struct session_rec *recs, void *ctx,
						       __u64 ret, __u64 tag, int *slot)
{
	__u64 *cookie = bpf_session_cookie(ctx);
	__u64 want = bpf_get_func_ip(ctx) ^ tag;
	struct session_rec *r;
	int i;

	i = target_slot(ctx);
	if (i < 0)
		return NULL;
	r = &recs[i];
	if (bpf_session_is_return(ctx)) {
		__sync_fetch_and_add(&r->exits, 1);
		if (*cookie == want)
			__sync_fetch_and_add(&r->cookie_ok, 1);
		r->ret = ret;
		return NULL;
	}
	__sync_fetch_and_add(&r->entries, 1);
	if (*cookie)
		__sync_fetch_and_add(&r->nonzero_cookie, 1);
	*cookie = want;
	r->entry_ret = ret;
	*slot = i;
	return r;
}

RKF_MULTI_FSESSION_S
int BPF_PROG(sleepable_session, u64 a0, u64 a1, u64 a2, u64 a3, u64 a4, u64 a5, u64 ret)
{
	struct session_rec *r;
	long err;
	void *buf;
	int i = -1;

	r = session_run(session_recs, ctx, ret, 0x5e55, &i);
	if (!r || i != write_slot)
		return 0;
	buf = write_buf(a0, &err);
	if (!err)
		err = bpf_copy_from_user(&r->value, sizeof(r->value), buf);
	r->err = err;
	if (!err && r->value == magic)
		__sync_fetch_and_add(&r->magic_reads, 1);
	return 0;
}

/* A non-sleepable session beside it, with a cookie of its own. */
RKF_MULTI_FSESSION
int BPF_PROG(plain_session, u64 a0, u64 a1, u64 a2, u64 a3, u64 a4, u64 a5, u64 ret)
{
	int i;

	session_run(plain_session_recs, ctx, ret, 0x9a1a, &i);
	return 0;
}

RKF_MULTI_FENTRY
int BPF_PROG(plain_fentry, u64 a0, u64 a1, u64 a2, u64 a3, u64 a4, u64 a5)
{
	struct srec *r;
	long err;
	void *buf;
	int i;

	i = target_slot(ctx);
	if (i < 0)
		return 0;
	r = &plain_fentry_recs[i];
	__sync_fetch_and_add(&r->hits, 1);
	r->cookie = bpf_get_attach_cookie(ctx);
	if (i != write_slot)
		return 0;
	buf = write_buf(a0, &err);
	if (!err)
		err = bpf_probe_read_user(&r->value, sizeof(r->value), buf);
	r->err = err;
	return 0;
}

static __always_inline void storm_count(void *ctx, int which)
{
	int i;

	i = slot_of(ctx);
	if (i < 0)
		return;
	__sync_fetch_and_add(&storm_runs[which][i], 1);
	if (bpf_get_current_pid_tgid() >> 32 == target_tgid)
		__sync_fetch_and_add(&storm_counts[which][i], 1);
}

RKF_MULTI_FENTRY_S
int BPF_PROG(storm_fentry, u64 a0, u64 a1, u64 a2, u64 a3, u64 a4, u64 a5)
{
	storm_count(ctx, 0);
	return 0;
}

RKF_MULTI_FEXIT_S
int BPF_PROG(storm_fexit, u64 a0, u64 a1, u64 a2, u64 a3, u64 a4, u64 a5, u64 ret)
{
	storm_count(ctx, 1);
	return 0;
}

RKF_MULTI_FEXIT
int BPF_PROG(storm_plain, u64 a0, u64 a1, u64 a2, u64 a3, u64 a4, u64 a5, u64 ret)
{
	storm_count(ctx, 2);
	return 0;
}

/*
 * The run path's programs (multi_sleepable_run_path_calls_only_denied): what the function
 * graph tracer sees called under their functions, the trampolines called.  Each counts
 * its runs (in @path_runs), the session its entries and exits apart; the control also
 * calls a traceable helper.
 */
__u64 path_runs[5];

RKF_MULTI_FENTRY_S
int BPF_PROG(path_fentry, u64 a0, u64 a1, u64 a2, u64 a3, u64 a4, u64 a5)
{
	__sync_fetch_and_add(&path_runs[0], 1);
	return 0;
}

RKF_MULTI_FEXIT_S
int BPF_PROG(path_fexit, u64 a0, u64 a1, u64 a2, u64 a3, u64 a4, u64 a5, u64 ret)
{
	__sync_fetch_and_add(&path_runs[1], 1);
	return 0;
}

RKF_MULTI_FSESSION_S
int BPF_PROG(path_session, u64 a0, u64 a1, u64 a2, u64 a3, u64 a4, u64 a5, u64 ret)
{
	__sync_fetch_and_add(&path_runs[bpf_session_is_return(ctx) ? 3 : 2], 1);
	return 0;
}

__u64 control_pid_tgid;

RKF_MULTI_FENTRY_S
int BPF_PROG(path_control, u64 a0, u64 a1, u64 a2, u64 a3, u64 a4, u64 a5)
{
	__sync_fetch_and_add(&path_runs[4], 1);
	control_pid_tgid = bpf_get_current_pid_tgid();
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
