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

# results NAME SUFFIX CMD...: runs CMD, a program printing `@@ RESULT` lines,
# appends SUFFIX to their names, and reports an exit status above 1 (a crash,
# or a program that could not start or found no CUDA library: 1 means some test
# failed and said so) as a failure of NAME. NAME is the suite that nvsim's
# misuse counters charge until the next one (lib.sh, nvsim_judge).
results() {
	rname=$1 rsuffix=$2
	SUITE=$rname$rsuffix
	shift 2
	{ "$@" 2>&1; echo $? >/tmp/results.rc; } |
		sed "s/^\(@@ RESULT [A-Z]* [^ ]*\)/\1$rsuffix/"
	rc=$(cat /tmp/results.rc)
	[ "$rc" -le 1 ] || echo "@@ RESULT FAIL $rname$rsuffix exited with status $rc"
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
	results gdrpeer-test "$GDRPEER_SUFFIX" gdrpeer-test "${GDRPEER_FILTER:-$TEST_FILTER}"
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
	results gdrnic-test "$GDRNIC_SUFFIX" gdrpeer-test --nic "${GDRNIC_FILTER:-$TEST_FILTER}"
	unload_nv_stack
}

# --- The command-line tool ---------------------------------------------------

# gdrpeer gdrdrv-info: what /dev/gdrdrv reports.
test_cli_gdrdrv_info() {
	ensure_loaded nvsim gdrpeer
	out=$(gdrpeer gdrdrv-info) || fail "gdrpeer gdrdrv-info failed: $out"
	echo "$out"
	echo "$out" | grep -q "gdrdrv version: *2\.6$" || fail "no gdrdrv version 2.6"
	echo "$out" | grep -q "use persistent mapping: *0$" || fail "no persistent-mapping attribute"
}

# gdrpeer events: two buffers pinned and freed one a second later each; one
# line per revoked handle, on both devices. Each is an allocation of its own
# (2 MiB or more): CUDA carves smaller ones out of shared blocks, and freeing
# one need not call anything back (nvsim's callback_per_buffer=0).
test_cli_events() {
	ensure_loaded nvsim gdrpeer
	for dev in "" --gdrdrv; do
		out=$(gdrpeer events $dev --alloc 0x200000 --alloc 0x600000 --free-after 1 --timeout 10 2>&1) ||
			fail "gdrpeer events $dev: $out"
		echo "$out"
		[ "$(echo "$out" | grep -c '^revoked handle ')" -eq 2 ] ||
			fail "gdrpeer events $dev: not two revoked handles"
		for h in $(echo "$out" | sed -n 's/^watching handle \([0-9]*\):.*/\1/p'); do
			echo "$out" | grep -q "^revoked handle $h$" || fail "handle $h not reported"
		done
	done
	out=$(gdrpeer events --alloc 65536 --timeout 1 2>&1) && fail "no timeout: $out"
	echo "$out" | grep -q "no event within 1 s" || fail "timeout message: $out"
}

# --- gdrcopy's sanity scenarios over (simulated) libcuda ----------------------

# gdrpeer-test --cuda with the module; --cuda-only without it (what runs on a
# GPU machine without gdrpeer.ko). CUDA_SUFFIX is appended to the names.
cuda_suite() {
	unload_nv_stack
	load $M/nvsim.ko || { echo "@@ RESULT FAIL cuda-suite$CUDA_SUFFIX nvsim-load"; return; }
	results gdrpeer-test-cuda-only "-without-module$CUDA_SUFFIX" gdrpeer-test --cuda-only "$TEST_FILTER"
	load $M/gdrpeer.ko ||
		{ echo "@@ RESULT FAIL cuda-suite$CUDA_SUFFIX gdrpeer-load"; unload nvsim; return; }
	results gdrpeer-test-cuda "$CUDA_SUFFIX" gdrpeer-test --cuda "$TEST_FILTER"
	unload_nv_stack
}

# --- /dev/gdrdrv from C, as a gdrcopy program uses it -------------------------

# tests/gdrdrv-client: one result per check, named gdrdrv-client-CHECK, with
# GDRDRV_CLIENT_SUFFIX appended.
gdrdrv_client_suite() {
	if [ -n "$TEST_FILTER" ] && ! echo gdrdrv-client | grep -qE "$TEST_FILTER"; then
		return
	fi
	unload_nv_stack
	SUITE=gdrdrv-client$GDRDRV_CLIENT_SUFFIX
	load $M/nvsim.ko && load $M/gdrpeer.ko ||
		{ echo "@@ RESULT FAIL gdrdrv-client$GDRDRV_CLIENT_SUFFIX load"; unload_nv_stack; return; }
	{ gdrdrv-client 2>&1; echo $? >/tmp/gdrdrv-client.rc; } |
		sed -e "s/^PASS \([^ ]*\)$/@@ RESULT PASS gdrdrv-client-\1$GDRDRV_CLIENT_SUFFIX/" \
			-e "s/^FAIL \([^ :]*\): /@@ RESULT FAIL gdrdrv-client-\1$GDRDRV_CLIENT_SUFFIX /"
	rc=$(cat /tmp/gdrdrv-client.rc)
	[ "$rc" -le 1 ] ||
		echo "@@ RESULT FAIL gdrdrv-client$GDRDRV_CLIENT_SUFFIX exited with status $rc"
	unload_nv_stack
}

# --- Registration of /dev/gdrdrv (src/gdrdrv.rs, Gdrdrv::register) -----------

# The kernel log since the current test began (t writes "begin NAME").
log_since_begin() { dmesg | sed -n "/gdrpeer-test: begin $name\$/,\$p"; }

# /dev/gdrpeer works: a buffer pinned and freed gives its revocation event.
gdrpeer_works() {
	out=$(gdrpeer events --alloc 0x200000 --free-after 1 --timeout 10 2>&1) ||
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
