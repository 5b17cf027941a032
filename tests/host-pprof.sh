#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# The pprof files that `make run` wrote (rkf profile, rkf offcputime), read by a client
# that rkf did not write: `go tool pprof -top` (Debian's golang-go) must accept each one,
# report its sample type, and list the kernel functions the demo's workloads run.  Prints
# KTAP.
#
#   tests/host-pprof.sh DIR     DIR holds profile.pb.gz and offcpu.pb.gz
set -uo pipefail
dir=${1:?usage: tests/host-pprof.sh DIR}
command -v go >/dev/null || { echo "go is not installed (make deps installs golang-go)" >&2; exit 1; }
# pprof keeps fetched profiles and symbols under $PPROF_TMPDIR; nothing to fetch here.
export PPROF_TMPDIR
PPROF_TMPDIR=$(mktemp -d)
trap 'rm -rf "$PPROF_TMPDIR"' EXIT
n=0 failed=0

# check NAME FILE TYPE FUNCTION...: go tool pprof -top FILE prints "Type: TYPE" and lists
# every FUNCTION.
check() {
	local name=$1 file=$dir/$2 type=$3; shift 3
	local out f missing=()
	n=$((n + 1))
	if ! out=$(go tool pprof -top -symbolize=none "$file" 2>&1); then
		echo "# $name: go tool pprof refused $file:"
		sed 's/^/#   /' <<<"$out" | tail -5
		echo "not ok $n $name"
		failed=$((failed + 1))
		return
	fi
	grep -qx "Type: $type" <<<"$out" || missing+=("Type: $type")
	for f in "$@"; do
		grep -qE "[[:space:]]$f\$" <<<"$out" || missing+=("$f")
	done
	if ((${#missing[@]})); then
		echo "# $name: go tool pprof -top $file does not list: ${missing[*]}"
		sed 's/^/#   /' <<<"$out" | head -20
		echo "not ok $n $name"
		failed=$((failed + 1))
	else
		echo "# $name: $(grep -c . <<<"$out") lines, type $type, lists $*"
		echo "ok $n $name"
	fi
}

echo "KTAP version 1"
echo "1..2"
# dd reading /dev/zero (drivers/char/mem.c).
check pprof_profile profile.pb.gz cpu vfs_read read_zero
# sleep(1) in clock_nanosleep() (kernel/time/hrtimer.c), cat reading a pipe (fs/pipe.c),
# both blocked in schedule().
check pprof_offcputime offcpu.pb.gz off-cpu do_nanosleep anon_pipe_read schedule
echo "# totals: pass:$((n - failed)) fail:$failed skip:0"
((failed == 0))
