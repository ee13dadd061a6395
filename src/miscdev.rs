// SPDX-License-Identifier: GPL-2.0

//! Misc devices whose files can be polled and hold the module: the kernel crate's
//! [`kernel::miscdevice`] with an optional [`MiscDevice::poll`] and an `owner`.
//!
//! 7.2's `MiscDevice` builds a constant `file_operations` without `poll` and with no `owner`
//! (7.3's names the owner, still without `poll`). This is that abstraction in the shape the
//! upstream patch takes: the `#[vtable]` trait gains an optional `poll` (`HAS_POLL`), and the
//! table names the module as its `owner`, so that the VFS holds a module reference for every
//! open file (`misc_open`'s `fops_get`, dropped by `__fput` after `release` returns) and an
//! open that races the module's exit fails with -ENODEV. The table is built once, when the
//! device is registered, in the registration itself: the module is known there, and the
//! registration outlives every open file (each holds the module, whose data holds the
//! registration).
//!
//! Only the operations gdrpeer's devices use are here: `open`, `release`, `mmap`,
//! `read_iter`, `unlocked_ioctl` (and `compat_ptr_ioctl`, as the kernel crate sets it) and
//! `poll`. Their files claim `FMODE_NOWAIT`: a read asks [`may_block`] whether it may wait.
//!
//! TODO: goes when the kernel crate's `MiscDevice` gains `poll`.

use crate::sys::helpers;
use core::marker::PhantomData;
use kernel::{
    bindings,
    error::{to_result, VTABLE_DEFAULT_ERROR},
    fs::{file, File, Kiocb},
    iov::IovIterDest,
    mm::virt::VmaNew,
    prelude::*,
    sync::poll::PollTable,
    types::{ForeignOwnable, Opaque},
};

/// The options of a misc device.
#[derive(Copy, Clone)]
pub(crate) struct MiscDeviceOptions {
    /// Its name, under /dev.
    pub(crate) name: &'static CStr,
}

/// A registered misc device's `struct miscdevice` and the `file_operations` it points to.
///
/// `misc` comes first: the `miscdevice` pointer `misc_open` stores in a file's `private_data`
/// is also a pointer to the whole [`MiscDeviceRegistration`].
#[repr(C)]
struct Raw {
    misc: bindings::miscdevice,
    fops: bindings::file_operations,
}

/// A registration of a misc device, with its file operations.
///
/// # Invariants
///
/// - `inner` holds a `miscdevice` registered with `misc_register()`, deregistered exactly
///   once, in `drop`; its `fops` points to `inner`'s own `file_operations`, which
///   [`MiscdeviceVTable::<T>`] built and which are not written again while it is registered.
/// - A file opened through it has, from `T::open`'s return until `T::release`, a
///   `private_data` made by `T::Ptr::into_foreign`.
#[repr(transparent)]
#[pin_data(PinnedDrop)]
pub(crate) struct MiscDeviceRegistration<T> {
    #[pin]
    inner: Opaque<Raw>,
    _t: PhantomData<T>,
}

// SAFETY: `misc_deregister` may be called from another thread than `misc_register`; the
// registration holds nothing tied to a thread.
unsafe impl<T> Send for MiscDeviceRegistration<T> {}
// SAFETY: a shared registration gives no access to its contents in Rust (it has no `&self`
// method); the C side serializes its uses of the `miscdevice` (the misc device list's mutex),
// and the file operations are only read once registered, from any thread.
unsafe impl<T> Sync for MiscDeviceRegistration<T> {}

