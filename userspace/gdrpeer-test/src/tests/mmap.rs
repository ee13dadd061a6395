// SPDX-License-Identifier: GPL-2.0

//! CPU mappings of pinned GPU memory (mmap of `/dev/gdrpeer`): bytes written through a
//! mapping are the GPU's (read back through nvsim's own mapping of the BAR) and the reverse,
//! at any 4 KiB offset of an unaligned window, in several mappings at once; the errors
//! (past the window, MAP_PRIVATE, another process); the mapping's hold on its region (close
//! and eviction leave it working); and its end when the handle is unpinned or NVIDIA frees the
//! memory: zapped before the pages can go, SIGBUS after.

use crate::helpers::{
    dev, eventually, fails, mapping_round_trip, ok, pattern, small_region_limit, K64,
};
use crate::helpers::{pin_args, raw_mmap, raw_pin};
use crate::proc::{
    byte, dies_of_sigbus, fork, recv_fd, send_byte, send_fd, unix_pair, wait, wait_status,
};
use crate::uffd;
use gdrpeer::{uapi, PinFlags, PinState};
use nvsim::testing::{self as harness, debugfs, errno, Test, TestResult, SKIP};
use nvsim::{check, check_eq, Gpu};
use rustix::{
    fd::{AsFd, AsRawFd, BorrowedFd},
    io::Errno,
    mm::{mprotect, mremap, munmap, MapFlags, MprotectFlags, MremapFlags},
};

const K4: u64 = 4096;

/// Write through the mapping, read through nvsim; write through nvsim, read through the
/// mapping.
fn mmap_reads_and_writes_gpu_memory() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(2 * K64).map_err(errno)?;
    let d = dev()?;
    let p = ok(d.pin(va, 2 * K64, PinFlags::empty()), "pin")?;
    let m = ok(d.map(p.handle, 0, 2 * K64 as usize), "map")?;
    let data = pattern(1, 2 * K64 as usize);
    m.write(0, &data);
    check_eq!(
        gpu.read(va, data.len()).map_err(errno)?,
        data,
        "GPU memory after writes through the mapping"
    );
    let back = pattern(2, 2 * K64 as usize);
    gpu.write(va, &back).map_err(errno)?;
    let mut seen = vec![0; back.len()];
    m.read(0, &mut seen);
    check_eq!(seen, back, "the mapping after nvsim wrote");
    drop(m);
    ok(d.unpin(p.handle), "unpin")
}

/// A window that starts inside a GPU page, mapped from a 4 KiB offset: the mapping shows the
/// window's bytes from that offset (the window starts at `aligned_va`).
fn mmap_at_an_offset_of_an_unaligned_window() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(4 * K64).map_err(errno)?;
    let d = dev()?;
    // [va + 100, va + 100 + 2 * K64): three GPU pages.
    let p = ok(d.pin(va + 100, 2 * K64, PinFlags::empty()), "pin")?;
    check_eq!(
        (p.aligned_va, p.offset, p.page_count),
        (va, 100, 3),
        "window"
    );
    let off = K64 + 3 * K4;
    let len = (2 * K64 - 3 * K4) as usize;
    let m = ok(d.map(p.handle, off, len), "map at an offset")?;
    let data = pattern(3, len);
    gpu.write(va + off, &data).map_err(errno)?;
    let mut seen = vec![0; len];
    m.read(0, &mut seen);
    check_eq!(seen, data, "the mapping shows the window from the offset");
    let tail = pattern(4, K4 as usize);
    m.write(len - K4 as usize, &tail);
    check_eq!(
        gpu.read(va + 3 * K64 - K4, K4 as usize).map_err(errno)?,
        tail,
        "the window's last page written through the mapping"
    );
    drop(m);
    ok(d.unpin(p.handle), "unpin")
}

/// Two mappings of one handle show the same memory.
fn mmap_two_mappings_of_one_handle() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(2 * K64).map_err(errno)?;
    let d = dev()?;
    let p = ok(d.pin(va, 2 * K64, PinFlags::empty()), "pin")?;
    let whole = ok(d.map(p.handle, 0, 2 * K64 as usize), "map the window")?;
    let part = ok(d.map(p.handle, K64, K64 as usize), "map its second page")?;
    let data = pattern(5, K64 as usize);
    part.write(0, &data);
    let mut seen = vec![0; data.len()];
    whole.read(K64 as usize, &mut seen);
    check_eq!(seen, data, "the second page through the other mapping");
    check_eq!(
        gpu.read(va + K64, data.len()).map_err(errno)?,
        data,
        "the second page in GPU memory"
    );
    drop(part);
    // The other mapping still works once one is gone.
    whole.write(0, &data);
    check_eq!(
        gpu.read(va, data.len()).map_err(errno)?,
        data,
        "the first page"
    );
    drop(whole);
    ok(d.unpin(p.handle), "unpin")
}

