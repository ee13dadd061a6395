// SPDX-License-Identifier: GPL-2.0

//! `gdrpeer-test --stress OPS PROCS THREADS SEED`: processes times threads doing random
//! gdrpeer, NIC and GPU-memory operations while nvsim fails calls, fires free callbacks at
//! random moments and runs short of BAR1, and processes are killed with SIGKILL. At the end
//! nothing may be left: nvsim's pins, BAR1 bytes and DMA mappings, gdrpeer's regions and
//! contexts, gdrnic's registrations, and no write into freed GPU memory.
//!
//! Threads export windows as dma-bufs (EXPORT_DMABUF, of ranges and of handles, a third of
//! the ranges persistent), import them into the sample NIC (dynamic and pinned, the pinned
//! import without an invalidate op for persistent exports, and the NIC's own exports through
//! the kernel API, persistent or not), move bytes through the imports, close the descriptors
//! and drop the imports, in any order, while the memory is freed under all of it.
//!
//! Threads also map handles (mmap, touch every page, munmap) while other threads and nvsim
//! free the memory under them, and read the files' invalidation events (ABI 1.3), on
//! `/dev/gdrpeer` and, where it exists, on `/dev/gdrdrv` (PIN_BUFFER, REQ_MAPPING_TYPE,
//! mmap, touch, munmap, UNPIN_BUFFER, events). A touch of memory freed meanwhile raises
//! SIGBUS: the worker's handler ([`crate::sigbus`]) checks that the address lies in one of
//! its live mappings and that the file says the handle is revoked, says so and exits with
//! [`SIGBUS_EXIT`], and the run counts it and starts a worker for the operations left; a
//! SIGBUS in a mapping of a valid handle, or anywhere else, fails the run. Every event must
//! be a revocation of a handle the thread pinned on that file, reported once.
//!
//! Run in the test guest with nvsim.ko, gdrpeer.ko and gdrnic.ko loaded (gdrnic optional).

use crate::helpers::ErrnoOf;
use crate::helpers::{edu, eventually, gdrpeer_idle, gstats, report_dma_map_window, K64};
use crate::nic::{Nic, DMABUF_KAPI, DMABUF_KAPI_PERSISTENT, DMABUF_PINNED, DMABUF_PINNED_NOREVOKE};
use crate::sigbus::{self, Probe, SIGBUS_EXIT};
use gdrpeer::{gdrdrv::Gdrdrv, uapi, Device, Dmabuf, EventSource, PciAddress, PinFlags};
use nvsim::testing::{self as harness, debugfs, TestResult};
use nvsim::{check, Gpu};
use rustix::{
    fd::{AsFd, AsRawFd},
    io::Errno,
};
use std::{
    collections::{HashMap, HashSet},
    io::{BufRead, BufReader, Write},
    process::{Child, Command, Stdio},
    sync::{
        atomic::{AtomicU64, Ordering::Relaxed},
        Arc, Mutex,
    },
    thread,
    time::{Duration, Instant},
};

/// The operations, in the order of [`WEIGHTS`].
/// The suffix of a kind's count of successes in a worker's `progress` line.
const OK: &str = ".ok";

/// Below this many operations a run need not see every kind succeed.
const OPS_FOR_EVERY_KIND: u64 = 5_000;

const KINDS: [&str; 24] = [
    "alloc",
    "cumemfree",
    "delayed_free",
    "free_on_pin",
    "pin",
    "unpin",
    "info",
    "get_pages",
    "dma_map",
    "nic",
    "close",
    "fork",
    "stats",
    "map",
    "events",
    "export",
    "import",
    "kapi_import",
    "dmabuf_xfer",
    "close_dmabuf",
    "gdrdrv_pin",
    "gdrdrv_unpin",
    "gdrdrv_map",
    "gdrdrv_events",
];
/// How often each kind is picked, in parts of 1000. Every transfer costs the NIC 200 ms
/// (edu's DMA engine), so the kinds that move bytes are rare.
const WEIGHTS: [u32; 24] = [
    80, 30, 15, 5, 225, 165, 85, 60, 70, 5, 15, 5, 55, 60, 20, 25, 6, 2, 2, 15, 20, 15, 12, 8,
];
/// The most dma-bufs and kept imports a thread holds; one more closes one at random.
const DMABUFS_HELD: usize = 6;
const IMPORTS_HELD: usize = 4;

/// mmap a random part of `h`'s window, write and read a byte of every 4 KiB page, munmap.
/// Registered in `slot` of the SIGBUS probe ([`crate::sigbus`]) while it lives.
fn map_and_touch(d: &Device, h: u64, slot: usize, rng: &mut fastrand::Rng) -> Result<(), Errno> {
    let info = d.info(h).map_err(errno_of)?;
    let window = u64::from(info.page_count) * u64::from(info.page_size);
    let probe = Probe {
        fd: d.as_fd().as_raw_fd(),
        handle: h,
        gdrdrv: false,
        gone_ok: false,
    };
    touch_part(
        window,
        false,
        |off, len| d.map(h, off, len),
        probe,
        slot,
        rng,
    )
}

