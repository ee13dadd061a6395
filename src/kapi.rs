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

use core::{mem::MaybeUninit, ptr::NonNull};
use kernel::{
    ffi::c_void,
    pci,
    prelude::*,
    sync::{
        aref::ARef,
        atomic::{Atomic, Full, Relaxed},
        Arc,
    },
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
#[derive(Clone, Copy)]
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
    shared: Arc<KapiShared>,
}

/// What a context's registrations share with it, and keep after its destroy: the context;
/// the context's last registration unpinned, kept whole for the next pin of a window in its
/// region (the registration cache's hit); and the memory of a registration released, kept for
/// the next pin (as `/dev/gdrpeer` keeps a spare handle node), so that a hit allocates nothing.
struct KapiShared {
    ctx: Arc<Context>,
    /// A registration unpinned, from [`KBox::into_raw`]; null when there is none
    /// ([`KapiShared::park`]).
    parked: Atomic<*mut KapiMr>,
    /// Set by gdrpeer_ctx_destroy: nothing is parked from then on (a parked registration
    /// holds a reference on this struct).
    destroyed: Atomic<bool>,
    /// A registration's memory, unused, from [`KBox::into_raw`]; null when there is none.
    spare: Atomic<*mut MaybeUninit<KapiMr>>,
}

// SAFETY: `parked` and `spare` are only read and written atomically, and what they point to is
// owned by whichever thread took it out (`take_parked`, `take_spare`); a `KapiMr` may be sent
// (its callback may be called from any thread), so sending or sharing the struct is sound.
unsafe impl Send for KapiShared {}
// SAFETY: as for `Send`: `&KapiShared` gives what `parked` and `spare` point to only to the
// thread that takes it out of its slot atomically.
unsafe impl Sync for KapiShared {}

impl KapiShared {
    /// The registration parked by an unpin, if any.
    fn take_parked(&self) -> Option<KBox<KapiMr>> {
        let p = self.parked.xchg(core::ptr::null_mut(), Full);
        // SAFETY: a non-null `parked` came from `KBox::into_raw` (`park`) and was taken out of
        // the slot here, once.
        (!p.is_null()).then(|| unsafe { KBox::from_raw(p) })
    }

    /// Keeps `mr`, unpinned (its callback unregistered), for the context's next pin: its
    /// region stays held and its use of the DMA mapping kept, so that a pin of a window in
    /// the region needs neither the context's lock nor the region's mapping
    /// ([`KapiMr::reuse`]). One registration is kept; the one it replaces is released. A
    /// registration is released at once where the region's mappings are not kept
    /// (`dma_map_keep=0`: the DMA use must end with it), after gdrpeer_ctx_destroy, and where
    /// the context is over its limits (`cache_max_regions`, `cache_max_bytes`,
    /// `global_max_bytes`) with every region in use: the release makes the region unused, and
    /// the limits unpin it, where kept it would stay pinned over them. The context's next pin
    /// takes it out first (`pin`), and a dma-buf export of the context that finds BAR1 full
    /// releases it and tries again (`gdrpeer_rs_dmabuf_export`): a kept registration never
    /// stands in the way of the context's eviction.
    fn park(&self, mr: KBox<KapiMr>) {
        if !params::dma_map_keep() || self.destroyed.load(Relaxed) || self.ctx.over_limits() {
            self.release(mr);
            return;
        }
        let old = self.parked.xchg(KBox::into_raw(mr), Full);
        if !old.is_null() {
            // SAFETY: a non-null `parked` came from `KBox::into_raw` and was taken out of the
            // slot here, once.
            self.release(unsafe { KBox::from_raw(old) });
        }
        // gdrpeer_ctx_destroy sets `destroyed`, then empties the slot; the exchange above is a
        // full barrier, as is the destroy's: either it saw `mr`, or `destroyed` is seen here.
        if self.destroyed.load(Relaxed) {
            if let Some(mr) = self.take_parked() {
                self.release(mr);
            }
        }
    }

    /// Ends a registration: its use of the DMA mapping and its hold on the region go, and its
    /// memory is kept for the next pin.
    fn release(&self, mr: KBox<KapiMr>) {
        self.keep_spare(KBox::drop_contents(mr));
    }

    /// The registration memory kept for the next pin, if any.
    fn take_spare(&self) -> Option<KBox<MaybeUninit<KapiMr>>> {
        let p = self.spare.xchg(core::ptr::null_mut(), Full);
        // SAFETY: a non-null `spare` came from `KBox::into_raw` (`keep_spare`) and was taken out
        // of the slot here, once.
        (!p.is_null()).then(|| unsafe { KBox::from_raw(p) })
    }

