#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# headers-minimal.sh DEB
#
# Shows that every file scripts/package/install-rust-extmod-build adds to a headers
# package is needed: extracts the headers package DEB (scripts/headers-package.sh), builds
# the kernel's minimal Rust module (samples/rust/rust_minimal.rs) against it with all
# files, then once without each of them, and prints what happened.  Fails if the module
# does not build with all of them, or builds (with BTF) without one.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

deb=${1:?DEB}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/root" "$work/mod"
dpkg-deb -x "$deb" "$work/root"
hdr=$(echo "$work"/root/usr/src/linux-headers-*)
[[ -d $hdr ]] || die "$deb has no /usr/src/linux-headers-*"
src=$("$RKF_ROOT/scripts/kernel.sh" src | tail -1)
cp "$src/samples/rust/rust_minimal.rs" "$work/mod/"
echo 'obj-m := rust_minimal.o' >"$work/mod/Kbuild"
if grep -q '^CONFIG_CC_IS_CLANG=y' "$hdr/include/config/auto.conf"; then llvm=LLVM=1; else llvm=; fi

# build: 0 built with BTF, 1 failed, 2 built without BTF.
build() {
	(cd "$work/mod" && find . -mindepth 1 ! -name rust_minimal.rs ! -name Kbuild -delete)
	make -C "$hdr" M="$work/mod" $llvm modules >"$work/log" 2>&1 || return 1
	[[ -f $work/mod/rust_minimal.ko ]] || return 1
	objdump -h "$work/mod/rust_minimal.ko" | grep -q ' \.BTF ' || return 2
}
rc=0
build || rc=$?
((rc == 0)) || die "rust_minimal does not build against the whole package (log: $(tail -5 "$work/log"))"
echo "with every file: builds, with BTF"
fail=0
for f in $(cd "$hdr" && ls rust/*.rmeta rust/*.so) vmlinux; do
	mv "$hdr/$f" "$hdr/$f.off"
	rc=0
	build || rc=$?
	mv "$hdr/$f.off" "$hdr/$f"
	case $rc in
	0) echo "without $f: builds with BTF: NOT NEEDED"; fail=1 ;;
	1) echo "without $f: fails: $(grep -m1 -E '^error' "$work/log" || tail -1 "$work/log")" ;;
	2) echo "without $f: builds, but without BTF (its kfuncs could not register)" ;;
	esac
done
exit "$fail"
