// SPDX-License-Identifier: GPL-2.0

//! `/dev/gdrpeer`: one [`GdrpeerFile`] per open file, ioctls dispatched here.
//!
//! Each open file is a registration-cache [`Context`] of the opening process. Every ioctl but
//! GET_VERSION must come from that process: another one (a child after fork, or a receiver of
//! the file over a socket) gets -EACCES, because NVIDIA knows the memory only by the tgid that
//! pinned it. So do mmap, which maps a handle's window for the CPU ([`CpuMap`]), and read,
//! which returns the file's invalidation events (poll reports them).
//!
//! [`CpuMap`]: crate::files::CpuMap

use kernel::{
    bindings, debugfs, fmt,
    fs::{file::FileDescriptorReservation, File, Kiocb},
    ioctl::_IOC_SIZE,
    iov::IovIterDest,
    mm::virt::VmaNew,
    prelude::*,
    str::CString,
    sync::{
        atomic::{Atomic, Relaxed},
        poll::PollTable,
        Arc,
    },
    transmute::AsBytes,
    uaccess::{UserPtr, UserSlice, UserSliceReader},
};

use crate::{
    cache::{Context, Numbering, Sharing},
    export::{Export, Window},
    files::{self, CpuMap, MapAt, OpenFile, MMAP_HANDLE_SHIFT_PAGES},
    miscdev::{self, MiscDevice, MiscDeviceOptions, MiscDeviceRegistration},
    nv_p2p::{self, PinKind, Tokens},
    params,
    range::{GpuRange, GPU_PAGE_SIZE},
    stats::{Stats, GLOBAL},
    sys, uapi,
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
    /// Registers `/dev/gdrpeer`, whose open files hold `module`; the per-file debugfs
    /// directories go under `debugfs`.
    pub(crate) fn new(
        debugfs: &debugfs::Dir,
        module: &'static ThisModule,
    ) -> impl PinInit<Self, Error> {
        let files_dir = debugfs.subdir(c"files");
        try_pin_init!(Chardev {
            files_dir,
            misc <- MiscDeviceRegistration::register(
                MiscDeviceOptions { name: c"gdrpeer" },
                module
            ),
        })
    }
}

/// Numbers the per-file debugfs directories.
static NEXT_FILE_ID: Atomic<u64> = Atomic::new(1);

/// The state of one open file of `/dev/gdrpeer`.
pub(crate) struct GdrpeerFile {
    open: OpenFile,
    /// `gdrpeer/files/<tgid>-<n>/{stats,regions}` in debugfs, with the context they show;
    /// removed before the context closes.
    debugfs: Option<Pin<KBox<debugfs::Scope<Arc<Context>>>>>,
}

impl GdrpeerFile {
    fn new(chardev: &Chardev) -> Result<Self> {
        let mut me = GdrpeerFile {
            open: OpenFile::new(Numbering::Counted)?,
            debugfs: None,
        };
        // debugfs is a debugging aid: a file without it still works.
        let _ = me.add_debugfs(&chardev.files_dir);
        Ok(me)
    }

    /// The file's context, for a command of the process that opened the file; -EACCES for
    /// any other.
    fn owned(&self) -> Result<&Arc<Context>> {
        let ctx = &self.open.ctx;
        if !ctx.is_owner() {
            return Err(EACCES);
        }
        Ok(ctx)
    }