impl<T: MiscDevice> MiscDeviceRegistration<T> {
    /// Registers a misc device whose files hold `module` while they are open.
    pub(crate) fn register(
        opts: MiscDeviceOptions,
        module: &'static ThisModule,
    ) -> impl PinInit<Self, Error> {
        try_pin_init!(Self {
            inner <- Opaque::try_ffi_init(move |slot: *mut Raw| {
                // SAFETY: `slot` is valid for writes and pinned: the `file_operations` keep
                // their address for as long as the registration lives.
                let fops = unsafe { &raw mut (*slot).fops };
                let mut ops = MiscdeviceVTable::<T>::VTABLE;
                ops.owner = module.as_ptr();
                // SAFETY: `fops` is valid for writes (above).
                unsafe { fops.write(ops) };
                let mut misc: bindings::miscdevice = pin_init::zeroed();
                misc.minor = bindings::MISC_DYNAMIC_MINOR as c_int;
                misc.name = opts.name.as_char_ptr();
                misc.fops = fops;
                // SAFETY: `slot` is valid for writes (above).
                let misc_ptr = unsafe { &raw mut (*slot).misc };
                // SAFETY: `misc_ptr` is valid for writes (above).
                unsafe { misc_ptr.write(misc) };
                // SAFETY: `misc_ptr` is an initialized `miscdevice` whose `fops` and `name`
                // are valid while it is registered: it is pinned, `drop` deregisters it
                // before its memory goes, and the name is `'static`.
                // INVARIANT: on success the device is registered with `inner`'s operations.
                to_result(unsafe { bindings::misc_register(misc_ptr) })
            }),
            _t: PhantomData,
        })
    }
}

#[pinned_drop]
impl<T> PinnedDrop for MiscDeviceRegistration<T> {
    fn drop(self: Pin<&mut Self>) {
        // SAFETY: the device is registered (the type invariant); this is its one deregistration.
        unsafe { bindings::misc_deregister(&raw mut (*self.inner.get()).misc) };
    }
}

/// What the private data of an open misc device implements.
#[vtable]
pub(crate) trait MiscDevice: Sized {
    /// What kind of pointer wraps `Self` in the file's private data.
    type Ptr: ForeignOwnable + Send + Sync;

    /// The device is being opened; the returned pointer becomes the file's private data.
    fn open(file: &File, misc: &MiscDeviceRegistration<Self>) -> Result<Self::Ptr>;

    /// The file is being released.
    fn release(device: Self::Ptr, _file: &File) {
        drop(device);
    }

    /// `mmap` of the file: sets the new `vma` up.
    fn mmap(
        _device: <Self::Ptr as ForeignOwnable>::Borrowed<'_>,
        _file: &File,
        _vma: &VmaNew,
    ) -> Result {
        build_error!(VTABLE_DEFAULT_ERROR)
    }

    /// `read` of the file.
    fn read_iter(_kiocb: Kiocb<'_, Self::Ptr>, _iov: &mut IovIterDest<'_>) -> Result<usize> {
        build_error!(VTABLE_DEFAULT_ERROR)
    }

    /// An ioctl of the file (a 32-bit caller's too, through `compat_ptr_ioctl`).
    fn ioctl(
        _device: <Self::Ptr as ForeignOwnable>::Borrowed<'_>,
        _file: &File,
        _cmd: u32,
        _arg: usize,
    ) -> Result<isize> {
        build_error!(VTABLE_DEFAULT_ERROR)
    }

    /// The file's events (`EPOLL*` bits) now; registers the waiter on `table` first.
    fn poll(
        _device: <Self::Ptr as ForeignOwnable>::Borrowed<'_>,
        _file: &File,
        _table: PollTable<'_>,
    ) -> u32 {
        build_error!(VTABLE_DEFAULT_ERROR)
    }
}

/// Whether a read through `kiocb` may wait: the file is not `O_NONBLOCK` and the read is not
/// `IOCB_NOWAIT` (a `RWF_NOWAIT` read, io_uring's first try; every file claims
/// `FMODE_NOWAIT`, so both come here rather than fail or go to a worker).
pub(crate) fn may_block<T: ForeignOwnable>(kiocb: &Kiocb<'_, T>) -> bool {
    let raw = kiocb.as_raw();
    // SAFETY: the kiocb of a read in progress is valid for the call, and so is the file it
    // reads, which the read holds.
    let file_flags = unsafe { (*(*raw).ki_filp).f_flags };
    // SAFETY: as above.
    let nowait = unsafe { helpers::gdrpeer_kiocb_nowait(raw) };
    file_flags & file::flags::O_NONBLOCK == 0 && !nowait
}

