// SPDX-License-Identifier: GPL-2.0

//! User-space access to gdrpeer: GPUDirect RDMA pinning of NVIDIA GPU memory.
//!
//! ```no_run
//! let dev = gdrpeer::Device::open_default()?;
//! println!("gdrpeer ABI {}", dev.version().abi_string());
//! # let (va, len) = (0, 0);
//! let pin = dev.pin_guard(va, len, gdrpeer::PinFlags::empty())?;
//! for addr in dev.get_pages(pin.handle)? {
//!     println!("{addr:#x}");
//! }
//! // The window as a dma-buf, for ibv_reg_dmabuf_mr(pd, buf.offset, len, va, fd, access).
//! let buf = dev.export_dmabuf(pin.handle)?;
//! println!("dma-buf fd {:?}, {} bytes, va at offset {}", buf.fd, buf.size, buf.offset);
//! # Ok::<(), gdrpeer::Error>(())
//! ```
//!
//! Every call returns [`Error`], whose message names the errno and its likely cause for that
//! call; [`Error::errno`] gives the raw errno. The `cuda` feature (default) adds the `cuda` module,
//! which loads `libcuda.so.1` at run time. `examples/` has runnable programs: allocate, pin,
//! map and export (`pin_map_dmabuf`), the registration cache (`regcache`), revocation events
//! (`events`). C programs use the same calls through libgdrpeer (`gdrpeer/libgdrpeer.h`).

#[cfg(feature = "cuda")]
pub mod cuda;
mod error;
pub mod events;
pub mod gdrdrv;
mod pci;
pub mod regcache;
pub mod uapi;

pub use error::Error;
pub use events::{Event, EventKind, EventSource};
pub use pci::{ParsePciAddressError, PciAddress};
pub use uapi::CacheStats;

use rustix::{
    fd::{AsFd, BorrowedFd, FromRawFd, OwnedFd},
    io::Errno,
    ioctl::{self, Opcode},
};
use std::{
    fmt,
    marker::PhantomData,
    mem::ManuallyDrop,
    ops::{BitOr, Deref},
    path::Path,
};

/// Path of the gdrpeer device node.
pub const DEFAULT_PATH: &str = "/dev/gdrpeer";

/// A CPU mapping of a window of pinned GPU memory ([`Device::map`]),
/// unmapped on drop: cached where NVIDIA marks the memory CPU-cacheable,
/// write-combining otherwise.
///
/// The memory is device memory shared with the GPU and other mappings, so it
/// is accessed through raw pointers ([`Mapping::as_ptr`]) or the volatile
/// copies [`Mapping::read`] and [`Mapping::write`], never as a Rust slice.
///
/// The kernel leaves a mapping out of a forked child (uapi.rst): in a child, a `Mapping`
/// inherited from its parent names no memory, so its drop and [`Mapping::unmap`] unmap
/// nothing there (the range may hold the child's own memory by then), and it must not be
/// accessed.
#[derive(Debug)]
pub struct Mapping {
    ptr: *mut u8,
    len: usize,
    /// The process whose mapping it is.
    owner: rustix::process::Pid,
}

impl Mapping {
    /// A new shared read-write mapping of `len` bytes of `fd` at file offset `offset`;
    /// errors are `op`'s.
    fn new(fd: BorrowedFd<'_>, offset: u64, len: usize, op: Op) -> Result<Self, Error> {
        use rustix::mm::{mmap, MapFlags, ProtFlags};
        // SAFETY: a new mapping at an address of the kernel's choice replaces
        // nothing; the Mapping owns it and unmaps it once.
        let ptr = unsafe {
            mmap(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED,
                fd,
                offset,
            )
        }
        .map_err(|errno| Error::ioctl(op, errno))?;
        Ok(Mapping {
            ptr: ptr.cast(),
            len,
            owner: rustix::process::getpid(),
        })
    }

    /// Gives up the mapping without unmapping it: its first byte and length, for code that
    /// unmaps it itself (munmap(2), or [`Mapping::from_raw`]).
    pub fn into_raw(self) -> (*mut u8, usize) {
        let m = ManuallyDrop::new(self);
        (m.ptr, m.len)
    }

    /// Takes back a mapping [`Mapping::into_raw`] gave up, to unmap it on drop.
    ///
    /// # Safety
    ///
    /// `ptr` and `len` must be what one `into_raw` returned, in this process, and nothing
    /// else may unmap or take back that mapping.
    pub unsafe fn from_raw(ptr: *mut u8, len: usize) -> Self {
        Mapping {
            ptr,
            len,
            owner: rustix::process::getpid(),
        }
    }

    /// Unmaps the mapping now, with munmap(2)'s error if it fails (a drop ignores it). In a
    /// forked child, where the mapping is not, it unmaps nothing.
    pub fn unmap(self) -> Result<(), Error> {
        // Never dropped: unmapped here alone.
        ManuallyDrop::new(self)
            .munmap()
            .map_err(|errno| Error::ioctl(Op::Munmap, errno))
    }

