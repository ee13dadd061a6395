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

# gdrpeer-test reports one result per case (Documentation/dev/testing.rst). A small
# region limit lets it see LRU eviction. GDRPEER_FILTER picks the cases (the
# plan's filter by default), GDRPEER_SUFFIX is appended to their names,
# GDRPEER_PARAMS replaces gdrpeer.ko's parameters, GDRPEER_MODE (--large) picks
# another table than the default run's, and the arguments go to nvsim.ko.
gdrpeer_suite() {
	unload_nv_stack
	load $M/nvsim.ko "$@" || { echo "@@ RESULT FAIL gdrpeer-suite$GDRPEER_SUFFIX nvsim-load"; return; }
	load $M/p2pclient.ko || { echo "@@ RESULT FAIL gdrpeer-suite p2pclient-load"; unload nvsim; return; }
	load $M/gdrpeer.ko ${GDRPEER_PARAMS:-cache_max_regions=4} ||
		{ echo "@@ RESULT FAIL gdrpeer-suite gdrpeer-load"; unload p2pclient; unload nvsim; return; }
	results gdrpeer-test "$GDRPEER_SUFFIX" gdrpeer-test $GDRPEER_MODE "${GDRPEER_FILTER:-$TEST_FILTER}"
	rmmod gdrpeer || echo "@@ RESULT FAIL gdrpeer-rmmod-after-suite$GDRPEER_SUFFIX"
	unload p2pclient
	unload nvsim
}

# gdrpeer-test --nic (GDRNIC_FILTER picks the cases, GDRNIC_SUFFIX is appended
# to their names, GDRNIC_GDRPEER_PARAMS are added to gdrpeer.ko's parameters,
# and the arguments go to nvsim.ko): data moved by P2P DMA
# between the GPU BAR and edu. The
# edu engine takes 100 ms a DMA, so an invalidate callback that waits for one
# may take 200 ms: gdrpeer warns only past 1 s here.
gdrnic_suite() {
	unload_nv_stack
	load $M/nvsim.ko "$@" && load $M/p2pclient.ko &&
		load $M/gdrpeer.ko invalidate_warn_ms=1000 $GDRNIC_GDRPEER_PARAMS &&
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
# --- The gdrpeer crate's examples and libgdrpeer (Documentation/user/library.rst)

# test_crate_example NAME: userspace/gdrpeer/examples/NAME.rs (staged as
# gdrpeer-example-NAME) over nvsim and the simulated libcuda; each checks what
# it shows and prints "ok" last.
test_crate_example() {
	ensure_loaded nvsim gdrpeer
	out=$(gdrpeer-example-$1 2>&1) || fail "gdrpeer-example-$1: $out"
	echo "$out"
	[ "$(echo "$out" | tail -n1)" = ok ] || fail "gdrpeer-example-$1 did not finish"
}

# The C test program of libgdrpeer (tests/libgdrpeer), linked against
# libgdrpeer.so.0: every check must pass.
test_libgdrpeer_c() {
	ensure_loaded nvsim gdrpeer
	rc=0
	out=$(libgdrpeer-test 2>&1) || rc=$?
	echo "$out"
	[ "$rc" -eq 0 ] || fail "libgdrpeer-test exited with status $rc: $(echo "$out" | grep '^FAIL')"
	for c in open-missing-node version pin-map-copy bad-input export-dmabuf events; do
		echo "$out" | grep -q "^PASS $c$" || fail "libgdrpeer-test: $c did not pass"
	done
}

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
	# The timeout counts from the free too: a free later than the timeout is waited for.
	out=$(gdrpeer events --alloc 0x200000 --free-after 2 --timeout 1 2>&1) ||
		fail "a free after the timeout: $out"
	echo "$out" | grep -q "^revoked handle " || fail "a free after the timeout: no event: $out"
}

