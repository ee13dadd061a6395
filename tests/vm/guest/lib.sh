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

# --- nvsim's misuse counters --------------------------------------------------
#
# nvsim counts what a client does that the real driver would punish
# (client_errors: calls on tables it freed, put_pages with mappings live, ...)
# and writes into freed GPU memory (freed_page_writes). Every test and suite is
# judged by them, whatever program it ran: after each test (`t`) and before
# each rmmod of nvsim, the counters are compared with their last judged values
# (zero at load); growth fails the test, or, outside a test, is reported as a
# failure naming the suite (nvsim-misuse).
NVSIM_DEBUGFS=${NVSIM_DEBUGFS:-/sys/kernel/debug/nvsim}
NVSIM_JUDGED=${NVSIM_JUDGED:-/tmp/nvsim-judged}
NVSIM_MISUSE=${NVSIM_MISUSE:-/tmp/nvsim-misuse}
NVSIM_ZERO="client_errors 0, freed_page_writes 0"

# The counters, once nvsim checked every freed page's poison.
nvsim_misuse() {
	echo 1 >$NVSIM_DEBUGFS/check_freed 2>/dev/null
	awk '$1 == "client_errors" || $1 == "freed_page_writes" {
		printf "%s%s %s", sep, $1, $2; sep = ", " }' $NVSIM_DEBUGFS/stats
}

# nvsim_judge WHERE: records growth of the counters since last judged.
nvsim_judge() {
	[ -e $NVSIM_DEBUGFS/stats ] || return 0
	now=$(nvsim_misuse)
	last=$(cat $NVSIM_JUDGED 2>/dev/null)
	last=${last:-$NVSIM_ZERO}
	echo "$now" >$NVSIM_JUDGED
	[ "$now" = "$last" ] && return 0
	echo "nvsim's misuse counters grew during $1: ${now:-(unreadable)} (were $last)" >>$NVSIM_MISUSE
}

# Reports what nvsim_judge recorded outside any test, each a failure of its own.
nvsim_flush() {
	[ -s $NVSIM_MISUSE ] || return 0
	while IFS= read -r line; do echo "@@ RESULT FAIL nvsim-misuse $line"; done <$NVSIM_MISUSE
	: >$NVSIM_MISUSE
}

# Every rmmod of nvsim, by the plans or the library, judges it first.
rmmod() {
	for m in "$@"; do
		[ "$m" != nvsim ] || nvsim_judge "${IN_TEST:-${SUITE:-the plan}}"
	done
	command rmmod "$@"
}

# --- kmemleak -------------------------------------------------------------------
KMEMLEAK=/sys/kernel/debug/kmemleak

# kmemleak_scan: scans, writes every unreferenced object kmemleak lists (with its
# allocation backtrace) into the kernel log, where the host judges each one, and
# clears the list, so that the next scan lists only later leaks. Prints how many
# objects it listed.
kmemleak_scan() {
	# kmemleak ignores objects younger than 5 s: let the last ones age.
	sleep 6
	# A report needs two scans (the first records each object's checksum).
	echo scan >$KMEMLEAK
	echo scan >$KMEMLEAK
	to_kmsg <$KMEMLEAK
	grep -c '^unreferenced object' $KMEMLEAK
	echo clear >$KMEMLEAK
}

# Copies stdin to the kernel log line by line (one write per record).
to_kmsg() { while IFS= read -r line; do echo "$line" >/dev/kmsg; done; }

# t NAME FUNCTION [ARGS...]: run one test, bounded in time.
t() {
	name=$1; shift
	if [ -n "$TEST_FILTER" ] && ! echo "$name" | grep -qE "$TEST_FILTER"; then
		return 0
	fi
	nvsim_flush
	kmsg "begin $name"
	echo "--- $name"
	IN_TEST=$name SUITE=
	( "$@" ) &
	pid=$!
	# A test past its time: the kernel's blocked tasks (sysrq w) go to the log
	# first, to tell a hang from a slow run.
	( sleep "$TEST_TIMEOUT"
	  echo "gdrpeer-test: $name timed out: blocked tasks follow" >/dev/kmsg
	  echo w >/proc/sysrq-trigger 2>/dev/null
	  kill -9 $pid 2>/dev/null ) &
	watchdog=$!
	wait $pid
	rc=$?
	kill $watchdog 2>/dev/null
	wait $watchdog 2>/dev/null
	nvsim_judge "$name"
	IN_TEST=
	misuse=""
	if [ -s $NVSIM_MISUSE ]; then
		misuse=$(tr '\n' ' ' <$NVSIM_MISUSE)
		: >$NVSIM_MISUSE
		echo "FAIL: $misuse"
	fi
	case $rc in
	0 | 77) [ -z "$misuse" ] || rc=misuse ;;
	esac
	case $rc in
	0) echo "@@ RESULT PASS $name" ;;
	77) echo "@@ RESULT SKIP $name" ;;
	misuse) echo "@@ RESULT FAIL $name $misuse" ;;
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
# A freshly loaded nvsim's misuse counters are zero. Every load of nvsim.ko gets
# the plan's NVSIM_PARAMS too (the callback rule a plan runs under, say), after
# the caller's parameters.
load() {
	case $1 in
	*/nvsim.ko) gdrpeer-vmtool insmod "$@" $NVSIM_PARAMS || return ;;
	*) gdrpeer-vmtool insmod "$@" || return ;;
	esac
	case $1 in */nvsim*.ko) echo "$NVSIM_ZERO" >$NVSIM_JUDGED ;; esac
}
unload() { rmmod "$1" 2>/dev/null || true; }
# Unloads modules in order, each given up to 5 s: a revoked region's reference on gdrpeer
# is put from gdrpeer's workqueue, just after the callback returns, and a file closed by
# another task (a child's exit) is released a little after, so an rmmod at once may find
# the module still held (EAGAIN).
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
unload_all() { for m in gdrnic gdrpeer p2pclient nvsim planted; do unload $m; done; }
# Unloads the NVIDIA stand-in and everything built on it, users first.
unload_nv_stack() { for m in gdrnic gdrpeer p2pclient nvsim; do unload $m; done; }

# Reports the cases of a KUnit suite that ran at insmod as tests of their own.
kunit_results() {
	suite=$1
	nvsim_flush
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
	# The benchmark kernel has no kmemleak. What the boot left is not ours.
	[ -e $KMEMLEAK ] && echo clear >$KMEMLEAK
	run_plan
	SUITE="the plan's end (unload_all)"
	unload_all
	nvsim_flush
	[ -e $KMEMLEAK ] || return 0
	kmsg "begin kmemleak-scan"
	kmemleak_scan >/dev/null
	kmsg "end kmemleak-scan"
}
