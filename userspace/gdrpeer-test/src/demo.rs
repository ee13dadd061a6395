// SPDX-License-Identifier: GPL-2.0

//! `gdrpeer-test --demo`: the main job told step by step (`make demo`): pin GPU memory, serve
//! a second request from the cache, let the driver free the memory under the pin, show the
//! counters. The other demos: the sample NIC's round trip (`--demo-nic`), a CPU mapping
//! (`--demo-mmap`), a dma-buf the NIC imports (`--demo-dmabuf`), and a persistent one that a
//! NIC which cannot be invalidated imports (`--demo-dmabuf-pinned`).

use crate::helpers::{dev, edu, ok, K64};
use crate::nic::Nic;
use crate::sanity::c;
use gdrpeer::regcache::PointerInfo;
use gdrpeer::{PinFlags, Stats};
use nvsim::testing::{debugfs, errno, freed_page_writes, stat, TestResult};
use nvsim::Gpu;

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
        "    nvsim: {} pins; gdrpeer: {} DMA-mapped pages",
        stat("pins_live")?,
        crate::helpers::gstat("dma_pages_mapped")?
    );
    std::thread::sleep(std::time::Duration::from_millis(50));
    show_stats(&ok(d.stats(), "stats")?);
    ok(d.unpin(c.handle), "unpin")?;
    Ok(())
}

fn show_bytes(what: &str, b: &[u8]) {
    println!("    {what}: \"{}\"", String::from_utf8_lossy(b));
}

/// `gdrpeer-test --demo-nic`: a GPU -> NIC -> GPU round trip through the sample NIC driver
/// (gdrnic.ko), which gets its DMA addresses from gdrpeer's kernel API and moves the bytes
/// with the edu device's DMA engine, peer to peer on the emulated PCI bus.
pub fn nic() -> TestResult {
    const MSG: &[u8] = b"GPU memory, written by the CPU through nvsim's BAR mapping";
    println!("# a process allocates 256 KiB of GPU memory and writes a message into it");
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(4 * K64).map_err(errno)?;
    let at = 2 * K64 - 20;
    gpu.write(va + at, MSG).map_err(errno)?;
    println!("    GPU va {va:#x}; message at va + {at:#x}, across a 64 KiB page boundary");

    println!("# it registers the buffer with the NIC (/dev/gdrnic -> gdrpeer_mr_pin)");
    let n = Nic::open().map_err(|e| format!("/dev/gdrnic: {e}"))?;
    let mr = n.reg(va + 100, 4 * K64 - 100).map_err(errno)?;
    println!(
        "    registration {}: aligned va {:#x} + offset {}, {} pages of {} KiB",
        mr.handle,
        mr.aligned_va,
        mr.offset,
        mr.dma.len(),
        mr.page_size >> 10
    );
    for (i, a) in mr.dma.iter().enumerate() {
        println!("    page {i}: DMA address for the edu device {a:#x}");
    }

    println!("# SEND: the NIC reads the message from the GPU BAR by DMA");
    let off = at - 100;
    let sent = n.send(mr.handle, off, MSG.len()).map_err(errno)?;
    show_bytes("the NIC got", &sent);
    if sent != MSG {
        return Err("the NIC got other bytes than the GPU holds".into());
    }

    println!("# RECEIVE: the NIC writes a reply into GPU memory by DMA");
    let reply = b"reply from the NIC, written by edu's DMA into the GPU BAR";
    n.recv(mr.handle, off, reply).map_err(errno)?;
    let back = gpu.read(va + at, reply.len()).map_err(errno)?;
    show_bytes("GPU memory now holds", &back);
    if back != reply {
        return Err("GPU memory does not hold the reply".into());
    }
    let stats = std::fs::read_to_string("/sys/kernel/debug/gdrnic/stats")
        .map_err(|e| format!("gdrnic/stats: {e}"))?;
    println!("# the NIC's counters (debugfs gdrnic/stats)");
    for l in stats.lines() {
        println!("    {l}");
    }
    println!(
        "    nvsim: {} get_pages calls; gdrpeer: {} DMA-mapped pages",
        stat("get_pages_calls")?,
        crate::helpers::gstat("dma_pages_mapped")?
    );
    n.dereg(mr.handle).map_err(errno)?;
    Ok(())
}

