// SPDX-License-Identifier: GPL-2.0

//! Virtual memory management (`cuMemCreate`, `cuMemAddressReserve`, `cuMemMap`, ...) over
//! nvsim's VMM objects: a physical allocation named by a handle, a reserved address range,
//! and mappings of the one into the other. Each mapping is an allocation of its own for
//! pointer attributes (its own BUFFER_ID; `cuMemGetAddressRange` gives the mapping), and
//! nv-p2p pins of the calling process may pin a range inside one mapping; `cuMemUnmap`
//! (or the process's exit) calls them back before it returns. As recorded on real CUDA
//! (`tests/cuda-trace`): a mapping is of a whole allocation at offset 0 (anything else is
//! `CUDA_ERROR_NOT_SUPPORTED`), and unmapping a range with nothing mapped in it succeeds.
//!
//! As in CUDA, a mapping is reachable by copies only once `cuMemSetAccess` granted the
//! device access to it. These calls need `cuInit` but no current context, as in CUDA.

use crate::context::{answer, with_gpu};
use crate::errors::*;
use crate::{CUdeviceptr, CUresult};
use rustix::io::Errno;
use std::{
    collections::BTreeMap,
    ffi::{c_int, c_uchar, c_uint, c_ulonglong, c_ushort, c_void},
    sync::Mutex,
};

/// `CUmemGenericAllocationHandle`.
pub type CUmemGenericAllocationHandle = c_ulonglong;

pub const CU_MEM_ALLOCATION_TYPE_PINNED: c_uint = 1;
pub const CU_MEM_LOCATION_TYPE_DEVICE: c_uint = 1;
pub const CU_MEM_HANDLE_TYPE_NONE: c_uint = 0;
pub const CU_MEM_ALLOC_GRANULARITY_MINIMUM: c_uint = 0;
pub const CU_MEM_ALLOC_GRANULARITY_RECOMMENDED: c_uint = 1;
pub const CU_MEM_ACCESS_FLAGS_PROT_NONE: c_uint = 0;
pub const CU_MEM_ACCESS_FLAGS_PROT_READ: c_uint = 1;
pub const CU_MEM_ACCESS_FLAGS_PROT_READWRITE: c_uint = 3;

/// The granularity of every VMM size and mapping address: 2 MiB, as on CUDA's GPUs.
pub const GRANULARITY: u64 = nvsim::VMM_GRANULARITY;

/// `CUmemLocation`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct CUmemLocation {
    pub type_: c_uint,
    pub id: c_int,
}

/// `CUmemAllocationProp::allocFlags`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct CUmemAllocFlags {
    pub compression_type: c_uchar,
    pub gpu_direct_rdma_capable: c_uchar,
    pub usage: c_ushort,
    pub reserved: [c_uchar; 4],
}

/// `CUmemAllocationProp`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CUmemAllocationProp {
    pub type_: c_uint,
    pub requested_handle_types: c_uint,
    pub location: CUmemLocation,
    pub win32_handle_meta_data: *mut c_void,
    pub alloc_flags: CUmemAllocFlags,
}

/// `CUmemAccessDesc`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct CUmemAccessDesc {
    pub location: CUmemLocation,
    pub flags: c_uint,
}

/// The access granted to each mapping, by its base (`cuMemSetAccess`).
static ACCESS: Mutex<BTreeMap<u64, c_uint>> = Mutex::new(BTreeMap::new());

/// The size of each live `cuMemCreate` handle: a mapping must take all of it.
static HANDLES: Mutex<BTreeMap<CUmemGenericAllocationHandle, u64>> = Mutex::new(BTreeMap::new());

/// The reserved ranges, size by base (`cuMemAddressReserve`): the pointer attributes
/// RANGE_START_ADDR and RANGE_SIZE of VMM memory answer its reservation.
static RESERVATIONS: Mutex<BTreeMap<u64, u64>> = Mutex::new(BTreeMap::new());