    /// munmap(2) of the mapping, in the process it belongs to (in a forked child, nothing).
    /// Called once, by `unmap` or the drop.
    fn munmap(&self) -> rustix::io::Result<()> {
        if rustix::process::getpid() != self.owner {
            // A forked child's copy: the mapping is the parent's alone.
            return Ok(());
        }
        // SAFETY: the mapping is this process's (Device::map, or from_raw's contract), and
        // its one unmap is this (the caller's contract).
        unsafe { rustix::mm::munmap(self.ptr.cast(), self.len) }
    }

    /// The first byte of the mapping.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it is empty (never: mmap refuses empty mappings).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Panics where the mapping is not this process's: a forked child's copy names no
    /// mapping (the kernel leaves it out of the child), and the range may hold the child's
    /// own memory.
    fn assert_owner(&self) {
        assert!(
            rustix::process::getpid() == self.owner,
            "a gdrpeer mapping accessed in a forked child, where it is not mapped"
        );
    }

    /// Copies `out.len()` bytes from byte `at` of the mapping, one volatile
    /// read each. Panics past the end, and in a forked child.
    pub fn read(&self, at: usize, out: &mut [u8]) {
        self.assert_owner();
        assert!(at.checked_add(out.len()).is_some_and(|end| end <= self.len));
        for (i, b) in out.iter_mut().enumerate() {
            // SAFETY: in bounds (checked above) of a live mapping of this process's
            // (checked above too).
            *b = unsafe { self.ptr.add(at + i).read_volatile() };
        }
    }

    /// Copies `data` to byte `at` of the mapping, one volatile write each,
    /// then drains the CPU's write-combining buffers (a full fence), so that
    /// other observers see the bytes. Panics past the end, and in a forked child.
    pub fn write(&self, at: usize, data: &[u8]) {
        self.assert_owner();
        assert!(at
            .checked_add(data.len())
            .is_some_and(|end| end <= self.len));
        for (i, b) in data.iter().enumerate() {
            // SAFETY: in bounds (checked above) of a live, writable mapping of this
            // process's (checked above too).
            unsafe { self.ptr.add(at + i).write_volatile(*b) };
        }
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        let _ = self.munmap();
    }
}

// SAFETY: the mapping is plain shared memory, usable from any thread; the
// Mapping only unmaps it on drop.
unsafe impl Send for Mapping {}
// SAFETY: all access goes through raw pointers and volatile copies, which
// make no aliasing promises. Two threads copying the same bytes at once race
// as on any shared memory a device also writes: the bytes are plain device
// memory, not Rust values.
unsafe impl Sync for Mapping {}

/// The gdrpeer ioctls, as [`Error::Ioctl`] names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// `GDRPEER_IOCTL_GET_VERSION`.
    GetVersion,
    /// `GDRPEER_IOCTL_PIN`.
    Pin,
    /// `GDRPEER_IOCTL_UNPIN`.
    Unpin,
    /// `GDRPEER_IOCTL_GET_INFO`.
    GetInfo,
    /// `GDRPEER_IOCTL_GET_PAGES`.
    GetPages,
    /// `GDRPEER_IOCTL_DMA_MAP`.
    DmaMap,
    /// `GDRPEER_IOCTL_STATS`.
    Stats,
    /// `GDRPEER_IOCTL_EXPORT_DMABUF` (ABI 1.4).
    ExportDmabuf,
    /// mmap(2) of a handle's window (`GDRPEER_MMAP_OFFSET`).
    Mmap,
    /// read(2) or poll(2) of a file's invalidation events (ABI 1.3).
    ReadEvents,
    /// `GDRDRV_IOC_PIN_BUFFER` (`/dev/gdrdrv`).
    GdrdrvPinBuffer,
    /// `GDRDRV_IOC_PIN_BUFFER_V2`.
    GdrdrvPinBufferV2,
    /// `GDRDRV_IOC_UNPIN_BUFFER`.
    GdrdrvUnpinBuffer,
    /// `GDRDRV_IOC_GET_CB_FLAG`.
    GdrdrvGetCbFlag,
    /// `GDRDRV_IOC_GET_INFO`.
    GdrdrvGetInfo,
    /// `GDRDRV_IOC_GET_INFO_V2`.
    GdrdrvGetInfoV2,
    /// `GDRDRV_IOC_GET_ATTR`.
    GdrdrvGetAttr,
    /// `GDRDRV_IOC_REQ_MAPPING_TYPE`.
    GdrdrvReqMappingType,
    /// `GDRDRV_IOC_GET_VERSION`.
    GdrdrvGetVersion,
    /// mmap(2) of a gdrdrv handle (offset `handle << 12`).
    GdrdrvMmap,
    /// munmap(2) of a mapping ([`Mapping::unmap`]).
    Munmap,
}

