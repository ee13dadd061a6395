// SPDX-License-Identifier: GPL-2.0

//! `gdrpeer-test --fuzz CALLS THREADS SEED`: random and mutated ioctls on `/dev/gdrpeer`.
//!
//! Threads send commands with random numbers, sizes and directions, gdrpeer's own commands
//! with mutated fields (sizes, flags, handles, addresses, lengths, counts, padding), bad and
//! unmapped pointers, while other threads replace the file under them (`dup2` over the
//! descriptor closes the old file mid-call) and GPU memory is freed under the pins. Pointers
//! the kernel may write through point into a scratch arena or are invalid, never into the
//! fuzzer's own data. The kernel must stay healthy (the log oracle watches), a final
//! GET_VERSION must work, and nothing may be left pinned.
//!
//! Where `/dev/gdrdrv` exists, a third of the calls go to files of it: gdrdrv's commands
//! with mutated arguments, its magic with random numbers, and mmaps at `handle << 12`.
//!
//! A tenth of the calls are mmaps instead: random handles, offsets (4 KiB-aligned or not,
//! inside the window or past it), lengths, protections and flags; a third of them aim at
//! random pages inside the window of a handle the file has. Each must succeed only
//! when it is a shared mapping inside a pinned window, or fail with one of the errnos
//! mmap's documentation gives ([`MMAP_ERRNOS`]). Half the mmaps are made on a file the
//! fuzzer holds for the while (a `dup` of the descriptor, which the `dup2`s leave alone):
//! a mapping made there is touched, read and written at random pages as its protection
//! allows, while the GPU memory is freed and handles unpinned under it. A touch may raise
//! SIGBUS only once the handle is revoked or gone: the SIGBUS probe ([`crate::sigbus`],
//! the stress run's) judges it by asking the file, puts anonymous memory in place of the
//! mapping and lets the fuzzer go on; a SIGBUS in a mapping of a valid handle fails the
//! run. The other mmaps, on the descriptors the `dup2`s replace, are unmapped untouched.
//!
//! The files' invalidation events are read now and then (poll, then read) on both devices,
//! through a second descriptor of each file that the fuzzer keeps until the file is
//! replaced: every record must be a revocation, name a handle a PIN of that device returned,
//! and come once per file and handle. The reports of PINs go to a page of the thread's own
//! (not the arena that other threads write into), so that the handles are known.
//!
//! EXPORT_DMABUF is among gdrpeer's commands (handles real and random, ranges in GPU memory
//! and not). The dma-bufs it makes are kept, a few at a time, and fuzzed in turn: the
//! dma-buf core's ioctls (SYNC with any flags, SET_NAME), mmaps (which must fail: gdrpeer's
//! dma-bufs have no CPU mapping), imports into the sample NIC where `/dev/gdrnic` exists
//! (every flag, any offset and length, the NIC's own exports through the kernel API, persistent
//! exports (GDRPEER_EXPORT_PERSISTENT, GDRNIC_DMABUF_KAPI_PERSISTENT) and the pinned import
//! that cannot be invalidated, and a transfer now and then), and closes, while GPU memory is
//! freed under them. Every dma-buf must be gone at the end.
//!
//! Commands the VFS handles before any driver (FIOCLEX, FIONBIO, FIFREEZE, FS_IOC_*, ...)
//! are never sent: their ioctl types are skipped ([`VFS_TYPES`]).

use crate::helpers::{edu, eventually, gdrpeer_idle, report_dma_map_window, K64};
use crate::nic::{self, Nic};
use crate::sigbus::{self, Probe};
use gdrpeer::{gdrdrv, uapi, Device, EventKind, EventSource};
use nvsim::testing::{self as harness, TestResult};
use nvsim::{check, Gpu};
use rustix::{
    fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd},
    io::Errno,
    mm::{mmap_anonymous, munmap, MapFlags, ProtFlags},
};
use std::{
    collections::{BTreeMap, HashSet},
    sync::{
        atomic::{AtomicI32, AtomicU64, Ordering::Relaxed},
        Mutex,
    },
    thread,
    time::Instant,
};

/// ioctl types the VFS answers for every file ('T' FIO*, 'X' FIFREEZE/FSGETXATTR,
/// 'f' FS_IOC_*, 0x94 FICLONE/FIDEDUPE, 0x15 FS_IOC_GETFSUUID).
const VFS_TYPES: [u32; 5] = [0x54, 0x58, 0x66, 0x94, 0x15];

/// The scratch memory the kernel may write into.
const ARENA: usize = 1 << 20;

/// gdrpeer's commands with their argument sizes.
const COMMANDS: [(u32, usize); 8] = [
    (uapi::IOCTL_GET_VERSION, size_of::<uapi::Version>()),
    (uapi::IOCTL_PIN, size_of::<uapi::Pin>()),
    (uapi::IOCTL_UNPIN, size_of::<uapi::Unpin>()),
    (uapi::IOCTL_GET_INFO, size_of::<uapi::Info>()),
    (uapi::IOCTL_GET_PAGES, size_of::<uapi::GetPages>()),
    (uapi::IOCTL_DMA_MAP, size_of::<uapi::DmaMap>()),
    (uapi::IOCTL_STATS, size_of::<uapi::Stats>()),
    (uapi::IOCTL_EXPORT_DMABUF, size_of::<uapi::ExportDmabuf>()),
];

/// The dma-buf core's ioctls (include/uapi/linux/dma-buf.h): `DMA_BUF_IOCTL_SYNC` and
/// `DMA_BUF_SET_NAME` (the 64-bit form). The sync-file ones are left out: they make
/// descriptors of other kinds.
const DMA_BUF_IOCTL_SYNC: u32 = rustix::ioctl::opcode::write::<u64>(b'b', 0);
const DMA_BUF_SET_NAME: u32 = rustix::ioctl::opcode::write::<u64>(b'b', 1);
/// The most dma-bufs kept at once; a new one over it closes one.
const DMABUFS_KEPT: usize = 16;

/// What one thread keeps of its own: its NIC file, and the imports it holds there (handle,
/// length).
#[derive(Default)]
struct Local {
    nic: Option<Nic>,
    imports: Vec<(u32, u64)>,
    /// The thread's number: its slot of the SIGBUS probe.
    slot: usize,
    /// The thread's page for the reports of PINs.
    report: usize,
}

/// A second descriptor of a file the threads use (the `dup2`s replace the file behind their
/// descriptor numbers, not this one), for its events, and the file's number in the run.
struct Held {
    fd: OwnedFd,
    id: u64,
}

