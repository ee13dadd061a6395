// SPDX-License-Identifier: GPL-2.0

//! libgdrpeer: the gdrpeer crate's calls for C programs (UCX, NCCL, the MPIs), over
//! `/dev/gdrpeer`'s own interface. The header is `include/gdrpeer/libgdrpeer.h`, which
//! documents every function and the contract of its pointer arguments.
//!
//! Every call that can fail returns 0 (or a count) on success and a negative errno on
//! failure, sets `errno`, and keeps a message naming the call, the errno and its likely
//! cause for [`gdrpeer_last_error`] (per thread).

#![allow(clippy::missing_safety_doc)] // The contracts are in the C header.

use gdrpeer::{Device, Error, Mapping, Op, PciAddress, PinFlags};
use rustix::fd::{AsFd, AsRawFd, IntoRawFd};
use std::{
    cell::RefCell,
    collections::BTreeMap,
    ffi::{c_char, c_int, c_void, CStr, CString},
    sync::Mutex,
    time::Duration,
};

/// The mappings `gdrpeer_map` returned and `gdrpeer_unmap` has not unmapped: address, and
/// length and the process that mapped it. A forked child's copy names mappings the kernel
/// left out of the child (they are the parent's): there `gdrpeer_unmap` unmaps nothing.
/// Held across every fork ([`mappings`]).
static MAPPINGS: Mutex<BTreeMap<usize, (usize, u32)>> = Mutex::new(BTreeMap::new());

type MappingsGuard = std::sync::MutexGuard<'static, BTreeMap<usize, (usize, u32)>>;

thread_local! {
    /// [`MAPPINGS`]' lock, held by the thread that forks from just before the fork until
    /// just after it, in the parent and in the child.
    static HELD_ACROSS_FORK: RefCell<Option<MappingsGuard>> = const { RefCell::new(None) };
}

/// Takes the list's lock for the fork. Never panics (a panic here would abort): where this
/// thread's slot is gone (a fork during the thread's exit) or in use, the lock is given back
/// at once, as without the handlers.
extern "C" fn before_fork() {
    let guard = MAPPINGS.lock().unwrap_or_else(|e| e.into_inner());
    let _ = HELD_ACROSS_FORK.try_with(|h| {
        if let Ok(mut slot) = h.try_borrow_mut() {
            *slot = Some(guard);
        }
    });
}

extern "C" fn after_fork() {
    let _ = HELD_ACROSS_FORK.try_with(|h| {
        if let Ok(mut slot) = h.try_borrow_mut() {
            drop(slot.take());
        }
    });
}

/// [`MAPPINGS`], locked. A child forked while another thread held the lock would inherit
/// it held by a thread the child does not have, and wait for ever: the lock is taken
/// before every fork and given back after it, in both processes (pthread_atfork,
/// registered at the first use).
fn mappings() -> MappingsGuard {
    static REGISTERED: std::sync::Once = std::sync::Once::new();
    REGISTERED.call_once(|| {
        // SAFETY: the handlers take and give back a lock this thread does not hold when
        // it forks (no call of this library forks), and touch nothing else.
        unsafe { libc::pthread_atfork(Some(before_fork), Some(after_fork), Some(after_fork)) };
    });
    MAPPINGS.lock().unwrap_or_else(|e| e.into_inner())
}

/// An open `/dev/gdrpeer` (`gdrpeer_t` in C).
pub struct Gdrpeer {
    dev: Device,
}

/// `struct gdrpeer_lib_version`.
#[repr(C)]
pub struct Version {
    abi: u32,
    nv_page_table: u32,
    nv_dma_mapping: u32,
}

/// `struct gdrpeer_lib_pin`.
#[repr(C)]
pub struct PinOut {
    handle: u64,
    aligned_va: u64,
    offset: u64,
    page_count: u32,
    page_size: u32,
}

/// `struct gdrpeer_lib_info`.
#[repr(C)]
pub struct InfoOut {
    state: u32,
    persistent: u32,
    aligned_va: u64,
    offset: u64,
    page_count: u32,
    page_size: u32,
    region_va: u64,
    region_len: u64,
}

/// `struct gdrpeer_lib_dmabuf`.
#[repr(C)]
pub struct DmabufOut {
    fd: c_int,
    page_count: u32,
    aligned_va: u64,
    offset: u64,
    size: u64,
}

/// `struct gdrpeer_lib_event`: laid out as the uAPI's `struct gdrpeer_event`, which read(2)
/// of the device returns.
#[repr(C)]
pub struct EventOut {
    handle: u64,
    type_: u32,
    pad: u32,
}

