// SPDX-License-Identifier: GPL-2.0

//! The desktop nv-p2p signature set: get_pages and put_pages take the (zero) P2P and VA-space
//! tokens, the DMA functions take the peer's `struct pci_dev`, a DMA mapping lists one address
//! per 64 KiB page, and the header may offer persistent pins (`cfg(nv_p2p_persistent)`).
//!
//! Selected by `crate::nv_p2p` without `cfg(nv_p2p_tegra)`; `tegra.rs` defines the same
//! functions for the Tegra header.

use kernel::{ffi::c_void, pci, prelude::*};

use super::{bindings, FreeCallback, Tokens, DMA_MAPPING_MAJOR, DMA_MAPPING_VERSION};
use crate::iova::GpuUuid;
use crate::{range::GpuRange, sys};

// The fields gdrpeer reads sit where the 1.x ABI puts them in the header it is built
// against: a 2.x table only appends `flags`, which gdrpeer never reads, so one build reads
// both. tests/abi/nvabi.py checks the same facts across driver releases.
const _: () = {
    use bindings::{nvidia_p2p_dma_mapping as Map, nvidia_p2p_page_table as Table};
    use core::mem::offset_of;
    assert!(offset_of!(Table, version) == 0 && offset_of!(Table, page_size) == 4);
    assert!(offset_of!(Table, pages) == 8 && offset_of!(Table, entries) == 16);
    assert!(offset_of!(bindings::nvidia_p2p_page, physical_address) == 0);
    assert!(offset_of!(Map, version) == 0 && offset_of!(Map, page_size_type) == 4);
    assert!(offset_of!(Map, entries) == 8 && offset_of!(Map, dma_addresses) == 16);
};

/// Page-table majors gdrpeer understands: 1.x (drivers up to 570) and 2.x (580 on, with the
/// trailing flags word). A minor above the one we know only appends fields.
const PAGE_TABLE_MAJORS: [u32; 2] = [1, 2];

/// Checks that a page table returned by NVIDIA is one gdrpeer can read.
///
/// Rejects unknown majors and any page size but 64 KiB, and checks that the table covers
/// `range` exactly; says why in the kernel log.
pub(super) fn check_table(pt: &bindings::nvidia_p2p_page_table, range: &GpuRange) -> Result {
    let major = pt.version >> 16;
    if !PAGE_TABLE_MAJORS.contains(&major) {
        pr_err!(
            "nv-p2p page table version {:#010x} is not supported (majors 1 and 2 are)\n",
            pt.version
        );
        return Err(sys::eopnotsupp());
    }
    if pt.page_size != bindings::nvidia_p2p_page_size_type_NVIDIA_P2P_PAGE_SIZE_64KB {
        pr_err!("nv-p2p page size {} is not 64 KiB\n", pt.page_size);
        return Err(sys::eopnotsupp());
    }
    if u64::from(pt.entries) != range.pages() || pt.pages.is_null() {
        pr_err!(
            "nv-p2p page table has {} entries for {} pages\n",
            pt.entries,
            range.pages()
        );
        return Err(EIO);
    }
    Ok(())
}

/// The GPU a table's pages are on: its UUID (all zeros where the table names none).
///
/// # Safety
///
/// `table` is a live table that passed [`check_table`].
pub(super) unsafe fn table_gpu(table: &bindings::nvidia_p2p_page_table) -> GpuUuid {
    let mut uuid = GpuUuid::default();
    if !table.gpu_uuid.is_null() {
        // SAFETY: a live table's non-NULL `gpu_uuid` points to the GPU's 16-byte UUID (the
        // driver's header, `NVIDIA_P2P_GPU_UUID_LEN`), alive with the table.
        let src = unsafe { core::slice::from_raw_parts(table.gpu_uuid, uuid.0.len()) };
        uuid.0.copy_from_slice(src);
    }
    uuid
}

/// Where a 2.x table keeps its `flags` word: after `gpu_uuid`, which the 1.x layout ends with.
const TABLE_FLAGS_OFFSET: usize = 32;
const _: () = assert!(
    core::mem::offset_of!(bindings::nvidia_p2p_page_table, gpu_uuid) + 8 == TABLE_FLAGS_OFFSET
);