/// Mappings that leave the window, of unknown handles or unaligned offsets fail; so does a
/// mapping of memory that was freed.
fn mmap_past_the_window_is_einval() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, id) = gpu.alloc(2 * K64).map_err(errno)?;
    let d = dev()?;
    let p = ok(d.pin(va, 2 * K64, PinFlags::empty()), "pin")?;
    let w = 2 * K64 as usize;
    for (off, len, what) in [
        (0, w + K4 as usize, "one page too long"),
        (2 * K64, K4 as usize, "at the window's end"),
        (
            K64,
            K64 as usize + K4 as usize,
            "from an offset, past the end",
        ),
        (uapi::MMAP_OFFSET_MASK & !(K4 - 1), K4 as usize, "far past"),
        // Past what an offset can encode: the library must not wrap it into the window.
        (
            1 << uapi::MMAP_HANDLE_SHIFT,
            K4 as usize,
            "2^40, which the offset bits cannot hold",
        ),
    ] {
        check_eq!(fails(d.map(p.handle, off, len), what)?, Errno::INVAL, what);
    }
    check_eq!(
        fails(d.map(p.handle + 1, 0, K4 as usize), "unknown handle")?,
        Errno::INVAL,
        "unknown handle"
    );
    check_eq!(
        fails(d.map(p.handle, 100, K4 as usize), "unaligned offset")?,
        Errno::INVAL,
        "unaligned offset"
    );
    // The last page of the window is fine.
    drop(ok(d.map(p.handle, 2 * K64 - K4, K4 as usize), "last page")?);
    debugfs("free", &id.to_string())?;
    check_eq!(
        fails(d.map(p.handle, 0, K4 as usize), "map after the free")?,
        Errno::NXIO,
        "map after the free"
    );
    ok(d.unpin(p.handle), "unpin")
}

/// MAP_PRIVATE is refused: a private copy of device memory means nothing.
fn mmap_private_is_einval() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(K64).map_err(errno)?;
    let d = dev()?;
    let p = ok(d.pin(va, K64, PinFlags::empty()), "pin")?;
    let r = raw_mmap(
        d.as_fd(),
        uapi::mmap_offset(p.handle, 0),
        K4 as usize,
        MapFlags::PRIVATE,
    );
    if let Ok(ptr) = r {
        // SAFETY: the mapping just made.
        let _ = unsafe { munmap(ptr.cast(), K4 as usize) };
    }
    check_eq!(r.err(), Some(Errno::INVAL), "MAP_PRIVATE");
    ok(d.unpin(p.handle), "unpin")
}

