#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# The main job (`make run`), inside the bench VM: load the rkf modules and show them working.
set -eu
: "${RKF_MODDIR:?}" "${RKF_ROOT:?}"
rkf=$RKF_ROOT/target/release/rkf

for m in rkf_percpu rkf_stack; do
	insmod "$RKF_MODDIR/$m.ko"
done
echo "\$ lsmod"
lsmod
run() {
	echo
	echo "\$ rkf $*"
	"$rkf" "$@"
}
run percpu runqueues.nr_running
run percpu runqueues.cpu --addr
run percpu bpf_prog_active
run percpu rkf_percpu_probe.magic
for m in rkf_percpu rkf_stack; do
	rmmod "$m"
done