    /// Keeps `spare` for the next pin; frees the one it replaces, if any.
    fn keep_spare(&self, spare: KBox<MaybeUninit<KapiMr>>) {
        let old = self.spare.xchg(KBox::into_raw(spare), Full);
        if !old.is_null() {
            // SAFETY: a non-null `spare` came from `KBox::into_raw` and was taken out of the
            // slot here, once.
            drop(unsafe { KBox::from_raw(old) });
        }
    }
}

impl Drop for KapiShared {
    fn drop(&mut self) {
        // Nothing is parked: a parked registration holds a reference on `self`.
        drop(self.take_spare());
    }
}

/// A `struct gdrpeer_mr`: one allocation, which the region's notifier list points into
/// ([`Region::add_lent_notifier`]) and which hands out the DMA mapping's own address array.
/// Its memory goes back to its context's `spare` when it is unpinned.
struct KapiMr {
    shared: Arc<KapiShared>,
    /// Its use of the region's DMA mapping for the peer, whose addresses it hands out; the
    /// region is held without a handle ([`Context::hold`]).
    dma: DmaUse,
    /// The window registered.
    window: GpuRange,
    /// The peer driver's callback, lent to the region's notifier list.
    invalidate: Invalidate,
    /// The id of `invalidate` on the region while it is registered, 0 when it is not.
    notifier: Atomic<u64>,
}

impl KapiMr {
    /// The region it holds.
    fn region(&self) -> &Arc<Region> {
        self.dma.region()
    }

    /// Registers `invalidate` for `window` on the region, where the parked registration
    /// (unregistered) serves the pin: `peer`'s, `window` in the region, its mapping still
    /// there (a peer's unbind or removal gives it back under the parked registration, whose
    /// addresses are then stale), the region not revoked (the notifier's registration says
    /// so). Counts a cache hit. Gives the registration back where it cannot be reused.
    fn reuse(
        mut mr: KBox<Self>,
        peer: &pci::Device,
        window: GpuRange,
        invalidate: Invalidate,
    ) -> core::result::Result<KBox<Self>, KBox<Self>> {
        if !core::ptr::eq(mr.dma.peer(), peer)
            || mr.dma.window_addresses(&window).is_err()
            || !mr.dma.is_mapped()
        {
            return Err(mr);
        }
        mr.window = window;
        mr.invalidate = invalidate;
        // SAFETY: as in `pin`: `invalidate` lives in the box, which is freed only by
        // `KapiMr`'s drop after `unregister` has returned, and is not borrowed mutably
        // meanwhile (the box is not taken mutably again while registered).
        match unsafe { mr.region().add_lent_notifier(NonNull::from(&mr.invalidate)) } {
            Ok(id) => {
                mr.notifier.store(id, Relaxed);
                mr.shared.ctx.count_hit();
                Ok(mr)
            }
            Err(_) => Err(mr),
        }
    }

    /// Unregisters the callback, if registered: once this returns it is not called and the
    /// region's list no longer points at it. Waits for a callback in progress.
    fn unregister(&self) {
        let id = self.notifier.xchg(0, Relaxed);
        if id != 0 {
            self.region().remove_notifier(id);
        }
    }
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
        let shared = Arc::new(
            KapiShared {
                ctx,
                parked: Atomic::new(core::ptr::null_mut()),
                destroyed: Atomic::new(false),
                spare: Atomic::new(core::ptr::null_mut()),
            },
            GFP_KERNEL,
        )?;
        Ok(KBox::into_raw(KBox::new(KapiCtx { shared }, GFP_KERNEL)?).cast())
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
    // The parked registration goes; none is parked after (`KapiShared::park`).
    ctx.shared.destroyed.store(true, Relaxed);
    if let Some(mr) = ctx.shared.take_parked() {
        ctx.shared.release(mr);
    }
    ctx.shared.ctx.close();
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
        let ctx = &unsafe { &*ctx.cast::<KapiCtx>() }.shared;
        // SAFETY: `peer` is a live PCI device (the function's contract), and `pci::Device` is
        // `#[repr(transparent)]` over `struct pci_dev`; `ARef::from` takes a reference on it.
        let peer = ARef::from(unsafe { &*peer.cast::<pci::Device>() });
        let mr = pin(ctx, &peer, va, len, Invalidate { f, data })?;
        let window = mr.window;
        // The mapping's array, held by the registration until its unpin (`pin` checked that
        // the window lies in it).
        let dma_addrs = match mr.dma.window_addresses(&window) {
            Ok(addrs) => addrs.as_ptr(),
            Err(e) => {
                // Taken back before the drop, as gdrpeer_rs_mr_unpin does.
                mr.unregister();
                return Err(e);
            }
        };
        // SAFETY: `info` is writable (the function's contract).
        unsafe {
            info.write(bindings::gdrpeer_mr_info {
                aligned_va: window.start(),
                offset: window.offset(),
                page_count: window.page_count(),
                page_size: GPU_PAGE_SIZE as u32,
                dma_addrs,
            })
        };
        Ok(KBox::into_raw(mr).cast())
    })())
}