/// The ioctl's name without `GDRPEER_IOCTL_` (gdrdrv's with `GDRDRV_IOC_`).
impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Op::GetVersion => "GET_VERSION",
            Op::Pin => "PIN",
            Op::Unpin => "UNPIN",
            Op::GetInfo => "GET_INFO",
            Op::GetPages => "GET_PAGES",
            Op::DmaMap => "DMA_MAP",
            Op::Stats => "STATS",
            Op::ExportDmabuf => "EXPORT_DMABUF",
            Op::Mmap => "mmap",
            Op::ReadEvents => "read of events",
            Op::GdrdrvPinBuffer => "GDRDRV_IOC_PIN_BUFFER",
            Op::GdrdrvPinBufferV2 => "GDRDRV_IOC_PIN_BUFFER_V2",
            Op::GdrdrvUnpinBuffer => "GDRDRV_IOC_UNPIN_BUFFER",
            Op::GdrdrvGetCbFlag => "GDRDRV_IOC_GET_CB_FLAG",
            Op::GdrdrvGetInfo => "GDRDRV_IOC_GET_INFO",
            Op::GdrdrvGetInfoV2 => "GDRDRV_IOC_GET_INFO_V2",
            Op::GdrdrvGetAttr => "GDRDRV_IOC_GET_ATTR",
            Op::GdrdrvReqMappingType => "GDRDRV_IOC_REQ_MAPPING_TYPE",
            Op::GdrdrvGetVersion => "GDRDRV_IOC_GET_VERSION",
            Op::GdrdrvMmap => "mmap of /dev/gdrdrv",
            Op::Munmap => "munmap",
        })
    }
}

/// The versions reported by the module.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModuleVersion {
    /// ABI version word (major << 16 | minor).
    pub abi: u32,
    /// nv-p2p page-table version the module was built for.
    pub nv_page_table: u32,
    /// nv-p2p DMA-mapping version the module was built for.
    pub nv_dma_mapping: u32,
}

impl ModuleVersion {
    /// "major.minor" of the ABI.
    pub fn abi_string(&self) -> String {
        format!("{}.{}", self.abi >> 16, self.abi & 0xffff)
    }
}

/// Flags of [`Device::pin`].
///
/// ```
/// use gdrpeer::PinFlags;
/// let f = PinFlags::PERSISTENT | PinFlags::NOCACHE;
/// assert!(f.contains(PinFlags::NOCACHE));
/// assert_eq!(PinFlags::empty().bits(), 0);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct PinFlags(u32);

impl PinFlags {
    /// No free callback: the driver never revokes the pin (needs driver support).
    pub const PERSISTENT: Self = PinFlags(uapi::PIN_PERSISTENT);
    /// Bypass the cache: a pin of its own, given back at unpin (module ABI 1.1).
    pub const NOCACHE: Self = PinFlags(uapi::PIN_NOCACHE);

    /// No flags: an ordinary pin, which the driver revokes when the memory is freed.
    pub const fn empty() -> Self {
        PinFlags(0)
    }

    /// The `GDRPEER_PIN_*` bits.
    pub fn bits(self) -> u32 {
        self.0
    }

    /// Whether every flag of `other` is set.
    pub fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }
}

impl BitOr for PinFlags {
    type Output = Self;

    fn bitor(self, other: Self) -> Self {
        PinFlags(self.0 | other.0)
    }
}

/// A pinned window of GPU memory, as [`Device::pin`] reports it.
///
/// The window is the request widened to whole GPU pages; the caller's
/// address is `aligned_va + offset`. It stays pinned until
/// [`Device::unpin`] or until the device is closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pin {
    /// Names the pin in later calls.
    pub handle: u64,
    /// The window's start: the requested address rounded down to `page_size`.
    pub aligned_va: u64,
    /// The requested address minus `aligned_va`.
    pub offset: u64,
    /// Pages in the window.
    pub page_count: u32,
    /// The GPU page size in bytes.
    pub page_size: u32,
}

/// A [`Pin`] that unpins itself when dropped, ignoring errors.
///
/// ```no_run
/// # let (va, len) = (0u64, 65536u64);
/// let dev = gdrpeer::Device::open_default()?;
/// let pin = dev.pin_guard(va, len, gdrpeer::PinFlags::empty())?;
/// println!("handle {}: {} pages from {:#x}", pin.handle, pin.page_count, pin.aligned_va);
/// pin.unpin()?; // or let it drop
/// # Ok::<(), gdrpeer::Error>(())
/// ```
#[derive(Debug)]
pub struct PinGuard<'a> {
    dev: &'a Device,
    pin: Pin,
}

