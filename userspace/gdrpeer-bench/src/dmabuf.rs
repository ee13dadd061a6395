// SPDX-License-Identifier: GPL-2.0

//! The dma-buf benchmarks, with the sample NIC (gdrnic.ko) as importer: what a NIC's
//! registration of 64 KiB of GPU memory costs through a dma-buf (EXPORT_DMABUF, then the
//! NIC's attach and map, as ibv_reg_dmabuf_mr() makes them) against gdrpeer's kernel API
//! (`gdrpeer_mr_pin`), on a cached region and when every use pins anew.

use crate::interleave::{self, Step, ROUNDS};
use crate::measure::{c, g, nv_stats, op, pin_unpin, series, timed, Config, WARMUP};
use crate::report::{Interleaved, Op};
use gdrpeer::{cuda::Cuda, Device, PinFlags};
use nvsim::gdrnic::{nstat, Nic, DMABUF_KAPI};
use rustix::{fd::AsRawFd, io::Errno};
use std::time::Duration;

const K64: u64 = 1 << 16;

/// What a repetition calls: NVIDIA's pin (nvsim's `get_pages_calls`), gdrpeer's DMA mapping
/// of the page (its `dma_page_maps_made`) and the importer's map of the dma-buf (gdrnic's
/// `dmabuf_maps`).
type Calls = [u64; 3];
const NONE: Calls = [0, 0, 0];
const IMPORT: Calls = [0, 0, 1];
/// A kernel-API hit without the mapping cache (`dma_map_keep=0`): the pin maps, the unpin
/// unmaps.
const MAP_ONLY: Calls = [0, 1, 0];
const PIN_AND_IMPORT: Calls = [1, 1, 1];

fn calls() -> Result<Calls, String> {
    let [pins] = nv_stats(["get_pages_calls"])?;
    let maps = nvsim::testing::name_values("/sys/kernel/debug/gdrpeer/stats")?
        .get("dma_page_maps_made")
        .copied()
        .ok_or("gdrpeer: no counter dma_page_maps_made")?;
    Ok([pins, maps, nstat("dmabuf_maps")?])
}

/// A NIC call's result, its error named.
fn n<T>(r: Result<T, Errno>, what: &str) -> Result<T, String> {
    r.map_err(|e| format!("{what}: {e}"))
}

/// `series` of `f`, which must make `per_rep` calls each time: a hit that pinned or
/// DMA-mapped, or an import that did not map, would measure something else.
fn checked(
    key: &str,
    what: &str,
    reps: usize,
    per_rep: Calls,
    f: impl FnMut() -> Result<Duration, String>,
) -> Result<Op, String> {
    let before = calls()?;
    let latency = series(reps, f)?;
    let after = calls()?;
    let times = (WARMUP + reps) as u64;
    let made: Calls = std::array::from_fn(|i| after[i] - before[i]);
    if made != per_rep.map(|k| k * times) {
        return Err(format!(
            "{what}: {} nv-p2p pins, {} DMA mappings and {} dma-buf maps in {times} \
             repetitions, expected {}, {} and {} each",
            made[0], made[1], made[2], per_rep[0], per_rep[1], per_rep[2]
        ));
    }
    Ok(op(key, what, latency))
}

/// GPU memory whose first 64 KiB are a GPU page of its own: allocations of a pool block or
/// more are not carved out of a shared block.
fn own_page(cuda: &Cuda) -> Result<u64, String> {
    c(cuda.mem_alloc(nvsim::POOL_BLOCK as usize))
}

/// The time of the NIC's REG + DEREG of 64 KiB at `buf`: gdrpeer_mr_pin() and
/// gdrpeer_mr_unpin() in the NIC's context.
fn reg_dereg(nic: &Nic, buf: u64) -> Result<Duration, String> {
    Ok(timed(|| {
        let mr = n(nic.reg(buf, K64), "REG")?;
        n(nic.dereg(mr.handle), "DEREG")
    })?
    .1)
}

/// Registrations a REG_LOOP makes, one system call for them all.
pub const KAPI_LOOP: u32 = 16;

/// The time of one gdrpeer_mr_pin() + gdrpeer_mr_unpin() of 64 KiB at `buf` (every second
/// one at `buf + stride`, unless `stride` is 0) in the NIC's context, called by the NIC
/// itself: a REG_LOOP of [`KAPI_LOOP`] timed whole, divided by their number (the system call,
/// a sixteenth, stays in).
fn kapi_hit(nic: &Nic, buf: u64, stride: u64) -> Result<Duration, String> {
    Ok(timed(|| n(nic.reg_loop(buf, K64, stride, KAPI_LOOP), "REG_LOOP"))?.1 / KAPI_LOOP)
}

/// A NIC null ioctl, timed.
fn nic_null(nic: &Nic) -> Result<Duration, String> {
    Ok(timed(|| n(nic.null_ioctl(), "null ioctl"))?.1)
}

