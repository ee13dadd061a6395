// SPDX-License-Identifier: GPL-2.0

//! Tests that need raw ioctls, other threads or other processes: the ABI's error paths,
//! capabilities, fork, SCM_RIGHTS and a killed process.

use crate::{all_released, dev, edu, gstat, ok};
use gdrpeer::{uapi, Device, PinFlags};
use nvsim::testing::{errno, stat, TestResult};
use nvsim::{check, check_eq, Gpu};
use rustix::{
    fd::{AsFd, BorrowedFd, OwnedFd},
    io::Errno,
    ioctl,
    net::{
        self, RecvAncillaryBuffer, RecvAncillaryMessage, SendAncillaryBuffer, SendAncillaryMessage,
    },
    thread::{CapabilitySet, CapabilitySets},
};
use std::{
    io::{BufRead, BufReader, Read, Write},
    mem::MaybeUninit,
    process::{Child, Command, ExitCode, Stdio},
};

const K64: u64 = 1 << 16;

/// Raw PIN: the errno, or the handle.
fn raw_pin(fd: BorrowedFd<'_>, mut p: uapi::Pin) -> Result<u64, Errno> {
    // SAFETY: PIN reads and writes one `uapi::Pin`.
    unsafe {
        ioctl::ioctl(
            fd,
            ioctl::Updater::<{ uapi::IOCTL_PIN }, uapi::Pin>::new(&mut p),
        )
    }?;
    Ok(p.handle)
}

fn pin_args(va: u64, len: u64) -> uapi::Pin {
    uapi::Pin {
        size: size_of::<uapi::Pin>() as u32,
        va,
        len,
        ..Default::default()
    }
}

/// Raw GET_PAGES into a user array of `n` entries: the count written, or the errno.
pub fn get_pages_into(d: &Device, handle: u64, n: u32) -> Result<Result<u32, Errno>, String> {
    get_pages_fd(d.as_fd(), handle, n)
}

fn get_pages_fd(fd: BorrowedFd<'_>, handle: u64, n: u32) -> Result<Result<u32, Errno>, String> {
    let mut addrs = vec![0u64; n as usize];
    let mut g = uapi::GetPages {
        size: size_of::<uapi::GetPages>() as u32,
        count: n,
        handle,
        addrs: addrs.as_mut_ptr() as u64,
    };
    // SAFETY: GET_PAGES reads and writes one `uapi::GetPages` and writes at most `count`
    // u64s at `addrs`, which has that many.
    let r = unsafe {
        ioctl::ioctl(
            fd,
            ioctl::Updater::<{ uapi::IOCTL_GET_PAGES }, uapi::GetPages>::new(&mut g),
        )
    };
    Ok(r.map(|()| g.count))
}

