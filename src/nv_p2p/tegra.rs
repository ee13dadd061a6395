// SPDX-License-Identifier: GPL-2.0

//! The Tegra nv-p2p signature set (GPUDirect RDMA guide 4.4.2): get_pages takes no tokens,
//! put_pages only the table and runs the free callback before it returns, the DMA functions
//! take the peer's `struct device` and return `dma_map_sg()` segments, and there is no
//! persistent-pin API. What that means for gdrpeer is in `crate::nv_p2p`'s documentation.
//!
//! Selected by `crate::nv_p2p` with `cfg(nv_p2p_tegra)`; `desktop.rs` defines the same
//! functions for the desktop header.

use kernel::{ffi::c_void, pci, prelude::*};

use super::{bindings, FreeCallback, Tokens, DMA_MAPPING_MAJOR, DMA_MAPPING_VERSION};
use crate::iova::GpuUuid;
use crate::{
    range::{GpuRange, GPU_PAGE_SIZE},
    sys,
};

// The fields gdrpeer reads sit where the Tegra driver's header (64-bit) puts them.
const _: () = {
    use bindings::{nvidia_p2p_dma_mapping as Map, nvidia_p2p_page_table as Table};
    use core::mem::offset_of;
    assert!(offset_of!(Table, version) == 0 && offset_of!(Table, page_size) == 4);
    assert!(offset_of!(Table, entries) == 16 && offset_of!(Table, pages) == 24);
    assert!(offset_of!(Map, version) == 0 && offset_of!(Map, hw_address) == 8);
    assert!(offset_of!(Map, hw_len) == 16 && offset_of!(Map, entries) == 24);
};

/// Tegra tables are never CPU-cacheable GPU memory: [`check_table`] refuses them all.
///
/// # Safety
///
/// `table` is a live table that passed [`check_table`]: the desktop set's contract, which the
/// pin state machine meets for both sets. This body reads nothing.
pub(super) unsafe fn table_cpu_cacheable(_table: *const bindings::nvidia_p2p_page_table) -> bool {
    false
}

/// The GPU of a Tegra table: there is one, named by no UUID (never reached: [`check_table`]
/// refuses every Tegra table).
///
/// # Safety
///
/// `table` is a live table that passed [`check_table`]: the desktop set's contract. This body
/// reads nothing.
pub(super) unsafe fn table_gpu(_table: &bindings::nvidia_p2p_page_table) -> GpuUuid {
    GpuUuid::default()
}

/// Refuses the page table: a Tegra table lists 4 KiB pages of system memory, whose addresses
/// gdrpeer cannot read (`crate::nv_p2p`'s documentation); says so in the kernel log.
pub(super) fn check_table(pt: &bindings::nvidia_p2p_page_table, _range: &GpuRange) -> Result {
    pr_err!(
        "nv-p2p Tegra page table of {} pages of system memory refused: gdrpeer pins only 64 KiB GPU BAR pages\n",
        pt.entries
    );
    Err(sys::eopnotsupp())
}

/// Checks the version and the segment arrays; [`copy_dma_addresses`] checks that the
/// segments are made of 64 KiB pages. Returns how many 64 KiB pages the range has.
pub(super) fn check_dma_mapping(
    map: &bindings::nvidia_p2p_dma_mapping,
    range: &GpuRange,
) -> Result<usize> {
    // The header's minor is 0, so any minor of its major is compatible.
    const _: () = assert!(DMA_MAPPING_VERSION & 0xffff == 0);
    if map.version >> 16 != DMA_MAPPING_MAJOR {
        pr_err!(
            "nv-p2p DMA mapping version {:#010x} is not compatible with {:#010x}\n",
            map.version,
            DMA_MAPPING_VERSION
        );
        return Err(sys::eopnotsupp());
    }
    if map.entries == 0 || map.hw_address.is_null() || map.hw_len.is_null() {
        pr_err!(
            "nv-p2p DMA mapping has {} segments for {} pages\n",
            map.entries,
            range.pages()
        );
        return Err(EIO);
    }
    Ok(range.pages() as usize)
}

/// Cuts the `dma_map_sg()` segments of `map` into the DMA addresses of its `n` 64 KiB pages,
/// appended to `out`, whose capacity is reserved. Fails with -EOPNOTSUPP when a segment is
/// not 64 KiB aligned and sized or the segments do not make up `n` pages.
///
/// # Safety
///
/// `map` is a live mapping (neither unmapped nor freed by the free callback) that passed
/// [`check_dma_mapping`], which returned `n`: its `hw_address` and `hw_len` arrays are then
/// non-NULL with `entries` elements each, valid for this call.
pub(super) unsafe fn copy_dma_addresses(
    map: &bindings::nvidia_p2p_dma_mapping,
    n: usize,
    out: &mut KVVec<u64>,
) -> Result {
    let segments = map.entries as usize;
    // SAFETY: `hw_address` and `hw_len` are non-NULL (check_dma_mapping) arrays of `entries`
    // elements that live as long as the mapping, which is live for this call (the function's
    // contract).
    let (addrs, lens) = unsafe {
        (
            core::slice::from_raw_parts(map.hw_address, segments),
            core::slice::from_raw_parts(map.hw_len, segments),
        )
    };
    const MASK: u64 = GPU_PAGE_SIZE - 1;
    for (&addr, &len) in addrs.iter().zip(lens) {
        let len = u64::from(len);
        let pages = len != 0 && (addr | len) & MASK == 0;
        let Some(end) = addr.checked_add(len).filter(|_| pages) else {
            pr_err!(
                "nv-p2p DMA segment {:#x}+{:#x} is not made of 64 KiB pages\n",
                addr,
                len
            );
            return Err(sys::eopnotsupp());
        };
        let mut page = addr;
        while page < end && out.len() < n {
            // The capacity is reserved: this does not allocate.
            out.push(page, GFP_NOWAIT)?;
            page += GPU_PAGE_SIZE;
        }
        if page < end {
            break;
        }
    }
    let total = lens
        .iter()
        .fold(0u64, |total, &len| total.saturating_add(len.into()));
    if out.len() != n || total != n as u64 * GPU_PAGE_SIZE {
        pr_err!(
            "nv-p2p DMA mapping of {:#x} bytes for {} pages of 64 KiB\n",
            total,
            n
        );
        return Err(sys::eopnotsupp());
    }
    Ok(())
}