/// P7: the kernel-API hit (REG_LOOP), the NIC's REG + DEREG of a cached region, its null
/// ioctl and a PIN + UNPIN of a region cached in `dev`, in turn ([`interleave`]); checked to
/// pin, DMA-map and import nothing.
fn p7(
    nic: &Nic,
    dev: &Device,
    cuda: &Cuda,
    cfg: &Config,
    reg_buf: u64,
) -> Result<Interleaved, String> {
    let pin_buf = own_page(cuda)?;
    let pin_hit = || pin_unpin(dev, pin_buf, K64, PinFlags::empty());
    pin_hit()?;
    // A second region for the NIC: registrations that alternate between the two are hits of
    // the cache, never of the registration the last unpin kept.
    let other_buf = own_page(cuda)?;
    let stride = other_buf.wrapping_sub(reg_buf);
    kapi_hit(nic, reg_buf, stride)?;
    let block = cfg.reps / ROUNDS;
    let before = calls()?;
    let r = interleave::measure(
        "P7",
        "kernel-API hit in the NIC, NIC REG + DEREG, NIC null ioctl, /dev/gdrpeer PIN + \
         UNPIN; cache hits",
        vec![
            Step::new(
                "nic_kapi_hit",
                "gdrpeer_mr_pin + gdrpeer_mr_unpin in the NIC, hit",
                block.div_ceil(KAPI_LOOP as usize),
                || kapi_hit(nic, reg_buf, 0),
            ),
            Step::new(
                "nic_kapi_hit_alternating",
                "gdrpeer_mr_pin + gdrpeer_mr_unpin in the NIC, two regions in turn, hits",
                block.div_ceil(KAPI_LOOP as usize),
                || kapi_hit(nic, reg_buf, stride),
            ),
            Step::new("nic_reg_hit", "NIC REG + DEREG, hit", block, || {
                reg_dereg(nic, reg_buf)
            }),
            Step::new("nic_null", "NIC null ioctl", block, || nic_null(nic)),
            Step::new("reuse_cached_64k", "PIN + UNPIN, hit", block, pin_hit),
        ],
        interleave::kapi_loop_quotient,
    )?;
    let after = calls()?;
    let made: Calls = std::array::from_fn(|i| after[i] - before[i]);
    if made != NONE {
        return Err(format!(
            "P7, interleaved: {} nv-p2p pins, {} DMA mappings and {} dma-buf maps, expected none",
            made[0], made[1], made[2]
        ));
    }
    c(cuda.mem_free(pin_buf))?;
    c(cuda.mem_free(other_buf))?;
    Ok(r)
}

