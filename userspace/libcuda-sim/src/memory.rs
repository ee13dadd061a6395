// SPDX-License-Identifier: GPL-2.0

//! Memory: device memory from nvsim, read and written through nvsim's mapping of the BAR
//! (the memory a peer's DMA reaches), and page-locked host memory from this process's heap.
//!
//! Addresses are unified, as on a 64-bit CUDA system: a pointer is device memory if it lies
//! in a live nvsim allocation of this process, and host memory otherwise. Unlike CUDA, the
//! two ranges are not kept apart: nvsim hands out GPU addresses from 8 GiB up, where a host
//! mapping would be taken for device memory.
//!
//! Copies and memsets to device memory may return before they complete, as CUDA's
//! "synchronous" ones may ("API synchronization behavior": a copy from pageable host memory
//! returns once the source is staged, device to device and memsets are asynchronous to the
//! host; a copy from page-locked host memory, `cuMemAllocHost`'s, is synchronous): unless
//! the destination has SYNC_MEMOPS (its attribute, or its context's
//! `CU_CTX_SYNC_MEMOPS`), such a write is held ([`LATE`]) and reaches nvsim's memory, the
//! memory a peer reads through a pin, only at the next synchronization: `cuCtxSynchronize`,
//! any later copy or memset (they are ordered after it, and a copy to the host returns
//! complete), `cuMemFree`, `cuMemUnmap`, `cuMemRelease` or the context's end. A program that
//! hands memory to a peer after a copy without either, a race on a GPU, reads the old bytes
//! here every time.
use crate::context::{answer, disown, own, with_context, with_gpu};
use crate::device::nvsim_pci_address;
use crate::errors::*;
use crate::{CUdeviceptr, CUresult};
use std::{
    alloc::Layout,
    collections::{BTreeMap, HashMap},
    ffi::c_void,
    sync::Mutex,
};

/// Bytes in one nvsim GPU page.
const GPU_PAGE: u64 = 64 << 10;
/// nvsim's memory BAR (ivshmem's BAR 2).
const NVSIM_BAR: usize = 2;
/// Host allocations are page-aligned, as CUDA's are.
const HOST_ALIGN: usize = 4096;
/// The BUFFER_IDs of host allocations count up from here, clear of nvsim's.
const HOST_BUFFER_ID_BASE: u64 = 1 << 63;

/// One `cuMemAllocHost` allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct HostAlloc {
    pub base: u64,
    pub size: usize,
    pub buffer_id: u64,
}

/// The live host allocations, by base address.
pub(crate) struct HostAllocs {
    by_base: BTreeMap<u64, HostAlloc>,
    next_id: u64,
}

impl HostAllocs {
    const fn new() -> Self {
        HostAllocs {
            by_base: BTreeMap::new(),
            next_id: HOST_BUFFER_ID_BASE,
        }
    }

    fn insert(&mut self, base: u64, size: usize) -> HostAlloc {
        let a = HostAlloc {
            base,
            size,
            buffer_id: self.next_id,
        };
        self.next_id += 1;
        self.by_base.insert(base, a);
        a
    }

    /// The allocation `p` lies in.
    pub(crate) fn find(&self, p: u64) -> Option<HostAlloc> {
        let (_, a) = self.by_base.range(..=p).next_back()?;
        (p - a.base < a.size as u64).then_some(*a)
    }

    /// Removes the allocation starting at `base`.
    fn remove(&mut self, base: u64) -> Option<HostAlloc> {
        self.by_base.remove(&base)
    }
}

pub(crate) static HOST: Mutex<HostAllocs> = Mutex::new(HostAllocs::new());

/// The host allocation `p` lies in, if any.
pub(crate) fn host_alloc(p: u64) -> Option<HostAlloc> {
    HOST.lock().ok()?.find(p)
}

fn host_layout(size: usize) -> Option<Layout> {
    Layout::from_size_align(size, HOST_ALIGN).ok()
}

/// Where `n` bytes at a unified address lie.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Span {
    Device(u64),
    Host(*mut u8),
}

