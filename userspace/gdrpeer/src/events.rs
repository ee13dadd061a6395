// SPDX-License-Identifier: GPL-2.0

//! Invalidation events (ABI 1.3): a file of `/dev/gdrpeer` or `/dev/gdrdrv` is readable
//! while revocations of its handles are queued, and read(2) returns them as
//! `struct gdrpeer_event` records. [`EventSource`] reads them from either device; its file
//! descriptor goes to poll/epoll like any other.

use crate::{uapi, Error, Op};
use rustix::{
    event::{poll, PollFd, PollFlags, Timespec},
    fd::AsFd,
    io::Errno,
};
use std::time::Duration;

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
        let fd = self.as_fd();
        let mut fds = [PollFd::new(&fd, PollFlags::IN)];
        let ts = timeout.map(|t| Timespec {
            tv_sec: t.as_secs() as _,
            tv_nsec: t.subsec_nanos() as _,
        });
        match poll(&mut fds, ts.as_ref()) {
            Ok(n) => {
                let got = fds[0].revents();
                if got.contains(PollFlags::ERR) {
                    // What poll says to a process that is not the opener.
                    return Err(Error::ioctl(Op::ReadEvents, Errno::ACCESS));
                }
                Ok(n > 0 && got.contains(PollFlags::IN))
            }
            Err(Errno::INTR) => Ok(false),
            Err(errno) => Err(Error::ioctl(Op::ReadEvents, errno)),
        }
    }

    /// Reads the queued events, oldest first, waiting (read(2) blocks) until there is one.
    fn read_events(&self) -> Result<Vec<Event>, Error> {
        read_batch(self.as_fd())
    }

    /// The events queued now, without waiting: empty if there are none.
    fn try_read_events(&self) -> Result<Vec<Event>, Error> {
        if !self.wait_events(Some(Duration::ZERO))? {
            return Ok(Vec::new());
        }
        read_batch(self.as_fd())
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

/// One read(2) of up to [`BATCH`] records.
fn read_batch(fd: rustix::fd::BorrowedFd<'_>) -> Result<Vec<Event>, Error> {
    let mut raw = [uapi::Event::default(); BATCH];
    // SAFETY: the array is plain old data of `BATCH` records; the bytes view of it lives
    // only for the read.
    let bytes =
        unsafe { std::slice::from_raw_parts_mut(raw.as_mut_ptr().cast::<u8>(), size_of_val(&raw)) };
    let n = loop {
        match rustix::io::read(fd, &mut *bytes) {
            Err(Errno::INTR) => continue,
            r => break r.map_err(|errno| Error::ioctl(Op::ReadEvents, errno))?,
        }
    };
    if n % size_of::<uapi::Event>() != 0 {
        // The uAPI returns whole records only.
        return Err(Error::ioctl(Op::ReadEvents, Errno::IO));
    }
    Ok(raw[..n / size_of::<uapi::Event>()]
        .iter()
        .map(|&e| e.into())
        .collect())
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
