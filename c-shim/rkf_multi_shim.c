// SPDX-License-Identifier: GPL-2.0
/*
 * rkf_multi: the parts that must be C.  The template function programs are verified
 * against (it needs BTF), the hot path the trampoline calls (bpf_prog_run(), the run
 * context and the recursion guard are inline), and thin wrappers around BTF, kallsyms and
 * the ftrace direct-call API.  The rules, the links and the table are Rust
 * (rust/multi.rs, rust/core/src/multi.rs).
 */

#include <linux/bpf.h>
#include <linux/capability.h>
#include <linux/btf.h>
#include <linux/filter.h>
#include <linux/ftrace.h>
#include <linux/hash.h>
#include <linux/kallsyms.h>
#include <linux/module.h>
#include <linux/rcupdate.h>
#include <linux/slab.h>
#include <linux/wait_bit.h>
#include <linux/workqueue.h>
#include <asm/cpufeature.h>

#include "rkf.h"

/**
 * rkf_multi_tmpl6() - what rkf_multi programs are loaded against
 * @a0: the first argument of the traced function, as a u64
 * @a1: the second
 * @a2: the third
 * @a3: the fourth
 * @a4: the fifth
 * @a5: the sixth
 *
 * SEC("fentry/rkf_multi_tmpl6") or SEC("fexit/rkf_multi_tmpl6"): the program reads the
 * traced function's arguments as six u64 (and, in fexit, its return value) through ctx,
 * which is the trampoline's frame.  Never called, never traced.
 *
 * Return: 0.
 */
noinline notrace u64 rkf_multi_tmpl6(u64 a0, u64 a1, u64 a2, u64 a3, u64 a4, u64 a5)
{
	barrier();
	return 0;
}

/* The traced functions; NULL when there are none.  Written under the links' mutex. */
static const struct rkf_multi_table __rcu *rkf_multi_table;

/* fexit calls in flight: the trampoline's frame is on some stack until they return. */
static atomic_long_t rkf_multi_inflight = ATOMIC_LONG_INIT(0);
static bool rkf_multi_exiting;

/*
 * rkf_core::multi::lookup(), which the host tests check against a linear search.  The
 * index always has an empty bucket (rkf_core::multi::index_bits()); the probes are
 * bounded all the same.
 */
static __always_inline const struct rkf_multi_func *
rkf_multi_lookup(const struct rkf_multi_table *t, unsigned long key)
{
	u32 mask, b, pos, n;

	if (!t)
		return NULL;
	mask = (1U << t->bits) - 1;
	b = hash_64_generic(key, t->bits);
	for (n = 0; n <= mask; n++, b = (b + 1) & mask) {
		pos = t->index[b];
		if (!pos)
			return NULL;
		if (t->funcs[pos - 1].key == key)
			return &t->funcs[pos - 1];
	}
	return NULL;
}

/* The index is built in Rust with the 64-bit generic hash_64(). */
static_assert(BITS_PER_LONG == 64);

/* __bpf_prog_enter_recur() and __bpf_prog_exit_recur() of kernel/bpf/trampoline.c. */
static __always_inline void rkf_multi_run(const struct rkf_multi_prog *p, u64 *ctx)
{
	struct bpf_tramp_run_ctx run_ctx = { .bpf_cookie = p->cookie };
	struct bpf_prog *prog = p->prog;

	run_ctx.saved_run_ctx = bpf_set_run_ctx(&run_ctx.run_ctx);
	if (likely(bpf_prog_get_recursion_context(prog))) {
		bpf_prog_run(prog, ctx);
		atomic64_inc(&p->stats->hits);
	} else {
		atomic64_inc(&p->stats->misses);
	}
	bpf_prog_put_recursion_context(prog);
	bpf_reset_run_ctx(run_ctx.saved_run_ctx);
}

/**
 * rkf_multi_enter() - the trampoline's call on function entry
 * @ctx: the frame: ctx[0..5] the argument registers, ctx[6] the return value slot,
 *       ctx[-1] the argument count and ctx[-2] the function's address (set here)
 * @key: the return address into the traced function
 *
 * Runs the fentry programs of the function in attach order.
 *
 * Return: 1 if the trampoline must call the function and come back for fexit programs
 * (an fexit call is then in flight until rkf_multi_exit()), 0 otherwise.
 */
