// SPDX-License-Identifier: GPL-2.0

//! The kernel API for peer drivers (`include/gdrpeer-kapi.h`, Documentation/user/kernel-api.rst).
//!
//! The functions are defined here as `gdrpeer_rs_*` and wrapped and exported by
//! `src/kapi-exports.c`. Each one is assigned to a function-pointer field that bindgen
//! generates from their prototypes (`src/kapi-internal.h`), so a signature that drifts does
//! not compile; the C compiler checks the wrappers against the header. A `gdrpeer_ctx` is a
//! boxed [`KapiCtx`], a `gdrpeer_mr` a boxed [`KapiMr`].

bindgen_module! {
    mod bindings = "kapi_generated.rs";
}

use kernel::{
    ffi::c_void,
    pci,
    prelude::*,
    sync::{aref::ARef, Arc},
    task::might_sleep,
    types::ScopeGuard,
};

use crate::{
    cache::{Context, DmaUse, Numbering, Region},
    env::Env,
    export::{Export, Window},
    notify::{as_invalidate, might_wait_for_invalidate, Notifier},
    params,
    range::{GpuRange, GPU_PAGE_SIZE},
};

/// A peer driver's invalidate callback with its data.
struct Invalidate {
    f: unsafe extern "C" fn(*mut c_void),
    data: *mut c_void,
}

// SAFETY: the API's contract lets gdrpeer call the callback from any thread with its data.
unsafe impl Send for Invalidate {}
// SAFETY: a shared `Invalidate` only lets a thread read `f` and `data`, never written after it
// is made, and call `f(data)` (`notify`), which the API's contract allows from any thread.
unsafe impl Sync for Invalidate {}

impl Notifier for Invalidate {
    /// Calls it, under the lockdep class that stands for NVIDIA's lock, warning if it is slow.
    fn notify(&self) {
        as_invalidate("a peer driver's invalidate callback", || {
            // SAFETY: the peer driver registered `f` with `data` and promised both stay valid
            // until gdrpeer_mr_unpin returns, which waits for this call.
            unsafe { (self.f)(self.data) }
        });
    }
}

/// A `struct gdrpeer_ctx`.
struct KapiCtx {
    ctx: Arc<Context>,
}

/// A `struct gdrpeer_mr`.
struct KapiMr {
    ctx: Arc<Context>,
    /// Held without a handle ([`Context::hold`]).
    region: Arc<Region>,
    notifier: u64,
    /// Its use of the region's DMA mapping for the peer, whose addresses `addrs` are.
    _dma: DmaUse,
    addrs: KVVec<u64>,
}

fn api_result<T>(r: Result<*mut T>) -> *mut T {
    r.unwrap_or_else(|e| e.to_ptr())
}

#[no_mangle]
extern "C" fn gdrpeer_rs_kapi_version() -> u32 {
    bindings::GDRPEER_KAPI_VERSION
}

#[no_mangle]
extern "C" fn gdrpeer_rs_ctx_create() -> *mut bindings::gdrpeer_ctx {
    might_sleep();
    api_result((|| {
        let ctx = Context::new(Env::get()?, false, Numbering::Counted)?;
        Ok(KBox::into_raw(KBox::new(KapiCtx { ctx }, GFP_KERNEL)?).cast())
    })())
}

/// # Safety
///
/// `ctx` came from [`gdrpeer_rs_ctx_create`] and is not used again.
#[no_mangle]
unsafe extern "C" fn gdrpeer_rs_ctx_destroy(ctx: *mut bindings::gdrpeer_ctx) {
    might_wait_for_invalidate();
    if ctx.is_null() {
        return;
    }
    // SAFETY: per the function's contract, `ctx` is a boxed `KapiCtx` given back once.
    let ctx = unsafe { KBox::from_raw(ctx.cast::<KapiCtx>()) };
    ctx.ctx.close();
}

/// # Safety
///
/// `ctx` came from [`gdrpeer_rs_ctx_create`] and is not destroyed; `peer` is a live PCI device;
/// `info` is writable; `invalidate` may be called with `data` until [`gdrpeer_rs_mr_unpin`].
#[no_mangle]
unsafe extern "C" fn gdrpeer_rs_mr_pin(
    ctx: *mut bindings::gdrpeer_ctx,
    peer: *mut kernel::bindings::pci_dev,
    va: u64,
    len: u64,
    invalidate: Option<unsafe extern "C" fn(*mut c_void)>,
    data: *mut c_void,
    info: *mut bindings::gdrpeer_mr_info,
) -> *mut bindings::gdrpeer_mr {
    might_wait_for_invalidate();
    api_result((|| {
        let (Some(f), false, false, false) =
            (invalidate, ctx.is_null(), peer.is_null(), info.is_null())
        else {
            return Err(EINVAL);
        };
        // SAFETY: `ctx` is a live `KapiCtx` (the function's contract).
        let ctx = &unsafe { &*ctx.cast::<KapiCtx>() }.ctx;
        // SAFETY: `peer` is a live PCI device (the function's contract), and `pci::Device` is
        // `#[repr(transparent)]` over `struct pci_dev`; `ARef::from` takes a reference on it.
        let peer = ARef::from(unsafe { &*peer.cast::<pci::Device>() });
        let mr = pin(ctx, &peer, va, len, Invalidate { f, data })?;
        // SAFETY: `info` is writable (the function's contract).
        unsafe {
            info.write(bindings::gdrpeer_mr_info {
                aligned_va: mr.window.start(),
                offset: mr.window.offset(),
                page_count: mr.window.page_count(),
                page_size: GPU_PAGE_SIZE as u32,
                dma_addrs: mr.mr.addrs.as_ptr(),
            })
        };
        Ok(KBox::into_raw(mr.mr).cast())
    })())
}

