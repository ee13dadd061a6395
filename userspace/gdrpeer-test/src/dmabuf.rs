// SPDX-License-Identifier: GPL-2.0

//! gdrpeer's dma-buf export (EXPORT_DMABUF, ABI 1.4, and `gdrpeer_dmabuf_export()`) with the
//! sample NIC as importer (`gdrpeer-test --nic`, tests `gdrpeer-dmabuf-*`): GPU memory
//! written with (simulated) libcuda, moved by the NIC's DMA through the dma-buf and read back
//! with cuMemcpyDtoH; the memory freed under a transfer; the descriptor in another process;
//! every order of closing the dma-buf, its handle and the file; refused importers; exports
//! served from the cache; bad requests.
//!
//! Run with nvsim.ko, p2pclient.ko, gdrpeer.ko and gdrnic.ko loaded, and libcuda.so.1.

use crate::helpers::ErrnoOf;
use crate::helpers::{
    check_dma_kind, check_dma_reaches, dev, edu, eventually, fails, gdrpeer_idle, gstat, ok,
    p2pclient_addresses, param, pattern, K64,
};
use crate::nic::{
    expect_err, nic, no_stray_dma_writes, nstat, under_way, DmabufMr, Nic, DMABUF_KAPI,
    DMABUF_KAPI_PERSISTENT, DMABUF_NO_INVALIDATE, DMABUF_NO_P2P, DMABUF_PINNED,
    DMABUF_PINNED_NOREVOKE,
};
use crate::proc;
use crate::sanity::{self, c, cu, DevMem, OWN_ALLOCATION};
use crate::tests::badinput::{fork_errno, in_child, wait_errno};
use gdrpeer::{uapi, Device, Dmabuf, PinFlags};
use nvsim::testing::{errno, freed_page_writes, stat, Test, TestResult};
use nvsim::{check, check_eq};
use rustix::{
    fd::{AsFd, AsRawFd, BorrowedFd},
    io::Errno,
    ioctl,
};
use std::time::{Duration, Instant};

/// How the NIC comes by the dma-buf.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Import {
    /// EXPORT_DMABUF, then a dynamic import of the descriptor (as ib_umem_dmabuf does).
    Dynamic,
    /// EXPORT_DMABUF, then a pinned import (dma_buf_pin) with an invalidate op.
    Pinned,
    /// The NIC exports the range itself with `gdrpeer_dmabuf_export()` and imports it.
    Kapi,
}

impl Import {
    fn flags(self) -> u32 {
        match self {
            Import::Dynamic => 0,
            Import::Pinned => DMABUF_PINNED,
            Import::Kapi => DMABUF_KAPI,
        }
    }
}

/// `[va, va + len)` as the NIC sees it through a dma-buf, and the dma-buf when user space
/// exported it (none for [`Import::Kapi`]).
struct Imported {
    mr: DmabufMr,
    buf: Option<Dmabuf>,
}

/// Exports `[va, va + len)` through `d` (or has the NIC do it, [`Import::Kapi`]) and imports
/// it into `n`, checking the geometry gdrpeer reports.
fn export_and_import(
    d: &Device,
    n: &Nic,
    va: u64,
    len: u64,
    how: Import,
) -> Result<Imported, String> {
    if how == Import::Kapi {
        let mr = n
            .reg_dmabuf(-1, DMABUF_KAPI, va, len)
            .map_err(|e| format!("REG_DMABUF (kernel API export): {e}"))?;
        return Ok(Imported { mr, buf: None });
    }
    let buf = ok(d.export_dmabuf_range(va, len), "EXPORT_DMABUF")?;
    check_geometry(&buf, va, len)?;
    let mr = n
        .reg_dmabuf(buf.fd.as_raw_fd(), how.flags(), buf.offset, len)
        .map_err(|e| format!("REG_DMABUF ({how:?}): {e}"))?;
    Ok(Imported { mr, buf: Some(buf) })
}

/// The window of `[va, va + len)`: whole 64 KiB pages, `va` at its offset.
fn check_geometry(buf: &Dmabuf, va: u64, len: u64) -> TestResult {
    let first = va / K64;
    let last = (va + len - 1) / K64;
    check_eq!(
        (
            buf.aligned_va,
            buf.offset,
            u64::from(buf.page_count),
            buf.size
        ),
        (
            first * K64,
            va % K64,
            last - first + 1,
            (last - first + 1) * K64
        ),
        format!("dma-buf of {va:#x} + {len:#x} (aligned va, offset, pages, size)")
    );
    Ok(())
}

/// The longest segment gdrpeer puts in an importer's table (src/export.rs, MAX_SEGMENT).
const MAX_SEGMENT: u64 = 1 << 31;

/// Checks the DMA segments of an import's mapping of the window of `pages` GPU pages at
/// `aligned_va`, as the NIC's sg_table holds them: DMA addresses for the edu function, whose
/// kind [`check_dma_kind`] checks page by page against nvsim's bus addresses, and which the
/// NIC's DMA must find the pages behind (`content`: the window's bytes); whole pages, in
/// runs as long as the addresses are contiguous (at most [`MAX_SEGMENT`] each), so that two
/// segments in a row are never contiguous. Without an IOMMU the segments are the runs of
/// contiguous bus addresses; behind one they depend on the IOVAs the IOMMU gave.
fn check_segments(
    n: &Nic,
    mr: &DmabufMr,
    aligned_va: u64,
    pages: u64,
    content: &[u8],
) -> TestResult {
    let segs = n
        .dmabuf_segments(mr.handle)
        .map_err(|e| format!("DMABUF_SEGS: {e}"))?;
    check_eq!(
        segs.len(),
        mr.nents as usize,
        "segments of the mapping now and at registration"
    );
    let mut dma = Vec::new();
    for (i, &(addr, len)) in segs.iter().enumerate() {
        check!(
            len > 0 && len % K64 == 0 && len <= MAX_SEGMENT,
            "segment {i} ({addr:#x} + {len:#x}) is not whole GPU pages of a segment's length"
        );
        if let Some(&(next, _)) = segs.get(i + 1) {
            check!(
                addr + len != next || len + K64 > MAX_SEGMENT,
                "segments {i} and {} are contiguous ({addr:#x} + {len:#x}): not merged: {segs:x?}",
                i + 1
            );
        }
        dma.extend((0..len / K64).map(|p| addr + p * K64));
    }
    check_eq!(
        dma.len() as u64,
        pages,
        format!("pages of the segments {segs:x?}")
    );
    let what = format!("DMA addresses of the segments {segs:x?}");
    check_dma_kind(
        &edu()?,
        &dma,
        &p2pclient_addresses(aligned_va, pages * K64)?,
        &format!("{what} vs nvsim's bus addresses"),
    )?;
    check_dma_reaches(n, &dma, content, &what)
}

/// A dma-buf descriptor as the kernel describes it: close-on-exec, read-write, gdrpeer's,
/// of `size` bytes.
fn check_descriptor(buf: &Dmabuf) -> TestResult {
    use rustix::io::{fcntl_getfd, FdFlags};
    check!(
        fcntl_getfd(&buf.fd)
            .map_err(errno)?
            .contains(FdFlags::CLOEXEC),
        "the dma-buf descriptor is not close-on-exec"
    );
    let access = rustix::fs::fcntl_getfl(&buf.fd).map_err(errno)? & rustix::fs::OFlags::RWMODE;
    check_eq!(
        access,
        rustix::fs::OFlags::RDWR,
        "the dma-buf's access mode"
    );
    let fdinfo = format!("/proc/self/fdinfo/{}", buf.fd.as_raw_fd());
    let info = std::fs::read_to_string(&fdinfo).map_err(|e| format!("{fdinfo}: {e}"))?;
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(name))
            .map(|v| v.trim().to_string())
    };
    check_eq!(
        field("exp_name:"),
        Some("gdrpeer".to_string()),
        "exporter name"
    );
    check_eq!(field("size:"), Some(buf.size.to_string()), "dma-buf size");
    Ok(())
}

