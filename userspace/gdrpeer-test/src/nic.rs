// SPDX-License-Identifier: GPL-2.0

//! The sample NIC driver (tests/gdrnic) from user space, and its tests: data moved by
//! peer-to-peer DMA between (simulated) GPU memory and QEMU's edu device, through gdrpeer's
//! kernel API. Run with nvsim.ko, p2pclient.ko, gdrpeer.ko and gdrnic.ko loaded.

use crate::failnth::{walk, Op, Ready};
use crate::helpers::ErrnoOf;
use crate::helpers::{
    all_released, check_dma_kind, check_dma_reaches, dma_api_resource_mappings, edu, eventually,
    gdrpeer_idle, gstat, iommu_domain, kernel_log, p2pclient_addresses, param, pattern, K64,
};
use crate::proc;
use gdrpeer::PciAddress;
pub use nvsim::gdrnic::{
    nstat, DmabufMr, Mr, Nic, RegArgs, XferArgs, DMABUF_KAPI, DMABUF_KAPI_PERSISTENT,
    DMABUF_NO_INVALIDATE, DMABUF_NO_P2P, DMABUF_PINNED, DMABUF_PINNED_NOREVOKE, RECV, REG_LOOP_MAX,
    SEND, XFER_MAX,
};
use nvsim::testing::{
    self as harness, debugfs, errno, freed_page_writes, stat, with_debugfs, TestResult, SKIP,
};
use nvsim::{check, check_eq, Gpu};
use rustix::io::Errno;
use std::{os::fd::AsRawFd, process::Command, thread, time::Duration};

pub fn nic() -> Result<Nic, String> {
    Nic::open().map_err(|e| format!("/dev/gdrnic: {e}"))
}

/// Has nvsim check every freed page for writes made after its free (`freed_page_writes`).
pub fn check_freed() -> TestResult {
    debugfs("check_freed", "1")
}

/// Waits `ms` for a stray DMA of the edu engine (100 ms each) to land, then checks that no GPU
/// page was written since `writes` (nvsim's `freed_page_writes` then) `after` what.
pub fn no_stray_dma_writes(writes: u64, ms: u64, after: &str) -> TestResult {
    thread::sleep(Duration::from_millis(ms));
    check_eq!(
        freed_page_writes()? - writes,
        0,
        format!("GPU pages written after {after}")
    );
    Ok(())
}

/// After each NIC test: no registration left in gdrnic either, and no DMA into freed GPU
/// memory.
pub fn nic_released() -> TestResult {
    eventually(5, "gdrnic registrations", || {
        Ok(nstat("registrations")? == 0 && nstat("dmabuf_imports")? == 0)
    })?;
    check_freed()?;
    all_released()
}

pub fn expect_err<T: std::fmt::Debug>(r: Result<T, Errno>, want: Errno, what: &str) -> TestResult {
    match r {
        Ok(v) => Err(format!("{what}: succeeded ({v:?}), expected {want}")),
        Err(e) => {
            check_eq!(e, want, what);
            Ok(())
        }
    }
}

// --- The tests ----------------------------------------------------------------------------

/// CPU writes to GPU memory arrive at the NIC, and the NIC's writes arrive in GPU memory,
/// byte for byte, across 64 KiB page boundaries and at unaligned offsets. The kernel API
/// hands the NIC DMA addresses for it: the bus addresses nvsim gives any client without an
/// IOMMU, IOVAs behind a translating one; either way each reaches its page.
fn round_trip() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(4 * K64).map_err(errno)?;
    let before = pattern(1, (4 * K64) as usize);
    gpu.write(va, &before).map_err(errno)?;
    let n = nic()?;
    // Registered at an unaligned va: three pages, starting at va + 64 KiB.
    let base = va + K64 + 333;
    let mr = n.reg(base, 2 * K64).map_err(errno)?;
    check_eq!(mr.aligned_va, va + K64, "aligned va");
    check_eq!(mr.offset, 333, "offset");
    check_eq!(mr.page_size as u64, K64, "page size");
    check_eq!(mr.dma.len(), 3, "DMA addresses");
    check_dma_kind(
        &edu()?,
        &mr.dma,
        &p2pclient_addresses(va + K64, 3 * K64)?,
        "the kernel API's DMA addresses vs nvsim's bus addresses",
    )?;
    check_dma_reaches(
        &n,
        &mr.dma,
        &before[K64 as usize..4 * K64 as usize],
        "the kernel API's DMA addresses",
    )?;

    // GPU -> NIC, 9000 bytes crossing the page boundary at va + 128 KiB.
    let off = K64 - 333 - 4000;
    let sent = n.send(mr.handle, off, 9000).map_err(errno)?;
    let at = (base + off - va) as usize;
    check!(
        sent == before[at..at + 9000],
        "sent bytes differ from GPU memory"
    );

    // NIC -> GPU, 7777 bytes crossing the same boundary at another offset.
    let data = pattern(2, 7777);
    let off = K64 - 333 - 1111;
    n.recv(mr.handle, off, &data).map_err(errno)?;
    let mut expect = before.clone();
    let at = (base + off - va) as usize;
    expect[at..at + data.len()].copy_from_slice(&data);
    let after = gpu.read(va, (4 * K64) as usize).map_err(errno)?;
    if let Some(i) = (0..after.len()).find(|&i| after[i] != expect[i]) {
        return Err(format!(
            "GPU byte {i:#x} is {:#04x}, expected {:#04x} (received range {at:#x}+{:#x})",
            after[i],
            expect[i],
            data.len()
        ));
    }
    // And back to the NIC.
    check!(
        n.send(mr.handle, off, data.len()).map_err(errno)? == data,
        "received bytes did not come back"
    );
    check!(nstat("gpu_dma_bytes")? > 0, "no DMA counted");
    n.dereg(mr.handle).map_err(errno)
}

/// Registering the same memory many times costs one nv-p2p pin; every registration gets
/// the same DMA addresses and works.
fn registrations_hit_the_cache() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(4 * K64).map_err(errno)?;
    let n = nic()?;
    let pins = stat("get_pages_calls")?;
    let hits = gstat("hits")?;
    let first = n.reg(va, 4 * K64).map_err(errno)?;
    let mut mrs = vec![first.clone()];
    for i in 1..32u64 {
        // The whole buffer, and windows inside it.
        let (at, len) = if i % 2 == 0 {
            (va, 4 * K64)
        } else {
            (va + i * 1000, K64 + i)
        };
        let mr = n.reg(at, len).map_err(errno)?;
        let first_page = ((mr.aligned_va - va) / K64) as usize;
        check_eq!(
            mr.dma[..],
            first.dma[first_page..first_page + mr.dma.len()],
            "DMA addresses of a cached registration"
        );
        mrs.push(mr);
    }
    check_eq!(
        stat("get_pages_calls")? - pins,
        1,
        "nv-p2p pins for 32 registrations"
    );
    check_eq!(gstat("hits")? - hits, 31, "cache hits");
    let data = pattern(3, 3000);
    let last = mrs.last().unwrap();
    n.recv(last.handle, 10, &data).map_err(errno)?;
    check!(
        n.send(first.handle, 31 * 1000 + 10, data.len())
            .map_err(errno)?
            == data,
        "bytes through one registration read back through another"
    );
    for mr in &mrs {
        n.dereg(mr.handle).map_err(errno)?;
    }
    expect_err(n.dereg(first.handle), Errno::NOENT, "second dereg")?;
    // Deregistered but cached: a new registration is still a hit.
    n.reg(va, K64).map_err(errno)?;
    check_eq!(
        stat("get_pages_calls")? - pins,
        1,
        "nv-p2p pins after dereg"
    );
    Ok(())
}

/// REG_LOOP, the benchmark's kernel-API hit: gdrpeer_mr_pin() and gdrpeer_mr_unpin() made in
/// the NIC, a miss then hits, each registration gone when it returns, and its bad requests
/// refused with EINVAL, the memory freed under it with gdrpeer's error.
fn reg_loop() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(2 * K64).map_err(errno)?;
    let n = nic()?;
    let (pins, hits, maps) = (
        stat("get_pages_calls")?,
        gstat("hits")?,
        gstat("dma_page_maps_made")?,
    );
    n.reg_loop(va + 100, K64 - 100, 0, 50).map_err(errno)?;
    check_eq!(stat("get_pages_calls")? - pins, 1, "nv-p2p pins for 50");
    check_eq!(gstat("hits")? - hits, 49, "cache hits of 50");
    // The region keeps its mapping for the NIC, unless loaded not to.
    let keep = param("dma_map_keep")? != 0;
    check_eq!(
        gstat("dma_page_maps_made")? - maps,
        if keep { 1 } else { 50 },
        "DMA mappings for 50"
    );
    check_eq!(nstat("registrations")?, 0, "registrations left");
    n.reg_loop(va, 2 * K64, 0, REG_LOOP_MAX).map_err(errno)?;
    check_eq!(
        stat("get_pages_calls")? - pins,
        2,
        "nv-p2p pins after a longer window"
    );
    expect_err(n.reg_loop(va, K64, 0, 0), Errno::INVAL, "count 0")?;
    expect_err(
        n.reg_loop(va, K64, 0, REG_LOOP_MAX + 1),
        Errno::INVAL,
        "count above GDRNIC_REG_LOOP_MAX",
    )?;
    expect_err(n.reg_loop(va, 0, 0, 1), Errno::INVAL, "zero length")?;
    expect_err(
        n.reg_loop(va + 4 * K64, K64, 0, 1),
        Errno::INVAL,
        "not GPU memory",
    )?;
    gpu.free(va).map_err(errno)?;
    expect_err(n.reg_loop(va, K64, 0, 1), Errno::INVAL, "freed memory")?;
    check_eq!(nstat("registrations")?, 0, "registrations left");
    Ok(())
}

