// SPDX-License-Identifier: GPL-2.0
/*
 * rkf_multi: freeing what a publication replaced after grace periods, without blocking a
 * worker.  The chain queue_rcu_work() -> call_rcu_tasks() -> call_rcu_tasks_trace() ->
 * work is made of macros and inline initialisers; what is freed, and how, is Rust's
 * (rust/multi/deferred.rs).
 */

#include <linux/rcupdate.h>
#include <linux/srcu.h>
#include <linux/rcupdate_trace.h>
#include <linux/slab.h>
#include <linux/workqueue.h>

#include "rkf.h"

/* One piece of garbage waiting for its grace periods. */
struct rkf_multi_deferred {
	struct rcu_work rwork;
	struct rcu_head tasks_rcu;
	struct work_struct free_work;
	struct workqueue_struct *wq;
	void *garbage;
	void (*free)(void *garbage);
	bool tasks;
	bool trace;
};

static void rkf_multi_deferred_free(struct work_struct *work)
{
	struct rkf_multi_deferred *d = container_of(work, struct rkf_multi_deferred, free_work);

	d->free(d->garbage);
	kfree(d);
}

/*
 * No task runs the garbage's sleepable programs, or a program after one, any more: free
 * it, in process context.
 */
static void rkf_multi_deferred_trace_done(struct rcu_head *rcu)
{
	struct rkf_multi_deferred *d = container_of(rcu, struct rkf_multi_deferred, tasks_rcu);

	queue_work(d->wq, &d->free_work);
}

/* No task runs the garbage's trampolines any more; for sleepable programs, wait more. */
static void rkf_multi_deferred_tasks_done(struct rcu_head *rcu)
{
	struct rkf_multi_deferred *d = container_of(rcu, struct rkf_multi_deferred, tasks_rcu);

	if (d->trace)
		call_rcu_tasks_trace(&d->tasks_rcu, rkf_multi_deferred_trace_done);
	else
		queue_work(d->wq, &d->free_work);
}

/*
 * No cpu reads the garbage's table under RCU any more; for trampolines and sleepable
 * programs, wait for tasks too.
 */
static void rkf_multi_deferred_fn(struct work_struct *work)
{
	struct rkf_multi_deferred *d =
		container_of(to_rcu_work(work), struct rkf_multi_deferred, rwork);

	if (d->tasks)
		call_rcu_tasks(&d->tasks_rcu, rkf_multi_deferred_tasks_done);
	else if (d->trace)
		call_rcu_tasks_trace(&d->tasks_rcu, rkf_multi_deferred_trace_done);
	else
		rkf_multi_deferred_free(&d->free_work);
}

/**
 * rkf_multi_sync() - wait until no cpu reads a table published before
 * @tasks: and until no task runs a generated trampoline no site calls any more
 * @trace: and until no task runs a sleepable program of it (RCU tasks trace)
 */
void rkf_multi_sync(bool tasks, bool trace)
{
	synchronize_rcu();
	if (tasks)
		synchronize_rcu_tasks();
	if (trace)
		synchronize_rcu_tasks_trace();
}

/**
 * rkf_multi_tasks_rcu_qs() - report an RCU tasks quiescent state in a long operation
 *
 * A task counts for RCU tasks once it switched voluntarily, and an operation on thousands
 * of functions keeps the ioctl running for seconds under TCG: one ftrace update moving
 * every function of the distro kernel held back a grace period (and every trampoline and
 * module waiting on it) for over two minutes, and generating the trampolines of every
 * function with call depth accounting over 10 s.  rkf_multi calls this before each
 * ftrace update and between two generated trampolines, where it runs no trampoline code,
 * at most the body of a traced function (the ioctl path), which may sleep anyway: a
 * quiescent state there is what a sleep would report.  Process context, no lock held
 * that forbids sleeping.
 */
void rkf_multi_tasks_rcu_qs(void)
{
	cond_resched_tasks_rcu_qs();
}

/**
 * rkf_multi_defer() - free garbage after a grace period, without waiting for it
 * @wq:      from rkf_multi_deferred_init()
 * @garbage: what to free
 * @free:    frees it, in process context
 * @tasks:   it holds generated trampolines no site calls any more: wait also until no
 *           task runs them (an RCU tasks grace period, which covers tasks preempted there)
 * @trace:   its table had sleepable programs, or its link shared a function with one:
 *           wait also until no task runs them, or a program after one (an RCU tasks trace
 *           grace period)
 *
 * Once no cpu can read a table published before (and, with @tasks, no task runs a
 * trampoline of it; with @trace, no task runs a sleepable program of it or a program
 * after one), a worker calls @free: the old table, a detached link, whose program
 * reference must be dropped in process context, and trampolines.  No worker blocks
 * meanwhile.  Without memory for that, waits for the grace periods here instead.
 */
void rkf_multi_defer(struct workqueue_struct *wq, void *garbage, void (*free)(void *garbage),
		     bool tasks, bool trace)
{
	struct rkf_multi_deferred *d = kmalloc(sizeof(*d), GFP_KERNEL);

	if (!d) {
		rkf_multi_sync(tasks, trace);
		free(garbage);
		return;
	}
	d->wq = wq;
	d->garbage = garbage;
	d->free = free;
	d->tasks = tasks;
	d->trace = trace;
	INIT_WORK(&d->free_work, rkf_multi_deferred_free);
	INIT_RCU_WORK(&d->rwork, rkf_multi_deferred_fn);
	queue_rcu_work(wq, &d->rwork);
}

/**
 * rkf_multi_deferred_init() - the workqueue of rkf_multi_defer()
 *
 * Return: the workqueue, for rkf_multi_deferred_drain(), or NULL.
 */
struct workqueue_struct *rkf_multi_deferred_init(void)
{
	return alloc_workqueue("rkf_multi", WQ_UNBOUND, 0);
}

/**
 * rkf_multi_deferred_drain() - free all garbage deferred to @wq, and @wq
 * @wq: from rkf_multi_deferred_init(); nothing is deferred to it any more
 */
void rkf_multi_deferred_drain(struct workqueue_struct *wq)
{
	/* Every queue_rcu_work() has its call_rcu() done after this... */
	rcu_barrier();
	/* ...its work run, and with it every call_rcu_tasks() or call_rcu_tasks_trace()... */
	flush_workqueue(wq);
	/* ...every RCU tasks callback, which may call call_rcu_tasks_trace(), then those... */
	rcu_barrier_tasks();
	rcu_barrier_tasks_trace();
	/* ...whose callbacks queue the last works, which destroy_workqueue() drains. */
	destroy_workqueue(wq);
}
