// SPDX-License-Identifier: GPL-2.0
/*
 * rkf_multi: freeing what a publication replaced after grace periods, without blocking a
 * worker.  The chain queue_rcu_work() -> call_rcu_tasks() -> work is made of macros and
 * inline initialisers; what is freed, and how, is Rust's (rust/multi/deferred.rs).
 */

#include <linux/rcupdate.h>
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
};

static void rkf_multi_deferred_free(struct work_struct *work)
{
	struct rkf_multi_deferred *d = container_of(work, struct rkf_multi_deferred, free_work);

	d->free(d->garbage);
	kfree(d);
}

/* No task runs the garbage's trampolines any more: free it, in process context. */
static void rkf_multi_deferred_tasks_done(struct rcu_head *rcu)
{
	struct rkf_multi_deferred *d = container_of(rcu, struct rkf_multi_deferred, tasks_rcu);

	queue_work(d->wq, &d->free_work);
}

/* No cpu reads the garbage's table any more; for trampolines, wait for tasks too. */
static void rkf_multi_deferred_fn(struct work_struct *work)
{
	struct rkf_multi_deferred *d =
		container_of(to_rcu_work(work), struct rkf_multi_deferred, rwork);

	if (d->tasks)
		call_rcu_tasks(&d->tasks_rcu, rkf_multi_deferred_tasks_done);
	else
		rkf_multi_deferred_free(&d->free_work);
}

/**
 * rkf_multi_sync() - wait until no cpu reads a table published before
 * @tasks: and until no task runs a generated trampoline no site calls any more
 */
void rkf_multi_sync(bool tasks)
{
	synchronize_rcu();
	if (tasks)
		synchronize_rcu_tasks();
}

/**
 * rkf_multi_defer() - free garbage after a grace period, without waiting for it
 * @wq:      from rkf_multi_deferred_init()
 * @garbage: what to free
 * @free:    frees it, in process context
 * @tasks:   it holds generated trampolines no site calls any more: wait also until no
 *           task runs them (an RCU tasks grace period, which covers tasks preempted there)
 *
 * Once no cpu can read a table published before (and, with @tasks, no task runs a
 * trampoline of it), a worker calls @free: the old table, a detached link, whose
 * program reference must be dropped in process context, and trampolines.  No worker
 * blocks meanwhile.  Without memory for that, waits for the grace periods here instead.
 */
void rkf_multi_defer(struct workqueue_struct *wq, void *garbage, void (*free)(void *garbage),
		     bool tasks)
{
	struct rkf_multi_deferred *d = kmalloc(sizeof(*d), GFP_KERNEL);

	if (!d) {
		rkf_multi_sync(tasks);
		free(garbage);
		return;
	}
	d->wq = wq;
	d->garbage = garbage;
	d->free = free;
	d->tasks = tasks;
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
	/* ...its work run, and with it every call_rcu_tasks()... */
	flush_workqueue(wq);
	/* ...whose callbacks queue the last works, which destroy_workqueue() drains. */
	rcu_barrier_tasks();
	destroy_workqueue(wq);
}
