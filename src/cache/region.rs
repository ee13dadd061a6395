// SPDX-License-Identifier: GPL-2.0

//! A pinned region of GPU memory in a context's cache ([`Region`]), and the front-ends'
//! notifiers on it.

use core::ptr::NonNull;
use kernel::{
    list::{AtomicTracker, ListLinks, TryNewListArc},
    new_condvar, new_spinlock, pci,
    prelude::*,
    rbtree::{RBTree, RBTreeNodeReservation},
    sync::{aref::ARef, atomic::Relaxed, Arc, CondVar, LockedBy, SpinLock},
    workqueue::{impl_has_work, new_work, Work, WorkItem},
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

/// Front-ends' notifiers on a region (the kernel API's registrations).
pub(super) struct Notifiers {
    pub(super) list: RBTree<u64, Watcher>,
    /// A node's memory kept from the last removal for the next registration: a handle's event
    /// comes and goes with every pin and unpin of a cached region, allocating nothing.
    pub(super) spare: Option<RBTreeNodeReservation<u64, Watcher>>,
    pub(super) next_id: u64,
    /// The free callback has taken `list` and is calling it.
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
/// until the free callback that took it out of the list has dropped the list.
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
            // SAFETY: the notifier is called from the list, so before its removal returned
            // or the list was dropped (type invariant).
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
    /// Signalled when the free callback has called the notifiers (`Notifiers::running`).
    #[pin]
    pub(super) notified: CondVar,
    #[pin]
    pub(super) work: Work<Region>,
    /// Its place in `Inner::lru`, used by no other list.
    #[pin]
    pub(super) lru_links: ListLinks,
    #[pin]
    pub(super) lru_track: AtomicTracker,
    #[pin]
    pub(super) pinned: Pinned,
}

impl_has_work! {
    impl HasWork<Self> for Region { self.work }
}

kernel::list::impl_list_arc_safe! {
    impl ListArcSafe<0> for Region { tracked_by lru_track: AtomicTracker; }
}

kernel::list::impl_list_item! {
    impl ListItem<0> for Region { using ListLinks { self.lru_links }; }
}

impl PinOwner for Region {
    fn pinned(&self) -> &Pinned {
        &self.pinned
    }

    fn revoked(this: Arc<Self>) {
        // Under NVIDIA's lock: only queue. The queue outlives every region (Env).
        let queue = this.ctx.env.queue.queue();
        if queue.enqueue(this).is_err() {
            pr_err!("revoked region queued twice\n");
        }
    }

    fn invalidate(&self) {
        let list = {
            let mut n = self.notifiers.lock();
            n.running = true;
            core::mem::take(&mut n.list)
        };
        for (_, notifier) in list.iter() {
            notifier.notify();
        }
        drop(list);
        self.notifiers.lock().running = false;
        self.notified.notify_all();
    }
}

impl WorkItem for Region {
    type Pointer = Arc<Region>;

    /// The part of the free callback that needs the context's lock.
    fn run(this: Arc<Region>) {
        let mut inner = this.ctx.inner.lock();
        inner.forget(&this);
        inner.settle(&this);
        inner.stats.callbacks += 1;
        GLOBAL.callbacks.add(1, Relaxed);
        inner.undefer(&this);
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
                        unused: false,
                        in_tree: false,
                        accounted: false,
                        deferred: false,
                        kept: 0,
                    }
                ),
                notifiers <- new_spinlock!(
                    Notifiers {
                        list: RBTree::new(),
                        spare: None,
                        next_id: 0,
                        running: false,
                    },
                    "Region::notifiers"
                ),
                notified <- new_condvar!("Region::notified"),
                work <- new_work!("Region::work"),
                lru_links <- ListLinks::new(),
                lru_track <- AtomicTracker::new(),
                pinned <- Pinned::new(range, kind, tokens, &ctx.env.gate, &ctx.env.iovas),
            }),
            GFP_KERNEL,
        )
    }

    /// gdrpeer's own memory for a cached region of `pages` pages, as the slab rounds each
    /// allocation: the region (with its `Arc` count and its LRU links), its node in the region
    /// tree, the notifier node it keeps once a handle had an event, and its array of bus
    /// addresses. Its DMA mappings for peers are not counted: a region needs none to be cached.
    pub(super) fn memory(pages: u32) -> u64 {
        use core::mem::size_of;
        type Node<K, V> = (K, V, kernel::bindings::rb_node);
        let parts = [
            size_of::<usize>() + size_of::<Region>(),
            size_of::<Node<u64, Arc<Region>>>(),
            size_of::<Node<u64, Watcher>>(),
            pages as usize * size_of::<u64>(),
        ];
        parts
            .iter()
            .map(|&n| crate::sys::kmalloc_size(n) as u64)
            .sum()
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
        // callback drops its list before a removal that waits for it returns.
        self.add_watcher(Watcher::Lent(LentNotifier(notifier)))
    }

    /// [`Region::add_notifier`] for a handle's event, which needs no allocation of its own.
    pub(super) fn add_event(&self, event: HandleEvent) -> Result<u64> {
        self.add_watcher(Watcher::Event(event))
    }

    pub(super) fn add_watcher(&self, watcher: Watcher) -> Result<u64> {
        let id = {
            let mut n = self.notifiers.lock();
            let node = match n.spare.take() {
                Some(node) => node,
                None => {
                    // Allocated without the spinlock.
                    drop(n);
                    let node = RBTreeNodeReservation::new(GFP_KERNEL)?;
                    n = self.notifiers.lock();
                    node
                }
            };
            n.next_id += 1;
            let id = n.next_id;
            n.list.insert(node.into_node(id, watcher));
            id
        };
        // The callback marks the pin revoked before it takes the list: if it has not yet,
        // it will call this notifier. If it has, the notifier is either still in the list
        // (the callback took the list before it was inserted: it is never called, and goes),
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
            if let Some(node) = n.list.remove_node(&id) {
                let node = node.into_reservation();
                n.spare.get_or_insert(node);
                return true;
            }
            if !n.running {
                return false;
            }
            self.notified.wait(&mut n);
        }
    }

    /// The addresses of `window`'s pages, which lie in this region: their bus addresses, or
    /// `peer`'s DMA addresses once the region is mapped for it. Both front-ends give these
    /// to their callers.
    pub(crate) fn window_addresses(
        &self,
        window: &GpuRange,
        peer: Option<&pci::Device>,
    ) -> Result<KVVec<u64>> {
        let mut addrs = KVVec::with_capacity(window.page_count() as usize, GFP_KERNEL)?;
        let first = window.first_page_in(self.pinned.range());
        self.pinned.copy_addresses(peer, first, &mut addrs)?;
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

    /// The peer's DMA addresses of `window`'s pages, which lie in the region: the mapping's
    /// own array, in place, which stays readable while this lives (also after the mapping
    /// went with a revocation: the values are then stale). -EINVAL beyond the region.
    pub(crate) fn window_addresses(&self, window: &GpuRange) -> Result<&[u64]> {
        let first = window.first_page_in(self.region.pinned.range());
        let end = first
            .checked_add(window.page_count() as usize)
            .ok_or(EINVAL)?;
        self.addresses.get(first..end).ok_or(EINVAL)
    }
}

impl Drop for DmaUse {
    fn drop(&mut self) {
        self.region
            .pinned
            .dma_unuse(&self.peer, params::dma_map_keep());
    }
}
