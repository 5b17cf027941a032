#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# check-kdir.sh KDIR: fail, naming what is missing, unless KDIR is a built Linux 7.3 tree,
# or an installed headers package of one with what Rust modules need
# (scripts/package/install-rust-extmod-build), that rkf modules can be built against with
# this host's toolchain: the kernel's compiler
# family (GCC, or clang for a CONFIG_CC_IS_CLANG tree) at its major version, and exactly
# its rustc and bindgen (Rust crate metadata of another rustc is refused).  For a GCC tree
# the compiler is $CC if set (make modules CC=gcc-14), else gcc.
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

# kconfig NAME: the value of CONFIG_NAME in the tree's .config, without quotes.
kconfig() {
	sed -n "s/^CONFIG_$1=\"\{0,1\}\([^\"]*\)\"\{0,1\}\$/\1/p" "$kdir/.config" | head -1
}
# kversion NAME: CONFIG_NAME as a number (GCC_VERSION, CLANG_VERSION: 140200 is 14.2.0).
kversion() {
	local v
	v=$(kconfig "$1")
	[[ $v =~ ^[1-9][0-9]*$ ]] || die "KDIR=$kdir/.config has no version in CONFIG_$1 (it says '${v}')"
	echo "$v"
}

# The Rust toolchain: exactly the kernel's rustc and bindgen.
for opt in RUSTC_VERSION_TEXT BINDGEN_VERSION_TEXT; do
	[[ -n $(kconfig $opt) ]] || die "KDIR=$kdir/.config has no CONFIG_$opt: it was not configured with Rust available"
done
want=$(kconfig RUSTC_VERSION_TEXT)
have=$(rustc --version 2>/dev/null) || die "rustc is not on PATH: KDIR was built with $want; install that rustc"
if [[ $have != "$want" ]]; then
	v=$(awk '{ print $2 }' <<<"$want")
	die "KDIR was built with $want; this host has $have: install that rustc (rustup toolchain install $v) and put it first on PATH, or build against a kernel built with this one"
fi
want=$(kconfig BINDGEN_VERSION_TEXT)
have=$(bindgen --version 2>/dev/null | head -1) || have=
if [[ $have != "$want" ]]; then
	v=$(awk '{ print $2 }' <<<"$want")
	die "KDIR was built with $want; this host has ${have:-no bindgen on PATH}: install that bindgen (cargo install --locked bindgen-cli --version $v) and put it first on PATH, or build against a kernel built with this one"
fi

# The C compiler: the kernel's family, at its major version.
if grep -qx 'CONFIG_CC_IS_CLANG=y' "$kdir/.config"; then
	want=$(kversion CLANG_VERSION) || exit 1
	have=$(clang -dumpversion 2>/dev/null) || die "clang is not on PATH: KDIR was built with $(kconfig CC_VERSION_TEXT) (LLVM=1); install clang-$((want / 10000))"
	if ((${have%%.*} != want / 10000)); then
		die "KDIR was built with clang $((want / 10000)) ($(kconfig CC_VERSION_TEXT)); this host's clang is $have: install clang-$((want / 10000)) and put its bin directory (/usr/lib/llvm-$((want / 10000))/bin) first on PATH, or build against a kernel built with this one"
	fi
elif grep -qx 'CONFIG_CC_IS_GCC=y' "$kdir/.config"; then
	want=$(kversion GCC_VERSION) || exit 1
	cc=${CC:-gcc}
	have=$("$cc" -dumpfullversion 2>/dev/null) || die "$cc is not on PATH: KDIR was built with $(kconfig CC_VERSION_TEXT); install gcc-$((want / 10000))"
	if ((${have%%.*} != want / 10000)); then
		die "KDIR was built with gcc $((want / 10000)) ($(kconfig CC_VERSION_TEXT)); this host's $cc is gcc $have: install gcc-$((want / 10000)) (apt-get install gcc-$((want / 10000))) and build with make modules CC=gcc-$((want / 10000)), or build against a kernel built with this gcc"
	fi
else
	die "KDIR=$kdir/.config names neither GCC nor clang (CONFIG_CC_IS_GCC, CONFIG_CC_IS_CLANG)"
fi

need=(
	"vmlinux|module BTF is generated against it; without it the kfuncs cannot register"
	"Module.symvers|the kernel's modules were not built (make modules)"
	"rust/libkernel.rmeta|the kernel crate was not built (CONFIG_RUST and 'make rustavailable'), or its headers package lacks what Rust modules need (scripts/package/install-rust-extmod-build)"
	"rust/libmacros.so|the kernel's proc macros were not built (CONFIG_RUST), or its headers package lacks what Rust modules need (scripts/package/install-rust-extmod-build)"
	"tools/bpf/resolve_btfids/resolve_btfids|it patches the kfunc BTF ids into the module"
)
for item in "${need[@]}"; do
	f=${item%%|*}
	[[ -e $kdir/$f ]] || die "KDIR=$kdir has no $f: ${item#*|}"
done
command -v pahole >/dev/null || die "pahole is not on PATH: module BTF cannot be generated (apt-get install dwarves)"
