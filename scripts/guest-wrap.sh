#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Runs inside the guest (see vm.sh): the command with its output also in
# $RKF_OUT/output.txt, then its exit status and the kernel log into $RKF_OUT.
set -u
: "${RKF_OUT:?}"
mountpoint -q /sys/kernel/debug || mount -t debugfs none /sys/kernel/debug 2>/dev/null
mountpoint -q /sys/kernel/tracing || mount -t tracefs none /sys/kernel/tracing 2>/dev/null
{
	echo "# guest: Linux $(uname -r), $(nproc) cpus, from $RKF_KSRC_PKG ${RKF_KSRC_VERSION:-?}"
	"$@"
	echo $? >"$RKF_OUT/status.tmp"
} 2>&1 | tee "$RKF_OUT/output.txt"
dmesg >"$RKF_OUT/dmesg.txt"
rc=$(cat "$RKF_OUT/status.tmp" 2>/dev/null || echo 255)
mv "$RKF_OUT/status.tmp" "$RKF_OUT/status" 2>/dev/null || echo "$rc" >"$RKF_OUT/status"
exit "$rc"
