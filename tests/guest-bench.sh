#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Runs inside the bench VM (scripts/vm.sh bench --bench, -icount shift=0): load the rkf
# modules, run the benchmarks, unload.  The results go to $RKF_OUT/bench.md too (the
# guest can write only there; `make bench` copies it to build/bench.md).
set -u
: "${RKF_OUT:?}" "${RKF_MODDIR:?}" "${RKF_ROOT:?}"
modules=(rkf_stack rkf_multi rkf_testmod)

for m in "${modules[@]}"; do
	if ! insmod "$RKF_MODDIR/$m.ko"; then
		echo "# insmod $m.ko failed:"
		dmesg | tail -5 | sed 's/^/# /'
		exit 1
	fi
done

{
	echo "kernel $(uname -r), source linux-source-7.3 ${RKF_KSRC_VERSION:-unknown}"
	echo
	"$RKF_ROOT/target/release/rkf-bench" "$@"
} | tee "$RKF_OUT/bench.md"
rc=${PIPESTATUS[0]}

for m in "${modules[@]}"; do
	rmmod "$m" || rc=1
done
exit "$rc"
