// SPDX-License-Identifier: GPL-2.0

//! The dma-buf benchmarks, with the sample NIC (gdrnic.ko) as importer: what a NIC's
//! registration of 64 KiB of GPU memory costs through a dma-buf (EXPORT_DMABUF, then the
//! NIC's attach and map, as ibv_reg_dmabuf_mr() makes them) against gdrpeer's kernel API
//! (`gdrpeer_mr_pin`), on a cached region and when every use pins anew.

use crate::measure::{c, g, op, series, timed, Config};
use crate::report::Op;
use gdrpeer::{cuda::Cuda, Device, PinFlags};
use nvsim::gdrnic::{Nic, DMABUF_KAPI};
use rustix::{fd::AsRawFd, io::Errno};

const K64: u64 = 1 << 16;

/// A NIC call's result, its error named.
fn n<T>(r: Result<T, Errno>, what: &str) -> Result<T, String> {
    r.map_err(|e| format!("{what}: {e}"))
}

/// GPU memory whose first 64 KiB are a GPU page of its own: allocations of a pool block or
/// more are not carved out of a shared block.
fn own_page(cuda: &Cuda) -> Result<u64, String> {
    c(cuda.mem_alloc(nvsim::POOL_BLOCK as usize))
}

/// The measurements, on `nic` and a file of gdrpeer's of their own.
fn measure(nic: &Nic, cuda: &Cuda, cfg: &Config, ops: &mut Vec<Op>) -> Result<(), String> {
    let dev = g(Device::open_default(), "open")?;
    let hit_buf = own_page(cuda)?;
    let miss_buf = own_page(cuda)?;

    // The NIC's own registration, gdrpeer_mr_pin() in the NIC's context: a hit once the
    // first (untimed) one has pinned the region and DMA-mapped it for the NIC.
    ops.push(op(
        "nic_reg_hit",
        "NIC REG + DEREG, kernel API, cache hit (64 KiB)",
        series(cfg.reps, || {
            Ok(timed(|| {
                let mr = n(nic.reg(hit_buf, K64), "REG")?;
                n(nic.dereg(mr.handle), "DEREG")
            })?
            .1)
        })?,
    ));

    // A handle on a cached region, exported again and again; the region's DMA mapping for
    // the NIC is made by the first attach and kept with the region.
    let pin = g(dev.pin(hit_buf, K64, PinFlags::empty()), "pin")?;
    ops.push(op(
        "dmabuf_export_close",
        "EXPORT_DMABUF + close, cache hit (64 KiB)",
        series(cfg.reps, || {
            Ok(timed(|| {
                g(dev.export_dmabuf(pin.handle), "EXPORT_DMABUF")?;
                Ok(())
            })?
            .1)
        })?,
    ));
    ops.push(op(
        "dmabuf_hit",
        "dma-buf hit: export + REG_DMABUF + DEREG + close (64 KiB)",
        series(cfg.reps, || {
            Ok(timed(|| {
                let buf = g(dev.export_dmabuf(pin.handle), "EXPORT_DMABUF")?;
                let mr = n(
                    nic.reg_dmabuf(buf.fd.as_raw_fd(), 0, buf.offset, K64),
                    "REG_DMABUF",
                )?;
                n(nic.dereg(mr.handle), "DEREG")
            })?
            .1)
        })?,
    ));
    g(dev.unpin(pin.handle), "unpin")?;

    // The NIC exports the range itself (gdrpeer_dmabuf_export(): a pin in its context, a hit
    // here) and imports it; DEREG puts the last reference, which releases the dma-buf.
    ops.push(op(
        "dmabuf_kapi_hit",
        "NIC REG_DMABUF (kernel API export) + DEREG, hit (64 KiB)",
        series(cfg.reps, || {
            Ok(timed(|| {
                let mr = n(
                    nic.reg_dmabuf(-1, DMABUF_KAPI, hit_buf, K64),
                    "REG_DMABUF (kernel API export)",
                )?;
                n(nic.dereg(mr.handle), "DEREG")
            })?
            .1)
        })?,
    ));

    // Every use pins anew: NVIDIA's pin, the DMA mapping at attach, NVIDIA's unpin at UNPIN.
    ops.push(op(
        "dmabuf_miss",
        "dma-buf miss: PIN NOCACHE, export, import, UNPIN (64 KiB)",
        series(cfg.slow_reps, || {
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
        })?,
    ));

    // Closing the file unpins what it cached; the NIC's context keeps its region until the
    // memory is freed.
    drop(dev);
    c(cuda.mem_free(hit_buf))?;
    c(cuda.mem_free(miss_buf))
}

/// The dma-buf and NIC registration measurements. Without `/dev/gdrnic` (gdrnic.ko not
/// loaded), says so in `skipped`.
pub fn run(cuda: &Cuda, cfg: &Config, skipped: &mut Vec<String>) -> Result<Vec<Op>, String> {
    let mut ops = Vec::new();
    match Nic::open() {
        Ok(nic) => measure(&nic, cuda, cfg, &mut ops)?,
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
