// SPDX-License-Identifier: GPL-2.0

//! `/dev/gdrpeer`: one [`GdrpeerFile`] per open file, ioctls dispatched here.
//!
//! Each open file is a registration-cache [`Context`] of the opening process. Every ioctl but
//! GET_VERSION must come from that process: another one (a child after fork, or a receiver of
//! the file over a socket) gets -EACCES, because NVIDIA knows the memory only by the tgid that
//! pinned it. So does mmap, which maps a handle's window for the CPU ([`CpuMap`]).

use kernel::{
    debugfs,
    fs::File,
    ioctl::_IOC_SIZE,
    miscdevice::{MiscDevice, MiscDeviceOptions, MiscDeviceRegistration},
    mm::virt::VmaNew,
    page::PAGE_SHIFT,
    prelude::*,
    str::CString,
    sync::{
        aref::ARef,
        atomic::{Atomic, Relaxed},
        Arc,
    },
    transmute::AsBytes,
    types::ScopeGuard,
    uaccess::{UserPtr, UserSlice, UserSliceReader},
    workqueue::{impl_has_work, new_work, Work, WorkItem},
};

use crate::{
    cache::{Context, MapCount, Notifier, Region, Sharing},
    env::Env,
    nv_p2p::{self, PinKind},
    params,
    range::{GpuRange, GPU_PAGE_SHIFT, GPU_PAGE_SIZE},
    stats::{Stats, GLOBAL},
    sys::{self, ModuleRef},
    uapi,
    vma::{self, Fault, FaultResult, PfnMapper},
};

/// The device: `/dev/gdrpeer` and the debugfs directory of its open files.
#[pin_data]
pub(crate) struct Chardev {
    #[pin]
    misc: MiscDeviceRegistration<GdrpeerFile>,
    /// `gdrpeer/files`: one directory per open file.
    files_dir: debugfs::Dir,
}

impl Chardev {
    /// Registers `/dev/gdrpeer`; the per-file debugfs directories go under `debugfs`.
    pub(crate) fn new(debugfs: &debugfs::Dir) -> impl PinInit<Self, Error> {
        let files_dir = debugfs.subdir(c"files");
        try_pin_init!(Chardev {
            files_dir,
            misc <- MiscDeviceRegistration::register(MiscDeviceOptions { name: c"gdrpeer" }),
        })
    }
}

/// Numbers the per-file debugfs directories.
static NEXT_FILE_ID: Atomic<u64> = Atomic::new(1);

/// An open file's reference on the module, put from gdrpeer's workqueue once the file is
/// released.
///
/// The kernel crate's misc-device file operations name no owner, so an open file does not
/// pin the module by itself. Putting the reference from `release` would let the module go
/// while `release` still returns through its code; module exit drains the workqueue, so
/// putting it from a work item cannot.
#[pin_data]
struct FileModuleRef {
    #[pin]
    work: Work<FileModuleRef>,
    _module: ModuleRef,
}

impl_has_work! {
    impl HasWork<Self> for FileModuleRef { self.work }
}

impl WorkItem for FileModuleRef {
    type Pointer = Pin<KBox<FileModuleRef>>;

    fn run(this: Pin<KBox<FileModuleRef>>) {
        drop(this);
    }
}

/// The state of one open file of `/dev/gdrpeer`.
pub(crate) struct GdrpeerFile {
    env: &'static Env,
    module_ref: Option<Pin<KBox<FileModuleRef>>>,
    ctx: Arc<Context>,
    /// `gdrpeer/files/<tgid>-<n>/{stats,regions}` in debugfs, with the context they show;
    /// removed before the context closes.
    _debugfs: Option<Pin<KBox<debugfs::Scope<Arc<Context>>>>>,
}

impl GdrpeerFile {
    fn new(chardev: &Chardev) -> Result<Self> {
        let env = Env::get()?;
        // Fails once the module is going away.
        let module_ref = ModuleRef::get(env.module).map_err(|_| ENODEV)?;
        let module_ref = KBox::pin_init(
            pin_init!(FileModuleRef {
                work <- new_work!("FileModuleRef::work"),
                _module: module_ref,
            }),
            GFP_KERNEL,
        )?;
        let ctx = Context::new(env)?;
        let mut me = GdrpeerFile {
            env,
            module_ref: Some(module_ref),
            ctx,
            _debugfs: None,
        };
        // debugfs is a debugging aid: a file without it still works.
        let _ = me.add_debugfs(&chardev.files_dir);
        Ok(me)
    }

