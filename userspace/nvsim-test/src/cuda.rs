// SPDX-License-Identifier: GPL-2.0

//! Tests of the simulated libcuda, loaded as a program would load real CUDA:
//! `libcuda.so.1` by name, found through LD_LIBRARY_PATH.

use nvsim::testing::{self as harness, client, stat, TestResult};
use nvsim::{check, check_eq};
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};

type Res = c_uint;
const SUCCESS: Res = 0;
const INVALID_VALUE: Res = 1;
const INVALID_CONTEXT: Res = 201;
const ATTR_CONTEXT: c_uint = 1;
const ATTR_MEMORY_TYPE: c_uint = 2;
const ATTR_P2P_TOKENS: c_uint = 5;
const ATTR_SYNC_MEMOPS: c_uint = 6;
const ATTR_BUFFER_ID: c_uint = 7;
const ATTR_IS_MANAGED: c_uint = 8;
const ATTR_DEVICE_ORDINAL: c_uint = 9;
const MEMORYTYPE_HOST: c_uint = 1;
const MEMORYTYPE_DEVICE: c_uint = 2;
const DEV_ATTR_CC_MAJOR: c_uint = 75;
const DEV_ATTR_GPU_DIRECT_RDMA_SUPPORTED: c_uint = 116;

#[repr(C)]
#[derive(Default)]
struct Tokens {
    p2p_token: u64,
    va_space: c_uint,
}

/// The entry points the tests use, resolved from libcuda.so.1.
pub struct Cuda {
    _lib: libloading::Library,
    init: unsafe extern "C" fn(c_uint) -> Res,
    device_count: unsafe extern "C" fn(*mut c_int) -> Res,
    ctx_retain: unsafe extern "C" fn(*mut *mut c_void, c_int) -> Res,
    ctx_set_current: unsafe extern "C" fn(*mut c_void) -> Res,
    device_attr: unsafe extern "C" fn(*mut c_int, c_uint, c_int) -> Res,
    alloc: unsafe extern "C" fn(*mut u64, usize) -> Res,
    free: unsafe extern "C" fn(u64) -> Res,
    range: unsafe extern "C" fn(*mut u64, *mut usize, u64) -> Res,
    get_attr: unsafe extern "C" fn(*mut c_void, c_uint, u64) -> Res,
    get_attrs: unsafe extern "C" fn(c_uint, *const c_uint, *mut *mut c_void, u64) -> Res,
    set_attr: unsafe extern "C" fn(*const c_void, c_uint, u64) -> Res,
    htod: unsafe extern "C" fn(u64, *const c_void, usize) -> Res,
    dtoh: unsafe extern "C" fn(*mut c_void, u64, usize) -> Res,
    memcpy: unsafe extern "C" fn(u64, u64, usize) -> Res,
    memset: unsafe extern "C" fn(u64, u8, usize) -> Res,
    alloc_host: unsafe extern "C" fn(*mut *mut c_void, usize) -> Res,
    free_host: unsafe extern "C" fn(*mut c_void) -> Res,
    error_string: unsafe extern "C" fn(Res, *mut *const c_char) -> Res,
}

macro_rules! sym {
    ($lib:expr, $name:literal) => {
        // SAFETY: the symbol has the CUDA driver API signature of the field it fills.
        *unsafe { $lib.get($name) }.map_err(|e| format!("{}: {e}", stringify!($name)))?
    };
}

