# SPDX-License-Identifier: GPL-2.0
# The plan `make check` runs on each stock Debian kernel (tests/vm/stock): its
# own vmlinuz, gdrpeer.ko as DKMS built and signed it (installed with apt from
# make deb's gdrpeer-dkms), nvsim, p2pclient, gdrnic and the proprietary
# stand-in (tests/nvprop) built against the same headers. Its first argument, the
# kernel's name (deb-7.2), is appended to every test's name. Its second, if
# `per-block`, runs everything under nvsim's callback rule for small buffers
# as the driver has it (callback_per_buffer=0, Documentation/dev/nvsim.rst: the
# free callback belongs to the pool block, so freeing a small cuMemAlloc
# buffer calls nothing back); otherwise under nvsim's default, the stricter
# per-buffer rule. tests/vm/check runs one stock kernel under each, so every
# suite here runs under both.
#
# These kernels have no sanitizers: a freed object is handed out again at once,
# as on every machine users run, so a stale pointer meets a live object instead
# of one that KASAN's quarantine holds back. The suites (gdrpeer-test's default
# run, --nic, --cuda over the simulated libcuda, the C gdrdrv client), the
# command-line tool's events and the short stress and fuzzing runs here are the
# sanitizer-free ones. KUnit, MODVERSIONS, lockdep
# and fault injection are not built into them: those cases run on the test
# kernel, and are reported skipped here, with the reason (gdrpeer-test skips its
# allocation-failure walks itself).
# Sourced by the guest's /init after lib.sh; tests/vm/check runs it.

. $GDRPEER/plans/lib-demo.sh
. $GDRPEER/plans/lib-suites.sh
. $GDRPEER/plans/lib-load.sh

KERNEL_NAME=$(sed -n 1p $GDRPEER/plan.args)
S=-${KERNEL_NAME:-stock}
CALLBACK_RULE=$(sed -n 2p $GDRPEER/plan.args)
case ${CALLBACK_RULE:=per-buffer} in
per-block) NVSIM_PARAMS=callback_per_buffer=0 ;;
per-buffer) ;;
*) echo "stock.sh: unknown callback rule '$CALLBACK_RULE'" >&2 ;;
esac

# skip_absent NAME WHAT PATH: NAME skipped because the kernel lacks WHAT (PATH
# is how it would show); a failure if the kernel has it after all, so that the
# cases are moved here instead of being skipped for nothing.
skip_absent() {
	if [ -e "$3" ]; then
		echo "@@ RESULT FAIL $1$S this kernel has $2 ($3): run those cases here"
	else
		echo "@@ RESULT SKIP $1$S the kernel is built without $2; those cases run on the test kernel"
	fi
}

# --- the README's install, as a non-root user sees it ---------------------------
# tests/vm/stock readme ran the README's install commands in a fresh root of
# this kernel and put here what the guest needs of that root: the module as
# DKMS installed it (with nvsim as the NVIDIA module), modprobe (kmod) and its
# configuration, the root's systemd-udevd with the udev rule gdrpeer-tools
# installed, /etc/passwd and /etc/group (the group the package created, alice
# added to it by the README's usermod, bob not), and the README's commands
# meant for the running kernel (guest-commands: sudo modprobe gdrpeer). The
# guest has no udev of its own: the root's udevd runs chrooted into that root,
# on the guest's /dev, /sys and /proc, and applies the installed rule to the
# devices the module creates, as it would on the machine itself.
README_ROOT=$GDRPEER/readme/root

