#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# The main job (`make run`), inside the distro kernel's VM: load the rkf modules and show them working.
set -eu
: "${RKF_MODDIR:?}" "${RKF_ROOT:?}" "${RKF_OUT:?}"
rkf=$RKF_ROOT/target/release/rkf

for m in rkf_percpu rkf_stack rkf_multi; do
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
# rkf funccount: one rkf_multi link on every vfs_ function, while dd and ls run;
# rkf links shows the link while it counts.
dd if=/dev/zero of=/dev/null bs=4k count=100000 2>/dev/null &
load=$!
(sleep 1.5; echo; echo "\$ rkf links"; "$rkf" links) &
lister=$!
run funccount 'vfs_*' -d 3 -n 10
wait "$lister" || true
kill "$load" 2>/dev/null || true
wait "$load" 2>/dev/null || true

for m in rkf_percpu rkf_stack rkf_multi; do
	rmmod "$m"
done
