// SPDX-License-Identifier: GPL-2.0

//! GPU page arithmetic for pin requests.
//!
//! NVIDIA pins whole 64 KiB GPU pages, so a request for `[va, va + len)` is
//! widened to whole pages: the start rounded down, the end rounded up, and the
//! caller's offset into the first page kept so addresses can be handed back.

use kernel::prelude::*;

/// log2 of the GPU page size.
pub(crate) const GPU_PAGE_SHIFT: u32 = 16;
/// The GPU page size: the granularity of nv-p2p pins.
pub(crate) const GPU_PAGE_SIZE: u64 = 1 << GPU_PAGE_SHIFT;
const GPU_PAGE_MASK: u64 = !(GPU_PAGE_SIZE - 1);

/// A pin request widened to whole GPU pages.
///
/// # Invariants
///
/// `len` is a multiple of [`GPU_PAGE_SIZE`], `len > 0`, and the start (`va` rounded down to
/// a GPU page) plus `len` does not overflow. `va` is the request's start: the first page's
/// start and the caller's offset into it, in one word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct GpuRange {
    va: u64,
    len: u64,
}

impl GpuRange {
    /// Widens `[va, va + len)` to whole GPU pages.
    ///
    /// Fails with `EINVAL` for a zero length, a length above `max_len`, or a
    /// range that overflows the address space (before or after rounding).
    pub(crate) fn new(va: u64, len: u64, max_len: u64) -> Result<Self> {
        if len == 0 || len > max_len {
            return Err(EINVAL);
        }
        let end = va.checked_add(len).ok_or(EINVAL)?;
        let end = end.checked_add(GPU_PAGE_SIZE - 1).ok_or(EINVAL)? & GPU_PAGE_MASK;
        let start = va & GPU_PAGE_MASK;
        // INVARIANT: both ends are rounded to GPU pages, `end > start` because `len > 0`, and
        // the rounded end did not overflow.
        Ok(Self {
            va,
            len: end - start,
        })
    }

    /// First byte of the first GPU page.
    pub(crate) fn start(&self) -> u64 {
        self.va & GPU_PAGE_MASK
    }

    /// Length in bytes, whole GPU pages.
    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// One past the last byte.
    pub(crate) fn end(&self) -> u64 {
        self.start() + self.len
    }

    /// The caller's offset into the first page.
    pub(crate) fn offset(&self) -> u64 {
        self.va & !GPU_PAGE_MASK
    }

    /// Number of GPU pages.
    pub(crate) fn pages(&self) -> u64 {
        self.len >> GPU_PAGE_SHIFT
    }

    /// Number of GPU pages, as the uAPI and the kernel API count them (`max_pin_bytes` keeps
    /// it far below `u32::MAX`).
    pub(crate) fn page_count(&self) -> u32 {
        u32::try_from(self.pages()).unwrap_or(u32::MAX)
    }

    /// Whether `other` lies entirely inside `self`: a cache hit.
    pub(crate) fn contains(&self, other: &GpuRange) -> bool {
        self.start() <= other.start() && other.end() <= self.end()
    }

    /// Whether the two ranges share a page.
    pub(crate) fn overlaps(&self, other: &GpuRange) -> bool {
        self.start() < other.end() && other.start() < self.end()
    }

    /// The index of `self`'s first page among the pages of `region`, which contains it.
    pub(crate) fn first_page_in(&self, region: &GpuRange) -> usize {
        ((self.start() - region.start()) >> GPU_PAGE_SHIFT) as usize
    }

    /// The entries of `self`'s pages in `per_page`, an array of one entry per page of
    /// `region`: -EINVAL unless `region` contains `self` and the array holds its pages.
    pub(crate) fn pages_of<'a, T>(&self, region: &GpuRange, per_page: &'a [T]) -> Result<&'a [T]> {
        if !region.contains(self) {
            return Err(EINVAL);
        }
        let first = self.first_page_in(region);
        let end = first
            .checked_add(self.page_count() as usize)
            .ok_or(EINVAL)?;
        per_page.get(first..end).ok_or(EINVAL)
    }
}

#[kunit_tests(gdrpeer_range)]
mod tests {
    use super::*;

    const K64: u64 = GPU_PAGE_SIZE;
    const MAX: u64 = 1 << 40;

    #[test]
    fn aligned_request_is_unchanged() {
        let r = GpuRange::new(4 * K64, 2 * K64, MAX).unwrap();
        assert_eq!(
            (r.start(), r.len(), r.offset(), r.pages()),
            (4 * K64, 2 * K64, 0, 2)
        );
    }

    #[test]
    fn unaligned_start_rounds_down_and_keeps_offset() {
        let r = GpuRange::new(4 * K64 + 100, 10, MAX).unwrap();
        assert_eq!((r.start(), r.len(), r.offset()), (4 * K64, K64, 100));
    }

    #[test]
    fn range_straddling_a_boundary_takes_both_pages() {
        let r = GpuRange::new(5 * K64 - 1, 2, MAX).unwrap();
        assert_eq!((r.start(), r.end(), r.pages()), (4 * K64, 6 * K64, 2));
    }

    #[test]
    fn zero_length_is_rejected() {
        assert_eq!(GpuRange::new(K64, 0, MAX), Err(EINVAL));
    }

    #[test]
    fn length_above_the_limit_is_rejected() {
        assert!(GpuRange::new(0, 4 * K64, 4 * K64).is_ok());
        assert_eq!(GpuRange::new(0, 4 * K64 + 1, 4 * K64), Err(EINVAL));
    }

    #[test]
    fn overflow_is_rejected() {
        assert_eq!(GpuRange::new(u64::MAX - 10, 20, u64::MAX), Err(EINVAL));
        // The end fits but rounding it up to a page does not.
        assert_eq!(GpuRange::new(u64::MAX - 10, 5, u64::MAX), Err(EINVAL));
    }

    #[test]
    fn containment() {
        let outer = GpuRange::new(0, 8 * K64, MAX).unwrap();
        assert!(outer.contains(&GpuRange::new(K64 + 5, K64, MAX).unwrap()));
        assert!(!outer.contains(&GpuRange::new(7 * K64 + 1, K64, MAX).unwrap()));
    }
}