/// A registration [`pin`] made, with the window it covers.
struct PinnedMr {
    mr: KBox<KapiMr>,
    window: GpuRange,
}

fn pin(
    ctx: &Arc<Context>,
    peer: &ARef<pci::Device>,
    va: u64,
    len: u64,
    invalidate: Invalidate,
) -> Result<PinnedMr> {
    if !ctx.is_owner() {
        return Err(EACCES);
    }
    let window = GpuRange::new(va, len, params::max_pin_bytes())?;
    // Until the registration is complete, an early return gives the region back.
    let region = ScopeGuard::new_with_data(ctx.hold(window)?, |region| ctx.unhold(&region));
    let dma = region.dma_use(peer)?;
    let addrs = region.window_addresses(&window, Some(peer))?;
    let notifier = region.add_notifier(KBox::new(invalidate, GFP_KERNEL)?)?;
    let mr = KapiMr {
        ctx: ctx.clone(),
        region: region.dismiss(),
        notifier,
        _dma: dma,
        addrs,
    };
    // On failure `mr` is dropped, which unregisters the notifier and gives the region back.
    let mr = KBox::new(mr, GFP_KERNEL)?;
    Ok(PinnedMr { mr, window })
}

impl Drop for KapiMr {
    fn drop(&mut self) {
        // Waits for a callback in progress; none is made afterwards.
        self.region.remove_notifier(self.notifier);
        // After gdrpeer_ctx_destroy the region was released already: this drops the reference.
        self.ctx.unhold(&self.region);
    }
}

/// # Safety
///
/// `mr` came from [`gdrpeer_rs_mr_pin`], is not used again, and this is not called from its
/// invalidate callback.
#[no_mangle]
unsafe extern "C" fn gdrpeer_rs_mr_unpin(mr: *mut bindings::gdrpeer_mr) {
    might_wait_for_invalidate();
    if !mr.is_null() {
        // SAFETY: per the function's contract, `mr` is a boxed `KapiMr` given back once.
        drop(unsafe { KBox::from_raw(mr.cast::<KapiMr>()) });
    }
}

/// # Safety
///
/// `ctx` came from [`gdrpeer_rs_ctx_create`] and is not destroyed; `offset` is writable.
#[no_mangle]
unsafe extern "C" fn gdrpeer_rs_dmabuf_export(
    ctx: *mut bindings::gdrpeer_ctx,
    va: u64,
    len: u64,
    flags: u32,
    offset: *mut u64,
) -> *mut kernel::bindings::dma_buf {
    might_wait_for_invalidate();
    api_result((|| {
        if ctx.is_null() || offset.is_null() || flags & !bindings::GDRPEER_DMABUF_FLAGS != 0 {
            return Err(EINVAL);
        }
        // SAFETY: `ctx` is a live `KapiCtx` (the function's contract).
        let ctx = &unsafe { &*ctx.cast::<KapiCtx>() }.ctx;
        if !ctx.is_owner() {
            return Err(EACCES);
        }
        let range = GpuRange::new(va, len, params::max_pin_bytes())?;
        let what = if flags & bindings::GDRPEER_DMABUF_PERSISTENT != 0 {
            Window::Persistent(range)
        } else {
            Window::Range(range)
        };
        let made = Export::create(ctx, what)?;
        // SAFETY: `offset` is writable (the function's contract).
        unsafe { offset.write(made.window.offset()) };
        Ok(made.dmabuf.into_raw().cast())
    })())
}

// The definitions above must have the prototypes' types (src/kapi-internal.h).
const _: bindings::gdrpeer_rs_fns = bindings::gdrpeer_rs_fns {
    kapi_version: Some(gdrpeer_rs_kapi_version),
    ctx_create: Some(gdrpeer_rs_ctx_create),
    ctx_destroy: Some(gdrpeer_rs_ctx_destroy),
    mr_pin: Some(gdrpeer_rs_mr_pin),
    mr_unpin: Some(gdrpeer_rs_mr_unpin),
    dmabuf_export: Some(gdrpeer_rs_dmabuf_export),
};
