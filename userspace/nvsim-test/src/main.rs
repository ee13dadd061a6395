// SPDX-License-Identifier: GPL-2.0

//! `nvsim-test`: one test per behaviour of the NVIDIA side that nvsim
//! reproduces (Documentation/dev/nvsim.rst). Runs in the test guest with nvsim.ko
//! and p2pclient.ko loaded; prints `@@ RESULT PASS|FAIL name` per test.
//!
//! Every test ends by checking that nvsim's counters are back to zero.

mod cuda;
mod driver;

use nvsim::testing::{
    self as harness, client, debugfs, errno, param, pin, stat, stats, status, take_client_errors,
    Test, TestResult,
};
use nvsim::Gpu;
use nvsim::{check, check_eq};
use std::collections::HashMap;
use std::process::{Command, ExitCode};

pub(crate) const K64: u64 = 1 << 16;
pub(crate) const EINVAL: i32 = -22;
const ENOMEM: i32 = -12;
const EIO: i32 = -5;
const EBUSY: i32 = -16;

/// Runs one p2pclient command in another process (another tgid).
pub(crate) fn in_other_process(cmd: &str) -> Result<String, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let out = Command::new(exe)
        .args(["--client", cmd])
        .output()
        .map_err(|e| e.to_string())?;
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Waits until an nv-p2p call sleeps in one of nvsim's one-shot entry delays
/// (`put_pages_delay_us`, `dma_map_delay_us`).
pub(crate) fn wait_delayed() -> TestResult {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while stat("calls_delayed")? != 1 {
        check!(
            std::time::Instant::now() < deadline,
            "no nv-p2p call asleep on entry within 10 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    Ok(())
}

/// Waits until p2pclient's pin `handle` has been called back.
pub(crate) fn wait_revoked(handle: u32, secs: u64) -> TestResult {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while !client(&format!("state {handle}"))?.starts_with("revoked=1") {
        check!(
            std::time::Instant::now() < deadline,
            "no callback within {secs} s"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    Ok(())
}

pub(crate) fn expect_err(cmd: &str, errno: i32) -> TestResult {
    match pin(cmd)? {
        Err(e) => {
            check_eq!(e, errno, cmd);
            Ok(())
        }
        Ok(p) => Err(format!("{cmd}: pinned {p:?}, expected error {errno}")),
    }
}

pub(crate) fn pin_ok(cmd: &str) -> Result<harness::Pin, String> {
    pin(cmd)?.map_err(|e| format!("{cmd}: error {e}"))
}

fn alignment_of_va_and_len() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(4 * K64).map_err(errno)?;
    expect_err(&format!("get {} {}", va + 4096, K64), EINVAL)?;
    expect_err(&format!("get {} {}", va, K64 + 1), EINVAL)?;
    expect_err(&format!("get {} 0", va), EINVAL)?;
    let p = pin_ok(&format!("get {} {}", va + K64, 2 * K64))?;
    check_eq!(p.entries, 2, "entries");
    check_eq!(status(&format!("put {}", p.handle))?, 0, "put");
    Ok(())
}

fn null_callback_rejected() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(K64).map_err(errno)?;
    expect_err(&format!("get_nocb {va} {K64}"), EINVAL)
}

fn lookup_by_calling_process() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(K64).map_err(errno)?;
    let other = in_other_process(&format!("get {va} {K64}"))?;
    check_eq!(other, format!("err {EINVAL}"), "pin from another process");
    expect_err(&format!("kget {va} {K64}"), EINVAL)?;
    // The deprecated token path finds the memory from anywhere.
    let q = gpu.query(va).map_err(errno)?;
    let by_token = in_other_process(&format!("get {va} {K64} {} {}", q.p2p_token, q.va_space))?;
    let p = harness::parse_pin(&by_token).ok_or(by_token.clone())?;
    check!(p.is_ok(), "pin by token failed: {by_token}");
    Ok(()) // closing the GPU fd frees the memory and calls back the token pin
}

fn range_inside_one_allocation() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (a, _) = gpu.alloc(2 * K64).map_err(errno)?;
    let (b, _) = gpu.alloc(2 * K64).map_err(errno)?;
    check_eq!(b, a + 2 * K64, "second allocation follows the first");
    expect_err(&format!("get {} {}", a + K64, 2 * K64), EINVAL)?;
    expect_err(&format!("get {} {}", a, 3 * K64), EINVAL)?;
    expect_err(&format!("get {} {}", 0x1000_0000u64, K64), EINVAL)
}

