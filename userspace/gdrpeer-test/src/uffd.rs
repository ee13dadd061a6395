// SPDX-License-Identifier: GPL-2.0

//! An ioctl whose write-back to user memory fails after another thread acted: the argument
//! lies in a page write-protected through a userfaultfd, so the driver's first write to it
//! waits for this thread, which runs its own code, makes the page read-only and lets the write
//! go on, to fail (-EFAULT). What a driver does between its work and the write-back (another
//! thread of the process using what the call made) is then a fixed interleaving, not a race.

use nvsim::testing::{errno, TestResult};
use nvsim::{check, check_eq};
use rustix::{
    event::{poll, PollFd, PollFlags, Timespec},
    fd::{AsRawFd, OwnedFd},
    io::{read, Errno},
    mm::{
        mmap_anonymous, mprotect, munmap, userfaultfd, MapFlags, MprotectFlags, ProtFlags,
        UserfaultfdFlags,
    },
};
use std::{ffi::c_void, mem::size_of, ptr};

/// `UFFD_API`.
const API: u64 = 0xaa;
/// `UFFDIO_API`: `_IOWR(0xaa, 0x3f, struct uffdio_api)`.
const UFFDIO_API: u64 = 0xc018_aa3f;
/// `UFFDIO_REGISTER`: `_IOWR(0xaa, 0x00, struct uffdio_register)`.
const UFFDIO_REGISTER: u64 = 0xc020_aa00;
/// `UFFDIO_WRITEPROTECT`: `_IOWR(0xaa, 0x06, struct uffdio_writeprotect)`.
const UFFDIO_WRITEPROTECT: u64 = 0xc018_aa06;
/// `UFFDIO_REGISTER_MODE_WP`.
const REGISTER_MODE_WP: u64 = 1 << 1;
/// `UFFDIO_WRITEPROTECT_MODE_WP`.
const WRITEPROTECT_MODE_WP: u64 = 1 << 0;
/// `UFFD_EVENT_PAGEFAULT`.
const EVENT_PAGEFAULT: u8 = 0x12;
/// `UFFD_PAGEFAULT_FLAG_WP`.
const PAGEFAULT_FLAG_WP: u64 = 1 << 1;

const PAGE: usize = 4096;

/// `struct uffdio_api`.
#[repr(C)]
struct Api {
    api: u64,
    features: u64,
    ioctls: u64,
}

/// `struct uffdio_range`.
#[repr(C)]
#[derive(Clone, Copy)]
struct Range {
    start: u64,
    len: u64,
}

/// `struct uffdio_register`.
#[repr(C)]
struct Register {
    range: Range,
    mode: u64,
    ioctls: u64,
}

/// `struct uffdio_writeprotect`.
#[repr(C)]
struct WriteProtect {
    range: Range,
    mode: u64,
}

fn uffd_ioctl<T>(fd: &OwnedFd, cmd: u64, arg: &mut T, what: &str) -> Result<(), String> {
    // SAFETY: `arg` is the struct the userfaultfd command takes, borrowed for the call.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), cmd as _, ptr::from_mut(arg)) };
    if r < 0 {
        return Err(format!("{what}: {}", std::io::Error::last_os_error()));
    }
    Ok(())
}

/// An anonymous page, unmapped on drop.
struct Page(*mut c_void);

impl Drop for Page {
    fn drop(&mut self) {
        // SAFETY: our own mapping of one page, not used after this.
        let _ = unsafe { munmap(self.0, PAGE) };
    }
}

/// Runs `call` on another thread with a pointer to a copy of `arg` in a page of its own, whose
/// first write waits in a userfaultfd: `meanwhile` runs then, on this thread, after which the
/// page is made read-only and the write goes on, and fails. Returns `call`'s result, which
/// for a driver that writes its result back is -EFAULT. Fails if `call` returned without
/// writing to the page (the write-back was not held), or if `meanwhile` failed.
pub fn with_failed_write_back<T: Copy + Send>(
    arg: &T,
    call: impl FnOnce(*mut T) -> Result<(), Errno> + Send,
    meanwhile: impl FnOnce() -> Result<(), String>,
) -> Result<Result<(), Errno>, String> {
    with_held_write(arg, call, meanwhile, true)
}

