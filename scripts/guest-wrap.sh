#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Runs inside the guest (see vm.sh): the command with its output also in
# $RKF_OUT/output.txt, then its exit status and the kernel log into $RKF_OUT.
# The output starts with a header line: the kernel, where its source (and, for the distro
# flavour, its config: RKF_KCONFIG) came from, and, when vm.sh chose a cpu model
# (RKF_VM_CPU), the model and the mitigations the kernel chose for it.
set -u
: "${RKF_OUT:?}"
mountpoint -q /sys/kernel/debug || mount -t debugfs none /sys/kernel/debug 2>/dev/null
mountpoint -q /sys/kernel/tracing || mount -t tracefs none /sys/kernel/tracing 2>/dev/null
# RCU tasks' stall warning and its info line after the jiffies vm.sh asks (it says why).
if [[ -n ${RKF_RCU_TASK_STALL_TIMEOUT:-} ]]; then
	params=/sys/module/rcupdate/parameters
	if ! echo "$RKF_RCU_TASK_STALL_TIMEOUT" >"$params/rcu_task_stall_timeout" ||
		! echo "$RKF_RCU_TASK_STALL_TIMEOUT" >"$params/rcu_task_stall_info"; then
		echo "guest-wrap: cannot set rcupdate.rcu_task_stall_timeout and rcu_task_stall_info" |
			tee "$RKF_OUT/output.txt"
		dmesg >"$RKF_OUT/dmesg.txt"
		echo 1 >"$RKF_OUT/status"
		exit 1
	fi
fi

header() {
	local h f vuln=/sys/devices/system/cpu/vulnerabilities
	h="# guest: Linux $(uname -r), $(nproc) cpus, from $RKF_KSRC_PKG ${RKF_KSRC_VERSION:-?}"
	[[ -n ${RKF_KCONFIG:-} ]] && h+=", config $RKF_KCONFIG"
	if [[ -n ${RKF_VM_CPU:-} ]]; then
		h+=", cpu $RKF_VM_CPU ($(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1))"
		echo "$h"
		h="# guest mitigations:"
		for f in retbleed spectre_v2 spec_rstack_overflow; do
			h+=" $f: $(cat "$vuln/$f" 2>/dev/null || echo "(no $vuln/$f)");"
		done
		h=${h%;}
	fi
	echo "$h"
}

{
	header
	"$@"
	echo $? >"$RKF_OUT/status.tmp"
} 2>&1 | tee "$RKF_OUT/output.txt"
dmesg >"$RKF_OUT/dmesg.txt"
rc=$(cat "$RKF_OUT/status.tmp" 2>/dev/null || echo 255)
mv "$RKF_OUT/status.tmp" "$RKF_OUT/status" 2>/dev/null || echo "$rc" >"$RKF_OUT/status"
exit "$rc"
