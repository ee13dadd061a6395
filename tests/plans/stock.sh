# SPDX-License-Identifier: GPL-2.0
# The plan `make check` runs on each stock Debian kernel (tests/vm/stock): its
# own vmlinuz, gdrpeer.ko as DKMS built and signed it (installed with apt from
# make deb's gdrpeer-dkms), nvsim, p2pclient, gdrnic and the proprietary
# stand-in (tests/nvprop) built against the same headers. Its first argument, the
# kernel's name (deb-7.2), is appended to every test's name. Its second, if
# `per-block`, runs everything under nvsim's callback rule for small buffers
# as the driver has it (callback_per_buffer=0, Documentation/dev/nvsim.rst: the
# free callback belongs to the pool block, so freeing a small cuMemAlloc
# buffer calls nothing back); otherwise under nvsim's default, the stricter
# per-buffer rule. tests/vm/check runs one stock kernel under each, so every
# suite here runs under both.
#
# These kernels have no sanitizers: a freed object is handed out again at once,
# as on every machine users run, so a stale pointer meets a live object instead
# of one that KASAN's quarantine holds back. The suites (gdrpeer-test's default
# run, --nic, --cuda over the simulated libcuda, the C gdrdrv client), the
# command-line tool's events and the short stress and fuzzing runs here are the
# sanitizer-free ones. KUnit, MODVERSIONS, lockdep
# and fault injection are not built into them: those cases run on the test
# kernel, and are reported skipped here, with the reason (gdrpeer-test skips its
# allocation-failure walks itself).
# Sourced by the guest's /init after lib.sh; tests/vm/check runs it.

. $GDRPEER/plans/lib-demo.sh
. $GDRPEER/plans/lib-suites.sh
. $GDRPEER/plans/lib-load.sh

KERNEL_NAME=$(sed -n 1p $GDRPEER/plan.args)
S=-${KERNEL_NAME:-stock}
CALLBACK_RULE=$(sed -n 2p $GDRPEER/plan.args)
case ${CALLBACK_RULE:=per-buffer} in
per-block) NVSIM_PARAMS=callback_per_buffer=0 ;;
per-buffer) ;;
*) echo "stock.sh: unknown callback rule '$CALLBACK_RULE'" >&2 ;;
esac

# skip_absent NAME WHAT PATH: NAME skipped because the kernel lacks WHAT (PATH
# is how it would show); a failure if the kernel has it after all, so that the
# cases are moved here instead of being skipped for nothing.
skip_absent() {
	if [ -e "$3" ]; then
		echo "@@ RESULT FAIL $1$S this kernel has $2 ($3): run those cases here"
	else
		echo "@@ RESULT SKIP $1$S the kernel is built without $2; those cases run on the test kernel"
	fi
}

run_plan() {
	echo "kernel: $(uname -r) ($(uname -v)); nvsim's callback rule: $CALLBACK_RULE"
	t demo-load-version-unload$S demo_chain
	t demo-pin-cache-revoke$S demo_pin_cache_revoke
	t demo-mmap-write-read-free$S demo_mmap
	t demo-nic-round-trip$S demo_nic_round_trip
	t demo-dmabuf-nic-invalidate$S demo_dmabuf
	t demo-dmabuf-pinned-survives-cumemfree$S demo_dmabuf_pinned
	t demo-doctor$S demo_doctor
	t cli-gdrdrv-info$S test_cli_gdrdrv_info
	t cli-events$S test_cli_events
	t cli-doctor$S test_cli_doctor "ok    iommu: off: "
	t cli-doctor-without-gdrpeer$S test_cli_doctor_without_gdrpeer
	t crate-example-pin-map-dmabuf$S test_crate_example pin_map_dmabuf
	t crate-example-regcache$S test_crate_example regcache
	t crate-example-events$S test_crate_example events
	t libgdrpeer-c$S test_libgdrpeer_c
	GDRPEER_FILTER="" GDRPEER_SUFFIX=$S gdrpeer_suite
	GDRPEER_FILTER=gdrpeer-byte-limits GDRPEER_SUFFIX=-4-and-6-pages$S \
		GDRPEER_PARAMS="cache_max_bytes=262144 global_max_bytes=393216" gdrpeer_suite
	GDRPEER_FILTER='gdrdrv-req-mapping-type|gdrdrv-libgdrapi' GDRPEER_SUFFIX=-coherent$S gdrpeer_suite coherent=1
	GDRNIC_FILTER="" GDRNIC_SUFFIX=$S gdrnic_suite
	t gdrdrv-not-registered-with-gdrdrv-0$S test_gdrdrv_param_off
	t gdrdrv-not-registered-over-another$S test_gdrdrv_name_taken
	GDRNIC_FILTER=gdrnic-unsupported GDRNIC_SUFFIX=-0x00030000$S gdrnic_suite page_table_version=0x00030000
	CUDA_SUFFIX=$S cuda_suite
	GDRDRV_CLIENT_SUFFIX=$S gdrdrv_client_suite
	t stress-short$S stress_run 50000 3 3 1
	t fuzz-short$S fuzz_run 50000 4 1
	skip_absent kunit "KUnit (CONFIG_KUNIT)" /sys/kernel/debug/kunit
	skip_absent lockdep "lockdep (CONFIG_PROVE_LOCKING)" /proc/lockdep
	# tests/vm/stock checked that DKMS's gdrpeer.ko has no modversions in its vermagic.
	echo "@@ RESULT SKIP modversions$S the kernel is built without CONFIG_MODVERSIONS; those cases run on the test kernel"
	# Last: the proprietary stand-in taints the kernel (P) for good. Debian's
	# own kernel refuses gdrpeer next to it, as it would next to NVIDIA's.
	t proprietary-nvidia-refuses-gdrpeer$S test_proprietary_nvidia_refused
}
