// SPDX-License-Identifier: GPL-2.0

//! Initialisation and contexts.
//!
//! There is one context per process: the primary context of device 0 and the one
//! `cuCtxCreate` returns are the same. As in CUDA, it is current per thread: a thread has no
//! current context until `cuCtxCreate` or `cuCtxSetCurrent` makes it current there, and the
//! calls that need one fail with `CUDA_ERROR_INVALID_CONTEXT` until then.
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
//! Unlike CUDA, the VMM calls need no current context, and destroying the context (or
//! releasing the primary one) frees none of its memory: there is one context, and its
//! memory lives until the process ends (`tests/cuda-trace/sim-differences.txt`).

use crate::errors::*;
use crate::{CUcontext, CUdevice, CUresult};
use std::{
    cell::Cell,
    ffi::{c_int, c_uint},
    sync::Mutex,
};

/// The one context there is; its address is the `CUcontext`.
static CONTEXT: u8 = 0;

pub(crate) fn context() -> CUcontext {
    &CONTEXT as *const u8 as CUcontext
}

/// The device `cuInit` opened.
static GPU: Mutex<Option<nvsim::Gpu>> = Mutex::new(None);

thread_local! {
    /// Whether the context is current in this thread.
    static CURRENT: Cell<bool> = const { Cell::new(false) };
}

/// What a call meets before it may run: `CUDA_ERROR_NOT_INITIALIZED` before `cuInit`,
/// `CUDA_ERROR_INVALID_CONTEXT` where it needs a current context and this thread has none.
fn gate(initialised: bool, needs_context: bool) -> Result<(), CUresult> {
    if !initialised {
        Err(CUDA_ERROR_NOT_INITIALIZED)
    } else if needs_context && !CURRENT.get() {
        Err(CUDA_ERROR_INVALID_CONTEXT)
    } else {
        Ok(())
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

/// Hands out the context of device `dev`, current in this thread if `make_current`.
unsafe fn put_context(ctx: *mut CUcontext, dev: CUdevice, make_current: bool) -> CUresult {
    // SAFETY: forwarded caller contract.
    unsafe {
        answer(ctx, false, |_| {
            if dev != 0 {
                return Err(CUDA_ERROR_INVALID_DEVICE);
            }
            if make_current {
                CURRENT.set(true);
            }
            Ok(context())
        })
    }
}

/// `cuCtxCreate_v2`: gives the process's one context and makes it current in this thread,
/// as CUDA makes a new context current. Unlike CUDA, it is the primary context, and the
/// flags are ignored.
#[no_mangle]
pub unsafe extern "C" fn cuCtxCreate_v2(
    ctx: *mut CUcontext,
    _flags: c_uint,
    dev: CUdevice,
) -> CUresult {
    // SAFETY: forwarded caller contract.
    unsafe { put_context(ctx, dev, true) }
}

/// `cuDevicePrimaryCtxRetain`: gives the process's one context without making it current,
/// as in CUDA. No reference count is kept.
#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRetain(ctx: *mut CUcontext, dev: CUdevice) -> CUresult {
    // SAFETY: forwarded caller contract.
    unsafe { put_context(ctx, dev, false) }
}

/// `cuDevicePrimaryCtxRelease_v2`: checks `dev`; the context lives on (unlike CUDA, where
/// the last release destroys it).
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

/// `cuCtxDestroy_v2`: no longer current in this thread afterwards, as in CUDA. Unlike CUDA,
/// the context lives on with its memory, and can be made current again.
#[no_mangle]
pub extern "C" fn cuCtxDestroy_v2(ctx: CUcontext) -> CUresult {
    with_gpu(|_| {
        if ctx.is_null() {
            CUDA_ERROR_INVALID_VALUE
        } else if ctx == context() {
            CURRENT.set(false);
            CUDA_SUCCESS
        } else {
            CUDA_ERROR_INVALID_CONTEXT
        }
    })
}

/// `cuCtxSetCurrent`: makes the context current in this thread, or none (NULL), as CUDA
/// does; any other value is `CUDA_ERROR_INVALID_CONTEXT`.
#[no_mangle]
pub extern "C" fn cuCtxSetCurrent(ctx: CUcontext) -> CUresult {
    with_gpu(|_| {
        if ctx.is_null() || ctx == context() {
            CURRENT.set(!ctx.is_null());
            CUDA_SUCCESS
        } else {
            CUDA_ERROR_INVALID_CONTEXT
        }
    })
}

/// `cuCtxGetCurrent`: the context if it is current in this thread, else NULL (no error),
/// as in CUDA.
#[no_mangle]
pub unsafe extern "C" fn cuCtxGetCurrent(ctx: *mut CUcontext) -> CUresult {
    let current = || CURRENT.get().then(context).unwrap_or(std::ptr::null_mut());
    // SAFETY: the caller passes a valid pointer or null.
    unsafe { answer(ctx, false, |_| Ok(current())) }
}

/// `cuCtxGetDevice`: device 0, the current context's.
#[no_mangle]
pub unsafe extern "C" fn cuCtxGetDevice(device: *mut CUdevice) -> CUresult {
    // SAFETY: the caller passes a valid pointer or null.
    unsafe { answer(device, true, |_| Ok(0)) }
}

/// `cuCtxSynchronize`: returns at once: every copy and memset of this library has completed
/// when its call returns, and there are no kernels or streams.
#[no_mangle]
pub extern "C" fn cuCtxSynchronize() -> CUresult {
    with_context(|_| CUDA_SUCCESS)
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
        CURRENT.set(true);
        assert_eq!(gate(true, true), Ok(()));
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
        assert_eq!(cuCtxSetCurrent(context()), CUDA_ERROR_NOT_INITIALIZED);
        assert_eq!(cuCtxDestroy_v2(context()), CUDA_ERROR_NOT_INITIALIZED);
        assert_eq!(cuDevicePrimaryCtxRelease_v2(0), CUDA_ERROR_NOT_INITIALIZED);
    }
}