/// A file opened read-only maps `MAP_SHARED` with `PROT_READ`: mmap(2) leaves `VM_SHARED` out
/// of such a mapping (only `VM_MAYSHARE` says it is shared), and it reads the GPU's bytes.
fn mmap_shared_read_only_file_reads() -> TestResult {
    use rustix::fs::{open, Mode, OFlags};
    use rustix::mm::{mmap, ProtFlags};
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(K64).map_err(errno)?;
    gpu.fill(va, 0xa7, K64 as usize).map_err(errno)?;
    let fd = open(
        "/dev/gdrpeer",
        OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(errno)?;
    let handle = raw_pin(fd.as_fd(), pin_args(va, K64))
        .map_err(|e| format!("PIN on a read-only file: {e}"))?;
    // SAFETY: a new mapping at an address of the kernel's choice replaces nothing.
    let p = unsafe {
        mmap(
            std::ptr::null_mut(),
            K4 as usize,
            ProtFlags::READ,
            MapFlags::SHARED,
            fd.as_fd(),
            uapi::mmap_offset(handle, 0),
        )
    }
    .map_err(|e| format!("MAP_SHARED, PROT_READ of a read-only file: {e}"))?;
    // SAFETY: the mapping just made is readable for its 4 KiB.
    let byte = unsafe { std::ptr::read_volatile(p.cast::<u8>()) };
    // SAFETY: the mapping just made, unmapped once.
    unsafe { munmap(p, K4 as usize) }.map_err(errno)?;
    check_eq!(
        byte,
        0xa7,
        "first byte through the read-only file's mapping"
    );
    gpu.free(va).map_err(errno)
}

/// A forked child may not map the opener's file (EACCES), and does not inherit its mappings
/// (VM_DONTCOPY: touching the address faults with SIGSEGV).
fn mmap_fork_child_gets_eacces_and_no_mapping() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(K64).map_err(errno)?;
    let d = dev()?;
    let p = ok(d.pin(va, K64, PinFlags::empty()), "pin")?;
    let m = ok(d.map(p.handle, 0, K64 as usize), "map")?;
    m.write(0, &[7]);
    let child = fork(|| {
        check_eq!(
            fails(d.map(p.handle, 0, K4 as usize), "child mmap")?,
            Errno::ACCESS,
            "child mmap"
        );
        Ok(())
    })?;
    wait(child)?;
    let ptr = m.as_ptr();
    let child = fork(|| {
        // SAFETY: the address is not mapped in the child (VM_DONTCOPY): this faults.
        let _ = unsafe { ptr.read_volatile() };
        Err("the child read the parent's mapping".to_string())
    })?;
    check_eq!(
        wait_status(child)?,
        Err(libc::SIGSEGV),
        "a child touching the parent's mapping"
    );
    let mut seen = [0];
    m.read(0, &mut seen);
    check_eq!(seen, [7], "the parent's mapping after the children");
    drop(m);
    ok(d.unpin(p.handle), "unpin")
}

/// A child that maps memory, touches it (so that page-table entries exist), has it freed
/// (the free callback) and touches it again: it must die of SIGBUS, having written nothing
/// into the freed memory (nvsim's `freed_page_writes`, checked after every test).
fn mmap_access_after_free_is_sigbus() -> TestResult {
    dies_of_sigbus("the child touching freed memory", || {
        let gpu = Gpu::open().map_err(errno)?;
        let (va, id) = gpu.alloc(2 * K64).map_err(errno)?;
        let d = dev()?;
        let p = ok(d.pin(va, 2 * K64, PinFlags::empty()), "pin")?;
        let m = ok(d.map(p.handle, 0, 2 * K64 as usize), "map")?;
        let data = pattern(6, 2 * K64 as usize);
        m.write(0, &data);
        check_eq!(
            gpu.read(va, data.len()).map_err(errno)?,
            data,
            "GPU memory before the free"
        );
        debugfs("free", &id.to_string())?;
        check_eq!(
            ok(d.info(p.handle), "info")?.state,
            PinState::Revoked,
            "state after the free"
        );
        // Every page was touched, so only the zap keeps this from reaching freed memory.
        m.write(K64 as usize + 8, &[0x55]);
        Err("wrote through the mapping after the free".to_string())
    })
}

/// Two buffers, each pinned and mapped; NVIDIA frees one: the other's mapping keeps reading and
/// writing GPU memory, and the freed one's, touched again, kills the child with SIGBUS having
/// written nothing into the freed pages (nvsim's `freed_page_writes`, checked here and after
/// every test).
fn mmap_two_mappings_one_freed_the_other_keeps_working() -> TestResult {
    let writes = harness::freed_page_writes()?;
    dies_of_sigbus("the child touching the freed buffer's mapping", || {
        let gpu = Gpu::open().map_err(errno)?;
        let (freed, id) = gpu.alloc(2 * K64).map_err(errno)?;
        let (kept, _) = gpu.alloc(2 * K64).map_err(errno)?;
        let d = dev()?;
        let pf = ok(d.pin(freed, 2 * K64, PinFlags::empty()), "pin")?;
        let pk = ok(d.pin(kept, 2 * K64, PinFlags::empty()), "pin")?;
        let mf = ok(d.map(pf.handle, 0, 2 * K64 as usize), "map")?;
        let mk = ok(d.map(pk.handle, 0, 2 * K64 as usize), "map")?;
        mf.write(0, &pattern(17, 2 * K64 as usize));
        mk.write(0, &pattern(18, 2 * K64 as usize));
        debugfs("free", &id.to_string())?;
        check_eq!(
            ok(d.info(pk.handle), "info")?.state,
            PinState::Valid,
            "the other handle after the free"
        );
        mapping_round_trip(&mk, &gpu, kept, 2 * K64 as usize, 19, "after the free")?;
        mf.write(K64 as usize + 8, &[0x55]);
        Err("wrote through the freed buffer's mapping".to_string())
    })?;
    check_eq!(
        harness::freed_page_writes()?,
        writes,
        "writes into freed pages"
    );
    Ok(())
}

