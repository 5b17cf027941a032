#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# headers-package.sh KDIR OUTDIR
#
# Builds the headers package of the kernel built in KDIR the kernel's own way, as
# `make bindeb-pkg` builds linux-headers-<release> (scripts/package/builddeb:
# install_kernel_headers): scripts/package/install-extmod-build into
# /usr/src/linux-headers-<release>, and the /lib/modules/<release>/build link to it.  To
# that it adds the .config (as Debian's headers packages do) and what out-of-tree Rust
# modules with BTF need, with
# scripts/package/install-rust-extmod-build, the script a distribution would add to its
# packaging.  Prints the path of the .deb it wrote into OUTDIR.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

kdir=${1:?KDIR}
outdir=${2:?OUTDIR}
release=$(cat "$kdir/include/config/kernel.release")
src=$(readlink -f "$kdir/source")
[[ -d $src ]] || die "$kdir/source does not lead to the kernel source"
name=linux-headers-$release
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
pkg=$stage/pkg
dest=$pkg/usr/src/$name

# The compiler the tree was built with: install-extmod-build rebuilds the host programs
# when CC and HOSTCC differ.
if grep -q '^CONFIG_CC_IS_CLANG=y' "$kdir/.config"; then cc=clang; else cc=gcc; fi
(cd "$kdir" && srctree=$src SRCARCH=x86 CC=$cc HOSTCC=$cc MAKE=make \
	sh "$src/scripts/package/install-extmod-build" "$dest") ||
	die "install-extmod-build failed for $kdir"
sh "$RKF_ROOT/scripts/package/install-rust-extmod-build" "$kdir" "$dest" ||
	die "install-rust-extmod-build failed for $kdir"
# The kernel's .config, as Debian's linux-headers packages ship it: dkms reads it for
# BUILD_EXCLUSIVE_CONFIG and for the module signing hash (install-extmod-build has only
# include/config/auto.conf).
cp "$kdir/.config" "$dest/.config"
mkdir -p "$pkg/lib/modules/$release"
ln -s "/usr/src/$name" "$pkg/lib/modules/$release/build"

mkdir -p "$pkg/DEBIAN"
cat >"$pkg/DEBIAN/control" <<CONTROL
Package: $name
Version: $release
Architecture: amd64
Maintainer: rkf developers <rkf@localhost>
Section: kernel
Priority: optional
Description: Linux kernel headers for $release, with what Rust modules need
 The files scripts/package/install-extmod-build installs for building out-of-tree
 modules, plus the kernel crates' metadata, its proc macros and the kernel's BTF
 (scripts/package/install-rust-extmod-build).
CONTROL
mkdir -p "$outdir"
deb=$outdir/${name}_${release}_amd64.deb
dpkg-deb --root-owner-group -Zxz -z1 --build "$pkg" "$deb" >/dev/null ||
	die "dpkg-deb failed to build $deb"
log "headers package: $deb ($(du -h "$deb" | cut -f1))"
echo "$deb"
