// SPDX-License-Identifier: GPL-2.0

//! The SIGBUS probe of the runs that touch mappings while memory is freed under them (the
//! stress run and the ioctl fuzzer): each thread registers its live mapping in a slot of
//! [`MAPPED`] (where it is, the file and the handle it maps, and which device), and the
//! handler, on a SIGBUS in one, asks the file whether the handle is still valid. A SIGBUS is
//! expected only once the memory was freed (the handle is revoked: gdrpeer's GET_INFO says
//! so, gdrdrv's GET_CB_FLAG is 1) or, where the run allows it, the handle was unpinned
//! meanwhile by another thread (GET_INFO fails); a SIGBUS in a mapping of a valid handle is a
//! bug, and one anywhere else kills the process as without the handler.
//!
//! What the handler does then depends on the run ([`Mode`]): the stress workers exit (the
//! orchestrator starts a worker for the operations left), the fuzzer replaces the whole
//! mapping with anonymous memory so that the access completes, records the outcome in the
//! slot, and goes on.

use gdrpeer::{gdrdrv, uapi};
use nvsim::check;
use nvsim::testing::TestResult;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, AtomicU8, Ordering::Relaxed};

/// A worker's exit status after a SIGBUS in one of its mappings (the memory was freed).
pub const SIGBUS_EXIT: i32 = 77;

/// What the handler does after an expected SIGBUS.
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Mode {
    /// Print `sigbus in a mapping` and exit with [`SIGBUS_EXIT`]; an unexpected one prints
    /// `unexpected: ...` and exits with 1.
    Exit = 1,
    /// Record the outcome in the slot, put anonymous memory in place of the mapping and
    /// return: the access completes.
    Recover = 2,
}

static MODE: AtomicU8 = AtomicU8::new(Mode::Exit as u8);

/// A slot's outcome: no SIGBUS (yet).
pub const NONE: u32 = 0;
/// A SIGBUS with the handle revoked (the memory was freed).
pub const REVOKED: u32 = 1;
/// A SIGBUS with the handle gone from the file (unpinned by another thread).
pub const GONE: u32 = 2;
/// A SIGBUS with the handle valid: a bug.
pub const VALID: u32 = 3;

/// A live mapping of a thread: where it is, the file and handle it maps, and the outcome of
/// a SIGBUS in it.
pub struct Mapped {
    start: AtomicU64,
    end: AtomicU64,
    fd: AtomicI32,
    handle: AtomicU64,
    gdrdrv: AtomicBool,
    /// Whether a handle gone from the file is expected (unpinned by another thread).
    gone_ok: AtomicBool,
    outcome: AtomicU32,
}

/// The mappings live in this process, one slot per thread (`start` 0 when none).
pub static MAPPED: [Mapped; 64] = [const {
    Mapped {
        start: AtomicU64::new(0),
        end: AtomicU64::new(0),
        fd: AtomicI32::new(-1),
        handle: AtomicU64::new(0),
        gdrdrv: AtomicBool::new(false),
        gone_ok: AtomicBool::new(false),
        outcome: AtomicU32::new(NONE),
    }
}; 64];

/// What to register of a mapping: the file (which must stay open while it is registered),
/// the handle, the device, and whether its handle may be unpinned meanwhile.
#[derive(Clone, Copy)]
pub struct Probe {
    pub fd: i32,
    pub handle: u64,
    pub gdrdrv: bool,
    pub gone_ok: bool,
}

/// Registers `[base, base + len)` in `slot` (taken modulo the table).
pub fn register(slot: usize, base: u64, len: u64, p: Probe) {
    let m = &MAPPED[slot % MAPPED.len()];
    m.end.store(base + len, Relaxed);
    m.fd.store(p.fd, Relaxed);
    m.handle.store(p.handle, Relaxed);
    m.gdrdrv.store(p.gdrdrv, Relaxed);
    m.gone_ok.store(p.gone_ok, Relaxed);
    m.outcome.store(NONE, Relaxed);
    m.start.store(base, Relaxed);
}

/// Ends the registration of `slot`: the outcome of a SIGBUS while it lasted.
pub fn unregister(slot: usize) -> u32 {
    let m = &MAPPED[slot % MAPPED.len()];
    m.start.store(0, Relaxed);
    m.outcome.swap(NONE, Relaxed)
}