fn bar1_accounting_and_exhaustion() -> TestResult {
    let reserve = stat("bar1_reserve")?;
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(8 * K64).map_err(errno)?;
    // Room for exactly 4 pages beyond the reserve.
    debugfs("bar1_size", &(reserve + 4 * K64).to_string())?;
    let first = pin_ok(&format!("get {va} {}", 3 * K64))?;
    check_eq!(stat("bar1_used")?, 3 * K64, "bar1_used after 3 pages");
    // Overlapping pins share the mapped extents: only page 3 is new.
    let second = pin_ok(&format!("get {} {}", va + K64, 3 * K64))?;
    check_eq!(stat("bar1_used")?, 4 * K64, "bar1_used after overlap");
    expect_err(&format!("get {} {}", va + 4 * K64, K64), ENOMEM)?;
    // Already-mapped pages can still be pinned again when BAR1 is full.
    let third = pin_ok(&format!("get {va} {K64}"))?;
    for p in [&first, &second, &third] {
        check_eq!(status(&format!("put {}", p.handle))?, 0, "put");
    }
    check_eq!(stat("bar1_used")?, 0, "bar1_used after unpin");
    let total = 256u64 << 20;
    debugfs("bar1_size", &total.to_string())?;
    Ok(())
}

fn injected_errors_are_returned() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(K64).map_err(errno)?;
    for errno in [ENOMEM, EIO, EBUSY] {
        debugfs("fail_get_pages", &format!("1 {}", -errno))?;
        expect_err(&format!("get {va} {K64}"), errno)?;
    }
    let p = pin_ok(&format!("get {va} {K64}"))?;
    debugfs("fail_dma_map", "1 5")?;
    check_eq!(
        status(&format!("map {} gpu", p.handle))?,
        EIO,
        "injected dma_map failure"
    );
    check_eq!(stat("faults_injected")? >= 4, true, "faults counted");
    check_eq!(status(&format!("put {}", p.handle))?, 0, "put");
    Ok(())
}

fn pin_cost_is_spent() -> TestResult {
    let path = "/sys/module/nvsim/parameters/pin_cost_us";
    let old = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    std::fs::write(path, "50000").map_err(|e| e.to_string())?;
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(K64).map_err(errno)?;
    let before = stats()?;
    let t = std::time::Instant::now();
    let p = pin_ok(&format!("get {va} {K64}"));
    let spent = t.elapsed();
    std::fs::write(path, old.trim()).map_err(|e| e.to_string())?;
    let p = p?;
    check!(spent.as_micros() >= 50_000, "a 50 ms pin took {spent:?}");
    // nvsim's own account of the time (gdrpeer-bench's miss overhead is measured against
    // it): the sleep and no more than the caller saw.
    let counted = |s: &HashMap<String, u64>, k: &str| s.get(k).copied().unwrap_or(0);
    let mid = stats()?;
    let get_ns = counted(&mid, "get_pages_ns") - counted(&before, "get_pages_ns");
    check!(
        (50_000_000..=spent.as_nanos() as u64).contains(&get_ns),
        "get_pages_ns grew by {get_ns} in a 50 ms pin that took {spent:?}"
    );
    let t = std::time::Instant::now();
    check_eq!(status(&format!("put {}", p.handle))?, 0, "put");
    let put_spent = t.elapsed();
    let after = stats()?;
    check_eq!(
        counted(&after, "put_pages_calls"),
        counted(&mid, "put_pages_calls") + 1,
        "put_pages_calls"
    );
    let put_ns = counted(&after, "put_pages_ns") - counted(&mid, "put_pages_ns");
    check!(
        (1..=put_spent.as_nanos() as u64).contains(&put_ns),
        "put_pages_ns grew by {put_ns} in a put that took {put_spent:?}"
    );
    Ok(())
}

fn put_from_wrong_process_releases_nothing() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(K64).map_err(errno)?;
    let p = pin_ok(&format!("get {va} {K64}"))?;
    let before = stat("put_pages_wrong_process")?;
    check_eq!(
        in_other_process(&format!("put {}", p.handle))?,
        "ok",
        "foreign put returns 0"
    );
    check_eq!(stat("pins_live")?, 1, "pin still live");
    check_eq!(stat("put_pages_wrong_process")?, before + 1, "counted");
    take_client_errors(1, "a put_pages from another process")?;
    check_eq!(status(&format!("put {}", p.handle))?, 0, "owner's put");
    check_eq!(stat("pins_live")?, 0, "released by the owner");
    Ok(())
}

