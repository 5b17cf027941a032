#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# vm.sh FLAVOUR [--bench] [--cpu MODEL] [--append ARGS] [--out DIR] -- GUEST-CMD [ARGS...]
#
# Boot the cached FLAVOUR kernel (test or distro) with virtme-ng, 2 vCPUs, the host's root
# file system read-only over 9p, and run GUEST-CMD as root inside it (through
# guest-wrap.sh) with RKF_OUT naming a host directory the guest writes into, and RKF_MODDIR
# the directory of the modules built for this kernel.  The guest leaves in RKF_OUT:
#   output.txt  everything the command printed (shown on the host afterwards)
#   ktap.txt    the KTAP output, if the command runs tests
#   dmesg.txt   the kernel log at the end of the run
#   kmemleak.txt  kmemleak's report after the run, if the kernel has kmemleak
#   status      the guest command's exit status
#
#   --bench         boot with -icount shift=0, so guest time counts instructions and ratios
#                   repeat across runs
#   --cpu MODEL     the qemu cpu model (qemu-system-x86_64 -cpu help), for example EPYC-Rome
#                   (Zen 2: retbleed/SRSO return thunks) or Skylake-Server (with
#                   --append retbleed=stuff: call depth tracking); the guest's header line
#                   then names the cpu and the retbleed, spectre_v2 and spec_rstack_overflow
#                   mitigations the kernel chose
#   --append ARGS   more kernel command line arguments
#   --out DIR       put the results in DIR (emptied first; it must be new, empty or an
#                   earlier vm.sh result directory) instead of a new build/vm/FLAVOUR-DATE-PID.
#                   Each make target that reads results passes its own, so that runs of
#                   `make -j` do not race.  build/vm/last and build/vm/last-FLAVOUR always
#                   name the latest run.
#
# The exit status is the guest's, never vng's (vng exits 255 in console mode whatever the
# guest did).  The run fails when the VM cannot boot, when the guest leaves no status, on
# timeout (RKF_VM_TIMEOUT, default 1200 s), and on any WARNING/BUG/Oops/KASAN/lockdep/RCU
# splat in the kernel log, whatever the tests said.
#
# TCG is the default.  KVM is used only when a probe boot proved it works on this host
# (nested KVM hangs on some), and never with --bench or --cpu; RKF_KVM=0 or 1 forces the
# choice.  TCG runs one host thread per vCPU; RKF_TCG_THREAD=single runs them all on one
# (qemu's -accel tcg,thread=single): several times as slow, but free of multi-threaded
# TCG's mishandling of code that one vCPU patches while another runs it (README, "Known
# problem").
set -uo pipefail
source "$(dirname "$0")/lib.sh"

usage="usage: vm.sh FLAVOUR [--bench] [--cpu MODEL] [--append ARGS] [--out DIR] -- GUEST-CMD [ARGS...]"
flavour=${1:-}
[[ -n $flavour && $flavour != -* ]] || die "$usage"
shift
bench=0 cpu='' append='' outdir=''
while (($#)); do
	case $1 in
	--bench) bench=1; shift ;;
	--cpu|--append|--out)
		[[ $# -ge 2 && -n $2 ]] || die "vm.sh: $1 needs a value ($usage)"
		case $1 in --cpu) cpu=$2 ;; --append) append=$2 ;; --out) outdir=$2 ;; esac
		shift 2 ;;
	--cpu=*) cpu=${1#*=}; shift ;;
	--append=*) append=${1#*=}; shift ;;
	--out=*) outdir=${1#*=}; shift ;;
	--) shift; break ;;
	*) die "vm.sh: unknown option '$1' ($usage)" ;;
	esac
