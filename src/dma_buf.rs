// SPDX-License-Identifier: GPL-2.0

//! dma-buf export: the one place where gdrpeer touches a `struct dma_buf`, its
//! `dma_buf_ops`, an attachment and a reservation object.
//!
//! The 7.2 kernel crate has no dma-buf exporter. This file adds what an exporter of memory
//! without `struct page`s needs (the 7.2 core's rules are in drivers/dma-buf/dma-buf.c):
//!
//! - [`export`] makes a dma-buf whose operations call an [`Exporter`], which the dma-buf owns
//!   (`priv`) and drops at `release`, when the last reference to it goes;
//! - `map_dma_buf` hands out an `sg_table` of the DMA segments [`Exporter::map`] gives, with
//!   no page behind any entry (`sg_page()` is NULL: an importer that reads it oopses at once,
//!   and the core's `CONFIG_DMABUF_DEBUG` wrapper checks the same);
//! - [`revoke`] tells every importer of a dma-buf to stop (`dma_buf_invalidate_mappings`
//!   under the reservation lock) and waits for their fences.
//!
//! The core calls `attach` and `detach` without the reservation lock, and `map_dma_buf` and
//! `unmap_dma_buf` with it held: an [`Exporter`] may sleep in all four, but must not take a
//! lock in `map` and `unmapped` that is held anywhere around an invalidation.
//!
//! TODO: goes when the kernel crate has a dma-buf exporter.

use core::{marker::PhantomData, ptr::NonNull};
use kernel::{
    bindings, device,
    error::{from_err_ptr, to_result},
    ffi::{c_int, c_long, c_void},
    fs::{file::FileDescriptorReservation, File},
    prelude::*,
    sync::aref::ARef,
};

use crate::sys::helpers;

/// One segment of an importer's mapping: DMA address and length in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Segment {
    pub(crate) addr: u64,
    pub(crate) len: u32,
}

/// What the core tells an exporter about a new attachment.
pub(crate) struct Attach<'a> {
    /// The importer's device.
    pub(crate) dev: &'a device::Device,
    /// The importer takes memory without `struct page`s (`allow_peer2peer`).
    pub(crate) peer2peer: bool,
    /// The importer handles invalidation: dynamic, or pinned with an `invalidate_mappings`
    /// op (`dma_buf_attach_revocable`).
    pub(crate) revocable: bool,
}

/// The owner of a dma-buf's memory.
pub(crate) trait Exporter: Send + Sync + Sized + 'static {
    /// What it keeps per attachment.
    type Attachment: Send + Sync;

    /// An importer attaches. Called without the reservation lock; may sleep.
    fn attach(&self, attach: &Attach<'_>) -> Result<Self::Attachment>;

    /// The DMA segments of the whole buffer for an attachment, in order. Called under the
    /// reservation lock. The importer has a mapping only once [`Exporter::mapped`] is called:
    /// making its table may still fail.
    fn map(&self, attachment: &Self::Attachment) -> Result<KVVec<Segment>>;

    /// The table of the segments `map` gave was made and goes to the importer, which gives it
    /// back with `unmap_dma_buf` ([`Exporter::unmapped`]). Called under the reservation lock,
    /// in the same call as `map`.
    fn mapped(&self, attachment: &Self::Attachment);

    /// A mapping that `mapped` announced was given back. Called under the reservation lock.
    fn unmapped(&self, attachment: &Self::Attachment);
}

/// A dma-buf that [`export`] made: one reference to it, put on drop unless it is installed
/// as a file descriptor ([`Exported::install`]) or handed to the caller ([`Exported::into_raw`]).
///
/// # Invariants
///
/// `0` is a dma-buf made by [`export`], and this owns one reference to it.
pub(crate) struct Exported(NonNull<bindings::dma_buf>);

impl Exported {
    /// The dma-buf, for [`revoke`].
    pub(crate) fn as_ptr(&self) -> *mut bindings::dma_buf {
        self.0.as_ptr()
    }

    /// Installs the dma-buf at a reserved file descriptor. The reference goes to the file
    /// table: the dma-buf is released when the last descriptor and the last importer are gone.
    pub(crate) fn install(self, fd: FileDescriptorReservation) {
        // SAFETY: a dma-buf's reference is a reference to its file (the core's `dma_buf_put`
        // is `fput`), owned by `self` (type invariant) and handed to the `ARef` here.
        let file =
            unsafe { ARef::<File>::from_raw(NonNull::new_unchecked((*self.as_ptr()).file.cast())) };
        core::mem::forget(self);
        fd.fd_install(file);
    }

    /// Hands the reference to the caller (the kernel API's `struct dma_buf *`).
    pub(crate) fn into_raw(self) -> *mut bindings::dma_buf {
        let p = self.as_ptr();
        core::mem::forget(self);
        p
    }
}