/// Whether a table says the CPU may cache its pages (`NVIDIA_P2P_PAGE_TABLE_FLAGS_CPU_CACHEABLE`
/// in a 2.x table's `flags`; 1.x tables have none). Read at the 2.x offset whichever header
/// gdrpeer is built against.
///
/// # Safety
///
/// `table` is a live table that passed [`check_table`].
pub(super) unsafe fn table_cpu_cacheable(table: *const bindings::nvidia_p2p_page_table) -> bool {
    // SAFETY: the table is live (the function's contract).
    let major = unsafe { (*table).version } >> 16;
    if major < 2 {
        return false;
    }
    // SAFETY: a 2.x table NVIDIA allocated holds the `flags` word at this offset (the
    // driver's header; tests/abi checks it across releases).
    let flags = unsafe {
        table
            .cast::<u8>()
            .add(TABLE_FLAGS_OFFSET)
            .cast::<u32>()
            .read()
    };
    flags & CPU_CACHEABLE != 0
}

/// `NVIDIA_P2P_PAGE_TABLE_FLAGS_CPU_CACHEABLE`, which headers before 2.0 lack.
const CPU_CACHEABLE: u32 = 1;

/// Checks that a DMA mapping returned by NVIDIA is one gdrpeer can read; returns how many
/// 64 KiB pages it maps.
pub(super) fn check_dma_mapping(
    map: &bindings::nvidia_p2p_dma_mapping,
    range: &GpuRange,
) -> Result<usize> {
    if map.version >> 16 != DMA_MAPPING_MAJOR || map.version & 0xffff < DMA_MAPPING_VERSION & 0xffff
    {
        pr_err!(
            "nv-p2p DMA mapping version {:#010x} is not compatible with {:#010x}\n",
            map.version,
            DMA_MAPPING_VERSION
        );
        return Err(sys::eopnotsupp());
    }
    if map.page_size_type != bindings::nvidia_p2p_page_size_type_NVIDIA_P2P_PAGE_SIZE_64KB {
        pr_err!(
            "nv-p2p DMA mapping page size {} is not 64 KiB\n",
            map.page_size_type
        );
        return Err(sys::eopnotsupp());
    }
    if u64::from(map.entries) != range.pages() || map.dma_addresses.is_null() {
        pr_err!(
            "nv-p2p DMA mapping has {} entries for {} pages\n",
            map.entries,
            range.pages()
        );
        return Err(EIO);
    }
    Ok(map.entries as usize)
}

/// Appends the DMA address of each of the `n` pages of `map` to `out`, whose capacity is
/// reserved.
///
/// # Safety
///
/// `map` is a live mapping (neither unmapped nor freed by the free callback) that passed
/// [`check_dma_mapping`], which returned `n`: its `dma_addresses` array then holds `n`
/// elements that stay valid for this call.
pub(super) unsafe fn copy_dma_addresses(
    map: &bindings::nvidia_p2p_dma_mapping,
    n: usize,
    out: &mut KVVec<u64>,
) -> Result {
    // SAFETY: `dma_addresses` is non-NULL with `entries` (`n`) elements (check_dma_mapping)
    // that live as long as the mapping, which is live for this call (the function's contract).
    let src = unsafe { core::slice::from_raw_parts(map.dma_addresses, n) };
    // The capacity is reserved: this does not allocate.
    Ok(out.extend_from_slice(src, GFP_NOWAIT)?)
}

/// Appends the bus address of each of the `n` pages of `table` to `out`, whose capacity is
/// reserved.
///
/// # Safety
///
/// `table` is a live table (neither given back nor freed by the free callback) that passed
/// [`check_table`] and has `n` entries: its `pages` array then holds `n` pointers to page
/// descriptors that stay valid for this call.
pub(super) unsafe fn copy_bus_addresses(
    table: &bindings::nvidia_p2p_page_table,
    n: usize,
    out: &mut KVVec<u64>,
) -> Result {
    // SAFETY: `pages` is non-NULL with `entries` (`n`) valid entries (check_table), and
    // `entries` cannot change while the table is live (the function's contract).
    let pages = unsafe { core::slice::from_raw_parts(table.pages, n) };
    for &page in pages {
        // SAFETY: each entry of a live table points to a page descriptor that NVIDIA frees
        // only with the table, which is live for this call (the function's contract).
        let pa = unsafe { (*page).physical_address };
        // The capacity is reserved: this does not allocate.
        out.push(pa, GFP_NOWAIT)?;
    }
    Ok(())
}

/// `nvidia_p2p_get_pages` of `len` bytes at `start` in the VA space `tokens` name (the
/// calling process's for the default tokens).
///
/// # Safety
///
/// As the C function requires: `start` and `len` are 64 KiB aligned, `table` may be written,
/// and `data` stays valid until `callback` consumes it or put_pages succeeds.
pub(super) unsafe fn raw_get_pages(
    tokens: Tokens,
    start: u64,
    len: u64,
    table: *mut *mut bindings::nvidia_p2p_page_table,
    callback: FreeCallback,
    data: *mut c_void,
) -> c_int {
    // SAFETY: the function's contract.
    unsafe {
        bindings::nvidia_p2p_get_pages(
            tokens.p2p_token,
            tokens.va_space,
            start,
            len,
            table,
            callback,
            data,
        )
    }
}

