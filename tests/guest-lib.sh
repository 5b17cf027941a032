# SPDX-License-Identifier: GPL-2.0
# shellcheck shell=bash
#
# Shared by the guest scripts (tests/guest-*.sh), which source it.

# load_modules DIR MODULE...: insmod DIR/MODULE.ko (or .ko.xz, .ko.zst, .ko.gz, as
# modules_install and dkms compress them for a kernel with CONFIG_MODULE_COMPRESS) for each,
# in order; on a failure, show the end of the kernel log and exit 1.
load_modules() {
	local dir=$1 m f
	shift
	for m in "$@"; do
		for f in "$dir/$m.ko" "$dir/$m.ko.xz" "$dir/$m.ko.zst" "$dir/$m.ko.gz" ""; do
			[[ -z $f || -f $f ]] && break
		done
		if [[ -z $f ]]; then
			echo "# no $dir/$m.ko (nor .ko.xz, .ko.zst, .ko.gz)"
			exit 1
		fi
		if ! insmod "$f"; then
			echo "# insmod $f failed:"
			dmesg | tail -5 | sed 's/^/# /'
			exit 1
		fi
		echo "# loaded $f"
	done
}

# unload_modules MODULE...: rmmod each; returns 1 if one is stuck.  A module still in use
# is tried again for 30 s: the last test's programs free their module references from
# RCU callbacks and work items, after their fds are closed (a link that retired
# generated trampolines after an RCU tasks grace period, which can take seconds under
# TCG).
unload_modules() {
	local m i rc=0
	for m in "$@"; do
		for ((i = 0; i < 300; i++)); do
			rmmod "$m" 2>/dev/null && break
			sleep 0.1
		done
		if ((i == 300)) && ! rmmod "$m"; then
			echo "# rmmod $m failed: the module is stuck"
			rc=1
		fi
	done
	return "$rc"
}

# return_thunk: the kernel's "active return thunk: NAME" line, or nothing if it chose none.
return_thunk() {
	dmesg | grep -o 'active return thunk: [a-z_]*' | tail -1
}
