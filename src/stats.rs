// SPDX-License-Identifier: GPL-2.0

//! The engine's counters: per context ([`Stats`], under the context's lock) and over all
//! contexts ([`GLOBAL`], atomics), for debugfs and the STATS ioctl.

use kernel::{
    fmt,
    sync::atomic::{Atomic, Relaxed},
};

/// Counters over all contexts, for debugfs and the STATS ioctl.
pub(crate) struct GlobalStats {
    pub(crate) contexts: Atomic<u64>,
    pub(crate) pinned_bytes: Atomic<u64>,
    pub(crate) regions: Atomic<u64>,
    pub(crate) hits: Atomic<u64>,
    pub(crate) misses: Atomic<u64>,
    pub(crate) evictions_limit: Atomic<u64>,
    pub(crate) evictions_enomem: Atomic<u64>,
    pub(crate) callbacks: Atomic<u64>,
    /// Regions released by a close in another process, waiting for NVIDIA's callback.
    pub(crate) deferred_live: Atomic<u64>,
    /// gdrpeer's own memory held by the accounted regions (`crate::cache`'s estimate of its
    /// allocations, as the slab rounds them).
    pub(crate) region_memory_bytes: Atomic<u64>,
}

pub(crate) static GLOBAL: GlobalStats = GlobalStats {
    contexts: Atomic::new(0),
    pinned_bytes: Atomic::new(0),
    regions: Atomic::new(0),
    hits: Atomic::new(0),
    misses: Atomic::new(0),
    evictions_limit: Atomic::new(0),
    evictions_enomem: Atomic::new(0),
    callbacks: Atomic::new(0),
    deferred_live: Atomic::new(0),
    region_memory_bytes: Atomic::new(0),
};

impl GlobalStats {
    /// The counters now, in the shape of a context's (`handles` and `merges` are not kept
    /// globally; `deferred` counts the releases still waiting).
    pub(crate) fn snapshot(&self) -> Stats {
        Stats {
            hits: self.hits.load(Relaxed),
            misses: self.misses.load(Relaxed),
            merges: 0,
            evictions_limit: self.evictions_limit.load(Relaxed),
            evictions_enomem: self.evictions_enomem.load(Relaxed),
            callbacks: self.callbacks.load(Relaxed),
            deferred: self.deferred_live.load(Relaxed),
            pinned_bytes: self.pinned_bytes.load(Relaxed),
            regions: self.regions.load(Relaxed),
            handles: 0,
        }
    }

    /// Formats the counters (debugfs `gdrpeer/stats`).
    pub(crate) fn show(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "contexts {}", self.contexts.load(Relaxed))?;
        self.snapshot().show(f)?;
        writeln!(
            f,
            "region_memory_bytes {}",
            self.region_memory_bytes.load(Relaxed)
        )
    }
}

/// Counters of one context.
#[derive(Clone, Copy, Default, Debug)]
pub(crate) struct Stats {
    pub(crate) hits: u64,
    pub(crate) misses: u64,
    pub(crate) merges: u64,
    pub(crate) evictions_limit: u64,
    pub(crate) evictions_enomem: u64,
    pub(crate) callbacks: u64,
    pub(crate) deferred: u64,
    pub(crate) pinned_bytes: u64,
    pub(crate) regions: u64,
    pub(crate) handles: u64,
}

impl Stats {
    /// Formats the counters that contexts and the global view share, `name value` per line.
    pub(crate) fn show(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "pinned_bytes {}", self.pinned_bytes)?;
        writeln!(f, "regions {}", self.regions)?;
        writeln!(f, "hits {}", self.hits)?;
        writeln!(f, "misses {}", self.misses)?;
        writeln!(f, "evictions_limit {}", self.evictions_limit)?;
        writeln!(f, "evictions_enomem {}", self.evictions_enomem)?;
        writeln!(f, "callbacks {}", self.callbacks)?;
        writeln!(f, "deferred_releases {}", self.deferred)
    }
}
