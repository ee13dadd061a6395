// SPDX-License-Identifier: GPL-2.0

//! The behaviours of NVIDIA's driver that nvsim reproduces since the nv-p2p note was revised
//! against the open modules 595 (Documentation/dev/nvsim.rst says where each comes from): the
//! driver's allocations and their frees, put_pages by process and table, the use of a freed
//! table counted, the flags as the driver reads them, the two-step pin, callbacks from a
//! kernel thread, the callback rule of sub-allocated buffers, contiguous BAR extents.

use crate::{expect_err, in_other_process, pin_ok, wait_revoked, EINVAL, K64};
use nvsim::testing::{
    client, debugfs, stat, status, take_client_errors, take_counter, with_debugfs, with_param,
    TestResult,
};
use nvsim::Gpu;
use nvsim::{check, check_eq};

const EFAULT: i32 = -14;
const ENOTSUPP: i32 = -524;
const EIO: i32 = -5;
const FORCE_BAR1: u32 = 1;

fn errno(e: rustix::io::Errno) -> String {
    e.to_string()
}

/// Callbacks p2pclient received with NULL data so far.
fn nodata_fired() -> Result<u64, String> {
    let out = client("nodata")?;
    out.strip_prefix("fired=")
        .and_then(|n| n.trim().parse().ok())
        .ok_or(format!("nodata: {out}"))
}

/// NULL callback data is accepted and handed back to the callback as given.
pub fn null_callback_data_accepted() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, id) = gpu.alloc(K64).map_err(errno)?;
    let before = nodata_fired()?;
    pin_ok(&format!("get_nodata {va} {K64}"))?;
    check_eq!(stat("pins_live")?, 1, "pins with NULL data");
    debugfs("free", &id.to_string())?;
    check_eq!(nodata_fired()?, before + 1, "callbacks that got NULL data");
    Ok(())
}

/// The driver's layout: the table inside a private object, its pages array, one slab object
/// per page, a GPU UUID allocation per table (same bytes, never shared).
pub fn table_layout_of_the_driver() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(3 * K64).map_err(errno)?;
    let a = pin_ok(&format!("get {va} {}", 3 * K64))?;
    let b = pin_ok(&format!("get {} {K64}", va + K64))?;
    check_eq!(
        client(&format!("same {} {}", a.handle, b.handle))?,
        "table=0 uuid=0 uuid_bytes=1",
        "two tables: their UUIDs"
    );
    check_eq!(stat("tables_live")?, 2, "tables");
    check_eq!(stat("page_objects_live")?, 4, "page objects (3 + 1)");
    check_eq!(stat("uuids_live")?, 2, "UUID allocations");
    for p in [&a, &b] {
        check_eq!(status(&format!("put {}", p.handle))?, 0, "put");
    }
    check_eq!(stat("page_objects_live")?, 0, "page objects after the puts");
    Ok(())
}

/// After the callback returns, the table, its pages, each page, its UUID and its DMA mappings
/// are freed (the KASAN kernel sees any later use); with recycle=1 they are poisoned and the
/// next pin gets the same table (`objects_recycled`).
pub fn tables_and_mappings_freed_after_the_callback() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, id) = gpu.alloc(2 * K64).map_err(errno)?;
    let p = pin_ok(&format!("get {va} {}", 2 * K64))?;
    check_eq!(status(&format!("map {} gpu", p.handle))?, 0, "map");
    check_eq!(stat("mapping_objects_live")?, 1, "mapping objects");
    debugfs("free", &id.to_string())?;
    for c in [
        "tables_live",
        "page_objects_live",
        "uuids_live",
        "mapping_objects_live",
        "dma_mappings_live",
    ] {
        check_eq!(stat(c)?, 0, format!("{c} after the callback"));
    }
    with_param("recycle", "1", || {
        let (va, id) = gpu.alloc(K64).map_err(errno)?;
        pin_ok(&format!("get {va} {K64}"))?;
        debugfs("free", &id.to_string())?;
        let recycled = stat("objects_recycled")?;
        let (va, _) = gpu.alloc(K64).map_err(errno)?;
        let p = pin_ok(&format!("get {va} {K64}"))?;
        check_eq!(
            stat("objects_recycled")?,
            recycled + 1,
            "recycle=1: the freed table handed out again"
        );
        check_eq!(status(&format!("put {}", p.handle))?, 0, "put");
        Ok(())
    })
}

