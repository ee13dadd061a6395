// SPDX-License-Identifier: GPL-2.0

//! The user-space registration cache (`gdrpeer::regcache`) over the (simulated) CUDA driver
//! library.

use crate::helpers::{dev, ok, K64};
use gdrpeer::PinState;
use nvsim::testing::{errno, stat, Test, TestResult};
use nvsim::{check, check_eq, Gpu};

/// The user-space registration cache over (simulated) libcuda: the first use pins the
/// whole allocation with SYNC_MEMOPS set, later uses are hits that cost one BUFFER_ID query
/// and no nv-p2p call, a free and a reallocation at the same address is seen by the tag and
/// re-pinned, and a freed pointer is dropped and refused. Without a CUDA library that loads
/// the test fails: the plans always provide one (the simulated libcuda).
fn regcache_tag_check_over_cuda() -> TestResult {
    use gdrpeer::{regcache::RegCache, Error as CacheError};
    let cu = gdrpeer::cuda::Cuda::load().map_err(|e| format!("libcuda: {e}"))?;
    let cu_err = |e: gdrpeer::Error| e.to_string();
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

/// This subject's tests, in the order they run.
pub const TESTS: &[Test] = &[(
    "gdrpeer-regcache-tag-check-over-cuda",
    regcache_tag_check_over_cuda,
)];
