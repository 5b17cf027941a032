#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Runs inside the test VM (scripts/vm.sh): load the rkf modules, run the kselftests, unload
# the modules.  A module that does not load or does not unload fails the run.
set -u
: "${RKF_OUT:?}" "${RKF_MODDIR:?}" "${RKF_ROOT:?}"
source "$RKF_ROOT/tests/guest-lib.sh"
modules=(rkf_percpu rkf_stack rkf_multi rkf_testmod)
kmemleak=/sys/kernel/debug/kmemleak

# Forget what boot left behind: only leaks from the run count.
[[ -w $kmemleak ]] && echo clear >"$kmemleak"

load_modules "$RKF_MODDIR" "${modules[@]}"

# Arguments go to the runner (for example -t NAME).
"$RKF_ROOT/target/release/rkf-selftests" "$@" | tee "$RKF_OUT/ktap.txt"
rc=${PIPESTATUS[0]}

unload_modules "${modules[@]}" || rc=1

# After everything is unloaded, a leak scan (twice: objects must look unreferenced in two
# scans to be reported).  vm.sh fails the run on any report.
if [[ -w $kmemleak ]]; then
	echo scan >"$kmemleak"
	echo scan >"$kmemleak"
	cat "$kmemleak" >"$RKF_OUT/kmemleak.txt"
	echo "# kmemleak: $(grep -c 'unreferenced object' "$RKF_OUT/kmemleak.txt") suspected leaks"
fi
exit "$rc"
