// SPDX-License-Identifier: GPL-2.0

//! The pin engine: the lazy-unpin registration cache that every front-end uses. One
//! [`Context`] per open file of `/dev/gdrpeer` or per kernel-API context, never shared between
//! processes; its [`Region`]s are pins of GPU memory, its handles windows of them.
//!
//! The engine knows no front-end: what it needs from one (hearing that NVIDIA freed a region)
//! is the [`Notifier`] trait ([`crate::notify`]). The locks it takes are in the crate's lock
//! order (the crate root's documentation): [`Context::inner`] is lock 1, `Region::notifiers`
//! lock 4.

use kernel::{
    fmt,
    list::{AtomicTracker, List, ListArc, ListLinks, TryNewListArc},
    new_condvar, new_mutex, new_spinlock,
    page::PAGE_SHIFT,
    pci,
    prelude::*,
    rbtree::{RBTree, RBTreeNodeReservation},
    sync::{aref::ARef, atomic::Relaxed, Arc, CondVar, LockedBy, Mutex, SpinLock},
    task::Task,
    workqueue::{impl_has_work, new_work, Work, WorkItem},
};

use crate::{
    env::Env,
    events::{Events, HandleEvent},
    notify::Notifier,
    nv_p2p::{PinKind, PinOwner, Pinned, Tokens, Unpinned},
    params,
    policy::{self, Limits, Usage},
    range::GpuRange,
    stats::{Stats, GLOBAL},
};

/// A user's pin: a window of a region (the request rounded to 64 KiB pages).
pub(crate) struct Handle {
    region: Arc<Region>,
    window: GpuRange,
    /// CPU mappings of the window ([`Context::map_handle`]), made on the first. While the
    /// handle lives its region is in use (never evicted); unpinning it ends them first.
    mappings: Option<Arc<Mappings>>,
    /// Its [`HandleEvent`] notifier on the region, in a context with events.
    event: Option<u64>,
}

/// The CPU mappings of one handle, and the faults in progress in them.
///
/// Faults enter ([`Mappings::enter`]) while the handle lives. Unpinning the handle ends them
/// ([`Mappings::end`]): no fault enters after, the faults inside are waited for, and then the
/// front-end zaps the mappings, so that no page-table entry survives the handle. A fault
/// inserts one page-table entry and waits for nothing of the engine's, so the wait is short.
#[pin_data]
pub(crate) struct Mappings {
    #[pin]
    state: SpinLock<MappingsState>,
    /// Signalled when a fault leaves.
    #[pin]
    left: CondVar,
}

struct MappingsState {
    /// Live mappings (what one mmap made, however many vmas it became).
    live: u64,
    /// Faults inside.
    faults: u32,
    /// The handle was unpinned: faults get SIGBUS.
    ended: bool,
}

impl Mappings {
    fn new() -> Result<Arc<Self>> {
        Arc::pin_init(
            pin_init!(Mappings {
                state <- new_spinlock!(
                    MappingsState {
                        live: 0,
                        faults: 0,
                        ended: false,
                    },
                    "Mappings::state"
                ),
                left <- new_condvar!("Mappings::left"),
            }),
            GFP_KERNEL,
        )
    }

    /// A mapping went away (its last vma closed: munmap, exit). Takes only a spinlock: it
    /// runs from a vma's `close`, under the process's `mmap_lock`.
    pub(crate) fn put(&self) {
        self.state.lock().live -= 1;
    }

    /// A fault enters; false once the handle is unpinned. Pair with [`Mappings::leave`].
    pub(crate) fn enter(&self) -> bool {
        let mut s = self.state.lock();
        if s.ended {
            return false;
        }
        s.faults += 1;
        true
    }

    /// A fault that entered is done.
    pub(crate) fn leave(&self) {
        self.state.lock().faults -= 1;
        self.left.notify_all();
    }

    /// Ends the mappings: no fault enters any more, and those inside are done on return.
    fn end(&self) {
        let mut s = self.state.lock();
        s.ended = true;
        while s.faults > 0 {
            self.left.wait(&mut s);
        }
    }
}

/// The state of a context's cache, protected by [`Context::inner`].
pub(crate) struct Inner {
    /// Pinned regions by start address, callback pins and persistent pins apart. Regions in a
    /// tree never overlap; a revoked region may linger until [`Region::run`] removes it, and
    /// is never a hit.
    regions: [RBTree<u64, Arc<Region>>; 2],
    /// Unused regions, least recently used first: the first is evicted first. A region's
    /// place in it costs no allocation (its links are in the region).
    lru: List<Region>,
    handles: RBTree<u64, Handle>,
    /// Handle nodes' memory kept from unpins for the next pins (at most [`SPARE_HANDLES`]).
    spare_handles: KVec<RBTreeNodeReservation<u64, Handle>>,
    /// How handles are numbered, and the next one.
    numbering: Numbering,
    next_handle: u64,
    stats: Stats,
    closed: bool,
}