/// The registration an unpin keeps whole for the context's next pin (the kernel API's
/// registration cache): its callback is not called once it is unpinned, not even when the
/// memory is freed while it is kept; a pin after the free is served by a new pin, whose
/// addresses reach the new memory; registrations alternating two regions are hits; and the
/// context's destroy gives the kept registration back (the context itself goes).
fn kept_registration() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let contexts = gstat("contexts")?;
    let n = nic()?;
    let (va, _) = gpu.alloc(K64).map_err(errno)?;
    let mr = n.reg(va, K64).map_err(errno)?;
    n.dereg(mr.handle).map_err(errno)?;
    let (invalidations, callbacks) = (nstat("invalidations")?, gstat("callbacks")?);
    gpu.free(va).map_err(errno)?;
    eventually(5, "NVIDIA's free callback", || {
        Ok(gstat("callbacks")? > callbacks)
    })?;
    check_eq!(
        nstat("invalidations")?,
        invalidations,
        "invalidate callbacks of a registration unpinned before the free"
    );
    let (again, _) = gpu.alloc(K64).map_err(errno)?;
    let content = pattern(47, K64 as usize);
    gpu.write(again, &content).map_err(errno)?;
    let pins = stat("get_pages_calls")?;
    let mr = n.reg(again, K64).map_err(errno)?;
    check_eq!(
        stat("get_pages_calls")? - pins,
        1,
        format!(
            "nv-p2p pins of the memory allocated after the free ({})",
            if again == va {
                "the same address"
            } else {
                "another address"
            }
        )
    );
    check_dma_reaches(&n, &mr.dma, &content, "the registration after the free")?;
    n.dereg(mr.handle).map_err(errno)?;
    let (other, _) = gpu.alloc(K64).map_err(errno)?;
    let hits = gstat("hits")?;
    n.reg_loop(again, K64, other.wrapping_sub(again), 20)
        .map_err(errno)?;
    check_eq!(
        stat("get_pages_calls")? - pins,
        2,
        "nv-p2p pins of two regions in turn"
    );
    check_eq!(
        gstat("hits")? - hits,
        19,
        "cache hits of two regions in turn"
    );
    check_eq!(
        nstat("invalidations")?,
        invalidations,
        "invalidate callbacks"
    );
    drop(n);
    eventually(5, "the NIC's context gone with its file", || {
        Ok(gstat("contexts")? == contexts)
    })?;
    gpu.free(again).map_err(errno)?;
    gpu.free(other).map_err(errno)?;
    check_eq!(
        nstat("invalidations")?,
        invalidations,
        "invalidate callbacks"
    );
    Ok(())
}

/// A context destroyed by its own process with a registration live (gdrnic's CTX_DESTROY, as a
/// driver whose teardown ends a context before its memory registrations): the registration
/// lives on until its unpin, as kernel-api.rst says: its region stays pinned, the NIC's DMA
/// through it reaches the page, and when NVIDIA frees the memory its invalidate callback
/// comes. Before, the destroy gave the region back at once (put_pages, its DMA mapping
/// unmapped) under the NIC's registration, which was never told: no callback at the free.
fn destroy_leaves_registrations() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(K64).map_err(errno)?;
    let content = pattern(47, K64 as usize);
    gpu.write(va, &content).map_err(errno)?;
    let n = nic()?;
    let mr = n.reg(va, K64).map_err(errno)?;
    let regions = gstat("regions")?;
    let invalidations = nstat("invalidations")?;
    n.ctx_destroy().map_err(errno)?;
    check_eq!(
        gstat("regions")?,
        regions,
        "regions pinned after the context's destroy, its registration live"
    );
    expect_err(n.reg(va, K64), Errno::NODEV, "REG after CTX_DESTROY")?;
    check_dma_reaches(
        &n,
        &mr.dma,
        &content,
        "the registration of a destroyed context",
    )?;
    gpu.free(va).map_err(errno)?;
    check_eq!(
        nstat("invalidations")? - invalidations,
        1,
        "invalidate callbacks at the free of the registration's memory"
    );
    eventually(5, "the revoked region gone", || {
        Ok(gstat("regions")? == regions - 1)
    })?;
    n.dereg(mr.handle).map_err(errno)
}

/// BAR1 has room for two 64 KiB pages, one of them the region of the registration the kernel
/// API keeps after its unpin: the NIC's own export of two other pages
/// (`gdrpeer_dmabuf_export` on its context, `GDRNIC_DMABUF_KAPI`) finds BAR1 full, and the
/// kept registration gives way (its region unused, then evicted) as it does to the context's
/// next registration. The import moves bytes; the first registration's memory pins again.
fn kept_registration_gives_way_to_export() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (kept, _) = gpu.alloc(K64).map_err(errno)?;
    let (other, _) = gpu.alloc(2 * K64).map_err(errno)?;
    let size = stat("bar1_size")?;
    let room = stat("bar1_reserve")? + 2 * K64;
    let r = with_debugfs("bar1_size", &room.to_string(), &size.to_string(), || {
        let n = nic()?;
        let mr = n.reg(kept, K64).map_err(errno)?;
        n.dereg(mr.handle).map_err(errno)?;
        let evictions = gstat("evictions_enomem")?;
        let import = n
            .reg_dmabuf(-1, DMABUF_KAPI, other, 2 * K64)
            .map_err(|e| format!("REG_DMABUF (kernel API export) with BAR1 full: {e}"))?;
        check_eq!(
            gstat("evictions_enomem")? - evictions,
            1,
            "regions evicted for the export (the kept registration's)"
        );
        let data = pattern(53, 3000);
        n.recv(import.handle, 500, &data).map_err(errno)?;
        check!(
            gpu.read(other + 500, data.len()).map_err(errno)? == data,
            "the bytes the NIC received are not in GPU memory"
        );
        check!(
            n.send(import.handle, 500, data.len()).map_err(errno)? == data,
            "the bytes the NIC sent back are not those it received"
        );
        n.dereg(import.handle).map_err(errno)?;
        let mr = n.reg(kept, K64).map_err(errno)?;
        n.dereg(mr.handle).map_err(errno)
    });
    gpu.free(kept).map_err(errno)?;
    gpu.free(other).map_err(errno)?;
    r
}

/// Runs `op` (a transfer) on the NIC in a thread, and returns once the NIC has moved a few
/// chunks of it: the caller does what must happen mid-transfer, then joins the thread.
pub fn under_way<T: Send + 'static>(
    n: Nic,
    op: impl FnOnce(&Nic) -> T + Send + 'static,
) -> Result<thread::JoinHandle<(Nic, T)>, String> {
    let ops = nstat("dma_ops")?;
    let worker = thread::spawn(move || {
        let r = op(&n);
        (n, r)
    });
    eventually(
        30,
        "transfer under way",
        || Ok(nstat("dma_ops")? >= ops + 4),
    )?;
    Ok(worker)
}

/// Runs `op` on a registration in a thread and frees the GPU memory once the NIC has moved
/// a few chunks: the op must end with ENXIO, the invalidate callback having waited for the
/// chunk in flight.
fn free_mid_transfer(
    op: impl FnOnce(&Nic, &Mr) -> Result<(), Errno> + Send + 'static,
) -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, id) = gpu.alloc(2 * K64).map_err(errno)?;
    gpu.write(va, &pattern(4, (2 * K64) as usize))
        .map_err(errno)?;
    let n = nic()?;
    let mr = n.reg(va, 2 * K64).map_err(errno)?;
    let invalidations = nstat("invalidations")?;
    let mr2 = mr.clone();
    let worker = under_way(n, move |n| op(n, &mr2))?;
    debugfs("free", &id.to_string())?;
    check_eq!(
        nstat("invalidations")? - invalidations,
        1,
        "invalidations once the free returned"
    );
    let (n, r) = worker.join().map_err(|_| "transfer thread panicked")?;
    expect_err(r, Errno::NXIO, "transfer cut by the free")?;
    expect_err(
        n.send(mr.handle, 0, 100),
        Errno::NXIO,
        "send after the free",
    )?;
    expect_err(
        n.recv(mr.handle, 0, &[1; 100]),
        Errno::NXIO,
        "recv after the free",
    )?;
    n.dereg(mr.handle).map_err(errno)
}

fn free_during_send() -> TestResult {
    let failed = nstat("failed_transfers")?;
    free_mid_transfer(|n, mr| n.send(mr.handle, 0, (2 * K64) as usize).map(|_| ()))?;
    check!(
        nstat("failed_transfers")? > failed,
        "no failed transfer counted"
    );
    Ok(())
}

/// A receive cut by the free writes nothing after the callback returned: nvsim poisons the
/// freed pages and finds any later write (`freed_page_writes`).
fn free_during_receive_writes_no_freed_memory() -> TestResult {
    free_mid_transfer(|n, mr| n.recv(mr.handle, 0, &pattern(5, (2 * K64) as usize)))?;
    no_stray_dma_writes(0, 500, "the invalidate callback returned")
}