/// libgdrapi's map of gdrdrv handle `h` on `/dev/gdrdrv`: REQ_MAPPING_TYPE (NONE, the
/// driver's choice, or write-combining), an mmap of the window's first pages, then as
/// [`map_and_touch`]. gdrdrv maps only a pin that starts on a 64 KiB page (`aligned`): the
/// mmap of any other must fail with EINVAL. EINVAL for an aligned pin is expected only once
/// its memory was freed (GET_CB_FLAG says so), and then reported as ENXIO.
fn gdrdrv_map_and_touch(
    g: &Gdrdrv,
    (h, aligned): (u64, bool),
    slot: usize,
    rng: &mut fastrand::Rng,
) -> Result<(), Errno> {
    let ty = [
        gdrpeer::gdrdrv::MAPPING_TYPE_NONE,
        gdrpeer::gdrdrv::MAPPING_TYPE_WC,
    ][rng.usize(0..2)];
    g.req_mapping_type(h, ty).map_err(errno_of)?;
    let window = g.info(h).map_err(errno_of)?.mapped_size;
    if !aligned {
        return match g.mmap(h, 0, window as usize) {
            Err(e) if e.errno_of() == Some(Errno::INVAL) => Ok(()),
            // Mapped, or refused for another reason: not what gdrdrv does.
            _ => Err(Errno::PROTO),
        };
    }
    let probe = Probe {
        fd: g.as_fd().as_raw_fd(),
        handle: h,
        gdrdrv: true,
        gone_ok: false,
    };
    let mapped = |_, len| {
        g.mmap(h, 0, len).map_err(|e| match e.errno_of() {
            Some(Errno::INVAL) if g.cb_flag(h).unwrap_or(false) => {
                gdrpeer::Error::from_errno(gdrpeer::Op::GdrdrvMmap, Errno::NXIO.raw_os_error())
            }
            _ => e,
        })
    };
    touch_part(window, true, mapped, probe, slot, rng)
}

/// Maps a random part of a window of `window` bytes (`map` of an offset and a length; from
/// the window's start if `from_start`), writes and reads a byte of each of its pages,
/// registered with the SIGBUS probe meanwhile, and unmaps it.
fn touch_part(
    window: u64,
    from_start: bool,
    map: impl FnOnce(u64, usize) -> Result<gdrpeer::Mapping, gdrpeer::Error>,
    probe: Probe,
    slot: usize,
    rng: &mut fastrand::Rng,
) -> Result<(), Errno> {
    const PAGE: u64 = 4096;
    let pages = window / PAGE;
    let first = if from_start { 0 } else { rng.u64(0..pages) };
    let n = rng.u64(1..=pages - first);
    let m = map(first * PAGE, (n * PAGE) as usize).map_err(errno_of)?;
    sigbus::register(slot, m.as_ptr() as u64, n * PAGE, probe);
    let v = rng.u8(..);
    for p in 0..n as usize {
        let at = p * PAGE as usize + rng.usize(0..PAGE as usize);
        m.write(at, &[v]);
        let mut b = [0];
        m.read(at, &mut b);
    }
    // Exit mode: a SIGBUS never returns here.
    sigbus::unregister(slot);
    Ok(())
}

/// Whether the module queues events: a read of a fresh file with nothing queued is EAGAIN
/// with O_NONBLOCK where it does, EINVAL where read(2) is not implemented.
pub fn events_supported() -> Result<bool, String> {
    use rustix::fs::{fcntl_setfl, OFlags};
    let d = Device::open_default().map_err(|e| e.to_string())?;
    fcntl_setfl(&d, OFlags::NONBLOCK).map_err(harness::errno)?;
    let mut buf = [0u8; 16];
    match rustix::io::read(&d, &mut buf) {
        Err(Errno::AGAIN) => Ok(true),
        Err(Errno::INVAL) => Ok(false),
        r => Err(format!("read of a fresh file: {r:?}")),
    }
}

/// Reads the events queued on `d` (`what` names the device): each must be a revocation of a
/// handle this thread pinned on the file, not reported before (`reported`).
fn read_events(
    d: &impl EventSource,
    what: &str,
    pinned: &[u64],
    reported: &mut HashSet<u64>,
) -> Result<(), Errno> {
    use gdrpeer::EventKind;
    for e in d.try_read_events().map_err(errno_of)? {
        let wrong = if e.kind != EventKind::Revoked || !pinned.contains(&e.handle) {
            "not a revocation of a handle pinned here"
        } else if !reported.insert(e.handle) {
            "reported twice"
        } else {
            continue;
        };
        let _ = writeln!(
            std::io::stdout().lock(),
            "unexpected: {what} events: {e:?}: {wrong} (pinned here: {pinned:?})"
        );
    }
    Ok(())
}