/// Never reached: [`check_table`] refuses every Tegra table, so no caller gets this far.
///
/// # Safety
///
/// `table` is a live table (neither given back nor freed by the free callback) that passed
/// [`check_table`] and has `n` entries: the desktop set's contract, which the pin state
/// machine meets for both sets. This body reads nothing.
pub(super) unsafe fn copy_bus_addresses(
    _table: &bindings::nvidia_p2p_page_table,
    _n: usize,
    _out: &mut KVVec<u64>,
) -> Result {
    Err(sys::eopnotsupp())
}

/// `nvidia_p2p_get_pages` of `len` bytes at `start` in the calling process. Tegra's API has
/// no P2P tokens: any but the default ones get -EOPNOTSUPP.
///
/// # Safety
///
/// As the C function requires: `start` and `len` are 4 KiB aligned (64 KiB alignment is
/// enough), `table` may be written, and `data` stays valid until `callback` consumes it,
/// which it does at the latest inside [`raw_put_pages`].
pub(super) unsafe fn raw_get_pages(
    tokens: Tokens,
    start: u64,
    len: u64,
    table: *mut *mut bindings::nvidia_p2p_page_table,
    callback: FreeCallback,
    data: *mut c_void,
) -> c_int {
    if !tokens.are_default() {
        return sys::eopnotsupp().to_errno();
    }
    // SAFETY: the function's contract; Tegra pins in the calling process's `mm`, which is
    // where `start` lies.
    unsafe { bindings::nvidia_p2p_get_pages(start, len, table, callback, data) }
}

/// `nvidia_p2p_put_pages` of `table`; it runs the free callback before it returns, so the
/// table is freed (by the callback) when this returns. `start` is not needed: the table
/// knows its range.
///
/// # Safety
///
/// `table` came from [`raw_get_pages`], is not given back yet, and is given back once. The
/// caller holds no lock that the free callback takes, as the callback runs inside this call.
pub(super) unsafe fn raw_put_pages(
    _tokens: Tokens,
    _start: u64,
    table: *mut bindings::nvidia_p2p_page_table,
) -> c_int {
    // SAFETY: the function's contract: `table` is live and ours to give back once, and the
    // free callback may run here without deadlocking.
    unsafe { bindings::nvidia_p2p_put_pages(table) }
}

/// `nvidia_p2p_dma_map_pages` of `table` for `&peer->dev`, both directions.
///
/// # Safety
///
/// `table` is live: from [`raw_get_pages`], neither given back nor freed by a callback.
pub(super) unsafe fn raw_dma_map(
    peer: &pci::Device,
    table: *mut bindings::nvidia_p2p_page_table,
    map: &mut *mut bindings::nvidia_p2p_dma_mapping,
) -> c_int {
    // SAFETY: the function's contract; `peer` is a live PCI device, so is its `dev`.
    unsafe {
        bindings::nvidia_p2p_dma_map_pages(
            sys::pci_dev_device_ptr(peer),
            table,
            map,
            kernel::bindings::dma_data_direction_DMA_BIDIRECTIONAL,
        )
    }
}

/// `nvidia_p2p_dma_unmap_pages` of `map`, made by [`raw_dma_map`] for `peer` and `table`;
/// the mapping knows its device and table, so only `map` is passed.
///
/// # Safety
///
/// `map` is live (no callback freed it with its table) and is unmapped once.
pub(super) unsafe fn raw_dma_unmap(
    _peer: &pci::Device,
    _table: *mut bindings::nvidia_p2p_page_table,
    map: *mut bindings::nvidia_p2p_dma_mapping,
) -> c_int {
    // SAFETY: the function's contract: `map` is live and unmapped only here.
    unsafe { bindings::nvidia_p2p_dma_unmap_pages(map) }
}

/// The Tegra header has no persistent-pin API: -EOPNOTSUPP, and `table` is left alone.
///
/// # Safety
///
/// `start` and `len` are 64 KiB aligned and `table` may be written: the desktop set's
/// contract, which the pin state machine meets for both sets. This body touches nothing.
pub(super) unsafe fn raw_get_pages_persistent(
    _start: u64,
    _len: u64,
    _table: *mut *mut bindings::nvidia_p2p_page_table,
) -> c_int {
    sys::eopnotsupp().to_errno()
}

/// The Tegra header has no persistent-pin API: -EOPNOTSUPP (never reached, as no persistent
/// pin is ever made).
///
/// # Safety
///
/// `table` came from [`raw_get_pages_persistent`] for `start`, is not given back yet, and is
/// given back once: the desktop set's contract, which the pin state machine meets for both
/// sets. This body touches nothing.
pub(super) unsafe fn raw_put_pages_persistent(
    _start: u64,
    _table: *mut bindings::nvidia_p2p_page_table,
) -> c_int {
    sys::eopnotsupp().to_errno()
}