/// Bad pointers, sizes, flags, padding and commands.
pub fn raw_abi_errors(d: &Device) -> TestResult {
    let fd = d.as_fd();
    // SAFETY: the pointer is deliberately bad; the module must fail with EFAULT, not use it.
    let r = unsafe {
        ioctl::ioctl(
            fd,
            ioctl::IntegerSetter::<{ uapi::IOCTL_PIN }>::new_usize(8),
        )
    };
    check_eq!(r, Err(Errno::FAULT), "PIN with a bad pointer");
    // SAFETY: as above.
    let r = unsafe {
        ioctl::ioctl(
            fd,
            ioctl::IntegerSetter::<{ uapi::IOCTL_GET_VERSION }>::new_usize(8),
        )
    };
    check_eq!(r, Err(Errno::FAULT), "GET_VERSION with a bad pointer");
    const UNKNOWN: ioctl::Opcode = ioctl::opcode::read_write::<uapi::Pin>(uapi::IOCTL_MAGIC, 99);
    let mut p = pin_args(0x1000_0000, K64);
    // SAFETY: the command is unknown to the module; the argument is a valid `uapi::Pin`.
    let r = unsafe { ioctl::ioctl(fd, ioctl::Updater::<UNKNOWN, uapi::Pin>::new(&mut p)) };
    check_eq!(r, Err(Errno::NOTTY), "unknown command");
    check_eq!(
        raw_pin(
            fd,
            uapi::Pin {
                size: 8,
                ..pin_args(0x1000_0000, K64)
            }
        ),
        Err(Errno::INVAL),
        "PIN with a wrong size"
    );
    check_eq!(
        raw_pin(
            fd,
            uapi::Pin {
                flags: 0x80,
                ..pin_args(0x1000_0000, K64)
            }
        ),
        Err(Errno::INVAL),
        "PIN with unknown flags"
    );
    let u = uapi::Unpin {
        size: size_of::<uapi::Unpin>() as u32,
        pad: 1,
        handle: 1,
    };
    // SAFETY: UNPIN reads one `uapi::Unpin`.
    let r = unsafe {
        ioctl::ioctl(
            fd,
            ioctl::Setter::<{ uapi::IOCTL_UNPIN }, uapi::Unpin>::new(u),
        )
    };
    check_eq!(r, Err(Errno::INVAL), "UNPIN with non-zero padding");
    // A bad address array: EFAULT, and the handle stays usable.
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(K64).map_err(errno)?;
    let h = raw_pin(fd, pin_args(va, K64)).map_err(errno)?;
    let mut g = uapi::GetPages {
        size: size_of::<uapi::GetPages>() as u32,
        count: 1,
        handle: h,
        addrs: 16,
    };
    // SAFETY: the array pointer is deliberately bad; the module must fail with EFAULT.
    let r = unsafe {
        ioctl::ioctl(
            fd,
            ioctl::Updater::<{ uapi::IOCTL_GET_PAGES }, uapi::GetPages>::new(&mut g),
        )
    };
    check_eq!(r, Err(Errno::FAULT), "GET_PAGES into a bad array");
    check_eq!(get_pages_into(d, h, 1)?, Ok(1), "GET_PAGES after EFAULT");
    ok(d.unpin(h), "unpin")
}

/// GET_PAGES and DMA_MAP from a thread of the owning process without CAP_SYS_RAWIO.
pub fn without_rawio(d: &Device, handle: u64) -> Result<(Errno, Errno), String> {
    let peer = edu()?;
    std::thread::scope(|s| {
        s.spawn(|| {
            // Capabilities are per thread: only this one loses CAP_SYS_RAWIO.
            let mut caps = rustix::thread::capabilities(None).map_err(errno)?;
            caps.effective -= CapabilitySet::SYS_RAWIO;
            rustix::thread::set_capabilities(None, CapabilitySets { ..caps }).map_err(errno)?;
            let pages = get_pages_into(d, handle, 16)?.map(|_| ());
            let map = d.dma_map(handle, peer).map(|_| ());
            Ok((
                pages.err().ok_or("GET_PAGES succeeded")?,
                map.err()
                    .and_then(|e| e.errno())
                    .ok_or("DMA_MAP succeeded")?,
            ))
        })
        .join()
        .map_err(|_| "thread panicked".to_string())?
    })
}

/// Forks; the child runs `child` and exits with 0 if it returns Ok (printing the error
/// otherwise). Returns the child's pid.
pub fn fork(child: impl FnOnce() -> TestResult) -> Result<libc::pid_t, String> {
    // SAFETY: the test program is single-threaded here; the child only makes system calls
    // and exits without unwinding.
    match unsafe { libc::fork() } {
        -1 => Err(std::io::Error::last_os_error().to_string()),
        0 => {
            let code = match child() {
                Ok(()) => 0,
                Err(e) => {
                    println!("child: {e}");
                    1
                }
            };
            let _ = std::io::stdout().flush();
            // SAFETY: ends the child without running the parent's destructors twice.
            unsafe { libc::_exit(code) }
        }
        pid => Ok(pid),
    }
}

pub fn wait(pid: libc::pid_t) -> TestResult {
    let mut status = 0;
    // SAFETY: waits for our own child.
    check!(
        unsafe { libc::waitpid(pid, &mut status, 0) } == pid,
        "waitpid"
    );
    check!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "child failed (status {status:#x})"
    );
    Ok(())
}

