// SPDX-License-Identifier: GPL-2.0

//! The pin engine: the lazy-unpin registration cache that every front-end uses. One
//! [`Context`] per open file of `/dev/gdrpeer` or per kernel-API context, never shared between
//! processes; its [`Region`]s are pins of GPU memory, its handles windows of them.
//!
//! The engine knows no front-end: what it needs from one (hearing that NVIDIA freed a region,
//! ending a front-end's use of a handle at unpin) is the [`Notifier`] and [`HandleUse`] traits
//! ([`crate::notify`]). The locks it takes are in the crate's lock
//! order (the crate root's documentation): [`Context::inner`] is lock 1, `Region::notifiers`
//! lock 4.
//!
//! This file holds [`Context`], what the front-ends call; the rest is split by concern:
//! `inner.rs`, the cache state under the context's lock (index, LRU, handles, bookkeeping,
//! with its KUnit suite `gdrpeer_cache_inner`); `region.rs`, a region and its notifiers;
//! `handles.rs`, how handles are numbered; `kept.rs`, the references that keep a region
//! pinned after its context closes.

use core::any::Any;

use kernel::{
    list::{List, ListArc},
    new_condvar, new_mutex, new_spinlock,
    prelude::*,
    rbtree::RBTree,
    sync::{
        aref::ARef,
        atomic::{Acquire, Atomic, Relaxed, Release},
        lock::{mutex::MutexBackend, Guard},
        Arc, CondVar, Mutex, SpinLock,
    },
    task::Task,
    workqueue::{impl_has_work, new_work, Work, WorkItem},
};

use crate::{
    env::Env,
    events::{Events, HandleEvent},
    notify::HandleUse,
    nv_p2p::{PinKind, Pinned, Tokens},
    params, policy,
    range::GpuRange,
    stats::{Stats, GLOBAL},
};

mod handles;
mod index;
mod inner;
mod kept;
mod region;

pub(crate) use handles::Numbering;
pub(crate) use inner::Inner;
pub(crate) use region::{DmaUse, Region};

/// A user's pin: a window of a region (the request rounded to 64 KiB pages).
pub(crate) struct Handle {
    region: Arc<Region>,
    window: GpuRange,
    /// A front-end's use of the handle ([`Context::attach`]), which unpinning it ends first.
    /// While the handle lives its region is in use (never evicted), used or not.
    used: Option<Attached>,
    /// Its [`HandleEvent`] notifier on the region, in a context with events.
    event: Option<u64>,
}

/// A front-end's use attached to a handle: what the engine calls ([`HandleUse`]) and what the
/// front-end gets back ([`Context::attach`]), one object.
struct Attached {
    ops: Arc<dyn HandleUse>,
    any: Arc<dyn Any + Send + Sync>,
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
    /// Regions NVIDIA's free callback revoked, which the context's next operation takes out of
    /// its cache ([`Context::lock`]): the callback cannot take [`Context::inner`] (NVIDIA's lock,
    /// under which it runs, comes after it). A leaf at lock 4 of the crate's order.
    #[pin]
    revoked: SpinLock<Revoked>,
    /// Whether `revoked` has regions: the one thing each operation reads when it has none.
    revoked_pending: Atomic<bool>,
    /// Signalled when NVIDIA's free callback has called a region's notifiers
    /// (`Notifiers::running`), for a removal that waits for it: one for all of the context's
    /// regions, since such a wait is rare (a waiter checks its own region again).
    #[pin]
    notified: CondVar,
    /// The last id given to a notifier of one of its regions ([`Region::add_notifier`]):
    /// unique in the context, so a region keeps no counter of its own.
    notifier_ids: Atomic<u64>,
    /// Whether its last trim ([`Context::trim`]) left it over a limit, every region it still
    /// pins being in use: read without the lock by a front-end that would keep a region held
    /// past its last use ([`Context::over_limits`]).
    over_limits: Atomic<bool>,
    /// Reaps `revoked` once the context is closed, when no operation will come.
    #[pin]
    work: Work<Context>,
}

/// A context's revoked regions, waiting for its lock ([`Context::revoked`]).
struct Revoked {
    list: List<Region, 1>,
    /// The context is closed: a region revoked now is reaped by [`Context::work`].
    closed: bool,
}

impl_has_work! {
    impl HasWork<Self> for Context { self.work }
}

impl WorkItem for Context {
    type Pointer = Arc<Context>;