impl AsFd for Held {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl EventSource for Held {}

/// What the fuzzer learned of one device's handles and events.
#[derive(Default)]
struct Handles {
    /// Every handle a PIN returned, in any file.
    had: HashSet<u64>,
    /// PINs that succeeded, and of them those whose report the fuzzer could not read (the
    /// argument in the arena, where other threads write).
    pins: u64,
    unread: u64,
    /// (file, handle) of each event read.
    events: HashSet<(u64, u64)>,
    /// Events read in all.
    read: u64,
}

/// Whether descriptor `fd` of this process is a dma-buf (its link reads `/dmabuf:NAME`).
fn is_dmabuf(fd: i32) -> bool {
    std::fs::read_link(format!("/proc/self/fd/{fd}"))
        .is_ok_and(|l| l.to_string_lossy().starts_with("/dmabuf:"))
}

/// What an mmap of `/dev/gdrpeer` may fail with (Documentation/user/uapi.rst and mmap(2)):
/// EINVAL (unknown handle, MAP_PRIVATE, past the window, bad length or offset), ENXIO (the
/// memory was freed), ENOMEM (no address space), EPERM (PROT_EXEC on a noexec mount),
/// EOPNOTSUPP (MAP_SHARED_VALIDATE with a flag it does not know), EOVERFLOW (offset plus
/// length wraps).
const MMAP_ERRNOS: [Errno; 6] = [
    Errno::INVAL,
    Errno::NXIO,
    Errno::NOMEM,
    Errno::PERM,
    Errno::OPNOTSUPP,
    Errno::OVERFLOW,
];

/// gdrdrv's commands with their argument sizes (what libgdrapi sends).
const GDRDRV_COMMANDS: [(u32, usize); 9] = [
    (gdrdrv::IOC_PIN_BUFFER, size_of::<gdrdrv::PinBuffer>()),
    (gdrdrv::IOC_UNPIN_BUFFER, 8),
    (gdrdrv::IOC_GET_CB_FLAG, 8),
    (gdrdrv::IOC_GET_INFO, 8),
    (gdrdrv::IOC_GET_INFO_V2, 8),
    (gdrdrv::IOC_GET_ATTR, 8),
    (gdrdrv::IOC_PIN_BUFFER_V2, size_of::<gdrdrv::PinBufferV2>()),
    (gdrdrv::IOC_REQ_MAPPING_TYPE, 8),
    (gdrdrv::IOC_GET_VERSION, 8),
];

/// GET_INFO of `handle` on `fd` (gdrpeer's, or gdrdrv's GET_INFO_V2): whether it answered,
/// and the window's length.
fn window_of(fd: i32, handle: u64, on_gdrdrv: bool) -> (bool, u64) {
    // SAFETY: a descriptor number of ours, alive for the call.
    let fd = unsafe { BorrowedFd::borrow_raw(fd) };
    if on_gdrdrv {
        let mut i = gdrdrv::GetInfoV2 {
            handle,
            ..Default::default()
        };
        let r = gdrdrv::call(fd, &mut i);
        (r.is_ok(), i.mapped_size)
    } else {
        let mut i = uapi::Info {
            handle,
            ..uapi::Info::new()
        };
        // SAFETY: GET_INFO reads and writes one Info.
        let r = unsafe { libc::ioctl(fd.as_raw_fd(), uapi::IOCTL_GET_INFO as _, &mut i) };
        (r == 0, u64::from(i.page_count) * u64::from(i.page_size))
    }
}

struct Fuzzer {
    /// The descriptor numbers the threads use; `dup2` replaces the file behind them.
    fds: Vec<AtomicI32>,
    arena: usize,
    /// An address that was mapped and no longer is.
    hole: usize,
    /// GPU memory the pins may land in, as (va, len).
    gpu: Mutex<Vec<(u64, u64)>>,
    /// Handles pins returned (random values are tried too).
    handles: Mutex<Vec<u64>>,
    /// `/dev/gdrdrv` files (none where it does not exist), replaced as `fds` are.
    gdrdrv: Vec<AtomicI32>,
    /// gdrdrv handles its pins returned.
    gdrdrv_handles: Mutex<Vec<u64>>,
    peer: (u32, u8, u8),
    calls: AtomicU64,
    errnos: Mutex<BTreeMap<String, u64>>,
    /// Files replaced so far (`dup2`): a handle's window is judged only within one.
    generation: AtomicU64,
    /// mmap outcomes the documentation does not allow.
    wrong: Mutex<Vec<String>>,
    /// dma-bufs EXPORT_DMABUF made, by descriptor; only this list closes them.
    dmabufs: Mutex<Vec<i32>>,
    /// dma-bufs exported in all.
    exported: AtomicU64,
    /// The second descriptors of the files behind `fds` and `gdrdrv`, slot for slot.
    held: Vec<Mutex<Held>>,
    gdrdrv_held: Vec<Mutex<Held>>,
    /// The last file number given.
    files: AtomicU64,
    /// By device: `/dev/gdrpeer`'s, `/dev/gdrdrv`'s.
    known: [Mutex<Handles>; 2],
    /// Mappings touched, and SIGBUS in them with the handle revoked, or gone.
    touched: AtomicU64,
    sigbus_revoked: AtomicU64,
    sigbus_gone: AtomicU64,
}

// SAFETY (for the raw pointers kept as integers): `arena` is a private mapping that lives
// until `run` returns, after every thread has been joined.

impl Fuzzer {
    /// A pointer argument: mostly into the arena, sometimes invalid.
    fn pointer(&self, rng: &mut fastrand::Rng, len: usize) -> u64 {
        match rng.u32(0..20) {
            0 => 0,
            1 => 8,
            2 => self.hole as u64,
            3 => 0xffff_8880_0000_0000,
            4 => (self.arena + ARENA - rng.usize(1..64)) as u64, // runs off the end
            _ => (self.arena + rng.usize(0..ARENA - len.max(1))) as u64,
        }
    }

    fn value(&self, rng: &mut fastrand::Rng) -> u64 {
        match rng.u32(0..10) {
            0 => 0,
            1 => u64::MAX,
            2 => rng.u64(..),
            3 => 1 << rng.u32(0..64),
            4 => rng.u64(0..4096),
            _ => rng.u64(0..=4) * K64 + rng.u64(0..=1) * rng.u64(0..K64),
        }
    }

