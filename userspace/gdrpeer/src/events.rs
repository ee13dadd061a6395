// SPDX-License-Identifier: GPL-2.0

//! Invalidation events (ABI 1.3): a file of `/dev/gdrpeer` or `/dev/gdrdrv` is readable
//! while revocations of its handles are queued, and read(2) returns them as
//! `struct gdrpeer_event` records. [`EventSource`] reads them from either device; its file
//! descriptor goes to poll/epoll like any other.

use crate::{uapi, Error, Op};
use rustix::{
    event::{poll, PollFd, PollFlags, Timespec},
    fd::AsFd,
    io::{preadv2, Errno, IoSliceMut, ReadWriteFlags},
};
use std::time::{Duration, Instant};

/// What happened to a handle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// The driver freed the handle's memory (cuMemFree, the owner's exit): unpin it.
    Revoked,
    /// A type this library does not know (a later ABI's).
    Other(u32),
}

/// One invalidation event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Event {
    /// The handle, in the numbering of the device read (gdrpeer or gdrdrv handles).
    pub handle: u64,
    /// What happened to it.
    pub kind: EventKind,
}

impl From<uapi::Event> for Event {
    fn from(e: uapi::Event) -> Self {
        Event {
            handle: e.handle,
            kind: match e.type_ {
                uapi::EVENT_REVOKED => EventKind::Revoked,
                t => EventKind::Other(t),
            },
        }
    }
}

/// The records that fit in one read: enough for a burst of frees.
const BATCH: usize = 64;

/// A device file that queues invalidation events: [`crate::Device`] and
/// [`crate::gdrdrv::Gdrdrv`]. Only the process that opened the file may read them.
///
/// ```no_run
/// use gdrpeer::{Device, EventKind, EventSource};
/// use std::time::Duration;
/// let dev = Device::open_default()?;
/// // ... pins; then, in the event loop:
/// if dev.wait_events(Some(Duration::from_millis(100)))? {
///     for e in dev.read_events()? {
///         if e.kind == EventKind::Revoked {
///             dev.unpin(e.handle)?; // the memory was freed: drop the registration
///         }
///     }
/// }
/// # Ok::<(), gdrpeer::Error>(())
/// ```
pub trait EventSource: AsFd {
    /// Waits up to `timeout` (`None`: for ever) for the file to become readable; whether it
    /// did. A signal ends the wait early with `false`.
    fn wait_events(&self, timeout: Option<Duration>) -> Result<bool, Error> {
        Ok(poll_once(self.as_fd(), timeout)?.unwrap_or(false))
    }

    /// Reads the queued events, oldest first, waiting (read(2) blocks) until there is one.
    fn read_events(&self) -> Result<Vec<Event>, Error> {
        self.read_events_within(None)
    }

    /// The events queued now, without waiting: empty if there are none.
    fn try_read_events(&self) -> Result<Vec<Event>, Error> {
        self.read_events_within(Some(Duration::ZERO))
    }

    /// Reads the queued events, oldest first, waiting up to `timeout` (`None`: for ever) for
    /// one: empty if none came in time. A signal does not end the wait (it goes on for the
    /// time left).
    fn read_events_within(&self, timeout: Option<Duration>) -> Result<Vec<Event>, Error> {
        let mut raw = [uapi::Event::default(); BATCH];
        let n = self.read_records(&mut raw, timeout)?;
        Ok(raw[..n].iter().map(|&e| e.into()).collect())
    }

