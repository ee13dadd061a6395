// SPDX-License-Identifier: GPL-2.0

//! Pinning: rounding to GPU pages and the offset, bad requests refused before NVIDIA is
//! called, the raw ABI's errors, GET_PAGES's room and CAP_SYS_RAWIO, persistent pins and the
//! page table versions gdrpeer reads.

use crate::doctables;
use crate::helpers::ErrnoOf;
use crate::helpers::{
    dev, fails, gdrpeer_idle, get_pages_into, module_held_for_the_callback, ok,
    p2pclient_addresses, param, pin_args, raw_pin, without_rawio, K64,
};
use gdrpeer::{uapi, PinFlags, PinState};
use nvsim::testing::{errno, stat, Test, TestResult, SKIP};
use nvsim::{check, check_eq, Gpu};
use rustix::{fd::AsFd, io::Errno, ioctl};

fn pin_rounds_to_gpu_pages() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(8 * K64).map_err(errno)?;
    let d = dev()?;
    let p = ok(d.pin(va + K64 + 100, 2 * K64, PinFlags::empty()), "pin")?;
    check_eq!(p.aligned_va, va + K64, "aligned va");
    check_eq!(p.offset, 100, "offset");
    check_eq!(p.page_count, 3, "pages of [va+64K+100, +128K)");
    check_eq!(p.page_size as u64, K64, "page size");
    let info = ok(d.info(p.handle), "info")?;
    check_eq!(info.state, PinState::Valid, "state");
    check_eq!(
        (info.region_va, info.region_len),
        (va + K64, 3 * K64),
        "region"
    );
    let pages = ok(d.get_pages(p.handle), "get_pages")?;
    check_eq!(
        pages,
        p2pclient_addresses(va + K64, 3 * K64)?,
        "bus addresses"
    );
    ok(d.unpin(p.handle), "unpin")
}

fn bad_requests_fail_before_nvidia() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(K64).map_err(errno)?;
    let d = dev()?;
    let calls = stat("get_pages_calls")?;
    let max = param("max_pin_bytes")?;
    for (what, va, len) in [
        ("zero length", va, 0),
        ("va + len overflows", u64::MAX - K64, 2 * K64),
        ("rounded end overflows", u64::MAX - 10, 5),
        ("longer than max_pin_bytes", va, max + 1),
    ] {
        check_eq!(
            fails(d.pin(va, len, PinFlags::empty()), what)?,
            Errno::INVAL,
            what
        );
    }
    check_eq!(
        stat("get_pages_calls")?,
        calls,
        "nv-p2p calls for bad requests"
    );
    for (what, r) in [
        ("unpin of an unknown handle", d.unpin(12345).map(|_| ())),
        ("info of an unknown handle", d.info(12345).map(|_| ())),
        ("pages of an unknown handle", d.get_pages(12345).map(|_| ())),
    ] {
        check_eq!(fails(r, what)?, Errno::INVAL, what);
    }
    // Not GPU memory: nvsim refuses, and the file is still usable.
    check_eq!(
        fails(d.pin(0x1000_0000, K64, PinFlags::empty()), "pin of host va")?,
        Errno::INVAL,
        "pin of host va"
    );
    let p = ok(d.pin(va, K64, PinFlags::empty()), "pin after errors")?;
    ok(d.unpin(p.handle), "unpin")?;
    check_eq!(
        fails(d.unpin(p.handle), "second unpin")?,
        Errno::INVAL,
        "second unpin"
    );
    Ok(())
}

