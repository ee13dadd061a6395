// SPDX-License-Identifier: GPL-2.0

//! A client of `/dev/gdrdrv`, gdrpeer's gdrdrv-compatible device: the ABI libgdrapi
//! (gdrcopy) speaks, mirroring `include/uapi/gdrpeer-gdrdrv.h`.
//!
//! A handle doubles as an mmap offset in 4 KiB pages: a handle's window maps from file
//! offset `handle << 12`, from its first byte only, once at a time, as on gdrdrv. Handles are
//! numbered as gdrdrv numbers them (from 0, each followed by room for its window's pages) and
//! stay below 2^32, so libgdrapi's 32-bit copy of a handle names the same pin. gdrpeer's
//! device differs from gdrdrv where Documentation/user/gdrdrv.rst says: UNPIN is lazy (a re-pin
//! of the same buffer is a cache hit; [`PIN_FLAG_GDRPEER_NOCACHE`] bypasses the cache), and
//! revocations are queued as events ([`crate::events::EventSource`]).
//!
//! [`Gdrdrv::map`] is libgdrapi's `gdr_map`: REQ_MAPPING_TYPE NONE (the driver chooses), the
//! mmap, then GET_INFO_V2 for the type the mapping got.
//!
//! ```no_run
//! use gdrpeer::gdrdrv::Gdrdrv;
//! let g = Gdrdrv::open_default()?;
//! let v = g.version()?;
//! println!("gdrdrv {}.{}", v.driver >> 16, v.driver & 0xffff);
//! # let (addr, size) = (0, 0);
//! let h = g.pin_v2(addr, size, 0)?;
//! let info = g.info_v2(h)?;
//! let (map, mapping_type) = g.map(h, info.mapped_size as usize)?;
//! map.write(0, b"hello");
//! drop(map);
//! g.unpin(h)?;
//! # Ok::<(), gdrpeer::Error>(())
//! ```

use crate::{events::EventSource, Error, Mapping, Op};
use rustix::{
    fd::{AsFd, BorrowedFd, OwnedFd},
    io::Errno,
    ioctl::{self, opcode, Opcode},
};
use std::path::Path;

/// Path of the gdrdrv device node.
pub const DEFAULT_PATH: &str = "/dev/gdrdrv";

/// `GDRDRV_IOCTL_MAGIC`.
pub const IOCTL_MAGIC: u8 = 0xDA;
/// `GDRDRV_VERSION`: 2.6.
pub const VERSION: u32 = (2 << 16) | 6;
/// `GDRDRV_MINIMUM_GDR_API_VERSION`: 2.0.
pub const MINIMUM_GDR_API_VERSION: u32 = 2 << 16;
/// The page size of mmap offsets (`handle << PAGE_SHIFT`).
pub const PAGE_SHIFT: u32 = 12;
/// The GPU page size GET_INFO reports.
pub const GPU_PAGE_SIZE: u32 = 1 << 16;

/// `GDRDRV_MAPPING_TYPE_NONE`.
pub const MAPPING_TYPE_NONE: u32 = 0;
/// `GDRDRV_MAPPING_TYPE_WC`: write-combining, the default for BAR memory.
pub const MAPPING_TYPE_WC: u32 = 1;
/// `GDRDRV_MAPPING_TYPE_CACHING`.
pub const MAPPING_TYPE_CACHING: u32 = 2;
/// `GDRDRV_MAPPING_TYPE_DEVICE`.
pub const MAPPING_TYPE_DEVICE: u32 = 3;

/// `GDRDRV_ATTR_USE_PERSISTENT_MAPPING`: 1 when pins are persistent (no callback; P2P tokens
/// refused). gdrpeer answers 0.
pub const ATTR_USE_PERSISTENT_MAPPING: u32 = 1;
/// `GDRDRV_ATTR_SUPPORT_PIN_FLAG_FORCE_PCIE`.
pub const ATTR_SUPPORT_PIN_FLAG_FORCE_PCIE: u32 = 2;

/// `GDRDRV_PIN_FLAG_FORCE_PCIE`.
pub const PIN_FLAG_FORCE_PCIE: u32 = 1 << 0;
/// `GDRDRV_PIN_FLAG_GDRPEER_NOCACHE`: gdrpeer's extension, bypass the registration cache
/// (UNPIN gives the memory back at once). gdrdrv itself refuses it with EINVAL.
pub const PIN_FLAG_GDRPEER_NOCACHE: u32 = 1 << 31;

