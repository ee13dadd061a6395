// SPDX-License-Identifier: GPL-2.0

//! PFN mappings of device memory into user space: the one place where gdrpeer touches a
//! `vm_area_struct`, its `vm_operations_struct` and a page fault.
//!
//! The 7.2 kernel crate hands a driver's `mmap` a [`VmaNew`] but wraps neither `VM_PFNMAP`
//! nor `vm_ops` (its `VmaMixedMap` inserts `struct page`s only). This file adds what a mapping
//! of BAR pages needs:
//!
//! - [`install`] makes a new vma a write-combining (or cached) `VM_PFNMAP | VM_IO | VM_DONTEXPAND |
//!   VM_DONTDUMP | VM_DONTCOPY` mapping served by a [`PfnMapper`], which the vma holds a
//!   reference to (`vm_private_data`; `open` takes one for each split or moved copy, `close`
//!   drops it, so the mapper goes with the last vma of the mapping);
//! - [`Fault`] is one page fault: its page offset in the file, and [`Fault::insert_pfn`];
//! - [`WcReservation`] reserves write-combining as the memory type of the pages a
//!   write-combining mapping will insert (x86's PAT would make them uncached otherwise);
//! - [`unmap_file_pages`] zaps every user mapping of a file's page range, in every process
//!   (`unmap_mapping_pages`: the file's `i_mmap_rwsem`, never `mmap_lock`).
//!
//! Pages are inserted only on fault, so a zapped range is never re-established behind the
//! mapper's back: the next fault asks it again.
//!
//! TODO: goes when the kernel crate wraps `VM_PFNMAP` vmas and `vm_ops`.
//!
//! [`VmaNew`]: kernel::mm::virt::VmaNew

use core::marker::PhantomData;
use kernel::{
    bindings,
    error::to_result,
    ffi::c_void,
    fs::File,
    mm::virt::VmaNew,
    prelude::*,
    sync::{Arc, ArcBorrow},
};

use crate::sys::helpers;

/// What a fault handler answers: a `vm_fault_t`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FaultResult(bindings::vm_fault_t);

impl FaultResult {
    /// No page here: the faulting thread gets SIGBUS.
    pub(crate) const SIGBUS: Self = FaultResult(bindings::vm_fault_reason_VM_FAULT_SIGBUS);
}

/// The owner of a PFN mapping: serves its faults.
pub(crate) trait PfnMapper: Send + Sync + 'static {
    /// Inserts the page `fault` asks for ([`Fault::insert_pfn`]) or refuses it
    /// ([`FaultResult::SIGBUS`]). Runs with the process's `mmap_lock` (or the vma's lock)
    /// held for reading, and may sleep.
    fn fault(&self, fault: &Fault<'_>) -> FaultResult;

    /// The last vma of the mapping goes (its `close`), before the mapper is dropped: called
    /// once, through a shared reference, from under the process's `mmap_lock`.
    fn release(&self) {}
}

/// One page fault in a vma of a [`PfnMapper`].
///
/// # Invariants
///
/// `vmf` is the `struct vm_fault` of a fault in progress on a vma set up by [`install`], valid
/// for `'a`.
pub(crate) struct Fault<'a> {
    vmf: *mut bindings::vm_fault,
    _fault: PhantomData<&'a bindings::vm_fault>,
}

impl Fault<'_> {
    /// The faulting page's offset in the file, in `PAGE_SIZE` units (`vmf->pgoff`).
    pub(crate) fn pgoff(&self) -> usize {
        // SAFETY: `vmf` is a live fault (type invariant).
        unsafe { helpers::gdrpeer_vmf_pgoff(self.vmf) as usize }
    }

    /// Maps the faulting address to page frame `pfn` with the vma's protection
    /// ([`Caching`]), `vmf_insert_pfn_prot`.
    ///
    /// # Safety
    ///
    /// `pfn` is a frame of device memory (no `struct page`) that the mapper may give this
    /// process, and the mapper zaps the entry ([`unmap_file_pages`]) before the frame goes
    /// back to its owner.
    pub(crate) unsafe fn insert_pfn(&self, pfn: u64) -> FaultResult {
        // SAFETY: `vmf` is a live fault (type invariant) on a `VM_PFNMAP` vma (`install`); the
        // caller answers for the frame (the function's contract).
        FaultResult(unsafe { helpers::gdrpeer_vmf_insert_pfn(self.vmf, pfn as usize) })
    }
}