notrace u64 rkf_multi_enter(u64 *ctx, unsigned long key)
{
	const struct rkf_multi_table *t;
	const struct rkf_multi_func *f;
	u64 fexit = 0;
	u32 i;

	rcu_read_lock_dont_migrate();
	/* Once: the function and its programs must come from the same table. */
	t = rcu_dereference(rkf_multi_table);
	f = rkf_multi_lookup(t, key);
	if (f) {
		const struct rkf_multi_prog *p = &t->progs[f->first];

		ctx[-1] = f->nr_args;
		ctx[-2] = f->addr;
		for (i = 0; i < f->nr_fentry; i++)
			rkf_multi_run(&p[i], ctx);
		if (f->nr_progs > f->nr_fentry) {
			atomic_long_inc(&rkf_multi_inflight);
			fexit = 1;
		}
	}
	rcu_read_unlock_migrate();
	return fexit;
}

/**
 * rkf_multi_exit() - the trampoline's call after the traced function returned
 * @ctx: as for rkf_multi_enter(); ctx[6] holds the return value
 * @key: as for rkf_multi_enter()
 *
 * Runs the fexit programs the function has now (a link detached meanwhile runs no more).
 */
notrace void rkf_multi_exit(u64 *ctx, unsigned long key)
{
	const struct rkf_multi_table *t;
	const struct rkf_multi_func *f;
	u32 i;

	/* bpf_get_func_ret() reads the slot after the last argument. */
	ctx[ctx[-1] & 0xff] = ctx[6];
	rcu_read_lock_dont_migrate();
	t = rcu_dereference(rkf_multi_table);
	f = rkf_multi_lookup(t, key);
	if (f) {
		const struct rkf_multi_prog *p = &t->progs[f->first];

		for (i = f->nr_fentry; i < f->nr_progs; i++)
			rkf_multi_run(&p[i], ctx);
	}
	rcu_read_unlock_migrate();
	/*
	 * Only the module exit waits, and then nothing is traced any more: wake_up_var()
	 * calls functions a link could trace, which would recurse through here.
	 */
	if (atomic_long_dec_and_test(&rkf_multi_inflight) && READ_ONCE(rkf_multi_exiting))
		wake_up_var(&rkf_multi_inflight);
}

/**
 * rkf_multi_prog_get() - take a program to attach
 * @fd:    its fd
 * @fexit: set to whether it is an fexit program
 * @id:    set to its id
 *
 * The program is checked by the function it was verified against, its name and module:
 * a BTF_ID_LIST of the module would hold an id of the module's distilled BTF, which the
 * kernel renumbers at load time (kernel/bpf/btf_relocate.c) without patching the list.
 *
 * Return: the program, with a reference, or ERR_PTR(-EBADF) (not a program fd) or
 * ERR_PTR(-EINVAL) (not a TRACING fentry/fexit program loaded against rkf_multi_tmpl6(),
 * or sleepable).
 */
struct bpf_prog *rkf_multi_prog_get(u32 fd, bool *fexit, u32 *id)
{
	struct bpf_prog *prog = bpf_prog_get_type_dev(fd, BPF_PROG_TYPE_TRACING, false);

	if (IS_ERR(prog))
		return prog;
	if ((prog->expected_attach_type != BPF_TRACE_FENTRY &&
	     prog->expected_attach_type != BPF_TRACE_FEXIT) ||
	    prog->aux->mod != THIS_MODULE || !prog->aux->attach_func_name ||
	    strcmp(prog->aux->attach_func_name, "rkf_multi_tmpl6") ||
	    prog->aux->dst_prog || prog->sleepable) {
		bpf_prog_put(prog);
		return ERR_PTR(-EINVAL);
	}
	*fexit = prog->expected_attach_type == BPF_TRACE_FEXIT;
	*id = prog->aux->id;
	return prog;
}

