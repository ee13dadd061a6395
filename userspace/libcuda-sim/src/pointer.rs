// SPDX-License-Identifier: GPL-2.0

//! Pointer attributes, of device memory (nvsim's answers) and of host memory from
//! `cuMemAllocHost_v2`. As in CUDA, they need no current context: the pointer names its
//! allocation and so its context, which CONTEXT answers ([`crate::context`]); a
//! registration cache may ask from any thread.

use crate::context::{context_of, with_gpu};
use crate::errors::*;
use crate::memory::{host_alloc, HostAlloc};
use crate::{CUcontext, CUdeviceptr, CUresult};
use std::ffi::{c_int, c_uint, c_void};

pub const CU_POINTER_ATTRIBUTE_CONTEXT: c_uint = 1;
pub const CU_POINTER_ATTRIBUTE_MEMORY_TYPE: c_uint = 2;
pub const CU_POINTER_ATTRIBUTE_DEVICE_POINTER: c_uint = 3;
pub const CU_POINTER_ATTRIBUTE_HOST_POINTER: c_uint = 4;
pub const CU_POINTER_ATTRIBUTE_P2P_TOKENS: c_uint = 5;
pub const CU_POINTER_ATTRIBUTE_SYNC_MEMOPS: c_uint = 6;
pub const CU_POINTER_ATTRIBUTE_BUFFER_ID: c_uint = 7;
pub const CU_POINTER_ATTRIBUTE_IS_MANAGED: c_uint = 8;
pub const CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: c_uint = 9;
pub const CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE: c_uint = 10;
pub const CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: c_uint = 11;
pub const CU_POINTER_ATTRIBUTE_RANGE_SIZE: c_uint = 12;
pub const CU_POINTER_ATTRIBUTE_MAPPED: c_uint = 13;
pub const CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES: c_uint = 14;
pub const CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE: c_uint = 15;
pub const CU_POINTER_ATTRIBUTE_ACCESS_FLAGS: c_uint = 16;
pub const CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE: c_uint = 17;
pub const CU_POINTER_ATTRIBUTE_MAPPING_SIZE: c_uint = 18;
pub const CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR: c_uint = 19;
pub const CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID: c_uint = 20;
pub const CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE: c_uint = 21;

/// `CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE`.
const ACCESS_FLAG_READWRITE: c_uint = 3;

pub const CU_MEMORYTYPE_HOST: c_uint = 1;
pub const CU_MEMORYTYPE_DEVICE: c_uint = 2;

/// `CUDA_POINTER_ATTRIBUTE_P2P_TOKENS`.
#[repr(C)]
pub struct P2pTokens {
    pub p2p_token: u64,
    pub va_space_token: c_uint,
}

/// What a pointer points into.
enum Target {
    Device(nvsim::QueryArgs),
    Host(HostAlloc),
    /// Nothing this library allocated: every attribute has its null value.
    Nothing,
}

fn target(gpu: &nvsim::Gpu, ptr: CUdeviceptr) -> Target {
    match (gpu.query(ptr), host_alloc(ptr)) {
        (Ok(q), _) => Target::Device(q),
        (_, Some(h)) => Target::Host(h),
        _ => Target::Nothing,
    }
}

/// The mapping that holds device memory `q` (attributes MAPPING_BASE_ADDR and
/// MAPPING_SIZE): a VMM mapping itself; the 2 MiB pool block of a small buffer; the
/// allocation rounded up to 2 MiB (CUDA maps device memory in 2 MiB pieces, and an
/// allocation from 2 MiB up is 2 MiB aligned: `tests/cuda-trace`, "ranges").
fn mapping(q: &nvsim::QueryArgs) -> (u64, u64) {
    if q.flags & nvsim::QUERY_VMM != 0 {
        (q.base, q.size)
    } else if q.flags & nvsim::QUERY_SUBALLOC != 0 {
        (q.base & !(nvsim::POOL_BLOCK - 1), nvsim::POOL_BLOCK)
    } else {
        (q.base, q.size.next_multiple_of(nvsim::POOL_BLOCK))
    }
}

