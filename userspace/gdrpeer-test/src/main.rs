// SPDX-License-Identifier: GPL-2.0

//! `gdrpeer-test`: tests of gdrpeer.ko against nvsim, run in the test guest with nvsim.ko,
//! p2pclient.ko and gdrpeer.ko loaded (gdrpeer with `cache_max_regions=4`). Prints
//! `@@ RESULT PASS|FAIL name` per test.
//!
//! Every test ends by checking that gdrpeer holds nothing any more (its global debugfs
//! counters) and that nvsim's counters are back to zero.

mod badinput;
mod demo;
mod fuzz;
mod nic;
mod proc;
mod sanity;
mod stress;

use gdrpeer::{Device, PciAddress, PinFlags, PinState};
use nvsim::testing::{self as harness, client, debugfs, errno, stat, Test, TestResult, SKIP};
use nvsim::{check, check_eq, Gpu};
use rustix::io::Errno;
use std::{
    collections::HashMap,
    process::ExitCode,
    time::{Duration, Instant},
};

const K64: u64 = 1 << 16;

fn dev() -> Result<Device, String> {
    Device::open_default().map_err(|e| e.to_string())
}

/// The errno of a gdrpeer call that must fail.
fn fails<T: std::fmt::Debug>(r: Result<T, gdrpeer::Error>, what: &str) -> Result<Errno, String> {
    match r {
        Ok(v) => Err(format!("{what}: succeeded ({v:?}), expected an error")),
        Err(e) => e.errno().ok_or_else(|| format!("{what}: {e}")),
    }
}

fn ok<T>(r: Result<T, gdrpeer::Error>, what: &str) -> Result<T, String> {
    r.map_err(|e| format!("{what}: {e}"))
}

/// A `name value` file of gdrpeer's debugfs: `stats` (global counters) or `params`.
fn gdebugfs(file: &str) -> Result<HashMap<String, u64>, String> {
    harness::name_values(&format!("/sys/kernel/debug/gdrpeer/{file}"))
}

fn gstats() -> Result<HashMap<String, u64>, String> {
    gdebugfs("stats")
}

fn gstat(name: &str) -> Result<u64, String> {
    gstats()?
        .get(name)
        .copied()
        .ok_or_else(|| format!("no gdrpeer counter {name}"))
}

/// A module parameter (they are not in sysfs; gdrpeer shows them in debugfs).
fn param(name: &str) -> Result<u64, String> {
    gdebugfs("params")?
        .get(name)
        .copied()
        .ok_or_else(|| format!("no gdrpeer parameter {name}"))
}

/// Polls `cond` for up to `secs` seconds.
fn eventually(secs: u64, what: &str, mut cond: impl FnMut() -> Result<bool, String>) -> TestResult {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !cond()? {
        check!(Instant::now() < deadline, "{what}: not within {secs} s");
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(())
}

/// gdrpeer holds nothing: no context, region or deferred release (callback work included).
fn gdrpeer_idle() -> TestResult {
    eventually(5, "gdrpeer idle", || {
        let s = gstats()?;
        Ok(["contexts", "regions", "pinned_bytes", "deferred_releases"]
            .iter()
            .all(|k| s.get(*k) == Some(&0)))
    })
}

/// After every test: gdrpeer holds nothing, nor does nvsim.
fn all_released() -> TestResult {
    gdrpeer_idle()?;
    harness::nvsim_counters_back_to_zero()
}

/// The PCI address of QEMU's edu device, the DMA peer of these tests.
fn edu() -> Result<PciAddress, String> {
    for entry in std::fs::read_dir("/sys/bus/pci/devices").map_err(|e| e.to_string())? {
        let path = entry.map_err(|e| e.to_string())?.path();
        let id = |f: &str| std::fs::read_to_string(path.join(f)).unwrap_or_default();
        if id("vendor").trim() == "0x1234" && id("device").trim() == "0x11e8" {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            return name.parse().map_err(|e| format!("{name}: {e}"));
        }
    }
    Err("no edu device".into())
}

/// The bus addresses nvsim gives an in-kernel client (p2pclient) for the same range.
fn p2pclient_addresses(va: u64, len: u64) -> Result<Vec<u64>, String> {
    let p = harness::pin(&format!("get {va} {len}"))?.map_err(|e| format!("p2pclient get: {e}"))?;
    check_eq!(
        harness::status(&format!("put {}", p.handle))?,
        0,
        "p2pclient put"
    );
    Ok(p.pa)
}

// --- Pinning ----------------------------------------------------------------------------

fn pin_rounds_to_gpu_pages() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(8 * K64).map_err(errno)?;
    let d = dev()?;
    let p = ok(d.pin(va + K64 + 100, 2 * K64, PinFlags::empty()), "pin")?;
    check_eq!(p.aligned_va, va + K64, "aligned va");
    check_eq!(p.offset, 100, "offset");
    check_eq!(p.page_count, 3, "pages of [va+64K+100, +128K)");
    check_eq!(p.page_size as u64, K64, "page size");
    let info = ok(d.info(p.handle), "info")?;
    check_eq!(info.state, PinState::Valid, "state");
    check_eq!(
        (info.region_va, info.region_len),
        (va + K64, 3 * K64),
        "region"
    );
    let pages = ok(d.get_pages(p.handle), "get_pages")?;
    check_eq!(
        pages,
        p2pclient_addresses(va + K64, 3 * K64)?,
        "bus addresses"
    );
    ok(d.unpin(p.handle), "unpin")
}