fn callback_runs_synchronously_in_freeing_thread() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(2 * K64).map_err(errno)?;
    let p = pin_ok(&format!("get {va} {}", 2 * K64))?;
    check_eq!(status(&format!("map {} gpu", p.handle))?, 0, "map");
    let fired = stat("callbacks_fired")?;
    gpu.free(va).map_err(|e| format!("free: {e}"))?;
    // By the time cuMemFree returns, the callback has run, in this thread.
    let state = client(&format!("state {}", p.handle))?;
    let tid = rustix::thread::gettid().as_raw_nonzero().get();
    check_eq!(state, format!("revoked=1 cb_pid={tid}"), "state after free");
    check_eq!(stat("callbacks_fired")?, fired + 1, "callbacks_fired");
    // nvsim freed the table and its DMA mappings itself after the callback.
    check_eq!(stat("pins_live")?, 0, "pins_live");
    check_eq!(stat("dma_mappings_live")?, 0, "dma_mappings_live");
    // A put of the dead table is only a key now: 0, nothing happens.
    check_eq!(
        status(&format!("put {}", p.handle))?,
        0,
        "put after callback"
    );
    Ok(())
}

fn closing_the_gpu_file_fires_callbacks() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(K64).map_err(errno)?;
    let p = pin_ok(&format!("get {va} {K64}"))?;
    drop(gpu);
    check_eq!(
        client(&format!("state {}", p.handle))?.starts_with("revoked=1"),
        true,
        "revoked"
    );
    Ok(())
}

fn persistent_pin_survives_free() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(K64).map_err(errno)?;
    gpu.write(va, b"persistent").map_err(errno)?;
    let p = pin_ok(&format!("getp {va} {K64}"))?;
    gpu.free(va).map_err(|e| format!("free: {e}"))?;
    check_eq!(
        client(&format!("state {}", p.handle))?,
        "revoked=0 cb_pid=0",
        "no callback"
    );
    check_eq!(stat("persistent_pins_live")?, 1, "still pinned");
    check!(gpu.query(va).is_err(), "the VA is free again");
    // Persistent put works from any process.
    check_eq!(
        in_other_process(&format!("putp {}", p.handle))?,
        "ok",
        "putp"
    );
    check_eq!(stat("persistent_pins_live")?, 0, "released");
    Ok(())
}

/// The sysfs directory of the PCI function p2pclient names `peer` ("gpu": the ivshmem device
/// nvsim binds; "edu").
fn peer_sysfs(peer: &str) -> Result<std::path::PathBuf, String> {
    let (vendor, device) = if peer == "gpu" {
        ("0x1af4", "0x1110")
    } else {
        ("0x1234", "0x11e8")
    };
    for entry in std::fs::read_dir("/sys/bus/pci/devices").map_err(|e| e.to_string())? {
        let path = entry.map_err(|e| e.to_string())?.path();
        let id = |f: &str| std::fs::read_to_string(path.join(f)).unwrap_or_default();
        if id("vendor").trim() == vendor && id("device").trim() == device {
            return Ok(path);
        }
    }
    Err(format!("no PCI function for {peer}"))
}

/// Whether DMA of `peer` goes through a translating IOMMU: its IOMMU group's default domain
/// is "DMA" or "DMA-FQ". Without a group (no IOMMU) or with an identity domain, its DMA
/// addresses are bus addresses.
fn iommu_translates(peer: &str) -> Result<bool, String> {
    let path = peer_sysfs(peer)?.join("iommu_group/type");
    match std::fs::read_to_string(&path) {
        Ok(t) => Ok(matches!(t.trim(), "DMA" | "DMA-FQ")),
        Err(_) if !peer_sysfs(peer)?.join("iommu_group").exists() => Ok(false),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// dma_map_pages for two peers: a mapping each, of the pin's pages. Without an IOMMU the DMA
/// addresses are the table's bus addresses; behind a translating one they are IOVAs, page
/// aligned and none of them a bus address of the pin (gdrpeer-test reads through them with
/// the NIC to see that they reach the pages).
fn dma_map_several_peers() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(2 * K64).map_err(errno)?;
    let p = pin_ok(&format!("get {va} {}", 2 * K64))?;
    for peer in ["gpu", "edu"] {
        let out = client(&format!("map {} {peer}", p.handle))?;
        check!(out.starts_with("ok "), "map for {peer}: {out}");
        check!(
            out.contains("version=0x00020003 entries=2"),
            "mapping for {peer}: {out}"
        );
        if !iommu_translates(peer)? {
            let want: Vec<String> = p.pa.iter().map(|a| format!("{a:#x}")).collect();
            check!(
                out.ends_with(&format!("dma={}", want.join(","))),
                "{peer} addresses, no IOMMU translating (the bus addresses): {out}"
            );
            continue;
        }
        let dma = out
            .rsplit_once("dma=")
            .map(|(_, a)| {
                a.split(',')
                    .map(|x| u64::from_str_radix(x.trim().trim_start_matches("0x"), 16))
                    .collect::<Result<Vec<u64>, _>>()
            })
            .and_then(Result::ok)
            .ok_or(format!("{peer} addresses: {out}"))?;
        check_eq!(dma.len(), p.pa.len(), format!("{peer} addresses: {out}"));
        for d in dma {
            check!(
                d % 4096 == 0 && !p.pa.contains(&d),
                "{peer} address {d:#x} behind a translating IOMMU: a bus address of the pin \
                 ({:x?}) or not page-aligned",
                p.pa
            );
        }
    }
    check_eq!(stat("dma_mappings_live")?, 2, "two mappings");
    check_eq!(
        status(&format!("unmap {} 0 gpu", p.handle))?,
        0,
        "unmap gpu"
    );
    check_eq!(
        status(&format!("unmap {} 1 edu", p.handle))?,
        0,
        "unmap edu"
    );
    check_eq!(status(&format!("put {}", p.handle))?, 0, "put");
    Ok(())
}

fn page_table_version() -> TestResult {
    let want = param("page_table_version")?;
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(K64).map_err(errno)?;
    let p = pin_ok(&format!("get {va} {K64}"))?;
    check_eq!(u64::from(p.version), want, "page table version");
    check_eq!(status(&format!("put {}", p.handle))?, 0, "put");
    Ok(())
}

fn buffer_ids_are_never_reused() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, id) = gpu.alloc(K64).map_err(errno)?;
    gpu.set_sync_memops(va, 1).map_err(errno)?;
    check_eq!(
        gpu.query(va + 10).map_err(errno)?.sync_memops,
        1,
        "sync_memops"
    );
    gpu.free(va).map_err(errno)?;
    let (va2, id2) = gpu.alloc(K64).map_err(errno)?;
    check_eq!(va2, va, "same address after free + alloc");
    check!(id2 != id, "buffer id {id} reused");
    check!(
        gpu.query(va2).map_err(errno)?.sync_memops == 0,
        "fresh flags"
    );
    Ok(())
}

