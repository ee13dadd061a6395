// SPDX-License-Identifier: GPL-2.0

//! The pin state machine: [`Pinned`], its phases and locking, the [`PinOwner`] it reports
//! to, and NVIDIA's free callback. It is the same for both nv-p2p signature sets and calls
//! NVIDIA only through the one `crate::nv_p2p` selects (`sig`), and through the two free
//! functions both share.

use core::ptr::NonNull;
use kernel::{
    ffi::{c_int, c_void},
    new_condvar, new_mutex, new_spinlock, pci,
    prelude::*,
    rbtree::{RBTree, RBTreeNodeReservation},
    sync::{
        aref::ARef,
        atomic::{self, Acquire, Atomic, Relaxed},
        Arc, CondVar, Mutex, SpinLock, UniqueArc,
    },
    task::Task,
    time::{delay::fsleep, Delta, Instant, Monotonic},
    types::Opaque,
};

use super::{
    bindings, nv_result,
    sig::{
        check_dma_mapping, check_table, copy_bus_addresses, copy_dma_addresses, raw_dma_map,
        raw_dma_unmap, raw_get_pages, raw_get_pages_persistent, raw_put_pages,
        raw_put_pages_persistent, table_cpu_cacheable, table_gpu,
    },
    Tokens,
};
use crate::{
    gate::{Gate, Side},
    iova::{GpuUuid, Iovas},
    range::GpuRange,
    sys::{self, ModuleRef},
};

/// How a range is pinned: with a free callback, or persistently (never called back).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PinKind {
    /// `nvidia_p2p_get_pages`: NVIDIA may revoke it through the free callback.
    Callback,
    /// `nvidia_p2p_get_pages_persistent`: valid until we put it, even after cuMemFree.
    Persistent,
}

/// Where a pin is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Not pinned yet.
    New,
    /// `get_pages` returned; the table is being read.
    Pinning,
    /// Pinned; addresses can be read and DMA mappings made.
    Valid,
    /// We are giving the table back (DMA unmap, put_pages).
    Releasing,
    /// We gave the table back; NVIDIA will not call back.
    Released,
    /// NVIDIA's free callback ran: the table and its DMA mappings are gone.
    Revoked,
}

/// The owner of a [`Pinned`]: NVIDIA's free callback holds a reference to it while the pin can
/// still be revoked, and hands that reference to [`PinOwner::revoked`].
pub(crate) trait PinOwner: Send + Sync + Sized + 'static {
    /// The pin this owner holds.
    fn pinned(&self) -> &Pinned;

    /// Called from the free callback once access is withdrawn and the table given back, with
    /// the callback's reference. It runs under NVIDIA's global lock: it must not take any
    /// lock that gdrpeer holds while calling nv-p2p, nor call nv-p2p; queue work instead.
    fn revoked(this: Arc<Self>);

    /// Called from the free callback once the pin is marked revoked and its readers left,
    /// and before its DMA mappings and its table are freed, so that peers stop using them and
    /// CPU mappings of its pages are zapped. Runs under NVIDIA's global lock, with the same
    /// restrictions as [`PinOwner::revoked`]; it may sleep briefly.
    fn invalidate(&self) {}
}

/// One peer's DMA mapping of a pin's pages ([`Pinned::dma_map`]).
///
/// # Invariants
///
/// `bus` are the bus addresses of the pin's pages, in order, and `addresses` their DMA
/// addresses for `peer`: holds on [`Iovas`] mappings, one per page, which only the
/// [`Pinned`] that holds this gives back ([`PeerMap::unmap`]), once, before the pin's pages go.
/// `addresses` is never written after the mapping is made.
struct PeerMap {
    peer: ARef<pci::Device>,
    bus: KVVec<u64>,
    /// Shared with the mapping's users ([`Pinned::dma_map`]), which may keep the values
    /// past the mapping (the kernel API's registrations hand them out until their unpin).
    addresses: Arc<KVVec<u64>>,
    /// The uses of the mapping not yet ended ([`Pinned::dma_unuse`]).
    uses: u64,
}

impl PeerMap {
    /// Gives the mapping back to `iovas`; the caller has taken it out of the pin's state.
    fn unmap(self, iovas: &Iovas) {
        iovas.unmap(&self.peer, &self.bus);
    }

    /// Gives back every mapping of `maps`, taken out of a pin's state.
    fn unmap_all(maps: RBTree<usize, PeerMap>, iovas: &Iovas) {
        for (_, map) in maps.iter() {
            iovas.unmap(&map.peer, &map.bus);
        }
    }
}

/// The table NVIDIA handed out for a pin.
///
/// # Invariants
///
/// It is the non-NULL `nvidia_p2p_page_table` that get_pages wrote for the [`Pinned`] whose
/// [`State::table`] holds it, and stays alive while that state holds it: [`Pinned::revoke`]
/// clears it before the callback lets NVIDIA free the table, and a successful put_pages
/// clears it too. A copy outlives that only inside an [`Access`] or a [`Mapper`], whose
/// rules say how long it stays alive.
#[derive(Clone, Copy)]
struct Table(NonNull<bindings::nvidia_p2p_page_table>);

// SAFETY: NVIDIA's tables may be used from any thread.
unsafe impl Send for Table {}

/// The state of a pin, protected by [`Pinned::state`].
struct State {
    phase: Phase,
    /// The live table: set once get_pages returned (phase `Pinning`), kept while `Valid` and
    /// `Releasing`, cleared when the table is given back or revoked.
    table: Option<Table>,
    /// Threads holding an [`Access`]: the callback waits for them.
    users: u32,
    /// Threads holding a [`Mapper`] (inside `dma_map_pages`, which takes NVIDIA's lock): an
    /// unpin waits for them before put_pages, the callback cannot. Only the first mapping of
    /// a GPU for a peer makes one, so more than `u16::MAX` at a time are refused (-EBUSY).
    mappers: u16,
    /// A releasing thread waits in [`Access::end_and_wait`] for `users` and `mappers` to
    /// drain: only then does the end of an access or a mapper signal [`PinEnv::drained`].
    draining: bool,
    /// Bus (BAR1) address of each 64 KiB page, copied from the table. Written once, when the
    /// pin becomes `Valid` ([`Pinned::finish_pin`]), and never again until the pin is dropped
    /// ([`Pinned::bus_addresses`] lends it out on that ground).
    addresses: Option<KVBox<[u64]>>,
    /// DMA mappings, by `struct pci_dev` address of the peer (each holds its peer).
    /// While it is not empty, the pin is listed in [`PinEnv::mapped`].
    maps: RBTree<usize, PeerMap>,
    /// Keeps gdrpeer loaded while NVIDIA can still call back into it: a callback pin's, taken
    /// before its get_pages, given back once its put_pages succeeded.
    module: ModuleRef,
}

impl State {
    /// The bus addresses, none before the pin is made.
    fn addresses(&self) -> &[u64] {
        self.addresses.as_deref().unwrap_or(&[])
    }
}