/// The first byte where `got` differs from `want`, as an error.
fn same_bytes(got: &[u8], want: &[u8], what: &str) -> TestResult {
    check_eq!(got.len(), want.len(), format!("{what}: length"));
    match (0..got.len()).find(|&i| got[i] != want[i]) {
        None => Ok(()),
        Some(i) => Err(format!(
            "{what}: byte {i:#x} is {:#04x}, expected {:#04x}",
            got[i], want[i]
        )),
    }
}

/// The whole of `m` through cuMemcpyDtoH.
fn dtoh(m: &DevMem, len: usize) -> Result<Vec<u8>, String> {
    let mut out = vec![0u8; len];
    cu().copy_from_device(&mut out, m.p).map_err(c)?;
    Ok(out)
}

/// GPU memory of `size` bytes holding `pattern(seed)`, written with cuMemcpyHtoD.
fn filled(size: usize, seed: u8) -> Result<(DevMem, Vec<u8>), String> {
    sanity::load()?;
    let m = DevMem::new(size)?;
    let data = pattern(seed, size);
    cu().copy_to_device(m.p, &data).map_err(c)?;
    Ok((m, data))
}

/// GPU -> NIC -> GPU through a dma-buf of a 128 KiB window at an unaligned address: the NIC
/// sends 9000 bytes across a page boundary, which must be what cuMemcpyHtoD wrote, then
/// receives 7777 bytes at another offset across the next boundary, which cuMemcpyDtoH must
/// find there (and nothing else changed), and sends them back.
fn round_trip(how: Import) -> TestResult {
    let size = 4 * K64 as usize;
    let (m, data) = filled(size, 11)?;
    let d = dev()?;
    let n = nic()?;
    // 333 bytes into a page (cuMemAlloc aligns to 256 bytes only).
    let va = m.p.next_multiple_of(K64) + 333;
    let len = 2 * K64;
    let maps = nstat("dmabuf_maps")?;
    let imp = export_and_import(&d, &n, va, len, how)?;
    if let Some(buf) = &imp.buf {
        check_descriptor(buf)?;
    }
    let first = va / K64 * K64;
    let pages = (va + len - 1) / K64 - va / K64 + 1;
    let at = (first - m.p) as usize;
    check_segments(
        &n,
        &imp.mr,
        first,
        pages,
        &data[at..at + (pages * K64) as usize],
    )?;
    check_eq!(
        nstat("dmabuf_maps")? - maps,
        1,
        "mappings made at registration"
    );
    check_eq!(nstat("dmabuf_imports")?, 1, "live imports");

    // GPU -> NIC across the page boundary after va.
    let off = K64 - 333 - 4000;
    let at = (va + off - m.p) as usize;
    let sent = n.send(imp.mr.handle, off, 9000).map_err(errno)?;
    same_bytes(&sent, &data[at..at + 9000], "bytes the NIC sent")?;

    // NIC -> GPU across the next boundary.
    let reply = pattern(12, 7777);
    let off = len - 8000;
    n.recv(imp.mr.handle, off, &reply).map_err(errno)?;
    let mut expect = data;
    let at = (va + off - m.p) as usize;
    expect[at..at + reply.len()].copy_from_slice(&reply);
    same_bytes(&dtoh(&m, size)?, &expect, "cuMemcpyDtoH after the receive")?;
    let back = n.send(imp.mr.handle, off, reply.len()).map_err(errno)?;
    same_bytes(&back, &reply, "received bytes sent back")?;
    n.dereg(imp.mr.handle).map_err(errno)
}

fn round_trip_dynamic() -> TestResult {
    round_trip(Import::Dynamic)
}

fn round_trip_pinned() -> TestResult {
    round_trip(Import::Pinned)
}

fn round_trip_kapi() -> TestResult {
    round_trip(Import::Kapi)
}

/// Windows smaller than a page and off its start: EXPORT_DMABUF of 1000 bytes 20 KiB into a
/// page (one page, that offset), and of a handle pinned across a page boundary (the pin's
/// offset and pages). The NIC imports from the reported offset: what it sends and receives is
/// exactly the range asked for, and the bytes around it stay as they were.
fn unaligned_sub_page_window() -> TestResult {
    let size = 3 * K64 as usize;
    let (m, data) = filled(size, 13)?;
    let d = dev()?;
    let n = nic()?;
    let mut expect = data.clone();

    // By range: 1000 bytes at 5 * 4 KiB + 77 into the buffer's second page.
    let va = (m.p / K64 + 1) * K64 + 5 * 4096 + 77;
    let buf = ok(
        d.export_dmabuf_range(va, 1000),
        "EXPORT_DMABUF of 1000 bytes",
    )?;
    check_geometry(&buf, va, 1000)?;
    check_eq!(buf.offset, 5 * 4096 + 77, "offset of the sub-page range");
    let mr = n
        .reg_dmabuf(buf.fd.as_raw_fd(), 0, buf.offset, 1000)
        .map_err(errno)?;
    let at = (va - m.p) as usize;
    let sent = n.send(mr.handle, 0, 1000).map_err(errno)?;
    same_bytes(&sent, &data[at..at + 1000], "the sub-page range sent")?;
    let reply = pattern(14, 1000);
    n.recv(mr.handle, 0, &reply).map_err(errno)?;
    expect[at..at + 1000].copy_from_slice(&reply);
    expect_err(
        n.send(mr.handle, 1, 1000),
        Errno::INVAL,
        "send past the import",
    )?;
    n.dereg(mr.handle).map_err(errno)?;

    // By handle: 200 bytes across a page boundary.
    let va = (m.p / K64 + 2) * K64 - 100;
    let p = ok(d.pin(va, 200, PinFlags::empty()), "pin")?;
    let buf = ok(d.export_dmabuf(p.handle), "EXPORT_DMABUF of a handle")?;
    check_geometry(&buf, va, 200)?;
    check_eq!(
        (buf.aligned_va, buf.offset, buf.page_count),
        (p.aligned_va, p.offset, p.page_count),
        "the handle's window (aligned va, offset, pages)"
    );
    let mr = n
        .reg_dmabuf(buf.fd.as_raw_fd(), DMABUF_PINNED, buf.offset, 200)
        .map_err(errno)?;
    let at = (va - m.p) as usize;
    let sent = n.send(mr.handle, 0, 200).map_err(errno)?;
    same_bytes(&sent, &expect[at..at + 200], "the handle's range sent")?;
    let reply = pattern(15, 200);
    n.recv(mr.handle, 0, &reply).map_err(errno)?;
    expect[at..at + 200].copy_from_slice(&reply);
    same_bytes(
        &dtoh(&m, size)?,
        &expect,
        "cuMemcpyDtoH after both receives",
    )?;
    n.dereg(mr.handle).map_err(errno)?;
    ok(d.unpin(p.handle), "unpin")
}

/// Frees the GPU memory (cuMemFree) while the NIC moves bytes through a dynamic import of
/// its dma-buf, a pinned import of the same dma-buf idle beside it. When cuMemFree returns,
/// both importers have been invalidated; the transfer has ended with ENXIO (or had finished);
/// every later transfer and every new import of the descriptor fails with ENXIO; and no byte
/// reached the freed memory (nvsim's `freed_page_writes`). The /dev/gdrpeer file is closed
/// before: the dma-buf alone holds the memory.
fn free_mid_transfer(send: bool) -> TestResult {
    // An allocation of its own (not carved from a shared block), so that cuMemFree frees and
    // poisons its pages.
    let (mut m, _) = filled(nvsim::POOL_BLOCK as usize, 16)?;
    let len = 2 * K64;
    let buf = ok(dev()?.export_dmabuf_range(m.p, len), "EXPORT_DMABUF")?;
    let n = nic()?;
    let fd = buf.fd.as_raw_fd();
    let busy = n.reg_dmabuf(fd, 0, 0, len).map_err(errno)?;
    let idle = n.reg_dmabuf(fd, DMABUF_PINNED, 0, len).map_err(errno)?;
    let invalidations = nstat("dmabuf_invalidations")?;
    let writes = freed_page_writes()?;
    let worker = under_way(n, move |n| {
        if send {
            n.send(busy.handle, 0, len as usize).map(|_| ())
        } else {
            n.recv(busy.handle, 0, &pattern(17, len as usize))
        }
    })?;
    m.free()?;
    check_eq!(
        nstat("dmabuf_invalidations")? - invalidations,
        2,
        "importers invalidated once cuMemFree returned"
    );
    let (n, r) = worker.join().map_err(|_| "transfer thread panicked")?;
    match r {
        Ok(()) => println!("    the transfer had finished before the free"),
        Err(e) => check_eq!(e, Errno::NXIO, "transfer cut by the free"),
    }
    for (mr, what) in [(busy, "dynamic"), (idle, "pinned")] {
        expect_err(
            n.send(mr.handle, 0, 100),
            Errno::NXIO,
            &format!("send through the {what} import after the free"),
        )?;
        expect_err(
            n.recv(mr.handle, 0, &[1; 100]),
            Errno::NXIO,
            &format!("receive through the {what} import after the free"),
        )?;
    }
    for (flags, what) in [(0, "dynamic"), (DMABUF_PINNED, "pinned")] {
        expect_err(
            n.reg_dmabuf(fd, flags, 0, len),
            Errno::NXIO,
            &format!("new {what} import after the free"),
        )?;
    }
    no_stray_dma_writes(writes, 500, "the free")?;
    n.dereg(busy.handle).map_err(errno)?;
    n.dereg(idle.handle).map_err(errno)
}