/// The file offset a new mapping starts at, in `PAGE_SIZE` units (`vma->vm_pgoff`).
pub(crate) fn pgoff(vma: &VmaNew) -> usize {
    // SAFETY: `vma` is a vma being set up, valid while borrowed; `vm_pgoff` is a plain field
    // that nobody writes meanwhile (`mmap_lock` is held for writing).
    unsafe { (*vma.as_ptr()).vm_pgoff }
}

/// Whether the new mapping is `MAP_SHARED`: `VM_MAYSHARE`, which mmap(2) sets for every
/// shared mapping, where `VM_SHARED` is left out of one on a file not open for writing.
pub(crate) fn is_shared(vma: &VmaNew) -> bool {
    // SAFETY: `vma` is a vma being set up, valid while borrowed; the helper reads its
    // flags, which nobody writes meanwhile (`mmap_lock` is held for writing).
    unsafe { helpers::gdrpeer_vma_is_shared(vma.as_ptr()) }
}

/// The vm_ops of mappings served by `T`.
struct Ops<T>(PhantomData<T>);

impl<T: PfnMapper> Ops<T> {
    const OPS: bindings::vm_operations_struct = bindings::vm_operations_struct {
        open: Some(Self::open),
        close: Some(Self::close),
        fault: Some(Self::fault),
        ..pin_init::zeroed()
    };

    /// A copy of a vma (split, mremap): it takes its own reference to the mapper.
    ///
    /// # Safety
    ///
    /// Only the kernel calls it, on a vma whose `vm_private_data` a vma of [`install`] holds.
    unsafe extern "C" fn open(vma: *mut bindings::vm_area_struct) {
        // SAFETY: the kernel passes a live vma; `vm_private_data` came from `Arc::into_raw` in
        // `install` and the vma it was copied from still holds that reference.
        let mapper = unsafe { ArcBorrow::<T>::from_raw((*vma).vm_private_data.cast::<T>()) };
        let copy: Arc<T> = mapper.into();
        // The new vma's reference, dropped by its `close`.
        let _ = Arc::into_raw(copy);
    }

    /// A vma goes: it drops its reference; the last one releases the mapper
    /// ([`PfnMapper::release`]) and drops it.
    ///
    /// # Safety
    ///
    /// Only the kernel calls it, once per vma set up by [`install`] or copied by `open`.
    unsafe extern "C" fn close(vma: *mut bindings::vm_area_struct) {
        // SAFETY: the kernel passes a live vma; its `vm_private_data` is a reference from
        // `install` or `open` that only this call consumes.
        let mapper = unsafe { Arc::<T>::from_raw((*vma).vm_private_data.cast::<T>()) };
        // References are only taken from a live vma's (`open`): none comes after the last.
        if let Some(last) = Arc::into_unique_or_drop(mapper) {
            last.release();
        }
    }

    /// # Safety
    ///
    /// Only the kernel calls it, for a fault on a vma set up by [`install`].
    unsafe extern "C" fn fault(vmf: *mut bindings::vm_fault) -> bindings::vm_fault_t {
        // SAFETY: the kernel passes a live fault; its vma holds a reference to the mapper in
        // `vm_private_data` for as long as the fault runs (the vma cannot close meanwhile).
        let mapper = unsafe {
            let vma = helpers::gdrpeer_vmf_vma(vmf);
            ArcBorrow::<T>::from_raw((*vma).vm_private_data.cast::<T>())
        };
        // INVARIANT: `vmf` is this fault's, on a vma of `install`.
        let fault = Fault {
            vmf,
            _fault: PhantomData,
        };
        mapper.fault(&fault).0
    }
}

/// How the CPU caches a mapping.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Caching {
    /// Write-combining: uncached, writes merged (device memory behind a BAR).
    WriteCombining,
    /// Cached, for memory the CPU reaches coherently.
    Cached,
}

