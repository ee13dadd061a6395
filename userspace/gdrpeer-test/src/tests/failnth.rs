// SPDX-License-Identifier: GPL-2.0

//! Allocation-failure walks of `/dev/gdrpeer` and `/dev/gdrdrv` ([`crate::failnth`]): open,
//! PIN (a miss, a hit, a miss that merges two cached regions), UNPIN, GET_PAGES, DMA_MAP to
//! the edu device, STATS, GET_INFO, mmap and the first fault, EXPORT_DMABUF and close; gdrdrv's
//! PIN_BUFFER, mmap and the first fault, and UNPIN_BUFFER. A failed call leaves the file
//! usable and the cache consistent: no handle made, and as many nv-p2p pins live as the file
//! counts regions.

use crate::failnth::{allocates_nothing, fail_once, walk, Op, Ready};
use crate::helpers::ErrnoOf;
use crate::helpers::{all_released, dev, edu, fails, gstat, ok, pin_args, raw_pin, K64};
use gdrpeer::{
    gdrdrv::{self, Gdrdrv},
    uapi, Device, PciAddress, PinFlags,
};
use nvsim::testing::{errno, stat, Test, TestResult};
use nvsim::{check, check_eq, Gpu};
use rustix::{
    fd::{AsFd, BorrowedFd, FromRawFd, OwnedFd},
    fs::{open, Mode, OFlags},
    io::Errno,
    ioctl,
    mm::{mmap, munmap, MapFlags, ProtFlags},
};
use std::ffi::c_void;

/// What most walks need besides the GPU memory: an open `/dev/gdrpeer`, a handle, and room
/// for what the call returns, all made before the call.
struct Pinned {
    d: Device,
    va: u64,
    /// The handle the setup pinned, or the one the call made.
    handle: u64,
    /// A count, or a handle, the call returned.
    out: u64,
    /// Address array of GET_PAGES and DMA_MAP, written once so that the call faults in no
    /// page.
    addrs: Vec<u64>,
    peer: Option<PciAddress>,
    map: Option<FarMapping>,
    dmabuf: Option<OwnedFd>,
}

/// `pages` GPU pages, nothing pinned.
fn memory(pages: u64) -> Ready<Pinned> {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(pages * K64).map_err(errno)?;
    let s = Pinned {
        d: dev()?,
        va,
        handle: 0,
        out: 0,
        addrs: vec![u64::MAX; pages as usize + 1],
        peer: None,
        map: None,
        dmabuf: None,
    };
    Ok((s, Some(gpu)))
}

/// `pages` GPU pages, pinned whole.
fn pinned(pages: u64) -> Ready<Pinned> {
    let (mut s, gpu) = memory(pages)?;
    s.handle = ok(s.d.pin(s.va, pages * K64, PinFlags::empty()), "pin")?.handle;
    Ok((s, gpu))
}

fn gdrpeer_errno(e: gdrpeer::Error) -> Errno {
    e.errno_of().unwrap_or(Errno::IO)
}

/// After a failed call: no handle left but `handles`, and the cache agrees with nvsim (as many
/// pins live as regions, none of another file).
fn consistent(d: &Device, handles: u64) -> TestResult {
    let s = ok(d.stats(), "stats")?;
    check_eq!(s.handles, handles, "handles after the failed call");
    check_eq!(
        (gstat("regions")?, stat("pins_live")?),
        (s.file.regions, s.file.regions),
        format!(
            "gdrpeer's regions, nvsim's pins (the file has {} regions)",
            s.file.regions
        )
    );
    Ok(())
}

/// Raw UNPIN.
fn raw_unpin(fd: BorrowedFd<'_>, handle: u64) -> Result<(), Errno> {
    let u = uapi::Unpin {
        handle,
        ..uapi::Unpin::new()
    };
    // SAFETY: UNPIN reads one `uapi::Unpin`.
    unsafe {
        ioctl::ioctl(
            fd,
            ioctl::Setter::<{ uapi::IOCTL_UNPIN }, uapi::Unpin>::new(u),
        )
    }
}

