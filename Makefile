# SPDX-License-Identifier: GPL-2.0
#
# rkf: out-of-tree Rust-for-Linux modules that give BPF programs new kfuncs.
#
#   make run        the main job: boot the distro kernel with the modules, show them working
#   make check      all tests: host tests, module build, kselftests in VMs on both kernels
#
#   make modules    build the modules for KDIR (default: the cached test kernel)
#   make kernel     build (or find in the cache) the test and distro kernels
#   make user       build the rkf CLI and the selftest runner
#   make host-test  cargo test of the pure-Rust parts, the bad-input and splat checks
#   make lint       rustfmt, cargo fmt, checkpatch, kernel-doc, shellcheck
#   make vm-test    the kselftests in a VM on the test kernel
#   make vm-test-distro  the kselftests in a VM on the distro kernel (Debian's config)
#   make vm-test-mitigations  the rkf_multi kselftests on the distro kernel, on cpus with
#                   return thunks and with call depth tracking
#   make bench      the benchmarks in a VM on the distro kernel (-icount), into build/bench.md
#   make dkms-check  package with the real dkms from a headers package, signed; load what it
#                   installed in a VM, smoke-test
#   make vm-storm  the rkf_multi attach storms, 10,000 cycles each, on the distro kernel
#   make vm-check  vm-test, vm-test-distro, vm-test-mitigations and dkms-check in two lanes
#                   at once (make check)
#   make pprof-check  make run, then go tool pprof reads the pprof files it wrote
#   make selftests-package  the kselftests as installable directories and tarballs, one per kernel
#   make host-fuzz  time-bounded fuzzing of the pure rules (RKF_FUZZ_SECS per target)
#   make install    modules_install of the three modules (INSTALL_MOD_PATH=, KDIR= as above)
#   make clean

SHELL := /bin/bash
RKF_ROOT := $(CURDIR)
BUILD := $(RKF_ROOT)/build
LLVM_BIN := /usr/lib/llvm-19/bin
export PATH := $(LLVM_BIN):$(HOME)/.cargo/bin:$(PATH)

# Warnings are errors in CI.
RKF_WERROR ?= $(if $(filter true 1,$(CI)),1,0)
export RKF_WERROR

MODULES := rkf_percpu rkf_stack rkf_multi rkf_testmod

.PHONY: all deps kernel kernel-test kernel-distro modules modules-test modules-distro user \
	host-test host-fuzz lint vm-test vm-test-distro vm-test-mitigations vm-test-stuff-everything bench \
	vm-check vm-lane-test vm-lane-distro vm-storm \
	dkms-check selftests-package \
	selftests-package-test selftests-package-distro install check run pprof-check clean help

all: modules user

help:
	@sed -n '3,26p' Makefile | sed 's/^# \{0,1\}//'

deps:
	@scripts/install-deps.sh

# The test kernel (tinyconfig + fragments, clang, KASAN, lockdep) and the distro kernel
# (Debian's own config, GCC).  The distro kernel's differences from Debian's config are
# copied to build/distro-config-diff.txt (with a summary by cause beside it).
kernel: kernel-test kernel-distro
kernel-test: deps
	@scripts/kernel.sh build test
kernel-distro: deps
	@scripts/kernel.sh build distro
	@mkdir -p "$(BUILD)"
	@kdir=$$(scripts/kernel.sh dir distro) && \
		cp "$$kdir/distro-config-diff.txt" "$$kdir/distro-config-summary.txt" "$(BUILD)/"

# ---- modules ---------------------------------------------------------------------
# KDIR is any patched 7.3 build tree; by default the cached test kernel (built on demand).
# Objects go to build/<name of KDIR>/ so that one checkout builds for several kernels.
# The modules are built with the tree's own compiler family: LLVM=1 only for a tree
# configured with clang (CONFIG_CC_IS_CLANG); scripts/check-kdir.sh checks the versions.
ifeq ($(origin KDIR),undefined)
modules install: kernel-test
modules install: KDIR = $(shell scripts/kernel.sh dir test 2>/dev/null)
endif
KDIR_LLVM = $(if $(shell grep -sqx 'CONFIG_CC_IS_CLANG=y' "$(KDIR)/.config" && echo y),LLVM=1)
modules:
	@scripts/check-kdir.sh "$(KDIR)"
	@mkdir -p "$(BUILD)/$(notdir $(KDIR))"
	$(MAKE) -C "$(KDIR)" M="$(RKF_ROOT)" MO="$(BUILD)/$(notdir $(KDIR))" $(KDIR_LLVM) CLIPPY=1 modules
	@scripts/check-btf.sh "$(BUILD)/$(notdir $(KDIR))" $(MODULES)