    fn add_debugfs(&mut self, files_dir: &debugfs::Dir) -> Result {
        let id = NEXT_FILE_ID.fetch_add(1, Relaxed);
        let name = CString::try_from_fmt(fmt!("{}-{}", self.ctx.owner_tgid(), id))?;
        let scope = files_dir.scope(self.ctx.clone(), &name, |ctx, dir| {
            dir.read_callback_file(c"stats", ctx, &|c: &Arc<Context>, f| c.show_stats(f));
            dir.read_callback_file(c"regions", ctx, &|c: &Arc<Context>, f| c.show_regions(f));
        });
        self._debugfs = Some(KBox::pin_init(scope, GFP_KERNEL)?);
        Ok(())
    }
}

#[vtable]
impl MiscDevice for GdrpeerFile {
    type Ptr = KBox<Self>;

    fn open(_file: &File, misc: &MiscDeviceRegistration<Self>) -> Result<KBox<Self>> {
        let misc: *const MiscDeviceRegistration<Self> = misc;
        // SAFETY: the only registration of `GdrpeerFile` is the `misc` field of a `Chardev`
        // (`Chardev::new`), which stays pinned in the module's data while it is registered.
        let chardev = unsafe { &*kernel::container_of!(misc, Chardev, misc) };
        Ok(KBox::new(GdrpeerFile::new(chardev)?, GFP_KERNEL)?)
    }

    fn release(mut me: KBox<Self>, _file: &File) {
        let ctx = me.ctx.clone();
        let queue = me.env.queue.queue();
        let module_ref = me.module_ref.take();
        // The debugfs files go first: they hold the context too.
        drop(me);
        ctx.close();
        drop(ctx);
        if let Some(module_ref) = module_ref {
            queue.enqueue(module_ref);
        }
    }

    /// Maps a handle's window: the offset is `GDRPEER_MMAP_OFFSET(handle, off)`.
    fn mmap(me: &GdrpeerFile, file: &File, vma: &VmaNew) -> Result {
        if !me.ctx.is_owner() {
            return Err(EACCES);
        }
        if !vma::is_shared(vma) {
            return Err(EINVAL);
        }
        CpuMap::install(&me.ctx, file, vma)
    }

    fn ioctl(me: &GdrpeerFile, _file: &File, cmd: u32, arg: usize) -> Result<isize> {
        let user = UserSlice::new(UserPtr::from_addr(arg), _IOC_SIZE(cmd));
        if cmd == uapi::IOCTL_GET_VERSION {
            return get_version(user);
        }
        let known = [
            uapi::IOCTL_PIN,
            uapi::IOCTL_UNPIN,
            uapi::IOCTL_GET_INFO,
            uapi::IOCTL_GET_PAGES,
            uapi::IOCTL_DMA_MAP,
            uapi::IOCTL_STATS,
        ];
        if !known.contains(&cmd) {
            return Err(ENOTTY);
        }
        if !me.ctx.is_owner() {
            return Err(EACCES);
        }
        let ctx = &me.ctx;
        let ret = match cmd {
            uapi::IOCTL_PIN => pin(ctx, user),
            uapi::IOCTL_UNPIN => unpin(ctx, user),
            uapi::IOCTL_GET_INFO => info(ctx, user),
            uapi::IOCTL_GET_PAGES => get_pages(ctx, user),
            uapi::IOCTL_DMA_MAP => dma_map(ctx, user),
            _ => stats(ctx, user),
        };
        ret.map(|()| 0)
    }
}

/// `GDRPEER_MMAP_HANDLE_SHIFT` in pages: a mapping's file offset in pages is the handle
/// shifted by this, plus the page in the window.
const MMAP_HANDLE_SHIFT_PAGES: u32 = uapi::MMAP_HANDLE_SHIFT - PAGE_SHIFT as u32;

/// A CPU mapping of a handle's window: what one mmap call made, shared by the vmas it
/// becomes (split, moved); dropped with the last of them (munmap, exit).
///
/// Pages are inserted on fault only, from the pin's bus addresses read with the pin's access
/// held ([`nv_p2p::Pinned::with_bus_address`]), so no fault inserts a page of a freed table.
/// While it lives the handle cannot be unpinned (-EBUSY) and the vmas hold the file, so its
/// region stays in use: never evicted, never released. When NVIDIA frees the memory, the
/// free callback zaps every mapping of the window ([`Zap`]) after the last fault left and
/// before the table is freed; later faults find the pin revoked and get SIGBUS.
struct CpuMap {
    region: Arc<Region>,
    window: GpuRange,
    /// The file offset of the window's first byte, in pages.
    base: usize,
    /// The handle's count of mappings, put when this goes.
    count: Arc<MapCount>,
    /// The [`Zap`] registered on the region.
    notifier: u64,
}