impl PinGuard<'_> {
    /// Unpins now, reporting the error that dropping would ignore.
    pub fn unpin(self) -> Result<(), Error> {
        let guard = ManuallyDrop::new(self);
        guard.dev.unpin(guard.pin.handle)
    }

    /// Keeps the window pinned past the guard; the caller unpins it.
    pub fn into_pin(self) -> Pin {
        ManuallyDrop::new(self).pin
    }
}

impl Deref for PinGuard<'_> {
    type Target = Pin;

    fn deref(&self) -> &Pin {
        &self.pin
    }
}

impl Drop for PinGuard<'_> {
    fn drop(&mut self) {
        let _ = self.dev.unpin(self.pin.handle);
    }
}

/// Whether a handle's memory is still pinned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PinState {
    /// Pinned; the addresses are usable.
    Valid,
    /// The driver freed the memory; the handle stays until it is unpinned.
    Revoked,
    /// A state this library does not know (from a newer module).
    Unknown(u32),
}

impl PinState {
    /// The state as the uAPI encodes it (`GET_INFO`'s `state`).
    pub fn from_raw(state: u32) -> Self {
        match state {
            uapi::STATE_VALID => PinState::Valid,
            uapi::STATE_REVOKED => PinState::Revoked,
            other => PinState::Unknown(other),
        }
    }

    /// The uAPI's encoding of the state: the inverse of [`PinState::from_raw`].
    pub fn raw(self) -> u32 {
        match self {
            PinState::Valid => uapi::STATE_VALID,
            PinState::Revoked => uapi::STATE_REVOKED,
            PinState::Unknown(s) => s,
        }
    }
}

/// What [`Device::info`] reports about a handle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HandleInfo {
    /// Whether the memory is still pinned.
    pub state: PinState,
    /// The window's start, as [`Device::pin`] reported it.
    pub aligned_va: u64,
    /// The caller's offset into the window.
    pub offset: u64,
    /// Pages in the window.
    pub page_count: u32,
    /// The GPU page size in bytes.
    pub page_size: u32,
    /// Start of the cached region that serves the window.
    pub region_va: u64,
    /// Length of that region in bytes.
    pub region_len: u64,
    /// Whether the region was pinned with [`PinFlags::PERSISTENT`].
    pub persistent: bool,
}

/// A dma-buf of pinned GPU memory ([`Device::export_dmabuf`], [`Device::export_dmabuf_range`]):
/// the window's whole GPU pages, `size` bytes from GPU address `aligned_va`.
///
/// The dma-buf keeps its memory pinned for as long as it lives (this descriptor, its
/// duplicates in any process, and every importer's attachment), whatever happens to the
/// handle or to the [`Device`] it came from. Importers must take peer-to-peer memory and
/// handle invalidation: when the driver frees the memory, they are told to stop, and later
/// mappings fail with ENXIO. The CPU cannot map it (use [`Device::map`]).
///
/// ```no_run
/// use std::os::fd::AsRawFd;
/// # let (va, len) = (0u64, 65536u64);
/// let dev = gdrpeer::Device::open_default()?;
/// let buf = dev.export_dmabuf_range(va, len)?;
/// // ibv_reg_dmabuf_mr(pd, buf.offset, len, va, fd, access) takes it from here.
/// println!("fd {}: {} bytes", buf.fd.as_raw_fd(), buf.size);
/// # Ok::<(), gdrpeer::Error>(())
/// ```
#[derive(Debug)]
pub struct Dmabuf {
    /// The dma-buf, close-on-exec; it may be passed to other processes.
    pub fd: OwnedFd,
    /// The GPU address of the dma-buf's first byte.
    pub aligned_va: u64,
    /// The byte offset in the dma-buf of the address asked for (or of the handle's).
    pub offset: u64,
    /// GPU pages in the dma-buf.
    pub page_count: u32,
    /// The dma-buf's size in bytes: `page_count` GPU pages.
    pub size: u64,
}

impl AsFd for Dmabuf {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// What [`Device::stats`] reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stats {
    /// This file's live handles.
    pub handles: u64,
    /// This file's registration cache.
    pub file: CacheStats,
    /// All registration caches together; `deferred` counts those still waiting.
    pub global: CacheStats,
}

