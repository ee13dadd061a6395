// SPDX-License-Identifier: GPL-2.0

//! The table gate: NVIDIA never hands gdrpeer a new page table at an address that a racing
//! call of gdrpeer still names.
//!
//! NVIDIA frees a page table as soon as the free callback returns, and the next table it
//! allocates may take the same address at once (the slab hands out the most recently freed
//! object first). A put_pages that lost the race to the callback is harmless only while the
//! freed table's address names nothing: NVIDIA then treats it as a key that is not found.
//! Should a new pin of the same process and address get the recycled table first, the late
//! put_pages releases *that* pin, which gdrpeer still serves. A dma_map_pages that lost the
//! race likewise maps whichever table now lives at the address.
//!
//! gdrpeer cannot keep NVIDIA from freeing the table (the callback runs under NVIDIA's lock
//! and put_pages waits for that lock), but it can keep its own pins away from the address
//! until the late call is over. The gate has two sides:
//!
//! - [`Side::Pin`]: get_pages calls, which may be handed a recycled table;
//! - [`Side::Use`]: put_pages and dma_map_pages calls, which may name a table the callback
//!   frees meanwhile. Their admission starts before the pin's phase is checked, so a callback
//!   that frees the table either ran before (the phase says so and no call is made) or runs
//!   while the call is admitted, when no get_pages can run until the call has returned.
//!
//! Calls of one side run together; the two sides never do. A side that waits keeps newcomers
//! of the running side out, and takes the gate, all its waiters at once, when the running
//! calls have left, so neither side starves. The free callback never waits for the gate.

use kernel::{
    new_condvar, new_mutex,
    prelude::*,
    sync::{CondVar, Mutex},
};

/// The two kinds of nv-p2p call that the gate keeps apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Side {
    /// get_pages (callback and persistent pins).
    Pin,
    /// put_pages of a callback pin, and dma_map_pages.
    Use,
}

impl Side {
    fn index(self) -> usize {
        match self {
            Side::Pin => 0,
            Side::Use => 1,
        }
    }

    fn other(self) -> Side {
        match self {
            Side::Pin => Side::Use,
            Side::Use => Side::Pin,
        }
    }
}

/// Who holds the gate and who waits: the gate's decisions, free of locks so that KUnit
/// checks them.
#[derive(Debug)]
pub(crate) struct Turns {
    /// The side whose calls run (or ran last).
    side: Side,
    /// Calls of `side` admitted and not left.
    running: u32,
    /// Calls waiting, per side.
    waiting: [u32; 2],
    /// Batches let in so far, per side: a waiter is admitted once its side's count moves on.
    batches: [u64; 2],
}

/// What a waiting call waits for: the batch of its side after this one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Ticket(u64);

impl Turns {
    pub(crate) const fn new() -> Self {
        Turns {
            side: Side::Pin,
            running: 0,
            waiting: [0, 0],
            batches: [0, 0],
        }
    }

    /// A call of `side` arrives: `None` if it may run now, else the ticket it waits with.
    pub(crate) fn arrive(&mut self, side: Side) -> Option<Ticket> {
        if self.waiting[side.other().index()] == 0 && (self.running == 0 || self.side == side) {
            self.side = side;
            self.running += 1;
            None
        } else {
            self.waiting[side.index()] += 1;
            Some(Ticket(self.batches[side.index()]))
        }
    }

    /// Whether the call of `side` waiting with `ticket` has been let in.
    pub(crate) fn admitted(&self, side: Side, ticket: Ticket) -> bool {
        self.batches[side.index()] != ticket.0
    }

    /// An admitted call leaves. Returns whether waiters were let in (and must be woken).
    pub(crate) fn leave(&mut self) -> bool {
        self.running -= 1;
        if self.running > 0 {
            return false;
        }
        // The other side first; then this side's own waiters, should any be left.
        for next in [self.side.other(), self.side] {
            let n = core::mem::take(&mut self.waiting[next.index()]);
            if n > 0 {
                self.side = next;
                self.running = n;
                self.batches[next.index()] += 1;
                return true;
            }
        }
        false
    }
}