# modules_install of rkf_percpu, rkf_stack and rkf_multi (built apart, without the
# test-only rkf_testmod) into $(INSTALL_MOD_PATH)/lib/modules/<release>/updates/.
install:
	@scripts/check-kdir.sh "$(KDIR)"
	@mkdir -p "$(BUILD)/$(notdir $(KDIR))-install"
	$(MAKE) -C "$(KDIR)" M="$(RKF_ROOT)" MO="$(BUILD)/$(notdir $(KDIR))-install" $(KDIR_LLVM) \
		RKF_TESTMOD=n modules
	$(MAKE) -C "$(KDIR)" M="$(RKF_ROOT)" MO="$(BUILD)/$(notdir $(KDIR))-install" $(KDIR_LLVM) \
		RKF_TESTMOD=n INSTALL_MOD_DIR=updates modules_install

# The modules for each cached kernel.
modules-test modules-distro: modules-%: kernel-%
	@$(MAKE) --no-print-directory modules KDIR="$$(scripts/kernel.sh dir $*)"

# ---- userspace -------------------------------------------------------------------
# BPF programs are compiled against a vmlinux.h generated from the kernel being tested.
user: kernel-test
	@scripts/vmlinux-h.sh "$$(scripts/kernel.sh dir test)" "$(BUILD)/include/vmlinux.h"
	cargo build --release --locked --workspace --bins
	cargo clippy --release --locked --workspace --all-targets -- -D warnings
	RUSTDOCFLAGS="-D warnings" cargo doc --release --locked --no-deps --workspace

host-test: user
	cargo test --release --locked -p rkf-core -p rkf -p rkf-selftests
	tests/host-bad-input.sh
	tests/host-splats.sh

# Each fuzz target of rust/core/tests/fuzz.rs runs RKF_FUZZ_SECS seconds (cargo test runs
# them two at a time).
RKF_FUZZ_SECS ?= 20
host-fuzz:
	RKF_FUZZ_SECS=$(RKF_FUZZ_SECS) cargo test --release --locked -p rkf-core --test fuzz -- --nocapture

lint: kernel-test
	scripts/lint.sh

# The kselftests run from their installed package, as a user would run them: one package
# per kernel, each with the modules built for it, rkf_testmod, a copy of rkf_percpu
# without its BTF (for the test that such a module is refused) and, as the "foreign"
# modules, the ones built for the other kernel (for the test that the kernel refuses them).
# Each VM run that make reads results from has its own result directory (vm.sh --out).
# The test kernel's debugging (KASAN, lockdep, kmemleak) makes its run several times as
# long as the distro kernel's under TCG: it gets a longer timeout.
# Every test but the attach to every function, which runs on the distro kernel: under
# KASAN, lockdep and kmemleak in TCG, every traced call of every function made this VM
# crawl (fentry on 22,340 functions took 140 s to attach, and an fexit attach beside it
# on every function had not finished after 5 minutes).  The README's Tests section says so.
# $(1): the timeout, in seconds; $(2): the result directory under build/vm; $(3): the
# runner's test selection.
define vm-test-boot
	RKF_VM_TIMEOUT=$${RKF_VM_TIMEOUT:-$(1)} scripts/vm.sh test --out build/vm/$(2) -- \
		tests/guest-selftests.sh $(3)
endef
TEST_LEFT_OUT := multi_attach_everything_fentry_fexit
# The tests that need the kernel's fault injection, which only the test kernel has: the
# allocation-failure sweep, the longest test of its suite (about a third of its run),
# and a generation failed on purpose.  make check runs them in a boot of their own, in
# the other lane.
FAULTS := multi_attach_detach_allocation_failures,multi_shared_exit_after_move_to_generated
LANE_TEST_LEFT_OUT := $(TEST_LEFT_OUT),$(FAULTS)
vm-test: selftests-package-test
	$(call vm-test-boot,3600,vm-test,-x $(TEST_LEFT_OUT))