    /// Reaps the regions revoked since the context closed.
    fn run(this: Arc<Context>) {
        drop(this.lock());
    }
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
    /// Whether a front-end's use of the handle ([`Context::attach`]) says it is busy now (for
    /// the file front-ends, a CPU mapping lives).
    pub(crate) busy: bool,
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
                        regions: Default::default(),
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
                revoked <- new_spinlock!(
                    Revoked {
                        list: List::new(),
                        closed: false,
                    },
                    "Context::revoked"
                ),
                revoked_pending: Atomic::new(false),
                notified <- new_condvar!("Context::notified"),
                notifier_ids: Atomic::new(0),
                over_limits: Atomic::new(false),
                work <- new_work!("Context::work"),
            }),
            GFP_KERNEL,
        )?;
        GLOBAL.contexts.add(1, Relaxed);
        Ok(ctx)
    }

    /// Takes [`Context::inner`] and reaps the regions NVIDIA revoked since the last time
    /// ([`Inner::reap`]). Every operation of the context takes its lock through this.
    ///
    /// A region reaped here may be dropped under the lock: its reference to the context is not
    /// the last one, since the caller holds another.
    fn lock(&self) -> Guard<'_, Inner, MutexBackend> {
        let mut inner = self.inner.lock();
        // Pairs with the callback's store under `revoked`: a region pushed before it is seen.
        if self.revoked_pending.load(Acquire) {
            let list = {
                let mut revoked = self.revoked.lock();
                self.revoked_pending.store(false, Relaxed);
                core::mem::take(&mut revoked.list)
            };
            Self::reap(&mut inner, list);
        }
        inner
    }

    fn reap(inner: &mut Inner, mut list: List<Region, 1>) {
        while let Some(item) = list.pop_front() {
            inner.reap(&item.into_arc());
        }
    }

    /// The free callback's hand-over of a revoked region ([`Region`]'s `PinOwner::revoked`),
    /// under NVIDIA's lock: the region waits in [`Context::revoked`] for the context's next
    /// operation, or, once the context is closed, for [`Context::work`].
    fn push_revoked(self: Arc<Self>, region: ListArc<Region, 1>) {
        let closed = {
            let mut revoked = self.revoked.lock();
            revoked.list.push_back(region);
            self.revoked_pending.store(true, Release);
            revoked.closed
        };
        if closed {
            // Queued already: that run reaps this region too. The queue outlives every
            // context (Env), and this is not the context's last reference: the region just
            // listed holds one.
            let _ = self.env.queue.queue().enqueue(self);
        }
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
    /// memory, so its region can neither serve nor be served by the cache. So is a persistent
    /// pin: NVIDIA never calls it back, so nothing would tell the cache that its memory was
    /// freed, and a cached one would serve a later allocation at the same address with the
    /// freed memory it keeps alive.
    pub(crate) fn pin(
        self: &Arc<Self>,
        range: GpuRange,
        kind: PinKind,
        sharing: Sharing,
        tokens: Tokens,
    ) -> Result<PinInfo> {
        let mut inner = self.lock();
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
                        used: None,
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
        self.trim(&mut inner);
        Ok(PinInfo {
            handle,
            window: range,
        })
    }

    /// The region that serves a pin of `range`, from the cache or pinned now, with a reference
    /// taken for its new user ([`Context::pin`], [`Context::keep_range`]).
    fn acquire(
        self: &Arc<Self>,
        inner: &mut Inner,
        range: GpuRange,
        kind: PinKind,
        sharing: Sharing,
        tokens: Tokens,
    ) -> Result<Arc<Region>> {
        let sharing = if tokens.are_default() && kind == PinKind::Callback {
            sharing
        } else {
            Sharing::Private
        };
        if inner.closed {
            return Err(EBADF);
        }
        let cached = match sharing {
            Sharing::Cached => inner.lookup(&range),
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
                    Sharing::Cached => self.pin_new(inner, range)?,
                    Sharing::Private => {
                        // Never in the index: nothing hits it, and its handle's unpin releases
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
    /// calls back (Tegra's put_pages does) must not report an unpin as a revocation. Returns
    /// the queue where the handle's event was queued, if it was.
    fn unwatch(&self, region: &Region, event: Option<u64>) -> Option<&Arc<Events>> {
        let events = self.events.as_ref()?;
        match event {
            Some(id) if region.remove_notifier(id) => {
                events.unreserve();
                None
            }
            // The notifier ran, or the region was revoked already when the handle was made
            // ([`Context::watch`] queued the event at once).
            _ => Some(events),
        }
    }

    /// A miss of a cached pin (a callback pin, [`Context::acquire`]): pins the request merged
    /// with the regions it overlaps, evicting unused regions while NVIDIA runs out of BAR1
    /// space (-ENOMEM).
    fn pin_new(self: &Arc<Self>, inner: &mut Inner, request: GpuRange) -> Result<Arc<Region>> {
        let kind = PinKind::Callback;
        let overlapping = inner.overlapping(&request)?;
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
    /// A handle with a front-end's use ([`Context::attach`]) has it ended first
    /// ([`HandleUse::end`]), and then, where the use says something is left, `unmap` is called
    /// to undo what the use made, before the region may be released: nothing of the use
    /// survives the handle. `unmap` runs under
    /// [`Context::inner`]: it may take the locks that come after lock 1 in the crate's lock
    /// order (`i_mmap_rwsem`, page-table locks), never a `mmap_lock`.
    pub(crate) fn unpin(&self, handle: u64, unmap: impl FnOnce()) -> Result {
        let mut inner = self.lock();
        let h = inner.handles.get_mut(&handle).ok_or(EINVAL)?;
        let (region, used, event) = (h.region.clone(), h.used.take(), h.event.take());
        if let Some(node) = inner.handles.remove_node(&handle) {
            inner.keep_handle_node(node.into_reservation());
        }
        if used.as_ref().is_some_and(|used| used.ops.end()) {
            unmap();
        }
        inner.stats.handles -= 1;
        if let Some(events) = self.unwatch(&region, event) {
            // The handle goes: so does its event, if nobody read it (libgdrapi never does).
            events.cancel(handle);
        }
        self.drop_ref(&mut inner, &region);
        self.trim(&mut inner);
        Ok(())
    }

    /// Unpins unused regions while the context is over a limit, and notes whether it still is
    /// ([`Context::over_limits`]).
    fn trim(&self, inner: &mut Inner) {
        let limits = params::limits();
        inner.trim(&limits);
        self.over_limits
            .store(limits.exceeded_by(&inner.usage()), Relaxed);
    }

    /// Whether the context was over a limit with every region it pins in use, when its lock
    /// was last let go: a region whose last use ends now is one the limits want unpinned. A
    /// hint, read without the lock (the kernel API's kept registration, [`crate::kapi`]).
    pub(crate) fn over_limits(&self) -> bool {
        self.over_limits.load(Relaxed)
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
        let mut inner = self.lock();
        let region = self.acquire(
            &mut inner,
            range,
            PinKind::Callback,
            Sharing::Cached,
            Tokens::default(),
        )?;
        self.trim(&mut inner);
        Ok(region)
    }

    /// Counts a cache hit that a front-end served without [`Context::hold`] (the kernel API's
    /// registration kept whole: [`crate::kapi`]), in the global counters; the context's own
    /// count under its lock is left alone.
    pub(crate) fn count_hit(&self) {
        GLOBAL.hits.add(1, Relaxed);
    }

    /// Gives back a reference of [`Context::hold`]: the region stays cached (lazy unpin), or is
    /// released when it is out of the cache.
    ///
    /// Only the context's process trims here: a kernel-API registration may be unpinned from
    /// any process or a kernel thread, which could not give evicted regions back (they would
    /// leave the cache still pinned, and still counted against its limits); the next pin trims.
    pub(crate) fn unhold(&self, region: &Arc<Region>) {
        let mut inner = self.lock();
        self.drop_ref(&mut inner, region);
        if self.is_owner() {
            self.trim(&mut inner);
        }
    }

    /// The region of `handle`, held, and its window: for a use outside the context's lock
    /// (a copy to user space).
    pub(crate) fn handle_region(&self, handle: u64) -> Result<(Arc<Region>, GpuRange)> {
        let inner = self.lock();
        let h = inner.handles.get(&handle).ok_or(EINVAL)?;
        Ok((h.region.clone(), h.window))
    }

    /// Runs `f` on a handle's region and window.
    pub(crate) fn with_handle<R>(
        &self,
        handle: u64,
        f: impl FnOnce(&Region, &GpuRange) -> Result<R>,
    ) -> Result<R> {
        let inner = self.lock();
        let h = inner.handles.get(&handle).ok_or(EINVAL)?;
        f(&h.region, &h.window)
    }

    /// Attaches a front-end's use to a handle ([`HandleUse`]), which unpinning the handle
    /// ends. `attach` gets the use attached already, if any, and returns the one to keep; it
    /// runs under [`Context::inner`]. Returns the handle's region and window with it.
    ///
    /// A handle has one use, of its front-end's type (-EINVAL for another).
    pub(crate) fn attach<U: HandleUse + 'static>(
        &self,
        handle: u64,
        attach: impl FnOnce(Option<Arc<U>>) -> Result<Arc<U>>,
    ) -> Result<(Arc<Region>, GpuRange, Arc<U>)> {
        let mut inner = self.lock();
        let h = inner.handles.get_mut(&handle).ok_or(EINVAL)?;
        let current = match &h.used {
            Some(used) => Some(used.any.clone().downcast::<U>().map_err(|_| EINVAL)?),
            None => None,
        };
        let used = attach(current)?;
        h.used = Some(Attached {
            ops: used.clone(),
            any: used.clone(),
        });
        Ok((h.region.clone(), h.window, used))
    }

    /// What GET_INFO reports, whether a front-end's use says the handle is busy included (one
    /// lookup).
    pub(crate) fn info(&self, handle: u64) -> Result<HandleInfo> {
        let inner = self.lock();
        let h = inner.handles.get(&handle).ok_or(EINVAL)?;
        let region = &h.region;
        let (revoked, cpu_cacheable) = region.pinned.revoked_and_cacheable();
        Ok(HandleInfo {
            window: h.window,
            region: *region.pinned.range(),
            kind: region.pinned.kind(),
            revoked,
            cpu_cacheable,
            busy: h.used.as_ref().is_some_and(|used| used.ops.busy()),
        })
    }

    /// The context's counters.
    pub(crate) fn stats(&self) -> Stats {
        self.lock().stats
    }

    /// Closes the context: every region is unpinned, or, when this is not the pinning
    /// process, left to NVIDIA's callback (which frees it when the memory goes).
    pub(crate) fn close(&self) {
        let mut inner = self.lock();
        inner.closed = true;
        // Regions revoked from here on are reaped by the context's work item; those revoked
        // since the lock was taken are reaped now, before the index is emptied.
        let late = {
            let mut revoked = self.revoked.lock();
            revoked.closed = true;
            self.revoked_pending.store(false, Relaxed);
            core::mem::take(&mut revoked.list)
        };
        Self::reap(&mut inner, late);
        let handles = core::mem::take(&mut inner.handles);
        let lru = core::mem::take(&mut inner.lru);
        // Taken out whole, so that nothing here allocates: a close cannot fail, and a region
        // it could not note would stay pinned.
        let cached = core::mem::take(&mut inner.regions);
        for region in lru.iter() {
            let book = region.book.access_mut(&mut inner);
            book.in_lru = false;
            book.referenced = false;
        }
        // A region in use stays pinned for its users: the last handle's drop below, the last
        // keeper's [`Context::unkeep`] or the last kernel-API registration's
        // [`Context::unhold`] releases it (a registration's DMA addresses stay valid, and its
        // invalidate callback may come, until its unpin).
        for (_, region) in cached.iter() {
            let book = region.book.access_mut(&mut inner);
            book.in_tree = false;
            if book.refs == 0 {
                inner.release(region);
            }
        }
        // Every region is out of the index now: a handle's drop releases its region unless
        // another user still holds it.
        for (_, h) in handles.iter() {
            // The queue goes with the context: events left in it need no cancel.
            self.unwatch(&h.region, h.event);
            self.drop_ref(&mut inner, &h.region);
        }
        inner.stats.handles = 0;
        drop(inner);
        drop((handles, lru, cached));
    }

    /// Calls `f` on each cached region with the references its users hold and whether it is
    /// unused, under the context's lock (debugfs lists them).
    pub(crate) fn for_each_region<E>(
        &self,
        mut f: impl FnMut(&Region, u64, bool) -> Result<(), E>,
    ) -> Result<(), E> {
        let inner = self.lock();
        for (_, region) in inner.regions.iter() {
            let book = region.book.access(&inner);
            // In the index with no reference: unused (in the eviction list).
            f(region, book.refs, book.refs == 0)?;
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