/// A gdrpeer ioctl that reads and writes one `T`.
///
/// # Safety
///
/// `OPCODE` takes a `T`, and any user memory `arg` names for it to write is the caller's to
/// give (GET_PAGES and DMA_MAP: `count` u64s at `addrs`).
unsafe fn update<const OPCODE: ioctl::Opcode, T>(
    fd: BorrowedFd<'_>,
    arg: &mut T,
) -> Result<(), Errno> {
    // SAFETY: the caller's contract.
    unsafe { ioctl::ioctl(fd, ioctl::Updater::<OPCODE, T>::new(arg)) }
}

// --- open ----------------------------------------------------------------------------------

fn open_call(fd: &mut Option<OwnedFd>) -> Result<(), Errno> {
    *fd = Some(open(
        "/dev/gdrpeer",
        OFlags::RDWR | OFlags::CLOEXEC,
        Mode::empty(),
    )?);
    Ok(())
}

fn open_finish(fd: Option<OwnedFd>, r: Result<(), Errno>) -> TestResult {
    if let (Ok(()), Some(fd)) = (r, &fd) {
        let mut s = uapi::Stats::new();
        // SAFETY: STATS reads and writes one `uapi::Stats`.
        unsafe { update::<{ uapi::IOCTL_STATS }, _>(fd.as_fd(), &mut s) }
            .map_err(|e| format!("STATS on the new file: {e}"))?;
        check_eq!(s.handles, 0, "handles of the new file");
    }
    Ok(())
}

const OPEN: Op<Option<OwnedFd>> = Op {
    name: "open",
    setup: || Ok((None, None)),
    call: open_call,
    finish: open_finish,
    forked: false,
};

// --- PIN -----------------------------------------------------------------------------------

/// A miss: `[va + 100, +128 KiB)`, three pages.
fn pin_miss_call(s: &mut Pinned) -> Result<(), Errno> {
    s.handle = raw_pin(s.d.as_fd(), pin_args(s.va + 100, 2 * K64))?;
    Ok(())
}

fn pin_miss_finish(s: Pinned, r: Result<(), Errno>) -> TestResult {
    if r.is_err() {
        return consistent(&s.d, 0);
    }
    let i = ok(s.d.info(s.handle), "info")?;
    check_eq!(
        (i.aligned_va, i.offset, i.page_count),
        (s.va, 100, 3),
        "window"
    );
    check_eq!(ok(s.d.stats(), "stats")?.file.misses, 1, "misses");
    ok(s.d.unpin(s.handle), "unpin")
}

const PIN_MISS: Op<Pinned> = Op {
    name: "pin-miss",
    setup: || memory(4),
    call: pin_miss_call,
    finish: pin_miss_finish,
    forked: false,
};

/// Two pages pinned and unpinned: cached, unused.
fn cached() -> Ready<Pinned> {
    let (s, gpu) = pinned(2)?;
    ok(s.d.unpin(s.handle), "unpin")?;
    Ok((s, gpu))
}

fn pin_hit_call(s: &mut Pinned) -> Result<(), Errno> {
    s.handle = raw_pin(s.d.as_fd(), pin_args(s.va, 2 * K64))?;
    Ok(())
}

/// The hit made a handle of the cached region; a failed one left it cached: the next pin
/// hits it. (A failed hit counts as a hit: the counter moves before the handle is made.)
fn pin_hit_finish(s: Pinned, r: Result<(), Errno>) -> TestResult {
    if r.is_err() {
        consistent(&s.d, 0)?;
        let before = ok(s.d.stats(), "stats")?.file;
        check_eq!(before.regions, 1, "regions after a failed hit");
        let p = ok(s.d.pin(s.va, 2 * K64, PinFlags::empty()), "pin again")?;
        let after = ok(s.d.stats(), "stats")?.file;
        check_eq!(
            (after.hits - before.hits, after.misses - before.misses),
            (1, 0),
            "new hits, misses of the pin after the failed hit"
        );
        return ok(s.d.unpin(p.handle), "unpin");
    }
    let st = ok(s.d.stats(), "stats")?;
    check_eq!((st.file.hits, st.file.misses), (1, 1), "hits, misses");
    ok(s.d.unpin(s.handle), "unpin")
}

