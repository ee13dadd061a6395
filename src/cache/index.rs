// SPDX-License-Identifier: GPL-2.0

//! The index of a context's regions by start address ([`Index`]): sorted buckets of entries,
//! found by a binary search of one array of each bucket's first key. A lookup among many
//! regions reads that array, the bucket's place in a second one and the bucket: a few pages,
//! where a tree of buckets read a node of its own per level, each a cold page in a large cache.
//! A removal never allocates: a bucket shrinks in place, an emptied bucket leaves both arrays
//! (which shrink in place), and a bucket's new first key is written over its old one.

use kernel::prelude::*;

/// Entries in a bucket at most (a full bucket of regions is 512 bytes): a full bucket splits in
/// two. Smaller buckets make a lookup read fewer cache lines of the one bucket it searches,
/// cold among many regions, for more fences and bucket headers, which every lookup reads.
pub(super) const BUCKET: usize = 32;

/// Values by distinct `u64` keys, in order.
///
/// # Invariants
///
/// `fences` and `buckets` have the same length; no bucket is empty, each is sorted by key,
/// its fence is its first key, and the keys of one bucket are below those of the next.
pub(super) struct Index<V> {
    /// Each bucket's first key, ascending.
    fences: KVVec<u64>,
    /// The buckets, in the order of `fences`.
    buckets: KVVec<KVec<(u64, V)>>,
}

impl<V> Default for Index<V> {
    fn default() -> Self {
        Index {
            fences: KVVec::new(),
            buckets: KVVec::new(),
        }
    }
}

/// The position of the entry with the greatest key at or below `key` among `entries` (sorted
/// by key), if any.
fn floor_of<V>(entries: &[(u64, V)], key: u64) -> Option<usize> {
    entries.partition_point(|(k, _)| *k <= key).checked_sub(1)
}

impl<V> Index<V> {
    /// The bucket that holds `key` or would: the last that starts at or before it.
    fn bucket_of(&self, key: u64) -> Option<usize> {
        self.fences.partition_point(|&f| f <= key).checked_sub(1)
    }

    /// Where the entry with the greatest key at or below `key` is: its bucket and its place
    /// in it, if there is one.
    fn floor_at(&self, key: u64) -> Option<(usize, usize)> {
        let b = self.bucket_of(key)?;
        Some((b, floor_of(self.buckets.get(b)?, key)?))
    }

    /// The value with the greatest key at or below `key`, cloned, with its key.
    pub(super) fn floor(&self, key: u64) -> Option<(u64, V)>
    where
        V: Clone,
    {
        let (b, i) = self.floor_at(key)?;
        self.buckets.get(b)?.get(i).map(|(k, v)| (*k, v.clone()))
    }

    /// Calls `f` on the entries in key order from the one with the greatest key at or below
    /// `key` (from the first if there is none), until `f` returns false.
    pub(super) fn walk_from(&self, key: u64, mut f: impl FnMut(u64, &V) -> bool) {
        let (first, mut skip) = self.floor_at(key).unwrap_or((0, 0));
        for bucket in self.buckets.iter().skip(first) {
            for (k, v) in bucket.iter().skip(core::mem::take(&mut skip)) {
                if !f(*k, v) {
                    return;
                }
            }
        }
    }

    /// Every entry, in key order.
    pub(super) fn iter(&self) -> impl Iterator<Item = (u64, &V)> {
        self.buckets
            .iter()
            .flat_map(|bucket| bucket.iter().map(|(k, v)| (*k, v)))
    }

    /// Room for one more bucket in both arrays.
    fn reserve_bucket(&mut self) -> Result {
        self.fences.reserve(1, GFP_KERNEL)?;
        self.buckets.reserve(1, GFP_KERNEL)?;
        Ok(())
    }