fn pin(
    shared: &Arc<KapiShared>,
    peer: &ARef<pci::Device>,
    va: u64,
    len: u64,
    invalidate: Invalidate,
) -> Result<KBox<KapiMr>> {
    let ctx = &shared.ctx;
    if !ctx.is_owner() {
        return Err(EACCES);
    }
    let window = GpuRange::new(va, len, params::max_pin_bytes())?;
    // The last registration unpinned, where it serves this one; released where it does not,
    // or fails (a callback made meanwhile: the pin below says what is left).
    if let Some(parked) = shared.take_parked() {
        match KapiMr::reuse(parked, peer, window, invalidate) {
            Ok(mr) => return Ok(mr),
            Err(parked) => shared.release(parked),
        }
    }
    // Until the registration is complete, an early return gives the region back.
    let region = ScopeGuard::new_with_data(ctx.hold(window)?, |region| ctx.unhold(&region));
    let dma = region.dma_use(peer)?;
    // The window lies in the region (a hit or a new pin of it): checked once here.
    dma.window_addresses(&window)?;
    let memory = match shared.take_spare() {
        Some(memory) => memory,
        None => KBox::new_uninit(GFP_KERNEL)?,
    };
    // The hold is the registration's from here: on failure `mr` is dropped, which gives the
    // region back.
    drop(region.dismiss());
    let mr = KBox::write(
        memory,
        KapiMr {
            shared: shared.clone(),
            dma,
            window,
            invalidate,
            notifier: Atomic::new(0),
        },
    );
    // SAFETY: `invalidate` lives in the box, which is freed only by `KapiMr`'s drop after
    // `unregister` has returned (gdrpeer_rs_mr_unpin, or the drop itself), and is never
    // borrowed mutably meanwhile (nothing takes the box mutably; its drop unregisters first).
    let id = unsafe { mr.region().add_lent_notifier(NonNull::from(&mr.invalidate)) }?;
    mr.notifier.store(id, Relaxed);
    Ok(mr)
}

impl Drop for KapiMr {
    fn drop(&mut self) {
        // Unregistered already by gdrpeer_rs_mr_unpin (through a shared reference, so that the
        // callback's own shared reference is never aliased by this `&mut`); a no-op then.
        self.unregister();
        // After gdrpeer_ctx_destroy the region was released already: this drops the reference.
        self.shared.ctx.unhold(self.region());
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
        let mr = unsafe { KBox::from_raw(mr.cast::<KapiMr>()) };
        // Waits for a callback in progress; none is made afterwards, and the region's list
        // no longer points into `mr`.
        mr.unregister();
        // Kept whole for the context's next pin, or its use of the DMA mapping ends with it,
        // and its hold on the region, its memory kept.
        let shared = mr.shared.clone();
        shared.park(mr);
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
        let shared = &unsafe { &*ctx.cast::<KapiCtx>() }.shared;
        let ctx = &shared.ctx;
        if !ctx.is_owner() {
            return Err(EACCES);
        }
        let range = GpuRange::new(va, len, params::max_pin_bytes())?;
        let what = if flags & bindings::GDRPEER_DMABUF_PERSISTENT != 0 {
            Window::Persistent(range)
        } else {
            Window::Range(range)
        };
        let made = match Export::create(ctx, what) {
            // BAR1 full (or memory short): the registration kept for the next pin holds a
            // region that the pin's eviction may not take. Released, it is unused, and the
            // pin tried again may evict it, as a registration's pin would have
            // ([`KapiShared::park`]).
            Err(e) if e == ENOMEM => match shared.take_parked() {
                Some(parked) => {
                    shared.release(parked);
                    Export::create(ctx, what)?
                }
                None => return Err(e),
            },
            made => made?,
        };
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