/// The file operations of a [`MiscDevice`] `T`, less the owner (set at registration).
struct MiscdeviceVTable<T: MiscDevice>(PhantomData<T>);

impl<T: MiscDevice> MiscdeviceVTable<T> {
    /// # Safety
    ///
    /// `inode` and `raw_file` are an inode and a file being opened by `misc_open`, on a
    /// device registered by a [`MiscDeviceRegistration<T>`].
    unsafe extern "C" fn open(inode: *mut bindings::inode, raw_file: *mut bindings::file) -> c_int {
        // SAFETY: the pointers are valid and the file is being opened (the caller's contract).
        let ret = unsafe { bindings::generic_file_open(inode, raw_file) };
        if ret != 0 {
            return ret;
        }
        // SAFETY: the open of a file may read its private data.
        let misc_ptr = unsafe { (*raw_file).private_data };
        // SAFETY: `misc_open` set the private data to the device's `miscdevice`, the first
        // field of a `#[repr(C)]` `Raw` that is the one field of a `#[repr(transparent)]`
        // `MiscDeviceRegistration<T>` (the caller's contract); `misc_open` holds the misc
        // device list's mutex, so it cannot be deregistered during the call.
        let misc = unsafe { &*misc_ptr.cast::<MiscDeviceRegistration<T>>() };
        // An address space of its own, so that the zaps of its handles' offsets reach its
        // own mappings only (another file's handles have the same offsets).
        // SAFETY: the file is being opened: nothing has mapped it or reads its `f_mapping`.
        let ret = unsafe { helpers::gdrpeer_file_own_mapping(raw_file) };
        if ret != 0 {
            return ret;
        }
        // SAFETY: the file is valid for longer than `T::open`, and no fdget_pos region of it
        // is active on this thread (it has no descriptor yet).
        let file = unsafe { File::from_raw_file(raw_file) };
        let ptr = match T::open(file, misc) {
            Ok(ptr) => ptr,
            Err(err) => {
                // SAFETY: the open fails: the file is never mapped, and its mapping was ours.
                unsafe { helpers::gdrpeer_file_put_mapping(raw_file) };
                return err.to_errno();
            }
        };
        // INVARIANT: from here to `release`, the private data is `T::Ptr`'s.
        // SAFETY: the open of a file may write its private data.
        unsafe { (*raw_file).private_data = ptr.into_foreign() };
        // SAFETY: the file is being opened and has no descriptor yet, so nothing else reads or
        // writes its mode. Every read of a misc device here asks `may_block`.
        unsafe { helpers::gdrpeer_file_set_nowait(raw_file) };
        0
    }

    /// # Safety
    ///
    /// `file` is being released, and was opened by [`Self::open`].
    unsafe extern "C" fn release(_inode: *mut bindings::inode, file: *mut bindings::file) -> c_int {
        // SAFETY: the release of a file owns its private data.
        let private = unsafe { (*file).private_data };
        // SAFETY: `open` stored `T::Ptr::into_foreign` there (the registration's invariant);
        // nothing uses it after release, so ownership comes back here once.
        let ptr = unsafe { <T::Ptr as ForeignOwnable>::from_foreign(private) };
        // SAFETY: the file is valid for the call, with no fdget_pos region on this thread.
        T::release(ptr, unsafe { File::from_raw_file(file) });
        // SAFETY: no vma of the file is left (each holds the file), and `release` is the last
        // of the file's operations: nothing reads its `f_mapping` from here on.
        unsafe { helpers::gdrpeer_file_put_mapping(file) };
        0
    }