/// A registration that gdrpeer cannot serve (here a page table of a version it does not
/// read, nvsim loaded with `page_table_version=0x00030000` by the plan) reaches the NIC driver
/// as -EOPNOTSUPP, the errno gdrpeer-kapi.h promises, never the kernel-internal -ENOTSUPP
/// (524), and leaves nothing pinned.
fn unsupported_request_is_eopnotsupp() -> TestResult {
    let version = stat("page_table_version")?;
    if matches!(version >> 16, 1 | 2) {
        return Err(format!(
            "{SKIP}needs page tables gdrpeer cannot read (the plan runs it so)"
        ));
    }
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(2 * K64).map_err(errno)?;
    let n = nic()?;
    expect_err(
        n.reg(va, 2 * K64),
        Errno::OPNOTSUPP,
        &format!("registration with a {version:#010x} table"),
    )?;
    check_eq!(stat("pins_live")?, 0, "pins after the refusal");
    drop((n, gpu));
    all_released()
}

/// Bad requests fail with their errno and leave nothing behind.
fn bad_requests() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(2 * K64).map_err(errno)?;
    let n = nic()?;
    expect_err(n.reg(va, 0), Errno::INVAL, "zero length")?;
    expect_err(n.reg(va + 4 * K64, K64), Errno::INVAL, "not GPU memory")?;
    let mr = n.reg(va + 10, K64).map_err(errno)?;
    expect_err(n.send(mr.handle + 1, 0, 10), Errno::NOENT, "unknown handle")?;
    expect_err(
        n.send(mr.handle, K64 - 5, 10),
        Errno::INVAL,
        "past the registration",
    )?;
    expect_err(
        n.send(mr.handle, u64::MAX, 2),
        Errno::INVAL,
        "offset overflowing",
    )?;
    expect_err(n.send(mr.handle, 0, 0), Errno::INVAL, "zero-length send")?;
    let big = XferArgs {
        handle: mr.handle,
        len: XFER_MAX + 1,
        buf: 1,
        ..Default::default()
    };
    expect_err(
        n.xfer_args::<SEND>(big),
        Errno::INVAL,
        "longer than GDRNIC_XFER_MAX",
    )?;
    let pad = XferArgs {
        handle: mr.handle,
        pad: 1,
        len: 1,
        buf: 1,
        ..Default::default()
    };
    expect_err(n.xfer_args::<SEND>(pad), Errno::INVAL, "non-zero padding")?;
    expect_err(
        n.xfer_raw::<SEND>(mr.handle, 0, 16, 8),
        Errno::FAULT,
        "bad send buffer",
    )?;
    expect_err(
        n.xfer_raw::<RECV>(mr.handle, 0, 16, 8),
        Errno::FAULT,
        "bad recv buffer",
    )?;
    expect_err(n.dereg(0), Errno::NOENT, "handle 0")?;
    // The registration still works.
    n.recv(mr.handle, 1, b"still fine").map_err(errno)?;
    check_eq!(
        gpu.read(va + 11, 10).map_err(errno)?,
        b"still fine".to_vec(),
        "bytes after the bad requests"
    );
    Ok(())
}

/// A registration from a forked child on its parent's file: the context belongs to the
/// parent (EACCES), and the child's use of the parent's registration works.
fn fork_child_cannot_register() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(K64).map_err(errno)?;
    let n = nic()?;
    let mr = n.reg(va, K64).map_err(errno)?;
    let child = proc::fork(|| {
        expect_err(n.reg(va, K64), Errno::ACCESS, "child's registration")?;
        n.send(mr.handle, 0, 8).map_err(errno)?;
        Ok(())
    })?;
    proc::wait(child)
}

/// The NIC module cannot go while a process has registrations; when that process is killed,
/// everything is released and the module unloads.
fn rmmod_with_live_registrations() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(2 * K64).map_err(errno)?;
    let n = nic()?;
    let mr = n.reg(va, 2 * K64).map_err(errno)?;
    let rmmod = || Command::new("rmmod").arg("gdrnic").status();
    check!(
        !rmmod().map_err(|e| e.to_string())?.success(),
        "rmmod gdrnic succeeded with a registration live"
    );
    n.recv(mr.handle, 0, b"alive").map_err(errno)?;
    check_eq!(nstat("registrations")?, 1, "registrations");
    // A killed process with registrations: its file is released at exit.
    let (child, _) = proc::spawn_ready("--nic-reg-and-wait")?;
    check_eq!(nstat("registrations")?, 2, "registrations with the child's");
    proc::kill_and_wait(child)?;
    eventually(10, "child's registration released", || {
        Ok(nstat("registrations")? == 1)
    })?;
    drop(n);
    drop(gpu);
    gdrpeer_idle()?;
    check!(
        rmmod().map_err(|e| e.to_string())?.success(),
        "rmmod gdrnic after the files closed"
    );
    let load = Command::new("gdrpeer-vmtool")
        .args(["insmod", "/gdrpeer/modules/gdrnic.ko"])
        .status()
        .map_err(|e| e.to_string())?;
    check!(load.success(), "gdrnic.ko reloaded");
    harness::nvsim_counters_back_to_zero()
}

/// The child of `rmmod_with_live_registrations`: registers GPU memory with the NIC, moves
/// bytes, and waits to be killed.
pub fn reg_and_wait() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(K64).map_err(errno)?;
    let n = nic()?;
    let mr = n.reg(va, K64).map_err(errno)?;
    n.recv(mr.handle, 0, b"child").map_err(errno)?;
    proc::ready_and_wait()
}

/// An invalidate callback slower than gdrpeer's `invalidate_warn_ms` is reported.
fn slow_invalidate_is_reported() -> TestResult {
    let limit = param("invalidate_warn_ms")?;
    let gpu = Gpu::open().map_err(errno)?;
    let (va, id) = gpu.alloc(K64).map_err(errno)?;
    let n = nic()?;
    let mr = n.reg(va, K64).map_err(errno)?;
    std::fs::write(
        "/sys/kernel/debug/gdrnic/invalidate_delay_ms",
        (limit + 200).to_string(),
    )
    .map_err(|e| e.to_string())?;
    let r = debugfs("free", &id.to_string());
    let _ = std::fs::write("/sys/kernel/debug/gdrnic/invalidate_delay_ms", "0");
    r?;
    check!(
        kernel_log()?
            .lines()
            .rev()
            .take(50)
            .any(|l| l.contains("invalidate callback took")),
        "no report of the slow callback"
    );
    n.dereg(mr.handle).map_err(errno)
}

/// A NIC driver whose callback takes a lock it also holds around `gdrpeer_mr_pin()`
/// (gdrnic's `invalidate_takes_file_lock`): lockdep must report the cycle through gdrpeer's
/// `gdrpeer_invalidate` class although nothing deadlocks in this run. Turns lockdep off for
/// the rest of the boot; the plan marks the report as expected.
fn lockdep_sees_lock_taken_in_callback() -> TestResult {
    let knob = "/sys/kernel/debug/gdrnic/invalidate_takes_file_lock";
    let gpu = Gpu::open().map_err(errno)?;
    let (va, id) = gpu.alloc(K64).map_err(errno)?;
    let n = nic()?;
    let mr = n.reg(va, K64).map_err(errno)?;
    std::fs::write(knob, "Y").map_err(|e| format!("{knob}: {e}"))?;
    let r = debugfs("free", &id.to_string());
    let _ = std::fs::write(knob, "N");
    r?;
    n.dereg(mr.handle).map_err(errno)
}

// --- DMA mappings shared by page and peer (src/iova.rs) ----------------------------------
//
// gdrpeer maps each 64 KiB page once per peer, however many contexts pin it, and gives the
// mapping back with its last holder: the unpin, eviction or revocation of the last region that
// names the page (or, without `dma_map_keep`, the end of its last registration). gdrpeer's
// counters (`dma_pages_mapped`, `dma_page_holds`) say so, and on the test kernel so does the
// kernel's own record of edu's mappings (DMA-API debugging, `dma-api/dump`), which does not
// come from gdrpeer's code.

/// The kernel's record of `peer`'s mappings of the page at bus address `bus`: their DMA
/// addresses, or `None` without DMA-API debugging.
fn kernel_mappings_of(peer: &PciAddress, bus: u64) -> Result<Option<Vec<u64>>, String> {
    Ok(dma_api_resource_mappings(peer)?.map(|maps| {
        maps.into_iter()
            .filter(|&(phys, _)| phys == bus)
            .map(|(_, dma)| dma)
            .collect()
    }))
}

/// The kernel's record of `peer`'s mappings of the page at `bus` is `want` (its DMA
/// addresses), where the kernel keeps one.
fn kernel_record_is(peer: &PciAddress, bus: u64, want: &[u64]) -> TestResult {
    if let Some(kernel) = kernel_mappings_of(peer, bus)? {
        check_eq!(
            kernel,
            want,
            "the kernel's record of edu's mappings of the page"
        );
    }
    Ok(())
}

/// Frees `va` and waits for the NIC's invalidate callback (a registration of it revoked).
fn free_and_await_invalidation(gpu: &Gpu, va: u64) -> TestResult {
    let invalidations = nstat("invalidations")?;
    gpu.free(va).map_err(errno)?;
    eventually(5, "the registration's invalidation", || {
        Ok(nstat("invalidations")? > invalidations)
    })
}

