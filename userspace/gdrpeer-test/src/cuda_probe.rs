// SPDX-License-Identifier: GPL-2.0

//! `gdrpeer-test --cuda-probe [--against RECORDED]`: the answers of `libcuda.so.1` to a fixed
//! list of CUDA driver API calls, one `key: answer` line each, in a form that does not depend
//! on where the memory lies (relations between addresses, not addresses).
//!
//! Run on a GPU machine over NVIDIA's libcuda, it records what real CUDA answers
//! (`tests/cuda-trace/`); run in the test guest over libcuda-sim with `--against` that record,
//! it fails on every answer of the simulation that differs from real CUDA's, except the
//! differences `tests/cuda-trace/sim-differences.txt` lists with their reason (and a listed
//! difference that is gone fails too, so that the list cannot grow stale). The oracle is
//! NVIDIA's driver, not a note of ours.
//!
//! The calls are those libcuda-sim implements and gdrpeer's users make: the device and its
//! attributes (every number up to one past `CU_DEVICE_ATTRIBUTE_MAX`), allocation and address
//! ranges, `BUFFER_ID` after free and reallocation, P2P tokens, pointer attributes,
//! `cuMemsetD8` and copies (inside and across an allocation's end), frees and allocations
//! from a thread with no current context, and the VMM calls. Each section runs in a process of
//! its own, so that a call that breaks the context (a sticky error) or the process spoils no
//! other section's answers.

use std::collections::BTreeMap;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::io::Write;
use std::process::Command;

type Res = c_uint;

const K64: u64 = 64 << 10;
const M2: u64 = 2 << 20;

/// The sections, in order; each runs as `gdrpeer-test --cuda-probe-section NAME`.
type Section = (&'static str, fn(&Probe));

const SECTIONS: &[Section] = &[
    ("init", init),
    ("attributes", attributes),
    ("ranges", ranges),
    ("buffer-id", buffer_id),
    ("tokens", tokens),
    ("pointer", pointer),
    ("memset", memset),
    ("copy", copy),
    ("free", free),
    ("threads", threads),
    ("vmm", vmm),
    ("context-end", context_end),
];

/// The result `--against` reports.
const RESULT: &str = "libcuda-sim-answers-as-recorded-cuda";

/// One past `CU_DEVICE_ATTRIBUTE_MAX` of CUDA 12.9's `cuda.h`.
const ATTRIBUTE_PROBE_END: c_uint = 146;

/// `libcuda.so.1`, its entry points looked up by name as each probe needs them.
struct Probe {
    lib: libloading::Library,
    section: &'static str,
}

/// A CUDA call's answer: a result code, or no such entry point in the library.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Ans {
    Code(Res),
    NoSymbol,
}

macro_rules! call {
    ($p:expr, $name:literal: fn($($t:ty),*) ($($a:expr),*)) => {{
        // SAFETY: the symbol has the CUDA driver API signature written at the call, and the
        // arguments are valid for it (out-pointers to locals of the documented types).
        match unsafe { $p.lib.get::<unsafe extern "C" fn($($t),*) -> Res>(
            concat!($name, "\0").as_bytes()) } {
            Ok(f) => Ans::Code(unsafe { f($($a),*) }),
            Err(_) => Ans::NoSymbol,
        }
    }};
}

impl Probe {
    fn say(&self, key: &str, value: impl std::fmt::Display) {
        println!("{}.{key}: {value}", self.section);
        let _ = std::io::stdout().flush();
    }

    /// The name of a result (`cuGetErrorName`), or `CUresult N`.
    fn name(&self, a: Ans) -> String {
        let r = match a {
            Ans::NoSymbol => return "no such entry point".into(),
            Ans::Code(r) => r,
        };
        let mut s: *const c_char = std::ptr::null();
        match call!(self, "cuGetErrorName": fn(Res, *mut *const c_char) (r, &mut s)) {
            // SAFETY: a name cuGetErrorName returns is static and NUL-terminated.
            Ans::Code(0) if !s.is_null() => {
                unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned()
            }
            _ => format!("CUresult {r}"),
        }
    }

    fn ok(a: Ans) -> bool {
        a == Ans::Code(0)
    }

    /// Says a call's result under `key`.
    fn res(&self, key: &str, a: Ans) -> bool {
        self.say(key, self.name(a));
        Self::ok(a)
    }

    fn init(&self) -> bool {
        Self::ok(call!(self, "cuInit": fn(c_uint) (0)))
    }

    /// Device 0's primary context, made current in this thread.
    fn context(&self) -> *mut c_void {
        let mut ctx = std::ptr::null_mut();
        if !self.init()
            || !Self::ok(
                call!(self, "cuDevicePrimaryCtxRetain": fn(*mut *mut c_void, c_int) (&mut ctx, 0)),
            )
            || !Self::ok(call!(self, "cuCtxSetCurrent": fn(*mut c_void) (ctx)))
        {
            self.say("setup", "no context");
            std::process::exit(2);
        }
        ctx
    }

    fn alloc(&self, size: u64) -> Result<u64, Ans> {
        let mut p = 0u64;
        match call!(self, "cuMemAlloc_v2": fn(*mut u64, usize) (&mut p, size as usize)) {
            Ans::Code(0) => Ok(p),
            e => Err(e),
        }
    }

    fn must_alloc(&self, size: u64) -> u64 {
        self.alloc(size).unwrap_or_else(|e| {
            self.say(&format!("setup-alloc-{size}"), self.name(e));
            std::process::exit(2)
        })
    }

    fn free(&self, p: u64) -> Ans {
        call!(self, "cuMemFree_v2": fn(u64) (p))
    }

    fn range(&self, p: u64) -> Result<(u64, u64), Ans> {
        let (mut base, mut size) = (0u64, 0usize);
        match call!(self, "cuMemGetAddressRange_v2": fn(*mut u64, *mut usize, u64)
            (&mut base, &mut size, p))
        {
            Ans::Code(0) => Ok((base, size as u64)),
            e => Err(e),
        }
    }

    /// `cuPointerGetAttribute` of an attribute that CUDA writes as a `T` (an integer).
    fn attr<T: Default>(&self, attr: c_uint, p: u64) -> Result<T, Ans> {
        let mut v = T::default();
        match call!(self, "cuPointerGetAttribute": fn(*mut c_void, c_uint, u64)
            ((&mut v as *mut T).cast(), attr, p))
        {
            Ans::Code(0) => Ok(v),
            e => Err(e),
        }
    }

    fn attr_u64(&self, attr: c_uint, p: u64) -> Result<u64, Ans> {
        self.attr(attr, p)
    }

    fn attr_u32(&self, attr: c_uint, p: u64) -> Result<u32, Ans> {
        self.attr(attr, p)
    }

