#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Tests of the kernel-log oracle in tests/vm/report (run on the host by make check)."""
import contextlib
import importlib.machinery
import importlib.util
import io
import os
import tempfile
import unittest

_path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "report")
_loader = importlib.machinery.SourceFileLoader("report", _path)
_spec = importlib.util.spec_from_loader("report", _loader)
report = importlib.util.module_from_spec(_spec)
_loader.exec_module(report)

CLEAN = """\
[    0.000000] Linux version 7.2.12
[    0.914465] DMA-API: preallocated 65536 debug entries
[    0.914780] DMA-API: debugging enabled by kernel config
[    5.100000] gdrpeer-test: begin t1
[    5.200000] gdrpeer: gdrpeer ABI 1.0
[    5.300000] gdrpeer-test: end t1
"""

SAMPLES = {
    "kasan": "BUG: KASAN: slab-out-of-bounds in planted_kasan+0x3c/0x80 [planted]",
    "lockdep": "WARNING: possible circular locking dependency detected",
    "warning": "WARNING: CPU: 1 PID: 80 at planted.c:70 planted_write+0x1/0x2",
    "kmemleak": "kmemleak: 1 new suspected memory leaks (see /sys/kernel/debug/kmemleak)",
    "hung-task": "INFO: task gdrpeer-test:77 blocked for more than 60 seconds.",
    "dma-api": "nvsim 0000:00:04.0: DMA-API: device driver has pending DMA allocations while released from device [count=2]",
    "oops": "Oops: general protection fault, probably for non-canonical address",
}

# KCSAN reports as the 7.2 kernel prints them (kernel/kcsan/report.c): the
# title names the two racing functions ("%ps": a module's with "[module]"),
# then each side's access and stack, the value change and the reporting CPU.
# This one is planted.ko's race as the KCSAN kernel reported it in a run of
# tests/plans/kcsan.sh; the others are written in its format.
KCSAN_PLANTED = """\
[   17.725998] ==================================================================
[   17.726758] BUG: KCSAN: data-race in planted_race [planted] / planted_race_writer [planted]
[   17.727309] 
[   17.727561] read-write to 0xffffffffa0201018 of 8 bytes by task 57 on cpu 0:
[   17.728021]  planted_race_writer+0x24/0x50 [planted]
[   17.728387]  kthread+0x1e9/0x220
[   17.728652]  ret_from_fork+0x11d/0x230
[   17.728943]  ret_from_fork_asm+0x11/0x20
[   17.729242] 
[   17.729444] read to 0xffffffffa0201018 of 8 bytes by task 49 on cpu 1:
[   17.729785]  planted_race+0x7c/0xd0 [planted]
[   17.730120]  planted_write+0x177/0x190 [planted]
[   17.730435]  full_proxy_write+0x91/0xc0
[   17.745345]  vfs_write+0x103/0x250
[   17.745770]  ksys_write+0xa2/0x100
[   17.746080]  __x64_sys_write+0x3b/0x40
[   17.746362]  x64_sys_call+0x231b/0x2790
[   17.746654]  do_syscall_64+0xb1/0x340
[   17.746952]  entry_SYSCALL_64_after_hwframe+0x4b/0x53
[   17.747325] 
[   17.747504] value changed: 0x000000000000b394 -> 0x000000000000b794
[   17.747826] 
[   17.748008] Reported by Kernel Concurrency Sanitizer on:
[   17.748821] CPU: 1 UID: 0 PID: 49 Comm: init Tainted: G           O        7.2.12 #1 PREEMPTLAZY  
[   17.749510] Tainted: [O]=OOT_MODULE
[   17.749867] ==================================================================
"""