/// `dma_pages_mapped` and `dma_page_holds`.
fn dma_counters() -> Result<(u64, u64), String> {
    Ok((gstat("dma_pages_mapped")?, gstat("dma_page_holds")?))
}

/// Nine registrations of one GPU page, each on a file (context) of its own, as nine verbs
/// contexts of a process registering one buffer would make: nine pins of the page, and one
/// DMA mapping of it for edu, held nine times. Each context's first mapping asks NVIDIA
/// (`dma_map_pages`) and gives NVIDIA's mapping back at once, so nvsim holds none. With a
/// mapping per pin, as before, the ninth made DMA-API debugging WARN ("exceeded 7 overlapping
/// mappings of cacheline"), which the log oracle fails. The last context's close unmaps it.
fn nine_contexts_one_mapping() -> TestResult {
    let peer = edu()?;
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(K64).map_err(errno)?;
    let content = pattern(43, K64 as usize);
    gpu.write(va, &content).map_err(errno)?;
    let bus = p2pclient_addresses(va, K64)?;
    let (probes, pairs) = (stat("dma_map_calls")?, gstat("dma_gpu_peer_pairs")?);
    let files = (0..9).map(|_| nic()).collect::<Result<Vec<_>, _>>()?;
    let mrs = files
        .iter()
        .map(|n| n.reg(va, K64).map_err(errno))
        .collect::<Result<Vec<_>, _>>()?;
    check_eq!(stat("pins_live")?, 9, "nv-p2p pins of the page");
    check_eq!(
        stat("dma_map_calls")? - probes,
        u64::from(pairs == 0),
        "NVIDIA dma_map_pages calls: one if gdrpeer had not asked about this GPU and edu yet"
    );
    check_eq!(
        gstat("dma_gpu_peer_pairs")?,
        1,
        "GPU and peer pairs asked about"
    );
    for mr in &mrs[1..] {
        check_eq!(
            mr.dma,
            mrs[0].dma,
            "DMA addresses of the page's nine registrations"
        );
    }
    check_dma_kind(&peer, &mrs[0].dma, &bus, "the shared mapping")?;
    check_eq!(
        dma_counters()?,
        (1, 9),
        "gdrpeer's DMA-mapped pages and their holds"
    );
    check_eq!(
        stat("dma_mappings_live")?,
        0,
        "nvsim's DMA mappings (NVIDIA's, given back)"
    );
    kernel_record_is(&peer, bus[0], &mrs[0].dma)?;
    check_dma_reaches(&files[8], &mrs[8].dma, &content, "the ninth registration")?;
    drop(files);
    eventually(5, "the page's mapping gone with the last context", || {
        Ok(dma_counters()? == (0, 0))
    })?;
    kernel_record_is(&peer, bus[0], &[])?;
    Ok(())
}

/// Lines of the kernel log that contain `needle`.
fn kernel_log_lines(needle: &str) -> Result<usize, String> {
    Ok(kernel_log()?.lines().filter(|l| l.contains(needle)).count())
}

/// nvsim's second GPU as gdrpeer's log names it: the UUID `nvsim-gpu-1` (zero-padded to 16
/// bytes) in NVIDIA's notation.
const NVSIM_GPU1: &str = "GPU-6e767369-6d2d-6770-752d-310000000000";

/// NVIDIA decides whether a peer may reach a GPU (its PCIe topology check), and gdrpeer asks
/// once per GPU and peer, telling GPUs apart by the UUID in the pin's table. nvsim's second
/// GPU is refused for every peer (`refuse_peers`) after the first GPU's memory was registered
/// for edu: a registration of the second GPU's memory must then fail with -EOPNOTSUPP (the
/// kernel API's and the dma-buf import's), where a pin that read the wrong UUID would find
/// the first GPU's answer and map. The kernel log names the refused GPU once, for the two
/// refusals. A refusal is not remembered: allowed again, the second GPU's memory is
/// registered and edu's DMA reaches it.
fn gpus_asked_apart() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (v0, _) = gpu.alloc(K64).map_err(errno)?;
    let (v1, _) = gpu.alloc_flags(K64, nvsim::ALLOC_GPU1).map_err(errno)?;
    let content = pattern(47, K64 as usize);
    gpu.write(v1, &content).map_err(errno)?;
    let n = nic()?;
    n.reg(v0, K64).map_err(errno)?;
    let (pairs, mapped) = (gstat("dma_gpu_peer_pairs")?, dma_counters()?);
    let refusals = stat("topology_refusals")?;
    let reported = kernel_log_lines(&format!("does not map {NVSIM_GPU1}'s memory"))?;
    with_debugfs("refuse_peers", "2", "0", || {
        expect_err(
            n.reg(v1, K64),
            Errno::OPNOTSUPP,
            "registration of memory of a GPU edu may not reach",
        )?;
        expect_err(
            n.reg_dmabuf(-1, DMABUF_KAPI, v1, K64),
            Errno::OPNOTSUPP,
            "dma-buf import of memory of a GPU edu may not reach",
        )?;
        check_eq!(
            stat("topology_refusals")? - refusals,
            2,
            "NVIDIA's refusals: one per registration (a refusal is not remembered)"
        );
        check_eq!(
            (gstat("dma_gpu_peer_pairs")?, dma_counters()?),
            (pairs, mapped),
            "GPU and peer pairs, DMA-mapped pages and holds after the refusals"
        );
        check_eq!(
            kernel_log_lines(&format!("does not map {NVSIM_GPU1}'s memory"))? - reported,
            1,
            "kernel log lines naming the refused GPU (once for the GPU and edu)"
        );
        Ok(())
    })?;
    let r1 = n.reg(v1, K64).map_err(errno)?;
    check_eq!(
        gstat("dma_gpu_peer_pairs")?,
        pairs + 1,
        "GPU and peer pairs once the second GPU was allowed"
    );
    check_dma_reaches(&n, &r1.dma, &content, "the second GPU's registration")?;
    Ok(())
}

/// Removes edu from the system (`/sys/bus/pci/devices/.../remove`), runs `gone`, then finds it
/// again (`/sys/bus/pci/rescan`) and waits for gdrnic to bind it at its address, whatever
/// `gone` returned: a failing test leaves the tests after it their NIC.
fn edu_removed_while(peer: PciAddress, gone: impl FnOnce() -> TestResult) -> TestResult {
    edu_gone_while(peer, Gone::Removed, gone)
}

/// How a peer goes: its driver unbound from it (and bound again), or the device removed (and
/// found again by a rescan).
#[derive(Clone, Copy, PartialEq)]
enum Gone {
    Unbound,
    Removed,
}

/// Runs `gone` while edu is gone as `how` says, then brings it back as before.
fn edu_gone_while(peer: PciAddress, how: Gone, gone: impl FnOnce() -> TestResult) -> TestResult {
    let write =
        |path: &str, what: &str| std::fs::write(path, what).map_err(|e| format!("{path}: {e}"));
    if how == Gone::Unbound {
        let name = peer.to_string();
        write("/sys/bus/pci/drivers/gdrnic/unbind", &name)?;
        let result = gone();
        write("/sys/bus/pci/drivers/gdrnic/bind", &name)?;
        eventually(5, "/dev/gdrnic back with edu's driver", || {
            Ok(std::path::Path::new("/dev/gdrnic").exists())
        })?;
        return result;
    }
    let sysfs = |path: &str| write(path, "1");
    sysfs(&format!("/sys/bus/pci/devices/{peer}/remove"))?;
    let result = gone();
    sysfs("/sys/bus/pci/rescan")?;
    eventually(5, "/dev/gdrnic back with edu", || {
        Ok(std::path::Path::new("/dev/gdrnic").exists())
    })?;
    check_eq!(edu()?, peer, "edu's address after the rescan");
    result
}

/// A peer removed from the system and found again, as a hot unplug and a rescan or a virtual
/// function destroyed and made again do it, is a new `struct pci_dev`: gdrpeer asks NVIDIA
/// about it afresh, and lets go of the removed one's pairs when it adds the new one's, so the
/// pairs it counts do not grow with each removal (they did: every peer asked about stayed
/// referenced until unload). edu comes back at its address and gdrnic binds it again; its DMA
/// must reach the GPU as before. Nothing may be mapped for edu when it goes (DMA-API
/// debugging reports mappings left to a device whose driver is unbound).
fn removed_peer_let_go() -> TestResult {
    let peer = edu()?;
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(K64).map_err(errno)?;
    let content = pattern(48, K64 as usize);
    gpu.write(va, &content).map_err(errno)?;
    nic()?.reg(va, K64).map_err(errno)?;
    eventually(5, "edu's mappings gone with the NIC's file", || {
        Ok(dma_counters()? == (0, 0))
    })?;
    let pairs = gstat("dma_gpu_peer_pairs")?;
    edu_removed_while(peer, || {
        check!(
            !std::path::Path::new("/dev/gdrnic").exists(),
            "/dev/gdrnic gone with edu"
        );
        Ok(())
    })?;
    let probes = stat("dma_map_calls")?;
    let n = nic()?;
    let mr = n.reg(va, K64).map_err(errno)?;
    check_eq!(
        stat("dma_map_calls")? - probes,
        1,
        "NVIDIA dma_map_pages calls: the found-again edu asked about"
    );
    let now = gstat("dma_gpu_peer_pairs")?;
    check!(
        now <= pairs,
        "GPU and peer pairs: {now} after the rescan and one registration, {pairs} before \
         (the removed edu's pairs let go, one added)"
    );
    check_dma_reaches(&n, &mr.dma, &content, "the found-again edu's registration")?;
    Ok(())
}

