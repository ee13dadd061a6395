// SPDX-License-Identifier: GPL-2.0

//! `/dev/gdrdrv` over CUDA through the library's client ([`gdrpeer::gdrdrv`]): the checks of
//! the C client (`tests/gdrdrv-client`), run with `--cuda`. Version and attributes; pin, map,
//! bytes through the mapping against cuMemcpyDtoH/HtoD; unaligned and sub-page buffers; two
//! mappings, one buffer freed; close with a mapping live; SIGBUS after cuMemFree and after
//! UNPIN; fork before and after map and a receiver of the file (EACCES); P2P tokens; a
//! thread pinning; a re-pin served by the cache (and NOCACHE not); one event per revocation.

use crate::helpers::ErrnoOf;
use crate::helpers::{fails, gstat, ok, pattern, K64};
use crate::proc::{byte, fork, recv_fd, send_byte, send_fd, unix_pair, wait};
use crate::sanity::{c, cu, expect_sigbus, load, DevMem, OWN_ALLOCATION};
use gdrpeer::gdrdrv::{self, Gdrdrv};
use gdrpeer::{EventKind, EventSource, Mapping};
use nvsim::testing::{self as harness, Test, TestResult};
use nvsim::{check, check_eq};
use rustix::{
    fd::{AsFd, BorrowedFd},
    io::Errno,
};

const K4: u64 = 4096;
/// CUDA carves allocations below 2 MiB out of shared blocks, so two of them may share a GPU
/// page, and freeing one revokes pins over the other's pages too. Checks that free one
/// buffer and keep another use allocations of this size.
const OWN_PAGES: usize = 2 << 20;

/// A buffer of `size` bytes starting on a GPU page, as gdrcopy's tests allocate one that
/// they map (`size` + 64 KiB, the pointer rounded up): gdrdrv maps only pins that start on
/// a GPU page, and cuMemAlloc guarantees 256 bytes. Returns the allocation and the buffer.
fn aligned(size: u64) -> Result<(DevMem, u64), String> {
    let m = DevMem::new((size + K64) as usize)?;
    let p = m.p.next_multiple_of(K64);
    Ok((m, p))
}

fn open() -> Result<Gdrdrv, String> {
    ok(Gdrdrv::open_default(), "open /dev/gdrdrv")
}

/// A buffer pinned and its window mapped whole, as gdr_pin_buffer + gdr_map do.
struct Pinned {
    handle: u64,
    map: Mapping,
    /// The buffer's first byte in the mapping.
    at: usize,
}

fn pin_map(g: &Gdrdrv, addr: u64, size: u64, flags: u32) -> Result<Pinned, String> {
    let handle = ok(g.pin_v2(addr, size, flags), "PIN_BUFFER_V2")?;
    let info = ok(g.info_v2(handle), "GET_INFO_V2")?;
    check!(
        info.va == addr & !(K64 - 1)
            && info.va + info.mapped_size >= addr + size
            && info.page_size == gdrdrv::GPU_PAGE_SIZE,
        "window {:#x} + {:#x} for {addr:#x} + {size:#x}",
        info.va,
        info.mapped_size
    );
    let map = ok(g.map(handle, info.mapped_size as usize), "gdr_map")?.0;
    Ok(Pinned {
        handle,
        map,
        at: (addr - info.va) as usize,
    })
}

/// Writes through the mapping and reads with cuMemcpyDtoH, then the reverse.
fn round_trip(p: &Pinned, addr: u64, n: usize, seed: u8) -> TestResult {
    let data = pattern(seed, n);
    p.map.write(p.at, &data);
    let mut back = vec![0; n];
    cu().copy_from_device(&mut back, addr).map_err(c)?;
    check!(
        back == data,
        "cuMemcpyDtoH differs from the bytes written through the mapping"
    );
    let data = pattern(seed.wrapping_add(1), n);
    cu().copy_to_device(addr, &data).map_err(c)?;
    p.map.read(p.at, &mut back);
    check!(
        back == data,
        "the mapping differs from what cuMemcpyHtoD wrote"
    );
    Ok(())
}

/// The allocation's whole range, as cuMemGetAddressRange gives it.
fn range(m: &DevMem) -> Result<(u64, u64), String> {
    use gdrpeer::regcache::PointerInfo;
    cu().address_range(m.p)
        .map_err(|e| format!("cuMemGetAddressRange: {e:?}"))
}

