// SPDX-License-Identifier: GPL-2.0

//! `/dev/gdrdrv` at the ioctl level, with the structs of the gdrdrv ABI written out here: the
//! version and attributes, a pin of an unaligned buffer, its info, a mapping at
//! `handle << 12` whose bytes are the GPU's, UNPIN while mapped, a re-pin served by the cache,
//! GET_CB_FLAG and an event after the free, and the errors. Then, through the library's
//! client ([`gdrpeer::gdrdrv`]): a mapped handle through eviction pressure, libgdrapi's
//! gdr_close order (UNPIN, close, then a touch: SIGBUS). `gdrdrv_abi` has libgdrapi's calls,
//! the handles' numbering, REQ_MAPPING_TYPE and mmap's refusals.

use crate::helpers::raw_mmap;
use crate::helpers::{eventually, gstat, mapping_round_trip, ok, pattern, small_region_limit, K64};
use crate::proc::dies_of_sigbus;
use crate::uffd;
use gdrpeer::gdrdrv::Gdrdrv;
use nvsim::testing::{self as harness, debugfs, errno, Test, TestResult};
use nvsim::{check, check_eq, Gpu};
use rustix::{
    fd::{AsFd, AsRawFd, OwnedFd},
    fs::{open, Mode, OFlags},
    io::{read, Errno},
    mm::{munmap, MapFlags},
};

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct PinBuffer {
    addr: u64,
    size: u64,
    p2p_token: u64,
    va_space: u32,
    pad: u32,
    handle: u64,
}

#[repr(C)]
#[derive(Default)]
struct Handle {
    handle: u64,
}

#[repr(C)]
#[derive(Default)]
struct CbFlag {
    handle: u64,
    flag: u32,
    pad: u32,
}

#[repr(C)]
#[derive(Default)]
struct InfoV2 {
    handle: u64,
    va: u64,
    mapped_size: u64,
    page_size: u32,
    tsc_khz: u32,
    tm_cycles: u64,
    mapping_type: u32,
    pad: u32,
}

#[repr(C)]
#[derive(Default)]
struct Attr {
    attr: u32,
    val: u32,
}

#[repr(C)]
#[derive(Default)]
struct Version {
    version: u32,
    minimum: u32,
}

const PIN_BUFFER: u64 = 0xc028_da01;
const UNPIN_BUFFER: u64 = 0xc008_da02;
const GET_CB_FLAG: u64 = 0xc008_da03;
const GET_INFO_V2: u64 = 0xc008_da05;
const GET_ATTR: u64 = 0xc008_da06;
const GET_VERSION: u64 = 0xc008_daff;

fn ioctl<T>(fd: &OwnedFd, cmd: u64, arg: &mut T) -> Result<(), Errno> {
    // SAFETY: `arg` is the struct the command takes, borrowed for the call.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), cmd as _, std::ptr::from_mut(arg)) };
    if r < 0 {
        return Err(Errno::from_io_error(&std::io::Error::last_os_error()).unwrap());
    }
    Ok(())
}

/// [`ioctl`] with the argument at `arg`, which the call may write through.
fn ioctl_at<T>(fd: &OwnedFd, cmd: u64, arg: *mut T) -> Result<(), Errno> {
    // SAFETY: `arg` points to the struct the command takes (the caller's).
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), cmd as _, arg) };
    if r < 0 {
        return Err(Errno::from_io_error(&std::io::Error::last_os_error()).unwrap());
    }
    Ok(())
}

/// A new shared mapping of handle `h`'s first 64 KiB (at file offset `h << 12`), the
/// caller's to unmap.
fn map_handle(fd: &OwnedFd, h: u64) -> Result<*mut u8, String> {
    raw_mmap(fd.as_fd(), h << 12, K64 as usize, MapFlags::SHARED)
        .map_err(|e| format!("mmap of handle {h} (offset {h} << 12): {e}"))
}

fn gdrdrv() -> Result<OwnedFd, String> {
    open(
        "/dev/gdrdrv",
        OFlags::RDWR | OFlags::CLOEXEC | OFlags::NONBLOCK,
        Mode::empty(),
    )
    .map_err(|e| format!("open /dev/gdrdrv: {e}"))
}

fn pin(fd: &OwnedFd, addr: u64, size: u64) -> Result<u64, String> {
    let mut p = PinBuffer {
        addr,
        size,
        ..Default::default()
    };
    ioctl(fd, PIN_BUFFER, &mut p).map_err(|e| format!("PIN_BUFFER: {e}"))?;
    Ok(p.handle)
}

