// SPDX-License-Identifier: GPL-2.0

//! Tests of the simulated libcuda, loaded as a program would load real CUDA:
//! `libcuda.so.1` by name, found through LD_LIBRARY_PATH.

use nvsim::cuda_vmm::{AccessDesc, Prop, ACCESS_RW};
use nvsim::testing::{self as harness, client, stat, TestResult};
use nvsim::{check, check_eq};
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};

type Res = c_uint;
const SUCCESS: Res = 0;
const INVALID_VALUE: Res = 1;
/// `CUDA_ERROR_NOT_FOUND`: cuMemGetAddressRange of a pointer into no allocation.
const NOT_FOUND: Res = 500;
const INVALID_DEVICE: Res = 101;
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
const DEV_ATTR_MULTIPROCESSOR_COUNT: c_uint = 16;
const DEV_ATTR_COMPUTE_MODE: c_uint = 20;
const DEV_ATTR_PCI_BUS_ID: c_uint = 33;
const DEV_ATTR_PCI_DEVICE_ID: c_uint = 34;
const DEV_ATTR_PCI_DOMAIN_ID: c_uint = 50;
const DEV_ATTR_CC_MAJOR: c_uint = 75;
const DEV_ATTR_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES: c_uint = 100;
const DEV_ATTR_GPU_DIRECT_RDMA_SUPPORTED: c_uint = 116;
/// CU_DEVICE_ATTRIBUTE_MAX of CUDA 12.9: every number below it, from 1, is an attribute.
const DEV_ATTR_MAX: c_uint = 144;

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
    ctx_get_current: unsafe extern "C" fn(*mut *mut c_void) -> Res,
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
    synchronize: unsafe extern "C" fn() -> Res,
    alloc_host: unsafe extern "C" fn(*mut *mut c_void, usize) -> Res,
    free_host: unsafe extern "C" fn(*mut c_void) -> Res,
    error_string: unsafe extern "C" fn(Res, *mut *const c_char) -> Res,
    granularity: unsafe extern "C" fn(*mut usize, *const Prop, c_uint) -> Res,
    mem_create: unsafe extern "C" fn(*mut u64, usize, *const Prop, u64) -> Res,
    mem_release: unsafe extern "C" fn(u64) -> Res,
    reserve: unsafe extern "C" fn(*mut u64, usize, usize, u64, u64) -> Res,
    address_free: unsafe extern "C" fn(u64, usize) -> Res,
    map: unsafe extern "C" fn(u64, usize, usize, u64, u64) -> Res,
    unmap: unsafe extern "C" fn(u64, usize) -> Res,
    set_access: unsafe extern "C" fn(u64, usize, *const AccessDesc, usize) -> Res,
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
            ctx_get_current: sym!(lib, b"cuCtxGetCurrent"),
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
            synchronize: sym!(lib, b"cuCtxSynchronize"),
            alloc_host: sym!(lib, b"cuMemAllocHost_v2"),
            free_host: sym!(lib, b"cuMemFreeHost"),
            error_string: sym!(lib, b"cuGetErrorString"),
            granularity: sym!(lib, b"cuMemGetAllocationGranularity"),
            mem_create: sym!(lib, b"cuMemCreate"),
            mem_release: sym!(lib, b"cuMemRelease"),
            reserve: sym!(lib, b"cuMemAddressReserve"),
            address_free: sym!(lib, b"cuMemAddressFree"),
            map: sym!(lib, b"cuMemMap"),
            unmap: sym!(lib, b"cuMemUnmap"),
            set_access: sym!(lib, b"cuMemSetAccess"),
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

    fn range(&self, p: u64) -> Result<(u64, usize), Res> {
        let (mut base, mut len) = (0u64, 0usize);
        match unsafe { (self.range)(&mut base, &mut len, p) } {
            SUCCESS => Ok((base, len)),
            e => Err(e),
        }
    }

    /// Attribute `attr` of device `dev`: (result, value).
    fn device_attr(&self, attr: c_uint, dev: c_int) -> (Res, c_int) {
        let mut v = -7;
        // SAFETY: `v` is the int cuDeviceGetAttribute writes.
        let r = unsafe { (self.device_attr)(&mut v, attr, dev) };
        (r, v)
    }

    /// Pointer attribute `attr` of `ptr`, read as the `T` CUDA documents for it: (result,
    /// value, `init` where nothing was written).
    fn pointer_attr<T: Copy>(&self, attr: c_uint, ptr: u64, init: T) -> (Res, T) {
        let mut v = init;
        // SAFETY: the caller names the `T` CUDA writes for `attr`.
        let r = unsafe { (self.get_attr)(&mut v as *mut T as *mut c_void, attr, ptr) };
        (r, v)
    }

    /// The context current in this thread (null for none).
    fn current(&self) -> Result<*mut c_void, String> {
        let mut ctx = std::ptr::null_mut();
        Self::ok(
            // SAFETY: `ctx` is the CUcontext cuCtxGetCurrent writes.
            unsafe { (self.ctx_get_current)(&mut ctx) },
            "cuCtxGetCurrent",
        )?;
        Ok(ctx)
    }

    fn dtoh(&self, p: u64, n: usize) -> Result<Vec<u8>, Res> {
        let mut v = vec![0u8; n];
        match unsafe { (self.dtoh)(v.as_mut_ptr() as *mut c_void, p, n) } {
            SUCCESS => Ok(v),
            e => Err(e),
        }
    }
}

