// SPDX-License-Identifier: GPL-2.0

//! Invalidation events: the queue of one context's handles that NVIDIA revoked, for the
//! front-ends that let user space learn of revocations without polling each handle
//! (`read(2)` and `poll(2)` on `/dev/gdrpeer` and `/dev/gdrdrv`).
//!
//! The free callback reports a revocation by pushing the handle, under NVIDIA's lock: it must
//! not sleep nor allocate there. So every handle that may be revoked holds a slot of the
//! queue's capacity, reserved when it is pinned ([`Events::reserve`]) and kept by its event
//! until the event is read, or its handle goes unread ([`Events::cancel`]): a push never
//! allocates and never fails, and the queue never holds more events than the context has
//! handles, whether or not anyone reads it (libgdrapi never reads `/dev/gdrdrv`'s).
//!
//! `Events::queue` is a leaf lock (level 4 of the crate's lock order): nothing is called and
//! no other lock is taken while it is held. `Events::reader` serializes readers; it is held
//! while events are copied to user space (which may fault) and taken under no other lock.

use kernel::{
    fs::File,
    new_mutex, new_poll_condvar, new_spinlock,
    prelude::*,
    sync::{
        poll::{PollCondVar, PollTable},
        Arc, Mutex, SpinLock,
    },
};

use crate::notify::Notifier;

/// The queued events and the slots reserved for them, under [`Events::queue`].
///
/// # Invariants
///
/// `reading <= pending.len() <= reserved <= pending.capacity()`.
struct Queue {
    /// Revoked handles, oldest first. Past 4 MiB (half a million slots) no kmalloc bucket
    /// holds it, so it may be vmalloc'd: it is freed only where sleeping is allowed (a
    /// replaced array after the spinlock, [`Events::reserve`]; the queue with its last
    /// reference, which a context and its regions' notifiers hold, dropped where a pin's drop
    /// may take a mutex).
    pending: KVVec<u64>,
    /// Slots held: one per pending event and one per handle that may still be revoked.
    reserved: usize,
    /// The first `reading` events are being handed out by a reader ([`Events::read`]), which
    /// takes them out when it is done: [`Events::cancel`] leaves them in place.
    reading: usize,
    /// Bit `i` set: the event at `i < reading` was cancelled while it was handed out; the
    /// reader takes it out too if it did not deliver it.
    cancelled: u32,
}

// A bit of `Queue::cancelled` for each event a read hands out.
const _: () = assert!(MAX_READ <= u32::BITS as usize);

/// One context's invalidation events.
#[pin_data]
pub(crate) struct Events {
    #[pin]
    queue: SpinLock<Queue>,
    /// Woken when an event is queued: readers waiting and `poll` waiters.
    #[pin]
    readable: PollCondVar,
    /// Held by the one reader handing events out (taken before `queue`; it may sleep).
    #[pin]
    reader: Mutex<()>,
}

/// The slots of a queue's first allocation.
const MIN_SLOTS: usize = 16;

/// Most events one [`Events::read`] hands out.
pub(crate) const MAX_READ: usize = 32;

/// What [`Events::read`] found.
pub(crate) enum Read {
    /// This many handles were written to the buffer.
    Events(usize),
    /// None is queued and the caller may not wait.
    WouldBlock,
}

impl Events {
    /// An empty queue.
    pub(crate) fn new() -> Result<Arc<Self>> {
        Arc::pin_init(
            pin_init!(Events {
                // INVARIANT: nothing pending, nothing reserved.
                queue <- new_spinlock!(
                    Queue {
                        pending: KVVec::new(),
                        reserved: 0,
                        reading: 0,
                        cancelled: 0,
                    },
                    "Events::queue"
                ),
                readable <- new_poll_condvar!("Events::readable"),
                reader <- new_mutex!((), "Events::reader"),
            }),
            GFP_KERNEL,
        )
    }