/// Bad pointers, sizes, flags, padding and commands.
fn raw_abi_errors() -> TestResult {
    let d = dev()?;
    let fd = d.as_fd();
    // SAFETY: the pointer is deliberately bad; the module must fail with EFAULT, not use it.
    let r = unsafe {
        ioctl::ioctl(
            fd,
            ioctl::IntegerSetter::<{ uapi::IOCTL_PIN }>::new_usize(8),
        )
    };
    check_eq!(r, Err(Errno::FAULT), "PIN with a bad pointer");
    // SAFETY: as above.
    let r = unsafe {
        ioctl::ioctl(
            fd,
            ioctl::IntegerSetter::<{ uapi::IOCTL_GET_VERSION }>::new_usize(8),
        )
    };
    check_eq!(r, Err(Errno::FAULT), "GET_VERSION with a bad pointer");
    const UNKNOWN: ioctl::Opcode = ioctl::opcode::read_write::<uapi::Pin>(uapi::IOCTL_MAGIC, 99);
    let mut p = pin_args(0x1000_0000, K64);
    // SAFETY: the command is unknown to the module; the argument is a valid `uapi::Pin`.
    let r = unsafe { ioctl::ioctl(fd, ioctl::Updater::<UNKNOWN, uapi::Pin>::new(&mut p)) };
    check_eq!(r, Err(Errno::NOTTY), "unknown command");
    check_eq!(
        raw_pin(
            fd,
            uapi::Pin {
                size: 8,
                ..pin_args(0x1000_0000, K64)
            }
        ),
        Err(Errno::INVAL),
        "PIN with a wrong size"
    );
    check_eq!(
        raw_pin(
            fd,
            uapi::Pin {
                flags: 0x80,
                ..pin_args(0x1000_0000, K64)
            }
        ),
        Err(Errno::INVAL),
        "PIN with unknown flags"
    );
    let u = uapi::Unpin {
        size: size_of::<uapi::Unpin>() as u32,
        pad: 1,
        handle: 1,
    };
    // SAFETY: UNPIN reads one `uapi::Unpin`.
    let r = unsafe {
        ioctl::ioctl(
            fd,
            ioctl::Setter::<{ uapi::IOCTL_UNPIN }, uapi::Unpin>::new(u),
        )
    };
    check_eq!(r, Err(Errno::INVAL), "UNPIN with non-zero padding");
    // A bad address array: EFAULT, and the handle stays usable.
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(K64).map_err(errno)?;
    let h = raw_pin(fd, pin_args(va, K64)).map_err(errno)?;
    let mut g = uapi::GetPages {
        size: size_of::<uapi::GetPages>() as u32,
        count: 1,
        handle: h,
        addrs: 16,
    };
    // SAFETY: the array pointer is deliberately bad; the module must fail with EFAULT.
    let r = unsafe {
        ioctl::ioctl(
            fd,
            ioctl::Updater::<{ uapi::IOCTL_GET_PAGES }, uapi::GetPages>::new(&mut g),
        )
    };
    check_eq!(r, Err(Errno::FAULT), "GET_PAGES into a bad array");
    check_eq!(get_pages_into(&d, h, 1)?, Ok(1), "GET_PAGES after EFAULT");
    ok(d.unpin(h), "unpin")
}

fn get_pages_needs_room_and_rawio() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(4 * K64).map_err(errno)?;
    let d = dev()?;
    let p = ok(d.pin(va, 4 * K64, PinFlags::empty()), "pin")?;
    check_eq!(
        get_pages_into(&d, p.handle, 3)?,
        Err(Errno::NOSPC),
        "3 entries for 4 pages"
    );
    check_eq!(
        get_pages_into(&d, p.handle, 5)?,
        Ok(4),
        "5 entries for 4 pages"
    );
    check_eq!(
        without_rawio(&d, p.handle)?,
        (Errno::PERM, Errno::PERM),
        "GET_PAGES, DMA_MAP without CAP_SYS_RAWIO"
    );
    ok(d.unpin(p.handle), "unpin")
}

/// A persistent pin's refusal: a skip where nvsim was told to refuse persistent pins
/// (debugfs `refuse_persistent`), else a failure (nvsim offers them, and gdrpeer is built
/// with them).
fn persistent_refused(e: &gdrpeer::Error) -> TestResult {
    let refusing = std::fs::read_to_string("/sys/kernel/debug/nvsim/refuse_persistent")
        .is_ok_and(|v| v.trim() == "Y");
    match refusing && e.errno_of() == Some(Errno::OPNOTSUPP) {
        true => Err(format!("{SKIP}persistent pins refused by nvsim: {e}")),
        false => Err(format!("persistent pin: {e}")),
    }
}

fn persistent_pins() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(K64).map_err(errno)?;
    let d = dev()?;
    match d.pin(va, K64, PinFlags::PERSISTENT) {
        Err(e) => persistent_refused(&e),
        Ok(p) => {
            check_eq!(stat("persistent_pins_live")?, 1, "persistent pins");
            // A persistent pin is not a hit for a callback pin of the same range.
            let q = ok(d.pin(va, K64, PinFlags::empty()), "callback pin")?;
            check_eq!(ok(d.stats(), "stats")?.file.misses, 2, "misses");
            check!(
                ok(d.info(p.handle), "info")?.persistent,
                "info: not persistent"
            );
            ok(d.unpin(q.handle), "unpin")?;
            ok(d.unpin(p.handle), "unpin")
        }
    }
}

