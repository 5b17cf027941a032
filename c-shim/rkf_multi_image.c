// SPDX-License-Identifier: GPL-2.0
/*
 * rkf_multi: images of generated trampolines in BPF text.  The code is generated in Rust
 * (rust/core/src/tramp.rs, rust/multi/image.rs); allocating executable memory, writing
 * it and naming it for kallsyms, perf and the unwinder take the BPF JIT's own helpers,
 * and kfree_rcu() is a macro.
 *
 * An image with exits (fexit or session programs) counts the calls in flight inside
 * its functions, as a BPF trampoline's image does (__bpf_tramp_enter(),
 * __bpf_tramp_exit() on its percpu_ref), and one with sleepable fentry programs alone the
 * calls inside them: a task may sleep there for any time with a return address into the
 * image on its stack.  Once no site calls it any more it is retired here, and freed only
 * once the count is 0 and an RCU tasks grace period has passed.  When rkf_multi unloads,
 * an image some call never came back to (the task exited inside the function, or still
 * sleeps there) is declared dead: such a call then returns through it calling nothing,
 * and the image is left behind, as the kernel leaves a BPF trampoline's image behind in
 * that case.
 *
 * The count is per cpu, as a percpu_ref's is until it is killed: the generated code
 * increments and decrements this cpu's counter (a call may come back on another cpu),
 * with no lock and no cache line shared between cpus.  Only the sum of the counters
 * means anything, and it is read only once the image is retired, when no call can enter
 * it any more: the counters then only go down, so a sum of 0, however long the reading
 * took, means no call is in flight (see rkf_multi_image_calls()).
 */

#include <linux/bpf.h>
#include <linux/filter.h>
#include <linux/mutex.h>
#include <linux/percpu.h>
#include <linux/rculist.h>
#include <linux/rcupdate_wait.h>
#include <linux/slab.h>
#include <linux/workqueue.h>
#include <asm/alternative.h>
#include <asm/cpufeature.h>
#include <asm/nospec-branch.h>

#include "rkf.h"

/**
 * struct rkf_multi_image - generated trampolines, in BPF text
 * @ksym: its symbol: kallsyms, perf and the unwinder know it as BPF text
 * @code: the text, from the BPF pack allocator
 * @size: its size
 * @seq:  its number, in its symbol
 * @inflight: calls inside a function of its trampolines with an exit, or inside the
 *            programs of one with sleepable fentry programs alone: a counter per cpu,
 *            of which only the sum is the count (NULL if they count none)
 * @dead: set when rkf_multi unloads with calls in flight: they return calling nothing
 * @stuck: the calls that were in flight then
 * @drain: on rkf_multi_draining once retired, until the sum of @inflight is 0
 * @garbage: what its code names (the program slots), freed with it by @free
 * @free: frees @garbage
 * @rcu:  frees the image once no reader of the BPF ksym tree can see @ksym
 */
struct rkf_multi_image {
	struct bpf_ksym ksym;
	void *code;
	u32 size;
	u64 seq;
	long __percpu *inflight;
	bool dead;
	long stuck;
	struct list_head drain;
	void *garbage;
	void (*free)(void *garbage);
	struct rcu_head rcu;
};

/* Retired images that count calls in flight, until none is left inside them. */
static LIST_HEAD(rkf_multi_draining);
static DEFINE_MUTEX(rkf_multi_drain_lock);
static void rkf_multi_drain_fn(struct work_struct *work);
static DECLARE_DELAYED_WORK(rkf_multi_drain_work, rkf_multi_drain_fn);

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

/* The run context a generated trampoline keeps in its frame (rust/core/src/tramp.rs). */
static_assert(offsetof(struct bpf_tramp_run_ctx, bpf_cookie) == RKF_MULTI_RUN_CTX_COOKIE);
static_assert(sizeof(struct bpf_tramp_run_ctx) == RKF_MULTI_RUN_CTX_SIZE);
static_assert(RKF_MULTI_FRAME_START - RKF_MULTI_FRAME_RUN_CTX == RKF_MULTI_RUN_CTX_SIZE);
static_assert(RKF_MULTI_FRAME_START == -RKF_MULTI_FRAME_SIZE - 8);
/* What it reads and counts through the addresses built in. */
static_assert(sizeof_field(struct rkf_multi_link_state, detached) == 1);
static_assert(offsetof(struct rkf_multi_stats, hits) == 0);
static_assert(offsetof(struct rkf_multi_stats, misses) == 8);

/**
 * rkf_multi_prog_code() - how a generated trampoline runs a link's program itself
 * @link: the link's state, its program held by the link
 * @code: set to what the code builds in, for a sleepable program
 *
 * A sleepable program is run as a BPF trampoline runs it (invoke_bpf_prog() of
 * arch/x86/net/bpf_jit_comp.c, bpf_trampoline_enter() and bpf_trampoline_exit() of
 * kernel/bpf/trampoline.c for a sleepable tracing program): its code called directly,
 * between __bpf_prog_enter_sleepable_recur() and __bpf_prog_exit_sleepable_recur()
 * (export patch 0005), which vmlinux builds with migrate_disable() and migrate_enable()
 * inline.  Any other program runs through rkf_multi_run_sleepable_slot().
 *
 * Return: whether @link's program is sleepable (@code is then set).
 */
