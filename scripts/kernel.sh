#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Fetch, patch, configure and build the rkf kernels.
#
#   kernel.sh fetch            download and unpack Debian's linux-source-7.3 (trixie-backports)
#   kernel.sh build FLAVOUR    build the "test" or "distro" kernel into the cache (no-op when cached)
#   kernel.sh config FLAVOUR   only configure it (and, for distro, check and diff the config)
#   kernel.sh dir FLAVOUR      print the build directory (KDIR) of a built flavour
#   kernel.sh src              print the patched source tree (fetching it if needed)
#   kernel.sh version          print the exact source package version in use
#   kernel.sh config-version   print the linux-config-7.3 version the distro flavour uses
#
# Flavours:
#   test    tinyconfig + scripts/kernel/rkf.config + test.config (KASAN, lockdep, ...),
#           built with clang (LLVM=1).  The whole test suite runs on it.
#   distro  Debian's own amd64 config (config.amd64_none_amd64 of linux-config-7.3, the same
#           version as the source) with every =m turned off and scripts/kernel/distro.config
#           on top, built with GCC as Debian builds it.  `make run` and `make bench` use it.
#
# The cache lives in $RKF_CACHE (default ~/.cache/rkf).  A build directory is keyed by a
# hash of everything that determines the kernel: the source (and config) package versions,
# the patch series, the config fragments, the flavour's config recipe (test_config or
# distro_config) and how make runs in the tree (kmake, build_timestamp), as text, and the
# versions of the toolchain.  An unchanged kernel is never rebuilt; a changed one always
# is, into a fresh directory.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

KCONF=$RKF_ROOT/scripts/kernel
JOBS=${RKF_JOBS:-3}

# lock NAME: take $RKF_CACHE/NAME.lock, waiting while another kernel.sh holds it (`make -j`
# starts several at once: they share the source tree, and one kernel build at a time is
# all that 2 cores take).  Held until unlock NAME or the end of the (sub)shell.
declare -A lock_fd=()
lock() {
	local fd
	mkdir -p "$RKF_CACHE"
	exec {fd}>>"$RKF_CACHE/$1.lock"
	if ! flock -n "$fd"; then
		log "waiting for another kernel.sh to release $RKF_CACHE/$1.lock"
		flock "$fd"
	fi
	lock_fd[$1]=$fd
}
unlock() {
	flock -u "${lock_fd[$1]}"
	unset "lock_fd[$1]"
}

# The version of package $1 that trixie-backports serves (empty if none).
suite_version() {
	apt-cache madison "$1" 2>/dev/null |
		awk -F'|' -v s="$RKF_KSRC_SUITE" '$3 ~ s"/" { gsub(/ /, "", $2); print $2; exit }'
}

# The version trixie-backports serves.  Any 7.3 point release is accepted; the exact one
# goes into the cache key and into the test output.
src_version() {
	local v
	if [[ -n ${RKF_KSRC_VERSION:-} ]]; then
		echo "$RKF_KSRC_VERSION"; return
	fi
	v=$(suite_version "$RKF_KSRC_PKG")
	[[ -n $v ]] || die "no $RKF_KSRC_PKG is served by $RKF_KSRC_SUITE.
Run scripts/install-deps.sh (it adds the suite) and check that the registry is reachable;
rkf needs a Linux 7.3 source and takes it from $RKF_KSRC_SUITE only."
	[[ $v == 7.3.* ]] || die "$RKF_KSRC_SUITE serves $RKF_KSRC_PKG $v, which is not a 7.3 release"
	echo "$v"
}

# The version of Debian's config package, which must be the source's: the distro flavour
# is Debian's kernel, and Debian's config of another version does not describe this source.
config_version() {
	local v s
	s=$(src_version)
	if [[ -n ${RKF_KCONFIG_VERSION:-} ]]; then
		v=$RKF_KCONFIG_VERSION
	else
		v=$(suite_version "$RKF_KCONFIG_PKG")
		[[ -n $v ]] || die "no $RKF_KCONFIG_PKG is served by $RKF_KSRC_SUITE.
The distro flavour is built from Debian's own config, which that package carries; run
scripts/install-deps.sh (it adds the suite) and check that the registry is reachable."
	fi
	[[ $v == "$s" ]] || die "$RKF_KSRC_SUITE serves $RKF_KSRC_PKG $s but $RKF_KCONFIG_PKG $v.
The distro flavour needs Debian's config of exactly the source's version; the two packages
come from one Debian upload, so the mirror is probably half-way through an update: retry
after its next sync (or set RKF_KSRC_VERSION and RKF_KCONFIG_VERSION to one version that
both packages are still served at)."
	echo "$v"
}