    /// Writes a plausible, mutated argument for command `nr` at `at` in the arena.
    fn argument(&self, rng: &mut fastrand::Rng, cmd: u32, size: usize, at: usize) {
        let mut words = vec![0u64; size.div_ceil(8).max(4)];
        let gpu = {
            let g = self.gpu.lock().unwrap();
            (!g.is_empty()).then(|| g[rng.usize(0..g.len())])
        };
        let handle = {
            let h = self.handles.lock().unwrap();
            if !h.is_empty() && rng.bool() {
                h[rng.usize(0..h.len())]
            } else {
                self.value(rng)
            }
        };
        // Word 0: size (low) and the next u32 (flags, count or padding).
        let size_field = match rng.u32(0..8) {
            0 => rng.u32(..),
            1 => size as u32 + 8,
            _ => size as u32,
        };
        let second = if rng.u32(0..6) == 0 {
            rng.u32(..)
        } else {
            rng.u32(0..4) * 256
        };
        words[0] = u64::from(size_field) | u64::from(second) << 32;
        for w in words.iter_mut().skip(1) {
            *w = self.value(rng);
        }
        if cmd == uapi::IOCTL_PIN {
            if let Some((va, len)) = gpu {
                words[1] = va + rng.u64(0..len);
                words[2] = rng.u64(1..=len);
            }
        } else {
            words[1] = handle;
        }
        if cmd == uapi::IOCTL_EXPORT_DMABUF && rng.bool() {
            // What succeeds, mostly: the right size, no flags or GDRPEER_EXPORT_PERSISTENT (a
            // persistent pin the dma-buf owns), a handle alone or a range in GPU memory alone.
            let flags = if rng.u32(0..3) == 0 {
                uapi::EXPORT_PERSISTENT
            } else {
                0
            };
            words[0] = u64::from(size_field) | u64::from(flags) << 32;
            match (rng.u32(0..2), gpu) {
                (0, Some((va, len))) => {
                    words[1] = 0;
                    words[2] = va + rng.u64(0..len);
                    words[3] = rng.u64(1..=len);
                }
                _ => (words[2], words[3]) = (0, 0),
            }
        }
        if cmd == uapi::IOCTL_GET_PAGES || cmd == uapi::IOCTL_DMA_MAP {
            // count (second u32) and addrs: sometimes right, sometimes not.
            let count = rng.u32(0..8);
            words[0] = u64::from(size_field) | u64::from(count) << 32;
            words[2] = self.pointer(rng, count as usize * 8);
            if cmd == uapi::IOCTL_DMA_MAP && rng.u32(0..4) != 0 {
                let (d, b, f) = self.peer;
                words[3] = u64::from(d) | u64::from(b) << 32 | u64::from(f) << 40;
            }
        }
        // SAFETY: `at + size` is inside the arena (the caller's choice of `at`).
        unsafe {
            std::ptr::copy_nonoverlapping(
                words.as_ptr().cast::<u8>(),
                (self.arena + at) as *mut u8,
                size,
            )
        };
    }