fn gdrdrv_pin_map_unpin() -> TestResult {
    let fd = gdrdrv()?;
    let mut v = Version::default();
    ioctl(&fd, GET_VERSION, &mut v).map_err(errno)?;
    check_eq!((v.version, v.minimum), (0x2_0006, 0x2_0000), "versions");
    let mut a = Attr {
        attr: 1,
        ..Default::default()
    };
    ioctl(&fd, GET_ATTR, &mut a).map_err(errno)?;
    check_eq!(a.val, 0, "USE_PERSISTENT_MAPPING");
    a.attr = 77;
    check_eq!(
        ioctl(&fd, GET_ATTR, &mut a),
        Err(Errno::INVAL),
        "unknown attr"
    );
    check_eq!(
        ioctl(&fd, 0xc008_da42, &mut a),
        Err(Errno::NOTTY),
        "unknown command"
    );

    let gpu = Gpu::open().map_err(errno)?;
    let (va, id) = gpu.alloc(2 * K64).map_err(errno)?;
    // gdrdrv maps only a pin that starts on a GPU page.
    let h = pin(&fd, va, 1000)?;
    let mut i = InfoV2 {
        handle: h,
        ..Default::default()
    };
    ioctl(&fd, GET_INFO_V2, &mut i).map_err(errno)?;
    check_eq!((i.va, i.mapped_size, i.page_size), (va, K64, 65536), "info");
    check_eq!(i.mapping_type, 0, "mapping type before mmap (NONE)");
    check!(i.tsc_khz != 0, "tsc_khz");

    let ptr = map_handle(&fd, h)?;
    let data = pattern(3, K64 as usize);
    // SAFETY: the mapping is K64 bytes long.
    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), ptr, data.len()) };
    check_eq!(
        gpu.read(va, data.len()).map_err(errno)?,
        data,
        "GPU memory written through the mapping"
    );
    ioctl(&fd, GET_INFO_V2, &mut i).map_err(errno)?;
    check_eq!(i.mapping_type, 1, "mapping type while mapped (WC)");
    let mut u = Handle { handle: h };
    ioctl(&fd, UNPIN_BUFFER, &mut u).map_err(|e| format!("UNPIN while mapped: {e}"))?;
    // SAFETY: our mapping; its pages are zapped, unmapping is fine.
    unsafe { munmap(ptr.cast(), K64 as usize) }.map_err(errno)?;
    check_eq!(
        ioctl(&fd, UNPIN_BUFFER, &mut u),
        Err(Errno::INVAL),
        "UNPIN twice"
    );

    let hits = gstat("hits")?;
    let h2 = pin(&fd, va + 10, 10)?;
    check_eq!(gstat("hits")?, hits + 1, "hits after re-pinning the buffer");
    let mut c = CbFlag {
        handle: h2,
        ..Default::default()
    };
    ioctl(&fd, GET_CB_FLAG, &mut c).map_err(errno)?;
    check_eq!(c.flag, 0, "callback flag before the free");
    debugfs("free", &id.to_string())?;
    ioctl(&fd, GET_CB_FLAG, &mut c).map_err(errno)?;
    check_eq!(c.flag, 1, "callback flag after the free");
    let mut buf = [0u8; 32];
    let n = read(&fd, &mut buf).map_err(errno)?;
    check_eq!(n, 16, "bytes of events");
    check_eq!(
        u64::from_ne_bytes(buf[..8].try_into().unwrap()),
        h2,
        "event handle"
    );
    check_eq!(read(&fd, &mut buf), Err(Errno::AGAIN), "second read");
    let mut u = Handle { handle: h2 };
    ioctl(&fd, UNPIN_BUFFER, &mut u).map_err(errno)?;
    let mut u = Handle { handle: 12345 };
    check_eq!(
        ioctl(&fd, UNPIN_BUFFER, &mut u),
        Err(Errno::INVAL),
        "unknown handle"
    );
    Ok(())
}

fn open_lib() -> Result<Gdrdrv, String> {
    ok(Gdrdrv::open_default(), "open /dev/gdrdrv")
}

