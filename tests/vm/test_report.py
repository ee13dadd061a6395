#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Tests of the kernel-log oracle in tests/vm/report (run on the host by make check)."""
import contextlib
import importlib.machinery
import importlib.util
import io
import os
import subprocess
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
    "printk-loss": "** 24 printk messages dropped **",
    "bug": "BUG: sleeping function called from invalid context at nvsim.c:1615",
    "soft-lockup": "watchdog: BUG: soft lockup - CPU#1 stuck for 26s! [gdrpeer-test:91]",
    "kmemleak-off": "kmemleak: Kernel memory leak detector disabled",
    "duplicate-name": "debugfs: 'ctx-3' already exists in 'gdrpeer'",
}

# More lines of each kind, as the 7.2 kernel prints them: each must be caught alone.
MORE_SAMPLES = [
    ("soft-lockup", "rcu: INFO: rcu_preempt detected stalls on CPUs/tasks:"),
    ("soft-lockup", "rcu: INFO: rcu_preempt self-detected stall on CPU"),
    ("soft-lockup", "rcu: INFO: rcu_preempt detected expedited stalls on CPUs/tasks: { 1-... }"),
    ("lockdep", "INFO: trying to register non-static key."),
    ("kmemleak-off", "kmemleak: Cannot allocate a kmemleak_object structure"),
    ("duplicate-name", "sysfs: cannot create duplicate filename '/devices/virtual/misc/gdrdrv'"),
]

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


# The planted reports as the 7.2 test kernel prints them (planted.ko's KASAN
# read, WARN and leaks; nvsim-test --lockdep-inversion's cycle), and reports of
# the same kinds that are not the planted ones.
PLANTED_KASAN = """\
[  401.100000] ==================================================================
[  401.100100] BUG: KASAN: slab-out-of-bounds in planted_kasan+0x5d/0x90 [planted]
[  401.100200] Read of size 1 at addr ffff888004a3e790 by task sh/97
[  401.100300] 
[  401.100400] CPU: 1 UID: 0 PID: 97 Comm: sh Tainted: G           O        7.2.12 #1 PREEMPTLAZY 
[  401.100500] Call Trace:
[  401.100600]  <TASK>
[  401.100700]  dump_stack_lvl+0x7f/0xa0
[  401.100800]  print_report+0xd1/0x660
[  401.100900]  kasan_report+0xe2/0x120
[  401.101000]  planted_kasan+0x5d/0x90 [planted]
[  401.101100]  planted_write+0x14a/0x1f0 [planted]
[  401.101200]  full_proxy_write+0x91/0xc0
[  401.101300]  vfs_write+0x103/0x250
[  401.101400]  </TASK>
[  401.101500] 
[  401.101600] Allocated by task 97:
[  401.101700]  __kmalloc_cache_noprof+0x1a9/0x3a0
[  401.101800]  planted_kasan+0x2e/0x90 [planted]
[  401.101900] 
[  401.102000] The buggy address belongs to the object at ffff888004a3e780
[  401.102100]  which belongs to the cache kmalloc-16 of size 16
[  401.102200] ==================================================================
"""

# A use-after-free in nvsim called from gdrpeer, during the planted test.
OTHER_KASAN = """\
[  401.200000] ==================================================================
[  401.200100] BUG: KASAN: slab-use-after-free in nvidia_p2p_put_pages+0x8e/0x3c0 [nvsim]
[  401.200200] Read of size 8 at addr ffff888005c1e010 by task kworker/1:2/61
[  401.200300] 
[  401.200400] Call Trace:
[  401.200500]  <TASK>
[  401.200600]  kasan_report+0xe2/0x120
[  401.200700]  nvidia_p2p_put_pages+0x8e/0x3c0 [nvsim]
[  401.200800]  _RNvMNtCs3kLqD9mGxz1_7gdrpeer5cacheNtB2_6Region7release+0x1d1/0x3b0 [gdrpeer]
[  401.200900]  process_one_work+0x46c/0x9e0
[  401.201000]  </TASK>
[  401.201100] ==================================================================
"""

PLANTED_WARN = """\
[  401.300000] ------------[ cut here ]------------
[  401.300100] planted warning
[  401.300200] WARNING: tests/vm/planted/planted.c:143 at planted_write+0x1a2/0x1f0 [planted], CPU#1: sh/98
[  401.300300] Modules linked in: planted(O) 
[  401.300400] CPU: 1 UID: 0 PID: 98 Comm: sh Tainted: G    B      O        7.2.12 #1 PREEMPTLAZY 
[  401.300500] RIP: 0010:planted_write+0x1a2/0x1f0 [planted]
[  401.300600] Call Trace:
[  401.300700]  <TASK>
[  401.300800]  full_proxy_write+0x91/0xc0
[  401.300900]  vfs_write+0x103/0x250
[  401.301000]  </TASK>
[  401.301100] ---[ end trace 0000000000000000 ]---
"""