const PIN_HIT: Op<Pinned> = Op {
    name: "pin-hit",
    setup: cached,
    call: pin_hit_call,
    finish: pin_hit_finish,
    forked: false,
};

/// Pages [0, 2) and [2, 4) pinned and unpinned: two cached regions, both unused.
fn two_cached() -> Ready<Pinned> {
    let (s, gpu) = memory(4)?;
    for at in [0, 2 * K64] {
        let p = ok(s.d.pin(s.va + at, 2 * K64, PinFlags::empty()), "pin")?;
        ok(s.d.unpin(p.handle), "unpin")?;
    }
    Ok((s, gpu))
}

/// [1, 3) overlaps both: one region [0, 4) replaces them.
fn pin_merge_call(s: &mut Pinned) -> Result<(), Errno> {
    s.handle = raw_pin(s.d.as_fd(), pin_args(s.va + K64, 2 * K64))?;
    Ok(())
}

fn pin_merge_finish(s: Pinned, r: Result<(), Errno>) -> TestResult {
    if r.is_err() {
        return consistent(&s.d, 0);
    }
    let i = ok(s.d.info(s.handle), "info")?;
    check_eq!(
        (i.region_va, i.region_len),
        (s.va, 4 * K64),
        "merged region"
    );
    consistent(&s.d, 1)?;
    check_eq!(stat("pins_live")?, 1, "pins after the merge");
    ok(s.d.unpin(s.handle), "unpin")
}

const PIN_MERGE: Op<Pinned> = Op {
    name: "pin-merge",
    setup: two_cached,
    call: pin_merge_call,
    finish: pin_merge_finish,
    forked: false,
};

// --- UNPIN, GET_PAGES, DMA_MAP, STATS, GET_INFO --------------------------------------------

fn unpin_call(s: &mut Pinned) -> Result<(), Errno> {
    raw_unpin(s.d.as_fd(), s.handle)
}

fn unpin_finish(s: Pinned, r: Result<(), Errno>) -> TestResult {
    if r.is_err() {
        consistent(&s.d, 1)?;
        return ok(s.d.unpin(s.handle), "unpin after the failed one");
    }
    check_eq!(
        fails(s.d.info(s.handle), "info of the unpinned handle")?,
        Errno::INVAL,
        "info of the unpinned handle"
    );
    consistent(&s.d, 0)
}

const UNPIN: Op<Pinned> = Op {
    name: "unpin",
    setup: || pinned(2),
    call: unpin_call,
    finish: unpin_finish,
    forked: false,
};

fn get_pages_call(s: &mut Pinned) -> Result<(), Errno> {
    let mut g = uapi::GetPages {
        count: s.addrs.len() as u32,
        handle: s.handle,
        addrs: s.addrs.as_mut_ptr() as u64,
        ..uapi::GetPages::new()
    };
    // SAFETY: GET_PAGES reads and writes one `uapi::GetPages` and writes at most `count`
    // u64s to `addrs`, which has that many.
    unsafe { update::<{ uapi::IOCTL_GET_PAGES }, _>(s.d.as_fd(), &mut g) }?;
    s.out = u64::from(g.count);
    Ok(())
}

/// The addresses the call wrote are those of a plain call.
fn same_addresses(s: Pinned, r: Result<(), Errno>, plain: Vec<u64>) -> TestResult {
    if r.is_ok() {
        check_eq!(s.out, 4, "addresses written");
        check_eq!(s.addrs[..4], plain[..], "addresses");
    }
    ok(s.d.unpin(s.handle), "unpin")
}

fn get_pages_finish(s: Pinned, r: Result<(), Errno>) -> TestResult {
    let plain = ok(s.d.get_pages(s.handle), "get_pages")?;
    same_addresses(s, r, plain)
}

const GET_PAGES: Op<Pinned> = Op {
    name: "get-pages",
    setup: || pinned(4),
    call: get_pages_call,
    finish: get_pages_finish,
    forked: false,
};

