# SPDX-License-Identifier: GPL-2.0
# The stress, fuzz and benchmark runs, shared by check.sh (short runs) and
# stress.sh, fuzz.sh and bench.sh (make stress, make fuzz, make bench).
# Sourced by plans.

# dma_map_window: how often the run entered the DMA-mapping window (nvsim's
# dma_map_window: dma_map_pages calls whose table was freed while they waited
# for NVIDIA's lock; Documentation/dev/design.rst), a figure for the log. The
# stress and fuzzing runs print it themselves and clear it, since every test
# must leave it at 0.
dma_map_window() {
	echo "DMA-mapping window entered: $(awk '$1 == "dma_map_window" { print $2 }' \
		/sys/kernel/debug/nvsim/stats) dma_map_pages calls"
}

# stress_run OPS PROCS THREADS SEED: nvsim, gdrpeer (a small region limit, so
# that evictions happen too) and the sample NIC, then gdrpeer-test --stress
# (userspace/gdrpeer-test/src/stress.rs).
stress_run() {
	unload_nv_stack
	load $GDRPEER/modules/nvsim.ko &&
		load $GDRPEER/modules/gdrpeer.ko cache_max_regions=8 invalidate_warn_ms=1000 &&
		load $GDRPEER/modules/gdrnic.ko || fail "load"
	gdrpeer-test --stress "$@"
	rc=$?
	unload_nv_stack
	return $rc
}

# fuzz_run CALLS THREADS SEED: nvsim, gdrpeer and the sample NIC (which
# imports the dma-bufs the fuzzer exports), then gdrpeer-test --fuzz
# (userspace/gdrpeer-test/src/fuzz.rs).
fuzz_run() {
	unload_nv_stack
	load $GDRPEER/modules/nvsim.ko && load $GDRPEER/modules/gdrpeer.ko invalidate_warn_ms=1000 &&
		load $GDRPEER/modules/gdrnic.ko || fail "load"
	gdrpeer-test --fuzz "$@"
	rc=$?
	unload_nv_stack
	return $rc
}

# kapi_fuzz_run CALLS THREADS SEED: nvsim, gdrpeer and the sample NIC, whose
# GDRNIC_IOCTL_FUZZ calls gdrpeer's kernel API at random, then gdrpeer-test
# --kapi-fuzz (userspace/gdrpeer-test/src/kapi_fuzz.rs). make check runs a
# short one in the gdrnic suite (gdrnic-kapi-fuzz-short).
kapi_fuzz_run() {
	unload_nv_stack
	load $GDRPEER/modules/nvsim.ko && load $GDRPEER/modules/gdrpeer.ko invalidate_warn_ms=1000 &&
		load $GDRPEER/modules/gdrnic.ko || fail "load"
	gdrpeer-test --kapi-fuzz "$@"
	rc=$?
	dma_map_window
	unload_nv_stack
	return $rc
}

# gdrpeer_knows_param NAME: whether the staged gdrpeer.ko has the module
# parameter NAME (its .modinfo's parmtype=NAME:..., what modinfo -p reads; the
# guest has no modules.dep for busybox's modinfo), or the loaded one shows it
# (sysfs, debugfs params). A module ignores a parameter it does not know.
gdrpeer_knows_param() {
	grep -aq "parmtype=$1:" $GDRPEER/modules/gdrpeer.ko ||
		[ -e /sys/module/gdrpeer/parameters/$1 ] ||
		grep -q "^$1 " /sys/kernel/debug/gdrpeer/params 2>/dev/null
}

# bench_nic_hit_nokeep JSON: the NIC's kernel-API hit without the mapping cache
# (gdrpeer loaded with dma_map_keep=0), gdrpeer-bench nic-hit writing JSON.
bench_nic_hit_nokeep() {
	unload_nv_stack
	load $GDRPEER/modules/nvsim.ko &&
		load $GDRPEER/modules/gdrpeer.ko cache_max_regions=0 invalidate_warn_ms=1000 dma_map_keep=0 &&
		load $GDRPEER/modules/gdrnic.ko || fail "load (dma_map_keep=0)"
	gdrpeer-bench nic-hit --json "$1"
	rc=$?
	unload_nv_stack
	return $rc
}

# bench_run ARGS...: nvsim with its default pin cost, gdrpeer with no region
# limit (the cache keeps every region the benchmark pins) and the sample NIC
# (the importer of the dma-buf measurements; invalidate_warn_ms as for the
# NIC tests), then gdrpeer-bench run ARGS, writing /tmp/bench.json
# (userspace/gdrpeer-bench), with whole-page CUDA allocations.
bench_run() {
	unload_nv_stack
	load $GDRPEER/modules/nvsim.ko &&
		load $GDRPEER/modules/gdrpeer.ko cache_max_regions=0 invalidate_warn_ms=1000 &&
		load $GDRPEER/modules/gdrnic.ko || fail "load"
	# Each 64 KiB buffer an allocation of its own: freeing a buffer carved from a
	# 2 MiB pool block that it alone used poisons the whole block, 32 times the
	# work that a free of the buffer is meant to measure.
	LIBCUDA_SIM_SUBALLOC=0 gdrpeer-bench run --json /tmp/bench.json "$@"
	rc=$?
	unload_nv_stack
	return $rc
}
