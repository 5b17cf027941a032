// SPDX-License-Identifier: GPL-2.0
/*
 * rkf_stack: kfunc entry points and BTF sets, and the pieces of bpf_get_stack() and
 * bpf_get_task_stack() that are inline or macros in the kernel: the per-cpu pt_regs slots
 * and perf_fetch_caller_regs() of the raw_tp flavour, the callchain taken with preemption
 * disabled, a task's stack walk, and the mmap lock with its irq_work deferred unlock.
 * The rules (flags, sizes, the tail, build ids) are in rust/stack/ (entry.rs; mm.rs for
 * build ids) and rust/core/src/stack.rs.
 *
 * Everything here mirrors kernel/bpf/stackmap.c and kernel/trace/bpf_trace.c so that the
 * kfuncs return what the helper returns; the README lists where they differ (where the
 * stack starts, a perf sample's callchain kept, build ids in more sleepable programs).
 */

#include <linux/bpf.h>
#include <linux/bpf_verifier.h>
#include <linux/btf.h>
#include <linux/btf_ids.h>
#include <linux/irq_work.h>
#include <linux/mmap_lock.h>
#include <linux/perf_event.h>
#include <linux/percpu.h>
#include <linux/preempt.h>
#include <linux/rcupdate.h>
#include <linux/sched.h>
#include <linux/sched/task_stack.h>
#include <linux/stacktrace.h>
#include <linux/uaccess.h>

#include "rkf.h"

/* As get_bpf_raw_tp_regs(): three nesting levels of regs per cpu. */
struct rkf_stack_regs {
	struct pt_regs regs[3];
};

static DEFINE_PER_CPU(struct rkf_stack_regs, rkf_stack_regs);
static DEFINE_PER_CPU(int, rkf_stack_nest_level);

static struct pt_regs *rkf_stack_regs_get(void)
{
	struct rkf_stack_regs *r = this_cpu_ptr(&rkf_stack_regs);
	int level = this_cpu_inc_return(rkf_stack_nest_level);

	if (level > ARRAY_SIZE(r->regs)) {
		this_cpu_dec(rkf_stack_nest_level);
		return ERR_PTR(-EBUSY);
	}
	return &r->regs[level - 1];
}

static void rkf_stack_regs_put(void)
{
	this_cpu_dec(rkf_stack_nest_level);
}

/**
 * rkf_stack_capture() - take the callchain and store it, as __bpf_get_stack() does
 * @regs: where the stack starts
 * @buf:  the program's buffer, with room for the entries @walk allows
 * @walk: from rkf_stack_prepare()
 *
 * The callchain entry is only valid with preemption disabled and under RCU, hence C.
 * Always inlined into the kfunc: when @regs comes from perf_fetch_caller_regs(), the
 * unwinder starts at perf_callchain_kernel() and walks (and discards) every frame up to
 * the kfunc's, and a frame of module text costs more to unwind than one of vmlinux.
 *
 * Return: the number of entries stored, or -EFAULT when there is no callchain or fewer
 * than @walk->skip frames.
 */
static __always_inline long rkf_stack_capture(struct pt_regs *regs, void *buf,
					      const struct rkf_stack_walk *walk)
{
	struct perf_callchain_entry *trace;
	u32 skip = walk->skip, nr, i;

	/*
	 * RCU too, for the rcu_dereference() of the callchain buffers: sleepable and syscall
	 * programs run under RCU tasks trace only (the helper takes it only on its may_fault
	 * path).
	 */
	preempt_disable();
	rcu_read_lock();
	trace = get_perf_callchain(regs, !walk->user, walk->user, walk->max_depth, false,
				   false, 0);
	if (unlikely(!trace) || trace->nr < skip) {
		rcu_read_unlock();
		preempt_enable();
		return -EFAULT;
	}
	nr = trace->nr - skip;
	if (!walk->build_id) {
		memcpy(buf, trace->ip + skip, nr * sizeof(u64));
	} else {
		struct bpf_stack_build_id *ids = buf;

		for (i = 0; i < nr; i++)
			ids[i].ip = trace->ip[skip + i];
	}
	rcu_read_unlock();
	preempt_enable();
	return nr;
}

/*
 * __bpf_get_stack(): the rules (flags, size, tail, build ids) are Rust's, the walk is
 * done here, in the kfunc's frame.
 */
