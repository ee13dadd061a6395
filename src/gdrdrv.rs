// SPDX-License-Identifier: GPL-2.0

//! `/dev/gdrdrv`: the gdrdrv ABI (gdrcopy 2.6) over gdrpeer's pin engine, so that programs
//! built on libgdrapi (UCX, NCCL, NVSHMEM, MPIs) use gdrpeer's cache and callback handling
//! unchanged. The ABI is in `include/uapi/gdrpeer-gdrdrv.h`; Documentation/user/gdrdrv.rst says
//! where gdrpeer differs from gdrdrv on purpose.
//!
//! Each open file is a [`Context`] of the opening process, as on `/dev/gdrpeer`, whose
//! handles are numbered as gdrdrv numbers them ([`Numbering::PageOffsets`]): a handle is also
//! the mmap offset in pages (`handle << PAGE_SHIFT` in bytes) of its window, handles start
//! at 0, each is followed by room for its window's pages, and all stay below 2^32, since
//! libgdrapi keeps a handle in 32 bits. Pins are callback pins: UNPIN is lazy (the region
//! stays cached for the next PIN), a mapping is withdrawn when the memory is freed, and the
//! file reports revocations as events. Every ioctl, mmap and read must come from the opening
//! process (-EACCES). REQ_MAPPING_TYPE and mmap check what gdrdrv checks, in its order
//! (Documentation/user/gdrdrv.rst): one mapping per handle, of a pin that starts on a GPU page,
//! from the window's first byte.
//!
//! The device is registered only when `gdrdrv=1` (the default) and no `/dev/gdrdrv` exists:
//! gdrcopy's own driver may be loaded.

use kernel::{
    fs::{File, Kiocb},
    ioctl::{_IOC_TYPE, _IOWR},
    iov::IovIterDest,
    mm::virt::VmaNew,
    new_mutex,
    page::PAGE_SHIFT,
    prelude::*,
    rbtree::{RBTree, RBTreeNodeReservation},
    sync::{poll::PollTable, Mutex},
    time::{Instant, Monotonic},
    transmute::{AsBytes, FromBytes},
    uaccess::{UserPtr, UserSlice},
};

use crate::{
    cache::{Numbering, Sharing},
    files::{self, CpuMap, MapAt, OpenFile},
    miscdev::{self, MiscDevice, MiscDeviceOptions, MiscDeviceRegistration},
    nv_p2p::{PinKind, Tokens},
    params,
    range::{GpuRange, GPU_PAGE_SIZE},
    sys,
    vma::{self, Caching},
};

bindgen_module! {
    mod abi = "gdrdrv_generated.rs";
}

use abi::{
    gdrdrv_get_attr as GetAttr, gdrdrv_get_cb_flag as GetCbFlag, gdrdrv_get_info as GetInfo,
    gdrdrv_get_info_v2 as GetInfoV2, gdrdrv_get_version as GetVersion,
    gdrdrv_pin_buffer as PinBuffer, gdrdrv_pin_buffer_v2 as PinBufferV2,
    gdrdrv_req_mapping_type as ReqMappingType, gdrdrv_unpin_buffer as UnpinBuffer,
};

plain_data!(
    // SAFETY: include/uapi/gdrpeer-gdrdrv.h declares its structs with fixed-size integer
    // fields only, and every gap as an explicit padding field (their sizes and offsets are
    // asserted below).
    PinBuffer,
    PinBufferV2,
    UnpinBuffer,
    GetCbFlag,
    GetInfo,
    GetInfoV2,
    GetAttr,
    ReqMappingType,
    GetVersion
);

const MAGIC: u32 = abi::GDRDRV_IOCTL_MAGIC;

/// A command that encodes the size of a pointer, as libgdrapi sends several.
const fn ioc_ptr(nr: u32) -> u32 {
    _IOWR::<*const u8>(MAGIC, nr)
}