fn memory_contents_through_mmap() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(2 * K64).map_err(errno)?;
    let data: Vec<u8> = (0..3000u32).map(|i| (i * 7) as u8).collect();
    // Across the boundary between two GPU pages (not adjacent in the BAR with fragmented_bar).
    gpu.write(va + K64 - 1000, &data).map_err(errno)?;
    check_eq!(
        gpu.read(va + K64 - 1000, data.len()).map_err(errno)?,
        data,
        "read back"
    );
    Ok(())
}

fn free_fired_while_a_pin_is_in_progress() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(K64).map_err(errno)?;
    let id = gpu.query(va).map_err(errno)?.buffer_id;
    debugfs("free_on_pin", &format!("{id} 0"))?;
    let p = pin_ok(&format!("get {va} {K64}"))?;
    wait_revoked(p.handle, 10)?;
    check!(gpu.query(va).is_err(), "the allocation is gone");
    Ok(())
}

/// A named test.
const TESTS: &[Test] = &[
    ("nvsim-alignment-of-va-and-len", alignment_of_va_and_len),
    ("nvsim-null-callback-rejected", null_callback_rejected),
    (
        "nvsim-null-callback-data-accepted",
        driver::null_callback_data_accepted,
    ),
    ("nvsim-lookup-by-calling-process", lookup_by_calling_process),
    (
        "nvsim-range-inside-one-allocation",
        range_inside_one_allocation,
    ),
    (
        "nvsim-bar1-accounting-and-exhaustion",
        bar1_accounting_and_exhaustion,
    ),
    (
        "nvsim-injected-errors-are-returned",
        injected_errors_are_returned,
    ),
    ("nvsim-pin-cost-is-spent", pin_cost_is_spent),
    (
        "nvsim-put-from-wrong-process-releases-nothing",
        put_from_wrong_process_releases_nothing,
    ),
    (
        "nvsim-callback-synchronous-in-freeing-thread",
        callback_runs_synchronously_in_freeing_thread,
    ),
    (
        "nvsim-closing-the-gpu-file-fires-callbacks",
        closing_the_gpu_file_fires_callbacks,
    ),
    (
        "nvsim-persistent-pin-survives-free",
        persistent_pin_survives_free,
    ),
    ("nvsim-dma-map-several-peers", dma_map_several_peers),
    (
        "nvsim-bar-extents-contiguous-unless-fragmented",
        driver::bar_extents_contiguous_unless_fragmented,
    ),
    ("nvsim-page-table-version", page_table_version),
    (
        "nvsim-buffer-ids-are-never-reused",
        buffer_ids_are_never_reused,
    ),
    (
        "nvsim-memory-contents-through-mmap",
        memory_contents_through_mmap,
    ),
    (
        "nvsim-free-fired-while-a-pin-is-in-progress",
        free_fired_while_a_pin_is_in_progress,
    ),
    (
        "nvsim-injected-fraction-of-failures",
        injected_fraction_of_failures,
    ),
    (
        "nvsim-debugfs-free-now-and-later",
        debugfs_free_now_and_later,
    ),
    ("nvsim-gpu-gone-is-enodev", gpu_gone_is_enodev),
    ("libcuda-sim-init-and-device", cuda::init_and_device),
    ("libcuda-sim-buffer-id-tag-check", cuda::buffer_id_tag_check),
    ("libcuda-sim-memcpy-roundtrip", cuda::memcpy_roundtrip),
    ("libcuda-sim-p2p-tokens-pin", cuda::p2p_tokens_pin),
    ("libcuda-sim-unified-memory", cuda::unified_memory),
    ("libcuda-sim-vmm-map-pin-unmap", cuda::vmm_map_pin_unmap),
    ("libcuda-sim-suballocation", cuda::suballocation),
    (
        "libcuda-sim-every-device-attribute-answered",
        cuda::every_device_attribute_answered,
    ),
    (
        "libcuda-sim-free-without-a-current-context",
        cuda::free_without_a_current_context,
    ),
    (
        "libcuda-sim-pointer-attributes-without-a-current-context",
        cuda::pointer_attributes_without_a_current_context,
    ),
    (
        "nvsim-vmm-closing-the-file-frees",
        vmm_closing_the_file_frees,
    ),
    (
        "nvsim-vmm-and-alloc-refuse-wrapping-and-cutting-ranges",
        vmm_and_alloc_refuse_wrapping_and_cutting_ranges,
    ),
    (
        "nvsim-persistent-flags-force-bar1",
        persistent_flags_force_bar1,
    ),
    (
        "nvsim-suballocation-debugfs-free",
        suballocation_debugfs_free,
    ),
    (
        "nvsim-table-layout-of-the-driver",
        driver::table_layout_of_the_driver,
    ),
    (
        "nvsim-tables-and-mappings-freed-after-the-callback",
        driver::tables_and_mappings_freed_after_the_callback,
    ),
    (
        "nvsim-put-pages-finds-the-pin-by-process-and-table",
        driver::put_pages_finds_the_pin_by_process_and_table,
    ),
    (
        "nvsim-put-of-a-recycled-table-at-another-va-is-caught",
        driver::put_of_a_recycled_table_at_another_va_is_caught,
    ),
    (
        "nvsim-late-put-pages-after-its-table-was-freed",
        driver::late_put_pages_after_its_table_was_freed,
    ),
    (
        "nvsim-dma-map-of-a-freed-table-is-a-client-error",
        driver::dma_map_of_a_freed_table_is_a_client_error,
    ),
    (
        "nvsim-dma-unmap-of-a-freed-table-is-a-client-error",
        driver::dma_unmap_of_a_freed_table_is_a_client_error,
    ),
    (
        "nvsim-put-pages-persistent-needs-flags-0",
        driver::put_pages_persistent_needs_flags_0,
    ),
    (
        "nvsim-persistent-unknown-flag-bits-ignored",
        driver::persistent_unknown_flag_bits_ignored,
    ),
    (
        "nvsim-force-bar1-table-cannot-be-dma-mapped",
        driver::force_bar1_table_cannot_be_dma_mapped,
    ),
    (
        "nvsim-two-gpus-and-the-topology-check",
        driver::two_gpus_and_the_topology_check,
    ),
    ("nvsim-touch-bounds", driver::touch_bounds),
    (
        "nvsim-free-between-the-two-pin-steps-fails-the-pin",
        driver::free_between_the_two_pin_steps_fails_the_pin,
    ),
    (
        "nvsim-deferred-close-calls-back-from-a-kernel-thread",
        driver::deferred_close_calls_back_from_a_kernel_thread,
    ),
    (
        "nvsim-suballocation-callbacks-belong-to-the-pool-block",
        driver::suballocation_callbacks_belong_to_the_pool_block,
    ),
];

