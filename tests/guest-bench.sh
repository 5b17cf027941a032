#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Runs inside the bench VM (scripts/vm.sh distro --bench, -icount shift=0): load the rkf
# modules, run the benchmarks, unload.  The results go to $RKF_OUT/bench.md too (the
# guest can write only there; `make bench` copies it to build/bench.md).
set -u
: "${RKF_OUT:?}" "${RKF_MODDIR:?}" "${RKF_ROOT:?}"
source "$RKF_ROOT/tests/guest-lib.sh"
modules=(rkf_percpu rkf_stack rkf_multi rkf_testmod)

load_modules "$RKF_MODDIR" "${modules[@]}"

{
	echo "kernel $(uname -r), source linux-source-7.3 ${RKF_KSRC_VERSION:-unknown}${RKF_KCONFIG:+, config $RKF_KCONFIG}"
	thunk=$(return_thunk)
	echo "cpu ${RKF_VM_CPU:-max (the vng default)} ($(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)): retbleed: $(cat /sys/devices/system/cpu/vulnerabilities/retbleed); ${thunk:-no return thunk}"
	echo
	"$RKF_ROOT/target/release/rkf-bench" "$@"
} | tee "$RKF_OUT/bench.md"
rc=${PIPESTATUS[0]}

unload_modules "${modules[@]}" || rc=1
exit "$rc"
