// SPDX-License-Identifier: GPL-2.0

//! What the engine needs from the loaded module ([`Env`]), and the one way front-ends reach
//! it: [`Env::get`].

use core::ptr;
use kernel::{
    prelude::*,
    sync::atomic::{Acquire, Atomic, Full},
};

use crate::{
    nv_p2p::PinEnv,
    sys::{OwnedQueue, PciGone},
};

/// What contexts need from the loaded module. It lives in the module's own data: every
/// context and region holds a module reference (an open file, or a pin NVIDIA can still call
/// back), so it outlives them.
///
/// # Invariants
///
/// While an `Env` is in [`ENV`], it is initialized and pinned in place.
#[pin_data(PinnedDrop)]
pub(crate) struct Env {
    /// Gives back what pins mapped for a PCI device that its driver left or that was removed.
    /// First, so that it is unregistered (which waits for a call in progress) before the
    /// pins' environment it reaches goes.
    #[pin]
    gone: PciGone,
    /// Where the free callback queues the rest of its work.
    pub(crate) queue: OwnedQueue,
    /// This module, for the references pins take.
    pub(crate) module: &'static ThisModule,
    /// What every pin shares: the table gate, the DMA mappings of their pages (shared by
    /// page and peer), the wait for a pin's users to drain.
    #[pin]
    pub(crate) pins: PinEnv,
}

/// The module's [`Env`]: set once it is initialized, before any front-end is registered (the
/// module's data initializes it first), cleared when it is dropped, after every front-end is
/// gone (an open file or a peer driver's context keeps the module loaded).
static ENV: Atomic<*mut Env> = Atomic::new(ptr::null_mut());

impl Env {
    /// The environment of `module`, published for [`Env::get`] once in place. There is one:
    /// a second fails with -EBUSY.
    pub(crate) fn new(module: &'static ThisModule) -> impl PinInit<Self, Error> {
        try_pin_init!(Env {
            // A call before `Env::get` finds this `Env` has no pin to see.
            gone <- PciGone::new(|peer| {
                if let Ok(env) = Env::get() {
                    env.pins.peer_gone(peer);
                }
            }),
            queue: OwnedQueue::new(c"gdrpeer")?,
            module,
            pins <- PinEnv::new(),
        })
        .pin_chain(|env| {
            let env = ptr::from_ref(&*env).cast_mut();
            // INVARIANT: `env` is initialized and pinned; `drop` takes it out of `ENV`
            // before it goes. The exchange is fully ordered, so a release: a reader whose
            // `Acquire` load (`Env::get`) sees the pointer sees the initialized `Env`.
            ENV.cmpxchg(ptr::null_mut(), env, Full)
                .map(|_| ())
                .map_err(|_| EBUSY)
        })
    }

    /// The module's environment; -ENODEV before it is initialized or once it is dropped.
    pub(crate) fn get() -> Result<&'static Env> {
        // Pairs with the exchange that publishes the pointer in `Env::new` (fully ordered, so
        // a release).
        let env = ENV.load(Acquire);
        // SAFETY: a non-NULL `ENV` points to a live, pinned `Env` (the type invariant), whose
        // initialization this thread sees (the `Acquire` load above). It is only dropped at
        // module exit, when no front-end can call in any more (see `ENV`), so the `'static`
        // borrow is not used past it.
        unsafe { env.as_ref() }.ok_or(ENODEV)
    }
}

#[pinned_drop]
impl PinnedDrop for Env {
    fn drop(self: Pin<&mut Self>) {
        let me = ptr::from_ref(&*self).cast_mut();
        // Only this `Env` is withdrawn (one that failed to publish leaves the other alone).
        let _ = ENV.cmpxchg(me, ptr::null_mut(), Full);
    }
}