/// Injected failures: nvsim's knob, and the errnos it alternates between. A failed
/// put_pages leaves its pin to the free callback (since 2026-11-29).
const FAULTS: [&str; 3] = ["fail_get_pages", "fail_dma_map", "fail_put_pages"];
const FAULT_ERRNOS: [i32; 2] = [libc::ENOMEM, libc::EIO];
const FAULT_PERCENT: u32 = 3;

/// One allocation of GPU memory in a worker process.
#[derive(Clone, Copy)]
struct Alloc {
    va: u64,
    id: u64,
    len: u64,
}

/// What the threads of a worker process share.
struct Shared {
    gpu: Gpu,
    allocs: Mutex<Vec<Alloc>>,
    done: AtomicU64,
    counts: [AtomicU64; KINDS.len()],
    /// Of `counts`, the operations that did something and succeeded.
    oks: [AtomicU64; KINDS.len()],
    peer: Option<PciAddress>,
    nic: bool,
    /// The module queues invalidation events ([`events_supported`]).
    events: bool,
    /// `/dev/gdrdrv` exists.
    gdrdrv: bool,
}

fn pick(rng: &mut fastrand::Rng) -> usize {
    let mut x = rng.u32(0..WEIGHTS.iter().sum::<u32>());
    for (i, w) in WEIGHTS.iter().enumerate() {
        if x < *w {
            return i;
        }
        x -= w;
    }
    unreachable!()
}

/// A random window inside an allocation: any alignment, at most two pages.
fn window(rng: &mut fastrand::Rng, a: Alloc) -> (u64, u64) {
    let start = rng.u64(0..a.len);
    let len = rng.u64(1..=(a.len - start).min(2 * K64));
    (a.va + start, len)
}

/// Whether `e` is an outcome the operation may have under faults, frees and races.
fn expected(kind: &str, e: Errno) -> bool {
    match kind {
        // The memory was freed (EINVAL from nvsim, ENXIO from a callback during the call),
        // or an injected failure, or no BAR1 or GPU memory left.
        "pin" | "dma_map" | "nic" => {
            [Errno::INVAL, Errno::NXIO, Errno::NOMEM, Errno::IO].contains(&e)
        }
        // As PIN for a range, or a handle the memory of which was freed (ENXIO).
        "export" | "kapi_import" => {
            [Errno::INVAL, Errno::NXIO, Errno::NOMEM, Errno::IO].contains(&e)
        }
        // The memory was freed (attach or map refused), or an injected failure of the DMA
        // mapping made at attach.
        "import" => [Errno::NXIO, Errno::NOMEM, Errno::IO].contains(&e),
        "get_pages" | "map" | "dmabuf_xfer" => e == Errno::NXIO,
        // As PIN, through gdrdrv.
        "gdrdrv_pin" => [Errno::INVAL, Errno::NXIO, Errno::NOMEM, Errno::IO].contains(&e),
        // The memory was freed under the handle.
        "gdrdrv_map" => e == Errno::NXIO,
        "alloc" => e == Errno::NOMEM,
        // Freed already by a delayed free.
        "cumemfree" | "delayed_free" | "free_on_pin" => [Errno::INVAL, Errno::NOENT].contains(&e),
        _ => false,
    }
}

