#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Install everything rkf needs on a Debian bookworm machine, idempotently.
# Prints what it installs; does nothing for what is already there.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

[[ $(id -u) == 0 ]] || die "install-deps.sh must run as root (it uses apt-get)"

# --- apt suites ------------------------------------------------------------
# bookworm-backports: bpftool.  trixie-backports: the kernel source, and only that.
# Never add plain trixie: its libc would be pulled in and break apt.
src=/etc/apt/sources.list.d/rkf.sources
want_src='Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm-backports trixie-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg'
pin=/etc/apt/preferences.d/rkf-trixie-backports
want_pin='Package: *
Pin: release n=trixie-backports
Pin-Priority: 1'
changed=0
if [[ ! -f $src || "$(cat "$src")" != "$want_src" ]]; then
	log "adding apt suites bookworm-backports and trixie-backports ($src)"
	printf '%s\n' "$want_src" >"$src"; changed=1
fi
if [[ ! -f $pin || "$(cat "$pin")" != "$want_pin" ]]; then
	printf '%s\n' "$want_pin" >"$pin"; changed=1
fi
stamp=/var/lib/apt/lists/.rkf-updated
if (( changed )) || [[ ! -f $stamp ]] || [[ -n $(find "$stamp" -mmin +720) ]]; then
	log "apt-get update"
	apt-get update -qq
	touch "$stamp"
fi

# gcc: the distro kernel is built with GCC, as Debian builds it (bookworm's 12.2); openssl
# makes its module signing key; zstd compresses its bzImage (Debian's KERNEL_ZSTD); golang-go
# gives `go tool pprof`, the client that reads rkf's pprof files in make pprof-check;
# make lint checks the scripts with shellcheck.
pkgs=(clang-19 lld-19 llvm-19 libclang-19-dev dwarves bc flex bison libelf-dev
      libssl-dev zlib1g-dev pkg-config cpio kmod xz-utils rsync python3-venv
      busybox-static make git file elfutils dkms gcc openssl zstd golang-go shellcheck)
missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
	log "apt-get install ${missing[*]}"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# From bookworm-backports: bpftool is not in bookworm, and qemu must match the
# backported qemu-utils that these machines ship (bookworm's 7.2 conflicts with it).
bpo=()
for p in bpftool qemu-system-x86; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || bpo+=("$p")
done
if ((${#bpo[@]})); then
	log "apt-get install -t bookworm-backports ${bpo[*]}"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends -t bookworm-backports "${bpo[@]}" >/dev/null
fi

# --- Rust -------------------------------------------------------------------
command -v rustup >/dev/null || die "rustup is not installed: rkf needs the rustup toolchain (Rust >= 1.85) in ~/.cargo/bin"
installed=$(rustup component list --installed 2>/dev/null || true)
for c in rust-src clippy rustfmt; do
	if ! grep -q "^$c" <<<"$installed"; then
		log "rustup component add $c"
		rustup component add "$c"
	fi
done
# One bindgen version on every machine: the kernels record it (CONFIG_BINDGEN_VERSION_TEXT),
# their cache keys hash it, and scripts/check-kdir.sh refuses a tree built with another.
bindgen_version=0.73.2
if [[ $(bindgen --version 2>/dev/null | head -1) != "bindgen $bindgen_version" ]]; then
	log "cargo install --locked bindgen-cli --version $bindgen_version (about 2 min)"
	cargo install --locked -q bindgen-cli --version "$bindgen_version"
fi

# --- virtme-ng, in a venv of its own ---------------------------------------------
if [[ ! -x $RKF_VENV/bin/vng ]]; then
	log "installing virtme-ng into $RKF_VENV"
	rm -rf "$RKF_VENV"
	/usr/bin/python3 -m venv "$RKF_VENV"
	"$RKF_VENV/bin/pip" install -q 'virtme-ng==1.42'
fi
[[ -x $RKF_VENV/bin/vng ]] || die "virtme-ng did not install into $RKF_VENV"
log "dependencies present"
