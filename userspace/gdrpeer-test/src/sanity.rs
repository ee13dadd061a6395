// SPDX-License-Identifier: GPL-2.0

//! `gdrpeer-test --cuda [FILTER]`: gdrcopy's sanity scenarios, adapted to gdrpeer, over the
//! CUDA driver API (libcuda.so.1 by dynamic loading: the simulated one in the test guest, the
//! real one on a GPU machine). `--cuda-only` runs the scenarios that need CUDA alone, without
//! the module: the pointer attributes gdrpeer's user-space cache relies on.
//!
//! Without a CUDA driver library the program says so and exits with status 3.

use crate::helpers::{cuda_entry, dev, fails, gdrpeer_idle, ok, pattern, K64};
use crate::proc;
use gdrpeer::cuda::Cuda;
use gdrpeer::regcache::{CudaError, PointerInfo};
use gdrpeer::{PinFlags, PinState};
use nvsim::testing::{self as harness, TestResult};
use nvsim::{check, check_eq};
use rustix::io::Errno;
use std::sync::OnceLock;

/// Exit status when no CUDA driver library can be loaded.
pub const NO_CUDA: u8 = 3;

static CUDA: OnceLock<Cuda> = OnceLock::new();

/// Loads CUDA once for the whole run (a CUDA context belongs to the process).
pub fn load() -> Result<(), String> {
    if CUDA.get().is_none() {
        let cu = Cuda::load().map_err(|e| e.to_string())?;
        let _ = CUDA.set(cu);
    }
    Ok(())
}

pub fn cu() -> &'static Cuda {
    CUDA.get().expect("sanity::load ran first")
}

pub fn c(e: gdrpeer::Error) -> String {
    e.to_string()
}

/// cuMemAlloc'd memory, freed on drop unless freed already.
/// The smallest cuMemAlloc that is an allocation of its own (nvsim's pool block, as CUDA's):
/// a smaller buffer is carved out of a shared block, and freeing it need not call anything
/// back (the driver's rule, nvsim's `callback_per_buffer=0`). A test that needs the free
/// callback of a cuMemFree allocates at least this much.
pub const OWN_ALLOCATION: usize = nvsim::POOL_BLOCK as usize;

pub struct DevMem {
    pub p: u64,
    freed: bool,
}

impl DevMem {
    /// With SYNC_MEMOPS set, as gdrcopy's tests allocate: a cuMemcpyHtoD is in the memory
    /// when it returns, where a peer (a mapping, the NIC) reads it next.
    pub fn new(size: usize) -> Result<Self, String> {
        let m = DevMem {
            p: cu().mem_alloc(size).map_err(c)?,
            freed: false,
        };
        cu().set_sync_memops(m.p)
            .map_err(|e| format!("SYNC_MEMOPS: {e:?}"))?;
        Ok(m)
    }

    pub fn free(&mut self) -> TestResult {
        self.freed = true;
        cu().mem_free(self.p).map_err(c)
    }
}

impl Drop for DevMem {
    fn drop(&mut self) {
        if !self.freed {
            let _ = cu().mem_free(self.p);
        }
    }
}

// --- With the module ---------------------------------------------------------------------

/// gdrcopy's basic: pin cuMemAlloc'd memory, read its pages, unpin, free.
fn basic() -> TestResult {
    let m = DevMem::new(4 * K64 as usize)?;
    let d = dev()?;
    let p = ok(d.pin(m.p, 4 * K64, PinFlags::empty()), "pin")?;
    let first = m.p & !(K64 - 1);
    let pages = (m.p + 4 * K64 - 1 - first) / K64 + 1;
    check_eq!(
        (p.aligned_va, u64::from(p.page_count)),
        (first, pages),
        "window"
    );
    check_eq!(
        ok(d.get_pages(p.handle), "pages")?.len() as u64,
        pages,
        "pages"
    );
    ok(d.unpin(p.handle), "unpin")
}