fn free_during_send() -> TestResult {
    free_mid_transfer(true)
}

fn free_during_receive_writes_no_freed_memory() -> TestResult {
    free_mid_transfer(false)
}

/// An importer slow to stop holds cuMemFree until it has unmapped (gdrnic's
/// `invalidate_delay_ms`), and one slower than `invalidate_warn_ms` is reported.
fn free_waits_for_a_slow_importer() -> TestResult {
    let delay = param("invalidate_warn_ms")? + 200;
    let (mut m, _) = filled(nvsim::POOL_BLOCK as usize, 18)?;
    let buf = ok(dev()?.export_dmabuf_range(m.p, K64), "EXPORT_DMABUF")?;
    let n = nic()?;
    let mr = n.reg_dmabuf(buf.fd.as_raw_fd(), 0, 0, K64).map_err(errno)?;
    let knob = "/sys/kernel/debug/gdrnic/invalidate_delay_ms";
    std::fs::write(knob, delay.to_string()).map_err(|e| format!("{knob}: {e}"))?;
    let start = Instant::now();
    let r = m.free();
    let took = start.elapsed();
    let _ = std::fs::write(knob, "0");
    r?;
    check!(
        took >= Duration::from_millis(delay),
        "cuMemFree returned after {took:?}, before the importer's {delay} ms stop"
    );
    check!(
        crate::helpers::kernel_log()?
            .lines()
            .rev()
            .take(50)
            .any(|l| l.contains("dma-buf importers took")),
        "no report of the slow importer"
    );
    expect_err(n.send(mr.handle, 0, 10), Errno::NXIO, "send after the free")?;
    n.dereg(mr.handle).map_err(errno)
}

/// One registration's invalidation waits for its own chunk in flight at most, not for the
/// NIC's queue. While another registration's chunk holds gdrnic's engine for 3 s
/// (`chunk_delay_ms`), the free of a kernel-API registration's memory with no chunk in flight
/// returns at once (its callback takes that registration's lock alone), and so does the free
/// of a dma-buf import's memory whose chunk queues for the engine (the chunk takes the
/// reservation lock, which the exporter's revocation takes, only once it has the engine).
fn invalidation_waits_for_no_other_chunk() -> TestResult {
    const HOLD_MS: u64 = 3000;
    const PROMPT: Duration = Duration::from_millis(1000);
    let (busy, _) = filled(nvsim::POOL_BLOCK as usize, 21)?;
    let (mut quiet, _) = filled(nvsim::POOL_BLOCK as usize, 22)?;
    let (mut queued, _) = filled(nvsim::POOL_BLOCK as usize, 23)?;
    let (n1, n2, n3) = (nic()?, nic()?, nic()?);
    let busy_mr = n1.reg(busy.p, K64).map_err(errno)?;
    let quiet_mr = n3.reg(quiet.p, K64).map_err(errno)?;
    let buf = ok(dev()?.export_dmabuf_range(queued.p, K64), "EXPORT_DMABUF")?;
    let queued_mr = n2
        .reg_dmabuf(buf.fd.as_raw_fd(), 0, 0, K64)
        .map_err(errno)?;
    let knob = "/sys/kernel/debug/gdrnic/chunk_delay_ms";
    std::fs::write(knob, HOLD_MS.to_string()).map_err(|e| format!("{knob}: {e}"))?;
    let delays = nstat("chunk_delays")?;
    let holder = std::thread::spawn(move || {
        let r = n1.send(busy_mr.handle, 0, 100).map(|_| ());
        (n1, r)
    });
    // The first send holds the engine (it sleeps there), then the import's queues for it.
    eventually(10, "the first send holding the engine", || {
        Ok(nstat("chunk_delays")? > delays)
    })?;
    let waiter = std::thread::spawn(move || {
        let r = n2.send(queued_mr.handle, 0, 100).map(|_| ());
        (n2, r)
    });
    std::thread::sleep(Duration::from_millis(300));
    let start = Instant::now();
    let freed = quiet.free();
    let kapi = start.elapsed();
    let start = Instant::now();
    let freed = freed.and_then(|()| queued.free());
    let dmabuf = start.elapsed();
    let (n1, held) = holder.join().map_err(|_| "the holding send panicked")?;
    let (n2, queued_send) = waiter.join().map_err(|_| "the queued send panicked")?;
    std::fs::write(knob, "0").map_err(|e| format!("{knob}: {e}"))?;
    freed?;
    println!(
        "frees with a {HOLD_MS} ms chunk on the engine: a registration {kapi:?}, \
         an import whose chunk waited {dmabuf:?}"
    );
    check!(
        kapi < PROMPT,
        "the free of a registration with no chunk in flight took {kapi:?}, waiting for \
         another registration's chunk"
    );
    check!(
        dmabuf < PROMPT,
        "the free of an import whose chunk waits for the engine took {dmabuf:?}, waiting \
         for that queue"
    );
    held.map_err(|e| format!("the send holding the engine: {e}"))?;
    expect_err(
        queued_send,
        Errno::NXIO,
        "the import's send, revoked while it waited",
    )?;
    expect_err(
        n3.send(quiet_mr.handle, 0, 10),
        Errno::NXIO,
        "send after the free",
    )?;
    n1.dereg(busy_mr.handle).map_err(errno)?;
    n2.dereg(queued_mr.handle).map_err(errno)?;
    n3.dereg(quiet_mr.handle).map_err(errno)
}

/// How the dma-buf reaches the other process.
#[derive(Clone, Copy)]
enum Handover {
    /// A forked child inherits the descriptor (close-on-exec does not apply).
    Fork,
    /// A child that never had it receives it over a Unix socket.
    ScmRights,
}

/// Another process imports the dma-buf into its own NIC file and moves bytes both ways
/// through it, after the exporter closed its descriptor and its /dev/gdrpeer file: it reads
/// what cuMemcpyHtoD wrote, and its receive is what cuMemcpyDtoH finds.
fn other_process_imports(how: Handover) -> TestResult {
    // An allocation of its own: the child's release of the last reference leaves the pin to
    // the free callback (another process cannot put it), which cuMemFree of a smaller
    // buffer need not give (sanity::OWN_ALLOCATION).
    let size = OWN_ALLOCATION;
    let (m, data) = filled(size, 19)?;
    let reply = pattern(20, 5000);
    let (at, len) = (1000u64, 3 * K64 / 2);
    let child_imports = |fd: BorrowedFd<'_>, offset: u64| -> TestResult {
        let n = nic()?;
        let mr = n
            .reg_dmabuf(fd.as_raw_fd(), 0, offset, len)
            .map_err(|e| format!("child's import: {e}"))?;
        let sent = n.send(mr.handle, K64 - 3000, 6000).map_err(errno)?;
        let first = (at + K64 - 3000) as usize;
        same_bytes(&sent, &data[first..first + 6000], "bytes the child sent")?;
        n.recv(mr.handle, 100, &reply).map_err(errno)?;
        n.dereg(mr.handle).map_err(errno)
    };
    let d = dev()?;
    let child = match how {
        Handover::Fork => {
            let buf = ok(d.export_dmabuf_range(m.p + at, len), "EXPORT_DMABUF")?;
            let child = proc::fork(|| child_imports(buf.fd.as_fd(), buf.offset))?;
            drop(buf);
            child
        }
        Handover::ScmRights => {
            let (mine, theirs) = proc::unix_pair()?;
            // The window starts at the buffer's offset in its first 64 KiB page.
            let offset = (m.p + at) % K64;
            let child = proc::fork(|| {
                let fd = proc::recv_fd(theirs.as_fd())?;
                child_imports(fd.as_fd(), offset)
            })?;
            // Exported after the fork: the child has it only through the socket.
            let buf = ok(d.export_dmabuf_range(m.p + at, len), "EXPORT_DMABUF")?;
            check_eq!(buf.offset, offset, "the dma-buf's offset");
            proc::send_fd(mine.as_fd(), buf.fd.as_fd())?;
            child
        }
    };
    drop(d);
    proc::wait(child)?;
    let mut expect = data;
    let first = (at + 100) as usize;
    expect[first..first + reply.len()].copy_from_slice(&reply);
    same_bytes(
        &dtoh(&m, size)?,
        &expect,
        "cuMemcpyDtoH after the child's receive",
    )
}

