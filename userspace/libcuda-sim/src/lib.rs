// SPDX-License-Identifier: GPL-2.0

//! A simulated `libcuda.so.1` over `/dev/nvsim`.
//!
//! It implements the CUDA driver API subset a GPUDirect RDMA user needs, with
//! CUDA's own enum values and error codes, so that a program that loads
//! `libcuda.so.1` dynamically runs unchanged against real CUDA on a GPU
//! machine and against nvsim in the test guest (`LD_LIBRARY_PATH`).
//!
//! Memory comes from nvsim and belongs to the calling process, so nv-p2p pins
//! made in this process find it, and freeing it fires their free callbacks,
//! as with real CUDA. There is one device and one (primary) context.

#![allow(non_snake_case, clippy::missing_safety_doc)]

use std::{
    ffi::{c_char, c_int, c_uint, c_void, CStr},
    sync::Mutex,
};

/// `CUresult`.
pub type CUresult = c_uint;
/// `CUdeviceptr`.
pub type CUdeviceptr = u64;
/// `CUdevice`.
pub type CUdevice = c_int;
/// `CUcontext`: an opaque pointer.
pub type CUcontext = *mut c_void;

pub const CUDA_SUCCESS: CUresult = 0;
pub const CUDA_ERROR_INVALID_VALUE: CUresult = 1;
pub const CUDA_ERROR_OUT_OF_MEMORY: CUresult = 2;
pub const CUDA_ERROR_NOT_INITIALIZED: CUresult = 3;
pub const CUDA_ERROR_NO_DEVICE: CUresult = 100;
pub const CUDA_ERROR_INVALID_DEVICE: CUresult = 101;
pub const CUDA_ERROR_NOT_SUPPORTED: CUresult = 801;
pub const CUDA_ERROR_UNKNOWN: CUresult = 999;

pub const CU_POINTER_ATTRIBUTE_CONTEXT: c_uint = 1;
pub const CU_POINTER_ATTRIBUTE_MEMORY_TYPE: c_uint = 2;
pub const CU_POINTER_ATTRIBUTE_DEVICE_POINTER: c_uint = 3;
pub const CU_POINTER_ATTRIBUTE_P2P_TOKENS: c_uint = 5;
pub const CU_POINTER_ATTRIBUTE_SYNC_MEMOPS: c_uint = 6;
pub const CU_POINTER_ATTRIBUTE_BUFFER_ID: c_uint = 7;
pub const CU_POINTER_ATTRIBUTE_IS_MANAGED: c_uint = 8;
pub const CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: c_uint = 9;

pub const CU_MEMORYTYPE_DEVICE: c_uint = 2;

/// `CUDA_POINTER_ATTRIBUTE_P2P_TOKENS`.
#[repr(C)]
pub struct P2pTokens {
    pub p2p_token: u64,
    pub va_space_token: c_uint,
}

/// The one context there is; its address is the `CUcontext`.
static CONTEXT: u8 = 0;

fn context() -> CUcontext {
    &CONTEXT as *const u8 as CUcontext
}

static GPU: Mutex<Option<nvsim::Gpu>> = Mutex::new(None);

/// Runs `f` with the device opened by `cuInit`.
fn with_gpu(f: impl FnOnce(&nvsim::Gpu) -> CUresult) -> CUresult {
    match GPU.lock() {
        Ok(g) => match g.as_ref() {
            Some(gpu) => f(gpu),
            None => CUDA_ERROR_NOT_INITIALIZED,
        },
        Err(_) => CUDA_ERROR_UNKNOWN,
    }
}