/// put_pages finds the pin by (process, table): the address is not used. A put naming
/// another address releases the pin all the same, and nvsim counts it (a recycled table
/// looks like that).
pub fn put_pages_finds_the_pin_by_process_and_table() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(2 * K64).map_err(errno)?;
    let p = pin_ok(&format!("get {va} {K64}"))?;
    check_eq!(
        status(&format!("put_at {} {}", p.handle, va + K64))?,
        0,
        "put_pages at another address"
    );
    check_eq!(stat("pins_live")?, 0, "the pin, released by its table");
    take_client_errors(1, "a put_pages naming another address")?;
    // From another process the same table finds nothing.
    let q = pin_ok(&format!("get {va} {K64}"))?;
    check_eq!(
        in_other_process(&format!("put {}", q.handle))?,
        "ok",
        "put from another process"
    );
    check_eq!(stat("pins_live")?, 1, "released by nobody");
    take_client_errors(1, "a put_pages from another process")?;
    check_eq!(status(&format!("put {}", q.handle))?, 0, "put");
    Ok(())
}

/// A table freed by its callback and handed to a newer pin of the process at another
/// address (recycle=1 makes that certain): a put of the old table releases the newer pin,
/// as the driver would, and nvsim reports it.
pub fn put_of_a_recycled_table_at_another_va_is_caught() -> TestResult {
    with_param("recycle", "1", || {
        let gpu = Gpu::open().map_err(errno)?;
        let (a, id_a) = gpu.alloc(K64).map_err(errno)?;
        let (b, _) = gpu.alloc(K64).map_err(errno)?;
        check!(a != b, "two addresses");
        let old = pin_ok(&format!("get {a} {K64}"))?;
        debugfs("free", &id_a.to_string())?;
        let recycled = stat("objects_recycled")?;
        let newer = pin_ok(&format!("get {b} {K64}"))?;
        check_eq!(
            stat("objects_recycled")?,
            recycled + 1,
            "the newer pin got the freed table"
        );
        check_eq!(
            status(&format!("put {}", old.handle))?,
            0,
            "put of the old table"
        );
        check_eq!(stat("pins_live")?, 0, "the newer pin, released by it");
        check!(
            client(&format!("state {}", newer.handle))?.starts_with("revoked=0"),
            "the newer pin was called back"
        );
        take_client_errors(1, "a put of a recycled table at another address")
    })
}

/// An unpin whose put_pages waits for the lock while the free callback frees its table:
/// the late put finds nothing (0, nothing counted) unless a newer pin of the process got
/// the table meanwhile (recycle=1, same address), which it releases: reported.
pub fn late_put_pages_after_its_table_was_freed() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let late_put = |handle: u32, repin: Option<(u64, u64)>| -> Result<Option<u32>, String> {
        debugfs("put_pages_delay_us", "300000")?;
        std::thread::scope(|s| {
            let put = s.spawn(move || status(&format!("put {handle}")));
            crate::wait_delayed()?;
            let mut newer = None;
            if let Some((id, len)) = repin {
                debugfs("free", &id.to_string())?;
                let (va, _) = gpu.alloc(len).map_err(errno)?;
                newer = Some(pin_ok(&format!("get {va} {len}"))?.handle);
            }
            let r = put.join().map_err(|_| "the put panicked".to_string())??;
            check_eq!(r, 0, "the late put_pages");
            Ok(newer)
        })
    };
    // The memory freed while the put waits: the put finds nothing.
    let (va, id) = gpu.alloc(K64).map_err(errno)?;
    let p = pin_ok(&format!("get {va} {K64}"))?;
    debugfs("put_pages_delay_us", "300000")?;
    std::thread::scope(|s| {
        let put = s.spawn(|| status(&format!("put {}", p.handle)));
        crate::wait_delayed()?;
        debugfs("free", &id.to_string())?;
        let r = put.join().map_err(|_| "the put panicked".to_string())??;
        check_eq!(r, 0, "the late put_pages");
        Ok::<(), String>(())
    })?;
    check_eq!(stat("client_errors")?, 0, "a late put that found nothing");
    // The same with a newer pin of this process at that address meanwhile.
    with_param("recycle", "1", || {
        let (va, id) = gpu.alloc(K64).map_err(errno)?;
        let p = pin_ok(&format!("get {va} {K64}"))?;
        let newer = late_put(p.handle, Some((id, K64)))?.ok_or("no newer pin")?;
        check_eq!(
            stat("pins_live")?,
            0,
            "the newer pin, released by the late put"
        );
        check!(
            client(&format!("state {newer}"))?.starts_with("revoked=0"),
            "the newer pin was called back"
        );
        take_client_errors(1, "a late put that released a newer pin")
    })
}

