// SPDX-License-Identifier: GPL-2.0

//! What gdrpeer's misc devices need from `struct file_operations` beyond the 7.2 kernel
//! crate's [`MiscDevice`]: `poll`, and whether a read may block.
//!
//! [`MiscDevice`] builds a constant `file_operations` without `poll`. A device that polls
//! holds a [`PollOps`]: the first open copies the file operations the kernel crate made for
//! the device, adds [`Pollable::poll`], and every open file is switched to that copy from its
//! `open` ([`PollOps::install`]), as `misc_open` switches it to the device's own. The copy
//! lives in the device's registration, which outlives every open file (each holds a module
//! reference).
//!
//! TODO: goes when the kernel crate's [`MiscDevice`] gains `poll`.
//!
//! [`MiscDevice`]: kernel::miscdevice::MiscDevice

use core::marker::PhantomData;
use kernel::{
    bindings,
    fs::{file, File, Kiocb},
    miscdevice::MiscDevice,
    sync::{poll::PollTable, SetOnce},
    types::ForeignOwnable,
};

/// A misc device whose files can be polled.
pub(crate) trait Pollable: MiscDevice {
    /// The file's events (`EPOLL*` bits) now; registers the waiter on `table` first.
    fn poll(
        device: <Self::Ptr as ForeignOwnable>::Borrowed<'_>,
        file: &File,
        table: PollTable<'_>,
    ) -> u32;
}

/// The `file_operations` of a [`Pollable`] device: the kernel crate's, plus `poll`.
struct Ops(bindings::file_operations);

// SAFETY: the operations are written once, before they are shared, and only read after; they
// hold function pointers and a NULL owner, which any thread may use.
unsafe impl Send for Ops {}
// SAFETY: a shared `Ops` only lets a thread read the operations, which are written once before
// they are shared (`SetOnce::populate`) and never after; function pointers and a NULL owner
// may be read and called from any thread.
unsafe impl Sync for Ops {}

/// The polled file operations of a device `T`, made on its first open.
pub(crate) struct PollOps<T> {
    ops: SetOnce<Ops>,
    _device: PhantomData<T>,
}

impl<T: Pollable> PollOps<T> {
    /// None made yet.
    pub(crate) const fn new() -> Self {
        PollOps {
            ops: SetOnce::new(),
            _device: PhantomData,
        }
    }

    /// Switches `file`, being opened by `T::open`, to the device's operations with `poll`.
    ///
    /// `self` must outlive every file it is installed on.
    pub(crate) fn install(&self, file: &File) {
        let raw = file.as_ptr();
        if self.ops.as_ref().is_none() {
            // SAFETY: `file` is being opened by the device's `open`: its `f_op` is the
            // device's operations that `misc_open` installed, constant and `'static`.
            let mut ops = unsafe { core::ptr::read((*raw).f_op) };
            ops.poll = Some(poll::<T>);
            // A racing open may populate it first, with the same operations.
            self.ops.populate(Ops(ops));
        }
        let ops = loop {
            match self.ops.as_ref() {
                Some(ops) => break ops,
                // Another open is writing the copy.
                None => core::hint::spin_loop(),
            }
        };
        // SAFETY: the file is not installed in any descriptor table yet: nothing else reads
        // its `f_op`. The copy has the same owner (none) and operations plus `poll`, so the
        // VFS's reference counting of `f_op->owner` is unchanged; it outlives the file (the
        // caller's contract).
        unsafe { (*raw).f_op = &ops.0 };
    }
}

/// `file_operations::poll` for `T`.
///
/// # Safety
///
/// Only the VFS calls it, on an open file of `T` whose `private_data` the kernel crate's
/// misc-device `open` set.
unsafe extern "C" fn poll<T: Pollable>(
    file: *mut bindings::file,
    table: *mut bindings::poll_table,
) -> bindings::__poll_t {
    // SAFETY: the file is open for this call: its `private_data` came from `T::Ptr`'s
    // `into_foreign` in the kernel crate's `open` and is released only by its `release`.
    let device = unsafe { <T::Ptr as ForeignOwnable>::borrow((*file).private_data) };
    // SAFETY: the VFS holds the file for this call, outside any fdget_pos region of ours.
    let file = unsafe { File::from_raw_file(file) };
    // SAFETY: `table` is NULL or a valid poll table for this call.
    let table = unsafe { PollTable::from_raw(table) };
    T::poll(device, file, table)
}

/// Whether a read through `kiocb` may wait: the file is not `O_NONBLOCK`. (`IOCB_NOWAIT` is
/// never set: the files do not claim `FMODE_NOWAIT`, so io_uring reads them from a worker.)
pub(crate) fn may_block<T: ForeignOwnable>(kiocb: &Kiocb<'_, T>) -> bool {
    let raw = kiocb.as_raw();
    // SAFETY: a kiocb of a read in progress and its file are live for the call.
    let file_flags = unsafe { (*(*raw).ki_filp).f_flags };
    file_flags & file::flags::O_NONBLOCK == 0
}