# A WARN in gdrpeer's code.
OTHER_WARN = """\
[  401.400000] ------------[ cut here ]------------
[  401.400200] WARNING: rust/kernel/sync/arc.rs:201 at _RNvXs_NtCs3kLqD9mGxz1_7gdrpeer4fileNtB4_4FileNtNtCsa1B2c3_6kernel2fs8FileOps7release+0x2f1/0x8a0 [gdrpeer], CPU#0: gdrpeer-test/131
[  401.400300] Modules linked in: gdrpeer(O) nvsim(O) planted(O)
[  401.400500] RIP: 0010:_RNvXs_NtCs3kLqD9mGxz1_7gdrpeer4fileNtB4_4FileNtNtCsa1B2c3_6kernel2fs8FileOps7release+0x2f1/0x8a0 [gdrpeer]
[  401.400600] Call Trace:
[  401.400700]  <TASK>
[  401.400800]  __fput+0x1d1/0x4a0
[  401.401000]  </TASK>
[  401.401100] ---[ end trace 0000000000000000 ]---
"""

PLANTED_LEAK = """\
[  402.000000] unreferenced object 0xffff888005a40000 (size 16384):
[  402.000100]   comm "sh", pid 96, jiffies 4294952111
[  402.000200]   hex dump (first 32 bytes):
[  402.000300]     5a 5a 5a 5a 5a 5a 5a 5a 5a 5a 5a 5a 5a 5a 5a 5a  ZZZZZZZZZZZZZZZZ
[  402.000400]   backtrace (crc 2c1d8e4b):
[  402.000500]     __kmalloc_cache_noprof+0x2c5/0x3a0
[  402.000600]     planted_leak+0x6e/0xd0 [planted]
[  402.000700]     planted_write+0x16c/0x1f0 [planted]
[  402.000800]     full_proxy_write+0x91/0xc0
[  402.000900]     vfs_write+0x103/0x250
"""

# A region of gdrpeer's leaked by an earlier test and found by the planted test's scan.
GDRPEER_LEAK = """\
[  402.100000] unreferenced object 0xffff888006123400 (size 192):
[  402.100100]   comm "gdrpeer-test", pid 211, jiffies 4294911234
[  402.100200]   hex dump (first 32 bytes):
[  402.100300]     00 00 00 00 02 00 00 00 00 00 01 00 00 00 00 00  ................
[  402.100400]   backtrace (crc 9a0f3312):
[  402.100500]     __kmalloc_cache_noprof+0x2c5/0x3a0
[  402.100600]     _RNvMs0_NtCs3kLqD9mGxz1_7gdrpeer5cacheNtB5_6Region3new+0x4c/0x2a0 [gdrpeer]
[  402.100700]     _RNvXs_NtCs3kLqD9mGxz1_7gdrpeer4fileNtB4_4FileNtNtCsa1B2c3_6kernel2fs8FileOps5ioctl+0x2f1/0x8a0 [gdrpeer]
[  402.100800]     __x64_sys_ioctl+0x10b/0x150
"""

# A per-CPU object: "unreferenced object (percpu) 0x...".
PERCPU_LEAK = """\
[  402.200000] unreferenced object (percpu) 0x607fe7c00200 (size 64):
[  402.200100]   comm "insmod", pid 190, jiffies 4294911000
[  402.200400]   backtrace (crc 0):
[  402.200500]     pcpu_alloc_noprof+0x4c1/0xa20
[  402.200600]     nvsim_probe+0x1d2/0x6a0 [nvsim]
"""

LEAK_COUNT = "[  401.900000] kmemleak: %d new suspected memory leaks (see /sys/kernel/debug/kmemleak)\n"

# nvsim-test --lockdep-inversion: p2pclient takes client_lock in nvsim's free
# callback, which runs under nvsim_lock, and calls nvsim under client_lock.
LOCKDEP_CLIENT = """\
[  380.000000] ======================================================
[  380.000100] WARNING: possible circular locking dependency detected
[  380.000200] 7.2.12 #1 Tainted: G           O       
[  380.000300] ------------------------------------------------------
[  380.000400] nvsim-test/140 is trying to acquire lock:
[  380.000500] ffffffffc0205100 (client_lock){+.+.}-{4:4}, at: p2pclient_free_callback+0x2a/0x90 [p2pclient]
[  380.000600] 
[  380.000700] but task is already holding lock:
[  380.000800] ffffffffc01f8d20 (nvsim_lock){+.+.}-{4:4}, at: nvsim_free+0x4e/0x3a0 [nvsim]
[  380.000900] 
[  380.001000] which lock already depends on the new lock.
[  380.001100] 
[  380.001200] 
[  380.001300] the existing dependency chain (in reverse order) is:
[  380.001400] 
[  380.001500] -> #1 (nvsim_lock){+.+.}-{4:4}:
[  380.001600]        __mutex_lock+0x11e/0xd30
[  380.001700]        nvidia_p2p_get_pages+0x63/0x5a0 [nvsim]
[  380.001800]        p2pclient_pin+0x2b9/0x3e0 [p2pclient]
[  380.001900] 
[  380.002000] -> #0 (client_lock){+.+.}-{4:4}:
[  380.002100]        __lock_acquire+0x1637/0x2a70
[  380.002200]        p2pclient_free_callback+0x2a/0x90 [p2pclient]
[  380.002300]        nvsim_free+0x1e5/0x3a0 [nvsim]
[  380.002400] 
[  380.002500] other info that might help us debug this:
[  380.002600] 
[  380.002700]  Possible unsafe locking scenario:
[  380.002800] 
[  380.002900]        CPU0                    CPU1
[  380.003000]        ----                    ----
[  380.003100]   lock(nvsim_lock);
[  380.003200]                                lock(client_lock);
[  380.003300]                                lock(nvsim_lock);
[  380.003400]   lock(client_lock);
[  380.003500] 
[  380.003600]  *** DEADLOCK ***
[  380.003700] 
[  380.003800] 2 locks held by nvsim-test/140:
[  380.003900]  #0: ffff888004b3a408 (sb_writers#2){.+.+}-{0:0}, at: ksys_write+0xa2/0x100
[  380.004000]  #1: ffffffffc01f8d20 (nvsim_lock){+.+.}-{4:4}, at: nvsim_free+0x4e/0x3a0 [nvsim]
[  380.004100] 
[  380.004200] stack backtrace:
[  380.004300] CPU: 0 UID: 0 PID: 140 Comm: nvsim-test Tainted: G           O        7.2.12 #1 PREEMPTLAZY 
[  380.004400] Call Trace:
[  380.004500]  <TASK>
[  380.004600]  dump_stack_lvl+0x7f/0xa0
[  380.004700]  p2pclient_free_callback+0x2a/0x90 [p2pclient]
[  380.004800]  </TASK>
"""