fn version_and_attributes() -> TestResult {
    let g = open()?;
    let v = ok(g.version(), "GET_VERSION")?;
    check_eq!(
        (v.driver, v.minimum_api),
        (gdrdrv::VERSION, gdrdrv::MINIMUM_GDR_API_VERSION),
        "versions"
    );
    check_eq!(
        ok(g.attr(gdrdrv::ATTR_USE_PERSISTENT_MAPPING), "GET_ATTR")?,
        0,
        "USE_PERSISTENT_MAPPING"
    );
    check_eq!(
        ok(g.attr(gdrdrv::ATTR_SUPPORT_PIN_FLAG_FORCE_PCIE), "GET_ATTR")?,
        0,
        "SUPPORT_PIN_FLAG_FORCE_PCIE"
    );
    check_eq!(
        fails(g.attr(99), "attribute 99")?,
        Errno::INVAL,
        "attribute 99"
    );
    Ok(())
}

fn pin_map_copy() -> TestResult {
    let m = DevMem::new(3 * K64 as usize + 300)?;
    let (base, len) = range(&m)?;
    let base_aligned = base.next_multiple_of(K64);
    let len = len - (base_aligned - base);
    let g = open()?;
    let p = pin_map(&g, base_aligned, len, 0)?;
    round_trip(&p, base_aligned, len as usize, 1)?;
    drop(p.map);
    ok(g.unpin(p.handle), "UNPIN")
}

/// As gdrcopy's basic_unaligned_mapping and basic_small_buffers_mapping: a buffer that does
/// not start on a GPU page pins, and its map fails (EINVAL); small buffers that do start on
/// one map and carry their bytes.
fn unaligned_and_small() -> TestResult {
    let (_m, va) = aligned(4 * K64)?;
    let g = open()?;
    for (off, len) in [(1, 1), (5000, 100), (K64 - 1, 2), (K64 + 12345, 3 * K4)] {
        let h = ok(
            g.pin_v2(va + off, len, 0),
            "PIN_BUFFER_V2 of an unaligned buffer",
        )?;
        check_eq!(
            fails(g.map(h, len as usize), "gdr_map of an unaligned pin")?,
            Errno::INVAL,
            format!("gdr_map of a pin at offset {off}")
        );
        ok(g.unpin(h), "UNPIN")?;
    }
    for (off, len) in [(0, 1), (K64, 100), (2 * K64, K64 + 1)] {
        let p = pin_map(&g, va + off, len, 0)?;
        round_trip(&p, va + off, len as usize, off as u8 ^ 3)?;
        drop(p.map);
        ok(g.unpin(p.handle), "UNPIN")?;
    }
    Ok(())
}

fn two_mappings_one_freed() -> TestResult {
    let mut a = DevMem::new(OWN_PAGES)?;
    let b = DevMem::new(OWN_PAGES)?;
    let g = open()?;
    let pa = pin_map(&g, a.p, 2 * K64, 0)?;
    let pb = pin_map(&g, b.p, 2 * K64, 0)?;
    a.free()?;
    check!(
        ok(g.cb_flag(pa.handle), "GET_CB_FLAG")?,
        "the freed buffer's flag"
    );
    check!(
        !ok(g.cb_flag(pb.handle), "GET_CB_FLAG")?,
        "the live buffer's flag"
    );
    round_trip(&pb, b.p, 2 * K64 as usize, 20)?;
    drop((pa.map, pb.map));
    ok(g.unpin(pa.handle), "UNPIN")?;
    ok(g.unpin(pb.handle), "UNPIN")
}

fn close_with_mapping() -> TestResult {
    let (_m, va) = aligned(K64)?;
    let g = open()?;
    let p = pin_map(&g, va, K64, 0)?;
    drop(g);
    round_trip(&p, va, K64 as usize, 30)
}

/// The child modes of the SIGBUS checks: map, write, withdraw, touch (does not return).
fn touch_after(withdraw: fn(&Gdrdrv, &mut DevMem, u64) -> TestResult) -> TestResult {
    load()?;
    // An allocation of its own, so that cuMemFree calls back (sanity::OWN_ALLOCATION).
    let (mut m, va) = aligned(OWN_ALLOCATION as u64)?;
    let g = open()?;
    let p = pin_map(&g, va, 2 * K64, 0)?;
    // Both pages mapped into the page table first: the touch after the withdrawal must find
    // them gone (zapped), not merely refused at a first fault.
    p.map.write(p.at, &[0x11; 64]);
    p.map.write(p.at + K64 as usize + 8, &[0x22]);
    withdraw(&g, &mut m, p.handle)?;
    p.map.write(p.at + K64 as usize + 8, &[0x55]);
    Err("the touch went through".into())
}

