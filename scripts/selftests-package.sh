#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# selftests-package.sh KDIR FOREIGN_KDIR
#
# Installs the rkf kselftests the way `make -C tools/testing/selftests install` installs
# the kernel's: one directory that runs wherever the rkf modules are loaded, on the kernel
# of KDIR, and a tarball of it:
#
#   build/selftests/rkf-selftests-VERSION-KRELEASE/
#     run_kselftest.sh     the entry point (tests/package/run_kselftest.sh)
#     rkf-selftests        the KTAP runner; its BPF programs are built in (skeletons)
#     rkf                  the CLI
#     kselftest-list.txt   the tests, as rkf-selftests --list prints them
#     bpf/*.bpf.o          the BPF objects the runner and the CLI embed, for bpftool
#     include/rkf.bpf.h    the header BPF programs that use the rkf kfuncs include
#     modules/             the modules built for KDIR, rkf_testmod and a copy of
#                          rkf_percpu without BTF (for the tests that reload them)
#     foreign/             the modules built for FOREIGN_KDIR, another kernel (for the test
#                          that the kernel refuses them)
#   build/selftests/current-KRELEASE  a link to it (the guest scripts find it by uname -r)
#   build/rkf-selftests-VERSION-KRELEASE.tar.gz
set -euo pipefail
source "$(dirname "$0")/lib.sh"

kdir=${1:?KDIR}
foreign_kdir=${2:?FOREIGN_KDIR}
release=$(cat "$kdir/include/config/kernel.release")
[[ $release != "$(cat "$foreign_kdir/include/config/kernel.release")" ]] ||
	die "KDIR and FOREIGN_KDIR are both $release: the foreign modules must be for another kernel"
version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$RKF_ROOT/Cargo.toml" | head -1)
name=rkf-selftests-$version-$release
moddir=$RKF_ROOT/build/$(basename "$kdir")
foreign_moddir=$RKF_ROOT/build/$(basename "$foreign_kdir")
pkg=$RKF_ROOT/build/selftests/$name

for m in rkf_percpu rkf_stack rkf_multi rkf_testmod; do
	[[ -f $moddir/$m.ko ]] || die "$moddir/$m.ko is missing: run make modules KDIR=$kdir"
	[[ -f $foreign_moddir/$m.ko ]] || die "$foreign_moddir/$m.ko is missing: run make modules KDIR=$foreign_kdir"
done

# Where cargo put the BPF objects of this build: the out_dir of each crate's build script.
# The same cargo command as `make user`, so that nothing is rebuilt; its messages go to
# stderr as usual.
json=$(cd "$RKF_ROOT" && cargo build --release --locked --workspace --bins --message-format=json) ||
	die "cargo build failed"
mapfile -t out_dirs < <(python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "build-script-executed" and \
       any(m["package_id"].split("#")[0].endswith(p) for p in ("/tests", "/user")):
        print(m["out_dir"])
' <<<"$json")
((${#out_dirs[@]})) || die "cargo reported no build-script output directory for rkf-selftests and rkf"

rm -rf "$pkg"
mkdir -p "$pkg/bpf" "$pkg/include" "$pkg/modules" "$pkg/foreign"
install -m755 "$RKF_ROOT/tests/package/run_kselftest.sh" "$RKF_ROOT/target/release/rkf-selftests" \
	"$RKF_ROOT/target/release/rkf" "$pkg/"
llvm-strip --strip-debug "$pkg/rkf-selftests" "$pkg/rkf"
install -m644 "$RKF_ROOT/include/rkf.bpf.h" "$pkg/include/"
for d in "${out_dirs[@]}"; do
	install -m644 "$d"/*.bpf.o "$pkg/bpf/"
done
for m in rkf_percpu rkf_stack rkf_multi rkf_testmod; do
	install -m644 "$moddir/$m.ko" "$pkg/modules/"
	install -m644 "$foreign_moddir/$m.ko" "$pkg/foreign/"
done
llvm-objcopy --remove-section=.BTF --remove-section=.BTF.base \
	"$moddir/rkf_percpu.ko" "$pkg/modules/rkf_percpu-nobtf.ko"
"$pkg/rkf-selftests" --list >"$pkg/kselftest-list.txt"
[[ -s $pkg/kselftest-list.txt ]] || die "rkf-selftests --list printed nothing"

tar -C "$RKF_ROOT/build/selftests" -czf "$RKF_ROOT/build/$name.tar.gz" "$name"
ln -sfn "$name" "$RKF_ROOT/build/selftests/current-$release.$$"
mv -Tf "$RKF_ROOT/build/selftests/current-$release.$$" "$RKF_ROOT/build/selftests/current-$release"
log "kselftest package: build/$name.tar.gz ($(wc -l <"$pkg/kselftest-list.txt") tests, $(find "$pkg/bpf" -name '*.bpf.o' | wc -l) BPF objects)"
