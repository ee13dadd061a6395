// SPDX-License-Identifier: GPL-2.0

//! The user-space ABI of `/dev/gdrpeer`, generated from
//! `include/uapi/gdrpeer.h` so that the C header and the module cannot drift.

use kernel::ioctl::{_IOW, _IOWR};

bindgen_module! {
    mod bindings = "uapi_generated.rs";
}

pub(crate) use bindings::{
    gdrpeer_cache_stats as CacheStats, gdrpeer_dma_map as DmaMap, gdrpeer_event as Event,
    gdrpeer_export_dmabuf as ExportDmabuf, gdrpeer_get_pages as GetPages, gdrpeer_info as Info,
    gdrpeer_pin as Pin, gdrpeer_stats as Stats, gdrpeer_unpin as Unpin, gdrpeer_version as Version,
};

plain_data!(
    // SAFETY: include/uapi/gdrpeer.h declares its structs with fixed-size integer fields
    // only, and every gap as an explicit padding field.
    Version,
    Pin,
    Unpin,
    Info,
    GetPages,
    DmaMap,
    CacheStats,
    Stats,
    Event,
    ExportDmabuf
);

/// Pin flag: no free callback (`GDRPEER_PIN_PERSISTENT`).
pub(crate) const PIN_PERSISTENT: u32 = bindings::GDRPEER_PIN_PERSISTENT;
/// Pin flag: bypass the cache (`GDRPEER_PIN_NOCACHE`).
pub(crate) const PIN_NOCACHE: u32 = bindings::GDRPEER_PIN_NOCACHE;
/// All pin flags.
pub(crate) const PIN_FLAGS: u32 = bindings::GDRPEER_PIN_FLAGS;
/// EXPORT_DMABUF flag: a persistent pin that the dma-buf owns (`GDRPEER_EXPORT_PERSISTENT`).
pub(crate) const EXPORT_PERSISTENT: u32 = bindings::GDRPEER_EXPORT_PERSISTENT;
/// All EXPORT_DMABUF flags.
pub(crate) const EXPORT_FLAGS: u32 = bindings::GDRPEER_EXPORT_FLAGS;
/// `GDRPEER_STATE_VALID`.
pub(crate) const STATE_VALID: u32 = bindings::GDRPEER_STATE_VALID;
/// `GDRPEER_STATE_REVOKED`.
pub(crate) const STATE_REVOKED: u32 = bindings::GDRPEER_STATE_REVOKED;

/// `GDRPEER_MMAP_HANDLE_SHIFT`: an mmap offset is the handle shifted by this, plus the byte
/// offset in the window.
pub(crate) const MMAP_HANDLE_SHIFT: u32 = bindings::GDRPEER_MMAP_HANDLE_SHIFT;

/// `GDRPEER_EVENT_REVOKED`: the driver freed the handle's memory.
pub(crate) const EVENT_REVOKED: u32 = bindings::GDRPEER_EVENT_REVOKED;

/// ABI version reported by `GDRPEER_IOCTL_GET_VERSION`.
pub(crate) const ABI_VERSION: u32 = bindings::GDRPEER_ABI_VERSION;

const MAGIC: u32 = bindings::GDRPEER_IOCTL_MAGIC;

/// `GDRPEER_IOCTL_GET_VERSION`.
pub(crate) const IOCTL_GET_VERSION: u32 = _IOWR::<Version>(MAGIC, 255);
/// `GDRPEER_IOCTL_PIN`.
pub(crate) const IOCTL_PIN: u32 = _IOWR::<Pin>(MAGIC, 1);
/// `GDRPEER_IOCTL_UNPIN`.
pub(crate) const IOCTL_UNPIN: u32 = _IOW::<Unpin>(MAGIC, 2);
/// `GDRPEER_IOCTL_GET_INFO`.
pub(crate) const IOCTL_GET_INFO: u32 = _IOWR::<Info>(MAGIC, 3);
/// `GDRPEER_IOCTL_GET_PAGES`.
pub(crate) const IOCTL_GET_PAGES: u32 = _IOWR::<GetPages>(MAGIC, 4);
/// `GDRPEER_IOCTL_DMA_MAP`.
pub(crate) const IOCTL_DMA_MAP: u32 = _IOWR::<DmaMap>(MAGIC, 5);
/// `GDRPEER_IOCTL_STATS`.
pub(crate) const IOCTL_STATS: u32 = _IOWR::<Stats>(MAGIC, 6);
/// `GDRPEER_IOCTL_EXPORT_DMABUF`.
pub(crate) const IOCTL_EXPORT_DMABUF: u32 = _IOWR::<ExportDmabuf>(MAGIC, 7);
