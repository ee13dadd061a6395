// SPDX-License-Identifier: GPL-2.0

//! A user-space registration cache, as NVIDIA's GPUDirect RDMA guide describes it (§2.2
//! lazy unpinning, §3.5 the buffer-id tag check).
//!
//! On the first use of a pointer the cache looks up the whole CUDA allocation that contains
//! it (`cuMemGetAddressRange`), sets `CU_POINTER_ATTRIBUTE_SYNC_MEMOPS` on it, pins it (gdrpeer
//! widens it to 64 KiB pages) and keeps its `CU_POINTER_ATTRIBUTE_BUFFER_ID`. On every later use
//! one attribute query checks the tag: the same id is a hit; another id means the memory was
//! freed and reallocated at the same address (the old pin is dropped and the new allocation
//! pinned); `CUDA_ERROR_INVALID_VALUE` means it was freed (the entry is dropped). Its size is
//! bounded, the least recently used entry going first.
//!
//! CUDA and the pinning are traits ([`PointerInfo`], [`Pinner`]) so that the cache runs over
//! the real libcuda and `/dev/gdrpeer`, over the simulated ones in the test guest, and over
//! fakes in this module's unit tests.

use crate::{Device, Error, Pin, PinFlags};
use std::collections::BTreeMap;

/// Why CUDA could not answer a pointer query.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CudaError {
    /// Not (any more) a live device allocation: `CUDA_ERROR_INVALID_VALUE` from the pointer
    /// attributes, `CUDA_ERROR_NOT_FOUND` from `cuMemGetAddressRange` (real CUDA's answers,
    /// `tests/cuda-trace`).
    NoAllocation,
    /// Any other CUresult.
    Other(i32),
}

/// The three pointer queries of the guide's §3.5.
pub trait PointerInfo {
    /// `cuMemGetAddressRange`: base and size of the allocation containing `ptr`.
    fn address_range(&self, ptr: u64) -> Result<(u64, u64), CudaError>;
    /// `cuPointerSetAttribute(CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, 1)` on the allocation.
    fn set_sync_memops(&self, ptr: u64) -> Result<(), CudaError>;
    /// `cuPointerGetAttribute(CU_POINTER_ATTRIBUTE_BUFFER_ID)`.
    fn buffer_id(&self, ptr: u64) -> Result<u64, CudaError>;
}

/// What the cache needs of `/dev/gdrpeer` ([`Device`] is one).
pub trait Pinner {
    /// Pins `[va, va + len)`.
    fn pin(&self, va: u64, len: u64) -> Result<Pin, Error>;
    /// Unpins a handle.
    fn unpin(&self, handle: u64) -> Result<(), Error>;
}

impl Pinner for Device {
    fn pin(&self, va: u64, len: u64) -> Result<Pin, Error> {
        Device::pin(self, va, len, PinFlags::empty())
    }

    fn unpin(&self, handle: u64) -> Result<(), Error> {
        Device::unpin(self, handle)
    }
}

impl Pinner for &Device {
    fn pin(&self, va: u64, len: u64) -> Result<Pin, Error> {
        Device::pin(self, va, len, PinFlags::empty())
    }

    fn unpin(&self, handle: u64) -> Result<(), Error> {
        Device::unpin(self, handle)
    }
}

/// The cache's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RegCacheStats {
    /// Uses served by a cached pin whose tag matched.
    pub hits: u64,
    /// Uses that pinned (first use, or after a drop).
    pub misses: u64,
    /// Cached pins dropped because the buffer id changed (freed and reallocated).
    pub tag_mismatches: u64,
    /// Uses of a freed pointer (the entry was dropped, the use failed).
    pub invalid_pointers: u64,
    /// Entries dropped to stay within the size bound.
    pub evictions: u64,
    /// Entries now.
    pub entries: u64,
}

/// A registration: where `ptr` is in a pinned window.
///
/// Its handle is the cache's: valid until the cache drops the entry, which a later
/// [`RegCache::get`] may do (to stay within `max_entries`, least recently used first, or for
/// an allocation that overlaps it), and which unpins it. A mapping or a DMA mapping made of
/// the handle ends with that unpin (a CPU mapping's next access raises SIGBUS), so use what
/// it gives before the next `get`, or pin through the [`Device`] what must last.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Registration {
    /// The gdrpeer handle of the whole allocation's pin.
    pub handle: u64,
    /// The pinned window's start (64 KiB aligned).
    pub aligned_va: u64,
    /// `ptr - aligned_va`.
    pub offset: u64,
}

struct Entry {
    size: u64,
    buffer_id: u64,
    pin: Pin,
    last_use: u64,
}