bool rkf_multi_prog_code(const struct rkf_multi_link_state *link,
			 struct rkf_multi_prog_code *code)
{
	const struct bpf_prog *prog = link->prog;

	if (!prog->sleepable)
		return false;
	code->prog = (unsigned long)prog;
	code->func = (unsigned long)prog->bpf_func;
	code->insnsi = (unsigned long)prog->insnsi;
	code->detached = (unsigned long)&link->detached;
	code->enter = (unsigned long)__bpf_prog_enter_sleepable_recur;
	code->exit = (unsigned long)__bpf_prog_exit_sleepable_recur;
	return true;
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
 * @seq:  a number for its symbol, rkf_multi_image_<seq>
 * @counted: its trampolines count calls in flight (rkf_multi_image_inflight())
 * @code: set to where the text will be, for the code to be generated for
 *
 * Return: the image, not yet executable, or NULL.
 */
struct rkf_multi_image *rkf_multi_image_alloc(u32 size, u64 seq, bool counted,
					      unsigned long *code)
{
	struct rkf_multi_image *im = kzalloc(sizeof(*im), GFP_KERNEL);

	if (!im)
		return NULL;
	INIT_LIST_HEAD(&im->drain);
	if (counted) {
		im->inflight = alloc_percpu(long);
		if (!im->inflight) {
			kfree(im);
			return NULL;
		}
	}
	im->code = arch_alloc_bpf_trampoline(size);
	if (!im->code) {
		free_percpu(im->inflight);
		kfree(im);
		return NULL;
	}
	im->size = size;
	INIT_LIST_HEAD_RCU(&im->ksym.lnode);
	im->seq = seq;
	snprintf(im->ksym.name, sizeof(im->ksym.name), "rkf_multi_image_%llu", seq);
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
	free_percpu(im->inflight);
	/* bpf_ksym_find() walks the ksym tree under RCU (the unwinder, kallsyms). */
	kfree_rcu(im, rcu);
}

/**
 * rkf_multi_image_inflight() - where the image counts calls in flight
 * @im: from rkf_multi_image_alloc()
 *
 * Return: the per-cpu address of its counters, a long each, for generated code, which
 * adds and subtracts one on this cpu's through %gs (as this_cpu_inc() does); 0 for an
 * image allocated without @counted.
 */
unsigned long rkf_multi_image_inflight(struct rkf_multi_image *im)
{
	return (__force unsigned long)im->inflight;
}

/*
 * The calls in flight in a retired image: the sum of its counters.  No call enters a
 * retired image any more (an RCU tasks grace period passed since the last site called
 * it, and a task preempted in its code before the increment is waited for by that grace
 * period: it switches voluntarily only further on), so every counter only goes down from
 * then on, and a sum read over any length of time is at least the calls still in flight
 * when the reading ended: 0 means none is.  A call's last reads of what the image names
 * come before its decrement, which x86 does not reorder before them.
 */
static long rkf_multi_image_calls(struct rkf_multi_image *im)
{
	long sum = 0;
	int cpu;

	for_each_possible_cpu(cpu)
		sum += READ_ONCE(*per_cpu_ptr(im->inflight, cpu));
	return sum;
}

/**
 * rkf_multi_image_dead() - where the image says it is dead
 * @im: from rkf_multi_image_alloc()
 *
 * Return: the address of its dead flag, a byte, for generated code.
 */
unsigned long rkf_multi_image_dead(struct rkf_multi_image *im)
{
	BUILD_BUG_ON(sizeof(im->dead) != 1);
	return (unsigned long)&im->dead;
}

/* Frees the images of @list, with their garbage, after an RCU tasks grace period. */
static void rkf_multi_drain_free(struct list_head *list)
{
	struct rkf_multi_image *im, *tmp;

	if (list_empty(list))
		return;
	/* A task that brought the count to 0 may still be in the image's epilogue. */
	synchronize_rcu_tasks();
	list_for_each_entry_safe(im, tmp, list, drain) {
		list_del(&im->drain);
		im->free(im->garbage);
		rkf_multi_image_free(im);
	}
}

/* How long the drain waits before it looks again; under rkf_multi_drain_lock. */
#define RKF_MULTI_DRAIN_MIN	(HZ / 10)
#define RKF_MULTI_DRAIN_MAX	(10 * HZ)
static unsigned long rkf_multi_drain_delay = RKF_MULTI_DRAIN_MIN;

/*
 * Frees the retired images no call is in flight in.  An image a call never comes back
 * to (the task exited inside the function, or a kernel thread sleeps there for good) is
 * looked at again after 100 ms, then less and less often, down to every 10 s, until
 * rkf_multi unloads; an image retired meanwhile starts again at 100 ms.  It runs on
 * system_long_wq: it may wait for a grace period.
 */
static void rkf_multi_drain_fn(struct work_struct *work)
{
	struct rkf_multi_image *im, *tmp;
	unsigned long delay;
	LIST_HEAD(done);
	bool more;

	mutex_lock(&rkf_multi_drain_lock);
	list_for_each_entry_safe(im, tmp, &rkf_multi_draining, drain)
		if (!rkf_multi_image_calls(im))
			list_move(&im->drain, &done);
	more = !list_empty(&rkf_multi_draining);
	delay = rkf_multi_drain_delay;
	rkf_multi_drain_delay = min(2 * delay, RKF_MULTI_DRAIN_MAX);
	mutex_unlock(&rkf_multi_drain_lock);
	rkf_multi_drain_free(&done);
	if (more)
		queue_delayed_work(system_long_wq, &rkf_multi_drain_work, delay);
}

/**
 * rkf_multi_image_retire() - free an image that counts calls once none is in it
 * @im:      from rkf_multi_image_alloc(): no site calls it, and an RCU tasks grace
 *           period passed since the last did (no task can enter it any more)
 * @garbage: what its code names, freed with it
 * @free:    frees @garbage, in process context
 *
 * Calls that entered it may still be inside their functions, or their sleepable
 * programs: the image and @garbage are freed once the last has come back.
 */
void rkf_multi_image_retire(struct rkf_multi_image *im, void *garbage,
			    void (*free)(void *garbage))
{
	im->garbage = garbage;
	im->free = free;
	mutex_lock(&rkf_multi_drain_lock);
	list_add_tail(&im->drain, &rkf_multi_draining);
	rkf_multi_drain_delay = RKF_MULTI_DRAIN_MIN;
	mutex_unlock(&rkf_multi_drain_lock);
	mod_delayed_work(system_long_wq, &rkf_multi_drain_work, 0);
}

/**
 * rkf_multi_image_drain_exit() - free or leave behind every retired image, at unload
 *
 * Called once nothing can retire an image any more.  An image with calls still in
 * flight is declared dead, so that they come back through it calling nothing of
 * rkf_multi's; after an RCU tasks grace period no task runs rkf_multi's code from it any
 * more.  An image whose calls have all come back by then (they were on their way out)
 * is freed; of the others the garbage is freed, and the image itself is left behind (its
 * symbol renamed rkf_multi_leaked_<n>), as the kernel leaves a BPF trampoline's image
 * whose calls never came back.
 */
void rkf_multi_image_drain_exit(void)
{
	struct rkf_multi_image *im, *tmp;
	LIST_HEAD(idle);
	LIST_HEAD(busy);
	LIST_HEAD(late);

	cancel_delayed_work_sync(&rkf_multi_drain_work);
	mutex_lock(&rkf_multi_drain_lock);
	list_for_each_entry_safe(im, tmp, &rkf_multi_draining, drain) {
		im->stuck = rkf_multi_image_calls(im);
		if (im->stuck) {
			WRITE_ONCE(im->dead, true);
			list_move(&im->drain, &busy);
		} else {
			list_move(&im->drain, &idle);
		}
	}
	mutex_unlock(&rkf_multi_drain_lock);
	rkf_multi_drain_free(&idle);
	if (list_empty(&busy))
		return;
	/*
	 * A call that read the flag before it was set may be running exit runs, and one
	 * counted around its programs (sleepable fentry programs alone, no flag) entry runs:
	 * rkf_multi's code and the garbage.  It cannot sleep there: every link is detached
	 * by now, after its sleepable programs' runs ended (an RCU tasks trace grace
	 * period), and a run that may sleep checks that first.
	 */
	synchronize_rcu_tasks();
	list_for_each_entry_safe(im, tmp, &busy, drain) {
		im->stuck = rkf_multi_image_calls(im);
		if (!im->stuck)
			list_move(&im->drain, &late);
	}
	/* Their last calls may still be on their way out of the code. */
	rkf_multi_drain_free(&late);
	if (list_empty(&busy))
		return;
	list_for_each_entry(im, &busy, drain) {
		im->free(im->garbage);
		pr_info("%s: %ld calls never came back; left behind, dead\n", im->ksym.name,
			im->stuck);
		/* No reader may see the name change: out of the tree for a grace period. */
		bpf_image_ksym_del(&im->ksym);
	}
	synchronize_rcu();
	list_for_each_entry_safe(im, tmp, &busy, drain) {
		list_del(&im->drain);
		INIT_LIST_HEAD_RCU(&im->ksym.lnode);
		snprintf(im->ksym.name, sizeof(im->ksym.name), "rkf_multi_leaked_%llu", im->seq);
		bpf_image_ksym_add(&im->ksym);
	}
}