/// `struct gdrdrv_pin_buffer`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PinBuffer {
    /// In: GPU virtual address.
    pub addr: u64,
    /// In: bytes.
    pub size: u64,
    /// In: 0, or the buffer's P2P token.
    pub p2p_token: u64,
    /// In: the buffer's VA-space token (with `p2p_token`).
    pub va_space: u32,
    /// 0.
    pub pad: u32,
    /// Out: the handle.
    pub handle: u64,
}

/// `struct gdrdrv_pin_buffer_v2`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PinBufferV2 {
    /// In: GPU virtual address.
    pub addr: u64,
    /// In: bytes.
    pub size: u64,
    /// In: `PIN_FLAG_*`.
    pub flags: u32,
    /// 0.
    pub pad: u32,
    /// Out: the handle.
    pub handle: u64,
}

/// `struct gdrdrv_unpin_buffer`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UnpinBuffer {
    /// In.
    pub handle: u64,
}

/// `struct gdrdrv_get_cb_flag`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GetCbFlag {
    /// In.
    pub handle: u64,
    /// Out: 1 once the memory was freed under the pin.
    pub flag: u32,
    /// 0.
    pub pad: u32,
}

/// `struct gdrdrv_get_info`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GetInfo {
    /// In.
    pub handle: u64,
    /// Out: start of the pinned 64 KiB-aligned window.
    pub va: u64,
    /// Out: its length.
    pub mapped_size: u64,
    /// Out: 65536.
    pub page_size: u32,
    /// Out: TSC frequency in kHz.
    pub tsc_khz: u32,
    /// Out: TSC cycles the pin took.
    pub tm_cycles: u64,
    /// Out: 1 while the handle is mapped.
    pub mapped: u32,
    /// Out: 1 when mappings are write-combining.
    pub wc_mapping: u32,
}

/// `struct gdrdrv_get_info_v2`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GetInfoV2 {
    /// In.
    pub handle: u64,
    /// Out: start of the pinned 64 KiB-aligned window.
    pub va: u64,
    /// Out: its length.
    pub mapped_size: u64,
    /// Out: 65536.
    pub page_size: u32,
    /// Out: TSC frequency in kHz.
    pub tsc_khz: u32,
    /// Out: TSC cycles the pin took.
    pub tm_cycles: u64,
    /// Out: `MAPPING_TYPE_*` of the handle's mappings.
    pub mapping_type: u32,
    /// 0.
    pub pad: u32,
}

/// `struct gdrdrv_get_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GetAttr {
    /// In: `ATTR_*`.
    pub attr: u32,
    /// Out.
    pub val: u32,
}

/// `struct gdrdrv_req_mapping_type`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReqMappingType {
    /// In.
    pub handle: u64,
    /// In: `MAPPING_TYPE_*` for the next mmap.
    pub mapping_type: u32,
    /// 0.
    pub pad: u32,
}

/// `struct gdrdrv_get_version`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GetVersion {
    /// Out: [`VERSION`].
    pub gdrdrv_version: u32,
    /// Out: [`MINIMUM_GDR_API_VERSION`].
    pub minimum_gdr_api_version: u32,
}

/// The command numbers libgdrapi sends: all but the two PINs encode the size of a pointer.
const fn ptr_sized(nr: u8) -> Opcode {
    opcode::read_write::<u64>(IOCTL_MAGIC, nr)
}
/// `GDRDRV_IOC_PIN_BUFFER`.
pub const IOC_PIN_BUFFER: Opcode = opcode::read_write::<PinBuffer>(IOCTL_MAGIC, 1);
/// `GDRDRV_IOC_UNPIN_BUFFER`.
pub const IOC_UNPIN_BUFFER: Opcode = ptr_sized(2);
/// `GDRDRV_IOC_GET_CB_FLAG`.
pub const IOC_GET_CB_FLAG: Opcode = ptr_sized(3);
/// `GDRDRV_IOC_GET_INFO`.
pub const IOC_GET_INFO: Opcode = ptr_sized(4);
/// `GDRDRV_IOC_GET_INFO_V2`.
pub const IOC_GET_INFO_V2: Opcode = ptr_sized(5);
/// `GDRDRV_IOC_GET_ATTR`.
pub const IOC_GET_ATTR: Opcode = ptr_sized(6);
/// `GDRDRV_IOC_PIN_BUFFER_V2`.
pub const IOC_PIN_BUFFER_V2: Opcode = opcode::read_write::<PinBufferV2>(IOCTL_MAGIC, 7);
/// `GDRDRV_IOC_REQ_MAPPING_TYPE`.
pub const IOC_REQ_MAPPING_TYPE: Opcode = ptr_sized(8);
/// `GDRDRV_IOC_GET_VERSION`.
pub const IOC_GET_VERSION: Opcode = ptr_sized(255);

