# SPDX-License-Identifier: GPL-2.0
# The suites with nvsim's callback rule for sub-allocated buffers set to the
# driver's (callback_per_buffer=0, Documentation/dev/nvsim.rst): the free callback
# belongs to the pool block, the RM memory object, so freeing a small
# cuMemAlloc buffer calls nothing back. A test that fails here, and passes in
# check.sh (the default, per-buffer rule), requires a callback (or a SIGBUS)
# that the real driver need not give. Every test's name gets -per-block.
# (nvsim's and libcuda-sim's own tests of both rules run in check.sh.)
#
#   tests/vm/run --stage build/stage per-block
#
# Sourced by the guest's /init after lib.sh.

. $GDRPEER/plans/lib-demo.sh
. $GDRPEER/plans/lib-suites.sh
. $GDRPEER/plans/lib-load.sh

S=-per-block

# Every load of nvsim.ko, whoever makes it, gets the driver's callback rule.
NVSIM_PARAMS=callback_per_buffer=0

run_plan() {
	t demo-pin-cache-revoke$S demo_pin_cache_revoke
	t demo-mmap-write-read-free$S demo_mmap
	t demo-dmabuf-nic-invalidate$S demo_dmabuf
	t cli-events$S test_cli_events
	t gdrdrv-not-registered-with-gdrdrv-0$S test_gdrdrv_param_off
	GDRPEER_FILTER="" GDRPEER_SUFFIX=$S gdrpeer_suite
	# gdrpeer calls nv-p2p's dma_map_pages and dma_unmap_pages only for a GPU
	# and peer's first mapping: these tests need a load that has mapped nothing.
	for t in gdrpeer-stale-dma-map gdrpeer-callback-waits-for-an-unmap; do
		GDRPEER_FILTER=$t GDRPEER_SUFFIX=-fresh$S gdrpeer_suite
	done
	GDRNIC_FILTER="" GDRNIC_SUFFIX=$S gdrnic_suite
	CUDA_SUFFIX=$S cuda_suite
	GDRDRV_CLIENT_SUFFIX=$S gdrdrv_client_suite
	t stress-short$S stress_run 20000 3 3 1
	t fuzz-short$S fuzz_run 50000 4 1
}