# A real inversion in the same test: gdrpeer's invalidation map against nvsim's lock.
LOCKDEP_OTHER = LOCKDEP_CLIENT.replace("client_lock", "gdrpeer_invalidate").replace(
    "[p2pclient]", "[gdrpeer]")


def fault(*frames):
    """A failed allocation that fault injection dumped (verbose 2), with these frames."""
    out = ["[  500.000000] FAULT_INJECTION: forcing a failure.",
           "[  500.000000] name failslab, interval 1, probability 0, space 0, times 1",
           "[  500.000100] CPU: 1 UID: 0 PID: 230 Comm: gdrpeer-test Tainted: G           O        7.2.12 #1 PREEMPTLAZY ",
           "[  500.000200] Call Trace:", "[  500.000300]  <TASK>",
           "[  500.000400]  dump_stack_lvl+0x7f/0xa0", "[  500.000500]  should_fail_ex+0x1f0/0x210",
           "[  500.000600]  should_failslab+0x5a/0x80",
           "[  500.000700]  __kmalloc_cache_noprof+0x6e/0x3a0"]
    out += ["[  500.000800]  %s" % f for f in frames]
    out += ["[  500.000900]  __x64_sys_ioctl+0x10b/0x150", "[  500.001000]  </TASK>"]
    return "\n".join(out) + "\n"


IN_GDRPEER = "_RNvMs0_NtCs3kLqD9mGxz1_7gdrpeer5cacheNtB5_6Region3new+0x4c/0x2a0 [gdrpeer]"
IN_NVSIM = "nvidia_p2p_get_pages+0x1c3/0x5a0 [nvsim]"
IN_KERNEL = "alloc_empty_file+0x5a/0x1b0"


def lines(text):
    return text.splitlines(True)


class ScanTest(unittest.TestCase):
    def test_clean_log_passes(self):
        self.assertEqual(report.scan(lines(CLEAN)), ([], [], []))

    def test_each_report_kind_fails_the_run_and_names_the_test(self):
        for kind, line in list(SAMPLES.items()) + MORE_SAMPLES:
            with self.subTest(kind=kind, line=line):
                self.assertEqual(report.report_kind(line), kind)
                log = CLEAN.replace("gdrpeer: gdrpeer ABI 1.0", line)
                unexpected, missing, _ = report.scan(lines(log))
                self.assertEqual(len(unexpected), 1, unexpected)
                self.assertEqual(unexpected[0][0], "t1")
                self.assertEqual(missing, [])

    def test_planted_reports_inside_region_are_expected(self):
        log = CLEAN + "gdrpeer-test: begin planted\ngdrpeer-test: expect-reports kasan warning\n"
        log += PLANTED_KASAN + PLANTED_WARN + "gdrpeer-test: end-expect\n"
        self.assertEqual(report.scan(lines(log)), ([], [], []))

    def test_an_unplanted_kind_inside_a_region_still_fails(self):
        log = "gdrpeer-test: expect-reports kasan\n" + PLANTED_KASAN + SAMPLES["oops"] + "\n"
        log += "gdrpeer-test: end-expect\n"
        unexpected, missing, _ = report.scan(lines(log))
        self.assertEqual([u[1] for u in unexpected], ["oops"])
        self.assertEqual(missing, [])

    def test_a_planted_report_that_never_came_fails(self):
        log = "gdrpeer-test: expect-reports kasan lockdep\n" + PLANTED_KASAN
        log += "gdrpeer-test: end-expect\n"
        unexpected, missing, _ = report.scan(lines(log))
        self.assertEqual([m[1] for m in missing], ["lockdep"])

    def test_reports_after_the_region_still_fail(self):
        log = "gdrpeer-test: expect-reports kasan\n" + PLANTED_KASAN
        log += "gdrpeer-test: end-expect\n" + PLANTED_KASAN
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