/// A NIC removed while a process holds its file with registrations, as an RDMA device goes
/// (hot unplug, a virtual function's end, an unbind) under verbs contexts with memory
/// registered: gdrnic's removal waits for the file's ioctls and ends its registrations and
/// its gdrpeer context, as an RDMA driver's removal ends its contexts'. gdrpeer must have
/// unmapped everything it mapped for the device in that context by the time the removal
/// returns: a live registration's pages, and a deregistered one's, kept with its cached
/// region (and the registration parked for reuse). DMA-API debugging reports a mapping left
/// to an unbound device ("pending DMA allocations while released from device"), which the log
/// oracle fails. The file then answers ENODEV and closes; edu found again works.
/// What is held outside the NIC's contexts: `peer_gone_under_other_holders`.
fn peer_removed_under_registrations() -> TestResult {
    let peer = edu()?;
    let gpu = Gpu::open().map_err(errno)?;
    let (live, _) = gpu.alloc(K64).map_err(errno)?;
    let (parked, _) = gpu.alloc(K64).map_err(errno)?;
    let n = nic()?;
    n.reg(live, K64).map_err(errno)?;
    let p = n.reg(parked, K64).map_err(errno)?;
    n.dereg(p.handle).map_err(errno)?;
    let (pages, _) = dma_counters()?;
    check!(
        pages >= 1,
        "DMA-mapped pages before the removal: {pages}, expected the live registration's at \
         least"
    );
    edu_removed_while(peer, || {
        check_eq!(
            dma_counters()?,
            (0, 0),
            "gdrpeer's DMA-mapped pages and holds once edu's removal returned"
        );
        check_eq!(
            (nstat("registrations")?, nstat("dmabuf_imports")?),
            (0, 0),
            "gdrnic's registrations and imports after the removal"
        );
        expect_err(
            n.reg(live, K64),
            Errno::NODEV,
            "registration on a removed NIC's file",
        )?;
        drop(n);
        Ok(())
    })?;
    let content = pattern(49, K64 as usize);
    gpu.write(live, &content).map_err(errno)?;
    let n = nic()?;
    let mr = n.reg(live, K64).map_err(errno)?;
    check_dma_reaches(&n, &mr.dma, &content, "the found-again edu's registration")?;
    Ok(())
}

/// A function on edu's bus that no test uses: QEMU's network card (PCI class 0x02; a guest
/// whose root loads its driver has it bound, which its removal unbinds), `None` where there
/// is none.
fn spare_function(edu: PciAddress) -> Result<Option<PciAddress>, String> {
    for entry in std::fs::read_dir("/sys/bus/pci/devices").map_err(|e| e.to_string())? {
        let path = entry.map_err(|e| e.to_string())?.path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let Ok(addr) = name.parse::<PciAddress>() else {
            continue;
        };
        let class = std::fs::read_to_string(path.join("class")).unwrap_or_default();
        if addr.bus == edu.bus && addr != edu && class.trim().starts_with("0x02") {
            return Ok(Some(addr));
        }
    }
    Ok(None)
}

/// A kernel-API registration kept for reuse past its unpin (parked) must not hand its
/// addresses out again once its peer went. gdrnic registers for another function of its bus
/// (knob `reg_peer`, as a driver of a multi-function NIC would, holding the function), parks
/// a registration, and the function is removed from the system: gdrpeer unmaps what it
/// mapped for it, the parked registration's mapping too. The next registration of the same
/// memory for that function is -ENODEV, as for any removed peer. Before, it reused the parked
/// registration and handed out the addresses just unmapped (behind an IOMMU, IOVAs free for
/// reuse by anything).
fn kept_registration_after_its_peer_went() -> TestResult {
    if param("dma_map_keep")? == 0 {
        return Err(format!(
            "{SKIP}needs dma_map_keep=1, which parks a registration"
        ));
    }
    let edu = edu()?;
    let Some(other) = spare_function(edu)? else {
        return Err(format!(
            "{SKIP}needs a function on edu's bus without a driver"
        ));
    };
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(K64).map_err(errno)?;
    const KNOB: &str = "/sys/kernel/debug/gdrnic/reg_peer";
    let write =
        |path: &str, what: String| std::fs::write(path, what).map_err(|e| format!("{path}: {e}"));
    write(KNOB, (u32::from(other.devfn) + 1).to_string())?;
    let n = nic();
    write(KNOB, "0".into())?;
    let n = n?;
    let mr = n.reg(va, K64).map_err(errno)?;
    // Its addresses are the other function's: edu may not move bytes with them.
    expect_err(
        n.send(mr.handle, 0, 10),
        Errno::INVAL,
        "send through a registration for another function",
    )?;
    n.dereg(mr.handle).map_err(errno)?;
    check_eq!(
        dma_counters()?,
        (1, 1),
        "DMA-mapped pages and holds: the parked registration's"
    );
    write(&format!("/sys/bus/pci/devices/{other}/remove"), "1".into())?;
    let result = (|| {
        check_eq!(
            dma_counters()?,
            (0, 0),
            "DMA-mapped pages and holds once the function was removed"
        );
        expect_err(
            n.reg(va, K64),
            Errno::NODEV,
            "registration for the removed function, a registration of it parked",
        )?;
        check_eq!(
            dma_counters()?,
            (0, 0),
            "DMA-mapped pages and holds after the refused registration"
        );
        Ok(())
    })();
    drop(n);
    write("/sys/bus/pci/rescan", "1".into())?;
    eventually(5, "the removed function back", || {
        Ok(std::path::Path::new(&format!("/sys/bus/pci/devices/{other}")).exists())
    })?;
    result
}

/// What gdrpeer mapped for a peer outside the peer driver's contexts is given back when the
/// peer's driver leaves it, as `how` says (an unbind, or the device's removal): a handle of
/// /dev/gdrpeer mapped for edu (DMA_MAP, whose use lasts until the handle's unpin), and a
/// dma-buf of another handle imported by gdrnic, whose removal detaches the import; the region
/// the dma-buf holds keeps its mapping (`dma_map_keep`) after the detach. Both regions stay
/// pinned by the /dev/gdrpeer file. Before, both mappings outlived the unbind, which DMA-API
/// debugging reported ("pending DMA allocations while released from device") and the log
/// oracle fails; now the kernel log says once what was given back. Mapped again for the edu
/// that came back, the handle's DMA reaches its page.
fn peer_gone_under_other_holders(how: Gone) -> TestResult {
    let peer = edu()?;
    let gpu = Gpu::open().map_err(errno)?;
    let (mapped, _) = gpu.alloc(K64).map_err(errno)?;
    let (exported, _) = gpu.alloc(K64).map_err(errno)?;
    let d = gdrpeer::Device::open_default().map_err(|e| e.to_string())?;
    let pin = |va| {
        d.pin(va, K64, gdrpeer::PinFlags::empty())
            .map_err(|e| format!("pin {va:#x}: {e}"))
    };
    let m = pin(mapped)?;
    d.dma_map(m.handle, peer)
        .map_err(|e| format!("DMA_MAP for edu: {e}"))?;
    let e = pin(exported)?;
    let buf = d
        .export_dmabuf(e.handle)
        .map_err(|e| format!("EXPORT_DMABUF: {e}"))?;
    let n = nic()?;
    n.reg_dmabuf(buf.fd.as_raw_fd(), 0, 0, K64).map_err(errno)?;
    check_eq!(
        dma_counters()?,
        (2, 2),
        "DMA-mapped pages and holds: the handle's and the import's"
    );
    const GAVE_BACK: &str = "as the device went, gave back DMA mappings";
    let reports = kernel_log_lines(GAVE_BACK)?;
    edu_gone_while(peer, how, || {
        check_eq!(
            dma_counters()?,
            (0, 0),
            "gdrpeer's DMA-mapped pages and holds once edu's driver left"
        );
        check_eq!(
            nstat("dmabuf_imports")?,
            0,
            "gdrnic's imports after its driver left edu"
        );
        drop(n);
        Ok(())
    })?;
    check_eq!(
        kernel_log_lines(GAVE_BACK)? - reports,
        1,
        "kernel log lines saying what was given back as edu went"
    );
    let (dma, content) = map_for_edu_back(&d, &gpu, (mapped, m.handle), peer, 50)?;
    check_eq!(
        dma_counters()?,
        (1, 1),
        "DMA-mapped pages and holds: the handle's new mapping"
    );
    let n = nic()?;
    check_dma_reaches(&n, &dma, &content, "the handle mapped again")?;
    n.reg_dmabuf(buf.fd.as_raw_fd(), 0, 0, K64).map_err(errno)?;
    Ok(())
}

/// Fills the 64 KiB at `va` with pattern `seed` and DMA_MAPs its handle for the edu that came
/// back: the DMA addresses and the content, for [`check_dma_reaches`].
fn map_for_edu_back(
    d: &gdrpeer::Device,
    gpu: &Gpu,
    (va, handle): (u64, u64),
    peer: PciAddress,
    seed: u8,
) -> Result<(Vec<u64>, Vec<u8>), String> {
    let content = pattern(seed, K64 as usize);
    gpu.write(va, &content).map_err(errno)?;
    let dma = d
        .dma_map(handle, peer)
        .map_err(|e| format!("DMA_MAP for the edu that came back: {e}"))?;
    Ok((dma, content))
}

