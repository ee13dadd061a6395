# SPDX-License-Identifier: GPL-2.0
# `make bench`: gdrpeer-bench in the guest (tests/vm/bench). Arguments
# (tests/vm/run ... bench ARGS) go to `gdrpeer-bench run`. The figures come
# back as one JSON line, `bench-json: {...}`, which tests/vm/bench extracts.

. $GDRPEER/plans/lib-load.sh

bench() {
	grep -E '^(bar1_size|gpu_pages) ' /sys/kernel/debug/nvsim/stats 2>/dev/null
	# The kernel-API hit without the mapping cache, where gdrpeer can drop it
	# (dma_map_keep=0); n/a otherwise.
	if gdrpeer_knows_param dma_map_keep; then
		bench_nic_hit_nokeep /tmp/bench-nokeep.json || return 1
		bench_run $(cat $GDRPEER/plan.args) --no-mapping-cache /tmp/bench-nokeep.json || return 1
	else
		bench_run $(cat $GDRPEER/plan.args) \
			--no-mapping-cache-skipped "gdrpeer.ko has no dma_map_keep parameter" || return 1
	fi
	echo "bench-json: $(cat /tmp/bench.json)"
}

run_plan() {
	TEST_TIMEOUT=${BENCH_TIMEOUT:-5400} t bench bench
}
