// SPDX-License-Identifier: GPL-2.0

//! How the engine tells front-ends of the ends of what they use: that NVIDIA freed a region
//! (the [`Notifier`] they register on it, and the lockdep class and time limit every
//! notification runs under, [`as_invalidate`], [`might_wait_for_invalidate`]), and that a
//! handle was unpinned (the [`HandleUse`] they attach to it).

use kernel::{
    prelude::*,
    task::might_sleep,
    time::{Instant, Monotonic},
};

use crate::{params, sys::InvalidateClass};

/// What a front-end registers on a region to hear that NVIDIA freed it (the kernel API's
/// invalidate callbacks, the zap of `/dev/gdrpeer`'s CPU mappings). Called once, from NVIDIA's
/// free callback, after the region's readers left and before the table is freed: under
/// NVIDIA's lock, so it must not sleep on anything that waits for the engine.
pub(crate) trait Notifier: Send + Sync {
    /// The region's memory is being freed: stop using its addresses before returning.
    fn notify(&self);
}

/// What a front-end attaches to a handle to use it beyond the engine's calls (the CPU
/// mappings of `/dev/gdrpeer` and `/dev/gdrdrv`): unpinning the handle ends it, under the
/// context's lock, before the handle's region may be released
/// ([`Context::unpin`](crate::cache::Context::unpin)).
pub(crate) trait HandleUse: Send + Sync {
    /// The handle is being unpinned: no new use may begin, and the uses in progress are done
    /// on return. Runs under the context's lock (lock 1), so it may wait only for what never
    /// waits for the engine. Returns whether something of the use is left for the unpin to
    /// undo (for the file front-ends, a CPU mapping lives, whose entries must be zapped).
    fn end(&self) -> bool;

    /// Whether the handle is in use now. Called under the context's lock.
    fn busy(&self) -> bool;
}

/// Runs `f`, a stop of peers' use of freed memory in NVIDIA's free callback, under the
/// lockdep class that stands for NVIDIA's lock ([`InvalidateClass`]), and reports it as `what`
/// in the kernel log when it takes longer than `invalidate_warn_ms`.
pub(crate) fn as_invalidate<R>(what: &str, f: impl FnOnce() -> R) -> R {
    let start = Instant::<Monotonic>::now();
    let r = InvalidateClass::hold(f);
    let took = start.elapsed();
    // The limit is a module parameter (`invalidate_warn_ms`).
    let limit = i64::try_from(params::invalidate_warn_ms()).unwrap_or(i64::MAX);
    if took.as_millis() > limit {
        pr_warn!(
            "{} took {} ms (invalidate_warn_ms {})\n",
            what,
            took.as_millis(),
            limit
        );
    }
    r
}

/// Notes, for lockdep, that the caller may wait for an invalidate callback (or take NVIDIA's
/// lock).
pub(crate) fn might_wait_for_invalidate() {
    might_sleep();
    InvalidateClass::might_wait();
}