# gdrpeer doctor (Documentation/user/doctor.rst) on the guest: nvsim's GPU on ivshmem and
# gdrnic's edu NIC, both on the root bus. $1 is what the IOMMU line must begin with
# ("ok    iommu: off:" on the pc machine, "warn  iommu: translated, strict" behind
# intel-iommu). With everything loaded nothing blocks (status 0); --json says the same.
test_cli_doctor() {
	unload_nv_stack
	load $M/nvsim.ko && load $M/gdrpeer.ko && load $M/gdrnic.ko || fail "load nvsim, gdrpeer, gdrnic"
	gpu=$(basename /sys/bus/pci/drivers/nvsim/0000:*)
	edu=$(basename /sys/bus/pci/drivers/gdrnic/0000:*)
	out=$(gdrpeer doctor 2>&1)
	rc=$?
	echo "$out"
	expect_eq "doctor's exit status" "$rc" 0
	for want in \
		"^ok    kernel-rust: " \
		"^warn  nvidia: nvsim (the simulator, standing in for nvidia), open flavour.*; nv-p2p: [0-9]* functions, page tables 2\.0 -- fix: " \
		"^ok    gdrpeer: gdrpeer is loaded, .*cache_max_regions=1024" \
		"^ok    device /dev/gdrpeer: [a-z0-9]*:[a-z0-9]* mode 0[0-7]*, openable by this user$" \
		"^ok    device /dev/gdrdrv: [a-z0-9]*:[a-z0-9]* mode 0[0-7]*, openable by this user$" \
		"^$1" \
		"^[a-z]*  *bar1 $gpu: simulated GPU (nvsim on ivshmem BAR 2): BAR1 [1-9][0-9]* MiB, 0 MiB of [1-9][0-9]* MiB in use (0%, nvsim's debugfs stats)$" \
		"^warn  pcie-path $gpu $edu: GPU $gpu to $edu (gdrnic, the sample NIC): through the host bridge, one CPU (PHB); acceptable in NVIDIA's rule" \
		"^ok    secure-boot: Secure Boot off (not booted by EFI)" \
		"^[a-z]*  *module-signature: " \
		"^doctor: [0-9]* ok, [0-9]* warn, 0 FAIL$"; do
		echo "$out" | grep -q "$want" || fail "no line matching '$want'"
	done
	# The JSON: it parses, and says what the lines say.
	json=$(gdrpeer doctor --json) || fail "doctor --json: exit status $?"
	flat=$(echo "$json" | gdrpeer-vmtool json) || fail "doctor --json is not JSON: $json"
	echo "$flat" | grep -q "^exit_status	0$" || fail "JSON exit_status: $flat"
	lines=$(echo "$out" | grep -vc "^doctor: ")
	expect_eq "checks in the JSON" "$(echo "$flat" | grep -c '^checks\.[0-9]*\.check	')" "$lines"
	i=$(echo "$flat" | sed -n "s/^checks\.\([0-9]*\)\.check	pcie-path $gpu $edu$/\1/p")
	[ -n "$i" ] || fail "no pcie-path check in the JSON"
	echo "$flat" | grep -q "^checks\.$i\.facts\.link	host-bridge$" || fail "JSON link: $flat"
	echo "$flat" | grep -q "^checks\.$i\.facts\.peer_kind	gdrnic, the sample NIC$" || fail "JSON peer_kind"
	unload_nv_stack
}

# gdrpeer doctor without gdrpeer loaded (nvsim only): exit status 1, the FAIL lines
# name the fix, and --json says fail.
test_cli_doctor_without_gdrpeer() {
	unload_nv_stack
	load $M/nvsim.ko || fail "load nvsim"
	out=$(gdrpeer doctor 2>&1)
	rc=$?
	echo "$out"
	expect_eq "doctor's exit status" "$rc" 1
	echo "$out" | grep -q "^FAIL  gdrpeer: gdrpeer is not loaded -- fix: .*modprobe gdrpeer" ||
		fail "no FAIL line for gdrpeer with its fix"
	echo "$out" | grep -q "^FAIL  device /dev/gdrpeer: /dev/gdrpeer does not exist -- fix: load gdrpeer" ||
		fail "no FAIL line for /dev/gdrpeer with its fix"
	echo "$out" | grep -q "^doctor: [0-9]* ok, [0-9]* warn, [1-9][0-9]* FAIL: " || fail "no summary"
	flat=$(gdrpeer doctor --json | gdrpeer-vmtool json) || fail "doctor --json is not JSON"
	echo "$flat" | grep -q "^exit_status	1$" || fail "JSON exit_status: $flat"
	echo "$flat" | grep -q "^status	fail$" || fail "JSON status: $flat"
	out=$(gdrpeer doctor --bogus 2>&1)
	expect_eq "a usage error's exit status" "$?" 2
	unload_nv_stack
}

