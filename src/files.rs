// SPDX-License-Identifier: GPL-2.0

//! What the file front-ends, `/dev/gdrpeer` ([`crate::chardev`]) and `/dev/gdrdrv`
//! ([`crate::gdrdrv`]), share: an open file's context ([`OpenFile`]), CPU mappings of a
//! handle's window ([`CpuMap`], over the handle's [`Mappings`], `files/mappings.rs`) and the
//! reading and polling of invalidation events ([`read_events`], [`poll_events`]).
//!
//! Each device lays its handles out in the mmap offsets its own way ([`MapAt`]):
//! `/dev/gdrpeer` puts the handle in the offset's high bits (`GDRPEER_MMAP_HANDLE_SHIFT`) and
//! the byte in the window in the low ones; on `/dev/gdrdrv` a handle is itself the offset in
//! pages of its window, as gdrdrv numbers them ([`crate::cache::Numbering::PageOffsets`]).

use core::ptr::NonNull;
use kernel::{
    bindings,
    fs::File,
    iov::IovIterDest,
    mm::virt::VmaNew,
    page::PAGE_SHIFT,
    prelude::*,
    sync::{
        aref::ARef,
        atomic::{Atomic, Relaxed},
        poll::PollTable,
        Arc,
    },
    transmute::AsBytes,
    types::ScopeGuard,
};

use crate::{
    cache::{Context, Numbering, Region},
    env::Env,
    events::Read,
    notify::Notifier,
    range::{GpuRange, GPU_PAGE_SHIFT, GPU_PAGE_SIZE},
    uapi,
    vma::{self, Caching, Fault, FaultResult, PfnMapper, WcReservation},
};

mod mappings;

use mappings::Mappings;

/// What every open file of a front-end device holds: a context of the opening process, with
/// events. (The file holds the module too: its device's file operations name the module as
/// their owner, [`crate::miscdev`].)
pub(crate) struct OpenFile {
    /// The file's registration cache.
    pub(crate) ctx: Arc<Context>,
}

impl OpenFile {
    /// The state of a file being opened, whose handles are numbered as `numbering` says.
    pub(crate) fn new(numbering: Numbering) -> Result<Self> {
        Ok(OpenFile {
            ctx: Context::new(Env::get()?, true, numbering)?,
        })
    }

    /// The file is released: closes the context (whatever else holds it must be dropped
    /// first).
    pub(crate) fn release(self) {
        self.ctx.close();
    }
}

/// `GDRPEER_MMAP_HANDLE_SHIFT` in pages: a `/dev/gdrpeer` mapping's file offset in pages is
/// the handle shifted by this, plus the page in the window.
pub(crate) const MMAP_HANDLE_SHIFT_PAGES: u32 = uapi::MMAP_HANDLE_SHIFT - PAGE_SHIFT as u32;

/// Where a new mapping lies among its file's offsets, as its device lays handles out.
pub(crate) struct MapAt {
    /// The handle it maps.
    pub(crate) handle: u64,
    /// The byte of the handle's window it starts at (a multiple of the page size).
    pub(crate) offset: u64,
    /// The file offset, in pages, of the window's first byte.
    pub(crate) base: usize,
}

impl MapAt {
    /// A mapping of `/dev/gdrpeer` at file offset `pgoff` (in pages):
    /// `GDRPEER_MMAP_OFFSET(handle, offset)`.
    pub(crate) fn gdrpeer(pgoff: u64) -> Self {
        let handle = pgoff >> MMAP_HANDLE_SHIFT_PAGES;
        MapAt {
            handle,
            offset: (pgoff & ((1 << MMAP_HANDLE_SHIFT_PAGES) - 1)) << PAGE_SHIFT,
            base: (handle << MMAP_HANDLE_SHIFT_PAGES) as usize,
        }
    }
}