/// The cache, over a [`Pinner`] and a [`PointerInfo`].
///
/// ```no_run
/// # #[cfg(feature = "cuda")] {
/// use gdrpeer::{cuda::Cuda, regcache::RegCache, Device};
/// let (cuda, dev) = (Cuda::load()?, Device::open_default()?);
/// let mut cache = RegCache::new(&dev, &cuda, 64);
/// let buf = cuda.mem_alloc(1 << 20)?;
/// let reg = cache.get(buf + 4096, 4096)?; // a miss: pins the whole allocation
/// let again = cache.get(buf, 4096)?; // a hit
/// assert_eq!(reg.handle, again.handle);
/// # }
/// # Ok::<(), gdrpeer::Error>(())
/// ```
pub struct RegCache<P: Pinner, C: PointerInfo> {
    pinner: P,
    cuda: C,
    max_entries: usize,
    /// By allocation base.
    entries: BTreeMap<u64, Entry>,
    tick: u64,
    stats: RegCacheStats,
}

impl<P: Pinner, C: PointerInfo> RegCache<P, C> {
    /// A cache of at most `max_entries` allocations (at least one).
    pub fn new(pinner: P, cuda: C, max_entries: usize) -> Self {
        RegCache {
            pinner,
            cuda,
            max_entries: max_entries.max(1),
            entries: BTreeMap::new(),
            tick: 0,
            stats: RegCacheStats::default(),
        }
    }

    /// The counters.
    pub fn stats(&self) -> RegCacheStats {
        RegCacheStats {
            entries: self.entries.len() as u64,
            ..self.stats
        }
    }

    /// The pinner, for calls the cache does not make.
    pub fn pinner(&self) -> &P {
        &self.pinner
    }

    /// The registration of `[ptr, ptr + len)`: a cached pin of its allocation when the tag
    /// still matches, else a new pin of the whole allocation.
    pub fn get(&mut self, ptr: u64, len: u64) -> Result<Registration, Error> {
        self.tick += 1;
        let cached = self
            .entries
            .range(..=ptr)
            .next_back()
            .filter(|(base, e)| ptr < *base + e.size)
            .map(|(base, e)| (*base, e.buffer_id));
        if let Some((base, id)) = cached {
            match self.cuda.buffer_id(ptr) {
                Ok(now) if now == id => {
                    let e = self.entries.get_mut(&base).unwrap();
                    check_range(ptr, len, base, e.size)?;
                    e.last_use = self.tick;
                    self.stats.hits += 1;
                    return Ok(registration(base, &e.pin, ptr));
                }
                Ok(_) => {
                    // Freed and reallocated at the same place: pin the new allocation.
                    self.stats.tag_mismatches += 1;
                    self.drop_entry(base);
                }
                Err(CudaError::NoAllocation) => {
                    self.stats.invalid_pointers += 1;
                    self.drop_entry(base);
                    return Err(Error::InvalidPointer { ptr });
                }
                Err(CudaError::Other(e)) => return Err(Error::CudaQuery(e)),
            }
        }
        self.miss(ptr, len)
    }

    fn miss(&mut self, ptr: u64, len: u64) -> Result<Registration, Error> {
        let (base, size) = self.cuda.address_range(ptr).map_err(|e| match e {
            CudaError::NoAllocation => {
                self.stats.invalid_pointers += 1;
                Error::InvalidPointer { ptr }
            }
            CudaError::Other(e) => Error::CudaQuery(e),
        })?;
        check_range(ptr, len, base, size)?;
        self.cuda
            .set_sync_memops(base)
            .map_err(|e| cuda_error(ptr, e))?;
        let buffer_id = self.cuda.buffer_id(base).map_err(|e| cuda_error(ptr, e))?;
        // Entries overlapping the new allocation are stale (their memory is gone).
        let stale: Vec<u64> = self
            .entries
            .range(..base + size)
            .filter(|(b, e)| **b + e.size > base)
            .map(|(b, _)| *b)
            .collect();
        for b in stale {
            self.stats.tag_mismatches += 1;
            self.drop_entry(b);
        }
        while self.entries.len() >= self.max_entries {
            let lru = self
                .entries
                .iter()
                .min_by_key(|(_, e)| e.last_use)
                .map(|(b, _)| *b)
                .unwrap();
            self.stats.evictions += 1;
            self.drop_entry(lru);
        }
        let pin = self.pinner.pin(base, size)?;
        self.stats.misses += 1;
        let reg = registration(base, &pin, ptr);
        self.entries.insert(
            base,
            Entry {
                size,
                buffer_id,
                pin,
                last_use: self.tick,
            },
        );
        Ok(reg)
    }