fn dma_map_setup() -> Ready<Pinned> {
    let (mut s, gpu) = pinned(4)?;
    s.peer = Some(edu()?);
    Ok((s, gpu))
}

fn dma_map_call(s: &mut Pinned) -> Result<(), Errno> {
    let peer = s.peer.expect("set up");
    let mut m = uapi::DmaMap {
        count: s.addrs.len() as u32,
        handle: s.handle,
        addrs: s.addrs.as_mut_ptr() as u64,
        pci_domain: peer.domain,
        pci_bus: peer.bus,
        pci_devfn: peer.devfn,
        ..uapi::DmaMap::new()
    };
    // SAFETY: DMA_MAP reads and writes one `uapi::DmaMap` and writes at most `count` u64s
    // to `addrs`, which has that many.
    unsafe { update::<{ uapi::IOCTL_DMA_MAP }, _>(s.d.as_fd(), &mut m) }?;
    s.out = u64::from(m.count);
    Ok(())
}

fn dma_map_finish(s: Pinned, r: Result<(), Errno>) -> TestResult {
    let plain = ok(s.d.dma_map(s.handle, s.peer.expect("set up")), "dma_map")?;
    same_addresses(s, r, plain)
}

const DMA_MAP: Op<Pinned> = Op {
    name: "dma-map",
    setup: dma_map_setup,
    call: dma_map_call,
    finish: dma_map_finish,
    forked: false,
};

fn stats_call(s: &mut Pinned) -> Result<(), Errno> {
    let mut st = uapi::Stats::new();
    // SAFETY: STATS reads and writes one `uapi::Stats`.
    unsafe { update::<{ uapi::IOCTL_STATS }, _>(s.d.as_fd(), &mut st) }?;
    s.out = st.handles;
    Ok(())
}

fn info_call(s: &mut Pinned) -> Result<(), Errno> {
    let mut i = uapi::Info {
        handle: s.handle,
        ..uapi::Info::new()
    };
    // SAFETY: GET_INFO reads and writes one `uapi::Info`.
    unsafe { update::<{ uapi::IOCTL_GET_INFO }, _>(s.d.as_fd(), &mut i) }?;
    s.out = u64::from(i.page_count);
    Ok(())
}

/// STATS counted one handle; GET_INFO gave its two pages.
fn one_finish(s: Pinned, r: Result<(), Errno>) -> TestResult {
    if r.is_ok() {
        check!(
            s.out == 1 || s.out == 2,
            "handles or pages: {}, expected 1 (STATS) or 2 (GET_INFO)",
            s.out
        );
    }
    ok(s.d.unpin(s.handle), "unpin")
}

const STATS: Op<Pinned> = Op {
    name: "stats",
    setup: || pinned(2),
    call: stats_call,
    finish: one_finish,
    forked: false,
};

const GET_INFO: Op<Pinned> = Op {
    name: "get-info",
    setup: || pinned(2),
    call: info_call,
    finish: one_finish,
    forked: false,
};

// --- mmap, EXPORT_DMABUF, close --------------------------------------------------------------

/// The byte the mapping walks read back through the mapping.
const MARK: u8 = 0x5a;

fn marked() -> Ready<Pinned> {
    let (s, gpu) = pinned(2)?;
    if let Some(gpu) = &gpu {
        gpu.write(s.va + 4096, &[MARK]).map_err(errno)?;
    }
    Ok((s, gpu))
}

/// Where the mapping walks map: no other mapping within 512 GiB, so that the first fault
/// allocates page tables (a PUD, a PMD and a PTE page), and the walk fails those too.
const FAR: usize = 0x2000_0000_0000;

/// A shared mapping at [`FAR`], unmapped on drop (with the page tables under it).
struct FarMapping {
    ptr: *mut u8,
    len: usize,
}