/// A CPU mapping of a handle's window: what one mmap call made, shared by the vmas it
/// becomes (split, moved); dropped with the last of them (munmap, exit).
///
/// Pages are inserted on fault only, from the pin's bus addresses read with the pin's access
/// held ([`nv_p2p::Pinned::with_bus_address`]), so no fault inserts a page of a freed table.
/// While the handle lives its region stays in use: never evicted, never released (and the
/// vmas hold the file, so the context cannot close). Unpinning the handle ends its mappings
/// ([`Mappings`]) and zaps them ([`unmap_handle`]); when NVIDIA frees the memory, the free
/// callback zaps every mapping of the window ([`Zap`]) after the last fault left and before
/// the table is freed. Either way later faults get SIGBUS.
///
/// One allocation: the [`Zap`] is lent to the region's notifier list from here
/// ([`Region::add_lent_notifier`]) and taken back when the last vma goes
/// ([`PfnMapper::release`]), before this is dropped.
pub(crate) struct CpuMap {
    region: Arc<Region>,
    window: GpuRange,
    /// The file offset of the window's first byte, in pages.
    base: usize,
    /// The handle's mappings, put when this goes.
    mappings: Arc<Mappings>,
    /// The zap of the window's mappings, lent to the region while `notifier` is not 0.
    zap: Zap,
    /// The id of `zap` on the region while it is registered, 0 when it is not.
    notifier: Atomic<u64>,
    /// Write-combining reserved for the window's pages, for a write-combining mapping.
    _wc: Option<WcReservation>,
}

impl CpuMap {
    /// Checks the mapping a new `vma` asks for and installs it: cached if `allow_cached` and
    /// NVIDIA's table says the CPU may cache the pages ([`mapping_caching`]), write-combining
    /// otherwise.
    ///
    /// Returns the caching the mapping got.
    pub(crate) fn install(
        ctx: &Context,
        file: &File,
        vma: &VmaNew,
        at: MapAt,
        allow_cached: bool,
    ) -> Result<Caching> {
        if !ctx.is_owner() {
            return Err(EACCES);
        }
        if !vma::is_shared(vma) {
            return Err(EINVAL);
        }
        let MapAt {
            handle,
            offset,
            base,
        } = at;
        let len = (vma.end() - vma.start()) as u64;
        let (region, window, mappings) = Mappings::get(ctx, handle)?;
        // Until the mapping is complete, an early return puts it back.
        let mappings = ScopeGuard::new_with_data(mappings, |mappings| mappings.put());
        if offset.checked_add(len).is_none_or(|end| end > window.len()) {
            return Err(EINVAL);
        }
        let caching = mapping_caching(&region, allow_cached);
        let wc = match caching {
            // The whole window, as the vma may be moved or split over it. Held until the
            // mapping goes, also past a revocation, as a mapping made at once would hold it.
            // The region's own addresses, read in place. -ENXIO once the memory was freed.
            Caching::WriteCombining => Some(WcReservation::new(
                region.window_bus_addresses(&window)?,
                GPU_PAGE_SIZE,
            )?),
            Caching::Cached => None,
        };
        let map = Arc::new(
            CpuMap {
                region,
                window,
                base,
                mappings: mappings.dismiss(),
                zap: Zap {
                    file: ARef::from(file),
                    base,
                    pages: (window.len() >> PAGE_SHIFT) as usize,
                },
                notifier: Atomic::new(0),
                _wc: wc,
            },
            GFP_KERNEL,
        )?;
        // Dropping `map` on failure undoes what it holds (it is not registered then).
        // SAFETY: `zap` lives in the `Arc`, which is dropped only after `CpuMap::unregister`
        // has returned (`PfnMapper::release`, when the last vma goes, or below on failure),
        // and nothing borrows it mutably before (the `Arc` is shared; its drop comes after).
        // -ENXIO once the memory was freed.
        let id = unsafe { map.region.add_lent_notifier(NonNull::from(&map.zap)) }?;
        map.notifier.store(id, Relaxed);
        vma::install(vma, caching, map);
        Ok(caching)
    }

    /// Unregisters the [`Zap`], if registered: once this returns the callback does not call
    /// it and the region's list no longer points at it. Waits if the callback is zapping.
    fn unregister(&self) {
        let id = self.notifier.xchg(0, Relaxed);
        if id != 0 {
            self.region.remove_notifier(id);
        }
    }
}

impl PfnMapper for CpuMap {
    /// The last vma of the mapping goes: the zap is taken back from the region (waiting if
    /// the callback is calling it), through this shared reference, before the drop.
    fn release(&self) {
        self.unregister();
    }

