// SPDX-License-Identifier: GPL-2.0

//! `/dev/gdrdrv`: the gdrdrv ABI (gdrcopy 2.6) over gdrpeer's pin engine, so that programs
//! built on libgdrapi (UCX, NCCL, NVSHMEM, MPIs) use gdrpeer's cache and callback handling
//! unchanged. The ABI is in `include/uapi/gdrpeer-gdrdrv.h`; Documentation/gdrdrv.rst says
//! where gdrpeer differs from gdrdrv on purpose.
//!
//! Each open file is a [`Context`] of the opening process, as on `/dev/gdrpeer`; a gdrdrv
//! handle is the context's handle shifted so that `handle << PAGE_SHIFT`, the mmap offset
//! libgdrapi uses, is `GDRPEER_MMAP_OFFSET(handle, 0)`: both devices map through the same
//! [`CpuMap`], and the offsets of different pins never overlap. Pins are callback pins:
//! UNPIN is lazy (the region stays cached for the next PIN), a mapping is withdrawn when the
//! memory is freed, and the file reports revocations as events. Every ioctl, mmap and read
//! must come from the opening process (-EACCES).
//!
//! The device is registered only when `gdrdrv=1` (the default) and no `/dev/gdrdrv` exists:
//! gdrcopy's own driver may be loaded.

use kernel::{
    fs::{File, Kiocb},
    ioctl::{_IOC_NR, _IOC_TYPE, _IOWR},
    iov::IovIterDest,
    miscdevice::{MiscDevice, MiscDeviceOptions, MiscDeviceRegistration},
    mm::virt::VmaNew,
    new_mutex,
    prelude::*,
    rbtree::RBTree,
    sync::{poll::PollTable, Mutex},
    time::{Instant, Monotonic},
    transmute::{AsBytes, FromBytes},
    uaccess::{UserPtr, UserSlice},
};

use crate::{
    cache::Sharing,
    files::{self, CpuMap, OpenFile, MMAP_HANDLE_SHIFT_PAGES},
    fops::{self, PollOps, Pollable},
    nv_p2p::{PinKind, Tokens},
    params,
    range::{GpuRange, GPU_PAGE_SIZE},
    sys, uapi,
    vma::Caching,
};

#[allow(
    dead_code,
    non_camel_case_types,
    non_upper_case_globals,
    missing_docs,
    unreachable_pub,
    unsafe_op_in_unsafe_fn,
    clippy::all,
    clippy::undocumented_unsafe_blocks
)]
mod abi {
    include!("gdrdrv_generated.rs");
}

use abi::{
    gdrdrv_get_attr as GetAttr, gdrdrv_get_cb_flag as GetCbFlag, gdrdrv_get_info as GetInfo,
    gdrdrv_get_info_v2 as GetInfoV2, gdrdrv_get_version as GetVersion,
    gdrdrv_pin_buffer as PinBuffer, gdrdrv_pin_buffer_v2 as PinBufferV2,
    gdrdrv_req_mapping_type as ReqMappingType, gdrdrv_unpin_buffer as UnpinBuffer,
};

/// Implements [`FromBytes`] and [`AsBytes`] for the ABI's structs.
macro_rules! plain_data {
    ($($t:ty),*) => {$(
        // SAFETY: the ABI's structs consist of integer fields only, with explicit padding
        // fields: every bit pattern is valid and they contain no uninitialised bytes.
        unsafe impl FromBytes for $t {}
        // SAFETY: As above.
        unsafe impl AsBytes for $t {}
    )*};
}
plain_data!(
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
    /// The file operations with `poll`, installed on each open file.
    poll_ops: PollOps<GdrdrvFile>,
}

