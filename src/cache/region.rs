// SPDX-License-Identifier: GPL-2.0

//! A pinned region of GPU memory in a context's cache ([`Region`]), and the front-ends'
//! notifiers on it.

use core::ptr::NonNull;
use kernel::{
    list::{AtomicTracker, ListArc, ListLinks, TryNewListArc},
    new_spinlock, pci,
    prelude::*,
    rbtree::{RBTree, RBTreeNodeReservation},
    sync::{
        aref::ARef,
        atomic::{Atomic, Full, Relaxed},
        Arc, LockedBy, SpinLock,
    },
};

use super::{inner::Book, Context, Inner};
use crate::{
    events::HandleEvent,
    notify::Notifier,
    nv_p2p::{PinKind, PinOwner, Pinned, Tokens},
    params,
    range::GpuRange,
    stats::GLOBAL,
};

/// Front-ends' notifiers on a region (handles' events, mappings, the kernel API's
/// registrations).
pub(super) struct Notifiers {
    /// One notifier kept in the region itself, by its id: the first registered while the slot
    /// is free. A handle's event, which comes and goes with every pin and unpin of a cached
    /// region, lives here when it is the region's only notifier, so that a hit touches no
    /// memory but the region's for it (a node apart is one more cold page in a large cache).
    pub(super) first: Option<(u64, Watcher)>,
    /// The others, by id.
    pub(super) list: RBTree<u64, Watcher>,
    /// A node's memory kept from the last removal from `list` for the next registration that
    /// finds `first` taken: notifiers that come and go allocate nothing.
    pub(super) spare: Option<RBTreeNodeReservation<u64, Watcher>>,
    /// The free callback has taken `first` and `list` and is calling them.
    pub(super) running: bool,
}

/// A registered notifier: a handle's event, stored whole, or a front-end's own, boxed or
/// lent ([`Region::add_lent_notifier`]).
pub(super) enum Watcher {
    Event(HandleEvent),
    Boxed(KBox<dyn Notifier>),
    Lent(LentNotifier),
}

/// A front-end's notifier that lives in the front-end's own memory.
///
/// # Invariants
///
/// The notifier stays valid until [`Region::remove_notifier`] of its id has returned, or
/// until the free callback that took it out of the region's notifiers has dropped them.
pub(super) struct LentNotifier(NonNull<dyn Notifier>);

// SAFETY: a `Notifier` is `Send + Sync`; this only lets a thread call it through a shared
// reference, while it is valid (type invariant).
unsafe impl Send for LentNotifier {}
// SAFETY: as for `Send`.
unsafe impl Sync for LentNotifier {}

impl Watcher {
    pub(super) fn notify(&self) {
        match self {
            Watcher::Event(event) => event.notify(),
            Watcher::Boxed(notifier) => notifier.notify(),
            // SAFETY: the notifier is called from the region's notifiers, so before its
            // removal returned or they were dropped (type invariant).
            Watcher::Lent(lent) => unsafe { lent.0.as_ref() }.notify(),
        }
    }
}

/// A pinned region of GPU memory in a context's cache.
#[pin_data]
pub(crate) struct Region {
    pub(super) ctx: Arc<Context>,
    pub(super) book: LockedBy<Book, Inner>,
    /// Lock 4 of the crate's order, like `Pinned::state`; never held with it.
    #[pin]
    pub(super) notifiers: SpinLock<Notifiers>,
    /// Its share of the global counters, settled by its release or NVIDIA's free callback,
    /// whichever comes first ([`Tally`]).
    pub(super) tally: Tally,
    /// Its place in `Inner::lru` (the eviction list), used by no other list.
    #[pin]
    pub(super) lru_links: ListLinks,
    #[pin]
    pub(super) lru_track: AtomicTracker,
    /// Its place in its context's list of revoked regions (`Context::revoked`), where NVIDIA's
    /// free callback puts it, once, for the context to drop at its next operation.
    #[pin]
    pub(super) revoked_links: ListLinks<1>,
    #[pin]
    pub(super) pinned: Pinned,
}

