# SPDX-License-Identifier: GPL-2.0
# The demo's steps (`make demo`, and the stock kernels' plan): the main job end
# to end, told step by step. Sourced by plans.

M=$GDRPEER/modules

demo_chain() {
	echo "# nvsim.ko stands in for nvidia.ko: it binds the ivshmem device (GPU BAR1)"
	load $M/nvsim.ko || fail "nvsim"
	dmesg | grep 'nvsim' | tail -n 2
	echo "# gdrpeer.ko, linked against nvsim's symbol versions"
	load $M/gdrpeer.ko || fail "gdrpeer"
	dmesg | grep 'gdrpeer:' | tail -n 1
	ls -l /dev/gdrpeer
	echo "# user space asks the module for its versions"
	gdrpeer info || fail "gdrpeer info"
	echo "# unload in reverse order"
	unload_wait gdrpeer nvsim || fail "rmmod"
	cat /proc/modules
}

demo_pin_cache_revoke() {
	echo "# nvsim, then gdrpeer; the edu device is the DMA peer"
	load $M/nvsim.ko || fail "nvsim"
	load $M/gdrpeer.ko || fail "gdrpeer"
	gdrpeer-test --demo || fail "demo"
	echo "# gdrpeer's global counters (debugfs gdrpeer/stats)"
	cat /sys/kernel/debug/gdrpeer/stats
	echo "# and through the STATS ioctl"
	gdrpeer stats || fail "gdrpeer stats"
	echo "# the user-space registration cache over (simulated) libcuda: gdrpeer demo"
	gdrpeer demo || fail "gdrpeer demo"
	unload_wait gdrpeer nvsim || fail "rmmod"
}

demo_mmap() {
	echo "# nvsim, then gdrpeer; the program uses (simulated) libcuda"
	load $M/nvsim.ko || fail "nvsim"
	load $M/gdrpeer.ko || fail "gdrpeer"
	gdrpeer-test --demo-mmap || fail "demo"
	unload_wait gdrpeer nvsim || fail "rmmod"
}

demo_nic_round_trip() {
	echo "# the chain: nvsim (nvidia.ko), gdrpeer, and the sample NIC driver gdrnic,"
	echo "# each linked against the symbol versions of the one before"
	load $M/nvsim.ko && load $M/gdrpeer.ko && load $M/gdrnic.ko || fail "load"
	dmesg | grep 'gdrnic' | tail -n 1
	gdrpeer-test --demo-nic || fail "demo"
	unload_wait gdrnic gdrpeer nvsim || fail "rmmod"
}

demo_dmabuf() {
	echo "# nvsim, gdrpeer and the sample NIC; the program uses (simulated) libcuda"
	load $M/nvsim.ko && load $M/gdrpeer.ko invalidate_warn_ms=1000 && load $M/gdrnic.ko ||
		fail "load"
	gdrpeer-test --demo-dmabuf || fail "demo"
	echo "# gdrnic's counters (debugfs gdrnic/stats)"
	cat /sys/kernel/debug/gdrnic/stats
	unload_wait gdrnic gdrpeer nvsim || fail "rmmod"
}

demo_dmabuf_pinned() {
	echo "# nvsim, gdrpeer and the sample NIC; the program uses (simulated) libcuda"
	load $M/nvsim.ko && load $M/gdrpeer.ko && load $M/gdrnic.ko || fail "load"
	gdrpeer-test --demo-dmabuf-pinned || fail "demo"
	unload_wait gdrnic gdrpeer nvsim || fail "rmmod"
}

# gdrpeer doctor (Documentation/user/doctor.rst) before gdrpeer is loaded, then with
# everything loaded: what would stop GPUDirect, each with its fix, then nothing.
demo_doctor() {
	echo "# nvsim alone: doctor says what is missing and how to fix it (exit status 1)"
	load $M/nvsim.ko || fail "nvsim"
	gdrpeer doctor
	rc=$?
	[ "$rc" = 1 ] || fail "doctor's exit status without gdrpeer: $rc, not 1"
	echo "# gdrpeer and the sample NIC loaded: nothing stops GPUDirect (exit status 0)"
	load $M/gdrpeer.ko && load $M/gdrnic.ko || fail "load"
	gdrpeer doctor || fail "doctor's exit status with gdrpeer loaded: $?, not 0"
	unload_wait gdrnic gdrpeer nvsim || fail "rmmod"
}
