#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# vmlinux-h.sh KDIR OUT: write vmlinux.h for the BPF programs from KDIR/vmlinux's BTF.
# OUT is only replaced when its content changes, so that cargo does not rebuild for nothing.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

kdir=$1 out=$2
[[ -f $kdir/vmlinux ]] || die "$kdir/vmlinux does not exist"
mkdir -p "$(dirname "$out")"
bpftool btf dump file "$kdir/vmlinux" format c >"$out.tmp"
if cmp -s "$out.tmp" "$out"; then rm "$out.tmp"; else mv "$out.tmp" "$out"; fi
