#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Style checks: rustfmt with the kernel's settings for the module crates, cargo fmt for the
# userspace crates, checkpatch for the C shim (--strict) and the BPF header.
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
"${cp[@]}" --strict c-shim/*.c c-shim/*.h c-shim/*.S || die "c-shim/: checkpatch --strict complains"
# BPF programs declare kfuncs and ksyms as externs by design.
"${cp[@]}" --ignore AVOID_EXTERNS include/rkf.bpf.h tests/progs/*.bpf.c user/bpf/*.bpf.c || die "BPF C: checkpatch complains"
log "lint: rustfmt, cargo fmt and checkpatch are clean"