    fn drop_entry(&mut self, base: u64) {
        if let Some(e) = self.entries.remove(&base) {
            // A revoked pin unpins fine; nothing else can fail that the cache could act on.
            let _ = self.pinner.unpin(e.pin.handle);
        }
    }

    /// Drops every entry.
    pub fn clear(&mut self) {
        let bases: Vec<u64> = self.entries.keys().copied().collect();
        for b in bases {
            self.drop_entry(b);
        }
    }
}

impl<P: Pinner, C: PointerInfo> Drop for RegCache<P, C> {
    fn drop(&mut self) {
        self.clear();
    }
}

fn cuda_error(ptr: u64, e: CudaError) -> Error {
    match e {
        CudaError::NoAllocation => Error::InvalidPointer { ptr },
        CudaError::Other(e) => Error::CudaQuery(e),
    }
}

fn check_range(ptr: u64, len: u64, base: u64, size: u64) -> Result<(), Error> {
    match ptr.checked_add(len) {
        Some(end) if len > 0 && end <= base + size => Ok(()),
        _ => Err(Error::OutOfRange {
            ptr,
            len,
            base,
            size,
        }),
    }
}

fn registration(base: u64, pin: &Pin, ptr: u64) -> Registration {
    debug_assert!(pin.aligned_va <= base);
    Registration {
        handle: pin.handle,
        aligned_va: pin.aligned_va,
        offset: ptr - pin.aligned_va,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::{Cell, RefCell};
    use std::collections::HashMap;

    const K64: u64 = 1 << 16;

    /// Allocations by base: (size, buffer id).
    #[derive(Default)]
    struct FakeCuda {
        allocs: RefCell<HashMap<u64, (u64, u64)>>,
        next_id: Cell<u64>,
        queries: Cell<u64>,
        sync_memops: RefCell<Vec<u64>>,
    }

    impl FakeCuda {
        fn alloc(&self, base: u64, size: u64) {
            self.next_id.set(self.next_id.get() + 1);
            self.allocs
                .borrow_mut()
                .insert(base, (size, self.next_id.get()));
        }
        fn free(&self, base: u64) {
            self.allocs.borrow_mut().remove(&base);
        }
        fn find(&self, ptr: u64) -> Option<(u64, u64, u64)> {
            self.allocs
                .borrow()
                .iter()
                .find(|(b, (s, _))| ptr >= **b && ptr < **b + s)
                .map(|(b, (s, id))| (*b, *s, *id))
        }
    }

    impl PointerInfo for &FakeCuda {
        fn address_range(&self, ptr: u64) -> Result<(u64, u64), CudaError> {
            self.find(ptr)
                .map(|(b, s, _)| (b, s))
                .ok_or(CudaError::NoAllocation)
        }
        fn set_sync_memops(&self, ptr: u64) -> Result<(), CudaError> {
            self.sync_memops.borrow_mut().push(ptr);
            Ok(())
        }
        fn buffer_id(&self, ptr: u64) -> Result<u64, CudaError> {
            self.queries.set(self.queries.get() + 1);
            self.find(ptr)
                .map(|(_, _, id)| id)
                .ok_or(CudaError::NoAllocation)
        }
    }

    /// Live pins by handle: (va, len).
    #[derive(Default)]
    struct FakePinner {
        pins: RefCell<HashMap<u64, (u64, u64)>>,
        next: Cell<u64>,
        calls: Cell<u64>,
    }

    impl Pinner for &FakePinner {
        fn pin(&self, va: u64, len: u64) -> Result<Pin, Error> {
            self.calls.set(self.calls.get() + 1);
            self.next.set(self.next.get() + 1);
            let aligned = va & !(K64 - 1);
            let end = (va + len).div_ceil(K64) * K64;
            self.pins
                .borrow_mut()
                .insert(self.next.get(), (aligned, end - aligned));
            Ok(Pin {
                handle: self.next.get(),
                aligned_va: aligned,
                offset: va - aligned,
                page_count: ((end - aligned) / K64) as u32,
                page_size: K64 as u32,
            })
        }
        fn unpin(&self, handle: u64) -> Result<(), Error> {
            self.pins.borrow_mut().remove(&handle);
            Ok(())
        }
    }

    #[test]
    fn first_use_pins_the_whole_allocation_with_sync_memops() {
        let (cuda, pinner) = (FakeCuda::default(), FakePinner::default());
        cuda.alloc(0x10_0000, 5 * K64 + 100);
        let mut c = RegCache::new(&pinner, &cuda, 8);
        let r = c.get(0x10_0000 + 2 * K64 + 7, 1000).unwrap();
        assert_eq!(r.aligned_va, 0x10_0000);
        assert_eq!(r.offset, 2 * K64 + 7);
        assert_eq!(*cuda.sync_memops.borrow(), vec![0x10_0000]);
        assert_eq!(
            pinner.pins.borrow().values().copied().collect::<Vec<_>>(),
            vec![(0x10_0000, 6 * K64)]
        );
        assert_eq!(c.stats().misses, 1);
    }

    #[test]
    fn later_uses_are_hits_with_one_query_each() {
        let (cuda, pinner) = (FakeCuda::default(), FakePinner::default());
        cuda.alloc(0x10_0000, 4 * K64);
        let mut c = RegCache::new(&pinner, &cuda, 8);
        let first = c.get(0x10_0000, K64).unwrap();
        let queries = cuda.queries.get();
        for i in 0..10 {
            let r = c.get(0x10_0000 + i * 1000, 500).unwrap();
            assert_eq!(r.handle, first.handle);
        }
        assert_eq!(cuda.queries.get() - queries, 10, "one tag check per use");
        assert_eq!(pinner.calls.get(), 1);
        let s = c.stats();
        assert_eq!((s.hits, s.misses, s.entries), (10, 1, 1));
    }

    #[test]
    fn realloc_at_the_same_address_gets_a_new_pin() {
        let (cuda, pinner) = (FakeCuda::default(), FakePinner::default());
        cuda.alloc(0x10_0000, 2 * K64);
        let mut c = RegCache::new(&pinner, &cuda, 8);
        let old = c.get(0x10_0000, 10).unwrap();
        cuda.free(0x10_0000);
        cuda.alloc(0x10_0000, 3 * K64);
        let new = c.get(0x10_0000 + 2 * K64, 10).unwrap();
        assert_ne!(new.handle, old.handle);
        assert!(
            !pinner.pins.borrow().contains_key(&old.handle),
            "old pin dropped"
        );
        let s = c.stats();
        assert_eq!((s.tag_mismatches, s.misses, s.entries), (1, 2, 1));
    }

    #[test]
    fn freed_pointer_is_dropped_and_refused() {
        let (cuda, pinner) = (FakeCuda::default(), FakePinner::default());
        cuda.alloc(0x10_0000, K64);
        let mut c = RegCache::new(&pinner, &cuda, 8);
        c.get(0x10_0000, 10).unwrap();
        cuda.free(0x10_0000);
        assert!(matches!(
            c.get(0x10_0000, 10),
            Err(Error::InvalidPointer { ptr: 0x10_0000 })
        ));
        assert!(pinner.pins.borrow().is_empty());
        let s = c.stats();
        assert_eq!((s.invalid_pointers, s.entries), (1, 0));
        // Never allocated: refused without a pin.
        assert!(c.get(0x90_0000, 1).is_err());
        assert_eq!(pinner.calls.get(), 1);
    }

    #[test]
    fn bounded_with_lru_eviction() {
        let (cuda, pinner) = (FakeCuda::default(), FakePinner::default());
        for i in 0..4 {
            cuda.alloc(0x100_0000 * (i + 1), K64);
        }
        let mut c = RegCache::new(&pinner, &cuda, 2);
        c.get(0x100_0000, 1).unwrap();
        c.get(0x200_0000, 1).unwrap();
        c.get(0x100_0000, 1).unwrap(); // 0x200_0000 is now the least recent
        c.get(0x300_0000, 1).unwrap();
        let pinned: Vec<u64> = {
            let mut v: Vec<u64> = pinner.pins.borrow().values().map(|p| p.0).collect();
            v.sort();
            v
        };
        assert_eq!(pinned, vec![0x100_0000, 0x300_0000]);
        assert_eq!(c.stats().evictions, 1);
        drop(c);
        assert!(pinner.pins.borrow().is_empty(), "dropping the cache unpins");
    }

    #[test]
    fn ranges_past_the_allocation_are_refused() {
        let (cuda, pinner) = (FakeCuda::default(), FakePinner::default());
        cuda.alloc(0x10_0000, K64);
        let mut c = RegCache::new(&pinner, &cuda, 2);
        assert!(matches!(
            c.get(0x10_0000 + 10, K64),
            Err(Error::OutOfRange { .. })
        ));
        let empty = c.get(0x10_0000, 0).unwrap_err();
        assert!(matches!(empty, Error::OutOfRange { .. }));
        assert!(empty.to_string().contains("empty range"), "{empty}");
        assert_eq!(pinner.calls.get(), 0);
        c.get(0x10_0000, K64).unwrap();
        assert!(c.get(0x10_0000 + 1, K64).is_err(), "hit path checks too");
    }
}
