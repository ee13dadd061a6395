# SPDX-License-Identifier: GPL-2.0
# Tests whose pass is a lockdep report, in a boot of their own: lockdep turns
# itself off after its first report, so check.sh can host only one (nvsim's).
# Sourced by the guest's /init after lib.sh; tests/vm/check runs it.

M=$GDRPEER/modules

# gdrnic's callback takes the file lock that its REG holds around
# gdrpeer_mr_pin(): lockdep must name the cycle through gdrpeer's
# gdrpeer_invalidate class, though this run never deadlocks.
gdrnic_lockdep_suite() {
	if [ -n "$TEST_FILTER" ] && ! echo gdrnic-lockdep | grep -qE "$TEST_FILTER"; then
		return 0
	fi
	SUITE=gdrnic-lockdep
	load $M/nvsim.ko && load $M/gdrpeer.ko && load $M/gdrnic.ko ||
		{ echo "@@ RESULT FAIL gdrnic-lockdep-suite load"; return; }
	# The cycle of gdrnic's file lock and gdrpeer's invalidation, nothing else.
	kmsg "expect-reports lockdep=&f->lock,gdrpeer_invalidate"
	gdrpeer-test --nic-lockdep
	rc=$?
	kmsg "end-expect"
	[ $rc -le 1 ] || echo "@@ RESULT FAIL gdrpeer-test --nic-lockdep exited with status $rc"
	unload gdrnic
	unload gdrpeer
	unload nvsim
}

run_plan() {
	gdrnic_lockdep_suite
}
