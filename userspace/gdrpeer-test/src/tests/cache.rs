// SPDX-License-Identifier: GPL-2.0

//! The registration cache: hits that cost no nv-p2p call, NOCACHE pins, lazy unpin, merges
//! of overlapping regions, and eviction over the region and byte limits and when BAR1 runs
//! out.

use crate::helpers::{dev, fails, gstat, ok, param, K64};
use gdrpeer::{PinFlags, PinState};
use nvsim::testing::{errno, stat, with_debugfs, Test, TestResult, SKIP};
use nvsim::{check, check_eq, Gpu};
use rustix::io::Errno;

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
    with_debugfs("bar1_size", &room.to_string(), &size.to_string(), || {
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
    })
}

/// A merge whose memory is freed between nv-p2p's two pin steps (nvsim's
/// `free_between_pin_steps`): the callbacks of the regions being merged, which handles hold,
/// fire inside gdrpeer's own get_pages call, and the merged pin fails. The PIN fails with
/// ENXIO or EINVAL (memory freed), the handles read as revoked, and nothing is left (checked
/// after every test). No gdrpeer test armed the knob before 2026-11-29.
fn merge_freed_between_the_pin_steps() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, id) = gpu.alloc(4 * K64).map_err(errno)?;
    let d = dev()?;
    let a = ok(d.pin(va, K64, PinFlags::empty()), "pin [0,1)")?;
    let b = ok(d.pin(va + 2 * K64, K64, PinFlags::empty()), "pin [2,3)")?;
    let e = with_debugfs("free_between_pin_steps", &id.to_string(), "0", || {
        fails(
            d.pin(va, 4 * K64, PinFlags::empty()),
            "pin [0,4), freed between the pin steps",
        )
    })?;
    check!(
        matches!(e, Errno::NXIO | Errno::INVAL),
        "the merged pin's errno: {e:?}, expected ENXIO or EINVAL"
    );
    let states =
        [a.handle, b.handle].map(|h| d.info(h).map(|i| i.state).map_err(|e| e.to_string()));
    check_eq!(
        states,
        [Ok(PinState::Revoked), Ok(PinState::Revoked)],
        "the merged regions' handles after the free"
    );
    check_eq!(stat("pins_live")?, 0, "pins after the free");
    ok(d.unpin(a.handle), "unpin")?;
    ok(d.unpin(b.handle), "unpin")
}

/// This subject's tests, in the order they run.
pub const TESTS: &[Test] = &[
    (
        "gdrpeer-contained-request-is-a-hit",
        contained_request_is_a_hit,
    ),
    ("gdrpeer-unpin-is-lazy", unpin_is_lazy),
    (
        "gdrpeer-merge-freed-between-the-pin-steps",
        merge_freed_between_the_pin_steps,
    ),
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
];
