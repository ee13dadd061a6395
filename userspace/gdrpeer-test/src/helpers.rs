// SPDX-License-Identifier: GPL-2.0

//! The helpers every test module shares: gdrpeer's device and its errors, gdrpeer's and
//! nvsim's counters and the leak checks run after each test, the edu device as DMA peer,
//! p2pclient's view of the same memory, and gdrpeer's ioctls issued raw.

use gdrpeer::{uapi, Device, PciAddress};
use nvsim::gdrnic::Nic;
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

/// The entry point `name` of `lib` (libcuda.so.1), as the function type `T` it is read as.
///
/// # Safety
///
/// `T` must be the CUDA driver API signature of `name`.
pub unsafe fn cuda_entry<T: Copy>(lib: &libloading::Library, name: &str) -> Result<T, String> {
    let c = std::ffi::CString::new(name).map_err(|e| e.to_string())?;
    // SAFETY: the caller's contract: `T` is the entry point's type.
    unsafe { lib.get::<T>(c.as_bytes_with_nul()) }
        .map(|f| *f)
        .map_err(|e| format!("{name}: {e}"))
}

/// A new read-write mapping (`flags`: `MAP_SHARED`, or `MAP_PRIVATE` for a test that
/// expects a refusal) of `len` bytes of `fd` at byte `offset`: its address, or the errno. The
/// caller unmaps it, or leaves it to the process's exit.
pub fn raw_mmap(
    fd: BorrowedFd<'_>,
    offset: u64,
    len: usize,
    flags: rustix::mm::MapFlags,
) -> Result<*mut u8, Errno> {
    use rustix::mm::{mmap, ProtFlags};
    // SAFETY: a new mapping at an address of the kernel's choice replaces nothing.
    let p = unsafe {
        mmap(
            std::ptr::null_mut(),
            len,
            ProtFlags::READ | ProtFlags::WRITE,
            flags,
            fd,
            offset,
        )
    }?;
    Ok(p.cast())
}

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
        Err(e) => e.errno_of().ok_or_else(|| format!("{what}: {e}")),
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

/// Closes `d` (a /dev/gdrpeer file holds the module too) while NVIDIA holds a pin it can still
/// call back into gdrpeer: rmmod must fail. Then the free of `va` calls back, and NVIDIA holds
/// no pin.
pub fn module_held_for_the_callback(d: Device, gpu: &nvsim::Gpu, va: u64) -> TestResult {
    drop(d);
    check!(
        !crate::proc::rmmod_gdrpeer()?,
        "rmmod succeeded, no file open, with a pin NVIDIA can still call back"
    );
    gpu.free(va).map_err(errno)?;
    check_eq!(harness::stat("pins_live")?, 0, "pins after the free");
    Ok(())
}

/// gdrpeer holds nothing: no context, region or deferred release (callback work included).
/// Names what it still holds otherwise.
pub fn gdrpeer_idle() -> TestResult {
    const HELD: [&str; 6] = [
        "contexts",
        "regions",
        "pinned_bytes",
        "deferred_releases",
        "dma_pages_mapped",
        "dma_page_holds",
    ];
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

/// The kernel's own record of `dev`'s live page mappings, as `(physical, DMA)`
/// address pairs: DMA-API debugging's `dma-api/dump`, an oracle that is not gdrpeer's. `None`
/// on a kernel without DMA-API debugging (the stock and benchmark kernels).
pub fn dma_api_resource_mappings(dev: &PciAddress) -> Result<Option<Vec<(u64, u64)>>, String> {
    const DUMP: &str = "/sys/kernel/debug/dma-api/dump";
    let text = match std::fs::read_to_string(DUMP) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("{DUMP}: {e}")),
    };
    let name = dev.to_string();
    let hex = |field: Option<&str>, key: &str, line: &str| {
        field
            .and_then(|f| f.strip_prefix(key))
            .map(|v| v.trim_start_matches("0x"))
            .and_then(|v| u64::from_str_radix(v, 16).ok())
            .ok_or_else(|| format!("{DUMP}: no {key} in {line:?}"))
    };
    let mut out = Vec::new();
    // "<driver> <device> <type> idx <n> P=<phys> D=<dma> L=<len> cln=... <dir> ..."
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        // `dma_map_resource` is "phy" from 7.2 on (dma_map_phys with DMA_ATTR_MMIO),
        // "resource" before.
        if f.get(1) != Some(&name.as_str()) || !matches!(f.get(2), Some(&"phy" | &"resource")) {
            continue;
        }
        let phys = hex(f.iter().copied().find(|x| x.starts_with("P=")), "P=", line)?;
        let dma = hex(f.iter().copied().find(|x| x.starts_with("D=")), "D=", line)?;
        out.push((phys, dma));
    }
    Ok(Some(out))
}

