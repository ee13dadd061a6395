// SPDX-License-Identifier: GPL-2.0

//! The CPU mapping's benchmarks: mapping latency (mmap, first touch of each page, munmap),
//! CPU copy latency and bandwidth through a mapping, write and read, from 1 B to 4 MiB (as
//! gdrcopy's copylat and copybw measure them), and pin + map + unpin per size through
//! `/dev/gdrdrv`, cached and with `GDRDRV_PIN_FLAG_GDRPEER_NOCACHE`.

use crate::measure::{c, g, nv_series, op, series, timed, Config};
use crate::report::{ApiPerf, CopyPoint, Latency, NvCost, Op};
use gdrpeer::{
    cuda::Cuda,
    gdrdrv::{self, Gdrdrv},
    Device, Mapping, PinFlags,
};
use std::time::Duration;

const K: usize = 1024;
const PAGE: usize = 4096;
/// The largest copy, and the buffer the copies go through.
const COPY_MAX: usize = 4 * K * K;

/// Touches every 4 KiB page of `m` (a read each): what faults the pages in.
fn touch(m: &Mapping) {
    for at in (0..m.len()).step_by(PAGE) {
        // SAFETY: inside the live mapping.
        let _ = unsafe { m.as_ptr().add(at).read_volatile() };
    }
}

/// The size as a label: 64 KiB, 1 MiB, 7 B.
pub fn size_label(n: usize) -> String {
    match n {
        n if n >= K * K && n % (K * K) == 0 => format!("{} MiB", n / (K * K)),
        n if n >= K && n % K == 0 => format!("{} KiB", n / K),
        n => format!("{n} B"),
    }
}

/// Repetitions of a copy of `n` bytes: fewer for large ones (at most ~256 MiB in all).
fn copy_reps(cfg: &Config, n: usize) -> usize {
    cfg.reps.min((256 * K * K / n).max(20))
}

/// mmap + first touch + munmap of whole windows through `/dev/gdrpeer`.
fn map_latency(dev: &Device, cuda: &Cuda, cfg: &Config, ops: &mut Vec<Op>) -> Result<(), String> {
    for len in [64 * K, K * K] {
        let b = c(cuda.mem_alloc(len))?;
        let p = g(dev.pin(b, len as u64, PinFlags::empty()), "pin")?;
        let label = size_label(len);
        ops.push(op(
            &format!("map_{}", label.replace(' ', "").to_lowercase()),
            &format!("mmap + touch each page + munmap ({label})"),
            series(cfg.reps.min(1000), || {
                Ok(timed(|| {
                    let m = g(dev.map(p.handle, 0, len), "map")?;
                    touch(&m);
                    Ok(())
                })?
                .1)
            })?,
        ));
        g(dev.unpin(p.handle), "unpin")?;
        c(cuda.mem_free(b))?;
    }
    Ok(())
}

/// CPU copies of 1 B to 4 MiB into and out of a mapping, the mapping's first byte to the
/// host buffer's first byte (as copylat/copybw), `copy_nonoverlapping` as their memcpy.
fn copies(dev: &Device, cuda: &Cuda, cfg: &Config) -> Result<Vec<CopyPoint>, String> {
    let b = c(cuda.mem_alloc(COPY_MAX))?;
    let p = g(dev.pin(b, COPY_MAX as u64, PinFlags::empty()), "pin")?;
    let m = g(dev.map(p.handle, p.offset, COPY_MAX), "map")?;
    touch(&m);
    let mut host = vec![0x5au8; COPY_MAX];
    let mut points = Vec::new();
    let mut n = 1;
    while n <= COPY_MAX {
        let reps = copy_reps(cfg, n);
        let write = series(reps, || {
            Ok(timed(|| {
                // SAFETY: `n` bytes inside the host buffer and the live mapping, which do
                // not overlap.
                unsafe { std::ptr::copy_nonoverlapping(host.as_ptr(), m.as_ptr(), n) };
                // Drains write-combining buffers, as gdr_copy_to_mapping's sfence.
                std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
                Ok(())
            })?
            .1)
        })?;
        let read = series(reps, || {
            Ok(timed(|| {
                // SAFETY: as above.
                unsafe { std::ptr::copy_nonoverlapping(m.as_ptr(), host.as_mut_ptr(), n) };
                Ok(())
            })?
            .1)
        })?;
        std::hint::black_box(&mut host);
        eprintln!(
            "bench: copy {}: write {} ns, read {} ns",
            size_label(n),
            write.median_ns,
            read.median_ns
        );
        points.push(CopyPoint {
            bytes: n as u64,
            write,
            read,
        });
        n *= 4;
    }
    drop(m);
    g(dev.unpin(p.handle), "unpin")?;
    c(cuda.mem_free(b))?;
    Ok(points)
}

