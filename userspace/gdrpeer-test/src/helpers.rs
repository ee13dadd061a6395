// SPDX-License-Identifier: GPL-2.0

//! The helpers every test module shares: gdrpeer's device and its errors, gdrpeer's and
//! nvsim's counters and the leak checks run after each test, the edu device as DMA peer,
//! p2pclient's view of the same memory, and gdrpeer's ioctls issued raw.

use gdrpeer::{uapi, Device, PciAddress};
use nvsim::testing::{self as harness, errno, TestResult};
use nvsim::{check, check_eq};
use rustix::{
    fd::{AsFd, BorrowedFd},
    io::Errno,
    ioctl,
    thread::{CapabilitySet, CapabilitySets},
};
use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

/// 64 KiB: NVIDIA's GPU page.
pub const K64: u64 = 1 << 16;

pub fn dev() -> Result<Device, String> {
    Device::open_default().map_err(|e| e.to_string())
}

/// The errno of a gdrpeer call that must fail.
pub fn fails<T: std::fmt::Debug>(
    r: Result<T, gdrpeer::Error>,
    what: &str,
) -> Result<Errno, String> {
    match r {
        Ok(v) => Err(format!("{what}: succeeded ({v:?}), expected an error")),
        Err(e) => e.errno().ok_or_else(|| format!("{what}: {e}")),
    }
}

pub fn ok<T>(r: Result<T, gdrpeer::Error>, what: &str) -> Result<T, String> {
    r.map_err(|e| format!("{what}: {e}"))
}

/// A `name value` file of gdrpeer's debugfs: `stats` (global counters) or `params`.
fn gdebugfs(file: &str) -> Result<HashMap<String, u64>, String> {
    harness::name_values(&format!("/sys/kernel/debug/gdrpeer/{file}"))
}

pub fn gstats() -> Result<HashMap<String, u64>, String> {
    gdebugfs("stats")
}

pub fn gstat(name: &str) -> Result<u64, String> {
    gstats()?
        .get(name)
        .copied()
        .ok_or_else(|| format!("no gdrpeer counter {name}"))
}

/// A module parameter (they are not in sysfs; gdrpeer shows them in debugfs).
pub fn param(name: &str) -> Result<u64, String> {
    gdebugfs("params")?
        .get(name)
        .copied()
        .ok_or_else(|| format!("no gdrpeer parameter {name}"))
}

/// `cache_max_regions`, which the eviction tests need below `below` (pins of `below` other
/// buffers then evict).
pub fn small_region_limit(below: u64) -> Result<u64, String> {
    let limit = param("cache_max_regions")?;
    check!(
        limit > 0 && limit < below,
        "run with cache_max_regions below {below}, not {limit}"
    );
    Ok(limit)
}

/// Polls `cond` for up to `secs` seconds.
pub fn eventually(
    secs: u64,
    what: &str,
    mut cond: impl FnMut() -> Result<bool, String>,
) -> TestResult {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !cond()? {
        check!(Instant::now() < deadline, "{what}: not within {secs} s");
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(())
}

/// gdrpeer holds nothing: no context, region or deferred release (callback work included).
/// Names what it still holds otherwise.
pub fn gdrpeer_idle() -> TestResult {
    const HELD: [&str; 4] = ["contexts", "regions", "pinned_bytes", "deferred_releases"];
    eventually(5, "gdrpeer idle", || {
        let s = gstats()?;
        Ok(HELD.iter().all(|k| s.get(*k) == Some(&0)))
    })
    .map_err(|e| {
        let s = gstats().unwrap_or_default();
        let held: Vec<String> = HELD
            .iter()
            .map(|k| format!("{k} {:?}", s.get(*k)))
            .collect();
        format!("{e} ({})", held.join(", "))
    })
}

/// After every test: gdrpeer holds nothing, nor does nvsim.
pub fn all_released() -> TestResult {
    gdrpeer_idle()?;
    harness::nvsim_counters_back_to_zero()
}

/// The PCI address of QEMU's edu device, the DMA peer of these tests.
pub fn edu() -> Result<PciAddress, String> {
    for entry in std::fs::read_dir("/sys/bus/pci/devices").map_err(|e| e.to_string())? {
        let path = entry.map_err(|e| e.to_string())?.path();
        let id = |f: &str| std::fs::read_to_string(path.join(f)).unwrap_or_default();
        if id("vendor").trim() == "0x1234" && id("device").trim() == "0x11e8" {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            return name.parse().map_err(|e| format!("{name}: {e}"));
        }
    }
    Err("no edu device".into())
}

/// The bus addresses nvsim gives an in-kernel client (p2pclient) for the same range.
pub fn p2pclient_addresses(va: u64, len: u64) -> Result<Vec<u64>, String> {
    let p = harness::pin(&format!("get {va} {len}"))?.map_err(|e| format!("p2pclient get: {e}"))?;
    check_eq!(
        harness::status(&format!("put {}", p.handle))?,
        0,
        "p2pclient put"
    );
    Ok(p.pa)
}

/// A byte pattern that varies with the position and the seed.
pub fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2654435761).to_le_bytes()[i % 4] ^ seed)
        .collect()
}

