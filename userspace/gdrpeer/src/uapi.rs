// SPDX-License-Identifier: GPL-2.0

//! The raw uAPI of `/dev/gdrpeer`, mirroring `include/uapi/gdrpeer.h`.
//!
//! The layouts, ioctl numbers and constants are checked against the C header
//! by the `uapi_matches_c_header` test, which compiles a C program that
//! includes it.
//!
//! Every argument struct starts with `size`, which must be `size_of` the
//! struct; `new()` returns a zeroed argument with it set.

use rustix::ioctl::{opcode, Opcode};

/// ABI major version this library speaks.
pub const ABI_MAJOR: u32 = 1;
/// ABI minor version this library was built for (the header's).
pub const ABI_MINOR: u32 = 6;
/// `GDRPEER_ABI_VERSION`.
pub const ABI_VERSION: u32 = (ABI_MAJOR << 16) | ABI_MINOR;
/// The oldest minor this library works with: 1.2 has everything but events, whose read
/// fails there with EINVAL, and dma-buf export, which fails there with ENOTTY.
pub const ABI_MINOR_NEEDED: u32 = 2;
/// `GDRPEER_IOCTL_MAGIC`.
pub const IOCTL_MAGIC: u8 = 0xDB;

/// `GDRPEER_PIN_PERSISTENT`: pin without a free callback, so the driver never
/// revokes the pin (needs driver support).
pub const PIN_PERSISTENT: u32 = 1 << 0;
/// `GDRPEER_PIN_NOCACHE` (ABI 1.1): bypass the cache, a pin of its own that
/// UNPIN gives back at once.
pub const PIN_NOCACHE: u32 = 1 << 1;
/// `GDRPEER_PIN_FLAGS`: every pin flag.
pub const PIN_FLAGS: u32 = PIN_PERSISTENT | PIN_NOCACHE;

/// `GDRPEER_EXPORT_PERSISTENT` (ABI 1.5): EXPORT_DMABUF of a range backed by a persistent
/// pin that the dma-buf owns, which also importers that cannot be invalidated may attach.
pub const EXPORT_PERSISTENT: u32 = 1 << 0;
/// `GDRPEER_EXPORT_FLAGS`: every EXPORT_DMABUF flag.
pub const EXPORT_FLAGS: u32 = EXPORT_PERSISTENT;

/// `GDRPEER_MMAP_HANDLE_SHIFT` (ABI 1.2): an mmap offset is the handle shifted
/// by this, plus the 4 KiB-aligned byte offset in the handle's window.
pub const MMAP_HANDLE_SHIFT: u32 = 40;
/// `GDRPEER_MMAP_OFFSET_MASK`: the window-offset bits of an mmap offset.
pub const MMAP_OFFSET_MASK: u64 = (1 << MMAP_HANDLE_SHIFT) - 1;

/// `GDRPEER_MMAP_OFFSET(handle, off)`: the mmap offset of byte `off` of
/// `handle`'s window.
pub const fn mmap_offset(handle: u64, off: u64) -> u64 {
    (handle << MMAP_HANDLE_SHIFT) | (off & MMAP_OFFSET_MASK)
}

/// `GDRPEER_STATE_VALID`: pinned, addresses usable.
pub const STATE_VALID: u32 = 0;
/// `GDRPEER_STATE_REVOKED`: the driver freed the memory; unpin the handle.
pub const STATE_REVOKED: u32 = 1;

/// `GDRPEER_EVENT_REVOKED` (ABI 1.3): the driver freed the handle's memory.
pub const EVENT_REVOKED: u32 = 1;

/// `struct gdrpeer_event` (ABI 1.3): one record read(2) returns from a
/// `/dev/gdrpeer` or `/dev/gdrdrv` file.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Event {
    /// The handle revoked.
    pub handle: u64,
    /// [`EVENT_REVOKED`].
    pub type_: u32,
    /// 0.
    pub pad: u32,
}