/// A use of a pin's table and DMA mappings, modelled on `RevocableGuard`: while one is held
/// the free callback waits before it lets NVIDIA free them ([`Pinned::wait_for_users`]).
/// Dropping it ends the use and wakes a releasing thread that waits for the last one
/// ([`Access::end_and_wait`]).
///
/// Holders must not sleep nor take a lock while they hold it (the callback waits for them
/// under NVIDIA's lock); the two exceptions say why they are bounded where they are taken
/// ([`Pinned::with_bus_address`], the unmaps of [`Release`]).
///
/// # Invariants
///
/// It was counted in `State::users` of `pinned` when the phase was not `Revoked`, and `table`
/// was `State::table` then.
struct Access<'a> {
    pinned: &'a Pinned,
    table: Table,
}

impl<'a> Access<'a> {
    /// Takes access under `s`, the locked state of `pinned`, if the phase allows it and the
    /// table is there: -ENXIO otherwise.
    fn take(pinned: &'a Pinned, s: &mut State, phases: &[Phase]) -> Result<Self> {
        match s.table {
            Some(table) if phases.contains(&s.phase) => {
                s.users += 1;
                // INVARIANT: counted with the phase one of `phases` (none is `Revoked`).
                Ok(Access { pinned, table })
            }
            _ => Err(ENXIO),
        }
    }

    /// The table, alive while this is held.
    fn table(&self) -> &bindings::nvidia_p2p_page_table {
        // SAFETY: access was counted before the phase became Revoked (type invariant), and
        // the callback waits for it before it lets NVIDIA free the table, so the table is
        // alive (`Table` invariant).
        unsafe { self.table.0.as_ref() }
    }

    /// Ends this use, then waits for the other users and for the mappers: what a releasing
    /// thread does before put_pages, so that put_pages finds no mapping live. None of them
    /// waits for this thread.
    fn end_and_wait(self) -> Table {
        let this = core::mem::ManuallyDrop::new(self);
        let mut s = this.pinned.state.lock();
        s.users -= 1;
        s.draining = true;
        while s.users > 0 || s.mappers > 0 {
            this.pinned.env.drained.wait(&mut s);
        }
        s.draining = false;
        this.table
    }
}

impl Drop for Access<'_> {
    fn drop(&mut self) {
        let draining = {
            let mut s = self.pinned.state.lock();
            s.users -= 1;
            s.draining
        };
        self.pinned.wake_drainer(draining);
    }
}

/// A thread inside `dma_map_pages` for a pin ([`Pinned::probe`]). No access is held across
/// the call: the call takes NVIDIA's lock, under which the callback runs and waits for users.
/// An unpin waits for mappers before put_pages instead (`State::mappers`); the callback
/// cannot.
///
/// # Invariants
///
/// It was counted in `State::mappers` of `pinned` when the phase was `Valid`, and `table` was
/// `State::table` then.
struct Mapper<'a> {
    pinned: &'a Pinned,
    table: Table,
}

impl<'a> Mapper<'a> {
    /// Ends the call under `s`, the locked state of the pin.
    fn finish(self, s: &mut State) {
        let this = core::mem::ManuallyDrop::new(self);
        s.mappers -= 1;
        this.pinned.wake_drainer(s.draining);
    }

    /// Ends the call and takes access in one step under `s` (the phase is not `Revoked`), so
    /// that an unpin waiting for both never sees neither while the mapping this call made is
    /// still to be given back.
    fn into_access(self, s: &mut State) -> Access<'a> {
        let this = core::mem::ManuallyDrop::new(self);
        s.mappers -= 1;
        s.users += 1;
        // INVARIANT: counted with the phase not Revoked; `table` was `State::table` when the
        // mapper was counted, and only a release or the callback clears it, both of which
        // first wait for this mapper (the release) or change the phase to Revoked.
        Access {
            pinned: this.pinned,
            table: this.table,
        }
    }
}

impl Drop for Mapper<'_> {
    fn drop(&mut self) {
        let draining = {
            let mut s = self.pinned.state.lock();
            s.mappers -= 1;
            s.draining
        };
        self.pinned.wake_drainer(draining);
    }
}

/// A pin being given back ([`Pinned::begin_release`]): its phase is `Releasing`, so no DMA
/// mapping is added, and those it has (gdrpeer's own, [`Iovas`]) go in
/// [`Release::unmap_all`]. The access it holds keeps a callback that comes meanwhile from
/// letting NVIDIA free the table while a probe still has to give NVIDIA's mapping back
/// ([`Pinned::probe`]). `dma_unmap_pages` takes no NVIDIA lock (only the mapping list's own),
/// and the unmaps wait only for [`PinEnv::mapped`], whose holders wait for neither NVIDIA nor
/// a pin's users, so that wait is bounded.
struct Release<'a> {
    access: Access<'a>,
}

/// GPU memory pinned through nv-p2p: owns an `nvidia_p2p_page_table` and gives it back exactly
/// once, by put_pages ([`Pinned::unpin`]) or by NVIDIA's free callback.
///
/// Modelled on the kernel's `Revocable`: readers hold an [`Access`], the free callback
/// withdraws access and waits (bounded) for current readers, then gives the DMA mappings back
/// and frees the table. Readers never block while they hold access, and the only nv-p2p call made with
/// access held is `dma_unmap_pages`, which takes no NVIDIA lock (the driver's nv-p2p.c locks
/// only the table's mapping list there), so the callback cannot wait for a thread that waits
/// for NVIDIA's lock. The transitions, with the phase each one moves between:
///
/// - pin: [`Pinned::begin_pin`] (`New` to `Pinning`), [`Pinned::get_pages`],
///   [`Pinned::read_table`], [`Pinned::finish_pin`] (to `Valid`, or back);
/// - DMA map: [`Pinned::dma_map`], the first for a GPU and peer after a probe of NVIDIA's:
///   [`Pinned::begin_dma_map`] (a [`Mapper`]), [`Mapper::map_pages`],
///   [`Pinned::read_dma_map`], [`Pinned::end_probe`];
/// - unpin: [`Pinned::begin_release`] (`Valid` to `Releasing`, a [`Release`]),
///   [`Release::unmap_all`], [`Pinned::put_table`], [`Pinned::finish_release`] (to
///   `Released`);
/// - the free callback: [`Pinned::revoke`] (any phase to `Revoked`).
///
/// # Invariants
///
/// - `table_out` is written only by NVIDIA inside get_pages; it is read right after get_pages
///   returned and by the free callback, which NVIDIA calls only after writing it.
/// - For a [`PinKind::Callback`] pin in phase `Pinning`, `Valid` or `Releasing`, NVIDIA holds
///   one reference to the owner (the callback's `data`), consumed by the callback or by
///   `unpin` after a successful put_pages.
#[pin_data(PinnedDrop)]
pub(crate) struct Pinned {
    range: GpuRange,
    kind: PinKind,
    /// The VA space get_pages and put_pages name (a callback pin's; persistent pins have
    /// none): [`Tokens`], kept as two fields so that the small ones share a word.
    p2p_token: u64,
    va_space: u32,
    /// Whether the table says the CPU may cache the pages (coherent platforms): written
    /// once (a release), when the pin becomes `Valid`; false until then.
    cpu_cacheable: Atomic<bool>,
    /// The group leader of the pinning process: only it may put a callback pin.
    owner: ARef<Task>,
    /// What it shares with every pin: the gate, the DMA mappings, the wait for its users.
    env: &'static PinEnv,
    /// get_pages' out-parameter: where NVIDIA writes the table's address.
    table_out: Opaque<*mut bindings::nvidia_p2p_page_table>,
    #[pin]
    state: SpinLock<State>,
}

