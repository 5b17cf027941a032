# SPDX-License-Identifier: GPL-2.0
# shellcheck shell=bash
#
# Shared by the guest scripts (tests/guest-*.sh), which source it.

# load_modules DIR MODULE...: insmod DIR/MODULE.ko for each, in order; on a failure, show
# the end of the kernel log and exit 1.
load_modules() {
	local dir=$1 m
	shift
	for m in "$@"; do
		if ! insmod "$dir/$m.ko"; then
			echo "# insmod $dir/$m.ko failed:"
			dmesg | tail -5 | sed 's/^/# /'
			exit 1
		fi
		echo "# loaded $dir/$m.ko"
	done
}

# unload_modules MODULE...: rmmod each; returns 1 if one is stuck.
unload_modules() {
	local m rc=0
	for m in "$@"; do
		if ! rmmod "$m"; then
			echo "# rmmod $m failed: the module is stuck"
			rc=1
		fi
	done
	return "$rc"
}