/// `gdrpeer-test --demo-mmap`: the CPU writes GPU memory through a mapping of a pinned
/// buffer, cuMemcpyDtoH reads the bytes back, then cuMemFree withdraws the mapping. The
/// program runs in a child process of its own ([`mmap_child`]) because its last touch of
/// the mapping, after the free, kills it with SIGBUS, which this process reports.
pub fn mmap() -> TestResult {
    use std::os::unix::process::ExitStatusExt;
    let writes = freed_page_writes()?;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let status = std::process::Command::new(exe)
        .arg("--demo-mmap-child")
        .status()
        .map_err(|e| e.to_string())?;
    println!("# the program's end, as its parent saw it");
    match status.signal() {
        Some(libc::SIGBUS) => println!(
            "    killed by SIGBUS (signal {}): the mapping was withdrawn when the memory was \
             freed; the touch faulted instead of reaching memory that is no longer the buffer",
            libc::SIGBUS
        ),
        _ => return Err(format!("the program ended otherwise: {status}")),
    }
    let now = freed_page_writes()?;
    println!("    nvsim: {} writes into freed GPU pages", now - writes);
    if now != writes {
        return Err("a write reached freed GPU memory".into());
    }
    Ok(())
}

/// The program [`mmap`] runs: CUDA's view and the mapping's of the same bytes, then a free
/// under the mapping and a touch after it (SIGBUS: it does not return).
pub fn mmap_child() -> TestResult {
    use gdrpeer::EventSource;
    const MSG: &[u8] = b"written by the CPU through a mapping of GPU memory";
    crate::sanity::load()?;
    let cu = crate::sanity::cu();
    println!("# a program allocates 2 MiB with cuMemAlloc and pins 200 KiB of it");
    println!("#   (an allocation of its own: freeing a smaller one, carved from a shared block,");
    println!("#   need not call anything back)");
    let p = cu.mem_alloc(nvsim::POOL_BLOCK as usize).map_err(c)?;
    let d = dev()?;
    let pin = ok(d.pin(p, 200 << 10, PinFlags::empty()), "pin")?;
    println!(
        "    buffer {p:#x}: handle {}, window {:#x} + offset {:#x}, {} pages of {} KiB",
        pin.handle,
        pin.aligned_va,
        pin.offset,
        pin.page_count,
        pin.page_size >> 10
    );
    println!("# it maps the window (mmap of /dev/gdrpeer) and writes a message through it");
    let window = u64::from(pin.page_count) * u64::from(pin.page_size);
    let m = ok(d.map(pin.handle, 0, window as usize), "map")?;
    let at = pin.offset as usize + 70000;
    m.write(at, MSG);
    println!(
        "    {} bytes at buffer + 70000, through the CPU mapping at {:p}",
        MSG.len(),
        m.as_ptr()
    );
    println!("# cuMemcpyDtoH reads them back from GPU memory");
    let mut back = vec![0u8; MSG.len()];
    cu.copy_from_device(&mut back, p + 70000).map_err(c)?;
    show_bytes("cuMemcpyDtoH", &back);
    if back != MSG {
        return Err("cuMemcpyDtoH read other bytes than the mapping wrote".into());
    }
    println!("# cuMemFree while the buffer is pinned and mapped: NVIDIA's free callback");
    cu.mem_free(p).map_err(c)?;
    let info = ok(d.info(pin.handle), "info")?;
    println!("    handle {}: state {:?}", pin.handle, info.state);
    if crate::stress::events_supported()? {
        for e in ok(d.try_read_events(), "events")? {
            println!("    event: handle {} {:?}", e.handle, e.kind);
        }
    }
    println!("# the program touches the mapping again");
    m.write(at, b"?");
    Err("the touch after cuMemFree went through".into())
}

/// gdrnic's dma-buf counters, one line.
fn show_dmabuf_counters() -> TestResult {
    let n = |k| crate::nic::nstat(k);
    println!(
        "    gdrnic: {} dma-buf imports, {} maps, {} invalidations; nvsim: {} pins; gdrpeer: \
         {} DMA-mapped pages",
        n("dmabuf_imports")?,
        n("dmabuf_maps")?,
        n("dmabuf_invalidations")?,
        stat("pins_live")?,
        crate::helpers::gstat("dma_pages_mapped")?
    );
    Ok(())
}

/// Loads (simulated) libcuda, allocates 2 MiB (an allocation of its own, whose cuMemFree
/// calls back) and writes `msg` at `at` with cuMemcpyHtoD. Returns libcuda and the buffer.
fn alloc_with_message(msg: &[u8], at: u64) -> Result<(&'static gdrpeer::cuda::Cuda, u64), String> {
    crate::sanity::load()?;
    let cu = crate::sanity::cu();
    println!("# a program allocates 2 MiB with cuMemAlloc, sets SYNC_MEMOPS on it (so that a copy");
    println!("#   is in the memory when it returns, where a peer reads it) and writes a message");
    println!("#   with cuMemcpyHtoD");
    let p = cu.mem_alloc(nvsim::POOL_BLOCK as usize).map_err(c)?;
    cu.set_sync_memops(p)
        .map_err(|e| format!("SYNC_MEMOPS: {e:?}"))?;
    cu.copy_to_device(p + at, msg).map_err(c)?;
    Ok((cu, p))
}