/// A driver that leaves an import past its `remove()` (gdrnic's `remove_leaves_files`, a bug a
/// driver may have): gdrpeer gives the import's mapping back when the driver is unbound,
/// counted as in use in the kernel log. With the driver bound again, a new file imports the
/// same dma-buf: the region it holds is mapped afresh for edu. The old file's close then
/// detaches the left import, ending its use, which must not end the new mapping's (the use
/// tells its mapping from a newer one by the address array it holds): one page and one hold
/// stay mapped for the new import. Counting the old use against the new mapping unmaps it
/// under the new import (`dma_map_keep=0`), or underflows its count at the new import's
/// detach (a Rust overflow panic on the test kernel). Mapped again for the handle, edu's DMA
/// reaches the page; nothing is left once the file closes.
fn import_left_past_remove() -> TestResult {
    let peer = edu()?;
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(K64).map_err(errno)?;
    let content = pattern(51, K64 as usize);
    gpu.write(va, &content).map_err(errno)?;
    let d = gdrpeer::Device::open_default().map_err(|e| e.to_string())?;
    let h = d
        .pin(va, K64, gdrpeer::PinFlags::empty())
        .map_err(|e| format!("pin: {e}"))?;
    let buf = d
        .export_dmabuf(h.handle)
        .map_err(|e| format!("EXPORT_DMABUF: {e}"))?;
    let old = nic()?;
    old.reg_dmabuf(buf.fd.as_raw_fd(), 0, 0, K64)
        .map_err(errno)?;
    const IN_USE: &str = ", 1 of them in use";
    let reports = kernel_log_lines(IN_USE)?;
    let knob = "/sys/kernel/debug/gdrnic/remove_leaves_files";
    std::fs::write(knob, "Y").map_err(|e| format!("{knob}: {e}"))?;
    let gone = edu_gone_while(peer, Gone::Unbound, || {
        check_eq!(
            dma_counters()?,
            (0, 0),
            "gdrpeer's DMA-mapped pages and holds once edu's driver left an import"
        );
        Ok(())
    });
    let _ = std::fs::write(knob, "N");
    gone?;
    check_eq!(
        kernel_log_lines(IN_USE)? - reports,
        1,
        "kernel log lines saying that a mapping in use was given back"
    );
    let n = nic()?;
    n.reg_dmabuf(buf.fd.as_raw_fd(), 0, 0, K64).map_err(errno)?;
    check_eq!(
        dma_counters()?,
        (1, 1),
        "DMA-mapped pages and holds: the new import's"
    );
    drop(old);
    eventually(5, "the left import detached with its file", || {
        Ok(nstat("dmabuf_imports")? == 1)
    })?;
    check_eq!(
        dma_counters()?,
        (1, 1),
        "DMA-mapped pages and holds once the left import detached"
    );
    drop(n);
    eventually(5, "the new import detached with its file", || {
        Ok(nstat("dmabuf_imports")? == 0)
    })?;
    let dma = d
        .dma_map(h.handle, peer)
        .map_err(|e| format!("DMA_MAP: {e}"))?;
    check_dma_reaches(&nic()?, &dma, &content, "the handle mapped for edu")?;
    drop(buf);
    drop(d);
    eventually(5, "no mapping left once the file closed", || {
        Ok(dma_counters()? == (0, 0))
    })?;
    Ok(())
}

/// A DMA_MAP that found edu before its removal and maps it after the removal's sweep
/// ([`peer_gone_under_other_holders`]) must not leave a mapping to the removed device: it fails
/// with ENODEV, as a DMA_MAP for a device that is not there does, and gives back what it
/// mapped. edu found again is a new device that no GPU's memory was allowed for, so the
/// handle's first mapping for it asks NVIDIA, where nvsim's `dma_map_delay_us` holds the call
/// while edu is removed; the mapping is made after that. Before, the DMA_MAP succeeded and its
/// mapping stayed, for a device gone from the system, until the handle's unpin (one page and
/// one hold, which the removal's sweep had run too early to see). Mapped again for the edu
/// that came back, the handle's DMA reaches its page.
fn dma_map_racing_peer_removal() -> TestResult {
    let peer = edu()?;
    edu_removed_while(peer, || Ok(()))?;
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(K64).map_err(errno)?;
    let d = gdrpeer::Device::open_default().map_err(|e| e.to_string())?;
    let h = d
        .pin(va, K64, gdrpeer::PinFlags::empty())
        .map_err(|e| format!("pin: {e}"))?;
    let probes = stat("dma_map_calls")?;
    debugfs("dma_map_delay_us", "2000000")?;
    let raced = thread::scope(|s| {
        let late = s.spawn(|| d.dma_map(h.handle, peer));
        crate::helpers::delayed_call_asleep()?;
        edu_removed_while(peer, || {
            check_eq!(
                stat("calls_delayed")?,
                1,
                "nv-p2p calls asleep once edu's removal returned (the removal took longer than \
                 nvsim's delay)"
            );
            let mapped = late
                .join()
                .map_err(|_| "the DMA_MAP thread panicked".to_string())?;
            check_eq!(
                crate::helpers::fails(mapped, "DMA_MAP of the removed edu")?,
                Errno::NODEV,
                "DMA_MAP of an edu removed while it mapped"
            );
            check_eq!(
                dma_counters()?,
                (0, 0),
                "gdrpeer's DMA-mapped pages and holds after a DMA_MAP that raced edu's removal"
            );
            Ok(())
        })
    });
    let _ = debugfs("dma_map_delay_us", "0");
    raced?;
    check_eq!(
        stat("dma_map_calls")? - probes,
        1,
        "NVIDIA dma_map_pages calls: the removed edu's, asked about once"
    );
    let (dma, content) = map_for_edu_back(&d, &gpu, (va, h.handle), peer, 52)?;
    check_dma_reaches(
        &nic()?,
        &dma,
        &content,
        "the handle mapped for the edu that came back",
    )?;
    Ok(())
}

/// Two contexts map one page: the first one's close leaves the mapping to the second, whose
/// DMA still reaches the page; the memory's free revokes the second's registration, and the
/// callback unmaps the page before it returns (the registration's invalidation first).
fn shared_mapping_outlives_one_holder() -> TestResult {
    let peer = edu()?;
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(K64).map_err(errno)?;
    let content = pattern(44, K64 as usize);
    gpu.write(va, &content).map_err(errno)?;
    let bus = p2pclient_addresses(va, K64)?;
    let (a, b) = (nic()?, nic()?);
    let ra = a.reg(va, K64).map_err(errno)?;
    let rb = b.reg(va, K64).map_err(errno)?;
    check_eq!(rb.dma, ra.dma, "DMA addresses of the page in two contexts");
    check_eq!(dma_counters()?, (1, 2), "DMA-mapped pages and holds");
    drop(a);
    eventually(5, "the first context's hold given back", || {
        Ok(dma_counters()? == (1, 1))
    })?;
    kernel_record_is(&peer, bus[0], &rb.dma)?;
    check_dma_reaches(&b, &rb.dma, &content, "the second context's registration")?;
    free_and_await_invalidation(&gpu, va)?;
    check_eq!(
        dma_counters()?,
        (0, 0),
        "DMA-mapped pages once the callback returned"
    );
    kernel_record_is(&peer, bus[0], &[])?;
    expect_err(
        b.send(rb.handle, 0, 64),
        Errno::NXIO,
        "send after revocation",
    )?;
    b.dereg(rb.handle).map_err(errno)
}

/// A deregistered region stays cached, and its mapping with it (`dma_map_keep=1`, the
/// default): the next registration gets the same addresses. With `dma_map_keep=0` the
/// mapping goes with the registration, and the next one maps again. Neither asks NVIDIA's
/// `dma_map_pages` again: the first asked it about this GPU and edu.
fn mapping_kept_while_cached() -> TestResult {
    let keep = param("dma_map_keep")? != 0;
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(K64).map_err(errno)?;
    let content = pattern(45, K64 as usize);
    gpu.write(va, &content).map_err(errno)?;
    let n = nic()?;
    let first = n.reg(va, K64).map_err(errno)?;
    n.dereg(first.handle).map_err(errno)?;
    check_eq!(
        gstat("regions")?,
        1,
        "regions cached after the deregistration"
    );
    let held = if keep { (1, 1) } else { (0, 0) };
    check_eq!(
        dma_counters()?,
        held,
        format!(
            "DMA-mapped pages after it (dma_map_keep={})",
            u8::from(keep)
        )
    );
    let probes = stat("dma_map_calls")?;
    let again = n.reg(va, K64).map_err(errno)?;
    check_eq!(
        dma_counters()?,
        (1, 1),
        "DMA-mapped pages with the second registration"
    );
    // NVIDIA was asked about this GPU and edu by the first: not again.
    check_eq!(
        stat("dma_map_calls")? - probes,
        0,
        "NVIDIA dma_map_pages calls of the second registration"
    );
    if keep {
        check_eq!(again.dma, first.dma, "DMA addresses of the cached mapping");
    }
    check_dma_reaches(&n, &again.dma, &content, "the second registration")?;
    n.dereg(again.handle).map_err(errno)
}

