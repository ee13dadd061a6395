// SPDX-License-Identifier: GPL-2.0

//! The few kernel services gdrpeer needs that the `kernel` crate does not wrap yet.
//!
//! Each one is a thin safe type over the C function; everything `unsafe` about them stays in
//! this file (the nv-p2p FFI has its own module, [`crate::nv_p2p`]).
//!
//! TODO: each goes when the kernel crate has what it waits for:
//! - [`OwnedQueue`]: an owned, destroyable workqueue (`kernel::workqueue` has only the
//!   system queues and a `Queue` reference to a C one);
//! - [`ModuleRef`]: `try_module_get`/`module_put` on a `ThisModule` (a pin NVIDIA can call
//!   back holds the module);
//! - [`current_is_kthread`]: `Task` flags (`PF_KTHREAD`);
//! - [`capable_sys_rawio`]: `capable()` with the capability constants;
//! - [`pci_device`], [`pci_on_bus`]: a lookup of a `pci::Device` by domain, bus and devfn;
//! - [`pci_dev_ptr`], [`pci_dev_device_ptr`]: public `as_raw()` on `pci::Device` and
//!   `device::Device` (both are private in 7.2);
//! - [`eopnotsupp`]: `EOPNOTSUPP` in `kernel::error::code`;
//! - [`path_exists`]: a path lookup (`kern_path`, whose header the bindings lack);
//! - [`kmalloc_size`]: what an allocation of a size really takes (`kmalloc_size_roundup`);
//! - [`InvalidateClass`]: a statically defined lockdep map (`lock_map_acquire`);
//! - [`PciGone`]: a bus notifier (`bus_register_notifier`).

use core::ptr::NonNull;
use kernel::{
    bindings, container_of, error::to_result, pci, prelude::*, sync::aref::ARef, task::Task,
    types::Opaque, workqueue::Queue,
};

bindgen_module! {
    /// The C helpers of src/helpers.c (PFN mappings for [`crate::vma`], DMA-only scatterlists
    /// for [`crate::dma_buf`], the lockdep map of [`InvalidateClass`]), generated from
    /// src/helpers.h.
    //
    // `improper_ctypes`: the kernel's structs arrive through `kernel::bindings`, whose own
    // declarations allow it for the same reason (empty structs of disabled config options).
    #[allow(improper_ctypes)]
    pub(crate) mod helpers = "helpers_generated.rs";
}

/// A workqueue of our own: dropping it drains and destroys it, so no work item of the module
/// can still be running once the module's memory is freed.
///
/// # Invariants
///
/// `0` is a workqueue from `alloc_workqueue` that is destroyed only by `drop`.
pub(crate) struct OwnedQueue(NonNull<bindings::workqueue_struct>);

impl OwnedQueue {
    /// Allocates an unbound workqueue named `name`.
    pub(crate) fn new(name: &'static CStr) -> Result<Self> {
        // SAFETY: `name` is a NUL-terminated string without format specifiers; the flags are
        // valid. `alloc_workqueue` is a macro over `alloc_workqueue_noprof`.
        let wq = unsafe {
            bindings::alloc_workqueue_noprof(
                name.as_char_ptr(),
                bindings::wq_flags_WQ_UNBOUND | bindings::wq_flags_WQ_MEM_RECLAIM,
                0,
            )
        };
        // INVARIANT: a non-NULL result is a fresh workqueue that only `drop` destroys.
        NonNull::new(wq).map(OwnedQueue).ok_or(ENOMEM)
    }

    /// The queue, for as long as it lives.
    pub(crate) fn queue(&self) -> &Queue {
        // SAFETY: the pointer is a live workqueue until `drop` (type invariant), and the
        // returned reference cannot outlive `self`.
        unsafe { Queue::from_raw(self.0.as_ptr()) }
    }
}

impl Drop for OwnedQueue {
    fn drop(&mut self) {
        // SAFETY: the workqueue is ours and still alive (type invariant); destroy_workqueue
        // waits for every queued and running work item first.
        unsafe { bindings::destroy_workqueue(self.0.as_ptr()) };
    }
}

// SAFETY: a workqueue may be used and destroyed from any thread.
unsafe impl Send for OwnedQueue {}
// SAFETY: queueing work is thread-safe.
unsafe impl Sync for OwnedQueue {}

/// A reference on this module: while one exists, `rmmod gdrpeer` fails with -EBUSY.
///
/// # Invariants
///
/// Holds one reference on `THIS_MODULE`, taken by `try_module_get`, or none when NULL
/// ([`ModuleRef::none`], or the module is built in): `module_put` ignores a NULL module.
pub(crate) struct ModuleRef(*mut bindings::module);

impl ModuleRef {
    /// No reference: a place for one to come, as small as one.
    pub(crate) const fn none() -> Self {
        // INVARIANT: NULL holds no reference.
        ModuleRef(core::ptr::null_mut())
    }

