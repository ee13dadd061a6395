// SPDX-License-Identifier: GPL-2.0

//! What `--json` prints: one document per command (JSON Lines for `events`), each with
//! `"version": SCHEMA_VERSION`. Documentation/user/cli.rst describes every field; a field's
//! meaning never changes within a version, and fields may be added.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::BTreeMap;

/// The schema version every document carries in `version`.
pub const SCHEMA_VERSION: u32 = 1;

/// An address, written as the text output writes it ("0x7f0000010000"): JSON numbers past
/// 2^53 lose digits in many readers, and bus and DMA addresses may be that large.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hex(pub u64);

impl Serialize for Hex {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!("{:#x}", self.0))
    }
}

impl<'de> Deserialize<'de> for Hex {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.strip_prefix("0x")
            .and_then(|h| u64::from_str_radix(h, 16).ok())
            .map(Hex)
            .ok_or_else(|| serde::de::Error::custom(format!("not a 0x hex address: {s:?}")))
    }
}

/// `info`.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
pub struct Info {
    pub version: u32,
    /// The device node opened.
    pub device: String,
    /// The module's ABI, "major.minor".
    pub abi: String,
    /// The ABI of the uAPI header this program was built from.
    pub library_abi: String,
    /// The nv-p2p page-table version word the module was built for, as in nv-p2p.h.
    pub nv_page_table: String,
    /// The nv-p2p DMA-mapping version word the module was built for.
    pub nv_dma_mapping: String,
    /// The module's limits (debugfs gdrpeer/params), null where debugfs cannot be read
    /// (it needs root).
    pub params: Option<BTreeMap<String, u64>>,
}

/// `stats`.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    pub version: u32,
    /// All files' caches together, by the names the text output gives them
    /// (gdrpeer::CacheStats::counters).
    pub global: BTreeMap<String, u64>,
}

/// `gdrdrv-info`.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
pub struct GdrdrvInfo {
    pub version: u32,
    pub device: String,
    /// GDRDRV_IOC_GET_VERSION's driver version, "major.minor".
    pub gdrdrv_version: String,
    /// The oldest libgdrapi API it serves, "major.minor".
    pub minimum_api: String,
    /// GDRDRV_IOC_GET_ATTR's answers.
    pub attributes: GdrdrvAttributes,
}

#[derive(Debug, PartialEq, Serialize, Deserialize)]
pub struct GdrdrvAttributes {
    pub use_persistent_mapping: u32,
    pub support_pin_flag_force_pcie: u32,
}

/// The GPU memory a command allocated (cuMemAlloc) and freed before exiting.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
pub struct Allocation {
    pub va: Hex,
    pub size: u64,
}

/// The range of the allocation a command pinned or exported.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
pub struct Range {
    pub va: Hex,
    pub len: u64,
}

/// `pin`, `pages` and `dma-map`: one schema, the addresses where the command shows them.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
pub struct Pin {
    pub version: u32,
    pub allocation: Allocation,
    pub range: Range,
    /// Pinned without a free callback (--persistent).
    pub persistent: bool,
    pub handle: u64,
    /// The window's start: the range's start rounded down to a GPU page.
    pub aligned_va: Hex,
    /// The range's start minus aligned_va.
    pub offset: u64,
    pub page_count: u32,
    pub page_size: u32,
    /// The pages' bus (BAR1) addresses (`pages`, `pin --pages`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pages: Option<Vec<Hex>>,
    /// The peer PCI device (`dma-map`), as DDDD:BB:DD.F.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer: Option<String>,
    /// The pages' DMA addresses as the peer sees them (`dma-map`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dma_addresses: Option<Vec<Hex>>,
}

/// `dmabuf`.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
pub struct Dmabuf {
    pub version: u32,
    pub allocation: Allocation,
    pub range: Range,
    /// The dma-buf's descriptor in this process.
    pub fd: i32,
    /// The GPU address of the dma-buf's first byte.
    pub aligned_va: Hex,
    /// The range's start in the dma-buf.
    pub offset: u64,
    pub page_count: u32,
    /// The dma-buf's size in bytes.
    pub size: u64,
    /// What the dma-buf core says of it: /proc/self/fdinfo's size, count, exp_name and
    /// name, as written there (absent where it could not be read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fdinfo: Option<BTreeMap<String, String>>,
}

/// One line of `events --json` (JSON Lines: a document a line, as things happen).
#[derive(Debug, PartialEq, Serialize, Deserialize)]
pub struct EventLine {
    pub version: u32,
    #[serde(flatten)]
    pub event: Event,
}

#[derive(Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "lowercase")]
pub enum Event {
    /// A buffer allocated and pinned, before any wait.
    Watching { handle: u64, va: Hex, size: u64 },
    /// cuMemFree of a buffer (--free-after); `error` is CUDA's, if it failed.
    Freed {
        va: Hex,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// The driver freed a handle's memory: the handle is revoked.
    Revoked { handle: u64 },
    /// An event of a type this program does not know (a newer module).
    Unknown {
        #[serde(rename = "type")]
        kind: u32,
        handle: u64,
    },
}

impl EventLine {
    pub fn new(event: Event) -> Self {
        EventLine {
            version: SCHEMA_VERSION,
            event,
        }
    }
}

/// One JSON document on one line.
pub fn line<T: Serialize>(v: &T) -> String {
    serde_json::to_string(v).expect("plain data serializes")
}

/// One JSON document, indented, as the read commands print it.
pub fn pretty<T: Serialize>(v: &T) -> String {
    serde_json::to_string_pretty(v).expect("plain data serializes")
}