impl CpuMap {
    /// Checks the mapping a new `vma` asks for and installs it.
    fn install(ctx: &Context, file: &File, vma: &VmaNew) -> Result {
        let pgoff = vma::pgoff(vma) as u64;
        let handle = pgoff >> MMAP_HANDLE_SHIFT_PAGES;
        let offset = (pgoff & ((1 << MMAP_HANDLE_SHIFT_PAGES) - 1)) << PAGE_SHIFT;
        let len = (vma.end() - vma.start()) as u64;
        let (region, window, count) = ctx.map_handle(handle)?;
        // Until the mapping is complete, an early return puts the handle's count back.
        let count = ScopeGuard::new_with_data(count, |count| count.put());
        if offset + len > window.len() {
            return Err(EINVAL);
        }
        let base = (handle << MMAP_HANDLE_SHIFT_PAGES) as usize;
        let zap = Zap {
            file: ARef::from(file),
            base,
            pages: (window.len() >> PAGE_SHIFT) as usize,
        };
        // -ENXIO once the memory was freed.
        let notifier = region.add_notifier(KBox::new(zap, GFP_KERNEL)?)?;
        let map = CpuMap {
            region,
            window,
            base,
            count: count.dismiss(),
            notifier,
        };
        // Dropping `map` on failure undoes both.
        vma::install(vma, Arc::new(map, GFP_KERNEL)?);
        Ok(())
    }
}

impl PfnMapper for CpuMap {
    fn fault(&self, fault: &Fault<'_>) -> FaultResult {
        let Some(page) = fault.pgoff().checked_sub(self.base) else {
            return FaultResult::SIGBUS;
        };
        let byte = (page as u64) << PAGE_SHIFT;
        if byte >= self.window.len() {
            return FaultResult::SIGBUS;
        }
        let pinned = self.region.pinned();
        let gpu_page =
            self.window.first_page_in(pinned.range()) + (byte >> GPU_PAGE_SHIFT) as usize;
        let within = byte & (GPU_PAGE_SIZE - 1);
        // -ENXIO: revoked (or being released, which cannot happen while mapped).
        pinned
            .with_bus_address(gpu_page, |bus| {
                fault.insert_pfn((bus + within) >> PAGE_SHIFT)
            })
            .unwrap_or(FaultResult::SIGBUS)
    }
}

impl Drop for CpuMap {
    fn drop(&mut self) {
        // Waits if the free callback is zapping meanwhile; the vmas still hold the file.
        self.region.remove_notifier(self.notifier);
        self.count.put();
    }
}

/// Zaps the CPU mappings of a window when NVIDIA frees the region: every vma of the file
/// that maps the handle's offsets, in any process (the region's readers are gone by then,
/// so no fault re-inserts a page). Holds the file, which keeps its address space alive; the
/// cycle through the file's context is broken when the mapping goes (the notifier is removed)
/// or the callback consumes the notifier.
struct Zap {
    file: ARef<File>,
    base: usize,
    pages: usize,
}

impl Notifier for Zap {
    fn notify(&self) {
        vma::unmap_file_pages(&self.file, self.base, self.pages);
    }
}

/// Reads an argument struct and checks its size field (the first `u32` of every one).
fn read_arg<T: kernel::transmute::FromBytes>(
    reader: &mut UserSliceReader,
    size: impl Fn(&T) -> u32,
) -> Result<T> {
    let arg: T = reader.read()?;
    if size(&arg) as usize != core::mem::size_of::<T>() {
        return Err(EINVAL);
    }
    Ok(arg)
}

fn get_version(user: UserSlice) -> Result<isize> {
    let (mut reader, mut writer) = user.reader_writer();
    let mut v: uapi::Version = read_arg(&mut reader, |v: &uapi::Version| v.size)?;
    v.abi_version = uapi::ABI_VERSION;
    v.nv_page_table_version = nv_p2p::PAGE_TABLE_VERSION;
    v.nv_dma_mapping_version = nv_p2p::DMA_MAPPING_VERSION;
    writer.write(&v)?;
    Ok(0)
}

fn pin(ctx: &Arc<Context>, user: UserSlice) -> Result {
    let (mut reader, mut writer) = user.reader_writer();
    let mut p: uapi::Pin = read_arg(&mut reader, |p: &uapi::Pin| p.size)?;
    if p.flags & !uapi::PIN_FLAGS != 0 {
        return Err(EINVAL);
    }
    let kind = if p.flags & uapi::PIN_PERSISTENT != 0 {
        if !nv_p2p::PERSISTENT_SUPPORTED {
            return Err(sys::eopnotsupp());
        }
        PinKind::Persistent
    } else {
        PinKind::Callback
    };
    let sharing = if p.flags & uapi::PIN_NOCACHE != 0 {
        Sharing::Private
    } else {
        Sharing::Cached
    };
    let range = GpuRange::new(p.va, p.len, params::max_pin_bytes())?;
    let info = ctx.pin(range, kind, sharing)?;
    p.handle = info.handle;
    p.aligned_va = info.window.start();
    p.offset = info.window.offset();
    p.page_count = info.window.page_count();
    p.page_size = GPU_PAGE_SIZE as u32;
    writer.write(&p).inspect_err(|_| {
        // The caller cannot learn the handle: do not keep it.
        let _ = ctx.unpin(info.handle);
    })
}

