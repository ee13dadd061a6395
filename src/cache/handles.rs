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

/// A [`Numbering::PageOffsets`] handle for a window of `span` pages below `limit`: the first
/// number from `next` (the number after the last one given) followed by `span` pages that no
/// live handle takes (`live`: the live handles and their spans, in ascending order), else the
/// first such number from 0; `None` when there is no such room. Numbers thus go on rising
/// past the live handles, also once they turned: a number just unpinned is not given again
/// while others are free.
///
/// Walks every live handle: the caller takes `next` itself while no live handle lies at or
/// after it ([`page_offset_next_is_free`]), as before the numbers first turn.
pub(super) fn page_offset_handle(
    next: u64,
    span: u64,
    live: impl Iterator<Item = (u64, u64)>,
    limit: u64,
) -> Option<u64> {
    let fits = |at: u64, end: u64| end.checked_sub(at).is_some_and(|room| room >= span);
    let mut first = None;
    let mut free = 0;
    for (handle, taken) in live {
        if first.is_none() && fits(free, handle) {
            first = Some(free);
        }
        let at = free.max(next);
        if fits(at, handle) {
            return Some(at);
        }
        free = handle.saturating_add(taken);
    }
    let at = free.max(next);
    if fits(at, limit) {
        return Some(at);
    }
    first.or_else(|| fits(free, limit).then_some(free))
}

/// Whether `next` is a free [`Numbering::PageOffsets`] handle for `span` pages below `limit`
/// that rises past every live one: `last`, the highest live handle and its span, ends at or
/// before it.
pub(super) fn page_offset_next_is_free(
    next: u64,
    span: u64,
    last: Option<(u64, u64)>,
    limit: u64,
) -> bool {
    limit.checked_sub(next).is_some_and(|room| room >= span)
        && last.is_none_or(|(handle, taken)| handle.saturating_add(taken) <= next)
}

#[kernel::prelude::kunit_tests(gdrpeer_handles)]
mod tests {
    use super::{page_offset_handle, page_offset_next_is_free};

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
    fn turned_numbers_skip_live_handles() {
        // Turned into the room before a live handle: the next number is past it, not its.
        assert_eq!(handle(16, 16, &[(16, 16), (60, 30)], 100), Some(32));
        // From `next` on first, then from 0.
        assert_eq!(handle(40, 16, &[(0, 10), (30, 5)], 100), Some(40));
        assert_eq!(handle(40, 16, &[(20, 10), (50, 45)], 100), Some(0));
        // A live handle that begins before `next` and covers it.
        assert_eq!(handle(20, 8, &[(10, 20)], 100), Some(30));
    }

    #[test]
    fn next_is_free_past_the_last_live_handle() {
        assert!(page_offset_next_is_free(16, 16, None, 100));
        assert!(page_offset_next_is_free(32, 16, Some((16, 16)), 100));
        assert!(!page_offset_next_is_free(16, 16, Some((16, 16)), 100));
        assert!(!page_offset_next_is_free(16, 16, Some((60, 30)), 100));
        assert!(!page_offset_next_is_free(90, 16, None, 100));
    }

    #[test]
    fn no_room_is_none() {
        assert_eq!(handle(90, 16, &[(0, 50), (60, 40)], 100), None);
        assert_eq!(handle(0, 101, &[], 100), None);
        assert_eq!(handle(200, 1, &[(0, 100)], 100), None);
    }
}