KCSAN_OURS = """\
[  812.334455] ==================================================================
[  812.335102] BUG: KCSAN: data-race in nvsim_dma_unmap_pages [nvsim] / nvsim_free_cb_work [nvsim]
[  812.335530] 
[  812.336010] write to 0xffff888005a3c0d8 of 8 bytes by task 312 on cpu 1:
[  812.336600]  nvsim_free_cb_work+0x8c/0x1f0 [nvsim]
[  812.337011]  process_one_work+0x46c/0x9e0
[  812.337420]  worker_thread+0x3b4/0x5d0
[  812.337813]  kthread+0x1c4/0x200
[  812.338190]  ret_from_fork+0x14f/0x190
[  812.338580]  ret_from_fork_asm+0x1a/0x30
[  812.338960] 
[  812.339330] read to 0xffff888005a3c0d8 of 8 bytes by task 298 on cpu 0:
[  812.339901]  nvsim_dma_unmap_pages+0x53/0x210 [nvsim]
[  812.340305]  _RNvMNtCs3kLqD9mGxz1_7gdrpeer5pinneNtB2_3Pin5unmap+0x9e/0x1c0 [gdrpeer]
[  812.340702]  _RNvXs_NtCs3kLqD9mGxz1_7gdrpeer4fileNtB4_4FileNtNtCsa1B2c3_6kernel2fs8FileOps5ioctl+0x2f1/0x8a0 [gdrpeer]
[  812.341100]  __x64_sys_ioctl+0x10b/0x150
[  812.341490]  x64_sys_call+0x1146/0x1d60
[  812.341880]  do_syscall_64+0xcb/0x1d0
[  812.342270]  entry_SYSCALL_64_after_hwframe+0x77/0x7f
[  812.342660] 
[  812.343050] value changed: 0xffff888004d21000 -> 0x0000000000000000
[  812.343440] 
[  812.343830] Reported by Kernel Concurrency Sanitizer on:
[  812.344220] CPU: 0 UID: 0 PID: 298 Comm: gdrpeer-test Tainted: G           O        7.2.12 #1 PREEMPTLAZY  
[  812.344610] Tainted: [O]=OOT_MODULE
[  812.345390] ==================================================================
"""

# Both functions of the title are the kernel's, but one side was called by
# gdrnic (a dma-buf import): this project's code is in the race.
KCSAN_OURS_IN_STACK = """\
[  903.120011] ==================================================================
[  903.120514] BUG: KCSAN: data-race in dma_buf_map_attachment / dma_buf_unmap_attachment
[  903.120913] 
[  903.121302] write to 0xffff888006b1e640 of 8 bytes by task 401 on cpu 1:
[  903.121702]  dma_buf_unmap_attachment+0x61/0x120
[  903.122101]  gdrnic_import_release+0x3d/0xb0 [gdrnic]
[  903.122500]  gdrnic_ioctl+0x2d4/0x6f0 [gdrnic]
[  903.122899]  __x64_sys_ioctl+0x10b/0x150
[  903.123298]  do_syscall_64+0xcb/0x1d0
[  903.123697]  entry_SYSCALL_64_after_hwframe+0x77/0x7f
[  903.124096] 
[  903.124495] read to 0xffff888006b1e640 of 8 bytes by task 399 on cpu 0:
[  903.124894]  dma_buf_map_attachment+0x2a/0x1c0
[  903.125293]  dma_buf_map_attachment_unlocked+0x44/0x70
[  903.125692]  __x64_sys_ioctl+0x10b/0x150
[  903.126091]  do_syscall_64+0xcb/0x1d0
[  903.126490]  entry_SYSCALL_64_after_hwframe+0x77/0x7f
[  903.126889] 
[  903.127288] value changed: 0xffff888005a3e000 -> 0x0000000000000000
[  903.127687] 
[  903.128086] Reported by Kernel Concurrency Sanitizer on:
[  903.128485] CPU: 0 UID: 0 PID: 399 Comm: gdrpeer-test Tainted: G           O        7.2.12 #1 PREEMPTLAZY  
[  903.129283] ==================================================================
"""

