// SPDX-License-Identifier: GPL-2.0

//! The registration cache's decisions, kept free of locks and of NVIDIA so that KUnit can
//! check them: what a merge pins and when the cache must shrink (the geometry they rest on,
//! containment, overlap and a window's pages, is [`GpuRange`]'s).

use crate::range::GpuRange;

/// The limits of one context's cache, and the global budget (0: no limit).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Limits {
    /// Pinned bytes per context.
    pub(crate) ctx_bytes: u64,
    /// Pinned regions per context.
    pub(crate) ctx_regions: u64,
    /// Pinned bytes over all contexts.
    pub(crate) global_bytes: u64,
}

/// What is pinned now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Usage {
    /// Pinned bytes of the context.
    pub(crate) ctx_bytes: u64,
    /// Pinned regions of the context.
    pub(crate) ctx_regions: u64,
    /// Pinned bytes of all contexts.
    pub(crate) global_bytes: u64,
}

impl Limits {
    /// Whether `usage` is over a limit, so that an unused region (the eviction list's next)
    /// must go. Limits bound what is pinned, in use or not; only unused regions are ever evicted,
    /// so a context whose regions are all in use may stay over them.
    pub(crate) fn exceeded_by(&self, usage: &Usage) -> bool {
        let over = |limit: u64, value: u64| limit != 0 && value > limit;
        over(self.ctx_bytes, usage.ctx_bytes)
            || over(self.ctx_regions, usage.ctx_regions)
            || over(self.global_bytes, usage.global_bytes)
    }
}

/// The range a miss pins: the request grown to cover every cached region it overlaps, so that
/// one region replaces them all and the tree never holds overlapping regions.
pub(crate) fn merged(
    request: &GpuRange,
    overlapping: impl IntoIterator<Item = GpuRange>,
) -> (u64, u64) {
    overlapping
        .into_iter()
        .fold((request.start(), request.end()), |(start, end), r| {
            (start.min(r.start()), end.max(r.end()))
        })
}

#[kernel::prelude::kunit_tests(gdrpeer_cache)]
mod tests {
    use super::*;
    use crate::range::GPU_PAGE_SIZE;

    const K64: u64 = GPU_PAGE_SIZE;
    const MAX: u64 = 1 << 40;

    fn r(start: u64, len: u64) -> GpuRange {
        GpuRange::new(start, len, MAX).unwrap()
    }

    #[test]
    fn a_contained_request_is_a_hit() {
        let region = r(0x10000, 4 * K64);
        assert!(region.contains(&r(0x10000 + 100, K64)));
        assert!(region.contains(&region));
        // Rounded up to the page after the region: a miss.
        assert!(!region.contains(&r(0x10000 + 3 * K64 + 1, K64)));
        assert!(!region.contains(&r(0, K64)));
    }

    #[test]
    fn a_miss_merges_every_overlapping_region() {
        let request = r(4 * K64, 2 * K64);
        let (start, end) = merged(&request, [r(3 * K64, 2 * K64), r(5 * K64, 4 * K64)]);
        assert_eq!(start, 3 * K64);
        assert_eq!(end, 9 * K64);
        assert_eq!(merged(&request, []), (4 * K64, 6 * K64));
    }

    #[test]
    fn touching_regions_do_not_overlap() {
        assert!(!r(0, K64).overlaps(&r(K64, K64)));
        assert!(r(0, 2 * K64).overlaps(&r(K64, K64)));
        assert!(r(K64, K64).overlaps(&r(0, 2 * K64)));
    }

    #[test]
    fn a_handle_sees_its_own_pages() {
        let region = r(0x200000, 8 * K64);
        assert_eq!(r(0x200000 + 3 * K64 + 5, 10).first_page_in(&region), 3);
        assert_eq!(region.first_page_in(&region), 0);
    }

    #[test]
    fn limits_trigger_eviction_only_when_exceeded() {
        let limits = Limits {
            ctx_bytes: 4 * K64,
            ctx_regions: 2,
            global_bytes: 8 * K64,
        };
        let at = Usage {
            ctx_bytes: 4 * K64,
            ctx_regions: 2,
            global_bytes: 8 * K64,
        };
        assert!(!limits.exceeded_by(&at));
        assert!(limits.exceeded_by(&Usage {
            ctx_bytes: 5 * K64,
            ..at
        }));
        assert!(limits.exceeded_by(&Usage {
            ctx_regions: 3,
            ..at
        }));
        assert!(limits.exceeded_by(&Usage {
            global_bytes: 9 * K64,
            ..at
        }));
        let none = Limits {
            ctx_bytes: 0,
            ctx_regions: 0,
            global_bytes: 0,
        };
        assert!(!none.exceeded_by(&Usage {
            ctx_bytes: u64::MAX,
            ctx_regions: u64::MAX,
            global_bytes: u64::MAX,
        }));
    }
}