    fn fault(&self, fault: &Fault<'_>) -> FaultResult {
        let Some(page) = fault.pgoff().checked_sub(self.base) else {
            return FaultResult::SIGBUS;
        };
        let byte = (page as u64) << PAGE_SHIFT;
        if byte >= self.window.len() {
            return FaultResult::SIGBUS;
        }
        // The handle was unpinned: its region may be released.
        if !self.mappings.enter() {
            return FaultResult::SIGBUS;
        }
        let pinned = self.region.pinned();
        let gpu_page =
            self.window.first_page_in(pinned.range()) + (byte >> GPU_PAGE_SHIFT) as usize;
        let within = byte & (GPU_PAGE_SIZE - 1);
        // -ENXIO: revoked (or released, which cannot happen while the handle lives).
        let result = pinned
            .with_bus_address(gpu_page, |bus| {
                // SAFETY: a BAR page of the pinned table, which the callback does not free
                // before the zap of every mapping of the window ([`Zap`]), nor put_pages
                // before the unpin's zap ([`unmap_handle`]).
                unsafe { fault.insert_pfn((bus + within) >> PAGE_SHIFT) }
            })
            .unwrap_or(FaultResult::SIGBUS);
        self.mappings.leave();
        result
    }
}

impl Drop for CpuMap {
    fn drop(&mut self) {
        // Unregistered already (`PfnMapper::release`), or never registered: a no-op.
        self.unregister();
        self.mappings.put();
    }
}

/// Zaps the CPU mappings of a window when NVIDIA frees the region: every vma of the file
/// that maps the handle's offsets, in any process (the region's readers are gone by then,
/// so no fault re-inserts a page). Holds the file, which keeps its address space alive; the
/// cycle through the file's context is broken when the mapping goes (the notifier is removed)
/// or the callback has called the notifier.
struct Zap {
    file: ARef<File>,
    base: usize,
    pages: usize,
}

impl Notifier for Zap {
    fn notify(&self) {
        vma::unmap_file_pages(&self.file, self.base, self.pages);
    }
}

/// Zaps every mapping of `file` within `pages` pages of file offsets from `base`: those of
/// a handle being unpinned, for [`Context::unpin`] (whose lock it runs under:
/// `unmap_mapping_pages` takes the file's `i_mmap_rwsem` and page-table locks, never a
/// `mmap_lock`).
pub(crate) fn unmap_handle(file: &File, base: usize, pages: usize) {
    vma::unmap_file_pages(file, base, pages);
}

/// How a mapping of `region` is cached: cached only if the caller allows it and NVIDIA's
/// table says the CPU may cache the pages (coherent platforms), write-combining otherwise.
pub(crate) fn mapping_caching(region: &Region, allow_cached: bool) -> Caching {
    if allow_cached && region.pinned().cpu_cacheable() {
        Caching::Cached
    } else {
        Caching::WriteCombining
    }
}

/// `read(2)` of a file's invalidation events: whole `struct gdrpeer_event` records, oldest
/// first, waiting for one if none is queued and `wait` allows.
///
/// -EACCES from another process than the opener, -EINVAL for a buffer smaller than a record,
/// -EAGAIN when none is queued and `wait` is false, -EFAULT when no record could be copied
/// (the events stay queued).
///
/// `name` gives the handle as the device names it.
pub(crate) fn read_events(
    ctx: &Context,
    iov: &mut IovIterDest<'_>,
    wait: bool,
    name: impl Fn(u64) -> u64,
) -> Result<usize> {
    const RECORD: usize = core::mem::size_of::<uapi::Event>();
    if !ctx.is_owner() {
        return Err(EACCES);
    }
    let events = ctx.events().ok_or(EINVAL)?;
    let room = iov.len() / RECORD;
    if room == 0 {
        return Err(EINVAL);
    }
    let read = events.read(room, wait, |handles| {
        handles
            .iter()
            .take_while(|&&handle| {
                let event = uapi::Event {
                    handle: name(handle),
                    type_: uapi::EVENT_REVOKED,
                    pad: 0,
                };
                iov.copy_to_iter(event.as_bytes()) == RECORD
            })
            .count()
    })?;
    match read {
        Read::Events(0) => Err(EFAULT),
        Read::Events(n) => Ok(n * RECORD),
        Read::WouldBlock => Err(EAGAIN),
    }
}

/// `poll(2)` of a file's events: readable while one is queued; POLLERR for another process
/// than the opener, which may not read them.
pub(crate) fn poll_events(ctx: &Context, file: &File, table: PollTable<'_>) -> u32 {
    if !ctx.is_owner() {
        return bindings::POLLERR;
    }
    match ctx.events() {
        Some(events) if events.poll(file, table) => bindings::POLLIN | bindings::POLLRDNORM,
        _ => 0,
    }
}