fn bad_requests_fail_before_nvidia() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(K64).map_err(errno)?;
    let d = dev()?;
    let calls = stat("get_pages_calls")?;
    let max = param("max_pin_bytes")?;
    for (what, va, len) in [
        ("zero length", va, 0),
        ("va + len overflows", u64::MAX - K64, 2 * K64),
        ("rounded end overflows", u64::MAX - 10, 5),
        ("longer than max_pin_bytes", va, max + 1),
    ] {
        check_eq!(
            fails(d.pin(va, len, PinFlags::empty()), what)?,
            Errno::INVAL,
            what
        );
    }
    check_eq!(
        stat("get_pages_calls")?,
        calls,
        "nv-p2p calls for bad requests"
    );
    for (what, r) in [
        ("unpin of an unknown handle", d.unpin(12345).map(|_| ())),
        ("info of an unknown handle", d.info(12345).map(|_| ())),
        ("pages of an unknown handle", d.get_pages(12345).map(|_| ())),
    ] {
        check_eq!(fails(r, what)?, Errno::INVAL, what);
    }
    // Not GPU memory: nvsim refuses, and the file is still usable.
    check_eq!(
        fails(d.pin(0x1000_0000, K64, PinFlags::empty()), "pin of host va")?,
        Errno::INVAL,
        "pin of host va"
    );
    let p = ok(d.pin(va, K64, PinFlags::empty()), "pin after errors")?;
    ok(d.unpin(p.handle), "unpin")?;
    check_eq!(
        fails(d.unpin(p.handle), "second unpin")?,
        Errno::INVAL,
        "second unpin"
    );
    Ok(())
}

fn raw_abi_errors() -> TestResult {
    let d = dev()?;
    proc::raw_abi_errors(&d)
}

fn get_pages_needs_room_and_rawio() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(4 * K64).map_err(errno)?;
    let d = dev()?;
    let p = ok(d.pin(va, 4 * K64, PinFlags::empty()), "pin")?;
    check_eq!(
        proc::get_pages_into(&d, p.handle, 3)?,
        Err(Errno::NOSPC),
        "3 entries for 4 pages"
    );
    check_eq!(
        proc::get_pages_into(&d, p.handle, 5)?,
        Ok(4),
        "5 entries for 4 pages"
    );
    check_eq!(
        proc::without_rawio(&d, p.handle)?,
        (Errno::PERM, Errno::PERM),
        "GET_PAGES, DMA_MAP without CAP_SYS_RAWIO"
    );
    ok(d.unpin(p.handle), "unpin")
}