const IOC_PIN_BUFFER: u32 = _IOWR::<PinBuffer>(MAGIC, 1);
const IOC_UNPIN_BUFFER: u32 = ioc_ptr(2);
const IOC_GET_CB_FLAG: u32 = ioc_ptr(3);
const IOC_GET_INFO: u32 = ioc_ptr(4);
const IOC_GET_INFO_V2: u32 = ioc_ptr(5);
const IOC_GET_ATTR: u32 = ioc_ptr(6);
const IOC_PIN_BUFFER_V2: u32 = _IOWR::<PinBufferV2>(MAGIC, 7);
const IOC_REQ_MAPPING_TYPE: u32 = ioc_ptr(8);
const IOC_GET_VERSION: u32 = ioc_ptr(255);

// The ABI as libgdrapi 2.6 speaks it: command numbers, struct sizes and the offsets of the
// fields that follow padding, checked against the header the structs are generated from.
const _: () = {
    use core::mem::{offset_of, size_of};
    assert!(IOC_PIN_BUFFER == 0xc028_da01 && IOC_UNPIN_BUFFER == 0xc008_da02);
    assert!(IOC_GET_CB_FLAG == 0xc008_da03 && IOC_GET_INFO == 0xc008_da04);
    assert!(IOC_GET_INFO_V2 == 0xc008_da05 && IOC_GET_ATTR == 0xc008_da06);
    assert!(IOC_PIN_BUFFER_V2 == 0xc020_da07 && IOC_REQ_MAPPING_TYPE == 0xc008_da08);
    assert!(IOC_GET_VERSION == 0xc008_daff);
    assert!(size_of::<PinBuffer>() == 40 && offset_of!(PinBuffer, handle) == 32);
    assert!(offset_of!(PinBuffer, va_space) == 24 && offset_of!(PinBuffer, p2p_token) == 16);
    assert!(size_of::<PinBufferV2>() == 32 && offset_of!(PinBufferV2, handle) == 24);
    assert!(offset_of!(PinBufferV2, flags) == 16);
    assert!(size_of::<UnpinBuffer>() == 8);
    assert!(size_of::<GetCbFlag>() == 16 && offset_of!(GetCbFlag, flag) == 8);
    assert!(size_of::<GetInfo>() == 48 && offset_of!(GetInfo, tm_cycles) == 32);
    assert!(offset_of!(GetInfo, mapped) == 40 && offset_of!(GetInfo, wc_mapping) == 44);
    assert!(size_of::<GetInfoV2>() == 48 && offset_of!(GetInfoV2, mapping_type) == 40);
    assert!(size_of::<GetAttr>() == 8 && offset_of!(GetAttr, val) == 4);
    assert!(size_of::<ReqMappingType>() == 16 && offset_of!(ReqMappingType, mapping_type) == 8);
    assert!(size_of::<GetVersion>() == 8);
    assert!(abi::GDRDRV_VERSION == (2 << 16) | 6);
};

/// Fills the fields GET_INFO and GET_INFO_V2 share from the handle's info; evaluates to the
/// mapping type.
macro_rules! fill_info {
    ($me:expr, $i:expr) => {{
        let (window, pin_ns, ty) = $me.info($i.handle)?;
        $i.va = window.start();
        $i.mapped_size = window.len();
        $i.page_size = GPU_PAGE_SIZE as u32;
        $i.tsc_khz = NS_CLOCK_KHZ;
        $i.tm_cycles = pin_ns;
        ty
    }};
}

/// GET_INFO's clock: `tm_cycles` counts nanoseconds at a nominal 1 GHz, so that libgdrapi's
/// `tm_cycles / tsc_khz` gives the pin time in milliseconds on every architecture.
const NS_CLOCK_KHZ: u32 = 1_000_000;

/// The device: `/dev/gdrdrv`.
#[pin_data]
pub(crate) struct Gdrdrv {
    #[pin]
    misc: MiscDeviceRegistration<GdrdrvFile>,
}