impl Drop for Exported {
    fn drop(&mut self) {
        // SAFETY: the reference is ours (type invariant).
        unsafe { bindings::dma_buf_put(self.as_ptr()) };
    }
}

/// Exports `exporter` as a dma-buf of `size` bytes that keeps `module` loaded while it lives
/// (`O_RDWR`; file descriptors made for it are `O_CLOEXEC`).
pub(crate) fn export<E: Exporter>(
    exporter: KBox<E>,
    size: usize,
    module: &'static ThisModule,
) -> Result<Exported> {
    let exporter = KBox::into_raw(exporter);
    let info = bindings::dma_buf_export_info {
        exp_name: c"gdrpeer".as_char_ptr(),
        owner: module.as_ptr(),
        ops: Ops::<E>::vtable(),
        size,
        flags: (bindings::O_RDWR | bindings::O_CLOEXEC) as c_int,
        resv: core::ptr::null_mut(),
        priv_: exporter.cast(),
    };
    // SAFETY: `info` is complete; the core takes a reference on `module` and calls the
    // operations of `Ops<E>`, which take `priv` for the `E` it is.
    let dmabuf = from_err_ptr(unsafe { bindings::dma_buf_export(&info) }).inspect_err(|_| {
        // SAFETY: nothing was exported, so `exporter` is still ours.
        drop(unsafe { KBox::from_raw(exporter) });
    })?;
    // INVARIANT: a new dma-buf with its one reference; its `release` drops `exporter`.
    Ok(Exported(NonNull::new(dmabuf).ok_or(EINVAL)?))
}

/// Tells every importer of a dma-buf to stop: `dma_buf_invalidate_mappings` under the
/// reservation lock, then waits until every fence of the reservation object has signalled.
/// The importers' unmaps may come after (the core gives them a bounded time); the caller
/// waits for those itself ([`Exporter::unmapped`]).
///
/// # Safety
///
/// `dmabuf` is a dma-buf made by [`export`] that stays alive during the call, and the caller
/// holds no reservation lock.
pub(crate) unsafe fn revoke(dmabuf: *mut bindings::dma_buf) {
    // SAFETY: `dmabuf` is alive (the function's contract), and so is its reservation object.
    let resv = unsafe { (*dmabuf).resv };
    // SAFETY: a live reservation object; without an acquire context the lock cannot fail.
    unsafe { bindings::dma_resv_lock(resv, core::ptr::null_mut()) };
    // SAFETY: `dmabuf` is alive and its reservation lock held, as the call requires.
    unsafe { bindings::dma_buf_invalidate_mappings(dmabuf) };
    // SAFETY: a live reservation object, locked by us.
    unsafe {
        bindings::dma_resv_wait_timeout(
            resv,
            bindings::dma_resv_usage_DMA_RESV_USAGE_BOOKKEEP,
            false,
            c_long::MAX.unsigned_abs(), // MAX_SCHEDULE_TIMEOUT
        )
    };
    // SAFETY: a live reservation object, which this thread locked with `dma_resv_lock` above.
    unsafe { bindings::dma_resv_unlock(resv) };
}

/// The operations of dma-bufs exported with an `E`.
struct Ops<E>(PhantomData<E>);

impl<E: Exporter> Ops<E> {
    const VTABLE: bindings::dma_buf_ops = bindings::dma_buf_ops {
        attach: Some(Self::attach),
        detach: Some(Self::detach),
        map_dma_buf: Some(Self::map),
        unmap_dma_buf: Some(Self::unmap),
        release: Some(Self::release),
        // SAFETY: every other field is an optional function pointer, for which zero is
        // `None`.
        ..unsafe { core::mem::zeroed() }
    };