/// The kernel log as `dmesg` prints it.
pub fn kernel_log() -> Result<String, String> {
    let out = std::process::Command::new("dmesg")
        .output()
        .map_err(|e| format!("dmesg: {e}"))?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
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

// --- Which kind of address an interface hands out ---------------------------------------
//
// GET_PAGES and nv-p2p's page tables give bus addresses of the GPU BAR; DMA_MAP, the kernel
// API's registrations and a dma-buf's segments give DMA addresses for one peer. Without a
// translating IOMMU the two are equal; behind one (tests/plans/iommu.sh) a DMA address is an
// IO virtual address that the IOMMU maps to the bus address, and only the peer's own DMA can
// tell whether it maps to the right page: `check_dma_reaches` reads through it with the NIC.

/// Whether DMA of the PCI function `dev` goes through a translating IOMMU: its IOMMU group's
/// default domain is "DMA" (strict invalidation) or "DMA-FQ" (lazy). No group (no IOMMU, as
/// on the test kernel) or an identity domain: its DMA addresses are bus addresses.
pub fn iommu_translates(dev: &PciAddress) -> Result<bool, String> {
    Ok(matches!(
        iommu_domain(dev)?.as_deref(),
        Some("DMA" | "DMA-FQ")
    ))
}

/// The type of the default domain of `dev`'s IOMMU group, None without a group.
pub fn iommu_domain(dev: &PciAddress) -> Result<Option<String>, String> {
    let group = format!("/sys/bus/pci/devices/{dev}/iommu_group");
    if !std::path::Path::new(&group).exists() {
        return Ok(None);
    }
    let path = format!("{group}/type");
    let t = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
    match t.trim() {
        t @ ("DMA" | "DMA-FQ" | "identity") => Ok(Some(t.to_string())),
        other => Err(format!(
            "{path}: a {other} domain, not the kernel's DMA API's"
        )),
    }
}

/// The bus addresses of the GPU BAR (nvsim's ivshmem device, BAR 2), first and last.
pub fn gpu_bar() -> Result<(u64, u64), String> {
    for entry in std::fs::read_dir("/sys/bus/pci/devices").map_err(|e| e.to_string())? {
        let path = entry.map_err(|e| e.to_string())?.path();
        let id = |f: &str| std::fs::read_to_string(path.join(f)).unwrap_or_default();
        if id("vendor").trim() == "0x1af4" && id("device").trim() == "0x1110" {
            let res = id("resource");
            let hex = |w: &str| u64::from_str_radix(w.trim_start_matches("0x"), 16).ok();
            let line = res.lines().nth(2).unwrap_or_default();
            let mut words = line.split_whitespace().map(hex);
            if let (Some(Some(start)), Some(Some(end))) = (words.next(), words.next()) {
                if start != 0 {
                    return Ok((start, end));
                }
            }
            return Err(format!("{}: no BAR 2 in '{line}'", path.display()));
        }
    }
    Err("no ivshmem device (the GPU BAR)".into())
}

/// Checks that `dma`, the DMA addresses an interface handed out for the GPU pages whose bus
/// addresses are `bus`, are what `peer`'s DMA needs: the bus addresses themselves without a
/// translating IOMMU; behind one, page-aligned IO virtual addresses, none of them inside the
/// GPU BAR (the IOMMU keeps the PCI windows out of its address space: an address there is a
/// bus address handed out where a DMA address was due). Whether each reaches its page is
/// [`check_dma_reaches`]'s to see.
pub fn check_dma_kind(peer: &PciAddress, dma: &[u64], bus: &[u64], what: &str) -> TestResult {
    check_eq!(dma.len(), bus.len(), format!("{what}: number of addresses"));
    if !iommu_translates(peer)? {
        check_eq!(
            dma,
            bus,
            format!("{what}: DMA addresses for {peer}, no IOMMU translating (the bus addresses)")
        );
        return Ok(());
    }
    let (start, end) = gpu_bar()?;
    for (i, (&d, &b)) in dma.iter().zip(bus).enumerate() {
        check!(
            d % 4096 == 0,
            "{what}: DMA address {d:#x} of page {i} is not page-aligned"
        );
        check!(
            !(start..=end).contains(&d),
            "{what}: DMA address {d:#x} of page {i} (bus address {b:#x}) is inside the GPU \
             BAR ({start:#x}-{end:#x}): a bus address where {peer}'s IOMMU needs an IOVA"
        );
    }
    Ok(())
}

/// Reads through each of `dma`, the DMA addresses of consecutive GPU pages for the edu
/// function, with the NIC's engine (gdrnic's DMA_READ), and checks that each reaches its
/// page: the bytes read in the middle of page i are `content`'s there (`content` holds the
/// pages' bytes, as the CPU sees them). Behind a translating IOMMU this is the IOMMU mapping
/// each IOVA to its page's bus address. The pages must differ where they are read.
pub fn check_dma_reaches(nic: &Nic, dma: &[u64], content: &[u8], what: &str) -> TestResult {
    let n = nvsim::gdrnic::DMA_READ_MAX;
    let at = (K64 as usize - n) / 2;
    check_eq!(
        content.len(),
        dma.len() * K64 as usize,
        format!("{what}: bytes of the pages to compare")
    );
    let want: Vec<&[u8]> = (0..dma.len())
        .map(|i| &content[i * K64 as usize + at..][..n])
        .collect();
    for i in 0..want.len() {
        if let Some(j) = (0..i).find(|&j| want[j] == want[i]) {
            return Err(format!(
                "{what}: pages {j} and {i} hold the same bytes: a read cannot tell them apart"
            ));
        }
    }
    for (i, &d) in dma.iter().enumerate() {
        let got = nic
            .dma_read(d + at as u64, n)
            .map_err(|e| format!("{what}: DMA_READ of page {i} at {:#x}: {e}", d + at as u64))?;
        if got != want[i] {
            let other = (0..want.len()).find(|&j| got == want[j]);
            return Err(format!(
                "{what}: the NIC's DMA at {d:#x} (page {i}) did not read page {i}'s bytes{}",
                other.map_or(String::new(), |j| format!(" but page {j}'s"))
            ));
        }
    }
    Ok(())
}

/// Runs `f` with the NIC open, loading gdrnic.ko for it (and unloading it after) when it is
/// not loaded: for the gdrpeer suite's tests, which run without it.
pub fn with_nic<T>(f: impl FnOnce(&Nic) -> Result<T, String>) -> Result<T, String> {
    use std::process::Command;
    let loaded = std::path::Path::new("/dev/gdrnic").exists();
    if !loaded {
        let ok = Command::new("gdrpeer-vmtool")
            .args(["insmod", "/gdrpeer/modules/gdrnic.ko"])
            .status()
            .map_err(|e| format!("gdrpeer-vmtool: {e}"))?
            .success();
        check!(ok, "insmod gdrnic.ko");
    }
    let r = Nic::open()
        .map_err(|e| format!("/dev/gdrnic: {e}"))
        .and_then(|nic| f(&nic));
    if !loaded {
        // The file is closed; its context's reference on the module may be put a moment
        // later, from gdrpeer's workqueue.
        let rmmod = || {
            Command::new("rmmod")
                .arg("gdrnic")
                .stderr(std::process::Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        let mut tries = 50;
        while !rmmod() {
            tries -= 1;
            if tries == 0 {
                r?;
                return Err("rmmod gdrnic after the test: not within 5 s".into());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    r
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
                    .and_then(|e| e.errno_of())
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

/// The errno of a gdrpeer error as rustix's `Errno`, for comparing with its constants.
pub trait ErrnoOf {
    /// [`gdrpeer::Error::errno`], as an `Errno`.
    fn errno_of(&self) -> Option<Errno>;
}

impl ErrnoOf for gdrpeer::Error {
    fn errno_of(&self) -> Option<Errno> {
        self.errno().map(Errno::from_raw_os_error)
    }
}

/// Waits until an nv-p2p call sleeps in one of nvsim's one-shot entry delays
/// (`put_pages_delay_us`, `dma_map_delay_us`).
pub fn delayed_call_asleep() -> TestResult {
    eventually(10, "an nv-p2p call asleep on entry", || {
        Ok(nvsim::testing::stat("calls_delayed")? == 1)
    })
}

/// Prints how often a stress or fuzzing run entered the DMA-mapping window (nvsim's
/// `dma_map_window`: a DMA_MAP racing the free of its memory; design.rst, "The DMA-mapping
/// window"), which such a run may do by chance, and clears the counter for the checks after
/// it.
pub fn report_dma_map_window() -> TestResult {
    let n = harness::take("dma_map_window")?;
    println!("DMA-mapping window entered: {n} dma_map_pages calls");
    Ok(())
}