impl CacheStats {
    /// Every counter with its name, in the uAPI's order.
    pub fn counters(&self) -> [(&'static str, u64); 8] {
        [
            ("regions", self.regions),
            ("pinned_bytes", self.pinned_bytes),
            ("hits", self.hits),
            ("misses", self.misses),
            ("evictions_limit", self.evictions_limit),
            ("evictions_enomem", self.evictions_enomem),
            ("callbacks", self.callbacks),
            ("deferred", self.deferred),
        ]
    }
}

/// An open `/dev/gdrpeer`, checked to speak a compatible ABI.
///
/// Every call but [`Device::get_version`] must come from the process that
/// opened the device.
///
/// ```no_run
/// use gdrpeer::{Device, PinFlags, PinState};
/// # let (va, len) = (0u64, 65536u64);
/// let dev = Device::open_default()?;
/// println!("module ABI {}", dev.version().abi_string());
/// let pin = dev.pin(va, len, PinFlags::empty())?;
/// assert_eq!(dev.info(pin.handle)?.state, PinState::Valid);
/// let bus_addresses = dev.get_pages(pin.handle)?; // CAP_SYS_RAWIO
/// let nic: gdrpeer::PciAddress = "0000:3b:00.0".parse().unwrap();
/// let dma_addresses = dev.dma_map(pin.handle, nic)?; // as the NIC sees them
/// dev.unpin(pin.handle)?;
/// # Ok::<(), gdrpeer::Error>(())
/// ```
#[derive(Debug)]
pub struct Device {
    fd: OwnedFd,
    version: ModuleVersion,
}

impl Device {
    /// Opens [`DEFAULT_PATH`].
    pub fn open_default() -> Result<Self, Error> {
        Self::open(DEFAULT_PATH)
    }

    /// Opens the device at `path` and checks that the module's ABI is compatible.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, Error> {
        let fd = open_rdwr(path.as_ref())?;
        let version = query_version(&fd)?;
        if !abi_compatible(version.abi) {
            return Err(Error::AbiMismatch {
                module: version.abi,
            });
        }
        Ok(Device { fd, version })
    }

    /// The versions the module reported when it was opened.
    pub fn version(&self) -> ModuleVersion {
        self.version
    }

    /// Asks the module for its version again (the cheapest ioctl there is).
    pub fn get_version(&self) -> Result<ModuleVersion, Error> {
        query_version(&self.fd)
    }

    /// Pins `[va, va + len)` of GPU memory, widened to whole GPU pages.
    pub fn pin(&self, va: u64, len: u64, flags: PinFlags) -> Result<Pin, Error> {
        let mut p = uapi::Pin {
            flags: flags.bits(),
            va,
            len,
            ..uapi::Pin::new()
        };
        call(&self.fd, &mut p)?;
        Ok(Pin {
            handle: p.handle,
            aligned_va: p.aligned_va,
            offset: p.offset,
            page_count: p.page_count,
            page_size: p.page_size,
        })
    }

