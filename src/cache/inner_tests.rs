// SPDX-License-Identifier: GPL-2.0

//! KUnit tests of a context's cache state ([`Inner`]): hits, merges, the eviction order and
//! the limits. The regions are real but never pinned: unpinning one calls no NVIDIA function.

#[kernel::prelude::kunit_tests(gdrpeer_cache_inner)]
mod tests {
    use crate::{
        cache::{Context, Inner, Numbering, Region},
        env::Env,
        nv_p2p::{PinKind, Tokens},
        policy::Limits,
        range::{GpuRange, GPU_PAGE_SIZE},
    };
    use kernel::{prelude::*, sync::Arc};

    /// No limit on anything.
    const NONE: Limits = Limits {
        ctx_bytes: 0,
        ctx_regions: 0,
        global_bytes: 0,
    };

    /// `pages` GPU pages from page `first`.
    fn pages(first: u64, pages: u64) -> Result<GpuRange> {
        GpuRange::new(first * GPU_PAGE_SIZE, pages * GPU_PAGE_SIZE, u64::MAX)
    }

    /// A context of the test's thread, without events; its regions go at [`Context::close`].
    fn context() -> Result<Arc<Context>> {
        Context::new(Env::get()?, false, Numbering::Counted)
    }

    /// Caches a callback pin's region over `range`: accounted, in the index, unused (in the
    /// eviction list).
    fn cache(ctx: &Arc<Context>, inner: &mut Inner, range: GpuRange) -> Result<Arc<Region>> {
        let region = Region::new(ctx, range, PinKind::Callback, Tokens::default())?;
        inner.account(&region);
        inner.insert(&region)?;
        inner.make_unused(&region);
        Ok(region)
    }

    /// The starts (in pages) of the regions `evict_lru` takes, in its order, until it takes
    /// none. Each must be one of `cached` (regions in the index): the one that left it.
    fn evictions(inner: &mut Inner, cached: &[&Arc<Region>]) -> Result<KVec<u64>> {
        let mut order = KVec::new();
        let mut gone = KVec::from_elem(false, cached.len(), GFP_KERNEL)?;
        while inner.evict_lru() {
            let mut taken = None;
            for (i, r) in cached.iter().enumerate() {
                if !gone[i] && !inner.book(r).in_tree {
                    assert!(taken.is_none(), "one eviction took two regions");
                    gone[i] = true;
                    taken = Some(r.pinned.range().start() / GPU_PAGE_SIZE);
                }
            }
            assert!(taken.is_some(), "an eviction took none of the regions");
            order.push(taken.unwrap_or(u64::MAX), GFP_KERNEL)?;
        }
        Ok(order)
    }

    /// A user of `region` goes (what `Context::drop_ref` does for a cached region).
    fn put(inner: &mut Inner, region: &Arc<Region>) {
        region.book.access_mut(inner).refs -= 1;
        inner.make_unused(region);
    }

    #[test]
    fn a_contained_request_hits_its_region() -> Result {
        let ctx = context()?;
        let r = {
            let mut inner = ctx.inner.lock();
            let r = cache(&ctx, &mut inner, pages(10, 4)?)?;
            let hit = |inner: &mut Inner, first, n| -> Result<bool> {
                Ok(inner
                    .lookup(&pages(first, n)?)
                    .is_some_and(|found| Arc::ptr_eq(&found, &r)))
            };
            // Inside, at both edges, the whole region.
            assert!(hit(&mut inner, 10, 1)?);
            assert!(hit(&mut inner, 13, 1)?);
            assert!(hit(&mut inner, 10, 4)?);
            // Reaching past either edge, or elsewhere: a miss.
            assert!(!hit(&mut inner, 9, 2)?);
            assert!(!hit(&mut inner, 13, 2)?);
            assert!(!hit(&mut inner, 20, 1)?);
            r
        };
        ctx.close();
        assert!(!r.pinned.is_revoked());
        Ok(())
    }