/// A mapped gdrdrv handle is in use: pins of other buffers past `cache_max_regions` evict
/// regions, never its; the mapping keeps reading and writing GPU memory, nvsim's put_pages
/// calls are the evicted regions' alone, and freeing its memory afterwards calls it back.
fn gdrdrv_mapped_handle_survives_eviction() -> TestResult {
    let limit = small_region_limit(6)?;
    let gpu = Gpu::open().map_err(errno)?;
    let (va, id) = gpu.alloc(K64).map_err(errno)?;
    let g = open_lib()?;
    let h = ok(g.pin_v2(va, K64, 0), "PIN_BUFFER_V2")?;
    let m = ok(g.map(h, K64 as usize), "gdr_map")?.0;
    m.write(0, &pattern(40, K64 as usize));
    let (puts, evictions) = (harness::stat("put_pages_calls")?, gstat("evictions_limit")?);
    for _ in 0..6 {
        let (other, _) = gpu.alloc(K64).map_err(errno)?;
        let o = ok(g.pin_v2(other, K64, 0), "pin another")?;
        ok(g.unpin(o), "unpin another")?;
    }
    let evicted = gstat("evictions_limit")? - evictions;
    check!(
        evicted > 6 - limit,
        "evictions: {evicted} over a limit of {limit}"
    );
    eventually(2, "nvsim's put_pages of the evicted regions", || {
        Ok(harness::stat("put_pages_calls")? - puts >= evicted)
    })?;
    check_eq!(
        harness::stat("put_pages_calls")? - puts,
        evicted,
        "nvsim's put_pages calls: the evicted regions' only"
    );
    check!(
        !ok(g.cb_flag(h), "GET_CB_FLAG")?,
        "the mapped handle's callback flag"
    );
    mapping_round_trip(&m, &gpu, va, K64 as usize, 41, "after the evictions")?;
    // Still pinned: freeing the memory now calls the handle back.
    debugfs("free", &id.to_string())?;
    check!(
        ok(g.cb_flag(h), "GET_CB_FLAG")?,
        "the mapped handle's callback flag once its memory was freed"
    );
    drop(m);
    ok(g.unpin(h), "UNPIN")
}

/// libgdrapi's gdr_close order: a child maps, writes, UNPINs, closes the file and touches
/// the mapping again; it must die of SIGBUS (the region stays cached after UNPIN, and the
/// mapping holds the file: only the zap keeps the write from landing).
fn gdrdrv_access_after_unpin_and_close_is_sigbus() -> TestResult {
    dies_of_sigbus(
        "the child touching the mapping after UNPIN and close",
        || {
            let gpu = Gpu::open().map_err(errno)?;
            let (va, _) = gpu.alloc(K64).map_err(errno)?;
            let g = open_lib()?;
            let h = ok(g.pin_v2(va, K64, 0), "PIN_BUFFER_V2")?;
            let m = ok(g.map(h, K64 as usize), "gdr_map")?.0;
            let data = pattern(43, K64 as usize);
            m.write(0, &data);
            ok(g.unpin(h), "UNPIN while mapped")?;
            drop(g);
            check_eq!(
                gpu.read(va, data.len()).map_err(errno)?,
                data,
                "GPU memory after UNPIN and close"
            );
            m.write(8, &[0x55]);
            Err("wrote through the mapping after UNPIN and close".to_string())
        },
    )
}

/// A PIN_BUFFER whose result cannot be written back is undone, as the caller cannot learn
/// the handle; but another thread of the process can guess it (a file's handles are numbered
/// in order from 0) and map it before the write-back fails. The undo must zap that mapping,
/// as UNPIN_BUFFER does: the other thread's access afterwards faults (SIGBUS). The write-back
/// is held in a userfaultfd while the other thread maps the handle and reads GPU memory
/// through it, then fails (EFAULT). Before, the undo zapped nothing: the page-table entries
/// stayed, to BAR pages that the region's eviction gives back to NVIDIA for other pins.
fn gdrdrv_pin_write_back_failure_zaps_mappings() -> TestResult {
    dies_of_sigbus(
        "a child that read through a mapping of a PIN_BUFFER undone",
        || {
            let fd = gdrdrv()?;
            let gpu = Gpu::open().map_err(errno)?;
            let (va, _) = gpu.alloc(K64).map_err(errno)?;
            let data = pattern(61, K64 as usize);
            gpu.write(va, &data).map_err(errno)?;
            let arg = PinBuffer {
                addr: va,
                size: K64,
                ..Default::default()
            };
            let mut mapped = None;
            let pinned = uffd::with_failed_write_back(
                &arg,
                |p| ioctl_at(&fd, PIN_BUFFER, p),
                || {
                    // The file's first handle, 0, which GET_INFO_V2 already knows.
                    let mut i = InfoV2::default();
                    ioctl(&fd, GET_INFO_V2, &mut i).map_err(|e| format!("GET_INFO_V2 0: {e}"))?;
                    check_eq!(i.va, va, "handle 0's address while its PIN_BUFFER returns");
                    let p = map_handle(&fd, 0)?;
                    uffd::reads(p, &data)?;
                    mapped = Some(p);
                    Ok(())
                },
            )?;
            uffd::undone_mapping_faults("PIN_BUFFER", pinned, mapped)
        },
    )
}

pub const TESTS: &[Test] = &[
    ("gdrdrv-pin-map-unpin", gdrdrv_pin_map_unpin),
    (
        "gdrdrv-mapped-handle-survives-eviction",
        gdrdrv_mapped_handle_survives_eviction,
    ),
    (
        "gdrdrv-access-after-unpin-and-close-is-sigbus",
        gdrdrv_access_after_unpin_and_close_is_sigbus,
    ),
    (
        "gdrdrv-pin-write-back-failure-zaps-mappings",
        gdrdrv_pin_write_back_failure_zaps_mappings,
    ),
];