# --- gdrcopy's sanity scenarios over (simulated) libcuda ----------------------

# gdrpeer-test --cuda with the module; --cuda-only without it (what runs on a
# GPU machine without gdrpeer.ko). CUDA_SUFFIX is appended to the names.
cuda_suite() {
	unload_nv_stack
	load $M/nvsim.ko || { echo "@@ RESULT FAIL cuda-suite$CUDA_SUFFIX nvsim-load"; return; }
	results gdrpeer-test-cuda-only "-without-module$CUDA_SUFFIX" gdrpeer-test --cuda-only "$TEST_FILTER"
	# The simulated libcuda's answers against a record of real CUDA's on an H100
	# (tests/cuda-trace): every difference not listed with its reason fails.
	if [ -z "$TEST_FILTER" ] || echo libcuda-sim-answers-as-recorded-cuda | grep -qE "$TEST_FILTER"; then
		results libcuda-sim "$CUDA_SUFFIX" gdrpeer-test --cuda-probe \
			--against $GDRPEER/share/cuda-trace/h100-580.159.04.txt \
			--differences $GDRPEER/share/cuda-trace/sim-differences.txt \
			--not-recorded $GDRPEER/share/cuda-trace/not-recorded.txt
	fi
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

# --- NVIDIA's proprietary flavour is refused (Documentation/dev/building.rst) ----

# gdrpeer needs NVIDIA's open kernel modules. Every export of the Rust kernel
# crate is EXPORT_SYMBOL_GPL, and since Linux 5.9 the kernel refuses a module
# that uses GPL-only symbols together with symbols of a proprietary module.
# nvidia-proprietary.ko (tests/nvprop) is nvidia.ko as the proprietary
# flavour: the nv-p2p exports with nvsim's CRCs, MODULE_LICENSE("NVIDIA").
# gdrpeer's load must fail with the kernel's message naming nvidia, and work
# again once nvsim (MIT/GPL, as the open flavour) is back.
# Loading it taints the kernel (P) and turns lockdep off: run it last.
test_proprietary_nvidia_refused() {
	unload_nv_stack
	load $M/nvidia-proprietary.ko || fail "the proprietary stand-in did not load"
	taint=$(cat /sys/module/nvidia/taint 2>/dev/null)
	case $taint in *P*) ;; *) fail "the stand-in is not marked proprietary (taint '$taint')" ;; esac
	err=$(load $M/gdrpeer.ko) && { unload gdrpeer; unload nvidia; fail "gdrpeer.ko loaded next to a proprietary nvidia"; }
	echo "gdrpeer's finit_module: $err"
	log_since_begin | grep "gdrpeer: "
	unload nvidia
	grep -q '^gdrpeer ' /proc/modules && fail "gdrpeer in /proc/modules"
	expect_eq "insmod errno" "$err" ENOENT
	log_since_begin | grep -q "gdrpeer: module using GPL-only symbols uses symbols nvidia_p2p_[a-z_]* from proprietary module nvidia" ||
		fail "no 'module using GPL-only symbols uses symbols ... from proprietary module nvidia' message"
	load $M/nvsim.ko && load $M/gdrpeer.ko || fail "gdrpeer did not load next to nvsim after the refusal"
	unload_nv_stack
}
