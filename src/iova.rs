// SPDX-License-Identifier: GPL-2.0

//! DMA mappings of GPU BAR pages for peer devices, one per (peer, page) however many pins
//! name the page ([`Iovas`]).
//!
//! NVIDIA's `nvidia_p2p_dma_map_pages` makes a mapping per call, so every context that pins
//! and maps the same page for the same peer would add one: nine verbs contexts registering one
//! buffer make nine mappings of one BAR page, and DMA-API debugging warns at the eighth ("exceeded
//! 7 overlapping mappings of cacheline"), besides the IOVA space and IOTLB work each costs.
//! gdrpeer maps the pages itself, as NVIDIA's call does (`dma_map_resource` of each 64 KiB
//! page, bidirectional), and shares each mapping between the pins that name its page, counted:
//! the last pin that gives it back unmaps it.
//!
//! NVIDIA still decides whether a peer may reach a GPU (its PCIe topology check): the first
//! mapping of a GPU's memory for a peer asks its `dma_map_pages` and gives NVIDIA's mapping
//! back at once (`crate::nv_p2p`); [`Iovas`] remembers the answer for that GPU and peer. That
//! one call per pair is the only DMA-mapping call gdrpeer makes through a page table
//! (Documentation/dev/design.rst, "The DMA-mapping window").
//!
//! A mapping is of a physical address, not of an allocation: two pins that name one bus address
//! name the same BAR page, whatever memory it backs, so sharing by address is sound for as long
//! as a pin holds it, and a pin gives its mappings back before its pages go (unpin, eviction,
//! NVIDIA's free callback).

use kernel::{
    bindings,
    dma::DataDirection,
    fmt, new_mutex, pci,
    prelude::*,
    rbtree::{RBTree, RBTreeNodeReservation},
    sync::{aref::ARef, Mutex},
};

use crate::{
    range::GPU_PAGE_SIZE,
    sys::{self, helpers},
};

/// A GPU, by the UUID its page tables carry.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct GpuUuid(pub(crate) [u8; 16]);

impl fmt::Display for GpuUuid {
    /// As NVIDIA's tools print it: `GPU-`, then the bytes in hex, grouped 4-2-2-2-6.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("GPU-")?;
        for (i, b) in self.0.iter().enumerate() {
            if matches!(i, 4 | 6 | 8 | 10) {
                f.write_str("-")?;
            }
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

/// One page's mapping for one peer.
struct Entry {
    /// The DMA address `dma_map_resource` returned.
    dma: u64,
    /// The pins' mappings that hold it ([`Iovas::map`] calls not yet undone).
    users: u64,
}

/// The DMA mappings of BAR pages, by (peer, bus address).
///
/// # Invariants
///
/// Each entry is a live `dma_map_resource` mapping of the 64 KiB page at its bus address for
/// the peer whose `struct pci_dev` address is its key's first half, made by [`Iovas::map`] and
/// held by `users` pins' mappings, each of which holds a reference on that peer: the key's
/// address stays the peer's while the entry exists.
#[pin_data(PinnedDrop)]
pub(crate) struct Iovas {
    /// Lock 5 of the crate's lock order: taken under locks 1 to 3, never with a lock of level 4,
    /// and nothing of gdrpeer's is taken under it.
    #[pin]
    state: Mutex<IovaState>,
}

struct IovaState {
    pages: RBTree<(usize, u64), Entry>,
    /// The GPUs and peers NVIDIA said may be mapped for each other ([`Iovas::allow`]). A
    /// peer's reference is kept with them while the peer is in the system: a pair of a peer
    /// removed since (a hot unplug, a virtual function's end) goes when the next pair is
    /// added, so that a peer that comes and goes does not pile up references.
    allowed: KVec<(GpuUuid, ARef<pci::Device>)>,
    /// The GPUs and peers NVIDIA refused, reported in the kernel log ([`Iovas::refused`]),
    /// their references kept as `allowed`'s are. The refusal itself is not remembered: each
    /// mapping asks again.
    refused: KVec<(GpuUuid, ARef<pci::Device>)>,
    /// Mappings made since gdrpeer was loaded.
    made: u64,
}

/// Lets go of the pairs whose peer was removed from the system since they were added. A
/// removed device's reference may be its last: dropping it frees the device
/// (`pci_release_dev`), which takes no lock of gdrpeer's.
fn forget_removed(pairs: &mut KVec<(GpuUuid, ARef<pci::Device>)>) {
    pairs.retain(|(_, peer)| {
        // SAFETY: the pair's reference keeps the device's memory alive.
        unsafe { helpers::gdrpeer_device_is_registered(sys::pci_dev_device_ptr(peer)) }
    });
}

/// Whether `gpu` and `peer` are among `pairs`.
fn has_pair(pairs: &[(GpuUuid, ARef<pci::Device>)], gpu: GpuUuid, peer: &pci::Device) -> bool {
    pairs
        .iter()
        .any(|(g, p)| *g == gpu && core::ptr::eq::<pci::Device>(&**p, peer))
}

#[pinned_drop]
impl PinnedDrop for Iovas {
    fn drop(self: Pin<&mut Self>) {
        // Every pin gives its mappings back before it goes, and the module's data goes after
        // every pin: a mapping left here is a leak of IOVA space, reported.
        let left = self.stats();
        if left.pages != 0 {
            pr_err!(
                "{} DMA-mapped pages ({} holds) left at unload\n",
                left.pages,
                left.holds
            );
        }
    }
}

/// Counters of [`Iovas`], for debugfs `gdrpeer/stats` and the tests.
#[derive(Clone, Copy, Default)]
pub(crate) struct IovaStats {
    /// Live (peer, page) mappings.
    pages: u64,
    /// Pins' holds on them: a page mapped for one peer by three pins counts 1 and 3.
    holds: u64,
    /// GPUs and peers NVIDIA was asked about ([`Iovas::allow`]).
    pairs: usize,
    /// Mappings made since gdrpeer was loaded.
    made: u64,
}

impl IovaStats {
    /// Formats the counters, one per line.
    pub(crate) fn show(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "dma_pages_mapped {}", self.pages)?;
        writeln!(f, "dma_page_holds {}", self.holds)?;
        writeln!(f, "dma_gpu_peer_pairs {}", self.pairs)?;
        writeln!(f, "dma_page_maps_made {}", self.made)
    }
}

impl Iovas {
    /// No mappings.
    pub(crate) fn new() -> impl PinInit<Self> {
        pin_init!(Iovas {
            state <- new_mutex!(
                IovaState {
                    pages: RBTree::new(),
                    allowed: KVec::new(),
                    refused: KVec::new(),
                    made: 0,
                },
                "Iovas::state"
            ),
        })
    }

