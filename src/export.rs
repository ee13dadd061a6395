// SPDX-License-Identifier: GPL-2.0

//! dma-buf export of pinned windows, for `/dev/gdrpeer`'s EXPORT_DMABUF and the kernel API's
//! `gdrpeer_dmabuf_export` (Documentation/user/dma-buf.rst).
//!
//! An [`Export`] is the exporter of one dma-buf: a window of a region, with a reference on the
//! region that keeps it pinned and in use for as long as the dma-buf lives, whatever happens to
//! the handle or the context it came from ([`Context::keep_handle`]).
//!
//! Importers must take peer-to-peer memory and handle invalidation, unless the region is a
//! persistent pin ([`Window::Persistent`], or a handle pinned persistently): NVIDIA never
//! revokes one, and the dma-buf keeps it pinned until its release, so an importer that cannot
//! be invalidated (a pinned attachment without `invalidate_mappings`) never meets a
//! revocation, and cuMemFree under it leaves its DMA reaching the memory the pin still holds.
//! Each attaching device gets
//! the region's DMA mapping for it, made at attach (outside the reservation lock, since
//! nv-p2p takes NVIDIA's lock) and shared with every other user of the region on that device;
//! `map_dma_buf` only copies its addresses into a table, under the reservation lock.
//!
//! When NVIDIA frees the memory, the region's notifier ([`Revoke`]) runs in the free
//! callback, before the DMA mappings and the table go: it marks the export revoked, tells the
//! importers to stop (`dma_buf_invalidate_mappings`), waits for their fences and then for their
//! unmaps, as the 7.2 core defines a complete stop. Later attaches and maps fail with -ENXIO.
//!
//! Locks: the free callback takes the reservation lock under NVIDIA's lock, so nothing of
//! gdrpeer's under the reservation lock (`map`, `unmapped`) takes [`Context::inner`], the
//! table gate or NVIDIA's lock: only `Pinned::state` and `ExportState::state` (level 4).

use kernel::{
    bindings, new_condvar, new_spinlock, pci,
    prelude::*,
    sync::{aref::ARef, Arc, CondVar, SpinLock},
};

use crate::{
    cache::{Context, DmaUse, Region},
    dma_buf::{self, Attach, Exported, Exporter, Segment},
    notify::{as_invalidate, might_wait_for_invalidate, Notifier},
    nv_p2p::{self, PinKind},
    range::GpuRange,
    sys,
};

/// The longest segment of an importer's table (a scatterlist length has 32 bits).
const MAX_SEGMENT: u64 = 1 << 31;

/// What the free callback and the dma-buf's operations share.
#[pin_data]
struct ExportState {
    #[pin]
    state: SpinLock<State>,
    /// Signalled when an importer's mapping is given back.
    #[pin]
    unmapped: CondVar,
}

struct State {
    /// NVIDIA freed the memory: no attach or map succeeds any more.
    revoked: bool,
    /// Importers' mappings not given back yet.
    mapped: u64,
    /// The dma-buf, once exported; it lives until its `release` has removed [`Revoke`].
    dmabuf: *mut bindings::dma_buf,
}

// SAFETY: `dmabuf` is only dereferenced by `Revoke::notify`, from any thread, while the
// dma-buf lives (see `State::dmabuf`); the rest is plain data.
unsafe impl Send for State {}

/// The region's notifier of an export: revokes the dma-buf in NVIDIA's free callback.
struct Revoke(Arc<ExportState>);

impl Notifier for Revoke {
    fn notify(&self) {
        as_invalidate("dma-buf importers", || {
            let dmabuf = {
                let mut s = self.0.state.lock();
                s.revoked = true;
                s.dmabuf
            };
            if !dmabuf.is_null() {
                // SAFETY: the dma-buf lives until its release has removed this notifier,
                // which waits for this call (`Region::remove_notifier`); the free callback
                // holds no reservation lock.
                unsafe { dma_buf::revoke(dmabuf) };
            }
            // Importers with an invalidate op unmap within a bounded time (the core's rule);
            // they may do so from another thread, under the reservation lock, which is free.
            let mut s = self.0.state.lock();
            while s.mapped > 0 {
                self.0.unmapped.wait(&mut s);
            }
        });
    }
}