/// Whether a SIGBUS in `m` is expected: the handle's state as its file says.
fn judge(m: &Mapped) -> u32 {
    let (fd, handle) = (m.fd.load(Relaxed), m.handle.load(Relaxed));
    let (r, revoked) = if m.gdrdrv.load(Relaxed) {
        let mut f = gdrdrv::GetCbFlag {
            handle,
            flag: 0,
            pad: 0,
        };
        // SAFETY: ioctl(2) is async-signal-safe; GET_CB_FLAG reads and writes one GetCbFlag.
        let r = unsafe { libc::ioctl(fd, gdrdrv::IOC_GET_CB_FLAG as _, &mut f) };
        (r, f.flag != 0)
    } else {
        let mut i = uapi::Info {
            handle,
            ..uapi::Info::new()
        };
        // SAFETY: ioctl(2) is async-signal-safe; GET_INFO reads and writes one Info.
        let r = unsafe { libc::ioctl(fd, uapi::IOCTL_GET_INFO as _, &mut i) };
        (r, i.state == uapi::STATE_REVOKED)
    };
    match (r, revoked) {
        (0, true) => REVOKED,
        (0, false) => VALID,
        _ if m.gone_ok.load(Relaxed) => GONE,
        _ => VALID,
    }
}

/// The handler: see the module's documentation.
extern "C" fn on_sigbus(_sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for an SA_SIGINFO handler.
    let addr = unsafe { (*info).si_addr() } as u64;
    let slot = MAPPED.iter().find(|m| {
        let (s, e) = (m.start.load(Relaxed), m.end.load(Relaxed));
        s != 0 && (s..e).contains(&addr)
    });
    if let Some(m) = slot {
        let outcome = judge(m);
        if MODE.load(Relaxed) == Mode::Recover as u8 {
            let (s, e) = (m.start.load(Relaxed), m.end.load(Relaxed));
            // SAFETY: mmap(2) is a system call; MAP_FIXED replaces exactly the registered
            // mapping, which its thread (this one: the fault is synchronous) unmaps later.
            let p = unsafe {
                libc::mmap(
                    s as *mut libc::c_void,
                    (e - s) as usize,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                    -1,
                    0,
                )
            };
            if p != libc::MAP_FAILED {
                m.outcome.store(outcome, Relaxed);
                return;
            }
        } else {
            let (msg, code): (&[u8], i32) = match outcome {
                REVOKED | GONE => (b"sigbus in a mapping\n", SIGBUS_EXIT),
                _ => (b"unexpected: sigbus in a mapping of a valid handle\n", 1),
            };
            // SAFETY: write(2) and _exit(2) are async-signal-safe; `msg` is a static string.
            unsafe {
                libc::write(1, msg.as_ptr().cast(), msg.len());
                libc::_exit(code);
            }
        }
    }
    // SAFETY: back to the default action, then re-raise: the process dies of SIGBUS.
    unsafe {
        libc::signal(libc::SIGBUS, libc::SIG_DFL);
        libc::raise(libc::SIGBUS);
    }
}

/// Installs [`on_sigbus`] for this process, in `mode`.
pub fn catch_sigbus(mode: Mode) -> TestResult {
    MODE.store(mode as u8, Relaxed);
    // SAFETY: a zeroed sigaction is valid; the handler has the SA_SIGINFO signature.
    let r = unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_sigbus as *const () as usize;
        sa.sa_flags = libc::SA_SIGINFO;
        libc::sigaction(libc::SIGBUS, &sa, std::ptr::null_mut())
    };
    check!(r == 0, "sigaction(SIGBUS)");
    Ok(())
}

/// Writes then reads one byte at each of `offsets` of the mapping at `base` (`prot` says
/// which of the two it allows). Returns the byte read last, if any.
pub fn touch(base: u64, offsets: &[usize], v: u8, read: bool, write: bool) -> Option<u8> {
    let mut last = None;
    for &at in offsets {
        let p = (base as usize + at) as *mut u8;
        if write {
            // SAFETY: inside a live mapping of ours that allows writes; a SIGBUS here is the
            // handler's.
            unsafe { p.write_volatile(v) };
        }
        if read {
            // SAFETY: as above, for reads.
            last = Some(unsafe { p.read_volatile() });
        }
    }
    last
}
