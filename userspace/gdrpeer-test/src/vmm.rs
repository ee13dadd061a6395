// SPDX-License-Identifier: GPL-2.0

//! CUDA's virtual memory management (cuMemCreate, cuMemAddressReserve, cuMemMap,
//! cuMemSetAccess) for the `--cuda` tests: VMM memory pinned and mapped through
//! `/dev/gdrpeer` and `/dev/gdrdrv`, its bytes read back with cuMemcpyDtoH, and the mapping
//! withdrawn by cuMemUnmap. The entry points come from the libcuda.so.1 that
//! [`crate::sanity::load`] initialised.

use crate::helpers::{cuda_entry, ok, pattern, K64};
use crate::sanity::{c, cu, expect_sigbus, load};
use gdrpeer::{gdrdrv::Gdrdrv, Mapping, PinFlags};
use nvsim::cuda_vmm::{AccessDesc, Prop, ACCESS_RW};
use nvsim::testing::TestResult;
use nvsim::{check, check_eq};
use std::ffi::c_uint;

type Res = c_uint;

/// CUDA's VMM granularity (2 MiB), libcuda-sim's too.
const SIZE: usize = 2 << 20;

/// VMM memory: one cuMemCreate'd allocation of [`SIZE`] mapped read-write at a reserved
/// range. Unmapped, released and its range freed on drop.
struct VmmMem {
    p: u64,
    handle: u64,
    mapped: bool,
    unmap: unsafe extern "C" fn(u64, usize) -> Res,
    release: unsafe extern "C" fn(u64) -> Res,
    address_free: unsafe extern "C" fn(u64, usize) -> Res,
    _lib: libloading::Library,
}

fn res(r: Res, call: &str) -> TestResult {
    check_eq!(r, 0, format!("{call}: CUresult"));
    Ok(())
}

impl VmmMem {
    fn new() -> Result<Self, String> {
        // SAFETY: libcuda.so.1 is loaded already (sanity::load); this takes a reference.
        let lib = unsafe { libloading::Library::new("libcuda.so.1") }
            .map_err(|e| format!("libcuda.so.1: {e}"))?;
        // SAFETY (the entry points below): each is read as its CUDA driver API signature.
        let create: unsafe extern "C" fn(*mut u64, usize, *const Prop, u64) -> Res =
            unsafe { cuda_entry(&lib, "cuMemCreate") }?;
        let reserve: unsafe extern "C" fn(*mut u64, usize, usize, u64, u64) -> Res =
            unsafe { cuda_entry(&lib, "cuMemAddressReserve") }?;
        let map: unsafe extern "C" fn(u64, usize, usize, u64, u64) -> Res =
            unsafe { cuda_entry(&lib, "cuMemMap") }?;
        let set_access: unsafe extern "C" fn(u64, usize, *const AccessDesc, usize) -> Res =
            unsafe { cuda_entry(&lib, "cuMemSetAccess") }?;
        let prop = Prop::device(0);
        let mut m = VmmMem {
            p: 0,
            handle: 0,
            mapped: false,
            unmap: unsafe { cuda_entry(&lib, "cuMemUnmap") }?,
            release: unsafe { cuda_entry(&lib, "cuMemRelease") }?,
            address_free: unsafe { cuda_entry(&lib, "cuMemAddressFree") }?,
            _lib: lib,
        };
        // SAFETY (the calls below): valid out-pointers and descriptors of the documented types.
        res(
            unsafe { create(&mut m.handle, SIZE, &prop, 0) },
            "cuMemCreate",
        )?;
        res(
            unsafe { reserve(&mut m.p, SIZE, 0, 0, 0) },
            "cuMemAddressReserve",
        )?;
        res(unsafe { map(m.p, SIZE, 0, m.handle, 0) }, "cuMemMap")?;
        m.mapped = true;
        res(
            unsafe { set_access(m.p, SIZE, &ACCESS_RW, 1) },
            "cuMemSetAccess",
        )?;
        Ok(m)
    }

    fn unmap(&mut self) -> TestResult {
        self.mapped = false;
        // SAFETY: the mapping this made.
        res(unsafe { (self.unmap)(self.p, SIZE) }, "cuMemUnmap")
    }
}

impl Drop for VmmMem {
    fn drop(&mut self) {
        // SAFETY: what `new` made, each undone once.
        unsafe {
            if self.mapped {
                (self.unmap)(self.p, SIZE);
            }
            if self.handle != 0 {
                (self.release)(self.handle);
            }
            if self.p != 0 {
                (self.address_free)(self.p, SIZE);
            }
        }
    }
}

/// Writes through `map` at `at` and reads the bytes back with cuMemcpyDtoH at `va`.
fn write_then_dtoh(map: &Mapping, at: usize, va: u64, n: usize, seed: u8) -> TestResult {
    let data = pattern(seed, n);
    map.write(at, &data);
    let mut back = vec![0; n];
    cu().copy_from_device(&mut back, va).map_err(c)?;
    check!(
        back == data,
        "cuMemcpyDtoH differs from the bytes written through the mapping"
    );
    Ok(())
}

