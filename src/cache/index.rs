// SPDX-License-Identifier: GPL-2.0

//! The index of a context's regions by start address ([`Index`]): sorted buckets of entries in
//! a tree keyed by each bucket's first key. A lookup among many regions descends a tree with a
//! node per bucket, not per region, and then searches one contiguous array; a removal never
//! allocates (a bucket shrinks in place, and a bucket that changes its first key is moved
//! under the new key in the tree node it had).

use kernel::{prelude::*, rbtree::RBTree};

/// Entries in a bucket at most (a full bucket of regions is 2 KiB): a full bucket splits in two.
pub(super) const BUCKET: usize = 128;

/// Values by distinct `u64` keys, in order.
///
/// # Invariants
///
/// No bucket is empty, each is sorted by key and filed under its first key, and the keys of
/// one bucket are below those of the next.
pub(super) struct Index<V> {
    buckets: RBTree<u64, KVec<(u64, V)>>,
}

impl<V> Default for Index<V> {
    fn default() -> Self {
        Index {
            buckets: RBTree::new(),
        }
    }
}

impl<V> Index<V> {
    /// The key of the bucket that holds `key` or would: the last that starts at or before it.
    fn fence(&self, key: u64) -> Option<u64> {
        match self.buckets.cursor_lower_bound(&key) {
            Some(c) if *c.current().0 == key => Some(key),
            Some(c) => c.peek_prev().map(|(k, _)| *k),
            None => self.buckets.cursor_back().map(|c| *c.current().0),
        }
    }

    /// The value with the greatest key at or below `key`, cloned, with its key.
    pub(super) fn floor(&self, key: u64) -> Option<(u64, V)>
    where
        V: Clone,
    {
        let found = |bucket: &KVec<(u64, V)>| {
            let i = match bucket.binary_search_by_key(&key, |(k, _)| *k) {
                Ok(i) => i,
                // The bucket's first key is at most `key` (it is the bucket's fence): i >= 1.
                Err(i) => i.checked_sub(1)?,
            };
            bucket.get(i).map(|(k, v)| (*k, v.clone()))
        };
        match self.buckets.cursor_lower_bound(&key) {
            Some(c) if *c.current().0 == key => found(c.current().1),
            Some(c) => c.peek_prev().and_then(|(_, b)| found(b)),
            None => self
                .buckets
                .cursor_back()
                .and_then(|c| found(c.current().1)),
        }
    }

    /// Calls `f` on the entries in key order from the one with the greatest key at or below
    /// `key` (from the first if there is none), until `f` returns false.
    pub(super) fn walk_from(&mut self, key: u64, mut f: impl FnMut(u64, &V) -> bool) {
        let (mut cursor, mut first) = match self.fence(key) {
            Some(fence) => (self.buckets.cursor_lower_bound_mut(&fence), Some(key)),
            None => (self.buckets.cursor_front_mut(), None),
        };
        while let Some(c) = cursor {
            let bucket = c.current().1;
            let skip = match first.take() {
                Some(key) => match bucket.binary_search_by_key(&key, |(k, _)| *k) {
                    Ok(i) => i,
                    Err(i) => i.saturating_sub(1),
                },
                None => 0,
            };
            for (k, v) in bucket.iter().skip(skip) {
                if !f(*k, v) {
                    return;
                }
            }
            cursor = c.move_next();
        }
    }

    /// Every entry, in key order.
    pub(super) fn iter(&self) -> impl Iterator<Item = (u64, &V)> {
        self.buckets
            .values()
            .flat_map(|bucket| bucket.iter().map(|(k, v)| (*k, v)))
    }

    /// Adds `value` under `key`, which no entry has (-EEXIST otherwise). May allocate (a
    /// bucket that grows or splits, a new bucket's tree node); on failure nothing changed.
    pub(super) fn insert(&mut self, key: u64, value: V) -> Result {
        // The bucket it goes in: the one that starts at or before it, or else the first.
        let fence = match self.fence(key) {
            Some(fence) => fence,
            None => match self.buckets.cursor_front() {
                Some(c) => *c.current().0,
                None => {
                    let mut bucket = KVec::with_capacity(1, GFP_KERNEL)?;
                    bucket.push((key, value), GFP_KERNEL)?;
                    RBTree::try_create_and_insert(&mut self.buckets, key, bucket, GFP_KERNEL)?;
                    return Ok(());
                }
            },
        };
        let bucket = self.buckets.get_mut(&fence).ok_or(EINVAL)?;
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
            if pos == 0 {
                self.refile(fence);
            }
            return Ok(());
        }
        // Full: the upper half moves to a new bucket, allocated before anything changes.
        let mut upper = KVec::with_capacity(BUCKET, GFP_KERNEL)?;
        let node = kernel::rbtree::RBTreeNodeReservation::new(GFP_KERNEL)?;
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
        // Both halves have room: never fails.
        let _ = target.insert_within_capacity(at, (key, value));
        let upper_key = upper.first().map_or(key, |(k, _)| *k);
        self.buckets.insert(node.into_node(upper_key, upper));
        if pos == 0 {
            self.refile(fence);
        }
        Ok(())
    }

    /// Takes out the entry under `key` if `which` says it is the one; never allocates.
    pub(super) fn remove_if(&mut self, key: u64, which: impl FnOnce(&V) -> bool) -> Option<V> {
        let fence = self.fence(key)?;
        let bucket = self.buckets.get_mut(&fence)?;
        let i = bucket.binary_search_by_key(&key, |(k, _)| *k).ok()?;
        if !bucket.get(i).is_some_and(|(_, v)| which(v)) {
            return None;
        }
        let (_, value) = bucket.remove(i).ok()?;
        if bucket.is_empty() {
            self.buckets.remove(&fence);
        } else if i == 0 {
            self.refile(fence);
        }
        Some(value)
    }

    /// Files the bucket under `fence` under its first key again, in the same tree node: no
    /// allocation.
    fn refile(&mut self, fence: u64) {
        let Some(bucket) = self.buckets.get_mut(&fence) else {
            return;
        };
        let Some(&(first, _)) = bucket.first() else {
            return;
        };
        if first == fence {
            return;
        }
        let bucket = core::mem::take(bucket);
        if let Some(node) = self.buckets.remove_node(&fence) {
            // The node's memory is kept; its old value, an empty vector, owns none.
            self.buckets
                .insert(node.into_reservation().into_node(first, bucket));
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
        // Every bucket is filed under its first key, and none is empty.
        for (fence, bucket) in index.buckets.iter() {
            assert_eq!(bucket.first().map(|(k, _)| *k), Some(*fence));
        }
        assert!(index.buckets.iter().count() > 1);
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
        for (fence, bucket) in index.buckets.iter() {
            assert_eq!(bucket.first().map(|(k, _)| *k), Some(*fence));
        }
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
        assert!(index.buckets.is_empty());
        assert_eq!(index.remove_if(3, |_| true), None);
        Ok(())
    }

    #[test]
    fn a_walk_starts_at_the_floor() -> Result {
        let mut index = filled(2 * BUCKET as u64 + 7)?;
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