/// The mapping keeps the file: close() of the descriptor leaves it working, and the context
/// goes with the munmap.
fn mmap_outlives_close() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(K64).map_err(errno)?;
    let d = dev()?;
    let p = ok(d.pin(va, K64, PinFlags::empty()), "pin")?;
    let m = ok(d.map(p.handle, 0, K64 as usize), "map")?;
    drop(d);
    let data = pattern(7, K64 as usize);
    m.write(0, &data);
    check_eq!(
        gpu.read(va, data.len()).map_err(errno)?,
        data,
        "GPU memory written after close"
    );
    drop(m);
    // The file's release unpins once the mapping is gone (checked after the test).
    Ok(())
}

/// UNPIN of a mapped handle withdraws the mapping: a child that maps, writes, unpins and
/// touches the mapping again dies of SIGBUS. The region stays cached after UNPIN, so only the
/// zap keeps that write from landing.
fn mmap_access_after_unpin_is_sigbus() -> TestResult {
    dies_of_sigbus("the child touching an unpinned mapping", || {
        let gpu = Gpu::open().map_err(errno)?;
        let (va, _) = gpu.alloc(K64).map_err(errno)?;
        let data = pattern(8, K64 as usize);
        let d = dev()?;
        let p = ok(d.pin(va, K64, PinFlags::empty()), "pin")?;
        let m = ok(d.map(p.handle, 0, K64 as usize), "map")?;
        m.write(0, &data);
        ok(d.unpin(p.handle), "unpin while mapped")?;
        let stats = ok(d.stats(), "stats")?;
        check_eq!(stats.handles, 0, "handles after unpin");
        check_eq!(stats.file.regions, 1, "regions after unpin (lazily cached)");
        check_eq!(
            gpu.read(va, data.len()).map_err(errno)?,
            data,
            "GPU memory after unpin"
        );
        m.write(8, &[0x55]);
        Err("wrote through the mapping after UNPIN".to_string())
    })
}

/// A PIN whose result cannot be written back is undone, as the caller cannot learn the
/// handle; but another thread of the process can guess it (a file's handles are numbered 1,
/// 2, ...) and map it before the write-back fails. The undo must zap that mapping, as UNPIN
/// does: the other thread's access afterwards faults (SIGBUS). The write-back is held in a
/// userfaultfd while the other thread maps handle 1 and reads GPU memory through it, then
/// fails (EFAULT). Before, the undo zapped nothing: the page-table entries stayed, to BAR
/// pages that the region's eviction gives back to NVIDIA for other pins.
fn mmap_pin_write_back_failure_zaps_mappings() -> TestResult {
    dies_of_sigbus(
        "a child that read through a mapping of a PIN undone",
        || {
            let gpu = Gpu::open().map_err(errno)?;
            let (va, _) = gpu.alloc(K64).map_err(errno)?;
            let data = pattern(62, K64 as usize);
            gpu.write(va, &data).map_err(errno)?;
            let d = dev()?;
            let arg = uapi::Pin {
                size: std::mem::size_of::<uapi::Pin>() as u32,
                va,
                len: K64,
                ..Default::default()
            };
            let mut mapped = None;
            let pinned = uffd::with_failed_write_back(
                &arg,
                |p| {
                    // SAFETY: `p` points to a `struct gdrpeer_pin`, which PIN reads and
                    // writes back.
                    let r = unsafe { libc::ioctl(d.as_fd().as_raw_fd(), uapi::IOCTL_PIN as _, p) };
                    if r < 0 {
                        return Err(Errno::from_io_error(&std::io::Error::last_os_error()).unwrap());
                    }
                    Ok(())
                },
                || {
                    let info = ok(d.info(1), "GET_INFO of handle 1 while its PIN returns")?;
                    check_eq!(info.aligned_va, va, "handle 1's address");
                    let p = raw_map(d.as_fd(), 1, 0, K64 as usize)
                        .map_err(|e| format!("mmap of handle 1: {e}"))?;
                    uffd::reads(p, &data)?;
                    mapped = Some(p);
                    Ok(())
                },
            )?;
            uffd::undone_mapping_faults("PIN", pinned, mapped)
        },
    )
}