readme_up() {
	[ -d $README_ROOT ] || fail "no $README_ROOT: tests/vm/stock readme did not run for this stage"
	unload_nv_stack
	trap readme_down EXIT
	mount --bind /dev $README_ROOT/dev && mount -t proc proc $README_ROOT/proc &&
		mount -t sysfs sysfs $README_ROOT/sys && mount -t tmpfs tmpfs $README_ROOT/run &&
		mount -t tmpfs tmpfs $README_ROOT/tmp || fail "mounts in $README_ROOT"
	# The root's users and groups in the guest too, for su (the guest has
	# an /etc/passwd, no /etc/group).
	[ -e /etc/group ] || : >/etc/group
	mount --bind $README_ROOT/etc/passwd /etc/passwd && mount --bind $README_ROOT/etc/group /etc/group ||
		fail "the root's /etc/passwd and /etc/group"
	chroot $README_ROOT /usr/lib/systemd/systemd-udevd --daemon || fail "systemd-udevd did not start"
	[ ! -e /dev/gdrpeer ] || fail "/dev/gdrpeer exists before gdrpeer is loaded"
	# The README's command for the running kernel, with the root's modprobe.
	while read -r cmd; do
		cmd=${cmd%%#*}
		case "$cmd" in
		"sudo modprobe "*) ;;
		*) fail "a README command for the guest this test does not know: $cmd" ;;
		esac
		echo "\$ $cmd"
		# shellcheck disable=SC2086
		chroot $README_ROOT /usr/bin/modprobe ${cmd#sudo modprobe } || fail "$cmd failed"
	done <$README_ROOT/guest-commands
	# nvsim came first (modules.dep: gdrpeer.ko uses its exports), with no parameters.
	echo "$NVSIM_ZERO" >$NVSIM_JUDGED
	[ -d /sys/module/nvsim ] && [ -d /sys/module/gdrpeer ] || fail "modprobe gdrpeer did not load nvsim and gdrpeer"
	# udevadm ignores requests in a chroot unless told not to.
	SYSTEMD_IGNORE_CHROOT=1 chroot $README_ROOT /usr/bin/udevadm settle --timeout=60 || fail "udevadm settle"
	ls -ln /dev/gdrpeer /dev/gdrdrv
	gid=$(awk -F: '$1 == "gdrpeer" { print $3 }' /etc/group)
	[ -n "$gid" ] || fail "the root has no group gdrpeer"
	for d in /dev/gdrpeer /dev/gdrdrv; do
		expect_eq "$d's owner, group and mode" "$(stat -c '%u %g %a' $d)" "0 $gid 660"
	done
}

readme_down() {
	SYSTEMD_IGNORE_CHROOT=1 chroot $README_ROOT /usr/bin/udevadm control --exit 2>/dev/null
	pids=$(pidof systemd-udevd) && kill $pids 2>/dev/null
	unload_wait gdrpeer nvsim
	for m in /etc/group /etc/passwd $README_ROOT/tmp $README_ROOT/run $README_ROOT/sys \
		$README_ROOT/proc $README_ROOT/dev; do
		umount $m 2>/dev/null
	done
}

# as USER CMD: CMD run by USER, with the groups /etc/group gives USER.
as() { u=$1; shift; su -s /bin/sh "$u" -c "PATH=$PATH LD_LIBRARY_PATH=$LD_LIBRARY_PATH; $*"; }

test_readme_group_opens() {
	readme_up
	as alice id
	as alice id | grep -q "(gdrpeer)" || fail "alice is not in the group gdrpeer"
	as alice 'exec 3<>/dev/gdrpeer 4<>/dev/gdrdrv && echo "alice opened /dev/gdrpeer and /dev/gdrdrv"' ||
		fail "alice cannot open /dev/gdrpeer and /dev/gdrdrv"
	as alice gdrpeer info || fail "gdrpeer info, as alice"
	as alice gdrpeer gdrdrv-info || fail "gdrpeer gdrdrv-info, as alice"
}

test_readme_outsider_eacces() {
	readme_up
	as bob id
	! as bob id | grep -q gdrpeer || fail "bob is in the group gdrpeer"
	for d in /dev/gdrpeer /dev/gdrdrv; do
		out=$(as bob "exec 3<>$d" 2>&1) && fail "bob opened $d"
		echo "$out"
		echo "$out" | grep -q "Permission denied" || fail "bob's open of $d did not fail with EACCES"
	done
	for c in info gdrdrv-info; do
		out=$(as bob gdrpeer $c 2>&1) && fail "gdrpeer $c worked for bob"
		echo "gdrpeer $c, as bob: $out"
		echo "$out" | grep -q "Permission denied" || fail "gdrpeer $c did not say Permission denied"
		echo "$out" | grep -q "group gdrpeer" || fail "gdrpeer $c did not name the group that may open it"
	done
}