static __always_inline long rkf_stack_get(struct pt_regs *regs, void *buf, u32 size,
					  u64 flags, bool may_fault)
{
	struct rkf_stack_walk walk;
	long ret;

	ret = rkf_stack_prepare(buf, size, flags, may_fault, &walk);
	if (ret)
		return ret;
	ret = rkf_stack_capture(regs, buf, &walk);
	return rkf_stack_finish(buf, size, &walk, ret);
}

/**
 * rkf_stack_capture_task() - the kernel stack of a task, as get_callchain_entry_for_task()
 * and callchain_store() take it
 * @task: the task
 * @buf:  the program's buffer, with room for the entries @walk allows
 * @walk: from rkf_stack_prepare()
 *
 * stack_trace_save_tsk() pins the task's stack while it walks it and leaves the scheduler
 * functions out, as for the helper; the entries past the skip go straight into @buf
 * (unsigned long is u64 here).  When none is left past the skip, a second walk tells
 * whether the stack had exactly @walk->skip frames (0 entries) or fewer (-EFAULT); the
 * helper tells from one walk, so a task that runs between the two can make this differ.
 *
 * Return: the number of entries stored, or -EFAULT.
 */
static __always_inline long rkf_stack_capture_task(struct task_struct *task, void *buf,
						   const struct rkf_stack_walk *walk)
{
	unsigned long probe;
	unsigned int nr;

	static_assert(sizeof(unsigned long) == sizeof(u64));
	if (walk->max_depth < walk->skip)
		return -EFAULT;
	nr = stack_trace_save_tsk(task, buf, walk->max_depth - walk->skip, walk->skip);
	if (nr)
		return nr;
	/* No walk: the stack went (the task exited) since the caller looked. */
	if (!refcount_read(&task->stack_refcount))
		return -EFAULT;
	if (!walk->skip)
		return 0;
	return stack_trace_save_tsk(task, &probe, 1, walk->skip - 1) ? 0 : -EFAULT;
}

/**
 * rkf_task_user_regs() - whether another task's saved regs are user mode
 * @task: the task, whose stack the caller found present
 *
 * As user_mode(task_pt_regs(task)) in __bpf_get_stack(), without pinning the stack
 * (put_task_stack() is not exported): the regs are read fault-safely, and only count if
 * the stack was still there after the read (its refcount never rises again from 0).
 *
 * Return: true if they are user-mode regs.
 */
static bool rkf_task_user_regs(struct task_struct *task)
{
	struct pt_regs regs;

	if (!READ_ONCE(task->stack) ||
	    copy_from_kernel_nofault(&regs, task_pt_regs(task), sizeof(regs)))
		return false;
	/*
	 * The copy before the refcount: a stack freed meanwhile reads 0 there, as
	 * put_task_stack() frees it only after refcount_dec_and_test() took it to 0.
	 */
	smp_rmb();
	return refcount_read(&task->stack_refcount) && user_mode(&regs);
}

__bpf_kfunc_start_defs();

/*
 * Whether build ids may be parsed where a page fault is allowed: the calling program is
 * sleepable, as bpf_get_task_stack_sleepable() parses them in every sleepable program
 * and bpf_get_stack_sleepable() in sleepable kprobe and uprobe programs (a sleepable
 * fentry or LSM program gets the raw_tp helper, which never faults), and it runs where
 * it may sleep.  A sleepable program inside bpf_rcu_read_lock(),
 * bpf_preempt_disable() or bpf_local_irq_save(), or in a timer callback, may not; there
 * the verifier refuses the helper's sleepable form (.might_sleep), and the kfuncs parse
 * without faults instead.
 */
static bool rkf_may_fault(const struct bpf_prog_aux *aux)
{
	return aux->prog->sleepable && preemptible() && !rcu_preempt_depth();
}

/**
 * bpf_rkf_get_stack() - copy the current stack into a buffer, as bpf_get_stack()
 * @buf:    the buffer: ips (u64), or struct bpf_stack_build_id with BPF_F_USER_BUILD_ID
 * @buf__sz: its size in bytes
 * @flags:  BPF_F_SKIP_FIELD_MASK | BPF_F_USER_STACK | BPF_F_USER_BUILD_ID
 * @aux:    the calling program's, supplied by the verifier (KF_IMPLICIT_ARGS): programs
 *          call the kfunc with the three arguments above
 *
 * The kernel stack starts at the calling program, as the helper's does for raw
 * tracepoint, tp_btf and fentry/fexit programs; in a tracepoint program the helper's
 * starts at the tracepoint, a few frames below (perf_trace_<event>()'s regs).  In a
 * sleepable program, build ids are parsed where a page fault is allowed
 * (rkf_may_fault()): a mapped ELF file whose build id is not in the page cache still
 * gives it, where the helper of a sleepable fentry or LSM program gives an ip.
 *
 * Return: the bytes written, or a negative errno with the buffer zeroed (-EBUSY, nested
 * more than three deep on this cpu, leaves it untouched), as the helper.
 */