/// Locates `[ptr, ptr + n)`: inside one live device allocation (a VMM mapping only where
/// `cuMemSetAccess` granted the access, reading or `write`), or host memory (not null, and
/// inside one host allocation of this library if it starts in one). Else
/// `CUDA_ERROR_INVALID_VALUE`.
fn locate(gpu: &nvsim::Gpu, ptr: u64, n: usize, write: bool) -> Result<Span, CUresult> {
    let end = ptr.checked_add(n as u64).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    if let Ok(q) = gpu.query(ptr) {
        let access = q.flags & nvsim::QUERY_VMM == 0 || crate::vmm::accessible(q.base, write);
        return (end <= q.base + q.size && access)
            .then_some(Span::Device(ptr))
            .ok_or(CUDA_ERROR_INVALID_VALUE);
    }
    if ptr == 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    match host_alloc(ptr) {
        Some(a) if end > a.base + a.size as u64 => Err(CUDA_ERROR_INVALID_VALUE),
        _ => Ok(Span::Host(ptr as *mut u8)),
    }
}

/// A write to device memory that returned before it completed: where, what, and the
/// BUFFER_ID of the allocation it was issued to.
struct Late {
    dst: u64,
    what: Write,
    buffer_id: u64,
}

/// What a [`Late`] write writes.
enum Write {
    Bytes(Vec<u8>),
    Fill(u8, usize),
}

impl Write {
    fn to(self, gpu: &nvsim::Gpu, dst: u64) -> Result<(), rustix::io::Errno> {
        match self {
            Write::Bytes(bytes) => gpu.write(dst, &bytes),
            Write::Fill(byte, n) => gpu.fill(dst, byte, n),
        }
    }
}

/// The writes in flight, oldest first.
static LATE: Mutex<Vec<Late>> = Mutex::new(Vec::new());

/// Completes the writes in flight, in the order they were issued. One whose memory is gone
/// (freed behind this library's back: a process's memory freed through nvsim's debugfs,
/// maybe allocated again at the same address since) is dropped, as a GPU's write to memory
/// no longer mapped faults the context.
pub(crate) fn complete(gpu: &nvsim::Gpu) {
    let late = match LATE.lock() {
        Ok(mut l) => std::mem::take(&mut *l),
        Err(_) => return,
    };
    for w in late {
        if gpu.query(w.dst).is_ok_and(|q| q.buffer_id == w.buffer_id) {
            let _ = w.what.to(gpu, w.dst);
        }
    }
}

/// Writes `what` to device memory at `dst` now if the write completes before it returns
/// (the allocation has SYNC_MEMOPS, or the current context `CU_CTX_SYNC_MEMOPS`), else
/// leaves it in flight ([`LATE`]).
fn write_device(gpu: &nvsim::Gpu, dst: u64, what: Write) -> Result<(), rustix::io::Errno> {
    let q = gpu.query(dst)?;
    if q.sync_memops == 0 && !crate::context::sync_memops() {
        if let Ok(mut l) = LATE.lock() {
            l.push(Late {
                dst,
                what,
                buffer_id: q.buffer_id,
            });
            return Ok(());
        }
    }
    what.to(gpu, dst)
}

/// Copies `n` bytes between located spans: device memory through nvsim's mapping.
///
/// # Safety
///
/// A host span is valid for `n` bytes (readable as a source, writable as a destination).
unsafe fn copy(gpu: &nvsim::Gpu, dst: Span, src: Span, n: usize) -> CUresult {
    let done = match (dst, src) {
        (Span::Device(d), Span::Device(s)) => gpu
            .read(s, n)
            .and_then(|b| write_device(gpu, d, Write::Bytes(b))),
        (Span::Device(d), Span::Host(s)) => {
            // SAFETY: the caller's contract: `n` readable bytes at `s`.
            let bytes = unsafe { std::slice::from_raw_parts(s, n) };
            if host_alloc(s as u64).is_some() {
                // From page-locked host memory (cuMemAllocHost) a copy is synchronous.
                gpu.write(d, bytes)
            } else {
                write_device(gpu, d, Write::Bytes(bytes.to_vec()))
            }
        }
        (Span::Host(d), Span::Device(s)) => gpu.read(s, n).map(|b| {
            // SAFETY: the caller's contract: `n` writable bytes at `d`.
            unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), d, n) }
        }),
        (Span::Host(d), Span::Host(s)) => {
            // SAFETY: the caller's contract; `copy` allows the two to overlap.
            unsafe { std::ptr::copy(s, d, n) };
            Ok(())
        }
    };
    match done {
        Ok(()) => CUDA_SUCCESS,
        Err(_) => CUDA_ERROR_INVALID_VALUE,
    }
}

