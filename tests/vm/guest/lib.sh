# SPDX-License-Identifier: GPL-2.0
# Test library of the gdrpeer guest, sourced by /init before the plan.
#
# A plan defines run_plan(), which calls `t NAME FUNCTION [ARGS...]` for each
# test. A test function returns 0 to pass, 77 to skip, anything else to fail;
# what it prints goes to the result channel. Kernel reports raised while a test
# runs are charged to it by the host (tests/vm/report).

GDRPEER=/gdrpeer
TEST_FILTER=$(cat $GDRPEER/plan.filter 2>/dev/null)
TEST_TIMEOUT=${TEST_TIMEOUT:-300}
SKIP=77

kmsg() { echo "gdrpeer-test: $*" >/dev/kmsg; }

# Copies stdin to the kernel log line by line (one write per record).
to_kmsg() { while IFS= read -r line; do echo "$line" >/dev/kmsg; done; }

# t NAME FUNCTION [ARGS...]: run one test, bounded in time.
t() {
	name=$1; shift
	if [ -n "$TEST_FILTER" ] && ! echo "$name" | grep -qE "$TEST_FILTER"; then
		return 0
	fi
	kmsg "begin $name"
	echo "--- $name"
	( "$@" ) &
	pid=$!
	( sleep "$TEST_TIMEOUT"; kill -9 $pid 2>/dev/null ) &
	watchdog=$!
	wait $pid
	rc=$?
	kill $watchdog 2>/dev/null
	wait $watchdog 2>/dev/null
	case $rc in
	0) echo "@@ RESULT PASS $name" ;;
	77) echo "@@ RESULT SKIP $name" ;;
	137) echo "@@ RESULT FAIL $name timed out after ${TEST_TIMEOUT}s" ;;
	*) echo "@@ RESULT FAIL $name exit status $rc" ;;
	esac
	kmsg "end $name"
	return 0
}

fail() { echo "FAIL: $*"; exit 1; }
skip() { echo "skip: $*"; exit $SKIP; }

# expect_eq WHAT ACTUAL EXPECTED
expect_eq() {
	[ "$2" = "$3" ] || fail "$1: got '$2', expected '$3'"
}

# Loads a module with one finit_module() call; prints the errno name on failure.
load() { gdrpeer-vmtool insmod "$@"; }
unload() { rmmod "$1" 2>/dev/null || true; }
# Unloads modules in order, each given up to 5 s: a closed file's or a revoked region's
# reference on gdrpeer is put from gdrpeer's workqueue, just after close or the callback
# returns, so an rmmod at once may find it still held (EAGAIN).
unload_wait() {
	for m in "$@"; do
		tries=5
		until rmmod "$m" 2>/dev/null; do
			tries=$((tries - 1))
			[ $tries -gt 0 ] || { rmmod "$m"; return 1; }
			sleep 1
		done
	done
}
unload_all() { for m in gdrnic gdrpeer nvsim planted; do unload $m; done; }
# Unloads the NVIDIA stand-in and everything built on it, users first.
unload_nv_stack() { for m in gdrnic gdrpeer p2pclient nvsim; do unload $m; done; }

# Reports the cases of a KUnit suite that ran at insmod as tests of their own.
kunit_results() {
	suite=$1
	if [ -n "$TEST_FILTER" ] && ! echo "kunit.$suite" | grep -qE "$TEST_FILTER"; then
		return 0
	fi
	f=/sys/kernel/debug/kunit/$suite/results
	[ -f "$f" ] || { echo "@@ RESULT FAIL kunit.$suite no results in $f"; return; }
	cat "$f"
	n=0
	while read -r line; do
		case "$line" in
		"ok "*"# SKIP"*) echo "@@ RESULT SKIP kunit.$suite.$(echo "$line" | awk '{print $3}')" ;;
		"ok "*) echo "@@ RESULT PASS kunit.$suite.$(echo "$line" | awk '{print $3}')"; n=$((n + 1)) ;;
		"not ok "*) echo "@@ RESULT FAIL kunit.$suite.$(echo "$line" | awk '{print $4}')"; n=$((n + 1)) ;;
		esac
	done <<EOT
$(sed -n 's/^    \(\(not \)\{0,1\}ok [0-9]\)/\1/p' "$f")
EOT
	[ $n -gt 0 ] || echo "@@ RESULT FAIL kunit.$suite no test cases found"
}

run_all() {
	echo 3 >/proc/sys/kernel/printk_ratelimit_burst 2>/dev/null
	# The benchmark kernel has no kmemleak.
	kmemleak=/sys/kernel/debug/kmemleak
	[ -e $kmemleak ] && echo clear >$kmemleak
	run_plan
	unload_all
	[ -e $kmemleak ] || return 0
	# kmemleak ignores objects younger than 5 s: let the last ones age.
	sleep 6
	kmsg "begin kmemleak-scan"
	# A report needs two scans (the first records each object's checksum).
	echo scan >/sys/kernel/debug/kmemleak
	echo scan >/sys/kernel/debug/kmemleak
	to_kmsg </sys/kernel/debug/kmemleak
	kmsg "end kmemleak-scan"
}