    /// The table, as the `'static` reference the core keeps.
    const fn vtable() -> &'static bindings::dma_buf_ops {
        &Self::VTABLE
    }

    /// The exporter of a dma-buf of ours.
    ///
    /// # Safety
    ///
    /// `dmabuf` was made by [`export`] with an `E` and is not released yet.
    unsafe fn exporter<'a>(dmabuf: *mut bindings::dma_buf) -> &'a E {
        // SAFETY: `priv` is the `E` that `export` leaked, dropped only at release (the
        // function's contract).
        unsafe { &*(*dmabuf).priv_.cast::<E>() }
    }

    /// # Safety
    ///
    /// Called by the core with a dma-buf of ours and a new attachment of it.
    unsafe extern "C" fn attach(
        dmabuf: *mut bindings::dma_buf,
        attach: *mut bindings::dma_buf_attachment,
    ) -> c_int {
        // SAFETY: the core passes a live dma-buf of ours (the function's contract).
        let exporter = unsafe { Self::exporter(dmabuf) };
        // SAFETY: a new attachment, filled in by the core, with a live device.
        let (dev, peer2peer, revocable) = unsafe {
            (
                device::Device::from_raw((*attach).dev),
                (*attach).peer2peer,
                bindings::dma_buf_attach_revocable(attach),
            )
        };
        let info = Attach {
            dev,
            peer2peer,
            revocable,
        };
        match exporter
            .attach(&info)
            .and_then(|a| Ok(KBox::new(a, GFP_KERNEL)?))
        {
            Ok(a) => {
                // SAFETY: `priv` of an attachment is the exporter's; detach takes it back.
                unsafe { (*attach).priv_ = KBox::into_raw(a).cast::<c_void>() };
                0
            }
            Err(e) => e.to_errno(),
        }
    }

    /// # Safety
    ///
    /// Called by the core with a dma-buf of ours and an attachment that `attach` accepted.
    unsafe extern "C" fn detach(
        _dmabuf: *mut bindings::dma_buf,
        attach: *mut bindings::dma_buf_attachment,
    ) {
        // SAFETY: `attach` set `priv` to a boxed `E::Attachment`; the core detaches once.
        drop(unsafe { KBox::from_raw((*attach).priv_.cast::<E::Attachment>()) });
    }

    /// # Safety
    ///
    /// Called by the core under the reservation lock, with an attachment of ours.
    unsafe extern "C" fn map(
        attach: *mut bindings::dma_buf_attachment,
        _dir: bindings::dma_data_direction,
    ) -> *mut bindings::sg_table {
        // SAFETY: an attachment of a live dma-buf of ours (the function's contract), whose
        // `priv` `attach` set.
        let (exporter, attachment) = unsafe {
            (
                Self::exporter((*attach).dmabuf),
                &*(*attach).priv_.cast::<E::Attachment>(),
            )
        };
        match exporter
            .map(attachment)
            .and_then(|segments| sg_table(&segments))
        {
            Ok(sgt) => {
                // From here the core gives the table back with `unmap_dma_buf`, also when
                // its own steps after this call fail.
                exporter.mapped(attachment);
                sgt
            }
            Err(e) => e.to_ptr(),
        }
    }

    /// # Safety
    ///
    /// Called by the core under the reservation lock, with a table that `map` returned for
    /// this attachment.
    unsafe extern "C" fn unmap(
        attach: *mut bindings::dma_buf_attachment,
        sgt: *mut bindings::sg_table,
        _dir: bindings::dma_data_direction,
    ) {
        // SAFETY: `map` made `sgt` with `sg_table`; the core gives it back once.
        unsafe { free_sg_table(sgt) };
        // SAFETY: as for `map`.
        let (exporter, attachment) = unsafe {
            (
                Self::exporter((*attach).dmabuf),
                &*(*attach).priv_.cast::<E::Attachment>(),
            )
        };
        exporter.unmapped(attachment);
    }

    /// # Safety
    ///
    /// Called by the core once, when the last reference to a dma-buf of ours is gone.
    unsafe extern "C" fn release(dmabuf: *mut bindings::dma_buf) {
        // SAFETY: `priv` is the `E` that `export` leaked; this is the last use of it.
        drop(unsafe { KBox::from_raw((*dmabuf).priv_.cast::<E>()) });
    }
}

/// A DMA-only `sg_table` of `segments` (no page behind any entry), freed by [`free_sg_table`].
fn sg_table(segments: &[Segment]) -> Result<*mut bindings::sg_table> {
    let n = u32::try_from(segments.len()).map_err(|_| EINVAL)?;
    // SAFETY: an all-zero `sg_table` is the empty table that `sg_alloc_table` fills.
    let sgt = KBox::new(
        unsafe { core::mem::zeroed::<bindings::sg_table>() },
        GFP_KERNEL,
    )?;
    let sgt = KBox::into_raw(sgt);
    // SAFETY: `sgt` is an empty table of ours.
    if let Err(e) = to_result(unsafe { bindings::sg_alloc_table(sgt, n, bindings::GFP_KERNEL) }) {
        // SAFETY: `sg_alloc_table` frees what it allocated when it fails; the box is ours.
        drop(unsafe { KBox::from_raw(sgt) });
        return Err(e);
    }
    // SAFETY: the table has `n` entries, chained; `sg_next` walks them.
    let mut sg = unsafe { (*sgt).sgl };
    for s in segments {
        // SAFETY: `sg` is one of the table's `n` entries (there are as many as segments).
        unsafe {
            helpers::gdrpeer_sg_set_dma(sg, s.addr, s.len);
            sg = bindings::sg_next(sg);
        }
    }
    Ok(sgt)
}

/// Frees a table made by [`sg_table`].
///
/// # Safety
///
/// `sgt` came from [`sg_table`] and is not used again.
unsafe fn free_sg_table(sgt: *mut bindings::sg_table) {
    // SAFETY: a table `sg_table` allocated (the function's contract).
    unsafe { bindings::sg_free_table(sgt) };
    // SAFETY: `sg_table` boxed it.
    drop(unsafe { KBox::from_raw(sgt) });
}
