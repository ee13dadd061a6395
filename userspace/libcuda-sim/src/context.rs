// SPDX-License-Identifier: GPL-2.0

//! Initialisation and contexts.
//!
//! Device 0's primary context (`cuDevicePrimaryCtxRetain`, counted, ended by the last
//! `cuDevicePrimaryCtxRelease`) and the contexts of `cuCtxCreate` (ended by
//! `cuCtxDestroy`). As in CUDA, a context is current per thread: a thread has none until
//! `cuCtxCreate` or `cuCtxSetCurrent` makes one current there, and the calls that need one
//! fail with `CUDA_ERROR_INVALID_CONTEXT` until then (`CUDA_ERROR_CONTEXT_IS_DESTROYED`
//! where the thread's context has ended). Memory belongs to the context current when it
//! was allocated, and a context's end frees it, which calls back the nv-p2p pins on it, as
//! CUDA does (`tests/cuda-trace`, section "context-end").
//!
//! Which calls need one follows CUDA's driver, as recorded on an H100 with CUDA 13
//! (`tests/cuda-trace`, section "threads"; Documentation/dev/nvsim.rst, "Checked against
//! real CUDA"):
//!
//! - calls that allocate or reach memory through the current context need it:
//!   `cuMemAlloc`, `cuMemAllocHost`, the copies, `cuMemsetD8`, `cuMemGetInfo`,
//!   `cuMemGetAddressRange`, `cuCtxGetDevice`, `cuCtxSynchronize`;
//! - calls given a pointer find the allocation's context from the pointer, and need none:
//!   `cuMemFree`, `cuMemFreeHost`, `cuPointerGetAttribute(s)` (CONTEXT answers the
//!   allocation's context, not the thread's) and `cuPointerSetAttribute`. A thread that never
//!   made a context current may free what another thread allocated, as gdrcopy's tests do;
//! - the device queries, the primary context calls, `cuCtxSetCurrent` and `cuCtxGetCurrent`
//!   need `cuInit` only.
//!
//! Unlike CUDA, the VMM calls need no current context.

use crate::errors::*;
use crate::{CUcontext, CUdevice, CUresult};
use std::{
    cell::Cell,
    ffi::{c_int, c_uint},
    sync::Mutex,
};

/// How many contexts may live at once (the primary one and 63 of `cuCtxCreate`).
const SLOTS: usize = 64;

/// One byte per context slot; a slot's address is its `CUcontext`. Slot 0 is device 0's
/// primary context.
static HANDLES: [u8; SLOTS] = [0; SLOTS];

/// The `CUcontext` of slot `slot`.
fn handle(slot: usize) -> CUcontext {
    &HANDLES[slot] as *const u8 as CUcontext
}

/// The slot of a `CUcontext`, if it is one of [`HANDLES`].
fn slot_of(ctx: CUcontext) -> Option<usize> {
    (0..SLOTS).find(|&s| handle(s) == ctx)
}

/// The contexts' state.
struct Contexts {
    /// The primary context's retains not yet released.
    primary_refs: u32,
    /// Which slots hold a context that has not ended.
    live: [bool; SLOTS],
    /// Each context's flags (`cuCtxCreate`, `cuCtxSetFlags`): `CU_CTX_SYNC_MEMOPS` is the
    /// one this library acts on ([`crate::memory`]).
    flags: [c_uint; SLOTS],
    /// The owner (slot) of each device and host allocation, by base address.
    owners: std::collections::BTreeMap<u64, usize>,
}

static CONTEXTS: Mutex<Contexts> = Mutex::new(Contexts {
    primary_refs: 0,
    live: [false; SLOTS],
    flags: [0; SLOTS],
    owners: std::collections::BTreeMap::new(),
});

/// The context that owns the allocation at `base` (NULL for memory no context owns).
pub(crate) fn context_of(base: u64) -> CUcontext {
    CONTEXTS
        .lock()
        .ok()
        .and_then(|c| c.owners.get(&base).copied())
        .map_or(std::ptr::null_mut(), handle)
}

