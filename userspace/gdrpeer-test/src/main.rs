// SPDX-License-Identifier: GPL-2.0

//! `gdrpeer-test`: tests of gdrpeer.ko against nvsim, run in the test guest with nvsim.ko,
//! p2pclient.ko and gdrpeer.ko loaded (gdrpeer with `cache_max_regions=4`). Prints
//! `@@ RESULT PASS|FAIL name` per test.
//!
//! Every test ends by checking that gdrpeer holds nothing any more (its global debugfs
//! counters) and that nvsim's counters are back to zero.
//!
//! This file reads the mode and runs it. The default run's tests are in [`tests`], one file
//! per subject; the other modes are the sample NIC's tests ([`nic`]) with the dma-buf
//! export's ([`dmabuf`], the NIC importing), gdrcopy's sanity
//! scenarios ([`sanity`]), the stress run ([`stress`]), the ioctl fuzzer ([`fuzz`]), the
//! kernel-API fuzzer ([`kapi_fuzz`], in the NIC's tests and alone) and the demo ([`demo`]). The helpers they share are in [`helpers`], the process plumbing in
//! [`proc`].

mod cuda_probe;
mod demo;
mod dmabuf;
mod doctables;
mod failnth;
mod fuzz;
mod gdrdrv_sanity;
mod helpers;
mod kapi_fuzz;
mod nic;
mod proc;
mod sanity;
mod sigbus;
mod stress;
mod tests;
mod uffd;
mod vmm;

use helpers::all_released;
use nvsim::testing::{self as harness, TestResult};
use std::process::ExitCode;

/// The modes in which the tests run this program as a child (alone on the command line).
const CHILD_MODES: &[proc::ChildMode] = &[
    ("--pin-and-wait", tests::processes::pin_and_wait),
    (
        "--pin-and-wait-gdrpeer-first",
        tests::processes::pin_and_wait_gdrpeer_first,
    ),
    ("--nic-reg-and-wait", nic::reg_and_wait),
    ("--gpu-alloc-and-wait", tests::badinput::gpu_alloc_and_wait),
    ("--cuda-touch-after-free", sanity::touch_after_cumemfree),
    ("--demo-mmap-child", demo::mmap_child),
    (
        "--gdrdrv-touch-after-free",
        gdrdrv_sanity::touch_after_cumemfree,
    ),
    (
        "--gdrdrv-touch-after-unpin",
        gdrdrv_sanity::touch_after_unpin,
    ),
    (
        "--cuda-vmm-touch-after-unmap",
        vmm::gdrpeer_touch_after_unmap,
    ),
    (
        "--gdrdrv-vmm-touch-after-unmap",
        vmm::gdrdrv_touch_after_unmap,
    ),
];

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(code) = proc::child_main(&args, CHILD_MODES) {
        return code;
    }
    let exit = |ok: bool| {
        if ok {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        }
    };
    let narrated = |r: TestResult| {
        if let Err(e) = &r {
            println!("FAIL: {e}");
        }
        exit(r.is_ok())
    };
    match args.first().map(String::as_str) {
        Some("--demo") => return narrated(demo::run()),
        Some("--demo-nic") => return narrated(demo::nic()),
        Some("--demo-mmap") => return narrated(demo::mmap()),
        Some("--demo-dmabuf") => return narrated(demo::dmabuf()),
        Some("--demo-dmabuf-pinned") => return narrated(demo::dmabuf_pinned()),
        // The CUDA driver library's answers, or their comparison with a record of real CUDA's.
        Some("--cuda-probe") => return narrated(cuda_probe::run(&args[1..])),
        Some("--cuda-probe-section") => {
            return narrated(cuda_probe::section(args.get(1).map_or("", String::as_str)))
        }
        Some("--stress") => return narrated(stress::run(&args[1..])),
        Some("--fuzz") => return narrated(fuzz::run(&args[1..])),
        Some("--kapi-fuzz") => return narrated(kapi_fuzz::run_args(&args[1..])),
        Some("--stress-worker") => return narrated(stress::worker(&args[1..])),
        // The sample NIC's tests (gdrnic.ko loaded), gdrpeer's dma-buf export with the NIC
        // as importer, and the NIC's tests that make lockdep or the IOMMU report.
        // --nic-iommu: the planted DMA after revocation, behind a translating IOMMU.
        Some(mode @ ("--nic" | "--nic-lockdep" | "--nic-iommu")) => {
            let tests = match mode {
                "--nic" => [nic::TESTS, dmabuf::TESTS].concat(),
                "--nic-lockdep" => nic::LOCKDEP_TESTS.to_vec(),
                _ => nic::IOMMU_TESTS.to_vec(),
            };
            let filter = args.get(1).cloned().unwrap_or_default();
            return exit(harness::run_tests(&tests, &filter, nic::nic_released));
        }
        // The cases that take half a million operations: run on the kernels without
        // sanitizers (tests/plans/stock.sh), where they take a minute rather than several.
        Some("--large") => {
            let filter = args.get(1).cloned().unwrap_or_default();
            return exit(harness::run_tests(tests::LARGE, &filter, all_released));
        }
        // gdrcopy's sanity scenarios over CUDA; --cuda-only without the module.
        Some(mode @ ("--cuda" | "--cuda-only")) => {
            if let Err(e) = sanity::load() {
                println!("gdrpeer-test: {e}");
                return ExitCode::from(sanity::NO_CUDA);
            }
            let filter = args.get(1).cloned().unwrap_or_default();
            return exit(if mode == "--cuda" {
                harness::run_tests(
                    &[sanity::TESTS, gdrdrv_sanity::TESTS].concat(),
                    &filter,
                    all_released,
                )
            } else {
                harness::run_tests(sanity::CUDA_ONLY, &filter, || Ok(()))
            });
        }
        _ => {}
    }
    let filter = args.first().cloned().unwrap_or_default();
    exit(harness::run_tests(&tests::all(), &filter, all_released))
}