impl Gdrdrv {
    /// Registers `/dev/gdrdrv`, whose open files hold `module`, if the module parameter asks
    /// for it and the name is free; `None` otherwise, with the reason in the kernel log. A
    /// failure to register is logged too: `/dev/gdrpeer` works without it.
    pub(crate) fn register(module: &'static ThisModule) -> Option<Pin<KBox<Self>>> {
        if !params::gdrdrv() {
            pr_info!("gdrdrv=0: the gdrdrv-compatible device is not registered\n");
            return None;
        }
        if sys::path_exists(c"/dev/gdrdrv") {
            pr_info!("/dev/gdrdrv exists (gdrcopy's gdrdrv?): the gdrdrv-compatible device is not registered\n");
            return None;
        }
        let dev = KBox::pin_init(
            try_pin_init!(Gdrdrv {
                misc <- MiscDeviceRegistration::register(
                    MiscDeviceOptions { name: c"gdrdrv" },
                    module
                ),
            }),
            GFP_KERNEL,
        );
        match dev {
            Ok(dev) => {
                pr_info!(
                    "/dev/gdrdrv: gdrdrv ABI {}.{}\n",
                    abi::GDRDRV_MAJOR_VERSION,
                    abi::GDRDRV_MINOR_VERSION
                );
                Some(dev)
            }
            Err(e) => {
                pr_warn!("/dev/gdrdrv not registered: {:?}\n", e);
                None
            }
        }
    }
}

/// What gdrdrv keeps per handle beyond the engine's.
#[derive(Clone, Copy)]
struct Extra {
    /// The mapping type REQ_MAPPING_TYPE asked for (`GDRDRV_MAPPING_TYPE_*`): NONE, the
    /// default, lets the mmap choose.
    mapping_type: u32,
    /// The type the last mmap got, which GET_INFO(_V2) report while a mapping lives.
    mapped_type: u32,
    /// How long the pin took, in nanoseconds.
    pin_ns: u64,
    /// The window's length in pages (`PAGE_SIZE`): the file offsets its mappings lie in.
    pages: usize,
}

/// The [`Extra`]s of a file's handles.
struct Extras {
    tree: RBTree<u64, Extra>,
    /// The node of the last one removed, for the next handle: a PIN and its UNPIN allocate
    /// nothing here once the file has had a handle.
    spare: Option<RBTreeNodeReservation<u64, Extra>>,
}

impl Extras {
    /// Adds a new handle's.
    fn insert(&mut self, handle: u64, extra: Extra) -> Result {
        let node = match self.spare.take() {
            Some(node) => node,
            None => RBTreeNodeReservation::new(GFP_KERNEL)?,
        };
        // A handle is new when its PIN returns: nothing is replaced.
        self.tree.insert(node.into_node(handle, extra));
        Ok(())
    }

    /// Removes a handle's, keeping its node.
    fn remove(&mut self, handle: u64) -> Option<Extra> {
        let extra = *self.tree.get(&handle)?;
        let node = self.tree.remove_node(&handle)?.into_reservation();
        self.spare.get_or_insert(node);
        Some(extra)
    }
}

/// The state of one open file of `/dev/gdrdrv`.
pub(crate) struct GdrdrvFile {
    open: OpenFile,
    /// Per handle. Taken after `Context::inner` is released, never with it.
    extra: Pin<KBox<Mutex<Extras>>>,
}

#[vtable]
impl MiscDevice for GdrdrvFile {
    type Ptr = KBox<Self>;

    fn open(_file: &File, _misc: &MiscDeviceRegistration<Self>) -> Result<KBox<Self>> {
        let open = OpenFile::new(Numbering::PageOffsets)?;
        let extras = Extras {
            tree: RBTree::new(),
            spare: None,
        };
        let extra = KBox::pin_init(new_mutex!(extras, "GdrdrvFile::extra"), GFP_KERNEL)?;
        Ok(KBox::new(GdrdrvFile { open, extra }, GFP_KERNEL)?)
    }

    fn release(me: KBox<Self>, _file: &File) {
        KBox::into_inner(me).open.release();
    }