    /// [`Device::pin`], unpinned when the guard is dropped.
    pub fn pin_guard(&self, va: u64, len: u64, flags: PinFlags) -> Result<PinGuard<'_>, Error> {
        Ok(PinGuard {
            dev: self,
            pin: self.pin(va, len, flags)?,
        })
    }

    /// Releases `handle`; its region may stay cached for later pins.
    pub fn unpin(&self, handle: u64) -> Result<(), Error> {
        call(
            &self.fd,
            &mut uapi::Unpin {
                handle,
                ..uapi::Unpin::new()
            },
        )
    }

    /// Describes `handle`: its window, state and the region that serves it.
    pub fn info(&self, handle: u64) -> Result<HandleInfo, Error> {
        let mut i = uapi::Info {
            handle,
            ..uapi::Info::new()
        };
        call(&self.fd, &mut i)?;
        Ok(HandleInfo {
            state: PinState::from_raw(i.state),
            aligned_va: i.aligned_va,
            offset: i.offset,
            page_count: i.page_count,
            page_size: i.page_size,
            region_va: i.region_va,
            region_len: i.region_len,
            persistent: i.flags & uapi::PIN_PERSISTENT != 0,
        })
    }

    /// The bus (BAR1) addresses of `handle`'s pages. Needs `CAP_SYS_RAWIO`.
    pub fn get_pages(&self, handle: u64) -> Result<Vec<u64>, Error> {
        self.addresses(handle, uapi::GetPages::new())
    }

    /// The DMA addresses of `handle`'s pages as the PCI device `peer` sees
    /// them, mapping the region for it on first use. Needs `CAP_SYS_RAWIO`.
    pub fn dma_map(&self, handle: u64, peer: PciAddress) -> Result<Vec<u64>, Error> {
        self.addresses(
            handle,
            uapi::DmaMap {
                pci_domain: peer.domain,
                pci_bus: peer.bus,
                pci_devfn: peer.devfn,
                ..uapi::DmaMap::new()
            },
        )
    }

    /// Maps `len` bytes of `handle`'s window, from byte `offset` (a multiple
    /// of 4 KiB), for CPU access: shared, unmapped when the returned [`Mapping`]
    /// is dropped. Since ABI 1.3 the mapping is cached where NVIDIA's page table
    /// marks the memory CPU-cacheable (a 2.x table with
    /// `NVIDIA_P2P_PAGE_TABLE_FLAGS_CPU_CACHEABLE`: platforms where the CPU reaches
    /// GPU memory coherently), write-combining otherwise (a 1.x table is always
    /// write-combining). UNPIN of the handle withdraws it, as does the GPU memory
    /// being freed: access through it then raises SIGBUS.
    ///
    /// ```no_run
    /// # let (va, len) = (0u64, 65536usize);
    /// let dev = gdrpeer::Device::open_default()?;
    /// let pin = dev.pin_guard(va, len as u64, gdrpeer::PinFlags::empty())?;
    /// let map = dev.map(pin.handle, 0, len)?;
    /// map.write(pin.offset as usize, b"to the GPU");
    /// let mut back = [0u8; 10];
    /// map.read(pin.offset as usize, &mut back);
    /// # Ok::<(), gdrpeer::Error>(())
    /// ```
    pub fn map(&self, handle: u64, offset: u64, len: usize) -> Result<Mapping, Error> {
        if handle >> (64 - uapi::MMAP_HANDLE_SHIFT) != 0 {
            // GDRPEER_MMAP_OFFSET cannot encode it.
            return Err(Error::ioctl(Op::Mmap, Errno::OVERFLOW));
        }
        if offset > uapi::MMAP_OFFSET_MASK {
            // Past any window (as the kernel answers a range past the window); encoded, it
            // would wrap into the window's first bytes.
            return Err(Error::ioctl(Op::Mmap, Errno::INVAL));
        }
        Mapping::new(
            self.fd.as_fd(),
            uapi::mmap_offset(handle, offset),
            len,
            Op::Mmap,
        )
    }

    /// Exports `handle`'s window as a dma-buf (module ABI 1.4). The handle may be unpinned
    /// and the device closed afterwards: the dma-buf holds the memory itself.
    pub fn export_dmabuf(&self, handle: u64) -> Result<Dmabuf, Error> {
        self.export(uapi::ExportDmabuf {
            handle,
            ..uapi::ExportDmabuf::new()
        })
    }

    /// Exports `[va, va + len)` of GPU memory, widened to whole GPU pages and pinned as
    /// [`Device::pin`] pins (from the cache), as a dma-buf (module ABI 1.4). No handle is
    /// left behind: the dma-buf holds the memory itself.
    pub fn export_dmabuf_range(&self, va: u64, len: u64) -> Result<Dmabuf, Error> {
        self.export(uapi::ExportDmabuf {
            va,
            len,
            ..uapi::ExportDmabuf::new()
        })
    }

    /// Exports `[va, va + len)` as [`Device::export_dmabuf_range`] does, backed by a
    /// persistent pin of its own (module ABI 1.5): the driver never revokes it, the memory
    /// stays valid after cuMemFree until the dma-buf's last reference goes (which gives the
    /// pin back), and importers that cannot be invalidated (ib_umem_dmabuf_get_pinned's: efa,
    /// mana, bnxt_re, ionic, mlx5 DEVX) may attach. EOPNOTSUPP where the driver refuses
    /// persistent pins (MIG, vGPU).
    pub fn export_dmabuf_persistent(&self, va: u64, len: u64) -> Result<Dmabuf, Error> {
        self.export(uapi::ExportDmabuf {
            flags: uapi::EXPORT_PERSISTENT,
            va,
            len,
            ..uapi::ExportDmabuf::new()
        })
    }

    fn export(&self, mut e: uapi::ExportDmabuf) -> Result<Dmabuf, Error> {
        call(&self.fd, &mut e)?;
        // The module installs a new descriptor only on success, and reports it.
        if e.fd < 0 {
            return Err(Error::ioctl(Op::ExportDmabuf, Errno::BADF));
        }
        Ok(Dmabuf {
            // SAFETY: a descriptor the module has just installed for this process and told
            // only us about.
            fd: unsafe { OwnedFd::from_raw_fd(e.fd) },
            aligned_va: e.aligned_va,
            offset: e.offset,
            page_count: e.page_count,
            size: e.dmabuf_size,
        })
    }

    /// The counters of this file's registration cache and of all of them.
    pub fn stats(&self) -> Result<Stats, Error> {
        let mut s = uapi::Stats::new();
        call(&self.fd, &mut s)?;
        Ok(Stats {
            handles: s.handles,
            file: s.file,
            global: s.global,
        })
    }

    /// Runs GET_PAGES or DMA_MAP (`arg`) for `handle` into an array sized
    /// by GET_INFO, and returns the entries the module wrote.
    fn addresses<const OPCODE: Opcode, T: AddrsArg>(
        &self,
        handle: u64,
        arg: T,
    ) -> Result<Vec<u64>, Error>
    where
        for<'a> WithAddrs<'a, T>: IoctlArg<OPCODE>,
    {
        let mut addrs = vec![0; self.info(handle)?.page_count as usize];
        let mut with = WithAddrs::new(arg, handle, &mut addrs);
        call(&self.fd, &mut with)?;
        let written = *with.arg.fields().1 as usize;
        addrs.truncate(written);
        Ok(addrs)
    }
}