/// One context: the registration cache of one process.
#[pin_data(PinnedDrop)]
pub(crate) struct Context {
    /// The group leader of the process that opened it: the only one that may use it.
    owner: ARef<Task>,
    env: &'static Env,
    /// Where its handles' revocations are queued, for front-ends that report them.
    events: Option<Arc<Events>>,
    #[pin]
    inner: Mutex<Inner>,
}

/// Per-region bookkeeping, protected by the owning context's [`Context::inner`].
struct Book {
    /// Handles that refer to the region.
    refs: u64,
    /// Whether the region is in `Inner::lru` (unused).
    unused: bool,
    /// Whether the region is in `Inner::regions`.
    in_tree: bool,
    /// Whether its bytes are counted in the context and globally.
    accounted: bool,
    /// Whether it was left for NVIDIA's callback by a close in another process.
    deferred: bool,
    /// dma-bufs exported from it ([`Context::export`]), each also counted in `refs`. They
    /// keep it pinned after the context closes.
    exports: u64,
}

/// Front-ends' notifiers on a region (the kernel API's registrations).
struct Notifiers {
    list: RBTree<u64, Watcher>,
    /// A node's memory kept from the last removal for the next registration: a handle's event
    /// comes and goes with every pin and unpin of a cached region, allocating nothing.
    spare: Option<RBTreeNodeReservation<u64, Watcher>>,
    next_id: u64,
    /// The free callback has taken `list` and is calling it.
    running: bool,
}

/// A registered notifier: a handle's event, stored whole, or a front-end's own.
enum Watcher {
    Event(HandleEvent),
    Boxed(KBox<dyn Notifier>),
}

impl Watcher {
    fn notify(&self) {
        match self {
            Watcher::Event(event) => event.notify(),
            Watcher::Boxed(notifier) => notifier.notify(),
        }
    }
}

/// A pinned region of GPU memory in a context's cache.
#[pin_data]
pub(crate) struct Region {
    ctx: Arc<Context>,
    book: LockedBy<Book, Inner>,
    /// Lock 4 of the crate's order, like `Pinned::state`; never held with it.
    #[pin]
    notifiers: SpinLock<Notifiers>,
    /// Signalled when the free callback has called the notifiers (`Notifiers::running`).
    #[pin]
    notified: CondVar,
    #[pin]
    work: Work<Region>,
    /// Its place in `Inner::lru`, used by no other list.
    #[pin]
    lru_links: ListLinks,
    #[pin]
    lru_track: AtomicTracker,
    #[pin]
    pinned: Pinned,
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

/// At close: drops a handle's reference on its region and releases the region unless a
/// dma-buf holds it.
fn region_put_handle(inner: &mut Inner, region: &Arc<Region>) {
    let book = region.book.access_mut(inner);
    book.refs -= 1;
    if book.exports == 0 {
        inner.release(region);
    }
}

/// Index of a kind's tree in `Inner::regions`.
fn tree_index(kind: PinKind) -> usize {
    match kind {
        PinKind::Callback => 0,
        PinKind::Persistent => 1,
    }
}

/// Handle nodes a context keeps for reuse: a program that pins and unpins a few buffers in
/// turn allocates nothing for its handles.
const SPARE_HANDLES: usize = 8;

/// How a context numbers its handles.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Numbering {
    /// 1, 2, 3, ...: `/dev/gdrpeer` (whose mmap offsets hold the handle in their high bits)
    /// and the kernel API.
    Counted,
    /// gdrdrv's numbering: a handle is also the mmap offset, in pages, of its window's first
    /// byte, so each handle is followed by room for its window's pages (at least one) and the
    /// offsets of live handles never overlap. Handles start at 0 and stay below
    /// [`PAGE_OFFSET_HANDLES`], which libgdrapi's 32-bit handle can hold: once the next one
    /// would not fit, a pin takes the first gap among the live handles that its window fits.
    PageOffsets,
}

/// The handles [`Numbering::PageOffsets`] gives out: `[0, 2^32)`, as libgdrapi keeps a
/// handle in 32 bits.
pub(crate) const PAGE_OFFSET_HANDLES: u64 = 1 << 32;

/// The room a window takes among [`Numbering::PageOffsets`] handles: its pages, at least one.
fn page_offset_span(window: &GpuRange) -> u64 {
    (window.len() >> PAGE_SHIFT).max(1)
}

/// A [`Numbering::PageOffsets`] handle for a window of `span` pages below `limit`: `next`,
/// the number after the last one given, while `span` pages from it fit below `limit`; else
/// the first number from 0 followed by `span` pages that no live handle takes (`live`: the
/// live handles and their spans, in ascending order); `None` when there is no such room.
fn page_offset_handle(
    next: u64,
    span: u64,
    live: impl Iterator<Item = (u64, u64)>,
    limit: u64,
) -> Option<u64> {
    if limit.checked_sub(next).is_some_and(|room| room >= span) {
        return Some(next);
    }
    let mut free = 0;
    for (handle, taken) in live {
        if handle - free >= span {
            return Some(free);
        }
        free = handle + taken;
    }
    limit
        .checked_sub(free)
        .is_some_and(|room| room >= span)
        .then_some(free)
}