    /// Whether NVIDIA said `gpu`'s memory may be mapped for `peer` ([`Iovas::allow`]).
    pub(crate) fn allowed(&self, gpu: GpuUuid, peer: &pci::Device) -> bool {
        has_pair(&self.state.lock().allowed, gpu, peer)
    }

    /// Whether NVIDIA said some GPU's memory may be mapped for the peer whose `struct pci_dev`
    /// is at `peer`: whether anything can be mapped for it.
    pub(crate) fn is_peer(&self, peer: usize) -> bool {
        self.state
            .lock()
            .allowed
            .iter()
            .any(|(_, p)| sys::pci_dev_ptr(p) as usize == peer)
    }

    /// Remembers that NVIDIA mapped `gpu`'s memory for `peer`, and forgets the peers removed
    /// from the system.
    pub(crate) fn allow(&self, gpu: GpuUuid, peer: &ARef<pci::Device>) -> Result {
        let mut s = self.state.lock();
        if !has_pair(&s.allowed, gpu, peer) {
            forget_removed(&mut s.allowed);
            s.allowed.push((gpu, peer.clone()), GFP_KERNEL)?;
        }
        Ok(())
    }

    /// NVIDIA refused to map `gpu`'s memory for `peer` with -EOPNOTSUPP (its PCIe topology
    /// check, or a table it does not map for peers): says so in the kernel log, once for each
    /// GPU and peer, as the caller's error alone does not say which GPU or why.
    pub(crate) fn refused(&self, gpu: GpuUuid, peer: &ARef<pci::Device>) {
        {
            let mut s = self.state.lock();
            if has_pair(&s.refused, gpu, peer) {
                return;
            }
            forget_removed(&mut s.refused);
            // Without memory to remember it, the next refusal reports it.
            if s.refused.push((gpu, peer.clone()), GFP_KERNEL).is_err() {
                return;
            }
        }
        let dev: &kernel::device::Device = peer.as_ref();
        kernel::dev_warn!(
            dev,
            "NVIDIA does not map {gpu}'s memory for this device (-EOPNOTSUPP: the PCIe path between them, or the memory's pin); its registrations of that GPU's memory fail\n"
        );
    }