/// Writes one attribute of `ptr`, which points into `t`. P2P_TOKENS of host memory and
/// HOST_POINTER of device memory are `CUDA_ERROR_INVALID_VALUE`, as CUDA documents them.
///
/// The attributes from IS_LEGACY_CUDA_IPC_CAPABLE (10) on are answered for device memory as
/// CUDA 13 answers them on an H100, with the widths it writes (`tests/cuda-trace`), for
/// device and for host memory alike.
unsafe fn write_attribute(
    data: *mut c_void,
    attr: c_uint,
    ptr: CUdeviceptr,
    t: &Target,
) -> CUresult {
    let (dev, host) = match t {
        Target::Device(q) => (Some(q), None),
        Target::Host(h) => (None, Some(h)),
        Target::Nothing => (None, None),
    };
    let found = !matches!(t, Target::Nothing);
    // SAFETY (all arms): the caller passes `data` pointing at the type CUDA documents for `attr`.
    unsafe {
        match attr {
            // The context the memory was allocated in; VMM memory belongs to none.
            CU_POINTER_ATTRIBUTE_CONTEXT => {
                *(data as *mut CUcontext) = match t {
                    Target::Device(q) => context_of(q.base),
                    Target::Host(h) => context_of(h.base),
                    Target::Nothing => std::ptr::null_mut(),
                }
            }
            CU_POINTER_ATTRIBUTE_MEMORY_TYPE => {
                *(data as *mut c_uint) = match t {
                    Target::Device(_) => CU_MEMORYTYPE_DEVICE,
                    Target::Host(_) => CU_MEMORYTYPE_HOST,
                    Target::Nothing => 0,
                }
            }
            CU_POINTER_ATTRIBUTE_DEVICE_POINTER => {
                *(data as *mut CUdeviceptr) = if found { ptr } else { 0 }
            }
            CU_POINTER_ATTRIBUTE_HOST_POINTER if dev.is_some() => return CUDA_ERROR_INVALID_VALUE,
            CU_POINTER_ATTRIBUTE_HOST_POINTER => {
                *(data as *mut *mut c_void) = if found {
                    ptr as *mut c_void
                } else {
                    std::ptr::null_mut()
                }
            }
            CU_POINTER_ATTRIBUTE_P2P_TOKENS if host.is_some() => return CUDA_ERROR_INVALID_VALUE,
            // CUDA 13 answers a P2P token of 0 (the pin then finds the memory by the calling
            // process) and a VA-space token, for cuMemCreate memory too.
            CU_POINTER_ATTRIBUTE_P2P_TOKENS => {
                let t = data as *mut P2pTokens;
                (*t).p2p_token = 0;
                (*t).va_space_token = dev.map_or(0, |q| q.va_space);
            }
            CU_POINTER_ATTRIBUTE_SYNC_MEMOPS => {
                *(data as *mut c_uint) = dev.map_or(0, |q| q.sync_memops)
            }
            CU_POINTER_ATTRIBUTE_BUFFER_ID => {
                *(data as *mut u64) = match t {
                    Target::Device(q) => q.buffer_id,
                    Target::Host(h) => h.buffer_id,
                    Target::Nothing => 0,
                }
            }
            CU_POINTER_ATTRIBUTE_IS_MANAGED => *(data as *mut c_uint) = 0,
            CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL => {
                *(data as *mut c_int) = if found { 0 } else { -2 }
            }
            _ if host.is_some() => {
                return host.map_or(CUDA_ERROR_INVALID_VALUE, |h| host_attribute(data, attr, h))
            }
            _ => {
                let Some(q) = dev else {
                    return CUDA_ERROR_INVALID_VALUE;
                };
                let vmm = q.flags & nvsim::QUERY_VMM != 0;
                let (map_base, map_size) = mapping(q);
                let (range_base, range_size) = if vmm {
                    crate::vmm::reservation(q.base).unwrap_or((q.base, q.size))
                } else {
                    (q.base, q.size)
                };
                match attr {
                    CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE => {
                        *(data as *mut c_int) = c_int::from(!vmm)
                    }
                    CU_POINTER_ATTRIBUTE_RANGE_START_ADDR => *(data as *mut u64) = range_base,
                    CU_POINTER_ATTRIBUTE_RANGE_SIZE => *(data as *mut usize) = range_size as usize,
                    CU_POINTER_ATTRIBUTE_MAPPED
                    | CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE => *(data as *mut c_int) = 1,
                    CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES => *(data as *mut u64) = 0,
                    CU_POINTER_ATTRIBUTE_ACCESS_FLAGS => {
                        *(data as *mut c_uint) = if vmm {
                            crate::vmm::access(q.base)
                        } else {
                            ACCESS_FLAG_READWRITE
                        }
                    }
                    CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE => {
                        *(data as *mut *mut c_void) = std::ptr::null_mut()
                    }
                    CU_POINTER_ATTRIBUTE_MAPPING_SIZE => *(data as *mut usize) = map_size as usize,
                    CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR => *(data as *mut u64) = map_base,
                    // nvsim's id of the allocation (of the mapping, for VMM memory).
                    CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID => *(data as *mut u64) = q.buffer_id,
                    CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE => {
                        *(data as *mut c_int) = c_int::from(!vmm)
                    }
                    _ => return CUDA_ERROR_INVALID_VALUE,
                }
            }
        }
    }
    CUDA_SUCCESS
}

