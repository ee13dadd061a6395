// SPDX-License-Identifier: GPL-2.0

//! Invalidation events of `/dev/gdrpeer` (ABI 1.3): the file polls readable when NVIDIA frees
//! memory one of its handles pins, and read(2) returns each revoked handle once, as
//! `struct gdrpeer_event` records; UNPIN is not an event; the errors of a read; epoll
//! waiting on `/dev/gdrpeer` and `/dev/gdrdrv` at once.

use crate::helpers::{dev, ok, K64};
use gdrpeer::PinFlags;
use nvsim::testing::{debugfs, errno, Test, TestResult};
use nvsim::{check, check_eq, Gpu};
use rustix::{
    fd::{AsFd, AsRawFd, BorrowedFd},
    fs::{fcntl_getfl, fcntl_setfl, OFlags},
    io::{read, Errno},
};

/// One event record: handle, type, padding.
const RECORD: usize = 16;

/// Whether the file polls readable within `timeout_ms`.
fn readable(fd: BorrowedFd<'_>, timeout_ms: i32) -> Result<bool, String> {
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    let n = unsafe { libc::poll(&mut p, 1, timeout_ms) };
    check!(n >= 0, "poll: {}", std::io::Error::last_os_error());
    Ok(n == 1 && p.revents & libc::POLLIN != 0)
}

/// Reads the queued events without waiting: (handle, type) pairs.
fn read_events(fd: BorrowedFd<'_>) -> Result<Vec<(u64, u32)>, String> {
    let mut buf = [0u8; 8 * RECORD];
    let n = match read(fd, &mut buf) {
        Ok(n) => n,
        Err(Errno::AGAIN) => 0,
        Err(e) => return Err(format!("read: {e}")),
    };
    check!(n % RECORD == 0, "read {n} bytes, not whole records");
    Ok(buf[..n]
        .chunks(RECORD)
        .map(|r| {
            let handle = u64::from_ne_bytes(r[..8].try_into().unwrap());
            let ty = u32::from_ne_bytes(r[8..12].try_into().unwrap());
            (handle, ty)
        })
        .collect())
}

fn nonblocking(fd: BorrowedFd<'_>) -> TestResult {
    let flags = fcntl_getfl(fd).map_err(errno)?;
    fcntl_setfl(fd, flags | OFlags::NONBLOCK).map_err(errno)
}

/// Two handles on one buffer, one on another: freeing the first buffer queues one event per
/// handle of it, once; the other handle, UNPIN and a second read add none.
fn events_fire_once_per_revocation() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, id) = gpu.alloc(2 * K64).map_err(errno)?;
    let (other, _) = gpu.alloc(K64).map_err(errno)?;
    let d = dev()?;
    let fd = d.as_fd();
    nonblocking(fd)?;
    let a = ok(d.pin(va, 2 * K64, PinFlags::empty()), "pin")?;
    let b = ok(d.pin(va + K64, K64, PinFlags::empty()), "pin a part")?;
    let c = ok(d.pin(other, K64, PinFlags::empty()), "pin another buffer")?;
    let gone = ok(d.pin(other, K64, PinFlags::empty()), "pin to unpin")?;
    ok(d.unpin(gone.handle), "unpin")?;
    check!(!readable(fd, 0)?, "readable before any free");
    check_eq!(read_events(fd)?, vec![], "events before any free");
    debugfs("free", &id.to_string())?;
    check!(readable(fd, 1000)?, "not readable after the free");
    let mut events = read_events(fd)?;
    events.sort();
    check_eq!(
        events,
        vec![(a.handle, 1), (b.handle, 1)],
        "events after the free"
    );
    check!(!readable(fd, 0)?, "readable after the events were read");
    check_eq!(read_events(fd)?, vec![], "events read twice");
    ok(d.unpin(a.handle), "unpin a revoked handle")?;
    ok(d.unpin(b.handle), "unpin a revoked handle")?;
    ok(d.unpin(c.handle), "unpin")?;
    check_eq!(read_events(fd)?, vec![], "events after unpin");
    Ok(())
}