impl Cuda {
    pub fn load() -> Result<Self, String> {
        // SAFETY: loading libcuda runs no initialisers with preconditions.
        let lib = unsafe { libloading::Library::new("libcuda.so.1") }
            .map_err(|e| format!("libcuda.so.1: {e}"))?;
        Ok(Cuda {
            init: sym!(lib, b"cuInit"),
            device_count: sym!(lib, b"cuDeviceGetCount"),
            ctx_retain: sym!(lib, b"cuDevicePrimaryCtxRetain"),
            ctx_set_current: sym!(lib, b"cuCtxSetCurrent"),
            device_attr: sym!(lib, b"cuDeviceGetAttribute"),
            alloc: sym!(lib, b"cuMemAlloc_v2"),
            free: sym!(lib, b"cuMemFree_v2"),
            range: sym!(lib, b"cuMemGetAddressRange_v2"),
            get_attr: sym!(lib, b"cuPointerGetAttribute"),
            get_attrs: sym!(lib, b"cuPointerGetAttributes"),
            set_attr: sym!(lib, b"cuPointerSetAttribute"),
            htod: sym!(lib, b"cuMemcpyHtoD_v2"),
            dtoh: sym!(lib, b"cuMemcpyDtoH_v2"),
            memcpy: sym!(lib, b"cuMemcpy"),
            memset: sym!(lib, b"cuMemsetD8_v2"),
            alloc_host: sym!(lib, b"cuMemAllocHost_v2"),
            free_host: sym!(lib, b"cuMemFreeHost"),
            error_string: sym!(lib, b"cuGetErrorString"),
            _lib: lib,
        })
    }

    fn ok(r: Res, what: &str) -> TestResult {
        check_eq!(r, SUCCESS, what);
        Ok(())
    }

    fn setup(&self) -> TestResult {
        // SAFETY (all calls in this file): arguments are valid pointers to the types the
        // CUDA driver API documents for each entry point.
        Self::ok(unsafe { (self.init)(0) }, "cuInit")?;
        let mut ctx = std::ptr::null_mut();
        Self::ok(
            unsafe { (self.ctx_retain)(&mut ctx, 0) },
            "cuDevicePrimaryCtxRetain",
        )?;
        // As in CUDA, the retained primary context is not current until made so.
        Self::ok(unsafe { (self.ctx_set_current)(ctx) }, "cuCtxSetCurrent")
    }

    fn alloc(&self, size: usize) -> Result<u64, String> {
        let mut p = 0;
        Self::ok(unsafe { (self.alloc)(&mut p, size) }, "cuMemAlloc")?;
        Ok(p)
    }

    fn buffer_id(&self, p: u64) -> (Res, u64) {
        let mut id = 0u64;
        let r = unsafe { (self.get_attr)(&mut id as *mut u64 as *mut c_void, ATTR_BUFFER_ID, p) };
        (r, id)
    }
}

pub fn init_and_device() -> TestResult {
    let cu = Cuda::load()?;
    cu.setup()?;
    let mut n = 0;
    Cuda::ok(unsafe { (cu.device_count)(&mut n) }, "cuDeviceGetCount")?;
    check_eq!(n, 1, "devices");
    let mut s = std::ptr::null();
    Cuda::ok(
        unsafe { (cu.error_string)(INVALID_VALUE, &mut s) },
        "cuGetErrorString",
    )?;
    let text = unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned();
    check_eq!(text, "invalid argument", "error string");
    Ok(())
}