/// Tests that make the kernel report on purpose, each run alone by `nvsim-test --NAME`
/// inside a region of the plan that expects the report.
const REPORTING: &[Test] = &[
    (
        "nvsim-put-pages-inside-the-callback-fails-with-a-warn",
        driver::put_pages_inside_the_callback_fails_with_a_warn,
    ),
    (
        "nvsim-dma-unmap-pages-in-atomic-context-is-reported",
        driver::dma_unmap_pages_in_atomic_context,
    ),
    (
        "nvsim-read-of-a-table-after-its-callback-is-reported",
        driver::read_of_a_table_after_its_callback,
    ),
];

/// Ranges and sizes that wrap, and an unmap that cuts a later mapping, are refused whole
/// (cuMemAlloc's, cuMemMap's and cuMemUnmap's answers): nothing is allocated, mapped or
/// unmapped. And a mapping that outlives the file of its reservation unmaps cleanly (the
/// address space it leaves empty is not read after its free: KASAN).
fn vmm_and_alloc_refuse_wrapping_and_cutting_ranges() -> TestResult {
    const M2: u64 = 2 << 20;
    let einval = |r: Result<(), rustix::io::Errno>, what: &str| {
        check_eq!(r.map_err(|e| e.raw_os_error()), Err(22), what);
        Ok(())
    };
    let gpu = Gpu::open().map_err(errno)?;
    einval(
        gpu.alloc(u64::MAX).map(|_| ()),
        "an allocation of 2^64 - 1 bytes",
    )?;
    check_eq!(stat("allocations_live")?, 0, "allocations");
    let h = gpu.vmm_create(M2).map_err(errno)?;
    let r = gpu.vmm_reserve(2 * M2).map_err(errno)?;
    einval(
        gpu.vmm_map(u64::MAX - M2 + 1, M2, h).map(|_| ()),
        "a map whose end wraps",
    )?;
    // Two mappings; an unmap covering the first and half the second unmaps neither.
    let h2 = gpu.vmm_create(M2).map_err(errno)?;
    gpu.vmm_map(r, M2, h).map_err(errno)?;
    gpu.vmm_map(r + M2, M2, h2).map_err(errno)?;
    einval(
        gpu.vmm_unmap(r, M2 + K64),
        "an unmap that cuts the second mapping",
    )?;
    let p = pin_ok(&format!("get {r} {K64}"))?;
    check!(
        client(&format!("state {}", p.handle))?.starts_with("revoked=0"),
        "the refused unmap called the first mapping's pin back"
    );
    gpu.vmm_unmap(r, 2 * M2).map_err(errno)?;
    check!(
        client(&format!("state {}", p.handle))?.starts_with("revoked=1"),
        "the unmap did not call the pin back"
    );
    gpu.vmm_unreserve(r, 2 * M2).map_err(errno)?;
    // A reservation of one file, mapped through another, closed under the mapping.
    let other = Gpu::open().map_err(errno)?;
    let r = other.vmm_reserve(M2).map_err(errno)?;
    gpu.vmm_map(r, M2, h).map_err(errno)?;
    drop(other);
    gpu.vmm_unmap(r, M2).map_err(errno)?;
    gpu.vmm_release(h).map_err(errno)?;
    gpu.vmm_release(h2).map_err(errno)?;
    Ok(())
}