/// One thread of a worker: `ops` random operations. An unexpected outcome is reported at
/// once (`unexpected: ...`), so that a worker killed later has said it.
fn worker_thread(sh: &Shared, seed: u64, ops: u64, slot: usize) {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut dev = Device::open_default().ok();
    let mut handles: Vec<u64> = Vec::new();
    // Every handle pinned on `dev`, unpinned ones too: a revocation may be read later.
    let mut pinned: Vec<u64> = Vec::new();
    // The handles whose revocation `dev` reported.
    let mut reported = HashSet::new();
    // The same on `/dev/gdrdrv`, where it exists.
    let gd = if sh.gdrdrv {
        Gdrdrv::open_default().ok()
    } else {
        None
    };
    let (mut gd_handles, mut gd_pinned, mut gd_reported) = (Vec::new(), Vec::new(), HashSet::new());
    let nic = if sh.nic { Nic::open().ok() } else { None };
    // dma-bufs exported here, and imports kept on `nic` (handle, length).
    // With each, whether it is a persistent export (which the import without an invalidate
    // op may take).
    let mut dmabufs: Vec<(Dmabuf, bool)> = Vec::new();
    let mut imports: Vec<(u32, u64)> = Vec::new();
    for _ in 0..ops {
        let kind = pick(&mut rng);
        // Set where there was nothing to do the operation on.
        let mut idle = false;
        let name = KINDS[kind];
        let alloc = {
            let a = sh.allocs.lock().unwrap();
            (!a.is_empty()).then(|| a[rng.usize(0..a.len())])
        };
        let r: Result<(), Errno> = match (name, alloc, dev.as_ref()) {
            ("alloc", _, _) if sh.allocs.lock().unwrap().len() < 12 => {
                let len = rng.u64(1..=6) * K64 - rng.u64(0..K64);
                sh.gpu.alloc(len).map(|(va, id)| {
                    sh.allocs.lock().unwrap().push(Alloc { va, id, len });
                })
            }
            ("cumemfree" | "delayed_free" | "free_on_pin", Some(a), _) => {
                sh.allocs.lock().unwrap().retain(|x| x.id != a.id);
                match name {
                    "cumemfree" => sh.gpu.free(a.va),
                    "delayed_free" => nvsim_knob("free", &format!("{} {}", a.id, rng.u32(0..3000))),
                    _ => {
                        // Back in the list: only the next pin frees it.
                        sh.allocs.lock().unwrap().push(a);
                        nvsim_knob("free_on_pin", &format!("{} {}", a.id, rng.u32(0..500)))
                    }
                }
            }
            ("pin", Some(a), Some(d)) => {
                let (va, len) = window(&mut rng, a);
                let flags = if rng.u32(0..20) == 0 {
                    PinFlags::PERSISTENT
                } else {
                    PinFlags::empty()
                };
                d.pin(va, len, flags)
                    .map(|p| {
                        handles.push(p.handle);
                        pinned.push(p.handle);
                    })
                    .map_err(errno_of)
            }
            ("unpin", _, Some(d)) if !handles.is_empty() => {
                let h = handles.swap_remove(rng.usize(0..handles.len()));
                d.unpin(h).map_err(errno_of)
            }
            ("info" | "get_pages" | "dma_map", _, Some(d)) if !handles.is_empty() => {
                let h = handles[rng.usize(0..handles.len())];
                match (name, sh.peer) {
                    ("info", _) => d.info(h).map(|_| ()).map_err(errno_of),
                    ("dma_map", Some(peer)) => d.dma_map(h, peer).map(|_| ()).map_err(errno_of),
                    _ => d.get_pages(h).map(|_| ()).map_err(errno_of),
                }
            }
            ("nic", Some(a), _) if nic.is_some() => {
                let n = nic.as_ref().unwrap();
                let (va, len) = window(&mut rng, a);
                n.reg(va, len).and_then(|mr| {
                    let at = rng.u64(0..len);
                    let r = n.send(mr.handle, at, (len - at).min(64) as usize);
                    n.dereg(mr.handle)?;
                    r.map(|_| ())
                })
            }
            ("map", _, Some(d)) if !handles.is_empty() => {
                let h = handles[rng.usize(0..handles.len())];
                map_and_touch(d, h, slot, &mut rng)
            }
            ("events", _, Some(d)) if sh.events => {
                read_events(d, "gdrpeer", &pinned, &mut reported)
            }
            ("gdrdrv_pin", Some(a), _) if gd.is_some() => {
                let g = gd.as_ref().unwrap();
                let (mut va, len) = window(&mut rng, a);
                if rng.bool() {
                    // Half the pins start on a GPU page, as libgdrapi's users align them.
                    va = (va & !(K64 - 1)).max(a.va);
                }
                let r = if rng.bool() {
                    g.pin(va, len, 0, 0)
                } else {
                    g.pin_v2(va, len, 0)
                };
                r.map(|h| {
                    gd_handles.push((h, va % K64 == 0));
                    gd_pinned.push(h);
                })
                .map_err(errno_of)
            }
            ("gdrdrv_unpin", _, _) if !gd_handles.is_empty() => {
                let (h, _) = gd_handles.swap_remove(rng.usize(0..gd_handles.len()));
                gd.as_ref().unwrap().unpin(h).map_err(errno_of)
            }
            ("gdrdrv_map", _, _) if !gd_handles.is_empty() => {
                let h = gd_handles[rng.usize(0..gd_handles.len())];
                gdrdrv_map_and_touch(gd.as_ref().unwrap(), h, slot, &mut rng)
            }
            ("gdrdrv_events", _, _) if gd.is_some() && sh.events => {
                read_events(gd.as_ref().unwrap(), "gdrdrv", &gd_pinned, &mut gd_reported)
            }
            ("export", Some(a), Some(d)) => {
                let by_handle = !handles.is_empty() && rng.bool();
                let persistent = !by_handle && rng.u32(0..3) == 0;
                let r = if by_handle {
                    d.export_dmabuf(handles[rng.usize(0..handles.len())])
                } else {
                    let (va, len) = window(&mut rng, a);
                    if persistent {
                        d.export_dmabuf_persistent(va, len)
                    } else {
                        d.export_dmabuf_range(va, len)
                    }
                };
                r.map(|b| {
                    if dmabufs.len() >= DMABUFS_HELD {
                        dmabufs.swap_remove(rng.usize(0..dmabufs.len()));
                    }
                    dmabufs.push((b, persistent));
                })
                .map_err(errno_of)
            }
            ("import", _, _) if nic.is_some() && !dmabufs.is_empty() => {
                let (b, persistent) = &dmabufs[rng.usize(0..dmabufs.len())];
                let offset = rng.u64(0..b.size);
                let len = rng.u64(1..=(b.size - offset).min(2 * K64));
                let flags = match rng.u32(0..3) {
                    0 => 0,
                    // ib_umem_dmabuf_get_pinned's import: a persistent export's only.
                    1 if *persistent => DMABUF_PINNED_NOREVOKE,
                    _ => DMABUF_PINNED,
                };
                let n = nic.as_ref().unwrap();
                n.reg_dmabuf(b.fd.as_raw_fd(), flags, offset, len)
                    .and_then(|mr| keep_or_drop(n, &mut imports, mr.handle, len, &mut rng))
            }
            ("kapi_import", Some(a), _) if nic.is_some() => {
                let (va, len) = window(&mut rng, a);
                let n = nic.as_ref().unwrap();
                let flags = if rng.u32(0..3) == 0 {
                    DMABUF_KAPI | DMABUF_KAPI_PERSISTENT | DMABUF_PINNED_NOREVOKE
                } else {
                    DMABUF_KAPI
                };
                n.reg_dmabuf(-1, flags, va, len)
                    .and_then(|mr| keep_or_drop(n, &mut imports, mr.handle, len, &mut rng))
            }
            ("dmabuf_xfer", _, _) if !imports.is_empty() => {
                let (h, len) = imports[rng.usize(0..imports.len())];
                nic_xfer(nic.as_ref().unwrap(), h, len, &mut rng)
            }
            ("close_dmabuf", _, _) if !dmabufs.is_empty() || !imports.is_empty() => {
                if rng.bool() && !dmabufs.is_empty() {
                    drop(dmabufs.swap_remove(rng.usize(0..dmabufs.len())));
                    Ok(())
                } else if !imports.is_empty() {
                    let (h, _) = imports.swap_remove(rng.usize(0..imports.len()));
                    nic.as_ref().unwrap().dereg(h)
                } else {
                    Ok(())
                }
            }
            ("close", _, _) => {
                handles.clear();
                pinned.clear();
                reported.clear();
                dev = None;
                Device::open_default()
                    .map(|d| dev = Some(d))
                    .map_err(errno_of)
            }
            ("fork", Some(a), Some(d)) => fork_child_pins(d.as_fd().as_raw_fd(), a.va),
            ("stats", _, Some(d)) => d.stats().map(|_| ()).map_err(errno_of),
            // Nothing to do it on: counts as done, not as a success.
            _ => {
                idle = true;
                Ok(())
            }
        };
        if r.is_ok() && !idle {
            sh.oks[kind].fetch_add(1, Relaxed);
        }
        if let Err(e) = r {
            if !expected(name, e) {
                let _ = writeln!(std::io::stdout().lock(), "unexpected: {name}: {e}");
            }
        }
        sh.counts[kind].fetch_add(1, Relaxed);
        sh.done.fetch_add(1, Relaxed);
    }
    // Whatever is left is released by closing the files.
}