fn persistent_pins() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(K64).map_err(errno)?;
    let d = dev()?;
    match d.pin(va, K64, PinFlags::PERSISTENT) {
        Err(e) if e.errno() == Some(Errno::OPNOTSUPP) => Ok(()),
        Err(e) => Err(format!("persistent pin: {e}")),
        Ok(p) => {
            check_eq!(stat("persistent_pins_live")?, 1, "persistent pins");
            // A persistent pin is not a hit for a callback pin of the same range.
            let q = ok(d.pin(va, K64, PinFlags::empty()), "callback pin")?;
            check_eq!(ok(d.stats(), "stats")?.file.misses, 2, "misses");
            check!(
                ok(d.info(p.handle), "info")?.persistent,
                "info: not persistent"
            );
            ok(d.unpin(q.handle), "unpin")?;
            ok(d.unpin(p.handle), "unpin")
        }
    }
}

/// Page tables of majors 1 and 2 are read; any other is given back and the pin refused
/// (run with nvsim's `page_table_version` at 2.0, 1.2 and 3.0).
fn table_version_checked() -> TestResult {
    let version = stat("page_table_version")?;
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(2 * K64).map_err(errno)?;
    let d = dev()?;
    if matches!(version >> 16, 1 | 2) {
        let p = ok(d.pin(va, 2 * K64, PinFlags::empty()), "pin")?;
        check_eq!(
            ok(d.get_pages(p.handle), "pages")?,
            p2pclient_addresses(va, 2 * K64)?,
            "bus addresses"
        );
        ok(d.unpin(p.handle), "unpin")
    } else {
        let what = format!("pin with a {version:#010x} table");
        check_eq!(
            fails(d.pin(va, 2 * K64, PinFlags::empty()), &what)?,
            Errno::OPNOTSUPP,
            what
        );
        check_eq!(stat("pins_live")?, 0, "pins after refusing the table");
        Ok(())
    }
}

// --- The registration cache -------------------------------------------------------------

fn contained_request_is_a_hit() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(8 * K64).map_err(errno)?;
    let d = dev()?;
    let a = ok(d.pin(va, 8 * K64, PinFlags::empty()), "pin")?;
    let calls = stat("get_pages_calls")?;
    let b = ok(
        d.pin(va + 3 * K64 + 7, K64, PinFlags::empty()),
        "contained pin",
    )?;
    check_eq!(stat("get_pages_calls")?, calls, "nv-p2p calls for a hit");
    let s = ok(d.stats(), "stats")?;
    check_eq!(
        (s.file.hits, s.file.misses, s.file.regions, s.handles),
        (1, 1, 1, 2),
        "hits, misses, regions, handles"
    );
    let all = ok(d.get_pages(a.handle), "pages")?;
    check_eq!(
        ok(d.get_pages(b.handle), "pages")?,
        all[3..5].to_vec(),
        "a hit's pages"
    );
    ok(d.unpin(a.handle), "unpin")?;
    ok(d.unpin(b.handle), "unpin")
}

/// GDRPEER_PIN_NOCACHE: every pin is an nv-p2p pin of its own, even of a range a cached
/// region holds, and unpin gives it back at once.
fn nocache_pins_per_use() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(2 * K64).map_err(errno)?;
    let d = dev()?;
    let cached = ok(d.pin(va, 2 * K64, PinFlags::empty()), "cached pin")?;
    let calls = stat("get_pages_calls")?;
    for _ in 0..3 {
        let p = ok(d.pin(va + 10, K64, PinFlags::NOCACHE), "nocache pin")?;
        check_eq!(stat("pins_live")?, 2, "pins with a private one");
        ok(d.unpin(p.handle), "unpin")?;
        check_eq!(stat("pins_live")?, 1, "pins after its unpin");
    }
    check_eq!(stat("get_pages_calls")? - calls, 3, "nv-p2p pins");
    // A private region is never a hit for a cached request either.
    let p = ok(d.pin(va + 2 * K64 - 1, 1, PinFlags::NOCACHE), "nocache pin")?;
    let q = ok(d.pin(va + 2 * K64 - 1, 1, PinFlags::empty()), "cached pin")?;
    check_eq!(
        ok(d.info(q.handle), "info")?.region_va,
        va,
        "the cached request is served by the cached region"
    );
    for h in [p.handle, q.handle, cached.handle] {
        ok(d.unpin(h), "unpin")?;
    }
    Ok(())
}