/// The opener's pins are its own: a forked child gets EACCES and changes nothing.
pub fn fork_child_gets_eacces() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(2 * K64).map_err(errno)?;
    let d = dev()?;
    let p = ok(d.pin(va, 2 * K64, PinFlags::empty()), "pin")?;
    let child = fork(|| {
        check_eq!(
            raw_pin(d.as_fd(), pin_args(va, K64)),
            Err(Errno::ACCESS),
            "child PIN"
        );
        check_eq!(
            get_pages_fd(d.as_fd(), p.handle, 2)?,
            Err(Errno::ACCESS),
            "child GET_PAGES"
        );
        check_eq!(
            d.unpin(p.handle).ok().is_none(),
            true,
            "child UNPIN refused"
        );
        ok(d.get_version(), "child GET_VERSION")?;
        Ok(())
    })?;
    wait(child)?;
    check_eq!(
        ok(d.stats(), "stats")?.handles,
        1,
        "handles after the child"
    );
    check_eq!(
        ok(d.get_pages(p.handle), "pages")?.len(),
        2,
        "pages after the child"
    );
    ok(d.unpin(p.handle), "unpin")
}

/// How the file reaches the process that closes it last.
#[derive(Clone, Copy)]
pub enum Handover {
    /// A forked child inherits it.
    Fork,
    /// An unrelated process receives it over a Unix socket.
    ScmRights,
}

pub fn send_fd(sock: BorrowedFd<'_>, fd: BorrowedFd<'_>) -> TestResult {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut cmsg = SendAncillaryBuffer::new(&mut space);
    let fds = [fd];
    check!(
        cmsg.push(SendAncillaryMessage::ScmRights(&fds)),
        "cmsg space"
    );
    net::sendmsg(
        sock,
        &[std::io::IoSlice::new(b"f")],
        &mut cmsg,
        net::SendFlags::empty(),
    )
    .map_err(errno)?;
    Ok(())
}

pub fn recv_fd(sock: BorrowedFd<'_>) -> Result<OwnedFd, String> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut cmsg = RecvAncillaryBuffer::new(&mut space);
    let mut byte = [0u8; 1];
    net::recvmsg(
        sock,
        &mut [std::io::IoSliceMut::new(&mut byte)],
        &mut cmsg,
        net::RecvFlags::empty(),
    )
    .map_err(errno)?;
    for msg in cmsg.drain() {
        if let RecvAncillaryMessage::ScmRights(mut fds) = msg {
            return fds.next().ok_or_else(|| "no fd".to_string());
        }
    }
    Err("no SCM_RIGHTS message".into())
}

fn byte(sock: BorrowedFd<'_>) -> TestResult {
    let mut b = [0u8; 1];
    check_eq!(
        rustix::io::read(sock, &mut b).map_err(errno)?,
        1,
        "sync byte"
    );
    Ok(())
}

fn send_byte(sock: BorrowedFd<'_>) -> TestResult {
    rustix::io::write(sock, b"s").map_err(errno)?;
    Ok(())
}

/// A connected pair of Unix stream sockets, to pass files with SCM_RIGHTS.
pub fn unix_pair() -> Result<(OwnedFd, OwnedFd), String> {
    net::socketpair(
        net::AddressFamily::UNIX,
        net::SocketType::STREAM,
        net::SocketFlags::CLOEXEC,
        None,
    )
    .map_err(errno)
}

/// The pinning process closes its file first; the other process's close is the release, and
/// cannot give the pages back (NVIDIA knows them by the pinner's tgid): the regions wait for
/// NVIDIA's callback, the module stays loaded meanwhile, and nothing leaks.
pub fn child_closes_last(how: Handover) -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(4 * K64).map_err(errno)?;
    let (mine, theirs) = unix_pair()?;
    let (d, child) = match how {
        Handover::Fork => {
            let d = dev()?;
            let child = fork(|| {
                check_eq!(
                    raw_pin(d.as_fd(), pin_args(va, K64)),
                    Err(Errno::ACCESS),
                    "child PIN"
                );
                send_byte(theirs.as_fd())?;
                // Exits once the parent has closed: this close is the release.
                byte(theirs.as_fd())
            })?;
            (d, child)
        }
        Handover::ScmRights => {
            // Forked before the file exists: only the received copy reaches the child.
            let child = fork(|| {
                let fd = recv_fd(theirs.as_fd())?;
                check_eq!(
                    raw_pin(fd.as_fd(), pin_args(va, K64)),
                    Err(Errno::ACCESS),
                    "receiver PIN"
                );
                send_byte(theirs.as_fd())?;
                byte(theirs.as_fd())
            })?;
            (dev()?, child)
        }
    };
    let _held = ok(d.pin(va, 2 * K64, PinFlags::empty()), "pin")?;
    let cached = ok(d.pin(va + 2 * K64, 2 * K64, PinFlags::empty()), "pin")?;
    ok(d.unpin(cached.handle), "unpin")?;
    if let Handover::ScmRights = how {
        send_fd(mine.as_fd(), d.as_fd())?;
    }
    byte(mine.as_fd())?;
    drop(d);
    send_byte(mine.as_fd())?;
    wait(child)?;
    check_eq!(
        gstat("deferred_releases")?,
        2,
        "regions left for the callback"
    );
    check_eq!(stat("pins_live")?, 2, "nvsim pins");
    check_eq!(
        stat("put_pages_wrong_process")?,
        0,
        "put_pages from the wrong process"
    );
    check!(
        !rmmod_gdrpeer()?,
        "rmmod succeeded with pins NVIDIA can still call back"
    );
    // The memory goes: the callback frees both regions.
    gpu.free(va).map_err(errno)?;
    all_released()
}

