// SPDX-License-Identifier: GPL-2.0

//! Invalidation events of `/dev/gdrpeer` (ABI 1.3): the file polls readable when NVIDIA frees
//! memory one of its handles pins, and read(2) returns each revoked handle once, as
//! `struct gdrpeer_event` records; UNPIN is not an event; the errors of a read; epoll
//! waiting on `/dev/gdrpeer` and `/dev/gdrdrv` at once; reads that must not wait (ABI 1.6).

use crate::helpers::{dev, ok, K64};
use gdrpeer::PinFlags;
use nvsim::testing::{debugfs, errno, Test, TestResult};
use nvsim::{check, check_eq, Gpu};
use rustix::{
    fd::{AsFd, AsRawFd, BorrowedFd, RawFd},
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

/// A buffer pinned through a `/dev/gdrpeer` file and another through a `/dev/gdrdrv` file.
struct BothDevices {
    d: gdrpeer::Device,
    g: gdrpeer::gdrdrv::Gdrdrv,
    /// The `/dev/gdrpeer` handle and the `/dev/gdrdrv` handle.
    handles: (u64, u64),
    /// The buffers' ids, for nvsim's `free`.
    ids: (u64, u64),
    /// Last, so that the files close before the buffers go.
    _gpu: Gpu,
}

fn both_devices() -> Result<BothDevices, String> {
    let gpu = Gpu::open().map_err(errno)?;
    let (va1, id1) = gpu.alloc(K64).map_err(errno)?;
    let (va2, id2) = gpu.alloc(K64).map_err(errno)?;
    let d = dev()?;
    let g = ok(gdrpeer::gdrdrv::Gdrdrv::open_default(), "open /dev/gdrdrv")?;
    let p = ok(d.pin(va1, K64, PinFlags::empty()), "pin")?;
    let h = ok(g.pin_v2(va2, K64, 0), "PIN_BUFFER_V2")?;
    Ok(BothDevices {
        d,
        g,
        handles: (p.handle, h),
        ids: (id1, id2),
        _gpu: gpu,
    })
}

/// A `/dev/gdrpeer` file and a `/dev/gdrdrv` file in one epoll set, each pinning a buffer of
/// its own: epoll_wait reports neither before a free; freeing the first buffer makes it
/// report the first file alone, until its event is read; freeing the second, the second.
fn events_wake_epoll_on_both_devices() -> TestResult {
    use gdrpeer::EventSource;
    use rustix::event::epoll;
    let BothDevices {
        d,
        g,
        handles: (p, h),
        ids: (id1, id2),
        _gpu,
    } = both_devices()?;
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
        vec![(p, 1)],
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
    ok(d.unpin(p), "unpin")?;
    ok(g.unpin(h), "UNPIN")
}

/// A `RWF_NOWAIT` read (ABI 1.6: io_uring's first try, the library's reads with a timeout)
/// of a blocking file, on each device.
fn nowait_read(fd: BorrowedFd<'_>) -> rustix::io::Result<usize> {
    use rustix::io::{preadv2, IoSliceMut, ReadWriteFlags};
    let mut buf = [0u8; 4 * RECORD];
    preadv2(
        fd,
        &mut [IoSliceMut::new(&mut buf)],
        u64::MAX,
        ReadWriteFlags::NOWAIT,
    )
}

/// On a blocking `/dev/gdrpeer` file and a blocking `/dev/gdrdrv` file, each pinning a buffer
/// of its own: a `RWF_NOWAIT` read with nothing queued fails at once with EAGAIN (not
/// EOPNOTSUPP, what a file that does not claim `FMODE_NOWAIT` answers, nor a wait); once
/// the buffer is freed it returns the event. A thread frees the buffers after 3 s, so that a
/// read which waits ends, with the event where EAGAIN was due.
fn events_nowait_read_never_waits() -> TestResult {
    let BothDevices {
        d,
        g,
        handles: (p, h),
        ids: (id1, id2),
        _gpu,
    } = both_devices()?;
    let (done, freed) = std::sync::mpsc::channel::<()>();
    let freer = std::thread::spawn(move || {
        if freed
            .recv_timeout(std::time::Duration::from_secs(3))
            .is_err()
        {
            // A read waited: end it.
            debugfs("free", &id1.to_string())?;
            debugfs("free", &id2.to_string())?;
        }
        Ok::<(), String>(())
    });
    let first = [
        ("/dev/gdrpeer", nowait_read(d.as_fd())),
        ("/dev/gdrdrv", nowait_read(g.as_fd())),
    ];
    let _ = done.send(());
    freer.join().map_err(|_| "freeing thread panicked")??;
    for (name, r) in first {
        check_eq!(
            r,
            Err(Errno::AGAIN),
            format!("RWF_NOWAIT read of {name} with no event")
        );
    }
    debugfs("free", &id1.to_string())?;
    debugfs("free", &id2.to_string())?;
    for (name, fd) in [("/dev/gdrpeer", d.as_fd()), ("/dev/gdrdrv", g.as_fd())] {
        check!(readable(fd, 1000)?, "{name} not readable after the free");
        check_eq!(
            nowait_read(fd),
            Ok(RECORD),
            format!("RWF_NOWAIT read of {name}'s event")
        );
    }
    ok(d.unpin(p), "unpin")?;
    ok(g.unpin(h), "UNPIN")
}

/// Four threads wait with `read_events_within` (up to 3 s) on one file; one free queues one
/// event and wakes them all: one thread gets it, and the others go back to waiting and
/// return empty at their timeout, rather than wait in read(2) for an event that another
/// thread took. Should they wait so, the test frees three more pinned buffers after 6 s, one
/// at a time until every reader returned, and fails.
fn events_timed_reads_share_one_event() -> TestResult {
    use gdrpeer::EventSource;
    use std::time::Duration;
    const READERS: usize = 4;
    let gpu = Gpu::open().map_err(errno)?;
    let (va, id) = gpu.alloc(K64).map_err(errno)?;
    let d = std::sync::Arc::new(dev()?);
    let p = ok(d.pin(va, K64, PinFlags::empty()), "pin")?;
    let mut spares = Vec::new();
    for _ in 1..READERS {
        let (va, id) = gpu.alloc(K64).map_err(errno)?;
        spares.push((
            ok(d.pin(va, K64, PinFlags::empty()), "pin a spare")?.handle,
            id,
        ));
    }
    let returned = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let readers: Vec<_> = (0..READERS)
        .map(|_| {
            let (d, returned) = (d.clone(), returned.clone());
            std::thread::spawn(move || {
                let r = d.read_events_within(Some(Duration::from_secs(3)));
                returned.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                r
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    debugfs("free", &id.to_string())?;
    let (done, finished) = std::sync::mpsc::channel::<()>();
    let ids: Vec<u64> = spares.iter().map(|&(_, id)| id).collect();
    let unsticker = std::thread::spawn(move || {
        if finished.recv_timeout(Duration::from_secs(6)).is_ok() {
            return Ok::<bool, String>(false);
        }
        // One event at a time, so that each wakes one waiting reader.
        for id in ids {
            let before = returned.load(std::sync::atomic::Ordering::SeqCst);
            if before == READERS {
                break;
            }
            debugfs("free", &id.to_string())?;
            for _ in 0..50 {
                if returned.load(std::sync::atomic::Ordering::SeqCst) > before {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        Ok(true)
    });
    let mut got = Vec::new();
    let mut errors = Vec::new();
    for r in readers {
        match r.join().map_err(|_| "reading thread panicked")? {
            Ok(v) => got.extend(v.into_iter().map(|e| e.handle)),
            Err(e) => errors.push(e.to_string()),
        }
    }
    let _ = done.send(());
    let stuck = unsticker
        .join()
        .map_err(|_| "unsticking thread panicked")??;
    check!(
        !stuck,
        "readers waited past their timeout, until more frees (events got: {got:?})"
    );
    check_eq!(errors, Vec::<String>::new(), "errors of the reads");
    check_eq!(got, vec![p.handle], "events the four readers got");
    ok(d.unpin(p.handle), "unpin")?;
    for (h, _) in spares {
        ok(d.unpin(h), "unpin a spare")?;
    }
    Ok(())
}

/// UNPIN of a revoked handle whose event nobody read takes the event out, on each device: of
/// two revoked handles the one unpinned first is not reported, the other is; then 64 buffers
/// pinned, freed and unpinned without a read (what a libgdrapi user does on `/dev/gdrdrv`)
/// leave nothing queued.
fn events_go_with_their_unpinned_handles() -> TestResult {
    use gdrpeer::gdrdrv::Gdrdrv;
    let gpu = Gpu::open().map_err(errno)?;
    let d = dev()?;
    let g = ok(Gdrdrv::open_default(), "open /dev/gdrdrv")?;
    nonblocking(d.as_fd())?;
    nonblocking(g.as_fd())?;
    let pin = |gdrdrv: bool| -> Result<(u64, u64), String> {
        let (va, id) = gpu.alloc(K64).map_err(errno)?;
        let h = if gdrdrv {
            ok(g.pin_v2(va, K64, 0), "PIN_BUFFER_V2")?
        } else {
            ok(d.pin(va, K64, PinFlags::empty()), "pin")?.handle
        };
        Ok((h, id))
    };
    let unpin = |gdrdrv: bool, h: u64| {
        if gdrdrv {
            ok(g.unpin(h), "UNPIN_BUFFER")
        } else {
            ok(d.unpin(h), "unpin")
        }
    };
    for (gdrdrv, name, fd) in [
        (false, "/dev/gdrpeer", d.as_fd()),
        (true, "/dev/gdrdrv", g.as_fd()),
    ] {
        let (a, id_a) = pin(gdrdrv)?;
        let (b, id_b) = pin(gdrdrv)?;
        debugfs("free", &id_a.to_string())?;
        debugfs("free", &id_b.to_string())?;
        check!(readable(fd, 1000)?, "{name} not readable after two frees");
        unpin(gdrdrv, a)?;
        check_eq!(
            read_events(fd)?,
            vec![(b, 1)],
            format!("{name}'s events after the first revoked handle's UNPIN")
        );
        unpin(gdrdrv, b)?;
        for _ in 0..64 {
            let (h, id) = pin(gdrdrv)?;
            debugfs("free", &id.to_string())?;
            unpin(gdrdrv, h)?;
        }
        check!(
            !readable(fd, 0)?,
            "{name} readable after 64 revoked handles were unpinned unread"
        );
        check_eq!(
            read_events(fd)?,
            vec![],
            format!("{name}'s events after 64 revoked handles were unpinned unread")
        );
    }
    Ok(())
}

/// Two buffers pinned through `d` and freed: their handles, whose events are queued.
fn two_revoked(gpu: &Gpu, d: &gdrpeer::Device) -> Result<(u64, u64), String> {
    let mut pinned = Vec::new();
    for _ in 0..2 {
        let (va, id) = gpu.alloc(K64).map_err(errno)?;
        pinned.push(ok(d.pin(va, K64, PinFlags::empty()), "pin")?.handle);
        debugfs("free", &id.to_string())?;
    }
    check!(readable(d.as_fd(), 1000)?, "not readable after two frees");
    Ok((pinned[0], pinned[1]))
}

/// A read(2) of one record from the file `raw` into the page at `buf` that
/// [`crate::uffd::with_held_write`] lends: the bytes read and the record's handle.
fn read_record(raw: RawFd, buf: *mut [u8; RECORD]) -> rustix::io::Result<(usize, u64)> {
    // SAFETY: the caller's descriptor outlives the call; a borrow of it for one read.
    let fd = unsafe { BorrowedFd::borrow_raw(raw) };
    // SAFETY: the helper's page holds the record, for the call.
    let buf = unsafe { &mut *buf };
    read(fd, &mut *buf).map(|n| (n, u64::from_ne_bytes(buf[..8].try_into().unwrap())))
}

/// An UNPIN while a read hands the handle's event out leaves that event to the read: the
/// read's copy to user space waits (userfaultfd) while the handle is unpinned; the read
/// returns the event, and the other revoked handle's event stays queued (the read takes out
/// the events it handed out, not whatever is first by then).
fn events_unpin_during_a_read_leaves_the_others() -> TestResult {
    unpin_during_a_read(false)
}

/// A revoked handle unpinned while a read's copy of its event waits in a userfaultfd, the copy
/// then let go to succeed or, with `fail`, to fail (EFAULT): the read returns that event,
/// or fails; either way the other revoked handle's event is all that is left queued.
fn unpin_during_a_read(fail: bool) -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let d = dev()?;
    let fd = d.as_fd();
    nonblocking(fd)?;
    let (a, b) = two_revoked(&gpu, &d)?;
    let raw = fd.as_raw_fd();
    let got = crate::uffd::with_held_write(
        &[0u8; RECORD],
        move |buf| read_record(raw, buf),
        || ok(d.unpin(a), "unpin the first revoked handle during the read"),
        fail,
    )?;
    let expect = if fail {
        Err(Errno::FAULT)
    } else {
        Ok((RECORD, a))
    };
    check_eq!(got, expect, "the read held during the UNPIN");
    check_eq!(
        read_events(fd)?,
        vec![(b, 1)],
        "events after a read held during the first handle's UNPIN"
    );
    ok(d.unpin(b), "unpin")
}

/// A read with a timeout while another thread's read is copying events out (its copy held
/// in a userfaultfd for 500 ms) waits for that read rather than spin: the file polls
/// readable all along, so a read that failed with EAGAIN while another held the events would
/// poll and read again, burning the CPU, until the first read ended. The second reader gets
/// the other event, and its thread's CPU time over the wait stays under 100 ms.
fn events_timed_read_waits_for_another_reader() -> TestResult {
    use gdrpeer::EventSource;
    use std::time::Duration;
    let gpu = Gpu::open().map_err(errno)?;
    let d = dev()?;
    let (a, b) = two_revoked(&gpu, &d)?;
    let raw = d.as_fd().as_raw_fd();
    let thread_cpu = || {
        let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
        Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
    };
    let d = &d;
    let (first, second) = std::thread::scope(|s| {
        let mut second = None;
        let first = crate::uffd::with_held_write(
            &[0u8; RECORD],
            move |buf| read_record(raw, buf),
            || {
                second = Some(s.spawn(move || {
                    let cpu = thread_cpu();
                    let got = d.read_events_within(Some(Duration::from_secs(10)));
                    (got, thread_cpu() - cpu)
                }));
                std::thread::sleep(Duration::from_millis(500));
                Ok(())
            },
            false,
        );
        let second = second.map(|t| t.join());
        (first, second)
    });
    check_eq!(first?, Ok((RECORD, a)), "the read held in the userfaultfd");
    let (got, cpu) = second
        .ok_or("the second reader did not start")?
        .map_err(|_| "the second reader panicked")?;
    let got: Vec<u64> = ok(got, "read_events_within")?
        .into_iter()
        .map(|e| e.handle)
        .collect();
    check_eq!(got, vec![b], "the second reader's events");
    check!(
        cpu < Duration::from_millis(100),
        "the second reader used {cpu:?} of CPU while the first held the events"
    );
    ok(d.unpin(a), "unpin")?;
    ok(d.unpin(b), "unpin")
}

/// An UNPIN while a read hands the handle's event out, and that read then fails to copy it
/// (its page made read-only while the copy waits in a userfaultfd: EFAULT): the event goes
/// with its handle all the same, and the other revoked handle's event is the only one left.
fn events_unpin_during_a_failed_read_drops_the_event() -> TestResult {
    unpin_during_a_read(true)
}

/// A file's event queue holds a slot for every handle that may be revoked, so a file with
/// more than half a million handles needs more than the 4 MiB kmalloc's largest bucket holds
/// (x86_64): one handle past that many pins and unpins without a failure or a warning (the
/// log oracle), and a free revokes each handle once.
fn events_half_a_million_handles_on_one_file() -> TestResult {
    const HANDLES: usize = (4 << 20) / 8 + 1;
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(K64).map_err(errno)?;
    let d = dev()?;
    for i in 0..HANDLES {
        d.pin(va, K64, PinFlags::empty())
            .map_err(|e| format!("pin {} of {HANDLES}: {e}", i + 1))?;
    }
    gpu.free(va).map_err(errno)?;
    nonblocking(d.as_fd())?;
    let mut seen = vec![false; HANDLES + 1];
    let mut buf = [0u8; 32 * RECORD];
    loop {
        let n = match read(d.as_fd(), &mut buf) {
            Ok(n) => n,
            Err(Errno::AGAIN) => break,
            Err(e) => return Err(format!("read: {e}")),
        };
        for r in buf[..n].chunks(RECORD) {
            let h = u64::from_ne_bytes(r[..8].try_into().unwrap()) as usize;
            check!(
                (1..=HANDLES).contains(&h) && !std::mem::replace(&mut seen[h], true),
                "event of handle {h}: not one of the file's, or a second one"
            );
        }
    }
    check_eq!(
        seen.iter().filter(|&&s| s).count(),
        HANDLES,
        "handles revoked by the free"
    );
    Ok(())
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
    (
        "gdrpeer-events-nowait-read-never-waits",
        events_nowait_read_never_waits,
    ),
    (
        "gdrpeer-events-timed-reads-share-one-event",
        events_timed_reads_share_one_event,
    ),
    (
        "gdrpeer-events-go-with-their-unpinned-handles",
        events_go_with_their_unpinned_handles,
    ),
    (
        "gdrpeer-events-unpin-during-a-read-leaves-the-others",
        events_unpin_during_a_read_leaves_the_others,
    ),
    (
        "gdrpeer-events-timed-read-waits-for-another-reader",
        events_timed_read_waits_for_another_reader,
    ),
    (
        "gdrpeer-events-unpin-during-a-failed-read-drops-the-event",
        events_unpin_during_a_failed_read_drops_the_event,
    ),
];

/// The cases of `gdrpeer-test --large`.
pub const LARGE_TESTS: &[Test] = &[(
    "gdrpeer-events-half-a-million-handles-on-one-file",
    events_half_a_million_handles_on_one_file,
)];
