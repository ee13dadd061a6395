// SPDX-License-Identifier: GPL-2.0

//! `gdrpeer-test --cuda [FILTER]`: gdrcopy's sanity scenarios, adapted to gdrpeer, over the
//! CUDA driver API (libcuda.so.1 by dynamic loading: the simulated one in the test guest, the
//! real one on a GPU machine). `--cuda-only` runs the scenarios that need CUDA alone, without
//! the module: the pointer attributes gdrpeer's user-space cache relies on.
//!
//! Without a CUDA driver library the program says so and exits with status 3.

use crate::helpers::{dev, fails, gdrpeer_idle, ok, pattern, K64};
use crate::proc;
use gdrpeer::cuda::{Cuda, CudaCallError};
use gdrpeer::regcache::{CudaError, PointerInfo};
use gdrpeer::{PinFlags, PinState};
use nvsim::testing::{self as harness, TestResult, SKIP};
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

fn cu() -> &'static Cuda {
    CUDA.get().expect("sanity::load ran first")
}

fn c(e: CudaCallError) -> String {
    e.to_string()
}

/// cuMemAlloc'd memory, freed on drop unless freed already.
struct DevMem {
    p: u64,
    freed: bool,
}

impl DevMem {
    fn new(size: usize) -> Result<Self, String> {
        Ok(DevMem {
            p: cu().mem_alloc(size).map_err(c)?,
            freed: false,
        })
    }

    fn free(&mut self) -> TestResult {
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
    check_eq!((p.aligned_va, p.page_count), (m.p, 4), "window");
    check_eq!(ok(d.get_pages(p.handle), "pages")?.len(), 4, "pages");
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
        let first = off / K64;
        let last = (off + len - 1) / K64;
        check_eq!(
            (p.aligned_va, p.offset, u64::from(p.page_count)),
            (m.p + first * K64, off % K64, last - first + 1),
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

/// Data written with cuMemcpyHtoD is what the pinned pages hold (read through nvsim's mapping
/// of the same GPU memory), and the other way round.
fn data_validation() -> TestResult {
    let size = 3 * K64 as usize;
    let m = DevMem::new(size)?;
    let d = dev()?;
    let p = ok(d.pin(m.p + 100, 2 * K64, PinFlags::empty()), "pin")?;
    let data = pattern(7, size);
    cu().copy_to_device(m.p, &data).map_err(c)?;
    let gpu = nvsim::Gpu::open().map_err(harness::errno)?;
    check!(
        gpu.read(p.aligned_va, size).map_err(harness::errno)? == data,
        "pinned memory differs from what cuMemcpyHtoD wrote"
    );
    let back = pattern(8, 4096);
    gpu.write(m.p + 70000, &back).map_err(harness::errno)?;
    let mut out = vec![0u8; 4096];
    cu().copy_from_device(&mut out, m.p + 70000).map_err(c)?;
    check!(out == back, "cuMemcpyDtoH differs from the pinned memory");
    ok(d.unpin(p.handle), "unpin")
}

/// cuMemFree under a pin: the handle is revoked, its pages are gone, unpin still works.
fn invalidation_after_free() -> TestResult {
    let mut m = DevMem::new(2 * K64 as usize)?;
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

/// P2P tokens: gdrpeer pins in the caller's own address space and takes no token, so a
/// token-based pin cannot be asked for. The attribute itself is checked by `--cuda-only`.
fn tokens() -> TestResult {
    Err(format!(
        "{SKIP}gdrpeer's uAPI takes no P2P tokens (pins use the caller's address space)"
    ))
}

// --- CUDA alone (--cuda-only) -------------------------------------------------------------

/// The BUFFER_ID tag: stable for an allocation, new after free and realloc at the same
/// address, CUDA_ERROR_INVALID_VALUE once freed.
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
        Err(CudaError::InvalidValue),
        "freed pointer"
    );
    let b = DevMem::new(size)?;
    if b.p == p {
        check!(
            cu.buffer_id(b.p).map_err(|e| format!("{e:?}"))? != id,
            "a reallocation at the same address kept its BUFFER_ID"
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
        Err(CudaError::InvalidValue),
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
    ("cuda-across-fork", across_fork),
    ("cuda-tokens", tokens),
    ("cuda-buffer-id-tag", buffer_id_tag),
    (
        "cuda-address-range-and-sync-memops",
        address_range_and_sync_memops,
    ),
];

/// The scenarios that need CUDA alone.
pub const CUDA_ONLY: &[harness::Test] = &[
    ("cuda-buffer-id-tag", buffer_id_tag),
    (
        "cuda-address-range-and-sync-memops",
        address_range_and_sync_memops,
    ),
];
