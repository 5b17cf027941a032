#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# dkms-check.sh: package the rkf modules with Debian's real dkms, as a distribution would,
# for the cached distro kernel (Debian's config, signed modules):
#   1. make install into a staging root (the three modules, not rkf_testmod);
#   2. build the kernel's headers package (scripts/headers-package.sh: the kernel's own
#      install-extmod-build, plus what Rust modules need) and install it with dpkg, which
#      makes /lib/modules/<release>/build;
#   3. make install against that installed headers package (KDIR=/lib/modules/<release>/build),
#      as a user without dkms would;
#   4. dkms add, build and install against that headers package alone (no --kernelsourcedir),
#      with only the system's directories and the rustc toolchain's on PATH, signing
#      with the kernel's own module key (the role a distribution's MOK plays), given to
#      dkms through /etc/dkms/framework.conf.d;
#   5. boot the distro kernel, load the modules dkms installed, check that the kernel
#      verified their signature (no E taint; an unsigned build of the same module gets E),
#      and run a smoke subset of the kselftests against them;
#   6. check that dkms refuses, with its "BUILD_EXCLUSIVE" exit (77), a kernel tree whose
#      config lacks CONFIG_RUST;
#   7. remove the headers package with dpkg.
# Leaves nothing installed, pass or fail: the dkms package, the headers package and the
# framework.conf.d file are removed, and /lib/modules/<release>/build is restored to exactly
# what it was (a link to somewhere else, a directory, or nothing) on every way out.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

command -v dkms >/dev/null || die "dkms is not installed (make deps installs it)"
name=$(sed -n 's/^PACKAGE_NAME="\(.*\)"/\1/p' "$RKF_ROOT/dkms.conf")
version=$(sed -n 's/^PACKAGE_VERSION="\(.*\)"/\1/p' "$RKF_ROOT/dkms.conf")
kdir=$("$RKF_ROOT/scripts/kernel.sh" dir distro)
release=$(cat "$kdir/include/config/kernel.release")
headers=linux-headers-$release
src=/usr/src/$name-$version
signing_conf=/etc/dkms/framework.conf.d/rkf-dkms-check.conf

key=$kdir/certs/signing_key.pem
cert=$kdir/certs/signing_key.x509
[[ -s $key && -s $cert ]] || die "the distro kernel build has no module signing key ($key, $cert)"

# dpkg's state of a package: not-installed, or installed, half-configured, ...
pkg_state() { dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null || echo not-installed; }

# Refuse to touch what this check did not make: it installs and removes each of these
# itself, and would otherwise remove the user's.
[[ $(pkg_state "$headers") == not-installed ]] ||
	die "$headers is installed ($(pkg_state "$headers")): this check installs and removes it itself; remove it first"
[[ -z $(dkms status "$name/$version" 2>/dev/null) ]] ||
	die "dkms has $name/$version already: this check adds and removes it itself (dkms remove $name/$version --all)"
[[ ! -e $src ]] || die "$src exists: this check stages the source there and removes it"
[[ ! -e $signing_conf ]] || die "$signing_conf exists: this check writes and removes it"

# /lib/modules/<release> with its build link comes from the headers package.  Whatever was
# at .../build before (a link, a directory or file, or nothing) is moved aside first and put
# back at the end; /lib/modules/<release> itself is removed again if it was not there.
moddir=/lib/modules/$release
build_link=$moddir/build
made_moddir='' made_confdir='' saved='' saved_target='' tmp='' failed=''
backup=$moddir/.build.rkf-dkms-check.$$
save_build_link() {
	if [[ -L $build_link ]]; then
		saved_target=$(readlink "$build_link")
		rm -f "$build_link"
		saved="link"
	elif [[ -e $build_link ]]; then
		mv "$build_link" "$backup"
		saved=moved
	else
		saved=none
	fi
}
restore_build_link() {
	case $saved in
	link) mkdir -p "$moddir" && rm -f "$build_link" && ln -s "$saved_target" "$build_link" ;;
	moved) [[ -e $backup || -L $backup ]] && rm -rf "$build_link" && mv "$backup" "$build_link" ;;
	none) rm -f "$build_link" ;;
	esac
	saved=
}
# Every step runs, and a step that fails is named.
cleanup_step() {
	"$@" >/dev/null 2>&1 || {
		echo "[rkf] dkms-check cleanup: '$*' failed: remove it by hand" >&2
		failed=1
	}
}
cleanup() {
	local rc=$?
	if [[ -n $(dkms status "$name/$version" 2>/dev/null) ]]; then
		cleanup_step dkms remove "$name/$version" --all
	fi
	if [[ $(pkg_state "$headers") != not-installed ]]; then
		cleanup_step dpkg --purge "$headers"
	fi
	rm -rf "$src" "$signing_conf" ${tmp:+"$tmp"}
	[[ -n $made_confdir ]] && { rmdir "$(dirname "$signing_conf")" 2>/dev/null || true; }
	[[ -n $saved ]] && { restore_build_link || { echo "[rkf] dkms-check cleanup: could not restore $build_link" >&2; failed=1; }; }
	if [[ -n $made_moddir ]]; then
		rm -rf "$moddir"
	fi
	[[ -z $failed ]] || exit 1
	exit "$rc"
}
trap cleanup EXIT
# An interrupted check cleans up too: the EXIT trap runs when these exit.
trap 'exit 130' INT
trap 'exit 143' TERM
tmp=$(mktemp -d)