/// `struct gdrpeer_version`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Version {
    /// In: `size_of::<Version>()`.
    pub size: u32,
    /// Out: the module's `GDRPEER_ABI_VERSION`.
    pub abi_version: u32,
    /// Out: the nv-p2p page-table version the module was built for.
    pub nv_page_table_version: u32,
    /// Out: the nv-p2p DMA-mapping version the module was built for.
    pub nv_dma_mapping_version: u32,
}

/// `struct gdrpeer_pin`: pins `[va, va + len)`, widened to whole GPU pages.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pin {
    /// In: `size_of::<Pin>()`.
    pub size: u32,
    /// In: [`PIN_PERSISTENT`], [`PIN_NOCACHE`], both or 0.
    pub flags: u32,
    /// In: GPU virtual address, any alignment.
    pub va: u64,
    /// In: bytes, more than 0 and at most the module parameter `max_pin_bytes`.
    pub len: u64,
    /// Out: names the pin in later ioctls.
    pub handle: u64,
    /// Out: `va` rounded down to `page_size`.
    pub aligned_va: u64,
    /// Out: `va - aligned_va`.
    pub offset: u64,
    /// Out: pages in the window.
    pub page_count: u32,
    /// Out: the GPU page size, 65536.
    pub page_size: u32,
}

/// `struct gdrpeer_unpin`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Unpin {
    /// In: `size_of::<Unpin>()`.
    pub size: u32,
    /// Padding, must be zero.
    pub pad: u32,
    /// In: the handle to unpin.
    pub handle: u64,
}

/// `struct gdrpeer_info`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Info {
    /// In: `size_of::<Info>()`.
    pub size: u32,
    /// Out: [`STATE_VALID`] or [`STATE_REVOKED`].
    pub state: u32,
    /// In: the handle to describe.
    pub handle: u64,
    /// Out: the window's start, as PIN reported it.
    pub aligned_va: u64,
    /// Out: the caller's offset into the window, as PIN reported it.
    pub offset: u64,
    /// Out: pages in the window.
    pub page_count: u32,
    /// Out: the GPU page size.
    pub page_size: u32,
    /// Out: start of the cached region that serves the window.
    pub region_va: u64,
    /// Out: length of that region in bytes.
    pub region_len: u64,
    /// Out: `PIN_PERSISTENT` for a persistent pin, else 0 (`PIN_NOCACHE` is not reported).
    pub flags: u32,
    /// Padding, must be zero.
    pub pad: u32,
}

/// `struct gdrpeer_get_pages`: the bus (BAR1) addresses of a window's pages.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GetPages {
    /// In: `size_of::<GetPages>()`.
    pub size: u32,
    /// In: entries at `addrs`; out: entries written.
    pub count: u32,
    /// In: the handle whose window to describe.
    pub handle: u64,
    /// In: user pointer to `u64[count]`.
    pub addrs: u64,
}

/// `struct gdrpeer_dma_map`: a window's DMA addresses as a peer PCI device sees them.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DmaMap {
    /// In: `size_of::<DmaMap>()`.
    pub size: u32,
    /// In: entries at `addrs`; out: entries written.
    pub count: u32,
    /// In: the handle whose window to map.
    pub handle: u64,
    /// In: user pointer to `u64[count]`.
    pub addrs: u64,
    /// In: the peer's PCI domain.
    pub pci_domain: u32,
    /// In: the peer's PCI bus.
    pub pci_bus: u8,
    /// In: the peer's `PCI_DEVFN(slot, function)`.
    pub pci_devfn: u8,
    /// Padding, must be zero.
    pub pad: u16,
}

/// `struct gdrpeer_cache_stats`: counters of one registration cache, or of all of them.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Pinned regions.
    pub regions: u64,
    /// Bytes pinned, in use and unused.
    pub pinned_bytes: u64,
    /// Pins served from the cache.
    pub hits: u64,
    /// Pins that called the driver.
    pub misses: u64,
    /// Unused regions unpinned over a limit.
    pub evictions_limit: u64,
    /// Unused regions unpinned when BAR1 ran out.
    pub evictions_enomem: u64,
    /// Regions the driver freed (free callback).
    pub callbacks: u64,
    /// Regions left for the callback by a close elsewhere; in the global
    /// counters, those still waiting.
    pub deferred: u64,
}

