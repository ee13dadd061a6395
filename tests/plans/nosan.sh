# SPDX-License-Identifier: GPL-2.0
# The plan `make check` runs on the sanitizer-free kernel (the benchmark
# kernel: the test kernel without KASAN, lockdep and kmemleak). There a freed
# object is handed out again at once, as on the kernels users run, so a stale
# pointer meets a live object instead of one that KASAN's quarantine holds back.
# Sourced by the guest's /init after lib.sh; tests/vm/check runs it.

. $GDRPEER/plans/lib-suites.sh
. $GDRPEER/plans/lib-load.sh

run_plan() {
	GDRPEER_FILTER="" GDRPEER_SUFFIX=-nosan gdrpeer_suite
	GDRNIC_FILTER="" GDRNIC_SUFFIX=-nosan gdrnic_suite
	t stress-short-nosan stress_run 20000 3 3 1
	t fuzz-short-nosan fuzz_run 50000 4 1
}