#[no_mangle]
pub extern "C" fn cuInit(flags: c_uint) -> CUresult {
    if flags != 0 {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let Ok(mut g) = GPU.lock() else {
        return CUDA_ERROR_UNKNOWN;
    };
    if g.is_none() {
        match nvsim::Gpu::open() {
            Ok(gpu) => *g = Some(gpu),
            Err(_) => return CUDA_ERROR_NO_DEVICE,
        }
    }
    CUDA_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuDriverGetVersion(version: *mut c_int) -> CUresult {
    if version.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    // SAFETY: the caller passes a valid int pointer (checked non-null).
    unsafe { *version = 12080 };
    CUDA_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetCount(count: *mut c_int) -> CUresult {
    if count.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    with_gpu(|_| {
        // SAFETY: checked non-null; the caller passes a valid int pointer.
        unsafe { *count = 1 };
        CUDA_SUCCESS
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGet(device: *mut CUdevice, ordinal: c_int) -> CUresult {
    if device.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    with_gpu(|_| {
        if ordinal != 0 {
            return CUDA_ERROR_INVALID_DEVICE;
        }
        // SAFETY: checked non-null; the caller passes a valid pointer.
        unsafe { *device = 0 };
        CUDA_SUCCESS
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetName(name: *mut c_char, len: c_int, dev: CUdevice) -> CUresult {
    const NAME: &[u8] = b"nvsim simulated GPU\0";
    if name.is_null() || len <= 0 {
        return CUDA_ERROR_INVALID_VALUE;
    }
    with_gpu(|_| {
        if dev != 0 {
            return CUDA_ERROR_INVALID_DEVICE;
        }
        let n = NAME.len().min(len as usize);
        // SAFETY: the caller's buffer holds `len` bytes; we write at most that, NUL-terminated.
        unsafe {
            std::ptr::copy_nonoverlapping(NAME.as_ptr(), name as *mut u8, n);
            *name.add(n - 1) = 0;
        }
        CUDA_SUCCESS
    })
}

/// Context calls: there is one context per process, always current.
unsafe fn put_context(ctx: *mut CUcontext, dev: CUdevice) -> CUresult {
    if ctx.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    with_gpu(|_| {
        if dev != 0 {
            return CUDA_ERROR_INVALID_DEVICE;
        }
        // SAFETY: checked non-null; the caller passes a valid pointer.
        unsafe { *ctx = context() };
        CUDA_SUCCESS
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxCreate_v2(
    ctx: *mut CUcontext,
    _flags: c_uint,
    dev: CUdevice,
) -> CUresult {
    // SAFETY: forwarded caller contract.
    unsafe { put_context(ctx, dev) }
}

#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRetain(ctx: *mut CUcontext, dev: CUdevice) -> CUresult {
    // SAFETY: forwarded caller contract.
    unsafe { put_context(ctx, dev) }
}

#[no_mangle]
pub extern "C" fn cuDevicePrimaryCtxRelease_v2(dev: CUdevice) -> CUresult {
    with_gpu(|_| {
        if dev == 0 {
            CUDA_SUCCESS
        } else {
            CUDA_ERROR_INVALID_DEVICE
        }
    })
}

#[no_mangle]
pub extern "C" fn cuCtxDestroy_v2(ctx: CUcontext) -> CUresult {
    with_gpu(|_| {
        if ctx == context() {
            CUDA_SUCCESS
        } else {
            CUDA_ERROR_INVALID_VALUE
        }
    })
}

#[no_mangle]
pub extern "C" fn cuCtxSetCurrent(ctx: CUcontext) -> CUresult {
    with_gpu(|_| {
        if ctx.is_null() || ctx == context() {
            CUDA_SUCCESS
        } else {
            CUDA_ERROR_INVALID_VALUE
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAlloc_v2(dptr: *mut CUdeviceptr, size: usize) -> CUresult {
    if dptr.is_null() || size == 0 {
        return CUDA_ERROR_INVALID_VALUE;
    }
    with_gpu(|gpu| match gpu.alloc(size as u64) {
        Ok((va, _)) => {
            // SAFETY: checked non-null; the caller passes a valid pointer.
            unsafe { *dptr = va };
            CUDA_SUCCESS
        }
        Err(rustix::io::Errno::NOMEM) => CUDA_ERROR_OUT_OF_MEMORY,
        Err(_) => CUDA_ERROR_INVALID_VALUE,
    })
}

#[no_mangle]
pub extern "C" fn cuMemFree_v2(dptr: CUdeviceptr) -> CUresult {
    with_gpu(|gpu| match gpu.free(dptr) {
        Ok(()) => CUDA_SUCCESS,
        Err(_) => CUDA_ERROR_INVALID_VALUE,
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemGetAddressRange_v2(
    base: *mut CUdeviceptr,
    size: *mut usize,
    dptr: CUdeviceptr,
) -> CUresult {
    with_gpu(|gpu| match gpu.query(dptr) {
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
        Err(_) => CUDA_ERROR_INVALID_VALUE,
    })
}

/// Writes one attribute of a valid allocation (`q`), or its null value (`q` = None).
unsafe fn write_attribute(
    data: *mut c_void,
    attr: c_uint,
    ptr: CUdeviceptr,
    q: Option<&nvsim::QueryArgs>,
) -> CUresult {
    // SAFETY (all arms): the caller passes `data` pointing at the type CUDA documents for `attr`.
    unsafe {
        match attr {
            CU_POINTER_ATTRIBUTE_CONTEXT => {
                *(data as *mut CUcontext) = q.map_or(std::ptr::null_mut(), |_| context())
            }
            CU_POINTER_ATTRIBUTE_MEMORY_TYPE => {
                *(data as *mut c_uint) = q.map_or(0, |_| CU_MEMORYTYPE_DEVICE)
            }
            CU_POINTER_ATTRIBUTE_DEVICE_POINTER => {
                *(data as *mut CUdeviceptr) = q.map_or(0, |_| ptr)
            }
            CU_POINTER_ATTRIBUTE_P2P_TOKENS => {
                let t = data as *mut P2pTokens;
                (*t).p2p_token = q.map_or(0, |q| q.p2p_token);
                (*t).va_space_token = q.map_or(0, |q| q.va_space);
            }
            CU_POINTER_ATTRIBUTE_SYNC_MEMOPS => {
                *(data as *mut c_uint) = q.map_or(0, |q| q.sync_memops)
            }
            CU_POINTER_ATTRIBUTE_BUFFER_ID => *(data as *mut u64) = q.map_or(0, |q| q.buffer_id),
            CU_POINTER_ATTRIBUTE_IS_MANAGED => *(data as *mut c_uint) = 0,
            CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL => *(data as *mut c_int) = q.map_or(-2, |_| 0),
            _ => return CUDA_ERROR_INVALID_VALUE,
        }
    }
    CUDA_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuPointerGetAttribute(
    data: *mut c_void,
    attr: c_uint,
    ptr: CUdeviceptr,
) -> CUresult {
    if data.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    with_gpu(|gpu| match gpu.query(ptr) {
        // SAFETY: forwarded caller contract for `data`.
        Ok(q) => unsafe { write_attribute(data, attr, ptr, Some(&q)) },
        Err(_) => CUDA_ERROR_INVALID_VALUE,
    })
}

/// Unlike cuPointerGetAttribute, an invalid pointer is not an error: every
/// attribute gets its null value.
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
        let q = gpu.query(ptr).ok();
        for i in 0..count as usize {
            // SAFETY: the caller passes `count` attributes and `count` data pointers.
            let (attr, out) = unsafe { (*attrs.add(i), *data.add(i)) };
            if out.is_null() {
                return CUDA_ERROR_INVALID_VALUE;
            }
            // SAFETY: forwarded caller contract for `out`.
            let r = unsafe { write_attribute(out, attr, ptr, q.as_ref()) };
            if r != CUDA_SUCCESS {
                return r;
            }
        }
        CUDA_SUCCESS
    })
}

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
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    // SAFETY: SYNC_MEMOPS takes an unsigned int.
    let v = unsafe { *(value as *const c_uint) };
    with_gpu(|gpu| match gpu.set_sync_memops(ptr, u32::from(v != 0)) {
        Ok(()) => CUDA_SUCCESS,
        Err(_) => CUDA_ERROR_INVALID_VALUE,
    })
}

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
    let bytes = unsafe { std::slice::from_raw_parts(src as *const u8, n) };
    with_gpu(|gpu| match gpu.write(dst, bytes) {
        Ok(()) => CUDA_SUCCESS,
        Err(_) => CUDA_ERROR_INVALID_VALUE,
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoH_v2(dst: *mut c_void, src: CUdeviceptr, n: usize) -> CUresult {
    if dst.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    with_gpu(|gpu| match gpu.read(src, n) {
        Ok(bytes) => {
            // SAFETY: the caller passes `n` writable bytes at `dst`.
            unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), dst as *mut u8, n) };
            CUDA_SUCCESS
        }
        Err(_) => CUDA_ERROR_INVALID_VALUE,
    })
}

fn error_text(r: CUresult) -> Option<(&'static CStr, &'static CStr)> {
    Some(match r {
        CUDA_SUCCESS => (c"CUDA_SUCCESS", c"no error"),
        CUDA_ERROR_INVALID_VALUE => (c"CUDA_ERROR_INVALID_VALUE", c"invalid argument"),
        CUDA_ERROR_OUT_OF_MEMORY => (c"CUDA_ERROR_OUT_OF_MEMORY", c"out of memory"),
        CUDA_ERROR_NOT_INITIALIZED => (c"CUDA_ERROR_NOT_INITIALIZED", c"initialization error"),
        CUDA_ERROR_NO_DEVICE => (
            c"CUDA_ERROR_NO_DEVICE",
            c"no CUDA-capable device is detected",
        ),
        CUDA_ERROR_INVALID_DEVICE => (c"CUDA_ERROR_INVALID_DEVICE", c"invalid device ordinal"),
        CUDA_ERROR_NOT_SUPPORTED => (c"CUDA_ERROR_NOT_SUPPORTED", c"operation not supported"),
        CUDA_ERROR_UNKNOWN => (c"CUDA_ERROR_UNKNOWN", c"unknown error"),
        _ => return None,
    })
}

/// Stores the name (`pick` = 0) or the description (1) of `r` in `*out`.
unsafe fn put_error_text(r: CUresult, out: *mut *const c_char, pick: usize) -> CUresult {
    match (error_text(r), out.is_null()) {
        (Some(texts), false) => {
            let text = if pick == 0 { texts.0 } else { texts.1 };
            // SAFETY: checked non-null; the caller passes a valid pointer.
            unsafe { *out = text.as_ptr() };
            CUDA_SUCCESS
        }
        _ => CUDA_ERROR_INVALID_VALUE,
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuGetErrorString(r: CUresult, out: *mut *const c_char) -> CUresult {
    // SAFETY: forwarded caller contract.
    unsafe { put_error_text(r, out, 1) }
}

#[no_mangle]
pub unsafe extern "C" fn cuGetErrorName(r: CUresult, out: *mut *const c_char) -> CUresult {
    // SAFETY: forwarded caller contract.
    unsafe { put_error_text(r, out, 0) }
}
