// SPDX-License-Identifier: GPL-2.0

//! `gdrpeer-bad-input-table`: every row of the bad-input table in Documentation/user/uapi.rst,
//! checked. The table is read from the document itself, so a row without a check here, or a
//! check without a row there, fails the test.

use crate::doctables::{self, errno_name};
use crate::helpers::ErrnoOf;
use crate::helpers::{
    all_released, dev, edu, fails, get_pages_into, gstat, ok, param, without_rawio, K64,
};
use crate::tests::failnth;
use crate::{dmabuf, proc};
use gdrpeer::{uapi, Device, PinFlags};
use nvsim::testing::{debugfs, errno, Test, TestResult, SKIP};
use nvsim::{check, check_eq, Gpu};
use rustix::{
    fd::{AsFd, AsRawFd, BorrowedFd},
    io::Errno,
};
use std::collections::BTreeMap;

/// The rows of the "Bad input" table: (row, errno name).
fn table() -> Result<Vec<(String, String)>, String> {
    doctables::rows(doctables::UAPI_RST, doctables::BAD_INPUT)
}

/// A raw ioctl: its errno, or success.
fn raw(fd: BorrowedFd<'_>, cmd: u32, arg: usize) -> Result<(), Errno> {
    // SAFETY: every caller passes either an argument of the command's size and layout or an
    // address that is not mapped (the kernel must answer EFAULT, touching nothing).
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), cmd as _, arg) };
    if r < 0 {
        Err(Errno::from_raw_os_error(
            std::io::Error::last_os_error().raw_os_error().unwrap_or(0),
        ))
    } else {
        Ok(())
    }
}

fn must_fail(r: Result<(), Errno>, what: &str) -> Result<Errno, String> {
    r.err().ok_or_else(|| format!("{what}: succeeded"))
}

fn gerr<T: std::fmt::Debug>(r: Result<T, gdrpeer::Error>, what: &str) -> Result<Errno, String> {
    fails(r, what)
}

/// GPU memory, a device, and a pin of its first page, for the rows that need them.
struct Setup {
    gpu: Gpu,
    va: u64,
    id: u64,
    d: Device,
    handle: u64,
}

fn setup() -> Result<Setup, String> {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, id) = gpu.alloc(2 * K64).map_err(errno)?;
    let d = dev()?;
    let handle = ok(d.pin(va, 2 * K64, PinFlags::empty()), "pin")?.handle;
    Ok(Setup {
        gpu,
        va,
        id,
        d,
        handle,
    })
}

/// Forks a child that runs `f` and exits with the errno it found.
pub fn fork_errno(f: impl FnOnce() -> Result<Errno, String>) -> Result<libc::pid_t, String> {
    // SAFETY: the test program is single-threaded here; the child makes system calls and
    // exits without unwinding.
    match unsafe { libc::fork() } {
        -1 => Err("fork failed".into()),
        0 => {
            let code = match f() {
                Ok(e) => e.raw_os_error(),
                Err(e) => {
                    println!("child: {e}");
                    255
                }
            };
            // SAFETY: ends the child without running the parent's destructors.
            unsafe { libc::_exit(code) }
        }
        pid => Ok(pid),
    }
}

/// The errno a child of [`fork_errno`] found.
pub fn wait_errno(pid: libc::pid_t) -> Result<Errno, String> {
    let mut status = 0;
    // SAFETY: waits for our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    check!(
        libc::WIFEXITED(status) && (1..255).contains(&libc::WEXITSTATUS(status)),
        "child failed (status {status:#x})"
    );
    Ok(Errno::from_raw_os_error(libc::WEXITSTATUS(status)))
}

pub fn in_child(f: impl FnOnce() -> Result<Errno, String>) -> Result<Errno, String> {
    wait_errno(fork_errno(f)?)
}

fn pin_errno(d: &Device, va: u64, len: u64) -> Result<Errno, String> {
    gerr(d.pin(va, len, PinFlags::empty()), "PIN")
}