    /// Every pointer attribute number but P2P_TOKENS (1 to 22) of `ptr` in an allocation at
    /// `base`: a small value as itself, an address by what it is, and how many bytes the
    /// call wrote (into a buffer filled with a pattern beforehand).
    fn all_attributes(&self, prefix: &str, ptr: u64, base: u64) {
        for attr in (1..=22).filter(|&a| a != 5) {
            let mut buf = [0xa5u8; 16];
            let r = call!(self, "cuPointerGetAttribute": fn(*mut c_void, c_uint, u64)
                (buf.as_mut_ptr().cast(), attr, ptr));
            let key = format!("{prefix}-attribute-{attr}");
            if !Self::ok(r) {
                self.say(&key, self.name(r));
                continue;
            }
            let width = [1usize, 2, 4, 8, 16]
                .into_iter()
                .find(|&w| buf[w..].iter().all(|&b| b == 0xa5))
                .unwrap_or(16);
            let mut v = [0u8; 8];
            v[..width.min(8)].copy_from_slice(&buf[..width.min(8)]);
            let v = u64::from_le_bytes(v);
            // BUFFER_ID and MEMORY_BLOCK_ID: identifiers, whose numbers mean nothing.
            let id = attr == 7 || attr == 20;
            let shown = match v {
                0 if id => "zero".to_string(),
                _ if id => "nonzero".to_string(),
                x if x == ptr => "the pointer".to_string(),
                x if x == base => "the allocation's base".to_string(),
                x if x < 1 << 32 => x.to_string(),
                _ => "another address".to_string(),
            };
            self.say(&key, format!("{shown} ({width} bytes)"));
        }
    }

    fn memset(&self, p: u64, v: u8, n: u64) -> Ans {
        call!(self, "cuMemsetD8_v2": fn(u64, u8, usize) (p, v, n as usize))
    }

    fn htod(&self, p: u64, src: &[u8]) -> Ans {
        call!(self, "cuMemcpyHtoD_v2": fn(u64, *const c_void, usize)
            (p, src.as_ptr().cast(), src.len()))
    }

    fn dtoh(&self, dst: &mut [u8], p: u64) -> Ans {
        call!(self, "cuMemcpyDtoH_v2": fn(*mut c_void, u64, usize)
            (dst.as_mut_ptr().cast(), p, dst.len()))
    }

    /// `Ok(v)` as `v` through `show`, an error as its name.
    fn either<T>(&self, key: &str, r: Result<T, Ans>, show: impl FnOnce(T) -> String) {
        match r {
            Ok(v) => self.say(key, show(v)),
            Err(e) => self.say(key, self.name(e)),
        }
    }
}