fn fd_inherited_by_fork_child() -> TestResult {
    other_process_imports(Handover::Fork)
}

fn fd_passed_by_scm_rights() -> TestResult {
    other_process_imports(Handover::ScmRights)
}

/// What goes first.
#[derive(Clone, Copy, Debug)]
enum CloseOrder {
    /// The dma-buf's descriptor, then the handle's UNPIN.
    FdThenUnpin,
    /// UNPIN, then the descriptor.
    UnpinThenFd,
    /// The /dev/gdrpeer file (handle and all), then the descriptor.
    FileThenFd,
}

/// One receive and send through the import, checked against cuMemcpyDtoH.
fn moves_bytes(n: &Nic, mr: DmabufMr, va: u64, seed: u8) -> TestResult {
    let data = pattern(seed, 3000);
    n.recv(mr.handle, 500, &data).map_err(errno)?;
    let mut out = vec![0u8; data.len()];
    cu().copy_from_device(&mut out, va + 500).map_err(c)?;
    same_bytes(&out, &data, "cuMemcpyDtoH of the received bytes")?;
    let back = n.send(mr.handle, 500, data.len()).map_err(errno)?;
    same_bytes(&back, &data, "bytes sent back")
}

/// A handle's window exported and imported, then the descriptor, the handle and the file
/// closed in `order`: transfers work while the import lives, whatever went; the region stays
/// pinned (one nv-p2p pin) until the last of them; afterwards gdrpeer and nvsim hold nothing.
fn close_order(order: CloseOrder) -> TestResult {
    let (m, _) = filled(2 * K64 as usize, 21)?;
    let d = dev()?;
    let va = m.p + 10;
    let p = ok(d.pin(va, K64, PinFlags::empty()), "pin")?;
    let buf = ok(d.export_dmabuf(p.handle), "EXPORT_DMABUF")?;
    let n = nic()?;
    let mr = n
        .reg_dmabuf(buf.fd.as_raw_fd(), 0, buf.offset, K64)
        .map_err(errno)?;
    moves_bytes(&n, mr, va, 22)?;
    let one_pin = |when: &str| -> TestResult {
        check_eq!(stat("pins_live")?, 1, format!("nv-p2p pins {when}"));
        check_eq!(gstat("regions")?, 1, format!("gdrpeer regions {when}"));
        Ok(())
    };
    let (first, second) = match order {
        CloseOrder::FdThenUnpin => ("the descriptor closed", "unpinned"),
        CloseOrder::UnpinThenFd => ("unpinned", "the descriptor closed"),
        CloseOrder::FileThenFd => ("the file closed", "the descriptor closed"),
    };
    let mut d = Some(d);
    let mut buf = Some(buf);
    for (step, what) in [first, second].into_iter().enumerate() {
        match (order, step) {
            (CloseOrder::FdThenUnpin, 0)
            | (CloseOrder::UnpinThenFd | CloseOrder::FileThenFd, 1) => drop(buf.take()),
            (CloseOrder::FileThenFd, _) => drop(d.take()),
            _ => ok(d.as_ref().unwrap().unpin(p.handle), "unpin")?,
        }
        moves_bytes(&n, mr, va, 23 + step as u8).map_err(|e| format!("after {what}: {e}"))?;
        one_pin(&format!("after {what}, with the import live"))?;
    }
    n.dereg(mr.handle).map_err(errno)?;
    if let Some(d) = d {
        // The region went back to the file's cache, unused: closing the file releases it.
        one_pin("with the file open")?;
        check_eq!(ok(d.stats(), "stats")?.handles, 0, "handles");
        drop(d);
    }
    // Released by the last of them, with the NIC's file (a gdrpeer context) still open.
    eventually(5, "the region released", || {
        Ok(stat("pins_live")? == 0 && gstat("regions")? == 0)
    })?;
    drop(n);
    gdrpeer_idle()
}

fn close_fd_then_unpin() -> TestResult {
    close_order(CloseOrder::FdThenUnpin)
}

fn unpin_then_close_fd() -> TestResult {
    close_order(CloseOrder::UnpinThenFd)
}

fn close_file_then_fd() -> TestResult {
    close_order(CloseOrder::FileThenFd)
}

/// An importer gdrpeer must refuse at attach with EOPNOTSUPP (`flags`: gdrnic's NO_P2P or
/// NO_INVALIDATE), dynamic or pinned: nothing is attached or mapped (gdrpeer makes no DMA
/// mapping), and an importer that qualifies still gets the dma-buf afterwards.
fn importer_refused(flags: u32) -> TestResult {
    let (m, data) = filled(K64 as usize, 24)?;
    let d = dev()?;
    let buf = ok(d.export_dmabuf_range(m.p, K64), "EXPORT_DMABUF")?;
    let n = nic()?;
    let (maps, imports) = (gstat("dma_page_maps_made")?, nstat("dmabuf_imports")?);
    for extra in [0, DMABUF_PINNED] {
        expect_err(
            n.reg_dmabuf(buf.fd.as_raw_fd(), flags | extra, 0, K64),
            Errno::OPNOTSUPP,
            &format!("import with flags {:#x}", flags | extra),
        )?;
    }
    check_eq!(gstat("dma_page_maps_made")?, maps, "DMA mappings made");
    check_eq!(nstat("dmabuf_imports")?, imports, "imports");
    let mr = n.reg_dmabuf(buf.fd.as_raw_fd(), 0, 0, K64).map_err(errno)?;
    same_bytes(
        &n.send(mr.handle, 0, 100).map_err(errno)?,
        &data[..100],
        "bytes through the importer accepted afterwards",
    )?;
    n.dereg(mr.handle).map_err(errno)
}

fn importer_without_p2p_refused() -> TestResult {
    importer_refused(DMABUF_NO_P2P)
}

fn importer_without_invalidate_refused() -> TestResult {
    importer_refused(DMABUF_NO_INVALIDATE)
}