/// Records that the allocation at `base` belongs to this thread's current context.
pub(crate) fn own(base: u64) {
    if let (Some(slot), Ok(mut c)) = (CURRENT.get(), CONTEXTS.lock()) {
        c.owners.insert(base, slot);
    }
}

/// Forgets the owner of the allocation at `base` (freed).
pub(crate) fn disown(base: u64) {
    if let Ok(mut c) = CONTEXTS.lock() {
        c.owners.remove(&base);
    }
}

/// `CU_CTX_SYNC_MEMOPS`: synchronous copies and memsets of the context synchronize.
pub const CU_CTX_SYNC_MEMOPS: c_uint = 0x80;
/// Every flag of `CUctx_flags` up to `CU_CTX_SYNC_MEMOPS` (scheduling, MAP_HOST,
/// LMEM_RESIZE_TO_MAX, the coredump flags, SYNC_MEMOPS); others are refused.
const CTX_FLAGS: c_uint = 0xff;

/// Whether this thread's current context has `CU_CTX_SYNC_MEMOPS`.
pub(crate) fn sync_memops() -> bool {
    CURRENT.get().is_some_and(|slot| {
        CONTEXTS
            .lock()
            .is_ok_and(|c| c.flags[slot] & CU_CTX_SYNC_MEMOPS != 0)
    })
}

/// Ends the context in `slot`: completes the copies and memsets in flight, then frees its
/// device memory through nvsim (calling back the pins on it) and its host memory.
fn end(gpu: &nvsim::Gpu, slot: usize) {
    crate::memory::complete(gpu);
    let bases: Vec<u64> = match CONTEXTS.lock() {
        Ok(mut c) => {
            c.live[slot] = false;
            c.flags[slot] = 0;
            let mine: Vec<u64> = c
                .owners
                .iter()
                .filter(|&(_, &s)| s == slot)
                .map(|(&b, _)| b)
                .collect();
            for b in &mine {
                c.owners.remove(b);
            }
            mine
        }
        Err(_) => return,
    };
    for b in bases {
        if gpu.free(b).is_err() {
            crate::memory::free_host(b);
        }
    }
}

/// The device `cuInit` opened.
static GPU: Mutex<Option<nvsim::Gpu>> = Mutex::new(None);

thread_local! {
    /// The slot of the context current in this thread, if any.
    static CURRENT: Cell<Option<usize>> = const { Cell::new(None) };
}

/// What a call meets before it may run: `CUDA_ERROR_NOT_INITIALIZED` before `cuInit`,
/// `CUDA_ERROR_INVALID_CONTEXT` where it needs a current context and this thread has none.
fn gate(initialised: bool, needs_context: bool) -> Result<(), CUresult> {
    if !initialised {
        return Err(CUDA_ERROR_NOT_INITIALIZED);
    }
    if !needs_context {
        return Ok(());
    }
    match CURRENT.get() {
        None => Err(CUDA_ERROR_INVALID_CONTEXT),
        Some(slot) if !CONTEXTS.lock().is_ok_and(|c| c.live[slot]) => {
            Err(CUDA_ERROR_CONTEXT_IS_DESTROYED)
        }
        Some(_) => Ok(()),
    }
}

fn run(needs_context: bool, f: impl FnOnce(&nvsim::Gpu) -> CUresult) -> CUresult {
    let Ok(g) = GPU.lock() else {
        return CUDA_ERROR_UNKNOWN;
    };
    match (gate(g.is_some(), needs_context), g.as_ref()) {
        (Ok(()), Some(gpu)) => f(gpu),
        (Err(e), _) => e,
        (Ok(()), None) => CUDA_ERROR_NOT_INITIALIZED,
    }
}

/// Runs `f` with the device opened by `cuInit`.
pub(crate) fn with_gpu(f: impl FnOnce(&nvsim::Gpu) -> CUresult) -> CUresult {
    run(false, f)
}

/// Runs `f` with the device opened by `cuInit`, in a thread where the context is current.
pub(crate) fn with_context(f: impl FnOnce(&nvsim::Gpu) -> CUresult) -> CUresult {
    run(true, f)
}