    /// Reads up to `out.len()` records into `out`, oldest first, waiting up to `timeout`
    /// (`None`: for ever) for one; how many. 0: none came in time. A signal does not end the
    /// wait: it goes on for the time left (a profiler's SIGPROF would otherwise cut every
    /// timed wait short, indistinguishable from a timeout).
    ///
    /// With a timeout the read itself never waits: it is a `RWF_NOWAIT` read (ABI 1.6), so a
    /// thread that another thread's read beat to the last event goes back to poll(2) rather
    /// than block in read(2) until the next revocation. A module older than 1.6 refuses
    /// `RWF_NOWAIT` (EOPNOTSUPP), and a system without preadv2 has no such read (ENOSYS): the
    /// read there is poll(2) then read(2), which can block so, until a signal ends it.
    fn read_records(
        &self,
        out: &mut [uapi::Event],
        timeout: Option<Duration>,
    ) -> Result<usize, Error> {
        let fd = self.as_fd();
        let Some(deadline) = timeout.and_then(|t| Instant::now().checked_add(t)) else {
            return read_once(fd, out, ReadMode::Wait);
        };
        let refused = [Errno::OPNOTSUPP, Errno::NOSYS].map(|e| Some(e.raw_os_error()));
        loop {
            match read_once(fd, out, ReadMode::NoWait) {
                Err(e) if e.errno() == Some(Errno::AGAIN.raw_os_error()) => {}
                Err(e) if refused.contains(&e.errno()) => {
                    return match readable_by(self, deadline)? {
                        true => read_once(fd, out, ReadMode::UntilSignal),
                        false => Ok(0),
                    };
                }
                r => return r,
            }
            if !readable_by(self, deadline)? {
                return Ok(0);
            }
        }
    }

    /// The events as they come, one at a time, waiting for each.
    fn events(&self) -> Events<'_, Self>
    where
        Self: Sized,
    {
        Events {
            src: self,
            queued: Vec::new().into_iter(),
        }
    }
}

/// One poll(2) of `fd` for reading, up to `timeout` (`None`: for ever): whether it is
/// readable, `None` when a signal ended the wait.
fn poll_once(
    fd: rustix::fd::BorrowedFd<'_>,
    timeout: Option<Duration>,
) -> Result<Option<bool>, Error> {
    let mut fds = [PollFd::new(&fd, PollFlags::IN)];
    let ts = timeout.map(|t| Timespec {
        // Past the largest time_t: as good as for ever (not a negative, invalid time).
        tv_sec: t.as_secs().min(i64::MAX as u64) as _,
        tv_nsec: t.subsec_nanos() as _,
    });
    match poll(&mut fds, ts.as_ref()) {
        Ok(n) => {
            let got = fds[0].revents();
            if got.contains(PollFlags::ERR) {
                // What poll says to a process that is not the opener.
                return Err(Error::ioctl(Op::ReadEvents, Errno::ACCESS));
            }
            Ok(Some(n > 0 && got.contains(PollFlags::IN)))
        }
        Err(Errno::INTR) => Ok(None),
        Err(errno) => Err(Error::ioctl(Op::ReadEvents, errno)),
    }
}

/// Waits until `src` is readable or `deadline` passes (looking at least once); whether it
/// became readable. A signal's early end of poll(2) is waited out: only the deadline, or
/// a poll that answers without readability (a hang-up), ends the wait.
fn readable_by<S: EventSource + ?Sized>(src: &S, deadline: Instant) -> Result<bool, Error> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match poll_once(src.as_fd(), Some(left))? {
            Some(readable) => return Ok(readable),
            None if Instant::now() >= deadline => return Ok(false),
            None => {}
        }
    }
}

/// How [`read_once`] reads.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ReadMode {
    /// read(2), which waits for an event unless the file is `O_NONBLOCK`; again after a
    /// signal.
    Wait,
    /// As `Wait`, but a signal ends the wait: no records.
    UntilSignal,
    /// A `RWF_NOWAIT` read: EAGAIN when none is queued.
    NoWait,
}

/// One read of up to `out.len()` records into `out`, as `mode` says.
fn read_once(
    fd: rustix::fd::BorrowedFd<'_>,
    out: &mut [uapi::Event],
    mode: ReadMode,
) -> Result<usize, Error> {
    // SAFETY: the records are plain old data; the bytes view of them lives only for the read,
    // which writes whole records (checked below).
    let bytes =
        unsafe { std::slice::from_raw_parts_mut(out.as_mut_ptr().cast::<u8>(), size_of_val(out)) };
    let n = loop {
        let r = if mode == ReadMode::NoWait {
            let mut iov = [IoSliceMut::new(&mut *bytes)];
            // u64::MAX: the file's own position, as read(2) uses (which gdrpeer ignores).
            preadv2(fd, &mut iov, u64::MAX, ReadWriteFlags::NOWAIT)
        } else {
            rustix::io::read(fd, &mut *bytes)
        };
        match r {
            Err(Errno::INTR) if mode == ReadMode::UntilSignal => return Ok(0),
            Err(Errno::INTR) => continue,
            r => break r.map_err(|errno| Error::ioctl(Op::ReadEvents, errno))?,
        }
    };
    if n % size_of::<uapi::Event>() != 0 {
        // The uAPI returns whole records only.
        return Err(Error::ioctl(Op::ReadEvents, Errno::IO));
    }
    Ok(n / size_of::<uapi::Event>())
}

