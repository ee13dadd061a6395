// SPDX-License-Identifier: GPL-2.0

//! gdrpeer: GPUDirect RDMA peer memory for PCIe devices.
//!
//! gdrpeer pins NVIDIA GPU memory through the driver's nv-p2p interface and
//! gives its bus and DMA addresses to peers: user space through `/dev/gdrpeer`
//! and RDMA NIC drivers through an exported kernel API.
//!
//! A user-space program checks the module's ABI version like this:
//!
//! ```c
//! #include <fcntl.h>
//! #include <stdio.h>
//! #include <sys/ioctl.h>
//! #include <linux/gdrpeer.h>
//!
//! int main(void)
//! {
//!     struct gdrpeer_version v = { .size = sizeof(v) };
//!     int fd = open("/dev/gdrpeer", O_RDWR | O_CLOEXEC);
//!
//!     if (fd < 0 || ioctl(fd, GDRPEER_IOCTL_GET_VERSION, &v) < 0) {
//!         perror("gdrpeer");
//!         return 1;
//!     }
//!     printf("ABI %u.%u\n", v.abi_version >> 16, v.abi_version & 0xffff);
//!     return 0;
//! }
//! ```
//!
//! # Layers
//!
//! Each file uses only the files listed before it (Documentation/dev/design.rst, "Source map",
//! checked by tests/layers/check_deps.py):
//!
//! 1. The macros of the modules over bindgen's output ([`bindgen`]), kernel services the
//!    `kernel` crate lacks ([`sys`], PFN mappings for user space in [`vma`], dma-buf export
//!    in [`dma_buf`], misc devices with `poll` and an owner in [`miscdev`]), GPU page
//!    geometry ([`range`]) and the nv-p2p wrapper ([`nv_p2p`], with the table gate [`gate`] and
//!    the DMA mappings of pinned pages, [`iova`]).
//! 2. The pin engine: decisions ([`policy`]), module parameters ([`params`]), counters
//!    ([`stats`]), the module environment ([`env`]), notifiers of frees ([`notify`]),
//!    invalidation events ([`events`]) and the cache ([`cache`]).
//! 3. What the front-ends share: `/dev/gdrpeer`'s uAPI ([`uapi`]), what the file front-ends
//!    share ([`files`]: CPU mappings, event reads) and dma-buf export of windows ([`export`],
//!    for `/dev/gdrpeer` and the kernel API).
//! 4. The front-ends, which know the layers above and not one another: `/dev/gdrpeer`
//!    ([`chardev`]), `/dev/gdrdrv` ([`gdrdrv`]) and the kernel API ([`kapi`]).
//!
//! # Lock order
//!
//! Locks are taken in this order (Documentation/dev/design.rst explains why):
//!
//! 1. `Context::inner` (mutex, [`cache`]): the cache of one context. Held across nv-p2p calls.
//! 2. The table gate's admission ([`gate`]): held across the get_pages, put_pages or
//!    dma_map_pages it admits and nothing else; the free callback never waits for it.
//! 3. NVIDIA's global lock, taken inside every `nvidia_p2p_*` call; the free callback runs
//!    under it, and so do the notifiers it calls (a peer driver's invalidate callback takes
//!    that driver's own locks there).
//! 4. `Pinned::state` (spinlock, [`nv_p2p`]): one pin's phase and readers;
//!    `Region::notifiers` (spinlock, [`cache`]): a region's notifiers; `Mappings::state`
//!    (spinlock, [`files`]): a handle's mappings and their faults; `Events::queue` (spinlock,
//!    [`events`]): a context's events; `ExportState::state` (spinlock, [`export`]): a
//!    dma-buf's revocation and its importers' mappings; `Context::revoked` (spinlock,
//!    [`cache`]): the regions NVIDIA revoked that the context has not reaped yet. Never held
//!    together, never held across a call out of
//!    gdrpeer, never held while sleeping (the waits for a notifier in progress and for faults
//!    release theirs).
//! 5. `Iovas::state` (mutex, [`iova`]): the DMA mappings of pinned pages, shared by page and
//!    peer. Taken under 1, 2 or 3 (the free callback gives a revoked pin's mappings back under
//!    it), never with a lock of level 4; nothing of gdrpeer's is taken under it.
//!
//! Outside the order, each taken under none of the above: `Events::reader` (mutex), held by
//! one reader while it copies events to user space, and `GdrdrvFile::extra` (mutex,
//! [`gdrdrv`]), a gdrdrv file's per-handle data, taken before or after lock 1, never with it.
//!
//! `PinEnv::mapped` (mutex, [`nv_p2p`]), the pins that hold DMA mappings, sits between 3
//! and 4: taken under 1 to 3 (a pin's first mapping, an unpin, the free callback, a last
//! use's end) and by a PCI device's unbind or removal (under the device's lock), which gives
//! back every pin's mapping for the device; every DMA mapping of a pin is made and given
//! back under it. Only locks 4 and 5 are taken under it, and the PCI bus's list of devices
//! (a new mapping's check that its peer is still there), and never with a dma-buf's
//! reservation lock.
//!
//! The free callback takes only locks of levels 4 and 5, and `PinEnv::mapped`: it settles
//! the region's global counters with atomics and lists the region on its context
//! (`Context::revoked`); taking it out of the tree, the LRU and the context's accounting is
//! left to the context's next operation under lock 1, or, once the context is closed, to the
//! context's work item, which takes lock 1 outside NVIDIA's lock. Nothing in gdrpeer waits for
//! that work while holding lock 1.
//!
//! CPU mappings ([`files`] over [`vma`]) bring the kernel's mm locks in: a process's
//! `mmap_lock` comes before lock 1 (mmap looks the handle up under it); the file's
//! `i_mmap_rwsem` and the page-table locks come after lock 3 (the free callback's notifiers
//! zap the mappings with `unmap_mapping_pages`, after the pin's readers, faults included,
//! left and before the table is freed) and after lock 1 (UNPIN of a mapped handle zaps its
//! mappings under it, once its faults left). A fault takes only lock 4 and the page-table lock,
//! never `i_mmap_rwsem` nor lock 1; a vma's `close` takes no lock of the engine's and calls
//! no nv-p2p function; the callback never takes `mmap_lock`.
//!
//! dma-buf export ([`export`] over [`dma_buf`]) brings each dma-buf's reservation lock in,
//! between 3 and 4: the free callback's notifiers take it to invalidate the importers (and
//! release it before they wait for the importers' unmaps); `map_dma_buf` and `unmap_dma_buf`
//! run under it and take only locks of level 4. `attach`, which calls nv-p2p, runs without it,
//! as does a dma-buf's `release` (which takes lock 1).