impl FarMapping {
    /// mmap of `len` bytes of `fd` at `offset`, [`FAR`] as the hint: one system call.
    fn new(fd: BorrowedFd<'_>, offset: u64, len: usize) -> Result<Self, Errno> {
        // SAFETY: without MAP_FIXED the hint replaces nothing; the FarMapping owns the new
        // mapping and unmaps it once.
        let ptr = unsafe {
            mmap(
                FAR as *mut c_void,
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED,
                fd,
                offset,
            )
        }?;
        Ok(FarMapping {
            ptr: ptr.cast(),
            len,
        })
    }

    /// mmap of a two-page window at `offset` of `fd` and a read of its second 4 KiB page (the
    /// first fault): the mapping and the byte read.
    fn touched(fd: BorrowedFd<'_>, offset: u64) -> Result<(Self, u8), Errno> {
        let m = Self::new(fd, offset, 2 * K64 as usize)?;
        // SAFETY: in bounds of a live mapping we own.
        let byte = unsafe { m.ptr.add(4096).read_volatile() };
        Ok((m, byte))
    }
}

/// The mapping a walk's call made lies at [`FAR`] (its first fault had page tables to
/// allocate) and read [`MARK`].
fn check_touched(map: &Option<FarMapping>, byte: u64) -> TestResult {
    let m = map.as_ref().ok_or("no mapping")?;
    check_eq!(m.ptr as usize, FAR, "the mapping's address (the hint)");
    check_eq!(byte, u64::from(MARK), "the byte read through the mapping");
    Ok(())
}

impl Drop for FarMapping {
    fn drop(&mut self) {
        // SAFETY: the mapping is ours and unmapped only here.
        let _ = unsafe { munmap(self.ptr.cast(), self.len) };
    }
}

/// mmap of the window and a read of its second 4 KiB page: the first fault.
fn mmap_call(s: &mut Pinned) -> Result<(), Errno> {
    let (m, byte) = FarMapping::touched(s.d.as_fd(), uapi::mmap_offset(s.handle, 0))?;
    (s.map, s.out) = (Some(m), u64::from(byte));
    Ok(())
}

fn mapped_finish(s: Pinned, r: Result<(), Errno>) -> TestResult {
    if r.is_ok() {
        check_touched(&s.map, s.out)?;
    }
    drop(s.map);
    ok(s.d.unpin(s.handle), "unpin")
}

const MMAP: Op<Pinned> = Op {
    name: "mmap",
    setup: marked,
    call: mmap_call,
    finish: mapped_finish,
    forked: true,
};

/// `struct gdrpeer_export_dmabuf` (ABI 1.4; the library does not wrap it yet).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct ExportDmabuf {
    size: u32,
    flags: u32,
    handle: u64,
    va: u64,
    len: u64,
    fd: i32,
    page_count: u32,
    aligned_va: u64,
    offset: u64,
    dmabuf_size: u64,
}

const IOCTL_EXPORT_DMABUF: ioctl::Opcode =
    ioctl::opcode::read_write::<ExportDmabuf>(uapi::IOCTL_MAGIC, 7);

fn export_call(s: &mut Pinned) -> Result<(), Errno> {
    let mut e = ExportDmabuf {
        size: size_of::<ExportDmabuf>() as u32,
        handle: s.handle,
        ..Default::default()
    };
    // SAFETY: EXPORT_DMABUF reads and writes one `ExportDmabuf`.
    unsafe {
        ioctl::ioctl(
            s.d.as_fd(),
            ioctl::Updater::<IOCTL_EXPORT_DMABUF, ExportDmabuf>::new(&mut e),
        )
    }?;
    // SAFETY: the call returned a new descriptor, ours to close.
    s.dmabuf = Some(unsafe { OwnedFd::from_raw_fd(e.fd) });
    s.out = e.dmabuf_size;
    Ok(())
}

fn export_finish(s: Pinned, r: Result<(), Errno>) -> TestResult {
    if r.is_ok() {
        check!(s.dmabuf.is_some(), "no dma-buf");
        check_eq!(s.out, 2 * K64, "dma-buf size");
    }
    // The dma-buf holds the region: closing it gives it back to the cache.
    drop(s.dmabuf);
    ok(s.d.unpin(s.handle), "unpin")
}

