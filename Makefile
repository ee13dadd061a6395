# SPDX-License-Identifier: GPL-2.0
#
# gdrpeer: out-of-tree Rust kernel module for GPUDirect RDMA.
#
#   make [KDIR=...] [LLVM=...] [NVIDIA_SRC=...]   build gdrpeer.ko (src/gdrpeer.ko)
#   make modules_install                          install gdrpeer.ko (then depmod)
#   make install                                  that, the headers, Module.symvers, install-system
#   make install-system                           the C header, the udev rule and its group, loading
#                                                 at boot (no module: for a DKMS install of the tree)
#   make cli                                      the gdrpeer command, its man pages and completions
#                                                 in build/cli (cargo; as a user, before make install)
#   make check                                    all tests: host, KUnit, VM (installs what it needs)
#   make demo                                     the main job, end to end, in the test VM
#   make stress | fuzz                            the long stress and fuzzing runs (ioctls,
#                                                 and the kernel API from the sample NIC)
#                                                 (stress: also both on the KCSAN kernel)
#   make bench                                    the benchmarks: table, JSON and plot in build/bench
#   make deb [DEB_VERSION=...]                    Debian packages gdrpeer-dkms and gdrpeer-tools
#                                                 in build/deb (packaging/make-deb)
#   make clippy | fmt | fmtcheck | rust-analyzer | clean
#
# KDIR is the kernel build tree (default: the running kernel's). NVIDIA_SRC is
# an NVIDIA driver source tree: gdrpeer then binds to its nv-p2p.h and links
# against its Module.symvers; without it include/nv-p2p.h is used.

KDIR ?= /lib/modules/$(shell uname -r)/build
LLVM ?=
# Without NVIDIA_SRC and NV_SYMVERS, the one NVIDIA tree under /usr/src
# (NVIDIA_SEARCH) that has an nv-p2p.h is used, if there is exactly one, in
# either layout: nvidia-*/nvidia/ (Debian, DKMS) or nvidia-*/kernel-open/nvidia/
# (NVIDIA's GitHub tree). NVIDIA_SRC= (empty) turns this off.
NVIDIA_SEARCH ?= /usr/src
ifeq ($(origin NVIDIA_SRC)$(origin NV_SYMVERS),undefinedundefined)
nv_found := $(sort $(patsubst %/nvidia/nv-p2p.h,%,$(wildcard $(NVIDIA_SEARCH)/nvidia-*/nvidia/nv-p2p.h)) \
	$(patsubst %/kernel-open/nvidia/nv-p2p.h,%,$(wildcard $(NVIDIA_SEARCH)/nvidia-*/kernel-open/nvidia/nv-p2p.h)))
ifeq ($(words $(nv_found)),1)
NVIDIA_SRC := $(nv_found)
nv_note_src := NVIDIA_SRC=$(NVIDIA_SRC) (the only tree with an nv-p2p.h in $(NVIDIA_SEARCH))
else ifneq ($(nv_found),)
nv_note_src := none of $(nv_found) chosen: set NVIDIA_SRC to one (or NVIDIA_SRC= for include/nv-p2p.h)
endif
endif
NVIDIA_SRC ?=
NV_SYMVERS ?= $(wildcard $(NVIDIA_SRC)/Module.symvers $(NVIDIA_SRC)/kernel-open/Module.symvers)
# A driver tree that was not built has no Module.symvers: gdrpeer still builds,
# with modpost's errors on the undefined nvidia_p2p_* turned into warnings.
ifneq ($(NVIDIA_SRC),)
ifeq ($(strip $(NV_SYMVERS)),)
nv_note_symvers := $(NVIDIA_SRC) has no Module.symvers (driver not built): building with \
	KBUILD_MODPOST_WARN=1, nvidia_p2p_* unversioned, modpost warnings about them expected
endif
endif
ifneq ($(filter-out fmt fmtcheck clean check demo stress fuzz bench deb cli libgdrpeer install-system,$(or $(MAKECMDGOALS),all)),)
$(if $(nv_note_src),$(info gdrpeer: $(nv_note_src)))
$(if $(nv_note_symvers),$(info gdrpeer: $(nv_note_symvers)))
endif