/// A mapped region is in use: eviction over `cache_max_regions` leaves it pinned and mapped
/// (freeing its memory afterwards still revokes the handle).
fn mmap_survives_eviction() -> TestResult {
    let limit = small_region_limit(6)?;
    let gpu = Gpu::open().map_err(errno)?;
    let (va, id) = gpu.alloc(K64).map_err(errno)?;
    let d = dev()?;
    let p = ok(d.pin(va, K64, PinFlags::empty()), "pin")?;
    let m = ok(d.map(p.handle, 0, K64 as usize), "map")?;
    m.write(0, &pattern(9, K64 as usize));
    for _ in 0..6 {
        let (other, _) = gpu.alloc(K64).map_err(errno)?;
        let o = ok(d.pin(other, K64, PinFlags::empty()), "pin another")?;
        ok(d.unpin(o.handle), "unpin another")?;
    }
    let s = ok(d.stats(), "stats")?;
    check!(
        s.file.evictions_limit > 6 - limit,
        "evictions: {} over a limit of {limit}",
        s.file.evictions_limit
    );
    check_eq!(
        ok(d.info(p.handle), "info")?.state,
        PinState::Valid,
        "the mapped handle"
    );
    mapping_round_trip(&m, &gpu, va, K64 as usize, 10, "after the evictions")?;
    // Still pinned: freeing the memory now calls the handle back.
    debugfs("free", &id.to_string())?;
    check_eq!(
        ok(d.info(p.handle), "info")?.state,
        PinState::Revoked,
        "the mapped handle once its memory was freed"
    );
    drop(m);
    ok(d.unpin(p.handle), "unpin")?;
    eventually(2, "all but the mapped one evicted", || {
        Ok(ok(d.stats(), "stats")?.file.regions <= limit)
    })
}

/// A raw shared mmap of `len` bytes of `handle`'s window from `off` on `fd`: the address,
/// or the errno (a mapping made is the caller's to unmap).
fn raw_map(fd: BorrowedFd<'_>, handle: u64, off: u64, len: usize) -> Result<*mut u8, Errno> {
    raw_mmap(fd, uapi::mmap_offset(handle, off), len, MapFlags::SHARED)
}

/// A child forked before the parent maps: its mmap of the inherited file is EACCES while the
/// parent's own mapping, made meanwhile, works; after the child is gone too.
fn mmap_fork_before_map() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(K64).map_err(errno)?;
    let d = dev()?;
    let p = ok(d.pin(va, K64, PinFlags::empty()), "pin")?;
    let (mine, theirs) = unix_pair()?;
    let child = fork(|| {
        // The parent maps first, then lets the child try.
        byte(theirs.as_fd())?;
        check_eq!(
            raw_map(d.as_fd(), p.handle, 0, K4 as usize).err(),
            Some(Errno::ACCESS),
            "child mmap"
        );
        check_eq!(
            fails(d.info(p.handle), "child GET_INFO")?,
            Errno::ACCESS,
            "child GET_INFO"
        );
        send_byte(theirs.as_fd())
    })?;
    let m = ok(d.map(p.handle, 0, K64 as usize), "parent map")?;
    send_byte(mine.as_fd())?;
    byte(mine.as_fd())?;
    wait(child)?;
    let data = pattern(12, K64 as usize);
    m.write(0, &data);
    check_eq!(
        gpu.read(va, data.len()).map_err(errno)?,
        data,
        "GPU memory written through the parent's mapping"
    );
    drop(m);
    ok(d.unpin(p.handle), "unpin")
}