const EXPORT_DMABUF: Op<Pinned> = Op {
    name: "export-dmabuf",
    setup: || pinned(2),
    call: export_call,
    finish: export_finish,
    forked: false,
};

/// A file with two cached unused regions and two handles, its descriptor raw.
fn busy_file() -> Ready<Option<OwnedFd>> {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(4 * K64).map_err(errno)?;
    let d = dev()?;
    for page in 0..4 {
        let p = ok(d.pin(va + page * K64, K64, PinFlags::empty()), "pin")?;
        if page < 2 {
            ok(d.unpin(p.handle), "unpin")?;
        }
    }
    // The descriptor alone, so that the call is the close.
    let fd = d.as_fd().try_clone_to_owned().map_err(|e| e.to_string())?;
    drop(d);
    Ok((Some(fd), Some(gpu)))
}

/// close, and the file's release it runs: every region unpinned.
fn close_call(fd: &mut Option<OwnedFd>) -> Result<(), Errno> {
    drop(fd.take());
    Ok(())
}

const CLOSE: Op<Option<OwnedFd>> = Op {
    name: "close",
    setup: busy_file,
    call: close_call,
    // The walk's checks find what the release left.
    finish: |_, _| Ok(()),
    forked: false,
};

// --- /dev/gdrdrv ------------------------------------------------------------------------------

/// An open `/dev/gdrdrv` and GPU memory, with a pin of it if asked.
struct GdrdrvPinned {
    g: Gdrdrv,
    va: u64,
    handle: u64,
    out: u64,
    map: Option<FarMapping>,
}

fn gdrdrv_memory(pin: bool) -> Ready<GdrdrvPinned> {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(2 * K64).map_err(errno)?;
    gpu.write(va + 4096, &[MARK]).map_err(errno)?;
    let g = Gdrdrv::open_default().map_err(|e| e.to_string())?;
    let handle = if pin {
        ok(g.pin(va, 2 * K64, 0, 0), "PIN_BUFFER")?
    } else {
        0
    };
    let s = GdrdrvPinned {
        g,
        va,
        handle,
        out: 0,
        map: None,
    };
    Ok((s, Some(gpu)))
}

fn gdrdrv_pin_call(s: &mut GdrdrvPinned) -> Result<(), Errno> {
    s.handle = s.g.pin(s.va + 100, 1000, 0, 0).map_err(gdrpeer_errno)?;
    Ok(())
}

fn gdrdrv_pin_finish(s: GdrdrvPinned, r: Result<(), Errno>) -> TestResult {
    if r.is_err() {
        return Ok(());
    }
    check_eq!(ok(s.g.info(s.handle), "GET_INFO")?.va, s.va, "pinned va");
    ok(s.g.unpin(s.handle), "UNPIN_BUFFER")
}

const GDRDRV_PIN: Op<GdrdrvPinned> = Op {
    name: "gdrdrv-pin",
    setup: || gdrdrv_memory(false),
    call: gdrdrv_pin_call,
    finish: gdrdrv_pin_finish,
    forked: false,
};

/// mmap at `handle << 12` and a read of the second 4 KiB page: the first fault.
fn gdrdrv_map_call(s: &mut GdrdrvPinned) -> Result<(), Errno> {
    let (m, byte) = FarMapping::touched(s.g.as_fd(), s.handle << gdrdrv::PAGE_SHIFT)?;
    (s.map, s.out) = (Some(m), u64::from(byte));
    Ok(())
}

fn gdrdrv_map_finish(s: GdrdrvPinned, r: Result<(), Errno>) -> TestResult {
    if r.is_ok() {
        check_touched(&s.map, s.out)?;
    }
    drop(s.map);
    ok(s.g.unpin(s.handle), "UNPIN_BUFFER")
}

const GDRDRV_MAP: Op<GdrdrvPinned> = Op {
    name: "gdrdrv-map",
    setup: || gdrdrv_memory(true),
    call: gdrdrv_map_call,
    finish: gdrdrv_map_finish,
    forked: true,
};