    /// Maps a handle from the first byte of its window, at file offset `handle << PAGE_SHIFT`:
    /// write-combining, or cached where NVIDIA's table allows it and REQ_MAPPING_TYPE asked
    /// for CACHING or left the choice to the driver (NONE).
    ///
    /// gdrdrv's checks, in its order: another process than the opener -EACCES; an unknown
    /// handle, one mapped already, one called back, a pin that does not start on a GPU page,
    /// or a mapping longer than the window -EINVAL.
    fn mmap(me: &GdrdrvFile, file: &File, vma: &VmaNew) -> Result {
        let ctx = &me.open.ctx;
        if !ctx.is_owner() {
            return Err(EACCES);
        }
        let pgoff = vma::pgoff(vma);
        let handle = pgoff as u64;
        let info = ctx.info(handle)?;
        // mmap runs under the caller's mmap_lock, and only the opener may map: no other
        // mapping of the handle can be made between this check and the install.
        if info.busy || info.revoked || info.window.offset() != 0 {
            return Err(EINVAL);
        }
        let asked = me
            .extra
            .lock()
            .tree
            .get(&handle)
            .ok_or(EINVAL)?
            .mapping_type;
        let at = MapAt {
            handle,
            offset: 0,
            base: pgoff,
        };
        // A callback that came after the check above: gdrdrv's answer for a handle called
        // back, EINVAL, not the engine's ENXIO.
        let caching = CpuMap::install(ctx, file, vma, at, asked != abi::GDRDRV_MAPPING_TYPE_WC)
            .map_err(|e| if e == ENXIO { EINVAL } else { e })?;
        if let Some(x) = me.extra.lock().tree.get_mut(&handle) {
            x.mapped_type = match caching {
                Caching::Cached => abi::GDRDRV_MAPPING_TYPE_CACHING,
                Caching::WriteCombining => abi::GDRDRV_MAPPING_TYPE_WC,
            };
        }
        Ok(())
    }

    /// Reads the file's invalidation events.
    fn read_iter(kiocb: Kiocb<'_, Self::Ptr>, iov: &mut IovIterDest<'_>) -> Result<usize> {
        let wait = miscdev::may_block(&kiocb);
        files::read_events(&kiocb.file().open.ctx, iov, wait, |handle| handle)
    }

    fn ioctl(me: &GdrdrvFile, file: &File, cmd: u32, arg: usize) -> Result<isize> {
        // As gdrdrv: a command of another driver is refused, then a caller that is not the
        // opener, whatever the command.
        if _IOC_TYPE(cmd) != MAGIC {
            return Err(ENOTTY);
        }
        if !me.open.ctx.is_owner() {
            return Err(EACCES);
        }
        let arg = UserPtr::from_addr(arg);
        match cmd {
            IOC_PIN_BUFFER => me.pin_ioctl(file, arg, |p: &mut PinBuffer| me.pin_buffer(p)),
            IOC_PIN_BUFFER_V2 => me.pin_ioctl(file, arg, |p: &mut PinBufferV2| me.pin_buffer_v2(p)),
            IOC_UNPIN_BUFFER => input(arg, |u: &UnpinBuffer| me.unpin(file, u.handle)),
            IOC_GET_CB_FLAG => update(arg, |c: &mut GetCbFlag| me.get_cb_flag(c)),
            IOC_GET_INFO => update(arg, |i: &mut GetInfo| me.get_info(i)),
            IOC_GET_INFO_V2 => update(arg, |i: &mut GetInfoV2| me.get_info_v2(i)),
            IOC_GET_ATTR => update(arg, get_attr),
            IOC_REQ_MAPPING_TYPE => input(arg, |r: &ReqMappingType| me.req_mapping_type(r)),
            IOC_GET_VERSION => update(arg, get_version),
            _ => Err(ENOTTY),
        }
        .map(|()| 0)
    }

    /// The file's events: readable while it has some.
    fn poll(me: &GdrdrvFile, file: &File, table: PollTable<'_>) -> u32 {
        files::poll_events(&me.open.ctx, file, table)
    }
}

impl GdrdrvFile {
    /// Runs a PIN ioctl; when its result cannot be written back the pin is undone, as the
    /// caller cannot learn the handle, with whatever another thread of the process mapped of
    /// it meanwhile (handles are numbered in order).
    fn pin_ioctl<T: FromBytes + AsBytes>(
        &self,
        file: &File,
        arg: UserPtr,
        pin: impl FnOnce(&mut T) -> Result<u64>,
    ) -> Result {
        let (mut reader, mut writer) =
            UserSlice::new(arg, core::mem::size_of::<T>()).reader_writer();
        let mut v: T = reader.read()?;
        let handle = pin(&mut v)?;
        writer.write(&v).inspect_err(|_| {
            let _ = self.unpin(file, handle);
        })
    }