    /// Adds `value` under `key`, which no entry has (-EEXIST otherwise). May allocate (a
    /// bucket that grows or splits, room in the arrays for a new bucket); on failure nothing
    /// changed.
    pub(super) fn insert(&mut self, key: u64, value: V) -> Result {
        // The bucket it goes in: the one that starts at or before it, or else the first.
        let b = match self.bucket_of(key) {
            Some(b) => b,
            None if !self.buckets.is_empty() => 0,
            None => {
                let mut bucket = KVec::with_capacity(1, GFP_KERNEL)?;
                self.reserve_bucket()?;
                bucket.push((key, value), GFP_KERNEL)?;
                // Within the capacity reserved: neither fails.
                let _ = self.fences.push_within_capacity(key);
                let _ = self.buckets.push_within_capacity(bucket);
                return Ok(());
            }
        };
        let bucket = self.buckets.get_mut(b).ok_or(EINVAL)?;
        let pos = match bucket.binary_search_by_key(&key, |(k, _)| *k) {
            Ok(_) => return Err(EEXIST),
            Err(pos) => pos,
        };
        if bucket.len() < BUCKET {
            if bucket.len() == bucket.capacity() {
                let more = bucket.len().clamp(1, BUCKET - bucket.len());
                bucket.reserve(more, GFP_KERNEL)?;
            }
            bucket
                .insert_within_capacity(pos, (key, value))
                .map_err(|_| EINVAL)?;
        } else {
            // Full: the upper half moves to a new bucket, allocated before anything changes.
            let mut upper = KVec::with_capacity(BUCKET, GFP_KERNEL)?;
            self.reserve_bucket()?;
            let bucket = self.buckets.get_mut(b).ok_or(EINVAL)?;
            while bucket.len() > BUCKET / 2 {
                if let Some(entry) = bucket.pop() {
                    // Within the capacity reserved: never fails.
                    let _ = upper.push_within_capacity(entry);
                }
            }
            upper.reverse();
            let (target, at) = if pos > BUCKET / 2 {
                (&mut upper, pos - BUCKET / 2)
            } else {
                (&mut *bucket, pos)
            };
            // Both halves have room, and so have the arrays: none of these fails.
            let _ = target.insert_within_capacity(at, (key, value));
            let upper_key = upper.first().map_or(key, |(k, _)| *k);
            let _ = self.fences.insert_within_capacity(b + 1, upper_key);
            let _ = self.buckets.insert_within_capacity(b + 1, upper);
        }
        if pos == 0 {
            self.refence(b);
        }
        Ok(())
    }

    /// Takes out the entry under `key` if `which` says it is the one; never allocates.
    pub(super) fn remove_if(&mut self, key: u64, which: impl FnOnce(&V) -> bool) -> Option<V> {
        let b = self.bucket_of(key)?;
        let bucket = self.buckets.get_mut(b)?;
        let i = bucket.binary_search_by_key(&key, |(k, _)| *k).ok()?;
        if !bucket.get(i).is_some_and(|(_, v)| which(v)) {
            return None;
        }
        let (_, value) = bucket.remove(i).ok()?;
        if bucket.is_empty() {
            // Both shift down in place.
            drop(self.buckets.remove(b));
            drop(self.fences.remove(b));
        } else if i == 0 {
            self.refence(b);
        }
        Some(value)
    }

    /// Makes bucket `b`'s fence its first key again.
    fn refence(&mut self, b: usize) {
        let first = self.buckets.get(b).and_then(|bucket| bucket.first());
        if let (Some(&(key, _)), Some(fence)) = (first, self.fences.get_mut(b)) {
            *fence = key;
        }
    }
}

#[kernel::prelude::kunit_tests(gdrpeer_cache_index)]
mod tests {
    use super::{Index, BUCKET};
    use kernel::prelude::*;