/// dma_map_pages of a table freed by its callback, before the call or while it waits for
/// the lock: a use-after-free on the driver, counted by nvsim (never a clean error) apart
/// from `client_errors`, in `dma_map_window`: a client that checks the table's state and
/// then calls is left that window by the API, and nvsim cannot tell it from one that did
/// not check (KASAN sees a client's own read of a freed table), so that a run says how
/// often it was entered.
pub fn dma_map_of_a_freed_table_is_a_client_error() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, id) = gpu.alloc(K64).map_err(errno)?;
    let p = pin_ok(&format!("get {va} {K64}"))?;
    debugfs("free", &id.to_string())?;
    check_eq!(
        status(&format!("map_stale {} gpu", p.handle))?,
        EFAULT,
        "dma_map_pages of a freed table"
    );
    take_counter(
        "dma_map_window",
        1,
        "maps of a table freed before the call, counted",
    )?;
    take_client_errors(0, "a map of a freed table")?;
    // Freed while the call waits for the lock.
    let (va, id) = gpu.alloc(K64).map_err(errno)?;
    let p = pin_ok(&format!("get {va} {K64}"))?;
    debugfs("dma_map_delay_us", "300000")?;
    std::thread::scope(|s| {
        let map = s.spawn(|| status(&format!("map_stale {} gpu", p.handle)));
        crate::wait_delayed()?;
        debugfs("free", &id.to_string())?;
        let r = map.join().map_err(|_| "the map panicked".to_string())??;
        check_eq!(
            r,
            EFAULT,
            "dma_map_pages that waited while its table was freed"
        );
        Ok::<(), String>(())
    })?;
    check_eq!(stat("dma_mappings_live")?, 0, "mappings");
    take_counter(
        "dma_map_window",
        1,
        "maps counted in the DMA-mapping window",
    )?;
    take_client_errors(0, "a map of a table freed while it waited")
}

/// dma_unmap_pages of a table freed by its callback (the driver takes a semaphore inside
/// the freed object): counted; it returns 0 as the driver would for a mapping it no
/// longer has.
pub fn dma_unmap_of_a_freed_table_is_a_client_error() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, id) = gpu.alloc(K64).map_err(errno)?;
    let p = pin_ok(&format!("get {va} {K64}"))?;
    check_eq!(status(&format!("map {} gpu", p.handle))?, 0, "map");
    debugfs("free", &id.to_string())?;
    check_eq!(
        status(&format!("unmap_stale {} 0 gpu", p.handle))?,
        0,
        "dma_unmap_pages of a freed table"
    );
    take_client_errors(1, "an unmap of a freed table")
}

/// put_pages_persistent takes flags 0 only: anything else is -EINVAL, and the pin stays.
pub fn put_pages_persistent_needs_flags_0() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(K64).map_err(errno)?;
    for flags in [0, FORCE_BAR1] {
        let p = pin_ok(&format!("getp {va} {K64} {flags}"))?;
        for bad in [FORCE_BAR1, 2, 0x100] {
            check_eq!(
                status(&format!("putp {} {bad}", p.handle))?,
                EINVAL,
                format!("put_pages_persistent with flags {bad:#x}")
            );
            check_eq!(
                stat("put_persistent_flags_last")?,
                u64::from(bad),
                "flags received"
            );
            check_eq!(stat("persistent_pins_live")?, 1, "the pin stays");
        }
        check_eq!(status(&format!("putp {} 0", p.handle))?, 0, "putp 0");
    }
    Ok(())
}

/// get_pages_persistent reads only bit 0 of its flags, truncated to 8 bits: other bits are
/// ignored, not refused.
pub fn persistent_unknown_flag_bits_ignored() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(K64).map_err(errno)?;
    let forced = stat("force_bar1_pins")?;
    for (flags, force) in [(2u32, false), (0x80, false), (0x100, false), (0x103, true)] {
        let p = pin_ok(&format!("getp {va} {K64} {flags}"))?;
        check_eq!(
            stat("persistent_flags_last")?,
            u64::from(flags),
            "flags received"
        );
        check_eq!(
            stat("force_bar1_pins")?,
            forced + u64::from(force),
            format!("FORCE_BAR1 read from {flags:#x}")
        );
        check_eq!(status(&format!("putp {} 0", p.handle))?, 0, "putp");
    }
    Ok(())
}