/// Exports and imports of one cached region cost one nv-p2p pin and one DMA mapping of each
/// page for the NIC, whatever their number: after the first, 16 exports (of ranges inside
/// the region, and of handles pinned there) and their imports, dynamic and pinned, neither
/// call get_pages nor map a page. The same holds for the NIC's own exports through the kernel API, from its
/// own cache. Bytes received through one import are sent through another.
fn exports_of_a_cached_region_call_no_driver() -> TestResult {
    let (m, _) = filled(4 * K64 as usize, 25)?;
    let d = dev()?;
    let n = nic()?;
    let first = export_and_import(&d, &n, m.p, 4 * K64, Import::Dynamic)?;
    let kapi_first = export_and_import(&d, &n, m.p, 4 * K64, Import::Kapi)?;
    let (pins, maps) = (stat("get_pages_calls")?, gstat("dma_page_maps_made")?);
    let mut held = vec![first, kapi_first];
    for i in 0..16u64 {
        let (va, len) = (m.p + i * 1000, K64 + i);
        let how = [Import::Dynamic, Import::Pinned, Import::Kapi][i as usize % 3];
        let imp = if i % 2 == 0 || how == Import::Kapi {
            export_and_import(&d, &n, va, len, how)?
        } else {
            let p = ok(d.pin(va, len, PinFlags::empty()), "pin")?;
            let buf = ok(d.export_dmabuf(p.handle), "EXPORT_DMABUF of a handle")?;
            ok(d.unpin(p.handle), "unpin")?;
            let mr = n
                .reg_dmabuf(buf.fd.as_raw_fd(), how.flags(), buf.offset, len)
                .map_err(errno)?;
            Imported { mr, buf: Some(buf) }
        };
        held.push(imp);
    }
    check_eq!(
        stat("get_pages_calls")? - pins,
        0,
        "nv-p2p pins for 16 more exports"
    );
    check_eq!(
        gstat("dma_page_maps_made")? - maps,
        0,
        "DMA mappings for 16 more imports"
    );
    // One pin in the /dev/gdrpeer file's cache, one in the NIC file's.
    check_eq!(stat("pins_live")?, 2, "nv-p2p pins live");
    let data = pattern(26, 3000);
    let last = held.last().unwrap().mr;
    n.recv(last.handle, 10, &data).map_err(errno)?;
    same_bytes(
        &n.send(held[0].mr.handle, 15 * 1000 + 10, data.len())
            .map_err(errno)?,
        &data,
        "bytes received through one import, sent through another",
    )?;
    for imp in &held {
        n.dereg(imp.mr.handle).map_err(errno)?;
    }
    Ok(())
}

/// EXPORT_DMABUF of a range pins it as PIN would, under a handle of the file that the caller
/// never learns. NVIDIA freeing the memory during the export (nvsim's `free_on_pin`, after
/// several delays) ends it with ENXIO, or with a dma-buf of revoked memory that no importer
/// can map; either way the file reports no event: events name handles the caller has.
fn export_racing_a_free_queues_no_event() -> TestResult {
    use gdrpeer::EventSource;
    let gpu = nvsim::Gpu::open().map_err(errno)?;
    let d = dev()?;
    let n = nic()?;
    for delay in [0, 20, 100, 500, 2000] {
        let (va, id) = gpu.alloc(K64).map_err(errno)?;
        nvsim::testing::debugfs("free_on_pin", &format!("{id} {delay}"))?;
        match d.export_dmabuf_range(va, K64) {
            Ok(buf) => {
                eventually(2, "the memory freed", || Ok(gpu.query(va).is_err()))?;
                expect_err(
                    n.reg_dmabuf(buf.fd.as_raw_fd(), 0, 0, K64),
                    Errno::NXIO,
                    "import of a dma-buf whose memory was freed",
                )?;
            }
            Err(e) => check_eq!(e.errno_of(), Some(Errno::NXIO), "export racing the free"),
        }
        let events = ok(d.try_read_events(), "events")?;
        check!(
            events.is_empty(),
            "EXPORT_DMABUF racing a free (delay {delay} us) queued {events:?}, for handles the \
             caller never had"
        );
    }
    Ok(())
}

/// gdrpeer's module reference count (`/sys/module/gdrpeer/refcnt`): while it is above zero
/// the module cannot be unloaded (delete_module: "module is in use").
fn module_refs() -> Result<u64, String> {
    let path = "/sys/module/gdrpeer/refcnt";
    let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
    text.trim().parse().map_err(|e| format!("{path}: {e}"))
}

/// nvsim's persistent pins and BAR1 bytes, and gdrpeer's regions, as they are now.
fn persistent_held() -> Result<(u64, u64, u64), String> {
    Ok((
        stat("persistent_pins_live")?,
        stat("bar1_used")?,
        gstat("regions")?,
    ))
}

/// A persistent export ([`Device::export_dmabuf_persistent`]) takes every importer that allows
/// peer-to-peer: the pinned import that cannot be invalidated (`ib_umem_dmabuf_get_pinned`'s,
/// gdrnic's PINNED_NOREVOKE), the revocable pinned one and the dynamic one, all of one
/// dma-buf, each moving bytes both ways against cuMemcpy. While the dma-buf lives it holds one
/// persistent pin of its own (not the cache's: a callback export of the same memory beside it
/// keeps its own region) and the window's BAR1 pages; a normal export refuses the pinned
/// import without an invalidate op (EOPNOTSUPP). A handle pinned persistently exports with
/// the flag too, and a callback pin's handle does not (EINVAL). When the descriptor and the
/// imports are gone the pin is given back at once, with the /dev/gdrpeer file still open:
/// no persistent pin, no BAR1 byte and no region is left.
fn persistent_pinned_import_round_trip() -> TestResult {
    let size = 4 * K64 as usize;
    let (m, data) = filled(size, 40)?;
    let d = dev()?;
    let n = nic()?;
    let va = m.p.next_multiple_of(K64) + 100;
    let len = 2 * K64;
    let (pins0, bar0, regions0) = persistent_held()?;
    let buf = ok(
        d.export_dmabuf_persistent(va, len),
        "EXPORT_DMABUF (persistent)",
    )?;
    check_geometry(&buf, va, len)?;
    check_descriptor(&buf)?;
    let pages = buf.page_count as u64;
    check_eq!(
        persistent_held()?,
        (pins0 + 1, bar0 + pages * K64, regions0 + 1),
        "persistent pins, BAR1 bytes and gdrpeer regions with the export live"
    );
    let first = va / K64 * K64;
    let at = (first - m.p) as usize;
    let window = &data[at..at + (pages * K64) as usize];
    let mut expect = data.clone();
    for (i, (flags, what)) in [
        (DMABUF_PINNED_NOREVOKE, "pinned, no invalidate op"),
        (DMABUF_PINNED, "pinned, revocable"),
        (0, "dynamic"),
    ]
    .into_iter()
    .enumerate()
    {
        let mr = n
            .reg_dmabuf(buf.fd.as_raw_fd(), flags, buf.offset, len)
            .map_err(|e| format!("{what} import of the persistent export: {e}"))?;
        if i == 0 {
            check_segments(&n, &mr, first, pages, window)?;
        }
        let off = 1000 + i as u64 * 20000;
        let sent = n.send(mr.handle, off, 5000).map_err(errno)?;
        let from = (va + off - m.p) as usize;
        same_bytes(&sent, &expect[from..from + 5000], &format!("{what}: sent"))?;
        let reply = pattern(41 + i as u8, 3000);
        n.recv(mr.handle, off, &reply).map_err(errno)?;
        expect[from..from + reply.len()].copy_from_slice(&reply);
        same_bytes(
            &dtoh(&m, size)?,
            &expect,
            &format!("{what}: cuMemcpyDtoH after the receive"),
        )?;
        n.dereg(mr.handle).map_err(errno)?;
    }
    // The NIC holds the pinned import without an invalidate op, and the dma-buf holds the pin.
    let held = n
        .reg_dmabuf(buf.fd.as_raw_fd(), DMABUF_PINNED_NOREVOKE, buf.offset, len)
        .map_err(errno)?;

    // A normal export of the same memory: its own callback pin (the cache's), the same BAR1
    // pages; it refuses the import without an invalidate op.
    let normal = ok(d.export_dmabuf_range(va, len), "EXPORT_DMABUF")?;
    check_eq!(
        (stat("pins_live")?, stat("bar1_used")?),
        (1, bar0 + pages * K64),
        "callback pins and BAR1 bytes beside the persistent export"
    );
    expect_err(
        n.reg_dmabuf(
            normal.fd.as_raw_fd(),
            DMABUF_PINNED_NOREVOKE,
            normal.offset,
            len,
        ),
        Errno::OPNOTSUPP,
        "pinned import without an invalidate op of a normal export",
    )?;
    expect_err(
        n.reg_dmabuf(-1, DMABUF_KAPI | DMABUF_PINNED_NOREVOKE, va, len),
        Errno::OPNOTSUPP,
        "pinned import without an invalidate op of a normal kernel-API export",
    )?;
    drop(normal);

    // Handles: a persistent pin's exports with the flag, a callback pin's does not.
    let p = ok(d.pin(va, 100, PinFlags::PERSISTENT), "pin (persistent)")?;
    let mut e = export_args(p.handle, 0, 0);
    e.flags = uapi::EXPORT_PERSISTENT;
    let hbuf = raw_export(d.as_fd(), e).map_err(errno)?;
    // SAFETY: the descriptor the module just installed; closed once, when `hbuf` goes.
    let hfd = unsafe { <rustix::fd::OwnedFd as rustix::fd::FromRawFd>::from_raw_fd(hbuf.fd) };
    let hmr = n
        .reg_dmabuf(hfd.as_raw_fd(), DMABUF_PINNED_NOREVOKE, hbuf.offset, 100)
        .map_err(|e| format!("pinned import of a persistent handle's export: {e}"))?;
    let from = (va - m.p) as usize;
    same_bytes(
        &n.send(hmr.handle, 0, 100).map_err(errno)?,
        &expect[from..from + 100],
        "sent through the persistent handle's export",
    )?;
    n.dereg(hmr.handle).map_err(errno)?;
    drop(hfd);
    ok(d.unpin(p.handle), "unpin")?;
    let cb = ok(d.pin(va, 100, PinFlags::empty()), "pin")?;
    let mut e = export_args(cb.handle, 0, 0);
    e.flags = uapi::EXPORT_PERSISTENT;
    check_eq!(
        export_errno(d.as_fd(), e, "persistent export of a callback pin's handle")?,
        Errno::INVAL,
        "persistent export of a callback pin's handle"
    );
    ok(d.unpin(cb.handle), "unpin")?;
    // Released: the import, then the descriptor, both files open (the callback regions of
    // the normal exports stay in their caches; the persistent handle's region went with its
    // unpin, since persistent pins are never cached: only the dma-buf's is left).
    let cached = pins0;
    check_eq!(
        stat("persistent_pins_live")?,
        cached + 1,
        "persistent pins with only the import holding the dma-buf"
    );
    n.dereg(held.handle).map_err(errno)?;
    check_eq!(
        stat("persistent_pins_live")?,
        cached + 1,
        "persistent pins with only the descriptor holding the dma-buf"
    );
    let regions = gstat("regions")?;
    drop(buf);
    eventually(5, "the persistent pin given back, the files open", || {
        Ok(stat("persistent_pins_live")? == cached && gstat("regions")? == regions - 1)
    })?;
    drop(d);
    drop(n);
    eventually(5, "every pin given back, the files closed", || {
        Ok(persistent_held()? == (pins0, bar0, regions0) && stat("pins_live")? == 0)
    })
    .map_err(|e| format!("{e}: {:?}", persistent_held()))
}

