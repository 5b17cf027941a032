#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Fetch, patch, configure and build the rkf kernels.
#
#   kernel.sh fetch            download and unpack Debian's linux-source-7.3 (trixie-backports)
#   kernel.sh build FLAVOUR    build the "test" or "bench" kernel into the cache (no-op when cached)
#   kernel.sh dir FLAVOUR      print the build directory (KDIR) of a built flavour
#   kernel.sh src              print the patched source tree (fetching it if needed)
#   kernel.sh version          print the exact source package version in use
#
# The cache lives in $RKF_CACHE (default ~/.cache/rkf).  A build directory is keyed by a
# hash of everything that determines the kernel: the source package version, the patch
# series, the config fragments and the versions of the toolchain.  An unchanged kernel is
# never rebuilt; a changed one always is, into a fresh directory.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

KCONF=$RKF_ROOT/scripts/kernel
JOBS=${RKF_JOBS:-3}

# The version trixie-backports serves.  Any 7.3 point release is accepted; the exact one
# goes into the cache key and into the test output.
src_version() {
	local v
	if [[ -n ${RKF_KSRC_VERSION:-} ]]; then
		echo "$RKF_KSRC_VERSION"; return
	fi
	v=$(apt-cache madison "$RKF_KSRC_PKG" 2>/dev/null |
	    awk -F'|' -v s="$RKF_KSRC_SUITE" '$3 ~ s"/" { gsub(/ /, "", $2); print $2; exit }')
	[[ -n $v ]] || die "no $RKF_KSRC_PKG is served by $RKF_KSRC_SUITE.
Run scripts/install-deps.sh (it adds the suite) and check that the registry is reachable;
rkf needs a Linux 7.3 source and takes it from $RKF_KSRC_SUITE only."
	[[ $v == 7.3.* ]] || die "$RKF_KSRC_SUITE serves $RKF_KSRC_PKG $v, which is not a 7.3 release"
	echo "$v"
}

src_dir() { echo "$RKF_CACHE/src/linux-$(src_version)"; }

cmd_fetch() {
	local ver dir deb tmp
	ver=$(src_version)
	dir=$RKF_CACHE/src/linux-$ver
	[[ -f $dir/.rkf-unpacked ]] && return 0
	mkdir -p "$RKF_CACHE/src"
	deb=$RKF_CACHE/src/${RKF_KSRC_PKG}_${ver}.deb
	if [[ ! -s $deb ]]; then
		tmp=$(mktemp -d "$RKF_CACHE/src/dl.XXXXXX")
		log "downloading $RKF_KSRC_PKG $ver from $RKF_KSRC_SUITE (about 170 MB)"
		( cd "$tmp" && with_progress "download" - apt-get download -q "$RKF_KSRC_PKG=$ver" ) ||
			die "apt-get download $RKF_KSRC_PKG=$ver failed"
		mv "$tmp"/*.deb "$deb"
		rmdir "$tmp"
	fi
	log "unpacking $deb"
	rm -rf "$dir" "$dir.tmp"
	mkdir -p "$dir.tmp"
	dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$dir.tmp" --wildcards '*/linux-source-7.3.tar.xz'
	with_progress "untar" - tar -xJf "$dir.tmp"/usr/src/linux-source-7.3.tar.xz -C "$dir.tmp"
	mv "$dir.tmp"/linux-source-7.3 "$dir"
	rm -rf "$dir.tmp"
	grep -q '^PATCHLEVEL = 3$' "$dir/Makefile" || die "$deb does not hold a 7.3 tree"
	touch "$dir/.rkf-unpacked"
}