# The name make install gives a module: modules_install adds .xz (or .zst, .gz) for a
# kernel with CONFIG_MODULE_COMPRESS, as Debian's has.
ko=.ko
if grep -qx 'CONFIG_MODULE_COMPRESS_XZ=y' "$kdir/.config"; then ko=.ko.xz
elif grep -qx 'CONFIG_MODULE_COMPRESS_ZSTD=y' "$kdir/.config"; then ko=.ko.zst
elif grep -qx 'CONFIG_MODULE_COMPRESS_GZIP=y' "$kdir/.config"; then ko=.ko.gz
fi

# make_install TREE ROOT: make install against the kernel tree TREE into the staging
# root ROOT must install rkf_percpu, rkf_stack and rkf_multi, and not rkf_testmod.
make_install() {
	local tree=$1 root=$2 m dir
	make -s -C "$RKF_ROOT" install KDIR="$tree" INSTALL_MOD_PATH="$root" >/dev/null
	dir=$root/lib/modules/$release/updates
	for m in rkf_percpu rkf_stack rkf_multi; do
		[[ -f $dir/$m$ko ]] || die "make install KDIR=$tree did not install $m$ko in $dir"
	done
	[[ -z $(compgen -G "$dir/rkf_testmod.ko*") ]] ||
		die "make install KDIR=$tree installed the test-only rkf_testmod"
}

log "make install into a staging root"
make_install "$kdir" "$tmp/root"

log "the headers package of $release"
deb=$("$RKF_ROOT/scripts/headers-package.sh" "$kdir" "$tmp/deb" | tail -1)
if [[ ! -d $moddir ]]; then
	mkdir -p "$moddir"
	made_moddir=1
fi
save_build_link
dpkg -i "$deb" >/dev/null
[[ $(readlink "$build_link") == "/usr/src/$headers" ]] ||
	die "the headers package did not make $build_link a link to /usr/src/$headers"

# Without dkms, as a user builds against an installed headers package: make install
# with KDIR its build link.
log "make install against the installed headers package (KDIR=$build_link)"
make_install "$build_link" "$tmp/root-headers"

log "dkms: staging $name $version in $src"
mkdir -p "$src"
cp -a "$RKF_ROOT/dkms.conf" "$RKF_ROOT/Kbuild" "$RKF_ROOT/rust" "$RKF_ROOT/c-shim" "$src/"
# Only the kernel crate sources: no host build products.
rm -rf "$src/rust/core/target"

# dkms signs what it builds with mok_signing_key and mok_certificate (sign_file defaults
# to the headers package's scripts/sign-file).  Here the kernel's own build key: its
# certificate is in the kernel's builtin keyring, as a distribution's MOK would be enrolled.
if [[ ! -d $(dirname "$signing_conf") ]]; then
	mkdir -p "$(dirname "$signing_conf")"
	made_confdir=1
fi
printf 'mok_signing_key="%s"\nmok_certificate="%s"\n' "$key" "$cert" >"$signing_conf"