    /// Takes a reference on `module`; fails only while the module is being unloaded.
    pub(crate) fn get(module: &'static ThisModule) -> Result<Self> {
        let ptr = module.as_ptr();
        // SAFETY: `ptr` is this module (or NULL when built in, which try_module_get accepts).
        if unsafe { bindings::try_module_get(ptr) } {
            // INVARIANT: we hold the reference just taken.
            Ok(ModuleRef(ptr))
        } else {
            Err(ENODEV)
        }
    }

    /// Another reference on the module this one holds (none where it holds none):
    /// `__module_get`, which needs no check while a reference is held.
    pub(crate) fn another(&self) -> Self {
        // SAFETY: `self` holds a reference on the module (type invariant), so it is live and
        // not being unloaded; `__module_get` ignores NULL.
        unsafe { bindings::__module_get(self.0) };
        // INVARIANT: we hold the reference just taken.
        ModuleRef(self.0)
    }
}

impl Drop for ModuleRef {
    fn drop(&mut self) {
        // SAFETY: we hold one reference (type invariant) and give it back once, or the
        // pointer is NULL, which module_put ignores.
        unsafe { bindings::module_put(self.0) };
    }
}

// SAFETY: a module reference may be dropped from any thread.
unsafe impl Send for ModuleRef {}
// SAFETY: `ModuleRef` has no `&self` methods.
unsafe impl Sync for ModuleRef {}

/// Whether the current task is a kernel thread (workqueue, kthread): it has no process of its
/// own, so nv-p2p cannot find GPU memory by it.
pub(crate) fn current_is_kthread() -> bool {
    let task: *mut bindings::task_struct = Task::current_raw();
    // SAFETY: `current` is always a valid task, and `flags` of the current task is only
    // changed by the task itself.
    unsafe { (*task).flags & bindings::PF_KTHREAD != 0 }
}

/// Whether the current task has `CAP_SYS_RAWIO` (raw bus addresses and DMA mappings).
pub(crate) fn capable_sys_rawio() -> bool {
    // SAFETY: `capable` only reads the current task's credentials.
    unsafe { bindings::capable(bindings::CAP_SYS_RAWIO as c_int) }
}

/// The PCI device at `domain:bus:devfn`, with a reference, if there is one.
pub(crate) fn pci_device(domain: u32, bus: u8, devfn: u8) -> Option<ARef<pci::Device>> {
    let domain = c_int::try_from(domain).ok()?;
    // SAFETY: plain lookup; it returns a device with a reference taken, or NULL.
    let pdev = unsafe { bindings::pci_get_domain_bus_and_slot(domain, bus.into(), devfn.into()) };
    let pdev = NonNull::new(pdev)?;
    // SAFETY: `pci::Device` is `#[repr(transparent)]` over `struct pci_dev`, and the
    // reference returned by the lookup is handed to the `ARef`, which drops it with
    // pci_dev_put.
    Some(unsafe { ARef::from_raw(pdev.cast::<pci::Device>()) })
}

/// Whether `dev` is still on the PCI bus: the device found at its address. False from the
/// moment its removal takes it off the bus, before the bus notifier's
/// `BUS_NOTIFY_REMOVED_DEVICE` ([`PciGone`]); the reference the caller holds keeps its memory,
/// not its place. May sleep (it may drop the last reference of a device found in its place).
pub(crate) fn pci_on_bus(dev: &pci::Device) -> bool {
    // SAFETY: `dev` is a live `struct pci_dev`, whose `bus` stays valid while it lives; the
    // helper takes and drops its own reference on what it finds.
    unsafe { helpers::gdrpeer_pci_dev_on_bus(pci_dev_ptr(dev)) }
}

/// The `struct pci_dev` of `dev`, for nv-p2p's DMA functions.
pub(crate) fn pci_dev_ptr(dev: &pci::Device) -> *mut bindings::pci_dev {
    // `pci::Device::as_raw` is private; the type is `#[repr(transparent)]` over the C struct.
    core::ptr::from_ref(dev).cast_mut().cast()
}

/// The `struct device` of `dev` (`&pdev->dev`), for the DMA API and the Tegra nv-p2p DMA
/// functions.
pub(crate) fn pci_dev_device_ptr(dev: &pci::Device) -> *mut bindings::device {
    let dev: &kernel::device::Device = dev.as_ref();
    // `device::Device::as_raw` is private; the type is `#[repr(transparent)]` over the C struct.
    core::ptr::from_ref(dev).cast_mut().cast()
}

/// `-EOPNOTSUPP`, which the kernel crate does not name.
pub(crate) fn eopnotsupp() -> Error {
    Error::from_errno(-(bindings::EOPNOTSUPP as i32))
}

/// Whether `path` names a file: it opens with `O_PATH` (which opens no device: a device
/// node's driver is not called), or fails with another error than -ENOENT.
pub(crate) fn path_exists(path: &CStr) -> bool {
    // SAFETY: `path` is NUL-terminated; `O_PATH` looks the path up and opens nothing behind it.
    let file = unsafe { bindings::filp_open(path.as_char_ptr(), bindings::O_PATH as i32, 0) };
    match kernel::error::from_err_ptr(file) {
        Ok(file) => {
            // SAFETY: `filp_open` returned a file reference, which is ours to put.
            unsafe { bindings::fput(file) };
            true
        }
        Err(e) => e != ENOENT,
    }
}

