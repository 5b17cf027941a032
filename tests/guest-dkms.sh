#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Runs inside the test VM for `make dkms-check`: load the modules dkms installed (not the
# ones of the source tree), run a smoke subset of the kselftests, unload.
set -u
: "${RKF_OUT:?}" "${RKF_ROOT:?}" "${RKF_DKMS_MODDIR:?}"
modules=(rkf_percpu rkf_stack rkf_multi)

for m in "${modules[@]}"; do
	ko=$RKF_DKMS_MODDIR/$m.ko
	if ! insmod "$ko"; then
		echo "# insmod $ko failed:"
		dmesg | tail -5 | sed 's/^/# /'
		exit 1
	fi
	echo "# loaded $ko"
done

"$RKF_ROOT/target/release/rkf-selftests" \
	-t percpu_every_possible_cpu,percpu_differential,stack_kernel_differential,stack_build_id_differential,multi_fentry_args,multi_fexit_return_values |
	tee "$RKF_OUT/ktap.txt"
rc=${PIPESTATUS[0]}

for m in "${modules[@]}"; do
	rmmod "$m" || rc=1
done
exit "$rc"