KMAKE = $(MAKE) -C $(KDIR) M=$(CURDIR) $(if $(LLVM),LLVM=$(LLVM)) \
	$(if $(NVIDIA_SRC),NVIDIA_SRC=$(abspath $(NVIDIA_SRC))) \
	$(if $(NV_SYMVERS),KBUILD_EXTRA_SYMBOLS="$(abspath $(NV_SYMVERS))", \
		$(if $(NVIDIA_SRC),KBUILD_MODPOST_WARN=1))

.PHONY: all kdir-check modules modules_install clean clippy fmt fmtcheck rust-analyzer check demo stress fuzz bench profile

all: modules

modules: kdir-check
	$(KMAKE) modules

# Rust modules need the kernel's Rust metadata in KDIR, which the header
# packages of distribution kernels lack: scripts/prepare-kdir --check says so
# and what to do (Documentation/dev/building.rst).
kdir-check:
	@$(CURDIR)/scripts/prepare-kdir --check $(KDIR) >/dev/null

# Installation (Documentation/dev/building.rst). DESTDIR stages everything under
# another root; INSTALL_MOD_PATH, for the module, defaults to it.
#   gdrpeer.ko        $(INSTALL_MOD_PATH)/lib/modules/<release>/$(INSTALL_MOD_DIR)/src/
#                     (the kernel's modules_install keeps the path under M=)
#   uAPI header       $(includedir)/gdrpeer/gdrpeer.h
#   kernel API        $(GDRPEER_SRCDIR)/include/gdrpeer-kapi.h (and uapi/gdrpeer.h)
#   Module.symvers    $(GDRPEER_SRCDIR)/<release>/Module.symvers, for NIC drivers
#   udev rule         $(udevrulesdir)/70-gdrpeer.rules
#   libgdrpeer        $(includedir)/gdrpeer/libgdrpeer.h, and, once built
#                     (make libgdrpeer), $(libdir)/libgdrpeer.so.0, .so, .a
#   loading at boot   $(modulesloaddir)/gdrpeer.conf, $(modprobedir)/gdrpeer.conf
#   the group gdrpeer the rule gives the devices to: created (groupadd --system)
#                     only when installing into the live system as root (no
#                     DESTDIR); with DESTDIR, the target system's packaging must
#                     create it (as gdrpeer-tools' postinst does)
# Keep GDRPEER_VERSION equal to PACKAGE_VERSION in dkms.conf and MODULE_VERSION
# in src/kapi-exports.c.
GDRPEER_VERSION := 0.1.0
DESTDIR ?=
INSTALL_MOD_PATH ?= $(DESTDIR)
INSTALL_MOD_DIR ?= updates
prefix ?= /usr
includedir ?= $(prefix)/include
libdir ?= $(prefix)/lib
udevrulesdir ?= $(prefix)/lib/udev/rules.d
modulesloaddir ?= $(prefix)/lib/modules-load.d
modprobedir ?= $(prefix)/lib/modprobe.d
GDRPEER_SRCDIR ?= $(prefix)/src/gdrpeer-$(GDRPEER_VERSION)
bindir ?= $(prefix)/bin
mandir ?= $(prefix)/share/man
datadir ?= $(prefix)/share
DEPMOD ?= depmod
KRELEASE = $(shell cat $(KDIR)/include/config/kernel.release 2>/dev/null)
mod_path = $(if $(INSTALL_MOD_PATH),$(abspath $(INSTALL_MOD_PATH)))

# The kernel's modules_install runs depmod only when KDIR has a System.map
# (distribution header packages have none): then it is run here.
modules_install:
	@test -n "$(KRELEASE)" || { echo "gdrpeer: $(KDIR) is not a built kernel tree (set KDIR)" >&2; exit 1; }
	$(KMAKE) INSTALL_MOD_PATH=$(mod_path) INSTALL_MOD_DIR=$(INSTALL_MOD_DIR) modules_install
	$(if $(wildcard $(KDIR)/System.map),,$(DEPMOD) -a $(if $(mod_path),-b $(mod_path)) $(KRELEASE))