/// The bytes an allocation of `size` bytes takes from the slab (its kmalloc bucket), or from the
/// page allocator above the largest bucket.
pub(crate) fn kmalloc_size(size: usize) -> usize {
    // SAFETY: `kmalloc_size_roundup` only computes, for any size.
    unsafe { bindings::kmalloc_size_roundup(size) }
}

/// The lockdep class that stands for NVIDIA's lock, which lockdep does not see on real
/// hardware (a map of src/helpers.c): held around what the free callback calls, touched
/// where a caller may wait for the callback.
pub(crate) struct InvalidateClass;

impl InvalidateClass {
    /// Acquires the class for `f`'s duration.
    pub(crate) fn hold<R>(f: impl FnOnce() -> R) -> R {
        // SAFETY: a plain C function without preconditions.
        unsafe { helpers::gdrpeer_invalidate_begin() };
        let r = f();
        // SAFETY: a plain C function without preconditions; it releases the map that
        // `gdrpeer_invalidate_begin` acquired above.
        unsafe { helpers::gdrpeer_invalidate_end() };
        r
    }

    /// Acquires and releases the class: the caller may wait for what holds it.
    pub(crate) fn might_wait() {
        // SAFETY: a plain C function without preconditions.
        unsafe { helpers::gdrpeer_invalidate_might_wait() };
    }
}

/// Calls `gone` with a PCI device's `struct pci_dev` address once the device's driver is
/// unbound from it, and again once the device is removed from the system (a device without a
/// driver has only the second): what a peer was lent by gdrpeer must be given back by then.
/// DMA-API debugging reports the mappings a device still has when its driver is unbound, and
/// the IOMMU drops a removed device's domain.
///
/// The notifier runs before every other one on the PCI bus (DMA-API debugging's and the
/// IOMMU's among them), with the device's lock held and the device alive.
///
/// # Invariants
///
/// `nb` is registered on the PCI bus, with [`PciGone::notify`] as its call, from the end of
/// [`PciGone::new`] until `drop`.
#[pin_data(PinnedDrop)]
pub(crate) struct PciGone {
    #[pin]
    nb: Opaque<bindings::notifier_block>,
    gone: fn(usize),
}

impl PciGone {
    /// Registers `gone` on the PCI bus.
    pub(crate) fn new(gone: fn(usize)) -> impl PinInit<Self, Error> {
        try_pin_init!(PciGone {
            nb: Opaque::new(bindings::notifier_block {
                notifier_call: Some(Self::notify),
                next: core::ptr::null_mut(),
                priority: c_int::MAX,
            }),
            gone,
        })
        .pin_chain(|this| {
            // SAFETY: `nb` is pinned with `this` and stays registered until `drop`, which
            // unregisters it (a failed registration leaves nothing to unregister, which
            // `drop` then attempts harmlessly: -ENOENT).
            to_result(unsafe {
                bindings::bus_register_notifier(&raw const bindings::pci_bus_type, this.nb.get())
            })
        })
    }

    /// The notifier's call: `data` is the device, `action` what happened to it.
    ///
    /// # Safety
    ///
    /// Only the PCI bus's notifier chain calls it, with the `nb` of a registered [`PciGone`]
    /// and a live PCI device's `struct device`.
    unsafe extern "C" fn notify(
        nb: *mut bindings::notifier_block,
        action: c_ulong,
        data: *mut c_void,
    ) -> c_int {
        let gone = [
            bindings::bus_notifier_event_BUS_NOTIFY_UNBOUND_DRIVER,
            bindings::bus_notifier_event_BUS_NOTIFY_REMOVED_DEVICE,
        ];
        if !u32::try_from(action).is_ok_and(|action| gone.contains(&action)) {
            return bindings::NOTIFY_DONE as c_int;
        }
        // SAFETY: `nb` is the `nb` field of a registered `PciGone` (the caller's contract),
        // alive while registered (type invariant).
        let this = unsafe { &*container_of!(Opaque::cast_from(nb).cast_mut(), PciGone, nb) };
        // SAFETY: on the PCI bus, `data` is the `dev` of a `struct pci_dev`; only its address
        // is computed.
        let pdev =
            unsafe { container_of!(data.cast::<bindings::device>(), bindings::pci_dev, dev) };
        (this.gone)(pdev as usize);
        bindings::NOTIFY_DONE as c_int
    }
}

#[pinned_drop]
impl PinnedDrop for PciGone {
    fn drop(self: Pin<&mut Self>) {
        // SAFETY: `nb` was registered on the PCI bus (type invariant); unregistering waits for
        // calls in progress, so none runs once this returns.
        unsafe {
            bindings::bus_unregister_notifier(&raw const bindings::pci_bus_type, self.nb.get())
        };
    }
}

// SAFETY: the notifier block is only touched by the notifier chain, under its own lock.
unsafe impl Send for PciGone {}
// SAFETY: `PciGone` has no `&self` methods; the chain calls `gone`, a plain function.
unsafe impl Sync for PciGone {}
