# SPDX-License-Identifier: GPL-2.0
# `make fuzz`: the long ioctl fuzzing run, then the long kernel-API fuzzing
# run. Arguments (tests/vm/run ... fuzz ARGS): CALLS THREADS SEED KAPI_CALLS,
# by default 1000000 4 1 100000 (the kernel-API run: 2 threads, the same seed).

. $GDRPEER/plans/lib-load.sh

run_plan() {
	set -- $(cat $GDRPEER/plan.args)
	TEST_TIMEOUT=${FUZZ_TIMEOUT:-7200} t fuzz fuzz_run "${1:-1000000}" "${2:-4}" "${3:-1}"
	TEST_TIMEOUT=${FUZZ_TIMEOUT:-7200} t kapi-fuzz kapi_fuzz_run "${4:-100000}" 2 "${3:-1}"
}