/// What every pin of the module shares, in the module's data ([`crate::env::Env`]).
#[pin_data]
pub(crate) struct PinEnv {
    /// Keeps gdrpeer's pins off table addresses that a late call may still name.
    #[pin]
    pub(crate) gate: Gate,
    /// Where DMA mappings are made, shared by the pins of the same pages.
    #[pin]
    pub(crate) iovas: Iovas,
    /// Signalled when an [`Access`] or a [`Mapper`] of a pin ends while a releasing thread
    /// waits for them (`State::draining`). One for all pins: such a wait is rare, and each
    /// waiter checks its own pin again when woken.
    #[pin]
    drained: CondVar,
    /// The pins that hold DMA mappings, by address ([`Pinned::key`]), so that a peer's
    /// mappings can be found when the peer goes ([`PinEnv::peer_gone`]).
    ///
    /// # Invariants
    ///
    /// A pin whose `State::maps` is not empty is listed: it is listed, under this lock and
    /// its own, before its first mapping shows. A listed pin is alive: whatever empties its
    /// `maps` takes it out of the list, under this lock, before it lets go of the pin (the
    /// thread giving it back, revoking it or ending its last use holds it), and its drop takes
    /// it out if nothing did (a pin dropped with its table and mappings).
    ///
    /// Every mapping is made and given back under this lock, in the same hold as it enters or
    /// leaves a pin's `maps` ([`Pinned::dma_map`], [`PinEnv::give_back`]): whoever takes a
    /// mapping out has unmapped it before anyone else sees the list, so a peer's removal that
    /// swept the list leaves no unmap for the peer behind it.
    ///
    /// A lock between 3 and 4 of the crate's order: taken under 1 to 3 (a first mapping, an
    /// unpin, the free callback, a last use's end), never with a dma-buf's reservation lock;
    /// only locks 4 and 5 are taken under it, and the PCI bus's list of devices (a new
    /// mapping's check that its peer is still there, [`sys::pci_on_bus`]), whose holders never
    /// wait for NVIDIA's lock, so the callback's wait for it is bounded (its holders map or
    /// unmap pages, never wait for a pin's users nor for NVIDIA).
    #[pin]
    mapped: Mutex<RBTree<usize, ()>>,
}

impl PinEnv {
    /// The shared parts of a module's pins.
    pub(crate) fn new() -> impl PinInit<Self> {
        pin_init!(PinEnv {
            gate <- Gate::new(),
            iovas <- Iovas::new(),
            drained <- new_condvar!("PinEnv::drained"),
            mapped <- new_mutex!(RBTree::new(), "PinEnv::mapped"),
        })
    }

    /// Takes out of `pin`'s state, under its lock, the mappings `take` picks, and gives them
    /// back, all under the list's lock; then takes `pin` out of the list if it has no mapping
    /// left. A peer's removal ([`PinEnv::peer_gone`]) thus finds each mapping either in a
    /// pin's state or given back, never on its way out: no unmap for the peer runs after its
    /// removal's sweep.
    fn give_back<M>(
        &self,
        pin: &Pinned,
        take: impl FnOnce(&mut State) -> M,
        unmap: impl FnOnce(M),
    ) {
        let mut pins = self.mapped.lock();
        let (maps, empty) = {
            let mut s = pin.state.lock();
            let maps = take(&mut s);
            (maps, s.maps.is_empty())
        };
        unmap(maps);
        // No mapping is added meanwhile: that takes this lock.
        if empty {
            pins.remove(&pin.key());
        }
    }

    /// Gives back every mapping of `pin`, which takes no new one (it is released or revoked),
    /// and takes it out of the list ([`PinEnv::give_back`]). The list's lock is taken also
    /// where the pin has no mapping left: a last use's end, a peer's removal or a first
    /// mapping that finds the pin gone may be unmapping its pages under it, and is done once
    /// the lock is taken, before the pages go back to NVIDIA.
    fn give_back_all(&self, pin: &Pinned) {
        self.give_back(
            pin,
            |s| core::mem::take(&mut s.maps),
            |maps| PeerMap::unmap_all(maps, &self.iovas),
        );
    }

    /// Gives back every pin's DMA mapping for the peer whose `struct pci_dev` is at `peer`, as
    /// its driver is unbound or the peer is removed ([`sys::PciGone`]): no mapping is left to a
    /// device that its driver has left, whether a pin keeps it for later uses
    /// (`dma_map_keep`) or uses hold it still (`/dev/gdrpeer`'s DMA_MAP lasts until the
    /// handle's unpin; a driver's registration should have ended in its removal). A use that
    /// ends later finds its mapping gone ([`Pinned::dma_unuse`]); the addresses it holds are
    /// stale values, which no peer of the unbound driver can be given.
    pub(crate) fn peer_gone(&self, peer: usize) {
        // A device no mapping was made for (one that is no peer, most devices) has none now: a
        // pair is remembered before the first mapping for it, and kept until the device is
        // removed from the system, after this.
        if !self.iovas.is_peer(peer) {
            return;
        }
        let mut gone: Option<ARef<pci::Device>> = None;
        let (mut maps, mut used) = (0u64, 0u64);
        let mut pins = self.mapped.lock();
        let mut cursor = pins.cursor_front_mut();
        while let Some(at) = cursor {
            let key = *at.current().0;
            // SAFETY: a listed pin is alive (`mapped` invariant), and this holds the list's lock.
            let pin = unsafe { &*(key as *const Pinned) };
            let (map, empty) = {
                let mut s = pin.state.lock();
                let map = s.maps.remove(&peer);
                (map, s.maps.is_empty())
            };
            if let Some(map) = map {
                maps += 1;
                used += u64::from(map.uses > 0);
                gone.get_or_insert_with(|| map.peer.clone());
                map.unmap(&self.iovas);
            }
            cursor = if empty {
                // The next pin, or the one before where this was the last: that one is done.
                let (next, _) = at.remove_current();
                next.filter(|next| *next.current().0 > key)
            } else {
                at.move_next()
            };
        }
        drop(pins);
        if let Some(dev) = gone {
            let dev: &kernel::device::Device = dev.as_ref();
            kernel::dev_info!(
                dev,
                "as the device went, gave back DMA mappings of pinned GPU memory: {maps}, {used} of them in use\n"
            );
        }
    }
}

// SAFETY: the table is only dereferenced under the access protocol of the type invariants,
// and NVIDIA's tables may be used from any thread.
unsafe impl Send for Pinned {}
// SAFETY: a shared `Pinned` allows no unsynchronised mutation: all mutable state is behind the
// `state` spinlock, `table_out` is written only by NVIDIA inside get_pages (before any reader is
// admitted), the table is dereferenced only under the access protocol of the type invariants,
// and NVIDIA's tables may be used from any thread.
unsafe impl Sync for Pinned {}

/// Pins dropped with their table still pinned: the reports of the drop check (`PinnedDrop`),
/// counted for its KUnit suite `gdrpeer_pin`.
static DROPPED_PINNED: Atomic<u64> = Atomic::new(0);