fn errno_of(e: gdrpeer::Error) -> Errno {
    e.errno_of().unwrap_or(Errno::PROTO)
}

fn nvsim_knob(file: &str, value: &str) -> Result<(), Errno> {
    std::fs::write(format!("/sys/kernel/debug/nvsim/{file}"), value)
        .map_err(|e| Errno::from_raw_os_error(e.raw_os_error().unwrap_or(libc::EIO)))
}

/// Forks a child that tries to pin through the parent's file: it must get EACCES. The child
/// makes raw system calls only (the parent has other threads).
fn fork_child_pins(fd: i32, va: u64) -> Result<(), Errno> {
    let mut p = uapi::Pin {
        va,
        len: K64,
        ..uapi::Pin::new()
    };
    // SAFETY: the child makes one ioctl on an inherited descriptor and exits.
    match unsafe { libc::fork() } {
        -1 => Err(Errno::AGAIN),
        0 => {
            // SAFETY: PIN reads and writes one `uapi::Pin`, which lives on this stack.
            let r = unsafe { libc::ioctl(fd, uapi::IOCTL_PIN as _, &mut p) };
            // SAFETY: reading this thread's errno.
            let e = unsafe { *libc::__errno_location() };
            // SAFETY: leaves the child without running anything of the parent's.
            unsafe { libc::_exit(if r == -1 && e == libc::EACCES { 0 } else { 1 }) }
        }
        pid => {
            let mut status = 0;
            // SAFETY: waits for our own child.
            unsafe { libc::waitpid(pid, &mut status, 0) };
            if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 {
                Ok(())
            } else {
                Err(Errno::PERM)
            }
        }
    }
}