/// A context over its region limit with every region in use: `cache_max_regions` + 1
/// registrations live, one 64 KiB allocation each ([`over_limit`]).
struct OverLimit {
    limit: u64,
    /// Holds the allocations: bind it (`gpu: _gpu`), or they go.
    gpu: Gpu,
    vas: Vec<u64>,
    n: Nic,
    live: Vec<Mr>,
}

/// [`OverLimit`], or a skip unless gdrpeer was loaded with a small `cache_max_regions` (the
/// plan's `-small-cache` runs).
fn over_limit() -> Result<OverLimit, String> {
    let limit = param("cache_max_regions")?;
    if limit == 0 || limit > 8 {
        return Err(format!("{SKIP}needs cache_max_regions 1..8, not {limit}"));
    }
    let gpu = Gpu::open().map_err(errno)?;
    let vas = (0..=limit)
        .map(|_| gpu.alloc(K64).map(|(va, _)| va).map_err(errno))
        .collect::<Result<Vec<_>, _>>()?;
    let n = nic()?;
    let live = vas
        .iter()
        .map(|&va| n.reg(va, K64).map_err(errno))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(OverLimit {
        limit,
        gpu,
        vas,
        n,
        live,
    })
}

/// The kernel API keeps a context's last registration whole when the NIC deregisters it (its
/// region held, for the next registration of a window in it; `design.rst`, "DMA mappings"),
/// but not over the context's limits: with `cache_max_regions` registrations live, one more
/// is registered (over the limit, which in-use regions may be) and deregistered; its region,
/// unused now, must be unpinned as the limit unpins unused regions, leaving the limit's
/// number pinned. Kept, it stayed pinned over the limit until the context's next
/// registration. Within the limit, a deregistered registration's region stays pinned (the
/// cache). Needs gdrpeer loaded with a small `cache_max_regions` (the plan's `-small-cache`
/// runs).
fn kept_registration_within_limits() -> TestResult {
    let pinned = || gstat("regions");
    let before = pinned()?;
    let OverLimit {
        limit,
        gpu: _gpu,
        n,
        live,
        ..
    } = over_limit()?;
    check_eq!(
        pinned()? - before,
        limit + 1,
        "regions pinned with one registration more than cache_max_regions live"
    );
    n.dereg(live[limit as usize].handle).map_err(errno)?;
    check_eq!(
        pinned()? - before,
        limit,
        "regions pinned once the registration over the limit went"
    );
    n.dereg(live[0].handle).map_err(errno)?;
    check_eq!(
        pinned()? - before,
        limit,
        "regions pinned once a registration within the limit went (its region cached)"
    );
    Ok(())
}

/// A registration deregistered from another process than its context's (a forked child on
/// the parent's file; a NIC's teardown work in a kernel thread alike), with the context over
/// its region limit and every region in use: that process cannot give pages back (NVIDIA
/// knows them by the owner's tgid), so the unpin must leave the region it made unused in the
/// cache, for the owner's next pin to trim or hit. Before, the unpin trimmed there: the region
/// was evicted, its release left to NVIDIA's callback, out of the cache but still pinned and
/// counted against the limits, so that the context's trims evicted every other unused region
/// too; the owner's registration of the memory again was a new pin. Needs gdrpeer loaded with
/// a small `cache_max_regions` (the plan's `-small-cache` runs).
fn dereg_elsewhere_leaves_cache() -> TestResult {
    let OverLimit {
        gpu: _gpu,
        vas,
        n,
        live,
        ..
    } = over_limit()?;
    let (deferred, hits) = (gstat("deferred_releases")?, gstat("hits")?);
    let first = live[0].handle;
    let child = proc::fork(|| n.dereg(first).map_err(errno))?;
    proc::wait(child)?;
    check_eq!(
        gstat("deferred_releases")? - deferred,
        0,
        "releases left to NVIDIA's callback by the child's deregistration"
    );
    let again = n.reg(vas[0], K64).map_err(errno)?;
    check_eq!(
        gstat("hits")? - hits,
        1,
        "cache hits: the owner's registration of the memory the child deregistered"
    );
    n.dereg(again.handle).map_err(errno)?;
    for mr in &live[1..] {
        n.dereg(mr.handle).map_err(errno)?;
    }
    Ok(())
}

/// One context's region of a page is evicted (the cache's region limit) while another
/// context's registration of the page is outstanding: the eviction gives its hold back and
/// the mapping stays for the other, whose DMA still reaches the page. Needs gdrpeer loaded
/// with a small `cache_max_regions` (the plan's `-small-cache` runs).
fn eviction_leaves_other_holders() -> TestResult {
    let limit = param("cache_max_regions")?;
    if limit == 0 || limit > 8 {
        return Err(format!("{SKIP}needs cache_max_regions 1..8, not {limit}"));
    }
    let keep = param("dma_map_keep")? != 0;
    let peer = edu()?;
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(K64).map_err(errno)?;
    let content = pattern(46, K64 as usize);
    gpu.write(va, &content).map_err(errno)?;
    let bus = p2pclient_addresses(va, K64)?;
    let (a, b) = (nic()?, nic()?);
    let ra = a.reg(va, K64).map_err(errno)?;
    a.dereg(ra.handle).map_err(errno)?;
    let rb = b.reg(va, K64).map_err(errno)?;
    // `limit` other buffers through the first context: its region of the page is the least
    // recently used, and goes.
    let evictions = gstat("evictions_limit")?;
    let mut others = Vec::new();
    for _ in 0..limit {
        let (o, _) = gpu.alloc(K64).map_err(errno)?;
        let mr = a.reg(o, K64).map_err(errno)?;
        a.dereg(mr.handle).map_err(errno)?;
        others.push(o);
    }
    check_eq!(gstat("evictions_limit")? - evictions, 1, "regions evicted");
    let cached = if keep { limit } else { 0 };
    check_eq!(
        dma_counters()?,
        (1 + cached, 1 + cached),
        "DMA-mapped pages and holds: the page's (the second context's) and the cached others'"
    );
    kernel_record_is(&peer, bus[0], &rb.dma)?;
    check_dma_reaches(&b, &rb.dma, &content, "the second context's registration")?;
    b.dereg(rb.handle).map_err(errno)?;
    drop((a, b));
    for o in others {
        gpu.free(o).map_err(errno)?;
    }
    Ok(())
}

/// A DMA after revocation, planted: the NIC registers a GPU page through the kernel API, the
/// memory is freed (the callback revokes the registration, and the page's DMA mapping for
/// edu goes), and the NIC's engine is told to read the page's old DMA address anyway, as a
/// NIC driver that kept using a revoked address would. Behind a translating IOMMU in strict
/// mode the IOVA is unusable the moment its mapping goes: the read is blocked, and the IOMMU
/// driver logs a DMA fault ("DMAR: [DMA Read NO_PASID] Request device [..] fault addr
/// <the IOVA's page> [fault reason ..] ..."). The test waits for that line inside a region
/// marked `expect-reports dmar-fault=<address>`: the log oracle (tests/vm/report) excuses a
/// fault at that address there and no other, and fails the run if it is missing. Run by
/// tests/plans/iommu.sh only (`gdrpeer-test --nic-iommu`): without an IOMMU the read reaches
/// whatever the BAR holds there now.
fn planted_dma_after_revocation() -> TestResult {
    let peer = edu()?;
    let domain = iommu_domain(&peer)?;
    check_eq!(
        domain.as_deref(),
        Some("DMA"),
        format!("{peer}'s IOMMU domain (\"DMA\": translated, strict invalidation)")
    );
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(K64).map_err(errno)?;
    let content = pattern(41, K64 as usize);
    gpu.write(va, &content).map_err(errno)?;
    let n = nic()?;
    let mapped = gstat("dma_pages_mapped")?;
    let mr = n.reg(va, K64).map_err(errno)?;
    check_eq!(
        gstat("dma_pages_mapped")?,
        mapped + 1,
        "gdrpeer's DMA-mapped pages with the registration"
    );
    check_dma_reaches(&n, &mr.dma, &content, "the registration's DMA address")?;
    free_and_await_invalidation(&gpu, va)?;
    check_eq!(
        gstat("dma_pages_mapped")?,
        mapped,
        "gdrpeer's DMA-mapped pages once the callback returned"
    );
    expect_err(
        n.send(mr.handle, 0, 64),
        Errno::NXIO,
        "send after revocation",
    )?;

    // The planted bug: the engine reads the revoked IOVA.
    let at = mr.dma[0] + 0x100;
    let fault = format!("fault addr {:#x}", at & !0xfff);
    let kmsg = |m: &str| std::fs::write("/dev/kmsg", format!("gdrpeer-test: {m}"));
    kmsg(&format!("expect-reports dmar-fault={at:#x}")).map_err(|e| format!("/dev/kmsg: {e}"))?;
    let read = n.dma_read(at, 64);
    let logged = eventually(5, "the IOMMU's DMA fault in the kernel log", || {
        Ok(kernel_log()?
            .lines()
            .any(|l| l.contains("DMAR: [DMA Read") && l.contains(&fault)))
    });
    kmsg("end-expect").map_err(|e| format!("/dev/kmsg: {e}"))?;
    logged?;
    let got = read.map_err(|e| format!("DMA_READ of the revoked {at:#x}: {e}"))?;
    check!(
        got[..] != content[0x100..0x140],
        "the read after revocation returned the freed page's bytes: the IOMMU let it through"
    );
    n.dereg(mr.handle).map_err(errno)
}

