#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Style checks: rustfmt with the kernel's settings for the module crates, cargo fmt for the
# userspace crates, checkpatch for the C shim (--strict) and the BPF header, kernel-doc,
# and shellcheck on the scripts.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

ksrc=$("$RKF_ROOT/scripts/kernel.sh" src)
cd "$RKF_ROOT"
# The generated declarations of c-shim/rkf.h must be those the header gives now.
gen=$(mktemp -d)
trap 'rm -rf "$gen"' EXIT
"$RKF_ROOT/scripts/gen-bindings.sh" "$("$RKF_ROOT/scripts/kernel.sh" dir test)" "$gen"
diff -ru rust/bindings "$gen" >&2 ||
	die "rust/bindings/ is stale: c-shim/rkf.h changed (run: scripts/gen-bindings.sh \$(scripts/kernel.sh dir test) rust/bindings)"
rustfmt --check --config-path "$ksrc/.rustfmt.toml" --edition 2021 rust/*.rs ||
	die "rust/: not rustfmt-clean (run: rustfmt --config-path $ksrc/.rustfmt.toml --edition 2021 rust/*.rs)"
cargo fmt --all --check || die "userspace crates: not rustfmt-clean (run: cargo fmt --all)"
cp=(perl "$ksrc/scripts/checkpatch.pl" --no-tree --quiet -f)
# RCU tasks trace is for BPF and RCU code only, which checkpatch knows by their paths in the
# tree (kernel/bpf/, ...): rkf_multi's program run and frees are BPF trampoline code, what
# kernel/bpf/trampoline.c does for sleepable programs, out of the tree.
bpf_code=(c-shim/rkf_multi_run.c c-shim/rkf_multi_deferred.c)
other=()
for f in c-shim/*.c c-shim/*.h c-shim/*.S; do
	[[ " ${bpf_code[*]} " == *" $f "* ]] || other+=("$f")
done
"${cp[@]}" --strict "${other[@]}" || die "c-shim/: checkpatch --strict complains"
"${cp[@]}" --strict --ignore RCU_TASKS_TRACE "${bpf_code[@]}" || die "c-shim/: checkpatch --strict complains"
# kernel-doc of the shim's surface: every /** block well-formed, with every parameter and
# its return described.
"$ksrc/scripts/kernel-doc" -none -Wall -Werror c-shim/*.c c-shim/*.h ||
	die "c-shim/: kernel-doc complains"
# BPF programs declare kfuncs and ksyms as externs by design.
"${cp[@]}" --ignore AVOID_EXTERNS include/rkf.bpf.h tests/progs/*.bpf.c user/bpf/*.bpf.c || die "BPF C: checkpatch complains"
# The scripts (.shellcheckrc: lib.sh is found beside the script that sources it).
mapfile -t scripts < <(git ls-files '*.sh')
shellcheck -x "${scripts[@]}" || die "scripts: shellcheck complains"
log "lint: rustfmt, cargo fmt, checkpatch, kernel-doc and shellcheck are clean"
