// SPDX-License-Identifier: GPL-2.0

//! The CPU mappings of a handle ([`Mappings`]), which unpinning the handle ends: the use the
//! file front-ends attach to a handle ([`HandleUse`]).

use kernel::{
    new_condvar, new_spinlock,
    prelude::*,
    sync::{Arc, CondVar, SpinLock},
};

use crate::{
    cache::{Context, Region},
    notify::HandleUse,
    range::GpuRange,
};

/// The CPU mappings of one handle, and the faults in progress in them.
///
/// Faults enter ([`Mappings::enter`]) while the handle lives. Unpinning the handle ends them
/// ([`HandleUse::end`]): no fault enters after, the faults inside are waited for, and then the
/// front-end zaps the mappings, so that no page-table entry survives the handle. A fault
/// inserts one page-table entry and waits for nothing of the engine's, so the wait is short.
#[pin_data]
pub(crate) struct Mappings {
    #[pin]
    state: SpinLock<MappingsState>,
    /// Signalled when a fault leaves.
    #[pin]
    left: CondVar,
}

struct MappingsState {
    /// Live mappings (what one mmap made, however many vmas it became).
    live: u64,
    /// Faults inside.
    faults: u32,
    /// The handle was unpinned: faults get SIGBUS.
    ended: bool,
}

impl Mappings {
    fn new() -> Result<Arc<Self>> {
        Arc::pin_init(
            pin_init!(Mappings {
                state <- new_spinlock!(
                    MappingsState {
                        live: 0,
                        faults: 0,
                        ended: false,
                    },
                    "Mappings::state"
                ),
                left <- new_condvar!("Mappings::left"),
            }),
            GFP_KERNEL,
        )
    }

    /// Notes a new CPU mapping of a handle, put with [`Mappings::put`]: its faults enter and
    /// leave the returned [`Mappings`] (the handle's, made on its first mapping), which
    /// unpinning the handle ends. Returns the handle's region and window with it.
    pub(crate) fn get(ctx: &Context, handle: u64) -> Result<(Arc<Region>, GpuRange, Arc<Self>)> {
        ctx.attach(handle, |mappings: Option<Arc<Self>>| {
            let mappings = match mappings {
                Some(mappings) => mappings,
                None => Mappings::new()?,
            };
            mappings.state.lock().live += 1;
            Ok(mappings)
        })
    }

    /// A mapping went away (its last vma closed: munmap, exit). Takes only a spinlock: it
    /// runs from a vma's `close`, under the process's `mmap_lock`.
    pub(crate) fn put(&self) {
        self.state.lock().live -= 1;
    }

    /// A fault enters; false once the handle is unpinned. Pair with [`Mappings::leave`].
    pub(crate) fn enter(&self) -> bool {
        let mut s = self.state.lock();
        if s.ended {
            return false;
        }
        s.faults += 1;
        true
    }

    /// A fault that entered is done.
    pub(crate) fn leave(&self) {
        self.state.lock().faults -= 1;
        self.left.notify_all();
    }
}

impl HandleUse for Mappings {
    /// Ends the mappings: no fault enters any more, and those inside are done on return.
    /// Returns whether a mapping lives: one that none does has no page-table entry left (a
    /// mapping is put when its last vma closes, after the kernel removed the vma's entries),
    /// and none can be made (the handle is going, under the context's lock).
    fn end(&self) -> bool {
        let mut s = self.state.lock();
        s.ended = true;
        while s.faults > 0 {
            self.left.wait(&mut s);
        }
        s.live > 0
    }

    /// Whether the handle is mapped now.
    fn busy(&self) -> bool {
        self.state.lock().live > 0
    }
}