/// A process that received the file over SCM_RIGHTS may not map it (EACCES), though the
/// opener's handle is valid and mapped.
fn mmap_scm_rights_receiver_gets_eacces() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(K64).map_err(errno)?;
    let (mine, theirs) = unix_pair()?;
    // Forked before the file exists: only the received copy reaches the child.
    let child = fork(|| {
        let fd = recv_fd(theirs.as_fd())?;
        let mut h = [0u8; 8];
        check_eq!(
            rustix::io::read(theirs.as_fd(), &mut h).map_err(errno)?,
            8,
            "handle"
        );
        let handle = u64::from_le_bytes(h);
        check_eq!(
            raw_map(fd.as_fd(), handle, 0, K4 as usize).err(),
            Some(Errno::ACCESS),
            "receiver mmap"
        );
        send_byte(theirs.as_fd())
    })?;
    let d = dev()?;
    let p = ok(d.pin(va, K64, PinFlags::empty()), "pin")?;
    let m = ok(d.map(p.handle, 0, K64 as usize), "map")?;
    send_fd(mine.as_fd(), d.as_fd())?;
    rustix::io::write(mine.as_fd(), &p.handle.to_le_bytes()).map_err(errno)?;
    byte(mine.as_fd())?;
    wait(child)?;
    m.write(0, &[0x5a]);
    check_eq!(
        gpu.read(va, 1).map_err(errno)?,
        vec![0x5a],
        "the opener's mapping"
    );
    drop(m);
    ok(d.unpin(p.handle), "unpin")
}

/// A mapping split in three by munmap of a page in its middle, and its last part by mprotect:
/// every piece still reaches its GPU page; pieces unmapped one by one, and UNPIN over the
/// last, leave nothing behind (checked after every test).
fn mmap_split_by_munmap_and_mprotect() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(K64).map_err(errno)?;
    let d = dev()?;
    let p = ok(d.pin(va, K64, PinFlags::empty()), "pin")?;
    let len = K64 as usize;
    let base = raw_map(d.as_fd(), p.handle, 0, len).map_err(errno)?;
    let pg = K4 as usize;
    // The mapping just made is this function's alone: it unmaps it, piece by piece, below.
    // SAFETY: a page inside the mapping.
    unsafe { munmap(base.add(4 * pg).cast(), pg) }.map_err(errno)?;
    // [0, 4 pages) and [5 pages, 16 pages) are left; make [12 pages, 16) read-only.
    // SAFETY: the last four pages of the mapping.
    unsafe { mprotect(base.add(12 * pg).cast(), 4 * pg, MprotectFlags::READ) }.map_err(errno)?;
    let pieces: [(usize, usize); 3] = [(0, 4 * pg), (5 * pg, 7 * pg), (12 * pg, 4 * pg)];
    let data = pattern(13, len);
    gpu.write(va, &data).map_err(errno)?;
    for (at, n) in pieces {
        let seen: Vec<u8> = (at..at + n)
            // SAFETY: a byte of a piece still mapped.
            .map(|i| unsafe { base.add(i).read_volatile() })
            .collect();
        check_eq!(seen, data[at..at + n].to_vec(), format!("piece at {at:#x}"));
    }
    // Make the read-only piece writable again, then write through every piece.
    // SAFETY: the last four pages of the mapping.
    unsafe {
        mprotect(
            base.add(12 * pg).cast(),
            4 * pg,
            MprotectFlags::READ | MprotectFlags::WRITE,
        )
    }
    .map_err(errno)?;
    let back = pattern(14, len);
    for (at, n) in pieces {
        for (i, b) in back.iter().enumerate().skip(at).take(n) {
            // SAFETY: a byte of a piece still mapped, writable.
            unsafe { base.add(i).write_volatile(*b) };
        }
    }
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    let now = gpu.read(va, len).map_err(errno)?;
    for (at, n) in pieces {
        check_eq!(
            now[at..at + n].to_vec(),
            back[at..at + n].to_vec(),
            format!("GPU memory under the piece at {at:#x}")
        );
    }
    check_eq!(
        now[4 * pg..5 * pg].to_vec(),
        data[4 * pg..5 * pg].to_vec(),
        "the unmapped page"
    );
    // Two pieces go by munmap, the last is withdrawn by UNPIN, then unmapped.
    for (at, n) in &pieces[..2] {
        // SAFETY: a piece still mapped, used no more.
        unsafe { munmap(base.add(*at).cast(), *n) }.map_err(errno)?;
    }
    ok(d.unpin(p.handle), "unpin with the last piece mapped")?;
    let (at, n) = pieces[2];
    // SAFETY: the last piece, withdrawn by UNPIN and not touched again.
    unsafe { munmap(base.add(at).cast(), n) }.map_err(errno)
}