/// What PIN reports about a new handle.
pub(crate) struct PinInfo {
    pub(crate) handle: u64,
    pub(crate) window: GpuRange,
}

/// Whether a pin may be served from, and kept in, the cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Sharing {
    /// From a cached region when one contains the request; cached after unpin.
    Cached,
    /// A region of its own, never shared, given back at unpin (`GDRPEER_PIN_NOCACHE`).
    Private,
}

/// What GET_INFO reports about a handle.
pub(crate) struct HandleInfo {
    pub(crate) window: GpuRange,
    pub(crate) region: GpuRange,
    pub(crate) kind: PinKind,
    pub(crate) revoked: bool,
    /// Whether NVIDIA's table says the CPU may cache the pages.
    pub(crate) cpu_cacheable: bool,
}

impl Context {
    /// A context for the calling process; `with_events` queues its handles' revocations on
    /// [`Context::events`].
    ///
    /// A context with events removes a handle's notifier under [`Context::inner`], which
    /// waits for a free callback calling it: so no notifier on its regions may take that lock
    /// (the kernel API's invalidate callbacks may, and its contexts have no events).
    ///
    /// `numbering` says how its handles are numbered.
    pub(crate) fn new(
        env: &'static Env,
        with_events: bool,
        numbering: Numbering,
    ) -> Result<Arc<Self>> {
        let events = if with_events {
            Some(Events::new()?)
        } else {
            None
        };
        let ctx = Arc::pin_init(
            pin_init!(Context {
                owner: ARef::from(current!().group_leader()),
                env,
                events,
                inner <- new_mutex!(
                    Inner {
                        regions: [RBTree::new(), RBTree::new()],
                        lru: List::new(),
                        handles: RBTree::new(),
                        spare_handles: KVec::new(),
                        numbering,
                        next_handle: match numbering {
                            Numbering::Counted => 1,
                            Numbering::PageOffsets => 0,
                        },
                        stats: Stats::default(),
                        closed: false,
                    },
                    "Context::inner"
                ),
            }),
            GFP_KERNEL,
        )?;
        GLOBAL.contexts.add(1, Relaxed);
        Ok(ctx)
    }

    /// Whether the current process is the one that opened the context.
    pub(crate) fn is_owner(&self) -> bool {
        *current!().group_leader() == *self.owner
    }