/// `nvidia_p2p_put_pages` of the table pinned at `start` with `tokens`.
///
/// # Safety
///
/// `table` came from [`raw_get_pages`] for `start` and `tokens` in the calling process, is not
/// given back yet, and is given back once.
pub(super) unsafe fn raw_put_pages(
    tokens: Tokens,
    start: u64,
    table: *mut bindings::nvidia_p2p_page_table,
) -> c_int {
    // SAFETY: the function's contract.
    unsafe { bindings::nvidia_p2p_put_pages(tokens.p2p_token, tokens.va_space, start, table) }
}

/// `nvidia_p2p_dma_map_pages` of `table` for `peer`, into `map`.
///
/// # Safety
///
/// `table` is live: from [`raw_get_pages`], neither given back nor freed by a callback.
pub(super) unsafe fn raw_dma_map(
    peer: &pci::Device,
    table: *mut bindings::nvidia_p2p_page_table,
    map: &mut *mut bindings::nvidia_p2p_dma_mapping,
) -> c_int {
    // SAFETY: the function's contract; `peer` is a live PCI device.
    unsafe { bindings::nvidia_p2p_dma_map_pages(sys::pci_dev_ptr(peer), table, map) }
}

/// `nvidia_p2p_dma_unmap_pages` of `map`, made by [`raw_dma_map`] for `peer` and `table`.
///
/// # Safety
///
/// `table` and `map` are live (no callback freed them) and `map` is unmapped once.
pub(super) unsafe fn raw_dma_unmap(
    peer: &pci::Device,
    table: *mut bindings::nvidia_p2p_page_table,
    map: *mut bindings::nvidia_p2p_dma_mapping,
) -> c_int {
    // SAFETY: the function's contract; `peer` is a live PCI device.
    unsafe { bindings::nvidia_p2p_dma_unmap_pages(sys::pci_dev_ptr(peer), table, map) }
}

/// `nvidia_p2p_get_pages_persistent` of `len` bytes at `start` in the calling process.
///
/// # Safety
///
/// As the C function requires: `start` and `len` are 64 KiB aligned and `table` may be
/// written.
#[cfg(nv_p2p_persistent)]
pub(super) unsafe fn raw_get_pages_persistent(
    start: u64,
    len: u64,
    table: *mut *mut bindings::nvidia_p2p_page_table,
) -> c_int {
    // SAFETY: the function's contract; flags 0 ask for nothing more.
    unsafe { bindings::nvidia_p2p_get_pages_persistent(start, len, table, 0) }
}

/// The header has no persistent-pin API: -EOPNOTSUPP, and `table` is left alone.
///
/// # Safety
///
/// `start` and `len` are 64 KiB aligned and `table` may be written: the persistent-pin
/// build's contract, which callers meet for both builds. This body touches nothing.
#[cfg(not(nv_p2p_persistent))]
pub(super) unsafe fn raw_get_pages_persistent(
    _start: u64,
    _len: u64,
    _table: *mut *mut bindings::nvidia_p2p_page_table,
) -> c_int {
    sys::eopnotsupp().to_errno()
}

/// `nvidia_p2p_put_pages_persistent` of the table pinned at `start`.
///
/// # Safety
///
/// `table` came from [`raw_get_pages_persistent`] for `start`, is not given back yet, and is
/// given back once.
#[cfg(nv_p2p_persistent)]
pub(super) unsafe fn raw_put_pages_persistent(
    start: u64,
    table: *mut bindings::nvidia_p2p_page_table,
) -> c_int {
    // SAFETY: the function's contract; flags 0 ask for nothing more.
    unsafe { bindings::nvidia_p2p_put_pages_persistent(start, table, 0) }
}

/// The header has no persistent-pin API: -EOPNOTSUPP (never reached, as no persistent pin is
/// ever made).
///
/// # Safety
///
/// `table` came from [`raw_get_pages_persistent`] for `start`, is not given back yet, and is
/// given back once: the persistent-pin build's contract, which callers meet for both builds.
/// This body touches nothing.
#[cfg(not(nv_p2p_persistent))]
pub(super) unsafe fn raw_put_pages_persistent(
    _start: u64,
    _table: *mut bindings::nvidia_p2p_page_table,
) -> c_int {
    sys::eopnotsupp().to_errno()
}