/// The device's file descriptor, for poll/epoll of its events and calls this library does
/// not wrap.
impl AsFd for Device {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl EventSource for Device {}

/// Opens a device node read-write and close-on-exec.
fn open_rdwr(path: &Path) -> Result<OwnedFd, Error> {
    rustix::fs::open(
        path,
        rustix::fs::OFlags::RDWR | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .map_err(|errno| Error::open(path.to_owned(), errno))
}

/// Same major, and a minor at least the one needed: with equal majors that is comparing the
/// words.
fn abi_compatible(module: u32) -> bool {
    module >> 16 == uapi::ABI_MAJOR && module >= (uapi::ABI_MAJOR << 16) | uapi::ABI_MINOR_NEEDED
}

fn query_version(fd: &OwnedFd) -> Result<ModuleVersion, Error> {
    let mut v = uapi::Version::new();
    call(fd, &mut v)?;
    Ok(ModuleVersion {
        abi: v.abi_version,
        nv_page_table: v.nv_page_table_version,
        nv_dma_mapping: v.nv_dma_mapping_version,
    })
}

/// An argument of the gdrpeer ioctl `OPCODE`.
///
/// # Safety
///
/// `OPCODE` must take a `Self` (reading it and perhaps writing it back), and
/// any other user memory it accesses must be borrowed by `Self` for as long as
/// `Self` lives.
unsafe trait IoctlArg<const OPCODE: Opcode> {
    /// The ioctl, for errors.
    const OP: Op;
}

/// Implements [`IoctlArg`] for the uAPI structs that hold no pointers.
macro_rules! plain_args {
    ($($t:ident: $opcode:ident, $op:ident;)*) => {$(
        // SAFETY: `$opcode` takes a `uapi::$t`, which holds no pointers, so it accesses no
        // other user memory.
        unsafe impl IoctlArg<{ uapi::$opcode }> for uapi::$t {
            const OP: Op = Op::$op;
        }
    )*};
}
plain_args! {
    Version: IOCTL_GET_VERSION, GetVersion;
    Pin: IOCTL_PIN, Pin;
    Unpin: IOCTL_UNPIN, Unpin;
    Info: IOCTL_GET_INFO, GetInfo;
    Stats: IOCTL_STATS, Stats;
    ExportDmabuf: IOCTL_EXPORT_DMABUF, ExportDmabuf;
}

/// The uAPI structs that return an address array: GET_PAGES and DMA_MAP.
trait AddrsArg {
    /// The `handle`, `count` and `addrs` fields.
    fn fields(&mut self) -> (&mut u64, &mut u32, &mut u64);
}

/// An [`AddrsArg`] whose `addrs` and `count` describe an array it borrows,
/// laid out as the uAPI struct itself.
#[repr(transparent)]
struct WithAddrs<'a, T> {
    arg: T,
    array: PhantomData<&'a mut [u64]>,
}

impl<'a, T: AddrsArg> WithAddrs<'a, T> {
    /// `arg` for `handle`, its results to go to `array`.
    fn new(mut arg: T, handle: u64, array: &'a mut [u64]) -> Self {
        let (h, count, addrs) = arg.fields();
        *h = handle;
        *count = u32::try_from(array.len()).unwrap_or(u32::MAX);
        *addrs = array.as_mut_ptr().expose_provenance() as u64;
        WithAddrs {
            arg,
            array: PhantomData,
        }
    }
}

/// Implements [`AddrsArg`], and [`IoctlArg`] for its [`WithAddrs`].
macro_rules! addrs_args {
    ($($t:ident: $opcode:ident, $op:ident;)*) => {$(
        impl AddrsArg for uapi::$t {
            fn fields(&mut self) -> (&mut u64, &mut u32, &mut u64) {
                (&mut self.handle, &mut self.count, &mut self.addrs)
            }
        }
        // SAFETY: `$opcode` takes a `uapi::$t`, which `WithAddrs` is laid out as, and writes at
        // most `count` entries at `addrs`. Only `WithAddrs::new` makes one, pointing them at
        // an array it borrows mutably for its lifetime, and nothing changes them after.
        unsafe impl IoctlArg<{ uapi::$opcode }> for WithAddrs<'_, uapi::$t> {
            const OP: Op = Op::$op;
        }
    )*};
}
addrs_args! {
    GetPages: IOCTL_GET_PAGES, GetPages;
    DmaMap: IOCTL_DMA_MAP, DmaMap;
}

