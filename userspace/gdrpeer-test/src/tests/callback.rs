// SPDX-License-Identifier: GPL-2.0

//! The free callback and DMA mappings: NVIDIA freeing the memory under a held pin, during
//! pin, hits, unpin and close, with live DMA mappings to the edu device (whose addresses are
//! checked against p2pclient's), during an unmap, and while a late put_pages or
//! dma_map_pages races the free and a new pin of the reallocated memory.

use crate::helpers::ErrnoOf;
use crate::helpers::{
    check_dma_kind, check_dma_reaches, delayed_call_asleep, dev, edu, eventually, fails,
    gdrpeer_idle, gstat, iommu_translates, ok, pattern, with_nic, K64,
};
use gdrpeer::{PciAddress, PinFlags, PinState};
use nvsim::gdrnic::Nic;
use nvsim::testing::{
    self as harness, client, debugfs, errno, stat, with_debugfs, Test, TestResult, SKIP,
};
use nvsim::{check, check_eq, Gpu};
use rustix::io::Errno;
use std::time::{Duration, Instant};

fn callback_revokes_a_held_pin() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, id) = gpu.alloc(2 * K64).map_err(errno)?;
    let d = dev()?;
    let p = ok(d.pin(va, 2 * K64, PinFlags::empty()), "pin")?;
    let tables = stat("free_page_table_calls")?;
    debugfs("free", &id.to_string())?;
    check_eq!(
        ok(d.info(p.handle), "info")?.state,
        PinState::Revoked,
        "state after free"
    );
    // The callback must give the table back (nv-p2p-behaviour.md, "The free callback"),
    // a no-op in the driver of today that nvsim counts.
    check_eq!(
        stat("free_page_table_calls")? - tables,
        1,
        "nvidia_p2p_free_page_table calls by the callback"
    );
    check_eq!(
        fails(d.get_pages(p.handle), "pages after free")?,
        Errno::NXIO,
        "pages after free"
    );
    check_eq!(stat("pins_live")?, 0, "nvsim pins after the callback");
    eventually(2, "callback accounted", || {
        Ok(ok(d.stats(), "stats")?.file.callbacks == 1)
    })?;
    let s = ok(d.stats(), "stats")?;
    check_eq!(
        (s.file.regions, s.file.pinned_bytes, s.handles),
        (0, 0, 1),
        "regions, bytes, handles"
    );
    ok(d.unpin(p.handle), "unpin of a revoked handle")
}

fn callback_during_pin() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let d = dev()?;
    for delay in [0, 20, 100, 500] {
        let (va, id) = gpu.alloc(K64).map_err(errno)?;
        debugfs("free_on_pin", &format!("{id} {delay}"))?;
        match d.pin(va, K64, PinFlags::empty()) {
            Ok(p) => {
                eventually(2, "revoked", || {
                    Ok(ok(d.info(p.handle), "info")?.state == PinState::Revoked)
                })?;
                ok(d.unpin(p.handle), "unpin")?;
            }
            Err(e) => check_eq!(e.errno_of(), Some(Errno::NXIO), "pin racing the free"),
        }
    }
    Ok(())
}

fn callback_during_hits() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, id) = gpu.alloc(4 * K64).map_err(errno)?;
    let d = dev()?;
    let held = ok(d.pin(va, 4 * K64, PinFlags::empty()), "pin")?;
    let first = ok(d.pin(va + K64, K64, PinFlags::empty()), "first hit")?;
    ok(d.unpin(first.handle), "unpin")?;
    check_eq!(ok(d.stats(), "stats")?.file.hits, 1, "hits before the free");
    debugfs("free", &format!("{id} 2000"))?;
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        check!(Instant::now() < deadline, "the memory was never freed");
        match d.pin(va + K64, K64, PinFlags::empty()) {
            Ok(p) => {
                // A hit may be revoked under us: pages then fail with ENXIO, nothing else.
                if let Err(e) = d.get_pages(p.handle) {
                    check_eq!(e.errno_of(), Some(Errno::NXIO), "pages of a hit");
                }
                ok(d.unpin(p.handle), "unpin")?;
            }
            // Revoked: not a hit any more; a new pin of freed memory fails in nvsim.
            Err(e) if e.errno_of() == Some(Errno::INVAL) => break,
            Err(e) => return Err(format!("pin during the free: {e}")),
        }
    }
    ok(d.unpin(held.handle), "unpin")
}

