// SPDX-License-Identifier: GPL-2.0

//! The CUDA driver API calls gdrpeer's user space needs (feature `cuda`, on by default),
//! loaded at run time from `libcuda.so.1` (libloading): the same code runs over NVIDIA's
//! libcuda and over the simulated one in the test guest, and a machine with neither gets
//! [`Error::CudaLoad`], not a link failure.

use crate::{
    regcache::{CudaError, PointerInfo},
    Error,
};
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};

type CuResult = c_uint;
const SUCCESS: CuResult = 0;
const ERROR_INVALID_VALUE: CuResult = 1;
const ERROR_NOT_FOUND: CuResult = 500;
const ERROR_NOT_SUPPORTED: CuResult = 801;
const CTX_SYNC_MEMOPS: c_uint = 0x80;
const ATTR_P2P_TOKENS: c_uint = 5;
const ATTR_SYNC_MEMOPS: c_uint = 6;
const ATTR_BUFFER_ID: c_uint = 7;

/// The loaded library, initialised, with device 0's primary context current.
pub struct Cuda {
    init: unsafe extern "C" fn(c_uint) -> CuResult,
    ctx_retain: unsafe extern "C" fn(*mut *mut c_void, c_int) -> CuResult,
    ctx_set_current: unsafe extern "C" fn(*mut c_void) -> CuResult,
    alloc: unsafe extern "C" fn(*mut u64, usize) -> CuResult,
    free: unsafe extern "C" fn(u64) -> CuResult,
    range: unsafe extern "C" fn(*mut u64, *mut usize, u64) -> CuResult,
    get_attr: unsafe extern "C" fn(*mut c_void, c_uint, u64) -> CuResult,
    set_attr: unsafe extern "C" fn(*const c_void, c_uint, u64) -> CuResult,
    htod: unsafe extern "C" fn(u64, *const c_void, usize) -> CuResult,
    dtoh: unsafe extern "C" fn(*mut c_void, u64, usize) -> CuResult,
    error_name: unsafe extern "C" fn(CuResult, *mut *const c_char) -> CuResult,
    error_string: unsafe extern "C" fn(CuResult, *mut *const c_char) -> CuResult,
    /// `cuCtxGetFlags` and `cuCtxSetFlags` (CUDA 12.1 on; `None` before).
    ctx_flags: Option<(
        unsafe extern "C" fn(*mut c_uint) -> CuResult,
        unsafe extern "C" fn(c_uint) -> CuResult,
    )>,
    // Last: the entry points above point into it.
    _lib: libloading::Library,
}

macro_rules! sym {
    ($lib:expr, $name:literal) => {
        // SAFETY: the symbol has the CUDA driver API signature of the field it fills.
        *unsafe { $lib.get(concat!($name, "\0").as_bytes()) }
            .map_err(|e| Error::CudaLoad(format!("{}: {e}", $name)))?
    };
}

impl Cuda {
    /// Loads `libcuda.so.1` (found as the dynamic linker finds libraries), calls `cuInit` and
    /// makes device 0's primary context current in this thread.
    pub fn load() -> Result<Self, Error> {
        // SAFETY: loading libcuda runs no initialisers with preconditions.
        let lib = unsafe { libloading::Library::new("libcuda.so.1") }
            .map_err(|e| Error::CudaLoad(e.to_string()))?;
        let cu = Cuda {
            init: sym!(lib, "cuInit"),
            ctx_retain: sym!(lib, "cuDevicePrimaryCtxRetain"),
            ctx_set_current: sym!(lib, "cuCtxSetCurrent"),
            alloc: sym!(lib, "cuMemAlloc_v2"),
            free: sym!(lib, "cuMemFree_v2"),
            range: sym!(lib, "cuMemGetAddressRange_v2"),
            get_attr: sym!(lib, "cuPointerGetAttribute"),
            set_attr: sym!(lib, "cuPointerSetAttribute"),
            htod: sym!(lib, "cuMemcpyHtoD_v2"),
            dtoh: sym!(lib, "cuMemcpyDtoH_v2"),
            error_name: sym!(lib, "cuGetErrorName"),
            error_string: sym!(lib, "cuGetErrorString"),
            // Absent before CUDA 12.1.
            ctx_flags: (|| {
                Ok::<_, Error>((sym!(lib, "cuCtxGetFlags"), sym!(lib, "cuCtxSetFlags")))
            })()
            .ok(),
            _lib: lib,
        };
        let mut ctx = std::ptr::null_mut();
        // SAFETY (every call into libcuda in this file): the arguments are valid pointers to
        // the types the CUDA driver API documents for each entry point.
        cu.check("cuInit", unsafe { (cu.init)(0) })
            .and_then(|()| {
                cu.check("cuDevicePrimaryCtxRetain", unsafe {
                    (cu.ctx_retain)(&mut ctx, 0)
                })
            })
            .and_then(|()| cu.check("cuCtxSetCurrent", unsafe { (cu.ctx_set_current)(ctx) }))
            .map_err(|e| Error::CudaLoad(e.to_string()))?;
        Ok(cu)
    }

    fn text(
        &self,
        f: unsafe extern "C" fn(CuResult, *mut *const c_char) -> CuResult,
        r: CuResult,
    ) -> String {
        let mut s = std::ptr::null();
        // SAFETY: see `load`; a returned string is static and NUL-terminated.
        if unsafe { f(r, &mut s) } != SUCCESS || s.is_null() {
            return format!("CUresult {r}");
        }
        // SAFETY: as above.
        unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned()
    }