/// [`with_failed_write_back`]'s interleaving, with the write let go to succeed unless
/// `fail`: `call` (on another thread) writes to a copy of `arg`, its first write waits while
/// `meanwhile` runs on this thread. Returns `call`'s result.
pub fn with_held_write<T: Copy + Send, R: Send>(
    arg: &T,
    call: impl FnOnce(*mut T) -> R + Send,
    meanwhile: impl FnOnce() -> Result<(), String>,
    fail: bool,
) -> Result<R, String> {
    assert!(size_of::<T>() <= PAGE);
    // SAFETY: a new private anonymous page, unmapped by `Page`'s drop.
    let page = Page(
        unsafe {
            mmap_anonymous(
                ptr::null_mut(),
                PAGE,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::PRIVATE,
            )
        }
        .map_err(|e| format!("mmap of the argument's page: {e}"))?,
    );
    // SAFETY: the page is ours, writable and large enough for a `T`; this also populates it.
    unsafe { page.0.cast::<T>().write(*arg) };
    // SAFETY: plain system call; the file is owned from here.
    let uffd = unsafe { userfaultfd(UserfaultfdFlags::CLOEXEC) }
        .map_err(|e| format!("userfaultfd (root, CONFIG_USERFAULTFD): {e}"))?;
    let mut api = Api {
        api: API,
        features: 0,
        ioctls: 0,
    };
    uffd_ioctl(&uffd, UFFDIO_API, &mut api, "UFFDIO_API")?;
    let range = Range {
        start: page.0 as u64,
        len: PAGE as u64,
    };
    let mut reg = Register {
        range,
        mode: REGISTER_MODE_WP,
        ioctls: 0,
    };
    uffd_ioctl(
        &uffd,
        UFFDIO_REGISTER,
        &mut reg,
        "UFFDIO_REGISTER (write-protect mode)",
    )?;
    let mut wp = WriteProtect {
        range,
        mode: WRITEPROTECT_MODE_WP,
    };
    uffd_ioctl(&uffd, UFFDIO_WRITEPROTECT, &mut wp, "UFFDIO_WRITEPROTECT")?;
    let at = page.0 as usize;
    std::thread::scope(|s| {
        let caller = s.spawn(move || call(at as *mut T));
        let held = hold_write(&uffd, at).and_then(|()| meanwhile());
        // Whatever happened, the caller is let go: read-only first where its write must fail.
        let protect = if fail {
            // SAFETY: our own page, which nothing else uses.
            unsafe { mprotect(page.0, PAGE, MprotectFlags::READ) }
        } else {
            Ok(())
        };
        wp.mode = 0;
        let wake = uffd_ioctl(
            &uffd,
            UFFDIO_WRITEPROTECT,
            &mut wp,
            "UFFDIO_WRITEPROTECT (wake)",
        );
        let result = caller
            .join()
            .map_err(|_| "the thread of the call panicked".to_string())?;
        held?;
        protect.map_err(|e| format!("mprotect: {e}"))?;
        wake?;
        Ok(result)
    })
}

/// Waits (10 s at most) for the write-protect fault of the page at `at`.
fn hold_write(uffd: &OwnedFd, at: usize) -> Result<(), String> {
    let mut fds = [PollFd::new(uffd, PollFlags::IN)];
    let timeout = Timespec {
        tv_sec: 10,
        tv_nsec: 0,
    };
    let n = poll(&mut fds, Some(&timeout)).map_err(errno)?;
    check!(
        n == 1,
        "no write to the argument's page within 10 s: the call returned or blocked before \
         writing its result back"
    );
    let mut msg = [0u8; 32];
    let got = read(uffd, &mut msg).map_err(|e| format!("read of the userfaultfd: {e}"))?;
    check_eq!(got, msg.len(), "bytes of the userfaultfd message");
    check_eq!(msg[0], EVENT_PAGEFAULT, "userfaultfd event");
    let flags = u64::from_ne_bytes(msg[8..16].try_into().unwrap());
    let address = u64::from_ne_bytes(msg[16..24].try_into().unwrap()) as usize;
    check!(
        flags & PAGEFAULT_FLAG_WP != 0,
        "a userfaultfd fault that is not a write-protect fault (flags {flags:#x})"
    );
    check_eq!(address & !(PAGE - 1), at, "the faulting page");
    Ok(())
}

/// Checks, in the thread that mapped a handle while its PIN's write-back was held, that the
/// mapping at `p` reads `expect`'s first 64 bytes: its entries are in place.
pub fn reads(p: *const u8, expect: &[u8]) -> TestResult {
    let mut got = vec![0u8; 64];
    // SAFETY: the caller's mapping, at least 64 bytes long.
    unsafe { ptr::copy_nonoverlapping(p, got.as_mut_ptr(), got.len()) };
    check_eq!(
        got,
        expect[..64].to_vec(),
        "GPU memory read through the mapping"
    );
    Ok(())
}

/// The end of a test run in a child that dies of SIGBUS ([`crate::proc::dies_of_sigbus`]): the
/// PIN (`what`) failed with EFAULT, its write-back refused, so it was undone; the read through
/// the mapping made meanwhile (`mapped`) must then fault, and an error says it did not.
pub fn undone_mapping_faults(
    what: &str,
    pinned: Result<(), Errno>,
    mapped: Option<*mut u8>,
) -> TestResult {
    check_eq!(
        pinned,
        Err(Errno::FAULT),
        format!("{what} whose write-back failed")
    );
    let p = mapped.ok_or("nothing mapped")?;
    // SAFETY: the caller's mapping, at least a byte long; the read must raise SIGBUS.
    let v = unsafe { p.read_volatile() };
    Err(format!(
        "read {v:#04x} through the mapping after its {what} was undone"
    ))
}