    /// One random mmap on `fd`, checked against [`MMAP_ERRNOS`] and, where it succeeds,
    /// against the handle's window.
    fn one_mmap(&self, rng: &mut fastrand::Rng, racy_fd: i32, on_gdrdrv: bool, slot: usize) {
        const PAGE: u64 = 4096;
        let handle = {
            let h = if on_gdrdrv {
                self.gdrdrv_handles.lock().unwrap()
            } else {
                self.handles.lock().unwrap()
            };
            match rng.u32(0..8) {
                0 => rng.u64(0..1 << 24),
                1 => rng.u64(..) >> uapi::MMAP_HANDLE_SHIFT,
                _ if !h.is_empty() => h[rng.usize(0..h.len())],
                // gdrdrv's handles are page offsets from 0.
                _ if on_gdrdrv => rng.u64(0..64),
                _ => rng.u64(0..16),
            }
        };
        let mut off = match rng.u32(0..6) {
            0 => rng.u64(..) & uapi::MMAP_OFFSET_MASK,
            1 => rng.u64(0..8 * K64) | 1,
            _ => rng.u64(0..8 * K64 / PAGE) * PAGE,
        };
        let mut len = match rng.u32(0..8) {
            0 => 0,
            1 => rng.usize(1..3 * K64 as usize),
            2 => usize::MAX - rng.usize(0..PAGE as usize),
            3 => 1 << 40,
            _ => rng.usize(1..=16) * PAGE as usize,
        };
        let mut prot = [
            libc::PROT_READ | libc::PROT_WRITE,
            libc::PROT_READ,
            libc::PROT_WRITE,
            libc::PROT_NONE,
            libc::PROT_READ | libc::PROT_EXEC,
        ][rng.usize(0..5)];
        let mut flags = [
            libc::MAP_SHARED,
            libc::MAP_SHARED,
            libc::MAP_PRIVATE,
            libc::MAP_SHARED_VALIDATE,
        ][rng.usize(0..4)];
        for extra in [
            libc::MAP_POPULATE,
            libc::MAP_NORESERVE,
            libc::MAP_LOCKED,
            libc::MAP_SYNC,
            0x8000_0000u32 as i32,
        ] {
            if rng.u32(0..8) == 0 {
                flags |= extra;
            }
        }
        // Half the time a file held for the while: the mapping is touched.
        // SAFETY: a descriptor number of ours, alive for the call (dup2 replaces the file).
        let held = rng
            .bool()
            .then(|| {
                unsafe { BorrowedFd::borrow_raw(racy_fd) }
                    .try_clone_to_owned()
                    .ok()
            })
            .flatten();
        let fd = held.as_ref().map_or(racy_fd, |h| h.as_raw_fd());
        // A third of the mmaps aim inside the window of a handle this file has: random pages
        // of it, shared and writable, so that mappings live while memory goes under them.
        if rng.u32(0..3) == 0 {
            let (r, window) = window_of(fd, handle, on_gdrdrv);
            if r && window >= PAGE {
                let pages = window / PAGE;
                // gdrdrv maps a window from its first byte only.
                let first = if on_gdrdrv { 0 } else { rng.u64(0..pages) };
                off = first * PAGE;
                len = (rng.u64(1..=pages - first) * PAGE) as usize;
                prot = libc::PROT_READ | libc::PROT_WRITE;
                flags = libc::MAP_SHARED;
            }
        }
        let generation = self.generation.load(Relaxed);
        let offset = if on_gdrdrv {
            gdrdrv::mmap_offset(handle, 0).wrapping_add(off)
        } else {
            uapi::mmap_offset(handle, off)
        };
        // SAFETY: no MAP_FIXED: a new mapping at an address of the kernel's choice, which
        // replaces nothing; unmapped below untouched.
        let p = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, flags, fd, offset as i64) };
        let name = if p == libc::MAP_FAILED {
            let e = Errno::from_raw_os_error(
                std::io::Error::last_os_error().raw_os_error().unwrap_or(0),
            );
            if !MMAP_ERRNOS.contains(&e) {
                self.wrong.lock().unwrap().push(format!(
                    "mmap handle {handle} offset {off:#x} len {len:#x} prot {prot:#x} flags \
                     {flags:#x}: {e}"
                ));
            }
            format!("mmap {e}")
        } else {
            // MAP_SHARED_VALIDATE is MAP_SHARED | MAP_PRIVATE.
            let shared = flags & libc::MAP_SHARED_VALIDATE != libc::MAP_PRIVATE;
            let (r, window) = window_of(fd, handle, on_gdrdrv);
            let fits = off + (len as u64).div_ceil(PAGE) * PAGE <= window;
            // gdrdrv maps from the window's first byte only.
            let inside = fits && if on_gdrdrv { off == 0 } else { off % PAGE == 0 };
            let same_file = held.is_some() || self.generation.load(Relaxed) == generation;
            if !shared || (r && same_file && !inside) {
                self.wrong.lock().unwrap().push(format!(
                    "mmap handle {handle} offset {off:#x} len {len:#x} flags {flags:#x} \
                     succeeded (window {window:#x})"
                ));
            } else if held.is_some() && shared {
                let probe = Probe {
                    fd,
                    handle,
                    gdrdrv: on_gdrdrv,
                    gone_ok: true,
                };
                self.touch(rng, p as u64, len, prot, probe, slot);
            }
            // SAFETY: the mapping just made (or the anonymous memory the SIGBUS probe put in
            // its place), which nothing uses any more.
            unsafe { libc::munmap(p, len) };
            "mmap success".to_string()
        };
        self.calls.fetch_add(1, Relaxed);
        *self.errnos.lock().unwrap().entry(name).or_default() += 1;
    }

    /// Reads and writes a byte of a few random pages of the mapping of `len` bytes at `base`,
    /// as `prot` allows, with the SIGBUS probe watching (in `slot`): a SIGBUS must find the
    /// handle revoked or gone.
    fn touch(
        &self,
        rng: &mut fastrand::Rng,
        base: u64,
        len: usize,
        prot: i32,
        probe: Probe,
        slot: usize,
    ) {
        let (read, write) = (prot & libc::PROT_READ != 0, prot & libc::PROT_WRITE != 0);
        if !read && !write {
            return;
        }
        let offsets: Vec<usize> = (0..rng.usize(1..=4)).map(|_| rng.usize(0..len)).collect();
        sigbus::register(slot, base, len as u64, probe);
        sigbus::touch(base, &offsets, rng.u8(..), read, write);
        let outcome = sigbus::unregister(slot);
        self.touched.fetch_add(1, Relaxed);
        match outcome {
            sigbus::REVOKED => self.sigbus_revoked.fetch_add(1, Relaxed),
            sigbus::GONE => self.sigbus_gone.fetch_add(1, Relaxed),
            sigbus::NONE => 0,
            _ => {
                self.wrong.lock().unwrap().push(format!(
                    "SIGBUS in a mapping of valid handle {} ({})",
                    probe.handle,
                    if probe.gdrdrv { "gdrdrv" } else { "gdrpeer" }
                ));
                0
            }
        };
    }

    /// Polls and reads the events of one file of either device, through the fuzzer's own
    /// descriptor of it.
    fn one_events(&self, rng: &mut fastrand::Rng) {
        let gdrdrv = !self.gdrdrv_held.is_empty() && rng.bool();
        let held = if gdrdrv {
            &self.gdrdrv_held
        } else {
            &self.held
        };
        let h = held[rng.usize(0..held.len())].lock().unwrap();
        let r = if rng.u32(0..4) == 0 {
            // Wait a little, then read what came (read(2) waits only while none is queued).
            h.wait_events(Some(std::time::Duration::from_millis(1)))
                .and_then(|ready| {
                    if ready {
                        h.read_events()
                    } else {
                        Ok(Vec::new())
                    }
                })
        } else {
            h.try_read_events()
        };
        let name = match r {
            Ok(events) => {
                self.check_events(gdrdrv, h.id, &events);
                "events read".to_string()
            }
            Err(e) => format!("events {e}"),
        };
        self.calls.fetch_add(1, Relaxed);
        *self.errnos.lock().unwrap().entry(name).or_default() += 1;
    }

    /// Records `events` of file `id`: each must be a revocation, not read before.
    fn check_events(&self, gdrdrv: bool, id: u64, events: &[gdrpeer::Event]) {
        let mut k = self.known[usize::from(gdrdrv)].lock().unwrap();
        for e in events {
            k.read += 1;
            let wrong = if e.kind != EventKind::Revoked {
                "not a revocation"
            } else if !k.events.insert((id, e.handle)) {
                "reported twice"
            } else {
                continue;
            };
            self.wrong
                .lock()
                .unwrap()
                .push(format!("event {e:?} of file {id}: {wrong}"));
        }
    }

    /// Records a PIN that succeeded: its handle, if its report could be read.
    fn pinned(&self, gdrdrv: bool, handle: Option<u64>) {
        let mut k = self.known[usize::from(gdrdrv)].lock().unwrap();
        k.pins += 1;
        match handle {
            Some(h) => {
                k.had.insert(h);
            }
            None => k.unread += 1,
        }
    }

    /// One call on a `/dev/gdrdrv` file: a mutated gdrdrv command or its magic with a random
    /// number and size.
    fn one_gdrdrv_call(&self, rng: &mut fastrand::Rng, fd: i32, local: &Local) {
        let (cmd, size) = if rng.u32(0..5) == 0 {
            let size = rng.usize(0..64);
            let cmd = rng.u32(0..4) << 30
                | (size as u32) << 16
                | u32::from(gdrdrv::IOCTL_MAGIC) << 8
                | rng.u32(0..256);
            (cmd, size)
        } else {
            GDRDRV_COMMANDS[rng.usize(0..GDRDRV_COMMANDS.len())]
        };
        let at = rng.usize(0..ARENA - 4096) & !7;
        let mut words = [0u64; 6];
        for w in &mut words {
            *w = self.value(rng);
        }
        let gpu = {
            let g = self.gpu.lock().unwrap();
            (!g.is_empty()).then(|| g[rng.usize(0..g.len())])
        };
        let is_pin = cmd == gdrdrv::IOC_PIN_BUFFER || cmd == gdrdrv::IOC_PIN_BUFFER_V2;
        if is_pin {
            if let Some((va, len)) = gpu {
                words[0] = va + rng.u64(0..len);
                words[1] = rng.u64(1..=len);
            }
            if rng.bool() {
                // No token, or no flags.
                words[2] = 0;
            }
        } else {
            let h = self.gdrdrv_handles.lock().unwrap();
            if !h.is_empty() && rng.u32(0..4) != 0 {
                words[0] = h[rng.usize(0..h.len())];
            }
            if cmd == gdrdrv::IOC_GET_ATTR || cmd == gdrdrv::IOC_REQ_MAPPING_TYPE {
                words[usize::from(cmd == gdrdrv::IOC_REQ_MAPPING_TYPE)] = rng.u64(0..5);
            }
        }
        // A PIN's report goes to the thread's own page, where no other thread writes.
        let arg = if is_pin {
            local.report
        } else {
            self.arena + at
        };
        // SAFETY: `arg` is in the arena or the thread's page, with room for the six words.
        unsafe { std::ptr::copy_nonoverlapping(words.as_ptr(), arg as *mut u64, words.len()) };
        let arg = if rng.u32(0..12) == 0 {
            self.pointer(rng, size) as usize
        } else {
            arg
        };
        // SAFETY: the kernel reads and writes at most 48 bytes at `arg` (gdrdrv copies whole
        // structs whatever the number says), which is in the arena or invalid.
        let r = unsafe { libc::ioctl(fd, cmd as _, arg) };
        let name = if r < 0 {
            let e = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
            format!("gdrdrv {}", Errno::from_raw_os_error(e))
        } else {
            if is_pin && arg == local.report {
                let at = if cmd == gdrdrv::IOC_PIN_BUFFER { 4 } else { 3 };
                // SAFETY: the PIN wrote its handle in the thread's page.
                let h = unsafe { (arg as *const u64).add(at).read_unaligned() };
                self.gdrdrv_handles.lock().unwrap().push(h);
                self.pinned(true, Some(h));
            } else if is_pin {
                self.pinned(true, None);
            }
            "gdrdrv success".to_string()
        };
        self.calls.fetch_add(1, Relaxed);
        *self.errnos.lock().unwrap().entry(name).or_default() += 1;
    }

    /// Keeps descriptor `fd`, which a successful EXPORT_DMABUF reported, if it is a dma-buf
    /// not kept yet (another thread may have written over the report in the arena: a number
    /// it does not name stays open until the sweep at the end); closes one over
    /// [`DMABUFS_KEPT`].
    fn keep_dmabuf(&self, fd: i32, rng: &mut fastrand::Rng) {
        self.exported.fetch_add(1, Relaxed);
        let mut kept = self.dmabufs.lock().unwrap();
        if kept.contains(&fd) || !is_dmabuf(fd) {
            return;
        }
        if kept.len() >= DMABUFS_KEPT {
            let i = rng.usize(0..kept.len());
            let old = kept.swap_remove(i);
            // SAFETY: a dma-buf this list kept: only the list closes it.
            unsafe { libc::close(old) };
        }
        kept.push(fd);
    }

    /// One operation on a kept dma-buf: a dma-buf ioctl, an mmap (which must fail), an
    /// import into the NIC (and a transfer through it now and then), or a close. False when
    /// none is kept.
    fn one_dmabuf_op(&self, rng: &mut fastrand::Rng, local: &mut Local) -> bool {
        let fd = {
            let kept = self.dmabufs.lock().unwrap();
            if kept.is_empty() {
                return false;
            }
            kept[rng.usize(0..kept.len())]
        };
        // The descriptor may be closed (and its number reused) by another thread from here
        // on: then the call fails, or lands on a file the fuzzer calls anyway.
        let name = match rng.u32(0..8) {
            0 | 1 => {
                let (cmd, arg) = if rng.bool() {
                    let at = rng.usize(0..ARENA - 8) & !7;
                    let flags = [1u64, 2, 3, 4, 5, 6, 7, rng.u64(..)][rng.usize(0..8)];
                    // SAFETY: in the arena, 8 bytes.
                    unsafe { ((self.arena + at) as *mut u64).write(flags) };
                    (DMA_BUF_IOCTL_SYNC, (self.arena + at) as u64)
                } else {
                    let at = rng.usize(0..ARENA - 64);
                    let name = b"fuzzed-name\0";
                    // SAFETY: in the arena, room for the name.
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            name.as_ptr(),
                            (self.arena + at) as *mut u8,
                            name.len(),
                        )
                    };
                    (DMA_BUF_SET_NAME, (self.arena + at) as u64)
                };
                let arg = if rng.u32(0..6) == 0 {
                    self.pointer(rng, 8)
                } else {
                    arg
                };
                // SAFETY: the dma-buf ioctls read at most 32 bytes at `arg` (the name), in
                // the arena or invalid.
                let r = unsafe { libc::ioctl(fd, cmd as _, arg as usize) };
                errno_name("dma-buf ioctl", r)
            }
            2 => {
                let len = rng.usize(1..=4) * 4096;
                // SAFETY: no MAP_FIXED: a new mapping the kernel places, unmapped untouched.
                let p = unsafe {
                    libc::mmap(
                        std::ptr::null_mut(),
                        len,
                        libc::PROT_READ | libc::PROT_WRITE,
                        libc::MAP_SHARED,
                        fd,
                        0,
                    )
                };
                if p == libc::MAP_FAILED {
                    errno_name("dma-buf mmap", -1)
                } else {
                    if is_dmabuf(fd) {
                        self.wrong
                            .lock()
                            .unwrap()
                            .push(format!("mmap of dma-buf {fd} succeeded"));
                    }
                    // SAFETY: the mapping just made, never touched.
                    unsafe { libc::munmap(p, len) };
                    "dma-buf mmap success".to_string()
                }
            }
            3..=5 if local.nic.is_some() => self.one_import(rng, local, fd),
            _ => {
                let mut kept = self.dmabufs.lock().unwrap();
                if let Some(i) = kept.iter().position(|k| *k == fd) {
                    kept.swap_remove(i);
                    // SAFETY: a dma-buf the list kept, closed once, by the list.
                    unsafe { libc::close(fd) };
                }
                "dma-buf close".to_string()
            }
        };
        self.calls.fetch_add(1, Relaxed);
        *self.errnos.lock().unwrap().entry(name).or_default() += 1;
        true
    }

    /// Imports dma-buf `fd` into the thread's NIC file with random flags, offset and length
    /// (or has the NIC export GPU memory itself, `GDRNIC_DMABUF_KAPI`); keeps a few imports,
    /// and moves a few bytes through one now and then (edu takes 200 ms for it).
    fn one_import(&self, rng: &mut fastrand::Rng, local: &mut Local, fd: i32) -> String {
        let n = local.nic.as_ref().unwrap();
        if !local.imports.is_empty() && rng.u32(0..20) == 0 {
            let (h, len) = local.imports[rng.usize(0..local.imports.len())];
            let at = rng.u64(0..len);
            let count = (len - at).min(rng.u64(1..=64)) as usize;
            let r = if rng.bool() {
                n.send(h, at, count).map(|_| ())
            } else {
                n.recv(h, at, &vec![0x5a; count])
            };
            return format!(
                "nic transfer {}",
                r.err().map_or("success".into(), |e| e.to_string())
            );
        }
        // Every flag: the pinned import without an invalidate op (only persistent exports
        // take it), and the NIC's persistent exports through the kernel API.
        let mut flags = rng.u32(0..32);
        if rng.u32(0..16) == 0 {
            flags |= 1 << rng.u32(5..32);
        }
        let (offset, len) = match (flags & nic::DMABUF_KAPI != 0, rng.u32(0..4)) {
            (true, _) => {
                let g = self.gpu.lock().unwrap();
                match g.get(rng.usize(0..g.len().max(1))) {
                    Some(&(va, len)) => (va + rng.u64(0..len), rng.u64(1..=len)),
                    None => (self.value(rng), self.value(rng)),
                }
            }
            (false, 0) => (self.value(rng), self.value(rng)),
            (false, _) => {
                // Inside the dma-buf, mostly: its size is where SEEK_END goes.
                // SAFETY: lseek on a descriptor number; a wrong one fails.
                let size = unsafe { libc::lseek(fd, 0, libc::SEEK_END) }.max(1) as u64;
                let offset = rng.u64(0..size);
                // One byte past the end now and then.
                let end = size - offset + rng.u64(0..2);
                (offset, rng.u64(1..=end))
            }
        };
        let name = match n.reg_dmabuf(fd, flags, offset, len) {
            Ok(mr) => {
                if local.imports.len() >= 2 {
                    let (old, _) = local.imports.remove(0);
                    let _ = n.dereg(old);
                }
                local.imports.push((mr.handle, len));
                "success".to_string()
            }
            Err(e) => e.to_string(),
        };
        format!("nic import {name}")
    }

    fn one_call(&self, rng: &mut fastrand::Rng, local: &mut Local) {
        if rng.u32(0..12) == 0 && self.one_dmabuf_op(rng, local) {
            return;
        }
        if rng.u32(0..40) == 0 {
            return self.one_events(rng);
        }
        if !self.gdrdrv.is_empty() && rng.u32(0..3) == 0 {
            let fd = self.gdrdrv[rng.usize(0..self.gdrdrv.len())].load(Relaxed);
            if rng.u32(0..5) == 0 {
                return self.one_mmap(rng, fd, true, local.slot);
            }
            return self.one_gdrdrv_call(rng, fd, local);
        }
        let fd = self.fds[rng.usize(0..self.fds.len())].load(Relaxed);
        if rng.u32(0..10) == 0 {
            return self.one_mmap(rng, fd, false, local.slot);
        }
        let (cmd, size) = match rng.u32(0..10) {
            // One of gdrpeer's commands with a mutated argument.
            0..=5 => COMMANDS[rng.usize(0..COMMANDS.len())],
            // gdrpeer's magic with a random number, direction and size.
            6 | 7 => {
                let size = rng.usize(0..256);
                let cmd = rng.u32(0..4) << 30
                    | (size as u32) << 16
                    | u32::from(uapi::IOCTL_MAGIC) << 8
                    | rng.u32(0..256);
                (cmd, size)
            }
            // Anything, but not what the VFS itself handles.
            _ => loop {
                let cmd = rng.u32(..);
                if !VFS_TYPES.contains(&(cmd >> 8 & 0xff)) {
                    break (cmd, ((cmd >> 16) & 0x3fff) as usize);
                }
            },
        };
        let size = size.min(4096);
        let arg = if rng.u32(0..12) == 0 {
            self.pointer(rng, 0)
        } else {
            let at = rng.usize(0..ARENA - 4096) & !7;
            self.argument(rng, cmd, size, at);
            if cmd == uapi::IOCTL_PIN {
                // The report goes to the thread's own page, where no other thread writes.
                // SAFETY: `size` (at most 4096) bytes from the arena to the thread's page.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        (self.arena + at) as *const u8,
                        local.report as *mut u8,
                        size,
                    )
                };
                local.report as u64
            } else {
                (self.arena + at) as u64
            }
        };
        // SAFETY: the kernel reads and writes at most `size` bytes at `arg`, which is in the
        // arena or invalid; nothing else of ours is reachable through it.
        let r = unsafe { libc::ioctl(fd, cmd as _, arg as usize) };
        let name = if r < 0 {
            let e = Errno::from_raw_os_error(
                std::io::Error::last_os_error().raw_os_error().unwrap_or(0),
            );
            if !documented_errno(cmd, e) {
                self.wrong.lock().unwrap().push(format!(
                    "ioctl {cmd:#010x}: {e}, which uapi.rst does not give it"
                ));
            }
            e.to_string()
        } else {
            "success".to_string()
        };
        if r >= 0 && cmd == uapi::IOCTL_PIN {
            // SAFETY: PIN wrote its result at `arg`, in the arena or the thread's page.
            let p = unsafe { std::ptr::read_unaligned(arg as *const uapi::Pin) };
            self.handles.lock().unwrap().push(p.handle);
            self.pinned(false, (arg == local.report as u64).then_some(p.handle));
        }
        if r >= 0 && cmd == uapi::IOCTL_EXPORT_DMABUF {
            // SAFETY: EXPORT_DMABUF wrote its result at `arg`, in the arena.
            let e = unsafe { std::ptr::read_unaligned(arg as *const uapi::ExportDmabuf) };
            self.keep_dmabuf(e.fd, rng);
        }
        self.calls.fetch_add(1, Relaxed);
        *self.errnos.lock().unwrap().entry(name).or_default() += 1;
    }
}