__bpf_kfunc long bpf_rkf_get_stack(void *buf, u32 buf__sz, u64 flags,
				   const struct bpf_prog_aux *aux)
{
	bool may_fault = rkf_may_fault(aux);
	struct rkf_stack_walk walk;
	struct pt_regs *regs;
	long ret, nr = 0;

	/*
	 * The per-cpu regs slot is held with preemption disabled, and given back before the
	 * build ids, which a sleepable program parses where it may sleep: a program preempted
	 * on this cpu while it held a slot could otherwise have it taken by another.
	 */
	preempt_disable();
	regs = rkf_stack_regs_get();
	if (IS_ERR(regs)) {
		preempt_enable();
		return PTR_ERR(regs);
	}
	/*
	 * Here, in the function the program calls, and not deeper: the regs then name the
	 * program as the caller, and the unwind starts at this frame, as with the helper.
	 */
	perf_fetch_caller_regs(regs);
	ret = rkf_stack_prepare(buf, buf__sz, flags, may_fault, &walk);
	if (!ret)
		nr = rkf_stack_capture(regs, buf, &walk);
	rkf_stack_regs_put();
	preempt_enable();
	if (ret)
		return ret;
	return rkf_stack_finish(buf, buf__sz, &walk, nr);
}

/**
 * bpf_rkf_get_stack_kprobe() - bpf_get_stack() for kprobe programs
 * @ctx:    the program's context, the probed pt_regs
 * @buf:    as bpf_rkf_get_stack()
 * @buf__sz: as bpf_rkf_get_stack()
 * @flags:  as bpf_rkf_get_stack()
 * @aux:    as bpf_rkf_get_stack()
 *
 * The kernel stack starts at the probed instruction.  Sleepable uprobe programs parse
 * build ids as bpf_rkf_get_stack() does in sleepable programs.
 *
 * Return: as bpf_rkf_get_stack().
 */
__bpf_kfunc long bpf_rkf_get_stack_kprobe(struct pt_regs *ctx, void *buf, u32 buf__sz,
					  u64 flags, const struct bpf_prog_aux *aux)
{
	return rkf_stack_get(ctx, buf, buf__sz, flags, rkf_may_fault(aux));
}

/**
 * bpf_rkf_get_stack_pe() - bpf_get_stack() for perf_event programs
 * @ctx:    the program's context
 * @buf:    as bpf_rkf_get_stack()
 * @buf__sz: as bpf_rkf_get_stack()
 * @flags:  as bpf_rkf_get_stack()
 *
 * As bpf_get_stack_pe(): if the event samples callchains (PERF_SAMPLE_CALLCHAIN), the
 * stack is the sample's, with perf's context markers; otherwise it is walked from the
 * sampled regs.  perf_event programs are never sleepable, and only they may call it
 * (rkf_stack_kfunc_filter()).
 *
 * On a precise event (PEBS) without a full sampled callchain, the kernel refuses to
 * attach a program that calls bpf_get_stack() (perf_event_set_bpf_handler() in
 * kernel/events/core.c: a walk from the sampled regs may upset the unwinder); it cannot
 * tell a program that calls this kfunc, which refuses the call instead.
 *
 * Return: as bpf_rkf_get_stack(), and -EPROTO (the buffer zeroed) on such an event.
 */
__bpf_kfunc long bpf_rkf_get_stack_pe(struct bpf_perf_event_data *ctx, void *buf,
				      u32 buf__sz, u64 flags)
{
	struct bpf_perf_event_data_kern *kctx = (struct bpf_perf_event_data_kern *)ctx;
	const struct perf_event_attr *attr = &kctx->event->attr;
	const struct perf_callchain_entry *trace;

	if (attr->precise_ip && (!(attr->sample_type & PERF_SAMPLE_CALLCHAIN) ||
				 attr->exclude_callchain_kernel ||
				 attr->exclude_callchain_user)) {
		memset(buf, 0, buf__sz);
		return -EPROTO;
	}
	if (!(attr->sample_type & PERF_SAMPLE_CALLCHAIN))
		return rkf_stack_get((struct pt_regs *)kctx->regs, buf, buf__sz, flags, false);
	trace = kctx->data->callchain;
	return rkf_stack_get_sampled(trace ? trace->ip : NULL, trace ? trace->nr : 0,
				     buf, buf__sz, flags);
}