    /// PIN_BUFFER: a callback pin in the VA space its P2P tokens name; returns the handle.
    fn pin_buffer(&self, p: &mut PinBuffer) -> Result<u64> {
        let tokens = Tokens {
            p2p_token: p.p2p_token,
            va_space: p.va_space,
        };
        p.handle = self.pin(p.addr, p.size, Sharing::Cached, tokens)?;
        Ok(p.handle)
    }

    /// PIN_BUFFER_V2: a callback pin in the caller's VA space, private if its flags ask;
    /// returns the handle.
    fn pin_buffer_v2(&self, p: &mut PinBufferV2) -> Result<u64> {
        let sharing = pin_v2_sharing(p.flags)?;
        p.handle = self.pin(p.addr, p.size, sharing, Tokens::default())?;
        Ok(p.handle)
    }

    /// GET_CB_FLAG: whether NVIDIA revoked the handle.
    fn get_cb_flag(&self, c: &mut GetCbFlag) -> Result {
        c.flag = self.open.ctx.info(c.handle)?.revoked.into();
        Ok(())
    }

    /// GET_INFO: the window, the pin time, and whether and how the handle is mapped.
    fn get_info(&self, i: &mut GetInfo) -> Result {
        let ty = fill_info!(self, i);
        i.mapped = (ty != abi::GDRDRV_MAPPING_TYPE_NONE).into();
        i.wc_mapping = (ty == abi::GDRDRV_MAPPING_TYPE_WC).into();
        Ok(())
    }

    /// GET_INFO_V2: the window, the pin time and the mapping type.
    fn get_info_v2(&self, i: &mut GetInfoV2) -> Result {
        i.mapping_type = fill_info!(self, i);
        Ok(())
    }

    /// PIN_BUFFER(_V2): pins `[addr, addr + size)` rounded to 64 KiB pages; returns the
    /// handle. -ENOMEM when the file has no room left for the window among its handles.
    fn pin(&self, addr: u64, size: u64, sharing: Sharing, tokens: Tokens) -> Result<u64> {
        let range = GpuRange::new(addr, size, params::max_pin_bytes())?;
        let start = Instant::<Monotonic>::now();
        let info = self
            .open
            .ctx
            .pin(range, PinKind::Callback, sharing, tokens)?;
        let pin_ns = start.elapsed().as_nanos() as u64;
        self.extra
            .lock()
            .insert(
                info.handle,
                Extra {
                    mapping_type: abi::GDRDRV_MAPPING_TYPE_NONE,
                    mapped_type: abi::GDRDRV_MAPPING_TYPE_NONE,
                    pin_ns,
                    pages: (info.window.len() >> PAGE_SHIFT) as usize,
                },
            )
            // The caller cannot use the handle: do not keep it (nothing maps it yet).
            .inspect_err(|_| {
                let _ = self.open.ctx.unpin(info.handle, || {});
            })?;
        Ok(info.handle)
    }

    /// UNPIN_BUFFER: ends and zaps the handle's mappings, then drops it (lazily: its region
    /// stays cached). A handle has its [`Extra`] from its PIN's return to its UNPIN, so one
    /// without is unknown (-EINVAL): the engine is asked only once, to unpin it.
    fn unpin(&self, file: &File, handle: u64) -> Result {
        let pages = self.extra.lock().remove(handle).ok_or(EINVAL)?.pages;
        // The handle's offsets: only its mappings lie there.
        self.open
            .ctx
            .unpin(handle, || files::unmap_handle(file, handle as usize, pages))
    }

    /// GET_INFO(_V2): the window, the pin time and the mapping type: NONE while the handle
    /// has no mapping, else the type its last mmap got (as gdrdrv, whose `mapped` libgdrapi
    /// derives from it).
    fn info(&self, handle: u64) -> Result<(GpuRange, u64, u32)> {
        let info = self.open.ctx.info(handle)?;
        let extra = self.extra.lock();
        let x = extra.tree.get(&handle).ok_or(EINVAL)?;
        let ty = if info.busy {
            x.mapped_type
        } else {
            abi::GDRDRV_MAPPING_TYPE_NONE
        };
        Ok((info.window, x.pin_ns, ty))
    }

