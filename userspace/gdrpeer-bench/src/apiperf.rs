// SPDX-License-Identifier: GPL-2.0

//! gdrcopy's `gdrcopy_apiperf` loop through `/dev/gdrdrv`: per size, each iteration pins one
//! buffer (PIN_BUFFER_V2), maps it (`gdr_map`: REQ_MAPPING_TYPE, mmap, GET_INFO_V2), asks for
//! its info (GET_INFO_V2), unmaps it (munmap) and unpins it (UNPIN_BUFFER), each phase timed
//! on its own, with the cache (the re-pin a hit, the unpin lazy) and with
//! `GDRDRV_PIN_FLAG_GDRPEER_NOCACHE` (a pin per use, as gdrdrv).

use crate::interleave::{self, Step, ROUNDS};
use crate::measure::{c, g, op, timed, Config, WARMUP};
use crate::report::{ApiPerf, Interleaved, Latency, Op};
use gdrpeer::{
    cuda::Cuda,
    gdrdrv::{self, Gdrdrv},
};
use std::time::Duration;

const K: usize = 1024;
/// The sizes of the loop.
pub const SIZES: [usize; 3] = [64 * K, K * K, 4 * K * K];

/// nvsim's `get_pages_calls` so far.
fn pins() -> Result<u64, String> {
    nvsim::testing::stats()?
        .get("get_pages_calls")
        .copied()
        .ok_or_else(|| "nvsim: no counter get_pages_calls".into())
}

/// One iteration: the time of each phase (pin, map, get_info, unmap, unpin).
fn once(gd: &Gdrdrv, buf: u64, len: usize, flags: u32) -> Result<[Duration; 5], String> {
    let (h, pin) = timed(|| g(gd.pin_v2(buf, len as u64, flags), "PIN_BUFFER_V2"))?;
    let ((m, _), map) = timed(|| g(gd.map(h, len), "gdr_map"))?;
    let (info, get_info) = timed(|| g(gd.info_v2(h), "GET_INFO_V2"))?;
    if info.mapped_size != len as u64 {
        return Err(format!(
            "GET_INFO_V2: {} bytes mapped, expected {len}",
            info.mapped_size
        ));
    }
    let ((), unmap) = timed(|| {
        drop(m);
        Ok(())
    })?;
    let ((), unpin) = timed(|| g(gd.unpin(h), "UNPIN_BUFFER"))?;
    Ok([pin, map, get_info, unmap, unpin])
}

/// The loop for one buffer of `len` bytes, `reps` timed iterations after `WARMUP` untimed
/// ones. Checks nvsim's pins: none in a cached iteration (the first, untimed, pins the
/// region), one in each NOCACHE one, so a "cached" loop cannot silently measure misses.
fn measure(
    gd: &Gdrdrv,
    buf: u64,
    len: usize,
    cached: bool,
    reps: usize,
) -> Result<ApiPerf, String> {
    let flags = if cached {
        0
    } else {
        gdrdrv::PIN_FLAG_GDRPEER_NOCACHE
    };
    for _ in 0..WARMUP {
        once(gd, buf, len, flags)?;
    }
    let before = pins()?;
    let mut phases: [Vec<u64>; 5] = Default::default();
    let mut total = Vec::with_capacity(reps);
    for _ in 0..reps {
        let t = once(gd, buf, len, flags)?;
        for (p, d) in phases.iter_mut().zip(t) {
            p.push(d.as_nanos() as u64);
        }
        total.push(t.iter().map(|d| d.as_nanos() as u64).sum());
    }
    let made = pins()? - before;
    let want = if cached { 0 } else { reps as u64 };
    if made != want {
        return Err(format!(
            "apiperf loop ({len} B, {}): {made} nv-p2p pins in {reps} iterations, expected {want}",
            if cached { "cached" } else { "NOCACHE" }
        ));
    }
    let [pin, map, get_info, unmap, unpin] = phases.map(Latency::of);
    Ok(ApiPerf {
        bytes: len as u64,
        cached,
        pin,
        map,
        get_info,
        unmap,
        unpin,
        total: Latency::of(total),
    })
}

/// The loop's key in `ops` and its row's words.
pub fn key(cached: bool, bytes: u64) -> String {
    format!(
        "apiperf_{}_{}",
        if cached { "cached" } else { "nocache" },
        crate::mapping::size_label(bytes as usize)
            .replace(' ', "")
            .to_lowercase()
    )
}

/// P9: the 64 KiB loop, cached and NOCACHE in turn ([`interleave`]), each iteration's
/// whole time. Checks nvsim's pins as `measure` does.
fn p9(gd: &Gdrdrv, buf: u64, cfg: &Config) -> Result<Interleaved, String> {
    let len = 64 * K;
    let whole = |flags| -> Result<Duration, String> { Ok(once(gd, buf, len, flags)?.iter().sum()) };
    let nocache = (cfg.slow_reps / ROUNDS).max(1);
    let before = pins()?;
    let r = interleave::measure(
        "P9",
        "gdrdrv apiperf loops of 64 KiB, cached and NOCACHE",
        vec![
            Step::new(
                "apiperf_cached_64kib",
                "apiperf loop, cached",
                cfg.reps.min(2000) / ROUNDS,
                || whole(0),
            ),
            Step::new(
                "apiperf_nocache_64kib",
                "apiperf loop, NOCACHE",
                nocache,
                || whole(gdrdrv::PIN_FLAG_GDRPEER_NOCACHE),
            ),
        ],
        interleave::quotient,
    )?;
    let made = pins()? - before;
    let want = (WARMUP + ROUNDS * nocache) as u64;
    if made != want {
        return Err(format!(
            "P9, interleaved: {made} nv-p2p pins, expected {want} (one per NOCACHE iteration)"
        ));
    }
    Ok(r)
}

/// Every size, cached and NOCACHE: the per-phase figures, and each whole loop in `ops`; P9
/// again, interleaved, into `interleaved`.
pub fn run(
    gd: &Gdrdrv,
    cuda: &Cuda,
    cfg: &Config,
    ops: &mut Vec<Op>,
    interleaved: &mut Vec<Interleaved>,
) -> Result<Vec<ApiPerf>, String> {
    let mut rows = Vec::new();
    for len in SIZES {
        let buf = c(cuda.mem_alloc(len))?;
        for (cached, reps) in [(true, cfg.reps.min(2000)), (false, cfg.slow_reps)] {
            let r = measure(gd, buf, len, cached, reps)?;
            eprintln!(
                "bench: apiperf {} {}: means pin {} map {} get_info {} unmap {} unpin {} ns",
                len,
                if cached { "cached" } else { "NOCACHE" },
                r.pin.mean_ns,
                r.map.mean_ns,
                r.get_info.mean_ns,
                r.unmap.mean_ns,
                r.unpin.mean_ns
            );
            ops.push(op(
                &key(cached, r.bytes),
                &format!(
                    "gdrdrv apiperf loop (pin..unpin), {} ({})",
                    if cached { "cached" } else { "NOCACHE" },
                    crate::mapping::size_label(len)
                ),
                r.total,
            ));
            rows.push(r);
        }
        if len == 64 * K {
            interleaved.push(p9(gd, buf, cfg)?);
        }
        c(cuda.mem_free(buf))?;
    }
    Ok(rows)
}
