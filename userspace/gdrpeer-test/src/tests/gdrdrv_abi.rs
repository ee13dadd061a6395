// SPDX-License-Identifier: GPL-2.0

//! `/dev/gdrdrv` as libgdrapi 2.6 drives it, written from the gdrdrv ABI note: its calls in
//! its order (open, GET_VERSION, GET_ATTR, PIN_BUFFER(_V2), REQ_MAPPING_TYPE NONE, mmap at
//! `handle << 12`, GET_INFO_V2, munmap, UNPIN, close) with the handle kept in 32 bits, as
//! libgdrapi keeps it; the handles' numbering (from 0, spaced by their windows' pages, below
//! 2^32 however many pins a file makes, the room of unpinned handles reused past the top);
//! REQ_MAPPING_TYPE's answers and the type each request maps with; and mmap's refusals, in
//! gdrdrv's order.

use crate::helpers::raw_mmap;
use crate::helpers::ErrnoOf;
use crate::helpers::{ok, pattern, K64};
use gdrpeer::gdrdrv::{self as lib, Gdrdrv};
use nvsim::testing::{self as harness, debugfs, errno, Test, TestResult};
use nvsim::{check, check_eq, Gpu};
use rustix::{
    fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd},
    fs::{open, Mode, OFlags},
    io::Errno,
    mm::{munmap, MapFlags},
};

const PAGE: u64 = 4096;

/// libgdrapi's `gdr_memh_t`: the handle as the library holds it.
type MemH = u32;

/// A handle as libgdrapi keeps it: the low 32 bits of what PIN returned.
fn memh(handle: u64) -> MemH {
    handle as MemH
}

/// One gdrdrv ioctl with its argument struct, errors as `what: errno`.
fn call<const OPCODE: rustix::ioctl::Opcode, T: lib::Arg<OPCODE>>(
    fd: BorrowedFd<'_>,
    arg: &mut T,
    what: &str,
) -> Result<(), String> {
    lib::call(fd, arg).map_err(|e| format!("{what}: {e}"))
}

/// The errno of one gdrdrv ioctl (None: it succeeded).
fn errno_of<const OPCODE: rustix::ioctl::Opcode, T: lib::Arg<OPCODE>>(
    fd: BorrowedFd<'_>,
    arg: &mut T,
) -> Option<Errno> {
    lib::call(fd, arg).err().and_then(|e| e.errno_of())
}

/// A shared read-write mapping of `len` bytes of `fd` at byte offset `offset`.
struct RawMap {
    ptr: *mut u8,
    len: usize,
}

impl RawMap {
    fn new(fd: BorrowedFd<'_>, offset: u64, len: usize, flags: MapFlags) -> Result<Self, Errno> {
        // The RawMap owns the mapping and unmaps it once.
        let ptr = raw_mmap(fd, offset, len, flags)?;
        Ok(RawMap { ptr, len })
    }

    fn write(&self, at: usize, data: &[u8]) {
        assert!(at + data.len() <= self.len);
        for (i, b) in data.iter().enumerate() {
            // SAFETY: inside the live mapping (asserted above).
            unsafe { self.ptr.add(at + i).write_volatile(*b) };
        }
    }

    fn read(&self, at: usize, n: usize) -> Vec<u8> {
        assert!(at + n <= self.len);
        // SAFETY: inside the live mapping (asserted above).
        (0..n)
            .map(|i| unsafe { self.ptr.add(at + i).read_volatile() })
            .collect()
    }
}

impl Drop for RawMap {
    fn drop(&mut self) {
        // SAFETY: the mapping this owns, unmapped once.
        let _ = unsafe { munmap(self.ptr.cast(), self.len) };
    }
}

/// libgdrapi's mmap of a handle: `len` rounded up to 64 KiB at `mh << PAGE_SHIFT`.
fn mmap_memh(fd: BorrowedFd<'_>, mh: MemH, len: u64) -> Result<RawMap, Errno> {
    let len = len.next_multiple_of(K64) as usize;
    RawMap::new(fd, u64::from(mh) << lib::PAGE_SHIFT, len, MapFlags::SHARED)
}

/// GET_INFO_V2 of a 32-bit handle.
fn info_v2(fd: BorrowedFd<'_>, mh: MemH) -> Result<lib::GetInfoV2, String> {
    let mut i = lib::GetInfoV2 {
        handle: u64::from(mh),
        ..Default::default()
    };
    call(fd, &mut i, "GET_INFO_V2")?;
    Ok(i)
}

/// REQ_MAPPING_TYPE's errno for `mapping_type` of `handle` (None: accepted).
fn req(fd: BorrowedFd<'_>, handle: u64, mapping_type: u32) -> Option<Errno> {
    errno_of(
        fd,
        &mut lib::ReqMappingType {
            handle,
            mapping_type,
            pad: 0,
        },
    )
}

