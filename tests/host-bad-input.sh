#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Host-side checks of rkf's answers to bad input: a wrong KDIR names what is missing, a KDIR
# built with another toolchain names the one to install, and a VM run that cannot finish
# fails (it never passes silently).  Prints KTAP.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
n=0 failed=0

# expect_fail NAME PATTERN CMD...: CMD must fail and print PATTERN.
expect_fail() {
	local name=$1 pattern=$2; shift 2
	local out rc
	n=$((n + 1))
	out=$("$@" 2>&1); rc=$?
	if ((rc != 0)) && grep -qE -- "$pattern" <<<"$out"; then
		echo "# $name: $(grep -E -- "$pattern" <<<"$out" | head -1 | sed 's/\x1b\[[0-9;]*m//g')"
		echo "ok $n $name"
	else
		echo "# $name: expected failure with /$pattern/, got exit $rc:"
		sed 's/^/#   /' <<<"$out" | tail -5
		echo "not ok $n $name"
		failed=$((failed + 1))
	fi
}

# The plan: one test per expect_fail below; the run fails if it ran another number.
planned=40
echo "KTAP version 1"
echo "1..$planned"
kdir=$("$root/scripts/kernel.sh" dir test)
expect_fail kdir_missing "does not exist" make -s -C "$root" modules KDIR="$tmp/nope"
expect_fail kdir_empty "KDIR is empty" "$root/scripts/check-kdir.sh" ""
mkdir -p "$tmp/notkernel"
expect_fail kdir_not_a_tree "has no Makefile" make -s -C "$root" modules KDIR="$tmp/notkernel"
# A copy of the real tree's top files, without what a module build needs.
mkdir -p "$tmp/k/include/config"
cp "$kdir/Makefile" "$kdir/.config" "$tmp/k/"
cp "$kdir/include/config/kernel.release" "$tmp/k/include/config/"
expect_fail kdir_no_vmlinux "has no vmlinux: module BTF" make -s -C "$root" modules KDIR="$tmp/k"
sed -i 's/^CONFIG_RUST=y/# CONFIG_RUST is not set/' "$tmp/k/.config"
expect_fail kdir_no_rust "lacks kernel options rkf needs: CONFIG_RUST=y" make -s -C "$root" modules KDIR="$tmp/k"
echo "6.12.0" >"$tmp/k/include/config/kernel.release"
expect_fail kdir_wrong_version "rkf supports 7.3 only" make -s -C "$root" modules KDIR="$tmp/k"
# The host's toolchain must be the tree's: a copy of the tree's top files whose .config
# names another rustc, bindgen or compiler (sed script $1).
other_toolchain() {
	rm -rf "$tmp/t"
	mkdir -p "$tmp/t/include/config"
	cp "$kdir/Makefile" "$kdir/.config" "$tmp/t/"
	cp "$kdir/include/config/kernel.release" "$tmp/t/include/config/"
	sed -i "$1" "$tmp/t/.config"
}
other_toolchain 's/^CONFIG_RUSTC_VERSION_TEXT=.*/CONFIG_RUSTC_VERSION_TEXT="rustc 1.85.1 (4eb161250 2025-03-15) (built from a source tarball)"/'
expect_fail kdir_other_rustc "KDIR was built with rustc 1\.85\.1 \(4eb161250 2025-03-15\) \(built from a source tarball\); this host has rustc [0-9.]+ .*: install that rustc \(rustup toolchain install 1\.85\.1\) and put it first on PATH" \
	make -s -C "$root" modules KDIR="$tmp/t"
other_toolchain 's/^CONFIG_BINDGEN_VERSION_TEXT=.*/CONFIG_BINDGEN_VERSION_TEXT="bindgen 0.71.1"/'
expect_fail kdir_other_bindgen "KDIR was built with bindgen 0\.71\.1; this host has bindgen [0-9.]+: install that bindgen \(cargo install --locked bindgen-cli --version 0\.71\.1\)" \
	make -s -C "$root" modules KDIR="$tmp/t"