/// How long the free callback waits for readers before it warns that they are slow.
const REVOKE_WAIT: Delta = Delta::from_millis(100);

impl Pinned {
    /// A pin of `range` of the GPU memory of the VA space `tokens` name (the calling
    /// process's for the default ones, the only ones a persistent pin takes), not made yet
    /// ([`Pinned::pin`]).
    pub(crate) fn new(
        range: GpuRange,
        kind: PinKind,
        tokens: Tokens,
        env: &'static PinEnv,
    ) -> impl PinInit<Self> {
        let owner = ARef::from(current!().group_leader());
        pin_init!(Pinned {
            range,
            kind,
            p2p_token: tokens.p2p_token,
            va_space: tokens.va_space,
            cpu_cacheable: Atomic::new(false),
            owner,
            env,
            table_out: Opaque::new(core::ptr::null_mut()),
            state <- new_spinlock!(
                State {
                    phase: Phase::New,
                    table: None,
                    users: 0,
                    mappers: 0,
                    draining: false,
                    addresses: None,
                    maps: RBTree::new(),
                    module: ModuleRef::none(),
                },
                "Pinned::state"
            ),
        })
    }

    /// Wakes the releasing thread if it waits for accesses and mappers to end: `draining` is
    /// `State::draining` as read under the lock that ended one.
    fn wake_drainer(&self, draining: bool) {
        if draining {
            self.env.drained.notify_all();
        }
    }

    /// The VA space it pins in.
    fn tokens(&self) -> Tokens {
        Tokens {
            p2p_token: self.p2p_token,
            va_space: self.va_space,
        }
    }

    /// The pinned range.
    pub(crate) fn range(&self) -> &GpuRange {
        &self.range
    }

    /// How it is pinned.
    pub(crate) fn kind(&self) -> PinKind {
        self.kind
    }

    /// Where it is in its life.
    pub(crate) fn phase(&self) -> Phase {
        self.state.lock().phase
    }

    /// Whether NVIDIA revoked it.
    pub(crate) fn is_revoked(&self) -> bool {
        self.phase() == Phase::Revoked
    }

    /// Whether NVIDIA's table says the CPU may cache its pages (false until pinned).
    pub(crate) fn cpu_cacheable(&self) -> bool {
        self.cpu_cacheable.load(Acquire)
    }

    /// [`Pinned::is_revoked`] and [`Pinned::cpu_cacheable`] at once (one lock).
    pub(crate) fn revoked_and_cacheable(&self) -> (bool, bool) {
        let s = self.state.lock();
        (s.phase == Phase::Revoked, self.cpu_cacheable.load(Acquire))
    }

    /// Pins the range: calls nv-p2p, checks the table and copies its addresses.
    ///
    /// Fails with nv-p2p's error, -EOPNOTSUPP for a table gdrpeer cannot read or a persistent
    /// pin the driver does not offer, or -ENXIO when the memory was freed (the callback ran)
    /// while pinning.
    pub(crate) fn pin<T: PinOwner>(owner: &Arc<T>, module: &'static ThisModule) -> Result {
        let this = owner.pinned();
        let module = ModuleRef::get(module)?;
        this.begin_pin()?;
        if this.kind == PinKind::Callback {
            // Kept from before get_pages: whatever comes after it (a table refused whose
            // put_pages fails, no table at all) may leave NVIDIA a callback into this module,
            // which must then stay loaded until the callback has come.
            this.state.lock().module = module;
        }
        Self::get_pages(owner)?;
        let read = this.read_table();
        Self::finish_pin(owner, read)
    }

    /// `New` to `Pinning`: -EBUSY for a pin made (or being made) already.
    fn begin_pin(&self) -> Result {
        let mut s = self.state.lock();
        if s.phase != Phase::New {
            return Err(EBUSY);
        }
        s.phase = Phase::Pinning;
        Ok(())
    }

    /// Calls get_pages and keeps the table it wrote (`State::table`); on failure the phase
    /// goes back to `New`. -ENXIO when the callback came before the table was kept.
    fn get_pages<T: PinOwner>(owner: &Arc<T>) -> Result {
        let this = owner.pinned();
        // A table NVIDIA hands out now cannot sit at an address that a late put_pages or
        // dma_map_pages still names (crate::gate).
        let pass = this.env.gate.enter(Side::Pin);
        let ret = match this.kind {
            PinKind::Callback => {
                let data = Arc::into_raw(owner.clone()).cast_mut().cast::<c_void>();
                // SAFETY: the range is 64 KiB aligned (GpuRange invariant); `table_out` is ours
                // to write; `data` is a reference to `owner` that the callback consumes
                // (free_callback::<T>), or we take back below if nothing was pinned.
                let ret = unsafe {
                    raw_get_pages(
                        this.tokens(),
                        this.range.start(),
                        this.range.len(),
                        this.table_out.get(),
                        Some(free_callback::<T>),
                        data,
                    )
                };
                if ret != 0 {
                    // SAFETY: nothing was pinned, so NVIDIA keeps no copy of `data`.
                    drop(unsafe { Arc::from_raw(data.cast::<T>()) });
                }
                ret
            }
            PinKind::Persistent if !this.tokens().are_default() => EINVAL.to_errno(),
            // SAFETY: the range is 64 KiB aligned (GpuRange invariant); `table_out` is ours to
            // write.
            PinKind::Persistent => unsafe {
                raw_get_pages_persistent(this.range.start(), this.range.len(), this.table_out.get())
            },
        };
        drop(pass);
        let mut s = this.state.lock();
        if let Err(e) = nv_result(ret) {
            s.phase = Phase::New;
            return Err(e);
        }
        if s.phase == Phase::Revoked {
            // The callback ran already and freed the table.
            return Err(ENXIO);
        }
        // SAFETY: get_pages succeeded, so NVIDIA wrote `table_out` (type invariant).
        let Some(table) = NonNull::new(unsafe { *this.table_out.get() }) else {
            // Not a table: nothing to read or give back. NVIDIA's reference to a callback
            // pin's owner stays with it, and the phase stays `Pinning`.
            pr_err!(
                "nv-p2p get_pages({:#x}) returned no table\n",
                this.range.start()
            );
            return Err(EIO);
        };
        // INVARIANT: the table get_pages wrote for this pin, alive until given back or
        // revoked (the callback has not run: the phase is not Revoked).
        s.table = Some(Table(table));
        Ok(())
    }

    /// Checks the table and copies its addresses. Readers must not sleep while they hold
    /// access: size first, allocate, then copy.
    fn read_table(&self) -> Result<TableRead> {
        let pinning = [Phase::Pinning];
        let (n, cacheable) = {
            let access = Access::take(self, &mut self.state.lock(), &pinning)?;
            check_table(access.table(), &self.range)?;
            // SAFETY: the table is live while access is held and passed check_table; the
            // pointer is NVIDIA's own, valid for the whole table (a 2.x table is longer than
            // the struct of a 1.x header).
            let cacheable = unsafe { table_cpu_cacheable(access.table.0.as_ptr()) };
            (access.table().entries as usize, cacheable)
        };
        let mut addresses = KVVec::with_capacity(n, GFP_KERNEL)?;
        let access = Access::take(self, &mut self.state.lock(), &pinning)?;
        // SAFETY: the table is live while access is held, passed check_table and has `n`
        // entries.
        unsafe { copy_bus_addresses(access.table(), n, &mut addresses) }?;
        drop(access);
        Ok(TableRead {
            addresses: boxed_slice(addresses)?,
            cacheable,
        })
    }

