#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# The main job (`make run`), inside the bench VM: load the rkf modules and show them working.
set -eu
: "${RKF_MODDIR:?}" "${RKF_ROOT:?}" "${RKF_OUT:?}"
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

# rkf profile: dd reading /dev/zero, sampled system-wide.
# RKF_OUT is the only directory the guest can write; `make run` copies the files out.
cd "$RKF_OUT"
dd if=/dev/zero of=/dev/null bs=64k count=200000 2>/dev/null &
load=$!
run profile -F 99 -d 3 --folded profile.folded --svg profile.svg
kill "$load" 2>/dev/null || true
wait "$load" 2>/dev/null || true
echo
echo "the hottest stacks (samples, then comm;user frames;kernel frames, outermost first):"
awk '{ n = $NF; $NF = ""; print n, $0 }' profile.folded | sort -nr | head -5 | cut -c1-240
for m in rkf_percpu rkf_stack; do
	rmmod "$m"
done