# Debian packages (packaging/make-deb): gdrpeer-dkms (the source, via dh-dkms)
# and gdrpeer-tools (the CLI, prepare-kdir, the uAPI header, the udev rule).
# DEB_VERSION defaults to $(GDRPEER_VERSION)-1; DEB_OUT to build/deb.
DEB_VERSION ?=
DEB_OUT ?= $(CURDIR)/build/deb
.PHONY: deb
deb:
	DEB_VERSION='$(DEB_VERSION)' packaging/make-deb '$(DEB_OUT)'

# The gdrpeer command with its man pages (gdrpeer.1, gdrpeer-<command>.1) and
# bash, zsh and fish completions, generated from its clap definitions.
CLI_OUT ?= $(CURDIR)/build/cli
.PHONY: cli
cli:
	cd userspace && cargo build --release --locked -p gdrpeer-cli
	rm -rf '$(CLI_OUT)' && mkdir -p '$(CLI_OUT)'
	cp userspace/target/release/gdrpeer '$(CLI_OUT)/'
	'$(CLI_OUT)/gdrpeer' generate all '$(CLI_OUT)'

.PHONY: install install-system
install: modules_install install-system
	install -D -m 0644 include/gdrpeer-kapi.h $(DESTDIR)$(GDRPEER_SRCDIR)/include/gdrpeer-kapi.h
	install -D -m 0644 include/uapi/gdrpeer.h $(DESTDIR)$(GDRPEER_SRCDIR)/include/uapi/gdrpeer.h
	install -D -m 0644 Module.symvers $(DESTDIR)$(GDRPEER_SRCDIR)/$(KRELEASE)/Module.symvers

# Everything but the module, which DKMS (dkms.conf) does not install: the C
# headers, the udev rule, loading at boot, and the gdrpeer command and
# libgdrpeer where make cli and make libgdrpeer built them; into the live
# system (no DESTDIR) as root, the group too, and the devices that exist
# already get the rule now.
install-system:
	$(if $(wildcard $(CLI_OUT)/gdrpeer),$(install_cli),@echo "gdrpeer: $(CLI_OUT) was not built (make cli): the gdrpeer command is not installed")
	install -D -m 0644 include/uapi/gdrpeer.h $(DESTDIR)$(includedir)/gdrpeer/gdrpeer.h
	install -D -m 0644 udev/70-gdrpeer.rules $(DESTDIR)$(udevrulesdir)/70-gdrpeer.rules
	install -D -m 0644 include/gdrpeer/libgdrpeer.h $(DESTDIR)$(includedir)/gdrpeer/libgdrpeer.h
	$(if $(wildcard $(LIBGDRPEER_SO)),$(install_libgdrpeer),@echo "gdrpeer: libgdrpeer is not built (make libgdrpeer): only its header was installed")
	install -D -m 0644 system/modules-load.d/gdrpeer.conf $(DESTDIR)$(modulesloaddir)/gdrpeer.conf
	install -D -m 0644 system/modprobe.d/gdrpeer.conf $(DESTDIR)$(modprobedir)/gdrpeer.conf
ifeq ($(DESTDIR),)
	@if [ "$$(id -u)" != 0 ]; then \
		echo "gdrpeer: not root: the group gdrpeer was not created (sudo groupadd --system gdrpeer)"; \
	elif ! getent group gdrpeer >/dev/null; then \
		groupadd --system gdrpeer && echo "gdrpeer: created the group gdrpeer"; \
	fi
	@if [ "$$(id -u)" = 0 ] && [ -d /run/udev ] && command -v udevadm >/dev/null; then \
		udevadm control --reload; \
		udevadm trigger --subsystem-match=misc --sysname-match=gdrpeer --sysname-match=gdrdrv; \
	fi
	@echo "gdrpeer: add users to the group gdrpeer (sudo usermod -aG gdrpeer USER; they log in again)"