done
(($#)) || die "$usage"

kdir=$("$RKF_ROOT/scripts/kernel.sh" dir "$flavour") || exit 1
image=$kdir/arch/x86/boot/bzImage
command -v vng >/dev/null || die "vng (virtme-ng) is not installed: run scripts/install-deps.sh"
command -v qemu-system-x86_64 >/dev/null || die "qemu-system-x86_64 is not installed: run scripts/install-deps.sh"
# The models are the indented lines under "Available CPUs:" (older qemu prefixes "x86").
if [[ -n $cpu ]] && ! qemu-system-x86_64 -cpu help |
	awk '/^Available CPUs:/ { f = 1; next } f && !/^ / { exit } f { print ($1 == "x86") ? $2 : $1 }' |
	grep -qxF -- "$cpu"; then
	die "qemu has no x86 cpu model '$cpu' (qemu-system-x86_64 -cpu help lists them)"
fi

# link TARGET NAME: point the symlink NAME at TARGET, atomically (runs may end together).
link() {
	ln -sfn "$1" "$2.$$" && mv -Tf "$2.$$" "$2"
}

mkdir -p "$RKF_ROOT/build/vm"
if [[ -n $outdir ]]; then
	[[ $outdir == /* ]] || outdir=$PWD/$outdir
	out=${outdir%/}
	# Emptied first, so that no file of an earlier run passes for this one's; but only a
	# directory vm.sh made (it leaves .rkf-vm-out there), or an empty one.
	if [[ -e $out && ! -f $out/.rkf-vm-out ]] && [[ ! -d $out || -n $(ls -A "$out") ]]; then
		die "--out $out exists and is not a vm.sh result directory (no .rkf-vm-out): not emptying it"
	fi
	rm -rf "$out"
else
	out=$RKF_ROOT/build/vm/$flavour-$(date +%Y%m%d-%H%M%S)-$$
fi
mkdir -p "$out"
touch "$out/.rkf-vm-out"
link "$out" "$RKF_ROOT/build/vm/last-$flavour"

# Boot a tiny command under KVM once per host boot; use KVM only if it comes back.
kvm_works() {
	case ${RKF_KVM:-auto} in 0) return 1 ;; 1) return 0 ;; esac
	((bench)) && return 1 # icount needs TCG
	[[ -n $cpu ]] && return 1 # so does a cpu model other than the host's
	[[ -w /dev/kvm ]] || return 1
	local probe=$RKF_CACHE/kvm-probe boot_id lock res
	boot_id=$(cat /proc/sys/kernel/random/boot_id)
	# One probe at a time (make vm-check boots two VMs at once): the second waits for
	# the first's answer.
	mkdir -p "$RKF_CACHE"
	exec {lock}>"$probe.lock"
	flock "$lock"
	if [[ -f $probe ]] && [[ $(head -1 "$probe") == "$boot_id" ]]; then
		res=$(tail -1 "$probe")
	else
		log "probing KVM with a 60 s test boot"
		local d
		d=$(mktemp -d)
		timeout -k 5 60 vng --run "$image" --cpus 1 --memory 512M --user root --append "root=/dev/root no5lvl" \
			--rwdir "$d" --exec "echo ok > $d/ok" </dev/null >/dev/null 2>&1
		res=fail
		[[ -f $d/ok ]] && res=ok
		rm -rf "$d"
		printf '%s\n%s\n' "$boot_id" "$res" >"$probe.$$"
		mv "$probe.$$" "$probe"
		log "KVM probe: $res"
	fi
	exec {lock}>&-
	[[ $res == ok ]]
}

# vng boots a 9p root without an initramfs but does not name the root device: the kernel
# then mounts 9p with an empty source.  "/dev/root" is the mount tag vng gives it.
# no5lvl: with TCG's "max" cpu the kernel turns on 5-level paging, and KASAN then reports
# a wild access in the first interrupt during early boot (identify_boot_cpu); rkf does not
# need 5-level paging.
kargs="root=/dev/root no5lvl${append:+ $append}"
vng_args=(--run "$image" --cpus 2 --memory 2G --user root --rwdir "$out" --verbose
	  --append "$kargs")
qemu_opts=()
if kvm_works; then
	accel=kvm
else
	accel=tcg
	vng_args+=(--disable-kvm)
	case ${RKF_TCG_THREAD:-} in
	"") ;;
	single|multi) qemu_opts+=(-accel "tcg,thread=$RKF_TCG_THREAD") ;;
	*) die "RKF_TCG_THREAD is single or multi, not '$RKF_TCG_THREAD'" ;;
	esac
fi
# shellcheck disable=SC2054 # the comma is qemu's
((bench)) && qemu_opts+=(-icount shift=0,sleep=off)
# vng puts its own "-cpu max" first; qemu takes the last -cpu.
[[ -n $cpu ]] && qemu_opts+=(-cpu "$cpu")
# Joined with "=": vng's parser refuses a separate value that starts with "-".
((${#qemu_opts[@]})) && vng_args+=("--qemu-opts=${qemu_opts[*]}")

# The guest runs the command through this wrapper, which records the status and dmesg.
# Modules built for the other flavour, for the test that the kernel refuses them.
other=distro
[[ $flavour == distro ]] && other="test"
foreign=
if okdir=$("$RKF_ROOT/scripts/kernel.sh" dir "$other" 2>/dev/null); then
	foreign="RKF_FOREIGN_MODDIR=$RKF_ROOT/build/$(basename "$okdir")"
fi
# For the guest's header line: the config package of the distro flavour, and the cpu model.
kconfig=$(sed -n 's/^config //p' "$kdir/.rkf-built")
# guest-wrap.sh brings RCU tasks' stall warning (rcu_task_stall_timeout, in jiffies, 10
# minutes by default) down to rcu_task_stall_info's 10 s: a grace period held back that
# long fails the run (below), and the warning names the holdout tasks with their stacks,
# where the info line names none.  Not on the command line: there it would also cut the
# boot-time RCU tasks self-tests' deadline (kernel/rcu/tasks.h) from 30 s to 10 s.
# On a kernel with kmemleak (the test flavour: KASAN, lockdep and kmemleak under TCG)
# both are 60 s: there the verifier alone held the selftest runner inside one
# BPF_PROG_LOAD, an RCU tasks holdout, for more than 10 s, with another VM on the cores
# (make vm-check).  The distro kernel, which attaches to every function, keeps 10 s.
hz=$(sed -n 's/^CONFIG_HZ=//p' "$kdir/.config")
[[ $hz =~ ^[0-9]+$ ]] || die "no CONFIG_HZ in $kdir/.config"
kmemleak=0
grep -qx 'CONFIG_DEBUG_KMEMLEAK=y' "$kdir/.config" && kmemleak=1
stall_s=10
((kmemleak)) && stall_s=60
guest_env=(${RKF_DKMS_MODDIR:+"RKF_DKMS_MODDIR=$RKF_DKMS_MODDIR"} "RKF_OUT=$out" "RKF_ROOT=$RKF_ROOT"
	   "RKF_RCU_TASK_STALL_TIMEOUT=$((stall_s * hz))"
	   "RKF_MODDIR=$RKF_ROOT/build/$(basename "$kdir")" "RKF_KSRC_PKG=$RKF_KSRC_PKG"
	   "RKF_KSRC_VERSION=$("$RKF_ROOT/scripts/kernel.sh" version)"
	   ${kconfig:+"RKF_KCONFIG=$kconfig"} ${cpu:+"RKF_VM_CPU=$cpu"})
# A kernel built with kmemleak: the selftests' leak scan must run (guest-selftests.sh).
((kmemleak)) && guest_env+=("RKF_KMEMLEAK=1")
guest_cmd="$foreign $(printf '%q ' "${guest_env[@]}")$RKF_ROOT/scripts/guest-wrap.sh $(printf '%q ' "$@")"

timeout_s=${RKF_VM_TIMEOUT:-1200}
mode="$accel, 2 vCPUs"
[[ $accel == tcg && -n ${RKF_TCG_THREAD:-} ]] && mode+=", thread=$RKF_TCG_THREAD"
((bench)) && mode+=", -icount shift=0"
[[ -n $cpu ]] && mode+=", cpu $cpu"
[[ -n $append ]] && mode+=", kernel args '$append'"
log "booting the $flavour kernel ($mode); console log: $out/console.log"
start=$SECONDS
timeout -k 10 "$timeout_s" vng "${vng_args[@]}" --exec "$guest_cmd" </dev/null >"$out/console.log" 2>&1
vng_rc=$?
log "VM exited after $((SECONDS - start)) s"

# build/vm/last: the latest run's directory, for people (make targets read their --out).
link "$out" "$RKF_ROOT/build/vm/last"

fail=0
if ((vng_rc == 124 || vng_rc == 137)); then
	log "the VM did not finish within ${timeout_s} s (RKF_VM_TIMEOUT)"
	fail=1
fi
[[ -f $out/output.txt ]] && cat "$out/output.txt"
if [[ ! -f $out/status ]]; then
	tail -30 "$out/console.log" >&2
	die "the VM did not run the guest command to the end (no status from the guest; vng exit $vng_rc).
See $out/console.log.  rkf cannot test anything without a VM: this run fails."
fi
status=$(cat "$out/status")

# Kernel splats fail the run, whatever the tests said (kernel_splats in lib.sh).
dmesg_file=$out/dmesg.txt
[[ -f $dmesg_file ]] || dmesg_file=$out/console.log
splat_rc=0
kernel_splats "$dmesg_file" >"$out/splats.txt" || splat_rc=$?
case $splat_rc in
0)
	log "kernel splat(s) in $dmesg_file:"
	head -60 "$out/splats.txt" >&2
	fail=1
	;;
1) log "dmesg is clean (no WARNING/BUG/Oops/KASAN/lockdep/RCU splat)" ;;
*)
	log "the kernel log $dmesg_file could not be checked for splats: this run fails"
	fail=1
	;;
esac

if [[ -s $out/kmemleak.txt ]]; then
	log "kmemleak reports leaks (first ones below; all in $out/kmemleak.txt):"
	head -40 "$out/kmemleak.txt" >&2
	fail=1
fi

if [[ -f $out/ktap.txt ]]; then
	# Top-level results only: subtests are indented.
	pass=$(grep -cE '^ok [0-9]+' "$out/ktap.txt")
	skip=$(grep -cE '^ok [0-9]+ .*# SKIP' "$out/ktap.txt")
	failed=$(grep -cE '^not ok [0-9]+' "$out/ktap.txt")
	plan=$(grep -oE '^1\.\.[0-9]+' "$out/ktap.txt" | head -1 | cut -c4-)
	pass=$((pass - skip))
	if [[ -z $plan ]] || ((pass + skip + failed != plan)); then
		log "KTAP plan says ${plan:-nothing} tests but $((pass + skip + failed)) reported"
		fail=1
	fi
	echo "$flavour-vm: $pass passed, $failed failed, $skip skipped"
fi
if ((status != 0)); then
	log "guest command exited $status"
	fail=1
fi
((fail == 0)) || die "VM run failed; artifacts in $out"
log "VM run passed; artifacts in $out"
