// SPDX-License-Identifier: GPL-2.0

//! How a context numbers its handles ([`Numbering`]).

use kernel::page::PAGE_SHIFT;

use crate::range::GpuRange;

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
pub(super) fn page_offset_span(window: &GpuRange) -> u64 {
    (window.len() >> PAGE_SHIFT).max(1)
}

/// A [`Numbering::PageOffsets`] handle for a window of `span` pages below `limit`: `next`,
/// the number after the last one given, while `span` pages from it fit below `limit`; else
/// the first number from 0 followed by `span` pages that no live handle takes (`live`: the
/// live handles and their spans, in ascending order); `None` when there is no such room.
pub(super) fn page_offset_handle(
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