    /// Reserves the slot of one more handle that may be revoked.
    pub(crate) fn reserve(&self) -> Result {
        loop {
            let need = {
                let mut q = self.queue.lock();
                if q.reserved < q.pending.capacity() {
                    // INVARIANT: `reserved + 1 <= capacity`.
                    q.reserved += 1;
                    return Ok(());
                }
                // Doubled, so that reserving n slots reallocates O(log n) times.
                (q.reserved + 1)
                    .max(q.pending.capacity() * 2)
                    .max(MIN_SLOTS)
            };
            // Allocated without the spinlock; installed if still big enough. A failure is
            // the caller's -ENOMEM, not a warning.
            let mut bigger = KVVec::with_capacity(need, GFP_KERNEL | __GFP_NOWARN)?;
            let mut q = self.queue.lock();
            if q.reserved < q.pending.capacity() {
                q.reserved += 1;
                return Ok(());
            }
            if q.reserved + 1 > bigger.capacity() {
                // Others reserved meanwhile: size again.
                continue;
            }
            // The capacity suffices: this does not allocate.
            bigger.extend_from_slice(&q.pending, GFP_NOWAIT)?;
            let old = core::mem::replace(&mut q.pending, bigger);
            // INVARIANT: `reserved + 1 <= capacity`, and nothing was dropped from `pending`.
            q.reserved += 1;
            drop(q);
            // Freed without the spinlock: vfree may sleep.
            drop(old);
            return Ok(());
        }
    }

    /// Gives back the slot of a handle that went without being revoked.
    pub(crate) fn unreserve(&self) {
        let mut q = self.queue.lock();
        // INVARIANT: the slot was held by no pending event.
        q.reserved -= 1;
    }

    /// Queues a revocation of `handle`, in the slot its pin reserved. Never sleeps.
    pub(crate) fn push(&self, handle: u64) {
        {
            let mut q = self.queue.lock();
            if q.pending.len() >= q.reserved {
                // A push without a reservation: a bug, and the event cannot be stored.
                pr_err!("event for handle {} without a reserved slot\n", handle);
                return;
            }
            // The slot is reserved (`len < reserved <= capacity`): this does not allocate.
            if q.pending.push(handle, GFP_NOWAIT).is_err() {
                pr_err!("event for handle {} lost\n", handle);
                return;
            }
        }
        self.readable.notify_all();
    }

    /// Hands up to `max` of the oldest events to `deliver`, waiting for one when none is
    /// queued and `wait` allows (interruptibly: -ERESTARTSYS on a signal). `deliver` may sleep
    /// (it copies to user space) and returns how many it took; only those leave the queue.
    pub(crate) fn read(
        &self,
        max: usize,
        wait: bool,
        deliver: impl FnOnce(&[u64]) -> usize,
    ) -> Result<Read> {
        let mut batch = [0u64; MAX_READ];
        // Waits without `reader`, so that a waiting reader keeps no other from its signals.
        let (_reader, n) = loop {
            {
                let mut q = self.queue.lock();
                while q.pending.is_empty() {
                    if !wait {
                        return Ok(Read::WouldBlock);
                    }
                    if self.readable.wait_interruptible(&mut q) {
                        return Err(ERESTARTSYS);
                    }
                }
            }
            // One reader at a time: the events handed out stay the oldest until taken. A read
            // that may not wait still waits here, as a pipe's does for its mutex: another
            // reader holds it only while it copies events out, and a read that failed here
            // while poll says readable would have its caller poll and fail again until then.
            let reader = self.reader.lock();
            let mut q = self.queue.lock();
            let n = max.min(MAX_READ).min(q.pending.len());
            batch[..n].copy_from_slice(&q.pending[..n]);
            if n > 0 || max == 0 {
                // INVARIANT: `n <= pending.len()`; only this reader (it holds `reader`) sets
                // it, and cancels leave the first `n`.
                q.reading = n;
                break (reader, n);
            }
            // Another reader took them meanwhile.
        };
        let taken = deliver(&batch[..n]).min(n);
        let mut q = self.queue.lock();
        q.reading = 0;
        let cancelled = core::mem::take(&mut q.cancelled);
        // The events delivered leave, and so do those handed out, not delivered (a bad
        // buffer), whose handles went meanwhile. The first `n` are still the ones handed out.
        let len = q.pending.len();
        let mut kept = 0;
        for at in 0..len {
            let gone = at < taken || (at < n && cancelled & (1 << at) != 0);
            if !gone {
                q.pending[kept] = q.pending[at];
                kept += 1;
            }
        }
        q.pending.truncate(kept);
        // INVARIANT: the events that left give their slots back.
        q.reserved -= len - kept;
        Ok(Read::Events(taken))
    }