/// Each row's check: the errno the input gets.
fn checks() -> BTreeMap<&'static str, fn() -> Result<Errno, String>> {
    let mut c: BTreeMap<&'static str, fn() -> Result<Errno, String>> = BTreeMap::new();
    c.insert("open-unprivileged", || {
        in_child(|| {
            // SAFETY: plain system calls in the forked child.
            check!(
                unsafe { libc::setgid(65534) == 0 && libc::setuid(65534) == 0 },
                "setuid"
            );
            match Device::open_default() {
                Ok(_) => Err("opened as uid 65534".into()),
                Err(e) => e.errno_of().ok_or_else(|| e.to_string()),
            }
        })
    });
    c.insert("allocation-fails", || {
        same_errno(
            failnth::first_allocations_failed()?,
            "calls with their first allocation failed",
        )
    });
    c.insert("pin-zero-length", || {
        let s = setup()?;
        pin_errno(&s.d, s.va, 0)
    });
    c.insert("pin-range-overflows", || {
        pin_errno(&dev()?, u64::MAX - K64, 2 * K64)
    });
    c.insert("pin-rounded-end-overflows", || {
        pin_errno(&dev()?, u64::MAX - 10, 5)
    });
    c.insert("pin-longer-than-limit", || {
        let s = setup()?;
        pin_errno(&s.d, s.va, param("max_pin_bytes")? + 1)
    });
    c.insert("pin-unknown-flags", || {
        let s = setup()?;
        let p = uapi::Pin {
            flags: 0x80,
            va: s.va,
            len: K64,
            ..uapi::Pin::new()
        };
        must_fail(
            raw(s.d.as_fd(), uapi::IOCTL_PIN, &p as *const _ as usize),
            "PIN with flag 0x80",
        )
    });
    c.insert("pin-not-gpu-memory", || {
        pin_errno(&dev()?, 0x1000_0000, K64)
    });
    c.insert("pin-other-process-memory", || {
        let (child, va) = proc::spawn_ready("--gpu-alloc-and-wait")?;
        let va: u64 = va
            .trim()
            .parse()
            .map_err(|_| format!("child said '{va}'"))?;
        let r = pin_errno(&dev()?, va, K64);
        proc::kill_and_wait(child)?;
        r
    });
    c.insert("pin-freed-memory", || {
        let s = setup()?;
        s.gpu.free(s.va).map_err(errno)?;
        pin_errno(&s.d, s.va, K64)
    });
    c.insert("wrong-struct-size", || {
        let s = setup()?;
        let mut seen = Vec::new();
        let mut v = uapi::Version {
            size: 8,
            ..uapi::Version::new()
        };
        seen.push(raw(
            s.d.as_fd(),
            uapi::IOCTL_GET_VERSION,
            &mut v as *mut _ as usize,
        ));
        let p = uapi::Pin {
            size: 8,
            va: s.va,
            len: K64,
            ..uapi::Pin::new()
        };
        seen.push(raw(s.d.as_fd(), uapi::IOCTL_PIN, &p as *const _ as usize));
        let u = uapi::Unpin {
            size: 4,
            handle: s.handle,
            ..uapi::Unpin::new()
        };
        seen.push(raw(s.d.as_fd(), uapi::IOCTL_UNPIN, &u as *const _ as usize));
        let mut i = uapi::Info {
            size: 0,
            handle: s.handle,
            ..uapi::Info::new()
        };
        seen.push(raw(
            s.d.as_fd(),
            uapi::IOCTL_GET_INFO,
            &mut i as *mut _ as usize,
        ));
        let mut st = uapi::Stats {
            size: 1,
            ..uapi::Stats::new()
        };
        seen.push(raw(
            s.d.as_fd(),
            uapi::IOCTL_STATS,
            &mut st as *mut _ as usize,
        ));
        let e = uapi::ExportDmabuf {
            size: 4,
            ..dmabuf::export_args(s.handle, 0, 0)
        };
        seen.push(Err(dmabuf::export_errno(s.d.as_fd(), e, "EXPORT_DMABUF")?));
        same_errno(seen, "wrong size")
    });
    c.insert("nonzero-padding", || {
        let s = setup()?;
        let u = uapi::Unpin {
            pad: 1,
            handle: s.handle,
            ..uapi::Unpin::new()
        };
        let mut m = uapi::DmaMap {
            pad: 1,
            handle: s.handle,
            ..uapi::DmaMap::new()
        };
        let mut st = uapi::Stats {
            pad: 1,
            ..uapi::Stats::new()
        };
        same_errno(
            vec![
                raw(s.d.as_fd(), uapi::IOCTL_UNPIN, &u as *const _ as usize),
                raw(s.d.as_fd(), uapi::IOCTL_DMA_MAP, &mut m as *mut _ as usize),
                raw(s.d.as_fd(), uapi::IOCTL_STATS, &mut st as *mut _ as usize),
            ],
            "padding",
        )
    });
    c.insert("unknown-handle", || {
        let s = setup()?;
        let h = s.handle + 1000;
        let e = [
            gerr(s.d.unpin(h), "UNPIN")?,
            gerr(s.d.info(h), "GET_INFO")?,
            gerr(s.d.get_pages(h), "GET_PAGES")?,
            gerr(s.d.dma_map(h, edu()?), "DMA_MAP")?,
            gerr(s.d.export_dmabuf(h), "EXPORT_DMABUF")?,
        ];
        same_errno(e.iter().map(|e| Err(*e)).collect(), "unknown handle")
    });
    c.insert("double-unpin", || {
        let s = setup()?;
        ok(s.d.unpin(s.handle), "first UNPIN")?;
        gerr(s.d.unpin(s.handle), "second UNPIN")
    });
    c.insert("handle-of-another-file", || {
        let s = setup()?;
        gerr(dev()?.info(s.handle), "GET_INFO on another file")
    });
    c.insert("file-of-another-process", || {
        let s = setup()?;
        in_child(|| pin_errno(&s.d, s.va, K64))
    });
    c.insert("file-passed-by-scm-rights", || {
        let s = setup()?;
        let (mine, theirs) = proc::unix_pair()?;
        let va = s.va;
        let pid = fork_errno(move || {
            let fd = proc::recv_fd(theirs.as_fd())?;
            let p = uapi::Pin {
                va,
                len: K64,
                ..uapi::Pin::new()
            };
            must_fail(
                raw(fd.as_fd(), uapi::IOCTL_PIN, &p as *const _ as usize),
                "PIN",
            )
        })?;
        // A file the child never had, opened after the fork, reaches it only by the socket.
        proc::send_fd(mine.as_fd(), dev()?.as_fd())?;
        wait_errno(pid)
    });
    c.insert("bad-argument-pointer", || {
        must_fail(
            raw(dev()?.as_fd(), uapi::IOCTL_PIN, 8),
            "PIN with pointer 8",
        )
    });
    c.insert("bad-address-array", || {
        let s = setup()?;
        let mut g = uapi::GetPages {
            count: 2,
            handle: s.handle,
            addrs: 8,
            ..uapi::GetPages::new()
        };
        must_fail(
            raw(
                s.d.as_fd(),
                uapi::IOCTL_GET_PAGES,
                &mut g as *mut _ as usize,
            ),
            "GET_PAGES into address 8",
        )
    });
    c.insert("short-address-array", || {
        let s = setup()?;
        let pages = get_pages_into(&s.d, s.handle, 1)?;
        // DMA_MAP's array too, refused before anything is mapped (since 2026-11-29: the
        // mapping was made first, and stayed for nothing until the unpin).
        let (peer, mapped) = (edu()?, gstat("dma_pages_mapped")?);
        let mut addr = [0u64; 1];
        let mut m = uapi::DmaMap {
            count: 1,
            handle: s.handle,
            addrs: addr.as_mut_ptr() as u64,
            pci_domain: peer.domain,
            pci_bus: peer.bus,
            pci_devfn: peer.devfn,
            ..uapi::DmaMap::new()
        };
        let dma = raw(s.d.as_fd(), uapi::IOCTL_DMA_MAP, &mut m as *mut _ as usize);
        check_eq!(
            gstat("dma_pages_mapped")?,
            mapped,
            "DMA-mapped pages after a DMA_MAP with a short array"
        );
        same_errno(
            vec![pages.map(|_| ()), dma],
            "GET_PAGES and DMA_MAP of 1 entry for 2 pages",
        )
    });
    c.insert("get-pages-unprivileged", || {
        let s = setup()?;
        Ok(without_rawio(&s.d, s.handle)?.0)
    });
    c.insert("dma-map-unprivileged", || {
        let s = setup()?;
        Ok(without_rawio(&s.d, s.handle)?.1)
    });
    c.insert("dma-map-no-such-device", || {
        let s = setup()?;
        let nowhere = gdrpeer::PciAddress {
            domain: 0x7777,
            bus: 0x42,
            devfn: 0,
        };
        gerr(s.d.dma_map(s.handle, nowhere), "DMA_MAP")
    });
    c.insert("get-pages-revoked", || {
        let s = setup()?;
        debugfs("free", &s.id.to_string())?;
        gerr(s.d.get_pages(s.handle), "GET_PAGES")
    });
    c.insert("dma-map-revoked", || {
        let s = setup()?;
        debugfs("free", &s.id.to_string())?;
        gerr(s.d.dma_map(s.handle, edu()?), "DMA_MAP")
    });
    c.insert("export-flags", || {
        let s = setup()?;
        // Bit 1: no flag of ABI 1.5 (bit 0 is GDRPEER_EXPORT_PERSISTENT).
        let e = uapi::ExportDmabuf {
            flags: 2,
            ..dmabuf::export_args(s.handle, 0, 0)
        };
        dmabuf::export_errno(s.d.as_fd(), e, "EXPORT_DMABUF with flag 2")
    });
    c.insert("export-handle-and-range", || {
        let s = setup()?;
        let both = dmabuf::export_args(s.handle, s.va, K64);
        let neither = dmabuf::export_args(0, 0, 0);
        same_errno(
            vec![
                Err(dmabuf::export_errno(s.d.as_fd(), both, "both")?),
                Err(dmabuf::export_errno(s.d.as_fd(), neither, "neither")?),
            ],
            "handle and range",
        )
    });
    c.insert("export-revoked", || {
        let s = setup()?;
        debugfs("free", &s.id.to_string())?;
        gerr(s.d.export_dmabuf(s.handle), "EXPORT_DMABUF")
    });
    c.insert("export-other-process", || {
        let s = setup()?;
        dmabuf::export_by_scm_receiver(s.va)
    });
    c.insert("export-unwritable-answer", || {
        let s = setup()?;
        dmabuf::export_into_read_only(s.d.as_fd(), dmabuf::export_args(s.handle, 0, 0))
    });
    c.insert("mmap-private", || {
        let s = setup()?;
        // SAFETY: a new mapping at an address of the kernel's choice; unmapped below if made.
        let r = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                4096,
                rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::WRITE,
                rustix::mm::MapFlags::PRIVATE,
                s.d.as_fd(),
                uapi::mmap_offset(s.handle, 0),
            )
        };
        if let Ok(p) = r {
            // SAFETY: the mapping just made, used by nothing.
            let _ = unsafe { rustix::mm::munmap(p, 4096) };
        }
        must_fail(r.map(|_| ()), "mmap MAP_PRIVATE")
    });
    c.insert("mmap-past-window", || {
        let s = setup()?;
        // The window is two GPU pages: 8 KiB from its last 4 KiB on pass its end.
        gerr(
            s.d.map(s.handle, 2 * K64 - 4096, 8192),
            "mmap past the window",
        )
    });
    c.insert("mmap-revoked", || {
        let s = setup()?;
        debugfs("free", &s.id.to_string())?;
        gerr(s.d.map(s.handle, 0, 4096), "mmap after the free")
    });
    c.insert("unknown-command", || {
        const UNKNOWN: u32 = rustix::ioctl::opcode::read_write::<uapi::Pin>(uapi::IOCTL_MAGIC, 99);
        let mut p = uapi::Pin::new();
        must_fail(
            raw(dev()?.as_fd(), UNKNOWN, &mut p as *mut _ as usize),
            "command 99",
        )
    });
    c.insert("command-size-mismatch", || {
        // PIN's number with an argument 8 bytes longer.
        let cmd = uapi::IOCTL_PIN + (8 << 16);
        let mut buf = [0u64; 8];
        must_fail(
            raw(dev()?.as_fd(), cmd, buf.as_mut_ptr() as usize),
            "PIN with another size",
        )
    });
    c
}