const _: () = assert!(size_of::<EventOut>() == size_of::<gdrpeer::uapi::Event>());
const _: () = assert!(align_of::<EventOut>() == align_of::<gdrpeer::uapi::Event>());
// The sizes libgdrpeer.h's structs have (its C test program asserts the same).
const _: () = assert!(size_of::<Version>() == 12);
const _: () = assert!(size_of::<PinOut>() == 32);
const _: () = assert!(size_of::<InfoOut>() == 48);
const _: () = assert!(size_of::<DmabufOut>() == 32);
const _: () = assert!(size_of::<EventOut>() == 16);

thread_local! {
    /// This thread's last failure: its message.
    static LAST: RefCell<(c_int, CString)> = RefCell::new((0, CString::default()));
}

/// Records this thread's last failure.
fn set_last(errno: c_int, msg: String) {
    let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    LAST.with(|l| *l.borrow_mut() = (errno, c));
    set_errno(errno);
}

/// Records `e` as this thread's last error, sets errno and returns the negative errno.
fn fail(e: Error) -> c_int {
    let errno = e.errno().unwrap_or(match e {
        Error::AbiMismatch { .. } | Error::GdrdrvVersion { .. } | Error::Gdrdrv(_) => {
            rustix::io::Errno::PROTO.raw_os_error()
        }
        _ => rustix::io::Errno::IO.raw_os_error(),
    });
    set_last(errno, e.to_string());
    -errno
}

/// A bad argument of `what`: EINVAL, with a message saying which.
fn bad_arg(what: &str) -> c_int {
    let einval = rustix::io::Errno::INVAL.raw_os_error();
    set_last(einval, format!("{what}: EINVAL (a bad argument)"));
    -einval
}

fn set_errno(e: c_int) {
    // SAFETY: __errno_location returns this thread's errno, always valid to write.
    unsafe { *errno_location() = e };
}

extern "C" {
    #[link_name = "__errno_location"]
    fn errno_location() -> *mut c_int;
}

/// Runs `f` on the device behind `g`, or fails with EINVAL for a null one.
///
/// # Safety
///
/// `g` is null or a `gdrpeer_t` from [`gdrpeer_open`] not yet closed.
unsafe fn with<T>(
    g: *const Gdrpeer,
    what: &str,
    f: impl FnOnce(&Device) -> Result<T, Error>,
) -> Result<T, c_int> {
    // SAFETY: the caller's contract.
    let Some(g) = (unsafe { g.as_ref() }) else {
        return Err(bad_arg(what));
    };
    f(&g.dev).map_err(fail)
}

/// Writes `v` to `out`, unless null.
///
/// # Safety
///
/// `out` is null or valid for a write of a `T`.
unsafe fn put<T>(out: *mut T, v: T) {
    if !out.is_null() {
        // SAFETY: the caller's contract.
        unsafe { out.write(v) };
    }
}

/// See libgdrpeer.h.
#[no_mangle]
pub unsafe extern "C" fn gdrpeer_open(path: *const c_char) -> *mut Gdrpeer {
    let path = if path.is_null() {
        gdrpeer::DEFAULT_PATH.to_string()
    } else {
        // SAFETY: the caller's contract: a NUL-terminated string.
        match unsafe { CStr::from_ptr(path) }.to_str() {
            Ok(p) => p.to_string(),
            Err(_) => {
                bad_arg("gdrpeer_open: the path is not UTF-8");
                return std::ptr::null_mut();
            }
        }
    };
    match Device::open(&path) {
        Ok(dev) => Box::into_raw(Box::new(Gdrpeer { dev })),
        Err(e) => {
            fail(e);
            std::ptr::null_mut()
        }
    }
}

/// See libgdrpeer.h.
#[no_mangle]
pub unsafe extern "C" fn gdrpeer_close(g: *mut Gdrpeer) {
    if !g.is_null() {
        // SAFETY: the caller's contract: from gdrpeer_open, closed once.
        drop(unsafe { Box::from_raw(g) });
    }
}

/// See libgdrpeer.h.
#[no_mangle]
pub unsafe extern "C" fn gdrpeer_fd(g: *const Gdrpeer) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { with(g, "gdrpeer_fd: no device", |d| Ok(d.as_fd().as_raw_fd())) }.unwrap_or_else(|e| e)
}