/// `gdrpeer-test --demo-dmabuf`: GPU -> NIC -> GPU through a dma-buf that gdrpeer exports
/// (EXPORT_DMABUF) and the sample NIC imports as an RDMA driver imports one for
/// ibv_reg_dmabuf_mr(); then cuMemFree while it is imported: the importer is invalidated
/// before the memory goes, and the NIC can no longer reach it.
pub fn dmabuf() -> TestResult {
    use rustix::fd::AsRawFd;
    const MSG: &[u8] = b"written with cuMemcpyHtoD, read by the NIC through a dma-buf";
    let at = 2 * K64 - 20;
    let (cu, p) = alloc_with_message(MSG, at)?;
    println!("    buffer {p:#x}; message at + {at:#x}, across a 64 KiB page boundary");

    println!("# EXPORT_DMABUF of 200 KiB from buffer + 100: a dma-buf of whole GPU pages");
    let d = dev()?;
    let buf = ok(d.export_dmabuf_range(p + 100, 200 << 10), "export")?;
    println!(
        "    fd {}: GPU va {:#x}, {} pages, {} KiB; the buffer + 100 is at offset {}",
        buf.fd.as_raw_fd(),
        buf.aligned_va,
        buf.page_count,
        buf.size >> 10,
        buf.offset
    );
    let fdinfo = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", buf.fd.as_raw_fd()))
        .map_err(|e| e.to_string())?;
    for l in fdinfo
        .lines()
        .filter(|l| l.starts_with("exp_name") || l.starts_with("size"))
    {
        println!("    fdinfo: {}", l.replace('\t', " "));
    }
    println!("# the program closes /dev/gdrpeer: the dma-buf holds the memory pinned itself");
    drop(d);

    println!("# the NIC imports it (/dev/gdrnic REG_DMABUF: a dynamic attachment, peer to peer)");
    let n = Nic::open().map_err(|e| format!("/dev/gdrnic: {e}"))?;
    let mr = n
        .reg_dmabuf(buf.fd.as_raw_fd(), 0, buf.offset, 200 << 10)
        .map_err(errno)?;
    println!(
        "    registration {}: mapped in {} DMA segment(s)",
        mr.handle, mr.nents
    );
    show_dmabuf_counters()?;

    println!("# SEND: the NIC reads the message from the GPU BAR by DMA");
    let off = at - 100;
    let sent = n.send(mr.handle, off, MSG.len()).map_err(errno)?;
    show_bytes("the NIC got", &sent);
    if sent != MSG {
        return Err("the NIC got other bytes than cuMemcpyHtoD wrote".into());
    }
    println!("# RECEIVE: the NIC writes a reply; cuMemcpyDtoH reads it");
    let reply = b"reply from the NIC, written by DMA into the dma-buf's pages";
    n.recv(mr.handle, off, reply).map_err(errno)?;
    let mut back = vec![0u8; reply.len()];
    cu.copy_from_device(&mut back, p + at).map_err(c)?;
    show_bytes("cuMemcpyDtoH", &back);
    if back != reply {
        return Err("cuMemcpyDtoH does not find the reply".into());
    }

    println!("# cuMemFree while the NIC has the dma-buf imported: NVIDIA's free callback");
    let before = crate::nic::nstat("dmabuf_invalidations")?;
    cu.mem_free(p).map_err(c)?;
    println!(
        "    the NIC was invalidated {} time(s) before cuMemFree returned",
        crate::nic::nstat("dmabuf_invalidations")? - before
    );
    show_dmabuf_counters()?;
    match n.send(mr.handle, off, MSG.len()) {
        Ok(_) => return Err("the NIC still reached freed memory".into()),
        Err(e) => println!("    SEND now: {e}"),
    }
    match n.reg_dmabuf(buf.fd.as_raw_fd(), 0, 0, K64) {
        Ok(_) => return Err("a new import of freed memory succeeded".into()),
        Err(e) => println!("    a new import now: {e}"),
    }
    println!("# the NIC drops the registration and the program closes the dma-buf and the NIC");
    n.dereg(mr.handle).map_err(errno)?;
    drop(buf);
    drop(n);
    crate::helpers::gdrpeer_idle()?;
    show_dmabuf_counters()?;
    println!(
        "    nvsim: {} writes into freed GPU pages",
        freed_page_writes()?
    );
    Ok(())
}