/// `struct gdrpeer_stats`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// In: `size_of::<Stats>()`.
    pub size: u32,
    /// Padding, must be zero.
    pub pad: u32,
    /// Out: this file's live handles.
    pub handles: u64,
    /// Out: this file's cache.
    pub file: CacheStats,
    /// Out: all caches.
    pub global: CacheStats,
}

/// `struct gdrpeer_export_dmabuf` (ABI 1.4): a pinned window as a dma-buf, for importers that
/// take peer-to-peer memory and handle invalidation. Either `handle` (and `va`, `len` 0) or
/// `va` and `len` (and `handle` 0).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExportDmabuf {
    /// In: `size_of::<ExportDmabuf>()`.
    pub size: u32,
    /// In: [`EXPORT_PERSISTENT`] or 0.
    pub flags: u32,
    /// In: a handle whose window to export, or 0.
    pub handle: u64,
    /// In: with `handle` 0, the GPU virtual address, any alignment.
    pub va: u64,
    /// In: with `handle` 0, bytes.
    pub len: u64,
    /// Out: the dma-buf, a new descriptor (`O_RDWR | O_CLOEXEC`).
    pub fd: i32,
    /// Out: GPU pages in the dma-buf.
    pub page_count: u32,
    /// Out: the GPU address of the dma-buf's first byte.
    pub aligned_va: u64,
    /// Out: the byte offset of `va` (or of the handle's address) in the dma-buf.
    pub offset: u64,
    /// Out: the dma-buf's size, `page_count` * 65536.
    pub dmabuf_size: u64,
}

/// Gives each argument struct a `new()`: zeroed, with `size` set.
macro_rules! sized_args {
    ($($t:ident),*) => {$(
        impl $t {
            /// A zeroed argument with `size` set, as every call needs.
            pub fn new() -> Self {
                Self {
                    size: size_of::<Self>() as u32,
                    ..Default::default()
                }
            }
        }
    )*};
}
sized_args!(
    Version,
    Pin,
    Unpin,
    Info,
    GetPages,
    DmaMap,
    Stats,
    ExportDmabuf
);

/// `GDRPEER_IOCTL_GET_VERSION`.
pub const IOCTL_GET_VERSION: Opcode = opcode::read_write::<Version>(IOCTL_MAGIC, 255);
/// `GDRPEER_IOCTL_PIN`.
pub const IOCTL_PIN: Opcode = opcode::read_write::<Pin>(IOCTL_MAGIC, 1);
/// `GDRPEER_IOCTL_UNPIN`.
pub const IOCTL_UNPIN: Opcode = opcode::write::<Unpin>(IOCTL_MAGIC, 2);
/// `GDRPEER_IOCTL_GET_INFO`.
pub const IOCTL_GET_INFO: Opcode = opcode::read_write::<Info>(IOCTL_MAGIC, 3);
/// `GDRPEER_IOCTL_GET_PAGES`.
pub const IOCTL_GET_PAGES: Opcode = opcode::read_write::<GetPages>(IOCTL_MAGIC, 4);
/// `GDRPEER_IOCTL_DMA_MAP`.
pub const IOCTL_DMA_MAP: Opcode = opcode::read_write::<DmaMap>(IOCTL_MAGIC, 5);
/// `GDRPEER_IOCTL_STATS`.
pub const IOCTL_STATS: Opcode = opcode::read_write::<Stats>(IOCTL_MAGIC, 6);
/// `GDRPEER_IOCTL_EXPORT_DMABUF` (ABI 1.4).
pub const IOCTL_EXPORT_DMABUF: Opcode = opcode::read_write::<ExportDmabuf>(IOCTL_MAGIC, 7);