/// The mmap offset of byte `off` of `handle`'s window.
pub const fn mmap_offset(handle: u64, off: u64) -> u64 {
    (handle << PAGE_SHIFT) + off
}

/// The driver's versions (GET_VERSION).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Version {
    /// The driver's version, `major << 16 | minor`.
    pub driver: u32,
    /// The oldest library API it serves.
    pub minimum_api: u32,
}

/// What GET_INFO says of a handle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Info {
    /// Start of the pinned 64 KiB-aligned window.
    pub va: u64,
    /// Its length.
    pub mapped_size: u64,
    /// The GPU page size.
    pub page_size: u32,
    /// TSC frequency in kHz (0 if unknown).
    pub tsc_khz: u32,
    /// TSC cycles the pin took.
    pub tm_cycles: u64,
    /// Whether the handle is mapped.
    pub mapped: bool,
    /// Whether mappings are write-combining.
    pub wc_mapping: bool,
}

/// What GET_INFO_V2 says of a handle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InfoV2 {
    /// Start of the pinned 64 KiB-aligned window.
    pub va: u64,
    /// Its length.
    pub mapped_size: u64,
    /// The GPU page size.
    pub page_size: u32,
    /// TSC frequency in kHz (0 if unknown).
    pub tsc_khz: u32,
    /// TSC cycles the pin took.
    pub tm_cycles: u64,
    /// `MAPPING_TYPE_*` of the handle's mappings.
    pub mapping_type: u32,
}

impl Info {
    /// The time the pin took in microseconds, where the TSC frequency is known.
    pub fn pin_us(&self) -> Option<f64> {
        (self.tsc_khz != 0).then(|| self.tm_cycles as f64 * 1000.0 / f64::from(self.tsc_khz))
    }
}

/// An open `/dev/gdrdrv`. Every call but [`Gdrdrv::version`] must come from the process
/// that opened it (EACCES otherwise).
#[derive(Debug)]
pub struct Gdrdrv {
    fd: OwnedFd,
}

/// An argument of the gdrdrv ioctl `OPCODE`.
///
/// # Safety
///
/// `OPCODE` must read and may write back one `Self` and touch no other user memory.
pub unsafe trait Arg<const OPCODE: Opcode> {
    /// The ioctl, for errors.
    const OP: Op;
}

macro_rules! args {
    ($($t:ident: $opcode:ident, $op:ident;)*) => {$(
        // SAFETY: the driver copies the whole `$t` for `$opcode` (whatever size the command
        // encodes), and it holds no pointers.
        unsafe impl Arg<{ $opcode }> for $t {
            const OP: Op = Op::$op;
        }
    )*};
}
args! {
    PinBuffer: IOC_PIN_BUFFER, GdrdrvPinBuffer;
    PinBufferV2: IOC_PIN_BUFFER_V2, GdrdrvPinBufferV2;
    UnpinBuffer: IOC_UNPIN_BUFFER, GdrdrvUnpinBuffer;
    GetCbFlag: IOC_GET_CB_FLAG, GdrdrvGetCbFlag;
    GetInfo: IOC_GET_INFO, GdrdrvGetInfo;
    GetInfoV2: IOC_GET_INFO_V2, GdrdrvGetInfoV2;
    GetAttr: IOC_GET_ATTR, GdrdrvGetAttr;
    ReqMappingType: IOC_REQ_MAPPING_TYPE, GdrdrvReqMappingType;
    GetVersion: IOC_GET_VERSION, GdrdrvGetVersion;
}