run_plan() {
	echo "kernel: $(uname -r) ($(uname -v)); nvsim's callback rule: $CALLBACK_RULE"
	t readme-install-group-opens$S test_readme_group_opens
	t readme-install-outsider-eacces$S test_readme_outsider_eacces
	t demo-load-version-unload$S demo_chain
	t demo-pin-cache-revoke$S demo_pin_cache_revoke
	t demo-mmap-write-read-free$S demo_mmap
	t demo-nic-round-trip$S demo_nic_round_trip
	t demo-dmabuf-nic-invalidate$S demo_dmabuf
	t demo-dmabuf-pinned-survives-cumemfree$S demo_dmabuf_pinned
	t demo-doctor$S demo_doctor
	t cli-gdrdrv-info$S test_cli_gdrdrv_info
	t cli-events$S test_cli_events
	t cli-doctor$S test_cli_doctor "ok    iommu: off: "
	t cli-doctor-without-gdrpeer$S test_cli_doctor_without_gdrpeer
	t crate-example-pin-map-dmabuf$S test_crate_example pin_map_dmabuf
	t crate-example-regcache$S test_crate_example regcache
	t crate-example-events$S test_crate_example events
	t libgdrpeer-c$S test_libgdrpeer_c
	GDRPEER_FILTER="" GDRPEER_SUFFIX=$S gdrpeer_suite
	# gdrpeer calls nv-p2p's dma_map_pages and dma_unmap_pages only for a GPU
	# and peer's first mapping: these tests need a load that has mapped nothing.
	for t in gdrpeer-stale-dma-map gdrpeer-callback-waits-for-an-unmap; do
		GDRPEER_FILTER=$t GDRPEER_SUFFIX=-fresh$S gdrpeer_suite
	done
	GDRPEER_FILTER=gdrpeer-byte-limits GDRPEER_SUFFIX=-4-and-6-pages$S \
		GDRPEER_PARAMS="cache_max_bytes=262144 global_max_bytes=393216" gdrpeer_suite
	GDRPEER_FILTER='gdrdrv-req-mapping-type|gdrdrv-libgdrapi' GDRPEER_SUFFIX=-coherent$S gdrpeer_suite coherent=1
	# The cases of half a million operations: here, not on the test kernel, whose
	# sanitizers make them minutes long.
	GDRPEER_MODE=--large GDRPEER_FILTER="" GDRPEER_SUFFIX=$S gdrpeer_suite
	GDRNIC_FILTER="" GDRNIC_SUFFIX=$S gdrnic_suite
	t gdrdrv-not-registered-with-gdrdrv-0$S test_gdrdrv_param_off
	t gdrdrv-not-registered-over-another$S test_gdrdrv_name_taken
	GDRNIC_FILTER=gdrnic-unsupported GDRNIC_SUFFIX=-0x00030000$S gdrnic_suite page_table_version=0x00030000
	CUDA_SUFFIX=$S cuda_suite
	GDRDRV_CLIENT_SUFFIX=$S gdrdrv_client_suite
	t stress-short$S stress_run 50000 3 3 1
	t fuzz-short$S fuzz_run 50000 4 1
	skip_absent kunit "KUnit (CONFIG_KUNIT)" /sys/kernel/debug/kunit
	skip_absent lockdep "lockdep (CONFIG_PROVE_LOCKING)" /proc/lockdep
	# tests/vm/stock checked that DKMS's gdrpeer.ko has no modversions in its vermagic.
	echo "@@ RESULT SKIP modversions$S the kernel is built without CONFIG_MODVERSIONS; those cases run on the test kernel"
	# Last: the proprietary stand-in taints the kernel (P) for good. Debian's
	# own kernel refuses gdrpeer next to it, as it would next to NVIDIA's.
	t proprietary-nvidia-refuses-gdrpeer$S test_proprietary_nvidia_refused
}