    /// `Pinning` to `Valid` with what [`Pinned::read_table`] read; a table it could not read
    /// is given back at once.
    fn finish_pin<T: PinOwner>(owner: &Arc<T>, read: Result<TableRead>) -> Result {
        let this = owner.pinned();
        let mut s = this.state.lock();
        match read {
            Ok(read) if s.phase == Phase::Pinning => {
                s.phase = Phase::Valid;
                s.addresses = Some(read.addresses);
                // Pairs with the readers' acquire loads.
                this.cpu_cacheable.store(read.cacheable, atomic::Release);
                Ok(())
            }
            // The callback ran while we were pinning: the table is gone already.
            _ if s.phase == Phase::Revoked => Err(ENXIO),
            Ok(_) => Err(EIO),
            Err(e) => {
                // A table we cannot read: give it back at once.
                s.phase = Phase::Valid;
                drop(s);
                Self::unpin(owner);
                Err(e)
            }
        }
    }

    /// Copies the bus addresses of pages `first..first + out.capacity()` into `out`, or the
    /// DMA addresses of `peer`'s mapping when one is given (made by [`Pinned::dma_map`]).
    ///
    /// `out` must be empty with its capacity reserved. Fails with -ENXIO once revoked or
    /// released, -ENOENT when `peer` has no mapping, -EINVAL beyond the range.
    pub(crate) fn copy_addresses(
        &self,
        peer: Option<&pci::Device>,
        first: usize,
        out: &mut KVVec<u64>,
    ) -> Result {
        let s = self.state.lock();
        if s.phase != Phase::Valid {
            return Err(ENXIO);
        }
        let all = match peer {
            None => s.addresses(),
            Some(peer) => {
                let key = sys::pci_dev_ptr(peer) as usize;
                &s.maps.get(&key).ok_or(ENOENT)?.addresses[..]
            }
        };
        let want = all.get(first..first + out.capacity()).ok_or(EINVAL)?;
        // The capacity is reserved: this does not allocate under the spinlock.
        out.extend_from_slice(want, GFP_NOWAIT)?;
        Ok(())
    }

    /// The bus addresses of pages `first..first + n`, read in place: values, which stay as
    /// they are for as long as the pin lives, whatever happens to the pin meanwhile (a
    /// revocation or a release does not touch them). Fails with -ENXIO unless the pin is
    /// valid now, -EINVAL beyond the range.
    pub(crate) fn bus_addresses(&self, first: usize, n: usize) -> Result<&[u64]> {
        let s = self.state.lock();
        if s.phase != Phase::Valid {
            return Err(ENXIO);
        }
        let end = first.checked_add(n).ok_or(EINVAL)?;
        let want = s.addresses().get(first..end).ok_or(EINVAL)?;
        let (ptr, len) = (want.as_ptr(), want.len());
        drop(s);
        // SAFETY: `addresses` was written when the pin became Valid, which it is, and is never
        // written again nor freed before the pin is dropped (`State::addresses`), which `&self`
        // keeps from happening while the slice is borrowed.
        Ok(unsafe { core::slice::from_raw_parts(ptr, len) })
    }

    /// Runs `f` with the bus address of page `page` while the callback cannot complete, for
    /// a CPU mapping's fault: `f` inserts the address into a page table, and the callback
    /// waits for it before it zaps the mappings and lets NVIDIA free the table
    /// ([`Pinned::revoke`]), so no page-table entry outlives the table.
    ///
    /// Unlike other readers, `f` may take page-table locks and allocate a page table (it
    /// holds no lock of gdrpeer's and never waits for NVIDIA's lock, so the callback's wait
    /// stays bounded). Fails with -ENXIO unless the pin is valid, -EINVAL beyond the range.
    pub(crate) fn with_bus_address<R>(&self, page: usize, f: impl FnOnce(u64) -> R) -> Result<R> {
        let (address, _access) = {
            let mut s = self.state.lock();
            if s.phase != Phase::Valid {
                return Err(ENXIO);
            }
            let address = *s.addresses().get(page).ok_or(EINVAL)?;
            (address, Access::take(self, &mut s, &[Phase::Valid])?)
        };
        Ok(f(address))
    }

    /// Maps the whole pin for `peer`, or counts one more use of the mapping it has: a DMA
    /// mapping per page, shared with the other pins of the same pages ([`crate::iova`]). Each
    /// call is a use, which [`Pinned::dma_unuse`] ends; the mapping lasts until the pin is
    /// given back or revoked, or until its last use ends where the caller does not keep it.
    /// Returns the DMA addresses of the pin's pages for `peer`, in order: the mapping's own
    /// array, shared, which outlives the mapping for as long as the caller holds it (values,
    /// which it must not give a peer once the mapping is gone).
    ///
    /// The first mapping of a GPU's memory for a peer asks NVIDIA whether the peer may reach
    /// it ([`Pinned::probe`]). Fails with -ENXIO once revoked or released, with nv-p2p's
    /// error, with -EIO where the DMA API cannot map a page for the peer, or with -ENODEV
    /// where the peer was removed from the system (a mapping made for it then would outlive
    /// it: [`PinEnv::peer_gone`] has run).
    pub(crate) fn dma_map(&self, peer: &ARef<pci::Device>) -> Result<Arc<KVVec<u64>>> {
        let key = sys::pci_dev_ptr(peer) as usize;
        if let Some(addresses) = self.use_mapping(key)? {
            return Ok(addresses);
        }
        let gpu = self.gpu()?;
        // First, as the uAPI documents a failed first allocation as -ENOMEM (the arrays'
        // allocations fall back to vmalloc).
        let node = RBTreeNodeReservation::new(GFP_KERNEL)?;
        let listing = RBTreeNodeReservation::new(GFP_KERNEL)?;
        if !self.env.iovas.allowed(gpu, peer) {
            self.probe(gpu, peer)?;
            self.env.iovas.allow(gpu, peer)?;
        }
        let n = self.range.page_count() as usize;
        let mut bus = KVVec::with_capacity(n, GFP_KERNEL)?;
        self.copy_addresses(None, 0, &mut bus)?;
        let mut addresses = KVVec::with_capacity(n, GFP_KERNEL)?;
        // Allocated before the list's lock, which the free callback may wait for.
        let shared = UniqueArc::new_uninit(GFP_KERNEL)?;
        // Mapped and listed under the list's lock (`PinEnv::mapped` invariant), so that a
        // peer's removal sweeps this mapping or comes before it is made. It may be still
        // listed without mappings, by a thread about to take it out, which will see this
        // mapping and leave it.
        let mut pins = self.env.mapped.lock();
        // A peer removed since it was found (a DMA_MAP names it by its address): its removal
        // took it off the bus before its notifier swept this list, which it did before this
        // lock was taken or will after; a mapping made now would outlive the device.
        if !sys::pci_on_bus(peer) {
            return Err(ENODEV);
        }
        // Another thread mapped `peer` meanwhile, or the pin went.
        if let Some(addresses) = self.use_mapping(key)? {
            return Ok(addresses);
        }
        self.env.iovas.map(peer, &bus, &mut addresses)?;
        let addresses: Arc<KVVec<u64>> = shared.write(addresses).into();
        let mut s = self.state.lock();
        // No mapping for `peer` was added meanwhile (that takes the list's lock), but the
        // pin may have been given back or revoked since `use_mapping`: its mappings went,
        // ours goes too. No peer has seen its addresses.
        if s.phase != Phase::Valid {
            drop(s);
            self.env.iovas.unmap(peer, &bus);
            return Err(ENXIO);
        }
        if s.maps.is_empty() {
            pins.insert(listing.into_node(self.key(), ()));
        }
        // INVARIANT: the pin's pages, in order, held on the Iovas for `peer`.
        let map = PeerMap {
            peer: peer.clone(),
            bus,
            addresses: addresses.clone(),
            uses: 1,
        };
        s.maps.insert(node.into_node(key, map));
        Ok(addresses)
    }