fn callback_during_unpin() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let d = dev()?;
    for delay in [0, 50, 200, 1000] {
        let (va, id) = gpu.alloc(16 * K64).map_err(errno)?;
        let handles: Vec<u64> = (0..16)
            .map(|i| {
                d.pin(va + i * K64, K64 * (16 - i), PinFlags::empty())
                    .map(|p| p.handle)
            })
            .collect::<Result<_, _>>()
            .map_err(|e| e.to_string())?;
        debugfs("free", &format!("{id} {delay}"))?;
        for h in handles {
            ok(d.unpin(h), "unpin racing the free")?;
        }
        // Evict whatever is left unused, racing the callback too.
        let (other, _) = gpu.alloc(K64).map_err(errno)?;
        let p = ok(d.pin(other, K64, PinFlags::empty()), "pin")?;
        ok(d.unpin(p.handle), "unpin")?;
        gpu.free(other).map_err(errno)?;
        std::thread::sleep(Duration::from_millis(2));
    }
    Ok(())
}

fn callback_during_close() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    for delay in [0, 100, 1000] {
        let (va, id) = gpu.alloc(8 * K64).map_err(errno)?;
        let d = dev()?;
        for i in 0..8 {
            let p = ok(d.pin(va + i * K64, K64, PinFlags::empty()), "pin")?;
            if i % 2 == 0 {
                ok(d.unpin(p.handle), "unpin")?;
            }
        }
        debugfs("free", &format!("{id} {delay}"))?;
        drop(d);
        // The delayed free may come later; gdrpeer must be done either way.
        gdrpeer_idle()?;
    }
    Ok(())
}

fn callback_frees_live_dma_mappings() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, id) = gpu.alloc(2 * K64).map_err(errno)?;
    let d = dev()?;
    let p = ok(d.pin(va, 2 * K64, PinFlags::empty()), "pin")?;
    let peer = edu()?;
    let addrs = ok(d.dma_map(p.handle, peer), "dma_map")?;
    check_eq!(addrs.len(), 2, "DMA addresses");
    // The same mapping serves a second call.
    check_eq!(
        ok(d.dma_map(p.handle, peer), "dma_map again")?,
        addrs,
        "DMA addresses again"
    );
    check_eq!(gstat("dma_pages_mapped")?, 2, "gdrpeer's DMA-mapped pages");
    check_eq!(
        stat("dma_mappings_live")?,
        0,
        "nvsim's DMA mappings (NVIDIA's, given back)"
    );
    debugfs("free", &id.to_string())?;
    check_eq!(
        gstat("dma_pages_mapped")?,
        0,
        "gdrpeer's DMA-mapped pages after the callback"
    );
    check_eq!(
        fails(d.dma_map(p.handle, peer), "dma_map after free")?,
        Errno::NXIO,
        "dma_map after free"
    );
    ok(d.unpin(p.handle), "unpin")
}