# A race at unknown origin: only the watcher's side is known.
KCSAN_OURS_UNKNOWN_ORIGIN = """\
[  955.000100] ==================================================================
[  955.000500] BUG: KCSAN: data-race in gdrnic_dma_poll+0x71/0x140 [gdrnic]
[  955.000900] 
[  955.001300] race at unknown origin, with read to 0xffffc90000352010 of 4 bytes by task 77 on cpu 1:
[  955.001700]  gdrnic_dma_poll+0x71/0x140 [gdrnic]
[  955.002100]  gdrnic_transfer+0x1e2/0x3a0 [gdrnic]
[  955.002500]  __x64_sys_ioctl+0x10b/0x150
[  955.002900]  do_syscall_64+0xcb/0x1d0
[  955.003300]  entry_SYSCALL_64_after_hwframe+0x77/0x7f
[  955.003700] 
[  955.004100] value changed: 0x00000001 -> 0x00000000
[  955.004500] 
[  955.004900] Reported by Kernel Concurrency Sanitizer on:
[  955.005300] CPU: 1 UID: 0 PID: 77 Comm: gdrpeer-test Tainted: G           O        7.2.12 #1 PREEMPTLAZY  
[  955.006100] ==================================================================
"""

# A race inside the kernel alone, seen while gdrpeer-test ran (its name in the
# footer and the taint by out-of-tree modules are not code of ours).
KCSAN_KERNEL = """\
[  341.208331] ==================================================================
[  341.209476] BUG: KCSAN: data-race in pipe_poll / pipe_write
[  341.210290] 
[  341.210588] write to 0xffff88800687ee80 of 4 bytes by task 1207 on cpu 1:
[  341.211541]  pipe_write+0x3f1/0xa40
[  341.212071]  vfs_write+0x4a6/0x6a0
[  341.212587]  ksys_write+0xc3/0x160
[  341.213091]  __x64_sys_write+0x42/0x50
[  341.213622]  x64_sys_call+0x1d1a/0x1d60
[  341.214170]  do_syscall_64+0xcb/0x1d0
[  341.214708]  entry_SYSCALL_64_after_hwframe+0x77/0x7f
[  341.215410] 
[  341.215708] read to 0xffff88800687ee80 of 4 bytes by task 1206 on cpu 0:
[  341.216617]  pipe_poll+0x13b/0x2a0
[  341.217121]  do_sys_poll+0x52f/0x9a0
[  341.217624]  __x64_sys_poll+0x6a/0x200
[  341.218130]  x64_sys_call+0x1b1f/0x1d60
[  341.218636]  do_syscall_64+0xcb/0x1d0
[  341.219140]  entry_SYSCALL_64_after_hwframe+0x77/0x7f
[  341.219847] 
[  341.220144] value changed: 0x00000011 -> 0x00000012
[  341.220851] 
[  341.221148] Reported by Kernel Concurrency Sanitizer on:
[  341.221860] CPU: 0 UID: 0 PID: 1206 Comm: gdrpeer-test Tainted: G           O        7.2.12 #1 PREEMPTLAZY  
[  341.222566] Tainted: [O]=OOT_MODULE
[  341.224000] ==================================================================
"""


def lines(text):
    return text.splitlines(True)


class ScanTest(unittest.TestCase):
    def test_clean_log_passes(self):
        self.assertEqual(report.scan(lines(CLEAN)), ([], [], []))

    def test_each_report_kind_fails_the_run_and_names_the_test(self):
        for kind, line in SAMPLES.items():
            with self.subTest(kind=kind):
                log = CLEAN.replace("gdrpeer: gdrpeer ABI 1.0", line)
                unexpected, missing, _ = report.scan(lines(log))
                self.assertEqual(len(unexpected), 1, unexpected)
                self.assertEqual(unexpected[0][0], "t1")
                self.assertEqual(missing, [])

    def test_planted_reports_inside_region_are_expected(self):
        log = CLEAN + "gdrpeer-test: begin planted\ngdrpeer-test: expect-reports kasan warning\n"
        log += SAMPLES["kasan"] + "\n" + SAMPLES["warning"] + "\ngdrpeer-test: end-expect\n"
        self.assertEqual(report.scan(lines(log)), ([], [], []))

    def test_an_unplanted_kind_inside_a_region_still_fails(self):
        log = "gdrpeer-test: expect-reports lockdep\n" + SAMPLES["lockdep"] + "\n"
        log += SAMPLES["kasan"] + "\ngdrpeer-test: end-expect\n"
        unexpected, missing, _ = report.scan(lines(log))
        self.assertEqual([u[1] for u in unexpected], ["kasan"])
        self.assertEqual(missing, [])

    def test_a_planted_report_that_never_came_fails(self):
        log = "gdrpeer-test: expect-reports kasan lockdep\n" + SAMPLES["kasan"]
        log += "\ngdrpeer-test: end-expect\n"
        unexpected, missing, _ = report.scan(lines(log))
        self.assertEqual([m[1] for m in missing], ["lockdep"])

    def test_reports_after_the_region_still_fail(self):
        log = "gdrpeer-test: expect-reports kasan\n" + SAMPLES["kasan"]
        log += "\ngdrpeer-test: end-expect\n" + SAMPLES["kasan"] + "\n"
        unexpected, _, _ = report.scan(lines(log))
        self.assertEqual(len(unexpected), 1)

    def test_unclosed_region_fails(self):
        _, missing, _ = report.scan(lines("gdrpeer-test: expect-reports kasan\n" + SAMPLES["kasan"]))
        self.assertTrue(missing)


