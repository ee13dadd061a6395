#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Tests of the kernel-log oracle in tests/vm/report (run on the host by make check)."""
import importlib.machinery
import importlib.util
import os
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


def lines(text):
    return text.splitlines(True)


class ScanTest(unittest.TestCase):
    def test_clean_log_passes(self):
        self.assertEqual(report.scan(lines(CLEAN)), ([], []))

    def test_each_report_kind_fails_the_run_and_names_the_test(self):
        for kind, line in SAMPLES.items():
            with self.subTest(kind=kind):
                log = CLEAN.replace("gdrpeer: gdrpeer ABI 1.0", line)
                unexpected, missing = report.scan(lines(log))
                self.assertEqual(len(unexpected), 1, unexpected)
                self.assertEqual(unexpected[0][0], "t1")
                self.assertEqual(missing, [])

    def test_planted_reports_inside_region_are_expected(self):
        log = CLEAN + "gdrpeer-test: begin planted\ngdrpeer-test: expect-reports kasan warning\n"
        log += SAMPLES["kasan"] + "\n" + SAMPLES["warning"] + "\ngdrpeer-test: end-expect\n"
        self.assertEqual(report.scan(lines(log)), ([], []))

    def test_an_unplanted_kind_inside_a_region_still_fails(self):
        log = "gdrpeer-test: expect-reports lockdep\n" + SAMPLES["lockdep"] + "\n"
        log += SAMPLES["kasan"] + "\ngdrpeer-test: end-expect\n"
        unexpected, missing = report.scan(lines(log))
        self.assertEqual([u[1] for u in unexpected], ["kasan"])
        self.assertEqual(missing, [])

    def test_a_planted_report_that_never_came_fails(self):
        log = "gdrpeer-test: expect-reports kasan lockdep\n" + SAMPLES["kasan"]
        log += "\ngdrpeer-test: end-expect\n"
        unexpected, missing = report.scan(lines(log))
        self.assertEqual([m[1] for m in missing], ["lockdep"])

    def test_reports_after_the_region_still_fail(self):
        log = "gdrpeer-test: expect-reports kasan\n" + SAMPLES["kasan"]
        log += "\ngdrpeer-test: end-expect\n" + SAMPLES["kasan"] + "\n"
        unexpected, _ = report.scan(lines(log))
        self.assertEqual(len(unexpected), 1)

    def test_unclosed_region_fails(self):
        _, missing = report.scan(lines("gdrpeer-test: expect-reports kasan\n" + SAMPLES["kasan"]))
        self.assertTrue(missing)


if __name__ == "__main__":
    unittest.main()