kernel::list::impl_list_arc_safe! {
    impl ListArcSafe<0> for Region { tracked_by lru_track: AtomicTracker; }
    // Only the free callback makes a `ListArc<Region, 1>`, from its own reference, and NVIDIA
    // calls back at most once per pin (`PinOwner::revoked`): nothing to track.
    impl ListArcSafe<1> for Region { untracked; }
}

kernel::list::impl_list_item! {
    impl ListItem<0> for Region { using ListLinks { self.lru_links }; }
    impl ListItem<1> for Region { using ListLinks { self.revoked_links }; }
}

impl PinOwner for Region {
    fn pinned(&self) -> &Pinned {
        &self.pinned
    }

    fn revoked(this: Arc<Self>) {
        // Under NVIDIA's lock, which comes after the context's (lock 1): the global counters
        // are settled here (atomics); the rest waits for the context's next operation.
        this.tally.on_callback(&this.pinned);
        GLOBAL.callbacks.add(1, Relaxed);
        let ctx = this.ctx.clone();
        // SAFETY: `this` is the callback's own reference (an `Arc` of a live region); NVIDIA
        // calls back at most once per pin, and a region has one pin, so no other
        // `ListArc<Region, 1>` of it was ever made (the ID's tracking is `untracked`).
        let item = unsafe { ListArc::<Region, 1>::from_raw(Arc::into_raw(this)) };
        ctx.push_revoked(item);
    }

    fn invalidate(&self) {
        let (first, list) = {
            let mut n = self.notifiers.lock();
            if n.first.is_none() && n.list.is_empty() {
                // Nothing to call, so nothing for a removal to wait for (a cached region
                // that nobody uses): `running` stays false. A notifier added from here on
                // sees the pin revoked and takes itself out ([`Region::add_watcher`]).
                return;
            }
            n.running = true;
            (n.first.take(), core::mem::take(&mut n.list))
        };
        if let Some((_, notifier)) = &first {
            notifier.notify();
        }
        for (_, notifier) in list.iter() {
            notifier.notify();
        }
        drop((first, list));
        self.notifiers.lock().running = false;
        self.ctx.notified.notify_all();
    }
}

/// A region's share of the global counters ([`GLOBAL`]: its bytes and memory, and whether it
/// waits for NVIDIA's callback), settled exactly once by whichever of its release (under the
/// context's lock) and NVIDIA's free callback (which cannot take that lock) comes first; each
/// step is one compare-and-exchange of these bits.
pub(super) struct Tally(Atomic<u32>);

impl Tally {
    /// Its bytes are in the global counters (set after they were added).
    const COUNTED: u32 = 1 << 0;
    /// Its bytes are taken out, or never to be counted: set by the first settlement.
    const SETTLED: u32 = 1 << 1;
    /// Counted in `GLOBAL.deferred_live`: left for the callback by a close elsewhere.
    const DEFERRED: u32 = 1 << 2;
    /// The callback ran: never deferred again.
    const CALLED: u32 = 1 << 3;

    pub(super) const fn new() -> Self {
        Tally(Atomic::new(0))
    }

    /// Applies `f` to the bits atomically; the bits before, or `None` where `f` changed nothing.
    fn update(&self, f: impl Fn(u32) -> Option<u32>) -> Option<u32> {
        let mut old = self.0.load(Relaxed);
        loop {
            let new = f(old)?;
            // Fully ordered: a settlement that sees another's bit also sees its counters.
            match self.0.cmpxchg(old, new, Full) {
                Ok(_) => return Some(old),
                Err(now) => old = now,
            }
        }
    }

