#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Runs inside the test VM for `make dkms-check`: load the modules dkms installed (not the
# ones of the source tree), run a smoke subset of the kselftests from the installed
# kselftest package (make selftests-package) as a distro user would, unload.
set -u
: "${RKF_OUT:?}" "${RKF_ROOT:?}" "${RKF_DKMS_MODDIR:?}"
source "$RKF_ROOT/tests/guest-lib.sh"
modules=(rkf_percpu rkf_stack rkf_multi)

load_modules "$RKF_DKMS_MODDIR" "${modules[@]}"

env -u RKF_MODDIR -u RKF_FOREIGN_MODDIR "$RKF_ROOT/build/selftests/current-$(uname -r)/run_kselftest.sh" \
	-t percpu_every_possible_cpu,percpu_differential,stack_kernel_differential,stack_build_id_differential,stack_deep_kernel_differential,multi_fentry_args,multi_fexit_return_values,kfunc_programs_need_capabilities |
	tee "$RKF_OUT/ktap.txt"
rc=${PIPESTATUS[0]}

unload_modules "${modules[@]}" || rc=1
exit "$rc"
