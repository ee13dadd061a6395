# SPDX-License-Identifier: GPL-2.0
#
# gdrpeer: out-of-tree Rust kernel module for GPUDirect RDMA.
#
#   make [KDIR=...] [LLVM=...] [NVIDIA_SRC=...]   build gdrpeer.ko (src/gdrpeer.ko)
#   make modules_install                          install it (then depmod)
#   make check                                    all tests: host, KUnit, VM (installs what it needs)
#   make demo                                     the main job, end to end, in the test VM
#   make clippy | fmt | fmtcheck | rust-analyzer | clean
#
# KDIR is the kernel build tree (default: the running kernel's). NVIDIA_SRC is
# an NVIDIA driver source tree: gdrpeer then binds to its nv-p2p.h and links
# against its Module.symvers; without it include/nv-p2p.h is used.

KDIR ?= /lib/modules/$(shell uname -r)/build
LLVM ?=
NVIDIA_SRC ?=
NV_SYMVERS ?= $(wildcard $(NVIDIA_SRC)/Module.symvers $(NVIDIA_SRC)/kernel-open/Module.symvers)

KMAKE = $(MAKE) -C $(KDIR) M=$(CURDIR) $(if $(LLVM),LLVM=$(LLVM)) \
	$(if $(NVIDIA_SRC),NVIDIA_SRC=$(abspath $(NVIDIA_SRC))) \
	$(if $(NV_SYMVERS),KBUILD_EXTRA_SYMBOLS="$(abspath $(NV_SYMVERS))")

.PHONY: all modules modules_install clean clippy fmt fmtcheck rust-analyzer check demo

all: modules

modules:
	$(KMAKE) modules

modules_install:
	$(KMAKE) modules_install

clippy:
	$(KMAKE) CLIPPY=1 KRUSTFLAGS=-Dwarnings modules

rust-analyzer:
	$(KMAKE) rust-analyzer

RUSTFMT ?= rustfmt
RUSTFMT_CONFIG = $(firstword $(wildcard $(KDIR)/.rustfmt.toml $(KDIR)/source/.rustfmt.toml))
RUST_SOURCES = $(filter-out %_generated.rs,$(wildcard src/*.rs tests/*/*.rs))

fmt:
	$(RUSTFMT) --edition 2021 --config-path $(RUSTFMT_CONFIG) $(RUST_SOURCES)
	cd userspace && cargo fmt

fmtcheck:
	$(RUSTFMT) --check --edition 2021 --config-path $(RUSTFMT_CONFIG) $(RUST_SOURCES)
	cd userspace && cargo fmt --check

clean:
	$(KMAKE) clean
	rm -f src/*_generated.rs

# The test rig: installs its tools, builds and caches the test kernel outside
# the repository, boots it under QEMU with nvsim and the sample NIC.
check:
	tests/vm/check

demo:
	tests/vm/demo