    /// # Safety
    ///
    /// `file` was opened by [`Self::open`] and is not released; `vma` is being set up by an
    /// `mmap` of it.
    unsafe extern "C" fn mmap(
        file: *mut bindings::file,
        vma: *mut bindings::vm_area_struct,
    ) -> c_int {
        // SAFETY: `mmap` may read the open file's private data.
        let private = unsafe { (*file).private_data };
        // SAFETY: between `open` and `release` the private data is `T::Ptr`'s (the
        // registration's invariant); the borrow ends with this call, before any release.
        let device = unsafe { <T::Ptr as ForeignOwnable>::borrow(private) };
        // SAFETY: `vma` is undergoing its initial setup (the caller's contract).
        let area = unsafe { VmaNew::from_raw(vma) };
        // SAFETY: the file is valid for the call, with no fdget_pos region on this thread.
        let file = unsafe { File::from_raw_file(file) };
        match T::mmap(device, file, area) {
            Ok(()) => 0,
            Err(err) => err.to_errno(),
        }
    }

    /// # Safety
    ///
    /// `kiocb` is a read in progress of a file opened by [`Self::open`]; `iter` is a valid
    /// `iov_iter` to write to.
    unsafe extern "C" fn read_iter(
        kiocb: *mut bindings::kiocb,
        iter: *mut bindings::iov_iter,
    ) -> isize {
        // SAFETY: the read's kiocb is of an open file of `T`, whose private data is
        // `T::Ptr`'s (the caller's contract, the registration's invariant).
        let kiocb = unsafe { Kiocb::from_raw(kiocb) };
        // SAFETY: `iter` is a valid destination for the call (the caller's contract).
        let iov = unsafe { IovIterDest::from_raw(iter) };
        match T::read_iter(kiocb, iov) {
            Ok(res) => res as isize,
            Err(err) => err.to_errno() as isize,
        }
    }

    /// # Safety
    ///
    /// `file` was opened by [`Self::open`] and is not released.
    unsafe extern "C" fn ioctl(file: *mut bindings::file, cmd: c_uint, arg: c_ulong) -> c_long {
        // SAFETY: an ioctl may read the open file's private data.
        let private = unsafe { (*file).private_data };
        // SAFETY: between `open` and `release` the private data is `T::Ptr`'s (the
        // registration's invariant); the borrow ends with this call, before any release.
        let device = unsafe { <T::Ptr as ForeignOwnable>::borrow(private) };
        // SAFETY: the file is valid for the call, with no fdget_pos region on this thread.
        let file = unsafe { File::from_raw_file(file) };
        match T::ioctl(device, file, cmd, arg) {
            Ok(ret) => ret as c_long,
            Err(err) => err.to_errno() as c_long,
        }
    }

    /// # Safety
    ///
    /// `file` was opened by [`Self::open`] and is not released; `table` is NULL or a valid
    /// poll table for the call.
    unsafe extern "C" fn poll(
        file: *mut bindings::file,
        table: *mut bindings::poll_table,
    ) -> bindings::__poll_t {
        // SAFETY: `poll` may read the open file's private data.
        let private = unsafe { (*file).private_data };
        // SAFETY: between `open` and `release` the private data is `T::Ptr`'s (the
        // registration's invariant); the borrow ends with this call, before any release.
        let device = unsafe { <T::Ptr as ForeignOwnable>::borrow(private) };
        // SAFETY: the file is valid for the call, with no fdget_pos region on this thread.
        let file = unsafe { File::from_raw_file(file) };
        // SAFETY: `table` is NULL or valid for the call (the caller's contract).
        let table = unsafe { PollTable::from_raw(table) };
        T::poll(device, file, table)
    }

    /// The operations `T` implements; `owner` is NULL here, set by
    /// [`MiscDeviceRegistration::register`].
    const VTABLE: bindings::file_operations = bindings::file_operations {
        open: Some(Self::open),
        release: Some(Self::release),
        mmap: if T::HAS_MMAP { Some(Self::mmap) } else { None },
        read_iter: if T::HAS_READ_ITER {
            Some(Self::read_iter)
        } else {
            None
        },
        unlocked_ioctl: if T::HAS_IOCTL {
            Some(Self::ioctl)
        } else {
            None
        },
        #[cfg(CONFIG_COMPAT)]
        compat_ioctl: if T::HAS_IOCTL {
            bindings::compat_ptr_ioctl
        } else {
            None
        },
        poll: if T::HAS_POLL { Some(Self::poll) } else { None },
        ..pin_init::zeroed()
    };
}