/// Moves up to 64 bytes (one chunk) to or from a random place of registration `h` of `len`
/// bytes.
fn nic_xfer(n: &Nic, h: u32, len: u64, rng: &mut fastrand::Rng) -> Result<(), Errno> {
    let at = rng.u64(0..len);
    let count = (len - at).min(rng.u64(1..=64));
    if rng.bool() {
        n.send(h, at, count as usize).map(|_| ())
    } else {
        n.recv(h, at, &vec![rng.u8(..); count as usize])
    }
}

/// A new dma-buf import `h` of `len` bytes: moves bytes through it half the time, then keeps
/// it for later transfers (dropping one kept before, over [`IMPORTS_HELD`]) or drops it.
fn keep_or_drop(
    n: &Nic,
    imports: &mut Vec<(u32, u64)>,
    h: u32,
    len: u64,
    rng: &mut fastrand::Rng,
) -> Result<(), Errno> {
    let r = if rng.bool() {
        nic_xfer(n, h, len, rng)
    } else {
        Ok(())
    };
    if rng.bool() {
        if imports.len() >= IMPORTS_HELD {
            let (old, _) = imports.swap_remove(rng.usize(0..imports.len()));
            n.dereg(old)?;
        }
        imports.push((h, len));
    } else {
        n.dereg(h)?;
    }
    r
}

/// `--stress-worker SEED OPS THREADS`: one worker process. Prints `progress N k=v ...`
/// lines (operations done, in all and by kind), `unexpected: ...` lines as they happen, and
/// `done` at the end.
pub fn worker(args: &[String]) -> TestResult {
    let num = |i: usize| -> Result<u64, String> {
        args.get(i)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("--stress-worker: argument {i}"))
    };
    let (seed, ops, threads) = (num(0)?, num(1)?, num(2)?);
    sigbus::catch_sigbus(sigbus::Mode::Exit)?;
    let sh = Arc::new(Shared {
        gpu: Gpu::open().map_err(harness::errno)?,
        allocs: Mutex::new(Vec::new()),
        done: AtomicU64::new(0),
        counts: Default::default(),
        oks: Default::default(),
        peer: edu().ok(),
        nic: std::path::Path::new("/dev/gdrnic").exists(),
        events: events_supported()?,
        gdrdrv: std::path::Path::new(gdrpeer::gdrdrv::DEFAULT_PATH).exists(),
    });
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            let sh = sh.clone();
            let n = ops / threads + u64::from(t < ops % threads);
            thread::spawn(move || worker_thread(&sh, seed.wrapping_mul(31) + t, n, t as usize))
        })
        .collect();
    let progress = || {
        let counts: Vec<String> = KINDS
            .iter()
            .zip(&sh.counts)
            .map(|(k, c)| format!("{k}={}", c.load(Relaxed)))
            .chain(
                KINDS
                    .iter()
                    .zip(&sh.oks)
                    .map(|(k, c)| format!("{k}{OK}={}", c.load(Relaxed))),
            )
            .collect();
        let done = sh.done.load(Relaxed);
        let _ = writeln!(
            std::io::stdout().lock(),
            "progress {done} {}",
            counts.join(" ")
        );
    };
    while workers.iter().any(|w| !w.is_finished()) {
        progress();
        thread::sleep(Duration::from_millis(200));
    }
    for w in workers {
        w.join().map_err(|_| "stress thread panicked")?;
    }
    progress();
    let _ = writeln!(std::io::stdout().lock(), "done");
    Ok(())
}

/// What the orchestrator learns from one worker process.
#[derive(Default)]
struct Report {
    progress: u64,
    counts: HashMap<String, u64>,
    unexpected: Vec<String>,
    finished: bool,
}

struct Worker {
    child: Child,
    ops: u64,
    report: Arc<Mutex<Report>>,
}

fn spawn(seed: u64, ops: u64, threads: u64) -> Result<Worker, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut child = Command::new(exe)
        .args(["--stress-worker", &seed.to_string(), &ops.to_string()])
        .arg(threads.to_string())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("spawn worker: {e}"))?;
    let report = Arc::new(Mutex::new(Report::default()));
    let stdout = child.stdout.take().unwrap();
    let r = report.clone();
    thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let mut r = r.lock().unwrap();
            if let Some(p) = line.strip_prefix("progress ") {
                let mut words = p.split_whitespace();
                r.progress = words
                    .next()
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(r.progress);
                r.counts = words
                    .filter_map(|kv| {
                        let (k, v) = kv.split_once('=')?;
                        Some((k.to_string(), v.parse().ok()?))
                    })
                    .collect();
            } else if let Some(u) = line.strip_prefix("unexpected: ") {
                r.unexpected.push(u.to_string());
            } else if line == "done" {
                r.finished = true;
            } else if line == "sigbus in a mapping" {
                // The exit status (SIGBUS_EXIT) is what counts.
            } else {
                r.unexpected.push(format!("worker said: {line}"));
            }
        }
    });
    Ok(Worker { child, ops, report })
}

