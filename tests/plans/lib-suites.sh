# SPDX-License-Identifier: GPL-2.0
# The test suites that more than one plan runs (check.sh on the test kernel,
# stock.sh on the stock Debian kernels). Sourced by plans.

M=$GDRPEER/modules

# Loads each named module unless it is loaded already (tests can run alone).
ensure_loaded() {
	for m in "$@"; do
		grep -q "^$m " /proc/modules || load $M/$m.ko || fail "cannot load $m.ko"
	done
}

# gdrpeer-test reports one result per case (Documentation/testing.rst). A small
# region limit lets it see LRU eviction. GDRPEER_FILTER picks the cases (the
# plan's filter by default), GDRPEER_SUFFIX is appended to their names,
# GDRPEER_PARAMS replaces gdrpeer.ko's parameters, and the arguments go to
# nvsim.ko.
gdrpeer_suite() {
	unload_nv_stack
	load $M/nvsim.ko "$@" || { echo "@@ RESULT FAIL gdrpeer-suite$GDRPEER_SUFFIX nvsim-load"; return; }
	load $M/p2pclient.ko || { echo "@@ RESULT FAIL gdrpeer-suite p2pclient-load"; unload nvsim; return; }
	load $M/gdrpeer.ko ${GDRPEER_PARAMS:-cache_max_regions=4} ||
		{ echo "@@ RESULT FAIL gdrpeer-suite gdrpeer-load"; unload p2pclient; unload nvsim; return; }
	{ gdrpeer-test "${GDRPEER_FILTER:-$TEST_FILTER}" 2>&1; echo $? >/tmp/gdrpeer-test.rc; } |
		sed "s/^\(@@ RESULT [A-Z]* [^ ]*\)/\1$GDRPEER_SUFFIX/"
	rc=$(cat /tmp/gdrpeer-test.rc)
	[ "$rc" -le 1 ] || echo "@@ RESULT FAIL gdrpeer-test$GDRPEER_SUFFIX exited with status $rc"
	rmmod gdrpeer || echo "@@ RESULT FAIL gdrpeer-rmmod-after-suite$GDRPEER_SUFFIX"
	unload p2pclient
	unload nvsim
}

# gdrpeer-test --nic (GDRNIC_FILTER picks the cases, GDRNIC_SUFFIX is appended
# to their names, and the arguments go to nvsim.ko): data moved by P2P DMA
# between the GPU BAR and edu. The
# edu engine takes 100 ms a DMA, so an invalidate callback that waits for one
# may take 200 ms: gdrpeer warns only past 1 s here.
gdrnic_suite() {
	unload_nv_stack
	load $M/nvsim.ko "$@" && load $M/p2pclient.ko && load $M/gdrpeer.ko invalidate_warn_ms=1000 &&
		load $M/gdrnic.ko || { echo "@@ RESULT FAIL gdrnic-suite load"; unload_nv_stack; return; }
	{ gdrpeer-test --nic "${GDRNIC_FILTER:-$TEST_FILTER}" 2>&1; echo $? >/tmp/gdrnic-test.rc; } |
		sed "s/^\(@@ RESULT [A-Z]* [^ ]*\)/\1$GDRNIC_SUFFIX/"
	rc=$(cat /tmp/gdrnic-test.rc)
	[ "$rc" -le 1 ] || echo "@@ RESULT FAIL gdrnic-test$GDRNIC_SUFFIX exited with status $rc"
	unload_nv_stack
}