src_dir() { echo "$RKF_CACHE/src/linux-$(src_version)"; }

cmd_fetch() {
	local ver dir deb tmp
	ver=$(src_version)
	dir=$RKF_CACHE/src/linux-$ver
	[[ -f $dir/.rkf-unpacked ]] && return 0
	lock src
	[[ -f $dir/.rkf-unpacked ]] && { unlock src; return 0; }
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
	unlock src
}

# Debian's amd64 config for the distro flavour, unpacked once into the cache; prints its path.
config_fetch() {
	local ver dir deb tmp kver
	ver=$(config_version)
	dir=$RKF_CACHE/src/$RKF_KCONFIG_PKG-$ver
	# Called in $(...): the lock ends with the subshell.
	[[ -s $dir/$RKF_KCONFIG_FILE ]] || lock src
	if [[ ! -s $dir/$RKF_KCONFIG_FILE ]]; then
		mkdir -p "$RKF_CACHE/src"
		tmp=$(mktemp -d "$RKF_CACHE/src/dl.XXXXXX")
		log "downloading $RKF_KCONFIG_PKG $ver from $RKF_KSRC_SUITE (about 1 MB)"
		( cd "$tmp" && apt-get download -q "$RKF_KCONFIG_PKG=$ver" >/dev/null 2>&1 ) ||
			{ rm -rf "$tmp"; die "apt-get download $RKF_KCONFIG_PKG=$ver failed"; }
		dpkg-deb -x "$tmp"/*.deb "$tmp/x"
		[[ -f $tmp/x/usr/src/$RKF_KCONFIG_PKG/$RKF_KCONFIG_FILE.xz ]] ||
			{ rm -rf "$tmp"; die "$RKF_KCONFIG_PKG $ver has no /usr/src/$RKF_KCONFIG_PKG/$RKF_KCONFIG_FILE.xz"; }
		mkdir -p "$dir"
		xz -dc "$tmp/x/usr/src/$RKF_KCONFIG_PKG/$RKF_KCONFIG_FILE.xz" >"$dir/$RKF_KCONFIG_FILE.tmp"
		mv "$dir/$RKF_KCONFIG_FILE.tmp" "$dir/$RKF_KCONFIG_FILE"
		rm -rf "$tmp"
	fi
	# The config must be for this very kernel version ("Linux/x86 7.3.4 Kernel Configuration").
	kver=$(awk '/^VERSION =/{v=$3} /^PATCHLEVEL =/{p=$3} /^SUBLEVEL =/{s=$3} END{print v"."p"."s}' "$(src_dir)/Makefile")
	grep -qx "# Linux/x86 $kver Kernel Configuration" "$dir/$RKF_KCONFIG_FILE" ||
		die "$dir/$RKF_KCONFIG_FILE is not a config of Linux $kver: $(sed -n 3p "$dir/$RKF_KCONFIG_FILE")"
	echo "$dir/$RKF_KCONFIG_FILE"
}

# The export patch series, in order (none is fine).
patches() {
	local p
	for p in "$KCONF"/patches/*.patch; do
		if [[ -e $p ]]; then echo "$p"; fi
	done
}

check_flavour() {
	case $1 in
	test|distro) ;;
	*) die "unknown kernel flavour '$1' (use test or distro)" ;;
	esac
}

fragments() {
	local flavour=$1
	check_flavour "$flavour"
	if [[ $flavour == distro ]]; then
		echo "$KCONF/distro.config"
	else
		echo "$KCONF/rkf.config" "$KCONF/$flavour.config"
	fi
}

# The compiler family of a flavour's kernel: clang (LLVM=1) or GCC, as Debian builds it.
make_flags() {
	[[ $1 == distro ]] || echo LLVM=1
}

# The date of the source package's newest changelog entry (from which Debian derives its
# SOURCE_DATE_EPOCH), read once from the package kept in the cache.
build_timestamp() {
	local dir=$RKF_CACHE/src ver deb f tmp stamp
	ver=$(src_version)
	f=$dir/linux-$ver.date
	if [[ ! -s $f ]]; then
		deb=$dir/${RKF_KSRC_PKG}_$ver.deb
		[[ -s $deb ]] || die "$deb is missing (its changelog dates the build):
remove $dir/linux-$ver and run scripts/kernel.sh fetch"
		tmp=$(mktemp "$dir/changelog.XXXXXX")
		dpkg-deb --fsys-tarfile "$deb" | tar -xO --wildcards '*/changelog.Debian.gz' >"$tmp" ||
			{ rm -f "$tmp"; die "no changelog.Debian.gz in $deb"; }
		# The first trailer line: " -- Maintainer <address>  Sun, 15 Nov 2026 23:30:52 +0100".
		stamp=$(zcat "$tmp" | sed -n '/^ -- .*>  /{s///p;q}') || true
		rm -f "$tmp"
		if [[ -z $stamp ]] || ! date -d "$stamp" >/dev/null 2>&1; then
			die "no date in the changelog of $deb"
		fi
		printf '%s\n' "$stamp" >"$f.tmp"
		mv "$f.tmp" "$f"
	fi
	cat "$f"
}