    fn add_debugfs(&mut self, files_dir: &debugfs::Dir) -> Result {
        let id = NEXT_FILE_ID.fetch_add(1, Relaxed);
        let ctx = &self.open.ctx;
        let name = CString::try_from_fmt(fmt!("{}-{}", ctx.owner_tgid(), id))?;
        let scope = files_dir.scope(ctx.clone(), &name, |ctx, dir| {
            dir.read_callback_file(c"stats", ctx, &|c: &Arc<Context>, f| show_stats(c, f));
            dir.read_callback_file(c"regions", ctx, &|c: &Arc<Context>, f| show_regions(c, f));
        });
        self.debugfs = Some(KBox::pin_init(scope, GFP_KERNEL)?);
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

    fn release(me: KBox<Self>, _file: &File) {
        let GdrpeerFile { open, debugfs } = KBox::into_inner(me);
        // The debugfs files go first: they hold the context too.
        drop(debugfs);
        open.release();
    }

    /// Maps a handle's window: the offset is `GDRPEER_MMAP_OFFSET(handle, off)`; cached
    /// where NVIDIA's table allows it.
    fn mmap(me: &GdrpeerFile, file: &File, vma: &VmaNew) -> Result {
        let at = MapAt::gdrpeer(crate::vma::pgoff(vma) as u64);
        // Only the first 2^40 bytes of a window: past them the offsets are the next
        // handle's, which an unpin's zap of its own handle does not reach.
        let len = (vma.end() - vma.start()) as u64;
        if at
            .offset
            .checked_add(len)
            .is_none_or(|end| end > 1 << uapi::MMAP_HANDLE_SHIFT)
        {
            return Err(EINVAL);
        }
        CpuMap::install(&me.open.ctx, file, vma, at, true).map(|_| ())
    }

    /// Reads the file's invalidation events.
    fn read_iter(kiocb: Kiocb<'_, Self::Ptr>, iov: &mut IovIterDest<'_>) -> Result<usize> {
        let wait = miscdev::may_block(&kiocb);
        files::read_events(&kiocb.file().open.ctx, iov, wait, |handle| handle)
    }

    /// GET_VERSION from any process; every other command from the opener only (-EACCES);
    /// a command gdrpeer does not define, or one encoded with another size, -ENOTTY.
    fn ioctl(me: &GdrpeerFile, file: &File, cmd: u32, arg: usize) -> Result<isize> {
        let user = UserSlice::new(UserPtr::from_addr(arg), _IOC_SIZE(cmd));
        match cmd {
            uapi::IOCTL_GET_VERSION => get_version(user),
            uapi::IOCTL_PIN => pin(me.owned()?, file, user),
            uapi::IOCTL_UNPIN => unpin(me.owned()?, file, user),
            uapi::IOCTL_GET_INFO => info(me.owned()?, user),
            uapi::IOCTL_GET_PAGES => get_pages(me.owned()?, user),
            uapi::IOCTL_DMA_MAP => dma_map(me.owned()?, user),
            uapi::IOCTL_STATS => stats(me.owned()?, user),
            uapi::IOCTL_EXPORT_DMABUF => export_dmabuf(me.owned()?, user),
            _ => Err(ENOTTY),
        }
        .map(|()| 0)
    }

    /// The file's events: readable while it has some.
    fn poll(me: &GdrpeerFile, file: &File, table: PollTable<'_>) -> u32 {
        files::poll_events(&me.open.ctx, file, table)
    }
}

/// A file's debugfs `stats`: its context's counters.
fn show_stats(ctx: &Context, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    let s = ctx.stats();
    writeln!(f, "handles {}", s.handles)?;
    writeln!(f, "merges {}", s.merges)?;
    s.show(f)
}

/// A file's debugfs `regions`: its context's cached regions.
fn show_regions(ctx: &Context, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    writeln!(f, "start end kind phase refs unused")?;
    ctx.for_each_region(|region, refs, unused| {
        let pinned = region.pinned();
        let range = pinned.range();
        writeln!(
            f,
            "{:#x} {:#x} {:?} {:?} {} {}",
            range.start(),
            range.end(),
            pinned.kind(),
            pinned.phase(),
            refs,
            unused
        )
    })
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

fn get_version(user: UserSlice) -> Result {
    let (mut reader, mut writer) = user.reader_writer();
    let mut v: uapi::Version = read_arg(&mut reader, |v: &uapi::Version| v.size)?;
    v.abi_version = uapi::ABI_VERSION;
    v.nv_page_table_version = nv_p2p::PAGE_TABLE_VERSION;
    v.nv_dma_mapping_version = nv_p2p::DMA_MAPPING_VERSION;
    writer.write(&v)
}

fn pin(ctx: &Arc<Context>, file: &File, user: UserSlice) -> Result {
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
    let info = ctx.pin(range, kind, sharing, Tokens::default())?;
    p.handle = info.handle;
    p.aligned_va = info.window.start();
    p.offset = info.window.offset();
    p.page_count = info.window.page_count();
    p.page_size = GPU_PAGE_SIZE as u32;
    writer.write(&p).inspect_err(|_| {
        // The caller cannot learn the handle: do not keep it. Another thread of the process
        // may have mapped it meanwhile (handles are numbered in order): that goes too.
        let _ = unpin_handle(ctx, file, info.handle);
    })
}

fn unpin(ctx: &Context, file: &File, user: UserSlice) -> Result {
    let u: uapi::Unpin = read_arg(&mut user.reader(), |u: &uapi::Unpin| u.size)?;
    if u.pad != 0 {
        return Err(EINVAL);
    }
    unpin_handle(ctx, file, u.handle)
}

/// Unpins `handle`, zapping its mappings: the whole of its offsets, where only its mappings
/// lie.
fn unpin_handle(ctx: &Context, file: &File, handle: u64) -> Result {
    let base = (handle << MMAP_HANDLE_SHIFT_PAGES) as usize;
    ctx.unpin(handle, || {
        files::unmap_handle(file, base, 1 << MMAP_HANDLE_SHIFT_PAGES)
    })
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

/// Copies `addrs` to the user array at `to`.
fn write_addresses(to: u64, addrs: &[u64]) -> Result {
    let bytes = AsBytes::as_bytes(addrs);
    UserSlice::new(UserPtr::from_addr(to as usize), bytes.len())
        .writer()
        .write_slice(bytes)
}

fn get_pages(ctx: &Context, user: UserSlice) -> Result {
    let (mut reader, mut writer) = user.reader_writer();
    let mut g: uapi::GetPages = read_arg(&mut reader, |g: &uapi::GetPages| g.size)?;
    if !sys::capable_sys_rawio() {
        return Err(EPERM);
    }
    // The region's own array, read in place outside the context's lock: nothing is
    // allocated, and the region is held for the copy.
    let (region, window) = ctx.handle_region(g.handle)?;
    if g.count < window.page_count() {
        return Err(ENOSPC);
    }
    write_addresses(g.addrs, region.window_bus_addresses(&window)?)?;
    g.count = window.page_count();
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
    // The window's addresses come from the mapping this call made or found, not from a
    // second lookup: a peer unbound in between would have taken that mapping away (-ENOENT).
    let (all, window, range) = ctx.with_handle(d.handle, |region, window| {
        if d.count < window.page_count() {
            return Err(ENOSPC);
        }
        let all = region.pinned().dma_map(&peer)?;
        Ok((all, *window, *region.pinned().range()))
    })?;
    write_addresses(d.addrs, window.pages_of(&range, &all)?)?;
    d.count = window.page_count();
    writer.write(&d)
}

fn export_dmabuf(ctx: &Arc<Context>, user: UserSlice) -> Result {
    let (mut reader, mut writer) = user.reader_writer();
    let mut e: uapi::ExportDmabuf = read_arg(&mut reader, |e: &uapi::ExportDmabuf| e.size)?;
    if e.flags & !uapi::EXPORT_FLAGS != 0 || (e.handle != 0) == (e.va != 0 || e.len != 0) {
        return Err(EINVAL);
    }
    let persistent = e.flags & uapi::EXPORT_PERSISTENT != 0;
    let fd = FileDescriptorReservation::get_unused_fd_flags(bindings::O_CLOEXEC)?;
    let what = if e.handle != 0 {
        Window::Handle {
            handle: e.handle,
            persistent,
        }
    } else {
        let range = GpuRange::new(e.va, e.len, params::max_pin_bytes())?;
        if persistent {
            Window::Persistent(range)
        } else {
            Window::Range(range)
        }
    };
    let made = Export::create(ctx, what)?;
    e.fd = fd.reserved_fd() as i32;
    e.page_count = made.window.page_count();
    e.aligned_va = made.window.start();
    e.offset = made.window.offset();
    e.dmabuf_size = made.window.len();
    // Nothing is installed unless the caller learns the descriptor: on a fault both the
    // reservation and the dma-buf are dropped.
    writer.write(&e)?;
    made.dmabuf.install(fd);
    Ok(())
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
