// SPDX-License-Identifier: GPL-2.0
/*
 * rkf_multi: the checks of what a request names that need the kernel's inline and macro
 * APIs: the program (its attach type, template and module), a function's BTF shape, and
 * whether an address is the function its BTF id names.  The rules applied to the
 * answers are Rust (rust/multi/request.rs, rust/core/src/multi/rules.rs).
 */

#include <linux/bpf.h>
#include <linux/btf.h>
#include <linux/error-injection.h>
#include <linux/kallsyms.h>
#include <linux/module.h>

#include "rkf.h"

/*
 * The user ABI of /dev/rkf_multi, fixed: no padding, the same offsets for every compiler
 * (rust/core/src/abi/multi.rs is asserted field by field against these structs).
 */
static_assert(sizeof(struct rkf_multi_attach_request) == 56);
static_assert(offsetof(struct rkf_multi_attach_request, btf_fds) == 32);
static_assert(offsetof(struct rkf_multi_attach_request, flags) == 40);
static_assert(offsetof(struct rkf_multi_attach_request, pad) == 52);
static_assert(sizeof(struct rkf_multi_func_info) == 32);
static_assert(sizeof(struct rkf_multi_link_info) == 48);
static_assert(offsetof(struct rkf_multi_link_info, cnt) == 16);
static_assert(offsetof(struct rkf_multi_link_info, funcs) == 24);
static_assert(offsetof(struct rkf_multi_link_info, next_id) == 32);
static_assert(offsetof(struct rkf_multi_link_info, flags) == 40);
static_assert(offsetof(struct rkf_multi_link_info, pad) == 44);

/**
 * rkf_multi_prog_get() - take a program to attach
 * @fd:    its fd
 * @kind:  set to what it runs on: RKF_MULTI_KIND_FENTRY, _FEXIT or _SESSION
 * @sleepable: set to whether it is sleepable (fentry.s, fexit.s, fsession.s)
 * @id:    set to its id
 * @max_args: set to the arguments its template reads: 6 (rkf_multi_tmpl6()) or 12
 *         (rkf_multi_tmpl12())
 *
 * The program is checked by the function it was verified against, its name and module:
 * a BTF_ID_LIST of the module would hold an id of the module's distilled BTF, which the
 * kernel renumbers at load time (kernel/bpf/btf_relocate.c) without patching the list.
 *
 * Return: the program, with a reference for bpf_prog_put(), or ERR_PTR(-EBADF) (not a
 * program fd) or ERR_PTR(-EINVAL) (not a TRACING fentry, fexit or fsession program
 * loaded against rkf_multi_tmpl6() or rkf_multi_tmpl12()).
 */
struct bpf_prog *rkf_multi_prog_get(u32 fd, u32 *kind, bool *sleepable, u32 *id,
				    u32 *max_args)
{
	struct bpf_prog *prog = bpf_prog_get_type_dev(fd, BPF_PROG_TYPE_TRACING, false);

	if (IS_ERR(prog))
		return prog;
	switch (prog->expected_attach_type) {
	case BPF_TRACE_FENTRY:
		*kind = RKF_MULTI_KIND_FENTRY;
		break;
	case BPF_TRACE_FEXIT:
		*kind = RKF_MULTI_KIND_FEXIT;
		break;
	case BPF_TRACE_FSESSION:
		*kind = RKF_MULTI_KIND_SESSION;
		break;
	default:
		goto refuse;
	}
	if (prog->aux->mod != THIS_MODULE || !prog->aux->attach_func_name ||
	    prog->aux->dst_prog)
		goto refuse;
	if (!strcmp(prog->aux->attach_func_name, "rkf_multi_tmpl6"))
		*max_args = RKF_MULTI_REG_ARGS;
	else if (!strcmp(prog->aux->attach_func_name, "rkf_multi_tmpl12"))
		*max_args = RKF_MULTI_MAX_ARGS;
	else
		goto refuse;
	*sleepable = prog->sleepable;
	*id = prog->aux->id;
	return prog;
refuse:
	bpf_prog_put(prog);
	return ERR_PTR(-EINVAL);
}

/**
 * rkf_multi_prog_ctx_args() - how many argument slots of ctx a program reads
 * @prog: an rkf_multi program
 *
 * The verifier records the end of the furthest ctx access (check_ctx_access()); a
 * program that may tail-call another counts all RKF_MULTI_MAX_ARGS slots, as the other
 * program's accesses are not the caller's.
 *
 * Return: 0 to RKF_MULTI_MAX_ARGS, for the generated trampolines to fill as many slots
 * (a program against rkf_multi_tmpl6() that reads the return value at ctx[6] counts
 * seven: that slot is filled on entry and gets the return value after the call).
 */
u32 rkf_multi_prog_ctx_args(const struct bpf_prog *prog)
{
	/* A program it tail-calls reads ctx too, as far as it likes. */
	if (prog->aux->tail_call_reachable)
		return RKF_MULTI_MAX_ARGS;
	return min_t(u32, DIV_ROUND_UP(prog->aux->max_ctx_offset, sizeof(u64)),
		     RKF_MULTI_MAX_ARGS);
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
 * rkf_multi_shape() - describe a function by its BTF id, for rkf_core::multi::check_shape()
 * @btf:    the BTF the id is in, from rkf_multi_prog_btf() or btf_get_by_fd()
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
 * rkf_multi_error_injection() - what the error injection list says of @addr
 * @addr: a function of @mod, or of vmlinux
 * @mod:  its module, alive for the call, or NULL for vmlinux; rkf_multi (whose BTF
 *        fd a request may give for vmlinux's functions, as its BTF resolves their ids)
 *        counts as vmlinux: none of its own functions is on the list
 *
 * The list (lib/error-inject.c) is what the verifier takes for functions that may sleep
 * (check_attach_sleepable() in kernel/bpf/verifier.c).  A module's part is its own
 * ei_funcs; vmlinux's part has no exported lookup.
 *
 * Return: RKF_MULTI_EI_UNCONFIGURED without CONFIG_FUNCTION_ERROR_INJECTION, else
 * RKF_MULTI_EI_LISTED or RKF_MULTI_EI_NOT_LISTED for a module's function and
 * RKF_MULTI_EI_UNKNOWN for vmlinux's.
 */
u32 rkf_multi_error_injection(unsigned long addr, struct module *mod)
{
#ifdef CONFIG_FUNCTION_ERROR_INJECTION
	unsigned int i;

	if (!mod || mod == THIS_MODULE)
		return RKF_MULTI_EI_UNKNOWN;
	for (i = 0; i < mod->num_ei_funcs; i++)
		if (mod->ei_funcs[i].addr == addr)
			return RKF_MULTI_EI_LISTED;
	return RKF_MULTI_EI_NOT_LISTED;
#else
	return RKF_MULTI_EI_UNCONFIGURED;
#endif
}
