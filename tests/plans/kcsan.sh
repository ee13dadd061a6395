# SPDX-License-Identifier: GPL-2.0
# `make stress`, on the KCSAN kernel (GDRPEER_KERNEL=kcsan, tests/vm/long
# kcsan): a planted data race first, to prove that KCSAN sees races in module
# code and the host oracle charges them to this project, then the stress and
# fuzz runs. Arguments (tests/vm/run ... kcsan ARGS): OPS PROCS THREADS SEED
# of the stress run and CALLS THREADS SEED of the fuzz run, by default
# 1000000 4 4 1 1000000 4 1.

. $GDRPEER/plans/lib-load.sh

KCSAN=/sys/kernel/debug/kcsan

kcsan_count() { sed -n "s/^$1: //p" $KCSAN; }

# What KCSAN did during a run: watchpoints set up, conflicting accesses that
# hit one (data_races: reported or not; one that did not change the value is
# not, nor a repeat within KCSAN_REPORT_ONCE_IN_MS) and races of unknown origin.
kcsan_stats() {
	echo "kcsan: $1: $(($(kcsan_count setup_watchpoints) - $2)) watchpoints set up," \
		"$(($(kcsan_count data_races) - $3)) conflicting accesses caught," \
		"$(($(kcsan_count races_unknown_origin) - $4)) races of unknown origin"
}

# kcsan_run NAME FUNCTION ARGS...: a run, with KCSAN's counters around it.
kcsan_run() {
	name=$1; shift
	[ -f $KCSAN ] || fail "not a KCSAN kernel ($KCSAN missing)"
	w=$(kcsan_count setup_watchpoints) r=$(kcsan_count data_races)
	u=$(kcsan_count races_unknown_origin)
	"$@"
	rc=$?
	kcsan_stats "$name" "$w" "$r" "$u"
	return $rc
}

# KCSAN's reports of a race in planted.ko so far.
planted_reports() { dmesg | grep -c 'BUG: KCSAN: .*\[planted\]'; }

test_kcsan_sees_a_planted_race() {
	[ -f $KCSAN ] || fail "not a KCSAN kernel ($KCSAN missing)"
	load $GDRPEER/modules/planted.ko || fail "planted.ko"
	before=$(planted_reports)
	kmsg "expect-reports kcsan"
	for try in 1 2 3 4 5; do
		echo race >/sys/kernel/debug/planted/trigger
		[ "$(planted_reports)" -gt "$before" ] && break
	done
	kmsg "end-expect"
	rmmod planted
	[ "$(planted_reports)" -gt "$before" ] ||
		fail "KCSAN reported no race in 5 s of a planted one"
	echo "KCSAN reported the planted race after $try second(s) of racing"
}

run_plan() {
	set -- $(cat $GDRPEER/plan.args)
	t kcsan-sees-a-planted-race test_kcsan_sees_a_planted_race
	TEST_TIMEOUT=${STRESS_TIMEOUT:-7200} t stress kcsan_run stress \
		stress_run "${1:-1000000}" "${2:-4}" "${3:-4}" "${4:-1}"
	TEST_TIMEOUT=${FUZZ_TIMEOUT:-7200} t fuzz kcsan_run fuzz \
		fuzz_run "${5:-1000000}" "${6:-4}" "${7:-1}"
}
