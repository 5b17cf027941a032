#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# dkms-check.sh: package the rkf modules with Debian's real dkms, as a distribution would,
# against the cached test kernel:
#   1. dkms add, build and install (--kernelsourcedir: the cached build tree);
#   2. boot the test kernel and load the modules dkms installed, not the source tree's;
#   3. run a smoke subset of the kselftests against them;
#   4. check that dkms refuses, with its "BUILD_EXCLUSIVE" exit (77), a kernel tree whose
#      config lacks CONFIG_RUST.
# Leaves nothing installed: the package is removed at the end, pass or fail, and
# /lib/modules/<release>/build is restored to exactly what it was (a link to somewhere else,
# a directory, or nothing) on every way out.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

command -v dkms >/dev/null || die "dkms is not installed (make deps installs it)"
name=$(sed -n 's/^PACKAGE_NAME="\(.*\)"/\1/p' "$RKF_ROOT/dkms.conf")
version=$(sed -n 's/^PACKAGE_VERSION="\(.*\)"/\1/p' "$RKF_ROOT/dkms.conf")
kdir=$("$RKF_ROOT/scripts/kernel.sh" dir test)
release=$(cat "$kdir/include/config/kernel.release")
src=/usr/src/$name-$version
tmp=$(mktemp -d)

# /lib/modules/<release> with its build link, as the kernel's packages would make it:
# dkms installs there.  Made here only if missing, and then removed again.  Whatever was
# at .../build before (a link, a directory or file, or nothing) is put back at the end.
moddir=/lib/modules/$release
build_link=$moddir/build
made_moddir='' saved='' saved_target=''
backup=$moddir/.build.rkf-dkms-check.$$
save_build_link() {
	if [[ -L $build_link ]]; then
		saved="link"
		saved_target=$(readlink "$build_link")
		rm -f "$build_link"
	elif [[ -e $build_link ]]; then
		saved=moved
		mv "$build_link" "$backup"
	else
		saved=none
	fi
}
restore_build_link() {
	case $saved in
	link) rm -f "$build_link" && ln -s "$saved_target" "$build_link" ;;
	moved) rm -f "$build_link" && mv "$backup" "$build_link" ;;
	none) rm -f "$build_link" ;;
	esac
	saved=
}
cleanup() {
	dkms remove "$name/$version" --all >/dev/null 2>&1 || true
	rm -rf "$src" "$tmp"
	restore_build_link
	if [[ -n $made_moddir ]]; then
		rm -rf "$moddir"
		made_moddir=
	fi
}
trap cleanup EXIT
# An interrupted check cleans up too: the EXIT trap runs when these exit.
trap 'exit 130' INT
trap 'exit 143' TERM
cleanup

log "make install into a staging root"
make -s -C "$RKF_ROOT" install KDIR="$kdir" INSTALL_MOD_PATH="$tmp/root" >/dev/null
for m in rkf_percpu rkf_stack rkf_multi; do
	[[ -f $tmp/root/lib/modules/$release/updates/$m.ko ]] ||
		die "make install did not install $m.ko in $tmp/root/lib/modules/$release/updates"
done
[[ ! -e $tmp/root/lib/modules/$release/updates/rkf_testmod.ko ]] ||
	die "make install installed the test-only rkf_testmod"

log "dkms: staging $name $version in $src"
mkdir -p "$src"
cp -a "$RKF_ROOT/dkms.conf" "$RKF_ROOT/Kbuild" "$RKF_ROOT/rust" "$RKF_ROOT/c-shim" "$src/"
# Only the kernel crate sources: no host build products.
rm -rf "$src/rust/core/target"

if [[ ! -d $moddir ]]; then
	mkdir -p "$moddir"
	made_moddir=1
fi
save_build_link
ln -s "$kdir" "$build_link"

dkms add "$name/$version"
log "dkms: build and install for $release (kernel tree $kdir)"
dkms build "$name/$version" -k "$release" --kernelsourcedir "$kdir"
dkms install "$name/$version" -k "$release" --kernelsourcedir "$kdir" --force
installed=/lib/modules/$release/updates/dkms
for m in rkf_percpu rkf_stack rkf_multi; do
	[[ -f $installed/$m.ko ]] || die "dkms did not install $m.ko in $installed"
done
[[ ! -e $installed/rkf_testmod.ko ]] || die "dkms installed the test-only rkf_testmod"
dkms status "$name/$version"

# The guest sees the host's /lib/modules through vng's own module overlay, so the
# installed files are handed over by a copy, checked identical.
mods=$RKF_ROOT/build/dkms-modules
rm -rf "$mods" && mkdir -p "$mods"
cp "$installed"/rkf_*.ko "$mods/"
for m in "$mods"/*.ko; do
	cmp "$m" "$installed/$(basename "$m")"
done
RKF_DKMS_MODDIR=$mods "$RKF_ROOT/scripts/vm.sh" test --out "$RKF_ROOT/build/vm/dkms" -- tests/guest-dkms.sh

log "dkms: a kernel tree without CONFIG_RUST must be refused"
norust=$tmp/linux-norust
mkdir -p "$norust/include/config"
sed 's/^CONFIG_RUST=y/# CONFIG_RUST is not set/' "$kdir/.config" >"$norust/.config"
cp "$kdir/Makefile" "$norust/"
echo "${release%%-*}-rkf-norust" >"$norust/include/config/kernel.release"
set +e
out=$(dkms build "$name/$version" -k "${release%%-*}-rkf-norust" --kernelsourcedir "$norust" 2>&1)
rc=$?
set -e
echo "$out" | sed 's/^/  /'
((rc == 77)) || die "dkms build against a tree without CONFIG_RUST exited $rc, not 77 (BUILD_EXCLUSIVE)"
grep -q "BUILD_EXCLUSIVE" <<<"$out" || die "dkms did not say BUILD_EXCLUSIVE"
log "dkms-check: installed, loaded and tested the dkms modules; a kernel without Rust refused (exit 77)"