/// Whether Documentation/user/uapi.rst gives `cmd` the errno `e` (its commands' "Errors",
/// the bad-input table, the allocation-failure row) for a caller that opened the file.
fn documented_errno(cmd: u32, e: Errno) -> bool {
    // Any command: its size field or padding (EINVAL), its argument pointer (EFAULT).
    let any = [Errno::INVAL, Errno::FAULT];
    let more: &[Errno] = match cmd {
        uapi::IOCTL_GET_VERSION | uapi::IOCTL_UNPIN | uapi::IOCTL_GET_INFO | uapi::IOCTL_STATS => {
            &[]
        }
        uapi::IOCTL_PIN => &[Errno::NOMEM, Errno::NXIO, Errno::OPNOTSUPP],
        uapi::IOCTL_GET_PAGES => &[Errno::PERM, Errno::NOSPC, Errno::NXIO],
        uapi::IOCTL_DMA_MAP => &[
            Errno::PERM,
            Errno::NODEV,
            Errno::OPNOTSUPP,
            Errno::NXIO,
            Errno::NOSPC,
            Errno::NOMEM,
        ],
        uapi::IOCTL_EXPORT_DMABUF => &[Errno::NOMEM, Errno::NXIO, Errno::OPNOTSUPP, Errno::MFILE],
        // Not a command of gdrpeer's, or one of its numbers with another size.
        _ => return e == Errno::NOTTY,
    };
    any.contains(&e) || more.contains(&e)
}