/// libgdrapi's gdr_pin_buffer + gdr_map + gdr_get_info + gdr_unmap + gdr_unpin_buffer of
/// `[va, va + size)`, call for call, with the handle kept in 32 bits: the bytes written
/// through the mapping must be the GPU's. `v2` picks PIN_BUFFER_V2 (libgdrapi's pin since
/// 2.5) over PIN_BUFFER. Returns the handle PIN gave.
fn libgdrapi_round(
    fd: BorrowedFd<'_>,
    gpu: &Gpu,
    (va, size): (u64, u64),
    v2: bool,
    seed: u8,
) -> Result<u64, String> {
    let handle = if v2 {
        let mut p = lib::PinBufferV2 {
            addr: va,
            size,
            ..Default::default()
        };
        call(fd, &mut p, "PIN_BUFFER_V2")?;
        p.handle
    } else {
        let mut p = lib::PinBuffer {
            addr: va,
            size,
            ..Default::default()
        };
        call(fd, &mut p, "PIN_BUFFER")?;
        p.handle
    };
    check!(
        handle < 1 << 32,
        "PIN's handle {handle:#x} does not fit libgdrapi's 32 bits"
    );
    let mh = memh(handle);
    // gdr_map: REQ_MAPPING_TYPE NONE ("the driver chooses"), mmap, GET_INFO_V2.
    check_eq!(
        req(fd, u64::from(mh), lib::MAPPING_TYPE_NONE),
        None,
        "REQ_MAPPING_TYPE NONE"
    );
    let map = mmap_memh(fd, mh, size).map_err(|e| format!("mmap at mh << 12: {e}"))?;
    let i = info_v2(fd, mh)?;
    check!(
        i.mapping_type != lib::MAPPING_TYPE_NONE,
        "GET_INFO_V2 after mmap says NONE: libgdrapi's gdr_map fails (\"mh is not mapped\")"
    );
    check_eq!((i.va, i.page_size), (va, lib::GPU_PAGE_SIZE), "GET_INFO_V2");
    // gdr_get_info (GET_INFO_V2 again), then copies through the mapping.
    let data = pattern(seed, size as usize);
    map.write(0, &data);
    check_eq!(
        gpu.read(va, data.len()).map_err(errno)?,
        data,
        "GPU memory written through the mapping"
    );
    let back = pattern(seed ^ 0x5a, size as usize);
    gpu.write(va, &back).map_err(errno)?;
    check_eq!(
        map.read(0, back.len()),
        back,
        "GPU memory read through the mapping"
    );
    // gdr_unmap, gdr_unpin_buffer.
    drop(map);
    check_eq!(
        info_v2(fd, mh)?.mapping_type,
        lib::MAPPING_TYPE_NONE,
        "GET_INFO_V2 after munmap"
    );
    call(
        fd,
        &mut lib::UnpinBuffer {
            handle: u64::from(mh),
        },
        "UNPIN_BUFFER",
    )?;
    Ok(handle)
}

/// libgdrapi 2.6's calls in its order, twice over one open (PIN_BUFFER, then
/// PIN_BUFFER_V2), then the same after close and a new open.
fn gdrdrv_libgdrapi_calls_in_order() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(2 * K64).map_err(errno)?;
    check_eq!(va % K64, 0, "nvsim's allocation is GPU-page aligned");
    for round in 0..2u8 {
        // gdr_open: open(O_RDWR | O_CLOEXEC), GET_VERSION, GET_ATTR for both attributes.
        let fd: OwnedFd = open("/dev/gdrdrv", OFlags::RDWR | OFlags::CLOEXEC, Mode::empty())
            .map_err(|e| format!("open /dev/gdrdrv: {e}"))?;
        let fd = fd.as_fd();
        let mut v = lib::GetVersion::default();
        call(fd, &mut v, "GET_VERSION")?;
        check!(
            v.gdrdrv_version >= (2 << 16) | 5 && v.minimum_gdr_api_version <= lib::VERSION,
            "versions {:#x}/{:#x}: libgdrapi 2.6 would not use GET_ATTR and REQ_MAPPING_TYPE",
            v.gdrdrv_version,
            v.minimum_gdr_api_version
        );
        for attr in [
            lib::ATTR_USE_PERSISTENT_MAPPING,
            lib::ATTR_SUPPORT_PIN_FLAG_FORCE_PCIE,
        ] {
            call(fd, &mut lib::GetAttr { attr, val: 0 }, "GET_ATTR")?;
        }
        let first = libgdrapi_round(fd, &gpu, (va, 2 * K64), false, 10 + round)?;
        check_eq!(
            first,
            0,
            "a new file's first handle (gdrdrv numbers from 0)"
        );
        let second = libgdrapi_round(fd, &gpu, (va, 100), true, 20 + round)?;
        check_eq!(
            second,
            2 * K64 / PAGE,
            "the second handle: the first plus its window's pages"
        );
    }
    Ok(())
}

