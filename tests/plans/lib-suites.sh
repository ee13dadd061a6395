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

# --- Registration of /dev/gdrdrv (src/gdrdrv.rs, Gdrdrv::register) -----------

# The kernel log since the current test began (t writes "begin NAME").
log_since_begin() { dmesg | sed -n "/gdrpeer-test: begin $name\$/,\$p"; }

# /dev/gdrpeer works: a buffer pinned and freed gives its revocation event.
gdrpeer_works() {
	out=$(gdrpeer events --alloc 65536 --free-after 1 --timeout 10 2>&1) ||
		fail "/dev/gdrpeer: gdrpeer events: $out"
	[ "$(echo "$out" | grep -c '^revoked handle ')" -eq 1 ] ||
		fail "/dev/gdrpeer: not one revoked handle: $out"
}

# gdrpeer.ko gdrdrv=0 registers no /dev/gdrdrv, says why, and /dev/gdrpeer
# works without it.
test_gdrdrv_param_off() {
	unload_nv_stack
	load $M/nvsim.ko && load $M/gdrpeer.ko gdrdrv=0 || fail "load nvsim, gdrpeer gdrdrv=0"
	[ -e /dev/gdrdrv ] && fail "/dev/gdrdrv registered with gdrdrv=0"
	log_since_begin | grep -q "gdrpeer: gdrdrv=0: the gdrdrv-compatible device is not registered" ||
		fail "no 'gdrdrv=0: ... not registered' message"
	gdrpeer_works
	out=$(gdrpeer gdrdrv-info 2>&1) && fail "gdrpeer gdrdrv-info worked without /dev/gdrdrv: $out"
	unload_nv_stack
	[ ! -e /dev/gdrpeer ] || fail "/dev/gdrpeer left behind"
}

# A /dev/gdrdrv of another driver (nvsim's stand-in for gdrcopy's gdrdrv,
# gdrdrv_standin=1, which answers nothing): gdrpeer loads, says why it did not
# register its own, /dev/gdrpeer works, and the other device stays, before
# and after gdrpeer's unload.
test_gdrdrv_name_taken() {
	unload_nv_stack
	load $M/nvsim.ko gdrdrv_standin=1 || fail "load nvsim gdrdrv_standin=1"
	[ -c /dev/gdrdrv ] || fail "no stand-in /dev/gdrdrv"
	standin=$(cat /sys/class/misc/gdrdrv/dev) || fail "the stand-in's device number"
	load $M/gdrpeer.ko || fail "gdrpeer.ko did not load beside another /dev/gdrdrv"
	log_since_begin | grep -q "gdrpeer: /dev/gdrdrv exists (gdrcopy's gdrdrv?): the gdrdrv-compatible device is not registered" ||
		fail "no '/dev/gdrdrv exists ... not registered' message"
	log_since_begin | grep -q "gdrpeer: /dev/gdrdrv: gdrdrv ABI" &&
		fail "gdrpeer registered a gdrdrv device anyway"
	expect_eq "/dev/gdrdrv's device number" "$(cat /sys/class/misc/gdrdrv/dev)" "$standin"
	# The stand-in answers nothing: gdrdrv's GET_VERSION is refused.
	out=$(gdrpeer gdrdrv-info 2>&1) && fail "/dev/gdrdrv answered as gdrpeer's would: $out"
	gdrpeer_works
	unload gdrpeer
	[ -e /dev/gdrpeer ] && fail "gdrpeer did not unload"
	[ -c /dev/gdrdrv ] || fail "the stand-in /dev/gdrdrv went with gdrpeer"
	expect_eq "/dev/gdrdrv's device number after gdrpeer" "$(cat /sys/class/misc/gdrdrv/dev)" "$standin"
	unload nvsim
	[ ! -e /dev/gdrdrv ] || fail "/dev/gdrdrv left behind by nvsim"
}