/// The guide's section 3.5: the BUFFER_ID tag check sees free + realloc.
pub fn buffer_id_tag_check() -> TestResult {
    let cu = Cuda::load()?;
    cu.setup()?;
    let size = 1 << 20;
    let p = cu.alloc(size)?;
    let one: c_uint = 1;
    Cuda::ok(
        unsafe { (cu.set_attr)(&one as *const c_uint as *const c_void, ATTR_SYNC_MEMOPS, p) },
        "SYNC_MEMOPS",
    )?;
    let (r, id1) = cu.buffer_id(p + 4096);
    Cuda::ok(r, "BUFFER_ID")?;
    let (mut base, mut len) = (0u64, 0usize);
    Cuda::ok(
        unsafe { (cu.range)(&mut base, &mut len, p + 100) },
        "cuMemGetAddressRange",
    )?;
    check_eq!((base, len), (p, size), "address range");

    Cuda::ok(unsafe { (cu.free)(p) }, "cuMemFree")?;
    check_eq!(
        cu.buffer_id(p).0,
        INVALID_VALUE,
        "BUFFER_ID of a freed pointer"
    );
    check_eq!(unsafe { (cu.free)(p) }, INVALID_VALUE, "double free");

    let q = cu.alloc(size)?;
    check_eq!(q, p, "realloc at the same address");
    let (r, id2) = cu.buffer_id(q);
    Cuda::ok(r, "BUFFER_ID after realloc")?;
    check!(id2 != id1, "BUFFER_ID {id1} unchanged after free + realloc");

    // One call for several attributes; no error (null values) for a bad pointer.
    let attrs = [
        ATTR_BUFFER_ID,
        ATTR_MEMORY_TYPE,
        ATTR_IS_MANAGED,
        ATTR_DEVICE_ORDINAL,
        ATTR_CONTEXT,
    ];
    let (mut id, mut mt, mut managed, mut ordinal, mut ctx) = (
        0u64,
        0 as c_uint,
        7 as c_uint,
        -1 as c_int,
        std::ptr::null_mut::<c_void>(),
    );
    let mut data: [*mut c_void; 5] = [
        &mut id as *mut u64 as *mut c_void,
        &mut mt as *mut c_uint as *mut c_void,
        &mut managed as *mut c_uint as *mut c_void,
        &mut ordinal as *mut c_int as *mut c_void,
        &mut ctx as *mut *mut c_void as *mut c_void,
    ];
    Cuda::ok(
        unsafe { (cu.get_attrs)(5, attrs.as_ptr(), data.as_mut_ptr(), q) },
        "cuPointerGetAttributes",
    )?;
    check_eq!(
        (id, mt, managed, ordinal),
        (id2, MEMORYTYPE_DEVICE, 0, 0),
        "attributes"
    );
    check!(!ctx.is_null(), "no context");
    Cuda::ok(unsafe { (cu.free)(q) }, "cuMemFree")?;
    Cuda::ok(
        unsafe { (cu.get_attrs)(5, attrs.as_ptr(), data.as_mut_ptr(), q) },
        "cuPointerGetAttributes on a freed pointer",
    )?;
    check_eq!((id, mt), (0, 0), "null values for a freed pointer");
    Ok(())
}

pub fn memcpy_roundtrip() -> TestResult {
    let cu = Cuda::load()?;
    cu.setup()?;
    let size = 3 * 65536;
    let p = cu.alloc(size)?;
    let data: Vec<u8> = (0..size).map(|i| (i * 31 + 7) as u8).collect();
    Cuda::ok(
        unsafe { (cu.htod)(p, data.as_ptr() as *const c_void, size) },
        "HtoD",
    )?;
    let mut back = vec![0u8; size];
    Cuda::ok(
        unsafe { (cu.dtoh)(back.as_mut_ptr() as *mut c_void, p, size) },
        "DtoH",
    )?;
    check!(back == data, "data differs after HtoD + DtoH");
    check_eq!(
        unsafe { (cu.htod)(p + size as u64 - 10, data.as_ptr() as *const c_void, 20) },
        INVALID_VALUE,
        "copy past the end"
    );
    Cuda::ok(unsafe { (cu.free)(p) }, "cuMemFree")
}

/// P2P tokens select the VA space for a pin from anywhere; cuMemFree calls it back.
pub fn p2p_tokens_pin() -> TestResult {
    let cu = Cuda::load()?;
    cu.setup()?;
    let p = cu.alloc(65536)?;
    let mut t = Tokens::default();
    Cuda::ok(
        unsafe { (cu.get_attr)(&mut t as *mut Tokens as *mut c_void, ATTR_P2P_TOKENS, p) },
        "P2P_TOKENS",
    )?;
    check!(t.p2p_token != 0, "p2p token 0");
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let out = std::process::Command::new(exe)
        .args([
            "--client",
            &format!("get {p} 65536 {} {}", t.p2p_token, t.va_space),
        ])
        .output()
        .map_err(|e| e.to_string())?;
    let out = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let handle = harness::parse_pin(&out)
        .and_then(|r| r.ok())
        .ok_or(format!("pin by token: {out}"))?
        .handle;
    check_eq!(stat("pins_live")?, 1, "pinned");
    Cuda::ok(unsafe { (cu.free)(p) }, "cuMemFree")?;
    check!(
        client(&format!("state {handle}"))?.starts_with("revoked=1"),
        "callback on cuMemFree"
    );
    Ok(())
}