/// Pins of one file never give a handle libgdrapi cannot hold: 100,000 pins and unpins of
/// one buffer through the 32-bit handle (every 1,000th mapped, written and read back), then
/// 1,024 pins held at once, whose offset ranges `[handle, handle + window pages)` must not
/// overlap.
fn gdrdrv_handles_fit_32_bits() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(4 * K64).map_err(errno)?;
    let g = ok(Gdrdrv::open_default(), "open /dev/gdrdrv")?;
    let fd = g.as_fd();
    let mut last = None;
    for i in 0..100_000u32 {
        let h = ok(g.pin_v2(va, K64, 0), "PIN_BUFFER_V2")?;
        check!(h < 1 << 32, "pin {i}: handle {h:#x} past 32 bits");
        if let Some(last) = last {
            check_eq!(h, last + K64 / PAGE, format!("pin {i}: gdrdrv's spacing"));
        }
        last = Some(h);
        let mh = memh(h);
        if i % 1000 == 999 {
            let map = mmap_memh(fd, mh, K64).map_err(|e| format!("pin {i}: mmap: {e}"))?;
            let b = (i / 1000) as u8;
            map.write(PAGE as usize, &[b]);
            check_eq!(
                gpu.read(va + PAGE, 1).map_err(errno)?,
                vec![b],
                format!("pin {i}: the byte written")
            );
            drop(map);
        }
        ok(g.unpin(u64::from(mh)), "UNPIN_BUFFER")?;
    }
    let mut held = Vec::new();
    for i in 0..1024u64 {
        let (off, len) = ((i % 4) * K64, (1 + i % 3) * K64 - i % 7);
        let h = ok(
            g.pin_v2(va + off, len.min(4 * K64 - off), 0),
            "PIN_BUFFER_V2",
        )?;
        let window = ok(g.info_v2(h), "GET_INFO_V2")?.mapped_size;
        held.push((h, h + window / PAGE, va + off));
    }
    held.sort_unstable();
    for w in held.windows(2) {
        check!(
            w[0].1 <= w[1].0,
            "the offsets of handles {:#x} and {:#x} overlap",
            w[0].0,
            w[1].0
        );
    }
    let top = held.last().map_or(0, |h| h.1);
    check!(top <= 1 << 32, "held handles reach {top:#x}");
    // Each handle maps its own window: a few, through their 32-bit handles.
    for &(h, _, start) in held.iter().step_by(97) {
        let map = mmap_memh(fd, memh(h), K64).map_err(|e| format!("mmap {h:#x}: {e}"))?;
        let want = gpu.read(start, 16).map_err(errno)?;
        check_eq!(
            map.read(0, 16),
            want,
            format!("handle {h:#x}'s first bytes")
        );
    }
    for (h, _, _) in held {
        ok(g.unpin(h), "UNPIN_BUFFER")?;
    }
    Ok(())
}

/// This process's minor page faults so far (`getrusage`).
fn minor_faults() -> i64 {
    // SAFETY: `getrusage` fills the `rusage` it is given, which is plain data.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid `rusage` to fill.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    usage.ru_minflt
}

/// An UNPIN zaps the mappings of its own file only. Two files of the process each pin a
/// buffer and get handle 0, so their mappings have the same offsets; the first file's
/// mapping is read whole, then the second file maps and reads its handle 0 and unpins it
/// mapped (an UNPIN zaps only a mapped handle's offsets), then unmaps it.
/// Reading the first mapping again takes no page fault. With the device node's one address
/// space for every file, the second file's UNPIN zapped the first's mapping too, whose 16
/// pages then faulted again (on a machine of many processes, each unpin sent every process
/// with a mapping at that offset page-table work and TLB flushes).
fn gdrdrv_unpin_zaps_its_own_file_only() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(2 * K64).map_err(errno)?;
    let (y, x) = (
        ok(Gdrdrv::open_default(), "open /dev/gdrdrv")?,
        ok(Gdrdrv::open_default(), "open /dev/gdrdrv again")?,
    );
    let hy = ok(y.pin_v2(va, K64, 0), "PIN_BUFFER_V2 on the first file")?;
    let hx = ok(
        x.pin_v2(va + K64, K64, 0),
        "PIN_BUFFER_V2 on the second file",
    )?;
    check_eq!((hy, hx), (0, 0), "each file's first handle");
    let my = mmap_memh(y.as_fd(), memh(hy), K64).map_err(|e| format!("mmap: {e}"))?;
    let pages = (K64 / PAGE) as usize;
    let touch = |m: &RawMap| {
        for p in 0..pages {
            m.read(p * PAGE as usize, 1);
        }
    };
    touch(&my);
    // Mapped through the UNPIN, which zaps a handle's offsets only while it is mapped.
    let mx = mmap_memh(x.as_fd(), memh(hx), K64).map_err(|e| format!("mmap: {e}"))?;
    touch(&mx);
    ok(x.unpin(hx), "UNPIN_BUFFER on the second file")?;
    drop(mx);
    let before = minor_faults();
    touch(&my);
    let faults = minor_faults() - before;
    check!(
        faults < 2,
        "reading the first file's {pages} mapped pages after the second file's UNPIN of its \
         handle {hx} took {faults} page faults"
    );
    drop(my);
    ok(y.unpin(hy), "UNPIN_BUFFER on the first file")
}

