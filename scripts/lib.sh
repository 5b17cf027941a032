# SPDX-License-Identifier: GPL-2.0
# Common helpers for the rkf scripts.  Sourced, never executed.
# shellcheck shell=bash disable=SC2034 # the variables are for the scripts that source this

RKF_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
RKF_CACHE=${RKF_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rkf}
RKF_LLVM_BIN=/usr/lib/llvm-19/bin
# virtme-ng lives in a venv of its own, so that nothing depends on the shell's Python setup.
RKF_VENV=$RKF_CACHE/venv
export PATH="$RKF_LLVM_BIN:$HOME/.cargo/bin:$RKF_VENV/bin:$PATH"

# The Debian package that carries the kernel source, and the only suite it may come from.
RKF_KSRC_PKG=linux-source-7.3
RKF_KSRC_SUITE=trixie-backports
# The distro flavour's config: Debian's own amd64 one, from the package of the same version.
RKF_KCONFIG_PKG=linux-config-7.3
RKF_KCONFIG_FILE=config.amd64_none_amd64

log() { printf '\033[1m[rkf]\033[0m %s\n' "$*" >&2; }
die() { printf '\033[1;31m[rkf] error:\033[0m %s\n' "$*" >&2; exit 1; }

# Run a long command, printing the elapsed time every 30 s so that CI logs show progress.
# with_progress WHAT LOG CMD...: the command's own output goes to LOG ("-" for none).
with_progress() {
	local what=$1 logf=$2; shift 2
	local start=$SECONDS next=30 rc=0 pid
	if [[ $logf == - ]]; then "$@" & else "$@" >"$logf" 2>&1 & fi
	pid=$!
	while kill -0 "$pid" 2>/dev/null; do
		sleep 2
		if (( SECONDS - start >= next )) && kill -0 "$pid" 2>/dev/null; then
			log "$what: $((SECONDS - start)) s elapsed"
			next=$((next + 30))
		fi
	done
	wait "$pid" || rc=$?
	log "$what: done in $((SECONDS - start)) s (exit $rc)"
	return $rc
}
