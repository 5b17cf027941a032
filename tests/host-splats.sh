#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# The VM runner's splat check (kernel_splats in scripts/lib.sh) against kernel log lines
# as the kernel prints them: each kind of splat must be found, each ordinary line of a
# clean boot must not be.  Prints KTAP.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/lib.sh
source "$root/scripts/lib.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
n=0 failed=0

# check NAME WANT LINE: kernel_splats on a log of a clean boot's lines plus LINE (with
# dmesg's time stamp) must find exactly LINE (WANT splat) or nothing (WANT clean).
check() {
	local name=$1 want=$2 line=$3 got
	n=$((n + 1))
	{ cat "$tmp/clean.txt"; printf '[   42.123456] %s\n' "$line"; } >"$tmp/log.txt"
	got=$(kernel_splats "$tmp/log.txt")
	if [[ $want == splat && $got == "[   42.123456] $line" ]] ||
	   [[ $want == clean && -z $got ]]; then
		echo "ok $n $name"
	else
		echo "# $name: expected $want for: $line"
		echo "# kernel_splats printed: ${got:-nothing}"
		echo "not ok $n $name"
		failed=$((failed + 1))
	fi
}

# Lines of clean boots of both flavours (dmesg.txt of vm.sh runs) that name what a splat
# names: RCU, KASAN, watchdogs, lockdep, bugs.  The guest's command in the command line
# is base64 whose letters spell Oops, KASAN and UBSAN, as they may.
cat >"$tmp/clean.txt" <<'LOG'
[    0.000000] Linux version 7.3.4-rkf-test (root@vm) (Debian clang version 19.1.7 (3~deb12u1), Debian LLD 19.1.7) #1 SMP PREEMPT Sat Dec  5 11:51:47 UTC 2026
[    0.000000] Command line: virtme_hostname=virtme-ng console=ttyS0 panic=-1 virtme.exec=`UktGOopsKASANUBSANQ2FsbA==`
[    0.512345] kasan: KernelAddressSanitizer initialized (generic)
[    0.612345] rcu: Preemptible hierarchical RCU implementation.
[    0.612346] rcu: 	RCU lockdep checking is enabled.
[    0.612347] rcu: 	RCU restricting CPUs from NR_CPUS=8 to nr_cpu_ids=2.
[    0.612348] rcu: RCU calculated value of scheduler-enlistment delay is 25 jiffies.
[    0.612349] RCU Tasks: Setting shift to 1 and lim to 1 rcu_task_cb_adjust=1 rcu_task_cpu_ids=2.
[    0.712345] Running RCU Tasks wait API self tests
[    0.812345] kmemleak: Kernel memory leak detector initialized (mem pool available: 14805)
[    1.196663] Kernel command line: virtme_hostname=virtme-ng nr_open=1048576 \
[    1.196899] Kernel command line: virtme.exec=`UktGOopsKASANUBSANQ2FsbA==`
[    1.202354] Unknown kernel command line parameters "virtme_hostname=virtme-ng virtme.exec=`UktGOopsKASANUBSANQ2FsbA==` Oops", will be passed to user space.
[    1.312345] PCI: Using host bridge windows from ACPI; if necessary, use "pci=nocrs" and report a bug
[    1.412345] NMI watchdog: Perf NMI watchdog permanently disabled
[    1.512345] clocksource: Watchdog remote CPU 1 read timed out
[    2.012345] rkf_multi: loading out-of-tree module taints kernel.
LOG
if kernel_splats "$tmp/clean.txt" >/dev/null; then
	echo "# the clean log alone is reported as a splat:"
	kernel_splats "$tmp/clean.txt" | sed 's/^/#   /'
	echo "Bail out! kernel_splats cannot tell a clean boot"
	exit 1
fi