/**
 * bpf_rkf_get_task_stack() - copy a task's stack into a buffer, as bpf_get_task_stack()
 * @task:   the task, a trusted or RCU-protected pointer (KF_RCU)
 * @buf:    as bpf_rkf_get_stack()
 * @buf__sz: as bpf_rkf_get_stack()
 * @flags:  as bpf_rkf_get_stack()
 * @aux:    as bpf_rkf_get_stack()
 *
 * The kernel stack of another task is the one it was switched out with; the current
 * task's starts in this kfunc, above the calling program (the helper's, in the helper).
 * A user stack is the current task's only: another task's gives -EOPNOTSUPP, a task
 * without user regs -EFAULT, as with the helper.  And not in a perf_event program: its
 * walk (get_perf_callchain()) would overwrite the per-cpu callchain entry that holds the
 * sample's callchain, which bpf_rkf_get_stack_pe() and the sample's record read after it
 * (the helper's does): -EOPNOTSUPP; bpf_rkf_get_stack_pe() takes the user stack there.
 *
 * The stack is not pinned here (put_task_stack() is not exported):
 * stack_trace_save_tsk() pins it for the walk, and another task's regs are read
 * fault-safely (rkf_task_user_regs()).  That is also why an
 * RCU-protected task will do, as for the helper: RCU keeps the task_struct, and nothing
 * here needs a reference to it or to its stack beyond what the walk takes.
 *
 * Return: as bpf_rkf_get_stack(), and -EFAULT for a task whose stack is gone (it has
 * exited), -EOPNOTSUPP as above.
 */
__bpf_kfunc long bpf_rkf_get_task_stack(struct task_struct *task, void *buf, u32 buf__sz,
					u64 flags, const struct bpf_prog_aux *aux)
{
	bool is_current = task == current;
	struct rkf_stack_walk walk;
	bool user_regs;
	long ret;

	/* First, as the helper's try_get_task_stack(): a task whose stack is gone. */
	if (!refcount_read(&task->stack_refcount)) {
		memset(buf, 0, buf__sz);
		return -EFAULT;
	}
	ret = rkf_stack_prepare(buf, buf__sz, flags, rkf_may_fault(aux), &walk);
	if (ret)
		return ret;
	user_regs = is_current ? user_mode(task_pt_regs(task)) : rkf_task_user_regs(task);
	ret = rkf_stack_check_task(&walk, is_current, user_regs,
				   resolve_prog_type(aux->prog) == BPF_PROG_TYPE_PERF_EVENT);
	if (!ret && walk.user)
		ret = rkf_stack_capture(task_pt_regs(task), buf, &walk);
	else if (!ret)
		ret = rkf_stack_capture_task(task, buf, &walk);
	return rkf_stack_finish(buf, buf__sz, &walk, ret);
}

__bpf_kfunc_end_defs();

/*
 * KF_IMPLICIT_ARGS: the verifier passes the calling program's aux, which the programs'
 * prototypes (include/rkf.bpf.h) leave out.  A kfunc in both sets has the same flags in
 * both, as the verifier requires.  KF_PERFMON: bpf_get_task_stack() is a helper of
 * CAP_PERFMON (bpf_base_func_proto() in kernel/bpf/helpers.c), which a syscall program,
 * loaded with CAP_BPF alone, would not otherwise need; bpf_get_stack() is there for it
 * with CAP_BPF (the raw_tp proto), and so is bpf_rkf_get_stack().  KF_RCU: the helper's
 * task argument takes an RCU-protected pointer (task->real_parent), and so does the kfunc.
 */
BTF_KFUNCS_START(rkf_stack_tracing_kfunc_ids)
BTF_ID_FLAGS(func, bpf_rkf_get_stack, KF_IMPLICIT_ARGS)
BTF_ID_FLAGS(func, bpf_rkf_get_stack_pe)
BTF_ID_FLAGS(func, bpf_rkf_get_task_stack, KF_IMPLICIT_ARGS | KF_PERFMON | KF_RCU)
BTF_KFUNCS_END(rkf_stack_tracing_kfunc_ids)

