// SPDX-License-Identifier: GPL-2.0

//! The pin state machine: [`Pinned`], its phases and locking, the [`PinOwner`] it reports
//! to, and NVIDIA's free callback. It is the same for both nv-p2p signature sets and calls
//! NVIDIA only through the one `crate::nv_p2p` selects (`sig`), and through the two free
//! functions both share.

use core::ptr::NonNull;
use kernel::{
    ffi::c_void,
    new_condvar, new_spinlock, pci,
    prelude::*,
    rbtree::{RBTree, RBTreeNodeReservation},
    sync::{aref::ARef, Arc, CondVar, SpinLock},
    task::Task,
    time::{delay::fsleep, Delta, Instant, Monotonic},
    types::Opaque,
};

use super::{
    bindings, nv_result,
    sig::{
        check_dma_mapping, check_table, copy_bus_addresses, copy_dma_addresses, raw_dma_map,
        raw_dma_unmap, raw_get_pages, raw_get_pages_persistent, raw_put_pages,
        raw_put_pages_persistent, table_cpu_cacheable,
    },
    Tokens,
};
use crate::{
    gate::{Gate, Side},
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

/// One peer's DMA mapping of a pinned table.
///
/// # Invariants
///
/// `map` was returned by `nvidia_p2p_dma_map_pages` for `peer` and the table of the [`Pinned`]
/// that holds this, passed [`check_dma_mapping`], and is unmapped or freed only by that
/// `Pinned`. `addresses` is a copy of its DMA addresses.
struct DmaMap {
    peer: ARef<pci::Device>,
    map: NonNull<bindings::nvidia_p2p_dma_mapping>,
    addresses: KVVec<u64>,
}

// SAFETY: the mapping is only handed back to NVIDIA, which allows that from any thread.
unsafe impl Send for DmaMap {}

/// The state of a pin, protected by [`Pinned::state`].
struct State {
    phase: Phase,
    /// Threads reading NVIDIA's table or mappings, or unmapping (which takes no NVIDIA lock);
    /// the callback waits for them.
    users: u32,
    /// Threads inside `dma_map_pages` (which takes NVIDIA's lock): an unpin waits for them
    /// before put_pages, the callback cannot.
    mappers: u32,
    /// Bus (BAR1) address of each 64 KiB page, copied from the table.
    addresses: KVVec<u64>,
    /// Whether the table says the CPU may cache the pages (coherent platforms).
    cpu_cacheable: bool,
    /// DMA mappings, by `struct pci_dev` address of the peer.
    maps: RBTree<usize, DmaMap>,
    /// Keeps gdrpeer loaded while NVIDIA can still call back into it.
    _module: Option<ModuleRef>,
}

/// GPU memory pinned through nv-p2p: owns an `nvidia_p2p_page_table` and gives it back exactly
/// once, by put_pages ([`Pinned::unpin`]) or by NVIDIA's free callback.
///
/// Modelled on the kernel's `Revocable`: readers get temporary access through `users`, the
/// free callback withdraws access and waits (bounded) for current readers, then frees the DMA
/// mappings and the table. Readers never block while they hold access, and the only nv-p2p
/// call made with access held is `dma_unmap_pages`, which takes no NVIDIA lock (the driver's
/// nv-p2p.c locks only the table's mapping list there), so the callback cannot wait for a
/// thread that waits for NVIDIA's lock.
///
/// # Invariants
///
/// - `table` is written only by NVIDIA inside `get_pages`; while `phase` is `Pinning`,
///   `Valid` or `Releasing` it points to the live table for `range`.
/// - For a [`PinKind::Callback`] pin in phase `Pinning`, `Valid` or `Releasing`, NVIDIA holds
///   one reference to the owner (the callback's `data`), consumed by the callback or by
///   `unpin` after a successful put_pages.
#[pin_data]
pub(crate) struct Pinned {
    range: GpuRange,
    kind: PinKind,
    /// The VA space get_pages and put_pages name (a callback pin's; persistent pins have none).
    tokens: Tokens,
    /// The group leader of the pinning process: only it may put a callback pin.
    owner: ARef<Task>,
    /// Keeps gdrpeer's pins off table addresses that a late call may still name.
    gate: &'static Gate,
    table: Opaque<*mut bindings::nvidia_p2p_page_table>,
    #[pin]
    state: SpinLock<State>,
    /// Signalled when a user of the table or a mapping call is done (`State::users` or
    /// `State::mappers` went down), for the releasing thread that waits for them.
    #[pin]
    done: CondVar,
}

// SAFETY: `table` is only dereferenced under the access protocol of the type invariants, and
// NVIDIA's tables may be used from any thread.
unsafe impl Send for Pinned {}
// SAFETY: a shared `Pinned` allows no unsynchronised mutation: all mutable state is behind the
// `state` spinlock, `table` is written only by NVIDIA inside get_pages (before any reader is
// admitted) and dereferenced only under the access protocol of the type invariants, and
// NVIDIA's tables may be used from any thread.
unsafe impl Sync for Pinned {}

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
        gate: &'static Gate,
    ) -> impl PinInit<Self> {
        let owner = ARef::from(current!().group_leader());
        pin_init!(Pinned {
            range,
            kind,
            tokens,
            owner,
            gate,
            table: Opaque::new(core::ptr::null_mut()),
            state <- new_spinlock!(
                State {
                    phase: Phase::New,
                    users: 0,
                    mappers: 0,
                    addresses: KVVec::new(),
                    cpu_cacheable: false,
                    maps: RBTree::new(),
                    _module: None,
                },
                "Pinned::state"
            ),
            done <- new_condvar!("Pinned::done"),
        })
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
        self.state.lock().cpu_cacheable
    }

    /// Pins the range: calls nv-p2p, checks the table and copies its addresses.
    ///
    /// Fails with nv-p2p's error, -EOPNOTSUPP for a table gdrpeer cannot read or a persistent
    /// pin the driver does not offer, or -ENXIO when the memory was freed (the callback ran)
    /// while pinning.
    pub(crate) fn pin<T: PinOwner>(owner: &Arc<T>, module: &'static ThisModule) -> Result {
        let this = owner.pinned();
        let module = ModuleRef::get(module)?;
        {
            let mut s = this.state.lock();
            if s.phase != Phase::New {
                return Err(EBUSY);
            }
            s.phase = Phase::Pinning;
        }
        // A table NVIDIA hands out now cannot sit at an address that a late put_pages or
        // dma_map_pages still names (crate::gate).
        let pass = this.gate.enter(Side::Pin);
        let ret = match this.kind {
            PinKind::Callback => {
                let data = Arc::into_raw(owner.clone()).cast_mut().cast::<c_void>();
                // SAFETY: the range is 64 KiB aligned (GpuRange invariant); `table` is ours
                // to write; `data` is a reference to `owner` that the callback consumes
                // (free_callback::<T>), or we take back below if nothing was pinned.
                let ret = unsafe {
                    raw_get_pages(
                        this.tokens,
                        this.range.start(),
                        this.range.len(),
                        this.table.get(),
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
            PinKind::Persistent if !this.tokens.are_default() => EINVAL.to_errno(),
            // SAFETY: the range is 64 KiB aligned (GpuRange invariant); `table` is ours to
            // write.
            PinKind::Persistent => unsafe {
                raw_get_pages_persistent(this.range.start(), this.range.len(), this.table.get())
            },
        };
        drop(pass);
        if let Err(e) = nv_result(ret) {
            this.state.lock().phase = Phase::New;
            return Err(e);
        }

        // Readers must not sleep while they hold access: size first, allocate, then copy.
        let read = this
            .read(|table| {
                check_table(table, &this.range)?;
                // SAFETY: the table is live while `read` runs us and passed check_table; the
                // pointer is NVIDIA's own, valid for the whole table (a 2.x table is longer
                // than the struct of a 1.x header).
                let cacheable = unsafe { table_cpu_cacheable(*this.table.get()) };
                Ok((table.entries as usize, cacheable))
            })
            .and_then(|(n, cacheable)| {
                let mut addresses = KVVec::with_capacity(n, GFP_KERNEL)?;
                this.read(|table| {
                    // SAFETY: the table is live while `read` runs us, passed check_table and
                    // has `n` entries.
                    unsafe { copy_bus_addresses(table, n, &mut addresses) }
                })?;
                Ok((addresses, cacheable))
            });
        let mut s = this.state.lock();
        match read {
            Ok((addresses, cacheable)) if s.phase == Phase::Pinning => {
                s.phase = Phase::Valid;
                s.addresses = addresses;
                s.cpu_cacheable = cacheable;
                if this.kind == PinKind::Callback {
                    s._module = Some(module);
                }
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

    /// Runs `f` on the table with access held, unless the table is gone (-ENXIO).
    ///
    /// `f` must not sleep nor take a lock, as for [`Pinned::with_access`].
    fn read<R>(&self, f: impl FnOnce(&bindings::nvidia_p2p_page_table) -> Result<R>) -> Result<R> {
        self.with_access(|| {
            // SAFETY: with access held and the phase not `Revoked`, the callback has not
            // returned, so the table NVIDIA wrote is alive (type invariant).
            let table = unsafe { &**self.table.get() };
            f(table)
        })
    }

    /// Runs `f` while the callback cannot complete: it waits for `users` to drop to zero.
    ///
    /// `f` must not sleep nor take a lock: the callback waits for it under NVIDIA's lock.
    fn with_access<R>(&self, f: impl FnOnce() -> Result<R>) -> Result<R> {
        {
            let mut s = self.state.lock();
            if !matches!(s.phase, Phase::Pinning | Phase::Valid) {
                return Err(ENXIO);
            }
            s.users += 1;
        }
        let r = f();
        self.end_use();
        r
    }

    /// Ends a use of the table taken with `State::users`, and wakes the releasing thread that
    /// may be waiting for the last one ([`Pinned::end_use_and_wait`]).
    fn end_use(&self) {
        self.state.lock().users -= 1;
        self.done.notify_all();
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
            None => &s.addresses,
            Some(peer) => {
                let key = sys::pci_dev_ptr(peer) as usize;
                &s.maps.get(&key).ok_or(ENOENT)?.addresses
            }
        };
        let want = all.get(first..first + out.capacity()).ok_or(EINVAL)?;
        // The capacity is reserved: this does not allocate under the spinlock.
        out.extend_from_slice(want, GFP_NOWAIT)?;
        Ok(())
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
        let address = {
            let mut s = self.state.lock();
            if s.phase != Phase::Valid {
                return Err(ENXIO);
            }
            let address = *s.addresses.get(page).ok_or(EINVAL)?;
            s.users += 1;
            address
        };
        let r = f(address);
        self.end_use();
        Ok(r)
    }

    /// Makes (once per peer) a DMA mapping of the whole pin for `peer`.
    ///
    /// Fails with -ENXIO once revoked or released, or with nv-p2p's error.
    pub(crate) fn dma_map(&self, peer: &ARef<pci::Device>) -> Result {
        let key = sys::pci_dev_ptr(peer) as usize;
        let mapped = |s: &State| match s.phase {
            Phase::Valid => Ok(s.maps.get(&key).is_some()),
            _ => Err(ENXIO),
        };
        if mapped(&self.state.lock())? {
            return Ok(());
        }
        let node = RBTreeNodeReservation::new(GFP_KERNEL)?;
        // Admitted before the phase is checked: should the callback free the table after
        // the check, no pin of ours gets its address until the call below has returned, so
        // the call cannot map another pin's table (crate::gate).
        let pass = self.gate.enter(Side::Use);
        {
            let mut s = self.state.lock();
            if mapped(&s)? {
                return Ok(());
            }
            // An unpin waits for us before put_pages (see `unpin`); a callback does not.
            s.mappers += 1;
        }
        let mut map = core::ptr::null_mut();
        // No access is held across the call: the callback may run meanwhile (it holds
        // NVIDIA's lock, so not during the call itself), and the phase is checked after.
        // SAFETY: the table is live while the phase is Valid (checked above); a free in the
        // window since then is the one race the nv-p2p API leaves to its clients
        // (Documentation/dev/design.rst, "The DMA-mapping window"), and the gate keeps the
        // freed address from naming a table of ours meanwhile.
        let made = nv_result(unsafe { raw_dma_map(peer, *self.table.get(), &mut map) })
            .and_then(|()| NonNull::new(map).ok_or(EIO));
        drop(pass);
        let map = match made {
            Ok(map) => map,
            Err(e) => {
                let mut s = self.state.lock();
                s.mappers -= 1;
                self.done.notify_all();
                // Freed under the call: report it as every later access does.
                return Err(if s.phase == Phase::Revoked { ENXIO } else { e });
            }
        };
        let read = self
            .with_access(|| {
                // SAFETY: with access held and the phase Valid, the callback has not returned,
                // so the mapping NVIDIA just made is alive.
                let m = unsafe { map.as_ref() };
                check_dma_mapping(m, &self.range)
            })
            .and_then(|n| {
                let mut addresses = KVVec::with_capacity(n, GFP_KERNEL)?;
                self.with_access(|| {
                    // SAFETY: with access held and the phase Valid, the callback has not
                    // returned, so the mapping is alive; it passed check_dma_mapping, which
                    // gave `n`.
                    unsafe { copy_dma_addresses(map.as_ref(), n, &mut addresses) }
                })?;
                Ok(addresses)
            });
        let mut s = self.state.lock();
        s.mappers -= 1;
        self.done.notify_all();
        match read {
            Ok(addresses) if s.phase == Phase::Valid && s.maps.get(&key).is_none() => {
                // INVARIANT: the mapping is checked and its addresses copied.
                let dma = DmaMap {
                    peer: peer.clone(),
                    map,
                    addresses,
                };
                s.maps.insert(node.into_node(key, dma));
                Ok(())
            }
            // Revoked since: NVIDIA frees the mapping with the table.
            _ if s.phase == Phase::Revoked => Err(ENXIO),
            read => {
                // Unreadable, a duplicate, or the pin is being released: give it back, as a
                // use of the table that a callback waits for (see `unpin`).
                s.users += 1;
                drop(s);
                // SAFETY: the mapping is ours and not in `maps`; the phase is not Revoked and
                // `users` keeps a callback from letting the table go until we are done.
                unsafe { raw_dma_unmap(peer, *self.table.get(), map.as_ptr()) };
                self.end_use();
                read.map(|_| ())
            }
        }
    }

    /// Whether the current task may give this pin back: a callback pin only from the process
    /// that pinned it (nv-p2p finds the memory by `current->tgid`, and put_pages from another
    /// process releases nothing).
    pub(crate) fn may_unpin_here(&self) -> bool {
        self.kind == PinKind::Persistent
            || (!sys::current_is_kthread() && *current!().group_leader() == *self.owner)
    }

    /// Gives the table back: unmaps DMA mappings and calls put_pages.
    ///
    /// A callback pin that cannot be put from here ([`Pinned::may_unpin_here`]) stays pinned
    /// until NVIDIA calls back: the callback then frees it ([`Unpinned::LeftForCallback`]).
    pub(crate) fn unpin<T: PinOwner>(owner: &Arc<T>) -> Unpinned {
        let this = owner.pinned();
        let settled = |phase| match phase {
            Phase::Revoked => Some(Unpinned::Revoked),
            Phase::New | Phase::Released | Phase::Releasing => Some(Unpinned::Released),
            Phase::Pinning | Phase::Valid => None,
        };
        if let Some(done) = settled(this.phase()) {
            return done;
        }
        if !this.may_unpin_here() {
            return Unpinned::LeftForCallback;
        }
        // A callback pin is admitted before its phase is checked: should the callback free
        // the table after the check, no pin of ours gets its address until our put_pages has
        // returned, so that put_pages cannot release another pin (crate::gate). A persistent
        // pin is never called back.
        let pass = (this.kind == PinKind::Callback).then(|| this.gate.enter(Side::Use));
        let maps = {
            let mut s = this.state.lock();
            if let Some(done) = settled(s.phase) {
                return done;
            }
            s.phase = Phase::Releasing;
            // The unmaps below count as a use of the table: a callback that comes meanwhile
            // waits for them before NVIDIA frees the table. dma_unmap_pages takes no NVIDIA
            // lock (only the mapping list's own), so that wait cannot deadlock.
            s.users += 1;
            core::mem::take(&mut s.maps)
        };
        // SAFETY: the phase was Valid and we moved it to Releasing: nobody else gives the
        // table back. The table stays alive until `users` drops: a callback waits for us.
        let table = unsafe { *this.table.get() };
        for (_, dma) in maps.iter() {
            // SAFETY: the table and its mappings stay alive while `users` is raised (a
            // callback waits for us), and the mappings were taken out of `maps`, so each is
            // unmapped once; it belongs to this table and `dma.peer`.
            let ret = unsafe { raw_dma_unmap(&dma.peer, table, dma.map.as_ptr()) };
            if ret != 0 {
                pr_warn!(
                    "nv-p2p dma_unmap_pages({:#x}): {}\n",
                    this.range.start(),
                    ret
                );
            }
        }
        drop(maps);
        // A racing DMA_MAP may be unmapping a mapping it made too late: let it finish, so
        // that put_pages finds no mapping live.
        this.end_use_and_wait();
        let ret = match this.kind {
            // SAFETY: we are the pinning process (may_unpin_here) and own the table; should
            // the callback have freed it meanwhile, the gate keeps its address from naming
            // another pin of ours, and NVIDIA finds nothing under the key.
            PinKind::Callback => unsafe { raw_put_pages(this.tokens, this.range.start(), table) },
            // SAFETY: the table came from get_pages_persistent for this range, and we moved
            // the phase from Valid to Releasing: nobody else gives it back, so this is once.
            PinKind::Persistent => unsafe { raw_put_pages_persistent(this.range.start(), table) },
        };
        drop(pass);
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
        let module = s._module.take();
        drop(s);
        if this.kind == PinKind::Callback {
            // SAFETY: put_pages succeeded in the pinning process, so NVIDIA dropped the
            // callback and its reference to `owner` is ours to release (type invariant).
            drop(unsafe { Arc::from_raw(Arc::as_ptr(owner)) });
        }
        drop(module);
        Unpinned::Released
    }

    /// Ends the releasing thread's use of the table, then waits for other users (readers
    /// copying addresses, a racing DMA_MAP unmapping) and for DMA_MAPs inside
    /// `dma_map_pages`, so that put_pages finds no mapping live. None of them waits for
    /// this thread.
    fn end_use_and_wait(&self) {
        let mut s = self.state.lock();
        s.users -= 1;
        while s.users > 0 || s.mappers > 0 {
            self.done.wait(&mut s);
        }
    }

    /// The free callback's work: withdraw access, wait for readers, tell the owner (peers
    /// and CPU mappings stop using the addresses), free the mappings and the table. Runs
    /// under NVIDIA's global lock.
    fn revoke<T: PinOwner>(owner: &T) {
        let this = owner.pinned();
        this.state.lock().phase = Phase::Revoked;
        // No reader is left once this returns, and none can come (the phase is Revoked): a
        // fault inserting a page-table entry ([`Pinned::with_bus_address`]) is done before
        // the owner zaps the CPU mappings, so none survives the zap.
        this.wait_for_users();
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

    /// Frees the DMA mappings and the table of a revoked pin whose readers left
    /// ([`Pinned::wait_for_users`]).
    fn free_revoked(&self) {
        let maps = {
            let mut s = self.state.lock();
            // Nobody takes access once the phase is Revoked: `users` stays 0.
            core::mem::take(&mut s.maps)
        };
        for (_, dma) in maps.iter() {
            // SAFETY: called from the free callback, as the function requires; the mapping
            // belongs to this table.
            unsafe { bindings::nvidia_p2p_free_dma_mapping(dma.map.as_ptr()) };
        }
        drop(maps);
        // SAFETY: called from the free callback; NVIDIA wrote the table before calling back.
        unsafe { bindings::nvidia_p2p_free_page_table(*self.table.get()) };
    }
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
    Pinned::revoke(&*owner);
    T::revoked(owner);
}
