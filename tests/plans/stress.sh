# SPDX-License-Identifier: GPL-2.0
# `make stress`: the long stress run. Arguments (tests/vm/run ... stress ARGS):
# OPS PROCS THREADS SEED, by default 1000000 4 4 1.

. $GDRPEER/plans/lib-load.sh

run_plan() {
	set -- $(cat $GDRPEER/plan.args)
	TEST_TIMEOUT=${STRESS_TIMEOUT:-7200} \
		t stress stress_run "${1:-1000000}" "${2:-4}" "${3:-4}" "${4:-1}"
}