# A build that comes to Kbuild with another rustc (dkms runs the kernel's make directly).
mkdir -p "$tmp/rustc-1.85" "$tmp/mo"
printf '#!/bin/sh\necho "rustc 1.85.1 (4eb161250 2025-03-15)"\n' >"$tmp/rustc-1.85/rustc"
chmod +x "$tmp/rustc-1.85/rustc"
expect_fail kbuild_other_rustc "Kbuild:[0-9]+: \*\*\* the kernel was built with rustc [0-9.]+ .*; this build's rustc is rustc 1\.85\.1 \(4eb161250 2025-03-15\): put the kernel's rustc first on PATH" \
	env PATH="$tmp/rustc-1.85:$PATH" make -s -C "$kdir" M="$root" MO="$tmp/mo" LLVM=1 RKF_TESTMOD=n modules
# A GCC tree of a gcc major version two above this host's.
gcc_major=$(gcc -dumpversion | cut -d. -f1)
other_gcc=$((gcc_major + 2))
other_toolchain "s/^CONFIG_CC_IS_CLANG=y/CONFIG_CC_IS_GCC=y/; s/^CONFIG_GCC_VERSION=.*/CONFIG_GCC_VERSION=${other_gcc}0200/; s/^CONFIG_CC_VERSION_TEXT=.*/CONFIG_CC_VERSION_TEXT=\"x86_64-linux-gnu-gcc-$other_gcc (Debian $other_gcc.2.0-19) $other_gcc.2.0\"/"
expect_fail kdir_other_gcc "KDIR was built with gcc $other_gcc \(x86_64-linux-gnu-gcc-$other_gcc .*\); this host's gcc is gcc ${gcc_major}[0-9.]*: install gcc-$other_gcc \(apt-get install gcc-$other_gcc\) and build with make modules CC=gcc-$other_gcc" \
	make -s -C "$root" modules KDIR="$tmp/t"
other_toolchain 's/^CONFIG_CLANG_VERSION=.*/CONFIG_CLANG_VERSION=170006/; s/^CONFIG_CC_VERSION_TEXT=.*/CONFIG_CC_VERSION_TEXT="Debian clang version 17.0.6 (5)"/'
expect_fail kdir_other_clang "KDIR was built with clang 17 \(Debian clang version 17\.0\.6 \(5\)\); this host's clang is [0-9.]+: install clang-17" \
	make -s -C "$root" modules KDIR="$tmp/t"
# The kselftest runner refuses a storm of no cycles and a test name that names nothing,
# before it runs anything.
selftests=$root/target/release/rkf-selftests
expect_fail selftests_zero_storm_cycles "invalid value '0' for '--storm-cycles <N>': 0 is not in 100\.\.=1000000" \
	"$selftests" --storm-cycles 0
expect_fail selftests_bad_storm_cycles "invalid value 'x' for '--storm-cycles <N>'" "$selftests" --storm-cycles x
expect_fail selftests_big_generated_storm "invalid value '1000001' for '--generated-storm-cycles <N>': 1000001 is not in 100\.\.=1000000" \
	"$selftests" --generated-storm-cycles 1000001
expect_fail selftests_unknown_test "-t: no test is named, or has a name starting with, rkf_nope" \
	"$selftests" -t rkf_nope
# rkf profile refuses options that cannot sample, before it needs any module.
rkf=$root/target/release/rkf
expect_fail profile_zero_frequency "frequency must be 1 to 10000 Hz, not 0" "$rkf" profile -F 0
expect_fail profile_zero_duration "duration must be more than 0" "$rkf" profile -d 0
expect_fail profile_nan_duration "duration must be more than 0" "$rkf" profile -d nan
expect_fail profile_no_such_pid "no process 4000000000" "$rkf" profile -p 4000000000
# A thread's id names its process: the programs follow a process by its tgid.
python3 -c 'import threading, time, sys
def run():
    print(threading.get_native_id(), flush=True)
    time.sleep(60)
