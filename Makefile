# SPDX-License-Identifier: GPL-2.0
#
# rkf: out-of-tree Rust-for-Linux modules that give BPF programs new kfuncs.
#
#   make run        the main job: boot the bench kernel with the modules, show them working
#   make check      all tests: host tests, module build, kselftests in a VM on the test kernel
#
#   make modules    build the modules for KDIR (default: the cached test kernel)
#   make kernel     build (or find in the cache) the test and bench kernels
#   make user       build the rkf CLI and the selftest runner
#   make host-test  cargo test of the pure-Rust parts, and the bad-input checks
#   make lint       rustfmt, cargo fmt, checkpatch
#   make vm-test    the kselftests in a VM on the test kernel
#   make bench      the benchmarks in a VM on the bench kernel (-icount), into build/bench.md
#   make dkms-check  package with the real dkms, load what it installed in a VM, smoke-test
#   make selftests-package  the kselftests as an installable directory and tarball
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

.PHONY: all deps kernel kernel-test kernel-bench modules modules-test modules-bench user \
	host-test host-fuzz lint vm-test bench dkms-check selftests-package install check run clean help

all: modules user

help:
	@sed -n '3,18p' Makefile | sed 's/^# \{0,1\}//'

deps:
	@scripts/install-deps.sh

kernel: kernel-test kernel-bench
kernel-test kernel-bench: kernel-%: deps
	@scripts/kernel.sh build $*

# ---- modules ---------------------------------------------------------------------
# KDIR is any patched 7.3 build tree; by default the cached test kernel (built on demand).
# Objects go to build/<name of KDIR>/ so that one checkout builds for several kernels.
ifeq ($(origin KDIR),undefined)
modules install: kernel-test
modules install: KDIR = $(shell scripts/kernel.sh dir test 2>/dev/null)
endif
modules:
	@scripts/check-kdir.sh "$(KDIR)"
	@mkdir -p "$(BUILD)/$(notdir $(KDIR))"
	$(MAKE) -C "$(KDIR)" M="$(RKF_ROOT)" MO="$(BUILD)/$(notdir $(KDIR))" LLVM=1 CLIPPY=1 modules
	@scripts/check-btf.sh "$(BUILD)/$(notdir $(KDIR))" $(MODULES)

# modules_install of rkf_percpu, rkf_stack and rkf_multi (built apart, without the
# test-only rkf_testmod) into $(INSTALL_MOD_PATH)/lib/modules/<release>/updates/.
install:
	@scripts/check-kdir.sh "$(KDIR)"
	@mkdir -p "$(BUILD)/$(notdir $(KDIR))-install"
	$(MAKE) -C "$(KDIR)" M="$(RKF_ROOT)" MO="$(BUILD)/$(notdir $(KDIR))-install" LLVM=1 \
		RKF_TESTMOD=n modules
	$(MAKE) -C "$(KDIR)" M="$(RKF_ROOT)" MO="$(BUILD)/$(notdir $(KDIR))-install" LLVM=1 \
		RKF_TESTMOD=n INSTALL_MOD_DIR=updates modules_install

# The modules for each cached kernel.
modules-test modules-bench: modules-%: kernel-%
	@$(MAKE) --no-print-directory modules KDIR="$$(scripts/kernel.sh dir $*)"

# ---- userspace -------------------------------------------------------------------
# BPF programs are compiled against a vmlinux.h generated from the kernel being tested.
user: kernel-test
	@scripts/vmlinux-h.sh "$$(scripts/kernel.sh dir test)" "$(BUILD)/include/vmlinux.h"
	cargo build --release --locked --workspace --bins
	cargo clippy --release --locked --workspace --all-targets -- -D warnings

host-test: user
	cargo test --release --locked -p rkf-core -p rkf
	tests/host-bad-input.sh

# Each fuzz target of rust/core/tests/fuzz.rs runs RKF_FUZZ_SECS seconds (cargo test runs
# them two at a time).
RKF_FUZZ_SECS ?= 20
host-fuzz:
	RKF_FUZZ_SECS=$(RKF_FUZZ_SECS) cargo test --release --locked -p rkf-core --test fuzz -- --nocapture

lint: kernel-test
	scripts/lint.sh

# The bench kernel's modules are needed too: a test checks that the test kernel refuses them.
# A module stripped of its BTF, for the test that such a module refuses to load.
# The kselftests run from their installed package, as a user would run them.
vm-test: selftests-package
	scripts/vm.sh test -- tests/guest-selftests.sh

selftests-package: modules-test modules-bench user
	scripts/selftests-package.sh "$$(scripts/kernel.sh dir test)" "$$(scripts/kernel.sh dir bench)"

bench: modules-bench user
	scripts/vm.sh bench --bench -- tests/guest-bench.sh
	@cp build/vm/last/bench.md build/bench.md && echo "results in build/bench.md"

dkms-check: selftests-package
	scripts/dkms-check.sh

check: deps lint host-test host-fuzz vm-test dkms-check run bench

run: modules-bench user
	scripts/vm.sh bench -- tests/guest-demo.sh
	@cp build/vm/last/profile.svg build/vm/last/profile.folded build/ && \
		echo "rkf profile's flame graph: build/profile.svg (folded stacks: build/profile.folded)"

clean:
	rm -rf "$(BUILD)" target