BTF_KFUNCS_START(rkf_stack_kprobe_kfunc_ids)
BTF_ID_FLAGS(func, bpf_rkf_get_stack_kprobe, KF_IMPLICIT_ARGS)
BTF_ID_FLAGS(func, bpf_rkf_get_task_stack, KF_IMPLICIT_ARGS | KF_PERFMON | KF_RCU)
BTF_KFUNCS_END(rkf_stack_kprobe_kfunc_ids)

/*
 * The ids of bpf_rkf_get_stack_pe() and of bpf_rkf_get_stack() (the function programs
 * call, not its _impl twin) in the module's BTF as loaded: rkf_stack_kfunc_filter_init().
 */
static u32 rkf_stack_pe_id __ro_after_init;
static u32 rkf_stack_id __ro_after_init;

/**
 * rkf_stack_kfunc_filter_init() - find what rkf_stack_kfunc_filter() refuses
 *
 * The verifier passes the filter a kfunc's id in the module's BTF as the kernel loaded
 * it, renumbered against vmlinux's (kernel/bpf/btf_relocate.c: an out-of-tree module's
 * BTF is split against a distilled base), which a BTF_ID_LIST of the module, resolved
 * at build time, does not hold.  The loaded BTF is registered before the module's init
 * runs (btf_module_notify()).  bpf_find_btf_id() takes the first BTF with a function of
 * that name, vmlinux's and then the modules' (a module's leaves with it); no other is
 * meant to have one, and the kernel exports no way to ask which module a BTF is of.
 *
 * Return: 0, or -ENOENT if the module's BTF has no bpf_rkf_get_stack_pe() or
 * bpf_rkf_get_stack().
 */
int rkf_stack_kfunc_filter_init(void)
{
	struct btf *btf;
	s32 pe, plain;

	pe = bpf_find_btf_id("bpf_rkf_get_stack_pe", BTF_KIND_FUNC, &btf);
	if (pe < 0)
		return pe;
	btf_put(btf);
	plain = bpf_find_btf_id("bpf_rkf_get_stack", BTF_KIND_FUNC, &btf);
	if (plain < 0)
		return plain;
	btf_put(btf);
	rkf_stack_pe_id = pe;
	rkf_stack_id = plain;
	return 0;
}

/*
 * The tracing hook serves tracing (fentry, fexit, tp_btf), tracepoint, raw_tp, LSM and
 * perf_event programs, and the set is registered for syscall programs too
 * (bpf_prog_type_to_kfunc_hook() in kernel/bpf/btf.c).  bpf_rkf_get_stack_pe() reads a
 * perf_event program's context, which the verifier makes an argument of that type be in
 * such a program only: in any other, a struct of scalars is plain memory, which a
 * program could fill with a pointer of its choosing.  So only perf_event programs may
 * call it, as the kernel gives bpf_get_stack_pe() to them only (pe_prog_func_proto() in
 * kernel/trace/bpf_trace.c).
 *
 * And perf_event programs may not call bpf_rkf_get_stack(), as the kernel gives them
 * bpf_get_stack_pe() in bpf_get_stack()'s place: its walk would start in the overflow
 * handler, not at the sampled registers, and get_perf_callchain() at the same context
 * level would overwrite the per-cpu entry that holds the sample's own callchain
 * (perf_callchain() in kernel/events/core.c), which bpf_rkf_get_stack_pe() and the
 * sample's record then read.  A tracing program attached to a perf_event program (fentry
 * on a BPF program) runs there too and is not kept from it, as the kernel does not keep
 * it from bpf_get_stack().
 */
static int rkf_stack_kfunc_filter(const struct bpf_prog *prog, u32 kfunc_id)
{
	bool perf_event = resolve_prog_type(prog) == BPF_PROG_TYPE_PERF_EVENT;

	if (kfunc_id == rkf_stack_pe_id && !perf_event)
		return -EACCES;
	if (kfunc_id == rkf_stack_id && perf_event)
		return -EACCES;
	return 0;
}

const struct btf_kfunc_id_set rkf_stack_tracing_kfunc_set = {
	.owner = THIS_MODULE,
	.set = &rkf_stack_tracing_kfunc_ids,
	.filter = rkf_stack_kfunc_filter,
};

const struct btf_kfunc_id_set rkf_stack_kprobe_kfunc_set = {
	.owner = THIS_MODULE,
	.set = &rkf_stack_kprobe_kfunc_ids,
};

/*
 * The deferred mmap_read_unlock() of kernel/bpf/mmap_unlock_work.h, with a per-cpu slot
 * of the module's own (the kernel's is not exported).
 */