/// Unaligned offsets and small buffers: each window covers exactly the pages touched.
fn unaligned_and_small() -> TestResult {
    let m = DevMem::new(4 * K64 as usize)?;
    let d = dev()?;
    for (off, len) in [
        (1, 1),
        (4095, 2),
        (K64 - 1, 2),
        (K64 + 12345, 4096),
        (7, 3 * K64),
    ] {
        let p = ok(d.pin(m.p + off, len, PinFlags::empty()), "pin")?;
        let (start, end) = (m.p + off, m.p + off + len - 1);
        let first = start / K64;
        let last = end / K64;
        check_eq!(
            (p.aligned_va, p.offset, u64::from(p.page_count)),
            (first * K64, start % K64, last - first + 1),
            format!("window of +{off:#x}, {len} bytes")
        );
        ok(d.unpin(p.handle), "unpin")?;
    }
    Ok(())
}

/// A thread of the process pins through the process's file.
fn child_thread_pins() -> TestResult {
    let m = DevMem::new(K64 as usize)?;
    let d = dev()?;
    let va = m.p;
    std::thread::scope(|s| {
        s.spawn(|| -> TestResult {
            let p = ok(d.pin(va, K64, PinFlags::empty()), "pin in a thread")?;
            ok(d.unpin(p.handle), "unpin in a thread")
        })
        .join()
        .map_err(|_| "thread panicked".to_string())?
    })
}

/// Data written with cuMemcpyHtoD is what gdrpeer's mapping of the pinned pages reads, and
/// what is written through the mapping is what cuMemcpyDtoH reads (gdrcopy's data validation
/// through gdr_map); nvsim's own view of the memory agrees.
fn data_validation() -> TestResult {
    let size = 3 * K64 as usize;
    let m = DevMem::new(size)?;
    let d = dev()?;
    let p = ok(d.pin(m.p + 100, 2 * K64, PinFlags::empty()), "pin")?;
    let window = p.page_count as usize * K64 as usize;
    check_eq!(window, size, "the pin's pages");
    let map = ok(d.map(p.handle, 0, window), "map")?;
    let data = pattern(7, size);
    cu().copy_to_device(m.p, &data).map_err(c)?;
    let mut seen = vec![0u8; window];
    map.read(0, &mut seen);
    check!(
        seen == data,
        "the mapping reads otherwise than cuMemcpyHtoD wrote"
    );
    let back = pattern(8, 4096);
    map.write(70000, &back);
    let mut out = vec![0u8; 4096];
    cu().copy_from_device(&mut out, m.p + 70000).map_err(c)?;
    check!(
        out == back,
        "cuMemcpyDtoH differs from what was written through the mapping"
    );
    let gpu = nvsim::Gpu::open().map_err(harness::errno)?;
    check!(
        gpu.read(m.p + 70000, 4096).map_err(harness::errno)? == back,
        "nvsim's view differs from what was written through the mapping"
    );
    drop(map);
    ok(d.unpin(p.handle), "unpin")
}

/// cuMemFree under a pin: the handle is revoked, its pages are gone, unpin still works.
fn invalidation_after_free() -> TestResult {
    let mut m = DevMem::new(OWN_ALLOCATION)?;
    let d = dev()?;
    let p = ok(d.pin(m.p, 2 * K64, PinFlags::empty()), "pin")?;
    m.free()?;
    check_eq!(
        ok(d.info(p.handle), "info")?.state,
        PinState::Revoked,
        "state"
    );
    check_eq!(fails(d.get_pages(p.handle), "pages")?, Errno::NXIO, "pages");
    ok(d.unpin(p.handle), "unpin")
}