# kmake FLAVOUR SRC OUT ARGS...: make in the kernel tree with the flavour's compiler.
# KBUILD_BUILD_TIMESTAMP is the source's date, as in Debian's own kernel build: it names
# the build in `uname -v`, and with it kbuild runs pahole 1.24 without -j
# (scripts/Makefile.btf), whose threads make it encode a slightly different set of
# functions in each run (two runs on one vmlinux.o: 55,083 and 55,077), so that a glob
# would match other functions after a rebuild of the same inputs.
kmake() {
	local flavour=$1 src=$2 out=$3 stamp
	shift 3
	stamp=$(build_timestamp) || return
	# shellcheck disable=SC2046
	KBUILD_BUILD_TIMESTAMP=$stamp make -s -C "$src" O="$out" $(make_flags "$flavour") "$@"
}

toolchain_id() {
	clang --version | head -1
	ld.lld --version | head -1
	rustc --version
	bindgen --version 2>/dev/null || echo "bindgen missing"
	pahole --version
}

# The distro flavour's toolchain: GCC and binutils instead of clang and lld.
distro_toolchain_id() {
	gcc --version | head -1
	ld --version | head -1
	rustc --version
	bindgen --version 2>/dev/null || echo "bindgen missing"
	pahole --version
}

# What the distro flavour's config comes from, as the guest header line and the build
# directory record it.
config_id() {
	echo "$RKF_KCONFIG_PKG $(config_version) ($RKF_KCONFIG_FILE)"
}

