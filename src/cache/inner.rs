// SPDX-License-Identifier: GPL-2.0

//! A context's cache state ([`Inner`], under [`Context::inner`](super::Context::inner)): the region trees, the
//! eviction list (a second-chance LRU of the cached regions), the handles, and each region's
//! bookkeeping ([`Book`]).

use kernel::{
    list::{List, ListArc},
    prelude::*,
    rbtree::{RBTree, RBTreeNodeReservation},
    sync::{atomic::Relaxed, Arc},
};

use super::{
    handles::{
        page_offset_handle, page_offset_next_is_free, page_offset_span, Numbering,
        PAGE_OFFSET_HANDLES,
    },
    index::Index,
    Handle, Region,
};
use crate::{
    nv_p2p::{Pinned, Unpinned},
    policy::{Limits, Usage},
    range::GpuRange,
    stats::{Stats, GLOBAL},
};

/// The state of a context's cache, protected by [`Context::inner`](super::Context::inner).
pub(crate) struct Inner {
    /// The cached regions by start address: callback pins without P2P tokens, the only ones
    /// the cache shares ([`Context::acquire`](super::Context)). They never overlap; a revoked
    /// region may linger until the context's next operation reaps it ([`Inner::reap`]), and
    /// is never a hit.
    pub(super) regions: Index<Arc<Region>>,
    /// The eviction order, a second-chance ("CLOCK") approximation of least recently used
    /// first: every unused region in the index is in it, and a region in use may be (a hit leaves
    /// a region where it is, so that it writes none of its neighbours, which are as cold as it
    /// in a large cache). [`Inner::evict_lru`] takes from the front: a region in use leaves the
    /// list (its last user puts it back, at the end), a region hit since it last came by
    /// ([`Book::referenced`]) goes to the end, and the first other one is evicted. A region's
    /// place in it costs no allocation (its links are in the region).
    pub(super) lru: List<Region>,
    pub(super) handles: RBTree<u64, Handle>,
    /// Handle nodes' memory kept from unpins for the next pins (at most [`SPARE_HANDLES`]).
    pub(super) spare_handles: KVec<RBTreeNodeReservation<u64, Handle>>,
    /// How handles are numbered, and the next one.
    pub(super) numbering: Numbering,
    pub(super) next_handle: u64,
    pub(super) stats: Stats,
    pub(super) closed: bool,
}

/// Per-region bookkeeping, protected by the owning context's [`Context::inner`](super::Context::inner).
///
/// Under that lock, outside the engine's own steps: a region in the index with no reference
/// (`refs == 0`, unused) is in `Inner::lru` (`in_lru`); a region out of the index is in
/// neither; `referenced` is false while the region is out of the list.
pub(super) struct Book {
    /// Handles that refer to the region.
    pub(super) refs: u64,
    /// Whether the region is in `Inner::lru`: always while it is unused and cached, and
    /// maybe while it is in use (a hit leaves it there).
    pub(super) in_lru: bool,
    /// Whether it was hit since it went into `Inner::lru` or [`Inner::evict_lru`] last passed
    /// it: its second chance, a move to the end of the list instead of an eviction.
    pub(super) referenced: bool,
    /// Whether the region is in `Inner::regions`.
    pub(super) in_tree: bool,
    /// Whether its bytes are counted in the context (globally: `Region::tally`).
    pub(super) accounted: bool,
    /// Kept references on it ([`Context::keep_handle`](super::Context::keep_handle)), each
    /// also counted in `refs`. They keep it pinned after the context closes. Each is an
    /// exported dma-buf, a file: more than `u32::MAX` are refused (-EMFILE).
    pub(super) kept: u32,
}

/// Handle nodes a context keeps for reuse: a program that pins and unpins a few buffers in
/// turn allocates nothing for its handles.
pub(super) const SPARE_HANDLES: usize = 8;

impl Inner {
    pub(super) fn book<'a>(&'a self, region: &'a Region) -> &'a Book {
        region.book.access(self)
    }