/// The end of a context frees its memory, as cuMemFree does: the pins on it are revoked.
/// A context of cuCtxCreate, destroyed; then the primary context is current again.
fn invalidation_after_context_destroy() -> TestResult {
    type Res = std::ffi::c_uint;
    type Ctx = *mut std::ffi::c_void;
    // SAFETY: libcuda.so.1 is loaded already (load); this takes a reference.
    let lib = unsafe { libloading::Library::new("libcuda.so.1") }.map_err(|e| e.to_string())?;
    // SAFETY (the four entry points): each is read as its CUDA driver API signature.
    let (create, destroy, retain, set) = unsafe {
        (
            cuda_entry::<unsafe extern "C" fn(*mut Ctx, Res, i32) -> Res>(&lib, "cuCtxCreate_v2")?,
            cuda_entry::<unsafe extern "C" fn(Ctx) -> Res>(&lib, "cuCtxDestroy_v2")?,
            cuda_entry::<unsafe extern "C" fn(*mut Ctx, i32) -> Res>(
                &lib,
                "cuDevicePrimaryCtxRetain",
            )?,
            cuda_entry::<unsafe extern "C" fn(Ctx) -> Res>(&lib, "cuCtxSetCurrent")?,
        )
    };
    let mut ctx: Ctx = std::ptr::null_mut();
    // SAFETY (the calls below): valid out-pointers, and contexts these calls returned.
    check_eq!(unsafe { create(&mut ctx, 0, 0) }, 0, "cuCtxCreate");
    let run = || -> TestResult {
        let p = cu().mem_alloc(OWN_ALLOCATION).map_err(c)?;
        let d = dev()?;
        let pin = ok(d.pin(p, 2 * K64, PinFlags::empty()), "pin")?;
        check_eq!(unsafe { destroy(ctx) }, 0, "cuCtxDestroy");
        check_eq!(
            ok(d.info(pin.handle), "info")?.state,
            PinState::Revoked,
            "the pin after cuCtxDestroy"
        );
        check_eq!(
            cu().buffer_id(p),
            Err(CudaError::NoAllocation),
            "the memory after cuCtxDestroy"
        );
        ok(d.unpin(pin.handle), "unpin")
    };
    let r = run();
    let mut primary: Ctx = std::ptr::null_mut();
    check_eq!(
        unsafe { retain(&mut primary, 0) },
        0,
        "cuDevicePrimaryCtxRetain"
    );
    check_eq!(unsafe { set(primary) }, 0, "cuCtxSetCurrent(primary)");
    r
}

/// Closing the file with pins releases them; the memory is then freed normally.
fn invalidation_after_close() -> TestResult {
    let mut m = DevMem::new(2 * K64 as usize)?;
    let d = dev()?;
    ok(d.pin(m.p, K64, PinFlags::empty()), "pin")?;
    ok(d.pin(m.p + K64, K64, PinFlags::empty()), "pin")?;
    drop(d);
    gdrpeer_idle()?;
    m.free()
}

/// Parent pins, child (fork) uses the parent's file: EACCES; the parent's pin survives.
fn across_fork() -> TestResult {
    let m = DevMem::new(K64 as usize)?;
    let d = dev()?;
    let p = ok(d.pin(m.p, K64, PinFlags::empty()), "pin")?;
    let va = m.p;
    let child = proc::fork(|| {
        check_eq!(
            fails(d.pin(va, K64, PinFlags::empty()), "child pin")?,
            Errno::ACCESS,
            "child pin"
        );
        check_eq!(
            fails(d.get_pages(p.handle), "child pages")?,
            Errno::ACCESS,
            "child pages"
        );
        Ok(())
    })?;
    proc::wait(child)?;
    check_eq!(
        ok(d.info(p.handle), "info")?.state,
        PinState::Valid,
        "state"
    );
    ok(d.unpin(p.handle), "unpin")
}

/// A cuMemAlloc'd buffer pinned and mapped whole, as a real program does it: the pin covers
/// the allocation's range (cuMemGetAddressRange), which need not start at a GPU page, and
/// the mapping covers the pin's window; the buffer starts at `offset` in the mapping.
struct MappedBuffer {
    mem: DevMem,
    size: usize,
    map: gdrpeer::Mapping,
    offset: usize,
    handle: u64,
}

impl MappedBuffer {
    fn new(d: &gdrpeer::Device, size: usize) -> Result<Self, String> {
        let mem = DevMem::new(size)?;
        let (base, len) = cu()
            .address_range(mem.p)
            .map_err(|e| format!("cuMemGetAddressRange: {e:?}"))?;
        check_eq!((base, len), (mem.p, size as u64), "the allocation's range");
        let p = ok(d.pin(base, len, PinFlags::empty()), "pin")?;
        check_eq!(p.aligned_va, base & !(K64 - 1), "window start");
        let window = u64::from(p.page_count) * K64;
        let map = ok(d.map(p.handle, 0, window as usize), "map")?;
        Ok(MappedBuffer {
            mem,
            size,
            map,
            offset: p.offset as usize,
            handle: p.handle,
        })
    }
}