def region(marker, *reports, test="log-oracle-catches-planted-bugs"):
    """A log in which TEST marked a planted region and these reports came in it."""
    return (CLEAN + "gdrpeer-test: begin %s\ngdrpeer-test: expect-reports %s\n%s"
            "gdrpeer-test: end-expect\n" % (test, marker, "".join(reports)))


class PlantedByContentTest(unittest.TestCase):
    """A planted report is excused by what it says, never by its kind alone."""

    def test_the_planted_reports_are_excused(self):
        log = region("kasan warning kmemleak", PLANTED_KASAN, PLANTED_WARN, LEAK_COUNT % 1,
                     PLANTED_LEAK)
        self.assertEqual(report.scan(lines(log)), ([], [], []))

    def test_another_report_of_a_planted_kind_fails(self):
        unexpected, missing, _ = report.scan(lines(region("kasan", PLANTED_KASAN, OTHER_KASAN)))
        self.assertEqual([u[1] for u in unexpected], ["kasan"])
        self.assertIn("nvidia_p2p_put_pages", unexpected[0][2])
        self.assertIn("not the planted report, which has a frame of planted.ko", unexpected[0][2])
        self.assertEqual(missing, [])

    def test_a_warning_elsewhere_does_not_stand_for_the_planted_one(self):
        unexpected, missing, _ = report.scan(lines(region("warning", OTHER_WARN)))
        self.assertEqual([u[1] for u in unexpected], ["warning"])
        self.assertEqual([m[1] for m in missing], ["warning"])

    def test_a_gdrpeer_leak_in_the_planted_region_fails(self):
        # The case: the planted test's scan lists every leak of the plan.
        log = region("kasan warning kmemleak", PLANTED_KASAN, PLANTED_WARN, LEAK_COUNT % 2,
                     PLANTED_LEAK, GDRPEER_LEAK)
        unexpected, missing, _ = report.scan(lines(log))
        self.assertEqual([u[1] for u in unexpected], ["kmemleak"], unexpected)
        self.assertIn("unreferenced object 0xffff888006123400", unexpected[0][2])
        self.assertEqual(missing, [])

    def test_only_leaks_of_the_planted_module_count_as_planted(self):
        unexpected, missing, _ = report.scan(lines(region("kmemleak", LEAK_COUNT % 1,
                                                          GDRPEER_LEAK)))
        self.assertEqual([u[1] for u in unexpected], ["kmemleak"])
        self.assertEqual([m[1] for m in missing], ["kmemleak"])

    def test_a_scan_counting_more_leaks_than_the_planted_ones_listed_fails(self):
        unexpected, _, _ = report.scan(lines(region("kmemleak", LEAK_COUNT % 5, PLANTED_LEAK)))
        self.assertEqual(len(unexpected), 1)
        self.assertIn("counted 5 new suspected leaks in the planted region, 1 objects listed",
                      unexpected[0][2])

    def test_an_object_kmemleak_withdrew_from_a_whole_listing_is_no_leak(self):
        # The scans counted 3; by the listing, kmemleak no longer listed one of them.
        log = region("kmemleak", LEAK_COUNT % 3, PLANTED_LEAK, PLANTED_LEAK,
                     "gdrpeer-test: kmemleak-listed 2\n")
        self.assertEqual(report.scan(lines(log)), ([], [], []))

    def test_a_listing_that_lost_objects_on_the_way_to_the_log_fails(self):
        log = region("kmemleak", LEAK_COUNT % 2, PLANTED_LEAK,
                     "gdrpeer-test: kmemleak-listed 2\n")
        unexpected, _, _ = report.scan(lines(log))
        self.assertEqual([u[1] for u in unexpected], ["kmemleak"])
        self.assertIn("the guest listed 2 kmemleak objects in the planted region, the log holds 1",
                      unexpected[0][2])

    def test_a_per_cpu_leak_is_a_report(self):
        unexpected, _, _ = report.scan(lines(in_test(PERCPU_LEAK)))
        self.assertEqual([(u[0], u[1]) for u in unexpected], [("t1", "kmemleak")])

    def test_a_lockdep_region_excuses_its_cycle_only(self):
        marker = "lockdep=client_lock,nvsim_lock"
        self.assertEqual(report.scan(lines(region(marker, LOCKDEP_CLIENT))), ([], [], []))
        unexpected, missing, _ = report.scan(lines(region(marker, LOCKDEP_OTHER)))
        self.assertEqual([u[1] for u in unexpected], ["lockdep"])
        self.assertIn("a lock cycle of client_lock, nvsim_lock", unexpected[0][2])
        self.assertEqual([m[1] for m in missing], ["lockdep"])
        # A cycle with one more lock in it is another cycle.
        marker3 = "lockdep=client_lock,nvsim_lock,nvsim_map_lock"
        unexpected, _, _ = report.scan(lines(region(marker3, LOCKDEP_CLIENT)))
        self.assertEqual([u[1] for u in unexpected], ["lockdep"])

    def test_a_lockdep_region_naming_no_cycle_wants_planted_frames(self):
        unexpected, missing, _ = report.scan(lines(region("lockdep", LOCKDEP_CLIENT)))
        self.assertEqual([u[1] for u in unexpected], ["lockdep"])
        self.assertEqual([m[1] for m in missing], ["lockdep"])

    def test_a_region_may_name_the_planted_function(self):
        marker = "kasan=nvsim:nvidia_p2p_put_pages"
        self.assertEqual(report.scan(lines(region(marker, OTHER_KASAN))), ([], [], []))
        unexpected, _, _ = report.scan(lines(region(marker, PLANTED_KASAN, OTHER_KASAN)))
        self.assertIn("slab-out-of-bounds in planted_kasan", unexpected[0][2])

    def test_another_function_of_the_module_is_not_the_planted_report(self):
        marker = "kasan=nvsim:nvidia_p2p_get_pages"
        unexpected, missing, _ = report.scan(lines(region(marker, OTHER_KASAN)))
        self.assertEqual([u[1] for u in unexpected], ["kasan"])
        self.assertIn("its place in nvidia_p2p_get_pages [nvsim]", unexpected[0][2])
        self.assertEqual([m[1] for m in missing], ["kasan"])

    def test_a_module_alone_excuses_nothing_but_planted_ko(self):
        # Any report with a frame of nvsim would do: a kind, not content.
        unexpected, _, _ = report.scan(lines(region("kasan=nvsim", OTHER_KASAN)))
        self.assertEqual(sorted(u[1] for u in unexpected), ["expect-reports", "kasan"])
        self.assertIn("not by its module", unexpected[0][2] + unexpected[1][2])

    def test_a_report_without_a_titled_place_is_placed_by_its_innermost_frame(self):
        # might_sleep()'s report names a file, not a function: its first frame of ours in
        # the call trace (not the locks held before it, not the unwinder's guesses) is
        # where it happened. The lines as the 7.2 test kernel printed them.
        bug = """\
[   83.543372] BUG: sleeping function called from invalid context at nvsim.c:1615
[   83.544217] in_atomic(): 1, irqs_disabled(): 0, non_block: 0, pid: 1263, name: nvsim-test
[   83.544464] 3 locks held by nvsim-test/1263:
[   83.545828]  #1: ffffffffa0230100 (client_lock){+.+.}-{4:4}, at: p2pclient_write+0xf0/0x1260 [p2pclient]
[   83.546111]  #2: ffffffffa02301f8 (atomic_context){+.+.}-{3:3}, at: p2pclient_unmap+0x10b/0x1f0 [p2pclient]
[   83.546765] Call Trace:
[   83.546798]  <TASK>
[   83.546964]  __might_resched+0x37c/0x4a0
[   83.546970]  ? p2pclient_other+0x10/0x20 [p2pclient]
[   83.546988]  nvidia_p2p_dma_unmap_pages+0x2c/0x410 [nvsim]
[   83.547071]  p2pclient_unmap+0x14c/0x1f0 [p2pclient]
[   83.547800]  </TASK>
"""
        marker = "bug=nvsim:nvidia_p2p_dma_unmap_pages"
        self.assertEqual(report.scan(lines(region(marker, bug))), ([], [], []))
        unexpected, _, _ = report.scan(lines(region("bug=p2pclient:p2pclient_other", bug)))
        self.assertEqual([u[1] for u in unexpected], ["bug"])

    def test_the_lock_cycle_is_read_from_the_chain(self):
        body = report.body(lines(LOCKDEP_CLIENT), 1, "lockdep")
        self.assertEqual(report.lock_cycle(body), {"client_lock", "nvsim_lock"})
        self.assertIn("</TASK>", body[-1])


