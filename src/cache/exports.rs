// SPDX-License-Identifier: GPL-2.0

//! A context's dma-buf references on its regions ([`crate::export`]): each keeps its region
//! in use, and pinned after the context closes, until the dma-buf goes.

use kernel::{prelude::*, sync::Arc};

use super::{Context, Region, Sharing};
use crate::{
    nv_p2p::{PinKind, Tokens},
    params,
    range::GpuRange,
};

impl Context {
    /// Takes a reference on a handle's region for a dma-buf ([`crate::export`]): the region
    /// stays in use (never evicted) until [`Context::unexport`], whatever happens to the
    /// handle, and stays pinned after the context closes. Returns the region and the handle's
    /// window.
    ///
    /// `persistent` asks for a handle pinned persistently: -EINVAL for a callback pin.
    pub(crate) fn export(&self, handle: u64, persistent: bool) -> Result<(Arc<Region>, GpuRange)> {
        let mut inner = self.inner.lock();
        let h = inner.handles.get(&handle).ok_or(EINVAL)?;
        let (region, window) = (h.region.clone(), h.window);
        if persistent && region.pinned.kind() != PinKind::Persistent {
            return Err(EINVAL);
        }
        if region.pinned.is_revoked() {
            return Err(ENXIO);
        }
        inner.take_ref(&region);
        region.book.access_mut(&mut inner).exports += 1;
        Ok((region, window))
    }

    /// Pins `range` for a dma-buf of it ([`Context::export`]): the dma-buf's reference is the
    /// only one taken, and no handle is made (so no event either). Returns the region and the
    /// window.
    ///
    /// A callback pin comes from the cache, as a pin without tokens would. A persistent pin is
    /// a region of its own ([`Sharing::Private`]), never in the cache: the dma-buf owns it, and
    /// its last reference ([`Context::unexport`]) gives it back to NVIDIA, from any process
    /// (a persistent pin never dies with the memory, so a cached one would keep freed memory
    /// alive, and a stale region could serve a later allocation at the same address).
    pub(crate) fn export_range(
        self: &Arc<Self>,
        range: GpuRange,
        kind: PinKind,
    ) -> Result<(Arc<Region>, GpuRange)> {
        let sharing = match kind {
            PinKind::Callback => Sharing::Cached,
            PinKind::Persistent => Sharing::Private,
        };
        let mut inner = self.inner.lock();
        let region = self.acquire(&mut inner, range, kind, sharing, Tokens::default())?;
        region.book.access_mut(&mut inner).exports += 1;
        inner.trim(&params::limits());
        Ok((region, range))
    }

    /// Drops a dma-buf's reference ([`Context::export`]). The region goes back to the cache,
    /// or is released when nothing else holds it and it is out of the cache (the context
    /// closed, a merge replaced it, NVIDIA freed it).
    pub(crate) fn unexport(&self, region: &Arc<Region>) {
        let mut inner = self.inner.lock();
        region.book.access_mut(&mut inner).exports -= 1;
        // No trim here: this may run in any process or a kernel thread (the dma-buf's last
        // reference), which could not give evicted regions back; the next pin trims.
        self.drop_ref(&mut inner, region);
    }
}