    #[test]
    fn a_miss_finds_every_region_it_overlaps() -> Result {
        let ctx = context()?;
        {
            let mut inner = ctx.inner.lock();
            for (first, n) in [(0, 2), (4, 2), (8, 2), (12, 2)] {
                cache(&ctx, &mut inner, pages(first, n)?)?;
            }
            let starts = |inner: &mut Inner, first, n| -> Result<KVec<u64>> {
                let mut v = KVec::new();
                for r in inner.overlapping(&pages(first, n)?)? {
                    v.push(r.pinned.range().start() / GPU_PAGE_SIZE, GFP_KERNEL)?;
                }
                Ok(v)
            };
            // From inside the second region to inside the fourth: three, in address order.
            assert_eq!(&starts(&mut inner, 5, 8)?[..], &[4, 8, 12]);
            // Touching the first and the second (pages 2..4) overlaps neither.
            assert!(starts(&mut inner, 2, 2)?.is_empty());
            // Past the last one: none.
            assert!(starts(&mut inner, 14, 4)?.is_empty());
            // Covering all.
            assert_eq!(&starts(&mut inner, 0, 16)?[..], &[0, 4, 8, 12]);
        }
        ctx.close();
        Ok(())
    }

    #[test]
    fn a_new_region_replaces_those_it_overlaps() -> Result {
        let ctx = context()?;
        {
            let mut inner = ctx.inner.lock();
            cache(&ctx, &mut inner, pages(0, 2)?)?;
            let used = cache(&ctx, &mut inner, pages(4, 2)?)?;
            cache(&ctx, &mut inner, pages(8, 2)?)?;
            let apart = cache(&ctx, &mut inner, pages(12, 2)?)?;
            inner.take_ref(&used);
            // What a miss over pages 1..9 pins: the request grown over the three it overlaps.
            let merged = Region::new(&ctx, pages(0, 10)?, PinKind::Callback, Tokens::default())?;
            inner.replace(&merged)?;
            // It serves all their pages; the two unused ones were given back, the used one
            // only left the cache (its user gives it back); the one apart stays.
            for first in [0, 5, 9] {
                let found = inner.lookup(&pages(first, 1)?);
                assert!(found.is_some_and(|r| Arc::ptr_eq(&r, &merged)));
            }
            assert!(inner
                .lookup(&pages(12, 2)?)
                .is_some_and(|r| Arc::ptr_eq(&r, &apart)));
            assert_eq!(inner.stats.merges, 2);
            assert_eq!(inner.stats.regions, 3);
            assert_eq!(inner.stats.pinned_bytes, 14 * GPU_PAGE_SIZE);
            assert!(!inner.book(&used).in_tree && !inner.book(&used).in_lru);
            // Only the one apart is unused: the replaced ones left the eviction list, the one
            // in use too (a hit had left it there).
            assert_eq!(&evictions(&mut inner, &[&apart, &merged])?[..], &[12]);
            used.book.access_mut(&mut inner).refs -= 1;
            inner.release(&used);
            assert_eq!(inner.stats.regions, 1);
        }
        ctx.close();
        Ok(())
    }

    #[test]
    fn the_least_recently_used_region_goes_first() -> Result {
        let ctx = context()?;
        {
            let mut inner = ctx.inner.lock();
            let a = cache(&ctx, &mut inner, pages(0, 1)?)?;
            let b = cache(&ctx, &mut inner, pages(2, 1)?)?;
            let c = cache(&ctx, &mut inner, pages(4, 1)?)?;
            // A hit leaves `a` in its place, referenced; unused again, it goes after the
            // others, which nobody hit.
            inner.take_ref(&a);
            assert!(inner.book(&a).in_lru && inner.book(&a).referenced);
            put(&mut inner, &a);
            assert_eq!(&evictions(&mut inner, &[&a, &b, &c])?[..], &[2, 4, 0]);
            // Nothing is left to evict, and nothing is accounted.
            assert!(!inner.evict_lru());
            assert_eq!((inner.stats.regions, inner.stats.pinned_bytes), (0, 0));
            // Evicted regions are out of the tree: no hit.
            assert!(inner.lookup(&pages(0, 1)?).is_none());
        }
        ctx.close();
        Ok(())
    }