/// The NIC's own persistent export through the kernel API
/// (`gdrpeer_dmabuf_export_flags(GDRPEER_DMABUF_PERSISTENT)`) with the pinned import that cannot
/// be invalidated: bytes both ways, one persistent pin while it lives, none after the
/// deregistration (the NIC's file, a gdrpeer context, still open).
fn persistent_kapi_pinned_import() -> TestResult {
    let size = 2 * K64 as usize;
    let (m, data) = filled(size, 45)?;
    let n = nic()?;
    let pins0 = stat("persistent_pins_live")?;
    let va = m.p + 300;
    let mr = n
        .reg_dmabuf(
            -1,
            DMABUF_KAPI | DMABUF_KAPI_PERSISTENT | DMABUF_PINNED_NOREVOKE,
            va,
            K64,
        )
        .map_err(|e| format!("REG_DMABUF (persistent kernel API export): {e}"))?;
    check_eq!(
        stat("persistent_pins_live")?,
        pins0 + 1,
        "persistent pins with the import"
    );
    same_bytes(
        &n.send(mr.handle, 0, 4000).map_err(errno)?,
        &data[300..4300],
        "sent",
    )?;
    let reply = pattern(46, 2000);
    n.recv(mr.handle, 5000, &reply).map_err(errno)?;
    let mut expect = data;
    expect[5300..7300].copy_from_slice(&reply);
    same_bytes(&dtoh(&m, size)?, &expect, "cuMemcpyDtoH after the receive")?;
    expect_err(
        n.reg_dmabuf(-1, DMABUF_KAPI_PERSISTENT, va, K64),
        Errno::INVAL,
        "KAPI_PERSISTENT without KAPI",
    )?;
    n.dereg(mr.handle).map_err(errno)?;
    eventually(5, "the persistent pin given back", || {
        Ok(stat("persistent_pins_live")? == pins0)
    })
}

/// cuMemFree under a persistent export leaves the importers' DMA reaching valid memory: the
/// /dev/gdrpeer file closed, the dma-buf held by a pinned import without an invalidate op and a
/// dynamic one, the memory (an allocation of its own) freed: no importer is invalidated, no
/// callback comes, both send what was there before the free and receive into it, and no byte
/// lands in freed memory (nvsim's `freed_page_writes`). Releasing the dma-buf gives the pin
/// back, and only then are the pages freed (nvsim's GPU pages back to what they were).
fn persistent_survives_free() -> TestResult {
    let size = nvsim::POOL_BLOCK as usize;
    let pages0 = stat("gpu_pages_used")?;
    let (mut m, data) = filled(size, 47)?;
    let len = 3 * K64;
    let buf = ok(
        dev()?.export_dmabuf_persistent(m.p + 64, len - 64),
        "EXPORT_DMABUF (persistent)",
    )?;
    let n = nic()?;
    let fd = buf.fd.as_raw_fd();
    let pinned = n
        .reg_dmabuf(fd, DMABUF_PINNED_NOREVOKE, 0, len)
        .map_err(errno)?;
    let dynamic = n.reg_dmabuf(fd, 0, 0, len).map_err(errno)?;
    let (invalidations, callbacks, writes) = (
        nstat("dmabuf_invalidations")?,
        stat("callbacks_fired")?,
        freed_page_writes()?,
    );
    m.free()?;
    check_eq!(
        (
            nstat("dmabuf_invalidations")? - invalidations,
            stat("callbacks_fired")? - callbacks
        ),
        (0, 0),
        "importers invalidated and callbacks fired by cuMemFree"
    );
    let mut expect = data[..len as usize].to_vec();
    for (i, (mr, what)) in [(pinned, "pinned"), (dynamic, "dynamic")]
        .into_iter()
        .enumerate()
    {
        let off = 1000 + i as u64 * K64;
        let sent = n
            .send(mr.handle, off, 9000)
            .map_err(|e| format!("send through the {what} import after cuMemFree: {e}"))?;
        let at = off as usize;
        same_bytes(
            &sent,
            &expect[at..at + 9000],
            &format!("{what}: bytes sent after cuMemFree"),
        )?;
        let reply = pattern(48 + i as u8, 7000);
        n.recv(mr.handle, off + 2000, &reply)
            .map_err(|e| format!("receive through the {what} import after cuMemFree: {e}"))?;
        expect[at + 2000..at + 9000].copy_from_slice(&reply);
        same_bytes(
            &n.send(mr.handle, off + 2000, 7000).map_err(errno)?,
            &reply,
            &format!("{what}: received bytes sent back after cuMemFree"),
        )?;
    }
    // A new pinned import after the free: the memory is still the dma-buf's.
    let late = n
        .reg_dmabuf(fd, DMABUF_PINNED_NOREVOKE, 0, len)
        .map_err(|e| format!("pinned import after cuMemFree: {e}"))?;
    same_bytes(
        &n.send(late.handle, 0, 2000).map_err(errno)?,
        &expect[..2000],
        "bytes sent through an import made after cuMemFree",
    )?;
    check_eq!(
        freed_page_writes()? - writes,
        0,
        "GPU pages written after the free"
    );
    check!(
        stat("gpu_pages_used")? > pages0,
        "the freed allocation's pages went while the persistent pin held them"
    );
    for mr in [pinned, dynamic, late] {
        n.dereg(mr.handle).map_err(errno)?;
    }
    drop(buf);
    eventually(
        5,
        "the persistent pin given back and its pages freed",
        || {
            Ok(stat("persistent_pins_live")? == 0
                && gstat("regions")? == 0
                && stat("gpu_pages_used")? == pages0)
        },
    )?;
    no_stray_dma_writes(writes, 300, "the release")?;
    Ok(())
}