/// Runs the gdrdrv ioctl that takes `arg` on `fd`.
pub fn call<const OPCODE: Opcode, T: Arg<OPCODE>>(
    fd: BorrowedFd<'_>,
    arg: &mut T,
) -> Result<(), Error> {
    // SAFETY: `Arg<OPCODE>` promises that `OPCODE` takes one `T` and nothing else.
    unsafe { ioctl::ioctl(fd, ioctl::Updater::<OPCODE, T>::new(arg)) }
        .map_err(|errno| Error::ioctl(T::OP, errno))
}

impl Gdrdrv {
    /// Opens [`DEFAULT_PATH`].
    pub fn open_default() -> Result<Self, Error> {
        Self::open(DEFAULT_PATH)
    }

    /// Opens the device at `path` (O_RDWR | O_CLOEXEC, as libgdrapi does) and checks that it
    /// speaks gdrdrv 2.x.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, Error> {
        let g = Gdrdrv {
            fd: crate::open_rdwr(path.as_ref())?,
        };
        let v = g.version()?;
        if v.driver >> 16 != VERSION >> 16 {
            return Err(Error::GdrdrvVersion { driver: v.driver });
        }
        Ok(g)
    }

    /// GET_VERSION.
    pub fn version(&self) -> Result<Version, Error> {
        let mut v = GetVersion::default();
        call(self.fd.as_fd(), &mut v)?;
        Ok(Version {
            driver: v.gdrdrv_version,
            minimum_api: v.minimum_gdr_api_version,
        })
    }

    /// GET_ATTR of `attr` (`ATTR_*`).
    pub fn attr(&self, attr: u32) -> Result<u32, Error> {
        let mut a = GetAttr { attr, val: 0 };
        call(self.fd.as_fd(), &mut a)?;
        Ok(a.val)
    }

    /// PIN_BUFFER of `[addr, addr + size)`, with the buffer's P2P tokens or zeros: the handle.
    pub fn pin(&self, addr: u64, size: u64, p2p_token: u64, va_space: u32) -> Result<u64, Error> {
        let mut p = PinBuffer {
            addr,
            size,
            p2p_token,
            va_space,
            ..Default::default()
        };
        call(self.fd.as_fd(), &mut p)?;
        Ok(p.handle)
    }

    /// PIN_BUFFER_V2 of `[addr, addr + size)` with `flags` (`PIN_FLAG_*`): the handle.
    pub fn pin_v2(&self, addr: u64, size: u64, flags: u32) -> Result<u64, Error> {
        let mut p = PinBufferV2 {
            addr,
            size,
            flags,
            ..Default::default()
        };
        call(self.fd.as_fd(), &mut p)?;
        Ok(p.handle)
    }

    /// UNPIN_BUFFER.
    pub fn unpin(&self, handle: u64) -> Result<(), Error> {
        call(self.fd.as_fd(), &mut UnpinBuffer { handle })
    }

    /// GET_CB_FLAG: whether the memory was freed under the pin.
    pub fn cb_flag(&self, handle: u64) -> Result<bool, Error> {
        let mut f = GetCbFlag {
            handle,
            ..Default::default()
        };
        call(self.fd.as_fd(), &mut f)?;
        Ok(f.flag != 0)
    }

    /// GET_INFO.
    pub fn info(&self, handle: u64) -> Result<Info, Error> {
        let mut i = GetInfo {
            handle,
            ..Default::default()
        };
        call(self.fd.as_fd(), &mut i)?;
        Ok(Info {
            va: i.va,
            mapped_size: i.mapped_size,
            page_size: i.page_size,
            tsc_khz: i.tsc_khz,
            tm_cycles: i.tm_cycles,
            mapped: i.mapped != 0,
            wc_mapping: i.wc_mapping != 0,
        })
    }

    /// GET_INFO_V2.
    pub fn info_v2(&self, handle: u64) -> Result<InfoV2, Error> {
        let mut i = GetInfoV2 {
            handle,
            ..Default::default()
        };
        call(self.fd.as_fd(), &mut i)?;
        Ok(InfoV2 {
            va: i.va,
            mapped_size: i.mapped_size,
            page_size: i.page_size,
            tsc_khz: i.tsc_khz,
            tm_cycles: i.tm_cycles,
            mapping_type: i.mapping_type,
        })
    }

    /// REQ_MAPPING_TYPE: the type (`MAPPING_TYPE_*`) the next mmap of `handle` asks for.
    pub fn req_mapping_type(&self, handle: u64, mapping_type: u32) -> Result<(), Error> {
        call(
            self.fd.as_fd(),
            &mut ReqMappingType {
                handle,
                mapping_type,
                pad: 0,
            },
        )
    }

    /// Maps `len` bytes of `handle`'s window from byte `offset` with a bare mmap at
    /// `(handle << 12) + offset`: shared, read-write, unmapped when the [`Mapping`] is
    /// dropped. The device maps from offset 0 only, one mapping per handle; [`Gdrdrv::map`]
    /// is what libgdrapi does.
    pub fn mmap(&self, handle: u64, offset: u64, len: usize) -> Result<Mapping, Error> {
        let off = handle
            .checked_mul(1 << PAGE_SHIFT)
            .and_then(|o| o.checked_add(offset))
            .ok_or(Error::ioctl(Op::GdrdrvMmap, Errno::OVERFLOW))?;
        Mapping::new(self.fd.as_fd(), off, len, Op::GdrdrvMmap)
    }

    /// libgdrapi's `gdr_map`: maps `handle`'s window (`len` rounded up to 64 KiB) with the
    /// mapping type the driver chooses. Returns the mapping and its type (`MAPPING_TYPE_*`).
    /// Access after the memory is freed raises SIGBUS.
    pub fn map(&self, handle: u64, len: usize) -> Result<(Mapping, u32), Error> {
        self.map_v2(handle, len, MAPPING_TYPE_NONE)
    }

    /// libgdrapi's `gdr_map_v2`: REQ_MAPPING_TYPE `mapping_type` (NONE: the driver chooses),
    /// an mmap of the window from its first byte (`len` rounded up to 64 KiB), then
    /// GET_INFO_V2; fails with [`Error::Gdrdrv`] as libgdrapi does when the type reported is
    /// NONE (not mapped) or, for another request than NONE, not the one asked for.
    pub fn map_v2(
        &self,
        handle: u64,
        len: usize,
        mapping_type: u32,
    ) -> Result<(Mapping, u32), Error> {
        let gpu_page = GPU_PAGE_SIZE as usize;
        let len = len
            .checked_next_multiple_of(gpu_page)
            .ok_or(Error::ioctl(Op::GdrdrvMmap, Errno::OVERFLOW))?;
        self.req_mapping_type(handle, mapping_type)?;
        let map = self.mmap(handle, 0, len)?;
        let got = self.info_v2(handle)?.mapping_type;
        if got == MAPPING_TYPE_NONE {
            return Err(Error::Gdrdrv(
                "GET_INFO_V2 says the handle is not mapped after mmap",
            ));
        }
        if mapping_type != MAPPING_TYPE_NONE && got != mapping_type {
            return Err(Error::Gdrdrv(
                "GET_INFO_V2 reports another mapping type than the one requested",
            ));
        }
        Ok((map, got))
    }
}