/// `what` and the outcome of a call that returned `r` (errno when negative).
fn errno_name(what: &str, r: i32) -> String {
    if r < 0 {
        let e = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
        format!("{what} {}", Errno::from_raw_os_error(e))
    } else {
        format!("{what} success")
    }
}

/// Closes every dma-buf descriptor of this process: those kept, and those whose report was
/// overwritten in the arena before it was read. Returns how many were not kept.
fn close_dmabufs(kept: &Mutex<Vec<i32>>) -> Result<usize, String> {
    for fd in kept.lock().unwrap().drain(..) {
        // SAFETY: a dma-buf the list kept, closed once.
        unsafe { libc::close(fd) };
    }
    let mut stray = 0;
    for entry in std::fs::read_dir("/proc/self/fd").map_err(|e| e.to_string())? {
        let fd: i32 = entry
            .map_err(|e| e.to_string())?
            .file_name()
            .to_string_lossy()
            .parse()
            .unwrap_or(-1);
        if fd >= 0 && is_dmabuf(fd) {
            stray += 1;
            // SAFETY: a dma-buf nobody kept: no one else closes it.
            unsafe { libc::close(fd) };
        }
    }
    Ok(stray)
}

fn open_gdrdrv() -> Result<OwnedFd, String> {
    let g = gdrdrv::Gdrdrv::open_default().map_err(|e| e.to_string())?;
    g.as_fd().try_clone_to_owned().map_err(|e| e.to_string())
}