/// The errnos of the ioctls that name a handle, each called once on `handle`: GET_CB_FLAG,
/// GET_INFO, GET_INFO_V2, UNPIN_BUFFER and REQ_MAPPING_TYPE (WC).
fn handle_calls(fd: BorrowedFd<'_>, handle: u64) -> [(&'static str, Option<Errno>); 5] {
    let mut cb = lib::GetCbFlag {
        handle,
        ..Default::default()
    };
    let mut info = lib::GetInfo {
        handle,
        ..Default::default()
    };
    let mut info2 = lib::GetInfoV2 {
        handle,
        ..Default::default()
    };
    [
        ("GET_CB_FLAG", errno_of(fd, &mut cb)),
        ("GET_INFO", errno_of(fd, &mut info)),
        ("GET_INFO_V2", errno_of(fd, &mut info2)),
        (
            "UNPIN_BUFFER",
            errno_of(fd, &mut lib::UnpinBuffer { handle }),
        ),
        ("REQ_MAPPING_TYPE", req(fd, handle, lib::MAPPING_TYPE_WC)),
    ]
}

/// The refusals of the ABI note's rows that no other test makes, each on a live file with a
/// live handle: a command of another driver's type byte is ENOTTY; PIN_BUFFER_V2 with
/// FORCE_PCIE is EINVAL (gdrdrv.rst's row: forcing BAR1 needs the persistent API);
/// GET_CB_FLAG, GET_INFO, GET_INFO_V2, UNPIN and REQ_MAPPING_TYPE of a handle the file never
/// gave are EINVAL; and every ioctl from a process that did not open the file (a fork child)
/// is EACCES, GET_VERSION included. The handle is still live and the file works after all
/// of them.
fn gdrdrv_refusals_of_every_ioctl() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(K64).map_err(errno)?;
    let g = ok(Gdrdrv::open_default(), "open /dev/gdrdrv")?;
    let fd = g.as_fd();
    let h = ok(g.pin_v2(va, K64, 0), "PIN_BUFFER_V2")?;
    // _IOWR('x', 1, u64): the size and direction of a gdrdrv command, another type byte.
    let foreign: libc::c_ulong = 0xc008_7801;
    let mut word = 0u64;
    // SAFETY: the command reads and writes at most the 8 bytes of `word`.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), foreign as _, &mut word) };
    check_eq!(
        (r, Errno::from_io_error(&std::io::Error::last_os_error())),
        (-1, Some(Errno::NOTTY)),
        "a command of type byte 'x'"
    );
    let mut force = lib::PinBufferV2 {
        addr: va,
        size: K64,
        flags: 1,
        ..Default::default()
    };
    check_eq!(
        errno_of(fd, &mut force),
        Some(Errno::INVAL),
        "PIN_BUFFER_V2 FORCE_PCIE"
    );
    for (what, e) in handle_calls(fd, h + 12345) {
        check_eq!(
            e,
            Some(Errno::INVAL),
            format!("{what} of an unknown handle")
        );
    }
    let child = crate::proc::fork(|| {
        let acces = |what: &str, e: Option<Errno>| -> TestResult {
            check_eq!(e, Some(Errno::ACCESS), format!("{what} from a fork child"));
            Ok(())
        };
        let mut pin = lib::PinBuffer {
            addr: va,
            size: K64,
            ..Default::default()
        };
        acces("PIN_BUFFER", errno_of(fd, &mut pin))?;
        let mut pin2 = lib::PinBufferV2 {
            addr: va,
            size: K64,
            ..Default::default()
        };
        acces("PIN_BUFFER_V2", errno_of(fd, &mut pin2))?;
        for (what, e) in handle_calls(fd, h) {
            acces(what, e)?;
        }
        let mut attr = lib::GetAttr {
            attr: lib::ATTR_USE_PERSISTENT_MAPPING,
            val: 0,
        };
        acces("GET_ATTR", errno_of(fd, &mut attr))?;
        acces("GET_VERSION", errno_of(fd, &mut lib::GetVersion::default()))
    })?;
    crate::proc::wait(child)?;
    let info = ok(g.info_v2(h), "GET_INFO_V2 of the live handle")?;
    check_eq!(info.va, va, "the live handle's window after the refusals");
    ok(g.unpin(h), "UNPIN_BUFFER")
}