/// Copies `n` bytes from `src` to `dst`, each located by unified addressing and required to
/// be device memory where `device` says so. Zero bytes is a successful no-op, as in CUDA.
/// The writes in flight complete first: the copy is ordered after them.
unsafe fn copy_checked(dst: (u64, bool), src: (u64, bool), n: usize) -> CUresult {
    with_context(|gpu| {
        complete(gpu);
        if n == 0 {
            return CUDA_SUCCESS;
        }
        let span = |(p, device): (u64, bool), write| match locate(gpu, p, n, write)? {
            Span::Host(_) if device => Err(CUDA_ERROR_INVALID_VALUE),
            s => Ok(s),
        };
        match (span(dst, true), span(src, false)) {
            // SAFETY: the caller's contract for host memory, forwarded.
            (Ok(d), Ok(s)) => unsafe { copy(gpu, d, s, n) },
            (Err(e), _) | (_, Err(e)) => e,
        }
    })
}

/// Whether small allocations share pool blocks: yes, unless `LIBCUDA_SIM_SUBALLOC=0`.
fn suballocate() -> bool {
    std::env::var_os("LIBCUDA_SIM_SUBALLOC").is_none_or(|v| v != "0")
}

/// The nvsim allocation flags for a `cuMemAlloc` of `size` bytes: below 2 MiB, a buffer
/// carved from a shared pool block, as CUDA's allocator carves small allocations.
fn alloc_flags(size: usize, suballocate: bool) -> u32 {
    if suballocate && (size as u64) < nvsim::POOL_BLOCK {
        nvsim::ALLOC_SUBALLOC
    } else {
        0
    }
}