# Every test but those of FAULTS, which need the kernel's fault injection: Debian's
# config has CONFIG_FAULT_INJECTION off, the test kernel has it (test.config).
define vm-test-distro-boot
	RKF_VM_TIMEOUT=$${RKF_VM_TIMEOUT:-2400} scripts/vm.sh distro --out build/vm/vm-test-distro -- \
		tests/guest-selftests.sh -x $(FAULTS)
endef
vm-test-distro: selftests-package-distro
	$(vm-test-distro-boot)

# rkf_multi's selftests on the distro kernel under cpu models that make it turn on a
# return-thunk mitigation (AMD Zen 2: retbleed's untrained return thunk) and call depth
# tracking (Skylake, retbleed=stuff); guest-mitigations.sh fails if the kernel did not.
# Left out there: the tests of FAULTS (no fault injection in Debian's config) and,
# for CI's time, the ioctl fuzz, whose bad requests the same kernel refuses the same way
# under any cpu (it runs on the test and distro kernels), and, in the return-thunk boot,
# attaching to everything (316 s): its trampolines differ from
# the distro boot's by the return instruction, which every other test there runs.  The
# call-depth boot kept it until 70c8dea: there generation calls the kernel's accounting
# helpers for each function (where an RCU tasks stall was found), and its 43,094
# functions took 420 s on one machine, up to about 800 s on CI's (hence its longer
# timeout); now `make vm-test-stuff-everything` runs it on its own.  The
# storms run a fifth of the distro boot's cycles there (--storm-cycles; the generated
# storm 100 instead of 500): every cycle runs the same trampoline code, and the
# generated storm's 1,000 cycles took 5 to 8 minutes of each boot.
MITIGATIONS_LEFT_OUT := multi_ioctl_fuzz,$(FAULTS)
MITIGATIONS_STORM := --storm-cycles 2000
# Since 70c8dea the call-depth boot leaves out attaching to everything too, for CI's 90
# minutes (the fresh-clone check of 70c8dea took 79 minutes to reach the mitigation
# boots on a slow machine): `make vm-test-stuff-everything` runs it.
STUFF_LEFT_OUT := multi_attach_everything_fentry_fexit
vm-test-stuff-everything: selftests-package-distro
	RKF_VM_TIMEOUT=$${RKF_VM_TIMEOUT:-2400} scripts/vm.sh distro --cpu Skylake-Server --append retbleed=stuff \
		--out build/vm/stuff-everything -- \
		tests/guest-mitigations.sh stuff tests/guest-selftests.sh -t $(STUFF_LEFT_OUT)
define vm-test-rethunk-boot
	RKF_VM_TIMEOUT=$${RKF_VM_TIMEOUT:-1800} scripts/vm.sh distro --cpu EPYC-Rome --out build/vm/rethunk -- \
		tests/guest-mitigations.sh rethunk tests/guest-selftests.sh -t multi_ \
		-x $(MITIGATIONS_LEFT_OUT),multi_attach_everything_fentry_fexit $(MITIGATIONS_STORM)
endef
define vm-test-stuff-boot
	RKF_VM_TIMEOUT=$${RKF_VM_TIMEOUT:-2400} scripts/vm.sh distro --cpu Skylake-Server --append retbleed=stuff \
		--out build/vm/stuff -- \
		tests/guest-mitigations.sh stuff tests/guest-selftests.sh -t multi_ \
		-x $(MITIGATIONS_LEFT_OUT),$(STUFF_LEFT_OUT) $(MITIGATIONS_STORM)
endef
vm-test-mitigations: selftests-package-distro
	$(vm-test-rethunk-boot)
	$(vm-test-stuff-boot)

# The three attach storms with 10,000 cycles each on the distro kernel, the generated one
# included (in make check it makes 500: a cycle there takes 0.2 to 0.5 s under TCG, so
# 10,000 take 35 to 85 minutes, past CI's time); not part of make check.
STORMS := multi_exact_counts_under_attach_storm,multi_generated_exact_counts_under_attach_storm,multi_sleepable_exact_counts_under_attach_storm
vm-storm: selftests-package-distro
	RKF_VM_TIMEOUT=$${RKF_VM_TIMEOUT:-7200} scripts/vm.sh distro --out build/vm/storm -- \
		tests/guest-selftests.sh -t $(STORMS) --storm-cycles 10000 --generated-storm-cycles 10000