/// Bytes written through the mapping are what cuMemcpyDtoH reads (and nvsim's own view).
fn mmap_write_then_dtoh() -> TestResult {
    let d = dev()?;
    let b = MappedBuffer::new(&d, 2 * K64 as usize + 300)?;
    let data = pattern(20, b.size);
    b.map.write(b.offset, &data);
    let mut out = vec![0u8; b.size];
    cu().copy_from_device(&mut out, b.mem.p).map_err(c)?;
    check!(
        out == data,
        "cuMemcpyDtoH differs from the bytes written through the mapping"
    );
    let gpu = nvsim::Gpu::open().map_err(harness::errno)?;
    check!(
        gpu.read(b.mem.p, b.size).map_err(harness::errno)? == data,
        "nvsim's view differs from the bytes written through the mapping"
    );
    let h = b.handle;
    drop(b.map);
    ok(d.unpin(h), "unpin")
}

/// Bytes written with cuMemcpyHtoD are what the mapping reads.
fn mmap_htod_then_read() -> TestResult {
    let d = dev()?;
    let b = MappedBuffer::new(&d, 3 * K64 as usize - 1000)?;
    let data = pattern(21, b.size);
    cu().copy_to_device(b.mem.p, &data).map_err(c)?;
    let mut seen = vec![0u8; b.size];
    b.map.read(b.offset, &mut seen);
    check!(
        seen == data,
        "the mapping differs from what cuMemcpyHtoD wrote"
    );
    let h = b.handle;
    drop(b.map);
    ok(d.unpin(h), "unpin")
}

/// The child of [`mmap_after_cumemfree_is_sigbus`] (its own process: a CUDA context does not
/// survive fork): maps a buffer, touches every page, cuMemFree, touches it again. Should
/// die of SIGBUS; returning is a failure.
pub fn touch_after_cumemfree() -> TestResult {
    load()?;
    let d = dev()?;
    let mut b = MappedBuffer::new(&d, OWN_ALLOCATION)?;
    let data = pattern(22, b.size);
    b.map.write(b.offset, &data);
    b.mem.free()?;
    check_eq!(
        ok(d.info(b.handle), "info")?.state,
        PinState::Revoked,
        "state after cuMemFree"
    );
    b.map.write(b.offset + K64 as usize + 8, &[0x55]);
    Err("wrote through the mapping after cuMemFree".into())
}

/// Access through a mapping after cuMemFree is SIGBUS, and nothing reached the freed pages
/// (nvsim's `freed_page_writes`, checked after every test).
fn mmap_after_cumemfree_is_sigbus() -> TestResult {
    expect_sigbus("--cuda-touch-after-free")
}

/// Runs this program in the child `mode`: it must die of SIGBUS, writing nothing into freed
/// GPU pages.
pub fn expect_sigbus(mode: &str) -> TestResult {
    use std::os::unix::process::ExitStatusExt;
    let writes = harness::freed_page_writes()?;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let out = std::process::Command::new(exe)
        .arg(mode)
        .output()
        .map_err(|e| e.to_string())?;
    check_eq!(
        out.status.signal(),
        Some(libc::SIGBUS),
        format!(
            "the child's end ({}; it said '{}')",
            out.status,
            String::from_utf8_lossy(&out.stdout).trim()
        )
    );
    check_eq!(
        harness::freed_page_writes()?,
        writes,
        "writes into freed pages"
    );
    Ok(())
}

// --- CUDA alone (--cuda-only) -------------------------------------------------------------