    /// Takes `handle`'s event out of the queue, with its slot, if it is queued: its handle
    /// went unread (UNPIN of a revoked handle), and an event for a handle that no longer
    /// exists only grows the queue (and, where numbers are reused, would name another
    /// handle). One that a reader is handing out is marked instead: the reader delivers it,
    /// or takes it out if it cannot.
    pub(crate) fn cancel(&self, handle: u64) {
        let mut q = self.queue.lock();
        // Not an event a reader holds that is marked already: where numbers are reused the
        // queue may hold that one and a newer event of the same number, which is the one
        // to take.
        let (reading, cancelled) = (q.reading, q.cancelled);
        let Some(at) = q
            .pending
            .iter()
            .enumerate()
            .position(|(i, &h)| h == handle && !(i < reading && cancelled & (1 << i) != 0))
        else {
            return;
        };
        if at < q.reading {
            q.cancelled |= 1 << at;
            return;
        }
        let len = q.pending.len();
        q.pending.copy_within(at + 1.., at);
        q.pending.truncate(len - 1);
        // INVARIANT: the event gives its slot back; `reading <= at < len` before.
        q.reserved -= 1;
    }

    /// For `poll`: registers the waiter and tells whether an event is queued.
    pub(crate) fn poll(&self, file: &File, table: PollTable<'_>) -> bool {
        table.register_wait(file, &self.readable);
        !self.queue.lock().pending.is_empty()
    }
}

/// A handle's notifier: queues its revocation on its context's [`Events`].
pub(crate) struct HandleEvent {
    pub(crate) events: Arc<Events>,
    pub(crate) handle: u64,
}

impl Notifier for HandleEvent {
    fn notify(&self) {
        self.events.push(self.handle);
    }
}

#[kernel::prelude::kunit_tests(gdrpeer_events)]
mod tests {
    use super::*;

    /// A handle's event held by a reader and cancelled, then the number's newer event
    /// (numbers reused) cancelled too: the newer one leaves, and the reader delivers
    /// neither.
    #[test]
    fn a_reused_number_s_newer_event_is_the_one_cancelled() -> Result {
        let events = Events::new()?;
        for _ in 0..3 {
            events.reserve()?;
        }
        events.push(7);
        events.push(9);
        let mut handed = [0u64; 2];
        let read = events.read(MAX_READ, false, |batch| {
            let n = batch.len().min(handed.len());
            handed[..n].copy_from_slice(&batch[..n]);
            // While the reader copies the two out: 7 unpinned, pinned again under the same
            // number, revoked, and unpinned again.
            events.cancel(7);
            events.push(7);
            events.cancel(7);
            // Nothing delivered (as for a bad buffer).
            0
        })?;
        assert!(matches!(read, Read::Events(0)));
        assert_eq!(handed, [7, 9]);
        let q = events.queue.lock();
        // 7's first event went with its mark, the second with its cancel; 9 stays.
        assert_eq!(&q.pending[..], &[9]);
        assert_eq!(q.reserved, 1);
        drop(q);
        Ok(())
    }
}