/// The 192 MiB pins of the tests past 2^32.
const BIG: u64 = 192 << 20;

/// What the tests past 2^32 start from: 192 MiB and 192 KiB of GPU memory (addresses), and
/// /dev/gdrdrv open.
fn numbers_past_2_32() -> Result<(Gpu, u64, u64, Gdrdrv), String> {
    let gpu = Gpu::open().map_err(errno)?;
    let (big, _) = gpu
        .alloc(BIG)
        .map_err(|e| format!("allocating 192 MiB: {e}"))?;
    let (small, _) = gpu.alloc(3 * K64).map_err(errno)?;
    let g = ok(Gdrdrv::open_default(), "open /dev/gdrdrv")?;
    Ok((gpu, big, small, g))
}

/// Past the top of the 32-bit handles a pin takes the room of unpinned ones: pins and
/// unpins of 192 MiB (most of nvsim's 256 MiB BAR, so that the numbers run out after 2^32 /
/// 49,152 pages, about 87,000 pins) while a 64 KiB pin and a 128 KiB pin stay held; every
/// handle stays below 2^32, none overlaps the held ones, and pins after the turn map their
/// own memory. (KUnit's `gdrpeer_handles` checks the choice of room case by case.)
fn gdrdrv_handles_reuse_room_past_2_32() -> TestResult {
    let (gpu, big, small, g) = numbers_past_2_32()?;
    let a = ok(g.pin_v2(small, K64, 0), "PIN_BUFFER_V2 64 KiB")?;
    let b = ok(g.pin_v2(small + K64, 2 * K64, 0), "PIN_BUFFER_V2 128 KiB")?;
    check_eq!((a, b), (0, K64 / PAGE), "the first handles");
    let held = [(a, a + K64 / PAGE), (b, b + 2 * K64 / PAGE)];
    let span = BIG / PAGE;
    let mut turned = 0;
    let mut last = b;
    for i in 0..(1u64 << 32) / span + 8 {
        let h = ok(g.pin_v2(big, BIG, 0), "PIN_BUFFER_V2 192 MiB")?;
        check!(
            h + span <= 1 << 32,
            "pin {i}: handle {h:#x} + {span:#x} pages past 2^32"
        );
        for &(s, e) in &held {
            check!(
                h + span <= s || h >= e,
                "pin {i}: handle {h:#x} overlaps held handle {s:#x}"
            );
        }
        if h < last {
            turned += 1;
            // The first room that fits: after the held handles.
            check_eq!(h, held[1].1, format!("pin {i}: the handle after the turn"));
            let map = mmap_memh(g.as_fd(), memh(h), K64).map_err(|e| format!("mmap: {e}"))?;
            let want = gpu.read(big, 16).map_err(errno)?;
            check_eq!(map.read(0, 16), want, "the first bytes after the turn");
        }
        last = h;
        ok(g.unpin(h), "UNPIN_BUFFER")?;
    }
    check!(turned >= 1, "the numbers never turned");
    // The held handles still name their own windows.
    for (h, va) in [(a, small), (b, small + K64)] {
        let info = ok(g.info_v2(h), "GET_INFO_V2")?;
        check_eq!(info.va, va, format!("held handle {h:#x}'s window"));
    }
    ok(g.unpin(a), "UNPIN_BUFFER")?;
    ok(g.unpin(b), "UNPIN_BUFFER")
}