/// The errno all of `results` failed with, if they agree.
fn same_errno(results: Vec<Result<(), Errno>>, what: &str) -> Result<Errno, String> {
    let errs: Vec<Errno> = results
        .iter()
        .map(|r| r.err().ok_or_else(|| format!("{what}: a call succeeded")))
        .collect::<Result<_, _>>()?;
    check!(
        errs.windows(2).all(|w| w[0] == w[1]),
        "{what}: different errnos {errs:?}"
    );
    Ok(errs[0])
}

/// The child of the `pin-other-process-memory` row (`--gpu-alloc-and-wait`): allocates GPU
/// memory, prints "ready VA" and waits to be killed.
pub fn gpu_alloc_and_wait() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(K64).map_err(errno)?;
    proc::ready_and_wait_with(&va.to_string())
}

fn bad_input_table() -> TestResult {
    let rows = table()?;
    let mut checks = checks();
    let mut wrong = Vec::new();
    for (row, want) in &rows {
        let Some(f) = checks.remove(row.as_str()) else {
            wrong.push(format!("{row}: no check for this row"));
            continue;
        };
        match f() {
            Ok(e) if errno_name(e) == *want => println!("  {row:<28} {want}"),
            Ok(e) => wrong.push(format!(
                "{row}: got {}, the table says {want}",
                errno_name(e)
            )),
            // A kernel without what the row needs (fault injection): it is checked on the
            // test kernel.
            Err(e) if e.starts_with(SKIP) => println!("  {row:<28} skipped: {}", &e[SKIP.len()..]),
            Err(e) => wrong.push(format!("{row}: {e}")),
        }
        // Every row leaves the module as it found it.
        all_released().map_err(|e| format!("after {row}: {e}"))?;
    }
    for row in checks.keys() {
        wrong.push(format!("{row}: checked but not in the table"));
    }
    check_eq!(wrong, Vec::<String>::new(), "bad-input rows");
    Ok(())
}

/// This subject's tests, in the order they run.
pub const TESTS: &[Test] = &[("gdrpeer-bad-input-table", bad_input_table)];