    /// The live cached region that contains `range`, if any. Revoked regions found on the way
    /// are taken out at once.
    pub(super) fn lookup(&mut self, range: &GpuRange) -> Option<Arc<Region>> {
        let (_, candidate) = self.regions.floor(range.start())?;
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

    /// The live cached regions that overlap `range`; revoked ones are taken out.
    pub(super) fn overlapping(&mut self, range: &GpuRange) -> Result<KVec<Arc<Region>>> {
        let mut found = KVec::new();
        let mut revoked = KVec::new();
        let mut failed = Ok(());
        // The cached regions never overlap one another, so of those that start at or
        // before the range only the last can reach into it: the walk starts there, not at
        // the first region (a miss stays O(log n + overlaps) with many regions cached).
        self.regions.walk_from(range.start(), |start, region| {
            if start >= range.end() {
                return false;
            }
            if region.pinned.range().overlaps(range) {
                let to = if region.pinned.is_revoked() {
                    &mut revoked
                } else {
                    &mut found
                };
                failed = to.push(region.clone(), GFP_KERNEL);
            }
            failed.is_ok()
        });
        failed?;
        for region in revoked.iter() {
            self.forget(region);
        }
        Ok(found)
    }

    /// Caches a region just pinned in place of every region it overlaps: those are taken out,
    /// and given back unless a handle or a kept reference holds them. On failure the region
    /// is given back.
    pub(super) fn replace(&mut self, region: &Arc<Region>) -> Result {
        let replaced = match self.overlapping(region.pinned.range()) {
            Ok(replaced) => replaced,
            Err(e) => {
                // Pinned but in no index and no account yet: give it back at once.
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

    /// Puts a region in the index, where no region overlaps it.
    pub(super) fn insert(&mut self, region: &Arc<Region>) -> Result {
        self.regions
            .insert(region.pinned.range().start(), region.clone())?;
        region.book.access_mut(self).in_tree = true;
        Ok(())
    }

    /// Takes a region out of the index and the eviction list, in use or not (handles keep it
    /// alive).
    pub(super) fn forget(&mut self, region: &Arc<Region>) {
        let start = region.pinned.range().start();
        let book = region.book.access_mut(self);
        let (in_tree, in_lru) = (book.in_tree, book.in_lru);
        book.in_tree = false;
        book.in_lru = false;
        book.referenced = false;
        if in_tree {
            // Never allocates: a forget cannot fail.
            drop(self.regions.remove_if(start, |r| Arc::ptr_eq(r, region)));
        }
        if in_lru {
            self.lru_remove(region);
        }
    }

    /// Takes a reference on a region for a new user. A region in the eviction list stays
    /// where it is, marked as referenced ([`Book::referenced`]): a hit writes the region alone,
    /// not its neighbours in the list.
    pub(super) fn take_ref(&mut self, region: &Region) {
        let book = region.book.access_mut(self);
        book.refs += 1;
        book.referenced = book.in_lru;
    }

    /// A cached region's last user went: it goes to the end of the eviction list, unless it
    /// is still in it (hit while it was there, [`Inner::take_ref`]), where it keeps its place
    /// and its second chance.
    pub(super) fn make_unused(&mut self, region: &Arc<Region>) {
        if self.book(region).in_lru {
            return;
        }
        match ListArc::try_from_arc(region.clone()) {
            Ok(item) => {
                self.lru.push_back(item);
                let book = region.book.access_mut(self);
                book.in_lru = true;
                book.referenced = false;
            }
            Err(_) => {
                // In a list already: never (only `lru` takes it, and `in_lru` says it is
                // not there).
                pr_err!("region made unused twice\n");
                self.forget(region);
                self.release(region);
            }
        }
    }

    /// Takes out of `lru` a region that `Book::in_lru` says is in it.
    pub(super) fn lru_remove(&mut self, region: &Region) {
        // SAFETY: a region's LRU links belong to `Inner::lru` of its own context alone
        // (`make_unused`), and `Book::in_lru`, set when it went in and cleared (under this lock,
        // which `self` is) at every removal, said it is in this list.
        drop(unsafe { self.lru.remove(region) });
    }

    /// The number of a new handle of `window` ([`Numbering`]), which the caller inserts
    /// before the lock is released. -ENOMEM when no room for `window` is left among
    /// [`Numbering::PageOffsets`] handles (as gdrdrv, whose handles run out the same way).
    pub(super) fn new_handle(&mut self, window: &GpuRange) -> Result<u64> {
        let handle = match self.numbering {
            Numbering::Counted => self.next_handle,
            Numbering::PageOffsets => {
                let span = page_offset_span(window);
                // A live handle and the room it takes.
                let taken = |(&h, handle): (&u64, &Handle)| (h, page_offset_span(&handle.window));
                let last = self.handles.cursor_back().map(|c| taken(c.current()));
                if page_offset_next_is_free(self.next_handle, span, last, PAGE_OFFSET_HANDLES) {
                    self.next_handle
                } else {
                    page_offset_handle(
                        self.next_handle,
                        span,
                        self.handles.iter().map(taken),
                        PAGE_OFFSET_HANDLES,
                    )
                    .ok_or(ENOMEM)?
                }
            }
        };
        self.next_handle = match self.numbering {
            Numbering::Counted => handle + 1,
            Numbering::PageOffsets => handle + page_offset_span(window),
        };
        Ok(handle)
    }

    /// Memory for a new handle's node: one kept from an unpin, or a new allocation.
    pub(super) fn handle_node(&mut self) -> Result<RBTreeNodeReservation<u64, Handle>> {
        match self.spare_handles.pop() {
            Some(node) => Ok(node),
            None => Ok(RBTreeNodeReservation::new(GFP_KERNEL)?),
        }
    }

    /// Keeps an unpinned handle's node for a later pin, up to [`SPARE_HANDLES`].
    pub(super) fn keep_handle_node(&mut self, node: RBTreeNodeReservation<u64, Handle>) {
        if self.spare_handles.capacity() == 0 {
            // Allocated once, at the first unpin; without it the node is just freed.
            let _ = self.spare_handles.reserve(SPARE_HANDLES, GFP_KERNEL);
        }
        if self.spare_handles.len() < self.spare_handles.capacity() {
            // The capacity suffices: this does not allocate.
            let _ = self.spare_handles.push(node, GFP_NOWAIT);
        }
    }

    /// Unpins the first unused region of the eviction list that was not hit since it last
    /// came by (second chance); false when no region is unused. On the way, regions in use
    /// leave the list (their last user puts them back) and referenced ones go to its end,
    /// their mark cleared: each region is passed at most twice, so this ends, and a region in
    /// use is never evicted.
    pub(super) fn evict_lru(&mut self) -> bool {
        while let Some(item) = self.lru.pop_front() {
            let book = item.book.access_mut(self);
            if book.refs > 0 {
                book.in_lru = false;
                book.referenced = false;
                continue;
            }
            if core::mem::replace(&mut book.referenced, false) {
                self.lru.push_back(item);
                continue;
            }
            book.in_lru = false;
            let region = item.into_arc();
            self.forget(&region);
            self.release(&region);
            return true;
        }
        false
    }

    /// Evicts unused regions while a limit is exceeded.
    pub(super) fn trim(&mut self, limits: &Limits) {
        while limits.exceeded_by(&self.usage()) {
            if !self.evict_lru() {
                break;
            }
            self.stats.evictions_limit += 1;
            GLOBAL.evictions_limit.add(1, Relaxed);
        }
    }

    pub(super) fn usage(&self) -> Usage {
        Usage {
            ctx_bytes: self.stats.pinned_bytes,
            ctx_regions: self.stats.regions,
            global_bytes: GLOBAL.pinned_bytes.load(Relaxed),
        }
    }

    pub(super) fn account(&mut self, region: &Region) {
        let len = region.pinned.range().len();
        region.book.access_mut(self).accounted = true;
        self.stats.pinned_bytes += len;
        self.stats.regions += 1;
        region.tally.count(&region.pinned);
    }

    /// Takes a region's bytes out of the context's accounting, once. Its global share goes
    /// with its release or NVIDIA's callback ([`Tally`](super::region::Tally)).
    pub(super) fn settle(&mut self, region: &Region) {
        let book = region.book.access_mut(self);
        if !core::mem::replace(&mut book.accounted, false) {
            return;
        }
        let len = region.pinned.range().len();
        self.stats.pinned_bytes -= len;
        self.stats.regions -= 1;
    }

    /// What NVIDIA's free callback left for the context's lock
    /// ([`Context::revoked`](super::Context)): the revoked region leaves the index, the LRU and
    /// the context's accounting, and is counted as a callback of the context.
    pub(super) fn reap(&mut self, region: &Arc<Region>) {
        self.forget(region);
        self.settle(region);
        self.stats.callbacks += 1;
    }

    /// Gives a region's pages back to NVIDIA, or leaves them to its callback when this is not
    /// the pinning process. Idempotent.
    pub(super) fn release(&mut self, region: &Arc<Region>) {
        match Pinned::unpin(region) {
            Unpinned::Released | Unpinned::Revoked => {
                self.settle(region);
                region.tally.settle(&region.pinned);
                // Left for the callback by a close elsewhere, and given back since by its
                // owner (a kernel-API registration's unpin after its context was destroyed).
                region.tally.undefer();
            }
            Unpinned::LeftForCallback => {
                if region.tally.defer() {
                    self.stats.deferred += 1;
                }
            }
        }
    }
}

#[path = "inner_tests.rs"]
mod inner_tests;