/// The reservation `[base, base + size)` that holds `ptr`.
pub(crate) fn reservation(ptr: u64) -> Option<(u64, u64)> {
    let r = RESERVATIONS.lock().ok()?;
    r.range(..=ptr)
        .next_back()
        .filter(|(&b, &s)| ptr < b + s)
        .map(|(&b, &s)| (b, s))
}

/// The access granted to the VMM mapping at `base` (`CU_MEM_ACCESS_FLAGS_PROT_*`).
pub(crate) fn access(base: u64) -> c_uint {
    ACCESS
        .lock()
        .ok()
        .and_then(|a| a.get(&base).copied())
        .unwrap_or(CU_MEM_ACCESS_FLAGS_PROT_NONE)
}

/// Whether a copy may read (`write` false) or write the VMM mapping at `base`.
pub(crate) fn accessible(base: u64, write: bool) -> bool {
    let need = if write {
        CU_MEM_ACCESS_FLAGS_PROT_READWRITE
    } else {
        CU_MEM_ACCESS_FLAGS_PROT_READ
    };
    ACCESS
        .lock()
        .is_ok_and(|a| a.get(&base).is_some_and(|f| f & need == need))
}

/// Checks a location: device 0 (else `CUDA_ERROR_INVALID_DEVICE`), of type DEVICE.
fn check_location(l: &CUmemLocation) -> Result<(), CUresult> {
    match (l.type_, l.id) {
        (CU_MEM_LOCATION_TYPE_DEVICE, 0) => Ok(()),
        (CU_MEM_LOCATION_TYPE_DEVICE, _) => Err(CUDA_ERROR_INVALID_DEVICE),
        _ => Err(CUDA_ERROR_INVALID_VALUE),
    }
}