class PrintkLossTest(unittest.TestCase):
    def test_lost_messages_fail_the_run_even_in_a_planted_region(self):
        for loss in ["** 24 printk messages dropped **", "printk: dropped 12 messages",
                     "sh: 3 output lines suppressed due to ratelimiting"]:
            with self.subTest(loss=loss):
                unexpected, _, _ = report.scan(lines(in_test("[  9.0] %s\n" % loss)))
                self.assertEqual([(u[0], u[1]) for u in unexpected], [("t1", "printk-loss")])
                log = region("kasan", PLANTED_KASAN, "[  9.0] %s\n" % loss)
                unexpected, _, _ = report.scan(lines(log))
                self.assertEqual([u[1] for u in unexpected], ["printk-loss"])

    def test_ratelimited_callbacks_are_not_a_loss_of_reports(self):
        log = in_test("[  9.0] gdrpeer_rs_notify: 12 callbacks suppressed\n")
        self.assertEqual(report.scan(lines(log)), ([], [], []))


def walk_log(test, *faults):
    return CLEAN + "gdrpeer-test: begin %s\n%sgdrpeer-test: end %s\n" % (test, "".join(faults),
                                                                           test)


class FailnthTest(unittest.TestCase):
    """A fail-nth walk must fail allocations of gdrpeer's own code."""

    def judge(self, log, results):
        s = report.Scan(lines(log))
        return report.failnth_problems(results, s.faults, s.begun)

    def test_a_walk_failing_gdrpeer_allocations_passes(self):
        log = walk_log("gdrpeer-failnth-pin-miss", fault(IN_KERNEL), fault(IN_GDRPEER),
                       fault(IN_NVSIM, IN_GDRPEER))
        self.assertEqual(self.judge(log, [("PASS", "gdrpeer-failnth-pin-miss")]), [])
        faults = report.Scan(lines(log)).faults
        self.assertEqual(faults, {"gdrpeer-failnth-pin-miss": {"kernel": 1, "gdrpeer": 1,
                                                               "nvsim": 1}})

    def test_a_walk_reaching_no_gdrpeer_allocation_fails(self):
        # nvsim's allocation under gdrpeer's call is nvsim's, not gdrpeer's own.
        log = walk_log("gdrpeer-failnth-open", fault(IN_KERNEL), fault(IN_NVSIM, IN_GDRPEER))
        problems = self.judge(log, [("PASS", "gdrpeer-failnth-open")])
        self.assertEqual(len(problems), 1)
        self.assertIn("gdrpeer-failnth-open: no allocation in gdrpeer's own code failed", problems[0])
        self.assertIn("kernel 1, nvsim 1", problems[0])

    def test_the_unwinder_s_guesses_are_not_frames(self):
        log = walk_log("gdrpeer-failnth-open", fault("? " + IN_GDRPEER, IN_NVSIM, IN_GDRPEER))
        self.assertEqual(report.Scan(lines(log)).faults, {"gdrpeer-failnth-open": {"nvsim": 1}})

    def test_a_walk_with_no_failure_logged_fails(self):
        problems = self.judge(walk_log("gdrpeer-failnth-stats"), [("PASS", "gdrpeer-failnth-stats")])
        self.assertIn("none logged", problems[0])

    def test_a_suffixed_result_is_judged_by_its_walk(self):
        log = walk_log("gdrpeer-failnth-pin", fault(IN_KERNEL))
        log += walk_log("gdrpeer-failnth-pin-hit", fault(IN_GDRPEER))
        self.assertEqual(self.judge(log, [("PASS", "gdrpeer-failnth-pin-hit-4-and-6-pages")]), [])
        self.assertEqual(len(self.judge(log, [("PASS", "gdrpeer-failnth-pin-deb-7.2")])), 1)

    def test_a_walk_is_not_credited_with_a_shorter_named_walk_s_failures(self):
        # gdrpeer-failnth-gdrnic-reg-dmabuf failed nothing; gdrpeer-failnth-gdrnic-reg,
        # a prefix of its name, did.
        log = walk_log("gdrpeer-failnth-gdrnic-reg", fault(IN_GDRPEER))
        log += walk_log("gdrpeer-failnth-gdrnic-reg-dmabuf")
        problems = self.judge(log, [("PASS", "gdrpeer-failnth-gdrnic-reg"),
                                    ("PASS", "gdrpeer-failnth-gdrnic-reg-dmabuf")])
        self.assertEqual(len(problems), 1, problems)
        self.assertIn("gdrpeer-failnth-gdrnic-reg-dmabuf: no allocation", problems[0])

    def test_failed_and_skipped_walks_are_judged_by_their_result(self):
        log = walk_log("gdrpeer-failnth-open")
        self.assertEqual(self.judge(log, [("FAIL", "gdrpeer-failnth-open"),
                                          ("SKIP", "gdrpeer-failnth-open-deb-7.2")]), [])


