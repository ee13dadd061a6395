# SPDX-License-Identifier: GPL-2.0
# `make fuzz`: the long ioctl fuzzing run. Arguments (tests/vm/run ... fuzz
# ARGS): CALLS THREADS SEED, by default 1000000 4 1.

. $GDRPEER/plans/lib-load.sh

run_plan() {
	set -- $(cat $GDRPEER/plan.args)
	TEST_TIMEOUT=${FUZZ_TIMEOUT:-7200} t fuzz fuzz_run "${1:-1000000}" "${2:-4}" "${3:-1}"
}