/// mremap may not grow a mapping (VM_DONTEXPAND: EFAULT); the mapping keeps working.
fn mmap_mremap_grow_refused() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(K64).map_err(errno)?;
    let d = dev()?;
    let p = ok(d.pin(va, K64, PinFlags::empty()), "pin")?;
    let half = (K64 / 2) as usize;
    let base = raw_map(d.as_fd(), p.handle, 0, half).map_err(errno)?;
    // SAFETY: resizes the mapping just made; on success the new one is unmapped below.
    let grown = unsafe { mremap(base.cast(), half, 2 * half, MremapFlags::MAYMOVE) };
    let grown_at = grown.as_ref().ok().copied();
    let keep = grown_at.map_or(base, |g| g.cast());
    let r = grown.map(|_| ());
    let data = pattern(15, half);
    for (i, b) in data.iter().enumerate() {
        // SAFETY: inside the (first half of the) mapping.
        unsafe { keep.add(i).write_volatile(*b) };
    }
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    // SAFETY: the mapping made above, whatever mremap did.
    unsafe {
        munmap(
            keep.cast(),
            if grown_at.is_some() { 2 * half } else { half },
        )
    }
    .map_err(errno)?;
    check_eq!(r.err(), Some(Errno::FAULT), "mremap to twice the size");
    check_eq!(
        gpu.read(va, half).map_err(errno)?,
        data,
        "GPU memory written after the refused mremap"
    );
    ok(d.unpin(p.handle), "unpin")
}

/// A buffer smaller than a 4 KiB page, inside a GPU page: the window is that GPU page, the
/// buffer sits at `offset` inside it, and the page holding it maps from its 4 KiB offset.
fn mmap_sub_page_buffer() -> TestResult {
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(2 * K64).map_err(errno)?;
    let d = dev()?;
    let at = K64 + 5000;
    gpu.fill(va, 0xee, 2 * K64 as usize).map_err(errno)?;
    let p = ok(d.pin(va + at, 100, PinFlags::empty()), "pin")?;
    check_eq!(
        (p.aligned_va, p.offset, p.page_count),
        (va + K64, 5000, 1),
        "window of 100 bytes"
    );
    let page = p.offset & !(K4 - 1);
    let m = ok(d.map(p.handle, page, K4 as usize), "map the buffer's page")?;
    let data = pattern(16, 100);
    let inside = (p.offset - page) as usize;
    m.write(inside, &data);
    check_eq!(
        gpu.read(va + at, 100).map_err(errno)?,
        data,
        "the buffer written through the mapping"
    );
    check_eq!(
        gpu.read(va + at - 1, 1).map_err(errno)?,
        vec![0xee],
        "the byte before the buffer"
    );
    drop(m);
    ok(d.unpin(p.handle), "unpin")
}

/// x86's list of reserved memory types (PAT), absent where the kernel keeps none.
const PAT_MEMTYPES: &str = "/sys/kernel/debug/x86/pat_memtype_list";

/// A memory type over a page: its name, and whether its range covers the whole page.
type Memtype = (String, bool);

/// The memory types reserved over `[page, page + K64)`: each entry of [`PAT_MEMTYPES`]
/// (`PAT: [mem 0xSTART-0xEND] TYPE`, END exclusive) that overlaps it, with whether it covers
/// the whole page.
fn memtypes_over(list: &str, page: u64) -> Vec<Memtype> {
    list.lines()
        .filter_map(|l| {
            let (range, ty) = l.strip_prefix("PAT: [mem ")?.split_once("] ")?;
            let (start, end) = range.split_once('-')?;
            let start = u64::from_str_radix(start.trim_start_matches("0x"), 16).ok()?;
            let end = u64::from_str_radix(end.trim_start_matches("0x"), 16).ok()?;
            (start < page + K64 && end > page)
                .then(|| (ty.to_string(), start <= page && end >= page + K64))
        })
        .collect()
}