threading.Thread(target=run, daemon=True).start()
time.sleep(60)' >"$tmp/tid" &
threaded=$!
for _ in $(seq 100); do [[ -s $tmp/tid ]] && break; sleep 0.1; done
expect_fail profile_thread_id "^Error: $(cat "$tmp/tid") is a thread of process $threaded: give the process id" \
	"$rkf" profile -p "$(cat "$tmp/tid")"
kill "$threaded"
expect_fail profile_kernel_and_user_only "cannot be used with" "$rkf" profile -K -U
# rkf offcputime likewise.
expect_fail offcputime_zero_duration "duration must be more than 0" "$rkf" offcputime -d 0
expect_fail offcputime_nan_duration "duration must be more than 0" "$rkf" offcputime -d nan
expect_fail offcputime_duration_above_a_day "at most a day" "$rkf" offcputime -d 86401
expect_fail offcputime_no_such_pid "no process 4000000000" "$rkf" offcputime -p 4000000000
expect_fail offcputime_zero_min "the minimum interval must be at least 1 us" "$rkf" offcputime -m 0
expect_fail offcputime_min_above_max "the minimum interval \(2000 us\) is longer than the maximum \(1000 us\)" \
	"$rkf" offcputime -m 2000 -M 1000
expect_fail offcputime_max_overflows "the maximum interval \(18446744073709552 us\) does not fit in nanoseconds" \
	"$rkf" offcputime -M 18446744073709552
expect_fail offcputime_kernel_and_user_only "cannot be used with" "$rkf" offcputime -K -U
# rkf funclatency likewise; a glob is checked against the names of /proc/kallsyms before
# anything needs the module, BTF or tracefs.
expect_fail funclatency_zero_duration "duration must be more than 0" "$rkf" funclatency do_nanosleep -d 0
expect_fail funclatency_no_such_pid "no process 4000000000" "$rkf" funclatency do_nanosleep -p 4000000000
expect_fail funclatency_two_units "the argument '--milliseconds' cannot be used with '--microseconds'" \
	"$rkf" funclatency do_nanosleep -m -u
expect_fail funclatency_no_glob "required arguments were not provided" "$rkf" funclatency
expect_fail funclatency_glob_matches_nothing "no function matches rkf_no_such_function_\* \(in /proc/kallsyms\)" \
	"$rkf" funclatency 'rkf_no_such_function_*' -d 1
# rkf funccount likewise.
expect_fail funccount_zero_duration "duration must be more than 0" "$rkf" funccount vfs_read -d 0
expect_fail funccount_interval_below_a_millisecond "the interval must be at least 0.001 s and at most a day, not 0.0005" \
	"$rkf" funccount vfs_read -i 0.0005
expect_fail funccount_no_such_pid "no process 4000000000" "$rkf" funccount vfs_read -p 4000000000
expect_fail funccount_glob_matches_nothing "no function matches rkf_no_such_function_\* \(in /proc/kallsyms\)" \
	"$rkf" funccount 'rkf_no_such_function_*' -d 1
# A VM that cannot finish in time fails the run, with a message.
expect_fail vm_cannot_finish "did not finish within 3 s" env RKF_VM_TIMEOUT=3 RKF_KVM=0 "$root/scripts/vm.sh" test --out "$root/build/vm/host-bad-input" -- true
expect_fail vm_bad_tcg_thread "RKF_TCG_THREAD is single or multi, not 'one'" env RKF_TCG_THREAD=one RKF_KVM=0 "$root/scripts/vm.sh" test --out "$root/build/vm/host-bad-input" -- true

((n == planned)) || echo "# planned $planned tests, ran $n: update the plan"
echo "# totals: pass:$((n - failed)) fail:$failed skip:0"
echo "host-bad-input: $((n - failed)) passed, $failed failed"
((failed == 0 && n == planned))