    /// Counts a use of `peer`'s mapping (by `key`) if there is one, returning its addresses
    /// (`None`: a mapping is to be made). -ENXIO unless the pin is valid.
    fn use_mapping(&self, key: usize) -> Result<Option<Arc<KVVec<u64>>>> {
        let mut s = self.state.lock();
        if s.phase != Phase::Valid {
            return Err(ENXIO);
        }
        Ok(s.maps.get_mut(&key).map(|m| {
            m.uses += 1;
            m.addresses.clone()
        }))
    }

    /// The GPU the pages are on, read from the table: -ENXIO unless the pin is valid.
    fn gpu(&self) -> Result<GpuUuid> {
        let access = Access::take(self, &mut self.state.lock(), &[Phase::Valid])?;
        // SAFETY: the table is live while access is held, and passed check_table when the
        // pin was made.
        Ok(unsafe { table_gpu(access.table()) })
    }

    /// Whether the use [`Pinned::dma_map`] counted for `peer`, which returned `addresses`, still
    /// has its mapping: false once the pin was given back or revoked or the peer went
    /// ([`PinEnv::peer_gone`]), which unmapped it under the use.
    pub(crate) fn is_mapped(&self, peer: &pci::Device, addresses: &Arc<KVVec<u64>>) -> bool {
        let key = sys::pci_dev_ptr(peer) as usize;
        counted(&mut self.state.lock(), key, addresses).is_some()
    }

    /// Ends a use that [`Pinned::dma_map`] counted for `peer`, which returned `addresses`. The
    /// last one gives the mapping back unless `keep`, which keeps it until the pin goes.
    /// Nothing is left to do once the pin is given back or revoked, or the peer went
    /// ([`PinEnv::peer_gone`]): the mapping went with it (a mapping made for the peer since is
    /// another, with other addresses, which this use did not count).
    pub(crate) fn dma_unuse(&self, peer: &pci::Device, addresses: &Arc<KVVec<u64>>, keep: bool) {
        let key = sys::pci_dev_ptr(peer) as usize;
        {
            let mut s = self.state.lock();
            let Some(m) = counted(&mut s, key, addresses) else {
                return;
            };
            // Not the last use, or the last of a mapping kept: no unmap.
            if m.uses > 1 || keep {
                m.uses -= 1;
                return;
            }
        }
        // The last use, which gives the mapping back, under the list's lock. Counted down
        // there, where it is checked again: uses may have come or the mapping gone meanwhile.
        self.env.give_back(
            self,
            |s| {
                let m = counted(s, key, addresses)?;
                m.uses -= 1;
                if m.uses > 0 {
                    return None;
                }
                s.maps.remove(&key)
            },
            |map| {
                if let Some(map) = map {
                    map.unmap(&self.env.iovas);
                }
            },
        );
    }

    /// Asks NVIDIA whether `peer` may reach the table, whose pages are on `gpu`:
    /// `dma_map_pages` makes the checks it makes for a mapping (the PCIe topology among them;
    /// its refusal is reported, [`Iovas::refused`]), and the mapping it returns is checked as
    /// any would be ([`Pinned::read_dma_map`]) and given back at once.
    fn probe(&self, gpu: GpuUuid, peer: &ARef<pci::Device>) -> Result {
        // Admitted before the phase is checked: should the callback free the table after
        // the check, no pin of ours gets its address until the call below has returned, so
        // the call cannot map another pin's table (crate::gate).
        let pass = self.env.gate.enter(Side::Use);
        let mapper = self.begin_dma_map()?;
        let made = mapper.map_pages(peer);
        drop(pass);
        let map = match made {
            Ok(map) => map,
            Err(e) => {
                let mut s = self.state.lock();
                mapper.finish(&mut s);
                // Freed under the call: report it as every later access does.
                if s.phase == Phase::Revoked {
                    return Err(ENXIO);
                }
                drop(s);
                if e == sys::eopnotsupp() {
                    self.env.iovas.refused(gpu, peer);
                }
                return Err(e);
            }
        };
        let read = self.read_dma_map(map);
        self.end_probe(mapper, peer, map, read)
    }