impl Gdrdrv {
    /// Registers `/dev/gdrdrv` if the module parameter asks for it and the name is free;
    /// `None` otherwise, with the reason in the kernel log. A failure to register is logged
    /// too: `/dev/gdrpeer` works without it.
    pub(crate) fn register() -> Option<Pin<KBox<Self>>> {
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
                poll_ops: PollOps::new(),
                misc <- MiscDeviceRegistration::register(MiscDeviceOptions { name: c"gdrdrv" }),
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
struct Extra {
    /// The mapping type REQ_MAPPING_TYPE asked for (`GDRDRV_MAPPING_TYPE_*`).
    mapping_type: u32,
    /// The type the last mmap got, which GET_INFO(_V2) report while a mapping lives.
    mapped_type: u32,
    /// How long the pin took, in nanoseconds.
    pin_ns: u64,
}

/// The state of one open file of `/dev/gdrdrv`.
pub(crate) struct GdrdrvFile {
    open: OpenFile,
    /// Per context handle. Taken after `Context::inner` is released, never with it.
    extra: Pin<KBox<Mutex<RBTree<u64, Extra>>>>,
}

#[vtable]
impl MiscDevice for GdrdrvFile {
    type Ptr = KBox<Self>;

    fn open(file: &File, misc: &MiscDeviceRegistration<Self>) -> Result<KBox<Self>> {
        let misc: *const MiscDeviceRegistration<Self> = misc;
        // SAFETY: the only registration of `GdrdrvFile` is the `misc` field of a `Gdrdrv`
        // (`Gdrdrv::register`), pinned in the module's data while it is registered.
        let dev = unsafe { &*kernel::container_of!(misc, Gdrdrv, misc) };
        let me = KBox::new(
            GdrdrvFile {
                open: OpenFile::new()?,
                extra: KBox::pin_init(new_mutex!(RBTree::new(), "GdrdrvFile::extra"), GFP_KERNEL)?,
            },
            GFP_KERNEL,
        )?;
        // The module's data outlives the file: the file holds a module reference.
        dev.poll_ops.install(file);
        Ok(me)
    }

    fn release(me: KBox<Self>, _file: &File) {
        KBox::into_inner(me).open.release();
    }

    /// Maps a handle at `handle << PAGE_SHIFT` (plus an offset in its window, which gdrdrv
    /// does not allow): write-combining, or cached where REQ_MAPPING_TYPE asked for it and
    /// NVIDIA's table allows it.
    fn mmap(me: &GdrdrvFile, file: &File, vma: &VmaNew) -> Result {
        let handle = (crate::vma::pgoff(vma) as u64) >> MMAP_HANDLE_SHIFT_PAGES;
        let cached = me
            .extra
            .lock()
            .get(&handle)
            .is_some_and(|x| x.mapping_type == abi::GDRDRV_MAPPING_TYPE_CACHING);
        let caching = CpuMap::install(&me.open.ctx, file, vma, cached)?;
        if let Some(x) = me.extra.lock().get_mut(&handle) {
            x.mapped_type = match caching {
                Caching::Cached => abi::GDRDRV_MAPPING_TYPE_CACHING,
                Caching::WriteCombining => abi::GDRDRV_MAPPING_TYPE_WC,
            };
        }
        Ok(())
    }

    /// Reads the file's invalidation events, with gdrdrv handles.
    fn read_iter(kiocb: Kiocb<'_, Self::Ptr>, iov: &mut IovIterDest<'_>) -> Result<usize> {
        let wait = fops::may_block(&kiocb);
        files::read_events(&kiocb.file().open.ctx, iov, wait, |h| {
            h << MMAP_HANDLE_SHIFT_PAGES
        })
    }

    fn ioctl(me: &GdrdrvFile, file: &File, cmd: u32, arg: usize) -> Result<isize> {
        if _IOC_TYPE(cmd) != MAGIC {
            return Err(ENOTTY);
        }
        let known = [
            IOC_PIN_BUFFER,
            IOC_UNPIN_BUFFER,
            IOC_GET_CB_FLAG,
            IOC_GET_INFO,
            IOC_GET_INFO_V2,
            IOC_GET_ATTR,
            IOC_PIN_BUFFER_V2,
            IOC_REQ_MAPPING_TYPE,
            IOC_GET_VERSION,
        ];
        if !known.contains(&cmd) {
            return Err(ENOTTY);
        }
        if !me.open.ctx.is_owner() {
            return Err(EACCES);
        }
        let arg = UserPtr::from_addr(arg);
        match _IOC_NR(cmd) {
            1 => me.pin_ioctl(arg, |p: &mut PinBuffer| {
                let tokens = Tokens {
                    p2p_token: p.p2p_token,
                    va_space: p.va_space,
                };
                p.handle = me.pin(p.addr, p.size, Sharing::Cached, tokens)?;
                Ok(p.handle)
            }),
            7 => me.pin_ioctl(arg, |p: &mut PinBufferV2| {
                p.handle = me.pin(p.addr, p.size, pin_v2_sharing(p.flags)?, Tokens::default())?;
                Ok(p.handle)
            }),
            2 => update(arg, |u: &mut UnpinBuffer| me.unpin(file, u.handle)),
            3 => update(arg, |c: &mut GetCbFlag| {
                let h = from_gdrdrv(c.handle)?;
                c.flag = me.open.ctx.info(h)?.revoked.into();
                Ok(())
            }),
            4 => update(arg, |i: &mut GetInfo| {
                let ty = fill_info!(me, i);
                i.mapped = me.open.ctx.is_mapped(from_gdrdrv(i.handle)?)?.into();
                i.wc_mapping = (ty == abi::GDRDRV_MAPPING_TYPE_WC).into();
                Ok(())
            }),
            5 => update(arg, |i: &mut GetInfoV2| {
                i.mapping_type = fill_info!(me, i);
                Ok(())
            }),
            6 => update(arg, |a: &mut GetAttr| {
                a.val = match a.attr {
                    // Callback pins: revocable, and P2P tokens are honoured.
                    abi::GDRDRV_ATTR_USE_PERSISTENT_MAPPING => 0,
                    // Forcing PCIe needs the persistent API's flag (Documentation/gdrdrv.rst).
                    abi::GDRDRV_ATTR_SUPPORT_PIN_FLAG_FORCE_PCIE => 0,
                    _ => return Err(EINVAL),
                };
                Ok(())
            }),
            8 => update(arg, |r: &mut ReqMappingType| me.req_mapping_type(r)),
            _ => update(arg, |v: &mut GetVersion| {
                v.gdrdrv_version = abi::GDRDRV_VERSION;
                v.minimum_gdr_api_version = abi::GDRDRV_MINIMUM_GDR_API_VERSION;
                Ok(())
            }),
        }
        .map(|()| 0)
    }
}

impl Pollable for GdrdrvFile {
    fn poll(me: &GdrdrvFile, file: &File, table: PollTable<'_>) -> u32 {
        files::poll_events(&me.open.ctx, file, table)
    }
}

impl GdrdrvFile {
    /// Runs a PIN ioctl; when its result cannot be written back the pin is undone, as the
    /// caller cannot learn the handle.
    fn pin_ioctl<T: FromBytes + AsBytes>(
        &self,
        arg: UserPtr,
        pin: impl FnOnce(&mut T) -> Result<u64>,
    ) -> Result {
        let (mut reader, mut writer) =
            UserSlice::new(arg, core::mem::size_of::<T>()).reader_writer();
        let mut v: T = reader.read()?;
        let handle = pin(&mut v)?;
        writer.write(&v).inspect_err(|_| {
            if let Ok(h) = from_gdrdrv(handle) {
                let _ = self.open.ctx.unpin(h, || {});
                self.extra.lock().remove(&h);
            }
        })
    }

    /// PIN_BUFFER(_V2): pins `[addr, addr + size)` rounded to 64 KiB pages; returns the
    /// gdrdrv handle.
    fn pin(&self, addr: u64, size: u64, sharing: Sharing, tokens: Tokens) -> Result<u64> {
        let range = GpuRange::new(addr, size, params::max_pin_bytes())?;
        let start = Instant::<Monotonic>::now();
        let info = self
            .open
            .ctx
            .pin(range, PinKind::Callback, sharing, tokens)?;
        let pin_ns = start.elapsed().as_nanos() as u64;
        let kept = to_gdrdrv(info.handle).and_then(|handle| {
            self.extra.lock().try_create_and_insert(
                info.handle,
                Extra {
                    mapping_type: abi::GDRDRV_MAPPING_TYPE_WC,
                    mapped_type: abi::GDRDRV_MAPPING_TYPE_NONE,
                    pin_ns,
                },
                GFP_KERNEL,
            )?;
            Ok(handle)
        });
        // The caller cannot use the handle: do not keep it (nothing maps it yet).
        kept.inspect_err(|_| {
            let _ = self.open.ctx.unpin(info.handle, || {});
        })
    }

    /// UNPIN_BUFFER: ends and zaps the handle's mappings, then drops it (lazily: its region
    /// stays cached).
    fn unpin(&self, file: &File, handle: u64) -> Result {
        let h = from_gdrdrv(handle)?;
        self.open.ctx.unpin(h, || files::unmap_handle(file, h))?;
        self.extra.lock().remove(&h);
        Ok(())
    }

    /// GET_INFO(_V2): the window, the pin time and the mapping type: NONE while the handle
    /// has no mapping, else the type its last mmap got (as gdrdrv, whose `mapped` libgdrapi
    /// derives from it).
    fn info(&self, handle: u64) -> Result<(GpuRange, u64, u32)> {
        let h = from_gdrdrv(handle)?;
        let info = self.open.ctx.info(h)?;
        let mapped = self.open.ctx.is_mapped(h)?;
        let extra = self.extra.lock();
        let x = extra.get(&h).ok_or(EINVAL)?;
        let ty = if mapped {
            x.mapped_type
        } else {
            abi::GDRDRV_MAPPING_TYPE_NONE
        };
        Ok((info.window, x.pin_ns, ty))
    }

    /// REQ_MAPPING_TYPE: the type the next mmap of the handle gets. WC and CACHING are
    /// accepted (CACHING is honoured only where NVIDIA's table allows it: GET_INFO_V2 says
    /// what was used); NONE and DEVICE are not mapping types gdrpeer makes: -EINVAL.
    fn req_mapping_type(&self, r: &ReqMappingType) -> Result {
        let h = from_gdrdrv(r.handle)?;
        if !matches!(
            r.mapping_type,
            abi::GDRDRV_MAPPING_TYPE_WC | abi::GDRDRV_MAPPING_TYPE_CACHING
        ) {
            return Err(EINVAL);
        }
        let mut extra = self.extra.lock();
        extra.get_mut(&h).ok_or(EINVAL)?.mapping_type = r.mapping_type;
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

/// The gdrdrv handle of a context handle: `handle << PAGE_SHIFT` is the mmap offset of its
/// window. -ENOSPC past the handles an mmap offset can name.
fn to_gdrdrv(handle: u64) -> Result<u64> {
    if handle >= 1 << (64 - uapi::MMAP_HANDLE_SHIFT) {
        return Err(ENOSPC);
    }
    Ok(handle << MMAP_HANDLE_SHIFT_PAGES)
}

/// The context handle of a gdrdrv handle; -EINVAL for one no pin was given.
fn from_gdrdrv(handle: u64) -> Result<u64> {
    let h = handle >> MMAP_HANDLE_SHIFT_PAGES;
    if h == 0 || h << MMAP_HANDLE_SHIFT_PAGES != handle {
        return Err(EINVAL);
    }
    Ok(h)
}

/// Runs an ioctl on its argument struct: reads the whole struct (whatever size the command
/// encodes), lets `f` fill it in, and writes it back.
fn update<T: FromBytes + AsBytes>(arg: UserPtr, f: impl FnOnce(&mut T) -> Result) -> Result {
    let (mut reader, mut writer) = UserSlice::new(arg, core::mem::size_of::<T>()).reader_writer();
    let mut v: T = reader.read()?;
    f(&mut v)?;
    writer.write(&v)
}