/// The device's file descriptor: for poll/epoll of its events and calls not wrapped here.
impl AsFd for Gdrdrv {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl EventSource for Gdrdrv {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::uapi::probe::{check_against_header, Row};
    use std::mem::offset_of;

    /// Every constant, command number, struct size and field offset against the C header.
    #[test]
    fn matches_c_header() {
        let mut rows = Vec::new();
        let mut row = |c: &str, rust: u64| {
            rows.push(Row {
                c: c.to_string(),
                rust,
            })
        };
        for (c, rust) in [
            ("GDRDRV_IOCTL_MAGIC", u64::from(IOCTL_MAGIC)),
            ("GDRDRV_VERSION", u64::from(VERSION)),
            (
                "GDRDRV_MINIMUM_GDR_API_VERSION",
                u64::from(MINIMUM_GDR_API_VERSION),
            ),
            ("GDRDRV_MAPPING_TYPE_NONE", u64::from(MAPPING_TYPE_NONE)),
            ("GDRDRV_MAPPING_TYPE_WC", u64::from(MAPPING_TYPE_WC)),
            (
                "GDRDRV_MAPPING_TYPE_CACHING",
                u64::from(MAPPING_TYPE_CACHING),
            ),
            ("GDRDRV_MAPPING_TYPE_DEVICE", u64::from(MAPPING_TYPE_DEVICE)),
            (
                "GDRDRV_ATTR_USE_PERSISTENT_MAPPING",
                u64::from(ATTR_USE_PERSISTENT_MAPPING),
            ),
            (
                "GDRDRV_ATTR_SUPPORT_PIN_FLAG_FORCE_PCIE",
                u64::from(ATTR_SUPPORT_PIN_FLAG_FORCE_PCIE),
            ),
            ("GDRDRV_PIN_FLAG_FORCE_PCIE", u64::from(PIN_FLAG_FORCE_PCIE)),
            (
                "GDRDRV_PIN_FLAG_GDRPEER_NOCACHE",
                u64::from(PIN_FLAG_GDRPEER_NOCACHE),
            ),
            ("GDRDRV_IOC_PIN_BUFFER", u64::from(IOC_PIN_BUFFER)),
            ("GDRDRV_IOC_UNPIN_BUFFER", u64::from(IOC_UNPIN_BUFFER)),
            ("GDRDRV_IOC_GET_CB_FLAG", u64::from(IOC_GET_CB_FLAG)),
            ("GDRDRV_IOC_GET_INFO", u64::from(IOC_GET_INFO)),
            ("GDRDRV_IOC_GET_INFO_V2", u64::from(IOC_GET_INFO_V2)),
            ("GDRDRV_IOC_GET_ATTR", u64::from(IOC_GET_ATTR)),
            ("GDRDRV_IOC_PIN_BUFFER_V2", u64::from(IOC_PIN_BUFFER_V2)),
            (
                "GDRDRV_IOC_REQ_MAPPING_TYPE",
                u64::from(IOC_REQ_MAPPING_TYPE),
            ),
            ("GDRDRV_IOC_GET_VERSION", u64::from(IOC_GET_VERSION)),
        ] {
            row(c, rust);
        }
        // The command numbers of the ABI note, literally.
        assert_eq!(
            [
                IOC_PIN_BUFFER,
                IOC_UNPIN_BUFFER,
                IOC_GET_CB_FLAG,
                IOC_GET_INFO,
                IOC_GET_INFO_V2,
                IOC_GET_ATTR,
                IOC_PIN_BUFFER_V2,
                IOC_REQ_MAPPING_TYPE,
                IOC_GET_VERSION
            ],
            [
                0xc028da01, 0xc008da02, 0xc008da03, 0xc008da04, 0xc008da05, 0xc008da06, 0xc020da07,
                0xc008da08, 0xc008daff
            ]
        );
        macro_rules! layout {
            ($rust:ident = $c:ident { $($f:ident),* $(,)? }) => {{
                let $rust { $($f: _),* } = $rust::default();
                let c = stringify!($c);
                row(&format!("sizeof(struct {c})"), size_of::<$rust>() as u64);
                $(
                    let f = stringify!($f);
                    row(&format!("offsetof(struct {c}, {f})"), offset_of!($rust, $f) as u64);
                )*
            }};
        }
        layout!(
            PinBuffer = gdrdrv_pin_buffer {
                addr,
                size,
                p2p_token,
                va_space,
                pad,
                handle
            }
        );
        layout!(
            PinBufferV2 = gdrdrv_pin_buffer_v2 {
                addr,
                size,
                flags,
                pad,
                handle
            }
        );
        layout!(UnpinBuffer = gdrdrv_unpin_buffer { handle });
        layout!(GetCbFlag = gdrdrv_get_cb_flag { handle, flag, pad });
        layout!(
            GetInfo = gdrdrv_get_info {
                handle,
                va,
                mapped_size,
                page_size,
                tsc_khz,
                tm_cycles,
                mapped,
                wc_mapping
            }
        );
        layout!(
            GetInfoV2 = gdrdrv_get_info_v2 {
                handle,
                va,
                mapped_size,
                page_size,
                tsc_khz,
                tm_cycles,
                mapping_type,
                pad
            }
        );
        layout!(GetAttr = gdrdrv_get_attr { attr, val });
        layout!(
            ReqMappingType = gdrdrv_req_mapping_type {
                handle,
                mapping_type,
                pad
            }
        );
        layout!(
            GetVersion = gdrdrv_get_version {
                gdrdrv_version,
                minimum_gdr_api_version
            }
        );
        check_against_header("uapi/gdrpeer-gdrdrv.h", &rows);
    }
}