/// Raw PIN: the errno, or the handle.
pub fn raw_pin(fd: BorrowedFd<'_>, mut p: uapi::Pin) -> Result<u64, Errno> {
    // SAFETY: PIN reads and writes one `uapi::Pin`.
    unsafe {
        ioctl::ioctl(
            fd,
            ioctl::Updater::<{ uapi::IOCTL_PIN }, uapi::Pin>::new(&mut p),
        )
    }?;
    Ok(p.handle)
}

/// PIN's argument for `[va, va + len)`, no flags.
pub fn pin_args(va: u64, len: u64) -> uapi::Pin {
    uapi::Pin {
        size: size_of::<uapi::Pin>() as u32,
        va,
        len,
        ..Default::default()
    }
}

/// Raw GET_PAGES into a user array of `n` entries: the count written, or the errno.
pub fn get_pages_into(d: &Device, handle: u64, n: u32) -> Result<Result<u32, Errno>, String> {
    get_pages_fd(d.as_fd(), handle, n)
}

/// Raw GET_PAGES on `fd`: see [`get_pages_into`].
pub fn get_pages_fd(fd: BorrowedFd<'_>, handle: u64, n: u32) -> Result<Result<u32, Errno>, String> {
    let mut addrs = vec![0u64; n as usize];
    let mut g = uapi::GetPages {
        size: size_of::<uapi::GetPages>() as u32,
        count: n,
        handle,
        addrs: addrs.as_mut_ptr() as u64,
    };
    // SAFETY: GET_PAGES reads and writes one `uapi::GetPages` and writes at most `count`
    // u64s at `addrs`, which has that many.
    let r = unsafe {
        ioctl::ioctl(
            fd,
            ioctl::Updater::<{ uapi::IOCTL_GET_PAGES }, uapi::GetPages>::new(&mut g),
        )
    };
    Ok(r.map(|()| g.count))
}

/// GET_PAGES and DMA_MAP from a thread of the owning process without CAP_SYS_RAWIO.
pub fn without_rawio(d: &Device, handle: u64) -> Result<(Errno, Errno), String> {
    let peer = edu()?;
    std::thread::scope(|s| {
        s.spawn(|| {
            // Capabilities are per thread: only this one loses CAP_SYS_RAWIO.
            let mut caps = rustix::thread::capabilities(None).map_err(errno)?;
            caps.effective -= CapabilitySet::SYS_RAWIO;
            rustix::thread::set_capabilities(None, CapabilitySets { ..caps }).map_err(errno)?;
            let pages = get_pages_into(d, handle, 16)?.map(|_| ());
            let map = d.dma_map(handle, peer).map(|_| ());
            Ok((
                pages.err().ok_or("GET_PAGES succeeded")?,
                map.err()
                    .and_then(|e| e.errno())
                    .ok_or("DMA_MAP succeeded")?,
            ))
        })
        .join()
        .map_err(|_| "thread panicked".to_string())?
    })
}

/// Bytes written through `map` (from its start) are the GPU's at `va`, read through nvsim's
/// mapping of the BAR; bytes nvsim writes there are what `map` reads. `len` bytes, patterns
/// from `seed` and `seed + 1`; `what` names the moment in the errors.
pub fn mapping_round_trip(
    map: &gdrpeer::Mapping,
    gpu: &nvsim::Gpu,
    va: u64,
    len: usize,
    seed: u8,
    what: &str,
) -> TestResult {
    let data = pattern(seed, len);
    map.write(0, &data);
    check_eq!(
        gpu.read(va, len).map_err(errno)?,
        data,
        format!("GPU memory written through the mapping {what}")
    );
    let back = pattern(seed.wrapping_add(1), len);
    gpu.write(va, &back).map_err(errno)?;
    let mut seen = vec![0; len];
    map.read(0, &mut seen);
    check_eq!(seen, back, format!("the mapping read {what}"));
    Ok(())
}