/// A persistent export outlives its /dev/gdrpeer file and its process's hold on it: with the
/// file closed the dma-buf keeps gdrpeer loaded (its module reference count stays above what
/// it was: delete_module refuses a module in use); a forked child that inherited the descriptor
/// imports it (pinned, no invalidate op) and moves bytes after the parent closed its
/// descriptor, so that the child's deregistration releases the dma-buf and gives the pin back
/// from the child (a persistent pin may be put from any process); a forked child cannot export
/// from the parent's file (EACCES). Afterwards no pin, region or module reference is left.
fn persistent_fork_close_and_unload() -> TestResult {
    let (m, data) = filled(2 * K64 as usize, 50)?;
    let n = nic()?;
    let refs0 = module_refs()?;
    let wrong0 = stat("put_pages_wrong_process")?;
    let d = dev()?;
    let buf = ok(
        d.export_dmabuf_persistent(m.p, K64),
        "EXPORT_DMABUF (persistent)",
    )?;
    let mut e = export_args(0, m.p, K64);
    e.flags = uapi::EXPORT_PERSISTENT;
    check_eq!(
        in_child(|| export_errno(d.as_fd(), e, "child's persistent EXPORT_DMABUF"))?,
        Errno::ACCESS,
        "persistent EXPORT_DMABUF in a forked child"
    );
    drop(d);
    check!(
        module_refs()? > refs0,
        "gdrpeer's module references with the file closed and the export live: {} (before: \
         {refs0})",
        module_refs()?
    );
    let rmmod = std::process::Command::new("rmmod")
        .arg("gdrpeer")
        .output()
        .map_err(|e| e.to_string())?;
    check!(
        !rmmod.status.success(),
        "rmmod gdrpeer succeeded with a persistent export live"
    );
    let (go, wait_go) = proc::unix_pair()?;
    let reply = pattern(51, 3000);
    let child = proc::fork(|| {
        // Waits until the parent has closed its descriptor: this one is the last.
        proc::recv_fd(wait_go.as_fd())?;
        let n = nic()?;
        let mr = n
            .reg_dmabuf(buf.fd.as_raw_fd(), DMABUF_PINNED_NOREVOKE, 0, K64)
            .map_err(|e| format!("child's pinned import: {e}"))?;
        same_bytes(
            &n.send(mr.handle, 100, 4000).map_err(errno)?,
            &data[100..4100],
            "bytes the child sent",
        )?;
        n.recv(mr.handle, 8000, &reply).map_err(errno)?;
        n.dereg(mr.handle).map_err(errno)
    })?;
    let token = rustix::fs::open(
        "/dev/null",
        rustix::fs::OFlags::RDONLY,
        rustix::fs::Mode::empty(),
    )
    .map_err(errno)?;
    drop(buf);
    check_eq!(
        stat("persistent_pins_live")?,
        1,
        "persistent pins with only the child's descriptor"
    );
    proc::send_fd(go.as_fd(), token.as_fd())?;
    proc::wait(child)?;
    drop(n);
    eventually(5, "the persistent pin given back by the child", || {
        Ok(stat("persistent_pins_live")? == 0 && gstat("regions")? == 0)
    })?;
    check_eq!(
        stat("put_pages_wrong_process")?,
        wrong0,
        "put_pages from the wrong process"
    );
    let mut expect = data;
    expect[8000..8000 + reply.len()].copy_from_slice(&reply);
    same_bytes(
        &dtoh(&m, 2 * K64 as usize)?,
        &expect,
        "cuMemcpyDtoH after the child's receive",
    )?;
    eventually(5, "gdrpeer's module references back", || {
        Ok(module_refs()? == refs0)
    })
}

/// Where the driver refuses persistent pins (MIG, vGPU: nvsim's `refuse_persistent`), a
/// persistent export fails with EOPNOTSUPP, from /dev/gdrpeer and through the kernel API,
/// leaving no descriptor, pin or region behind; a normal export of the same memory still
/// works.
fn persistent_refused_by_driver() -> TestResult {
    let (m, data) = filled(K64 as usize, 52)?;
    let d = dev()?;
    let n = nic()?;
    let fds = open_fds()?;
    let (pins0, regions0) = (stat("persistent_pins_live")?, gstat("regions")?);
    nvsim::testing::debugfs("refuse_persistent", "Y")?;
    let r = (|| -> TestResult {
        check_eq!(
            fails(
                d.export_dmabuf_persistent(m.p, K64),
                "EXPORT_DMABUF (persistent) refused by the driver"
            )?,
            Errno::OPNOTSUPP,
            "persistent EXPORT_DMABUF the driver refuses"
        );
        expect_err(
            n.reg_dmabuf(
                -1,
                DMABUF_KAPI | DMABUF_KAPI_PERSISTENT | DMABUF_PINNED_NOREVOKE,
                m.p,
                K64,
            ),
            Errno::OPNOTSUPP,
            "persistent kernel-API export the driver refuses",
        )?;
        check_eq!(open_fds()?, fds, "descriptors after the refusals");
        check_eq!(
            (stat("persistent_pins_live")?, gstat("regions")?),
            (pins0, regions0),
            "persistent pins and regions after the refusals"
        );
        Ok(())
    })();
    nvsim::testing::debugfs("refuse_persistent", "N")?;
    r?;
    let buf = ok(d.export_dmabuf_range(m.p, K64), "EXPORT_DMABUF")?;
    let mr = n.reg_dmabuf(buf.fd.as_raw_fd(), 0, 0, K64).map_err(errno)?;
    same_bytes(
        &n.send(mr.handle, 0, 100).map_err(errno)?,
        &data[..100],
        "bytes through a normal export after the refusal",
    )?;
    n.dereg(mr.handle).map_err(errno)
}

/// EXPORT_DMABUF issued raw on `fd`: the argument as the module wrote it back, or the errno.
pub fn raw_export(
    fd: BorrowedFd<'_>,
    mut e: uapi::ExportDmabuf,
) -> Result<uapi::ExportDmabuf, Errno> {
    // SAFETY: EXPORT_DMABUF reads and writes one `ExportDmabuf`, which holds no pointers.
    unsafe {
        ioctl::ioctl(
            fd,
            ioctl::Updater::<{ uapi::IOCTL_EXPORT_DMABUF }, uapi::ExportDmabuf>::new(&mut e),
        )
    }?;
    Ok(e)
}

/// The errno of a raw EXPORT_DMABUF that must fail (a descriptor it made is closed).
pub fn export_errno(
    fd: BorrowedFd<'_>,
    e: uapi::ExportDmabuf,
    what: &str,
) -> Result<Errno, String> {
    match raw_export(fd, e) {
        Ok(e) => {
            // SAFETY: the descriptor the module just installed; closed once, here.
            drop(unsafe { <rustix::fd::OwnedFd as rustix::fd::FromRawFd>::from_raw_fd(e.fd) });
            Err(format!("{what}: succeeded"))
        }
        Err(errno) => Ok(errno),
    }
}

/// EXPORT_DMABUF's argument for `handle`, or for `[va, va + len)`: the fields are all given,
/// so that the bad requests can set them all.
pub fn export_args(handle: u64, va: u64, len: u64) -> uapi::ExportDmabuf {
    uapi::ExportDmabuf {
        handle,
        va,
        len,
        ..uapi::ExportDmabuf::new()
    }
}

/// The descriptors open in this process.
fn open_fds() -> Result<usize, String> {
    Ok(std::fs::read_dir("/proc/self/fd")
        .map_err(|e| e.to_string())?
        .count())
}

