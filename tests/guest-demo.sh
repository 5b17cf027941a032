#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# The main job (`make run`), inside the distro kernel's VM: load the rkf modules and show them working.
set -eu
: "${RKF_MODDIR:?}" "${RKF_ROOT:?}" "${RKF_OUT:?}"
source "$RKF_ROOT/tests/guest-lib.sh"
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
run profile -F 99 -d 3 --folded profile.folded --svg profile.svg --pprof profile.pb.gz
kill "$load" 2>/dev/null || true
wait "$load" 2>/dev/null || true
echo
echo "the hottest stacks (samples, then comm;user frames;kernel frames, outermost first):"
awk '{ n = $NF; $NF = ""; print n, $0 }' profile.folded | sort -nr | head -5 | cut -c1-240
# rkf offcputime: tasks that block in known places, from before it starts until after it
# ends: sleep(1) in clock_nanosleep(), cat reading a pipe that is written every 0.4 s.
# Intervals of 10 ms or more.
(while :; do sleep 0.25; done) &
sleeper=$!
(while :; do sleep 0.4; echo tick; done) | cat >/dev/null &
reader=$!
run offcputime -d 2.5 -m 10000 --folded offcpu.folded --svg offcpu.svg --pprof offcpu.pb.gz
# The writer loop ends on its next write, once cat is gone.
kill "$sleeper" "$reader" 2>/dev/null || true
wait "$sleeper" "$reader" 2>/dev/null || true
echo
echo "where sleep and cat waited (microseconds, then comm;user frames;kernel frames):"
awk '$1 ~ /^(sleep|cat);/ { n = $NF; $NF = ""; print n, $0 }' offcpu.folded | sort -nr | head -5 |
	cut -c1-240

# rkf funccount: one rkf_multi link on every vfs_ function, while dd runs (from before
# it attaches until after it ends); rkf links shows the link while it counts.
dd if=/dev/zero of=/dev/null bs=4k 2>/dev/null &
load=$!
# (rkf funccount reads the kernel's BTF before it attaches: seconds under TCG.)
(
	for _ in $(seq 100); do
		out=$("$rkf" links) && [[ $out != "no rkf_multi links" ]] && break
		sleep 0.2
	done
	echo; echo "\$ rkf links"; echo "$out"
) &
lister=$!
run funccount 'vfs_*' -d 3 -n 10
wait "$lister" || true
kill "$load" 2>/dev/null || true
wait "$load" 2>/dev/null || true

# rkf funclatency: one rkf_multi session program on every vfs_ function, timing each call
# in microseconds while dd copies /dev/zero to /dev/null (from before it attaches until
# after it ends); the histograms of the 3 most called.
dd if=/dev/zero of=/dev/null bs=4k 2>/dev/null &
load=$!
run funclatency 'vfs_*' -u -d 2 -T 3
kill "$load" 2>/dev/null || true
wait "$load" 2>/dev/null || true

# A closed link's programs, which hold rkf_multi, are released after grace periods (an
# RCU tasks one when it retired generated trampolines): rmmod is refused until then, as
# for any module a BPF program holds, so unload_modules retries it for a while.
unload_modules rkf_percpu rkf_stack rkf_multi