# An IOMMU's DMA fault as Debian's 7.3.4 kernel logged the planted one under QEMU's
# intel-iommu (tests/plans/iommu.sh; drivers/iommu/intel/dmar.c).
DMAR_FAULT = ("[   27.156916] DMAR: DRHD: handling fault status reg 2\n"
              "[   27.157123] DMAR: [DMA Read NO_PASID] Request device [0000:00:04.0] fault addr "
              "0xfff80000 [fault reason 0x06] PTE Read access is not set\n")


class DmarFaultTest(unittest.TestCase):
    def test_a_dma_fault_fails_the_run(self):
        for fault in [DMAR_FAULT, DMAR_FAULT.replace("DMA Read", "DMA Write"),
                      "DMAR: [INTR-REMAP] Request device [0000:00:04.0] fault index 0x2 "
                      "[fault reason 0x25] Present field in the IRTE entry is clear\n"]:
            with self.subTest(fault=fault):
                unexpected, missing, _ = report.scan(lines(in_test(fault)))
                self.assertEqual([(u[0], u[1]) for u in unexpected], [("t1", "dmar-fault")])
                self.assertEqual(missing, [])

    def test_the_planted_fault_is_told_by_its_address(self):
        region = "gdrpeer-test: expect-reports dmar-fault=%s\n%sgdrpeer-test: end-expect\n"
        # The IOMMU reports the page: the marker may name any address in it.
        for addr in ["0xfff80000", "0xfff80100"]:
            with self.subTest(addr=addr):
                self.assertEqual(report.scan(lines(region % (addr, DMAR_FAULT))), ([], [], []))
        # A fault elsewhere in the region is not the planted one, which is then missing.
        unexpected, missing, _ = report.scan(lines(region % ("0xfff70000", DMAR_FAULT)))
        self.assertEqual([u[1] for u in unexpected], ["dmar-fault"])
        self.assertEqual([m[1] for m in missing], ["dmar-fault"])
        # No address: no fault can be told apart as planted.
        log = "gdrpeer-test: expect-reports dmar-fault\n%sgdrpeer-test: end-expect\n" % DMAR_FAULT
        unexpected, missing, _ = report.scan(lines(log))
        self.assertEqual(([u[1] for u in unexpected], [m[1] for m in missing]),
                         (["dmar-fault"], ["dmar-fault"]))

    def test_the_same_fault_outside_the_region_fails(self):
        region = "gdrpeer-test: expect-reports dmar-fault=0xfff80100\n%sgdrpeer-test: end-expect\n"
        unexpected, missing, _ = report.scan(lines(region % DMAR_FAULT + DMAR_FAULT))
        self.assertEqual([u[1] for u in unexpected], ["dmar-fault"])
        self.assertEqual(missing, [])
        unexpected, missing, _ = report.scan(lines(region % ""))
        self.assertEqual((unexpected, [m[1] for m in missing]), ([], ["dmar-fault"]))


def in_test(*reports):
    """A log in which test t1 ran while the kernel printed these reports."""
    return CLEAN.replace("[    5.200000] gdrpeer: gdrpeer ABI 1.0\n", "".join(reports))