/// A free callback that comes while a thread is inside dma_unmap_pages waits for it: the
/// unmap never sees a freed table (nvsim counts one in client_errors). The one
/// dma_unmap_pages gdrpeer makes is a probe's, giving back the mapping it asked NVIDIA for at
/// the first mapping of a GPU's memory for a peer (src/iova.rs), so this needs a gdrpeer that
/// has mapped nothing for edu since it was loaded (the plan's `-fresh` runs). nvsim's
/// `unmap_delay_us` holds the unmap open while the memory is freed; DMA_MAP then fails with
/// ENXIO and leaves no mapping. The ioctl fuzzer found this window (then in unpin's unmaps).
fn callback_waits_for_an_unmap() -> TestResult {
    let pairs = gstat("dma_gpu_peer_pairs")?;
    if pairs != 0 {
        return Err(format!(
            "{SKIP}gdrpeer asked NVIDIA about {pairs} GPU and peer pairs already: it unmaps \
             through nv-p2p only for a pair's first mapping (run on a fresh load)"
        ));
    }
    let gpu = Gpu::open().map_err(errno)?;
    let (va, id) = gpu.alloc(2 * K64).map_err(errno)?;
    let d = dev()?;
    let p = ok(d.pin(va, 2 * K64, PinFlags::empty()), "pin")?;
    let peer = edu()?;
    let callbacks = stat("callbacks_fired")?;
    debugfs("unmap_delay_us", "300000")?;
    let r = std::thread::scope(|s| {
        // The probe's unmap sleeps in nvsim.
        let mapper = s.spawn(|| d.dma_map(p.handle, peer));
        std::thread::sleep(Duration::from_millis(100));
        let freed = debugfs("free", &id.to_string());
        let mapped = mapper.join().map_err(|_| "dma_map panicked".to_string())?;
        freed.map(|()| mapped)
    });
    debugfs("unmap_delay_us", "0")?;
    let mapped = r?;
    check_eq!(stat("client_errors")?, 0, "unmaps of a freed table");
    check_eq!(stat("callbacks_fired")? - callbacks, 1, "callbacks");
    check_eq!(
        fails(mapped, "dma_map racing the free")?,
        Errno::NXIO,
        "dma_map racing the free"
    );
    check_eq!(gstat("dma_pages_mapped")?, 0, "gdrpeer's DMA-mapped pages");
    ok(d.unpin(p.handle), "unpin")
}

/// Frees `id` while a call of `file` sleeps in nvsim on its way to NVIDIA's lock, allocates
/// the same address again and pins it through `other`, a second file of this process; then
/// lets the call finish. nvsim hands out the most recently freed table first, as a slab
/// does: unless gdrpeer keeps its pins away from the freed table until the late call has
/// returned, the new pin gets that very table and the late call names it (nvsim reports
/// it). Returns the call's result and the new pin's handle.
fn race_free_and_repin<T: Send>(
    gpu: &Gpu,
    (id, va, len): (u64, u64, u64),
    other: &gdrpeer::Device,
    call: impl FnOnce() -> Result<T, gdrpeer::Error> + Send,
) -> Result<(Result<T, gdrpeer::Error>, u64), String> {
    std::thread::scope(|s| {
        let late = s.spawn(call);
        delayed_call_asleep()?;
        debugfs("free", &id.to_string())?;
        let (again, _) = gpu.alloc(len).map_err(errno)?;
        check_eq!(again, va, "address of the reallocated memory");
        let newer = ok(
            other.pin(va, len, PinFlags::empty()),
            "pin of the new memory",
        )?;
        let r = late
            .join()
            .map_err(|_| "the late call panicked".to_string())?;
        Ok((r, newer.handle))
    })
}

/// The newer pin of [`race_free_and_repin`] survived the late call untouched.
fn newer_pin_intact(d: &gdrpeer::Device, handle: u64, pages: usize) -> TestResult {
    check_eq!(stat("client_errors")?, 0, "stale nv-p2p calls");
    check_eq!(stat("pins_live")?, 1, "pins: the newer one");
    check_eq!(stat("dma_mappings_live")?, 0, "DMA mappings");
    let pa = ok(d.get_pages(handle), "pages of the newer pin")?;
    check_eq!(pa.len(), pages, "pages of the newer pin");
    ok(d.unpin(handle), "unpin of the newer pin")
}

/// An unpin whose put_pages loses the race to the free callback must not release a newer
/// pin of the same memory: the table's address may be recycled at once (a kernel without
/// KASAN's quarantine does that). nvsim's `put_pages_delay_us` holds the put_pages open.
fn stale_put_pages_spares_a_newer_pin() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, id) = gpu.alloc(K64).map_err(errno)?;
    let (d, other) = (dev()?, dev()?);
    // A private region is given back at unpin, so the unpin calls put_pages.
    let p = ok(d.pin(va, K64, PinFlags::NOCACHE), "pin")?;
    debugfs("put_pages_delay_us", "500000")?;
    let raced = race_free_and_repin(&gpu, (id, va, K64), &other, || d.unpin(p.handle));
    debugfs("put_pages_delay_us", "0")?;
    let (unpinned, newer) = raced?;
    ok(unpinned, "unpin racing the free")?;
    newer_pin_intact(&other, newer, 1)
}