/// The attributes from IS_LEGACY_CUDA_IPC_CAPABLE (10) on of `cuMemAllocHost` memory, as
/// CUDA 13 answers them (`tests/cuda-trace`, "pointer"): mapped, read-write, in a 2 MiB
/// mapping that starts at the allocation (the first of its 2 MiB block), no IPC, no
/// GPUDirect RDMA.
///
/// # Safety
///
/// `data` points at the type CUDA documents for `attr`.
unsafe fn host_attribute(data: *mut c_void, attr: c_uint, h: &HostAlloc) -> CUresult {
    // SAFETY (all arms): the caller's contract.
    unsafe {
        match attr {
            CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE
            | CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE
            | CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE => *(data as *mut c_int) = 0,
            CU_POINTER_ATTRIBUTE_MAPPED => *(data as *mut c_int) = 1,
            CU_POINTER_ATTRIBUTE_RANGE_START_ADDR | CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR => {
                *(data as *mut u64) = h.base
            }
            CU_POINTER_ATTRIBUTE_RANGE_SIZE => *(data as *mut usize) = h.size,
            CU_POINTER_ATTRIBUTE_MAPPING_SIZE => {
                *(data as *mut usize) = h.size.next_multiple_of(nvsim::POOL_BLOCK as usize)
            }
            CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES => *(data as *mut u64) = 0,
            CU_POINTER_ATTRIBUTE_ACCESS_FLAGS => *(data as *mut c_uint) = ACCESS_FLAG_READWRITE,
            CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE => {
                *(data as *mut *mut c_void) = std::ptr::null_mut()
            }
            CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID => *(data as *mut u64) = h.buffer_id,
            _ => return CUDA_ERROR_INVALID_VALUE,
        }
    }
    CUDA_SUCCESS
}

/// `cuPointerGetAttribute`: CONTEXT, MEMORY_TYPE, DEVICE_POINTER, HOST_POINTER, P2P_TOKENS
/// (which sets SYNC_MEMOPS of the memory, as CUDA documents), SYNC_MEMOPS, BUFFER_ID (host allocations count from 2^63, clear of nvsim's), IS_MANAGED
/// (always 0) and DEVICE_ORDINAL. A pointer into nothing this library allocated, or another
/// attribute, is `CUDA_ERROR_INVALID_VALUE`.
#[no_mangle]
pub unsafe extern "C" fn cuPointerGetAttribute(
    data: *mut c_void,
    attr: c_uint,
    ptr: CUdeviceptr,
) -> CUresult {
    if data.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    with_gpu(|gpu| match target(gpu, ptr) {
        Target::Nothing => CUDA_ERROR_INVALID_VALUE,
        t => {
            // SAFETY: forwarded caller contract for `data`.
            let r = unsafe { write_attribute(data, attr, ptr, &t) };
            match t {
                // "Querying this attribute has a side effect of setting the attribute
                // CU_POINTER_ATTRIBUTE_SYNC_MEMOPS for the region of memory that ptr points
                // to" (cuPointerGetAttribute's documentation); not for VMM memory, which
                // refuses SYNC_MEMOPS.
                Target::Device(q)
                    if r == CUDA_SUCCESS
                        && attr == CU_POINTER_ATTRIBUTE_P2P_TOKENS
                        && q.flags & nvsim::QUERY_VMM == 0 =>
                {
                    set_sync_memops(gpu, ptr, true)
                }
                _ => r,
            }
        }
    })
}