class KcsanTest(unittest.TestCase):
    def test_a_race_in_our_modules_fails_the_run(self):
        for name, text in [("title", KCSAN_OURS), ("stack", KCSAN_OURS_IN_STACK),
                           ("unknown origin", KCSAN_OURS_UNKNOWN_ORIGIN)]:
            with self.subTest(name=name):
                unexpected, missing, races = report.scan(lines(in_test(text)))
                self.assertEqual([(u[0], u[1]) for u in unexpected], [("t1", "kcsan")])
                self.assertEqual((missing, races), ([], []))

    def test_the_failure_names_the_race_and_our_frame(self):
        unexpected, _, _ = report.scan(lines(in_test(KCSAN_OURS_IN_STACK)))
        self.assertIn("data-race in dma_buf_map_attachment / dma_buf_unmap_attachment",
                      unexpected[0][2])
        self.assertIn("this project's code: gdrnic_import_release+0x3d/0xb0 [gdrnic]",
                      unexpected[0][2])

    def test_a_race_in_the_kernel_alone_is_counted_not_failed(self):
        unexpected, missing, races = report.scan(lines(in_test(KCSAN_KERNEL)))
        self.assertEqual((unexpected, missing), ([], []))
        self.assertEqual(races, [("t1", "data-race in pipe_poll / pipe_write")])

    def test_reports_are_judged_one_by_one(self):
        # A kernel race just before ours (and one whose closing rule was lost)
        # lends ours nothing, and ours does not fail the kernel's.
        lost_rule = KCSAN_KERNEL.rsplit("[  341.224000]", 1)[0]
        log = in_test(KCSAN_KERNEL, KCSAN_OURS, lost_rule, KCSAN_OURS_UNKNOWN_ORIGIN,
                      KCSAN_KERNEL)
        unexpected, missing, races = report.scan(lines(log))
        self.assertEqual(len(unexpected), 2, unexpected)
        self.assertIn("nvsim_dma_unmap_pages [nvsim] / nvsim_free_cb_work [nvsim]",
                      unexpected[0][2])
        self.assertIn("gdrnic_dma_poll", unexpected[1][2])
        self.assertEqual([r[1] for r in races], ["data-race in pipe_poll / pipe_write"] * 3)
        self.assertEqual(missing, [])

    def test_a_planted_race_is_expected_and_a_kernel_race_does_not_stand_for_it(self):
        region = "gdrpeer-test: expect-reports kcsan\n%sgdrpeer-test: end-expect\n"
        self.assertEqual(report.scan(lines(region % KCSAN_PLANTED)), ([], [], []))
        unexpected, _, _ = report.scan(lines(KCSAN_PLANTED))
        self.assertEqual([u[1] for u in unexpected], ["kcsan"])
        unexpected, missing, races = report.scan(lines(region % KCSAN_KERNEL))
        self.assertEqual([m[1] for m in missing], ["kcsan"])
        self.assertEqual(len(races), 1)

    def test_the_summary_lists_kernel_races_by_pair_and_passes(self):
        other = KCSAN_KERNEL.replace("pipe_poll / pipe_write", "tick_nohz_idle_stop_tick / "
                                     "tick_sched_do_timer")
        with tempfile.TemporaryDirectory() as logdir:
            with open(logdir + "/kernel.log", "w") as f:
                f.write(in_test(KCSAN_KERNEL, other, KCSAN_KERNEL))
            with open(logdir + "/results.log", "w") as f:
                f.write("@@ RESULT PASS t1\n@@ PLAN-DONE\n")
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                status = report.summary(logdir)
            self.assertEqual(status, 0, out.getvalue())
            self.assertIn("3 KCSAN reports of races in the kernel alone (not failed)",
                          out.getvalue())
            rows = [line.split() for line in out.getvalue().splitlines()
                    if "data-race in" in line]
            self.assertEqual([row[:2] for row in rows], [["2", "data-race"], ["1", "data-race"]])
            self.assertIn("pipe_poll / pipe_write", out.getvalue().splitlines()[1])
            with open(logdir + "/kernel.log", "a") as f:
                f.write(KCSAN_OURS)
            with contextlib.redirect_stdout(io.StringIO()):
                self.assertEqual(report.summary(logdir), 1)


if __name__ == "__main__":
    unittest.main()