fn unpin_is_lazy() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(2 * K64).map_err(errno)?;
    let d = dev()?;
    let a = ok(d.pin(va, 2 * K64, PinFlags::empty()), "pin")?;
    ok(d.unpin(a.handle), "unpin")?;
    check_eq!(stat("pins_live")?, 1, "pins after unpin (cached)");
    let calls = stat("get_pages_calls")?;
    let b = ok(d.pin(va, K64, PinFlags::empty()), "pin again")?;
    check_eq!(
        stat("get_pages_calls")?,
        calls,
        "nv-p2p calls for the second pin"
    );
    ok(d.unpin(b.handle), "unpin")?;
    drop(d);
    check_eq!(stat("pins_live")?, 0, "pins after close");
    Ok(())
}

fn overlapping_requests_merge() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(4 * K64).map_err(errno)?;
    let d = dev()?;
    // Unused region [0, 2) and request [1, 3): one region [0, 3) replaces it.
    let a = ok(d.pin(va, 2 * K64, PinFlags::empty()), "pin [0,2)")?;
    ok(d.unpin(a.handle), "unpin")?;
    let b = ok(d.pin(va + K64, 2 * K64, PinFlags::empty()), "pin [1,3)")?;
    let info = ok(d.info(b.handle), "info")?;
    check_eq!(
        (info.region_va, info.region_len),
        (va, 3 * K64),
        "merged region"
    );
    check_eq!(stat("pins_live")?, 1, "pins after merging an unused region");
    // A region in use is replaced for new requests but stays pinned for its handle.
    let c = ok(d.pin(va + 2 * K64, 2 * K64, PinFlags::empty()), "pin [2,4)")?;
    check_eq!(
        stat("pins_live")?,
        2,
        "pins while the replaced region is in use"
    );
    check_eq!(
        ok(d.info(c.handle), "info")?.region_len,
        4 * K64,
        "region of [2,4)"
    );
    check_eq!(
        ok(d.info(b.handle), "info")?.region_len,
        3 * K64,
        "replaced region"
    );
    ok(d.unpin(b.handle), "unpin")?;
    check_eq!(
        stat("pins_live")?,
        1,
        "pins once the replaced region is unused"
    );
    let s = ok(d.stats(), "stats")?;
    check_eq!((s.file.misses, s.file.regions), (3, 1), "misses, regions");
    ok(d.unpin(c.handle), "unpin")
}

/// A miss merges exactly the regions it overlaps: one reaching in from below, several
/// inside, none that only touch it.
fn merge_takes_exactly_the_overlapping_regions() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(8 * K64).map_err(errno)?;
    let d = dev()?;
    let page = |i: u64| va + i * K64;
    for i in [1, 3, 5] {
        let p = ok(d.pin(page(i), K64, PinFlags::empty()), "pin")?;
        ok(d.unpin(p.handle), "unpin")?;
    }
    check_eq!(stat("pins_live")?, 3, "pins of [1,2) [3,4) [5,6)");
    // [1,5) starts where [1,2) does and takes in [3,4); [5,6) only touches it.
    let a = ok(d.pin(page(1), 4 * K64, PinFlags::empty()), "pin [1,5)")?;
    let info = ok(d.info(a.handle), "info")?;
    check_eq!(
        (info.region_va, info.region_len),
        (page(1), 4 * K64),
        "region of [1,5)"
    );
    check_eq!(stat("pins_live")?, 2, "pins after merging [1,2) and [3,4)");
    ok(d.unpin(a.handle), "unpin")?;
    // [0,7) starts before every region and takes in both.
    let b = ok(d.pin(va, 7 * K64, PinFlags::empty()), "pin [0,7)")?;
    let info = ok(d.info(b.handle), "info")?;
    check_eq!(
        (info.region_va, info.region_len),
        (va, 7 * K64),
        "region of [0,7)"
    );
    check_eq!(stat("pins_live")?, 1, "pins after merging [1,5) and [5,6)");
    ok(d.unpin(b.handle), "unpin")?;
    // [6,8) starts inside [0,7), which reaches into it from below: one region [0,8).
    let c = ok(d.pin(page(6), 2 * K64, PinFlags::empty()), "pin [6,8)")?;
    let info = ok(d.info(c.handle), "info")?;
    check_eq!(
        (info.region_va, info.region_len),
        (va, 8 * K64),
        "region of [6,8)"
    );
    check_eq!(stat("pins_live")?, 1, "pins after merging [0,7)");
    ok(d.unpin(c.handle), "unpin")
}