/// nvsim's buffer id of what `p` points into.
fn gpu_query_id(p: u64) -> Result<u64, String> {
    let gpu = nvsim::Gpu::open().map_err(harness::errno)?;
    Ok(gpu.query(p).map_err(harness::errno)?.buffer_id)
}

/// The state of p2pclient pin `handle` ("revoked=0|1 cb_pid=PID").
fn pin_state(handle: u32) -> Result<String, String> {
    client(&format!("state {handle}"))
}

fn pin_ok(cmd: &str) -> Result<harness::Pin, String> {
    harness::pin(cmd)?.map_err(|e| format!("{cmd}: error {e}"))
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

/// P2P tokens select the VA space for a pin from anywhere; cuMemFree calls it back (of an
/// allocation of its own: a small buffer's free need not call back, its pool block is the
/// RM object). CUDA 13 answers P2P_TOKENS with a P2P token of 0 and a VA-space token
/// (`tests/cuda-trace`), as libcuda-sim does; the non-zero token nv-p2p still takes (older
/// drivers handed it out) comes from nvsim's own query.
pub fn p2p_tokens_pin() -> TestResult {
    let cu = Cuda::load()?;
    cu.setup()?;
    let p = cu.alloc(M2)?;
    let mut t = Tokens::default();
    Cuda::ok(
        unsafe { (cu.get_attr)(&mut t as *mut Tokens as *mut c_void, ATTR_P2P_TOKENS, p) },
        "P2P_TOKENS",
    )?;
    let q = nvsim::Gpu::open()
        .and_then(|g| g.query(p))
        .map_err(harness::errno)?;
    check_eq!(
        (t.p2p_token, t.va_space),
        (0, q.va_space),
        "CUDA's tokens: 0 and the VA space"
    );
    check!(q.p2p_token != 0, "nvsim's p2p token 0");
    let out = crate::in_other_process(&format!("get {p} 65536 {} {}", q.p2p_token, q.va_space))?;
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
    check_eq!(
        (
            cu.device_attr(DEV_ATTR_GPU_DIRECT_RDMA_SUPPORTED, 0),
            cu.device_attr(DEV_ATTR_CC_MAJOR, 0)
        ),
        ((SUCCESS, 1), (SUCCESS, 9)),
        "device attributes"
    );
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
    // Without SYNC_MEMOPS a device-to-device copy is asynchronous to the host: in flight
    // until a synchronization (the memset before it completed first: the copy read 0xab).
    check!(
        gpu.read(b, size).map_err(harness::errno)? != vec![0xab; size],
        "the BAR shows a device-to-device copy before any synchronization"
    );
    Cuda::ok(unsafe { (cu.synchronize)() }, "cuCtxSynchronize")?;
    check!(
        gpu.read(b, size).map_err(harness::errno)? == vec![0xab; size],
        "the BAR does not show what cuMemsetD8 + cuMemcpy wrote, synchronized"
    );
    // With SYNC_MEMOPS on the destination, the copy is there when it returns.
    let one: c_uint = 1;
    Cuda::ok(
        unsafe { (cu.set_attr)((&one as *const c_uint).cast(), ATTR_SYNC_MEMOPS, b) },
        "SYNC_MEMOPS",
    )?;
    Cuda::ok(unsafe { (cu.memset)(b, 0xcd, size) }, "cuMemsetD8")?;
    check!(
        gpu.read(b, size).map_err(harness::errno)? == vec![0xcd; size],
        "the BAR does not show a memset of SYNC_MEMOPS memory when it returns"
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

const K64: u64 = 1 << 16;
const M2: usize = 2 << 20;

/// VMM: granularity, cuMemCreate's checks, reserve + map + access; a pin inside the mapping;
/// what is written through the BAR is what cuMemcpyDtoH reads, and cuMemsetD8 writes what
/// the BAR shows; tokens refused; each mapping its own BUFFER_ID and address range;
/// cuMemUnmap calls the pin back before it returns, and nothing writes the freed pages.
pub fn vmm_map_pin_unmap() -> TestResult {
    let cu = Cuda::load()?;
    cu.setup()?;
    let prop = Prop::device(0);
    for option in [0, 1] {
        let mut g = 0usize;
        Cuda::ok(
            unsafe { (cu.granularity)(&mut g, &prop, option) },
            "cuMemGetAllocationGranularity",
        )?;
        check_eq!(g, M2, "granularity");
    }
    let mut h = 0u64;
    check_eq!(
        unsafe { (cu.mem_create)(&mut h, M2 / 2, &prop, 0) },
        INVALID_VALUE,
        "cuMemCreate of half the granularity"
    );
    check_eq!(
        unsafe { (cu.mem_create)(&mut h, M2, &Prop::device(1), 0) },
        INVALID_DEVICE,
        "cuMemCreate on device 1"
    );
    Cuda::ok(
        unsafe { (cu.mem_create)(&mut h, 2 * M2, &prop, 0) },
        "cuMemCreate",
    )?;
    let mut r = 0u64;
    Cuda::ok(
        unsafe { (cu.reserve)(&mut r, 4 * M2, 0, 0, 0) },
        "cuMemAddressReserve",
    )?;
    check_eq!(r % M2 as u64, 0, "reservation alignment");
    let p = r + M2 as u64;
    check_eq!(unsafe { (cu.map)(p, 2 * M2, 0, h, 0) }, SUCCESS, "cuMemMap");
    check_eq!(
        unsafe { (cu.map)(p, 2 * M2, 0, h, 0) },
        INVALID_VALUE,
        "cuMemMap over a mapping"
    );
    check_eq!(
        cu.dtoh(p, 16).err(),
        Some(INVALID_VALUE),
        "copy before cuMemSetAccess"
    );
    Cuda::ok(
        unsafe { (cu.set_access)(p, 2 * M2, &ACCESS_RW, 1) },
        "cuMemSetAccess",
    )?;
    check_eq!(cu.range(p + 100), Ok((p, 2 * M2)), "address range");
    let (rr, id) = cu.buffer_id(p + 5000);
    Cuda::ok(rr, "BUFFER_ID")?;
    check_eq!(
        gpu_query_id(p)?,
        id,
        "the mapping's BUFFER_ID is nvsim's id of the mapping"
    );
    let mut t = Tokens::default();
    check_eq!(
        unsafe { (cu.get_attr)(&mut t as *mut Tokens as *mut c_void, ATTR_P2P_TOKENS, p) },
        0,
        "P2P_TOKENS of VMM memory"
    );
    check_eq!(t.p2p_token, 0, "the P2P token of VMM memory");
    check_eq!(
        unsafe { (cu.free)(p) },
        INVALID_VALUE,
        "cuMemFree of VMM memory"
    );

    // A pin inside the mapping; not across its end; not by token.
    let pin = pin_ok(&format!("get {} {}", p + K64, 2 * K64))?;
    let end = p + 2 * M2 as u64;
    match harness::pin(&format!("get {} {}", end - K64, 2 * K64))? {
        Err(e) => check_eq!(e, -22, "pin across the mapping's end"),
        Ok(x) => return Err(format!("pinned across the mapping's end: {x:?}")),
    }
    let gpu = nvsim::Gpu::open().map_err(harness::errno)?;
    let q = gpu.query(p).map_err(harness::errno)?;
    check_eq!(
        crate::in_other_process(&format!("get {p} {K64} {} {}", q.p2p_token, q.va_space))?,
        "err -22",
        "pin of VMM memory by token"
    );

    // The BAR and the CUDA copies see the same memory.
    let data: Vec<u8> = (0..5000u32).map(|i| (i * 13 + 1) as u8).collect();
    gpu.write(p + K64 - 100, &data).map_err(harness::errno)?;
    check_eq!(
        cu.dtoh(p + K64 - 100, data.len()),
        Ok(data.clone()),
        "cuMemcpyDtoH of what the BAR holds"
    );
    Cuda::ok(
        unsafe { (cu.memset)(p + 3 * K64, 0xc3, 4096) },
        "cuMemsetD8",
    )?;
    // VMM memory refuses SYNC_MEMOPS: the memset is in flight until a synchronization.
    check_eq!(
        unsafe { (cu.set_attr)((&1u32 as *const c_uint).cast(), ATTR_SYNC_MEMOPS, p) },
        801,
        "SYNC_MEMOPS of VMM memory (CUDA_ERROR_NOT_SUPPORTED)"
    );
    Cuda::ok(unsafe { (cu.synchronize)() }, "cuCtxSynchronize")?;
    check!(
        gpu.read(p + 3 * K64, 4096).map_err(harness::errno)? == vec![0xc3; 4096],
        "the BAR does not show what cuMemsetD8 wrote"
    );

    check_eq!(
        unsafe { (cu.address_free)(r, 4 * M2) },
        INVALID_VALUE,
        "cuMemAddressFree with a mapping in it"
    );
    // Released while mapped: the memory lives on until the unmap.
    Cuda::ok(unsafe { (cu.mem_release)(h) }, "cuMemRelease")?;
    check_eq!(
        cu.dtoh(p + K64 - 100, 10),
        Ok(data[..10].to_vec()),
        "memory after cuMemRelease"
    );
    check_eq!(stat("pins_live")?, 1, "pinned");
    Cuda::ok(unsafe { (cu.unmap)(p, 2 * M2) }, "cuMemUnmap")?;
    let tid = rustix::thread::gettid().as_raw_nonzero().get();
    check_eq!(
        pin_state(pin.handle)?,
        format!("revoked=1 cb_pid={tid}"),
        "callback in cuMemUnmap"
    );
    check_eq!(
        stat("vmm_handles_live")?,
        0,
        "memory freed after unmap + release"
    );
    check_eq!(cu.buffer_id(p).0, INVALID_VALUE, "BUFFER_ID after unmap");
    harness::debugfs("check_freed", "1")?;
    check_eq!(stat("freed_page_writes")?, 0, "writes to freed pages");
    Cuda::ok(unsafe { (cu.address_free)(r, 4 * M2) }, "cuMemAddressFree")
}

/// Small cuMemAlloc buffers share a pool block, 256-byte aligned, each with its own
/// BUFFER_ID and address range; pins over the block succeed; freeing one buffer calls back
/// the pins over its 64 KiB pages and no other.
pub fn suballocation() -> TestResult {
    let cu = Cuda::load()?;
    cu.setup()?;
    let (a, b) = (cu.alloc(1000)?, cu.alloc(1000)?);
    check!(
        a % 256 == 0 && b % 256 == 0 && a != b,
        "alignment: {a:#x} {b:#x}"
    );
    let page = a & !(K64 - 1);
    check_eq!(b & !(K64 - 1), page, "the two buffers share a 64 KiB page");
    let (ra, ida) = cu.buffer_id(a + 10);
    let (rb, idb) = cu.buffer_id(b);
    check_eq!((ra, rb), (SUCCESS, SUCCESS), "BUFFER_IDs");
    check!(ida != idb, "one BUFFER_ID {ida} for two buffers");
    check_eq!(cu.range(a + 999), Ok((a, 1000)), "range of a");
    check_eq!(cu.range(b + 1), Ok((b, 1000)), "range of b");
    if b > a + 1000 {
        check_eq!(
            cu.range(a + 1000).err(),
            Some(NOT_FOUND),
            "range between buffers"
        );
    }
    let big = cu.alloc(3 << 20)?;
    check_eq!(big % K64, 0, "a 3 MiB allocation is 64 KiB aligned");
    check!(
        big & !(K64 - 1) != page,
        "a 3 MiB allocation in the small buffers' page"
    );

    // Pins over the pool block: the buffers' page, and the block's next page.
    let over = pin_ok(&format!("get {page} {K64}"))?;
    let next = pin_ok(&format!("get {} {K64}", page + K64))?;
    let data = [0x5au8; 1000];
    Cuda::ok(
        unsafe { (cu.htod)(b, data.as_ptr() as *const c_void, 1000) },
        "HtoD",
    )?;
    // Which free calls back: the block's last (per-block rule, the driver's: the callbacks
    // belong to the RM memory object, and nvsim keeps an empty block until trimmed), or each
    // buffer's over its pages (nvsim's callback_per_buffer=1).
    let per_buffer = stat("callback_per_buffer")? == 1;
    Cuda::ok(unsafe { (cu.free)(a) }, "cuMemFree(a)")?;
    let tid = rustix::thread::gettid().as_raw_nonzero().get();
    check_eq!(
        pin_state(over.handle)?,
        if per_buffer {
            format!("revoked=1 cb_pid={tid}")
        } else {
            "revoked=0 cb_pid=0".to_string()
        },
        "pin over the freed buffer's page"
    );
    check!(
        pin_state(next.handle)?.starts_with("revoked=0"),
        "a pin over another page of the block was called back"
    );
    check_eq!(
        cu.buffer_id(a).0,
        INVALID_VALUE,
        "BUFFER_ID of the freed buffer"
    );
    check_eq!(
        cu.buffer_id(b),
        (SUCCESS, idb),
        "BUFFER_ID of the other buffer"
    );
    check_eq!(
        cu.dtoh(b, 1000),
        Ok(data.to_vec()),
        "the other buffer's data"
    );
    Cuda::ok(unsafe { (cu.free)(b) }, "cuMemFree(b)")?;
    if !per_buffer {
        // The empty block is kept: its pins stay until it is given back.
        check!(
            pin_state(over.handle)?.starts_with("revoked=0"),
            "the block's last free called back"
        );
        nvsim::testing::debugfs("trim", "1")?;
        check!(
            pin_state(over.handle)?.starts_with("revoked=1"),
            "giving the block back did not call back its pins"
        );
    }
    // The last buffer (per buffer) or the block's return takes every pin over it.
    check!(
        pin_state(next.handle)?.starts_with("revoked=1"),
        "the block's pins were not called back"
    );
    Cuda::ok(unsafe { (cu.free)(big) }, "cuMemFree(big)")
}

/// Runs `f` in a new thread, where no context is current.
fn in_a_thread_without_context<T: Send>(
    cu: &Cuda,
    f: impl FnOnce() -> Result<T, String> + Send,
) -> Result<T, String> {
    std::thread::scope(|s| {
        s.spawn(|| {
            check!(
                cu.current()?.is_null(),
                "a context is current in a new thread"
            );
            f()
        })
        .join()
        .map_err(|_| "thread panicked".to_string())?
    })
}

/// The PCI address (domain, bus, device) of the device nvsim is bound to, from sysfs.
fn nvsim_pci_address() -> Result<(c_int, c_int, c_int), String> {
    let dir = "/sys/bus/pci/drivers/nvsim";
    let hex = |t: &str| {
        i64::from_str_radix(t, 16)
            .ok()
            .and_then(|v| c_int::try_from(v).ok())
    };
    for e in std::fs::read_dir(dir).map_err(|e| format!("{dir}: {e}"))? {
        let name = e.map_err(|e| e.to_string())?.file_name();
        let name = name.to_string_lossy();
        let parts: Vec<&str> = name.split([':', '.']).collect();
        if let [domain, bus, device, _function] = parts[..] {
            if let (Some(d), Some(b), Some(v)) = (hex(domain), hex(bus), hex(device)) {
                return Ok((d, b, v));
            }
        }
    }
    Err(format!("no PCI device in {dir}"))
}

/// Every CUdevice_attribute of CUDA 12.9 answered, as CUDA answers its whole enum, in a
/// thread without a current context too; 0, MAX and beyond are CUDA_ERROR_INVALID_VALUE,
/// device 1 CUDA_ERROR_INVALID_DEVICE. What gdrcopy's tests ask: COMPUTE_MODE default,
/// pageable memory not through the host's page tables; an H100's SMs; the PCI address of
/// the device nvsim drives.
pub fn every_device_attribute_answered() -> TestResult {
    let cu = Cuda::load()?;
    cu.setup()?;
    for attr in 1..DEV_ATTR_MAX {
        check_eq!(
            cu.device_attr(attr, 0).0,
            SUCCESS,
            format!("attribute {attr}")
        );
    }
    for attr in [0, DEV_ATTR_MAX, DEV_ATTR_MAX + 1, 9999] {
        check_eq!(
            cu.device_attr(attr, 0),
            (INVALID_VALUE, -7),
            format!("attribute {attr}")
        );
    }
    check_eq!(
        cu.device_attr(DEV_ATTR_COMPUTE_MODE, 1).0,
        INVALID_DEVICE,
        "device 1"
    );
    let value = |attr| cu.device_attr(attr, 0).1;
    check_eq!(value(DEV_ATTR_COMPUTE_MODE), 0, "COMPUTE_MODE");
    check_eq!(
        value(DEV_ATTR_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES),
        0,
        "PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES"
    );
    check_eq!(
        value(DEV_ATTR_MULTIPROCESSOR_COUNT),
        132,
        "MULTIPROCESSOR_COUNT"
    );
    check_eq!(
        (
            value(DEV_ATTR_PCI_DOMAIN_ID),
            value(DEV_ATTR_PCI_BUS_ID),
            value(DEV_ATTR_PCI_DEVICE_ID)
        ),
        nvsim_pci_address()?,
        "PCI domain, bus, device"
    );
    in_a_thread_without_context(&cu, || {
        check_eq!(
            cu.device_attr(DEV_ATTR_COMPUTE_MODE, 0),
            (SUCCESS, 0),
            "COMPUTE_MODE without a current context"
        );
        Ok(())
    })
}

/// A thread that never made a context current frees what another thread allocated, device
/// memory (the pin on it is called back in that thread) and host memory, as in CUDA, where
/// the pointer names its allocation's context.
pub fn free_without_a_current_context() -> TestResult {
    // SAFETY (all calls): valid out pointers; the pointers freed are this test's allocations.
    let cu = Cuda::load()?;
    cu.setup()?;
    let p = cu.alloc(M2)?;
    let small = cu.alloc(1000)?;
    let mut h = std::ptr::null_mut();
    Cuda::ok(unsafe { (cu.alloc_host)(&mut h, 4096) }, "cuMemAllocHost")?;
    let h = h as u64;
    let pin = pin_ok(&format!("get {p} {K64}"))?;
    let tid = in_a_thread_without_context(&cu, || {
        Cuda::ok(unsafe { (cu.free)(p) }, "cuMemFree")?;
        Cuda::ok(unsafe { (cu.free)(small) }, "cuMemFree of a small buffer")?;
        Cuda::ok(unsafe { (cu.free_host)(h as *mut c_void) }, "cuMemFreeHost")?;
        check_eq!(unsafe { (cu.free)(p) }, INVALID_VALUE, "double cuMemFree");
        Ok(rustix::thread::gettid().as_raw_nonzero().get())
    })?;
    check_eq!(
        pin_state(pin.handle)?,
        format!("revoked=1 cb_pid={tid}"),
        "callback in the freeing thread"
    );
    let gpu = nvsim::Gpu::open().map_err(harness::errno)?;
    check!(gpu.query(p).is_err(), "nvsim still has the freed buffer");
    check_eq!(cu.buffer_id(small).0, INVALID_VALUE, "BUFFER_ID after free");
    check_eq!(
        unsafe { (cu.free_host)(h as *mut c_void) },
        INVALID_VALUE,
        "double cuMemFreeHost"
    );
    Ok(())
}

/// In a thread that never made a context current: pointer attributes answer as in the
/// allocating thread, CONTEXT the allocation's context; SYNC_MEMOPS can be set; cuMemAlloc
/// and cuMemAllocHost are CUDA_ERROR_INVALID_CONTEXT, as in CUDA.
pub fn pointer_attributes_without_a_current_context() -> TestResult {
    // SAFETY (all calls): each data pointer is the type CUDA documents for its attribute;
    // out pointers are valid.
    let cu = Cuda::load()?;
    cu.setup()?;
    let ctx = cu.current()? as u64;
    let p = cu.alloc(M2)?;
    let (r, id) = cu.buffer_id(p);
    Cuda::ok(r, "BUFFER_ID")?;
    in_a_thread_without_context(&cu, || {
        check_eq!(
            cu.pointer_attr(ATTR_CONTEXT, p + 100, 0u64),
            (SUCCESS, ctx),
            "CONTEXT"
        );
        check_eq!(
            cu.pointer_attr(ATTR_MEMORY_TYPE, p, 0 as c_uint),
            (SUCCESS, MEMORYTYPE_DEVICE),
            "MEMORY_TYPE"
        );
        check_eq!(cu.buffer_id(p), (SUCCESS, id), "BUFFER_ID");
        let attrs = [ATTR_BUFFER_ID, ATTR_DEVICE_ORDINAL];
        let (mut got_id, mut ordinal) = (0u64, -1 as c_int);
        let mut data: [*mut c_void; 2] = [
            &mut got_id as *mut u64 as *mut c_void,
            &mut ordinal as *mut c_int as *mut c_void,
        ];
        Cuda::ok(
            unsafe { (cu.get_attrs)(2, attrs.as_ptr(), data.as_mut_ptr(), p) },
            "cuPointerGetAttributes",
        )?;
        check_eq!((got_id, ordinal), (id, 0), "BUFFER_ID, DEVICE_ORDINAL");
        let one: c_uint = 1;
        Cuda::ok(
            unsafe { (cu.set_attr)(&one as *const c_uint as *const c_void, ATTR_SYNC_MEMOPS, p) },
            "cuPointerSetAttribute(SYNC_MEMOPS)",
        )?;
        let mut q = 0;
        check_eq!(
            unsafe { (cu.alloc)(&mut q, 4096) },
            INVALID_CONTEXT,
            "cuMemAlloc"
        );
        let mut h = std::ptr::null_mut();
        check_eq!(
            unsafe { (cu.alloc_host)(&mut h, 4096) },
            INVALID_CONTEXT,
            "cuMemAllocHost"
        );
        check!(q == 0 && h.is_null(), "an allocation without a context");
        Ok(())
    })?;
    check_eq!(
        cu.pointer_attr(ATTR_SYNC_MEMOPS, p, 0 as c_uint),
        (SUCCESS, 1),
        "SYNC_MEMOPS set"
    );
    Cuda::ok(unsafe { (cu.free)(p) }, "cuMemFree")
}