/// See libgdrpeer.h.
#[no_mangle]
pub unsafe extern "C" fn gdrpeer_version(g: *const Gdrpeer, out: *mut Version) -> c_int {
    // SAFETY: the caller's contract.
    match unsafe { with(g, "gdrpeer_version: no device", |d| d.get_version()) } {
        Ok(v) => {
            // SAFETY: the caller's contract.
            unsafe {
                put(
                    out,
                    Version {
                        abi: v.abi,
                        nv_page_table: v.nv_page_table,
                        nv_dma_mapping: v.nv_dma_mapping,
                    },
                )
            };
            0
        }
        Err(e) => e,
    }
}

/// See libgdrpeer.h.
#[no_mangle]
pub extern "C" fn gdrpeer_library_abi_version() -> u32 {
    gdrpeer::uapi::ABI_VERSION
}

/// See libgdrpeer.h.
#[no_mangle]
pub unsafe extern "C" fn gdrpeer_pin(
    g: *const Gdrpeer,
    va: u64,
    len: u64,
    flags: u32,
    out: *mut PinOut,
) -> c_int {
    let mut f = PinFlags::empty();
    for (bit, flag) in [
        (gdrpeer::uapi::PIN_PERSISTENT, PinFlags::PERSISTENT),
        (gdrpeer::uapi::PIN_NOCACHE, PinFlags::NOCACHE),
    ] {
        if flags & bit != 0 {
            f = f | flag;
        }
    }
    if flags & !(gdrpeer::uapi::PIN_PERSISTENT | gdrpeer::uapi::PIN_NOCACHE) != 0 {
        return bad_arg("gdrpeer_pin: unknown flags");
    }
    if out.is_null() {
        // The pin would be made and its handle lost until gdrpeer_close().
        return bad_arg("gdrpeer_pin: out is NULL: the pin's handle would be lost");
    }
    // SAFETY: the caller's contract.
    match unsafe { with(g, "gdrpeer_pin: no device", |d| d.pin(va, len, f)) } {
        Ok(p) => {
            let o = PinOut {
                handle: p.handle,
                aligned_va: p.aligned_va,
                offset: p.offset,
                page_count: p.page_count,
                page_size: p.page_size,
            };
            // SAFETY: the caller's contract.
            unsafe { put(out, o) };
            0
        }
        Err(e) => e,
    }
}

/// See libgdrpeer.h.
#[no_mangle]
pub unsafe extern "C" fn gdrpeer_unpin(g: *const Gdrpeer, handle: u64) -> c_int {
    // SAFETY: the caller's contract.
    match unsafe { with(g, "gdrpeer_unpin: no device", |d| d.unpin(handle)) } {
        Ok(()) => 0,
        Err(e) => e,
    }
}

/// See libgdrpeer.h.
#[no_mangle]
pub unsafe extern "C" fn gdrpeer_get_info(
    g: *const Gdrpeer,
    handle: u64,
    out: *mut InfoOut,
) -> c_int {
    // SAFETY: the caller's contract.
    match unsafe { with(g, "gdrpeer_get_info: no device", |d| d.info(handle)) } {
        Ok(i) => {
            let o = InfoOut {
                state: i.state.raw(),
                persistent: i.persistent.into(),
                aligned_va: i.aligned_va,
                offset: i.offset,
                page_count: i.page_count,
                page_size: i.page_size,
                region_va: i.region_va,
                region_len: i.region_len,
            };
            // SAFETY: the caller's contract.
            unsafe { put(out, o) };
            0
        }
        Err(e) => e,
    }
}

/// Copies `got` to `addrs` (room for `count`), the number of entries to `written`; ENOSPC
/// (with the number needed in `written`) when they do not fit.
///
/// # Safety
///
/// `addrs` is valid for `count` writes of a u64 (or null with `count` 0); `written` is null
/// or valid for a write.
unsafe fn copy_addrs(
    op: Op,
    got: Vec<u64>,
    addrs: *mut u64,
    count: u32,
    written: *mut u32,
) -> c_int {
    let n = u32::try_from(got.len()).unwrap_or(u32::MAX);
    // SAFETY: the caller's contract.
    unsafe { put(written, n) };
    if got.len() > count as usize {
        return fail(Error::from_errno(
            op,
            rustix::io::Errno::NOSPC.raw_os_error(),
        ));
    }
    if !got.is_empty() {
        if addrs.is_null() {
            return bad_arg("addrs is NULL");
        }
        // SAFETY: the caller's contract: room for `count` >= `got.len()` entries.
        unsafe { std::ptr::copy_nonoverlapping(got.as_ptr(), addrs, got.len()) };
    }
    0
}