/// A table pinned with FORCE_BAR1_MAPPING cannot be DMA-mapped: -ENOTSUPP.
pub fn force_bar1_table_cannot_be_dma_mapped() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(K64).map_err(errno)?;
    let forced = pin_ok(&format!("getp {va} {K64} {FORCE_BAR1}"))?;
    check_eq!(
        status(&format!("map {} gpu", forced.handle))?,
        ENOTSUPP,
        "dma_map_pages of a FORCE_BAR1 table"
    );
    let plain = pin_ok(&format!("getp {va} {K64}"))?;
    check_eq!(
        status(&format!("map {} gpu", plain.handle))?,
        0,
        "dma_map_pages of a default persistent table"
    );
    check_eq!(
        status(&format!("unmap {} 0 gpu", plain.handle))?,
        0,
        "unmap"
    );
    for p in [&forced, &plain] {
        check_eq!(status(&format!("putp {} 0", p.handle))?, 0, "putp");
    }
    Ok(())
}

/// Two GPUs: memory allocated with `ALLOC_GPU1` is the second GPU's, its tables carry that
/// GPU's UUID (two tables of one GPU carry the same bytes), and QUERY says whose it is.
/// `refuse_peers` is the driver's PCIe topology check: `dma_map_pages` of a refused GPU's
/// table fails with -ENOTSUPP for every peer, while the other GPU's tables map.
/// The benchmark's TOUCH (P4's floor): every argument beyond its bounds is refused with
/// -EINVAL, and the bounds themselves read zeroed memory (KASAN checks the reads).
pub fn touch_bounds() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let ok = nvsim::TouchArgs {
        cold: nvsim::TOUCH_MAX,
        hot: nvsim::TOUCH_MAX,
        lines: 64,
        ..Default::default()
    };
    let bad = [
        (
            "cold",
            nvsim::TouchArgs {
                cold: nvsim::TOUCH_MAX + 1,
                ..ok
            },
        ),
        (
            "hot",
            nvsim::TouchArgs {
                hot: nvsim::TOUCH_MAX + 1,
                ..ok
            },
        ),
        ("no lines", nvsim::TouchArgs { lines: 0, ..ok }),
        ("65 lines", nvsim::TouchArgs { lines: 65, ..ok }),
    ];
    for (what, args) in bad {
        check_eq!(
            gpu.touch_args(args)
                .map(|t| t.sum)
                .map_err(|e| e.raw_os_error()),
            Err(-EINVAL),
            format!("TOUCH with {what}")
        );
    }
    check_eq!(
        gpu.touch_args(nvsim::TouchArgs { sum: 7, ..ok })
            .map(|t| t.sum)
            .map_err(|e| e.raw_os_error()),
        Ok(0),
        "TOUCH at its bounds: the sum of zeroed memory"
    );
    check_eq!(
        gpu.touch(0, 0, 1, 0).map_err(|e| e.raw_os_error()),
        Ok(0),
        "TOUCH of no page"
    );
    Ok(())
}