# make check's VM runs, in two lanes at once, each boot after the other in its lane.  A
# TCG guest spends much of its time waiting (grace periods, sleeps, workqueues), so the
# lanes together take far less than their sum on two cores (the README has the figures).
# The test kernel's suite (under KASAN, lockdep and kmemleak in TCG) is the longest run:
# its allocation-failure sweep, a third of it, boots on its own in the other lane, and
# the call-depth boot follows the rest of the suite, so that the lanes end at about the
# same time (with the whole suite in one boot, the test lane took 65 minutes and the
# other 39 in the check of c920fed; in that of e31afc1 62 and 60, the two
# test-kernel guests slowing each other: the README has the figures).  The test kernel's suite gets 4,500 s there
# (3,600 alone), as it shares the cores with the other lane.  Each boot keeps its own
# result directory (vm.sh --out), and -Oline prints each boot's output whole when it
# ends; a lane that fails lets the other end, then make fails.  The lanes build no
# kernel, module or package for the VMs (vm-check builds both packages first; dkms-check
# builds what dkms builds, as it always does), and dkms-check gets no jobserver: its
# makes run as they would alone.
vm-check: selftests-package
	@$(MAKE) --no-print-directory -j2 -Oline vm-lane-test vm-lane-distro
vm-lane-test:
	$(call vm-test-boot,4500,vm-test,-x $(LANE_TEST_LEFT_OUT))
	$(vm-test-stuff-boot)
vm-lane-distro:
	$(vm-test-distro-boot)
	$(call vm-test-boot,2400,vm-test-faults,-t $(FAULTS))
	$(vm-test-rethunk-boot)
	MAKEFLAGS= scripts/dkms-check.sh

selftests-package: selftests-package-test selftests-package-distro
selftests-package-test: modules-test modules-distro user
	scripts/selftests-package.sh "$$(scripts/kernel.sh dir test)" "$$(scripts/kernel.sh dir distro)"
selftests-package-distro: modules-test modules-distro user
	scripts/selftests-package.sh "$$(scripts/kernel.sh dir distro)" "$$(scripts/kernel.sh dir test)"

# The benchmarks, then rkf_multi's per-call table again on the cpus of vm-test-mitigations.
bench: modules-distro user
	scripts/vm.sh distro --bench --out build/vm/bench -- tests/guest-bench.sh
	scripts/vm.sh distro --bench --cpu EPYC-Rome --out build/vm/bench-rethunk -- \
		tests/guest-mitigations.sh rethunk tests/guest-bench.sh --per-call
	scripts/vm.sh distro --bench --cpu Skylake-Server --append retbleed=stuff \
		--out build/vm/bench-stuff -- tests/guest-mitigations.sh stuff tests/guest-bench.sh --per-call
	@cat build/vm/bench/bench.md build/vm/bench-rethunk/bench.md build/vm/bench-stuff/bench.md \
		>build/bench.md && echo "results in build/bench.md"

dkms-check: selftests-package-distro
	scripts/dkms-check.sh

check: deps lint host-test host-fuzz vm-check run pprof-check bench

run: modules-distro user
	scripts/vm.sh distro --out build/vm/run -- tests/guest-demo.sh
	@cd build/vm/run && cp profile.svg profile.folded profile.pb.gz \
		offcpu.svg offcpu.folded offcpu.pb.gz "$(BUILD)/" && \
		echo "rkf profile's flame graph: build/profile.svg (folded stacks: build/profile.folded, pprof: build/profile.pb.gz)" && \
		echo "rkf offcputime's flame graph: build/offcpu.svg (folded stacks: build/offcpu.folded, pprof: build/offcpu.pb.gz)"
# The pprof files of `make run`, read by a client that rkf did not write: go tool pprof.
pprof-check: run
	tests/host-pprof.sh build/vm/run

clean:
	rm -rf "$(BUILD)" target
