#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# check-kdir.sh KDIR: fail, naming what is missing, unless KDIR is a built Linux 7.3 tree
# that rkf modules can be built against.
set -uo pipefail
source "$(dirname "$0")/lib.sh"

kdir=${1:-}
[[ -n $kdir ]] || die "KDIR is empty: pass KDIR=/path/to/a/built/linux-7.3/tree, or leave it unset to use the cached test kernel"
[[ -d $kdir ]] || die "KDIR=$kdir does not exist"
[[ -f $kdir/Makefile ]] || die "KDIR=$kdir is not a kernel tree: it has no Makefile"
[[ -f $kdir/.config ]] || die "KDIR=$kdir has no .config: configure and build the kernel first"
rel=$(cat "$kdir/include/config/kernel.release" 2>/dev/null) ||
	die "KDIR=$kdir has no include/config/kernel.release: the kernel was not built"
[[ $rel == 7.3.* || $rel == 7.3 || $rel == 7.3-* ]] || die "KDIR=$kdir is Linux $rel; rkf supports 7.3 only"

missing=()
for opt in CONFIG_RUST CONFIG_MODULES CONFIG_MODULE_UNLOAD CONFIG_BPF_SYSCALL CONFIG_BPF_JIT \
	   CONFIG_DEBUG_INFO_BTF CONFIG_DEBUG_INFO_BTF_MODULES CONFIG_KALLSYMS_ALL CONFIG_BPF_EVENTS; do
	grep -qx "$opt=y" "$kdir/.config" || missing+=("$opt=y")
done
((${#missing[@]} == 0)) || die "KDIR=$kdir lacks kernel options rkf needs: ${missing[*]} (see scripts/kernel/rkf.config)"

need=(
	"vmlinux|module BTF is generated against it; without it the kfuncs cannot register"
	"Module.symvers|the kernel's modules were not built (make modules)"
	"rust/kernel.o|Rust support was not built (CONFIG_RUST and 'make rustavailable')"
	"tools/bpf/resolve_btfids/resolve_btfids|it patches the kfunc BTF ids into the module"
)
for item in "${need[@]}"; do
	f=${item%%|*}
	[[ -e $kdir/$f ]] || die "KDIR=$kdir has no $f: ${item#*|}"
done
command -v pahole >/dev/null || die "pahole is not on PATH: module BTF cannot be generated (apt-get install dwarves)"