fn lru_eviction_over_region_limit() -> TestResult {
    let limit = param("cache_max_regions")?;
    check!(
        limit > 0 && limit < 32,
        "run with a small cache_max_regions, not {limit}"
    );
    let gpu = Gpu::open().map_err(errno)?;
    let d = dev()?;
    let mut vas = Vec::new();
    for _ in 0..limit + 2 {
        let (va, _) = gpu.alloc(K64).map_err(errno)?;
        let p = ok(d.pin(va, K64, PinFlags::empty()), "pin")?;
        ok(d.unpin(p.handle), "unpin")?;
        vas.push(va);
    }
    let s = ok(d.stats(), "stats")?;
    check_eq!(
        (s.file.regions, s.file.evictions_limit),
        (limit, 2),
        "regions, evictions"
    );
    check_eq!(stat("pins_live")?, limit, "pins");
    // The least recently used went: the first is a miss again, the last a hit.
    let last = ok(
        d.pin(vas[vas.len() - 1], K64, PinFlags::empty()),
        "pin last",
    )?;
    let first = ok(d.pin(vas[0], K64, PinFlags::empty()), "pin first")?;
    let s = ok(d.stats(), "stats")?;
    check_eq!((s.file.hits, s.file.misses), (1, limit + 3), "hits, misses");
    ok(d.unpin(first.handle), "unpin")?;
    ok(d.unpin(last.handle), "unpin")
}

/// Byte limits: per context, and the global budget that each context enforces on its own
/// unused regions (run with `cache_max_bytes` = 4 pages and `global_max_bytes` = 6 pages).
fn byte_limits() -> TestResult {
    let (ctx_max, global_max) = (param("cache_max_bytes")?, param("global_max_bytes")?);
    if (ctx_max, global_max) != (4 * K64, 6 * K64) {
        return Err(format!(
            "{SKIP}needs 4- and 6-page byte limits (the plan runs it so)"
        ));
    }
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(8 * K64).map_err(errno)?;
    let (vb, _) = gpu.alloc(8 * K64).map_err(errno)?;
    let a = dev()?;
    for (start, pages) in [(0, 2), (2, 2), (4, 1)] {
        let p = ok(
            a.pin(va + start * K64, pages * K64, PinFlags::empty()),
            "pin in A",
        )?;
        ok(a.unpin(p.handle), "unpin in A")?;
    }
    // Five pages cached in A: its least recently used region went.
    let s = ok(a.stats(), "stats A")?.file;
    check_eq!(
        (s.pinned_bytes, s.evictions_limit),
        (3 * K64, 1),
        "A: bytes, evictions"
    );
    let b = dev()?;
    let b1 = ok(b.pin(vb, 2 * K64, PinFlags::empty()), "pin in B")?;
    let b2 = ok(b.pin(vb + 2 * K64, 2 * K64, PinFlags::empty()), "pin in B")?;
    // Seven pages pinned in all, but B's regions are in use and A's are not B's to evict.
    check_eq!(
        gstat("pinned_bytes")?,
        7 * K64,
        "global bytes over the budget"
    );
    check_eq!(
        ok(a.stats(), "stats A")?.file.pinned_bytes,
        3 * K64,
        "A untouched"
    );
    ok(b.unpin(b2.handle), "unpin in B")?;
    let s = ok(b.stats(), "stats B")?.file;
    check_eq!(
        (s.pinned_bytes, s.evictions_limit),
        (2 * K64, 1),
        "B: bytes, evictions"
    );
    check_eq!(gstat("pinned_bytes")?, 5 * K64, "global bytes");
    ok(b.unpin(b1.handle), "unpin in B")
}