pub fn two_gpus_and_the_topology_check() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (v0, _) = gpu.alloc(K64).map_err(errno)?;
    let (v1, _) = gpu.alloc_flags(K64, nvsim::ALLOC_GPU1).map_err(errno)?;
    check_eq!(
        gpu.alloc_flags(K64, nvsim::ALLOC_GPU1 | nvsim::ALLOC_SUBALLOC)
            .map_err(|e| e.raw_os_error()),
        Err(22),
        "a sub-allocation on the second GPU"
    );
    for (va, want) in [(v0, 0), (v1, nvsim::QUERY_GPU1)] {
        let q = gpu.query(va).map_err(errno)?;
        check_eq!(
            q.flags & nvsim::QUERY_GPU1,
            want,
            format!("QUERY's GPU of {va:#x}")
        );
    }
    let a = pin_ok(&format!("get {v0} {K64}"))?;
    let b = pin_ok(&format!("get {v1} {K64}"))?;
    let c = pin_ok(&format!("get {v0} {K64}"))?;
    check_eq!(
        client(&format!("same {} {}", a.handle, c.handle))?,
        "table=0 uuid=0 uuid_bytes=1",
        "two tables of the first GPU: their UUIDs"
    );
    check_eq!(
        client(&format!("same {} {}", a.handle, b.handle))?,
        "table=0 uuid=0 uuid_bytes=0",
        "tables of the two GPUs: their UUIDs"
    );
    let refusals = stat("topology_refusals")?;
    // Each GPU refused in turn: the other's table maps for edu.
    for (refused, allowed) in [(&b, &a), (&a, &b)] {
        let mask = if refused.handle == b.handle { "2" } else { "1" };
        with_debugfs("refuse_peers", mask, "0", || {
            for peer in ["edu", "gpu"] {
                check_eq!(
                    status(&format!("map {} {peer}", refused.handle))?,
                    ENOTSUPP,
                    format!("dma_map_pages for {peer} of a refused GPU's table")
                );
            }
            check_eq!(
                status(&format!("map {} edu", allowed.handle))?,
                0,
                "dma_map_pages of the other GPU's table"
            );
            check_eq!(
                status(&format!("unmap {} 0 edu", allowed.handle))?,
                0,
                "unmap"
            );
            Ok(())
        })?;
    }
    check_eq!(
        stat("topology_refusals")? - refusals,
        4,
        "dma_map_pages calls refused"
    );
    check_eq!(stat("dma_mappings_live")?, 0, "mappings left");
    for p in [&a, &b, &c] {
        check_eq!(status(&format!("put {}", p.handle))?, 0, "put");
    }
    Ok(())
}

/// Pinning and callback registration are two steps under the driver's lock, dropped between
/// them: memory freed in between fails the pin, and no callback comes.
pub fn free_between_the_two_pin_steps_fails_the_pin() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, id) = gpu.alloc(2 * K64).map_err(errno)?;
    let failed = stat("pins_failed_between_steps")?;
    let callbacks = stat("callbacks_fired")?;
    debugfs("free_between_pin_steps", &id.to_string())?;
    expect_err(&format!("get {va} {}", 2 * K64), EINVAL)?;
    check_eq!(
        stat("pins_failed_between_steps")?,
        failed + 1,
        "pins failed between the steps"
    );
    check_eq!(stat("callbacks_fired")?, callbacks, "callbacks");
    check!(gpu.query(va).is_err(), "the memory was not freed");
    // A persistent pin is one step: the knob waits for a callback pin.
    let (va, id) = gpu.alloc(K64).map_err(errno)?;
    debugfs("free_between_pin_steps", &id.to_string())?;
    let p = pin_ok(&format!("getp {va} {K64}"))?;
    check_eq!(status(&format!("putp {} 0", p.handle))?, 0, "putp");
    debugfs("free_between_pin_steps", "0")
}

/// A close the driver defers to its own kernel thread: the callbacks come from there, after
/// close() returned.
pub fn deferred_close_calls_back_from_a_kernel_thread() -> TestResult {
    with_param("deferred_close", "100", || {
        let gpu = Gpu::open().map_err(errno)?;
        let (va, _) = gpu.alloc(K64).map_err(errno)?;
        let p = pin_ok(&format!("get {va} {K64}"))?;
        let deferred = stat("deferred_closes")?;
        drop(gpu);
        check_eq!(stat("deferred_closes")?, deferred + 1, "closes deferred");
        wait_revoked(p.handle, 10)?;
        check_eq!(
            client(&format!("cbinfo {}", p.handle))?,
            "kthread=1 ret=0",
            "the callback's context"
        );
        Ok(())
    })
}

