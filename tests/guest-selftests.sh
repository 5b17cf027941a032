#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Runs inside the test VM (scripts/vm.sh): load the rkf modules, run the kselftests, unload
# the modules.  A module that does not load or does not unload fails the run.
set -u
: "${RKF_OUT:?}" "${RKF_MODDIR:?}" "${RKF_ROOT:?}"
modules=(rkf_percpu)

for m in "${modules[@]}"; do
	if ! insmod "$RKF_MODDIR/$m.ko"; then
		echo "# insmod $m.ko failed:"
		dmesg | tail -5 | sed 's/^/# /'
		exit 1
	fi
done

"$RKF_ROOT/target/release/rkf-selftests" | tee "$RKF_OUT/ktap.txt"
rc=${PIPESTATUS[0]}

for m in "${modules[@]}"; do
	if ! rmmod "$m"; then
		echo "# rmmod $m failed: the module is stuck"
		rc=1
	fi
done
exit "$rc"
