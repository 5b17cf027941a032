#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Runs inside the test VM (scripts/vm.sh): load the rkf modules of the kselftest package
# (make selftests-package), run the kselftests through the package's run_kselftest.sh,
# unload the modules.  A module that does not load or does not unload fails the run.
set -u
: "${RKF_OUT:?}" "${RKF_ROOT:?}"
source "$RKF_ROOT/tests/guest-lib.sh"
pkg=$RKF_ROOT/build/selftests/current-$(uname -r)
modules=(rkf_percpu rkf_stack rkf_multi rkf_testmod)
kmemleak=/sys/kernel/debug/kmemleak

if [[ ! -x $pkg/run_kselftest.sh ]]; then
	echo "# no kselftest package for $(uname -r) ($pkg): run make selftests-package"
	exit 1
fi

# A kernel built with kmemleak (vm.sh sets RKF_KMEMLEAK) must have it running: a run
# without its scan would pass with nothing checked.
if [[ ${RKF_KMEMLEAK:-0} == 1 && ! -w $kmemleak ]]; then
	echo "# the kernel is built with kmemleak, but $kmemleak is not there (debugfs not mounted, or kmemleak off since boot: dmesg says why)"
	exit 1
fi

# Forget what boot left behind: only leaks from the run count.
[[ -w $kmemleak ]] && echo clear >"$kmemleak"

load_modules "$pkg/modules" "${modules[@]}"

# Arguments go to the runner (for example -t NAME).  Without vm.sh's module directories,
# run_kselftest.sh uses the package's own modules/ and foreign/ for the tests that reload
# modules, as on any other machine.  TMPDIR is the 9p share: the guest's /tmp keeps its
# files in tmpfs, whose pages cannot leave the page cache, as
# stack_sleepable_build_id_untouched_elf needs.
env -u RKF_MODDIR -u RKF_FOREIGN_MODDIR TMPDIR="$RKF_OUT" "$pkg/run_kselftest.sh" "$@" |
	tee "$RKF_OUT/ktap.txt"
rc=${PIPESTATUS[0]}

unload_modules "${modules[@]}" || rc=1

# After everything is unloaded, a leak scan (twice: objects must look unreferenced in two
# scans to be reported).  vm.sh fails the run on any report.  kmemleak refuses a scan
# (EPERM) once it has turned itself off (it does when it cannot track an object, out of
# memory): a run that has no scan fails, instead of reporting no leak.
if [[ -w $kmemleak ]]; then
	if echo scan >"$kmemleak" && echo scan >"$kmemleak"; then
		cat "$kmemleak" >"$RKF_OUT/kmemleak.txt"
		echo "# kmemleak: $(grep -c 'unreferenced object' "$RKF_OUT/kmemleak.txt") suspected leaks"
	else
		echo "# kmemleak: no scan: kmemleak turned itself off during the run (dmesg says why)"
		rc=1
	fi
fi
exit "$rc"