fn unpin(ctx: &Context, user: UserSlice) -> Result {
    let u: uapi::Unpin = read_arg(&mut user.reader(), |u: &uapi::Unpin| u.size)?;
    if u.pad != 0 {
        return Err(EINVAL);
    }
    ctx.unpin(u.handle)
}

fn info(ctx: &Context, user: UserSlice) -> Result {
    let (mut reader, mut writer) = user.reader_writer();
    let i: uapi::Info = read_arg(&mut reader, |i: &uapi::Info| i.size)?;
    let h = ctx.info(i.handle)?;
    let out = uapi::Info {
        size: i.size,
        state: if h.revoked {
            uapi::STATE_REVOKED
        } else {
            uapi::STATE_VALID
        },
        handle: i.handle,
        aligned_va: h.window.start(),
        offset: h.window.offset(),
        page_count: h.window.page_count(),
        page_size: GPU_PAGE_SIZE as u32,
        region_va: h.region.start(),
        region_len: h.region.len(),
        flags: match h.kind {
            PinKind::Callback => 0,
            PinKind::Persistent => uapi::PIN_PERSISTENT,
        },
        pad: 0,
    };
    writer.write(&out)
}

/// Copies the addresses of a handle's pages (bus addresses, or `peer`'s DMA addresses) to the
/// user array at `addrs`, which has room for `count`; returns how many were written.
fn copy_pages(
    ctx: &Context,
    handle: u64,
    peer: Option<&kernel::pci::Device>,
    addrs: u64,
    count: u32,
) -> Result<u32> {
    let out = ctx.with_handle(handle, |region, window| {
        if count < window.page_count() {
            return Err(ENOSPC);
        }
        region.window_addresses(window, peer)
    })?;
    let bytes = AsBytes::as_bytes(&*out);
    UserSlice::new(UserPtr::from_addr(addrs as usize), bytes.len())
        .writer()
        .write_slice(bytes)?;
    Ok(out.len() as u32)
}

fn get_pages(ctx: &Context, user: UserSlice) -> Result {
    let (mut reader, mut writer) = user.reader_writer();
    let mut g: uapi::GetPages = read_arg(&mut reader, |g: &uapi::GetPages| g.size)?;
    if !sys::capable_sys_rawio() {
        return Err(EPERM);
    }
    g.count = copy_pages(ctx, g.handle, None, g.addrs, g.count)?;
    writer.write(&g)
}

fn dma_map(ctx: &Context, user: UserSlice) -> Result {
    let (mut reader, mut writer) = user.reader_writer();
    let mut d: uapi::DmaMap = read_arg(&mut reader, |d: &uapi::DmaMap| d.size)?;
    if d.pad != 0 {
        return Err(EINVAL);
    }
    if !sys::capable_sys_rawio() {
        return Err(EPERM);
    }
    let peer = sys::pci_device(d.pci_domain, d.pci_bus, d.pci_devfn).ok_or(ENODEV)?;
    ctx.with_handle(d.handle, |region, _| region.pinned().dma_map(&peer))?;
    d.count = copy_pages(ctx, d.handle, Some(&peer), d.addrs, d.count)?;
    writer.write(&d)
}

fn cache_stats(s: &Stats) -> uapi::CacheStats {
    uapi::CacheStats {
        regions: s.regions,
        pinned_bytes: s.pinned_bytes,
        hits: s.hits,
        misses: s.misses,
        evictions_limit: s.evictions_limit,
        evictions_enomem: s.evictions_enomem,
        callbacks: s.callbacks,
        deferred: s.deferred,
    }
}

fn stats(ctx: &Context, user: UserSlice) -> Result {
    let (mut reader, mut writer) = user.reader_writer();
    let s: uapi::Stats = read_arg(&mut reader, |s: &uapi::Stats| s.size)?;
    if s.pad != 0 {
        return Err(EINVAL);
    }
    let mine = ctx.stats();
    let out = uapi::Stats {
        size: s.size,
        pad: 0,
        handles: mine.handles,
        file: cache_stats(&mine),
        global: cache_stats(&GLOBAL.snapshot()),
    };
    writer.write(&out)
}