    /// Maps the 64 KiB BAR pages at `bus` for `peer`, sharing the mappings that exist, and
    /// appends their DMA addresses to `out`, whose capacity is reserved. Undo with
    /// [`Iovas::unmap`] of the same pages while the caller still holds `peer`.
    ///
    /// Fails with -ENOMEM, or -EIO where the DMA API cannot map a page for the peer (its DMA
    /// mask, an IOVA space that is full); nothing stays mapped then.
    pub(crate) fn map(&self, peer: &pci::Device, bus: &[u64], out: &mut KVVec<u64>) -> Result {
        let key = sys::pci_dev_ptr(peer) as usize;
        let mut s = self.state.lock();
        let IovaState { pages, made, .. } = &mut *s;
        for (i, &b) in bus.iter().enumerate() {
            let dma = match Self::map_one(pages, made, peer, key, b) {
                Ok(dma) => dma,
                Err(e) => {
                    Self::unmap_locked(pages, peer, key, &bus[..i]);
                    return Err(e);
                }
            };
            if let Err(e) = out.push(dma, GFP_KERNEL) {
                Self::unmap_locked(pages, peer, key, &bus[..=i]);
                return Err(e.into());
            }
        }
        Ok(())
    }

    /// One page: a hold on its mapping, made if there is none.
    fn map_one(
        pages: &mut RBTree<(usize, u64), Entry>,
        made: &mut u64,
        peer: &pci::Device,
        key: usize,
        bus: u64,
    ) -> Result<u64> {
        if let Some(e) = pages.get_mut(&(key, bus)) {
            e.users += 1;
            return Ok(e.dma);
        }
        let node = RBTreeNodeReservation::new(GFP_KERNEL)?;
        let dev = sys::pci_dev_device_ptr(peer);
        // SAFETY: `dev` is the live peer's device (the caller holds it); the page is a BAR page
        // of a pin the caller holds, so its physical address stays valid while mapped (it is
        // unmapped before the pin gives the page back).
        let dma = unsafe {
            bindings::dma_map_resource(
                dev,
                bus,
                GPU_PAGE_SIZE as usize,
                DataDirection::Bidirectional.into(),
                0,
            )
        };
        // SAFETY: `dma` is what `dma_map_resource` just returned for `dev`.
        if unsafe { helpers::gdrpeer_dma_mapping_error(dev, dma) } != 0 {
            return Err(EIO);
        }
        *made += 1;
        // INVARIANT: a live mapping of the page for the peer `key` names, held by one pin.
        pages.insert(node.into_node((key, bus), Entry { dma, users: 1 }));
        Ok(dma)
    }

    /// Gives back the holds a [`Iovas::map`] of `bus` for `peer` took: each page whose last
    /// hold goes is unmapped. Never fails nor allocates (NVIDIA's free callback calls it).
    pub(crate) fn unmap(&self, peer: &pci::Device, bus: &[u64]) {
        let key = sys::pci_dev_ptr(peer) as usize;
        Self::unmap_locked(&mut self.state.lock().pages, peer, key, bus);
    }

    fn unmap_locked(
        pages: &mut RBTree<(usize, u64), Entry>,
        peer: &pci::Device,
        key: usize,
        bus: &[u64],
    ) {
        for &b in bus {
            let Some(e) = pages.get_mut(&(key, b)) else {
                pr_err!("DMA mapping of {:#x} for a peer given back twice\n", b);
                continue;
            };
            e.users -= 1;
            if e.users > 0 {
                continue;
            }
            if let Some(e) = pages.remove(&(key, b)) {
                // SAFETY: the entry's mapping is live and was made for this peer's device (type
                // invariant), whose last hold this was; it is out of the tree, so unmapped once.
                unsafe {
                    bindings::dma_unmap_resource(
                        sys::pci_dev_device_ptr(peer),
                        e.dma,
                        GPU_PAGE_SIZE as usize,
                        DataDirection::Bidirectional.into(),
                        0,
                    )
                };
            }
        }
    }

    /// The live mappings and holds.
    pub(crate) fn stats(&self) -> IovaStats {
        let state = self.state.lock();
        let mut s = IovaStats {
            pairs: state.allowed.len(),
            made: state.made,
            ..IovaStats::default()
        };
        for (_, e) in state.pages.iter() {
            s.pages += 1;
            s.holds += e.users;
        }
        s
    }
}