/// A persistent pin is never served from the cache: NVIDIA never calls it back, so a cached
/// one would outlive its memory's free and serve the next allocation at the same address with
/// the freed memory it keeps alive. After pin, unpin, free and a new allocation at the same
/// address, a persistent pin of that address must give the new allocation's bus addresses
/// (p2pclient's pin of it, the oracle) and its contents.
fn persistent_pin_after_a_free_pins_the_new_memory() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(K64).map_err(errno)?;
    let d = dev()?;
    let p = match d.pin(va, K64, PinFlags::PERSISTENT) {
        Err(e) => return persistent_refused(&e),
        Ok(p) => p,
    };
    ok(d.unpin(p.handle), "unpin")?;
    gpu.free(va).map_err(errno)?;
    let (again, _) = gpu.alloc(K64).map_err(errno)?;
    check_eq!(
        again,
        va,
        "the new allocation's address (the test needs it reused)"
    );
    gpu.fill(va, 0x5a, K64 as usize).map_err(errno)?;
    let q = ok(
        d.pin(va, K64, PinFlags::PERSISTENT),
        "persistent pin of the new allocation",
    )?;
    check_eq!(
        ok(d.get_pages(q.handle), "pages")?,
        p2pclient_addresses(va, K64)?,
        "bus addresses of the persistent pin of the new allocation"
    );
    let mut byte = [0u8];
    ok(d.map(q.handle, 0, K64 as usize), "map")?.read(0, &mut byte);
    check_eq!(byte[0], 0x5a, "first byte through the pin's mapping");
    ok(d.unpin(q.handle), "unpin")?;
    check_eq!(
        stat("persistent_pins_live")?,
        0,
        "persistent pins after both unpins"
    );
    gpu.free(va).map_err(errno)
}

/// Page tables of majors 1 and 2 are read; any other is given back and the pin refused
/// with the errno of row `table-version-major` of security.rst's table (run with nvsim's
/// `page_table_version` at 2.0, 1.2 and 3.0).
fn table_version_checked() -> TestResult {
    let version = stat("page_table_version")?;
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(2 * K64).map_err(errno)?;
    let d = dev()?;
    if matches!(version >> 16, 1 | 2) {
        let p = ok(d.pin(va, 2 * K64, PinFlags::empty()), "pin")?;
        check_eq!(
            ok(d.get_pages(p.handle), "pages")?,
            p2pclient_addresses(va, 2 * K64)?,
            "bus addresses"
        );
        ok(d.unpin(p.handle), "unpin")
    } else {
        // The errno is the one Documentation/user/security.rst gives the row.
        let want = doctables::row_errno(
            doctables::SECURITY_RST,
            doctables::NVIDIA_CHECKS,
            "table-version-major",
        )?;
        let what = format!("pin with a {version:#010x} table (row table-version-major)");
        check_eq!(
            fails(d.pin(va, 2 * K64, PinFlags::empty()), &what)?,
            want,
            what
        );
        check_eq!(stat("pins_live")?, 0, "pins after refusing the table");
        refused_table_left_to_the_callback(d, &gpu, va)
    }
}

/// A refused table whose put_pages fails stays NVIDIA's, with its callback into gdrpeer: the
/// module must stay loaded, with no file open, until the free calls back. The module
/// reference was taken only for a table read, so rmmod succeeded and the free called into
/// the unloaded module.
fn refused_table_left_to_the_callback(d: gdrpeer::Device, gpu: &Gpu, va: u64) -> TestResult {
    nvsim::testing::with_debugfs("fail_put_pages", "1 5", "0 0", || {
        fails(
            d.pin(va, 2 * K64, PinFlags::empty()),
            "pin of a refused table",
        )
    })?;
    check_eq!(stat("pins_live")?, 1, "pins NVIDIA still holds");
    module_held_for_the_callback(d, gpu, va)?;
    gdrpeer_idle()
}

/// This subject's tests, in the order they run.
pub const TESTS: &[Test] = &[
    ("gdrpeer-pin-rounds-to-gpu-pages", pin_rounds_to_gpu_pages),
    (
        "gdrpeer-bad-requests-fail-before-nvidia",
        bad_requests_fail_before_nvidia,
    ),
    ("gdrpeer-raw-abi-errors", raw_abi_errors),
    (
        "gdrpeer-get-pages-needs-room-and-rawio",
        get_pages_needs_room_and_rawio,
    ),
    ("gdrpeer-persistent-pins", persistent_pins),
    (
        "gdrpeer-persistent-pin-after-a-free-pins-the-new-memory",
        persistent_pin_after_a_free_pins_the_new_memory,
    ),
    ("gdrpeer-table-version-checked", table_version_checked),
];
