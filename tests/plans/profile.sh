# SPDX-License-Identifier: GPL-2.0
# `make profile`: where a cache hit spends its time. Samples gdrpeer-bench
# with perf's cpu-clock (QEMU's TCG has no PMU), in user space and in the
# kernel, while it repeats a PIN hit and its UNPIN, then the same hit of a
# random one of 65,536 and of 16 cached regions (P4's two cache sizes), then
# the null ioctl for comparison, then a miss (a NOCACHE PIN and its UNPIN, which pin and unpin
# through nvsim), then cuMemFree of a pinned buffer (NVIDIA's free callback)
# and of one nobody pinned, then gdrcopy's apiperf loop through /dev/gdrdrv
# (pin, map, get_info, unmap, unpin, cached), then the sample NIC's REG + DEREG
# of a cached region through the kernel API, and prints the symbols above 0.5%
# of the samples. Arguments (tests/vm/run ... profile ARGS): repetitions of each
# loop, 200000 by default, then optionally the loops to run (all by default),
# e.g. `20000 apiperf`.

. $GDRPEER/plans/lib-load.sh

# profile_loop OP REPS: where the samples fell: user space, the kernel or a
# module, then by kernel symbol. perf 6.1 charges some samples of one module
# to another, so the kernel addresses are looked up in /proc/kallsyms here.
profile_loop() {
	echo "== gdrpeer-bench loop $1"
	# Sampling from the first timed repetition to the last: the loop's set-up
	# (65,536 pins for hit-many) and warm-up are not in the profile.
	rm -f /tmp/perf-ctl /tmp/perf-ack
	mkfifo /tmp/perf-ctl /tmp/perf-ack || return 1
	perf record -q -N -e cpu-clock -c 20000 -D -1 \
		--control fifo:/tmp/perf-ctl,/tmp/perf-ack -o /tmp/perf-$1.data -- \
		gdrpeer-bench loop "$1" --reps "$2" \
		--perf-control /tmp/perf-ctl /tmp/perf-ack || return 1
	perf script -i /tmp/perf-$1.data -F ip 2>/dev/null | awk '{ print $1 }' >/tmp/ips
	total=$(wc -l </tmp/ips)
	echo "-- samples: $total; by where they fell, then by kernel symbol (>= 0.5%)"
	{
		awk '$1 ~ /^ffff/ { print $1 " 0 " $3 " " $4 }' /proc/kallsyms
		grep '^ffff' /tmp/ips | sed 's/$/ 1/'
	} | sort | awk -v total="$total" '
		$2 == 0 { sym = $3; mod = $4 == "" ? "[kernel]" : $4; next }
		{ n[sym " " mod]++; m[mod]++; kernel++ }
		END {
			printf "1 %6.2f%%  [user space]\n", 100 * (total - kernel) / total
			for (s in m) printf "1 %6.2f%%  %s\n", 100 * m[s] / total, s
			for (s in n) if (n[s] * 200 >= total)
				printf "2 %6.2f%%  %s\n", 100 * n[s] / total, s
		}' | sort -k1,1n -k2,2rn | cut -c3-
}

profile() {
	set -- $(cat $GDRPEER/plan.args)
	reps=${1:-200000}
	[ $# -gt 0 ] && shift
	loops=${*:-hit hit-many hit-few null miss inval free apiperf kapi kapi-loop}
	export HOME=/tmp
	# Whole-page CUDA allocations, as make bench makes them (lib-load.sh).
	export LIBCUDA_SIM_SUBALLOC=0
	# perf takes the modules' symbols from /proc/kallsyms.
	echo 0 >/proc/sys/kernel/kptr_restrict
	unload_nv_stack
	load $GDRPEER/modules/nvsim.ko &&
		load $GDRPEER/modules/gdrpeer.ko cache_max_regions=0 &&
		load $GDRPEER/modules/gdrnic.ko || fail "load"
	# A miss sleeps in nvsim's pin cost (samples count only time on a CPU); the
	# apiperf loop is a mapping and an unmapping too.
	rc=0
	for op in $loops; do
		case $op in
		hit | hit-many | hit-few | null | kapi) n=$reps ;;
		kapi-loop) n=$((reps / 16)) ;;
		apiperf) n=$((reps / 10)) ;;
		*) n=$((reps / 50)) ;;
		esac
		profile_loop $op $n || { rc=1; break; }
	done
	unload_nv_stack
	return $rc
}

run_plan() {
	TEST_TIMEOUT=${PROFILE_TIMEOUT:-3600} t profile profile
}