/**
 * rkf_multi_prog_ctx_args() - how many argument slots of ctx a program reads
 * @prog: an rkf_multi program
 *
 * The verifier records the end of the furthest ctx access (check_ctx_access()).
 *
 * Return: 0 to 6, for the generated trampolines to save as many argument registers.
 */
u32 rkf_multi_prog_ctx_args(const struct bpf_prog *prog)
{
	return min(DIV_ROUND_UP(prog->aux->max_ctx_offset, sizeof(u64)), 6U);
}

/**
 * rkf_multi_prog_put() - drop a reference from rkf_multi_prog_get()
 * @prog: the program
 */
void rkf_multi_prog_put(struct bpf_prog *prog)
{
	bpf_prog_put(prog);
}

static const struct btf_type *rkf_multi_skip_mods(const struct btf *btf, u32 id)
{
	const struct btf_type *t = btf_type_by_id(btf, id);

	while (t) {
		switch (BTF_INFO_KIND(t->info)) {
		case BTF_KIND_TYPEDEF:
		case BTF_KIND_VOLATILE:
		case BTF_KIND_CONST:
		case BTF_KIND_RESTRICT:
		case BTF_KIND_TYPE_TAG:
			t = btf_type_by_id(btf, t->type);
			continue;
		}
		break;
	}
	return t;
}

static void rkf_multi_shape_of(const struct btf *btf, u32 type, u32 slot,
			       struct rkf_multi_shape *shape)
{
	const struct btf_type *t;

	if (!type)
		return;	/* void: kind 0 */
	t = rkf_multi_skip_mods(btf, type);
	if (!t)
		return;
	shape->kind[slot] = BTF_INFO_KIND(t->info);
	switch (shape->kind[slot]) {
	case BTF_KIND_INT:
	case BTF_KIND_ENUM:
	case BTF_KIND_ENUM64:
	case BTF_KIND_STRUCT:
	case BTF_KIND_UNION:
	case BTF_KIND_FLOAT:
		shape->size[slot] = t->size;
		break;
	case BTF_KIND_PTR:
		shape->size[slot] = sizeof(void *);
		break;
	}
}

/**
 * rkf_multi_prog_btf() - the BTF a program was verified against
 * @prog: an rkf_multi program
 *
 * Return: rkf_multi's BTF, split on vmlinux's: it resolves the ids of both.
 */
const struct btf *rkf_multi_prog_btf(const struct bpf_prog *prog)
{
	return prog->aux->attach_btf;
}

/**
 * rkf_multi_shape() - describe a function by its BTF id, for rust/core/src/multi.rs
 * @btf:    the BTF the id is in, from rkf_multi_prog_btf() or rkf_multi_btf_get()
 * @btf_id: the function
 * @shape:  filled in; its name points into @btf
 *
 * Return: 0, or -ENOENT if @btf_id is not a function.
 */
int rkf_multi_shape(const struct btf *btf, u32 btf_id, struct rkf_multi_shape *shape)
{
	const struct btf_type *func = btf_type_by_id(btf, btf_id);
	const struct btf_type *proto;
	const struct btf_param *params;
	u32 i, n;

	memset(shape, 0, sizeof(*shape));
	if (!func || !btf_type_is_func(func))
		return -ENOENT;
	proto = btf_type_by_id(btf, func->type);
	if (!proto || !btf_type_is_func_proto(proto))
		return -ENOENT;
	shape->name = btf_name_by_offset(btf, func->name_off);
	n = btf_type_vlen(proto);
	params = btf_params(proto);
	shape->nr_params = n;
	shape->varargs = n && !params[n - 1].type;
	rkf_multi_shape_of(btf, proto->type, 0, shape);
	for (i = 0; i < n && i < ARRAY_SIZE(shape->kind) - 1; i++)
		rkf_multi_shape_of(btf, params[i].type, i + 1, shape);
	return 0;
}

/**
 * rkf_multi_btf_get() - the BTF object behind an fd from user space
 * @fd: a BTF object fd
 *
 * Return: the object, with a reference, or ERR_PTR(-EBADF) (not an fd) or
 * ERR_PTR(-EINVAL) (not a BTF object).
 */
struct btf *rkf_multi_btf_get(int fd)
{
	return btf_get_by_fd(fd);
}