    /// Adds the region's bytes and memory to the global counters, unless it was settled
    /// already (a callback during the pin), in which case they are taken out again at once.
    pub(super) fn count(&self, pinned: &Pinned) {
        global_add(pinned, true);
        let old = self.update(|s| Some(s | Self::COUNTED)).unwrap_or(0);
        if old & Self::SETTLED != 0 {
            global_add(pinned, false);
        }
    }

    /// Takes the region's bytes and memory out of the global counters, once.
    pub(super) fn settle(&self, pinned: &Pinned) {
        let old = self.update(|s| Some(s | Self::SETTLED)).unwrap_or(0);
        if old & (Self::COUNTED | Self::SETTLED) == Self::COUNTED {
            global_add(pinned, false);
        }
    }

    /// Counts the region as left for the callback, unless it is already or the callback ran.
    /// Whether it was counted now.
    pub(super) fn defer(&self) -> bool {
        // Counted first, so that the callback's decrement never comes before the increment.
        GLOBAL.deferred_live.add(1, Relaxed);
        let deferred = self
            .update(|s| (s & (Self::DEFERRED | Self::CALLED) == 0).then_some(s | Self::DEFERRED))
            .is_some();
        if !deferred {
            GLOBAL.deferred_live.fetch_sub(1, Relaxed);
        }
        deferred
    }

    /// A region left for the callback is given back by its owner after all: no longer waiting.
    pub(super) fn undefer(&self) {
        if self
            .update(|s| (s & Self::DEFERRED != 0).then_some(s & !Self::DEFERRED))
            .is_some()
        {
            GLOBAL.deferred_live.fetch_sub(1, Relaxed);
        }
    }

    /// NVIDIA's free callback: settles the bytes and ends the wait, in one step.
    fn on_callback(&self, pinned: &Pinned) {
        let old = self
            .update(|s| Some((s | Self::CALLED | Self::SETTLED) & !Self::DEFERRED))
            .unwrap_or(0);
        if old & Self::DEFERRED != 0 {
            GLOBAL.deferred_live.fetch_sub(1, Relaxed);
        }
        if old & (Self::COUNTED | Self::SETTLED) == Self::COUNTED {
            global_add(pinned, false);
        }
    }
}

/// Adds (or, `add` false, subtracts) a pin's bytes and gdrpeer's memory for its region to the
/// global counters.
fn global_add(pinned: &Pinned, add: bool) {
    let len = pinned.range().len();
    let memory = Region::memory(pinned.range().page_count());
    if add {
        GLOBAL.pinned_bytes.add(len, Relaxed);
        GLOBAL.regions.add(1, Relaxed);
        GLOBAL.region_memory_bytes.add(memory, Relaxed);
    } else {
        GLOBAL.pinned_bytes.fetch_sub(len, Relaxed);
        GLOBAL.regions.fetch_sub(1, Relaxed);
        GLOBAL.region_memory_bytes.fetch_sub(memory, Relaxed);
    }
}

impl Region {
    pub(super) fn new(
        ctx: &Arc<Context>,
        range: GpuRange,
        kind: PinKind,
        tokens: Tokens,
    ) -> Result<Arc<Self>> {
        Arc::pin_init(
            pin_init!(Region {
                ctx: ctx.clone(),
                book: LockedBy::new(
                    &ctx.inner,
                    Book {
                        refs: 0,
                        in_lru: false,
                        referenced: false,
                        in_tree: false,
                        accounted: false,
                        kept: 0,
                    }
                ),
                notifiers <- new_spinlock!(
                    Notifiers {
                        first: None,
                        list: RBTree::new(),
                        spare: None,
                        running: false,
                    },
                    "Region::notifiers"
                ),
                tally: Tally::new(),
                lru_links <- ListLinks::new(),
                lru_track <- AtomicTracker::new(),
                revoked_links <- ListLinks::new(),
                pinned <- Pinned::new(range, kind, tokens, &ctx.env.pins),
            }),
            GFP_KERNEL,
        )
    }