    /// The keys in order, of the entries whose value is ten times their key (all of them
    /// in these tests).
    fn keys(index: &Index<u64>) -> Result<KVec<u64>> {
        let mut out = KVec::new();
        for (k, v) in index.iter() {
            if k * 10 == *v {
                out.push(k, GFP_KERNEL)?;
            }
        }
        Ok(out)
    }

    /// Whether each bucket is fenced by its first key, and none is empty.
    fn fenced<V>(index: &Index<V>) -> bool {
        index.fences.len() == index.buckets.len()
            && index
                .fences
                .iter()
                .zip(index.buckets.iter())
                .all(|(fence, bucket)| bucket.first().map(|(k, _)| k) == Some(fence))
    }

    /// Keys `0, 3, 6, ...` inserted in a scrambled order, enough for several splits.
    fn filled(n: u64) -> Result<Index<u64>> {
        let mut index = Index::default();
        for i in 0..n {
            let k = (i * 7919) % n * 3;
            index.insert(k, k * 10)?;
        }
        Ok(index)
    }

    #[test]
    fn entries_stay_in_order_across_splits() -> Result {
        let n = 5 * BUCKET as u64;
        let index = filled(n)?;
        let keys = keys(&index)?;
        assert_eq!(keys.len() as u64, n);
        assert!(keys.iter().enumerate().all(|(i, &k)| k == i as u64 * 3));
        assert!(fenced(&index));
        assert!(index.buckets.len() > 1);
        Ok(())
    }

    #[test]
    fn floor_finds_the_greatest_key_at_or_below() -> Result {
        let n = 3 * BUCKET as u64;
        let index = filled(n)?;
        for x in 0..n * 3 + 5 {
            let want = (x / 3).min(n - 1) * 3;
            assert_eq!(index.floor(x), Some((want, want * 10)));
        }
        let mut low = Index::default();
        low.insert(100, 1000)?;
        assert_eq!(low.floor(99), None);
        assert_eq!(low.floor(u64::MAX), Some((100, 1000)));
        assert_eq!(low.insert(100, 1000), Err(EEXIST));
        Ok(())
    }

    #[test]
    fn removal_refiles_and_empties_buckets() -> Result {
        let n = 4 * BUCKET as u64;
        let mut index = filled(n)?;
        // A wrong value is not removed.
        assert_eq!(index.remove_if(3, |v| *v == 0), None);
        // Every other key, then the rest from the top: buckets lose their first entries.
        for i in (0..n).step_by(2) {
            assert_eq!(index.remove_if(i * 3, |_| true), Some(i * 30));
        }
        assert!(fenced(&index));
        for x in 0..n * 3 {
            let below = x / 3;
            let want = if below % 2 == 1 {
                below
            } else {
                below.wrapping_sub(1)
            };
            let got = index.floor(x).map(|(k, _)| k);
            assert_eq!(got, (want < n).then(|| want * 3));
        }
        for i in (0..n / 2).rev().map(|j| 2 * j + 1) {
            assert_eq!(index.remove_if(i * 3, |_| true), Some(i * 30));
        }
        assert!(index.buckets.is_empty() && index.fences.is_empty());
        assert_eq!(index.remove_if(3, |_| true), None);
        Ok(())
    }

    #[test]
    fn a_walk_starts_at_the_floor() -> Result {
        // Keys 0, 3, ..., 786 (263 entries, inserted out of order): more than two buckets.
        let index = filled(263)?;
        assert!(index.buckets.len() > 2);
        let mut seen = KVec::new();
        index.walk_from(301, |k, _| {
            let _ = seen.push(k, GFP_KERNEL);
            k < 320
        });
        assert_eq!(&seen[..], &[300, 303, 306, 309, 312, 315, 318, 321]);
        seen.clear();
        let mut high = Index::default();
        high.insert(50, 500)?;
        high.insert(60, 600)?;
        high.walk_from(10, |k, _| seen.push(k, GFP_KERNEL).is_ok());
        assert_eq!(&seen[..], &[50, 60]);
        Ok(())
    }
}