/**
 * rkf_multi_btf_put() - drop a reference from rkf_multi_btf_get()
 * @btf: the object
 */
void rkf_multi_btf_put(struct btf *btf)
{
	btf_put(btf);
}

/**
 * rkf_multi_btf_module() - the module a BTF object describes
 * @btf: from rkf_multi_btf_get()
 *
 * Return: the module, with a reference held while its functions are traced, or NULL if
 * @btf is not the BTF of a live module (vmlinux's, a program's, or a module going away).
 */
struct module *rkf_multi_btf_module(const struct btf *btf)
{
	return btf_try_get_module(btf);
}

/**
 * rkf_multi_module_put() - drop a reference from rkf_multi_btf_module()
 * @mod: the module
 */
void rkf_multi_module_put(struct module *mod)
{
	module_put(mod);
}

/**
 * rkf_multi_is_symbol() - whether @addr is the start of the function @name of @mod
 * @addr: an address from user space
 * @name: the name of the function its BTF id names
 * @mod:  the module whose BTF named it, or NULL for vmlinux's (and rkf_multi's own)
 *
 * The address must be in the object whose BTF was checked, and whose module a link
 * holds: a module may have a function of the same name as another module's or
 * vmlinux's (as bpf_check_attach_target() looks the name up in the target's module).
 *
 * Return: true if kallsyms names @addr "@name+0x0" and it lies in @mod, or, without
 * @mod, in vmlinux or rkf_multi.
 */
bool rkf_multi_is_symbol(unsigned long addr, const char *name, struct module *mod)
{
	char buf[KSYM_SYMBOL_LEN];
	size_t len = strlen(name);

	sprint_symbol(buf, addr);
	if (strncmp(buf, name, len) || strncmp(buf + len, "+0x0/", 5))
		return false;
	if (mod)
		return within_module(addr, mod);
	/* sprint_symbol() appends " [module]" to the symbols of modules. */
	return !strchr(buf + len, '[') || within_module(addr, THIS_MODULE);
}

/**
 * rkf_multi_site() - the ftrace site of a function
 * @addr: the function
 *
 * Return: the address ftrace patches, or 0 if the function is not traceable.
 */
unsigned long rkf_multi_site(unsigned long addr)
{
	return ftrace_location(addr);
}

/**
 * rkf_multi_site_owner() - the direct trampoline a site calls, if any
 * @site: from rkf_multi_site()
 *
 * Return: the trampoline's address (rkf_multi's own, or another's), or 0.
 */
unsigned long rkf_multi_site_owner(unsigned long site)
{
	return ftrace_find_rec_direct(site);
}

/* The one ftrace_ops of rkf_multi; update_ftrace_direct_add() registers it. */
static struct ftrace_ops rkf_multi_ops;

/**
 * rkf_multi_ftrace_update() - hook, unhook or move functions, in one ftrace update
 * @sites: their sites, from rkf_multi_site()
 * @tramps: the trampoline of each (0: the shared one): the new one to hook or move to,
 *          the current one to unhook
 * @n:     how many
 * @op:    RKF_MULTI_HOOK, RKF_MULTI_UNHOOK or RKF_MULTI_MOVE
 *
 * All or nothing: on failure no site changed.  A site that moves never misses a call:
 * ftrace calls through its list function while the trampolines change.  The caller
 * knows each site's current trampoline: update_ftrace_direct_del() checks it,
 * update_ftrace_direct_mod() does not (and skips sites that are not direct calls).
 *
 * Return: 0, -ENOMEM, or -EINVAL when a site to hook has another direct trampoline (or,
 * to unhook, is not rkf_multi's with that trampoline).
 */