/// The exporter of one dma-buf: a window of a region, which it keeps in use.
pub(crate) struct Export {
    ctx: Arc<Context>,
    region: Arc<Region>,
    window: GpuRange,
    shared: Arc<ExportState>,
    /// Its [`Revoke`] on the region, once registered.
    notifier: Option<u64>,
}

/// What EXPORT_DMABUF and the kernel API report about a new dma-buf.
pub(crate) struct Made {
    pub(crate) dmabuf: Exported,
    pub(crate) window: GpuRange,
}

/// What to export.
#[derive(Clone, Copy)]
pub(crate) enum Window {
    /// A handle's window. The handle may go afterwards: the dma-buf holds the region itself.
    /// With `persistent`, the handle must be pinned persistently (-EINVAL otherwise).
    Handle { handle: u64, persistent: bool },
    /// A range pinned from the cache for the dma-buf alone (no handle, no event).
    Range(GpuRange),
    /// A range pinned persistently for the dma-buf alone, never cached: the dma-buf's release
    /// gives it back (`put_pages_persistent`), from whichever process or thread it runs in.
    Persistent(GpuRange),
}

impl Export {
    /// Exports a window of `ctx` as a dma-buf.
    pub(crate) fn create(ctx: &Arc<Context>, what: Window) -> Result<Made> {
        let (region, window) = match what {
            Window::Handle { handle, persistent } => ctx.keep_handle(handle, persistent)?,
            Window::Range(range) => ctx.keep_range(range, PinKind::Callback)?,
            Window::Persistent(range) => {
                if !nv_p2p::PERSISTENT_SUPPORTED {
                    return Err(sys::eopnotsupp());
                }
                ctx.keep_range(range, PinKind::Persistent)?
            }
        };
        let shared = Arc::pin_init(
            pin_init!(ExportState {
                state <- new_spinlock!(
                    State {
                        revoked: false,
                        mapped: 0,
                        dmabuf: core::ptr::null_mut(),
                    },
                    "ExportState::state"
                ),
                unmapped <- new_condvar!("ExportState::unmapped"),
            }),
            GFP_KERNEL,
        );
        let shared = match shared {
            Ok(shared) => shared,
            Err(e) => {
                ctx.unkeep(&region);
                return Err(e);
            }
        };
        // From here on, dropping `export` undoes what was done.
        let mut export = Export {
            ctx: ctx.clone(),
            region,
            window,
            shared,
            notifier: None,
        };
        let revoke = KBox::new(Revoke(export.shared.clone()), GFP_KERNEL)?;
        // -ENXIO if NVIDIA freed the memory meanwhile.
        export.notifier = Some(export.region.add_notifier(revoke)?);
        let size = usize::try_from(window.len()).map_err(|_| EINVAL)?;
        let shared = export.shared.clone();
        let module = ctx.env().module;
        let dmabuf = dma_buf::export(KBox::new(export, GFP_KERNEL)?, size, module)?;
        shared.state.lock().dmabuf = dmabuf.as_ptr();
        Ok(Made { dmabuf, window })
    }
}

impl Drop for Export {
    fn drop(&mut self) {
        if let Some(id) = self.notifier {
            // Waits for a revocation in progress; none comes afterwards.
            self.region.remove_notifier(id);
        }
        self.ctx.unkeep(&self.region);
    }
}

impl Exporter for Export {
    /// The importer's PCI function's use of the region's DMA mapping.
    type Attachment = DmaUse;