def write(path, text):
    with open(path, "w") as f:
        f.write(text)


class ManifestTest(unittest.TestCase):
    """Each plan states the tests it must produce."""

    MANIFEST = [("t1", False), ("t2", False), ("t3", True)]

    def test_a_full_run_passes(self):
        results = [("PASS", "t1"), ("PASS", "t2"), ("SKIP", "t3"), ("PASS", "new")]
        self.assertEqual(report.manifest_problems(results, self.MANIFEST, ""), [])

    def test_a_missing_test_fails(self):
        problems = report.manifest_problems([("PASS", "t1"), ("SKIP", "t3")], self.MANIFEST, "")
        self.assertEqual(problems, ["1 of the 3 tests the manifest names did not run: t2"])

    def test_a_skip_where_the_test_must_run_fails(self):
        problems = report.manifest_problems([("PASS", "t1"), ("SKIP", "t2"), ("SKIP", "t3")],
                                            self.MANIFEST, "")
        self.assertEqual(problems, ["1 tests the manifest says must run were skipped: t2"])

    def test_no_results_fail(self):
        self.assertEqual(report.manifest_problems([], self.MANIFEST, ""),
                         ["the plan produced no results"])
        self.assertEqual(report.manifest_problems([], None, ""), ["the plan produced no results"])

    def test_a_filter_matching_nothing_fails(self):
        problems = report.manifest_problems([("PASS", "other")], None, "^t9$")
        self.assertEqual(problems, ["the filter '^t9$' matches no test that ran"])

    def test_a_filtered_run_is_held_to_the_tests_its_filter_names(self):
        self.assertEqual(report.manifest_problems([("PASS", "t2")], self.MANIFEST, "t2"), [])
        problems = report.manifest_problems([("PASS", "t2")], self.MANIFEST, "t[12]")
        self.assertEqual(problems, ["1 of the 2 tests the manifest names did not run: t1"])

    def test_arguments_stand_in_the_names(self):
        with tempfile.TemporaryDirectory() as d:
            write(d + "/p.manifest", "# comment\ndemo-{arg1}\nkunit-{arg1} skip\n\n")
            self.assertEqual(report.read_manifest(d + "/p.manifest", ["deb-7.2"]),
                             [("demo-deb-7.2", False), ("kunit-deb-7.2", True)])

    def test_every_plan_states_its_tests(self):
        plans = report.plans_dir()
        for name in sorted(os.listdir(plans)):
            if name.endswith(".sh") and not name.startswith("lib-"):
                with self.subTest(plan=name):
                    self.assertTrue(os.path.exists(report.manifest_path(plans + "/" + name)))

    def run_summary(self, results, kernel_log=CLEAN, manifest="t1\n", flt="", plan_name="p"):
        with tempfile.TemporaryDirectory() as d:
            write(d + "/results.log", results + "@@ PLAN-DONE\n")
            write(d + "/kernel.log", kernel_log)
            write(d + "/%s.sh" % plan_name, "run_plan() { :; }\n")
            if manifest is not None:
                write(d + "/%s.manifest" % plan_name, manifest)
            write(d + "/plan", "%s/%s.sh\n" % (d, plan_name))
            write(d + "/plan.filter", flt + "\n")
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                status = report.summary(d)
            with open(d + "/counts") as f:
                counts = f.read().split()
            with open(d + "/verdicts") as f:
                verdicts = f.read().splitlines()
        return status, counts, verdicts, out.getvalue()

    def test_the_summary_fails_a_shortfall(self):
        status, counts, verdicts, out = self.run_summary("@@ RESULT PASS t0\n")
        self.assertEqual((status, counts), (1, ["1", "1", "0"]), out)
        self.assertIn("FAIL manifest: 1 of the 1 tests the manifest names did not run: t1", out)
        self.assertEqual(verdicts[0], "PASS t0")
        self.assertTrue(verdicts[1].startswith("FAIL oracle:"))
        status, counts, _, out = self.run_summary("@@ RESULT PASS t1\n")
        self.assertEqual((status, counts), (0, ["1", "0", "0"]), out)

    def test_the_summary_fails_an_empty_plan(self):
        status, counts, _, out = self.run_summary("", manifest=None)
        self.assertEqual((status, counts), (1, ["0", "1", "0"]), out)
        self.assertIn("the plan produced no results", out)

    def test_the_summary_fails_a_filter_that_matches_nothing(self):
        status, _, _, out = self.run_summary("@@ RESULT PASS t1\n", flt="gdrpeer-mmap-gone")
        self.assertEqual(status, 1, out)
        self.assertIn("the filter 'gdrpeer-mmap-gone' matches no test that ran", out)

    def test_the_summary_fails_a_passing_walk_that_failed_no_gdrpeer_allocation(self):
        log = walk_log("gdrpeer-failnth-open", fault(IN_KERNEL))
        status, _, _, out = self.run_summary("@@ RESULT PASS gdrpeer-failnth-open\n", log,
                                             manifest="gdrpeer-failnth-open\n")
        self.assertEqual(status, 1, out)
        self.assertIn("no allocation in gdrpeer's own code failed", out)

    def test_the_manifest_is_written_from_a_run(self):
        with tempfile.TemporaryDirectory() as d:
            write(d + "/results.log", "@@ RESULT PASS demo-deb-7.2\n@@ RESULT SKIP kunit-deb-7.2"
                  " no kunit\n@@ RESULT PASS demo-deb-7.2\n@@ RESULT FAIL broken-deb-7.2\n"
                  "@@ RESULT FAIL nvsim-misuse grew\n@@ PLAN-DONE\n")
            write(d + "/plan", "/x/tests/plans/stock.sh\n")
            write(d + "/plan.args", "deb-7.2\n")
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                report.manifest(d)
        rows = [line for line in out.getvalue().splitlines() if not line.startswith("#")]
        # A test that failed must pass; the library's nvsim-misuse is no test.
        self.assertEqual(rows, ["broken-{arg1}", "demo-{arg1}", "kunit-{arg1} skip"])


