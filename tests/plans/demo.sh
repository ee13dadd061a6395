# SPDX-License-Identifier: GPL-2.0
# `make demo`: the main job end to end, told step by step (lib-demo.sh).

. $GDRPEER/plans/lib-demo.sh

run_plan() {
	t demo-load-version-unload demo_chain
	t demo-pin-cache-revoke demo_pin_cache_revoke
	t demo-mmap-write-read-free demo_mmap
	t demo-nic-round-trip demo_nic_round_trip
	t demo-dmabuf-nic-invalidate demo_dmabuf
	t demo-dmabuf-pinned-survives-cumemfree demo_dmabuf_pinned
	t demo-doctor demo_doctor
}
