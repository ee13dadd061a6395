// SPDX-License-Identifier: GPL-2.0

//! Other processes: a forked child on the opener's file (EACCES), the last close in a forked
//! child or in a process that received the file over SCM_RIGHTS, a process killed with pins
//! and a DMA mapping, callbacks from nvsim's kernel thread after a process's exit, and rmmod
//! while the device is open.

use crate::helpers::{all_released, dev, edu, get_pages_fd, gstat, ok, pin_args, raw_pin, K64};
use crate::proc::{
    byte, fork, kill_and_wait, ready_and_wait, recv_fd, rmmod_gdrpeer, send_byte, send_fd,
    spawn_ready, unix_pair, wait,
};
use gdrpeer::PinFlags;
use nvsim::testing::{errno, stat, with_param, Test, TestResult};
use nvsim::{check, check_eq, Gpu};
use rustix::{fd::AsFd, io::Errno};

/// The opener's pins are its own: a forked child gets EACCES and changes nothing.
fn fork_child_gets_eacces() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(2 * K64).map_err(errno)?;
    let d = dev()?;
    let p = ok(d.pin(va, 2 * K64, PinFlags::empty()), "pin")?;
    let child = fork(|| {
        check_eq!(
            raw_pin(d.as_fd(), pin_args(va, K64)),
            Err(Errno::ACCESS),
            "child PIN"
        );
        check_eq!(
            get_pages_fd(d.as_fd(), p.handle, 2)?,
            Err(Errno::ACCESS),
            "child GET_PAGES"
        );
        check_eq!(
            d.unpin(p.handle).ok().is_none(),
            true,
            "child UNPIN refused"
        );
        ok(d.get_version(), "child GET_VERSION")?;
        Ok(())
    })?;
    wait(child)?;
    check_eq!(
        ok(d.stats(), "stats")?.handles,
        1,
        "handles after the child"
    );
    check_eq!(
        ok(d.get_pages(p.handle), "pages")?.len(),
        2,
        "pages after the child"
    );
    ok(d.unpin(p.handle), "unpin")
}

/// How the file reaches the process that closes it last.
#[derive(Clone, Copy)]
enum Handover {
    /// A forked child inherits it.
    Fork,
    /// An unrelated process receives it over a Unix socket.
    ScmRights,
}

fn fork_child_closes_last() -> TestResult {
    child_closes_last(Handover::Fork)
}

fn scm_rights_receiver_closes_last() -> TestResult {
    child_closes_last(Handover::ScmRights)
}

/// The pinning process closes its file first; the other process's close is the release, and
/// cannot give the pages back (NVIDIA knows them by the pinner's tgid): the regions wait for
/// NVIDIA's callback, the module stays loaded meanwhile, and nothing leaks.
fn child_closes_last(how: Handover) -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(4 * K64).map_err(errno)?;
    let (mine, theirs) = unix_pair()?;
    let (d, child) = match how {
        Handover::Fork => {
            let d = dev()?;
            let child = fork(|| {
                check_eq!(
                    raw_pin(d.as_fd(), pin_args(va, K64)),
                    Err(Errno::ACCESS),
                    "child PIN"
                );
                send_byte(theirs.as_fd())?;
                // Exits once the parent has closed: this close is the release.
                byte(theirs.as_fd())
            })?;
            (d, child)
        }
        Handover::ScmRights => {
            // Forked before the file exists: only the received copy reaches the child.
            let child = fork(|| {
                let fd = recv_fd(theirs.as_fd())?;
                check_eq!(
                    raw_pin(fd.as_fd(), pin_args(va, K64)),
                    Err(Errno::ACCESS),
                    "receiver PIN"
                );
                send_byte(theirs.as_fd())?;
                byte(theirs.as_fd())
            })?;
            (dev()?, child)
        }
    };
    let _held = ok(d.pin(va, 2 * K64, PinFlags::empty()), "pin")?;
    let cached = ok(d.pin(va + 2 * K64, 2 * K64, PinFlags::empty()), "pin")?;
    ok(d.unpin(cached.handle), "unpin")?;
    if let Handover::ScmRights = how {
        send_fd(mine.as_fd(), d.as_fd())?;
    }
    byte(mine.as_fd())?;
    drop(d);
    send_byte(mine.as_fd())?;
    wait(child)?;
    check_eq!(
        gstat("deferred_releases")?,
        2,
        "regions left for the callback"
    );
    check_eq!(stat("pins_live")?, 2, "nvsim pins");
    check_eq!(
        stat("put_pages_wrong_process")?,
        0,
        "put_pages from the wrong process"
    );
    check!(
        !rmmod_gdrpeer()?,
        "rmmod succeeded with pins NVIDIA can still call back"
    );
    // The memory goes: the callback frees both regions.
    gpu.free(va).map_err(errno)?;
    all_released()
}