    /// gdrpeer's own memory for a cached region of `pages` pages, as the slab rounds each
    /// allocation: the region (with its `Arc` count, its LRU links and the notifier slot a
    /// handle's event takes), its array of bus addresses, and its entry in the region index,
    /// counted twice for the room a bucket keeps (a bucket's fence and place in the index's
    /// arrays are shared by up to [`BUCKET`](super::index::BUCKET) entries). Its DMA mappings
    /// for peers are not counted (a region needs none to be cached), nor the node it keeps
    /// once it had two notifiers at a time (a handle's event beside a mapping or a
    /// registration).
    pub(super) fn memory(pages: u32) -> u64 {
        use core::mem::size_of;
        let parts = [
            size_of::<usize>() + size_of::<Region>(),
            pages as usize * size_of::<u64>(),
        ];
        let entry = 2 * size_of::<(u64, Arc<Region>)>();
        parts
            .iter()
            .map(|&n| crate::sys::kmalloc_size(n) as u64)
            .sum::<u64>()
            + entry as u64
    }

    /// The pin behind the region.
    pub(crate) fn pinned(&self) -> &Pinned {
        &self.pinned
    }

    /// Registers a front-end's notifier: called once if NVIDIA frees the region. Fails with
    /// -ENXIO if it was freed before the notifier could be registered; a free that raced with
    /// the registration has called the notifier by the time this returns `Ok`.
    pub(crate) fn add_notifier(&self, notifier: KBox<dyn Notifier>) -> Result<u64> {
        self.add_watcher(Watcher::Boxed(notifier))
    }

    /// [`Region::add_notifier`] for a notifier in the caller's memory, which needs no box: the
    /// region keeps only its address.
    ///
    /// # Safety
    ///
    /// `*notifier` stays valid, and is not borrowed mutably, until [`Region::remove_notifier`]
    /// of the returned id has returned (on failure, until this returns).
    pub(crate) unsafe fn add_lent_notifier(&self, notifier: NonNull<dyn Notifier>) -> Result<u64> {
        // INVARIANT: the caller keeps the notifier valid until its removal has returned; the
        // callback drops the notifiers it took before a removal that waits for it returns.
        self.add_watcher(Watcher::Lent(LentNotifier(notifier)))
    }

    /// [`Region::add_notifier`] for a handle's event, which needs no allocation of its own.
    pub(super) fn add_event(&self, event: HandleEvent) -> Result<u64> {
        self.add_watcher(Watcher::Event(event))
    }

    pub(super) fn add_watcher(&self, watcher: Watcher) -> Result<u64> {
        let id = {
            let mut n = self.notifiers.lock();
            // A node for `list`, unless the slot in the region is free.
            let mut node = None;
            if n.first.is_some() {
                node = match n.spare.take() {
                    Some(node) => Some(node),
                    None => {
                        // Allocated without the spinlock.
                        drop(n);
                        let node = RBTreeNodeReservation::new(GFP_KERNEL)?;
                        n = self.notifiers.lock();
                        Some(node)
                    }
                };
            }
            // Unique in the context: never reused, so a stale removal finds nothing.
            let id = self.ctx.notifier_ids.fetch_add(1, Relaxed) + 1;
            match node {
                Some(node) if n.first.is_some() => {
                    n.list.insert(node.into_node(id, watcher));
                }
                node => {
                    // The slot is free: it was, or it was freed while the lock was dropped
                    // (the node is then kept for the next).
                    n.first = Some((id, watcher));
                    if let Some(node) = node {
                        n.spare.get_or_insert(node);
                    }
                }
            }
            id
        };
        // The callback marks the pin revoked before it takes the notifiers: if it has not yet,
        // it will call this notifier. If it has, the notifier is either still registered
        // (the callback took them before it was added: it is never called, and goes),
        // or was taken and called: then it is registered like any other, and the caller must
        // not report the free a second time.
        if self.pinned.is_revoked() && self.remove_notifier(id) {
            return Err(ENXIO);
        }
        Ok(id)
    }