#[cfg(test)]
mod tests {
    use super::probe::{check_against_header, Row};
    use super::*;
    use std::mem::offset_of;

    /// The size of the field that `get` picks out of a `T`.
    fn field_size<T, F>(_get: fn(&T) -> &F) -> usize {
        size_of::<F>()
    }

    /// The table of everything the header defines: each struct's size, each
    /// field's offset and size, each constant and ioctl number.
    fn table() -> Vec<Row> {
        let mut rows = Vec::new();
        let mut row = |c: String, rust: u64| rows.push(Row { c, rust });
        // Lists every field: the pattern without `..` does not compile when one is missing.
        macro_rules! layout {
            ($rust:ident = $c:ident { $($f:ident),* $(,)? }) => {{
                let $rust { $($f: _),* } = $rust::default();
                let c = stringify!($c);
                row(format!("sizeof(struct {c})"), size_of::<$rust>() as u64);
                $(
                    let f = stringify!($f);
                    row(format!("offsetof(struct {c}, {f})"), offset_of!($rust, $f) as u64);
                    row(
                        format!("sizeof(((struct {c} *)0)->{f})"),
                        field_size(|s: &$rust| &s.$f) as u64,
                    );
                )*
            }};
        }
        macro_rules! constants {
            ($($c:ident = $rust:expr),* $(,)?) => {$(
                row(stringify!($c).to_string(), u64::from($rust));
            )*};
        }
        constants! {
            GDRPEER_ABI_MAJOR = ABI_MAJOR,
            GDRPEER_ABI_MINOR = ABI_MINOR,
            GDRPEER_ABI_VERSION = ABI_VERSION,
            GDRPEER_IOCTL_MAGIC = IOCTL_MAGIC,
            GDRPEER_PIN_PERSISTENT = PIN_PERSISTENT,
            GDRPEER_PIN_NOCACHE = PIN_NOCACHE,
            GDRPEER_PIN_FLAGS = PIN_FLAGS,
            GDRPEER_EXPORT_PERSISTENT = EXPORT_PERSISTENT,
            GDRPEER_EXPORT_FLAGS = EXPORT_FLAGS,
            GDRPEER_STATE_VALID = STATE_VALID,
            GDRPEER_STATE_REVOKED = STATE_REVOKED,
            GDRPEER_MMAP_HANDLE_SHIFT = MMAP_HANDLE_SHIFT,
            GDRPEER_MMAP_OFFSET_MASK = MMAP_OFFSET_MASK,
            GDRPEER_EVENT_REVOKED = EVENT_REVOKED,
            GDRPEER_IOCTL_GET_VERSION = IOCTL_GET_VERSION,
            GDRPEER_IOCTL_PIN = IOCTL_PIN,
            GDRPEER_IOCTL_UNPIN = IOCTL_UNPIN,
            GDRPEER_IOCTL_GET_INFO = IOCTL_GET_INFO,
            GDRPEER_IOCTL_GET_PAGES = IOCTL_GET_PAGES,
            GDRPEER_IOCTL_DMA_MAP = IOCTL_DMA_MAP,
            GDRPEER_IOCTL_STATS = IOCTL_STATS,
            GDRPEER_IOCTL_EXPORT_DMABUF = IOCTL_EXPORT_DMABUF,
        }
        row(
            "GDRPEER_MMAP_OFFSET(3, 0x5000)".to_string(),
            mmap_offset(3, 0x5000),
        );
        layout!(
            Version = gdrpeer_version {
                size,
                abi_version,
                nv_page_table_version,
                nv_dma_mapping_version,
            }
        );
        layout!(
            Pin = gdrpeer_pin {
                size,
                flags,
                va,
                len,
                handle,
                aligned_va,
                offset,
                page_count,
                page_size,
            }
        );
        layout!(Unpin = gdrpeer_unpin { size, pad, handle });
        layout!(
            Info = gdrpeer_info {
                size,
                state,
                handle,
                aligned_va,
                offset,
                page_count,
                page_size,
                region_va,
                region_len,
                flags,
                pad,
            }
        );
        layout!(
            GetPages = gdrpeer_get_pages {
                size,
                count,
                handle,
                addrs
            }
        );
        layout!(
            DmaMap = gdrpeer_dma_map {
                size,
                count,
                handle,
                addrs,
                pci_domain,
                pci_bus,
                pci_devfn,
                pad,
            }
        );
        layout!(
            CacheStats = gdrpeer_cache_stats {
                regions,
                pinned_bytes,
                hits,
                misses,
                evictions_limit,
                evictions_enomem,
                callbacks,
                deferred,
            }
        );
        layout!(
            Stats = gdrpeer_stats {
                size,
                pad,
                handles,
                file,
                global
            }
        );
        layout!(
            ExportDmabuf = gdrpeer_export_dmabuf {
                size,
                flags,
                handle,
                va,
                len,
                fd,
                page_count,
                aligned_va,
                offset,
                dmabuf_size,
            }
        );
        // `type` is a Rust keyword: the field is `type_`.
        let Event {
            handle: _,
            type_: _,
            pad: _,
        } = Event::default();
        row(
            "sizeof(struct gdrpeer_event)".into(),
            size_of::<Event>() as u64,
        );
        for (c, rust) in [
            ("handle", offset_of!(Event, handle)),
            ("type", offset_of!(Event, type_)),
            ("pad", offset_of!(Event, pad)),
        ] {
            row(format!("offsetof(struct gdrpeer_event, {c})"), rust as u64);
        }
        rows
    }

