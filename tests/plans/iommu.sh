# SPDX-License-Identifier: GPL-2.0
# The plan `make check` runs behind an IOMMU: Debian's stock 7.3.4 kernel, with
# the modules tests/vm/stock built for it (gdrpeer.ko by DKMS, nvsim, p2pclient,
# gdrnic), booted by `tests/vm/run --iommu`: a q35 machine with QEMU's
# intel-iommu, which the kernel runs translated and strict. The test kernel has
# no IOMMU support; every other plan runs with DMA address = bus address.
#
# Here a DMA address is an IOVA that the IOMMU maps to the bus address, and it
# is unusable the moment its mapping goes. So:
# - iommu-translated-strict: the guest really runs that way (its boot log, and
#   the IOMMU groups of edu and of the GPU), or nothing after it means much;
# - each interface hands out the right kind of address: GET_PAGES bus
#   addresses, DMA_MAP, the kernel API and a dma-buf's sg list DMA addresses,
#   which the NIC reads through to see that each reaches its page
#   (gdrpeer-test's address tests, with the DMA-mapping and callback tests of
#   the gdrpeer suite, the NIC suite with the dma-buf tests, nvsim-test's
#   DMA-mapping tests);
# - the demo's NIC round trip and dma-buf import, and a short stress run, move
#   data through translation, and no DMA fault may appear in any of them (the
#   log oracle, tests/vm/report, fails the run on one);
# - the planted DMA after revocation: a DMA fault that the oracle must find
#   inside its region, at the address the region names.
# Its one argument, the kernel's name (deb-7.3): every test's name ends in
# -iommu-NAME.
# Sourced by the guest's /init after lib.sh; tests/vm/check runs it.

. $GDRPEER/plans/lib-demo.sh
. $GDRPEER/plans/lib-suites.sh
. $GDRPEER/plans/lib-load.sh

KERNEL_NAME=$(head -n1 $GDRPEER/plan.args)
S=-iommu-${KERNEL_NAME:-stock}

# The PCI function with vendor and device $1 $2 (sysfs directory).
pci_function() {
	for d in /sys/bus/pci/devices/*; do
		[ "$(cat $d/vendor)" = "$1" ] && [ "$(cat $d/device)" = "$2" ] && { echo $d; return 0; }
	done
	return 1
}

# The kernel runs the IOMMU translated with strict invalidation, and both
# devices' DMA goes through it: their IOMMU groups' default domains are "DMA"
# ("DMA-FQ" would be lazy: an unmapped IOVA stays usable until a flush).
test_iommu_translated_strict() {
	log=$(dmesg)
	for want in "DMAR: IOMMU enabled" "iommu: Default domain type: Translated" \
		"iommu: DMA domain TLB invalidation policy: strict mode"; do
		echo "$log" | grep -qF "$want" || fail "no '$want' in the boot log"
		echo "$log" | grep -F "$want"
	done
	for dev in "0x1234 0x11e8 edu" "0x1af4 0x1110 ivshmem"; do
		set -- $dev
		d=$(pci_function $1 $2) || fail "no $3 device"
		[ -e $d/iommu_group ] || fail "$3 ($d) is in no IOMMU group"
		type=$(cat $d/iommu_group/type)
		echo "$3 $(basename $d): IOMMU group $(basename $(readlink $d/iommu_group)), domain $type"
		expect_eq "$3's IOMMU domain" "$type" DMA
	done
}

# nvsim-test's tests of nvsim's DMA mappings and bus addresses (its filter: names
# containing one of the |-separated words).
nvsim_dma_suite() {
	unload_nv_stack
	load $M/nvsim.ko && load $M/p2pclient.ko ||
		{ echo "@@ RESULT FAIL nvsim-dma-suite$S load"; unload_nv_stack; return; }
	results nvsim-test "$S" nvsim-test \
		"${TEST_FILTER:-nvsim-dma-map|nvsim-dma-unmap-of-a-freed|nvsim-bar-extents|nvsim-force-bar1-table-cannot-be-dma-mapped}"
	unload_nv_stack
}

# The planted DMA after revocation (gdrpeer-test --nic-iommu): the test marks
# its own region, naming the revoked address, and waits for the fault in it.
iommu_planted_suite() {
	if [ -n "$TEST_FILTER" ] && ! echo gdrnic-iommu-planted | grep -qE "$TEST_FILTER"; then
		return 0
	fi
	unload_nv_stack
	load $M/nvsim.ko && load $M/p2pclient.ko && load $M/gdrpeer.ko && load $M/gdrnic.ko ||
		{ echo "@@ RESULT FAIL gdrnic-iommu-suite$S load"; unload_nv_stack; return; }
	results gdrpeer-test-nic-iommu "$S" gdrpeer-test --nic-iommu "$TEST_FILTER"
	unload_nv_stack
}

run_plan() {
	echo "kernel: $(uname -r) ($(uname -v)); $(cat /proc/cmdline)"
	t iommu-translated-strict$S test_iommu_translated_strict
	t cli-doctor$S test_cli_doctor "warn  iommu: translated, strict ([0-9a-f:.]*: DMA, [0-9a-f:.]*: DMA): "
	t demo-nic-round-trip$S demo_nic_round_trip
	t demo-dmabuf-nic-invalidate$S demo_dmabuf
	# GET_PAGES, DMA_MAP and the DMA-mapping and callback tests (gdrpeer-test's
	# filter: names containing one of the |-separated words; a run's --filter
	# replaces the choice).
	GDRPEER_FILTER=${TEST_FILTER:-gdrpeer-pin-rounds-to-gpu-pages|gdrpeer-get-pages|gdrpeer-table-version|gdrpeer-persistent-pins|gdrpeer-callback-|gdrpeer-dma-map|gdrpeer-stale-} \
		GDRPEER_SUFFIX=$S gdrpeer_suite
	# gdrpeer calls nv-p2p's dma_map_pages and dma_unmap_pages only for a GPU
	# and peer's first mapping: these tests need a load that has mapped nothing.
	for t in gdrpeer-stale-dma-map gdrpeer-callback-waits-for-an-unmap; do
		if [ -z "$TEST_FILTER" ] || echo $t | grep -qE "$TEST_FILTER"; then
			GDRPEER_FILTER=$t GDRPEER_SUFFIX=-fresh$S gdrpeer_suite
		fi
	done
	# The kernel API's addresses and the dma-buf's sg list, and the rest of the NIC's tests.
	GDRNIC_FILTER="" GDRNIC_SUFFIX=$S gdrnic_suite
	nvsim_dma_suite
	t stress-short$S stress_run 30000 3 3 13
	iommu_planted_suite
}
