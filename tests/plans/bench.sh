# SPDX-License-Identifier: GPL-2.0
# `make bench`: gdrpeer-bench in the guest (tests/vm/bench). Arguments
# (tests/vm/run ... bench ARGS) go to `gdrpeer-bench run`. The figures come
# back as one JSON line, `bench-json: {...}`, which tests/vm/bench extracts.

. $GDRPEER/plans/lib-load.sh

bench() {
	grep -E '^(bar1_size|gpu_pages) ' /sys/kernel/debug/nvsim/stats 2>/dev/null
	bench_run $(cat $GDRPEER/plan.args) || return 1
	echo "bench-json: $(cat /tmp/bench.json)"
}

run_plan() {
	TEST_TIMEOUT=${BENCH_TIMEOUT:-5400} t bench bench
}