/// `cuPointerGetAttributes`: the attributes of `cuPointerGetAttribute`, several at once.
/// Unlike cuPointerGetAttribute, and as in CUDA, a pointer into nothing is not an error:
/// every attribute gets its null value.
#[no_mangle]
pub unsafe extern "C" fn cuPointerGetAttributes(
    count: c_uint,
    attrs: *const c_uint,
    data: *mut *mut c_void,
    ptr: CUdeviceptr,
) -> CUresult {
    if attrs.is_null() || data.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    with_gpu(|gpu| {
        let t = target(gpu, ptr);
        for i in 0..count as usize {
            // SAFETY: the caller passes `count` attributes and `count` data pointers.
            let (attr, out) = unsafe { (*attrs.add(i), *data.add(i)) };
            if out.is_null() {
                return CUDA_ERROR_INVALID_VALUE;
            }
            // SAFETY: forwarded caller contract for `out`.
            let r = unsafe { write_attribute(out, attr, ptr, &t) };
            if r != CUDA_SUCCESS {
                return r;
            }
        }
        CUDA_SUCCESS
    })
}

/// `cuPointerSetAttribute`: SYNC_MEMOPS of device memory, recorded by nvsim: copies and
/// memsets to it then complete before they return ([`crate::memory`]). VMM memory refuses
/// it with `CUDA_ERROR_NOT_SUPPORTED`, as CUDA does (UCX's issue 9895 reports it on driver
/// 535; UCX sets the context's `CU_CTX_SYNC_MEMOPS` instead, `cuCtxSetFlags`). Other
/// attributes: `CUDA_ERROR_INVALID_VALUE`, as CUDA answers for BUFFER_ID
/// (`tests/cuda-trace`).
#[no_mangle]
pub unsafe extern "C" fn cuPointerSetAttribute(
    value: *const c_void,
    attr: c_uint,
    ptr: CUdeviceptr,
) -> CUresult {
    if value.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if attr != CU_POINTER_ATTRIBUTE_SYNC_MEMOPS {
        return CUDA_ERROR_INVALID_VALUE;
    }
    // SAFETY: SYNC_MEMOPS takes an unsigned int.
    let v = unsafe { *(value as *const c_uint) };
    with_gpu(|gpu| match gpu.query(ptr) {
        Ok(q) if q.flags & nvsim::QUERY_VMM != 0 => CUDA_ERROR_NOT_SUPPORTED,
        _ => set_sync_memops(gpu, ptr, v != 0),
    })
}