    #[test]
    fn uapi_matches_c_header() {
        check_against_header("uapi/gdrpeer.h", &table());
    }
}

/// The header check the uAPI modules share (tests only).
#[cfg(test)]
pub(crate) mod probe {
    use std::{path::Path, process::Command};

    /// One check: a C expression over the header and the value Rust has for it.
    pub struct Row {
        pub c: String,
        pub rust: u64,
    }

    /// Compiles a C program that prints every expression of `rows` against
    /// `header` (under include/) and compares its output with the Rust values.
    pub fn check_against_header(header: &str, rows: &[Row]) {
        let include = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../include");
        let tag = header.replace(['/', '.'], "-");
        let dir = std::env::temp_dir().join(format!("gdrpeer-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let src = dir.join("probe.c");
        let prints: String = rows.iter().map(|r| format!("\tP({});\n", r.c)).collect();
        std::fs::write(
            &src,
            format!(
                "#include <stddef.h>\n\
                 #include <stdio.h>\n\
                 #include <{header}>\n\
                 #define P(e) printf(\"%llu\\n\", (unsigned long long)(e))\n\
                 int main(void)\n{{\n{prints}\treturn 0;\n}}\n"
            ),
        )
        .unwrap();
        let exe = dir.join("probe");
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
        let status = Command::new(cc)
            .arg("-I")
            .arg(&include)
            .arg(&src)
            .arg("-o")
            .arg(&exe)
            .status()
            .expect("a C compiler is needed to check the uAPI against its header");
        assert!(status.success(), "{header} does not compile");
        let out = String::from_utf8(Command::new(&exe).output().unwrap().stdout).unwrap();
        std::fs::remove_dir_all(&dir).ok();

        let c: Vec<u64> = out.lines().map(|l| l.parse().unwrap()).collect();
        assert_eq!(c.len(), rows.len(), "the probe printed a value per row");
        let wrong: Vec<String> = rows
            .iter()
            .zip(c)
            .filter(|(r, c)| r.rust != *c)
            .map(|(r, c)| format!("{}: C {c}, Rust {}", r.c, r.rust))
            .collect();
        assert!(
            wrong.is_empty(),
            "the uAPI differs from {header}:\n{}",
            wrong.join("\n")
        );
    }
}