/// A process with pins and a DMA mapping is killed: its files' release frees everything.
fn killed_process_leaves_nothing() -> TestResult {
    // Files close at exit in descriptor order, and which of NVIDIA's file and gdrpeer's goes
    // first is not fixed (nv-p2p-behaviour.md): the child opens them in either order.
    for mode in ["--pin-and-wait", "--pin-and-wait-gdrpeer-first"] {
        let (child, _) = spawn_ready(mode)?;
        check!(
            gstat("regions")? >= 3,
            "child's regions not pinned ({mode})"
        );
        check_eq!(
            gstat("dma_pages_mapped")?,
            2,
            format!("child's DMA-mapped pages, one region of two ({mode})")
        );
        kill_and_wait(child)?;
        all_released().map_err(|e| format!("after the child of {mode}: {e}"))?;
    }
    Ok(())
}

/// A process's NVIDIA file closed by its exit while another process holds its
/// `/dev/gdrpeer` file, with the close deferred to nvsim's kernel thread (nvsim's
/// `deferred_close`, as the driver defers a close to its own thread): the free callbacks
/// come from that thread and revoke both regions, the one DMA-mapped for edu (whose
/// mapping goes there) and the one cached; the holder's close then releases the rest.
fn exit_with_deferred_close_calls_back_from_a_kernel_thread() -> TestResult {
    let (mine, theirs) = unix_pair()?;
    let (deferred, callbacks) = (stat("deferred_closes")?, gstat("callbacks")?);
    let d = with_param("deferred_close", "100", || {
        let child = fork(|| {
            let gpu = Gpu::open().map_err(errno)?;
            let (va, _) = gpu.alloc(4 * K64).map_err(errno)?;
            let d = dev()?;
            let a = ok(d.pin(va, 2 * K64, PinFlags::empty()), "pin")?;
            ok(d.dma_map(a.handle, edu()?), "dma_map")?;
            let b = ok(d.pin(va + 2 * K64, 2 * K64, PinFlags::empty()), "pin")?;
            ok(d.unpin(b.handle), "unpin")?;
            send_fd(theirs.as_fd(), d.as_fd())?;
            // Exits when told: its NVIDIA file's close is deferred.
            byte(theirs.as_fd())
        })?;
        let d = recv_fd(mine.as_fd())?;
        send_byte(mine.as_fd())?;
        wait(child)?;
        Ok(d)
    })?;
    check_eq!(
        stat("deferred_closes")? - deferred,
        1,
        "closes of the child's NVIDIA file deferred to nvsim's kernel thread"
    );
    crate::helpers::eventually(10, "the kernel thread's callbacks", || {
        Ok(gstat("callbacks")? - callbacks == 2)
    })?;
    check_eq!(
        gstat("dma_pages_mapped")?,
        0,
        "DMA-mapped pages after the callbacks"
    );
    drop(d);
    all_released()
}

/// The child of `killed_process_leaves_nothing` (`--pin-and-wait`): pins, leaves one region
/// cached, maps one to the edu device, and waits to be killed.
pub fn pin_and_wait() -> TestResult {
    pin_and_wait_with(false)
}

/// The same with `/dev/gdrpeer` opened before nvsim's file (`--pin-and-wait-gdrpeer-first`):
/// the exit closes gdrpeer's file first, while the memory is still allocated.
pub fn pin_and_wait_gdrpeer_first() -> TestResult {
    pin_and_wait_with(true)
}

fn pin_and_wait_with(gdrpeer_first: bool) -> TestResult {
    let first = if gdrpeer_first { Some(dev()?) } else { None };
    let gpu = Gpu::open().map_err(errno)?;
    let d = match first {
        Some(d) => d,
        None => dev()?,
    };
    let (va, _) = gpu.alloc(8 * K64).map_err(errno)?;
    let a = ok(d.pin(va, 2 * K64, PinFlags::empty()), "pin")?;
    let b = ok(d.pin(va + 2 * K64, 2 * K64, PinFlags::empty()), "pin")?;
    ok(d.pin(va + 4 * K64, 4 * K64, PinFlags::empty()), "pin")?;
    ok(d.unpin(b.handle), "unpin")?;
    ok(d.dma_map(a.handle, edu()?), "dma_map")?;
    ready_and_wait()
}

fn rmmod_refused_while_in_use() -> TestResult {
    let d = dev()?;
    check!(!rmmod_gdrpeer()?, "rmmod succeeded with /dev/gdrpeer open");
    drop(d);
    Ok(())
}

/// This subject's tests, in the order they run.
pub const TESTS: &[Test] = &[
    ("gdrpeer-fork-child-gets-eacces", fork_child_gets_eacces),
    ("gdrpeer-fork-child-closes-last", fork_child_closes_last),
    (
        "gdrpeer-scm-rights-receiver-closes-last",
        scm_rights_receiver_closes_last,
    ),
    (
        "gdrpeer-killed-process-leaves-nothing",
        killed_process_leaves_nothing,
    ),
    (
        "gdrpeer-exit-with-deferred-close-calls-back-from-a-kernel-thread",
        exit_with_deferred_close_calls_back_from_a_kernel_thread,
    ),
    (
        "gdrpeer-rmmod-refused-while-in-use",
        rmmod_refused_while_in_use,
    ),
];