/// See libgdrpeer.h.
#[no_mangle]
pub unsafe extern "C" fn gdrpeer_get_pages(
    g: *const Gdrpeer,
    handle: u64,
    addrs: *mut u64,
    count: u32,
    written: *mut u32,
) -> c_int {
    // SAFETY: the caller's contract.
    match unsafe { with(g, "gdrpeer_get_pages: no device", |d| d.get_pages(handle)) } {
        // SAFETY: the caller's contract.
        Ok(v) => unsafe { copy_addrs(Op::GetPages, v, addrs, count, written) },
        Err(e) => e,
    }
}

/// See libgdrpeer.h.
#[no_mangle]
pub unsafe extern "C" fn gdrpeer_dma_map(
    g: *const Gdrpeer,
    handle: u64,
    peer: *const c_char,
    addrs: *mut u64,
    count: u32,
    written: *mut u32,
) -> c_int {
    if peer.is_null() {
        return bad_arg("gdrpeer_dma_map: no peer PCI address");
    }
    // SAFETY: the caller's contract: a NUL-terminated string.
    let s = unsafe { CStr::from_ptr(peer) }.to_string_lossy();
    let pci: PciAddress = match s.parse() {
        Ok(p) => p,
        Err(e) => return bad_arg(&format!("gdrpeer_dma_map: {e}")),
    };
    // SAFETY: the caller's contract.
    match unsafe { with(g, "gdrpeer_dma_map: no device", |d| d.dma_map(handle, pci)) } {
        // SAFETY: the caller's contract.
        Ok(v) => unsafe { copy_addrs(Op::DmaMap, v, addrs, count, written) },
        Err(e) => e,
    }
}

/// See libgdrpeer.h.
#[no_mangle]
pub unsafe extern "C" fn gdrpeer_map(
    g: *const Gdrpeer,
    handle: u64,
    offset: u64,
    len: usize,
    out: *mut *mut c_void,
) -> c_int {
    if out.is_null() {
        return bad_arg("gdrpeer_map: out is NULL");
    }
    // SAFETY: the caller's contract.
    match unsafe { with(g, "gdrpeer_map: no device", |d| d.map(handle, offset, len)) } {
        Ok(m) => {
            let (p, len) = m.into_raw();
            mappings().insert(p as usize, (len, std::process::id()));
            // SAFETY: the caller's contract; checked not null above.
            unsafe { out.write(p.cast()) };
            0
        }
        Err(e) => e,
    }
}

/// See libgdrpeer.h.
#[no_mangle]
pub unsafe extern "C" fn gdrpeer_unmap(addr: *mut c_void, len: usize) -> c_int {
    if addr.is_null() || len == 0 {
        return bad_arg("gdrpeer_unmap: no mapping");
    }
    let mapped = {
        let mut maps = mappings();
        match maps.get(&(addr as usize)) {
            Some(&(l, pid)) if l == len => maps.remove(&(addr as usize)).map(|_| pid),
            _ => None,
        }
    };
    match mapped {
        None => bad_arg("gdrpeer_unmap: not a mapping gdrpeer_map returned, of that length"),
        // A forked child's: the kernel left the mapping out of the child.
        Some(pid) if pid != std::process::id() => 0,
        // SAFETY: a mapping gdrpeer_map returned in this process, of this length, not
        // unmapped yet (it was listed until now).
        Some(_) => match unsafe { Mapping::from_raw(addr.cast(), len) }.unmap() {
            Ok(()) => 0,
            Err(e) => fail(e),
        },
    }
}

/// See libgdrpeer.h.
#[no_mangle]
pub unsafe extern "C" fn gdrpeer_export_dmabuf(
    g: *const Gdrpeer,
    handle: u64,
    out: *mut DmabufOut,
) -> c_int {
    // SAFETY: the caller's contract.
    let r = unsafe {
        with(g, "gdrpeer_export_dmabuf: no device", |d| {
            d.export_dmabuf(handle)
        })
    };
    // SAFETY: the caller's contract.
    unsafe { dmabuf_out(r, out) }
}

/// See libgdrpeer.h.
#[no_mangle]
pub unsafe extern "C" fn gdrpeer_export_dmabuf_range(
    g: *const Gdrpeer,
    va: u64,
    len: u64,
    flags: u32,
    out: *mut DmabufOut,
) -> c_int {
    if flags & !gdrpeer::uapi::EXPORT_PERSISTENT != 0 {
        return bad_arg("gdrpeer_export_dmabuf_range: unknown flags");
    }
    // SAFETY: the caller's contract.
    let r = unsafe {
        with(g, "gdrpeer_export_dmabuf_range: no device", |d| {
            if flags & gdrpeer::uapi::EXPORT_PERSISTENT != 0 {
                d.export_dmabuf_persistent(va, len)
            } else {
                d.export_dmabuf_range(va, len)
            }
        })
    };
    // SAFETY: the caller's contract.
    unsafe { dmabuf_out(r, out) }
}