# dkms as a distribution runs it (sudo's secure_path, or its autoinstall at a kernel
# upgrade): with the system's directories on PATH and the kernel's rustc, which a
# distribution's rustc package puts there; not with this checkout's PATH (lib.sh adds
# LLVM's and virtme-ng's directories).  dkms hands its environment to make.
# The toolchain's own bin directory, not rustup's proxies (which would pick a toolchain by
# HOME's settings, not this checkout's).
sysroot=$(rustc --print sysroot) || die "rustc is not on PATH"
rustc_dir=$sysroot/bin
[[ -x $rustc_dir/rustc ]] || die "no rustc in $rustc_dir (rustc --print sysroot)"
system_dkms() { env -i HOME="$HOME" PATH="$rustc_dir:/usr/sbin:/usr/bin:/sbin:/bin" dkms "$@"; }

system_dkms add "$name/$version"
log "dkms: build and install for $release against /lib/modules/$release/build (PATH: $rustc_dir and the system's)"
system_dkms build "$name/$version" -k "$release"
system_dkms install "$name/$version" -k "$release" --force
installed=/lib/modules/$release/updates/dkms
# The key a module is signed with, by its certificate's serial number (the subject of a
# generated key is the same for every kernel build), as modinfo prints it: XX:XX:...
serial=$(openssl x509 -inform DER -in "$cert" -noout -serial | sed 's/^serial=//; s/../&:/g; s/:$//')
# dkms compresses as the kernel's installed modules are (their modules.dep): for this
# kernel, whose modules are built in, not at all; on a Debian install, .ko.xz.
dkms_ko() {
	local f
	for f in "$installed/$1.ko" "$installed/$1.ko.xz" "$installed/$1.ko.zst" "$installed/$1.ko.gz"; do
		[[ -f $f ]] && echo "$f" && return 0
	done
	return 1
}
for m in rkf_percpu rkf_stack rkf_multi; do
	f=$(dkms_ko "$m") || die "dkms did not install $m.ko in $installed"
	got=$(modinfo -F sig_key "$f")
	[[ ${got^^} == "${serial^^}" ]] ||
		die "dkms's $f is signed with key '${got:-none}', not with the kernel's ($serial)"
done
[[ -z $(compgen -G "$installed/rkf_testmod.ko*") ]] || die "dkms installed the test-only rkf_testmod"
dkms status "$name/$version"
log "dkms: the three modules are signed with the kernel's key (serial $serial)"

# The guest sees the host's /lib/modules through vng's own module overlay, so the
# installed files are handed over by a copy, checked identical.
mods=$RKF_ROOT/build/dkms-modules
rm -rf "$mods" && mkdir -p "$mods"
for m in rkf_percpu rkf_stack rkf_multi; do
	f=$(dkms_ko "$m")
	cp "$f" "$mods/"
	cmp "$f" "$mods/$(basename "$f")"
done
RKF_DKMS_MODDIR=$mods "$RKF_ROOT/scripts/vm.sh" distro --out "$RKF_ROOT/build/vm/dkms" -- "$RKF_ROOT/tests/guest-dkms.sh"

log "dkms: a kernel tree without CONFIG_RUST must be refused"
norust=$tmp/linux-norust
mkdir -p "$norust/include/config"
sed 's/^CONFIG_RUST=y/# CONFIG_RUST is not set/' "$kdir/.config" >"$norust/.config"
cp "$kdir/Makefile" "$norust/"
echo "${release%%-*}-rkf-norust" >"$norust/include/config/kernel.release"
set +e
out=$(system_dkms build "$name/$version" -k "${release%%-*}-rkf-norust" --kernelsourcedir "$norust" 2>&1)
rc=$?
set -e
echo "$out" | sed 's/^/  /'
((rc == 77)) || die "dkms build against a tree without CONFIG_RUST exited $rc, not 77 (BUILD_EXCLUSIVE)"
grep -q "BUILD_EXCLUSIVE" <<<"$out" || die "dkms did not say BUILD_EXCLUSIVE"

log "dkms: remove the package, then the headers package"
dkms remove "$name/$version" --all >/dev/null
for m in rkf_percpu rkf_stack rkf_multi; do
	! f=$(dkms_ko "$m") || die "dkms remove left $f"
done
dpkg --purge "$headers" >/dev/null
[[ ! -e /usr/src/$headers ]] || die "dpkg --purge $headers left /usr/src/$headers"
log "dkms-check: built against the headers package, signed, loaded without the unsigned taint and tested; a kernel without Rust refused (exit 77); all removed"