/// Once the numbers turned past 2^32 into the room an unpinned handle left before a live one,
/// the next pin's number goes past the live handle, not onto it. Handle 0 is unpinned and
/// handle 16 kept; 192 MiB pins use the numbers up, then 64 KiB pins until one turns into the
/// room of handle 0. The pin after it got 16 before, the live handle's number: its window
/// replaced the live one's, which GET_INFO_V2 then described, and the live handle's pin was
/// never given back.
fn gdrdrv_turned_handles_skip_live_ones() -> TestResult {
    let (_gpu, big, small, g) = numbers_past_2_32()?;
    let a = ok(g.pin_v2(small, K64, 0), "PIN_BUFFER_V2 64 KiB")?;
    let b = ok(g.pin_v2(small + K64, K64, 0), "PIN_BUFFER_V2 64 KiB")?;
    check_eq!((a, b), (0, K64 / PAGE), "the first handles");
    ok(g.unpin(a), "UNPIN_BUFFER")?;
    let (span, small_span) = (BIG / PAGE, K64 / PAGE);
    let mut last = b;
    // Up to the top with 192 MiB windows, then 64 KiB ones until the numbers turn.
    let mut turned = None;
    for i in 0..(1u64 << 32) / small_span {
        let (va, len) = if last + 2 * span <= 1 << 32 {
            (big, BIG)
        } else {
            (small + 2 * K64, K64)
        };
        let h = ok(g.pin_v2(va, len, 0), "PIN_BUFFER_V2")?;
        ok(g.unpin(h), "UNPIN_BUFFER")?;
        if h < last {
            turned = Some((i, h));
            break;
        }
        last = h;
    }
    let Some((i, h)) = turned else {
        return Err("the numbers never turned".into());
    };
    check_eq!(h, a, format!("pin {i}: the handle after the turn"));
    // Handle 0 is unpinned: the room before b is free again, and the pins after the turn
    // must step over b.
    let c = ok(
        g.pin_v2(small + 2 * K64, K64, 0),
        "PIN_BUFFER_V2 after the turn",
    )?;
    let d = ok(
        g.pin_v2(small + 2 * K64, K64, 0),
        "PIN_BUFFER_V2 after the turn",
    )?;
    for (what, h) in [("first", c), ("second", d)] {
        check!(
            h + small_span <= b || h >= b + small_span,
            "the {what} pin after the turn got handle {h:#x}, over live handle {b:#x}"
        );
    }
    check!(c != d, "two live pins got one handle, {c:#x}");
    let info = ok(g.info_v2(b), "GET_INFO_V2 of the live handle")?;
    check_eq!(info.va, small + K64, "the live handle's window");
    for h in [c, d, b] {
        ok(g.unpin(h), "UNPIN_BUFFER")?;
    }
    Ok(())
}

/// The gdrdrv ioctl `opcode` with its argument `arg` copied into a page of its own, read-only
/// while the call runs: the call's return and errno.
fn read_only_arg<T: Copy>(
    fd: BorrowedFd<'_>,
    opcode: rustix::ioctl::Opcode,
    arg: T,
) -> Option<Errno> {
    use rustix::mm::{mmap_anonymous, mprotect, MprotectFlags, ProtFlags};
    const LEN: usize = PAGE as usize;
    // SAFETY: a new anonymous mapping, ours alone, unmapped below.
    let page = unsafe {
        mmap_anonymous(
            std::ptr::null_mut(),
            LEN,
            ProtFlags::READ | ProtFlags::WRITE,
            MapFlags::PRIVATE,
        )
    }
    .expect("an anonymous page");
    // SAFETY: the page is writable and large enough for `T`, which is plain data.
    unsafe { page.cast::<T>().write(arg) };
    // SAFETY: our page; nothing holds a reference into it.
    unsafe { mprotect(page, LEN, MprotectFlags::READ) }.expect("mprotect");
    // SAFETY: `opcode` reads one `T` (and may try to write it back, which faults).
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), opcode as _, page) };
    let err = (r < 0)
        .then(|| Errno::from_io_error(&std::io::Error::last_os_error()).unwrap_or(Errno::IO));
    // SAFETY: our mapping, no longer used.
    unsafe { munmap(page, LEN) }.expect("munmap");
    err
}

/// UNPIN and REQ_MAPPING_TYPE only read their argument, as gdrdrv does: in read-only memory
/// they succeed. They wrote it back, so such a call made its change and then answered
/// EFAULT (the handle unpinned, a retry EINVAL; the type set).
fn gdrdrv_read_only_arguments() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(K64).map_err(errno)?;
    let g = ok(Gdrdrv::open_default(), "open /dev/gdrdrv")?;
    let h = ok(g.pin_v2(va, K64, 0), "PIN_BUFFER_V2")?;
    let req = lib::ReqMappingType {
        handle: h,
        mapping_type: lib::MAPPING_TYPE_WC,
        pad: 0,
    };
    check_eq!(
        read_only_arg(g.as_fd(), lib::IOC_REQ_MAPPING_TYPE, req),
        None,
        "REQ_MAPPING_TYPE with a read-only argument"
    );
    let unpin = lib::UnpinBuffer { handle: h };
    check_eq!(
        read_only_arg(g.as_fd(), lib::IOC_UNPIN_BUFFER, unpin),
        None,
        "UNPIN_BUFFER with a read-only argument"
    );
    check_eq!(
        read_only_arg(g.as_fd(), lib::IOC_UNPIN_BUFFER, unpin),
        Some(Errno::INVAL),
        "UNPIN_BUFFER of the handle unpinned"
    );
    Ok(())
}