/// The child of `cuda-vmm-mmap-*`: VMM memory pinned (a window inside the mapping, from an
/// unaligned address) and mapped through `/dev/gdrpeer`; bytes written through the mapping
/// are what cuMemcpyDtoH reads; cuMemUnmap; a touch must die of SIGBUS.
pub fn gdrpeer_touch_after_unmap() -> TestResult {
    load()?;
    let mut m = VmmMem::new()?;
    let d = crate::helpers::dev()?;
    let va = m.p + K64 + 100;
    let p = ok(d.pin(va, 3 * K64, PinFlags::empty()), "pin")?;
    let map = ok(
        d.map(p.handle, 0, p.page_count as usize * K64 as usize),
        "map",
    )?;
    write_then_dtoh(&map, p.offset as usize, va, 3 * K64 as usize, 50)?;
    m.unmap()?;
    map.write(p.offset as usize + K64 as usize, &[0x55]);
    Err("wrote through the mapping after cuMemUnmap".into())
}

/// The same through `/dev/gdrdrv`, as libgdrapi maps (the window from its start).
pub fn gdrdrv_touch_after_unmap() -> TestResult {
    load()?;
    let mut m = VmmMem::new()?;
    let g = ok(Gdrdrv::open_default(), "open /dev/gdrdrv")?;
    // gdrdrv maps only a pin that starts on a GPU page.
    let va = m.p + K64;
    let h = ok(g.pin_v2(va, 3 * K64, 0), "PIN_BUFFER_V2")?;
    let info = ok(g.info_v2(h), "GET_INFO_V2")?;
    check_eq!(info.va, m.p + K64, "the window's start");
    let map = ok(g.map(h, info.mapped_size as usize), "gdr_map")?.0;
    write_then_dtoh(&map, (va - info.va) as usize, va, 3 * K64 as usize, 51)?;
    m.unmap()?;
    check!(
        ok(g.cb_flag(h), "GET_CB_FLAG")?,
        "the callback flag after cuMemUnmap"
    );
    map.write(K64 as usize, &[0x55]);
    Err("wrote through the mapping after cuMemUnmap".into())
}

/// The registration cache over VMM memory, which refuses SYNC_MEMOPS on the allocation
/// (`CUDA_ERROR_NOT_SUPPORTED`, as CUDA does): it registers all the same, with the
/// context's `CU_CTX_SYNC_MEMOPS` instead (`cuCtxSetFlags`), so that bytes cuMemcpyHtoD
/// wrote are in the memory a peer reads when the copy returns: read here through a mapping
/// of the registration's handle.
pub fn regcache_over_vmm_memory() -> TestResult {
    load()?;
    // The flag the cache sets stays on the test process's context: put back what was there,
    // so that the tests after this one still see a copy without SYNC_MEMOPS complete late.
    // SAFETY: libcuda.so.1 is loaded already (sanity::load); this takes a reference.
    let lib = unsafe { libloading::Library::new("libcuda.so.1") }
        .map_err(|e| format!("libcuda.so.1: {e}"))?;
    // SAFETY (both entry points): read as their CUDA driver API signatures.
    let get_flags: unsafe extern "C" fn(*mut c_uint) -> Res =
        unsafe { cuda_entry(&lib, "cuCtxGetFlags") }?;
    let set_flags: unsafe extern "C" fn(c_uint) -> Res =
        unsafe { cuda_entry(&lib, "cuCtxSetFlags") }?;
    let mut flags: c_uint = 0;
    // SAFETY: a valid out-pointer.
    res(unsafe { get_flags(&mut flags) }, "cuCtxGetFlags")?;
    let r = registers_vmm_memory();
    // SAFETY: the flags read above.
    res(unsafe { set_flags(flags) }, "cuCtxSetFlags")?;
    r
}

fn registers_vmm_memory() -> TestResult {
    let m = VmmMem::new()?;
    let d = crate::helpers::dev()?;
    let mut cache = gdrpeer::regcache::RegCache::new(&d, cu(), 4);
    let r = cache
        .get(m.p + 100, 1000)
        .map_err(|e| format!("registration of VMM memory: {e}"))?;
    check_eq!(
        (r.aligned_va, r.offset),
        (m.p, 100),
        "the registration's window"
    );
    let data = pattern(52, 1000);
    cu().copy_to_device(m.p + 100, &data).map_err(c)?;
    let map = ok(d.map(r.handle, 0, K64 as usize), "map")?;
    let mut back = vec![0; data.len()];
    map.read(100, &mut back);
    check!(
        back == data,
        "the mapping differs from what cuMemcpyHtoD wrote (the copy had not completed)"
    );
    Ok(())
}

/// VMM memory through `/dev/gdrpeer`: written through the mapping, read with cuMemcpyDtoH;
/// after cuMemUnmap a touch is SIGBUS and nothing reaches the freed pages.
pub fn gdrpeer_mmap_then_unmap_is_sigbus() -> TestResult {
    expect_sigbus("--cuda-vmm-touch-after-unmap")
}

/// VMM memory through `/dev/gdrdrv`, likewise.
pub fn gdrdrv_mmap_then_unmap_is_sigbus() -> TestResult {
    expect_sigbus("--gdrdrv-vmm-touch-after-unmap")
}