/// The measurements, on `nic` and a file of gdrpeer's of their own.
fn measure(
    nic: &Nic,
    cuda: &Cuda,
    cfg: &Config,
    ops: &mut Vec<Op>,
    interleaved: &mut Vec<Interleaved>,
) -> Result<(), String> {
    let dev = g(Device::open_default(), "open")?;
    let hit_buf = own_page(cuda)?;
    let miss_buf = own_page(cuda)?;

    // A system call into the NIC's driver that does nothing: what REG and DEREG pay besides
    // the kernel API's work (P7 takes two of them off a registration).
    ops.push(checked(
        "nic_null",
        "NIC null ioctl (an unknown command: ENOTTY)",
        cfg.reps,
        NONE,
        || nic_null(nic),
    )?);

    // The NIC's own registration, gdrpeer_mr_pin() in the NIC's context: a hit once the
    // first one has pinned the region and DMA-mapped it for the NIC.
    let nic_reg = || reg_dereg(nic, hit_buf);
    nic_reg()?;
    ops.push(checked(
        "nic_reg_hit",
        "NIC REG + DEREG, kernel API, cache hit (64 KiB)",
        cfg.reps,
        NONE,
        nic_reg,
    )?);
    // The same registration made by the NIC in the kernel, without its ioctls: the kernel
    // API's own cost (P7).
    ops.push(checked(
        "nic_kapi_hit",
        "gdrpeer_mr_pin + gdrpeer_mr_unpin in the NIC (REG_LOOP), cache hit (64 KiB)",
        cfg.reps / KAPI_LOOP as usize,
        NONE,
        || kapi_hit(nic, hit_buf, 0),
    )?);
    interleaved.push(p7(nic, &dev, cuda, cfg, hit_buf)?);
    // The same without the mapping cache: measured by `nic-hit` with gdrpeer reloaded.
    ops.push(match &cfg.no_mapping_cache {
        Ok(o) => o.clone(),
        Err(_) => Op {
            key: NO_MAPPING_CACHE_KEY.into(),
            what: NO_MAPPING_CACHE.into(),
            latency: Default::default(),
        },
    });

    // A handle on a region cached in `dev`'s context, exported again and again; the first
    // attach DMA-maps the region for the NIC, and the region keeps that mapping.
    let pin = g(dev.pin(hit_buf, K64, PinFlags::empty()), "pin")?;
    ops.push(checked(
        "dmabuf_export_close",
        "EXPORT_DMABUF + close, cache hit (64 KiB)",
        cfg.reps,
        NONE,
        || {
            Ok(timed(|| {
                g(dev.export_dmabuf(pin.handle), "EXPORT_DMABUF")?;
                Ok(())
            })?
            .1)
        },
    )?);
    let dmabuf_hit = || {
        Ok(timed(|| {
            let buf = g(dev.export_dmabuf(pin.handle), "EXPORT_DMABUF")?;
            let mr = n(
                nic.reg_dmabuf(buf.fd.as_raw_fd(), 0, buf.offset, K64),
                "REG_DMABUF",
            )?;
            n(nic.dereg(mr.handle), "DEREG")
        })?
        .1)
    };
    dmabuf_hit()?;
    ops.push(checked(
        "dmabuf_hit",
        "dma-buf hit: export + REG_DMABUF + DEREG + close (64 KiB)",
        cfg.reps,
        IMPORT,
        dmabuf_hit,
    )?);
    g(dev.unpin(pin.handle), "unpin")?;

    // The NIC exports the range itself (gdrpeer_dmabuf_export(): a pin in its context, which
    // hits the region of its REGs above) and imports it; DEREG puts the last reference to
    // the dma-buf, which releases it.
    let kapi_hit = || {
        Ok(timed(|| {
            let mr = n(
                nic.reg_dmabuf(-1, DMABUF_KAPI, hit_buf, K64),
                "REG_DMABUF (kernel API export)",
            )?;
            n(nic.dereg(mr.handle), "DEREG")
        })?
        .1)
    };
    kapi_hit()?;
    ops.push(checked(
        "dmabuf_kapi_hit",
        "NIC REG_DMABUF (kernel API export) + DEREG, hit (64 KiB)",
        cfg.reps,
        IMPORT,
        kapi_hit,
    )?);

    // Every use pins anew: NVIDIA's pin, the DMA mapping at attach, NVIDIA's unpin at UNPIN.
    ops.push(checked(
        "dmabuf_miss",
        "dma-buf miss: PIN NOCACHE, export, import, UNPIN (64 KiB)",
        cfg.slow_reps,
        PIN_AND_IMPORT,
        || {
            Ok(timed(|| {
                let p = g(dev.pin(miss_buf, K64, PinFlags::NOCACHE), "pin")?;
                let buf = g(dev.export_dmabuf(p.handle), "EXPORT_DMABUF")?;
                let mr = n(
                    nic.reg_dmabuf(buf.fd.as_raw_fd(), 0, buf.offset, K64),
                    "REG_DMABUF",
                )?;
                n(nic.dereg(mr.handle), "DEREG")?;
                drop(buf);
                g(dev.unpin(p.handle), "unpin")
            })?
            .1)
        },
    )?);

    // Closing the file unpins what it cached; the NIC's context keeps its region until the
    // memory is freed.
    drop(dev);
    c(cuda.mem_free(hit_buf))?;
    c(cuda.mem_free(miss_buf))
}

/// The key and the words of the kernel-API hit without the mapping cache.
const NO_MAPPING_CACHE_KEY: &str = "nic_kapi_hit_nokeep";
const NO_MAPPING_CACHE: &str =
    "gdrpeer_mr_pin + gdrpeer_mr_unpin in the NIC (REG_LOOP), cache hit, no mapping cache \
     (64 KiB)";

/// `gdrpeer-bench nic-hit`: the kernel-API hit of a cached region in the NIC (REG_LOOP) with
/// gdrpeer loaded with `dma_map_keep=0`, where each pin DMA-maps the region for the NIC and
/// each unpin unmaps it (checked: one DMA mapping a registration, no pin).
pub fn no_mapping_cache(cfg_reps: usize) -> Result<Op, String> {
    let cuda = Cuda::load().map_err(|e| format!("{e} (the benchmarks need a CUDA driver)"))?;
    let nic = n(Nic::open(), "/dev/gdrnic")?;
    let buf = own_page(&cuda)?;
    let hit = || kapi_hit(&nic, buf, 0);
    hit()?;
    let o = checked(
        NO_MAPPING_CACHE_KEY,
        NO_MAPPING_CACHE,
        cfg_reps / KAPI_LOOP as usize,
        MAP_ONLY.map(|k| k * u64::from(KAPI_LOOP)),
        hit,
    )?;
    c(cuda.mem_free(buf))?;
    Ok(o)
}

/// The dma-buf and NIC registration measurements. Without `/dev/gdrnic` (gdrnic.ko not
/// loaded), says so in `skipped`.
pub fn run(
    cuda: &Cuda,
    cfg: &Config,
    skipped: &mut Vec<String>,
    interleaved: &mut Vec<Interleaved>,
) -> Result<Vec<Op>, String> {
    let mut ops = Vec::new();
    match Nic::open() {
        Ok(nic) => {
            measure(&nic, cuda, cfg, &mut ops, interleaved)?;
            if let Err(why) = &cfg.no_mapping_cache {
                skipped.push(format!("{NO_MAPPING_CACHE}: {why}"));
            }
        }
        Err(e) => skipped.push(format!(
            "dma-buf and NIC registrations: /dev/gdrnic: {e}{}",
            if e == Errno::NOENT {
                " (gdrnic.ko not loaded)"
            } else {
                ""
            }
        )),
    }
    Ok(ops)
}