/// `cuMemAlloc_v2`: GPU memory from nvsim. Below 2 MiB, a buffer 256-byte aligned (CUDA's
/// guarantee) in a 2 MiB pool block that other small buffers share, so that buffers share
/// 64 KiB pages (`LIBCUDA_SIM_SUBALLOC=0`: an allocation of its own, 64 KiB aligned); from
/// 2 MiB up, an allocation of its own. Pool blocks and allocations from 2 MiB up start on a
/// 2 MiB boundary, as CUDA's do (`tests/cuda-trace`, "ranges").
#[no_mangle]
pub unsafe extern "C" fn cuMemAlloc_v2(dptr: *mut CUdeviceptr, size: usize) -> CUresult {
    if size == 0 {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let flags = alloc_flags(size, suballocate());
    let alloc = |gpu: &nvsim::Gpu| {
        // More than the GPU has is out of memory, as in CUDA (nvsim refuses the size).
        if mem_info().is_some_and(|(_, total)| size as u64 > total) {
            return Err(CUDA_ERROR_OUT_OF_MEMORY);
        }
        let (va, _) = gpu.alloc_flags(size as u64, flags).map_err(alloc_error)?;
        own(va);
        Ok(va)
    };
    // SAFETY: the caller passes a valid pointer or null.
    unsafe { answer(dptr, true, alloc) }
}

/// `cuMemFree_v2`: frees through nvsim, which calls back the nv-p2p pins on it (for a
/// buffer of a pool block, the pins over its 64 KiB pages). VMM memory is
/// `CUDA_ERROR_INVALID_VALUE`; NULL is `CUDA_SUCCESS`, as CUDA answers. Needs no current
/// context: the pointer names its allocation, and so its context, as in CUDA
/// ([`crate::context`]).
#[no_mangle]
pub extern "C" fn cuMemFree_v2(dptr: CUdeviceptr) -> CUresult {
    with_gpu(|gpu| {
        // A free synchronizes: the writes in flight complete first.
        complete(gpu);
        match gpu.free(dptr) {
            _ if dptr == 0 => CUDA_SUCCESS,
            Ok(()) => {
                disown(dptr);
                CUDA_SUCCESS
            }
            Err(_) => CUDA_ERROR_INVALID_VALUE,
        }
    })
}

/// `cuMemGetAddressRange_v2`: base and size (as requested) of the device allocation `dptr`
/// lies in; `CUDA_ERROR_NOT_FOUND` where it lies in none. It needs a current context, as in
/// CUDA (`tests/cuda-trace`).
#[no_mangle]
pub unsafe extern "C" fn cuMemGetAddressRange_v2(
    base: *mut CUdeviceptr,
    size: *mut usize,
    dptr: CUdeviceptr,
) -> CUresult {
    with_context(|gpu| match gpu.query(dptr) {
        Ok(q) => {
            // SAFETY: each pointer is optional; written only when non-null.
            unsafe {
                if !base.is_null() {
                    *base = q.base;
                }
                if !size.is_null() {
                    *size = q.size as usize;
                }
            }
            CUDA_SUCCESS
        }
        Err(_) => CUDA_ERROR_NOT_FOUND,
    })
}

/// `cuMemcpyHtoD_v2`: `dst` must lie, with its `n` bytes, in one device allocation.
#[no_mangle]
pub unsafe extern "C" fn cuMemcpyHtoD_v2(
    dst: CUdeviceptr,
    src: *const c_void,
    n: usize,
) -> CUresult {
    if src.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    // SAFETY: the caller passes `n` readable bytes at `src`.
    unsafe { copy_checked((dst, true), (src as u64, false), n) }
}

/// `cuMemcpyDtoH_v2`: `src` must lie, with its `n` bytes, in one device allocation.
#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoH_v2(dst: *mut c_void, src: CUdeviceptr, n: usize) -> CUresult {
    if dst.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    // SAFETY: the caller passes `n` writable bytes at `dst`.
    unsafe { copy_checked((dst as u64, false), (src, true), n) }
}

/// `cuMemcpy`: copies between any two of device and host memory, told apart by unified
/// addressing; each side must lie in one allocation if it starts in one. Synchronous.
#[no_mangle]
pub unsafe extern "C" fn cuMemcpy(dst: CUdeviceptr, src: CUdeviceptr, n: usize) -> CUresult {
    // SAFETY: the caller passes `n` bytes at each side that is host memory.
    unsafe { copy_checked((dst, false), (src, false), n) }
}

/// `cuMemsetD8_v2`: sets `n` bytes of device memory to `uc`, writing through nvsim's
/// mapping, the memory a peer reads (after the writes in flight, and maybe itself in flight:
/// see the module's documentation). Unlike CUDA, host memory is refused
/// (`CUDA_ERROR_INVALID_VALUE`).
#[no_mangle]
pub extern "C" fn cuMemsetD8_v2(dst: CUdeviceptr, uc: u8, n: usize) -> CUresult {
    with_context(|gpu| {
        complete(gpu);
        match locate(gpu, dst, n, true) {
            Ok(Span::Device(_)) if n == 0 => CUDA_SUCCESS,
            Ok(Span::Device(d)) => match write_device(gpu, d, Write::Fill(uc, n)) {
                Ok(()) => CUDA_SUCCESS,
                Err(_) => CUDA_ERROR_INVALID_VALUE,
            },
            Ok(Span::Host(_)) => CUDA_ERROR_INVALID_VALUE,
            Err(e) => e,
        }
    })
}