class TallyTest(unittest.TestCase):
    """The closing line counts tests: reruns on other kernels are one test each."""

    def test_reruns_are_counted_once_and_fail_where_any_failed(self):
        with tempfile.TemporaryDirectory() as d:
            write(d + "/host", "PASS cargo:a\n")
            write(d + "/check", "PASS t1\nSKIP t2\nFAIL oracle:vm:1\n")
            write(d + "/deb72", "PASS t1-deb-7.2\nFAIL t2-deb-7.2\nSKIP kunit-deb-7.2\n")
            write(d + "/deb73", "PASS t1-deb-7.3\nPASS t2-deb-7.3\nSKIP kunit-deb-7.3\n")
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                failed = report.tally(["host=%s/host" % d, "vm check=%s/check" % d,
                                       "stock deb-7.2=%s/deb72:deb-7.2" % d,
                                       "stock deb-7.3=%s/deb73:deb-7.3" % d])
        rows = out.getvalue().splitlines()
        self.assertEqual(rows[0], "  host: 1 passed, 0 failed, 0 skipped")
        self.assertEqual(rows[2], "  stock deb-7.2: 1 passed, 1 failed, 1 skipped (reruns on deb-7.2)")
        # cargo:a, t1 pass; t2 (failed on 7.2) and the oracle's problem fail; kunit skipped.
        self.assertEqual(rows[-1], "2 passed, 2 failed, 1 skipped")
        self.assertEqual(failed, 2)

    def test_a_run_without_verdicts_is_a_failure(self):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            self.assertEqual(report.tally(["vm=/nonexistent/verdicts"]), 1)


ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