# The export patch series, in order (none is fine).
patches() {
	local p
	for p in "$KCONF"/patches/*.patch; do
		if [[ -e $p ]]; then echo "$p"; fi
	done
}

fragments() {
	local flavour=$1
	case $flavour in
	test|bench) ;;
	*) die "unknown kernel flavour '$flavour' (use test or bench)" ;;
	esac
	echo "$KCONF/rkf.config" "$KCONF/$flavour.config"
}

toolchain_id() {
	clang --version | head -1
	ld.lld --version | head -1
	rustc --version
	bindgen --version 2>/dev/null || echo "bindgen missing"
	pahole --version
}

build_key() {
	local flavour=$1
	{
		echo "source $RKF_KSRC_PKG $(src_version)"
		echo "flavour $flavour"
		for p in $(patches); do sha256sum <"$p"; done
		for f in $(fragments "$flavour"); do sha256sum <"$f"; done
		toolchain_id
	} | sha256sum | cut -c1-16
}

build_dir() { echo "$RKF_CACHE/build/$1-$(src_version)-$(build_key "$1")"; }

# The export series may only add EXPORT_SYMBOL_GPL lines: in the diff part of a patch
# (after its first "--- a/" line), every added line is an export and nothing is removed.
check_export_only() {
	local bad
	bad=$(awk '/^--- a\//{d=1} d && /^(\+\+\+|---) /{next}
		   d && /^-/{print; next}
		   d && /^\+/ && !/^\+EXPORT_SYMBOL_GPL\([A-Za-z0-9_]+\);$/{print}' "$1")
	[[ -z $bad ]] || die "$(basename "$1") changes more than EXPORT_SYMBOL_GPL lines:
$bad"
}

# The patched tree that builds use.  It is one tree, kept at one path, so that a build
# directory seeded from an earlier build (see cmd_build) stays valid: only the files whose
# content changes get a new mtime and are rebuilt.  rsync runs without -t on purpose, so
# that a file restored to its pristine content is newer than its old object.
patched_src() {
	local src dst sum
	src=$(src_dir)
	dst=$src-rkf
	sum=$(patches | xargs -r cat | sha256sum | cut -c1-16)
	if [[ ! -f $dst/.rkf-patched ]] || [[ $(cat "$dst/.rkf-patched") != "$sum" ]]; then
		log "syncing the source to $dst"
		mkdir -p "$dst"
		rm -f "$dst/.rkf-patched"
		rsync -rlD --checksum --delete --exclude=/.rkf-patched "$src/" "$dst/"
		for p in $(patches); do
			check_export_only "$p"
			log "applying $(basename "$p")"
			patch -d "$dst" -p1 --quiet --forward <"$p" ||
				die "patch $(basename "$p") does not apply to $(src_version)"
		done
		echo "$sum" >"$dst/.rkf-patched"
	fi
	echo "$dst"
}

# Fail, listing them, when options of the fragments did not survive olddefconfig.
check_config() {
	local out=$1; shift
	local f line opt val bad=()
	for f in "$@"; do
		while IFS= read -r line; do
			if [[ $line =~ ^(CONFIG_[A-Za-z0-9_]+)=(.*)$ ]]; then
				grep -qxF "$line" "$out/.config" || bad+=("$line  (got: $(grep -E "^(# )?${BASH_REMATCH[1]}[= ]" "$out/.config" || echo absent))")
			elif [[ $line =~ ^#\ (CONFIG_[A-Za-z0-9_]+)\ is\ not\ set$ ]]; then
				opt=${BASH_REMATCH[1]}
				! grep -qE "^$opt=" "$out/.config" || bad+=("$line  (got: $(grep -E "^$opt=" "$out/.config"))")
			fi
		done <"$f"
	done
	if ((${#bad[@]})); then
		printf '  %s\n' "${bad[@]}" >&2
		die "${#bad[@]} option(s) of the config fragment did not survive olddefconfig (see above).
Usually a dependency is missing: pahole for BTF, rustc/bindgen/libclang for RUST."
	fi
}

cmd_build() {
	local flavour=$1 out src
	cmd_fetch
	out=$(build_dir "$flavour")
	if [[ -f $out/.rkf-built ]]; then
		log "$flavour kernel is cached: $out"
		return 0
	fi
	src=$(patched_src)
	# Seed a new build directory from the last complete build of this flavour: Kbuild
	# then rebuilds only what the changed inputs affect.
	if [[ ! -d $out && -f $RKF_CACHE/$flavour/.rkf-built ]]; then
		log "seeding $out from $(readlink -f "$RKF_CACHE/$flavour")"
		cp -a "$(readlink -f "$RKF_CACHE/$flavour")" "$out.seed"
		rm -f "$out.seed/.rkf-built"
		mv "$out.seed" "$out"
	fi
	mkdir -p "$out"
	log "configuring the $flavour kernel in $out"
	local mk=(make -s -C "$src" O="$out" LLVM=1)
	"${mk[@]}" rustavailable >/dev/null || die "the Rust toolchain is not usable for this kernel: run 'make -C $src LLVM=1 rustavailable'"
	"${mk[@]}" tinyconfig >/dev/null
	# shellcheck disable=SC2046
	(cd "$out" && "$src/scripts/kconfig/merge_config.sh" -m -O "$out" "$out/.config" $(fragments "$flavour") >/dev/null)
	"${mk[@]}" olddefconfig >/dev/null
	# shellcheck disable=SC2046
	check_config "$out" $(fragments "$flavour")
	log "building the $flavour kernel with $JOBS jobs (about 9 min on 2 cores)"
	with_progress "kernel build ($flavour)" "$out/build.log" "${mk[@]}" -j"$JOBS" all ||
		{ tail -40 "$out/build.log" >&2; die "kernel build failed, log: $out/build.log"; }
	[[ -f $out/vmlinux && -f $out/arch/x86/boot/bzImage ]] || die "kernel build produced no vmlinux/bzImage"
	{ echo "source $RKF_KSRC_PKG $(src_version)"; echo "flavour $flavour"; toolchain_id; } >"$out/.rkf-built"
	ln -sfn "$out" "$RKF_CACHE/$flavour"
	log "$flavour kernel ready: $out"
	prune_builds "$flavour"
}

# Keep the two newest complete builds of a flavour (the current one and the one before,
# for switching back and forth between branches); drop older and abandoned ones.
prune_builds() {
	local flavour=$1 keep=2 d
	local -a done=()
	mapfile -t done < <(ls -1dt "$RKF_CACHE/build/$flavour"-*/.rkf-built 2>/dev/null | xargs -r -n1 dirname)
	for d in "${done[@]:$keep}"; do
		log "pruning old build $d"
		rm -rf "$d"
	done
	for d in "$RKF_CACHE/build/$flavour"-*; do
		[[ -d $d && ! -f $d/.rkf-built ]] || continue
		# Abandoned: incomplete and not touched for a day.
		[[ -n $(find "$d" -maxdepth 0 -mmin +1440) ]] && { log "pruning abandoned build $d"; rm -rf "$d"; }
	done
	return 0
}

cmd_dir() {
	local out
	out=$(build_dir "$1")
	[[ -f $out/.rkf-built ]] || die "the $1 kernel is not built; run: scripts/kernel.sh build $1"
	echo "$out"
}

case ${1:-} in
fetch) cmd_fetch ;;
build) cmd_build "${2:?flavour}" ;;
dir) cmd_dir "${2:?flavour}" ;;
src) cmd_fetch; patched_src ;;
version) src_version ;;
*) die "usage: $0 {fetch|build FLAVOUR|dir FLAVOUR|src|version}" ;;
esac