struct rkf_mmap_unlock_work {
	struct irq_work irq_work;
	struct mm_struct *mm;
	atomic_t active;
};

static DEFINE_PER_CPU(struct rkf_mmap_unlock_work, rkf_mmap_unlock_work);

static void rkf_do_mmap_read_unlock(struct irq_work *entry)
{
	struct rkf_mmap_unlock_work *work;

	work = container_of(entry, struct rkf_mmap_unlock_work, irq_work);
	mmap_read_unlock_non_owner(work->mm);
	work->mm = NULL;
	atomic_set_release(&work->active, 0);
}

/**
 * rkf_stack_mm_lock() - read-lock current->mm for build-id lookups, or fail
 * @cookie: set to what rkf_stack_mm_unlock() needs
 *
 * As stack_map_get_build_id_offset(): with irqs disabled the unlock must be deferred to
 * an irq_work, whose per-cpu slot is reserved here.
 *
 * Return: the locked mm, or NULL (no mm, slot busy, or contended): fall back to ips.
 */
struct mm_struct *rkf_stack_mm_lock(void **cookie)
{
	struct rkf_mmap_unlock_work *work = NULL;
	struct mm_struct *mm = current->mm;

	if (!mm)
		return NULL;
	if (irqs_disabled()) {
		if (IS_ENABLED(CONFIG_PREEMPT_RT))
			return NULL;
		work = this_cpu_ptr(&rkf_mmap_unlock_work);
		if (irq_work_is_busy(&work->irq_work) ||
		    atomic_cmpxchg_acquire(&work->active, 0, 1))
			return NULL;
	}
	if (!mmap_read_trylock(mm)) {
		if (work)
			atomic_set_release(&work->active, 0);
		return NULL;
	}
	*cookie = work;
	return mm;
}

/**
 * rkf_stack_mm_unlock() - undo rkf_stack_mm_lock()
 * @mm:     the locked mm
 * @cookie: what rkf_stack_mm_lock() set
 */
void rkf_stack_mm_unlock(struct mm_struct *mm, void *cookie)
{
	struct rkf_mmap_unlock_work *work = cookie;

	if (!work) {
		mmap_read_unlock(mm);
		return;
	}
	work->mm = mm;
	/* Released from the irq_work; tell lockdep now, as bpf_mmap_unlock_mm() does. */
	rwsem_release(&mm->mmap_lock.dep_map, _RET_IP_);
	irq_work_queue(&work->irq_work);
}

/**
 * rkf_stack_vma_lock() - read-lock the vma of current->mm that holds @ip by its own lock
 * @ip: the address
 *
 * For build-id lookups where a page fault is allowed: lock_vma_under_rcu(), which 7.3's
 * stack_map_lock_vma() (kernel/bpf/stackmap.c) tries before the mmap trylock, so that a
 * contended mmap lock does not cost the build id.  It fails, rather than wait, on a vma
 * being changed, a write-locked one included: never a deadlock with a lock the calling
 * program's context holds.
 *
 * Context: task context, not NMI (a failed lookup may drop an mm reference).
 *
 * Return: the vma, read-locked until rkf_stack_vma_unlock(), or NULL (no mm, no vma
 * holds @ip, the vma is being changed, or the kernel has no per-vma locks): the caller
 * falls back to rkf_stack_mm_lock().
 */
struct vm_area_struct *rkf_stack_vma_lock(unsigned long ip)
{
	struct mm_struct *mm = current->mm;

	return mm ? lock_vma_under_rcu(mm, ip) : NULL;
}

/**
 * rkf_stack_vma_unlock() - undo rkf_stack_vma_lock()
 * @vma: the vma it returned
 */
void rkf_stack_vma_unlock(struct vm_area_struct *vma)
{
	vma_end_read(vma);
}

/** rkf_stack_mm_init() - set up the per-cpu unlock slots */
void rkf_stack_mm_init(void)
{
	int cpu;

	for_each_possible_cpu(cpu)
		init_irq_work(&per_cpu_ptr(&rkf_mmap_unlock_work, cpu)->irq_work,
			      rkf_do_mmap_read_unlock);
}

/** rkf_stack_mm_drain() - wait for deferred unlocks before the module goes */
void rkf_stack_mm_drain(void)
{
	int cpu;

	for_each_possible_cpu(cpu)
		irq_work_sync(&per_cpu_ptr(&rkf_mmap_unlock_work, cpu)->irq_work);
}
