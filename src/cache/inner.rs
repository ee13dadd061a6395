// SPDX-License-Identifier: GPL-2.0

//! A context's cache state ([`Inner`], under [`Context::inner`](super::Context::inner)): the region trees, the LRU
//! of unused regions, the handles, and each region's bookkeeping ([`Book`]).

use kernel::{
    list::{List, ListArc},
    prelude::*,
    rbtree::{RBTree, RBTreeNodeReservation},
    sync::{atomic::Relaxed, Arc},
};

use super::{
    handles::{page_offset_handle, page_offset_span, Numbering, PAGE_OFFSET_HANDLES},
    index::Index,
    Handle, Region,
};
use crate::{
    nv_p2p::{PinKind, Pinned, Unpinned},
    policy::{Limits, Usage},
    range::GpuRange,
    stats::{Stats, GLOBAL},
};

/// The state of a context's cache, protected by [`Context::inner`](super::Context::inner).
pub(crate) struct Inner {
    /// Pinned regions by start address, callback pins and persistent pins apart. Regions in a
    /// tree never overlap; a revoked region may linger until the context's next operation
    /// reaps it ([`Inner::reap`]), and is never a hit.
    pub(super) regions: [Index<Arc<Region>>; 2],
    /// Unused regions, least recently used first: the first is evicted first. A region's
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
pub(super) struct Book {
    /// Handles that refer to the region.
    pub(super) refs: u64,
    /// Whether the region is in `Inner::lru` (unused).
    pub(super) unused: bool,
    /// Whether the region is in `Inner::regions`.
    pub(super) in_tree: bool,
    /// Whether its bytes are counted in the context (globally: `Region::tally`).
    pub(super) accounted: bool,
    /// Kept references on it ([`Context::keep_handle`](super::Context::keep_handle)), each
    /// also counted in `refs`. They keep it pinned after the context closes.
    pub(super) kept: u64,
}

/// At close: drops a handle's reference on its region and releases the region unless a
/// kept reference holds it.
pub(super) fn region_put_handle(inner: &mut Inner, region: &Arc<Region>) {
    let book = region.book.access_mut(inner);
    book.refs -= 1;
    if book.kept == 0 {
        inner.release(region);
    }
}

/// Index of a kind's tree in `Inner::regions`.
pub(super) fn tree_index(kind: PinKind) -> usize {
    match kind {
        PinKind::Callback => 0,
        PinKind::Persistent => 1,
    }
}

/// Handle nodes a context keeps for reuse: a program that pins and unpins a few buffers in
/// turn allocates nothing for its handles.
pub(super) const SPARE_HANDLES: usize = 8;

impl Inner {
    pub(super) fn book<'a>(&'a self, region: &'a Region) -> &'a Book {
        region.book.access(self)
    }

    /// The live region of `kind` that contains `range`, if any. Revoked regions found on
    /// the way are taken out at once.
    pub(super) fn lookup(&mut self, kind: PinKind, range: &GpuRange) -> Option<Arc<Region>> {
        let (_, candidate) = self.regions[tree_index(kind)].floor(range.start())?;
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
    pub(super) fn overlapping(
        &mut self,
        kind: PinKind,
        range: &GpuRange,
    ) -> Result<KVec<Arc<Region>>> {
        let mut found = KVec::new();
        let mut revoked = KVec::new();
        let mut failed = Ok(());
        // The regions of a tree never overlap one another, so of those that start at or
        // before the range only the last can reach into it: the walk starts there, not at
        // the first region (a miss stays O(log n + overlaps) with many regions cached).
        self.regions[tree_index(kind)].walk_from(range.start(), |start, region| {
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
    pub(super) fn insert(&mut self, region: &Arc<Region>) -> Result {
        self.regions[tree_index(region.pinned.kind())]
            .insert(region.pinned.range().start(), region.clone())?;
        region.book.access_mut(self).in_tree = true;
        Ok(())
    }

    /// Takes a region out of the tree and the LRU (handles keep it alive).
    pub(super) fn forget(&mut self, region: &Arc<Region>) {
        let kind = region.pinned.kind();
        let start = region.pinned.range().start();
        let book = region.book.access_mut(self);
        let (in_tree, unused) = (book.in_tree, book.unused);
        book.in_tree = false;
        book.unused = false;
        if in_tree {
            // Never allocates: a forget cannot fail.
            drop(self.regions[tree_index(kind)].remove_if(start, |r| Arc::ptr_eq(r, region)));
        }
        if unused {
            self.lru_remove(region);
        }
    }

    pub(super) fn take_ref(&mut self, region: &Arc<Region>) {
        let book = region.book.access_mut(self);
        book.refs += 1;
        if core::mem::replace(&mut book.unused, false) {
            self.lru_remove(region);
        }
    }

    pub(super) fn make_unused(&mut self, region: &Arc<Region>) {
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
    pub(super) fn lru_remove(&mut self, region: &Region) {
        // SAFETY: a region's LRU links belong to `Inner::lru` of its own context alone
        // (`make_unused`), and `Book::unused`, set when it went in and cleared (under this lock,
        // which `self` is) at every removal, said it is in this list.
        drop(unsafe { self.lru.remove(region) });
    }

    /// The number of a new handle of `window` ([`Numbering`]), which the caller inserts
    /// before the lock is released. -ENOMEM when no room for `window` is left among
    /// [`Numbering::PageOffsets`] handles (as gdrdrv, whose handles run out the same way).
    pub(super) fn new_handle(&mut self, window: &GpuRange) -> Result<u64> {
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

    /// Unpins the least recently used unused region; false when there is none.
    pub(super) fn evict_lru(&mut self) -> bool {
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
    /// ([`Context::revoked`](super::Context)): the revoked region leaves the tree, the LRU and
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