build_key() {
	local flavour=$1
	check_flavour "$flavour"
	if [[ $flavour == distro ]]; then
		{
			echo "source $RKF_KSRC_PKG $(src_version)"
			echo "config $(config_id)"
			echo "flavour $flavour"
			for p in $(patches); do sha256sum <"$p"; done
			for f in $(fragments "$flavour"); do sha256sum <"$f"; done
			# How Debian's config is turned into ours, and how make runs in the tree, are
			# part of the recipe too.
			declare -f distro_config kmake build_timestamp | sha256sum
			distro_toolchain_id
		} | sha256sum | cut -c1-16
		return
	fi
	{
		echo "source $RKF_KSRC_PKG $(src_version)"
		echo "flavour $flavour"
		for p in $(patches); do sha256sum <"$p"; done
		for f in $(fragments "$flavour"); do sha256sum <"$f"; done
		# As for distro: how the fragments become the config, and how make runs.
		declare -f test_config kmake build_timestamp | sha256sum
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
	# Called in $(...): the lock ends with the subshell.
	lock src
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
	local f line opt bad=()
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

# Debian's =y options that harden the kernel or mitigate cpu bugs (by name).  The distro
# flavour must keep every one of them =y: a kernel without them is not Debian's kernel.
SECURITY_RE='^CONFIG_(MITIGATION_|CPU_MITIGATIONS$|SPECULATION_MITIGATIONS$|PAGE_TABLE_ISOLATION$|[A-Z0-9_]*IBT($|_)|[A-Z0-9_]*RETHUNK|[A-Z0-9_]*RETPOLINE|([A-Z0-9_]*_)?SLS($|_)|MODULE_SIG|SECURITY|LSM_|[A-Z0-9_]*LOCKDOWN|LOCK_DOWN_|RANDOMIZE_|RANDSTRUCT|GCC_PLUGIN|STACKPROTECTOR|FORTIFY_SOURCE|HARDENED_USERCOPY|INIT_ON_|INIT_STACK_|ZERO_CALL_USED_REGS|CFI($|_)|LIST_HARDENED|BUG_ON_DATA_CORRUPTION|SLAB_FREELIST_|RANDOM_KMALLOC|SHUFFLE_PAGE_ALLOCATOR|STRICT_|IO_STRICT_DEVMEM|VMAP_STACK|SCHED_STACK_END_CHECK|DEBUG_WX|X86_UMIP|X86_USER_SHADOW_STACK|X86_SMAP|X86_SMEP|LEGACY_VSYSCALL_NONE|PROC_MEM_|PAGE_POISONING|KSTACK_ERASE|UBSAN|KFENCE$|SYSTEM_[A-Z_]*KEYRING|SECONDARY_TRUSTED_KEYRING|INTEGRITY|IMA|EVM|BPF_UNPRIV_DEFAULT_OFF|SECCOMP|STATIC_USERMODEHELPER|HARDEN)'

# check_security DEBIAN FINAL: fail, listing them, if a security or mitigation option that
# is =y in Debian's config is not =y in ours.
check_security() {
	local debian=$1 final=$2 lost n
	lost=$(awk -v re="$SECURITY_RE" '
		FNR == NR { if (match($0, /^CONFIG_[A-Za-z0-9_]+=y$/)) { o = substr($0, 1, length($0) - 2); if (o ~ re) want[o] = 1 }; next }
		/^CONFIG_[A-Za-z0-9_]+=/ { split($0, kv, "="); got[kv[1]] = substr($0, length(kv[1]) + 2) }
		/^# CONFIG_[A-Za-z0-9_]+ is not set$/ { got[$2] = "n" }
		END { for (o in want) if (!(o in got)) printf "  %s=y  (now: absent)\n", o; else if (got[o] != "y") printf "  %s=y  (now: %s)\n", o, got[o] }
	' "$debian" "$final" | sort)
	n=$(grep -E '^CONFIG_[A-Za-z0-9_]+=y$' "$debian" | sed 's/=y$//' | grep -cE "$SECURITY_RE")
	if [[ -n $lost ]]; then
		printf '%s\n' "$lost" >&2
		die "$(wc -l <<<"$lost") of Debian's $n security and mitigation options (=y) are not =y any more (see above).
The distro flavour must keep them all: find what turned them off (a dependency that was
=m, a compiler feature; see $(dirname "$final")/distro-config-diff.txt) and fix that."
	fi
	log "all $n security and mitigation options of Debian's config are still =y"
}

# config_diff DIR SRC: the complete list of options whose value differs from Debian's, into
# DIR/distro-config-diff.txt (scripts/diffconfig of the kernel tree: "-NAME val" only in
# Debian's, "+NAME val" only in ours, " NAME old -> new" changed), and a summary that gives
# each difference its cause, into DIR/distro-config-summary.txt.  The cause is the step of
# distro_config after which the option has its final value: olddefconfig of Debian's config
# as it is (our toolchain, and the options Debian's file leaves out, which take their
# Kconfig defaults), distro.config merged on top, or every =m turned off (the final config).
config_diff() {
	local out=$1 src=$2 steps=$1/distro-config-steps
	"$src/scripts/diffconfig" "$out/debian.config" "$out/.config" >"$out/distro-config-diff.txt" ||
		die "scripts/diffconfig failed"
	python3 - "$out/debian.config" "$steps/toolchain.config" "$steps/fragment.config" "$out/.config" \
		>"$out/distro-config-summary.txt" <<'PY' || die "the config summary failed"
import re, sys

def read(path):
    d = {}
    for line in open(path):
        m = re.match(r"CONFIG_(\w+)=(.*)$", line) or re.match(r"# CONFIG_(\w+) is not set$", line)
        if m:
            d[m.group(1)] = m.group(2) if m.lastindex == 2 else "n"
    return d

debian, tool, frag, final = (read(p) for p in sys.argv[1:])

def show(o, a, b):
    if a is None:
        return f"+{o} {b}"
    if b is None:
        return f"-{o} {a}"
    return f" {o} {a} -> {b}"

by_tool, by_frag, other = [], [], []
moff = sub_gone = n_gone = total = 0
for o in sorted(set(debian) | set(final) | set(tool) | set(frag)):
    d, x = debian.get(o), final.get(o)
    if d == x:
        continue
    total += 1
    line = show(o, d, x)
    # The step after which the option has its final value (a later step may undo an
    # earlier one: KVM_X86 follows KVM=y, then goes with KVM_INTEL and KVM_AMD).
    if tool.get(o) == x:
        by_tool.append(line)
    elif frag.get(o) == x:
        by_frag.append(line)
    elif d == "m" and x in ("n", None):
        moff += 1
    elif d == "n" and x is None:
        n_gone += 1
    elif x is None:
        sub_gone += 1
    else:
        other.append(line)

print(f"{total} options differ from Debian's config (all of them: distro-config-diff.txt).")
print(f"{len(by_tool)} in Debian's config through olddefconfig alone (our toolchain; options its file leaves out):")
print("".join(f"  {l}\n" for l in by_tool), end="")
print(f"{len(by_frag)} because of scripts/kernel/distro.config (its lines and what they select):")
print("".join(f"  {l}\n" for l in by_frag), end="")
print(f"{moff + sub_gone + n_gone + len(other)} because every =m is turned off:")
print(f"  {moff} modules (=m) turned off (not set, or gone with a menu that is off)")
print(f"  {sub_gone} options of those modules (=y and values) gone with them")
print(f"  {n_gone} options that were not set gone with their menus (no change in effect)")
print(f"  {len(other)} other changes that follow from it:")
print("".join(f"    {l}\n" for l in other), end="")
PY
	sed 's/^/[rkf]   /' "$out/distro-config-summary.txt" >&2
	log "the differences: $out/distro-config-summary.txt, $out/distro-config-diff.txt"
}

# distro_config DIR SRC: Debian's config, every =m off, distro.config on top; checked.
# Two intermediate configs, for config_diff: Debian's through olddefconfig as it is, then
# with the fragment merged.
distro_config() {
	local out=$1 src=$2 dcfg steps=$1/distro-config-steps
	dcfg=$(config_fetch)
	rm -rf "$steps"
	mkdir -p "$steps"
	cp "$dcfg" "$out/debian.config"
	cp "$dcfg" "$steps/toolchain.config"
	KCONFIG_CONFIG=$steps/toolchain.config kmake distro "$src" "$out" olddefconfig >/dev/null
	cp "$steps/toolchain.config" "$steps/fragment.config"
	KCONFIG_CONFIG=$steps/fragment.config "$src/scripts/kconfig/merge_config.sh" -m -O "$out" \
		"$steps/fragment.config" "$KCONF/distro.config" >/dev/null
	KCONFIG_CONFIG=$steps/fragment.config kmake distro "$src" "$out" olddefconfig >/dev/null
	# No initramfs and no in-tree module is loaded in the VM: modules would only build
	# drivers for hardware it does not have (and take hours on 2 cores).
	sed -E 's/^(CONFIG_[A-Za-z0-9_]+)=m$/# \1 is not set/' "$dcfg" >"$out/.config"
	(cd "$out" && "$src/scripts/kconfig/merge_config.sh" -m -O "$out" "$out/.config" "$KCONF/distro.config" >/dev/null)
	kmake distro "$src" "$out" olddefconfig >/dev/null
	check_config "$out" "$KCONF/distro.config"
	check_security "$out/debian.config" "$out/.config"
	config_diff "$out" "$src"
}

# The test flavour's config: tinyconfig with the fragments merged.
test_config() {
	local out=$1 src=$2
	kmake test "$src" "$out" tinyconfig >/dev/null
	# shellcheck disable=SC2046
	(cd "$out" && "$src/scripts/kconfig/merge_config.sh" -m -O "$out" "$out/.config" $(fragments test) >/dev/null)
	kmake test "$src" "$out" olddefconfig >/dev/null
	# shellcheck disable=SC2046
	check_config "$out" $(fragments test)
}

# configure FLAVOUR DIR SRC
configure() {
	local flavour=$1 out=$2 src=$3
	kmake "$flavour" "$src" "$out" rustavailable >/dev/null ||
		die "the Rust toolchain is not usable for this kernel: run 'make -C $src $(make_flags "$flavour") rustavailable'"
	if [[ $flavour == distro ]]; then
		distro_config "$out" "$src"
		return
	fi
	test_config "$out" "$src"
}

# What a build directory records about itself (.rkf-built, and vm.sh's header line).
build_record() {
	local flavour=$1
	echo "source $RKF_KSRC_PKG $(src_version)"
	[[ $flavour == distro ]] && echo "config $(config_id)"
	echo "flavour $flavour"
	if [[ $flavour == distro ]]; then distro_toolchain_id; else toolchain_id; fi
}

cmd_config() {
	local flavour=$1 out
	check_flavour "$flavour"
	cmd_fetch
	out=$(build_dir "$flavour")
	lock build
	mkdir -p "$out"
	log "configuring the $flavour kernel in $out"
	configure "$flavour" "$out" "$(patched_src)"
	echo "$out"
}

cmd_build() {
	local flavour=$1 out src minutes
	check_flavour "$flavour"
	cmd_fetch
	out=$(build_dir "$flavour")
	if [[ -f $out/.rkf-built ]]; then
		log "$flavour kernel is cached: $out"
		return 0
	fi
	lock build
	if [[ -f $out/.rkf-built ]]; then
		log "$flavour kernel is cached: $out (built while this waited)"
		return 0
	fi
	src=$(patched_src)
	# Seed a new build directory from the last complete build of this flavour: Kbuild
	# then rebuilds only what the changed inputs affect.
	if [[ ! -d $out && -f $RKF_CACHE/$flavour/.rkf-built ]]; then
		log "seeding $out from $(readlink -f "$RKF_CACHE/$flavour")"
		# A copy that an earlier run left half done is made again, not copied into.
		rm -rf "$out.seed"
		cp -a "$(readlink -f "$RKF_CACHE/$flavour")" "$out.seed"
		rm -f "$out.seed/.rkf-built"
		mv "$out.seed" "$out"
	fi
	mkdir -p "$out"
	log "configuring the $flavour kernel in $out"
	configure "$flavour" "$out" "$src"
	# From scratch with -j3 on 2 idle cores (measured): the test kernel (KASAN, lockdep,
	# BTF) 549 s; the distro kernel (Debian's config: about 2,900 objects with debug info)
	# 986 s.  Other work on the cores slows it a lot (the distro kernel took 1,936 to
	# 3,604 s with VM runs beside it).
	minutes=10
	[[ $flavour == distro ]] && minutes=17
	log "building the $flavour kernel with $JOBS jobs (from scratch about $minutes min on 2 idle cores; seeded builds only what changed)"
	with_progress "kernel build ($flavour)" "$out/build.log" kmake "$flavour" "$src" "$out" -j"$JOBS" all ||
		{ tail -40 "$out/build.log" >&2; die "kernel build failed, log: $out/build.log"; }
	[[ -f $out/vmlinux && -f $out/arch/x86/boot/bzImage ]] || die "kernel build produced no vmlinux/bzImage"
	if grep -qx 'CONFIG_MODULE_SIG=y' "$out/.config" &&
	   grep -qx 'CONFIG_MODULE_SIG_KEY="certs/signing_key.pem"' "$out/.config"; then
		# Generated by the build (certs/Makefile) and built into the kernel's keyring:
		# modules signed with it load untainted.  It stays here, with the build.
		[[ -s $out/certs/signing_key.pem && -s $out/certs/signing_key.x509 ]] ||
			die "CONFIG_MODULE_SIG is on but the build left no certs/signing_key.pem and .x509 in $out"
		log "module signing key: $out/certs/signing_key.pem (certificate certs/signing_key.x509)"
	fi
	build_record "$flavour" >"$out/.rkf-built"
	ln -sfn "$out" "$RKF_CACHE/$flavour"
	log "$flavour kernel ready: $out"
	prune_builds "$flavour"
}

# Keep the two newest complete builds of a flavour (the current one and the one before,
# for switching back and forth between branches); drop older and abandoned ones.
prune_builds() {
	local flavour=$1 keep=2 d
	local -a built=()
	# shellcheck disable=SC2012,SC2011 # build directory names are ours: no odd characters
	mapfile -t built < <(ls -1dt "$RKF_CACHE/build/$flavour"-*/.rkf-built 2>/dev/null | xargs -r -n1 dirname)
	for d in "${built[@]:$keep}"; do
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
	check_flavour "$1"
	out=$(build_dir "$1")
	[[ -f $out/.rkf-built ]] || die "the $1 kernel is not built; run: scripts/kernel.sh build $1"
	echo "$out"
}

case ${1:-} in
fetch) cmd_fetch ;;
build) cmd_build "${2:?flavour}" ;;
config) cmd_config "${2:?flavour}" ;;
dir) cmd_dir "${2:?flavour}" ;;
src) cmd_fetch; patched_src ;;
version) src_version ;;
config-version) config_version ;;
*) die "usage: $0 {fetch|build FLAVOUR|config FLAVOUR|dir FLAVOUR|src|version|config-version}" ;;
esac
