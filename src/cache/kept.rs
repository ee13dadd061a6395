// SPDX-License-Identifier: GPL-2.0

//! References kept on a context's regions by users that may outlive it: each keeps its region
//! in use, and pinned after the context closes, until it is given back ([`Context::unkeep`]).

use kernel::{prelude::*, sync::Arc};

use super::{Context, Region, Sharing};
use crate::{
    nv_p2p::{PinKind, Tokens},
    params,
    range::GpuRange,
};

impl Context {
    /// Takes a kept reference on a handle's region: the region stays in use (never evicted)
    /// until [`Context::unkeep`], whatever happens to the handle, and stays pinned after the
    /// context closes. Returns the region and the handle's window.
    ///
    /// `persistent` asks for a handle pinned persistently: -EINVAL for a callback pin.
    pub(crate) fn keep_handle(
        &self,
        handle: u64,
        persistent: bool,
    ) -> Result<(Arc<Region>, GpuRange)> {
        let mut inner = self.lock();
        let h = inner.handles.get(&handle).ok_or(EINVAL)?;
        let (region, window) = (h.region.clone(), h.window);
        if persistent && region.pinned.kind() != PinKind::Persistent {
            return Err(EINVAL);
        }
        if region.pinned.is_revoked() {
            return Err(ENXIO);
        }
        let kept = inner.book(&region).kept.checked_add(1).ok_or(EMFILE)?;
        inner.take_ref(&region);
        region.book.access_mut(&mut inner).kept = kept;
        Ok((region, window))
    }

    /// Pins `range` for a kept reference alone ([`Context::keep_handle`]): it is the only
    /// reference taken, and no handle is made (so no event either). Returns the region and the
    /// window.
    ///
    /// A callback pin comes from the cache, as a pin without tokens would. A persistent pin is
    /// a region of its own ([`Sharing::Private`]), never in the cache: the keeper owns it, and
    /// its last reference ([`Context::unkeep`]) gives it back to NVIDIA, from any process
    /// (a persistent pin never dies with the memory, so a cached one would keep freed memory
    /// alive, and a stale region could serve a later allocation at the same address).
    pub(crate) fn keep_range(
        self: &Arc<Self>,
        range: GpuRange,
        kind: PinKind,
    ) -> Result<(Arc<Region>, GpuRange)> {
        let sharing = match kind {
            PinKind::Callback => Sharing::Cached,
            PinKind::Persistent => Sharing::Private,
        };
        let mut inner = self.lock();
        let region = self.acquire(&mut inner, range, kind, sharing, Tokens::default())?;
        let book = region.book.access_mut(&mut inner);
        match book.kept.checked_add(1) {
            Some(kept) => book.kept = kept,
            None => {
                self.drop_ref(&mut inner, &region);
                return Err(EMFILE);
            }
        }
        inner.trim(&params::limits());
        Ok((region, range))
    }

    /// Gives back a kept reference ([`Context::keep_handle`], [`Context::keep_range`]). The
    /// region goes back to the cache, or is released when nothing else holds it and it is out
    /// of the cache (the context closed, a merge replaced it, NVIDIA freed it).
    pub(crate) fn unkeep(&self, region: &Arc<Region>) {
        let mut inner = self.lock();
        region.book.access_mut(&mut inner).kept -= 1;
        // No trim here: this may run in any process or a kernel thread (wherever the keeper
        // goes), which could not give evicted regions back; the next pin trims.
        self.drop_ref(&mut inner, region);
    }
}
