#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# check-btf.sh DIR MODULE...: fail unless every DIR/MODULE.ko carries a .BTF section.
# Without one the kernel "registers" the kfuncs with only a warning in dmesg.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

dir=$1; shift
for m in "$@"; do
	ko=$dir/$m.ko
	[[ -f $ko ]] || die "$ko was not built"
	# Not `| grep -q`: with pipefail, grep quitting early fails the pipeline (SIGPIPE).
	sections=$(llvm-readelf -S "$ko")
	grep -q ' \.BTF ' <<<"$sections" ||
		die "$ko has no .BTF section: its kfuncs could not register.  The kernel tree needs vmlinux and the build needs pahole."
done
log "modules built with BTF: $* (in $dir)"