    /// Unregisters a notifier. If the free callback is calling it, waits until it returned.
    /// Returns whether it was removed before the callback called it.
    pub(crate) fn remove_notifier(&self, id: u64) -> bool {
        let mut n = self.notifiers.lock();
        loop {
            if n.first.as_ref().is_some_and(|(first, _)| *first == id) {
                n.first = None;
                return true;
            }
            if let Some(node) = n.list.remove_node(&id) {
                let node = node.into_reservation();
                n.spare.get_or_insert(node);
                return true;
            }
            if !n.running {
                return false;
            }
            self.ctx.notified.wait(&mut n);
        }
    }

    /// `peer`'s DMA addresses of `window`'s pages, which lie in this region, copied from
    /// the region's mapping for `peer`: -ENXIO unless the region is pinned now, -ENOENT
    /// unless it is mapped for `peer`.
    pub(crate) fn window_dma_addresses(
        &self,
        window: &GpuRange,
        peer: &pci::Device,
    ) -> Result<KVVec<u64>> {
        let mut addrs = KVVec::with_capacity(window.page_count() as usize, GFP_KERNEL)?;
        let first = window.first_page_in(self.pinned.range());
        self.pinned.copy_addresses(Some(peer), first, &mut addrs)?;
        Ok(addrs)
    }

    /// The bus addresses of `window`'s pages, which lie in this region, in place
    /// ([`Pinned::bus_addresses`]): -ENXIO unless the region is pinned now.
    pub(crate) fn window_bus_addresses(&self, window: &GpuRange) -> Result<&[u64]> {
        let first = window.first_page_in(self.pinned.range());
        self.pinned
            .bus_addresses(first, window.page_count() as usize)
    }

    /// Maps the region for `peer` (once per peer, [`Pinned::dma_map`]) for a use that lasts
    /// as long as the returned [`DmaUse`]: a kernel-API registration, a dma-buf attachment.
    pub(crate) fn dma_use(self: &Arc<Self>, peer: &ARef<pci::Device>) -> Result<DmaUse> {
        let addresses = self.pinned.dma_map(peer)?;
        Ok(DmaUse {
            region: self.clone(),
            peer: peer.clone(),
            addresses,
        })
    }
}

/// A use of a region's DMA mapping for a peer ([`Region::dma_use`]). Dropping it ends the use:
/// the mapping stays with the region while the region is pinned (`dma_map_keep`, the
/// default), or goes with its last use.
pub(crate) struct DmaUse {
    region: Arc<Region>,
    peer: ARef<pci::Device>,
    /// The DMA addresses of the region's pages for the peer: the mapping's array, shared.
    addresses: Arc<KVVec<u64>>,
}

impl DmaUse {
    /// The peer the region is mapped for.
    pub(crate) fn peer(&self) -> &pci::Device {
        &self.peer
    }

    /// The region it uses.
    pub(crate) fn region(&self) -> &Arc<Region> {
        &self.region
    }

    /// Whether its mapping is still there: not once the region was given back or revoked, or
    /// the peer went ([`crate::nv_p2p::PinEnv::peer_gone`]), each of which unmaps it under
    /// the use, whose addresses are then stale.
    pub(crate) fn is_mapped(&self) -> bool {
        self.region.pinned.is_mapped(&self.peer, &self.addresses)
    }

    /// The peer's DMA addresses of `window`'s pages, which lie in the region: the mapping's
    /// own array, in place, which stays readable while this lives (also after the mapping
    /// went with a revocation: the values are then stale). -EINVAL beyond the region.
    pub(crate) fn window_addresses(&self, window: &GpuRange) -> Result<&[u64]> {
        window.pages_of(self.region.pinned.range(), &self.addresses)
    }
}

impl Drop for DmaUse {
    fn drop(&mut self) {
        self.region
            .pinned
            .dma_unuse(&self.peer, &self.addresses, params::dma_map_keep());
    }
}