# The guest's plan library run on the host, under busybox's sh as in the guest,
# with nvsim's debugfs, the module tools and the test programs faked in a
# directory: what a plan's shell judges (exit statuses, nvsim's counters).
PLAN_PRELUDE = r"""
export PATH="$FAKE/bin:$PATH"
NVSIM_DEBUGFS=$FAKE/nvsim NVSIM_JUDGED=$FAKE/judged NVSIM_MISUSE=$FAKE/misuse
. "$ROOT/tests/vm/guest/lib.sh"
. "$ROOT/tests/plans/lib-suites.sh"
kmsg() { :; }
M=$FAKE/modules
stats() { printf 'pins_live 0\nclient_errors %s\nfreed_page_writes %s\n' "$1" "$2" >$NVSIM_DEBUGFS/stats; }
"""

FAKE_PROGRAMS = {
    # insmod creates nvsim's debugfs, rmmod removes it.
    "gdrpeer-vmtool": 'case $2 in */nvsim.ko) mkdir -p "$FAKE/nvsim"; '
                      'printf "client_errors 0\\nfreed_page_writes 0\\n" >"$FAKE/nvsim/stats";; esac',
    "rmmod": '[ "$1" != nvsim ] || rm -rf "$FAKE/nvsim"',
    "dmesg": ":",
    # gdrpeer-test: --cuda-only without a CUDA library, as sanity.rs exits then.
    "gdrpeer-test": 'case $1 in --cuda-only) echo "no CUDA driver library"; exit 3;; '
                    '--cuda) echo "@@ RESULT PASS cuda-pin-unpin";; esac',
    "gdrdrv-client": 'echo "PASS pin-map-unpin"; echo 7 >"$FAKE/nvsim/client_errors.n"; '
                     'printf "client_errors 2\\nfreed_page_writes 0\\n" >"$FAKE/nvsim/stats"',
}


class PlanLibraryTest(unittest.TestCase):
    """The plans' shell library: every program's exit status and nvsim's misuse
    counters count, whatever the suite."""

    def plan(self, body):
        with tempfile.TemporaryDirectory() as fake:
            os.makedirs(fake + "/bin")
            os.makedirs(fake + "/modules")
            for name, text in FAKE_PROGRAMS.items():
                write("%s/bin/%s" % (fake, name), "#!/bin/sh\n%s\n" % text)
                os.chmod("%s/bin/%s" % (fake, name), 0o755)
            env = dict(os.environ, FAKE=fake, ROOT=ROOT)
            # To a file: a test's watchdog (a sleep) outlives the shell.
            with open(fake + "/out", "w") as out:
                subprocess.run(["busybox", "sh", "-c", PLAN_PRELUDE + body], env=env,
                               stdout=out, stderr=subprocess.STDOUT, timeout=60)
            with open(fake + "/out") as out:
                self.output = out.read()
        return [line for line in self.output.splitlines() if line.startswith("@@ RESULT")]

    def test_a_test_that_makes_nvsim_count_misuse_fails(self):
        results = self.plan("""
            clean() { load $M/nvsim.ko; }
            misuse() { stats 0 1; }
            t clean clean
            t misuse misuse
            t after-misuse clean
        """)
        self.assertEqual(results[0], "@@ RESULT PASS clean")
        self.assertTrue(results[1].startswith("@@ RESULT FAIL misuse nvsim's misuse counters grew"
                                              " during misuse: client_errors 0, freed_page_writes 1"),
                        results)
        self.assertEqual(results[2], "@@ RESULT PASS after-misuse")

    def test_a_suite_judged_at_nvsim_s_unload_fails(self):
        # The C client checks no counter of nvsim's: its suite is judged at rmmod.
        results = self.plan("""
            gdrdrv_client_suite
            t next true
        """)
        self.assertIn("@@ RESULT PASS gdrdrv-client-pin-map-unpin", results)
        misuse = [r for r in results if r.startswith("@@ RESULT FAIL nvsim-misuse")]
        self.assertEqual(len(misuse), 1, results)
        self.assertIn("during gdrdrv-client: client_errors 2", misuse[0])
        self.assertEqual(results[-1], "@@ RESULT PASS next")

    def test_a_program_that_cannot_run_its_tests_fails(self):
        results = self.plan("cuda_suite\n")
        self.assertIn("@@ RESULT FAIL gdrpeer-test-cuda-only-without-module exited with status 3",
                      results)
        self.assertIn("@@ RESULT PASS cuda-pin-unpin", results)

    def test_a_crash_is_a_failure(self):
        results = self.plan("results crasher -x sh -c 'echo \"@@ RESULT PASS a\"; kill -SEGV $$'\n")
        self.assertEqual(results, ["@@ RESULT PASS a-x", "@@ RESULT FAIL crasher-x exited with status 139"])


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