/// `gdrpeer-test --demo-dmabuf-pinned`: an importer that cannot be invalidated (the shape of
/// ib_umem_dmabuf_get_pinned, as efa, mana or bnxt_re import) is refused a normal export and
/// takes a persistent one (EXPORT_PERSISTENT); cuMemFree under it invalidates no one, the NIC
/// still moves the bytes that were there, and the memory goes only when the dma-buf does.
pub fn dmabuf_pinned() -> TestResult {
    use crate::nic::DMABUF_PINNED_NOREVOKE;
    use rustix::fd::AsRawFd;
    const MSG: &[u8] = b"still here after cuMemFree: the dma-buf holds a persistent pin";
    let (cu, p) = alloc_with_message(MSG, K64)?;
    println!("    buffer {p:#x}; message at + {K64:#x}");
    let d = dev()?;
    let n = Nic::open().map_err(|e| format!("/dev/gdrnic: {e}"))?;

    println!("# a normal export: the NIC's pinned import without an invalidate op is refused");
    let normal = ok(d.export_dmabuf_range(p, 4 * K64), "export")?;
    match n.reg_dmabuf(normal.fd.as_raw_fd(), DMABUF_PINNED_NOREVOKE, 0, 4 * K64) {
        Ok(_) => return Err("a normal export took an importer that cannot be invalidated".into()),
        Err(e) => println!("    REG_DMABUF (pinned, no invalidate op): {e}"),
    }
    drop(normal);

    println!("# EXPORT_DMABUF with EXPORT_PERSISTENT: the dma-buf owns a persistent pin");
    let pins0 = stat("persistent_pins_live")?;
    let buf = ok(d.export_dmabuf_persistent(p, 4 * K64), "persistent export")?;
    println!(
        "    fd {}: {} pages, {} KiB; nvsim: {} persistent pin(s)",
        buf.fd.as_raw_fd(),
        buf.page_count,
        buf.size >> 10,
        stat("persistent_pins_live")? - pins0
    );
    drop(d);
    let mr = n
        .reg_dmabuf(buf.fd.as_raw_fd(), DMABUF_PINNED_NOREVOKE, 0, 4 * K64)
        .map_err(errno)?;
    println!(
        "    the NIC's pinned import: registration {}, {} DMA segment(s)",
        mr.handle, mr.nents
    );

    println!("# cuMemFree while the NIC holds it: no callback, no invalidation");
    let (inval, callbacks, writes) = (
        crate::nic::nstat("dmabuf_invalidations")?,
        stat("callbacks_fired")?,
        freed_page_writes()?,
    );
    cu.mem_free(p).map_err(c)?;
    let (inval, callbacks) = (
        crate::nic::nstat("dmabuf_invalidations")? - inval,
        stat("callbacks_fired")? - callbacks,
    );
    println!("    {inval} invalidation(s), {callbacks} free callback(s)");
    if (inval, callbacks) != (0, 0) {
        return Err("cuMemFree reached the persistent export's importer".into());
    }

    println!("# SEND after cuMemFree: the pages are still the dma-buf's, the message in them");
    let sent = n.send(mr.handle, K64, MSG.len()).map_err(errno)?;
    show_bytes("the NIC got", &sent);
    if sent != MSG {
        return Err("the NIC got other bytes than were there before cuMemFree".into());
    }
    let reply = b"written after cuMemFree, into pages the dma-buf still holds";
    n.recv(mr.handle, 2 * K64, reply).map_err(errno)?;
    let back = n.send(mr.handle, 2 * K64, reply.len()).map_err(errno)?;
    show_bytes("RECEIVE, then SEND back", &back);
    if back != reply {
        return Err("the bytes received after cuMemFree did not stay".into());
    }

    println!("# the NIC deregisters and the program closes the dma-buf: the pin goes back");
    n.dereg(mr.handle).map_err(errno)?;
    drop(buf);
    drop(n);
    crate::helpers::gdrpeer_idle()?;
    let (pins, wrote) = (
        stat("persistent_pins_live")?.wrapping_sub(pins0),
        freed_page_writes()?.wrapping_sub(writes),
    );
    println!("    nvsim: {pins} persistent pin(s), {wrote} writes into freed GPU pages");
    if (pins, wrote) != (0, 0) {
        return Err("a pin left, or a write into freed GPU pages".into());
    }
    Ok(())
}