/// Makes the new `vma` a PFN mapping (`VM_PFNMAP | VM_IO | VM_DONTEXPAND | VM_DONTDUMP |
/// VM_DONTCOPY`) of the given caching whose faults `mapper` serves. Nothing is mapped until
/// a fault. Call it last in `mmap`: a failing `mmap` must not have installed a mapper.
pub(crate) fn install<T: PfnMapper>(vma: &VmaNew, caching: Caching, mapper: Arc<T>) {
    let vma = vma.as_ptr();
    // SAFETY: `vma` is being set up under `mmap_lock` held for writing: nobody else reads or
    // writes its fields. The reference in `vm_private_data` is dropped by `close`, which the
    // kernel calls for every vma that `mmap` set up successfully; `Ops::<T>::OPS` is a
    // constant, so `'static`.
    unsafe {
        helpers::gdrpeer_vma_set_pfnmap(vma, caching == Caching::WriteCombining);
        (*vma).vm_ops = &Ops::<T>::OPS;
        (*vma).vm_private_data = Arc::into_raw(mapper).cast_mut().cast::<c_void>();
    }
}

/// Write-combining reserved as the CPU memory type of device memory pages, for as long as
/// this lives (`arch_io_reserve_memtype_wc`), as `io_remap_pfn_range` reserves it for a
/// mapping made at once. On x86 with PAT a page inserted at fault takes the memory type
/// reserved for its frame, uncached-minus where none is: without this a write-combining
/// mapping of BAR pages would be uncached. Where memory types are not tracked it holds
/// nothing.
///
/// # Invariants
///
/// The first `reserved` of the runs (physical address, length), `first` then `more`, were
/// reserved by this; each is freed once, on drop.
pub(crate) struct WcReservation {
    /// The first run, kept inline: a window of contiguous BAR pages, the usual one, is one
    /// run and needs no allocation.
    first: Option<(u64, u64)>,
    more: KVVec<(u64, u64)>,
    reserved: usize,
}

impl WcReservation {
    /// Reserves write-combining for the pages of `page_size` bytes at the physical
    /// addresses `pages`, contiguous runs at once. -EBUSY where a memory type that
    /// write-combining cannot share (write-back) is reserved for one of them.
    pub(crate) fn new(pages: &[u64], page_size: u64) -> Result<Self> {
        let (mut first, mut more) = (None::<(u64, u64)>, KVVec::<(u64, u64)>::new());
        for &page in pages {
            if let Some((start, len)) = more.last_mut().or(first.as_mut()) {
                if *start + *len == page {
                    *len += page_size;
                    continue;
                }
            }
            if first.is_none() {
                first = Some((page, page_size));
            } else {
                more.push((page, page_size), GFP_KERNEL)?;
            }
        }
        // INVARIANT: `reserved` counts the runs reserved below; a failure frees them on drop.
        let mut this = WcReservation {
            first,
            more,
            reserved: 0,
        };
        let runs = Iterator::chain(this.first.iter(), this.more.iter());
        for &(start, len) in runs {
            // SAFETY: any physical range may be asked for; the reservation is ours.
            to_result(unsafe { helpers::gdrpeer_io_reserve_wc(start, len) })?;
            this.reserved += 1;
        }
        Ok(this)
    }

    /// The runs, in order.
    fn runs(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        Iterator::chain(self.first.into_iter(), self.more.iter().copied())
    }
}

impl Drop for WcReservation {
    fn drop(&mut self) {
        for (start, len) in self.runs().take(self.reserved) {
            // SAFETY: reserved by `new` and freed once (type invariant).
            unsafe { helpers::gdrpeer_io_free_wc(start, len) };
        }
    }
}

/// Zaps the pages `pgoff..pgoff + pages` (`PAGE_SIZE` units, file offsets) of every user
/// mapping of `file`'s address space, in every process; the next access faults.
///
/// Takes the address space's `i_mmap_rwsem` for reading and page-table locks; sleeps. Never
/// takes a process's `mmap_lock`.
pub(crate) fn unmap_file_pages(file: &File, pgoff: usize, pages: usize) {
    // SAFETY: `file` is a live file (the reference keeps it), so its `f_mapping` is a live
    // address space; `unmap_mapping_pages` accepts any range.
    unsafe { bindings::unmap_mapping_pages((*file.as_ptr()).f_mapping, pgoff, pages, false) };
}