/// The shape of a call that answers one value: `CUDA_ERROR_INVALID_VALUE` for a null `out`,
/// then [`with_gpu`] or [`with_context`], then `*out = f(gpu)?`.
///
/// # Safety
///
/// `out` is null or valid for writing a `T`.
pub(crate) unsafe fn answer<T>(
    out: *mut T,
    needs_context: bool,
    f: impl FnOnce(&nvsim::Gpu) -> Result<T, CUresult>,
) -> CUresult {
    if out.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    run(needs_context, |gpu| match f(gpu) {
        Ok(v) => {
            // SAFETY: checked non-null; the caller's contract makes it writable.
            unsafe { out.write(v) };
            CUDA_SUCCESS
        }
        Err(e) => e,
    })
}

/// `cuInit`: opens `/dev/nvsim`. Without it, `CUDA_ERROR_NO_DEVICE`, as CUDA answers on a
/// machine without a GPU; the calls after a failed `cuInit` give
/// `CUDA_ERROR_NOT_INITIALIZED`.
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

/// `cuDriverGetVersion`: 12080 (CUDA 12.8), whatever the machine. Needs no `cuInit`.
#[no_mangle]
pub unsafe extern "C" fn cuDriverGetVersion(version: *mut c_int) -> CUresult {
    if version.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    // SAFETY: the caller passes a valid int pointer (checked non-null).
    unsafe { *version = 12080 };
    CUDA_SUCCESS
}

/// `cuCtxCreate_v2`: a new context of device `dev`, current in this thread, with `flags`
/// (of which `CU_CTX_SYNC_MEMOPS` has an effect here; unknown bits are
/// `CUDA_ERROR_INVALID_VALUE`).
#[no_mangle]
pub unsafe extern "C" fn cuCtxCreate_v2(
    ctx: *mut CUcontext,
    flags: c_uint,
    dev: CUdevice,
) -> CUresult {
    let create = |_: &nvsim::Gpu| {
        if flags & !CTX_FLAGS != 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        if dev != 0 {
            return Err(CUDA_ERROR_INVALID_DEVICE);
        }
        let mut c = CONTEXTS.lock().map_err(|_| CUDA_ERROR_UNKNOWN)?;
        let slot = (1..SLOTS)
            .find(|&s| !c.live[s])
            .ok_or(CUDA_ERROR_OUT_OF_MEMORY)?;
        c.live[slot] = true;
        c.flags[slot] = flags;
        CURRENT.set(Some(slot));
        Ok(handle(slot))
    };
    // SAFETY: forwarded caller contract.
    unsafe { answer(ctx, false, create) }
}

/// `cuDevicePrimaryCtxRetain`: device 0's primary context, started if it was not, one more
/// retain counted; not made current, as in CUDA.
#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRetain(ctx: *mut CUcontext, dev: CUdevice) -> CUresult {
    let retain = |_: &nvsim::Gpu| {
        if dev != 0 {
            return Err(CUDA_ERROR_INVALID_DEVICE);
        }
        let mut c = CONTEXTS.lock().map_err(|_| CUDA_ERROR_UNKNOWN)?;
        c.primary_refs += 1;
        c.live[0] = true;
        Ok(handle(0))
    };
    // SAFETY: forwarded caller contract.
    unsafe { answer(ctx, false, retain) }
}

/// `cuDevicePrimaryCtxRelease_v2`: one retain less; the last one ends the primary context
/// and frees its memory, as in CUDA. A thread where it was current keeps it current, ended
/// (`CUDA_ERROR_CONTEXT_IS_DESTROYED`), until it makes another current.
#[no_mangle]
pub extern "C" fn cuDevicePrimaryCtxRelease_v2(dev: CUdevice) -> CUresult {
    with_gpu(|gpu| {
        if dev != 0 {
            return CUDA_ERROR_INVALID_DEVICE;
        }
        let last = match CONTEXTS.lock() {
            Ok(mut c) if c.primary_refs > 0 => {
                c.primary_refs -= 1;
                c.primary_refs == 0
            }
            Ok(_) => return CUDA_ERROR_INVALID_CONTEXT,
            Err(_) => return CUDA_ERROR_UNKNOWN,
        };
        if last {
            end(gpu, 0);
        }
        CUDA_SUCCESS
    })
}

