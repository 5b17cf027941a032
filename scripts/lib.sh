# SPDX-License-Identifier: GPL-2.0
# Common helpers for the rkf scripts.  Sourced, never executed.
# shellcheck shell=bash disable=SC2034 # the variables are for the scripts that source this

RKF_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
RKF_CACHE=${RKF_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rkf}
RKF_LLVM_BIN=/usr/lib/llvm-19/bin
# virtme-ng lives in a venv of its own, so that nothing depends on the shell's Python setup.
RKF_VENV=$RKF_CACHE/venv
export PATH="$RKF_LLVM_BIN:$HOME/.cargo/bin:$RKF_VENV/bin:$PATH"

# The Debian package that carries the kernel source, and the only suite it may come from.
RKF_KSRC_PKG=linux-source-7.3
RKF_KSRC_SUITE=trixie-backports
# The distro flavour's config: Debian's own amd64 one, from the package of the same version.
RKF_KCONFIG_PKG=linux-config-7.3
RKF_KCONFIG_FILE=config.amd64_none_amd64

log() { printf '\033[1m[rkf]\033[0m %s\n' "$*" >&2; }
die() { printf '\033[1;31m[rkf] error:\033[0m %s\n' "$*" >&2; exit 1; }

# Run a long command, printing the elapsed time every 30 s so that CI logs show progress.
# with_progress WHAT LOG CMD...: the command's own output goes to LOG ("-" for none).
with_progress() {
	local what=$1 logf=$2; shift 2
	local start=$SECONDS next=30 rc=0 pid
	if [[ $logf == - ]]; then "$@" & else "$@" >"$logf" 2>&1 & fi
	pid=$!
	while kill -0 "$pid" 2>/dev/null; do
		sleep 2
		if (( SECONDS - start >= next )) && kill -0 "$pid" 2>/dev/null; then
			log "$what: $((SECONDS - start)) s elapsed"
			next=$((next + 30))
		fi
	done
	wait "$pid" || rc=$?
	log "$what: done in $((SECONDS - start)) s (exit $rc)"
	return $rc
}

# kernel_splats FILE: print the lines of a kernel log that show a splat; exit 0 when there
# is one.  Warnings ("WARNING: kernel/bpf/btf.c:9017 at ..., CPU#1: insmod/60"), BUGs (a
# KASAN or KFENCE report, a NULL dereference, sleeping in atomic context, a soft lockup,
# a workqueue lockup), Oopses and panics, lockdep and RCU-lockdep reports, every form of
# RCU CPU stall warning ("rcu: INFO: rcu_preempt detected stalls on CPUs/tasks:",
# "self-detected stall on CPU", "detected stall, but suppressed": kernel/rcu/
# tree_stall.h; "detected expedited stalls on CPUs/tasks": kernel/rcu/tree_exp.h; not
# every form has a "Call Trace:"), a hung task ("INFO: task ... blocked for more than N
# seconds.", "blocked in I/O wait for more than", "is blocked on a mutex":
# kernel/hung_task.c), refcount, UBSAN and list corruption reports, a leak kmemleak
# found, and any stack dump.  An RCU tasks grace period held back for
# rcu_task_stall_info prints "... grace period number N (since boot) is J jiffies old."
# (rcu_tasks_wait_gp() and tasks_rcu_exit_stall() in kernel/rcu/tasks.h), and for
# rcu_task_stall_timeout the stall warning "detected stalls on tasks"; the guest sets
# both to 10 s (60 s on the test kernel, see vm.sh), and as the warning is checked first
# it is the one printed: a holdout kept every trampoline and module unload waiting that
# long, so it is one too.
# The command line is left out: virtme-ng passes the guest's command base64-encoded in
# it, which may spell anything (its lines, and those of the parameters the kernel did
# not know, which repeat it).  tests/host-splats.sh checks each form against lines as
# the kernel prints them.  Read as text whatever bytes a crashed guest's console left
# (-a: grep would otherwise stop at a NUL byte and only say "binary file matches").
# Exit 0: splats; 1: none; 2: the log could not be read.
kernel_splats() {
	[[ -r $1 && -f $1 ]] || { echo "kernel_splats: cannot read $1" >&2; return 2; }
	grep -avE '^(\[[ 0-9.]*\] )?((Kernel c|C)ommand line: |Unknown kernel command line parameters )' "$1" |
		grep -aE 'WARNING:|BUG:|Oops|KASAN|kernel BUG|Kernel panic|general protection fault|possible circular locking|possible recursive locking|inconsistent lock state|suspicious RCU usage|RCU stall|INFO: task .* blocked|refcount_t:|UBSAN|list_add corruption|list_del corruption|unreferenced object|Call Trace:|detected (expedited )?stall|\(since boot\).* jiffies old'
}