/// Device attributes; a thread without a current context; cuMemsetD8 and cuMemcpy (device to
/// device, host to device by unified addressing) seen through nvsim's mapping; host memory
/// from cuMemAllocHost is CU_MEMORYTYPE_HOST.
pub fn unified_memory() -> TestResult {
    let cu = Cuda::load()?;
    cu.setup()?;
    let (mut rdma, mut major) = (0, 0);
    Cuda::ok(
        unsafe { (cu.device_attr)(&mut rdma, DEV_ATTR_GPU_DIRECT_RDMA_SUPPORTED, 0) },
        "GPU_DIRECT_RDMA_SUPPORTED",
    )?;
    Cuda::ok(
        unsafe { (cu.device_attr)(&mut major, DEV_ATTR_CC_MAJOR, 0) },
        "COMPUTE_CAPABILITY_MAJOR",
    )?;
    check_eq!((rdma, major), (1, 9), "device attributes");
    let r = std::thread::scope(|s| {
        s.spawn(|| {
            let mut p = 0;
            unsafe { (cu.alloc)(&mut p, 65536) }
        })
        .join()
    })
    .map_err(|_| "thread panicked".to_string())?;
    check_eq!(
        r,
        INVALID_CONTEXT,
        "cuMemAlloc in a thread without a context"
    );

    let size = 2 * 65536;
    let (a, b) = (cu.alloc(size)?, cu.alloc(size)?);
    Cuda::ok(unsafe { (cu.memset)(a, 0xab, size) }, "cuMemsetD8")?;
    Cuda::ok(unsafe { (cu.memcpy)(b, a, size) }, "cuMemcpy DtoD")?;
    let gpu = nvsim::Gpu::open().map_err(harness::errno)?;
    check!(
        gpu.read(b, size).map_err(harness::errno)? == vec![0xab; size],
        "the BAR does not show what cuMemsetD8 + cuMemcpy wrote"
    );
    check_eq!(
        unsafe { (cu.memset)(a + 10, 0, size) },
        INVALID_VALUE,
        "memset past the end"
    );

    let mut h = std::ptr::null_mut();
    Cuda::ok(unsafe { (cu.alloc_host)(&mut h, 4096) }, "cuMemAllocHost")?;
    let mut mt: c_uint = 0;
    Cuda::ok(
        unsafe {
            (cu.get_attr)(
                &mut mt as *mut c_uint as *mut c_void,
                ATTR_MEMORY_TYPE,
                h as u64,
            )
        },
        "MEMORY_TYPE of host memory",
    )?;
    check_eq!(mt, MEMORYTYPE_HOST, "memory type");
    unsafe { std::ptr::write_bytes(h as *mut u8, 0x5a, 4096) };
    Cuda::ok(unsafe { (cu.memcpy)(a, h as u64, 4096) }, "cuMemcpy HtoD")?;
    check!(
        gpu.read(a, 4096).map_err(harness::errno)? == vec![0x5a; 4096],
        "the BAR does not show what cuMemcpy wrote from host memory"
    );
    Cuda::ok(unsafe { (cu.free_host)(h) }, "cuMemFreeHost")?;
    check_eq!(
        unsafe { (cu.free_host)(h) },
        INVALID_VALUE,
        "double cuMemFreeHost"
    );
    Cuda::ok(unsafe { (cu.free)(a) }, "cuMemFree")?;
    Cuda::ok(unsafe { (cu.free)(b) }, "cuMemFree")
}
