// SPDX-License-Identifier: GPL-2.0

//! `gdrpeer-test --demo`: the main job told step by step (`make demo`): pin GPU memory, serve
//! a second request from the cache, let the driver free the memory under the pin, show the
//! counters.

use crate::{dev, edu, ok};
use gdrpeer::{PinFlags, Stats};
use nvsim::testing::{debugfs, errno, stat, TestResult};
use nvsim::Gpu;

const K64: u64 = 1 << 16;

fn show_stats(s: &Stats) {
    let f = &s.file;
    println!(
        "    this file: {} handles, {} regions, {} KiB pinned, {} hits, {} misses, {} callbacks",
        s.handles,
        f.regions,
        f.pinned_bytes >> 10,
        f.hits,
        f.misses,
        f.callbacks
    );
}

pub fn run() -> TestResult {
    println!("# a process allocates 1 MiB of (simulated) GPU memory and opens /dev/gdrpeer");
    let gpu = Gpu::open().map_err(errno)?;
    let (va, id) = gpu.alloc(16 * K64).map_err(errno)?;
    gpu.write(va + 0x1234, b"gdrpeer").map_err(errno)?;
    let d = dev()?;
    println!("    GPU va {va:#x}, buffer id {id}");

    println!("# PIN an unaligned 200 KiB window: gdrpeer widens it to 64 KiB pages");
    let a = ok(d.pin(va + 0x1234, 200 << 10, PinFlags::empty()), "pin")?;
    println!(
        "    handle {}: aligned va {:#x} + offset {:#x}, {} pages of {} KiB",
        a.handle,
        a.aligned_va,
        a.offset,
        a.page_count,
        a.page_size >> 10
    );
    for (i, pa) in ok(d.get_pages(a.handle), "get_pages")?.iter().enumerate() {
        println!("    page {i}: bus address {pa:#x}");
    }
    let dma = ok(d.dma_map(a.handle, edu()?), "dma_map")?;
    let dma: Vec<String> = dma.iter().map(|a| format!("{a:#x}")).collect();
    println!("    DMA addresses for the edu device: {}", dma.join(" "));
    println!(
        "    nvsim: {} pins, {} get_pages calls",
        stat("pins_live")?,
        stat("get_pages_calls")?
    );

    println!("# PIN a range inside it: a cache hit, no call into the driver");
    let b = ok(d.pin(va + 2 * K64, K64, PinFlags::empty()), "pin")?;
    println!(
        "    handle {}; nvsim: {} get_pages calls",
        b.handle,
        stat("get_pages_calls")?
    );
    show_stats(&ok(d.stats(), "stats")?);

    println!("# UNPIN both: lazy, the region stays pinned for the next request");
    ok(d.unpin(b.handle), "unpin")?;
    ok(d.unpin(a.handle), "unpin")?;
    println!("    nvsim: {} pins", stat("pins_live")?);
    let c = ok(d.pin(va, K64, PinFlags::empty()), "pin")?;

    println!("# the driver frees the memory (cuMemFree) under a live pin: the free callback");
    debugfs("free", &id.to_string())?;
    let info = ok(d.info(c.handle), "info")?;
    println!("    handle {}: state {:?}", c.handle, info.state);
    match d.get_pages(c.handle) {
        Ok(p) => return Err(format!("pages of a revoked pin: {p:?}")),
        Err(e) => println!("    {e}"),
    }
    println!(
        "    nvsim: {} pins, {} DMA mappings",
        stat("pins_live")?,
        stat("dma_mappings_live")?
    );
    std::thread::sleep(std::time::Duration::from_millis(50));
    show_stats(&ok(d.stats(), "stats")?);
    ok(d.unpin(c.handle), "unpin")?;
    Ok(())
}