/// Runs the ioctl that takes `arg`.
fn call<const OPCODE: Opcode, T: IoctlArg<OPCODE>>(fd: &OwnedFd, arg: &mut T) -> Result<(), Error> {
    // SAFETY: `IoctlArg<OPCODE>` promises that `OPCODE` takes a `T`, which the Updater
    // passes, and accesses no user memory that `arg` does not borrow.
    unsafe { ioctl::ioctl(fd, ioctl::Updater::<OPCODE, T>::new(arg)) }
        .map_err(|errno| Error::ioctl(T::OP, errno))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A forked child's copy of a Mapping must not touch the address: the kernel leaves the
    /// mapping out of the child (here: MADV_DONTFORK), and the child's own memory may be
    /// there. Its write panics, and the child's page keeps its bytes.
    #[test]
    fn a_forked_child_s_mapping_is_not_accessed() {
        use rustix::mm::{madvise, mmap_anonymous, Advice, MapFlags, ProtFlags};
        const LEN: usize = 4096;
        // SAFETY: a new anonymous mapping replaces nothing.
        let p = unsafe {
            mmap_anonymous(
                std::ptr::null_mut(),
                LEN,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::PRIVATE,
            )
        }
        .unwrap();
        // SAFETY: the mapping just made.
        unsafe { madvise(p, LEN, Advice::LinuxDontFork) }.unwrap();
        // SAFETY: a mapping of this process's that only this Mapping unmaps.
        let m = unsafe { Mapping::from_raw(p.cast(), LEN) };
        // SAFETY: the child only maps a page, calls write and exits.
        match unsafe { libc::fork() } {
            0 => {
                // A child stuck on a lock another test thread held at the fork dies.
                // SAFETY: a plain call.
                unsafe { libc::alarm(3) };
                // The child's own page where the parent's mapping was.
                // SAFETY: the range is free in the child (MADV_DONTFORK).
                let q = unsafe {
                    mmap_anonymous(
                        p,
                        LEN,
                        ProtFlags::READ | ProtFlags::WRITE,
                        MapFlags::PRIVATE | MapFlags::FIXED_NOREPLACE,
                    )
                };
                let status = match q {
                    Ok(q) => {
                        let wrote = std::panic::catch_unwind(|| m.write(0, &[0xaa]));
                        // SAFETY: the child's page, just made.
                        let kept = unsafe { q.cast::<u8>().read() } == 0;
                        std::mem::forget(m);
                        match (wrote.is_err(), kept) {
                            (true, true) => 0,
                            (false, _) => 1,
                            (true, false) => 2,
                        }
                    }
                    Err(_) => 3,
                };
                // SAFETY: ends the child without running the parent's test harness.
                unsafe { libc::_exit(status) }
            }
            pid => {
                assert!(pid > 0, "fork failed");
                let mut status = 0;
                // SAFETY: waits for the child just forked.
                assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
                assert!(libc::WIFEXITED(status));
                assert_eq!(
                    libc::WEXITSTATUS(status),
                    0,
                    "1: the child's write went through; 2: it changed the child's page; \
                     3: no page could be put at the address"
                );
                drop(m);
            }
        }
    }

    #[test]
    fn abi_compatibility_rule() {
        assert!(abi_compatible(uapi::ABI_VERSION));
        assert!(
            abi_compatible(uapi::ABI_VERSION + 1),
            "a newer minor is compatible"
        );
        assert!(
            !abi_compatible(uapi::ABI_VERSION + (1 << 16)),
            "another major is not"
        );
        assert!(!abi_compatible((uapi::ABI_MAJOR - 1) << 16 | 0xffff));
        assert!(
            abi_compatible(uapi::ABI_MAJOR << 16 | uapi::ABI_MINOR_NEEDED),
            "the oldest minor needed is compatible"
        );
        assert!(
            !abi_compatible(uapi::ABI_MAJOR << 16 | (uapi::ABI_MINOR_NEEDED - 1)),
            "an older one is not"
        );
    }

    #[test]
    fn pin_flags() {
        assert_eq!(PinFlags::default(), PinFlags::empty());
        assert_eq!(PinFlags::PERSISTENT.bits(), uapi::PIN_PERSISTENT);
        assert!((PinFlags::empty() | PinFlags::PERSISTENT).contains(PinFlags::PERSISTENT));
        assert!(!PinFlags::empty().contains(PinFlags::PERSISTENT));
    }

    #[test]
    fn addresses_argument_describes_its_array() {
        let mut array = [0u64; 3];
        let ptr = array.as_mut_ptr() as u64;
        let with = WithAddrs::new(uapi::GetPages::new(), 7, &mut array);
        assert_eq!(size_of_val(&with), size_of::<uapi::GetPages>());
        assert_eq!(
            with.arg,
            uapi::GetPages {
                size: size_of::<uapi::GetPages>() as u32,
                count: 3,
                handle: 7,
                addrs: ptr,
            }
        );
    }
}

/// The README's example, compiled as a doc test.
#[cfg(all(doctest, feature = "cuda"))]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