/// A DMA_MAP whose dma_map_pages loses the race to the free callback fails with ENXIO and
/// must not map a newer pin's table. nvsim's `dma_map_delay_us` holds the call open between
/// its read of the table and NVIDIA's lock while the memory is freed: the DMA-mapping window
/// of Documentation/dev/design.rst, entered here by construction. NVIDIA's call reads the freed table there,
/// which nvsim counts once in `dma_map_window` (and no client error: the newer pin's table
/// is not named); gdrpeer cannot keep a call through nv-p2p out of that window. It makes one
/// only for the first mapping of a GPU's memory for a peer (src/iova.rs), so this needs a
/// gdrpeer that has mapped nothing for edu since it was loaded (the plan's `-fresh` run).
fn stale_dma_map_spares_a_newer_pin() -> TestResult {
    let pairs = gstat("dma_gpu_peer_pairs")?;
    if pairs != 0 {
        return Err(format!(
            "{SKIP}gdrpeer asked NVIDIA about {pairs} GPU and peer pairs already: DMA_MAP calls \
             nv-p2p only for a pair's first mapping (run on a fresh load)"
        ));
    }
    let gpu = Gpu::open().map_err(errno)?;
    let (va, id) = gpu.alloc(2 * K64).map_err(errno)?;
    let (d, other) = (dev()?, dev()?);
    let p = ok(d.pin(va, 2 * K64, PinFlags::empty()), "pin")?;
    let peer = edu()?;
    debugfs("dma_map_delay_us", "500000")?;
    let raced = race_free_and_repin(&gpu, (id, va, 2 * K64), &other, || {
        d.dma_map(p.handle, peer)
    });
    debugfs("dma_map_delay_us", "0")?;
    let (mapped, newer) = raced?;
    check_eq!(
        fails(mapped, "dma_map racing the free")?,
        Errno::NXIO,
        "dma_map racing the free"
    );
    harness::take_counter(
        "dma_map_window",
        1,
        "dma_map_pages calls in the DMA-mapping window",
    )?;
    newer_pin_intact(&other, newer, 2)?;
    ok(d.unpin(p.handle), "unpin of the revoked pin")
}

/// DMA_MAP refuses a device that does not exist, and maps for edu: DMA addresses, which are
/// GET_PAGES's bus addresses without an IOMMU (and p2pclient's own mapping's) and IOVAs
/// behind a translating one (each mapping its own, so p2pclient's may differ); either way
/// the NIC's DMA through each address, gdrpeer's and p2pclient's, reaches the page. gdrnic is
/// bound to edu before the first mapping for edu and unbound after the last has gone (an
/// unbind with mappings live is a driver's leak to DMA-API debugging).
fn dma_map_checks_the_peer() -> TestResult {
    with_nic(|n| {
        let gpu = Gpu::open().map_err(errno)?;
        let (va, _) = gpu.alloc(K64).map_err(errno)?;
        let r = dma_map_reaches_the_page(n, &gpu, va);
        // The region gdrpeer keeps cached goes with the memory, and its mapping for edu.
        gpu.free(va).map_err(errno)?;
        eventually(5, "DMA mappings for edu gone", || {
            Ok(gstat("dma_pages_mapped")? == 0)
        })?;
        r
    })
}