/// A write-combining mapping is write-combining: x86's PAT gives a page inserted at fault
/// the memory type reserved for its frame, and uncached-minus where none is, so the mapping
/// must reserve write-combining for its pages (as a mapping made at once does) and give it
/// back when it goes. nvsim, like NVIDIA's driver, reserves none for the BAR.
fn mmap_write_combining_reserved_for_its_pages() -> TestResult {
    let Ok(_) = std::fs::metadata(PAT_MEMTYPES) else {
        return Err(format!(
            "{SKIP}no {PAT_MEMTYPES}: the kernel keeps no memory types (no PAT)"
        ));
    };
    let gpu = Gpu::open().map_err(errno)?;
    let (va, _) = gpu.alloc(3 * K64).map_err(errno)?;
    let d = dev()?;
    let p = ok(d.pin(va, 3 * K64, PinFlags::empty()), "pin")?;
    let pages = ok(d.get_pages(p.handle), "GET_PAGES")?;
    // Each page's memory types, from one read of the list, must pass `fits`.
    let each_page = |fits: &dyn Fn(&[Memtype]) -> bool, when: &str| -> TestResult {
        let list = std::fs::read_to_string(PAT_MEMTYPES).map_err(|e| e.to_string())?;
        for &page in &pages {
            let types = memtypes_over(&list, page);
            check!(
                fits(&types),
                "page {page:#x} has memory types {types:?} {when}"
            );
        }
        Ok(())
    };
    each_page(&|types| types.is_empty(), "before any mapping")?;
    let m = ok(d.map(p.handle, 0, 3 * K64 as usize), "map")?;
    // Fault every page in.
    let data = pattern(9, 3 * K64 as usize);
    m.write(0, &data);
    each_page(
        &|types| {
            types
                .iter()
                .any(|(ty, whole)| ty == "write-combining" && *whole)
                && types.iter().all(|(ty, _)| ty == "write-combining")
        },
        "while a write-combining mapping lives",
    )?;
    check_eq!(
        gpu.read(va, data.len()).map_err(errno)?,
        data,
        "GPU memory after writes through the mapping"
    );
    drop(m);
    each_page(&|types| types.is_empty(), "after munmap")?;
    ok(d.unpin(p.handle), "unpin")
}

/// This subject's tests, in the order they run.
pub const TESTS: &[Test] = &[
    (
        "gdrpeer-mmap-reads-and-writes-gpu-memory",
        mmap_reads_and_writes_gpu_memory,
    ),
    (
        "gdrpeer-mmap-at-an-offset-of-an-unaligned-window",
        mmap_at_an_offset_of_an_unaligned_window,
    ),
    (
        "gdrpeer-mmap-two-mappings-of-one-handle",
        mmap_two_mappings_of_one_handle,
    ),
    (
        "gdrpeer-mmap-past-the-window-is-einval",
        mmap_past_the_window_is_einval,
    ),
    ("gdrpeer-mmap-private-is-einval", mmap_private_is_einval),
    (
        "gdrpeer-mmap-shared-read-only-file-reads",
        mmap_shared_read_only_file_reads,
    ),
    (
        "gdrpeer-mmap-fork-child-gets-eacces-and-no-mapping",
        mmap_fork_child_gets_eacces_and_no_mapping,
    ),
    (
        "gdrpeer-mmap-access-after-free-is-sigbus",
        mmap_access_after_free_is_sigbus,
    ),
    (
        "gdrpeer-mmap-two-mappings-one-freed-the-other-keeps-working",
        mmap_two_mappings_one_freed_the_other_keeps_working,
    ),
    ("gdrpeer-mmap-outlives-close", mmap_outlives_close),
    (
        "gdrpeer-mmap-access-after-unpin-is-sigbus",
        mmap_access_after_unpin_is_sigbus,
    ),
    ("gdrpeer-mmap-survives-eviction", mmap_survives_eviction),
    ("gdrpeer-mmap-fork-before-map", mmap_fork_before_map),
    (
        "gdrpeer-mmap-scm-rights-receiver-gets-eacces",
        mmap_scm_rights_receiver_gets_eacces,
    ),
    (
        "gdrpeer-mmap-split-by-munmap-and-mprotect",
        mmap_split_by_munmap_and_mprotect,
    ),
    ("gdrpeer-mmap-mremap-grow-refused", mmap_mremap_grow_refused),
    ("gdrpeer-mmap-sub-page-buffer", mmap_sub_page_buffer),
    (
        "gdrpeer-mmap-write-combining-reserved-for-its-pages",
        mmap_write_combining_reserved_for_its_pages,
    ),
    (
        "gdrpeer-mmap-pin-write-back-failure-zaps-mappings",
        mmap_pin_write_back_failure_zaps_mappings,
    ),
];