/// Process exit (the file's close) unmaps VMM memory, calling back its pins; a persistent
/// pin keeps the physical memory until it is released.
fn vmm_closing_the_file_frees() -> TestResult {
    const M2: u64 = 2 << 20;
    let gpu = Gpu::open().map_err(errno)?;
    check_eq!(
        gpu.vmm_create(M2 / 2).map_err(|e| e.raw_os_error()),
        Err(22),
        "create below the granularity"
    );
    let h = gpu.vmm_create(M2).map_err(errno)?;
    let r = gpu.vmm_reserve(2 * M2).map_err(errno)?;
    check_eq!(
        gpu.vmm_map(r + K64, M2, h).map_err(|e| e.raw_os_error()),
        Err(22),
        "map at an unaligned address"
    );
    check_eq!(
        gpu.vmm_map(r + M2, 2 * M2, h).map_err(|e| e.raw_os_error()),
        Err(22),
        "map larger than the allocation"
    );
    gpu.vmm_map(r, M2, h).map_err(errno)?;
    check_eq!(
        gpu.vmm_unmap(r, K64).map_err(|e| e.raw_os_error()),
        Err(22),
        "unmap of part of a mapping"
    );
    let p = pin_ok(&format!("get {r} {K64}"))?;
    let pp = pin_ok(&format!("getp {} {K64}", r + K64))?;
    drop(gpu);
    check!(
        client(&format!("state {}", p.handle))?.starts_with("revoked=1"),
        "closing the file did not call the pin back"
    );
    check_eq!(
        stat("vmm_handles_live")?,
        1,
        "memory held by the persistent pin"
    );
    check_eq!(stat("vmm_reservations_live")?, 0, "reservations");
    check_eq!(status(&format!("putp {}", pp.handle))?, 0, "putp");
    check_eq!(
        stat("vmm_handles_live")?,
        0,
        "memory freed with the persistent pin"
    );
    Ok(())
}

