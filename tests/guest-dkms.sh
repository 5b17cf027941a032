#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Runs inside the distro VM for `make dkms-check`: load the modules dkms installed (not the
# ones of the source tree) and check that the kernel verified their signature, run a smoke
# subset of the kselftests from the installed kselftest package (make selftests-package) as
# a distro user would, unload; then load an unsigned build of rkf_percpu to show that the
# taint check tells the two apart.
set -u
: "${RKF_OUT:?}" "${RKF_ROOT:?}" "${RKF_DKMS_MODDIR:?}"
source "$RKF_ROOT/tests/guest-lib.sh"
modules=(rkf_percpu rkf_stack rkf_multi)
pkg=$RKF_ROOT/build/selftests/current-$(uname -r)
rc=0

# check_taint MODULE WANT: the module's own taint flags (/sys/module/MODULE/taint) are WANT.
# O: out of tree; E: unsigned, or signed by a key the kernel does not trust.
check_taint() {
	local got
	got=$(cat "/sys/module/$1/taint")
	if [[ $got == "$2" ]]; then
		echo "# $1: taint '$got'"
	else
		echo "# $1: taint '$got', expected '$2'"
		rc=1
	fi
}

# check_kernel_unsigned WANT: the kernel's own taint (/proc/sys/kernel/tainted) has
# TAINT_UNSIGNED_MODULE (bit 13, 'E': an unsigned module was loaded since boot) if WANT is 1,
# not if it is 0.
check_kernel_unsigned() {
	local tainted
	tainted=$(cat /proc/sys/kernel/tainted)
	if (((tainted >> 13 & 1) == $1)); then
		echo "# kernel taint $tainted: unsigned-module bit $1"
	else
		echo "# kernel taint $tainted: unsigned-module bit not $1"
		rc=1
	fi
}

load_modules "$RKF_DKMS_MODDIR" "${modules[@]}"
for m in "${modules[@]}"; do
	check_taint "$m" O
done
check_kernel_unsigned 0

env -u RKF_MODDIR -u RKF_FOREIGN_MODDIR "$pkg/run_kselftest.sh" \
	-t percpu_every_possible_cpu,percpu_differential,stack_kernel_differential,stack_build_id_differential,stack_deep_kernel_differential,multi_fentry_args,multi_fexit_return_values,kfunc_programs_need_capabilities |
	tee "$RKF_OUT/ktap.txt"
((PIPESTATUS[0] == 0)) || rc=1

unload_modules "${modules[@]}" || rc=1

# The selftest package's own build of rkf_percpu (make modules) is not signed.
load_modules "$pkg/modules" rkf_percpu
check_taint rkf_percpu OE
check_kernel_unsigned 1
unload_modules rkf_percpu || rc=1
exit "$rc"