    /// The module environment it runs in.
    pub(crate) fn env(&self) -> &'static Env {
        self.env
    }

    /// The opening process's thread-group id, for names.
    pub(crate) fn owner_tgid(&self) -> i32 {
        self.owner.pid()
    }

    /// The queue of its handles' revocations, if it was made with events.
    pub(crate) fn events(&self) -> Option<&Arc<Events>> {
        self.events.as_ref()
    }

    /// Pins `range` (the caller's va and len rounded to 64 KiB pages), from the cache when a
    /// region of the same kind contains it and `sharing` allows.
    ///
    /// A pin with P2P tokens other than the default is private ([`Sharing::Private`]): the
    /// tokens may name another VA space than the caller's, where the same addresses are other
    /// memory, so its region can neither serve nor be served by the cache.
    pub(crate) fn pin(
        self: &Arc<Self>,
        range: GpuRange,
        kind: PinKind,
        sharing: Sharing,
        tokens: Tokens,
    ) -> Result<PinInfo> {
        let mut inner = self.inner.lock();
        let region = self.acquire(&mut inner, range, kind, sharing, tokens)?;
        let node = inner.new_handle(&range).and_then(|handle| {
            let node = inner.handle_node()?;
            let event = self.watch(handle, &region)?;
            Ok((
                handle,
                node.into_node(
                    handle,
                    Handle {
                        region: region.clone(),
                        window: range,
                        mappings: None,
                        event,
                    },
                ),
            ))
        });
        let handle = match node {
            Ok((handle, node)) => {
                inner.handles.insert(node);
                handle
            }
            Err(e) => {
                self.drop_ref(&mut inner, &region);
                return Err(e);
            }
        };
        inner.stats.handles += 1;
        inner.trim(&params::limits());
        Ok(PinInfo {
            handle,
            window: range,
        })
    }

    /// The region that serves a pin of `range`, from the cache or pinned now, with a reference
    /// taken for its new user ([`Context::pin`], [`Context::export_range`]).
    fn acquire(
        self: &Arc<Self>,
        inner: &mut Inner,
        range: GpuRange,
        kind: PinKind,
        sharing: Sharing,
        tokens: Tokens,
    ) -> Result<Arc<Region>> {
        let sharing = if tokens.are_default() {
            sharing
        } else {
            Sharing::Private
        };
        if inner.closed {
            return Err(EBADF);
        }
        let cached = match sharing {
            Sharing::Cached => inner.lookup(kind, &range),
            Sharing::Private => None,
        };
        let region = match cached {
            Some(region) => {
                inner.stats.hits += 1;
                GLOBAL.hits.add(1, Relaxed);
                region
            }
            None => {
                let region = match sharing {
                    Sharing::Cached => self.pin_new(inner, range, kind)?,
                    Sharing::Private => {
                        // Never in the tree: nothing hits it, and its handle's unpin releases
                        // it.
                        let region = self.pin_evicting(inner, range, kind, tokens)?;
                        inner.account(&region);
                        region
                    }
                };
                inner.stats.misses += 1;
                GLOBAL.misses.add(1, Relaxed);
                region
            }
        };
        inner.take_ref(&region);
        Ok(region)
    }

    /// In a context with events, registers the notifier that queues the revocation of
    /// `handle`, a new handle of `region`. A region revoked already gets its event at once.
    fn watch(&self, handle: u64, region: &Region) -> Result<Option<u64>> {
        let Some(events) = &self.events else {
            return Ok(None);
        };
        events.reserve()?;
        let notifier = HandleEvent {
            events: events.clone(),
            handle,
        };
        match region.add_event(notifier) {
            Ok(id) => Ok(Some(id)),
            Err(e) if e == ENXIO => {
                events.push(handle);
                Ok(None)
            }
            Err(e) => {
                events.unreserve();
                Err(e)
            }
        }
    }

    /// Removes a handle's notifier ([`Context::watch`]); its slot goes back unless the
    /// callback queued its event. Called before the region may be released: a release that
    /// calls back (Tegra's put_pages does) must not report an unpin as a revocation.
    fn unwatch(&self, region: &Region, event: Option<u64>) {
        if let (Some(events), Some(id)) = (&self.events, event) {
            if region.remove_notifier(id) {
                events.unreserve();
            }
        }
    }

    /// A miss: pins the request merged with the regions it overlaps, evicting unused regions
    /// while NVIDIA runs out of BAR1 space (-ENOMEM).
    fn pin_new(
        self: &Arc<Self>,
        inner: &mut Inner,
        request: GpuRange,
        kind: PinKind,
    ) -> Result<Arc<Region>> {
        let overlapping = inner.overlapping(kind, &request)?;
        let (start, end) = policy::merged(&request, overlapping.iter().map(|r| *r.pinned.range()));
        let merged = GpuRange::new(start, end - start, u64::MAX)?;
        let region = match self.pin_evicting(inner, merged, kind, Tokens::default()) {
            // The merged range may span freed memory: pin the request alone.
            Err(e) if e == EINVAL && merged != request => {
                self.pin_evicting(inner, request, kind, Tokens::default())?
            }
            r => r?,
        };
        inner.replace(&region)?;
        Ok(region)
    }

    /// Pins `range`, evicting unused regions while NVIDIA runs out of BAR1 space (-ENOMEM).
    fn pin_evicting(
        self: &Arc<Self>,
        inner: &mut Inner,
        range: GpuRange,
        kind: PinKind,
        tokens: Tokens,
    ) -> Result<Arc<Region>> {
        loop {
            let region = Region::new(self, range, kind, tokens)?;
            match Pinned::pin(&region, self.env.module) {
                Ok(()) => return Ok(region),
                Err(e) if e == ENOMEM => {
                    if !inner.evict_lru() {
                        return Err(ENOMEM);
                    }
                    inner.stats.evictions_enomem += 1;
                    GLOBAL.evictions_enomem.add(1, Relaxed);
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Drops a handle: its region stays pinned, unused, for the next hit (lazy unpin); a
    /// private region ([`Sharing::Private`]) is given back at once.
    ///
    /// A mapped handle's mappings are ended first ([`Mappings::end`]) and `unmap` is called
    /// to zap them, before the region may be released: a later access gets SIGBUS. `unmap`
    /// runs under [`Context::inner`] and may take the mappings' `i_mmap_rwsem` and page-table
    /// locks, never a `mmap_lock`.
    pub(crate) fn unpin(&self, handle: u64, unmap: impl FnOnce()) -> Result {
        let mut inner = self.inner.lock();
        let h = inner.handles.get_mut(&handle).ok_or(EINVAL)?;
        let (region, mappings, event) = (h.region.clone(), h.mappings.take(), h.event.take());
        if let Some(node) = inner.handles.remove_node(&handle) {
            inner.keep_handle_node(node.into_reservation());
        }
        if let Some(mappings) = &mappings {
            mappings.end();
            unmap();
        }
        inner.stats.handles -= 1;
        self.unwatch(&region, event);
        self.drop_ref(&mut inner, &region);
        inner.trim(&params::limits());
        Ok(())
    }

    fn drop_ref(&self, inner: &mut Inner, region: &Arc<Region>) {
        let book = region.book.access_mut(inner);
        book.refs -= 1;
        if book.refs > 0 {
            return;
        }
        if book.in_tree && !region.pinned.is_revoked() {
            inner.make_unused(region);
        } else {
            // Replaced by a merge, or revoked: nothing will hit it again.
            inner.release(region);
        }
    }

    /// Takes a reference on the region that serves a pin of `range` (a callback pin, from the
    /// cache or pinned now) for a user that needs no handle (the kernel API's registrations,
    /// which hold the region themselves). Give it back with [`Context::unhold`]. Closing the
    /// context releases the region like any other; the reference keeps only its memory.
    pub(crate) fn hold(self: &Arc<Self>, range: GpuRange) -> Result<Arc<Region>> {
        let mut inner = self.inner.lock();
        let region = self.acquire(
            &mut inner,
            range,
            PinKind::Callback,
            Sharing::Cached,
            Tokens::default(),
        )?;
        inner.trim(&params::limits());
        Ok(region)
    }

    /// Gives back a reference of [`Context::hold`]: the region stays cached (lazy unpin), or is
    /// released when it is out of the cache.
    pub(crate) fn unhold(&self, region: &Arc<Region>) {
        let mut inner = self.inner.lock();
        self.drop_ref(&mut inner, region);
        inner.trim(&params::limits());
    }

    /// Runs `f` on a handle's region and window.
    pub(crate) fn with_handle<R>(
        &self,
        handle: u64,
        f: impl FnOnce(&Region, &GpuRange) -> Result<R>,
    ) -> Result<R> {
        let inner = self.inner.lock();
        let h = inner.handles.get(&handle).ok_or(EINVAL)?;
        f(&h.region, &h.window)
    }

    /// Takes a reference on a handle's region for a dma-buf ([`crate::export`]): the region
    /// stays in use (never evicted) until [`Context::unexport`], whatever happens to the
    /// handle, and stays pinned after the context closes. Returns the region and the handle's
    /// window.
    ///
    /// `persistent` asks for a handle pinned persistently: -EINVAL for a callback pin.
    pub(crate) fn export(&self, handle: u64, persistent: bool) -> Result<(Arc<Region>, GpuRange)> {
        let mut inner = self.inner.lock();
        let h = inner.handles.get(&handle).ok_or(EINVAL)?;
        let (region, window) = (h.region.clone(), h.window);
        if persistent && region.pinned.kind() != PinKind::Persistent {
            return Err(EINVAL);
        }
        if region.pinned.is_revoked() {
            return Err(ENXIO);
        }
        inner.take_ref(&region);
        region.book.access_mut(&mut inner).exports += 1;
        Ok((region, window))
    }

    /// Pins `range` for a dma-buf of it ([`Context::export`]): the dma-buf's reference is the
    /// only one taken, and no handle is made (so no event either). Returns the region and the
    /// window.
    ///
    /// A callback pin comes from the cache, as a pin without tokens would. A persistent pin is
    /// a region of its own ([`Sharing::Private`]), never in the cache: the dma-buf owns it, and
    /// its last reference ([`Context::unexport`]) gives it back to NVIDIA, from any process
    /// (a persistent pin never dies with the memory, so a cached one would keep freed memory
    /// alive, and a stale region could serve a later allocation at the same address).
    pub(crate) fn export_range(
        self: &Arc<Self>,
        range: GpuRange,
        kind: PinKind,
    ) -> Result<(Arc<Region>, GpuRange)> {
        let sharing = match kind {
            PinKind::Callback => Sharing::Cached,
            PinKind::Persistent => Sharing::Private,
        };
        let mut inner = self.inner.lock();
        let region = self.acquire(&mut inner, range, kind, sharing, Tokens::default())?;
        region.book.access_mut(&mut inner).exports += 1;
        inner.trim(&params::limits());
        Ok((region, range))
    }

    /// Drops a dma-buf's reference ([`Context::export`]). The region goes back to the cache,
    /// or is released when nothing else holds it and it is out of the cache (the context
    /// closed, a merge replaced it, NVIDIA freed it).
    pub(crate) fn unexport(&self, region: &Arc<Region>) {
        let mut inner = self.inner.lock();
        region.book.access_mut(&mut inner).exports -= 1;
        // No trim here: this may run in any process or a kernel thread (the dma-buf's last
        // reference), which could not give evicted regions back; the next pin trims.
        self.drop_ref(&mut inner, region);
    }

    /// Notes a new CPU mapping of a handle, put with [`Mappings::put`]: its faults enter and
    /// leave the returned [`Mappings`], which unpinning the handle ends. Returns the handle's region and window
    /// with it.
    pub(crate) fn map_handle(&self, handle: u64) -> Result<(Arc<Region>, GpuRange, Arc<Mappings>)> {
        let mut inner = self.inner.lock();
        let h = inner.handles.get_mut(&handle).ok_or(EINVAL)?;
        let mappings = match &h.mappings {
            Some(mappings) => mappings.clone(),
            None => {
                let mappings = Mappings::new()?;
                h.mappings = Some(mappings.clone());
                mappings
            }
        };
        mappings.state.lock().live += 1;
        Ok((h.region.clone(), h.window, mappings))
    }

    /// Whether a handle is mapped now.
    pub(crate) fn is_mapped(&self, handle: u64) -> Result<bool> {
        let inner = self.inner.lock();
        let h = inner.handles.get(&handle).ok_or(EINVAL)?;
        Ok(h.mappings.as_ref().is_some_and(|m| m.state.lock().live > 0))
    }

    /// What GET_INFO reports.
    pub(crate) fn info(&self, handle: u64) -> Result<HandleInfo> {
        self.with_handle(handle, |region, window| {
            Ok(HandleInfo {
                window: *window,
                region: *region.pinned.range(),
                kind: region.pinned.kind(),
                revoked: region.pinned.is_revoked(),
                cpu_cacheable: region.pinned.cpu_cacheable(),
            })
        })
    }

    /// The context's counters.
    pub(crate) fn stats(&self) -> Stats {
        self.inner.lock().stats
    }

    /// Closes the context: every region is unpinned, or, when this is not the pinning
    /// process, left to NVIDIA's callback (which frees it when the memory goes).
    pub(crate) fn close(&self) {
        let mut inner = self.inner.lock();
        inner.closed = true;
        let handles = core::mem::take(&mut inner.handles);
        let lru = core::mem::take(&mut inner.lru);
        // Taken out whole, so that nothing here allocates: a close cannot fail, and a region
        // it could not note would stay pinned.
        let trees = core::mem::take(&mut inner.regions);
        for region in lru.iter() {
            region.book.access_mut(&mut inner).unused = false;
        }
        // An exported region stays pinned for its dma-bufs; the last one's
        // [`Context::unexport`] releases it.
        for (_, region) in trees.iter().flat_map(|tree| tree.iter()) {
            region.book.access_mut(&mut inner).in_tree = false;
            if inner.book(region).exports == 0 {
                inner.release(region);
            }
        }
        for (_, h) in handles.iter() {
            self.unwatch(&h.region, h.event);
            region_put_handle(&mut inner, &h.region);
        }
        inner.stats.handles = 0;
        drop(inner);
        drop((handles, lru, trees));
    }

    /// Formats the context's counters (debugfs `stats`).
    pub(crate) fn show_stats(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.stats();
        writeln!(f, "handles {}", s.handles)?;
        writeln!(f, "merges {}", s.merges)?;
        s.show(f)
    }

    /// Lists the context's regions (debugfs `regions`).
    pub(crate) fn show_regions(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inner = self.inner.lock();
        writeln!(f, "start end kind phase refs unused")?;
        for tree in inner.regions.iter() {
            for (_, region) in tree.iter() {
                let book = region.book.access(&inner);
                let range = region.pinned.range();
                writeln!(
                    f,
                    "{:#x} {:#x} {:?} {:?} {} {}",
                    range.start(),
                    range.end(),
                    region.pinned.kind(),
                    region.pinned.phase(),
                    book.refs,
                    book.unused
                )?;
            }
        }
        Ok(())
    }
}

#[pinned_drop]
impl PinnedDrop for Context {
    fn drop(self: Pin<&mut Self>) {
        GLOBAL.contexts.fetch_sub(1, Relaxed);
    }
}

impl Region {
    fn new(
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
                        exports: 0,
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
                pinned <- Pinned::new(range, kind, tokens, &ctx.env.gate),
            }),
            GFP_KERNEL,
        )
    }

    /// gdrpeer's own memory for a cached region of `pages` pages, as the slab rounds each
    /// allocation: the region (with its `Arc` count and its LRU links), its node in the region
    /// tree, the notifier node it keeps once a handle had an event, and its array of bus
    /// addresses. Its DMA mappings for peers are not counted: a region needs none to be cached.
    fn memory(pages: u32) -> u64 {
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

    /// [`Region::add_notifier`] for a handle's event, which needs no allocation of its own.
    fn add_event(&self, event: HandleEvent) -> Result<u64> {
        self.add_watcher(Watcher::Event(event))
    }

    fn add_watcher(&self, watcher: Watcher) -> Result<u64> {
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
}

impl Inner {
    fn book<'a>(&'a self, region: &'a Region) -> &'a Book {
        region.book.access(self)
    }

    /// The live region of `kind` that contains `range`, if any. Revoked regions found on
    /// the way are taken out at once.
    fn lookup(&mut self, kind: PinKind, range: &GpuRange) -> Option<Arc<Region>> {
        let tree = &self.regions[tree_index(kind)];
        let candidate = match tree.cursor_lower_bound(&(range.start() + 1)) {
            Some(c) => c.peek_prev().map(|(_, r)| r.clone()),
            None => tree.cursor_back().map(|c| c.current().1.clone()),
        }?;
        if candidate.pinned.is_revoked() {
            self.forget(&candidate);
            return None;
        }
        candidate
            .pinned
            .range()
            .contains(range)
            .then_some(candidate)
    }

    /// The live regions of `kind` that overlap `range`; revoked ones are taken out.
    fn overlapping(&mut self, kind: PinKind, range: &GpuRange) -> Result<KVec<Arc<Region>>> {
        let mut found = KVec::new();
        let mut revoked = KVec::new();
        let tree = &mut self.regions[tree_index(kind)];
        // The regions of a tree never overlap one another, so of those that start at or
        // before the range only the last can reach into it: the walk starts there, not at
        // the first region (a miss stays O(log n + overlaps) with many regions cached).
        let first = match tree.cursor_lower_bound(&(range.start() + 1)) {
            Some(c) => c.peek_prev().map_or(*c.current().0, |(start, _)| *start),
            None => match tree.cursor_back() {
                Some(c) => *c.current().0,
                None => return Ok(found),
            },
        };
        let mut cursor = tree.cursor_lower_bound_mut(&first);
        while let Some(c) = cursor {
            let region = c.current().1;
            let r = region.pinned.range();
            if r.start() >= range.end() {
                break;
            }
            if r.overlaps(range) {
                if region.pinned.is_revoked() {
                    revoked.push(region.clone(), GFP_KERNEL)?;
                } else {
                    found.push(region.clone(), GFP_KERNEL)?;
                }
            }
            cursor = c.move_next();
        }
        for region in revoked.iter() {
            self.forget(region);
        }
        Ok(found)
    }

    /// Caches a region just pinned in place of every region it overlaps: those are taken out,
    /// and given back unless a handle or a dma-buf holds them. On failure the region is given
    /// back.
    fn replace(&mut self, region: &Arc<Region>) -> Result {
        let replaced = match self.overlapping(region.pinned.kind(), region.pinned.range()) {
            Ok(replaced) => replaced,
            Err(e) => {
                // Pinned but in no tree and no account yet: give it back at once.
                self.release(region);
                return Err(e);
            }
        };
        for old in replaced {
            self.forget(&old);
            if self.book(&old).refs == 0 {
                self.release(&old);
                self.stats.merges += 1;
            }
        }
        self.account(region);
        self.insert(region).inspect_err(|_| self.release(region))
    }

    /// Puts a region in its kind's tree, where no region overlaps it.
    fn insert(&mut self, region: &Arc<Region>) -> Result {
        let tree = &mut self.regions[tree_index(region.pinned.kind())];
        RBTree::try_create_and_insert(
            tree,
            region.pinned.range().start(),
            region.clone(),
            GFP_KERNEL,
        )?;
        region.book.access_mut(self).in_tree = true;
        Ok(())
    }

    /// Takes a region out of the tree and the LRU (handles keep it alive).
    fn forget(&mut self, region: &Arc<Region>) {
        let kind = region.pinned.kind();
        let start = region.pinned.range().start();
        let book = region.book.access_mut(self);
        let (in_tree, unused) = (book.in_tree, book.unused);
        book.in_tree = false;
        book.unused = false;
        if in_tree {
            let tree = &mut self.regions[tree_index(kind)];
            if tree.get(&start).is_some_and(|r| Arc::ptr_eq(r, region)) {
                tree.remove(&start);
            }
        }
        if unused {
            self.lru_remove(region);
        }
    }

    fn take_ref(&mut self, region: &Arc<Region>) {
        let book = region.book.access_mut(self);
        book.refs += 1;
        if core::mem::replace(&mut book.unused, false) {
            self.lru_remove(region);
        }
    }

    fn make_unused(&mut self, region: &Arc<Region>) {
        match ListArc::try_from_arc(region.clone()) {
            Ok(item) => {
                self.lru.push_back(item);
                region.book.access_mut(self).unused = true;
            }
            Err(_) => {
                // In a list already: never (only `lru` takes it, and it is not there).
                pr_err!("region made unused twice\n");
                self.forget(region);
                self.release(region);
            }
        }
    }

    /// Takes out of `lru` a region that `Book::unused` says is in it.
    fn lru_remove(&mut self, region: &Region) {
        // SAFETY: a region's LRU links belong to `Inner::lru` of its own context alone
        // (`make_unused`), and `Book::unused`, set when it went in and cleared (under this lock,
        // which `self` is) at every removal, said it is in this list.
        drop(unsafe { self.lru.remove(region) });
    }

    /// The number of a new handle of `window` ([`Numbering`]), which the caller inserts
    /// before the lock is released. -ENOMEM when no room for `window` is left among
    /// [`Numbering::PageOffsets`] handles (as gdrdrv, whose handles run out the same way).
    fn new_handle(&mut self, window: &GpuRange) -> Result<u64> {
        let handle = match self.numbering {
            Numbering::Counted => self.next_handle,
            Numbering::PageOffsets => page_offset_handle(
                self.next_handle,
                page_offset_span(window),
                self.handles
                    .iter()
                    .map(|(&h, handle)| (h, page_offset_span(&handle.window))),
                PAGE_OFFSET_HANDLES,
            )
            .ok_or(ENOMEM)?,
        };
        self.next_handle = match self.numbering {
            Numbering::Counted => handle + 1,
            Numbering::PageOffsets => handle + page_offset_span(window),
        };
        Ok(handle)
    }

    /// Memory for a new handle's node: one kept from an unpin, or a new allocation.
    fn handle_node(&mut self) -> Result<RBTreeNodeReservation<u64, Handle>> {
        match self.spare_handles.pop() {
            Some(node) => Ok(node),
            None => Ok(RBTreeNodeReservation::new(GFP_KERNEL)?),
        }
    }

    /// Keeps an unpinned handle's node for a later pin, up to [`SPARE_HANDLES`].
    fn keep_handle_node(&mut self, node: RBTreeNodeReservation<u64, Handle>) {
        if self.spare_handles.capacity() == 0 {
            // Allocated once, at the first unpin; without it the node is just freed.
            let _ = self.spare_handles.reserve(SPARE_HANDLES, GFP_KERNEL);
        }
        if self.spare_handles.len() < self.spare_handles.capacity() {
            // The capacity suffices: this does not allocate.
            let _ = self.spare_handles.push(node, GFP_NOWAIT);
        }
    }

    /// Unpins the least recently used unused region; false when there is none.
    fn evict_lru(&mut self) -> bool {
        let Some(item) = self.lru.pop_front() else {
            return false;
        };
        let region = item.into_arc();
        region.book.access_mut(self).unused = false;
        self.forget(&region);
        self.release(&region);
        true
    }

    /// Evicts unused regions while a limit is exceeded.
    fn trim(&mut self, limits: &Limits) {
        while limits.exceeded_by(&self.usage()) {
            if !self.evict_lru() {
                break;
            }
            self.stats.evictions_limit += 1;
            GLOBAL.evictions_limit.add(1, Relaxed);
        }
    }

    fn usage(&self) -> Usage {
        Usage {
            ctx_bytes: self.stats.pinned_bytes,
            ctx_regions: self.stats.regions,
            global_bytes: GLOBAL.pinned_bytes.load(Relaxed),
        }
    }

    fn account(&mut self, region: &Region) {
        let len = region.pinned.range().len();
        region.book.access_mut(self).accounted = true;
        self.stats.pinned_bytes += len;
        self.stats.regions += 1;
        GLOBAL.pinned_bytes.add(len, Relaxed);
        GLOBAL.regions.add(1, Relaxed);
        GLOBAL
            .region_memory_bytes
            .add(Region::memory(region.pinned.range().page_count()), Relaxed);
    }

    /// Takes a region's bytes out of the accounting, once.
    fn settle(&mut self, region: &Region) {
        let book = region.book.access_mut(self);
        if !core::mem::replace(&mut book.accounted, false) {
            return;
        }
        let len = region.pinned.range().len();
        self.stats.pinned_bytes -= len;
        self.stats.regions -= 1;
        GLOBAL.pinned_bytes.fetch_sub(len, Relaxed);
        GLOBAL.regions.fetch_sub(1, Relaxed);
        GLOBAL
            .region_memory_bytes
            .fetch_sub(Region::memory(region.pinned.range().page_count()), Relaxed);
    }

    /// A region left for NVIDIA's callback ([`Inner::release`]) is no longer waiting for it.
    fn undefer(&mut self, region: &Region) {
        let book = region.book.access_mut(self);
        if core::mem::replace(&mut book.deferred, false) {
            GLOBAL.deferred_live.fetch_sub(1, Relaxed);
        }
    }

    /// Gives a region's pages back to NVIDIA, or leaves them to its callback when this is not
    /// the pinning process. Idempotent.
    fn release(&mut self, region: &Arc<Region>) {
        match Pinned::unpin(region) {
            Unpinned::Released | Unpinned::Revoked => {
                self.settle(region);
                // Left for the callback by a close elsewhere, and given back since by its
                // owner (a kernel-API registration's unpin after its context was destroyed).
                self.undefer(region);
            }
            Unpinned::LeftForCallback => {
                let book = region.book.access_mut(self);
                if !core::mem::replace(&mut book.deferred, true) {
                    self.stats.deferred += 1;
                    GLOBAL.deferred_live.add(1, Relaxed);
                }
            }
        }
    }
}

#[path = "cache/inner_tests.rs"]
mod inner_tests;

#[kernel::prelude::kunit_tests(gdrpeer_handles)]
mod tests {
    use super::page_offset_handle;

    /// `page_offset_handle` with live handles `live` ((handle, span), ascending).
    fn handle(next: u64, span: u64, live: &[(u64, u64)], limit: u64) -> Option<u64> {
        page_offset_handle(next, span, live.iter().copied(), limit)
    }

    #[test]
    fn next_while_it_fits() {
        assert_eq!(handle(0, 16, &[], 100), Some(0));
        assert_eq!(handle(16, 16, &[(0, 16)], 100), Some(16));
        assert_eq!(handle(84, 16, &[(0, 16)], 100), Some(84));
    }

    #[test]
    fn past_the_limit_the_first_room_that_fits() {
        // The room before the first live handle.
        assert_eq!(handle(90, 16, &[(20, 5), (60, 30)], 100), Some(0));
        // Between live handles, the room ending exactly at the next one.
        assert_eq!(handle(90, 16, &[(0, 5), (21, 5), (60, 30)], 100), Some(5));
        assert_eq!(handle(90, 30, &[(0, 5), (21, 5), (60, 30)], 100), Some(26));
        // After the last one.
        assert_eq!(handle(95, 8, &[(0, 90)], 100), Some(90));
        // Every live handle unpinned: from 0 again.
        assert_eq!(handle(99, 16, &[], 100), Some(0));
    }

    #[test]
    fn no_room_is_none() {
        assert_eq!(handle(90, 16, &[(0, 50), (60, 40)], 100), None);
        assert_eq!(handle(0, 101, &[], 100), None);
        assert_eq!(handle(200, 1, &[(0, 100)], 100), None);
    }
}