/// get_pages_persistent's FORCE_BAR1_MAPPING pins through BAR1 with no CPU_CACHEABLE, also
/// on a coherent platform (nvsim coherent=1), where other pins get CPU_CACHEABLE tables and
/// no BAR1; put_pages_persistent takes flags 0. nvsim shows the flags it received.
fn persistent_flags_force_bar1() -> TestResult {
    const FORCE_BAR1: u32 = 1;
    let coherent = stat("coherent")? == 1;
    let v2 = stat("page_table_version")? >> 16 == 2;
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(2 * K64).map_err(errno)?;
    let forced_before = stat("force_bar1_pins")?;
    let forced = pin_ok(&format!("getp {va} {K64} {FORCE_BAR1}"))?;
    check_eq!(stat("persistent_flags_last")?, 1, "flags nvsim received");
    check_eq!(
        stat("force_bar1_pins")?,
        forced_before + 1,
        "force_bar1_pins"
    );
    check_eq!(forced.flags, 0, "table flags of a FORCE_BAR1 pin");
    check_eq!(stat("bar1_used")?, K64, "BAR1 of a FORCE_BAR1 pin");
    let plain = pin_ok(&format!("getp {} {K64}", va + K64))?;
    let cb = pin_ok(&format!("get {} {K64}", va + K64))?;
    let cacheable = u32::from(coherent && v2);
    check_eq!(
        plain.flags,
        cacheable,
        "table flags of a default persistent pin"
    );
    check_eq!(cb.flags, cacheable, "table flags of a pin with a callback");
    check_eq!(
        stat("bar1_used")?,
        if coherent { K64 } else { 2 * K64 },
        "BAR1 of the other pins"
    );
    // The BAR1 pin's addresses are the BAR's bus addresses; a coherent pin's, the CPU
    // physical addresses of the same memory (equal in the guest).
    check_eq!(plain.pa, cb.pa, "addresses of two pins of one page");
    check_eq!(status(&format!("put {}", cb.handle))?, 0, "put");
    check_eq!(status(&format!("putp {}", plain.handle))?, 0, "putp");
    check_eq!(stat("put_persistent_flags_last")?, 0, "put flags");
    check_eq!(
        status(&format!("putp {} {FORCE_BAR1}", forced.handle))?,
        EINVAL,
        "putp forced, with the pin's flags"
    );
    check_eq!(stat("put_persistent_flags_last")?, 1, "put flags");
    check_eq!(
        status(&format!("putp {} 0", forced.handle))?,
        0,
        "putp forced"
    );
    Ok(())
}

/// nvsim's own sub-allocation: debugfs free and free_on_pin name a buffer by its id, and
/// free it as cuMemFree does, under the per-buffer callback rule (callback_per_buffer=1);
/// alignment and argument checks.
fn suballocation_debugfs_free() -> TestResult {
    harness::with_param(
        "callback_per_buffer",
        "1",
        suballocation_debugfs_free_per_buffer,
    )
}

fn suballocation_debugfs_free_per_buffer() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let sub = nvsim::ALLOC_SUBALLOC;
    check_eq!(
        gpu.alloc_flags(2 << 20, sub).map_err(|e| e.raw_os_error()),
        Err(22),
        "a 2 MiB sub-allocation"
    );
    check_eq!(
        gpu.alloc_flags(100, 4).map_err(|e| e.raw_os_error()),
        Err(22),
        "unknown allocation flags"
    );
    let (a, id_a) = gpu.alloc_flags(300, sub).map_err(errno)?;
    let (b, id_b) = gpu.alloc_flags(70_000, sub).map_err(errno)?;
    let (c, _) = gpu.alloc_flags(10, sub).map_err(errno)?;
    check_eq!((b - a, c - b), (512, 70_144), "256-byte aligned, first fit");
    let q = gpu.query(b + 69_999).map_err(errno)?;
    check_eq!(
        (q.base, q.size, q.buffer_id, q.flags),
        (b, 70_000, id_b, nvsim::QUERY_SUBALLOC),
        "query of a buffer"
    );
    check!(gpu.query(a + 300).is_err(), "query between buffers");
    // b lies in pages 0 and 1 of the block, as does c.
    let p0 = pin_ok(&format!("get {a} {K64}"))?;
    let p1 = pin_ok(&format!("get {} {K64}", a + K64))?;
    let p2 = pin_ok(&format!("get {} {K64}", a + 2 * K64))?;
    debugfs("free", &id_b.to_string())?;
    for (p, revoked) in [(&p0, 1), (&p1, 1), (&p2, 0)] {
        check!(
            client(&format!("state {}", p.handle))?.starts_with(&format!("revoked={revoked}")),
            "pin {} after freeing b: want revoked={revoked}",
            p.handle
        );
    }
    check!(gpu.query(b).is_err(), "b is gone");
    debugfs("free_on_pin", &format!("{id_a} 0"))?;
    let pa = pin_ok(&format!("get {a} {K64}"))?;
    wait_revoked(pa.handle, 10)?;
    check!(gpu.query(a).is_err(), "a is gone");
    check_eq!(gpu.query(c).map_err(errno)?.base, c, "c is still there");
    check_eq!(status(&format!("put {}", p2.handle))?, 0, "put");
    Ok(())
}