/// `cuCtxDestroy_v2`: ends a context of `cuCtxCreate` and frees its memory; it is no
/// longer current in this thread afterwards, as in CUDA. The primary context is left to its
/// retains (only no longer current here).
#[no_mangle]
pub extern "C" fn cuCtxDestroy_v2(ctx: CUcontext) -> CUresult {
    with_gpu(|gpu| {
        if ctx.is_null() {
            return CUDA_ERROR_INVALID_VALUE;
        }
        let Some(slot) = slot_of(ctx) else {
            return CUDA_ERROR_INVALID_CONTEXT;
        };
        if slot != 0 && !CONTEXTS.lock().is_ok_and(|c| c.live[slot]) {
            return CUDA_ERROR_INVALID_CONTEXT;
        }
        if CURRENT.get() == Some(slot) {
            CURRENT.set(None);
        }
        if slot != 0 {
            end(gpu, slot);
        }
        CUDA_SUCCESS
    })
}

/// `cuCtxSetCurrent`: makes a live context current in this thread, or none (NULL), as CUDA
/// does; any other value is `CUDA_ERROR_INVALID_CONTEXT`.
#[no_mangle]
pub extern "C" fn cuCtxSetCurrent(ctx: CUcontext) -> CUresult {
    with_gpu(|_| {
        if ctx.is_null() {
            CURRENT.set(None);
            return CUDA_SUCCESS;
        }
        match slot_of(ctx) {
            Some(slot) if CONTEXTS.lock().is_ok_and(|c| c.live[slot]) => {
                CURRENT.set(Some(slot));
                CUDA_SUCCESS
            }
            _ => CUDA_ERROR_INVALID_CONTEXT,
        }
    })
}

/// `cuCtxGetCurrent`: this thread's current context (ended or not), else NULL (no error),
/// as in CUDA.
#[no_mangle]
pub unsafe extern "C" fn cuCtxGetCurrent(ctx: *mut CUcontext) -> CUresult {
    let current = || CURRENT.get().map_or(std::ptr::null_mut(), handle);
    // SAFETY: the caller passes a valid pointer or null.
    unsafe { answer(ctx, false, |_| Ok(current())) }
}

/// `cuCtxGetDevice`: device 0, the current context's.
#[no_mangle]
pub unsafe extern "C" fn cuCtxGetDevice(device: *mut CUdevice) -> CUresult {
    // SAFETY: the caller passes a valid pointer or null.
    unsafe { answer(device, true, |_| Ok(0)) }
}

/// `cuCtxSynchronize`: completes the copies and memsets still in flight
/// ([`crate::memory`]); there are no kernels or streams.
#[no_mangle]
pub extern "C" fn cuCtxSynchronize() -> CUresult {
    with_context(|gpu| {
        crate::memory::complete(gpu);
        CUDA_SUCCESS
    })
}

/// `cuCtxGetFlags`: the current context's flags.
#[no_mangle]
pub unsafe extern "C" fn cuCtxGetFlags(flags: *mut c_uint) -> CUresult {
    let get = |_: &nvsim::Gpu| {
        let slot = CURRENT.get().ok_or(CUDA_ERROR_INVALID_CONTEXT)?;
        let c = CONTEXTS.lock().map_err(|_| CUDA_ERROR_UNKNOWN)?;
        Ok(c.flags[slot])
    };
    // SAFETY: the caller passes a valid pointer or null.
    unsafe { answer(flags, true, get) }
}