else
	@echo "gdrpeer: DESTDIR set: the group gdrpeer is not created; the target system must create it (groupadd --system gdrpeer)"
endif

# libgdrpeer, the C library for /dev/gdrpeer (userspace/gdrpeer-c,
# Documentation/user/library.rst), built by cargo; make install installs it.
LIBGDRPEER_SO = userspace/target/release/libgdrpeer_c.so
.PHONY: libgdrpeer
libgdrpeer:
	cd userspace && cargo build --release --locked -p gdrpeer-c
define install_libgdrpeer
	install -D -m 0755 $(LIBGDRPEER_SO) $(DESTDIR)$(libdir)/libgdrpeer.so.0
	ln -sf libgdrpeer.so.0 $(DESTDIR)$(libdir)/libgdrpeer.so
	install -D -m 0644 $(LIBGDRPEER_SO:.so=.a) $(DESTDIR)$(libdir)/libgdrpeer.a
endef

define install_cli
install -D -m 0755 $(CLI_OUT)/gdrpeer $(DESTDIR)$(bindir)/gdrpeer
install -d $(DESTDIR)$(mandir)/man1
install -m 0644 $(CLI_OUT)/man/*.1 $(DESTDIR)$(mandir)/man1/
install -D -m 0644 $(CLI_OUT)/completions/gdrpeer $(DESTDIR)$(datadir)/bash-completion/completions/gdrpeer
install -D -m 0644 $(CLI_OUT)/completions/_gdrpeer $(DESTDIR)$(datadir)/zsh/vendor-completions/_gdrpeer
install -D -m 0644 $(CLI_OUT)/completions/gdrpeer.fish $(DESTDIR)$(datadir)/fish/vendor_completions.d/gdrpeer.fish
endef

# DKMS appends CC=clang and LD=ld.lld (3.0.10), or LLVM=1 (3.0.11 and later),
# to its make command when the kernel was built with LLVM, after dkms.conf's
# own settings. dkms.conf names the toolchain in GDRPEER_LLVM, which nothing
# appends to: it wins over an LLVM= on the command line. LLVM= picks the
# kernel's tools, and where only versioned names exist (clang-19) the
# unversioned ones would not run, so DKMS's are not passed on to the kernel's
# make.
ifneq ($(GDRPEER_LLVM),)
override LLVM := $(GDRPEER_LLVM)
MAKEOVERRIDES := $(filter-out LLVM=%,$(MAKEOVERRIDES))
endif
ifneq ($(LLVM),)
MAKEOVERRIDES := $(filter-out CC=% LD=%,$(MAKEOVERRIDES))
endif

clippy: kdir-check
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

# The long stress and fuzzing runs (make check runs short ones); arguments in
# STRESS_ARGS="OPS PROCS THREADS SEED" and FUZZ_ARGS="CALLS THREADS SEED
# [KAPI_CALLS]" (the kernel-API fuzzing run after the ioctl one).
# make stress runs the stress run on the test kernel, then both runs on the
# KCSAN kernel (built on first use, 15-30 minutes), the second even if the
# first failed; each prints how long its phases took.
stress:
	@rc=0; \
	tests/vm/long stress $(STRESS_ARGS) || rc=1; \
	tests/vm/long kcsan "$(STRESS_ARGS)" "$(FUZZ_ARGS)" || rc=1; \
	exit $$rc

fuzz:
	tests/vm/long fuzz $(FUZZ_ARGS)

# The benchmarks (figures, not pass/fail); arguments of gdrpeer-bench run in
# BENCH_ARGS, e.g. BENCH_ARGS="--sizes 16,1024 --reps 1000"; BENCH_IOMMU=1 runs
# them behind a translating IOMMU (Debian's stock kernel, build/bench-iommu).
bench:
	BENCH_IOMMU='$(BENCH_IOMMU)' tests/vm/bench $(BENCH_ARGS)

# Where a cache hit spends its time: perf in the benchmark guest
# (tests/plans/profile.sh); PROFILE_REPS repetitions of each loop.
profile:
	tests/vm/profile $(PROFILE_REPS)
