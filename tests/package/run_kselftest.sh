#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# run_kselftest.sh [rkf-selftests ARGS...]: the rkf kselftests, from an installed package
# (make selftests-package).  KTAP on stdout; exit 0 (all passed) or 1 (a test failed, or
# the arguments select no test), as kselftest expects.
#
# Needs root and the rkf modules loaded (insmod, modprobe or dkms).  rkf_testmod, the
# test-only module, is loaded from this package for the run if it is not loaded already,
# and only if it was built for the running kernel.  The tests that reload modules take
# them from modules/ (RKF_MODDIR), and the test that the kernel refuses a module built for
# another kernel takes one from foreign/ (RKF_FOREIGN_MODDIR).
#
#   ./run_kselftest.sh --list        the tests
#   ./run_kselftest.sh -t NAME,...   the tests named NAME, or whose names start with it
#   ./run_kselftest.sh --storm-cycles N   the rkf_multi storms with N cycles (100 to 1000000)
#   ./run_kselftest.sh --generated-storm-cycles N   the storm through generated trampolines
#                                    with N cycles (by default a twentieth of the others')
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export RKF_MODDIR=${RKF_MODDIR:-$here/modules}
export RKF_FOREIGN_MODDIR=${RKF_FOREIGN_MODDIR:-$here/foreign}

if [[ " $* " == *" --list "* || " $* " == *" --help "* || " $* " == *" -h "* ]]; then
	exec "$here/rkf-selftests" "$@"
fi

loaded_testmod=0
# Unload what this script loaded, also when the run is interrupted.
cleanup() {
	if ((loaded_testmod)) && ! rmmod rkf_testmod; then
		echo "# rmmod rkf_testmod failed: the module is stuck" >&2
		return 1
	fi
}
trap 'cleanup; exit 1' INT TERM
if [[ ! -d /sys/module/rkf_testmod ]]; then
	built_for=$(modinfo -F vermagic "$RKF_MODDIR/rkf_testmod.ko" 2>/dev/null | cut -d' ' -f1)
	if [[ $built_for != "$(uname -r)" ]]; then
		echo "# rkf_testmod: not loaded, and $RKF_MODDIR/rkf_testmod.ko is for ${built_for:-no kernel}, not $(uname -r): the tests that need it fail" >&2
	elif insmod "$RKF_MODDIR/rkf_testmod.ko"; then
		loaded_testmod=1
	else
		echo "# insmod $RKF_MODDIR/rkf_testmod.ko failed" >&2
	fi
fi

"$here/rkf-selftests" "$@"
rc=$?
trap - INT TERM
cleanup || rc=1
# A runner killed by a signal failed.
((rc > 4)) && rc=1
exit "$rc"