fn injected_fraction_of_failures() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(K64).map_err(errno)?;
    debugfs("fail_get_pages", &format!("-1 {} 30", -EBUSY))?;
    let mut failed = 0;
    for _ in 0..100 {
        match pin(&format!("get {va} {K64}"))? {
            Ok(p) => check_eq!(status(&format!("put {}", p.handle))?, 0, "put"),
            Err(e) => {
                check_eq!(e, EBUSY, "injected errno");
                failed += 1;
            }
        }
    }
    debugfs("fail_get_pages", "0 0")?;
    // 100 draws at 30 %: mean 30, standard deviation 4.6.
    check!(
        (5..60).contains(&failed),
        "{failed} of 100 calls failed at 30 %"
    );
    Ok(())
}

fn debugfs_free_now_and_later() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (a, id_a) = gpu.alloc(K64).map_err(errno)?;
    let (b, id_b) = gpu.alloc(K64).map_err(errno)?;
    let pa = pin_ok(&format!("get {a} {K64}"))?;
    let pb = pin_ok(&format!("get {b} {K64}"))?;
    debugfs("free", &id_a.to_string())?;
    let tid = rustix::thread::gettid().as_raw_nonzero().get();
    check_eq!(
        client(&format!("state {}", pa.handle))?,
        format!("revoked=1 cb_pid={tid}"),
        "freed now, in the writer's thread"
    );
    debugfs("free", &format!("{id_b} 5000000"))?;
    check!(
        client(&format!("state {}", pb.handle))?.starts_with("revoked=0"),
        "a free armed for 5 s fired at once"
    );
    wait_revoked(pb.handle, 30)?;
    check!(gpu.query(b).is_err(), "the allocation is gone");
    Ok(())
}

/// Without a bound GPU every call answers -ENODEV; unbinding frees its memory
/// (calling back pins) as the real driver does when the GPU goes away.
fn gpu_gone_is_enodev() -> TestResult {
    const DRIVER: &str = "/sys/bus/pci/drivers/nvsim";
    let dev = std::fs::read_dir(DRIVER)
        .map_err(|e| format!("{DRIVER}: {e}"))?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .find(|n| n.starts_with("0000:"))
        .ok_or("no device bound to nvsim")?;
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(K64).map_err(errno)?;
    let p = pin_ok(&format!("get {va} {K64}"))?;
    let vmm = nvsim::VMM_GRANULARITY;
    let handle = gpu.vmm_create(vmm).map_err(errno)?;
    let reserved = gpu.vmm_reserve(vmm).map_err(errno)?;
    std::fs::write(format!("{DRIVER}/unbind"), &dev).map_err(|e| format!("unbind: {e}"))?;
    let gone = (
        client(&format!("state {}", p.handle)),
        pin(&format!("get {va} {K64}")),
        gpu.alloc(K64),
    );
    std::fs::write(format!("{DRIVER}/bind"), &dev).map_err(|e| format!("bind: {e}"))?;
    // A handle made before the GPU went has no memory on the new one.
    check_eq!(
        gpu.vmm_map(reserved, vmm, handle)
            .map_err(|e| e.raw_os_error()),
        Err(19),
        "map of a handle whose GPU went away"
    );
    check!(
        gone.0?.starts_with("revoked=1"),
        "pin not called back when the GPU went away"
    );
    check_eq!(gone.1?.map(|p| p.handle), Err(-19), "pin without a GPU");
    check_eq!(
        gone.2.map_err(|e| e.raw_os_error()),
        Err(19),
        "alloc without a GPU"
    );
    Ok(())
}

/// A client that takes its own lock in the free callback and calls nvsim
/// under the same lock: the AB-BA that deadlocks real drivers. Run only
/// inside an expect-reports region: lockdep must report it.
fn lockdep_inversion() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(K64).map_err(errno)?;
    pin_ok(&format!("get_locked {va} {K64}"))?;
    gpu.free(va).map_err(errno)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() == 2 && args[0] == "--client" {
        println!("{}", client(&args[1]).unwrap_or_else(|e| e));
        return ExitCode::SUCCESS;
    }
    if let Some((name, test)) = args
        .first()
        .and_then(|a| a.strip_prefix("--"))
        .and_then(|a| REPORTING.iter().find(|(n, _)| *n == a))
    {
        // A test that makes the kernel report: run alone, its region expects the report.
        let _ = std::fs::write("/dev/kmsg", format!("gdrpeer-test: begin {name}"));
        return match test().and_then(|()| harness::nvsim_counters_back_to_zero()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                println!("FAIL: {e}");
                ExitCode::FAILURE
            }
        };
    }
    if args.len() == 1 && args[0] == "--lockdep-inversion" {
        return match lockdep_inversion() {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                println!("FAIL: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let filter = args.first().cloned().unwrap_or_default();
    if harness::run_tests(TESTS, &filter, harness::nvsim_counters_back_to_zero) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