fn open_raw() -> Result<OwnedFd, String> {
    let d = Device::open_default().map_err(|e| e.to_string())?;
    d.as_fd().try_clone_to_owned().map_err(|e| e.to_string())
}

/// `args`: CALLS THREADS SEED.
pub fn run(args: &[String]) -> TestResult {
    let num = |i: usize, default: u64| -> Result<u64, String> {
        args.get(i).map_or(Ok(default), |s| {
            s.parse().map_err(|_| format!("--fuzz: bad number '{s}'"))
        })
    };
    let (calls, threads, seed) = (num(0, 20_000)?, num(1, 4)?, num(2, 1)?);
    check!(threads > 0, "--fuzz: THREADS must be > 0");
    println!("fuzz: {calls} ioctls, {threads} threads, seed {seed}");
    // SAFETY: fresh private anonymous mappings, unmapped below after the threads ended.
    let arena = unsafe {
        mmap_anonymous(
            std::ptr::null_mut(),
            ARENA + 4096,
            ProtFlags::READ | ProtFlags::WRITE,
            MapFlags::PRIVATE,
        )
    }
    .map_err(harness::errno)?;
    let hole = arena as usize + ARENA;
    // SAFETY: unmapping the last page of the mapping made above: a hole.
    unsafe { munmap(hole as *mut _, 4096) }.map_err(harness::errno)?;
    // One page a thread for the reports of PINs.
    let reports_len = threads as usize * 4096;
    // SAFETY: as the arena.
    let reports = unsafe {
        mmap_anonymous(
            std::ptr::null_mut(),
            reports_len,
            ProtFlags::READ | ProtFlags::WRITE,
            MapFlags::PRIVATE,
        )
    }
    .map_err(harness::errno)?;
    sigbus::catch_sigbus(sigbus::Mode::Recover)?;
    let files = AtomicU64::new(0);
    let hold = |fd: &OwnedFd| -> Result<Mutex<Held>, String> {
        Ok(Mutex::new(Held {
            fd: fd.try_clone().map_err(|e| e.to_string())?,
            id: files.fetch_add(1, Relaxed) + 1,
        }))
    };
    let gpu = Gpu::open().map_err(harness::errno)?;
    let mut fds = Vec::new();
    let mut owned = Vec::new();
    let mut held = Vec::new();
    for _ in 0..3 {
        let fd = open_raw()?;
        fds.push(AtomicI32::new(fd.as_raw_fd()));
        held.push(hold(&fd)?);
        owned.push(fd);
    }
    let mut gdrdrv_fds = Vec::new();
    let mut gdrdrv_held = Vec::new();
    if std::path::Path::new(gdrdrv::DEFAULT_PATH).exists() {
        for _ in 0..2 {
            let fd = open_gdrdrv()?;
            gdrdrv_fds.push(AtomicI32::new(fd.as_raw_fd()));
            gdrdrv_held.push(hold(&fd)?);
            owned.push(fd);
        }
    }
    let peer = edu()?;
    let mut f = Fuzzer {
        fds,
        arena: arena as usize,
        hole,
        gpu: Mutex::new(Vec::new()),
        handles: Mutex::new(Vec::new()),
        gdrdrv: gdrdrv_fds,
        gdrdrv_handles: Mutex::new(Vec::new()),
        peer: (peer.domain, peer.bus, peer.devfn),
        calls: AtomicU64::new(0),
        errnos: Mutex::new(BTreeMap::new()),
        generation: AtomicU64::new(0),
        wrong: Mutex::new(Vec::new()),
        dmabufs: Mutex::new(Vec::new()),
        exported: AtomicU64::new(0),
        held,
        gdrdrv_held,
        files,
        known: Default::default(),
        touched: AtomicU64::new(0),
        sigbus_revoked: AtomicU64::new(0),
        sigbus_gone: AtomicU64::new(0),
    };
    let with_nic = std::path::Path::new("/dev/gdrnic").exists();
    let start = Instant::now();
    let mut rng = fastrand::Rng::with_seed(seed);
    let replaced = AtomicU64::new(0);
    let per_thread = calls / threads;
    let reports_at = reports as usize;
    thread::scope(|s| -> TestResult {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let f = &f;
                s.spawn(move || {
                    let mut rng = fastrand::Rng::with_seed(seed * 1000 + t);
                    let mut local = Local {
                        nic: if with_nic { Nic::open().ok() } else { None },
                        slot: t as usize,
                        report: reports_at + t as usize * 4096,
                        ..Default::default()
                    };
                    for _ in 0..per_thread {
                        f.one_call(&mut rng, &mut local);
                    }
                })
            })
            .collect();
        // Meanwhile: replace files under the threads and free GPU memory under the pins.
        while workers.iter().any(|w| !w.is_finished()) {
            match rng.u32(0..3) {
                0 => {
                    let gdrdrv = !f.gdrdrv.is_empty() && rng.u32(0..3) == 0;
                    let (new, fds, handles, held) = if gdrdrv {
                        (open_gdrdrv()?, &f.gdrdrv, &f.gdrdrv_handles, &f.gdrdrv_held)
                    } else {
                        (open_raw()?, &f.fds, &f.handles, &f.held)
                    };
                    let i = rng.usize(0..fds.len());
                    f.generation.fetch_add(1, Relaxed);
                    let mut h = held[i].lock().unwrap();
                    // SAFETY: dup2 over one of our own descriptors: the old file is closed
                    // (calls in flight keep their reference), the number stays valid.
                    unsafe { libc::dup2(new.as_raw_fd(), fds[i].load(Relaxed)) };
                    // The fuzzer's own descriptor of the old file goes too.
                    *h = Held {
                        fd: new,
                        id: f.files.fetch_add(1, Relaxed) + 1,
                    };
                    drop(h);
                    handles.lock().unwrap().clear();
                    replaced.fetch_add(1, Relaxed);
                }
                1 => {
                    let mut g = f.gpu.lock().unwrap();
                    if g.len() < 8 {
                        let len = rng.u64(1..=4) * K64;
                        g.push((gpu.alloc(len).map_err(harness::errno)?.0, len));
                    }
                }
                _ => {
                    let mut g = f.gpu.lock().unwrap();
                    if !g.is_empty() {
                        let i = rng.usize(0..g.len());
                        let (va, _) = g.swap_remove(i);
                        gpu.free(va).map_err(harness::errno)?;
                    }
                }
            }
            thread::sleep(std::time::Duration::from_millis(2));
        }
        for w in workers {
            w.join().map_err(|_| "fuzz thread panicked")?;
        }
        Ok(())
    })?;
    let secs = start.elapsed().as_secs_f64();
    // The memory left freed, the events of the files still open read: the last revocations.
    for (va, _) in f.gpu.lock().unwrap().drain(..) {
        gpu.free(va).map_err(harness::errno)?;
    }
    for (gdrdrv, held) in [(false, &f.held), (true, &f.gdrdrv_held)] {
        for h in held {
            let h = h.lock().unwrap();
            let events = h
                .try_read_events()
                .map_err(|e| format!("events at the end: {e}"))?;
            f.check_events(gdrdrv, h.id, &events);
        }
    }
    // Every event names a handle a PIN of its device returned; where a report was lost, at
    // least one that some file could have given (handles count from 1 in each file).
    for (gdrdrv, k) in [(false, &f.known[0]), (true, &f.known[1])] {
        let k = k.lock().unwrap();
        let shift = if gdrdrv { 28 } else { 0 };
        for (id, h) in &k.events {
            let possible = k.unread > 0
                && *h & ((1 << shift) - 1) == 0
                && (1..=k.pins).contains(&(*h >> shift));
            if !k.had.contains(h) && !possible {
                f.wrong.lock().unwrap().push(format!(
                    "event of file {id} names handle {h}, which no PIN of {} returned",
                    if gdrdrv { "gdrdrv" } else { "gdrpeer" }
                ));
            }
        }
    }
    // The device still answers, and closing everything leaves nothing behind.
    let v = Device::open_default()
        .map_err(|e| e.to_string())?
        .get_version()
        .map_err(|e| format!("GET_VERSION after fuzzing: {e}"))?;
    drop(owned);
    // The fuzzer's own descriptors of the files.
    drop(std::mem::take(&mut f.held));
    drop(std::mem::take(&mut f.gdrdrv_held));
    let stray = close_dmabufs(&f.dmabufs)?;
    drop(gpu);
    // SAFETY: every thread has ended; nothing uses the arena any more.
    unsafe { munmap(arena, ARENA) }.map_err(harness::errno)?;
    // SAFETY: as the arena.
    unsafe { munmap(reports, reports_len) }.map_err(harness::errno)?;
    gdrpeer_idle()?;
    if with_nic {
        eventually(10, "gdrnic registrations", || {
            Ok(nic::nstat("registrations")? == 0 && nic::nstat("dmabuf_imports")? == 0)
        })?;
    }
    report_dma_map_window()?;
    harness::nvsim_counters_back_to_zero()?;
    let n = f.calls.load(Relaxed);
    println!(
        "fuzz figures ({secs:.1} s, {:.0} ioctls/s):",
        n as f64 / secs
    );
    println!("  ioctls sent              {n}");
    println!("  files replaced mid-run   {}", replaced.load(Relaxed));
    println!("  module ABI after         {}", v.abi_string());
    println!("  dma-bufs exported        {}", f.exported.load(Relaxed));
    println!("  of them closed at the end without a report read: {stray}");
    println!("  mappings touched         {}", f.touched.load(Relaxed));
    println!(
        "    SIGBUS, handle revoked {}, handle gone {}",
        f.sigbus_revoked.load(Relaxed),
        f.sigbus_gone.load(Relaxed)
    );
    for (what, k) in [("gdrpeer", &f.known[0]), ("gdrdrv", &f.known[1])] {
        let k = k.lock().unwrap();
        println!(
            "  {what} events read {} (PINs {}, of them {} with the report lost)",
            k.read, k.pins, k.unread
        );
    }
    for (e, c) in f.errnos.lock().unwrap().iter() {
        println!("  {e:<40} {c}");
    }
    let wrong = f.wrong.lock().unwrap();
    for w in wrong.iter().take(20) {
        println!("  wrong: {w}");
    }
    check!(
        wrong.is_empty(),
        "{} outcomes not documented (ioctls, mmap, touch, events)",
        wrong.len()
    );
    Ok(())
}