/// Every bad EXPORT_DMABUF fails with its errno, before NVIDIA is called where the input
/// alone is wrong, and leaves no descriptor behind: flags, size, both or neither of a handle
/// and a range, unknown handle, an empty or overlong range, host memory (EINVAL); a revoked
/// handle (ENXIO); a forked child or a process that received the file (EACCES); an argument
/// the module can read but not write back (EFAULT: the dma-buf is dropped, nothing installed).
fn export_bad_input() -> TestResult {
    let (mut m, _) = filled(nvsim::POOL_BLOCK as usize, 27)?;
    let d = dev()?;
    let p = ok(d.pin(m.p, K64, PinFlags::empty()), "pin")?;
    let fds = open_fds()?;
    let pins = stat("get_pages_calls")?;
    let max = param("max_pin_bytes")?;
    let h = p.handle;
    let einval: [(&str, uapi::ExportDmabuf); 12] = [
        (
            "flags 1 (persistent) with a callback pin's handle",
            uapi::ExportDmabuf {
                flags: uapi::EXPORT_PERSISTENT,
                ..export_args(h, 0, 0)
            },
        ),
        (
            "flags 2",
            uapi::ExportDmabuf {
                flags: 2,
                ..export_args(0, m.p, K64)
            },
        ),
        (
            "flags 3",
            uapi::ExportDmabuf {
                flags: 3,
                ..export_args(0, m.p, K64)
            },
        ),
        (
            "flags 0x80000000",
            uapi::ExportDmabuf {
                flags: 1 << 31,
                ..export_args(h, 0, 0)
            },
        ),
        (
            "size 8 short",
            uapi::ExportDmabuf {
                size: size_of::<uapi::ExportDmabuf>() as u32 - 8,
                ..export_args(h, 0, 0)
            },
        ),
        ("handle and range", export_args(h, m.p, K64)),
        ("handle and va", export_args(h, m.p, 0)),
        ("handle and len", export_args(h, 0, K64)),
        ("neither handle nor range", export_args(0, 0, 0)),
        ("unknown handle", export_args(h + 1000, 0, 0)),
        ("range of 0 bytes", export_args(0, m.p, 0)),
        ("range above max_pin_bytes", export_args(0, m.p, max + 1)),
    ];
    for (what, e) in einval {
        check_eq!(export_errno(d.as_fd(), e, what)?, Errno::INVAL, what);
    }
    check_eq!(
        stat("get_pages_calls")?,
        pins,
        "nv-p2p pins for the bad requests"
    );
    check_eq!(
        export_errno(d.as_fd(), export_args(0, 0x1000_0000, K64), "host memory")?,
        Errno::INVAL,
        "range of host memory"
    );
    check_eq!(
        in_child(|| export_errno(d.as_fd(), export_args(h, 0, 0), "child's EXPORT_DMABUF"))?,
        Errno::ACCESS,
        "EXPORT_DMABUF in a forked child"
    );
    check_eq!(
        export_by_scm_receiver(m.p)?,
        Errno::ACCESS,
        "EXPORT_DMABUF on a file received over a socket"
    );

    check_eq!(
        export_into_read_only(d.as_fd(), export_args(h, 0, 0))?,
        Errno::FAULT,
        "EXPORT_DMABUF whose answer cannot be written"
    );
    check_eq!(open_fds()?, fds, "descriptors after the bad requests");

    // Revoked: the memory freed under the handle.
    m.free()?;
    check_eq!(
        fails(d.export_dmabuf(h), "EXPORT_DMABUF of a revoked handle")?,
        Errno::NXIO,
        "revoked handle"
    );
    check_eq!(open_fds()?, fds, "descriptors after the revoked handle");
    ok(d.unpin(h), "unpin")
}

/// The errno of EXPORT_DMABUF of `[va, va + 64 KiB)` in a child that received the file over a
/// Unix socket.
pub fn export_by_scm_receiver(va: u64) -> Result<Errno, String> {
    let (mine, theirs) = proc::unix_pair()?;
    let pid = fork_errno(move || {
        let fd = proc::recv_fd(theirs.as_fd())?;
        export_errno(fd.as_fd(), export_args(0, va, K64), "EXPORT_DMABUF")
    })?;
    // A file the child never had, opened after the fork, reaches it only by the socket.
    proc::send_fd(mine.as_fd(), dev()?.as_fd())?;
    wait_errno(pid)
}

/// The errno of EXPORT_DMABUF with `e` in read-only memory: the module reads the request
/// and exports, then cannot write the answer back, so it must install no descriptor (the
/// callers count them).
pub fn export_into_read_only(fd: BorrowedFd<'_>, e: uapi::ExportDmabuf) -> Result<Errno, String> {
    use rustix::mm::{mmap_anonymous, mprotect, munmap, MapFlags, MprotectFlags, ProtFlags};
    const PAGE: usize = 4096;
    // SAFETY: a new private anonymous page, unmapped below.
    let page = unsafe {
        mmap_anonymous(
            std::ptr::null_mut(),
            PAGE,
            ProtFlags::READ | ProtFlags::WRITE,
            MapFlags::PRIVATE,
        )
    }
    .map_err(errno)?;
    // SAFETY: the page is ours and large enough; then made read-only.
    let r = unsafe {
        page.cast::<uapi::ExportDmabuf>().write(e);
        mprotect(page, PAGE, MprotectFlags::READ)
    }
    .map_err(errno)
    .and_then(|()| {
        // SAFETY: EXPORT_DMABUF reads one `ExportDmabuf` at `page`, which lives until the
        // munmap below, and fails to write it.
        let r = unsafe { libc::ioctl(fd.as_raw_fd(), uapi::IOCTL_EXPORT_DMABUF as _, page) };
        let errno =
            Errno::from_raw_os_error(std::io::Error::last_os_error().raw_os_error().unwrap_or(0));
        check!(r == -1, "EXPORT_DMABUF into read-only memory succeeded");
        Ok(errno)
    });
    // SAFETY: the page mapped above, unmapped once.
    let _ = unsafe { munmap(page, PAGE) };
    r
}

/// The dma-buf tests, run with the NIC's (`gdrpeer-test --nic`).
pub const TESTS: &[Test] = &[
    ("gdrpeer-dmabuf-round-trip-dynamic", round_trip_dynamic),
    ("gdrpeer-dmabuf-round-trip-pinned", round_trip_pinned),
    ("gdrpeer-dmabuf-round-trip-kapi", round_trip_kapi),
    (
        "gdrpeer-dmabuf-unaligned-sub-page-window",
        unaligned_sub_page_window,
    ),
    ("gdrpeer-dmabuf-free-during-send", free_during_send),
    (
        "gdrpeer-dmabuf-free-during-receive-writes-no-freed-memory",
        free_during_receive_writes_no_freed_memory,
    ),
    (
        "gdrpeer-dmabuf-invalidation-waits-for-no-other-chunk",
        invalidation_waits_for_no_other_chunk,
    ),
    (
        "gdrpeer-dmabuf-free-waits-for-a-slow-importer",
        free_waits_for_a_slow_importer,
    ),
    (
        "gdrpeer-dmabuf-fd-inherited-by-fork-child",
        fd_inherited_by_fork_child,
    ),
    (
        "gdrpeer-dmabuf-fd-passed-by-scm-rights",
        fd_passed_by_scm_rights,
    ),
    ("gdrpeer-dmabuf-close-fd-then-unpin", close_fd_then_unpin),
    ("gdrpeer-dmabuf-unpin-then-close-fd", unpin_then_close_fd),
    ("gdrpeer-dmabuf-close-file-then-fd", close_file_then_fd),
    (
        "gdrpeer-dmabuf-importer-without-p2p-refused",
        importer_without_p2p_refused,
    ),
    (
        "gdrpeer-dmabuf-importer-without-invalidate-refused",
        importer_without_invalidate_refused,
    ),
    (
        "gdrpeer-dmabuf-exports-of-a-cached-region-call-no-driver",
        exports_of_a_cached_region_call_no_driver,
    ),
    ("gdrpeer-dmabuf-export-bad-input", export_bad_input),
    (
        "gdrpeer-dmabuf-export-racing-a-free-queues-no-event",
        export_racing_a_free_queues_no_event,
    ),
    (
        "gdrpeer-dmabuf-persistent-pinned-import-round-trip",
        persistent_pinned_import_round_trip,
    ),
    (
        "gdrpeer-dmabuf-persistent-kapi-pinned-import",
        persistent_kapi_pinned_import,
    ),
    (
        "gdrpeer-dmabuf-persistent-survives-free",
        persistent_survives_free,
    ),
    (
        "gdrpeer-dmabuf-persistent-fork-close-and-unload",
        persistent_fork_close_and_unload,
    ),
    (
        "gdrpeer-dmabuf-persistent-refused-by-driver",
        persistent_refused_by_driver,
    ),
    // Last: a step whose free hangs leaves a process holding gdrpeer.
    (
        "gdrpeer-failnth-gdrnic-reg-dmabuf",
        crate::nic::failnth_reg_dmabuf,
    ),
];