/// REQ_MAPPING_TYPE's answers in gdrdrv's order, and the type each accepted request maps
/// with (GET_INFO_V2 and GET_INFO while mapped, NONE after munmap): NONE maps cached where
/// NVIDIA's table says the CPU may cache the pages (nvsim coherent=1), write-combining
/// otherwise; WC maps write-combining; CACHING is refused (EOPNOTSUPP) unless the pages may
/// be cached; DEVICE is refused on x86 (EOPNOTSUPP); a type past DEVICE is EINVAL, even
/// for a mapped handle; an unknown handle EINVAL; a mapped handle EBUSY.
fn gdrdrv_req_mapping_type_answers() -> TestResult {
    let coherent = harness::stat("coherent")? == 1;
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(K64).map_err(errno)?;
    let g = ok(Gdrdrv::open_default(), "open /dev/gdrdrv")?;
    let fd = g.as_fd();
    let h = ok(g.pin_v2(va, K64, 0), "PIN_BUFFER_V2")?;
    let (cached_or_wc, caching) = if coherent {
        (lib::MAPPING_TYPE_CACHING, None)
    } else {
        (lib::MAPPING_TYPE_WC, Some(Errno::OPNOTSUPP))
    };
    for (ty, want) in [
        (lib::MAPPING_TYPE_NONE, None),
        (lib::MAPPING_TYPE_WC, None),
        (lib::MAPPING_TYPE_CACHING, caching),
        (lib::MAPPING_TYPE_DEVICE, Some(Errno::OPNOTSUPP)),
        (4, Some(Errno::INVAL)),
        (u32::MAX, Some(Errno::INVAL)),
    ] {
        check_eq!(
            req(fd, h, ty),
            want,
            format!("REQ_MAPPING_TYPE {ty} (coherent {coherent})")
        );
    }
    check_eq!(
        req(fd, h + 1, lib::MAPPING_TYPE_WC),
        Some(Errno::INVAL),
        "REQ_MAPPING_TYPE of an unknown handle"
    );
    let mut accepted = vec![
        (lib::MAPPING_TYPE_NONE, cached_or_wc),
        (lib::MAPPING_TYPE_WC, lib::MAPPING_TYPE_WC),
    ];
    if coherent {
        accepted.push((lib::MAPPING_TYPE_CACHING, lib::MAPPING_TYPE_CACHING));
    }
    for (asked, got) in accepted {
        let what = |s: &str| format!("{s} (asked {asked}, coherent {coherent})");
        check_eq!(req(fd, h, asked), None, what("REQ_MAPPING_TYPE"));
        check_eq!(
            ok(g.info_v2(h), "GET_INFO_V2")?.mapping_type,
            lib::MAPPING_TYPE_NONE,
            what("GET_INFO_V2 before mmap")
        );
        let m = ok(g.mmap(h, 0, K64 as usize), "mmap")?;
        check_eq!(
            ok(g.info_v2(h), "GET_INFO_V2")?.mapping_type,
            got,
            what("GET_INFO_V2 while mapped")
        );
        let i = ok(g.info(h), "GET_INFO")?;
        check_eq!(
            (i.mapped, i.wc_mapping),
            (true, got == lib::MAPPING_TYPE_WC),
            what("GET_INFO while mapped")
        );
        for ty in 0..=lib::MAPPING_TYPE_DEVICE {
            check_eq!(
                req(fd, h, ty),
                Some(Errno::BUSY),
                what(&format!("REQ {ty} while mapped"))
            );
        }
        check_eq!(
            req(fd, h, 4),
            Some(Errno::INVAL),
            what("REQ 4 while mapped")
        );
        let data = pattern(60 + asked as u8, K64 as usize);
        m.write(0, &data);
        check_eq!(
            gpu.read(va, data.len()).map_err(errno)?,
            data,
            what("GPU memory written through the mapping")
        );
        drop(m);
        check_eq!(
            ok(g.info_v2(h), "GET_INFO_V2")?.mapping_type,
            lib::MAPPING_TYPE_NONE,
            what("GET_INFO_V2 after munmap")
        );
        check!(
            !ok(g.info(h), "GET_INFO")?.mapped,
            "{}",
            what("GET_INFO after munmap")
        );
    }
    // The library's gdr_map (NONE) and gdr_map_v2 with WC report what they got.
    let (m, ty) = ok(g.map(h, 100), "gdr_map")?;
    check_eq!(ty, cached_or_wc, "the type gdr_map got");
    check_eq!(m.len(), K64 as usize, "gdr_map rounds to 64 KiB");
    drop(m);
    let (_m, ty) = ok(
        g.map_v2(h, K64 as usize, lib::MAPPING_TYPE_WC),
        "gdr_map_v2 WC",
    )?;
    check_eq!(ty, lib::MAPPING_TYPE_WC, "the type gdr_map_v2 WC got");
    Ok(())
}