    /// REQ_MAPPING_TYPE: the type the handle's next mmap gets, with gdrdrv's answers in its
    /// order: a type outside NONE..DEVICE -EINVAL; an unknown handle -EINVAL; a handle
    /// mapped now -EBUSY; CACHING of memory NVIDIA's table does not let the CPU cache
    /// -EOPNOTSUPP; DEVICE -EOPNOTSUPP (for platforms that must map GPU memory as device
    /// memory, which gdrpeer does not build for). NONE leaves the choice to the mmap.
    fn req_mapping_type(&self, r: &ReqMappingType) -> Result {
        let ty = r.mapping_type;
        if ty > abi::GDRDRV_MAPPING_TYPE_DEVICE {
            return Err(EINVAL);
        }
        let info = self.open.ctx.info(r.handle)?;
        if info.busy {
            return Err(EBUSY);
        }
        match ty {
            abi::GDRDRV_MAPPING_TYPE_CACHING if !info.cpu_cacheable => {
                return Err(sys::eopnotsupp())
            }
            abi::GDRDRV_MAPPING_TYPE_DEVICE => return Err(sys::eopnotsupp()),
            _ => {}
        }
        self.extra
            .lock()
            .tree
            .get_mut(&r.handle)
            .ok_or(EINVAL)?
            .mapping_type = ty;
        Ok(())
    }
}

/// The sharing PIN_BUFFER_V2's flags ask for; -EINVAL for FORCE_PCIE (not supported:
/// GET_ATTR says so) and unknown flags.
fn pin_v2_sharing(flags: u32) -> Result<Sharing> {
    match flags {
        0 => Ok(Sharing::Cached),
        abi::GDRDRV_PIN_FLAG_GDRPEER_NOCACHE => Ok(Sharing::Private),
        _ => Err(EINVAL),
    }
}

/// GET_ATTR: gdrpeer's answers to libgdrapi's attribute queries; -EINVAL for another.
fn get_attr(a: &mut GetAttr) -> Result {
    a.val = match a.attr {
        // Callback pins: revocable, and P2P tokens are honoured.
        abi::GDRDRV_ATTR_USE_PERSISTENT_MAPPING => 0,
        // Forcing PCIe needs the persistent API's flag (gdrdrv.rst).
        abi::GDRDRV_ATTR_SUPPORT_PIN_FLAG_FORCE_PCIE => 0,
        _ => return Err(EINVAL),
    };
    Ok(())
}

/// GET_VERSION: the gdrdrv ABI version and the oldest libgdrapi it serves.
fn get_version(v: &mut GetVersion) -> Result {
    v.gdrdrv_version = abi::GDRDRV_VERSION;
    v.minimum_gdr_api_version = abi::GDRDRV_MINIMUM_GDR_API_VERSION;
    Ok(())
}

/// Runs an ioctl that only reads its argument struct (whatever size the command encodes), as
/// gdrdrv reads UNPIN's and REQ_MAPPING_TYPE's: nothing is written back, so an argument in
/// read-only memory does not turn a change already made into -EFAULT.
fn input<T: FromBytes>(arg: UserPtr, f: impl FnOnce(&T) -> Result) -> Result {
    let v: T = UserSlice::new(arg, core::mem::size_of::<T>())
        .reader()
        .read()?;
    f(&v)
}

/// Runs an ioctl on its argument struct: reads the whole struct (whatever size the command
/// encodes), lets `f` fill it in, and writes it back.
fn update<T: FromBytes + AsBytes>(arg: UserPtr, f: impl FnOnce(&mut T) -> Result) -> Result {
    let (mut reader, mut writer) = UserSlice::new(arg, core::mem::size_of::<T>()).reader_writer();
    let mut v: T = reader.read()?;
    f(&mut v)?;
    writer.write(&v)
}