/// Records SYNC_MEMOPS of the device memory at `ptr` in nvsim.
fn set_sync_memops(gpu: &nvsim::Gpu, ptr: CUdeviceptr, on: bool) -> CUresult {
    match gpu.set_sync_memops(ptr, u32::from(on)) {
        Ok(()) => CUDA_SUCCESS,
        Err(_) => CUDA_ERROR_INVALID_VALUE,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::no_nvsim;

    #[test]
    fn values_are_cudas() {
        // cuda.h's CUpointer_attribute and CUmemorytype.
        let attrs = [
            CU_POINTER_ATTRIBUTE_CONTEXT,
            CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
            CU_POINTER_ATTRIBUTE_DEVICE_POINTER,
            CU_POINTER_ATTRIBUTE_HOST_POINTER,
            CU_POINTER_ATTRIBUTE_P2P_TOKENS,
            CU_POINTER_ATTRIBUTE_SYNC_MEMOPS,
            CU_POINTER_ATTRIBUTE_BUFFER_ID,
            CU_POINTER_ATTRIBUTE_IS_MANAGED,
            CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
        ];
        assert_eq!(attrs, [1, 2, 3, 4, 5, 6, 7, 8, 9]);
        assert_eq!((CU_MEMORYTYPE_HOST, CU_MEMORYTYPE_DEVICE), (1, 2));
    }

    /// Reads attribute `attr` of `ptr` in `t` as a `T`.
    fn get<T: Copy>(attr: c_uint, ptr: u64, t: &Target, init: T) -> Result<T, CUresult> {
        let mut v = init;
        // SAFETY: `v` is the type the test names for `attr`.
        match unsafe { write_attribute(&mut v as *mut T as *mut c_void, attr, ptr, t) } {
            CUDA_SUCCESS => Ok(v),
            e => Err(e),
        }
    }

    #[test]
    fn attributes_by_target() {
        let q = nvsim::QueryArgs {
            va: 0x2_0000_1000,
            base: 0x2_0000_0000,
            size: 1 << 20,
            buffer_id: 7,
            p2p_token: 0xabc,
            va_space: 3,
            sync_memops: 1,
            flags: 0,
            pad: 0,
        };
        let dev = Target::Device(q);
        let h = HostAlloc {
            base: 0x5000,
            size: 4096,
            buffer_id: 1 << 63,
        };
        let host = Target::Host(h);
        let p = 0x2_0000_1000;
        assert_eq!(
            get(CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p, &dev, 0),
            Ok(CU_MEMORYTYPE_DEVICE)
        );
        assert_eq!(
            get(CU_POINTER_ATTRIBUTE_MEMORY_TYPE, 0x5010, &host, 0),
            Ok(CU_MEMORYTYPE_HOST)
        );
        // CUDA 13's answers for cuMemAllocHost memory, attributes 10 on.
        assert_eq!(
            get(CU_POINTER_ATTRIBUTE_RANGE_SIZE, 0x5010, &host, 0usize),
            Ok(4096)
        );
        assert_eq!(
            get(CU_POINTER_ATTRIBUTE_MAPPING_SIZE, 0x5010, &host, 0usize),
            Ok(2 << 20)
        );
        assert_eq!(
            get(
                CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE,
                0x5010,
                &host,
                9
            ),
            Ok(0)
        );
        assert_eq!(get(CU_POINTER_ATTRIBUTE_MAPPED, 0x5010, &host, 9), Ok(1));
        assert_eq!(
            get(CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR, 0x5010, &host, 0u64),
            Ok(0x5000)
        );
        assert_eq!(get(22, 0x5010, &host, 0u64), Err(CUDA_ERROR_INVALID_VALUE));
        assert_eq!(
            get(CU_POINTER_ATTRIBUTE_MEMORY_TYPE, 9, &Target::Nothing, 5),
            Ok(0)
        );
        assert_eq!(get(CU_POINTER_ATTRIBUTE_BUFFER_ID, p, &dev, 0u64), Ok(7));
        assert_eq!(
            get(CU_POINTER_ATTRIBUTE_BUFFER_ID, 0x5010, &host, 0u64),
            Ok(1 << 63)
        );
        assert_eq!(get(CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, p, &dev, 0), Ok(1));
        assert_eq!(
            get(CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, 0x5010, &host, 9),
            Ok(0)
        );
        assert_eq!(
            get(CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, 0x5010, &host, 9),
            Ok(0)
        );
        assert_eq!(
            get(CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, 9, &Target::Nothing, 9),
            Ok(-2)
        );
        assert_eq!(
            get(CU_POINTER_ATTRIBUTE_DEVICE_POINTER, 0x5010, &host, 0u64),
            Ok(0x5010)
        );
        assert_eq!(
            get(
                CU_POINTER_ATTRIBUTE_HOST_POINTER,
                0x5010,
                &host,
                std::ptr::null_mut()
            ),
            Ok(0x5010 as *mut c_void)
        );
        assert_eq!(
            get(
                CU_POINTER_ATTRIBUTE_HOST_POINTER,
                p,
                &dev,
                std::ptr::null_mut::<c_void>()
            ),
            Err(CUDA_ERROR_INVALID_VALUE)
        );
        assert_eq!(
            get(
                CU_POINTER_ATTRIBUTE_CONTEXT,
                0x5010,
                &host,
                std::ptr::null_mut::<c_void>()
            ),
            // No context allocated it here (the guest's tests see the owner's).
            Ok(std::ptr::null_mut())
        );
        let mut tokens = P2pTokens {
            p2p_token: 0,
            va_space_token: 0,
        };
        let out = &mut tokens as *mut P2pTokens as *mut c_void;
        // SAFETY (both calls): `out` is a P2pTokens.
        unsafe {
            assert_eq!(
                write_attribute(out, CU_POINTER_ATTRIBUTE_P2P_TOKENS, p, &dev),
                CUDA_SUCCESS
            );
            // CUDA 13's answer: no P2P token, the VA space's.
            assert_eq!((tokens.p2p_token, tokens.va_space_token), (0, 3));
            assert_eq!(
                write_attribute(out, CU_POINTER_ATTRIBUTE_P2P_TOKENS, 0x5010, &host),
                CUDA_ERROR_INVALID_VALUE
            );
            let vmm = Target::Device(nvsim::QueryArgs {
                flags: nvsim::QUERY_VMM,
                ..q
            });
            assert_eq!(
                write_attribute(out, CU_POINTER_ATTRIBUTE_P2P_TOKENS, p, &vmm),
                CUDA_SUCCESS
            );
            assert_eq!((tokens.p2p_token, tokens.va_space_token), (0, 3));
            assert_eq!(
                get(
                    CU_POINTER_ATTRIBUTE_CONTEXT,
                    p,
                    &vmm,
                    std::ptr::null_mut::<c_void>()
                ),
                Ok(std::ptr::null_mut())
            );
            assert_eq!(
                get(CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, p, &vmm, 7),
                Ok(0)
            );
        }
        // The attributes of CUDA 11 and later, as CUDA 13 answers them for a buffer of 1 MiB
        // that is an allocation of its own.
        assert_eq!(
            get(CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, p, &dev, 0u64),
            Ok(q.base)
        );
        assert_eq!(
            get(CU_POINTER_ATTRIBUTE_RANGE_SIZE, p, &dev, 0usize),
            Ok(1 << 20)
        );
        assert_eq!(
            get(CU_POINTER_ATTRIBUTE_MAPPING_SIZE, p, &dev, 0usize),
            Ok(2 << 20)
        );
        assert_eq!(
            get(CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR, p, &dev, 0u64),
            Ok(q.base)
        );
        assert_eq!(get(CU_POINTER_ATTRIBUTE_ACCESS_FLAGS, p, &dev, 0u32), Ok(3));
        assert_eq!(
            get(CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID, p, &dev, 0u64),
            Ok(7)
        );
        for one in [10, 13, 15, 21] {
            assert_eq!(get(one, p, &dev, 0u32), Ok(1), "attribute {one}");
        }
        for unknown in [0, 22, 1000] {
            assert_eq!(get(unknown, p, &dev, 0u64), Err(CUDA_ERROR_INVALID_VALUE));
        }
        // RANGE_START_ADDR of host memory: the allocation's base, as CUDA answers.
        assert_eq!(get(11, 0x5010, &host, 0u64), Ok(0x5000));
    }

    #[test]
    fn argument_checks_and_no_device() {
        let mut v = 0u64;
        let out = &mut v as *mut u64 as *mut c_void;
        let one: c_uint = 1;
        let one_p = &one as *const c_uint as *const c_void;
        // SAFETY (all calls): null pointers are refused before use; others are valid.
        unsafe {
            assert_eq!(
                cuPointerGetAttribute(std::ptr::null_mut(), 7, 1 << 33),
                CUDA_ERROR_INVALID_VALUE
            );
            assert_eq!(
                cuPointerGetAttributes(1, std::ptr::null(), std::ptr::null_mut(), 1 << 33),
                CUDA_ERROR_INVALID_VALUE
            );
            assert_eq!(
                cuPointerSetAttribute(std::ptr::null(), 6, 1 << 33),
                CUDA_ERROR_INVALID_VALUE
            );
            assert_eq!(
                cuPointerSetAttribute(one_p, 7, 1 << 33),
                CUDA_ERROR_INVALID_VALUE
            );
            if no_nvsim() {
                assert_eq!(
                    cuPointerGetAttribute(out, 7, 1 << 33),
                    CUDA_ERROR_NOT_INITIALIZED
                );
                assert_eq!(
                    cuPointerSetAttribute(one_p, 6, 1 << 33),
                    CUDA_ERROR_NOT_INITIALIZED
                );
            }
        }
    }
}