fn bar1_exhaustion_evicts_and_retries() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let size = stat("bar1_size")?;
    let room = stat("bar1_reserve")? + 2 * K64;
    debugfs("bar1_size", &room.to_string())?;
    let r = (|| {
        let d = dev()?;
        let va: Vec<u64> = (0..3)
            .map(|_| gpu.alloc(K64).map(|a| a.0))
            .collect::<Result<_, _>>()
            .map_err(errno)?;
        for &v in &va[..2] {
            let p = ok(d.pin(v, K64, PinFlags::empty()), "pin")?;
            ok(d.unpin(p.handle), "unpin")?;
        }
        // BAR1 is full of unused regions: the least recent one makes room.
        let c = ok(d.pin(va[2], K64, PinFlags::empty()), "pin with BAR1 full")?;
        let s = ok(d.stats(), "stats")?;
        check_eq!(
            (s.file.evictions_enomem, s.file.regions),
            (1, 2),
            "evictions, regions"
        );
        let b = ok(d.pin(va[1], K64, PinFlags::empty()), "pin cached")?;
        check_eq!(ok(d.stats(), "stats")?.file.hits, 1, "hits");
        // Everything in use: nothing to evict, and nothing lost.
        check_eq!(
            fails(d.pin(va[0], K64, PinFlags::empty()), "pin with BAR1 in use")?,
            Errno::NOMEM,
            "pin with BAR1 in use"
        );
        for h in [b.handle, c.handle] {
            check_eq!(
                ok(d.info(h), "info")?.state,
                PinState::Valid,
                "state after ENOMEM"
            );
            ok(d.get_pages(h), "pages after ENOMEM")?;
            ok(d.unpin(h), "unpin")?;
        }
        Ok(())
    })();
    debugfs("bar1_size", &size.to_string())?;
    r
}

// --- The free callback ------------------------------------------------------------------

fn callback_revokes_a_held_pin() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, id) = gpu.alloc(2 * K64).map_err(errno)?;
    let d = dev()?;
    let p = ok(d.pin(va, 2 * K64, PinFlags::empty()), "pin")?;
    debugfs("free", &id.to_string())?;
    check_eq!(
        ok(d.info(p.handle), "info")?.state,
        PinState::Revoked,
        "state after free"
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
            Err(e) => check_eq!(e.errno(), Some(Errno::NXIO), "pin racing the free"),
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
                    check_eq!(e.errno(), Some(Errno::NXIO), "pages of a hit");
                }
                ok(d.unpin(p.handle), "unpin")?;
            }
            // Revoked: not a hit any more; a new pin of freed memory fails in nvsim.
            Err(e) if e.errno() == Some(Errno::INVAL) => break,
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
    check_eq!(stat("dma_mappings_live")?, 1, "DMA mappings");
    debugfs("free", &id.to_string())?;
    check_eq!(
        stat("dma_mappings_live")?,
        0,
        "DMA mappings after the callback"
    );
    check_eq!(
        fails(d.dma_map(p.handle, peer), "dma_map after free")?,
        Errno::NXIO,
        "dma_map after free"
    );
    ok(d.unpin(p.handle), "unpin")
}

/// A free callback that comes while an unpin is inside dma_unmap_pages waits for it: the
/// unmap never sees a freed table (nvsim counts one in client_errors). nvsim's
/// `unmap_delay_us` holds the unmap open while the memory is freed. The ioctl fuzzer found
/// this window.
fn callback_waits_for_an_unmap() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, id) = gpu.alloc(2 * K64).map_err(errno)?;
    let d = dev()?;
    let p = ok(d.pin(va, 2 * K64, PinFlags::empty()), "pin")?;
    ok(d.dma_map(p.handle, edu()?), "dma_map")?;
    let callbacks = stat("callbacks_fired")?;
    debugfs("unmap_delay_us", "300000")?;
    let r = std::thread::scope(|s| {
        // Closing the file unpins the region: its unmap sleeps in nvsim.
        let closer = s.spawn(move || drop(d));
        std::thread::sleep(Duration::from_millis(100));
        let freed = debugfs("free", &id.to_string());
        closer.join().map_err(|_| "close panicked".to_string())?;
        freed
    });
    debugfs("unmap_delay_us", "0")?;
    r?;
    check_eq!(stat("client_errors")?, 0, "unmaps of a freed table");
    check_eq!(stat("callbacks_fired")? - callbacks, 1, "callbacks");
    Ok(())
}