/// Hands a dma-buf to C: its descriptor becomes the caller's.
///
/// # Safety
///
/// `out` is null or valid for a write.
unsafe fn dmabuf_out(r: Result<gdrpeer::Dmabuf, c_int>, out: *mut DmabufOut) -> c_int {
    match r {
        Ok(b) => {
            if out.is_null() {
                // Nowhere to give the descriptor: drop the dma-buf rather than leak it.
                return bad_arg("the dma-buf's out is NULL");
            }
            let o = DmabufOut {
                fd: b.fd.into_raw_fd(),
                page_count: b.page_count,
                aligned_va: b.aligned_va,
                offset: b.offset,
                size: b.size,
            };
            // SAFETY: the caller's contract; checked not null.
            unsafe { out.write(o) };
            0
        }
        Err(e) => e,
    }
}

/// See libgdrpeer.h.
#[no_mangle]
pub unsafe extern "C" fn gdrpeer_read_events(
    g: *const Gdrpeer,
    events: *mut EventOut,
    max: usize,
    timeout_ms: c_int,
) -> c_int {
    if events.is_null() || max == 0 {
        return bad_arg("gdrpeer_read_events: no room for an event");
    }
    let max = max.min(c_int::MAX as usize / size_of::<EventOut>());
    // SAFETY: the caller's contract: `events` has room for `max` records, laid out as the
    // uAPI's (asserted above); the read writes whole records only.
    let out = unsafe { std::slice::from_raw_parts_mut(events.cast::<gdrpeer::uapi::Event>(), max) };
    let timeout = u64::try_from(timeout_ms).ok().map(Duration::from_millis);
    // SAFETY: the caller's contract.
    let r = unsafe {
        with(g, "gdrpeer_read_events: no device", |d| {
            use gdrpeer::EventSource;
            d.read_records(out, timeout)
        })
    };
    match r {
        Ok(n) => n as c_int,
        Err(e) => e,
    }
}

/// See libgdrpeer.h.
#[no_mangle]
pub extern "C" fn gdrpeer_last_error() -> *const c_char {
    // The thread's string lives until its next failure replaces it.
    LAST.with(|l| l.borrow().1.as_ptr())
}

/// See libgdrpeer.h.
#[no_mangle]
pub extern "C" fn gdrpeer_last_errno() -> c_int {
    LAST.with(|l| l.borrow().0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A child forked while another thread holds the list of mappings (inside
    /// `gdrpeer_unmap` or `gdrpeer_map`) can still call `gdrpeer_unmap`. Without the fork
    /// handlers the child inherits the lock held by a thread it does not have, and waits
    /// for ever (here: dies of its alarm).
    #[test]
    fn unmap_in_a_child_forked_while_another_thread_holds_the_list() {
        // SAFETY: an address no mapping has: only the list is read (and the handlers
        // registered).
        assert_eq!(
            unsafe { gdrpeer_unmap(0x1000 as *mut c_void, 1) },
            -libc::EINVAL
        );
        let (held, holding) = std::sync::mpsc::channel();
        let holder = std::thread::spawn(move || {
            let list = MAPPINGS.lock().unwrap();
            held.send(()).unwrap();
            std::thread::sleep(Duration::from_millis(300));
            drop(list);
        });
        holding.recv().unwrap();
        // SAFETY: the child calls gdrpeer_unmap and exits.
        match unsafe { libc::fork() } {
            0 => {
                // SAFETY: plain calls in the child, which ends with _exit.
                unsafe {
                    libc::alarm(3);
                    let r = gdrpeer_unmap(0x1000 as *mut c_void, 1);
                    libc::_exit(if r == -libc::EINVAL { 0 } else { 1 })
                }
            }
            pid => {
                assert!(pid > 0, "fork failed");
                let mut status = 0;
                // SAFETY: the child just forked.
                assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
                holder.join().unwrap();
                assert!(
                    !libc::WIFSIGNALED(status),
                    "the child waited for the list's lock until its alarm (signal {})",
                    libc::WTERMSIG(status)
                );
                assert_eq!(libc::WEXITSTATUS(status), 0, "the child's unmap");
            }
        }
    }
}