/// `cuMemAllocHost_v2`: zeroed, page-aligned host memory. cuPointerGetAttribute reports it
/// as `CU_MEMORYTYPE_HOST`, as CUDA does. Unlike CUDA, it is not locked in memory: nothing
/// in the simulation DMAs to it.
#[no_mangle]
pub unsafe extern "C" fn cuMemAllocHost_v2(pp: *mut *mut c_void, size: usize) -> CUresult {
    if size == 0 {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let alloc = |_: &nvsim::Gpu| {
        let layout = host_layout(size).ok_or(CUDA_ERROR_OUT_OF_MEMORY)?;
        let mut host = HOST.lock().map_err(|_| CUDA_ERROR_UNKNOWN)?;
        // SAFETY: `layout` has a non-zero size.
        let p = unsafe { std::alloc::alloc_zeroed(layout) };
        if p.is_null() {
            return Err(CUDA_ERROR_OUT_OF_MEMORY);
        }
        host.insert(p as u64, size);
        own(p as u64);
        Ok(p.cast())
    };
    // SAFETY: the caller passes a valid pointer or null.
    unsafe { answer(pp, true, alloc) }
}

/// Frees the host allocation at `base`, if there is one: whether there was.
pub(crate) fn free_host(base: u64) -> bool {
    let Ok(mut host) = HOST.lock() else {
        return false;
    };
    match host.remove(base).and_then(|a| host_layout(a.size)) {
        Some(layout) => {
            // SAFETY: `base` came from alloc_zeroed with this layout and is freed once
            // (removed from the table above).
            unsafe { std::alloc::dealloc(base as *mut u8, layout) };
            true
        }
        None => false,
    }
}

/// `cuMemFreeHost`: frees what `cuMemAllocHost_v2` returned; any other pointer is
/// `CUDA_ERROR_INVALID_VALUE`. Needs no current context, as `cuMemFree_v2`.
#[no_mangle]
pub extern "C" fn cuMemFreeHost(p: *mut c_void) -> CUresult {
    with_gpu(|_| {
        if free_host(p as u64) {
            disown(p as u64);
            CUDA_SUCCESS
        } else {
            CUDA_ERROR_INVALID_VALUE
        }
    })
}

/// (free, total) from nvsim's counters: its GPU pages, and those in use.
fn mem_info_from_stats(stats: &HashMap<String, u64>) -> Option<(u64, u64)> {
    let total = *stats.get("gpu_pages")?;
    let used = *stats.get("gpu_pages_used")?;
    Some((total.checked_sub(used)? * GPU_PAGE, total * GPU_PAGE))
}

/// The size of BAR `bar` from a sysfs `resource` file (`start end flags` a line).
fn bar_size(resource: &str, bar: usize) -> Option<u64> {
    let mut f = resource.lines().nth(bar)?.split_whitespace();
    let mut hex = || u64::from_str_radix(f.next()?.strip_prefix("0x")?, 16).ok();
    let (start, end) = (hex()?, hex()?);
    (start != 0 && end > start).then(|| end - start + 1)
}

/// (free, total) device memory: exact from nvsim's counters (debugfs, for root); else the
/// BAR's size from sysfs, all of it counted free.
fn mem_info() -> Option<(u64, u64)> {
    if let Ok(stats) = nvsim::testing::stats() {
        return mem_info_from_stats(&stats);
    }
    let path = format!("/sys/bus/pci/devices/{}/resource", nvsim_pci_address()?);
    let total = bar_size(&std::fs::read_to_string(path).ok()?, NVSIM_BAR)?;
    Some((total, total))
}

/// `cuMemGetInfo_v2`: free and total simulated GPU memory (the BAR: 256 MiB in the test
/// guest). Without root, where nvsim's counters cannot be read, free is reported as total.
#[no_mangle]
pub unsafe extern "C" fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) -> CUresult {
    if free.is_null() || total.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    with_context(|_| match mem_info() {
        Some((f, t)) => {
            // SAFETY: both checked non-null; the caller passes valid pointers.
            unsafe {
                *free = f as usize;
                *total = t as usize;
            }
            CUDA_SUCCESS
        }
        None => CUDA_ERROR_UNKNOWN,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::no_nvsim;

    #[test]
    fn host_allocation_table() {
        let mut t = HostAllocs::new();
        let a = t.insert(0x10000, 100);
        let b = t.insert(0x20000, 0x1000);
        assert!(a.buffer_id >= HOST_BUFFER_ID_BASE && b.buffer_id > a.buffer_id);
        assert_eq!(t.find(0x10000), Some(a));
        assert_eq!(t.find(0x10000 + 99), Some(a));
        assert_eq!(t.find(0x10000 + 100), None);
        assert_eq!(t.find(0xffff), None);
        assert_eq!(t.find(0x20fff), Some(b));
        assert_eq!(t.remove(0x10001), None, "only the base frees");
        assert_eq!(t.remove(0x10000), Some(a));
        assert_eq!(t.remove(0x10000), None, "double free");
        assert_eq!(t.find(0x10000), None);
        assert!(
            t.insert(0x10000, 100).buffer_id > b.buffer_id,
            "ids are never reused"
        );
    }

    #[test]
    fn small_allocations_share_pool_blocks() {
        assert_eq!(alloc_flags(1, true), nvsim::ALLOC_SUBALLOC);
        assert_eq!(alloc_flags((2 << 20) - 1, true), nvsim::ALLOC_SUBALLOC);
        assert_eq!(alloc_flags(2 << 20, true), 0);
        assert_eq!(alloc_flags(100, false), 0);
    }

    #[test]
    fn memory_info_sources() {
        let stats: HashMap<String, u64> = [("gpu_pages", 4096), ("gpu_pages_used", 96)]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        assert_eq!(
            mem_info_from_stats(&stats),
            Some((4000 * GPU_PAGE, 256 << 20))
        );
        assert_eq!(mem_info_from_stats(&HashMap::new()), None);
        let resource = "0x00000000fea00000 0x00000000fea000ff 0x0000000000040200\n\
                        0x0000000000000000 0x0000000000000000 0x0000000000000000\n\
                        0x0000000800000000 0x000000080fffffff 0x000000000014220c\n";
        assert_eq!(bar_size(resource, 2), Some(256 << 20));
        assert_eq!(bar_size(resource, 1), None, "an unused BAR");
        assert_eq!(bar_size(resource, 7), None);
    }

    #[test]
    fn argument_checks_and_no_device() {
        let mut p = std::ptr::null_mut();
        let (mut free, mut total) = (0usize, 0usize);
        let mut byte = 0u8;
        // SAFETY (all calls): null pointers are refused before use; others are valid.
        unsafe {
            assert_eq!(
                cuMemAllocHost_v2(std::ptr::null_mut(), 64),
                CUDA_ERROR_INVALID_VALUE
            );
            assert_eq!(cuMemAllocHost_v2(&mut p, 0), CUDA_ERROR_INVALID_VALUE);
            assert_eq!(
                cuMemAlloc_v2(std::ptr::null_mut(), 64),
                CUDA_ERROR_INVALID_VALUE
            );
            assert_eq!(
                cuMemGetInfo_v2(std::ptr::null_mut(), &mut total),
                CUDA_ERROR_INVALID_VALUE
            );
            assert_eq!(
                cuMemcpyHtoD_v2(1 << 33, std::ptr::null(), 1),
                CUDA_ERROR_INVALID_VALUE
            );
            assert_eq!(
                cuMemcpyDtoH_v2(std::ptr::null_mut(), 1 << 33, 1),
                CUDA_ERROR_INVALID_VALUE
            );
            if no_nvsim() {
                let not_init = CUDA_ERROR_NOT_INITIALIZED;
                assert_eq!(cuMemAllocHost_v2(&mut p, 64), not_init);
                assert_eq!(cuMemFreeHost(&mut byte as *mut u8 as *mut c_void), not_init);
                assert_eq!(cuMemGetInfo_v2(&mut free, &mut total), not_init);
                assert_eq!(cuMemsetD8_v2(1 << 33, 0, 1), not_init);
                assert_eq!(cuMemcpy(&mut byte as *mut u8 as u64, 1 << 33, 1), not_init);
                assert_eq!(cuMemFree_v2(1 << 33), not_init);
                let mut base = 0;
                assert_eq!(
                    cuMemGetAddressRange_v2(&mut base, &mut free, 1 << 33),
                    not_init
                );
            }
        }
        assert!(p.is_null());
    }
}