fn gdrdrv_unpin_call(s: &mut GdrdrvPinned) -> Result<(), Errno> {
    s.g.unpin(s.handle).map_err(gdrpeer_errno)
}

fn gdrdrv_unpinned_finish(s: GdrdrvPinned, r: Result<(), Errno>) -> TestResult {
    match r {
        Ok(()) => {
            check_eq!(
                s.g.info(s.handle).err().and_then(|e| e.errno_of()),
                Some(Errno::INVAL),
                "GET_INFO of the unpinned handle"
            );
            Ok(())
        }
        Err(_) => ok(s.g.unpin(s.handle), "UNPIN_BUFFER after the failed one"),
    }
}

const GDRDRV_UNPIN: Op<GdrdrvPinned> = Op {
    name: "gdrdrv-unpin",
    setup: || gdrdrv_memory(true),
    call: gdrdrv_unpin_call,
    finish: gdrdrv_unpinned_finish,
    forked: false,
};

/// The bad-input table's `allocation-fails` row: open, PIN, DMA_MAP, mmap, EXPORT_DMABUF and
/// gdrdrv's PIN_BUFFER, each with its first allocation failed (the walks find that one fails
/// the call): what each returned.
pub fn first_allocations_failed() -> Result<Vec<Result<(), Errno>>, String> {
    Ok(vec![
        fail_once(&OPEN, 1)?,
        fail_once(&PIN_MISS, 1)?,
        fail_once(&DMA_MAP, 1)?,
        fail_once(&MMAP, 1)?,
        fail_once(&EXPORT_DMABUF, 1)?,
        fail_once(&GDRDRV_PIN, 1)?,
    ])
}

pub const TESTS: &[Test] = &[
    ("gdrpeer-failnth-open", || walk(&OPEN, all_released)),
    ("gdrpeer-failnth-pin-miss", || walk(&PIN_MISS, all_released)),
    // A warm hit allocates nothing (Documentation/dev/performance.rst, P2).
    ("gdrpeer-pin-hit-allocates-nothing", || {
        allocates_nothing(&PIN_HIT, all_released)
    }),
    ("gdrpeer-failnth-pin-merge", || {
        walk(&PIN_MERGE, all_released)
    }),
    ("gdrpeer-failnth-unpin", || walk(&UNPIN, all_released)),
    ("gdrpeer-failnth-dma-map", || walk(&DMA_MAP, all_released)),
    // No allocation to fail: these calls must make none (a walk would fail nothing of
    // gdrpeer's, which the host fails). GET_PAGES copies the region's own array (since
    // 2026-11-29; it copied a vmalloc-able copy, which could fail with ENOMEM).
    ("gdrpeer-get-pages-allocates-nothing", || {
        allocates_nothing(&GET_PAGES, all_released)
    }),
    ("gdrpeer-stats-allocates-nothing", || {
        allocates_nothing(&STATS, all_released)
    }),
    ("gdrpeer-get-info-allocates-nothing", || {
        allocates_nothing(&GET_INFO, all_released)
    }),
    ("gdrpeer-failnth-mmap", || walk(&MMAP, all_released)),
    ("gdrpeer-failnth-export-dmabuf", || {
        walk(&EXPORT_DMABUF, all_released)
    }),
    // The release allocates nothing of gdrpeer's (Context::close takes its trees out
    // whole); the walk fails the file-release path's own allocations (the kernel's, made
    // with __GFP_NOWARN, so fault injection names no module) and checks that every region
    // is still given back.
    (
        "gdrpeer-close-survives-the-kernels-allocation-failures",
        || walk(&CLOSE, all_released),
    ),
    ("gdrpeer-failnth-gdrdrv-pin", || {
        walk(&GDRDRV_PIN, all_released)
    }),
    ("gdrpeer-failnth-gdrdrv-map", || {
        walk(&GDRDRV_MAP, all_released)
    }),
    ("gdrpeer-failnth-gdrdrv-unpin", || {
        walk(&GDRDRV_UNPIN, all_released)
    }),
];