/// The callbacks of sub-allocated buffers belong to their pool block (the RM memory object):
/// freeing a buffer calls nothing back, an empty block is kept (and can still be pinned)
/// until it is given back (debugfs trim, or closing the file), which calls back every pin
/// over it.
pub fn suballocation_callbacks_belong_to_the_pool_block() -> TestResult {
    with_param("callback_per_buffer", "0", || {
        // Blocks this process's libcuda-sim kept (its file stays open) are not this test's.
        let kept = stat("pool_blocks_cached")?;
        let gpu = Gpu::open().map_err(errno)?;
        let sub = nvsim::ALLOC_SUBALLOC;
        let (a, _) = gpu.alloc_flags(300, sub).map_err(errno)?;
        let (b, _) = gpu.alloc_flags(70_000, sub).map_err(errno)?;
        let page = a & !(K64 - 1);
        let p0 = pin_ok(&format!("get {page} {K64}"))?;
        let p1 = pin_ok(&format!("get {} {K64}", page + K64))?;
        gpu.free(a).map_err(errno)?;
        gpu.free(b).map_err(errno)?;
        for p in [&p0, &p1] {
            check!(
                client(&format!("state {}", p.handle))?.starts_with("revoked=0"),
                "pin {} called back by a buffer's free",
                p.handle
            );
        }
        check!(
            gpu.query(a).is_err() && gpu.query(b).is_err(),
            "buffers gone"
        );
        check_eq!(
            stat("pool_blocks_cached")?,
            kept + 1,
            "the empty block, kept"
        );
        check_eq!(stat("allocations_live")?, 0, "allocations");
        // The block's memory is still there: a pin of it succeeds.
        let p2 = pin_ok(&format!("get {page} {}", 2 * K64))?;
        // A new buffer is carved from the kept block.
        let (c, _) = gpu.alloc_flags(100, sub).map_err(errno)?;
        check_eq!(c, a, "the kept block serves again");
        check_eq!(
            stat("pool_blocks_cached")?,
            kept,
            "the block serves, no longer kept"
        );
        gpu.free(c).map_err(errno)?;
        debugfs("trim", "1")?;
        for p in [&p0, &p1, &p2] {
            wait_revoked(p.handle, 1)?;
        }
        check_eq!(stat("pool_blocks_cached")?, 0, "blocks after trim");
        Ok(())
    })
}

/// nv-p2p calls from inside the free callback find the driver's lock taken by their own
/// thread: put_pages fails with -EIO and a WARN (run inside a region that expects it).
pub fn put_pages_inside_the_callback_fails_with_a_warn() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, id) = gpu.alloc(K64).map_err(errno)?;
    let p = pin_ok(&format!("get_putcb {va} {K64}"))?;
    debugfs("free", &id.to_string())?;
    check!(
        client(&format!("state {}", p.handle))?.starts_with("revoked=1"),
        "no callback"
    );
    check_eq!(
        client(&format!("cbinfo {}", p.handle))?,
        format!("kthread=0 ret={EIO}"),
        "put_pages inside the callback"
    );
    check_eq!(
        stat("pins_live")?,
        0,
        "the pin, released after the callback"
    );
    take_client_errors(1, "put_pages inside the callback")
}

/// dma_unmap_pages may sleep (the driver takes the table's semaphore): called under a
/// spinlock, DEBUG_ATOMIC_SLEEP reports it (run inside a region that expects it).
pub fn dma_unmap_pages_in_atomic_context() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(K64).map_err(errno)?;
    let p = pin_ok(&format!("get {va} {K64}"))?;
    check_eq!(status(&format!("map {} gpu", p.handle))?, 0, "map");
    check_eq!(
        status(&format!("unmap_atomic {} 0 gpu", p.handle))?,
        0,
        "unmap under a spinlock"
    );
    check_eq!(status(&format!("put {}", p.handle))?, 0, "put");
    Ok(())
}

/// Reads a table's header after its callback: freed memory (KASAN reports it on the test
/// kernel; run by hand to break-check that nvsim frees its tables).
pub fn read_of_a_table_after_its_callback() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, id) = gpu.alloc(K64).map_err(errno)?;
    let p = pin_ok(&format!("get {va} {K64}"))?;
    debugfs("free", &id.to_string())?;
    println!(
        "read after the callback: {}",
        client(&format!("read {}", p.handle))?
    );
    Ok(())
}

/// BAR pages come in contiguous extents (a pin usually gets one), unless fragmented_bar=1
/// scatters them; either way they are 64 KiB bus addresses.
pub fn bar_extents_contiguous_unless_fragmented() -> TestResult {
    let fragmented = stat("fragmented_bar")? == 1;
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(3 * K64).map_err(errno)?;
    let p = pin_ok(&format!("get {va} {}", 3 * K64))?;
    check_eq!(p.pa.len(), 3, "pages");
    check!(p.pa.iter().all(|a| a % K64 == 0), "alignment: {:x?}", p.pa);
    let contiguous = p.pa.windows(2).filter(|w| w[1] == w[0] + K64).count();
    check_eq!(
        contiguous,
        if fragmented { 0 } else { 2 },
        format!(
            "contiguous steps (fragmented_bar={fragmented}): {:x?}",
            p.pa
        )
    );
    check_eq!(status(&format!("put {}", p.handle))?, 0, "put");
    Ok(())
}