planned=32
echo "KTAP version 1"
echo "1..$planned"
check warning splat 'WARNING: kernel/bpf/btf.c:9017 at __register_btf_kfunc_id_set+0x8dd/0x8f0, CPU#1: insmod/60'
check kasan splat 'BUG: KASAN: slab-use-after-free in rkf_multi_detach+0x12/0x40 [rkf_multi]'
check kfence splat 'BUG: KFENCE: use-after-free read in rkf_multi_detach+0x12/0x40 [rkf_multi]'
check null_deref splat 'BUG: kernel NULL pointer dereference, address: 0000000000000008'
check atomic_sleep splat 'BUG: sleeping function called from invalid context at kernel/locking/mutex.c:580'
check soft_lockup splat 'watchdog: BUG: soft lockup - CPU#1 stuck for 22s! [rkf-selftests:123]'
check wq_lockup splat 'BUG: workqueue lockup - pool cpus=0 node=0 flags=0x0 nice=0 stuck for 31s!'
check oops splat 'Oops: general protection fault, probably for non-canonical address 0xdffffc0000000001: 0000 [#1] SMP KASAN'
check kernel_bug splat 'kernel BUG at mm/slub.c:452!'
check panic splat 'Kernel panic - not syncing: Fatal exception'
check lockdep_circular splat 'WARNING: possible circular locking dependency detected'
check lockdep_recursive splat 'WARNING: possible recursive locking detected'
check lockdep_inconsistent splat 'WARNING: inconsistent lock state'
check rcu_lockdep splat 'WARNING: suspicious RCU usage'
check rcu_stall splat 'rcu: INFO: rcu_preempt detected stalls on CPUs/tasks:'
check rcu_self_stall splat 'rcu: INFO: rcu_preempt self-detected stall on CPU'
check rcu_exp_stall splat 'rcu: INFO: rcu_preempt detected expedited stalls on CPUs/tasks: { P123 } 21002 jiffies s: 93 root: 0x0/T'
check rcu_stall_suppressed splat 'rcu: INFO: rcu_preempt detected stall, but suppressed full report due to a stuck CSD-lock.'
check rcu_tasks_stall splat 'INFO: rcu_tasks detected stalls on tasks:'
check rcu_tasks_old splat 'rcu_tasks_wait_gp: rcu_tasks grace period number 9 (since boot) is 2564 jiffies old.'
check rcu_tasks_old_exit splat 'tasks_rcu_exit_stall: rcu_tasks grace period number 9 (since boot) gp_state: RTGS_WAIT_CBS is 2564 jiffies old.'
check hung_task splat 'INFO: task kworker/0:1:12 blocked for more than 122 seconds.'
check hung_task_iowait splat 'INFO: task rkf-selftests:90 blocked in I/O wait for more than 122 seconds.'
check hung_task_blocker splat 'INFO: task rkf-selftests:90 is blocked on a mutex likely owned by task insmod:88.'
check refcount splat 'refcount_t: underflow; use-after-free.'
check ubsan splat 'UBSAN: shift-out-of-bounds in kernel/bpf/core.c:1234:5'
check list_add splat 'list_add corruption. next->prev should be prev (ffff888004a8b000), but was ffff888004a8c000. (next=ffff888004a8d000).'
check list_del splat 'list_del corruption, ffff888004a8b000->next is LIST_POISON1 (dead000000000100)'
check kmemleak splat 'unreferenced object 0xffff888004a8b000 (size 64):'
check stack_dump splat 'Call Trace:'

# A splat after a line with a NUL byte, as a crashed guest's console may leave: grep
# would take the log for binary and print nothing.
n=$((n + 1))
{ cat "$tmp/clean.txt"; printf '[   41.000000] \0garbage\n[   42.123456] BUG: KASAN: wild-memory-access in rkf_multi_detach+0x12/0x40\n'; } >"$tmp/nul.txt"
got=$(kernel_splats "$tmp/nul.txt")
if [[ $got == '[   42.123456] BUG: KASAN: wild-memory-access in rkf_multi_detach+0x12/0x40' ]]; then
	echo "ok $n splat_after_nul_byte"
else
	echo "# kernel_splats printed: ${got:-nothing}"
	echo "not ok $n splat_after_nul_byte"
	failed=$((failed + 1))
fi
# A log that is not there is not a clean one: exit 2, which vm.sh fails the run on.
n=$((n + 1))
rc=0
kernel_splats "$tmp/missing.txt" >/dev/null 2>&1 || rc=$?
if ((rc == 2)); then
	echo "ok $n missing_log"
else
	echo "# kernel_splats on a missing log: exit $rc, not 2"
	echo "not ok $n missing_log"
	failed=$((failed + 1))
fi

if ((n != planned)); then
	echo "# ran $n checks, planned $planned"
	failed=$((failed + 1))
fi
echo "# $((n - failed)) passed, $failed failed"
((failed == 0))