    /// Counts a mapper: -ENXIO unless the pin is valid.
    fn begin_dma_map(&self) -> Result<Mapper<'_>> {
        let mut s = self.state.lock();
        if s.phase != Phase::Valid {
            return Err(ENXIO);
        }
        let table = s.table.ok_or(ENXIO)?;
        s.mappers = s.mappers.checked_add(1).ok_or(EBUSY)?;
        // INVARIANT: counted with the phase Valid and the state's table.
        Ok(Mapper {
            pinned: self,
            table,
        })
    }

    /// Checks the mapping NVIDIA just made and copies its DMA addresses, holding access:
    /// size first, allocate, then copy.
    fn read_dma_map(&self, map: NonNull<bindings::nvidia_p2p_dma_mapping>) -> Result<KVVec<u64>> {
        let valid = [Phase::Valid];
        let n = {
            let _access = Access::take(self, &mut self.state.lock(), &valid)?;
            // SAFETY: with access held and the phase Valid, the callback has not returned, so
            // the mapping NVIDIA just made is alive.
            check_dma_mapping(unsafe { map.as_ref() }, &self.range)?
        };
        let mut addresses = KVVec::with_capacity(n, GFP_KERNEL)?;
        let _access = Access::take(self, &mut self.state.lock(), &valid)?;
        // SAFETY: with access held and the phase Valid, the callback has not returned, so the
        // mapping is alive; it passed check_dma_mapping, which gave `n`.
        unsafe { copy_dma_addresses(map.as_ref(), n, &mut addresses) }?;
        Ok(addresses)
    }

    /// Gives the probe's mapping back, and answers what [`Pinned::read_dma_map`] found. Once
    /// revoked, NVIDIA frees the mapping with the table.
    fn end_probe(
        &self,
        mapper: Mapper<'_>,
        peer: &ARef<pci::Device>,
        map: NonNull<bindings::nvidia_p2p_dma_mapping>,
        read: Result<KVVec<u64>>,
    ) -> Result {
        let mut s = self.state.lock();
        if s.phase == Phase::Revoked {
            mapper.finish(&mut s);
            return Err(ENXIO);
        }
        // A use of the table that a callback waits for, as an unpin's waits are.
        let access = mapper.into_access(&mut s);
        drop(s);
        // SAFETY: the mapping is ours and nobody else's; access is held, so the table and the
        // mapping are alive.
        unsafe { raw_dma_unmap(peer, access.table.0.as_ptr(), map.as_ptr()) };
        drop(access);
        read.map(|_| ())
    }

    /// Whether the current task may give this pin back: a callback pin only from the process
    /// that pinned it (nv-p2p finds the memory by `current->tgid`, and put_pages from another
    /// process releases nothing).
    pub(crate) fn may_unpin_here(&self) -> bool {
        self.kind == PinKind::Persistent
            || (!sys::current_is_kthread() && *current!().group_leader() == *self.owner)
    }

    /// The pin's key in [`PinEnv::mapped`]: its address, which stays its own while it lives
    /// (a pin is pinned in memory).
    fn key(&self) -> usize {
        core::ptr::from_ref(self) as usize
    }

    /// Gives the table back: unmaps DMA mappings and calls put_pages.
    ///
    /// A callback pin that cannot be put from here ([`Pinned::may_unpin_here`]) stays pinned
    /// until NVIDIA calls back: the callback then frees it ([`Unpinned::LeftForCallback`]).
    pub(crate) fn unpin<T: PinOwner>(owner: &Arc<T>) -> Unpinned {
        let this = owner.pinned();
        if let Some(done) = Self::settled(this.phase()) {
            return done;
        }
        if !this.may_unpin_here() {
            return Unpinned::LeftForCallback;
        }
        // A callback pin is admitted before its phase is checked: should the callback free
        // the table after the check, no pin of ours gets its address until our put_pages has
        // returned, so that put_pages cannot release another pin (crate::gate). A persistent
        // pin is never called back.
        let pass = (this.kind == PinKind::Callback).then(|| this.env.gate.enter(Side::Use));
        let release = match this.begin_release() {
            Ok(release) => release,
            Err(done) => return done,
        };
        let table = release.unmap_all(this);
        let ret = this.put_table(table);
        drop(pass);
        Self::finish_release(owner, ret)
    }

    /// What [`Pinned::unpin`] answers at once in `phase`, or `None` for a pin to give back.
    fn settled(phase: Phase) -> Option<Unpinned> {
        match phase {
            Phase::Revoked => Some(Unpinned::Revoked),
            Phase::New | Phase::Released | Phase::Releasing => Some(Unpinned::Released),
            Phase::Pinning | Phase::Valid => None,
        }
    }

    /// `Valid` (or `Pinning`) to `Releasing`: takes the DMA mappings out, with access held
    /// for their unmaps. What `unpin` answers instead for a pin in another phase.
    fn begin_release(&self) -> core::result::Result<Release<'_>, Unpinned> {
        let mut s = self.state.lock();
        if let Some(done) = Self::settled(s.phase) {
            return Err(done);
        }
        let access = Access::take(self, &mut s, &[Phase::Pinning, Phase::Valid])
            .map_err(|_| Unpinned::Released)?;
        s.phase = Phase::Releasing;
        // No mapping is added from here on (`dma_map` adds only while `Valid`).
        Ok(Release { access })
    }

    /// Calls put_pages for `table`, the table a [`Release`] of this pin ended with.
    fn put_table(&self, table: Table) -> c_int {
        match self.kind {
            // SAFETY: we are the pinning process (may_unpin_here) and own the table; should
            // the callback have freed it meanwhile, the gate keeps its address from naming
            // another pin of ours, and NVIDIA finds nothing under the key.
            PinKind::Callback => unsafe {
                raw_put_pages(self.tokens(), self.range.start(), table.0.as_ptr())
            },
            // SAFETY: the table came from get_pages_persistent for this range, and we moved
            // the phase to Releasing: nobody else gives it back, so this is once.
            PinKind::Persistent => unsafe {
                raw_put_pages_persistent(self.range.start(), table.0.as_ptr())
            },
        }
    }

    /// `Releasing` to `Released` after put_pages answered `ret`, and the callback's
    /// reference given back; `Revoked` when the callback won the race.
    fn finish_release<T: PinOwner>(owner: &Arc<T>, ret: c_int) -> Unpinned {
        let this = owner.pinned();
        let mut s = this.state.lock();
        if s.phase == Phase::Revoked {
            // The callback won the race and consumed its reference.
            return Unpinned::Revoked;
        }
        if ret != 0 {
            // Unknown state: leave the callback's reference for a callback that may come.
            pr_err!(
                "nv-p2p put_pages({:#x}) failed: {}\n",
                this.range.start(),
                ret
            );
            return Unpinned::LeftForCallback;
        }
        s.phase = Phase::Released;
        s.table = None;
        let module = core::mem::replace(&mut s.module, ModuleRef::none());
        drop(s);
        if this.kind == PinKind::Callback {
            // SAFETY: put_pages succeeded in the pinning process, so NVIDIA dropped the
            // callback and its reference to `owner` is ours to release (type invariant).
            drop(unsafe { Arc::from_raw(Arc::as_ptr(owner)) });
        }
        drop(module);
        Unpinned::Released
    }

    /// The free callback's work: withdraw access, wait for readers, tell the owner (peers
    /// and CPU mappings stop using the addresses), free the mappings and the table. Runs
    /// under NVIDIA's global lock.
    fn revoke<T: PinOwner>(owner: &T) {
        let this = owner.pinned();
        let readers = {
            let mut s = this.state.lock();
            s.phase = Phase::Revoked;
            // No access can be taken from here on; those held keep their own copy.
            s.table = None;
            // Nor is a mapping added (`dma_map` inserts only while `Valid`).
            s.users
        };
        // No reader is left once this returns, and none can come (the phase is Revoked): a
        // fault inserting a page-table entry ([`Pinned::with_bus_address`]) is done before
        // the owner zaps the CPU mappings, so none survives the zap. Where none held access
        // as the phase changed, none can hold it now.
        if readers > 0 {
            this.wait_for_users();
        }
        // Peers and CPU mappings stop using the addresses before the mappings and the table
        // go.
        owner.invalidate();
        this.free_revoked();
    }

    /// Waits for the readers of a revoked pin to leave.
    fn wait_for_users(&self) {
        // Readers hold access only to copy addresses or insert one page-table entry, without
        // waiting for anything that waits for NVIDIA's lock, so this wait is bounded. It
        // cannot be cut short (the table would be freed under a reader), and CondVar offers
        // timeouts only for interruptible waits: poll.
        let mut s = self.state.lock();
        let start = Instant::<Monotonic>::now();
        let mut warned = false;
        while s.users > 0 {
            drop(s);
            fsleep(Delta::from_micros(100));
            s = self.state.lock();
            if !warned && s.users > 0 && start.elapsed() > REVOKE_WAIT {
                warned = true;
                pr_warn!(
                    "revoking {:#x}+{:#x}: {} users (address readers, faults, unmaps) still active after {} ms\n",
                    self.range.start(),
                    self.range.len(),
                    s.users,
                    REVOKE_WAIT.as_millis()
                );
            }
        }
    }

    /// Gives back the DMA mappings and frees the table of a revoked pin whose readers left
    /// ([`Pinned::wait_for_users`]) and whose peers were told to stop ([`PinOwner::invalidate`]):
    /// no peer's mapping of its pages outlives the callback. gdrpeer keeps none of NVIDIA's
    /// DMA mappings (a probe's is given back, or freed by NVIDIA with the table), so there is
    /// none for `nvidia_p2p_free_dma_mapping`.
    fn free_revoked(&self) {
        // Nobody takes access once the phase is Revoked: `users` stays 0.
        self.env.give_back_all(self);
        // SAFETY: called from the free callback, NVIDIA calls only after it wrote
        // `table_out` (type invariant).
        unsafe { bindings::nvidia_p2p_free_page_table(*self.table_out.get()) };
    }
}