fn yes(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

/// The largest power of two (up to 2 MiB) that divides `p`, as a size.
fn alignment(p: u64) -> String {
    let a = if p == 0 {
        M2
    } else {
        (1u64 << p.trailing_zeros()).min(M2)
    };
    match a {
        a if a >= 1 << 20 => format!("{} MiB", a >> 20),
        a if a >= 1 << 10 => format!("{} KiB", a >> 10),
        a => format!("{a} B"),
    }
}

// --- Sections --------------------------------------------------------------------------------

fn init(p: &Probe) {
    let mut x = 0u64;
    p.res(
        "alloc-before-cuInit",
        call!(p, "cuMemAlloc_v2": fn(*mut u64, usize) (&mut x, 4096)),
    );
    let mut n: c_int = -1;
    p.res(
        "device-count-before-cuInit",
        call!(p, "cuDeviceGetCount": fn(*mut c_int) (&mut n)),
    );
    p.res("cuInit-flags-1", call!(p, "cuInit": fn(c_uint) (1)));
    p.res("cuInit", call!(p, "cuInit": fn(c_uint) (0)));
    p.res("cuInit-again", call!(p, "cuInit": fn(c_uint) (0)));
    if p.res(
        "cuDeviceGetCount",
        call!(p, "cuDeviceGetCount": fn(*mut c_int) (&mut n)),
    ) {
        p.say("device-count-at-least-1", yes(n >= 1));
    }
    let mut d: c_int = -1;
    p.res(
        "cuDeviceGet-count",
        call!(p, "cuDeviceGet": fn(*mut c_int, c_int) (&mut d, n)),
    );
    p.res(
        "cuDeviceGet-minus-1",
        call!(p, "cuDeviceGet": fn(*mut c_int, c_int) (&mut d, -1)),
    );
    if p.res(
        "cuDeviceGet-0",
        call!(p, "cuDeviceGet": fn(*mut c_int, c_int) (&mut d, 0)),
    ) {
        p.say("device-0-handle", d);
    }
    let mut name = [0u8; 256];
    if p.res(
        "cuDeviceGetName",
        call!(p, "cuDeviceGetName": fn(*mut c_char, c_int, c_int)
            (name.as_mut_ptr().cast(), name.len() as c_int, 0)),
    ) {
        let s = CStr::from_bytes_until_nul(&name).map_or("(unterminated)".into(), |s| {
            s.to_string_lossy().into_owned()
        });
        p.say("device-name", s);
    }
    let mut short = [0xffu8; 8];
    if p.res(
        "cuDeviceGetName-8-bytes",
        call!(p, "cuDeviceGetName": fn(*mut c_char, c_int, c_int)
            (short.as_mut_ptr().cast(), 8, 0)),
    ) {
        p.say("device-name-8-bytes-terminated", yes(short.contains(&0)));
    }
    let mut v: c_int = 0;
    if p.res(
        "cuDriverGetVersion",
        call!(p, "cuDriverGetVersion": fn(*mut c_int) (&mut v)),
    ) {
        p.say("driver-version-major", v / 1000);
    }
    p.res(
        "cuDriverGetVersion-null",
        call!(p, "cuDriverGetVersion": fn(*mut c_int) (std::ptr::null_mut())),
    );
    let mut ctx: *mut c_void = std::ptr::dangling_mut::<c_void>();
    if p.res(
        "cuCtxGetCurrent-none",
        call!(p, "cuCtxGetCurrent": fn(*mut *mut c_void) (&mut ctx)),
    ) {
        p.say("current-context-is-null", yes(ctx.is_null()));
    }
    p.res(
        "alloc-without-context",
        call!(p, "cuMemAlloc_v2": fn(*mut u64, usize) (&mut x, 4096)),
    );
    p.res(
        "synchronize-without-context",
        call!(p, "cuCtxSynchronize": fn() ()),
    );
    let ctx = p.context();
    let mut cur = std::ptr::null_mut();
    call!(p, "cuCtxGetCurrent": fn(*mut *mut c_void) (&mut cur));
    p.say("current-context-is-primary", yes(cur == ctx));
    let mut dev: c_int = -1;
    if p.res(
        "cuCtxGetDevice",
        call!(p, "cuCtxGetDevice": fn(*mut c_int) (&mut dev)),
    ) {
        p.say("context-device", dev);
    }
    p.res("cuCtxSynchronize", call!(p, "cuCtxSynchronize": fn() ()));
    let (mut free, mut total) = (0usize, 0usize);
    if p.res(
        "cuMemGetInfo",
        call!(p, "cuMemGetInfo_v2": fn(*mut usize, *mut usize) (&mut free, &mut total)),
    ) {
        p.say("free-at-most-total", yes(free <= total && total > 0));
    }
    p.res("alloc-0-bytes", p.alloc(0).err().unwrap_or(Ans::Code(0)));
    p.res(
        "alloc-1-PiB",
        p.alloc(1 << 50)
            .map(|a| p.free(a))
            .err()
            .unwrap_or(Ans::Code(0)),
    );
    p.res(
        "alloc-null-out",
        call!(p, "cuMemAlloc_v2": fn(*mut u64, usize) (std::ptr::null_mut(), 4096)),
    );
}

/// Every attribute number from 0 to one past `CU_DEVICE_ATTRIBUTE_MAX`, and a device that
/// does not exist.
fn attributes(p: &Probe) {
    p.context();
    for a in 0..=ATTRIBUTE_PROBE_END {
        let mut v: c_int = 0;
        let r = call!(p, "cuDeviceGetAttribute": fn(*mut c_int, c_uint, c_int) (&mut v, a, 0));
        p.say(
            &format!("{a}"),
            if Probe::ok(r) {
                v.to_string()
            } else {
                p.name(r)
            },
        );
    }
    let mut v: c_int = 0;
    p.res(
        "device-99",
        call!(p, "cuDeviceGetAttribute": fn(*mut c_int, c_uint, c_int) (&mut v, 1, 99)),
    );
}

/// cuMemGetAddressRange over allocations of several sizes: the base's alignment, the size
/// reported, the last byte and the byte past the end, and where small allocations lie.
fn ranges(p: &Probe) {
    p.context();
    for size in [
        1,
        4095,
        4096,
        K64 - 1,
        K64,
        K64 + 1,
        3 * K64 + 10,
        M2 - 1,
        M2,
        M2 + 1,
        5 * M2 + 12345,
    ] {
        let a = p.must_alloc(size);
        p.say(&format!("{size}.base-alignment"), alignment(a));
        p.either(&format!("{size}.range-of-base"), p.range(a), |(b, s)| {
            format!("base {}, size {s}", if b == a { "same" } else { "other" })
        });
        p.either(
            &format!("{size}.range-of-last-byte"),
            p.range(a + size - 1),
            |(b, s)| format!("base {}, size {s}", if b == a { "same" } else { "other" }),
        );
        p.either(
            &format!("{size}.range-of-byte-past-end"),
            p.range(a + size),
            |(b, _)| {
                (if b == a {
                    "same allocation"
                } else {
                    "another allocation"
                })
                .into()
            },
        );
        p.free(a);
    }
    // Two allocations in a row: do they share a 2 MiB block, and how far apart are they?
    for size in [4096, K64, 512 << 10, 1 << 20, M2 - K64, M2] {
        let (a, b) = (p.must_alloc(size), p.must_alloc(size));
        p.say(&format!("pair-{size}-same-2MiB"), yes(a / M2 == b / M2));
        p.say(
            &format!("pair-{size}-second-minus-first"),
            b.wrapping_sub(a) as i64,
        );
        p.free(b);
        p.free(a);
    }
    // Where allocations land behind one whose size is no multiple of 2 MiB: still on a
    // 2 MiB boundary (a pool block of small buffers, a large allocation)?
    let odd = p.must_alloc(M2 + 1);
    for size in [4096, M2] {
        let a = p.must_alloc(size);
        p.say(
            &format!("after-{}.{size}.base-alignment", M2 + 1),
            alignment(a),
        );
        p.free(a);
    }
    p.free(odd);
    p.either("null", p.range(0), |_| "answered".into());
    let local = 0u8;
    p.either("host-stack", p.range(&local as *const u8 as u64), |_| {
        "answered".into()
    });
    let a = p.must_alloc(K64);
    p.free(a);
    p.either("freed", p.range(a), |_| "answered".into());
    let a = p.must_alloc(K64);
    p.res(
        "null-outputs",
        call!(p, "cuMemGetAddressRange_v2": fn(*mut u64, *mut usize, u64)
            (std::ptr::null_mut(), std::ptr::null_mut(), a)),
    );
    p.free(a);
}

/// BUFFER_ID: stable over an allocation, an error once freed, new after reallocation.
fn buffer_id(p: &Probe) {
    const BUFFER_ID: c_uint = 7;
    p.context();
    for size in [4096, 2 * K64, M2, 4 * M2] {
        let a = p.must_alloc(size);
        let id = p.attr_u64(BUFFER_ID, a);
        p.either(&format!("{size}.id"), id, |v| {
            (if v == 0 { "zero" } else { "nonzero" }).into()
        });
        p.either(
            &format!("{size}.id-of-last-byte"),
            p.attr_u64(BUFFER_ID, a + size - 1),
            |v| (if Ok(v) == id { "same" } else { "different" }).into(),
        );
        p.res(&format!("{size}.free"), p.free(a));
        p.either(
            &format!("{size}.id-after-free"),
            p.attr_u64(BUFFER_ID, a),
            |v| (if Ok(v) == id { "same" } else { "different" }).into(),
        );
        let b = p.must_alloc(size);
        p.say(&format!("{size}.realloc-same-address"), yes(b == a));
        p.either(
            &format!("{size}.realloc-id"),
            p.attr_u64(BUFFER_ID, b),
            |v| match id {
                Ok(old) if v == old => "same as the freed one".into(),
                Ok(old) if v > old => "greater than the freed one".into(),
                Ok(_) => "less than the freed one".into(),
                Err(_) => "answered".into(),
            },
        );
        p.free(b);
    }
    let (a, b) = (p.must_alloc(K64), p.must_alloc(K64));
    match (p.attr_u64(BUFFER_ID, a), p.attr_u64(BUFFER_ID, b)) {
        (Ok(x), Ok(y)) => p.say("two-live-ids-differ", yes(x != y)),
        _ => p.say("two-live-ids-differ", "not answered"),
    }
    p.free(b);
    p.free(a);
    let mut host: *mut c_void = std::ptr::null_mut();
    if p.res(
        "cuMemAllocHost",
        call!(p, "cuMemAllocHost_v2": fn(*mut *mut c_void, usize) (&mut host, 8192)),
    ) {
        p.either("host-alloc-id", p.attr_u64(BUFFER_ID, host as u64), |v| {
            (if v == 0 { "zero" } else { "nonzero" }).into()
        });
        p.res(
            "cuMemFreeHost",
            call!(p, "cuMemFreeHost": fn(*mut c_void) (host)),
        );
    }
    let local = 0u8;
    p.either(
        "host-stack-id",
        p.attr_u64(BUFFER_ID, &local as *const u8 as u64),
        |_| "answered".into(),
    );
}

/// P2P_TOKENS (`CUDA_POINTER_ATTRIBUTE_P2P_TOKENS`: a u64 and a u32).
fn tokens(p: &Probe) {
    const P2P_TOKENS: c_uint = 5;
    #[repr(C)]
    #[derive(Clone, Copy, Default, PartialEq, Eq)]
    struct Tokens {
        p2p: u64,
        va_space: c_uint,
    }
    let get = |ptr: u64| {
        let mut t = Tokens::default();
        match call!(p, "cuPointerGetAttribute": fn(*mut c_void, c_uint, u64)
            ((&mut t as *mut Tokens).cast(), P2P_TOKENS, ptr))
        {
            Ans::Code(0) => Ok(t),
            e => Err(e),
        }
    };
    p.context();
    let (a, b) = (p.must_alloc(M2), p.must_alloc(K64));
    let ta = get(a);
    p.either("of-allocation", ta, |t| {
        format!(
            "p2p {}, va-space {}",
            if t.p2p == 0 { "zero" } else { "nonzero" },
            if t.va_space == 0 { "zero" } else { "nonzero" }
        )
    });
    p.either("of-interior", get(a + 12345), |t| {
        (if Ok(t) == ta { "same" } else { "different" }).into()
    });
    p.either("of-another-allocation", get(b), |t| match ta {
        Ok(x) => format!(
            "p2p {}, va-space {}",
            if t.p2p == x.p2p { "same" } else { "different" },
            if t.va_space == x.va_space {
                "same"
            } else {
                "different"
            }
        ),
        Err(_) => "answered".into(),
    });
    p.free(b);
    p.free(a);
    p.either("of-freed", get(a), |_| "answered".into());
    let local = 0u8;
    p.either("of-host-stack", get(&local as *const u8 as u64), |_| {
        "answered".into()
    });
}

/// The other pointer attributes of device memory, host memory and nothing.
fn pointer(p: &Probe) {
    let ctx = p.context();
    let a = p.must_alloc(3 * K64);
    let at = a + 1000;
    p.all_attributes("device", at, a);
    p.either("context", p.attr_u64(1, at), |v| {
        (if v == ctx as u64 { "current" } else { "other" }).into()
    });
    p.either("memory-type", p.attr_u32(2, at), |v| v.to_string());
    p.either("device-pointer", p.attr_u64(3, at), |v| {
        (if v == at { "the pointer" } else { "other" }).into()
    });
    p.either("host-pointer", p.attr_u64(4, at), |_| "answered".into());
    p.either("sync-memops-default", p.attr_u32(6, at), |v| v.to_string());
    let one: c_uint = 1;
    p.res(
        "set-sync-memops",
        call!(p, "cuPointerSetAttribute": fn(*const c_void, c_uint, u64)
            ((&one as *const c_uint).cast(), 6, at)),
    );
    p.either("sync-memops-after-set", p.attr_u32(6, at), |v| {
        v.to_string()
    });
    // "Querying [P2P_TOKENS] has a side effect of setting the attribute
    // CU_POINTER_ATTRIBUTE_SYNC_MEMOPS" (cuPointerGetAttribute's documentation).
    let b = p.must_alloc(K64);
    let mut tokens = [0u64; 2];
    p.res(
        "p2p-tokens-then-sync-memops",
        call!(p, "cuPointerGetAttribute": fn(*mut c_void, c_uint, u64)
            (tokens.as_mut_ptr().cast(), 5, b)),
    );
    p.either("sync-memops-after-p2p-tokens", p.attr_u32(6, b), |v| {
        v.to_string()
    });
    p.free(b);
    p.res(
        "set-buffer-id",
        call!(p, "cuPointerSetAttribute": fn(*const c_void, c_uint, u64)
            ((&one as *const c_uint).cast(), 7, at)),
    );
    p.either("is-managed", p.attr_u32(8, at), |v| v.to_string());
    p.either("device-ordinal", p.attr_u32(9, at), |v| v.to_string());
    p.either("attribute-99", p.attr_u64(99, at), |_| "answered".into());
    p.res(
        "null-data",
        call!(p, "cuPointerGetAttribute": fn(*mut c_void, c_uint, u64)
            (std::ptr::null_mut(), 2, at)),
    );
    let local = 0u8;
    let host = &local as *const u8 as u64;
    p.either("host-stack-memory-type", p.attr_u32(2, host), |v| {
        v.to_string()
    });
    // cuPointerGetAttributes of memory CUDA does not know: every attribute its null value.
    let both = |ptr: u64| {
        let (mut ty, mut dp) = (7u32, 7u64);
        let attrs = [2u32, 3];
        let mut data = [
            (&mut ty as *mut u32).cast::<c_void>(),
            (&mut dp as *mut u64).cast(),
        ];
        let r = call!(p, "cuPointerGetAttributes": fn(c_uint, *const c_uint, *mut *mut c_void, u64)
            (2, attrs.as_ptr(), data.as_mut_ptr(), ptr));
        (r, ty, dp)
    };
    let (r, ty, dp) = both(host);
    if p.res("attributes-of-host-stack", r) {
        p.say(
            "attributes-of-host-stack-values",
            format!("memory-type {ty}, device-pointer {dp}"),
        );
    }
    let (r, ty, dp) = both(at);
    if p.res("attributes-of-device", r) {
        p.say(
            "attributes-of-device-values",
            format!("memory-type {ty}, device-pointer {}", yes(dp == at)),
        );
    }
    p.free(a);
    p.either("memory-type-of-freed", p.attr_u32(2, at), |v| v.to_string());
    let mut host: *mut c_void = std::ptr::null_mut();
    if Probe::ok(call!(p, "cuMemAllocHost_v2": fn(*mut *mut c_void, usize) (&mut host, 8192))) {
        let h = host as u64 + 100;
        p.either("host-alloc-memory-type", p.attr_u32(2, h), |v| {
            v.to_string()
        });
        p.either("host-alloc-host-pointer", p.attr_u64(4, h), |v| {
            (if v == h { "the pointer" } else { "other" }).into()
        });
        p.either("host-alloc-device-pointer", p.attr_u64(3, h), |v| {
            (if v == h { "the pointer" } else { "other" }).into()
        });
        p.either("host-alloc-p2p-tokens", p.attr_u64(5, h), |_| {
            "answered".into()
        });
        p.all_attributes("host-alloc", h, host as u64);
        call!(p, "cuMemFreeHost": fn(*mut c_void) (host));
    }
}

/// cuMemsetD8: whole allocations, unaligned pieces, zero bytes, across the end, freed memory.
fn memset(p: &Probe) {
    p.context();
    let size = 3 * K64 + 100;
    let a = p.must_alloc(size);
    p.res("whole", p.memset(a, 0xa5, size));
    let mut back = vec![0u8; size as usize];
    p.res("read-back", p.dtoh(&mut back, a));
    p.say("whole-bytes-set", yes(back.iter().all(|&b| b == 0xa5)));
    p.res("unaligned", p.memset(a + 3, 0x5a, 1001));
    p.dtoh(&mut back, a);
    let expect = |i: usize| if (3..1004).contains(&i) { 0x5a } else { 0xa5 };
    p.say(
        "unaligned-exact",
        yes(back.iter().enumerate().all(|(i, &b)| b == expect(i))),
    );
    p.res("zero-bytes", p.memset(a, 0, 0));
    p.res("last-byte", p.memset(a + size - 1, 1, 1));
    p.res("across-the-end", p.memset(a + size - 10, 2, 20));
    p.dtoh(&mut back, a);
    p.say(
        "across-the-end-left-allocation",
        if back[size as usize - 10..size as usize - 1]
            .iter()
            .all(|&b| b == 2)
        {
            "written to the end"
        } else if back[size as usize - 1] == 1 {
            "untouched"
        } else {
            "partly written"
        },
    );
    p.res("host-stack", {
        let local = [0u8; 16];
        p.memset(local.as_ptr() as u64, 3, 16)
    });
    p.res("null", p.memset(0, 3, 16));
    p.free(a);
    p.res("freed", p.memset(a, 3, 16));
}

/// Copies inside and across an allocation's end, and of freed memory.
fn copy(p: &Probe) {
    p.context();
    let a = p.must_alloc(2 * K64);
    let data: Vec<u8> = (0..2 * K64).map(|i| (i * 7 + 1) as u8).collect();
    p.res("htod-whole", p.htod(a, &data));
    let mut back = vec![0u8; data.len()];
    p.res("dtoh-whole", p.dtoh(&mut back, a));
    p.say("round-trip-equal", yes(back == data));
    p.res("htod-across-end", p.htod(a + 2 * K64 - 8, &data[..16]));
    p.res("dtoh-across-end", p.dtoh(&mut back[..16], a + 2 * K64 - 8));
    p.res("htod-zero-bytes", p.htod(a, &[]));
    let b = p.must_alloc(2 * K64);
    p.res(
        "dtod-whole",
        call!(p, "cuMemcpy": fn(u64, u64, usize) (b, a, (2 * K64) as usize)),
    );
    back.fill(0);
    p.dtoh(&mut back, b);
    p.say("dtod-equal", yes(back == data));
    p.free(b);
    p.free(a);
    p.res("dtoh-freed", p.dtoh(&mut back[..16], a));
    p.res("htod-freed", p.htod(a, &data[..16]));
}

/// cuMemFree's answers to pointers it did not return.
fn free(p: &Probe) {
    p.context();
    p.res("null", p.free(0));
    let a = p.must_alloc(2 * K64);
    p.res("interior", p.free(a + 4096));
    p.either("after-interior-free", p.range(a), |(b, s)| {
        format!("base {}, size {s}", if b == a { "same" } else { "other" })
    });
    p.res("base", p.free(a));
    p.res("twice", p.free(a));
    let local = 0u8;
    p.res("host-stack", p.free(&local as *const u8 as u64));
    let mut host: *mut c_void = std::ptr::null_mut();
    if Probe::ok(call!(p, "cuMemAllocHost_v2": fn(*mut *mut c_void, usize) (&mut host, 8192))) {
        p.res("host-alloc-with-cuMemFree", p.free(host as u64));
        p.res(
            "host-alloc-with-cuMemFreeHost",
            call!(p, "cuMemFreeHost": fn(*mut c_void) (host)),
        );
    }
}

/// A thread that never made a context current: its frees, allocations, queries and copies.
fn threads(p: &Probe) {
    p.context();
    let a = p.must_alloc(2 * K64);
    let b = p.must_alloc(2 * K64);
    p.memset(b, 9, 2 * K64);
    let lib = &p.lib;
    std::thread::scope(|s| {
        s.spawn(|| {
            let t = Probe {
                lib: unsafe_clone(lib),
                section: "threads",
            };
            let mut ctx: *mut c_void = std::ptr::dangling_mut::<c_void>();
            call!(t, "cuCtxGetCurrent": fn(*mut *mut c_void) (&mut ctx));
            t.say("other-thread-has-no-context", yes(ctx.is_null()));
            t.either("other-thread-range", t.range(a + 5), |(base, s)| {
                format!(
                    "base {}, size {s}",
                    if base == a { "same" } else { "other" }
                )
            });
            t.either("other-thread-buffer-id", t.attr_u64(7, a), |v| {
                (if v == 0 { "zero" } else { "nonzero" }).into()
            });
            let mut one = [0u8; 1];
            t.res("other-thread-dtoh", t.dtoh(&mut one, b));
            t.say("other-thread-dtoh-value", one[0]);
            t.res("other-thread-memset", t.memset(b, 4, 16));
            let one: c_uint = 1;
            t.res(
                "other-thread-set-sync-memops",
                call!(t, "cuPointerSetAttribute": fn(*const c_void, c_uint, u64)
                    ((&one as *const c_uint).cast(), 6, b)),
            );
            t.res("other-thread-free", t.free(a));
            t.either("other-thread-alloc", t.alloc(K64), |x| {
                t.free(x);
                "allocated".into()
            });
        });
    });
    p.either("range-after-other-thread-free", p.range(a), |_| {
        "answered".into()
    });
    p.res("free-after-other-thread-free", p.free(a));
    p.free(b);
}

/// A second handle on the same library for another thread (dlopen counts references).
fn unsafe_clone(_lib: &libloading::Library) -> libloading::Library {
    // SAFETY: libcuda.so.1 is loaded already; this takes another reference to it.
    unsafe { libloading::Library::new("libcuda.so.1") }.expect("libcuda.so.1 is loaded")
}

/// The VMM calls: granularity, create, reserve, map, access, and what each refuses.
fn vmm(p: &Probe) {
    use nvsim::cuda_vmm::{AccessDesc, Prop, ACCESS_RW};
    p.context();
    let prop = Prop::device(0);
    let mut g = 0usize;
    for (key, flag) in [
        ("granularity-minimum", 0u32),
        ("granularity-recommended", 1),
    ] {
        if p.res(
            key,
            call!(p, "cuMemGetAllocationGranularity": fn(*mut usize, *const Prop, c_uint)
                (&mut g, &prop, flag)),
        ) {
            p.say(&format!("{key}-bytes"), g);
        }
    }
    let g = if g == 0 { M2 as usize } else { g };
    let mut h = 0u64;
    p.res(
        "create-half-granule",
        call!(p, "cuMemCreate": fn(*mut u64, usize, *const Prop, u64) (&mut h, g / 2, &prop, 0)),
    );
    p.res(
        "create-flags-1",
        call!(p, "cuMemCreate": fn(*mut u64, usize, *const Prop, u64) (&mut h, g, &prop, 1)),
    );
    if !p.res(
        "create",
        call!(p, "cuMemCreate": fn(*mut u64, usize, *const Prop, u64) (&mut h, 2 * g, &prop, 0)),
    ) {
        return;
    }
    let mut va = 0u64;
    p.res(
        "reserve-unaligned-size",
        call!(p, "cuMemAddressReserve": fn(*mut u64, usize, usize, u64, u64)
            (&mut va, g + 4096, 0, 0, 0)),
    );
    if !p.res(
        "reserve",
        call!(p, "cuMemAddressReserve": fn(*mut u64, usize, usize, u64, u64)
            (&mut va, 4 * g, 0, 0, 0)),
    ) {
        return;
    }
    p.say("reserve-base-alignment", alignment(va));
    p.either("range-of-reserved-unmapped", p.range(va), |_| {
        "answered".into()
    });
    p.res("memset-reserved-unmapped", p.memset(va, 1, 16));
    p.res(
        "map-unaligned-offset",
        call!(p, "cuMemMap": fn(u64, usize, usize, u64, u64) (va, g, 4096, h, 0)),
    );
    p.res(
        "map-second-granule-of-allocation",
        call!(p, "cuMemMap": fn(u64, usize, usize, u64, u64) (va, g, g, h, 0)),
    );
    p.res(
        "map-past-the-allocation",
        call!(p, "cuMemMap": fn(u64, usize, usize, u64, u64) (va, 3 * g, 0, h, 0)),
    );
    p.res(
        "map-part-of-the-allocation",
        call!(p, "cuMemMap": fn(u64, usize, usize, u64, u64) (va, g, 0, h, 0)),
    );
    // The whole allocation at the reservation's second granule.
    if !p.res(
        "map-at-second-granule",
        call!(p, "cuMemMap": fn(u64, usize, usize, u64, u64) (va + g as u64, 2 * g, 0, h, 0)),
    ) {
        return;
    }
    p.res(
        "map-over-a-mapping",
        call!(p, "cuMemMap": fn(u64, usize, usize, u64, u64) (va + g as u64, 2 * g, 0, h, 0)),
    );
    p.res("memset-before-set-access", p.memset(va + g as u64, 1, 16));
    p.res(
        "set-access-unmapped-part",
        call!(p, "cuMemSetAccess": fn(u64, usize, *const AccessDesc, usize)
            (va, 3 * g, &ACCESS_RW, 1)),
    );
    p.res(
        "set-access",
        call!(p, "cuMemSetAccess": fn(u64, usize, *const AccessDesc, usize)
            (va + g as u64, 2 * g, &ACCESS_RW, 1)),
    );
    let m = va + g as u64;
    p.res("memset", p.memset(m, 0x3c, 2 * g as u64));
    let mut back = vec![0u8; 4096];
    p.res("read-back", p.dtoh(&mut back, m + 2 * g as u64 - 4096));
    p.res(
        "memset-across-the-end",
        p.memset(m + 2 * g as u64 - 8, 1, 16),
    );
    p.say("memset-bytes-set", yes(back.iter().all(|&b| b == 0x3c)));
    p.either("range-of-mapped", p.range(m + 100), |(b, s)| {
        format!(
            "base {}, size {}",
            if b == m {
                "the mapping"
            } else if b == va {
                "the reservation"
            } else {
                "other"
            },
            if s as usize == 2 * g {
                "the mapping's".to_string()
            } else {
                s.to_string()
            }
        )
    });
    p.either("buffer-id-of-mapped", p.attr_u64(7, m), |v| {
        (if v == 0 { "zero" } else { "nonzero" }).into()
    });
    p.either("memory-type-of-mapped", p.attr_u32(2, m), |v| v.to_string());
    p.all_attributes("mapped", m + 100, m);
    // SYNC_MEMOPS of VMM memory (UCX's issue 9895: NOT_SUPPORTED on driver 535), and the
    // context's flag a registration cache sets instead (cuCtxSetFlags, CUDA 12.1).
    let one: c_uint = 1;
    p.res(
        "set-sync-memops-of-mapped",
        call!(p, "cuPointerSetAttribute": fn(*const c_void, c_uint, u64)
            ((&one as *const c_uint).cast(), 6, m)),
    );
    let mut flags: c_uint = 0;
    if p.res(
        "ctx-get-flags",
        call!(p, "cuCtxGetFlags": fn(*mut c_uint) (&mut flags)),
    ) {
        p.res(
            "ctx-set-flags-sync-memops",
            call!(p, "cuCtxSetFlags": fn(c_uint) (flags | 0x80)),
        );
        let mut after: c_uint = 0;
        p.res(
            "ctx-get-flags-after-set",
            call!(p, "cuCtxGetFlags": fn(*mut c_uint) (&mut after)),
        );
        p.say(
            "ctx-sync-memops-after-set",
            if after & 0x80 != 0 { "set" } else { "clear" },
        );
        call!(p, "cuCtxSetFlags": fn(c_uint) (flags));
    }
    let mut tokens = [0u64; 2];
    if p.res(
        "p2p-tokens-of-mapped",
        call!(p, "cuPointerGetAttribute": fn(*mut c_void, c_uint, u64)
            (tokens.as_mut_ptr().cast(), 5, m)),
    ) {
        p.say(
            "p2p-tokens-of-mapped-values",
            format!(
                "p2p {}, va-space {}",
                if tokens[0] == 0 { "zero" } else { "nonzero" },
                if tokens[1] as u32 == 0 {
                    "zero"
                } else {
                    "nonzero"
                }
            ),
        );
    }
    p.res("free-mapped-with-cuMemFree", p.free(m));
    p.res(
        "release-while-mapped",
        call!(p, "cuMemRelease": fn(u64) (h)),
    );
    p.res("read-after-release-while-mapped", p.dtoh(&mut back, m));
    p.res(
        "unmap-half-granule",
        call!(p, "cuMemUnmap": fn(u64, usize) (m, g / 2)),
    );
    p.res(
        "unmap-one-of-two-granules",
        call!(p, "cuMemUnmap": fn(u64, usize) (m, g)),
    );
    p.res("unmap", call!(p, "cuMemUnmap": fn(u64, usize) (m, 2 * g)));
    p.either("range-after-unmap", p.range(m), |_| "answered".into());
    p.res("memset-after-unmap", p.memset(m, 1, 16));
    p.res(
        "unmap-again",
        call!(p, "cuMemUnmap": fn(u64, usize) (m, 2 * g)),
    );
    p.res("release-again", call!(p, "cuMemRelease": fn(u64) (h)));
    p.res(
        "address-free-part",
        call!(p, "cuMemAddressFree": fn(u64, usize) (va, g)),
    );
    p.res(
        "address-free",
        call!(p, "cuMemAddressFree": fn(u64, usize) (va, 4 * g)),
    );
    p.res(
        "address-free-again",
        call!(p, "cuMemAddressFree": fn(u64, usize) (va, 4 * g)),
    );
}

/// Memory of a context that ends: a created context destroyed, the primary context released.
fn context_end(p: &Probe) {
    if !p.init() {
        return;
    }
    let mut ctx = std::ptr::null_mut();
    if p.res(
        "create",
        call!(p, "cuCtxCreate_v2": fn(*mut *mut c_void, c_uint, c_int) (&mut ctx, 0, 0)),
    ) {
        let a = p.must_alloc(M2);
        // A VMM handle made in the context: what is left of it once the context ends.
        let prop = nvsim::cuda_vmm::Prop::device(0);
        let mut h = 0u64;
        let made = p.res(
            "vmm-create",
            call!(p, "cuMemCreate": fn(*mut u64, usize, *const nvsim::cuda_vmm::Prop, u64)
                (&mut h, M2 as usize, &prop, 0)),
        );
        p.res(
            "destroy",
            call!(p, "cuCtxDestroy_v2": fn(*mut c_void) (ctx)),
        );
        let mut cur: *mut c_void = std::ptr::dangling_mut::<c_void>();
        call!(p, "cuCtxGetCurrent": fn(*mut *mut c_void) (&mut cur));
        p.say("current-after-destroy-is-null", yes(cur.is_null()));
        p.either("range-after-destroy", p.range(a), |_| "answered".into());
        p.either("buffer-id-after-destroy", p.attr_u64(7, a), |_| {
            "answered".into()
        });
        p.context();
        p.either("range-after-destroy-in-primary", p.range(a), |_| {
            "answered".into()
        });
        p.res("free-after-destroy", p.free(a));
        if made {
            let mut va = 0u64;
            if p.res(
                "vmm-reserve-after-destroy",
                call!(p, "cuMemAddressReserve": fn(*mut u64, usize, usize, u64, u64)
                    (&mut va, M2 as usize, 0, 0, 0)),
            ) {
                if p.res(
                    "vmm-map-after-destroy",
                    call!(p, "cuMemMap": fn(u64, usize, usize, u64, u64) (va, M2 as usize, 0, h, 0)),
                ) {
                    call!(p, "cuMemUnmap": fn(u64, usize) (va, M2 as usize));
                }
                call!(p, "cuMemAddressFree": fn(u64, usize) (va, M2 as usize));
            }
            p.res(
                "vmm-release-after-destroy",
                call!(p, "cuMemRelease": fn(u64) (h)),
            );
        }
    }
    let mut prim = std::ptr::null_mut();
    call!(p, "cuDevicePrimaryCtxRetain": fn(*mut *mut c_void, c_int) (&mut prim, 0));
    let a = p.must_alloc(M2);
    // Two retains (context() and the one above): two releases end the primary context.
    for i in 1..=2 {
        p.res(
            &format!("primary-release-{i}"),
            call!(p, "cuDevicePrimaryCtxRelease_v2": fn(c_int) (0)),
        );
    }
    p.either("range-after-primary-release", p.range(a), |_| {
        "answered".into()
    });
    p.either("buffer-id-after-primary-release", p.attr_u64(7, a), |_| {
        "answered".into()
    });
    p.context();
    p.either("range-in-new-primary", p.range(a), |_| "answered".into());
    p.res("free-in-new-primary", p.free(a));
}

// --- Driver ----------------------------------------------------------------------------------

/// `--cuda-probe-section NAME`: one section, in this process.
pub fn section(name: &str) -> Result<(), String> {
    let (section, f) = SECTIONS
        .iter()
        .find(|(n, _)| *n == name)
        .ok_or_else(|| format!("no section {name}"))?;
    // SAFETY: loading libcuda runs no initialisers with preconditions.
    let lib = unsafe { libloading::Library::new("libcuda.so.1") }
        .map_err(|e| format!("libcuda.so.1: {e}"))?;
    f(&Probe { lib, section });
    Ok(())
}

/// Every section, each in a child process; the answers in order, and each section's end.
fn probe_all() -> Result<Vec<(String, String)>, String> {
    let me = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut lines = Vec::new();
    for (name, _) in SECTIONS {
        let out = Command::new(&me)
            .args(["--cuda-probe-section", name])
            .output()
            .map_err(|e| format!("{}: {e}", me.display()))?;
        for l in String::from_utf8_lossy(&out.stdout).lines() {
            if let Some((k, v)) = l.split_once(": ") {
                lines.push((k.to_string(), v.to_string()));
            }
        }
        lines.push((format!("{name}.end"), out.status.to_string()));
    }
    Ok(lines)
}

/// Compares the simulation's answers with the recorded ones: the number of equal answers,
/// and a line for each unlisted difference and each listed key whose answers agree. Listed
/// differences that hold are told to `note`, and so are the answers of keys the record
/// predates (`unrecorded`), which are not compared; such a key the record answers fails.
fn compare(
    recorded: &BTreeMap<String, String>,
    ours: &BTreeMap<String, String>,
    listed: &BTreeMap<String, String>,
    unrecorded: &BTreeMap<String, String>,
    mut note: impl FnMut(String),
) -> (usize, Vec<String>) {
    let mut failures = Vec::new();
    let mut same = 0;
    let keys: std::collections::BTreeSet<_> = recorded.keys().chain(ours.keys()).collect();
    for key in keys {
        let (real, sim) = (recorded.get(key), ours.get(key));
        if let Some(why) = unrecorded.get(key) {
            match real {
                None => note(format!(
                    "{key}: not recorded yet ({why}): simulation {sim:?}"
                )),
                Some(_) => failures.push(format!(
                    "{key}: listed as not recorded, but the record answers it"
                )),
            }
            continue;
        }
        match (real != sim, listed.get(key)) {
            (false, None) => same += 1,
            (false, Some(_)) => failures.push(format!(
                "{key}: listed as a difference, but both answer {sim:?}"
            )),
            (true, Some(why)) => note(format!(
                "{key}: known difference ({why}): CUDA {real:?}, simulation {sim:?}"
            )),
            (true, None) => failures.push(format!(
                "{key}: CUDA answers {real:?}, the simulation {sim:?}"
            )),
        }
    }
    for key in listed
        .keys()
        .filter(|k| !recorded.contains_key(*k) && !ours.contains_key(*k))
    {
        failures.push(format!("{key}: listed, but neither side answers it"));
    }
    (same, failures)
}

fn parse(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .filter_map(|l| l.split_once(": "))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

/// `--cuda-probe [--against RECORDED [--differences LIST] [--not-recorded LIST]]`.
pub fn run(args: &[String]) -> Result<(), String> {
    // SAFETY: as in `section`; only to find out whether there is a library at all.
    if let Err(e) = unsafe { libloading::Library::new("libcuda.so.1") } {
        return Err(format!("no CUDA driver library: {e}"));
    }
    let answers = probe_all()?;
    let Some(at) = args.iter().position(|a| a == "--against") else {
        for (k, v) in &answers {
            println!("{k}: {v}");
        }
        return Ok(());
    };
    let read = |i: usize| -> Result<String, String> {
        let path = args
            .get(i)
            .ok_or("--against, --differences and --not-recorded take a file")?;
        std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))
    };
    let recorded = parse(&read(at + 1)?);
    let list = |flag: &str| match args.iter().position(|a| a == flag) {
        Some(i) => read(i + 1).map(|t| parse(&t)),
        None => Ok(BTreeMap::new()),
    };
    let (listed, unrecorded) = (list("--differences")?, list("--not-recorded")?);
    let ours: BTreeMap<_, _> = answers.into_iter().collect();
    let (same, failures) = compare(&recorded, &ours, &listed, &unrecorded, |line| {
        println!("{line}")
    });
    println!(
        "{same} answers the same as CUDA's, {} listed differences",
        listed.len()
    );
    for f in &failures {
        println!("DIFFERS {f}");
    }
    if failures.is_empty() {
        println!("@@ RESULT PASS {RESULT}");
        Ok(())
    } else {
        println!(
            "@@ RESULT FAIL {RESULT} {} answers differ from CUDA's",
            failures.len()
        );
        Err(format!("{} answers differ from CUDA's", failures.len()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compare_fails_unlisted_and_stale_differences() {
        let real = parse("# a comment\na.x: 1\na.y: 2\na.z: 3\n");
        let sim = parse("a.x: 1\na.y: 5\na.z: 3\na.w: 4\n");
        let none = BTreeMap::new();
        let (same, failures) = compare(&real, &sim, &none, &none, |_| {});
        assert_eq!(same, 2);
        assert_eq!(failures.len(), 2, "{failures:?}");
        assert!(failures[0].starts_with("a.w: CUDA answers None"));
        assert!(failures[1].starts_with("a.y: CUDA answers Some(\"2\")"));
        let listed = parse("a.y: why\na.w: why\na.x: stale\na.v: gone\n");
        let mut notes = Vec::new();
        let (same, failures) = compare(&real, &sim, &listed, &none, |n| notes.push(n));
        assert_eq!((same, notes.len()), (1, 2));
        assert_eq!(
            failures,
            [
                "a.x: listed as a difference, but both answer Some(\"1\")",
                "a.v: listed, but neither side answers it"
            ]
        );
    }

    #[test]
    fn unrecorded_keys_are_shown_until_the_record_has_them() {
        let real = parse("a.x: 1\n");
        let sim = parse("a.x: 1\na.new: 7\n");
        let none = BTreeMap::new();
        let unrecorded = parse("a.new: probed since\n");
        let mut notes = Vec::new();
        let (same, failures) = compare(&real, &sim, &none, &unrecorded, |n| notes.push(n));
        assert_eq!(
            (same, failures.len(), notes.len()),
            (1, 0, 1),
            "{failures:?}"
        );
        let (_, failures) = compare(&real, &sim, &none, &none, |_| {});
        assert_eq!(failures.len(), 1, "unlisted new key: {failures:?}");
        let recorded_now = parse("a.x: 1\na.new: 7\n");
        let (_, failures) = compare(&recorded_now, &sim, &none, &unrecorded, |_| {});
        assert_eq!(
            failures,
            ["a.new: listed as not recorded, but the record answers it"]
        );
    }

    #[test]
    fn alignment_is_capped_at_2_mib() {
        assert_eq!(alignment(0), "2 MiB");
        assert_eq!(alignment(3 << 21), "2 MiB");
        assert_eq!(alignment(0x3000), "4 KiB");
        assert_eq!(alignment(0x10_0100), "256 B");
    }

    /// A file of `tests/cuda-trace/`, parsed.
    fn read(file: &str) -> BTreeMap<String, String> {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/cuda-trace/");
        parse(&std::fs::read_to_string(format!("{root}{file}")).unwrap())
    }

    #[test]
    fn the_record_parses_and_lists_only_its_own_keys() {
        let record = read("h100-580.159.04.txt");
        assert!(record.len() > 400, "{} answers", record.len());
        for (name, _) in SECTIONS {
            assert_eq!(
                record.get(&format!("{name}.end")).map(String::as_str),
                Some("exit status: 0"),
                "section {name}"
            );
        }
        for key in read("sim-differences.txt").keys() {
            assert!(
                record.contains_key(key),
                "listed key {key} is not in the record"
            );
        }
        for key in read("not-recorded.txt").keys() {
            assert!(
                !record.contains_key(key),
                "key {key}, listed as not recorded, is in the record"
            );
        }
    }

    /// The semantics libcuda-sim is held to are not one GPU model's: an H200 answered every
    /// item as the H100 did, except the attributes that name the hardware.
    #[test]
    fn the_h200_record_differs_from_the_h100_in_the_hardware_alone() {
        let (h100, h200) = (read("h100-580.159.04.txt"), read("h200-580.159.04.txt"));
        assert_eq!(
            h100.keys().collect::<Vec<_>>(),
            h200.keys().collect::<Vec<_>>()
        );
        let differing: Vec<&str> = h100
            .iter()
            .filter(|(k, v)| h200[*k] != **v)
            .map(|(k, _)| k.as_str())
            .collect();
        // Name, memory clock, bus width, L2 size, persisting L2 limit, PCI device and
        // subsystem IDs.
        let hardware = [
            "attributes.108",
            "attributes.139",
            "attributes.140",
            "attributes.36",
            "attributes.37",
            "attributes.38",
            "init.device-name",
        ];
        assert_eq!(differing, hardware);
    }
}