    fn attach(&self, attach: &Attach<'_>) -> Result<DmaUse> {
        // The addresses are PCI BAR pages with no `struct page`, and nothing but a stop can
        // make an importer give them up, unless NVIDIA never revokes them: a persistent pin,
        // which this dma-buf holds for as long as any importer can reach it.
        let persistent = self.region.pinned().kind() == PinKind::Persistent;
        if !attach.peer2peer || !(attach.revocable || persistent) {
            return Err(sys::eopnotsupp());
        }
        // nv-p2p maps for PCI functions only.
        let peer: &pci::Device = attach.dev.try_into().map_err(|_| sys::eopnotsupp())?;
        let peer = ARef::from(peer);
        if self.shared.state.lock().revoked {
            return Err(ENXIO);
        }
        might_wait_for_invalidate();
        // Once per region and device; unmapped with the region, after any revocation's
        // stop (or at detach, without `dma_map_keep`).
        self.region.dma_use(&peer)
    }

    fn map(&self, dma: &DmaUse) -> Result<KVVec<Segment>> {
        if self.shared.state.lock().revoked {
            return Err(ENXIO);
        }
        let addrs = self.region.window_dma_addresses(&self.window, dma.peer())?;
        segments(&addrs)
    }

    fn mapped(&self, _dma: &DmaUse) {
        // Revoked since `map`'s check: the revocation's invalidation, which waits for the
        // reservation lock held around both, will reach this mapping; it is counted like any
        // other.
        self.shared.state.lock().mapped += 1;
    }

    fn unmapped(&self, _dma: &DmaUse) {
        self.shared.state.lock().mapped -= 1;
        self.shared.unmapped.notify_all();
    }
}

/// The DMA segments of a window's 64 KiB pages: runs of contiguous pages, each at most
/// [`MAX_SEGMENT`] long.
fn segments(addrs: &[u64]) -> Result<KVVec<Segment>> {
    let page = crate::range::GPU_PAGE_SIZE;
    let mut out = KVVec::new();
    let mut run: Option<(u64, u64)> = None;
    for &a in addrs {
        run = match run {
            Some((start, len)) if start + len == a && len + page <= MAX_SEGMENT => {
                Some((start, len + page))
            }
            Some((start, len)) => {
                out.push(segment(start, len), GFP_KERNEL)?;
                Some((a, page))
            }
            None => Some((a, page)),
        };
    }
    if let Some((start, len)) = run {
        out.push(segment(start, len), GFP_KERNEL)?;
    }
    Ok(out)
}

fn segment(addr: u64, len: u64) -> Segment {
    Segment {
        addr,
        // At most MAX_SEGMENT.
        len: len as u32,
    }
}

#[kernel::prelude::kunit_tests(gdrpeer_export)]
mod tests {
    use super::*;

    const P: u64 = crate::range::GPU_PAGE_SIZE;

    fn segs(addrs: &[u64]) -> KVVec<(u64, u32)> {
        let mut v = KVVec::new();
        for s in segments(addrs).unwrap().iter() {
            v.push((s.addr, s.len), GFP_KERNEL).unwrap();
        }
        v
    }

    #[test]
    fn contiguous_pages_make_one_segment() {
        assert_eq!(
            &segs(&[0x1000_0000u64, 0x1000_0000 + P, 0x1000_0000 + 2 * P])[..],
            &[(0x1000_0000u64, (3 * P) as u32)]
        );
    }

    #[test]
    fn a_gap_starts_a_segment() {
        assert_eq!(
            &segs(&[0x1000_0000u64, 0x2000_0000, 0x2000_0000 + P])[..],
            &[(0x1000_0000u64, P as u32), (0x2000_0000, (2 * P) as u32)]
        );
    }

    #[test]
    fn segments_stop_at_the_limit() {
        let n = (MAX_SEGMENT / P) as usize + 1;
        let mut addrs = KVVec::new();
        for i in 0..n {
            addrs
                .push(0x1_0000_0000 + i as u64 * P, GFP_KERNEL)
                .unwrap();
        }
        assert_eq!(
            &segs(&addrs)[..],
            &[
                (0x1_0000_0000u64, MAX_SEGMENT as u32),
                (0x1_0000_0000 + MAX_SEGMENT, P as u32)
            ]
        );
    }
}