/// The BUFFER_ID tag: stable for an allocation, new after free and realloc (at the same
/// address or not), CUDA_ERROR_INVALID_VALUE once freed.
fn buffer_id_tag() -> TestResult {
    let cu = cu();
    let size = 2 * K64 as usize;
    let mut a = DevMem::new(size)?;
    let id = cu.buffer_id(a.p).map_err(|e| format!("BUFFER_ID: {e:?}"))?;
    check_eq!(
        cu.buffer_id(a.p + 5000).map_err(|e| format!("{e:?}"))?,
        id,
        "same allocation, same id"
    );
    let p = a.p;
    a.free()?;
    check_eq!(
        cu.buffer_id(p),
        Err(CudaError::NoAllocation),
        "freed pointer"
    );
    // A new allocation never reuses an id, at the same address (the case a cache's tag
    // check is for) or elsewhere: checked either way.
    let b = DevMem::new(size)?;
    let where_ = if b.p == p {
        "at the same address"
    } else {
        "elsewhere"
    };
    check!(
        cu.buffer_id(b.p).map_err(|e| format!("{e:?}"))? != id,
        "a reallocation ({where_}) has the freed allocation's BUFFER_ID"
    );
    Ok(())
}

/// Where cuMemAlloc puts memory: a pool block of small buffers and an allocation from 2 MiB up
/// each start on a 2 MiB boundary, also behind an allocation whose size is no multiple of
/// 2 MiB (every base of the record is 2 MiB aligned: `tests/cuda-trace`, "ranges"). A cache
/// that pins what MAPPING_BASE_ADDR and MAPPING_SIZE name relies on it.
fn allocations_on_2mib_boundaries() -> TestResult {
    const M2: usize = 2 << 20;
    let _odd = DevMem::new(M2 + 1)?;
    for size in [4096, K64 as usize, M2, 5 * M2 + 12345] {
        let m = DevMem::new(size)?;
        check!(
            m.p % M2 as u64 == 0,
            "an allocation of {size} bytes behind one of 2 MiB + 1 starts at {:#x}, off a 2 MiB boundary",
            m.p
        );
    }
    Ok(())
}

/// The allocation's range and SYNC_MEMOPS, as the cache uses them.
fn address_range_and_sync_memops() -> TestResult {
    let cu = cu();
    let size = 3 * K64 as usize + 10;
    let m = DevMem::new(size)?;
    check_eq!(
        cu.address_range(m.p + 70000),
        Ok((m.p, size as u64)),
        "cuMemGetAddressRange"
    );
    cu.set_sync_memops(m.p)
        .map_err(|e| format!("SYNC_MEMOPS: {e:?}"))?;
    check_eq!(
        cu.address_range(0x10),
        Err(CudaError::NoAllocation),
        "host address"
    );
    Ok(())
}

pub const TESTS: &[harness::Test] = &[
    ("cuda-basic", basic),
    ("cuda-unaligned-and-small", unaligned_and_small),
    ("cuda-child-thread-pins", child_thread_pins),
    ("cuda-data-validation", data_validation),
    ("cuda-invalidation-after-free", invalidation_after_free),
    ("cuda-invalidation-after-close", invalidation_after_close),
    (
        "cuda-invalidation-after-context-destroy",
        invalidation_after_context_destroy,
    ),
    ("cuda-across-fork", across_fork),
    ("cuda-mmap-write-then-dtoh", mmap_write_then_dtoh),
    ("cuda-mmap-htod-then-read", mmap_htod_then_read),
    (
        "cuda-mmap-after-cumemfree-is-sigbus",
        mmap_after_cumemfree_is_sigbus,
    ),
    (
        "cuda-vmm-mmap-write-then-dtoh-and-unmap-is-sigbus",
        crate::vmm::gdrpeer_mmap_then_unmap_is_sigbus,
    ),
    ("cuda-buffer-id-tag", buffer_id_tag),
    (
        "cuda-address-range-and-sync-memops",
        address_range_and_sync_memops,
    ),
    (
        "cuda-regcache-over-vmm-memory",
        crate::vmm::regcache_over_vmm_memory,
    ),
    (
        "cuda-allocations-on-2mib-boundaries",
        allocations_on_2mib_boundaries,
    ),
];

/// The scenarios that need CUDA alone.
pub const CUDA_ONLY: &[harness::Test] = &[
    ("cuda-buffer-id-tag", buffer_id_tag),
    (
        "cuda-address-range-and-sync-memops",
        address_range_and_sync_memops,
    ),
    (
        "cuda-allocations-on-2mib-boundaries",
        allocations_on_2mib_boundaries,
    ),
];