pub fn touch_after_cumemfree() -> TestResult {
    touch_after(|_, m, _| m.free())
}

pub fn touch_after_unpin() -> TestResult {
    touch_after(|g, _, h| ok(g.unpin(h), "UNPIN"))
}

fn sigbus_after_cumemfree() -> TestResult {
    expect_sigbus("--gdrdrv-touch-after-free")
}

fn sigbus_after_unpin() -> TestResult {
    expect_sigbus("--gdrdrv-touch-after-unpin")
}

/// What a process that did not open the file gets for `handle`: EACCES for mmap, GET_INFO_V2
/// and read.
fn not_opener_gets_eacces(fd: BorrowedFd<'_>, handle: u64) -> TestResult {
    // It must fail: nothing to unmap.
    let r = crate::helpers::raw_mmap(
        fd,
        gdrdrv::mmap_offset(handle, 0),
        K4 as usize,
        rustix::mm::MapFlags::SHARED,
    );
    check_eq!(r.err(), Some(Errno::ACCESS), "mmap");
    let mut i = gdrdrv::GetInfoV2 {
        handle,
        ..Default::default()
    };
    check_eq!(
        gdrdrv::call(fd, &mut i).err().and_then(|e| e.errno_of()),
        Some(Errno::ACCESS),
        "GET_INFO_V2"
    );
    let mut buf = [0u8; 16];
    check_eq!(
        rustix::io::read(fd, &mut buf).err(),
        Some(Errno::ACCESS),
        "read"
    );
    Ok(())
}

fn fork_after_map() -> TestResult {
    let (_m, va) = aligned(K64)?;
    let g = open()?;
    let p = pin_map(&g, va, K64, 0)?;
    p.map.write(0, &[7]);
    let child = fork(|| not_opener_gets_eacces(g.as_fd(), p.handle))?;
    wait(child)?;
    let mut seen = [0];
    p.map.read(0, &mut seen);
    check_eq!(seen, [7], "the parent's mapping after the child");
    drop(p.map);
    ok(g.unpin(p.handle), "UNPIN")
}

fn fork_before_map() -> TestResult {
    let (_m, va) = aligned(K64)?;
    let g = open()?;
    let h = ok(g.pin_v2(va, K64, 0), "PIN_BUFFER_V2")?;
    let (mine, theirs) = unix_pair()?;
    let child = fork(|| {
        byte(theirs.as_fd())?;
        not_opener_gets_eacces(g.as_fd(), h)
    })?;
    let map = ok(g.map(h, K64 as usize), "parent gdr_map")?.0;
    send_byte(mine.as_fd())?;
    wait(child)?;
    map.write(0, &[1]);
    drop(map);
    ok(g.unpin(h), "UNPIN")
}

fn scm_rights() -> TestResult {
    let m = DevMem::new(K64 as usize)?;
    let (mine, theirs) = unix_pair()?;
    let child = fork(|| {
        let fd = recv_fd(theirs.as_fd())?;
        let mut h = [0u8; 8];
        check_eq!(
            rustix::io::read(theirs.as_fd(), &mut h).map_err(harness::errno)?,
            8,
            "handle"
        );
        not_opener_gets_eacces(fd.as_fd(), u64::from_le_bytes(h))
    })?;
    let g = open()?;
    let h = ok(g.pin_v2(m.p, K64, 0), "PIN_BUFFER_V2")?;
    send_fd(mine.as_fd(), g.as_fd())?;
    rustix::io::write(mine.as_fd(), &h.to_le_bytes()).map_err(harness::errno)?;
    wait(child)?;
    ok(g.unpin(h), "UNPIN")
}

fn tokens() -> TestResult {
    let (_m, va) = aligned(2 * K64)?;
    let (token, va_space) = cu().p2p_tokens(va).map_err(c)?;
    let g = open()?;
    check_eq!(
        fails(g.pin(va, 2 * K64, token + 1, va_space), "wrong token")?,
        Errno::INVAL,
        "a pin with a wrong token"
    );
    let h = ok(
        g.pin(va, 2 * K64, token, va_space),
        "PIN_BUFFER with tokens",
    )?;
    let info = ok(g.info_v2(h), "GET_INFO_V2")?;
    let p = Pinned {
        handle: h,
        map: ok(g.map(h, info.mapped_size as usize), "gdr_map")?.0,
        at: (va - info.va) as usize,
    };
    round_trip(&p, va, 2 * K64 as usize, 40)?;
    drop(p.map);
    ok(g.unpin(p.handle), "UNPIN")
}