/// The table gate (module documentation). One serves the whole module: a stale put_pages can
/// only match a pin of its own process, but a stale dma_map_pages maps any table.
#[pin_data]
pub(crate) struct Gate {
    /// Held only to change `Turns`; never across a call or a wait (CondVar drops it).
    #[pin]
    turns: Mutex<Turns>,
    #[pin]
    turn: CondVar,
}

impl Gate {
    pub(crate) fn new() -> impl PinInit<Self> {
        pin_init!(Gate {
            turns <- new_mutex!(Turns::new(), "Gate::turns"),
            turn <- new_condvar!("Gate::turn"),
        })
    }

    /// Waits until a call of `side` may run; it runs until the pass is dropped.
    ///
    /// May sleep. The caller must not hold anything that an admitted call of either side, or
    /// NVIDIA's free callback, waits for (Documentation/dev/design.rst, "Locks").
    pub(crate) fn enter(&self, side: Side) -> Pass<'_> {
        let mut turns = self.turns.lock();
        if let Some(ticket) = turns.arrive(side) {
            while !turns.admitted(side, ticket) {
                self.turn.wait(&mut turns);
            }
        }
        Pass { gate: self }
    }
}

/// An admitted call: it leaves the gate when dropped.
pub(crate) struct Pass<'a> {
    gate: &'a Gate,
}

impl Drop for Pass<'_> {
    fn drop(&mut self) {
        let woke = self.gate.turns.lock().leave();
        if woke {
            self.gate.turn.notify_all();
        }
    }
}

#[kernel::prelude::kunit_tests(gdrpeer_gate)]
mod tests {
    use super::*;

    #[test]
    fn one_side_runs_together() {
        let mut t = Turns::new();
        assert_eq!(t.arrive(Side::Pin), None);
        assert_eq!(t.arrive(Side::Pin), None);
        assert!(!t.leave());
        assert!(!t.leave());
        assert_eq!(t.arrive(Side::Use), None);
        assert_eq!(t.arrive(Side::Use), None);
    }

    #[test]
    fn sides_exclude_each_other() {
        let mut t = Turns::new();
        assert_eq!(t.arrive(Side::Use), None);
        let pin = t
            .arrive(Side::Pin)
            .expect("a pin must wait for a running use");
        assert!(!t.admitted(Side::Pin, pin));
        // The last use to leave lets the pin in.
        assert!(t.leave());
        assert!(t.admitted(Side::Pin, pin));
        // A use arriving now waits for the pin.
        let usage = t
            .arrive(Side::Use)
            .expect("a use must wait for a running pin");
        assert!(t.leave());
        assert!(t.admitted(Side::Use, usage));
    }

    #[test]
    fn a_waiting_side_keeps_newcomers_out() {
        let mut t = Turns::new();
        assert_eq!(t.arrive(Side::Pin), None);
        let usage = t.arrive(Side::Use).expect("use waits");
        // Another pin must not overtake the waiting use.
        let late_pin = t
            .arrive(Side::Pin)
            .expect("a newcomer waits behind the other side");
        assert!(t.leave());
        assert!(t.admitted(Side::Use, usage));
        assert!(!t.admitted(Side::Pin, late_pin));
        assert!(t.leave());
        assert!(t.admitted(Side::Pin, late_pin));
    }

    #[test]
    fn all_waiters_of_a_side_go_in_together() {
        let mut t = Turns::new();
        assert_eq!(t.arrive(Side::Use), None);
        let a = t.arrive(Side::Pin).expect("waits");
        let b = t.arrive(Side::Pin).expect("waits");
        assert!(t.leave());
        assert!(t.admitted(Side::Pin, a) && t.admitted(Side::Pin, b));
        // Both run: the first to leave wakes nobody.
        assert!(!t.leave());
        assert!(!t.leave());
        assert_eq!(t.arrive(Side::Use), None);
    }
}