/// mmap's refusals, in gdrdrv's order: an offset naming no handle; a handle mapped already
/// (until its mapping goes); an offset inside a window (gdrdrv maps from the first byte
/// only); a length past the window; MAP_PRIVATE; a pin that does not start on a GPU page
/// (an unaligned buffer pinned as is, and the second of two small buffers in one GPU page,
/// as gdrcopy's basic_unaligned_mapping and basic_small_buffers_mapping expect); a handle
/// whose memory was freed. Each is EINVAL, and the pin it concerns stays usable.
fn gdrdrv_mmap_refusals_in_gdrdrv_order() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, id) = gpu.alloc(2 * K64).map_err(errno)?;
    let g = ok(Gdrdrv::open_default(), "open /dev/gdrdrv")?;
    let refused = |h: u64, off: u64, len: u64, flags: MapFlags, what: &str| -> TestResult {
        let r = RawMap::new(g.as_fd(), (h << lib::PAGE_SHIFT) + off, len as usize, flags);
        check_eq!(r.err(), Some(Errno::INVAL), format!("mmap of {what}"));
        Ok(())
    };
    let h = ok(g.pin_v2(va, 2 * K64, 0), "PIN_BUFFER_V2")?;
    refused(
        h + 2 * K64 / PAGE,
        0,
        K64,
        MapFlags::SHARED,
        "an offset past every handle",
    )?;
    refused(
        h,
        PAGE,
        PAGE,
        MapFlags::SHARED,
        "an offset inside the window",
    )?;
    refused(h, 0, 3 * K64, MapFlags::SHARED, "a length past the window")?;
    refused(h, 0, K64, MapFlags::PRIVATE, "MAP_PRIVATE")?;
    let first = ok(g.mmap(h, 0, 2 * K64 as usize), "mmap")?;
    refused(h, 0, K64, MapFlags::SHARED, "a handle mapped already")?;
    drop(first);
    let again = ok(
        g.mmap(h, 0, K64 as usize),
        "mmap after the first mapping went",
    )?;
    drop(again);
    ok(g.unpin(h), "UNPIN_BUFFER")?;

    // Pins that do not start on a GPU page pin, and do not map.
    for (off, len, what) in [
        (100, 1000, "an unaligned buffer pinned as is"),
        (PAGE, 100, "the second of two small buffers in one GPU page"),
    ] {
        let first = ok(
            g.pin_v2(va, 100, 0),
            "PIN_BUFFER_V2 of the page's first buffer",
        )?;
        ok(
            g.mmap(first, 0, K64 as usize),
            "mmap of the page's first buffer",
        )?;
        let h = ok(g.pin_v2(va + off, len, 0), what)?;
        check_eq!(
            ok(g.info_v2(h), "GET_INFO_V2")?.va,
            va,
            format!("{what}: window")
        );
        refused(h, 0, K64, MapFlags::SHARED, what)?;
        ok(g.unpin(h), "UNPIN_BUFFER")?;
        ok(g.unpin(first), "UNPIN_BUFFER")?;
    }

    let h = ok(g.pin_v2(va, K64, 0), "PIN_BUFFER_V2")?;
    debugfs("free", &id.to_string())?;
    check!(
        ok(g.cb_flag(h), "GET_CB_FLAG")?,
        "the callback flag after the free"
    );
    refused(
        h,
        0,
        K64,
        MapFlags::SHARED,
        "a handle whose memory was freed",
    )?;
    ok(g.unpin(h), "UNPIN_BUFFER")
}

pub const TESTS: &[Test] = &[
    (
        "gdrdrv-libgdrapi-calls-in-order",
        gdrdrv_libgdrapi_calls_in_order,
    ),
    ("gdrdrv-handles-fit-32-bits", gdrdrv_handles_fit_32_bits),
    (
        "gdrdrv-handles-reuse-room-past-2-32",
        gdrdrv_handles_reuse_room_past_2_32,
    ),
    (
        "gdrdrv-turned-handles-skip-live-ones",
        gdrdrv_turned_handles_skip_live_ones,
    ),
    (
        "gdrdrv-req-mapping-type-answers",
        gdrdrv_req_mapping_type_answers,
    ),
    ("gdrdrv-read-only-arguments", gdrdrv_read_only_arguments),
    (
        "gdrdrv-refusals-of-every-ioctl",
        gdrdrv_refusals_of_every_ioctl,
    ),
    (
        "gdrdrv-unpin-zaps-its-own-file-only",
        gdrdrv_unpin_zaps_its_own_file_only,
    ),
    (
        "gdrdrv-mmap-refusals-in-gdrdrv-order",
        gdrdrv_mmap_refusals_in_gdrdrv_order,
    ),
];