    fn check(&self, call: &'static str, r: CuResult) -> Result<(), Error> {
        if r == SUCCESS {
            return Ok(());
        }
        Err(Error::Cuda {
            call,
            code: r,
            name: self.text(self.error_name, r),
            text: self.text(self.error_string, r),
        })
    }

    /// `cuMemAlloc`.
    pub fn mem_alloc(&self, size: usize) -> Result<u64, Error> {
        let mut p = 0;
        // SAFETY: see `load`.
        self.check("cuMemAlloc", unsafe { (self.alloc)(&mut p, size) })?;
        Ok(p)
    }

    /// `cuMemFree`.
    pub fn mem_free(&self, p: u64) -> Result<(), Error> {
        // SAFETY: see `load`.
        self.check("cuMemFree", unsafe { (self.free)(p) })
    }

    /// `cuPointerGetAttribute(CU_POINTER_ATTRIBUTE_P2P_TOKENS)`: the buffer's P2P token and
    /// VA-space token, as a gdrdrv PIN_BUFFER takes them.
    pub fn p2p_tokens(&self, ptr: u64) -> Result<(u64, u32), Error> {
        /// `CUDA_POINTER_ATTRIBUTE_P2P_TOKENS`.
        #[repr(C)]
        struct Tokens {
            p2p_token: u64,
            va_space_token: c_uint,
        }
        let mut t = Tokens {
            p2p_token: 0,
            va_space_token: 0,
        };
        // SAFETY: see `load`; P2P_TOKENS writes one CUDA_POINTER_ATTRIBUTE_P2P_TOKENS.
        self.check("cuPointerGetAttribute(P2P_TOKENS)", unsafe {
            (self.get_attr)((&mut t as *mut Tokens).cast(), ATTR_P2P_TOKENS, ptr)
        })?;
        Ok((t.p2p_token, t.va_space_token))
    }

    /// `cuMemcpyHtoD`.
    pub fn copy_to_device(&self, dst: u64, src: &[u8]) -> Result<(), Error> {
        // SAFETY: see `load`; `src` is readable for its length.
        self.check("cuMemcpyHtoD", unsafe {
            (self.htod)(dst, src.as_ptr().cast(), src.len())
        })
    }

    /// `cuMemcpyDtoH`.
    pub fn copy_from_device(&self, dst: &mut [u8], src: u64) -> Result<(), Error> {
        // SAFETY: see `load`; `dst` is writable for its length.
        self.check("cuMemcpyDtoH", unsafe {
            (self.dtoh)(dst.as_mut_ptr().cast(), src, dst.len())
        })
    }
}

fn cuda_error(r: CuResult) -> Result<(), CudaError> {
    match r {
        SUCCESS => Ok(()),
        // cuMemGetAddressRange answers NOT_FOUND for a pointer into no allocation, the
        // pointer attributes INVALID_VALUE.
        ERROR_INVALID_VALUE | ERROR_NOT_FOUND => Err(CudaError::NoAllocation),
        r => Err(CudaError::Other(r as i32)),
    }
}

impl PointerInfo for Cuda {
    fn address_range(&self, ptr: u64) -> Result<(u64, u64), CudaError> {
        let (mut base, mut size) = (0u64, 0usize);
        // SAFETY: see `Cuda::load`.
        cuda_error(unsafe { (self.range)(&mut base, &mut size, ptr) })?;
        Ok((base, size as u64))
    }

    /// SYNC_MEMOPS on the allocation; VMM memory (`cuMemCreate`) refuses it
    /// (`CUDA_ERROR_NOT_SUPPORTED`), and then the current context gets `CU_CTX_SYNC_MEMOPS`
    /// (`cuCtxSetFlags`, CUDA 12.1 on), which makes every synchronous copy and memset of
    /// the context synchronize, as UCX does for such memory. Without `cuCtxSetFlags` the
    /// refusal stands.
    ///
    /// The flag is the calling thread's current context's, for all its memory: copies to
    /// the same VMM memory from another context get no such guarantee, and a program that
    /// sets its context's flags afterwards must keep this one.
    fn set_sync_memops(&self, ptr: u64) -> Result<(), CudaError> {
        let one: c_uint = 1;
        // SAFETY: see `Cuda::load`; SYNC_MEMOPS takes an unsigned int.
        let r = unsafe { (self.set_attr)((&one as *const c_uint).cast(), ATTR_SYNC_MEMOPS, ptr) };
        match (r, self.ctx_flags) {
            (ERROR_NOT_SUPPORTED, Some((get, set))) => {
                let mut flags: c_uint = 0;
                // SAFETY: see `Cuda::load`; cuCtxGetFlags writes one unsigned int.
                cuda_error(unsafe { get(&mut flags) })?;
                // SAFETY: see `Cuda::load`.
                cuda_error(unsafe { set(flags | CTX_SYNC_MEMOPS) })
            }
            (r, _) => cuda_error(r),
        }
    }

    fn buffer_id(&self, ptr: u64) -> Result<u64, CudaError> {
        let mut id = 0u64;
        // SAFETY: see `Cuda::load`; BUFFER_ID writes an unsigned long long.
        cuda_error(unsafe { (self.get_attr)((&mut id as *mut u64).cast(), ATTR_BUFFER_ID, ptr) })?;
        Ok(id)
    }
}

impl PointerInfo for &Cuda {
    fn address_range(&self, ptr: u64) -> Result<(u64, u64), CudaError> {
        (*self).address_range(ptr)
    }

    fn set_sync_memops(&self, ptr: u64) -> Result<(), CudaError> {
        (*self).set_sync_memops(ptr)
    }

    fn buffer_id(&self, ptr: u64) -> Result<u64, CudaError> {
        (*self).buffer_id(ptr)
    }
}