/// Whether `rmmod gdrpeer` succeeded.
pub fn rmmod_gdrpeer() -> Result<bool, String> {
    let out = Command::new("rmmod")
        .arg("gdrpeer")
        .output()
        .map_err(|e| format!("rmmod: {e}"))?;
    Ok(out.status.success())
}

/// Runs this program as a child in `mode` and waits until it prints "ready", returning the
/// rest of that line.
pub fn spawn_ready(mode: &str) -> Result<(Child, String), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut child = Command::new(exe)
        .arg(mode)
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .map_err(|e| e.to_string())?;
    let Some(rest) = line.trim().strip_prefix("ready") else {
        let _ = kill_and_wait(child);
        return Err(format!("child {mode}: '{}'", line.trim()));
    };
    let rest = rest.trim().to_string();
    Ok((child, rest))
}

/// Kills a child with SIGKILL and reaps it.
pub fn kill_and_wait(mut child: Child) -> TestResult {
    child.kill().map_err(|e| e.to_string())?;
    child.wait().map_err(|e| e.to_string())?;
    let mut rest = String::new();
    let _ = child.stdout.take().unwrap().read_to_string(&mut rest);
    Ok(())
}

/// A process with pins and a DMA mapping is killed: its files' release frees everything.
pub fn killed_process_leaves_nothing() -> TestResult {
    let (child, _) = spawn_ready("--pin-and-wait")?;
    check!(gstat("regions")? >= 3, "child's regions not pinned");
    check_eq!(stat("dma_mappings_live")?, 1, "child's DMA mapping");
    kill_and_wait(child)
}

/// Prints "ready" and sleeps until killed.
pub fn ready_and_wait() -> TestResult {
    ready_and_wait_with("")
}

/// Prints "ready WHAT" and sleeps until killed.
fn ready_and_wait_with(what: &str) -> TestResult {
    println!("ready {what}");
    std::io::stdout().flush().map_err(|e| e.to_string())?;
    std::thread::sleep(std::time::Duration::from_secs(60));
    Ok(())
}

fn pin_and_wait() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let d = dev()?;
    let (va, _) = gpu.alloc(8 * K64).map_err(errno)?;
    let a = ok(d.pin(va, 2 * K64, PinFlags::empty()), "pin")?;
    let b = ok(d.pin(va + 2 * K64, 2 * K64, PinFlags::empty()), "pin")?;
    ok(d.pin(va + 4 * K64, 4 * K64, PinFlags::empty()), "pin")?;
    ok(d.unpin(b.handle), "unpin")?;
    ok(d.dma_map(a.handle, edu()?), "dma_map")?;
    ready_and_wait()
}

/// Allocates GPU memory, prints "ready VA" and waits to be killed.
fn gpu_alloc_and_wait() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(K64).map_err(errno)?;
    ready_and_wait_with(&va.to_string())
}

/// The modes in which the tests run this program as a child.
pub fn child_main(args: &[String]) -> Option<ExitCode> {
    let run: fn() -> TestResult = match args {
        [mode] if mode == "--pin-and-wait" => pin_and_wait,
        [mode] if mode == "--nic-reg-and-wait" => crate::nic::reg_and_wait,
        [mode] if mode == "--gpu-alloc-and-wait" => gpu_alloc_and_wait,
        _ => return None,
    };
    Some(match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            println!("{e}");
            ExitCode::FAILURE
        }
    })
}