/// gdr_pin_buffer + gdr_map (first byte touched) + gdr_unmap + gdr_unpin_buffer of one
/// buffer per size, again and again, cached and NOCACHE.
fn gdrdrv_pin_map_unpin(
    g_: &Gdrdrv,
    cuda: &Cuda,
    cfg: &Config,
    ops: &mut Vec<Op>,
) -> Result<(), String> {
    for len in [64 * K, K * K, 4 * K * K] {
        let b = c(cuda.mem_alloc(len))?;
        let label = size_label(len);
        for (flags, how, reps) in [
            (0, "cached", cfg.reps.min(2000)),
            (gdrdrv::PIN_FLAG_GDRPEER_NOCACHE, "NOCACHE", cfg.slow_reps),
        ] {
            let once = || -> Result<Duration, String> {
                Ok(timed(|| {
                    let h = g(g_.pin_v2(b, len as u64, flags), "PIN_BUFFER_V2")?;
                    let info = g(g_.info_v2(h), "GET_INFO_V2")?;
                    let m = g(g_.map(h, info.mapped_size as usize), "gdr_map")?.0;
                    // SAFETY: the first byte of the live mapping.
                    let _ = unsafe { m.as_ptr().read_volatile() };
                    drop(m);
                    g(g_.unpin(h), "UNPIN_BUFFER")
                })?
                .1)
            };
            ops.push(op(
                &format!(
                    "gdrdrv_{}_{}",
                    how.to_lowercase(),
                    label.replace(' ', "").to_lowercase()
                ),
                &format!("gdrdrv pin + map + unpin, {how} ({label})"),
                series(reps, once)?,
            ));
        }
        c(cuda.mem_free(b))?;
    }
    Ok(())
}

/// `/dev/gdrdrv`'s pins without a mapping, 64 KiB, as the `/dev/gdrpeer` ones of P1 to P3:
/// its null ioctl (GET_VERSION), a cache hit (PIN_BUFFER_V2 timed, UNPIN_BUFFER not), pin +
/// unpin cached, and NOCACHE against nvsim's own cost in it.
fn gdrdrv_pins(
    g_: &Gdrdrv,
    cuda: &Cuda,
    cfg: &Config,
    ops: &mut Vec<Op>,
    nv_costs: &mut Vec<NvCost>,
) -> Result<(), String> {
    let len = 64 * K as u64;
    ops.push(op(
        "gdrdrv_null",
        "gdrdrv null ioctl (GET_VERSION)",
        series(cfg.reps, || Ok(timed(|| g(g_.version(), "GET_VERSION"))?.1))?,
    ));
    let b = c(cuda.mem_alloc(len as usize))?;
    g(g_.pin_v2(b, len, 0), "PIN_BUFFER_V2").and_then(|h| g(g_.unpin(h), "UNPIN_BUFFER"))?;
    ops.push(op(
        "gdrdrv_hit",
        "gdrdrv PIN_BUFFER_V2, cache hit (64 KiB)",
        series(cfg.reps, || {
            let (h, t) = timed(|| g(g_.pin_v2(b, len, 0), "PIN_BUFFER_V2"))?;
            g(g_.unpin(h), "UNPIN_BUFFER")?;
            Ok(t)
        })?,
    ));
    let pin_unpin = |flags| {
        move || -> Result<Duration, String> {
            Ok(timed(|| {
                let h = g(g_.pin_v2(b, len, flags), "PIN_BUFFER_V2")?;
                g(g_.unpin(h), "UNPIN_BUFFER")
            })?
            .1)
        }
    };
    ops.push(op(
        "gdrdrv_reuse_cached_64k",
        "gdrdrv pin + unpin, cached (64 KiB, no mmap)",
        series(cfg.reps, pin_unpin(0))?,
    ));
    let key = "gdrdrv_reuse_nocache_64k";
    let (latency, cost) = nv_series(
        key,
        cfg.slow_reps,
        pin_unpin(gdrdrv::PIN_FLAG_GDRPEER_NOCACHE),
    )?;
    nv_costs.extend(cost);
    ops.push(op(
        key,
        "gdrdrv pin + unpin, NOCACHE (64 KiB, no mmap)",
        latency,
    ));
    c(cuda.mem_free(b))
}

/// Everything above and gdrcopy's apiperf loop ([`crate::apiperf`]): the operations
/// (mapping latency, gdrdrv) into `ops`, nvsim's cost in gdrdrv's misses into `nv_costs`;
/// returns the copy sweep and the apiperf loop's phases. Without `/dev/gdrdrv`, says so in
/// `skipped`.
pub fn run(
    dev: &Device,
    cuda: &Cuda,
    cfg: &Config,
    ops: &mut Vec<Op>,
    nv_costs: &mut Vec<NvCost>,
    skipped: &mut Vec<String>,
    interleaved: &mut Vec<crate::report::Interleaved>,
) -> Result<(Vec<CopyPoint>, Vec<ApiPerf>), String> {
    map_latency(dev, cuda, cfg, ops)?;
    let copies = copies(dev, cuda, cfg)?;
    let mut apiperf = Vec::new();
    match Gdrdrv::open_default() {
        Ok(gd) => {
            gdrdrv_pins(&gd, cuda, cfg, ops, nv_costs)?;
            gdrdrv_pin_map_unpin(&gd, cuda, cfg, ops)?;
            apiperf = crate::apiperf::run(&gd, cuda, cfg, ops, interleaved)?;
        }
        Err(e) => skipped.push(format!("gdrdrv pins and the apiperf loop: {e}")),
    }
    Ok((copies, apiperf))
}

/// The bandwidth of `bytes` in `latency`'s median, in MB/s (10^6 bytes a second).
pub fn mb_per_s(bytes: u64, latency: &Latency) -> f64 {
    if latency.median_ns == 0 {
        return 0.0;
    }
    bytes as f64 * 1000.0 / latency.median_ns as f64
}
