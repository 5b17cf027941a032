#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# guest-mitigations.sh MODE GUEST-SCRIPT [ARGS...]
#
# Runs inside a distro-flavour VM booted on a cpu model that makes the kernel turn a
# mitigation on (scripts/vm.sh distro --cpu MODEL [--append ARGS]): checks that the
# kernel did, then runs GUEST-SCRIPT with ARGS (guest-selftests.sh -t multi_, or
# guest-bench.sh --per-call), with rkf_multi's generated trampolines carrying that
# mitigation.  MODE:
#   rethunk  return thunks (retbleed's untrained return thunk, SRSO): an AMD Zen 2 model
#   stuff    call depth tracking (retbleed=stuff): an Intel Skylake model
# A kernel that did not turn the mitigation on fails the run: the tests would not test it.
set -u
: "${RKF_OUT:?}" "${RKF_ROOT:?}"
source "$RKF_ROOT/tests/guest-lib.sh"
mode=${1:?MODE}
script=${2:?GUEST-SCRIPT}
shift 2
vuln=/sys/devices/system/cpu/vulnerabilities

echo "# cpu: $(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2-)"
for f in retbleed spec_rstack_overflow spectre_v2; do
	echo "# $f: $(cat "$vuln/$f" 2>/dev/null || echo absent)"
done
thunk=$(return_thunk)
echo "# ${thunk:-no return thunk chosen}"

fail() {
	echo "# $mode mitigation is not on: $*"
	echo "1..0 # the $mode mitigation is not active on this cpu model"
	exit 1
}
case $mode in
rethunk)
	grep -q '^Mitigation: untrained return thunk' "$vuln/retbleed" ||
		fail "retbleed is '$(cat "$vuln/retbleed")'"
	[[ $thunk =~ (retbleed|srso)_return_thunk ]] || fail "${thunk:-no return thunk}"
	;;
stuff)
	grep -q '^Mitigation: Stuffing' "$vuln/retbleed" || fail "retbleed is '$(cat "$vuln/retbleed")'"
	dmesg | grep -q 'callthunks: Setting up call depth tracking' ||
		fail "no call depth tracking set up"
	[[ $thunk == *call_depth_return_thunk ]] || fail "${thunk:-no return thunk}"
	;;
*)
	echo "# unknown mode '$mode' (rethunk or stuff)"
	exit 1
	;;
esac

echo "# $mode mitigation is on"
exec "$script" "$@"