    #[test]
    fn a_hit_region_goes_after_the_untouched_ones() -> Result {
        let ctx = context()?;
        {
            let mut inner = ctx.inner.lock();
            let mut r = KVec::new();
            for first in [0, 2, 4, 6, 8] {
                r.push(cache(&ctx, &mut inner, pages(first, 1)?)?, GFP_KERNEL)?;
            }
            // Hits on the second and fourth (unused again at once), two on the third.
            for i in [1, 2, 3, 2] {
                inner.take_ref(&r[i]);
                put(&mut inner, &r[i]);
            }
            // Those nobody hit go first, in the order they came; then the hit ones, in theirs.
            let all = [&r[0], &r[1], &r[2], &r[3], &r[4]];
            assert_eq!(&evictions(&mut inner, &all)?[..], &[0, 8, 2, 4, 6]);
            assert!(inner.lru.is_empty());
        }
        ctx.close();
        Ok(())
    }

    #[test]
    fn a_region_in_use_is_never_evicted() -> Result {
        let ctx = context()?;
        {
            let mut inner = ctx.inner.lock();
            let used = cache(&ctx, &mut inner, pages(0, 1)?)?;
            let other = cache(&ctx, &mut inner, pages(2, 1)?)?;
            // A hit leaves it in the eviction list, where evictions pass it by.
            inner.take_ref(&used);
            assert_eq!(&evictions(&mut inner, &[&used, &other])?[..], &[2]);
            assert!(inner.lookup(&pages(0, 1)?).is_some());
            // Passed by in use, it left the list, and the limits cannot take it either.
            assert!(!inner.book(&used).in_lru && inner.lru.is_empty());
            inner.trim(&Limits {
                ctx_regions: 1,
                ctx_bytes: 1,
                ..NONE
            });
            assert_eq!(inner.stats.regions, 1);
            // Unused again, it is back in the list, and the next eviction takes it.
            put(&mut inner, &used);
            assert!(inner.book(&used).in_lru && !inner.book(&used).referenced);
            assert_eq!(&evictions(&mut inner, &[&used])?[..], &[0]);
            assert_eq!(inner.stats.regions, 0);
        }
        ctx.close();
        Ok(())
    }

    #[test]
    fn limits_evict_until_they_hold() -> Result {
        let ctx = context()?;
        {
            let mut inner = ctx.inner.lock();
            for first in 0..4 {
                cache(&ctx, &mut inner, pages(first * 2, 1)?)?;
            }
            // Within every limit, or none set: nothing goes.
            inner.trim(&NONE);
            inner.trim(&Limits {
                ctx_regions: 4,
                ..NONE
            });
            assert_eq!(inner.stats.regions, 4);
            assert_eq!(inner.stats.evictions_limit, 0);
            // Two regions at most: the two least recently used go.
            inner.trim(&Limits {
                ctx_regions: 2,
                ..NONE
            });
            assert_eq!(inner.stats.regions, 2);
            assert_eq!(inner.stats.evictions_limit, 2);
            assert!(inner.lookup(&pages(0, 1)?).is_none());
            assert!(inner.lookup(&pages(4, 1)?).is_some());
            // One page's bytes at most: one more goes.
            inner.trim(&Limits {
                ctx_bytes: GPU_PAGE_SIZE,
                ..NONE
            });
            assert_eq!(inner.stats.regions, 1);
            assert_eq!(inner.stats.pinned_bytes, GPU_PAGE_SIZE);
            assert!(inner.lookup(&pages(6, 1)?).is_some());
        }
        ctx.close();
        Ok(())
    }
}