/// Waits until an nv-p2p call sleeps in one of nvsim's one-shot entry delays
/// (`put_pages_delay_us`, `dma_map_delay_us`).
fn delayed_call_asleep() -> TestResult {
    eventually(10, "an nv-p2p call asleep on entry", || {
        Ok(stat("calls_delayed")? == 1)
    })
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
/// must not map a newer pin's table. nvsim's `dma_map_delay_us` holds the call open.
fn stale_dma_map_spares_a_newer_pin() -> TestResult {
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
    newer_pin_intact(&other, newer, 2)?;
    ok(d.unpin(p.handle), "unpin of the revoked pin")
}

/// The user-space registration cache over (simulated) libcuda: the first use pins the
/// whole allocation with SYNC_MEMOPS set, later uses are hits that cost one BUFFER_ID query
/// and no nv-p2p call, a free and a reallocation at the same address is seen by the tag and
/// re-pinned, and a freed pointer is dropped and refused.
fn regcache_tag_check_over_cuda() -> TestResult {
    use gdrpeer::regcache::{CacheError, RegCache};
    let cu = gdrpeer::cuda::Cuda::load().map_err(|e| format!("{SKIP}{e}"))?;
    let cu_err = |e: gdrpeer::cuda::CudaCallError| e.to_string();
    let d = dev()?;
    let gpu = Gpu::open().map_err(errno)?;
    let size = 3 * K64 as usize + 1000;
    let p = cu.mem_alloc(size).map_err(cu_err)?;
    let mut cache = RegCache::new(&d, &cu, 4);
    let pins = stat("get_pages_calls")?;
    let r1 = cache.get(p + 100, 1000).map_err(|e| e.to_string())?;
    check_eq!((r1.aligned_va, r1.offset), (p, 100), "registration");
    check_eq!(
        gpu.query(p).map_err(errno)?.sync_memops,
        1,
        "SYNC_MEMOPS set"
    );
    let info = ok(d.info(r1.handle), "info")?;
    check_eq!(
        (info.region_va, info.region_len),
        (p, 4 * K64),
        "the whole allocation pinned"
    );
    for i in 0..8 {
        let r = cache.get(p + i * 3000, 10).map_err(|e| e.to_string())?;
        check_eq!(r.handle, r1.handle, "hit");
    }
    check_eq!(stat("get_pages_calls")? - pins, 1, "nv-p2p pins");

    cu.mem_free(p).map_err(cu_err)?;
    let q = cu.mem_alloc(size).map_err(cu_err)?;
    check_eq!(q, p, "reallocation at the same address");
    let r2 = cache.get(q + 5, 10).map_err(|e| e.to_string())?;
    check!(
        r2.handle != r1.handle,
        "the stale pin was served after a realloc"
    );
    check_eq!(
        ok(d.info(r2.handle), "info")?.state,
        PinState::Valid,
        "new pin"
    );

    cu.mem_free(q).map_err(cu_err)?;
    check!(
        matches!(cache.get(q, 10), Err(CacheError::InvalidPointer { .. })),
        "a freed pointer was not refused"
    );
    let s = cache.stats();
    check_eq!(
        (
            s.hits,
            s.misses,
            s.tag_mismatches,
            s.invalid_pointers,
            s.entries
        ),
        (8, 2, 1, 1, 0),
        "hits, misses, tag mismatches, invalid pointers, entries"
    );
    Ok(())
}

fn dma_map_checks_the_peer() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(K64).map_err(errno)?;
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
    let addrs = ok(d.dma_map(p.handle, edu()?), "dma_map")?;
    let want = client(&format!("get {va} {K64}"))?;
    let handle = harness::parse_pin(&want)
        .ok_or(want.clone())?
        .map_err(|e| format!("p2pclient: {e}"))?
        .handle;
    let mapped = client(&format!("map {handle} edu"))?;
    let _ = client(&format!("unmap {handle} 0 edu"));
    let _ = client(&format!("put {handle}"));
    let expect: Vec<String> = addrs.iter().map(|a| format!("{a:#x}")).collect();
    check!(
        mapped.contains(&expect.join(",")),
        "DMA addresses {expect:?}, p2pclient mapped '{mapped}'"
    );
    ok(d.unpin(p.handle), "unpin")
}

// --- Other processes --------------------------------------------------------------------

fn fork_child_gets_eacces() -> TestResult {
    proc::fork_child_gets_eacces()
}