/// Tests that need a translating IOMMU in strict mode (`gdrpeer-test --nic-iommu`).
pub const IOMMU_TESTS: &[harness::Test] = &[(
    "gdrnic-iommu-planted-dma-after-revocation",
    planted_dma_after_revocation,
)];

/// Tests that make lockdep report (run in a boot of their own).
pub const LOCKDEP_TESTS: &[harness::Test] = &[(
    "gdrnic-lockdep-sees-lock-taken-in-callback",
    lockdep_sees_lock_taken_in_callback,
)];

// --- Allocation-failure walks of the kernel API ([`crate::failnth`]) ----------------------

/// open of `/dev/gdrnic`: gdrnic's own allocation and gdrpeer_ctx_create().
const OPEN: Op<Option<Nic>> = Op {
    name: "gdrnic-open",
    setup: || Ok((None, None)),
    call: |n| {
        *n = Some(Nic::open()?);
        Ok(())
    },
    finish: |_, _| Ok(()),
    forked: false,
};

/// What a REG needs besides the GPU memory, made before it: the file and the DMA address
/// array.
struct Reg {
    n: Nic,
    va: u64,
    a: RegArgs,
    dma: Vec<u64>,
}

fn reg_setup() -> Ready<Reg> {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(4 * K64).map_err(errno)?;
    let r = Reg {
        n: nic()?,
        va,
        a: RegArgs::default(),
        dma: vec![u64::MAX; 4],
    };
    Ok((r, Some(gpu)))
}

/// REG of three pages at an unaligned va: gdrpeer_mr_pin(), a miss (nvsim's get_pages), the
/// DMA mapping for edu (nvsim's dma_map_pages) and gdrnic's own allocations.
fn reg_call(r: &mut Reg) -> Result<(), Errno> {
    r.a.va = r.va + K64 + 333;
    r.a.len = 2 * K64;
    r.n.reg_into(&mut r.a, &mut r.dma)
}

fn reg_finish(r: Reg, result: Result<(), Errno>) -> TestResult {
    if result.is_err() {
        return Ok(());
    }
    check_eq!(
        (r.a.aligned_va, r.a.page_count),
        (r.va + K64, 3),
        "registered window"
    );
    check_eq!(
        r.dma[..3],
        p2pclient_addresses(r.va + K64, 3 * K64)?[..],
        "DMA addresses"
    );
    r.n.dereg(r.a.handle).map_err(errno)
}

const REG_OP: Op<Reg> = Op {
    name: "gdrnic-reg",
    setup: reg_setup,
    call: reg_call,
    finish: reg_finish,
    forked: false,
};

/// An export and its dynamic import, with the GPU memory: the walk frees it itself, with the
/// dma-buf still open, whatever the call did.
struct RegDmabuf {
    d: gdrpeer::Device,
    n: Nic,
    gpu: Gpu,
    va: u64,
    buf: Option<gdrpeer::Dmabuf>,
    mr: Option<u32>,
}

fn reg_dmabuf_setup() -> Ready<RegDmabuf> {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(4 * K64).map_err(errno)?;
    let r = RegDmabuf {
        d: gdrpeer::Device::open_default().map_err(|e| e.to_string())?,
        n: nic()?,
        gpu,
        va,
        buf: None,
        mr: None,
    };
    Ok((r, None))
}

/// EXPORT_DMABUF of three pages at an unaligned va (a miss: nvsim's get_pages), then
/// REG_DMABUF of it without flags: a dynamic attach and the map at registration (gdrpeer's
/// `Export::map`, the window's DMA addresses for edu and the table).
fn reg_dmabuf_call(r: &mut RegDmabuf) -> Result<(), Errno> {
    let b =
        r.d.export_dmabuf_range(r.va + K64 + 333, 2 * K64)
            .map_err(|e| e.errno_of().unwrap_or(Errno::PROTO))?;
    let fd = std::os::fd::AsRawFd::as_raw_fd(&b.fd);
    let size = b.size;
    r.buf = Some(b);
    r.mr = Some(r.n.reg_dmabuf(fd, 0, 0, size)?.handle);
    Ok(())
}

/// How long cuMemFree may take: the revocation waits for the importers' mappings to go.
const FREE_WITHIN: Duration = Duration::from_secs(5);

/// Frees the memory (cuMemFree) with the dma-buf still open and the import, if made, in
/// place: the revocation invalidates the import and must end within [`FREE_WITHIN`]. A free
/// that does not return leaves its thread behind (the walk runs each step in a child).
fn reg_dmabuf_finish(r: RegDmabuf, result: Result<(), Errno>) -> TestResult {
    let RegDmabuf {
        d,
        n,
        gpu,
        va,
        buf,
        mr,
    } = r;
    let (tx, rx) = std::sync::mpsc::channel();
    thread::spawn(move || {
        let freed = gpu.free(va);
        let _ = tx.send((freed, gpu));
    });
    let Ok((freed, gpu)) = rx.recv_timeout(FREE_WITHIN) else {
        // Closing the dma-buf or the files would wait for the stuck revocation too: they
        // stay open, for the report to reach the walk.
        std::mem::forget((buf, n, d));
        return Err(format!(
            "cuMemFree after the call ({}) did not return within {} s: the revocation waits \
             for a dma-buf mapping that is not there",
            match result {
                Ok(()) => "succeeded".to_string(),
                Err(e) => format!("failed with {e}"),
            },
            FREE_WITHIN.as_secs()
        ));
    };
    freed.map_err(|e| format!("cuMemFree: {e}"))?;
    if let Some(h) = mr {
        n.dereg(h)
            .map_err(|e| format!("DEREG of the invalidated import: {e}"))?;
    }
    drop((buf, n, d, gpu));
    Ok(())
}

const REG_DMABUF_OP: Op<RegDmabuf> = Op {
    name: "gdrnic-reg-dmabuf",
    setup: reg_dmabuf_setup,
    call: reg_dmabuf_call,
    finish: reg_dmabuf_finish,
    forked: true,
};

/// `gdrpeer-failnth-gdrnic-reg-dmabuf`, the last of the `--nic` run: a free that hangs
/// leaves a process that holds gdrpeer.
pub fn failnth_reg_dmabuf() -> TestResult {
    walk(&REG_DMABUF_OP, nic_released)
}

pub const TESTS: &[harness::Test] = &[
    ("gdrnic-round-trip", round_trip),
    (
        "gdrnic-registrations-hit-the-cache",
        registrations_hit_the_cache,
    ),
    ("gdrnic-reg-loop", reg_loop),
    ("gdrnic-kept-registration", kept_registration),
    (
        "gdrnic-kept-registration-gives-way-to-export",
        kept_registration_gives_way_to_export,
    ),
    (
        "gdrnic-destroy-leaves-registrations",
        destroy_leaves_registrations,
    ),
    ("gdrnic-free-during-send", free_during_send),
    (
        "gdrnic-free-during-receive-writes-no-freed-memory",
        free_during_receive_writes_no_freed_memory,
    ),
    ("gdrnic-bad-requests", bad_requests),
    (
        "gdrnic-unsupported-request-is-eopnotsupp",
        unsupported_request_is_eopnotsupp,
    ),
    (
        "gdrnic-fork-child-cannot-register",
        fork_child_cannot_register,
    ),
    (
        "gdrnic-rmmod-with-live-registrations",
        rmmod_with_live_registrations,
    ),
    (
        "gdrnic-slow-invalidate-is-reported",
        slow_invalidate_is_reported,
    ),
    ("gdrnic-kapi-fuzz-short", crate::kapi_fuzz::short),
    (
        "gdrnic-dma-map-nine-contexts-one-mapping",
        nine_contexts_one_mapping,
    ),
    ("gdrnic-dma-map-gpus-asked-apart", gpus_asked_apart),
    (
        "gdrnic-dma-map-shared-mapping-outlives-one-holder",
        shared_mapping_outlives_one_holder,
    ),
    (
        "gdrnic-dma-map-kept-while-cached",
        mapping_kept_while_cached,
    ),
    (
        "gdrnic-dma-map-eviction-leaves-other-holders",
        eviction_leaves_other_holders,
    ),
    (
        "gdrnic-dma-map-kept-registration-within-limits",
        kept_registration_within_limits,
    ),
    (
        "gdrnic-dma-map-dereg-elsewhere-leaves-cache",
        dereg_elsewhere_leaves_cache,
    ),
    ("gdrnic-dma-map-removed-peer-let-go", removed_peer_let_go),
    (
        "gdrnic-dma-map-peer-removed-under-registrations",
        peer_removed_under_registrations,
    ),
    ("gdrnic-dma-map-peer-unbound-under-other-holders", || {
        peer_gone_under_other_holders(Gone::Unbound)
    }),
    ("gdrnic-dma-map-peer-removed-under-other-holders", || {
        peer_gone_under_other_holders(Gone::Removed)
    }),
    (
        "gdrnic-dma-map-import-left-past-remove",
        import_left_past_remove,
    ),
    (
        "gdrnic-dma-map-kept-registration-after-its-peer-went",
        kept_registration_after_its_peer_went,
    ),
    (
        "gdrnic-dma-map-racing-peer-removal",
        dma_map_racing_peer_removal,
    ),
    ("gdrpeer-failnth-gdrnic-open", || walk(&OPEN, nic_released)),
    ("gdrpeer-failnth-gdrnic-reg", || walk(&REG_OP, nic_released)),
];