int rkf_multi_ftrace_update(const unsigned long *sites, const unsigned long *tramps, u32 n,
			    u32 op)
{
	struct ftrace_hash *hash;
	unsigned long tramp;
	int err;
	u32 i;

	if (!n)
		return 0;
	hash = alloc_ftrace_hash(FTRACE_HASH_DEFAULT_BITS);
	if (!hash)
		return -ENOMEM;
	for (i = 0; i < n; i++) {
		tramp = tramps[i] ?: (unsigned long)rkf_multi_tramp;
		if (!add_ftrace_hash_entry_direct(hash, sites[i], tramp)) {
			err = -ENOMEM;
			goto out;
		}
	}
	switch (op) {
	case RKF_MULTI_HOOK:
		err = update_ftrace_direct_add(&rkf_multi_ops, hash);
		break;
	case RKF_MULTI_UNHOOK:
		err = update_ftrace_direct_del(&rkf_multi_ops, hash);
		break;
	case RKF_MULTI_MOVE:
		err = update_ftrace_direct_mod(&rkf_multi_ops, hash, true);
		break;
	default:
		err = -EINVAL;
	}
out:
	free_ftrace_hash(hash);
	return err;
}

/**
 * rkf_multi_run_fentry() - run one fentry program, for a per-function trampoline
 * @p:   the program, its cookie and counters: a slot of the trampoline's image
 * @ctx: the trampoline's frame, as for rkf_multi_enter()
 *
 * The per-function trampolines (rkf_core::tramp) call this once per program, as a BPF
 * trampoline calls __bpf_prog_enter_recur() and __bpf_prog_exit_recur().
 */
notrace void rkf_multi_run_fentry(const struct rkf_multi_prog *p, u64 *ctx)
{
	rcu_read_lock_dont_migrate();
	rkf_multi_run(p, ctx);
	rcu_read_unlock_migrate();
}

/**
 * struct rkf_multi_image - generated per-function trampolines, in BPF text
 * @ksym: its symbol: kallsyms, perf and the unwinder know it as BPF text
 * @code: the text, from the BPF pack allocator
 * @size: its size
 * @rcu:  frees the image once no reader of the BPF ksym tree can see @ksym
 */
struct rkf_multi_image {
	struct bpf_ksym ksym;
	void *code;
	u32 size;
	struct rcu_head rcu;
};

/**
 * rkf_multi_tramps_supported() - whether per-function trampolines can run here
 *
 * The generated code returns with a plain ret and calls directly; with return thunks or
 * call depth tracking it would need their thunks, so rkf_multi then uses its shared
 * trampoline for every function.
 *
 * Return: true if they can.
 */
bool rkf_multi_tramps_supported(void)
{
	return !cpu_feature_enabled(X86_FEATURE_RETHUNK) &&
	       !cpu_feature_enabled(X86_FEATURE_CALL_DEPTH);
}

/**
 * rkf_multi_image_alloc() - allocate text for generated trampolines
 * @size: bytes
 * @seq:  a number for its symbol, rkf_multi_fentry_<seq>
 * @code: set to where the text will be, for the code to be generated for
 *
 * Return: the image, not yet executable, or NULL.
 */
struct rkf_multi_image *rkf_multi_image_alloc(u32 size, u64 seq, unsigned long *code)
{
	struct rkf_multi_image *im = kzalloc(sizeof(*im), GFP_KERNEL);

	if (!im)
		return NULL;
	im->code = arch_alloc_bpf_trampoline(size);
	if (!im->code) {
		kfree(im);
		return NULL;
	}
	im->size = size;
	INIT_LIST_HEAD_RCU(&im->ksym.lnode);
	snprintf(im->ksym.name, sizeof(im->ksym.name), "rkf_multi_fentry_%llu", seq);
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
	/* bpf_ksym_find() walks the ksym tree under RCU (the unwinder, kallsyms). */
	kfree_rcu(im, rcu);
}

/**
 * rkf_multi_publish() - make @table the one the trampoline reads
 * @table: the new table, or NULL
 *
 * The caller serialises publications and frees the old table only after
 * rkf_multi_sync().
 *
 * Return: the table it replaces.
 */