// The layers, each using only those above it (Documentation/dev/design.rst, "Source map"):
// kernel services and the nv-p2p wrapper; the pin engine; what the front-ends share; the
// front-ends. `bindgen` comes first: its macros serve the modules declared after it.
#[macro_use]
mod bindgen;
mod cache;
mod chardev;
mod dma_buf;
mod env;
mod events;
mod export;
mod files;
mod gate;
mod gdrdrv;
mod iova;
mod kapi;
mod miscdev;
mod notify;
mod nv_p2p;
mod params;
mod policy;
mod range;
mod stats;
mod sys;
mod uapi;
mod vma;

use kernel::{debugfs, prelude::*};

module! {
    type: GdrpeerModule,
    name: "gdrpeer",
    authors: ["The gdrpeer developers"],
    description: "GPUDirect RDMA peer memory for PCIe devices",
    license: "GPL",
    params: {
        max_pin_bytes: u64 {
            default: 1 << 38,
            description: "Largest pin request in bytes (longer ones fail with EINVAL)",
        },
        cache_max_bytes: u64 {
            default: 0,
            description: "Pinned bytes per context above which unused regions are unpinned (0: no limit)",
        },
        cache_max_regions: u64 {
            default: 1024,
            description: "Pinned regions per context above which unused regions are unpinned (0: no limit)",
        },
        global_max_bytes: u64 {
            default: 0,
            description: "Pinned bytes over all contexts above which unused regions are unpinned (0: no limit)",
        },
        invalidate_warn_ms: u64 {
            default: 100,
            description: "A peer driver's invalidate callback slower than this is reported in the kernel log",
        },
        gdrdrv: u32 {
            default: 1,
            description: "Register /dev/gdrdrv, a gdrdrv-compatible device, when no /dev/gdrdrv exists (0: never)",
        },
        dma_map_keep: u32 {
            default: 1,
            description: "Keep a cached region's DMA mapping for a peer after its last registration or dma-buf attachment goes, until the region is unpinned (0: unmap it then)",
        },
    },
}

/// The module's data. Fields drop in order: the devices go first (no new files), the
/// callback workqueue last (drained, so no work of ours runs after unload).
#[pin_data]
struct GdrpeerModule {
    _gdrdrv: Option<Pin<KBox<gdrdrv::Gdrdrv>>>,
    #[pin]
    chardev: chardev::Chardev,
    #[pin]
    _global_stats: debugfs::File<()>,
    #[pin]
    _params: debugfs::File<()>,
    _debugfs: debugfs::Dir,
    #[pin]
    env: env::Env,
}

impl kernel::InPlaceModule for GdrpeerModule {
    fn init(module: &'static ThisModule) -> impl PinInit<Self, Error> {
        pr_info!(
            "gdrpeer ABI {}.{}, nv-p2p page table {:#010x}, DMA mapping {:#010x}\n",
            uapi::ABI_VERSION >> 16,
            uapi::ABI_VERSION & 0xffff,
            nv_p2p::PAGE_TABLE_VERSION,
            nv_p2p::DMA_MAPPING_VERSION,
        );
        let root = debugfs::Dir::new(c"gdrpeer");
        try_pin_init!(Self {
            env <- env::Env::new(module),
            _global_stats <- root.read_callback_file(c"stats", (), &|(): &(), f| {
                stats::GLOBAL.show(f)?;
                env::Env::get().map_or(Ok(()), |env| env.pins.iovas.stats().show(f))
            }),
            _params <- root.read_callback_file(c"params", (), &|(): &(), f| params::show(f)),
            chardev <- chardev::Chardev::new(&root, module),
            _gdrdrv: gdrdrv::Gdrdrv::register(module),
            _debugfs: root,
        })
    }
}