/// A blocking read waits for the free; a buffer smaller than a record is EINVAL; another
/// process may not read the events (EACCES).
fn events_read_waits_and_checks_its_caller() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, id) = gpu.alloc(K64).map_err(errno)?;
    let d = dev()?;
    let fd = d.as_fd();
    let p = ok(d.pin(va, K64, PinFlags::empty()), "pin")?;
    let mut small = [0u8; RECORD - 1];
    check_eq!(read(fd, &mut small), Err(Errno::INVAL), "read of 15 bytes");
    let child = crate::proc::fork(|| {
        let mut buf = [0u8; RECORD];
        check_eq!(read(fd, &mut buf), Err(Errno::ACCESS), "read from a child");
        Ok(())
    })?;
    crate::proc::wait(child)?;
    let freer = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(200));
        debugfs("free", &id.to_string())
    });
    let mut buf = [0u8; 4 * RECORD];
    let n = read(fd, &mut buf).map_err(errno)?;
    freer.join().map_err(|_| "freeing thread panicked")??;
    check_eq!(n, RECORD, "bytes of the blocking read");
    check_eq!(
        u64::from_ne_bytes(buf[..8].try_into().unwrap()),
        p.handle,
        "handle of the event"
    );
    ok(d.unpin(p.handle), "unpin")
}

/// The tags epoll_wait reports within `ms` milliseconds, sorted.
fn epoll_ready(ep: BorrowedFd<'_>, ms: i64) -> Result<Vec<u64>, String> {
    use rustix::event::{epoll, Timespec};
    let mut events = Vec::with_capacity(4);
    let t = Timespec {
        tv_sec: ms / 1000,
        tv_nsec: ms % 1000 * 1_000_000,
    };
    epoll::wait(ep, rustix::buffer::spare_capacity(&mut events), Some(&t)).map_err(errno)?;
    let mut tags: Vec<u64> = events
        .iter()
        .filter(|e| {
            let flags = e.flags;
            flags.contains(epoll::EventFlags::IN)
        })
        .map(|e| {
            let data = e.data;
            data.u64()
        })
        .collect();
    tags.sort();
    Ok(tags)
}

/// A `/dev/gdrpeer` file and a `/dev/gdrdrv` file in one epoll set, each pinning a buffer of
/// its own: epoll_wait reports neither before a free; freeing the first buffer makes it
/// report the first file alone, until its event is read; freeing the second, the second.
fn events_wake_epoll_on_both_devices() -> TestResult {
    use gdrpeer::{gdrdrv::Gdrdrv, EventSource};
    use rustix::event::epoll;
    let gpu = Gpu::open().map_err(errno)?;
    let (va1, id1) = gpu.alloc(K64).map_err(errno)?;
    let (va2, id2) = gpu.alloc(K64).map_err(errno)?;
    let d = dev()?;
    let g = ok(Gdrdrv::open_default(), "open /dev/gdrdrv")?;
    let p = ok(d.pin(va1, K64, PinFlags::empty()), "pin")?;
    let h = ok(g.pin_v2(va2, K64, 0), "PIN_BUFFER_V2")?;
    let ep = epoll::create(epoll::CreateFlags::CLOEXEC).map_err(errno)?;
    for (fd, tag) in [(d.as_fd(), 1), (g.as_fd(), 2)] {
        epoll::add(
            &ep,
            fd,
            epoll::EventData::new_u64(tag),
            epoll::EventFlags::IN,
        )
        .map_err(errno)?;
    }
    check_eq!(epoll_ready(ep.as_fd(), 0)?, vec![], "ready before any free");
    debugfs("free", &id1.to_string())?;
    check_eq!(
        epoll_ready(ep.as_fd(), 1000)?,
        vec![1],
        "ready after /dev/gdrpeer's buffer was freed"
    );
    check_eq!(
        read_events(d.as_fd())?,
        vec![(p.handle, 1)],
        "/dev/gdrpeer's event"
    );
    check_eq!(
        epoll_ready(ep.as_fd(), 0)?,
        vec![],
        "ready after the event was read"
    );
    debugfs("free", &id2.to_string())?;
    check_eq!(
        epoll_ready(ep.as_fd(), 1000)?,
        vec![2],
        "ready after /dev/gdrdrv's buffer was freed"
    );
    let got: Vec<u64> = ok(g.try_read_events(), "read /dev/gdrdrv")?
        .into_iter()
        .map(|e| e.handle)
        .collect();
    check_eq!(got, vec![h], "/dev/gdrdrv's event");
    check_eq!(
        epoll_ready(ep.as_fd(), 0)?,
        vec![],
        "ready after both events were read"
    );
    ok(d.unpin(p.handle), "unpin")?;
    ok(g.unpin(h), "UNPIN")
}

pub const TESTS: &[Test] = &[
    (
        "gdrpeer-events-fire-once-per-revocation",
        events_fire_once_per_revocation,
    ),
    (
        "gdrpeer-events-read-waits-and-checks-its-caller",
        events_read_waits_and_checks_its_caller,
    ),
    (
        "gdrpeer-events-wake-epoll-on-both-devices",
        events_wake_epoll_on_both_devices,
    ),
];