fn dma_map_reaches_the_page(n: &Nic, gpu: &Gpu, va: u64) -> TestResult {
    let content = pattern(31, K64 as usize);
    gpu.write(va, &content).map_err(errno)?;
    let d = dev()?;
    let p = ok(d.pin(va, K64, PinFlags::empty()), "pin")?;
    let nowhere = PciAddress {
        domain: 0x7777,
        bus: 0x42,
        devfn: 0,
    };
    check_eq!(
        fails(d.dma_map(p.handle, nowhere), "no such device")?,
        Errno::NODEV,
        "no such device"
    );
    let peer = edu()?;
    let addrs = ok(d.dma_map(p.handle, peer), "dma_map")?;
    let bus = ok(d.get_pages(p.handle), "get_pages")?;
    let want = client(&format!("get {va} {K64}"))?;
    let handle = harness::parse_pin(&want)
        .ok_or(want.clone())?
        .map_err(|e| format!("p2pclient: {e}"))?
        .handle;
    let mapped = client(&format!("map {handle} edu"))?;
    let theirs = mapped
        .rsplit_once("dma=")
        .map(|(_, a)| {
            a.split(',')
                .map(|x| u64::from_str_radix(x.trim().trim_start_matches("0x"), 16))
                .collect::<Result<Vec<u64>, _>>()
        })
        .and_then(Result::ok);
    let checked = (|| {
        let theirs = theirs.ok_or(format!("p2pclient mapped '{mapped}'"))?;
        check_dma_kind(&peer, &addrs, &bus, "DMA_MAP's addresses vs GET_PAGES's")?;
        check_dma_kind(&peer, &theirs, &bus, "p2pclient's mapping vs GET_PAGES's")?;
        if !iommu_translates(&peer)? {
            check_eq!(addrs, theirs, "DMA_MAP's addresses vs p2pclient's mapping");
        }
        check_dma_reaches(n, &addrs, &content, "DMA_MAP's addresses")?;
        check_dma_reaches(n, &theirs, &content, "p2pclient's mapping")
    })();
    let _ = client(&format!("unmap {handle} 0 edu"));
    let _ = client(&format!("put {handle}"));
    checked?;
    ok(d.unpin(p.handle), "unpin")
}

/// This subject's tests, in the order they run.
/// A put_pages that fails (nvsim's `fail_put_pages`: the driver's error, its pin left in
/// place) leaves the region to NVIDIA's free callback: gdrpeer counts it deferred and keeps
/// its module referenced (rmmod refused), and the free of the memory calls back and gives
/// everything back. Until 2026-11-29 nvsim's put_pages never failed, and this path of
/// gdrpeer (`Unpinned::LeftForCallback` after a release) never ran.
fn put_pages_failure_leaves_the_pin_to_the_callback() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(K64).map_err(errno)?;
    let d = dev()?;
    let p = ok(d.pin(va, K64, PinFlags::NOCACHE), "pin")?;
    let faults = stat("faults_injected")?;
    with_debugfs("fail_put_pages", "1 5", "0 0", || {
        ok(d.unpin(p.handle), "unpin whose put_pages fails")
    })?;
    check_eq!(
        stat("faults_injected")? - faults,
        1,
        "put_pages failures injected"
    );
    check_eq!(stat("pins_live")?, 1, "pins NVIDIA still holds");
    check_eq!(
        gstat("deferred_releases")?,
        1,
        "regions left for the callback"
    );
    crate::helpers::module_held_for_the_callback(d, &gpu, va)?;
    check_eq!(
        (gstat("deferred_releases")?, gstat("regions")?),
        (0, 0),
        "regions left for the callback, regions, after the free"
    );
    gdrpeer_idle()
}

pub const TESTS: &[Test] = &[
    (
        "gdrpeer-callback-revokes-a-held-pin",
        callback_revokes_a_held_pin,
    ),
    ("gdrpeer-callback-during-pin", callback_during_pin),
    ("gdrpeer-callback-during-hits", callback_during_hits),
    ("gdrpeer-callback-during-unpin", callback_during_unpin),
    ("gdrpeer-callback-during-close", callback_during_close),
    (
        "gdrpeer-callback-frees-live-dma-mappings",
        callback_frees_live_dma_mappings,
    ),
    ("gdrpeer-dma-map-checks-the-peer", dma_map_checks_the_peer),
    (
        "gdrpeer-callback-waits-for-an-unmap",
        callback_waits_for_an_unmap,
    ),
    (
        "gdrpeer-stale-put-pages-spares-a-newer-pin",
        stale_put_pages_spares_a_newer_pin,
    ),
    (
        "gdrpeer-stale-dma-map-spares-a-newer-pin",
        stale_dma_map_spares_a_newer_pin,
    ),
    (
        "gdrpeer-put-pages-failure-leaves-the-pin-to-the-callback",
        put_pages_failure_leaves_the_pin_to_the_callback,
    ),
];