fn thread_pins() -> TestResult {
    let m = DevMem::new(K64 as usize)?;
    let g = open()?;
    std::thread::scope(|s| {
        s.spawn(|| -> TestResult {
            let h = ok(g.pin_v2(m.p, K64, 0), "pin in a thread")?;
            ok(g.unpin(h), "unpin in a thread")
        })
        .join()
        .map_err(|_| "thread panicked".to_string())?
    })
}

fn repin_is_a_cache_hit() -> TestResult {
    let m = DevMem::new(2 * K64 as usize)?;
    let g = open()?;
    let pin_unpin = |addr, len, flags| -> TestResult {
        let h = ok(g.pin_v2(addr, len, flags), "PIN_BUFFER_V2")?;
        ok(g.unpin(h), "UNPIN")
    };
    pin_unpin(m.p, 2 * K64, 0)?;
    let hits = gstat("hits")?;
    pin_unpin(m.p, 2 * K64, 0)?;
    check_eq!(gstat("hits")?, hits + 1, "hits after a re-pin");
    let nocache = gdrdrv::PIN_FLAG_GDRPEER_NOCACHE;
    pin_unpin(m.p + 2, 100, nocache)?;
    let hits = gstat("hits")?;
    pin_unpin(m.p + 2, 100, nocache)?;
    check_eq!(gstat("hits")?, hits, "hits after a NOCACHE re-pin");
    Ok(())
}

fn events_once_per_revocation() -> TestResult {
    let mut a = DevMem::new(OWN_PAGES)?;
    let mut b = DevMem::new(OWN_PAGES)?;
    let g = open()?;
    let h1 = ok(g.pin_v2(a.p, K64, 0), "pin")?;
    let h2 = ok(g.pin_v2(a.p, 100, 0), "pin")?;
    let h3 = ok(g.pin_v2(b.p, K64, 0), "pin")?;
    check!(
        !ok(g.wait_events(Some(std::time::Duration::ZERO)), "poll")?,
        "readable before any free"
    );
    a.free()?;
    check!(
        ok(
            g.wait_events(Some(std::time::Duration::from_secs(1))),
            "poll"
        )?,
        "not readable after the free"
    );
    let mut got: Vec<_> = ok(g.try_read_events(), "read")?
        .into_iter()
        .map(|e| (e.handle, e.kind))
        .collect();
    got.sort_by_key(|e| e.0);
    check_eq!(
        got,
        vec![(h1, EventKind::Revoked), (h2, EventKind::Revoked)],
        "events after the first free"
    );
    check!(ok(g.try_read_events(), "read")?.is_empty(), "a second read");
    ok(g.unpin(h1), "unpin")?;
    ok(g.unpin(h2), "unpin")?;
    b.free()?;
    let got: Vec<_> = ok(g.read_events(), "read")?
        .into_iter()
        .map(|e| e.handle)
        .collect();
    check_eq!(got, vec![h3], "events after the second free");
    ok(g.unpin(h3), "unpin")
}

/// The checks, in the C client's order.
pub const TESTS: &[Test] = &[
    ("cuda-gdrdrv-version-and-attributes", version_and_attributes),
    ("cuda-gdrdrv-pin-map-copy", pin_map_copy),
    ("cuda-gdrdrv-unaligned-and-small", unaligned_and_small),
    ("cuda-gdrdrv-two-mappings-one-freed", two_mappings_one_freed),
    ("cuda-gdrdrv-close-with-mapping", close_with_mapping),
    ("cuda-gdrdrv-sigbus-after-cumemfree", sigbus_after_cumemfree),
    ("cuda-gdrdrv-sigbus-after-unpin", sigbus_after_unpin),
    (
        "cuda-gdrdrv-vmm-mmap-write-then-dtoh-and-unmap-is-sigbus",
        crate::vmm::gdrdrv_mmap_then_unmap_is_sigbus,
    ),
    ("cuda-gdrdrv-fork-after-map", fork_after_map),
    ("cuda-gdrdrv-fork-before-map", fork_before_map),
    ("cuda-gdrdrv-scm-rights", scm_rights),
    ("cuda-gdrdrv-tokens", tokens),
    ("cuda-gdrdrv-thread-pins", thread_pins),
    ("cuda-gdrdrv-repin-is-a-cache-hit", repin_is_a_cache_hit),
    (
        "cuda-gdrdrv-events-once-per-revocation",
        events_once_per_revocation,
    ),
];