/// `cuCtxSetFlags` (CUDA 12.1): sets the current context's flags; unknown bits are
/// `CUDA_ERROR_INVALID_VALUE`. With `CU_CTX_SYNC_MEMOPS` its copies and memsets to device
/// memory complete before they return, as SYNC_MEMOPS on an allocation makes them, which
/// VMM memory refuses ([`crate::pointer`]).
#[no_mangle]
pub extern "C" fn cuCtxSetFlags(flags: c_uint) -> CUresult {
    with_context(|_| {
        if flags & !CTX_FLAGS != 0 {
            return CUDA_ERROR_INVALID_VALUE;
        }
        match (CURRENT.get(), CONTEXTS.lock()) {
            (Some(slot), Ok(mut c)) => {
                c.flags[slot] = flags;
                CUDA_SUCCESS
            }
            _ => CUDA_ERROR_UNKNOWN,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::no_nvsim;

    #[test]
    fn gate_orders_initialisation_before_context() {
        // Each test runs in its own thread: no context is current here.
        assert_eq!(gate(false, false), Err(CUDA_ERROR_NOT_INITIALIZED));
        assert_eq!(gate(false, true), Err(CUDA_ERROR_NOT_INITIALIZED));
        assert_eq!(gate(true, false), Ok(()));
        assert_eq!(gate(true, true), Err(CUDA_ERROR_INVALID_CONTEXT));
        CURRENT.set(Some(SLOTS - 1));
        assert_eq!(gate(true, true), Err(CUDA_ERROR_CONTEXT_IS_DESTROYED));
        CONTEXTS.lock().unwrap().live[SLOTS - 1] = true;
        assert_eq!(gate(true, true), Ok(()));
        CONTEXTS.lock().unwrap().live[SLOTS - 1] = false;
        // Current per thread: another thread has none.
        std::thread::spawn(|| assert_eq!(gate(true, true), Err(CUDA_ERROR_INVALID_CONTEXT)))
            .join()
            .unwrap();
    }

    #[test]
    fn argument_checks() {
        assert_eq!(cuInit(1), CUDA_ERROR_INVALID_VALUE);
        // SAFETY (all calls): null pointers are refused before use.
        unsafe {
            assert_eq!(
                cuDriverGetVersion(std::ptr::null_mut()),
                CUDA_ERROR_INVALID_VALUE
            );
            assert_eq!(
                cuCtxGetCurrent(std::ptr::null_mut()),
                CUDA_ERROR_INVALID_VALUE
            );
            assert_eq!(
                cuCtxGetDevice(std::ptr::null_mut()),
                CUDA_ERROR_INVALID_VALUE
            );
            assert_eq!(
                cuCtxCreate_v2(std::ptr::null_mut(), 0, 0),
                CUDA_ERROR_INVALID_VALUE
            );
        }
        let mut v = 0;
        // SAFETY: a valid out pointer.
        assert_eq!(unsafe { cuDriverGetVersion(&mut v) }, CUDA_SUCCESS);
        assert_eq!(v, 12080);
    }

    #[test]
    fn without_nvsim_every_call_fails_cleanly() {
        if !no_nvsim() {
            return;
        }
        assert_eq!(cuInit(0), CUDA_ERROR_NO_DEVICE);
        let (mut ctx, mut dev) = (std::ptr::null_mut(), -1);
        // SAFETY (all calls): valid out pointers.
        unsafe {
            assert_eq!(cuCtxGetCurrent(&mut ctx), CUDA_ERROR_NOT_INITIALIZED);
            assert_eq!(cuCtxGetDevice(&mut dev), CUDA_ERROR_NOT_INITIALIZED);
            assert_eq!(
                cuDevicePrimaryCtxRetain(&mut ctx, 0),
                CUDA_ERROR_NOT_INITIALIZED
            );
            assert_eq!(cuCtxCreate_v2(&mut ctx, 0, 0), CUDA_ERROR_NOT_INITIALIZED);
        }
        assert_eq!(cuCtxSynchronize(), CUDA_ERROR_NOT_INITIALIZED);
        assert_eq!(cuCtxSetCurrent(handle(0)), CUDA_ERROR_NOT_INITIALIZED);
        assert_eq!(cuCtxDestroy_v2(handle(0)), CUDA_ERROR_NOT_INITIALIZED);
        assert_eq!(cuDevicePrimaryCtxRelease_v2(0), CUDA_ERROR_NOT_INITIALIZED);
    }
}