const struct rkf_multi_table *rkf_multi_publish(const struct rkf_multi_table *table)
{
	return unrcu_pointer(xchg(&rkf_multi_table, RCU_INITIALIZER(table)));
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
 * rkf_multi_pin() - keep rkf_multi loaded for good
 *
 * After an ftrace update that failed to take sites off its trampolines, which would
 * call into the module's text after it went.
 */
void rkf_multi_pin(void)
{
	__module_get(THIS_MODULE);
}

/* Garbage of rust/multi.rs waiting for grace periods, freed in process context. */
struct rkf_multi_deferred {
	struct rcu_work rwork;
	struct rcu_head tasks_rcu;
	struct work_struct free_work;
	void *garbage;
	bool tasks;
};

static struct workqueue_struct *rkf_multi_wq;

static void rkf_multi_deferred_free(struct work_struct *work)
{
	struct rkf_multi_deferred *d = container_of(work, struct rkf_multi_deferred, free_work);

	rkf_multi_free_garbage(d->garbage);
	kfree(d);
}

/* No task runs the garbage's trampolines any more: free it, in process context. */
static void rkf_multi_deferred_tasks_done(struct rcu_head *rcu)
{
	struct rkf_multi_deferred *d = container_of(rcu, struct rkf_multi_deferred, tasks_rcu);

	queue_work(rkf_multi_wq, &d->free_work);
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
 * rkf_multi_defer() - free garbage after a grace period, without waiting for it
 * @garbage: for rkf_multi_free_garbage()
 * @tasks:   it holds generated trampolines no site calls any more: wait also until no
 *           task runs them (an RCU tasks grace period, which covers tasks preempted there)
 *
 * Once no cpu can read a table published before (and, with @tasks, no task runs a
 * trampoline of it), a worker frees @garbage: the old table, a detached link, whose
 * program reference must be dropped in process context, and trampolines.  No worker
 * blocks meanwhile.  Without memory for that, waits for the grace periods here instead.
 */
void rkf_multi_defer(void *garbage, bool tasks)
{
	struct rkf_multi_deferred *d = kmalloc(sizeof(*d), GFP_KERNEL);

	if (!d) {
		rkf_multi_sync(tasks);
		rkf_multi_free_garbage(garbage);
		return;
	}
	d->garbage = garbage;
	d->tasks = tasks;
	INIT_WORK(&d->free_work, rkf_multi_deferred_free);
	INIT_RCU_WORK(&d->rwork, rkf_multi_deferred_fn);
	queue_rcu_work(rkf_multi_wq, &d->rwork);
}

/**
 * rkf_multi_init_deferred() - set up the workqueue of rkf_multi_defer()
 *
 * Return: 0 or -ENOMEM.
 */
int rkf_multi_init_deferred(void)
{
	rkf_multi_wq = alloc_workqueue("rkf_multi", WQ_UNBOUND, 0);
	return rkf_multi_wq ? 0 : -ENOMEM;
}

/** rkf_multi_exit_deferred() - free all deferred garbage, at module exit */
void rkf_multi_exit_deferred(void)
{
	/* Every queue_rcu_work() has its call_rcu() done after this... */
	rcu_barrier();
	/* ...its work run, and with it every call_rcu_tasks()... */
	flush_workqueue(rkf_multi_wq);
	/* ...whose callbacks queue the last works, which destroy_workqueue() drains. */
	rcu_barrier_tasks();
	destroy_workqueue(rkf_multi_wq);
}

/**
 * rkf_multi_wait_inflight() - wait until no fexit call is in flight, at module exit
 *
 * With no function hooked any more, no new call enters the trampoline after
 * synchronize_rcu_tasks() (which also covers tasks preempted inside it); tasks still
 * inside a traced function return through it, and are waited for.
 */
void rkf_multi_wait_inflight(void)
{
	WRITE_ONCE(rkf_multi_exiting, true);
	/* Orders the flag before the count read by wait_var_event(). */
	smp_mb();
	synchronize_rcu_tasks();
	wait_var_event(&rkf_multi_inflight, !atomic_long_read(&rkf_multi_inflight));
}

/** rkf_multi_capable() - whether the caller may attach: CAP_BPF and CAP_PERFMON */
bool rkf_multi_capable(void)
{
	return capable(CAP_BPF) && capable(CAP_PERFMON);
}

/** rkf_multi_ibt_enabled() - whether IBT is on, which the fexit call cannot work with */
bool rkf_multi_ibt_enabled(void)
{
	return IS_ENABLED(CONFIG_X86_KERNEL_IBT) && cpu_feature_enabled(X86_FEATURE_IBT);
}