fn counter_deltas(before: &HashMap<String, u64>, after: &HashMap<String, u64>, name: &str) -> u64 {
    after.get(name).copied().unwrap_or(0) - before.get(name).copied().unwrap_or(0)
}

/// gdrnic's counters, none without it.
fn nic_stats() -> Result<HashMap<String, u64>, String> {
    let path = "/sys/kernel/debug/gdrnic/stats";
    if std::path::Path::new(path).exists() {
        harness::name_values(path)
    } else {
        Ok(HashMap::new())
    }
}

/// The orchestrator: `args` are OPS PROCS THREADS SEED.
pub fn run(args: &[String]) -> TestResult {
    let num = |i: usize, default: u64| -> Result<u64, String> {
        args.get(i).map_or(Ok(default), |s| {
            s.parse().map_err(|_| format!("--stress: bad number '{s}'"))
        })
    };
    let (ops, procs, threads, seed) = (num(0, 20_000)?, num(1, 3)?, num(2, 3)?, num(3, 1)?);
    check!(
        procs > 0 && threads > 0,
        "--stress: PROCS and THREADS must be > 0"
    );
    println!("stress: {ops} operations, {procs} processes x {threads} threads, seed {seed}");
    if !events_supported()? {
        println!("stress: the module queues no events (read is EINVAL): no event reads");
    }
    let nv0 = harness::stats()?;
    let g0 = gstats()?;
    let n0 = nic_stats()?;
    let bar1_size = nv0["bar1_size"];
    // Room for a few dozen pinned pages: evictions and ENOMEM retries all the time.
    debugfs("bar1_size", &(nv0["bar1_reserve"] + 48 * K64).to_string())?;
    let mut rng = fastrand::Rng::with_seed(seed);
    let r = (|| {
        let start = Instant::now();
        let mut next_seed = seed * 1000;
        let mut running = Vec::new();
        let mut ended: Vec<Arc<Mutex<Report>>> = Vec::new();
        for p in 0..procs {
            next_seed += 1;
            running.push(spawn(
                next_seed,
                ops / procs + u64::from(p < ops % procs),
                threads,
            )?);
        }
        let (mut kills, mut fault_switches, mut sigbus_exits) = (0u64, 0u64, 0u64);
        while !running.is_empty() {
            thread::sleep(Duration::from_millis(rng.u64(200..800)));
            // Injected failures: a new errno now and then.
            let errno = FAULT_ERRNOS[rng.usize(0..FAULT_ERRNOS.len())];
            for f in FAULTS {
                debugfs(f, &format!("-1 {errno} {FAULT_PERCENT}"))?;
            }
            fault_switches += 1;
            // SIGKILL to a worker now and then; a new one takes over its remaining work.
            if rng.u32(0..4) == 0 {
                let i = rng.usize(0..running.len());
                let mut w: Worker = running.swap_remove(i);
                let _ = w.child.kill();
                let _ = w.child.wait();
                thread::sleep(Duration::from_millis(50));
                let rep = w.report.lock().unwrap();
                if !rep.finished {
                    kills += 1;
                    let left = w.ops.saturating_sub(rep.progress);
                    next_seed += 1;
                    if left > 0 {
                        running.push(spawn(next_seed, left, threads)?);
                    }
                }
                drop(rep);
                ended.push(w.report);
            }
            let mut i = 0;
            while i < running.len() {
                let Some(status) = running[i].child.try_wait().map_err(|e| e.to_string())? else {
                    i += 1;
                    continue;
                };
                let w = running.swap_remove(i);
                if status.code() == Some(SIGBUS_EXIT) {
                    // A mapping's memory was freed under a touch: go on in a new worker.
                    sigbus_exits += 1;
                    let left = w.ops.saturating_sub(w.report.lock().unwrap().progress);
                    next_seed += 1;
                    if left > 0 {
                        running.push(spawn(next_seed, left, threads)?);
                    }
                } else if !status.success() {
                    w.report
                        .lock()
                        .unwrap()
                        .unexpected
                        .push(format!("worker ended: {status}"));
                }
                ended.push(w.report);
            }
        }
        for f in FAULTS {
            debugfs(f, "0 0")?;
        }
        // Give the pipe readers the last lines.
        thread::sleep(Duration::from_millis(200));
        let mut done = 0;
        let mut counts: HashMap<String, u64> = HashMap::new();
        let mut unexpected = Vec::new();
        for r in &ended {
            let r = r.lock().unwrap();
            done += r.progress;
            for (k, v) in &r.counts {
                *counts.entry(k.clone()).or_default() += v;
            }
            unexpected.extend(r.unexpected.iter().cloned());
        }
        let secs = start.elapsed().as_secs_f64();

        // Everything must be back: nothing pinned, mapped or registered anywhere.
        gdrpeer_idle()?;
        eventually(10, "gdrnic registrations", || {
            let n = nic_stats()?;
            Ok(["registrations", "dmabuf_imports"]
                .iter()
                .all(|k| n.get(*k).is_none_or(|v| *v == 0)))
        })?;
        debugfs("check_freed", "1")?;
        // The window's entries are the run's luck, not something left: reported and
        // cleared before the counters are read.
        report_dma_map_window()?;
        let nv1 = harness::stats()?;
        let g1 = gstats()?;
        let left: Vec<(String, u64)> = harness::MUST_BE_ZERO
            .iter()
            .map(|k| (format!("nvsim {k}"), nv1[*k]))
            .chain(
                ["contexts", "regions", "pinned_bytes", "deferred_releases"]
                    .iter()
                    .map(|k| (format!("gdrpeer {k}"), g1[*k])),
            )
            .filter(|(_, v)| *v != 0)
            .collect();
        let lost: u64 = left.iter().map(|(_, v)| v).sum();

        println!(
            "stress figures ({secs:.1} s, {:.0} operations/s):",
            done as f64 / secs
        );
        println!("  operations done          {done}");
        let mut kinds: Vec<_> = counts.iter().filter(|(k, _)| !k.ends_with(OK)).collect();
        kinds.sort();
        let by_kind: Vec<String> = kinds
            .iter()
            .map(|(k, v)| {
                let ok = counts.get(&format!("{k}{OK}")).copied().unwrap_or(0);
                format!("{k} {v} ({ok} ok)")
            })
            .collect();
        println!("    by kind                {}", by_kind.join(", "));
        println!("  processes killed (-9)    {kills}");
        println!("  fault errno switches     {fault_switches}");
        println!("  SIGBUS in a mapping      {sigbus_exits}");
        for (what, k) in [
            ("callbacks fired", "callbacks_fired"),
            ("faults injected", "faults_injected"),
            ("nv-p2p get_pages calls", "get_pages_calls"),
            ("get_pages failed", "get_pages_failed"),
        ] {
            println!("  {what:<24} {}", counter_deltas(&nv0, &nv1, k));
        }
        for (what, k) in [
            ("cache hits", "hits"),
            ("cache misses", "misses"),
            ("evictions over a limit", "evictions_limit"),
            ("ENOMEM evict-and-retry", "evictions_enomem"),
            ("callbacks seen", "callbacks"),
        ] {
            println!("  {what:<24} {}", counter_deltas(&g0, &g1, k));
        }
        let n1 = nic_stats()?;
        for (what, k) in [
            ("NIC transfers", "transfers"),
            ("NIC failed transfers", "failed_transfers"),
            ("dma-buf maps (NIC)", "dmabuf_maps"),
            ("dma-buf invalidations", "dmabuf_invalidations"),
        ] {
            println!("  {what:<24} {}", counter_deltas(&n0, &n1, k));
        }
        println!("  unexpected errors        {}", unexpected.len());
        println!("  lost (must be 0)         {lost}");
        for u in unexpected.iter().take(20) {
            println!("    {u}");
        }
        check!(done >= ops * 9 / 10, "only {done} of {ops} operations done");
        // A run whose pins all failed, or whose devices did not open, would be done too:
        // every kind the machine offers must have succeeded, and the cache, the callbacks
        // and the ENOMEM eviction must have worked.
        if ops >= OPS_FOR_EVERY_KIND {
            let mut wanted = vec!["pin", "unpin", "info", "get_pages", "map", "export"];
            if edu().is_ok() {
                wanted.push("dma_map");
            }
            if std::path::Path::new(gdrpeer::gdrdrv::DEFAULT_PATH).exists() {
                wanted.extend(["gdrdrv_pin", "gdrdrv_unpin", "gdrdrv_map"]);
            }
            if std::path::Path::new("/dev/gdrnic").exists() {
                wanted.extend(["nic", "import", "kapi_import", "dmabuf_xfer"]);
            }
            let never: Vec<&str> = wanted
                .into_iter()
                .filter(|k| counts.get(&format!("{k}{OK}")).copied().unwrap_or(0) == 0)
                .collect();
            check!(
                never.is_empty(),
                "operations that never succeeded: {never:?}"
            );
            for (what, n) in [
                (
                    "callbacks fired",
                    counter_deltas(&nv0, &nv1, "callbacks_fired"),
                ),
                ("cache hits", counter_deltas(&g0, &g1, "hits")),
                (
                    "ENOMEM evict-and-retry",
                    counter_deltas(&g0, &g1, "evictions_enomem"),
                ),
            ] {
                check!(n > 0, "{what}: none in {ops} operations");
            }
        }
        check!(
            unexpected.is_empty(),
            "{} unexpected errors",
            unexpected.len()
        );
        check!(lost == 0, "left behind: {left:?}");
        harness::nvsim_counters_back_to_zero()
    })();
    for f in FAULTS {
        let _ = debugfs(f, "0 0");
    }
    debugfs("bar1_size", &bar1_size.to_string())?;
    r
}