fn fork_child_closes_last() -> TestResult {
    proc::child_closes_last(proc::Handover::Fork)
}

fn scm_rights_receiver_closes_last() -> TestResult {
    proc::child_closes_last(proc::Handover::ScmRights)
}

fn killed_process_leaves_nothing() -> TestResult {
    proc::killed_process_leaves_nothing()
}

fn rmmod_refused_while_in_use() -> TestResult {
    let d = dev()?;
    check!(
        !proc::rmmod_gdrpeer()?,
        "rmmod succeeded with /dev/gdrpeer open"
    );
    drop(d);
    Ok(())
}

const TESTS: &[Test] = &[
    ("gdrpeer-pin-rounds-to-gpu-pages", pin_rounds_to_gpu_pages),
    (
        "gdrpeer-bad-requests-fail-before-nvidia",
        bad_requests_fail_before_nvidia,
    ),
    ("gdrpeer-raw-abi-errors", raw_abi_errors),
    (
        "gdrpeer-get-pages-needs-room-and-rawio",
        get_pages_needs_room_and_rawio,
    ),
    ("gdrpeer-persistent-pins", persistent_pins),
    ("gdrpeer-table-version-checked", table_version_checked),
    (
        "gdrpeer-contained-request-is-a-hit",
        contained_request_is_a_hit,
    ),
    ("gdrpeer-unpin-is-lazy", unpin_is_lazy),
    ("gdrpeer-nocache-pins-per-use", nocache_pins_per_use),
    (
        "gdrpeer-overlapping-requests-merge",
        overlapping_requests_merge,
    ),
    (
        "gdrpeer-merge-takes-exactly-the-overlapping-regions",
        merge_takes_exactly_the_overlapping_regions,
    ),
    (
        "gdrpeer-lru-eviction-over-region-limit",
        lru_eviction_over_region_limit,
    ),
    ("gdrpeer-byte-limits", byte_limits),
    (
        "gdrpeer-bar1-exhaustion-evicts-and-retries",
        bar1_exhaustion_evicts_and_retries,
    ),
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
    ("gdrpeer-fork-child-gets-eacces", fork_child_gets_eacces),
    ("gdrpeer-fork-child-closes-last", fork_child_closes_last),
    (
        "gdrpeer-scm-rights-receiver-closes-last",
        scm_rights_receiver_closes_last,
    ),
    (
        "gdrpeer-killed-process-leaves-nothing",
        killed_process_leaves_nothing,
    ),
    (
        "gdrpeer-rmmod-refused-while-in-use",
        rmmod_refused_while_in_use,
    ),
    ("gdrpeer-bad-input-table", badinput::bad_input_table),
    (
        "gdrpeer-regcache-tag-check-over-cuda",
        regcache_tag_check_over_cuda,
    ),
];

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(code) = proc::child_main(&args) {
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
        Some("--stress") => return narrated(stress::run(&args[1..])),
        Some("--fuzz") => return narrated(fuzz::run(&args[1..])),
        Some("--stress-worker") => return narrated(stress::worker(&args[1..])),
        // The sample NIC's tests (gdrnic.ko loaded), and those that make lockdep report.
        Some(mode @ ("--nic" | "--nic-lockdep")) => {
            let tests = if mode == "--nic" {
                nic::TESTS
            } else {
                nic::LOCKDEP_TESTS
            };
            let filter = args.get(1).cloned().unwrap_or_default();
            return exit(harness::run_tests(tests, &filter, nic::nic_released));
        }
        // gdrcopy's sanity scenarios over CUDA; --cuda-only without the module.
        Some(mode @ ("--cuda" | "--cuda-only")) => {
            if let Err(e) = sanity::load() {
                println!("gdrpeer-test: {e}");
                return ExitCode::from(sanity::NO_CUDA);
            }
            let filter = args.get(1).cloned().unwrap_or_default();
            return exit(if mode == "--cuda" {
                harness::run_tests(sanity::TESTS, &filter, all_released)
            } else {
                harness::run_tests(sanity::CUDA_ONLY, &filter, || Ok(()))
            });
        }
        _ => {}
    }
    let filter = args.first().cloned().unwrap_or_default();
    exit(harness::run_tests(TESTS, &filter, all_released))
}