#[pinned_drop]
impl PinnedDrop for Pinned {
    fn drop(self: Pin<&mut Self>) {
        // A callback pin cannot get here with a table: NVIDIA holds a reference to its owner
        // until the callback, or a successful put_pages, which clears the table. A
        // persistent pin dropped without its put_pages keeps NVIDIA's pages pinned for good.
        // (pr_err, not warn_on!: the stock kernels' prepared headers lack the generated
        // assembly warn_on! includes.)
        let (pinned, listed) = {
            let s = self.state.lock();
            (s.table.is_some(), !s.maps.is_empty())
        };
        if listed {
            // Only a pin dropped with its table, reported below, can still have mappings.
            let mut pins = self.env.mapped.lock();
            pins.remove(&self.key());
        }
        if pinned {
            DROPPED_PINNED.add(1, Relaxed);
            pr_err!(
                "pin {:#x}+{:#x} dropped with its table still pinned\n",
                self.range.start(),
                self.range.len()
            );
        }
    }
}

impl Mapper<'_> {
    /// Calls `dma_map_pages` for `peer`: the mapping NVIDIA made, or its error.
    fn map_pages(
        &self,
        peer: &ARef<pci::Device>,
    ) -> Result<NonNull<bindings::nvidia_p2p_dma_mapping>> {
        let mut map = core::ptr::null_mut();
        // SAFETY: the table was live when this mapper was counted with the phase Valid
        // (`Table` invariant); a free since then is the one race the nv-p2p API leaves to its
        // clients (Documentation/dev/design.rst, "The DMA-mapping window"), and the gate keeps
        // the freed address from naming a table of ours meanwhile.
        nv_result(unsafe { raw_dma_map(peer, self.table.0.as_ptr(), &mut map) })?;
        NonNull::new(map).ok_or(EIO)
    }
}

/// `peer`'s mapping in `s` (by `key`) if it is the one whose addresses a use holds, not
/// another made since that use's went.
fn counted<'a>(
    s: &'a mut State,
    key: usize,
    addresses: &Arc<KVVec<u64>>,
) -> Option<&'a mut PeerMap> {
    s.maps
        .get_mut(&key)
        .filter(|m| Arc::ptr_eq(&m.addresses, addresses))
}

impl Release<'_> {
    /// Gives the DMA mappings back, then ends the access and waits for other users (a racing
    /// probe giving back the mapping NVIDIA made) and for mappers, so that put_pages finds no
    /// mapping live. The table to give back.
    fn unmap_all(self, pin: &Pinned) -> Table {
        pin.env.give_back_all(pin);
        self.access.end_and_wait()
    }
}

/// What [`Pinned::read_table`] read of a table.
struct TableRead {
    addresses: KVBox<[u64]>,
    cacheable: bool,
}

/// `v`, filled to its capacity, as a boxed slice: two words in a pin's state instead of a
/// vector's three. -EIO for an empty or partly filled `v`.
fn boxed_slice(v: KVVec<u64>) -> Result<KVBox<[u64]>> {
    if v.is_empty() || v.len() != v.capacity() {
        return Err(EIO);
    }
    let (ptr, len, _) = v.into_raw_parts();
    // SAFETY: `ptr` is the vector's allocation, made by `KVmalloc` for `len` elements (its
    // capacity), all initialized, and the vector gave it up: it is a valid `[u64]` of that
    // allocator, as `KBox::pin_slice` converts its own vector.
    Ok(unsafe { KVBox::from_raw(core::ptr::slice_from_raw_parts_mut(ptr, len)) })
}

/// What [`Pinned::unpin`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Unpinned {
    /// The table is given back (or was never pinned).
    Released,
    /// NVIDIA had revoked it already.
    Revoked,
    /// Pinned by another process: NVIDIA's callback will free it.
    LeftForCallback,
}

/// NVIDIA's free callback: `data` is the reference to the owner taken in [`Pinned::pin`].
///
/// # Safety
///
/// Only NVIDIA calls it, with the `data` given to get_pages, at most once, and never after
/// put_pages for that table succeeded.
unsafe extern "C" fn free_callback<T: PinOwner>(data: *mut c_void) {
    // SAFETY: `data` came from `Arc::into_raw` in `Pinned::pin`, and NVIDIA calls back at
    // most once and only while that reference is outstanding (Pinned invariant).
    let owner = unsafe { Arc::from_raw(data.cast::<T>()) };
    // The pin's reference on the module may go before this call returns: `T::revoked` hands
    // the owner on, and whoever drops it last (a context reaping it, on another CPU) puts the
    // reference with it. The call's own keeps the module loaded until then, so that an unload
    // cannot free the code this call still runs (but its return).
    let module = owner.pinned().state.lock().module.another();
    Pinned::revoke(&*owner);
    T::revoked(owner);
    drop(module);
}

#[kernel::prelude::kunit_tests(gdrpeer_pin)]
mod tests {
    use super::*;
    use crate::range::GPU_PAGE_SIZE;

    /// Drops a persistent pin of one GPU page that never called NVIDIA, holding a table in
    /// its state when `pinned` (as after a put_pages_persistent that failed): the drop check's
    /// reports it made.
    fn reports_at_drop(pinned: bool) -> Result<u64> {
        let own_env = KBox::pin_init(PinEnv::new(), GFP_KERNEL)?;
        // SAFETY: the pin below, the only user of this reference, is dropped before
        // `own_env`, and never enters the gate nor maps (get_pages, unpin and dma_map do, and
        // it calls none of them).
        let env: &'static PinEnv = unsafe { &*core::ptr::from_ref::<PinEnv>(&*own_env) };
        let range = GpuRange::new(0, GPU_PAGE_SIZE, u64::MAX)?;
        let pin = KBox::pin_init(
            Pinned::new(range, PinKind::Persistent, Tokens::default(), env),
            GFP_KERNEL,
        )?;
        if pinned {
            // INVARIANT: not a table NVIDIA wrote, and never read: the pin is dropped at once,
            // and its drop check only asks whether a table is held.
            pin.state.lock().table = Some(Table(NonNull::dangling()));
        }
        let before = DROPPED_PINNED.load(Relaxed);
        drop(pin);
        Ok(DROPPED_PINNED.load(Relaxed) - before)
    }

    #[test]
    fn a_pin_dropped_with_its_table_is_reported() -> Result {
        assert_eq!(reports_at_drop(true)?, 1);
        Ok(())
    }

    #[test]
    fn a_pin_dropped_without_a_table_is_not() -> Result {
        assert_eq!(reports_at_drop(false)?, 0);
        Ok(())
    }
}