/// Checks allocation properties: pinned memory on device 0, without shareable handles
/// (which this library cannot export: `CUDA_ERROR_NOT_SUPPORTED`).
///
/// # Safety
///
/// `prop` is null or points at a `CUmemAllocationProp`.
unsafe fn check_prop(prop: *const CUmemAllocationProp) -> Result<(), CUresult> {
    // SAFETY: the caller's contract.
    let p = unsafe { prop.as_ref() }.ok_or(CUDA_ERROR_INVALID_VALUE)?;
    if p.type_ != CU_MEM_ALLOCATION_TYPE_PINNED {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    check_location(&p.location)?;
    if p.requested_handle_types != CU_MEM_HANDLE_TYPE_NONE {
        return Err(CUDA_ERROR_NOT_SUPPORTED);
    }
    Ok(())
}

/// Whether `size` is a non-zero multiple of the granularity.
fn granular(size: usize) -> bool {
    size != 0 && (size as u64) % GRANULARITY == 0
}

fn invalid(_: Errno) -> CUresult {
    CUDA_ERROR_INVALID_VALUE
}

/// `cuMemGetAllocationGranularity`: 2 MiB, MINIMUM and RECOMMENDED alike, for pinned
/// memory on device 0.
#[no_mangle]
pub unsafe extern "C" fn cuMemGetAllocationGranularity(
    granularity: *mut usize,
    prop: *const CUmemAllocationProp,
    option: c_uint,
) -> CUresult {
    let value = || {
        // SAFETY: the caller passes a valid pointer or null.
        unsafe { check_prop(prop) }?;
        match option {
            CU_MEM_ALLOC_GRANULARITY_MINIMUM | CU_MEM_ALLOC_GRANULARITY_RECOMMENDED => {
                Ok(GRANULARITY as usize)
            }
            _ => Err(CUDA_ERROR_INVALID_VALUE),
        }
    };
    // SAFETY: the caller passes a valid pointer or null.
    unsafe { answer(granularity, false, |_| value()) }
}

/// `cuMemCreate`: physical memory of `size` bytes (a multiple of the granularity), mapped
/// nowhere yet. `flags` must be 0. `gpuDirectRDMACapable` is accepted and not needed: every
/// mapping can be pinned.
#[no_mangle]
pub unsafe extern "C" fn cuMemCreate(
    handle: *mut CUmemGenericAllocationHandle,
    size: usize,
    prop: *const CUmemAllocationProp,
    flags: c_ulonglong,
) -> CUresult {
    let create = |gpu: &nvsim::Gpu| {
        // SAFETY: the caller passes a valid pointer or null.
        unsafe { check_prop(prop) }?;
        if flags != 0 || !granular(size) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let h = gpu.vmm_create(size as u64).map_err(alloc_error)?;
        if let Ok(mut hs) = HANDLES.lock() {
            hs.insert(h, size as u64);
        }
        Ok(h)
    };
    // SAFETY: the caller passes a valid pointer or null.
    unsafe { answer(handle, false, create) }
}

/// `cuMemRelease`: the memory goes when its last mapping does.
#[no_mangle]
pub extern "C" fn cuMemRelease(handle: CUmemGenericAllocationHandle) -> CUresult {
    with_gpu(|gpu| {
        crate::memory::complete(gpu);
        gpu.vmm_release(handle).map_or_else(invalid, |()| {
            if let Ok(mut hs) = HANDLES.lock() {
                hs.remove(&handle);
            }
            CUDA_SUCCESS
        })
    })
}

/// `cuMemAddressReserve`: `size` bytes of address space (a multiple of the granularity),
/// aligned to the granularity. `addr` is a hint, and ignored; an `alignment` other than 0 or
/// a power of two up to the granularity is `CUDA_ERROR_INVALID_VALUE` (CUDA allows larger
/// powers of two). `flags` must be 0.
#[no_mangle]
pub unsafe extern "C" fn cuMemAddressReserve(
    ptr: *mut CUdeviceptr,
    size: usize,
    alignment: usize,
    _addr: CUdeviceptr,
    flags: c_ulonglong,
) -> CUresult {
    let reserve = |gpu: &nvsim::Gpu| {
        let align_ok =
            alignment == 0 || (alignment.is_power_of_two() && alignment as u64 <= GRANULARITY);
        if flags != 0 || !granular(size) || !align_ok {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let va = gpu.vmm_reserve(size as u64).map_err(alloc_error)?;
        if let Ok(mut r) = RESERVATIONS.lock() {
            r.insert(va, size as u64);
        }
        Ok(va)
    };
    // SAFETY: the caller passes a valid pointer or null.
    unsafe { answer(ptr, false, reserve) }
}

/// `cuMemAddressFree`: a whole reservation, with nothing mapped in it any more.
#[no_mangle]
pub extern "C" fn cuMemAddressFree(ptr: CUdeviceptr, size: usize) -> CUresult {
    with_gpu(|gpu| {
        gpu.vmm_unreserve(ptr, size as u64)
            .map_or_else(invalid, |()| {
                if let Ok(mut r) = RESERVATIONS.lock() {
                    r.remove(&ptr);
                }
                CUDA_SUCCESS
            })
    })
}

/// `cuMemMap`: the whole of `handle` at `ptr`, inside a reservation, over nothing mapped.
/// `flags` must be 0; an `offset` other than 0 or a `size` other than the handle's is
/// `CUDA_ERROR_NOT_SUPPORTED`, as CUDA answers (`tests/cuda-trace`).
#[no_mangle]
pub extern "C" fn cuMemMap(
    ptr: CUdeviceptr,
    size: usize,
    offset: usize,
    handle: CUmemGenericAllocationHandle,
    flags: c_ulonglong,
) -> CUresult {
    with_gpu(|gpu| {
        if flags != 0 {
            return CUDA_ERROR_INVALID_VALUE;
        }
        let whole = HANDLES
            .lock()
            .is_ok_and(|hs| hs.get(&handle).is_none_or(|&s| s == size as u64));
        if offset != 0 || !whole {
            return CUDA_ERROR_NOT_SUPPORTED;
        }
        gpu.vmm_map(ptr, size as u64, handle)
            .map_or_else(invalid, |_| CUDA_SUCCESS)
    })
}

/// `cuMemUnmap`: the whole mappings in `[ptr, ptr + size)`. The free callbacks of the
/// nv-p2p pins over them have run when it returns, as on `cuMemFree`. A reserved range with
/// nothing mapped in it is unmapped already: `CUDA_SUCCESS`, as CUDA answers.
#[no_mangle]
pub extern "C" fn cuMemUnmap(ptr: CUdeviceptr, size: usize) -> CUresult {
    // The writes in flight complete first: they are ordered before the unmap.
    with_gpu(|gpu| {
        crate::memory::complete(gpu);
        match gpu.vmm_unmap(ptr, size as u64) {
            Err(_) if nothing_mapped(gpu, ptr, size as u64) => CUDA_SUCCESS,
            Ok(()) => {
                if let Ok(mut a) = ACCESS.lock() {
                    let end = ptr.saturating_add(size as u64);
                    a.retain(|&base, _| base < ptr || base >= end);
                }
                CUDA_SUCCESS
            }
            Err(e) => invalid(e),
        }
    })
}

/// Whether `[ptr, ptr + size)` lies in one reservation and has no mapping in it.
fn nothing_mapped(gpu: &nvsim::Gpu, ptr: u64, size: u64) -> bool {
    let Some(end) = ptr.checked_add(size) else {
        return false;
    };
    reservation(ptr).is_some_and(|(b, s)| end <= b + s)
        && (ptr..end)
            .step_by(GRANULARITY as usize)
            .all(|p| gpu.query(p).is_err())
}

/// The bases of the mappings that tile `[ptr, ptr + size)` exactly, or
/// `CUDA_ERROR_INVALID_VALUE`.
fn mappings_in(gpu: &nvsim::Gpu, ptr: u64, size: u64) -> Result<Vec<u64>, CUresult> {
    let end = ptr.checked_add(size).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    let mut bases = Vec::new();
    let mut p = ptr;
    while p < end {
        let q = gpu.query(p).map_err(invalid)?;
        if q.flags & nvsim::QUERY_VMM == 0 || q.base != p || q.base + q.size > end {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        bases.push(q.base);
        p = q.base + q.size;
    }
    Ok(bases)
}

/// `cuMemSetAccess`: grants device 0 the access in `desc` (PROT_NONE, READ or READWRITE)
/// to the mappings that make up `[ptr, ptr + size)`.
#[no_mangle]
pub unsafe extern "C" fn cuMemSetAccess(
    ptr: CUdeviceptr,
    size: usize,
    desc: *const CUmemAccessDesc,
    count: usize,
) -> CUresult {
    if desc.is_null() || count == 0 || size == 0 {
        return CUDA_ERROR_INVALID_VALUE;
    }
    // SAFETY: the caller passes `count` descriptors at `desc`.
    let descs = unsafe { std::slice::from_raw_parts(desc, count) };
    with_gpu(|gpu| {
        let mut flags = CU_MEM_ACCESS_FLAGS_PROT_NONE;
        for d in descs {
            if let Err(e) = check_location(&d.location) {
                return e;
            }
            if ![
                CU_MEM_ACCESS_FLAGS_PROT_NONE,
                CU_MEM_ACCESS_FLAGS_PROT_READ,
                CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
            ]
            .contains(&d.flags)
            {
                return CUDA_ERROR_INVALID_VALUE;
            }
            flags = d.flags;
        }
        let bases = match mappings_in(gpu, ptr, size as u64) {
            Ok(b) => b,
            Err(e) => return e,
        };
        let Ok(mut a) = ACCESS.lock() else {
            return CUDA_ERROR_UNKNOWN;
        };
        for b in bases {
            a.insert(b, flags);
        }
        CUDA_SUCCESS
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::no_nvsim;

    fn prop() -> CUmemAllocationProp {
        CUmemAllocationProp {
            type_: CU_MEM_ALLOCATION_TYPE_PINNED,
            requested_handle_types: CU_MEM_HANDLE_TYPE_NONE,
            location: CUmemLocation {
                type_: CU_MEM_LOCATION_TYPE_DEVICE,
                id: 0,
            },
            win32_handle_meta_data: std::ptr::null_mut(),
            alloc_flags: CUmemAllocFlags::default(),
        }
    }

    #[test]
    fn layouts_and_values_are_cudas() {
        // cuda.h: CUmemAllocationProp is 32 bytes on 64-bit; CUmemAccessDesc 12.
        assert_eq!(std::mem::size_of::<CUmemAllocationProp>(), 32);
        assert_eq!(std::mem::size_of::<CUmemAccessDesc>(), 12);
        assert_eq!(std::mem::offset_of!(CUmemAllocationProp, alloc_flags), 24);
        assert_eq!(
            [
                CU_MEM_ACCESS_FLAGS_PROT_NONE,
                CU_MEM_ACCESS_FLAGS_PROT_READ,
                CU_MEM_ACCESS_FLAGS_PROT_READWRITE
            ],
            [0, 1, 3]
        );
        assert_eq!(GRANULARITY, 2 << 20);
    }

    #[test]
    fn property_checks() {
        let good = prop();
        // SAFETY (all calls): pointers to live properties, or null.
        unsafe {
            assert_eq!(check_prop(&good), Ok(()));
            assert_eq!(check_prop(std::ptr::null()), Err(CUDA_ERROR_INVALID_VALUE));
            let mut p = prop();
            p.type_ = 0;
            assert_eq!(check_prop(&p), Err(CUDA_ERROR_INVALID_VALUE));
            let mut p = prop();
            p.location.id = 1;
            assert_eq!(check_prop(&p), Err(CUDA_ERROR_INVALID_DEVICE));
            let mut p = prop();
            p.location.type_ = 2; // CU_MEM_LOCATION_TYPE_HOST
            assert_eq!(check_prop(&p), Err(CUDA_ERROR_INVALID_VALUE));
            let mut p = prop();
            p.requested_handle_types = 1; // POSIX file descriptor
            assert_eq!(check_prop(&p), Err(CUDA_ERROR_NOT_SUPPORTED));
        }
        assert!(granular(2 << 20) && granular(6 << 20));
        assert!(!granular(0) && !granular(1 << 20) && !granular((2 << 20) + 4096));
    }

    #[test]
    fn argument_checks_and_no_device() {
        let p = prop();
        let mut g = 0usize;
        let mut h = 0u64;
        // SAFETY (all calls): null pointers are refused before use; others are valid.
        unsafe {
            assert_eq!(
                cuMemGetAllocationGranularity(std::ptr::null_mut(), &p, 0),
                CUDA_ERROR_INVALID_VALUE
            );
            assert_eq!(
                cuMemCreate(std::ptr::null_mut(), 2 << 20, &p, 0),
                CUDA_ERROR_INVALID_VALUE
            );
            assert_eq!(
                cuMemSetAccess(1 << 40, 2 << 20, std::ptr::null(), 1),
                CUDA_ERROR_INVALID_VALUE
            );
            if no_nvsim() {
                let not_init = CUDA_ERROR_NOT_INITIALIZED;
                assert_eq!(cuMemGetAllocationGranularity(&mut g, &p, 0), not_init);
                assert_eq!(cuMemCreate(&mut h, 2 << 20, &p, 0), not_init);
                assert_eq!(cuMemRelease(1), not_init);
                assert_eq!(cuMemMap(1 << 40, 2 << 20, 0, 1, 0), not_init);
                assert_eq!(cuMemUnmap(1 << 40, 2 << 20), not_init);
                assert_eq!(cuMemAddressFree(1 << 40, 2 << 20), not_init);
            }
        }
    }
}