/// The iterator of [`EventSource::events`]: blocks for the next event; ends at the first
/// error, which it yields.
pub struct Events<'a, S> {
    src: &'a S,
    queued: std::vec::IntoIter<Event>,
}

impl<S: EventSource> Iterator for Events<'_, S> {
    type Item = Result<Event, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(e) = self.queued.next() {
                return Some(Ok(e));
            }
            match self.src.read_events() {
                Ok(v) => self.queued = v.into_iter(),
                Err(e) => return Some(Err(e)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::File;
    use std::os::fd::BorrowedFd;

    /// A file read as an event source: `/dev/zero` takes `RWF_NOWAIT` reads, as gdrpeer's
    /// files do since ABI 1.6; `/dev/full` reads the same zeros but refuses them
    /// (EOPNOTSUPP), as gdrpeer's files did before, and polls readable.
    struct Source(File);

    impl AsFd for Source {
        fn as_fd(&self) -> BorrowedFd<'_> {
            self.0.as_fd()
        }
    }

    impl EventSource for Source {}

    fn source(path: &str) -> Source {
        Source(File::open(path).expect(path))
    }

    /// A signal that ends poll(2) early (SIGUSR1 with a handler, no `SA_RESTART`) does not
    /// end a timed read: it returns nothing only once the time is up.
    #[test]
    fn a_signal_does_not_cut_a_timed_read_short() {
        extern "C" fn nothing(_: libc::c_int) {}
        // SAFETY: installs an empty handler; `sa` is fully initialized (zeroed, then the
        // handler), and without SA_RESTART a caught signal ends poll(2) with EINTR.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = nothing as extern "C" fn(libc::c_int) as libc::sighandler_t;
            assert_eq!(libc::sigaction(libc::SIGUSR1, &sa, std::ptr::null_mut()), 0);
        }
        let (quiet, _other_end) = std::os::unix::net::UnixStream::pair().expect("socketpair");
        struct Quiet(std::os::unix::net::UnixStream);
        impl AsFd for Quiet {
            fn as_fd(&self) -> BorrowedFd<'_> {
                self.0.as_fd()
            }
        }
        impl EventSource for Quiet {}
        // SAFETY: pthread_self has no precondition.
        let me = unsafe { libc::pthread_self() } as usize;
        let signaller = std::thread::spawn(move || {
            for _ in 0..3 {
                std::thread::sleep(Duration::from_millis(50));
                // SAFETY: `me` is the test's thread, which lives until this thread is joined.
                unsafe { libc::pthread_kill(me as libc::pthread_t, libc::SIGUSR1) };
            }
        });
        let timeout = Duration::from_millis(400);
        let start = Instant::now();
        let mut out = [uapi::Event::default(); 1];
        let n = Quiet(quiet).read_records(&mut out, Some(timeout));
        let took = start.elapsed();
        signaller.join().expect("signaller");
        assert_eq!(n.ok(), Some(0));
        assert!(
            took >= timeout,
            "returned after {took:?}, before its {timeout:?}"
        );
    }

    #[test]
    fn nowait_reads_and_their_fallback_return_records() {
        for path in ["/dev/zero", "/dev/full"] {
            let src = source(path);
            let mut out = [uapi::Event::default(); 3];
            for timeout in [Some(Duration::ZERO), Some(Duration::from_secs(1)), None] {
                let n = src.read_records(&mut out, timeout);
                assert_eq!(n.ok(), Some(3), "{path}, {timeout:?}");
            }
            let got = src.try_read_events().expect(path);
            assert_eq!(got.len(), BATCH, "{path}");
            assert_eq!(
                got[0],
                Event {
                    handle: 0,
                    kind: EventKind::Other(0)
                },
                "{path}"
            );
        }
    }
}
