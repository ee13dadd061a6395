// SPDX-License-Identifier: GPL-2.0

//! The measurements, made in the test guest over `/dev/gdrpeer`, nvsim and the simulated
//! libcuda (gdrpeer loaded without region limits, so that the cache holds everything pinned).

use crate::interleave::{self, Step, ROUNDS};
use crate::report::{Interleaved, Latency, NvCost, Op, Point, Report};
use gdrpeer::{cuda::Cuda, regcache::PointerInfo, regcache::RegCache, Device, PinFlags};
use std::time::{Duration, Instant};

const K64: u64 = 1 << 16;
/// The scaling measurements' cache is filled from allocations of at most this many 64 KiB
/// pages.
pub const CHUNK_PAGES: u64 = 16384;
/// Untimed repetitions before each timed series.
pub const WARMUP: usize = 10;

/// What to run.
pub struct Config {
    /// Repetitions of the cheap operations.
    pub reps: usize,
    /// Repetitions of the operations that pin (nvsim's cost model sleeps in each).
    pub slow_reps: usize,
    /// The cache sizes of the scaling measurements.
    pub sizes: Vec<u64>,
    pub seed: u64,
    /// The NIC's REG + DEREG hit measured with gdrpeer loaded with `dma_map_keep=0`
    /// (`gdrpeer-bench nic-hit`, run by the bench plan first), or why it was not.
    pub no_mapping_cache: Result<Op, String>,
}

/// Runs `op` `WARMUP + reps` times; `op` returns the time of the part it measures.
pub fn series(
    reps: usize,
    mut op: impl FnMut() -> Result<Duration, String>,
) -> Result<Latency, String> {
    for _ in 0..WARMUP {
        op()?;
    }
    let mut ns = Vec::with_capacity(reps);
    for _ in 0..reps {
        ns.push(op()?.as_nanos() as u64);
    }
    Ok(Latency::of(ns))
}

/// nvsim's get_pages and put_pages so far: calls and nanoseconds spent in them (debugfs
/// `nvsim/stats`), or `None` from an nvsim that does not count the time.
fn nv_counters() -> Result<Option<[u64; 4]>, String> {
    let s = nvsim::testing::stats()?;
    let get = |k: &str| s.get(k).copied();
    Ok((|| {
        Some([
            get("get_pages_calls")?,
            get("get_pages_ns")?,
            get("put_pages_calls")?,
            get("put_pages_ns")?,
        ])
    })())
}

/// `series` of misses (`op` pins and unpins, NOCACHE), with nvsim's own cost in each timed
/// repetition: its counters are read before and after each one, outside the part timed.
/// The cost is `None` where nvsim does not count the time.
pub fn nv_series(
    key: &str,
    reps: usize,
    mut op: impl FnMut() -> Result<Duration, String>,
) -> Result<(Latency, Option<NvCost>), String> {
    for _ in 0..WARMUP {
        op()?;
    }
    let (mut ns, mut nv, mut overhead) = (Vec::new(), Vec::new(), Vec::new());
    let (mut get_calls, mut put_calls) = (0, 0);
    let mut counted = true;
    for _ in 0..reps {
        let before = nv_counters()?;
        let t = op()?.as_nanos() as u64;
        ns.push(t);
        match (before, nv_counters()?) {
            (Some(a), Some(b)) if counted => {
                get_calls += b[0] - a[0];
                put_calls += b[2] - a[2];
                let spent = (b[1] - a[1]) + (b[3] - a[3]);
                nv.push(spent);
                overhead.push(t.saturating_sub(spent));
            }
            _ => counted = false,
        }
    }
    let cost = counted.then(|| NvCost {
        key: key.into(),
        get_calls,
        put_calls,
        nvsim: Latency::of(nv),
        overhead: Latency::of(overhead),
    });
    if let Some(c) = &cost {
        eprintln!(
            "bench: {key}: nvsim's get_pages + put_pages median {} ns, overhead median {} ns \
             ({get_calls} get_pages, {put_calls} put_pages in {reps} repetitions)",
            c.nvsim.median_ns, c.overhead.median_ns
        );
    }
    Ok((Latency::of(ns), cost))
}

/// The time `f` takes.
pub fn timed<T>(f: impl FnOnce() -> Result<T, String>) -> Result<(T, Duration), String> {
    let t = Instant::now();
    let v = f()?;
    Ok((v, t.elapsed()))
}

pub fn g<T>(r: Result<T, gdrpeer::Error>, what: &str) -> Result<T, String> {
    r.map_err(|e| format!("{what}: {e}"))
}

pub fn c<T>(r: Result<T, gdrpeer::Error>) -> Result<T, String> {
    r.map_err(|e| e.to_string())
}

/// A value of `/proc/meminfo`, in bytes.
fn meminfo(key: &str) -> Result<u64, String> {
    let text = std::fs::read_to_string("/proc/meminfo").map_err(|e| format!("meminfo: {e}"))?;
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .map(|kib| kib * 1024)
        .ok_or_else(|| format!("meminfo: no {key}"))
}

pub fn op(key: &str, what: &str, latency: Latency) -> Op {
    eprintln!(
        "bench: {what}: median {} ns, p99 {} ns",
        latency.median_ns, latency.p99_ns
    );
    Op {
        key: key.into(),
        what: what.into(),
        latency,
    }
}

/// 64 KiB pages that can still be pinned: what BAR1 has left, and what the GPU has left.
fn pinnable_pages() -> Result<u64, String> {
    let s = nvsim::testing::stats()?;
    let get = |k: &str| s.get(k).copied().ok_or(format!("nvsim: no counter {k}"));
    let bar1 = get("bar1_size")?.saturating_sub(get("bar1_used")? + get("bar1_reserve")?) / K64;
    let free = get("gpu_pages")?.saturating_sub(get("gpu_pages_used")?);
    Ok(bar1.min(free))
}

/// The operations measured with an (almost) empty cache, and nvsim's cost in the misses.
fn single_ops(dev: &Device, cuda: &Cuda, cfg: &Config) -> Result<(Vec<Op>, Vec<NvCost>), String> {
    let mut ops = Vec::new();
    let mut nv_costs = Vec::new();
    ops.push(op(
        "null",
        "null ioctl (GET_VERSION)",
        series(
            cfg.reps,
            || Ok(timed(|| g(dev.get_version(), "version"))?.1),
        )?,
    ));

    let buf = c(cuda.mem_alloc(K64 as usize))?;
    g(dev.pin(buf, K64, PinFlags::empty()), "pin").and_then(|p| g(dev.unpin(p.handle), "unpin"))?;
    let mut unpins = Vec::with_capacity(cfg.reps);
    ops.push(op(
        "hit",
        "pin, cache hit (64 KiB)",
        series(cfg.reps, || {
            let (p, t) = timed(|| g(dev.pin(buf, K64, PinFlags::empty()), "pin"))?;
            let ((), u) = timed(|| g(dev.unpin(p.handle), "unpin"))?;
            unpins.push(u.as_nanos() as u64);
            Ok(t)
        })?,
    ));
    ops.push(op(
        "unpin",
        "unpin (the region stays cached)",
        Latency::of(unpins.split_off(WARMUP)),
    ));
    ops.push(op(
        "tag_check",
        "cuPointerGetAttribute(BUFFER_ID)",
        series(cfg.reps, || {
            Ok(timed(|| cuda.buffer_id(buf).map_err(|e| format!("buffer id: {e:?}")))?.1)
        })?,
    ));
    let mut cache = RegCache::new(dev, cuda, 16);
    cache.get(buf, K64).map_err(|e| e.to_string())?;
    ops.push(op(
        "tag_check_hit",
        "user-space cache: tag check + hit (64 KiB)",
        series(cfg.reps, || {
            Ok(timed(|| cache.get(buf, K64).map_err(|e| e.to_string()))?.1)
        })?,
    ));
    drop(cache);

    for (len, name) in [(K64, "64k"), (16 * K64, "1m")] {
        let b = c(cuda.mem_alloc(len as usize))?;
        let size = if len == K64 { "64 KiB" } else { "1 MiB" };
        for (flags, how, label, reps) in [
            (PinFlags::empty(), "cached", "cached", cfg.reps),
            (PinFlags::NOCACHE, "nocache", "NOCACHE", cfg.slow_reps),
        ] {
            let key = format!("reuse_{how}_{name}");
            let once = || pin_unpin(dev, b, len, flags);
            // The 64 KiB misses, against nvsim's own cost in them (P3).
            let latency = if flags == PinFlags::NOCACHE && len == K64 {
                let (latency, cost) = nv_series(&key, reps, once)?;
                nv_costs.extend(cost);
                latency
            } else {
                series(reps, once)?
            };
            ops.push(op(
                &key,
                &format!("pin + unpin of a reused buffer, {label} ({size})"),
                latency,
            ));
        }
        c(cuda.mem_free(b))?;
    }

    // Misses: each pin takes a page never pinned before (the regions stay cached until the
    // buffer is freed).
    let pages = (cfg.slow_reps + WARMUP) as u64;
    let miss_buf = c(cuda.mem_alloc((pages * K64) as usize))?;
    let mut next = 0;
    ops.push(op(
        "miss",
        "pin, cache miss (64 KiB; nvsim's pin cost)",
        series(cfg.slow_reps, || {
            let va = miss_buf + next * K64;
            next += 1;
            let (p, t) = timed(|| g(dev.pin(va, K64, PinFlags::empty()), "pin"))?;
            g(dev.unpin(p.handle), "unpin")?;
            Ok(t)
        })?,
    ));
    c(cuda.mem_free(miss_buf))?;
    c(cuda.mem_free(buf))?;
    Ok((ops, nv_costs))
}

/// gdrpeer's own memory per cached region, from its own accounting (debugfs
/// `gdrpeer/stats`, `region_memory_bytes` over `regions`, read together): `None` where it
/// does not report it.
fn own_per_region() -> Option<u64> {
    let s = nvsim::testing::name_values("/sys/kernel/debug/gdrpeer/stats").ok()?;
    let (bytes, regions) = (*s.get("region_memory_bytes")?, *s.get("regions")?);
    (regions > 0).then(|| bytes / regions)
}

/// The time of a PIN of `len` bytes at `va` in `dev` and its UNPIN.
pub fn pin_unpin(dev: &Device, va: u64, len: u64, flags: PinFlags) -> Result<Duration, String> {
    Ok(timed(|| {
        let p = g(dev.pin(va, len, flags), "pin")?;
        g(dev.unpin(p.handle), "unpin")
    })?
    .1)
}

/// The cached 64 KiB regions of a scaling measurement, the `i`-th at page `i % chunk_pages`
/// of chunk `i / chunk_pages`. Their addresses are computed, not kept in an array: between
/// two hits the benchmark then reads no memory of its own that grows with the cache (an
/// array of 65,536 addresses is 512 KiB, a cold page at each random hit, and under TCG each
/// cold page also evicts the emulator's entries for the pages the next hit's path reads).
#[derive(Clone, Copy)]
pub struct Regions<'a> {
    chunks: &'a [u64],
    chunk_pages: u64,
    /// How many are cached ([`Regions::fill`]).
    len: u64,
}

impl<'a> Regions<'a> {
    /// None yet, in `chunks` of `chunk_pages` pages each (as [`region_chunks`] makes them).
    pub fn new(chunks: &'a [u64], chunk_pages: u64) -> Self {
        Regions {
            chunks,
            chunk_pages,
            len: 0,
        }
    }

    pub fn va(&self, i: u64) -> u64 {
        self.chunks[(i / self.chunk_pages) as usize] + (i % self.chunk_pages) * K64
    }

    /// The address of a random one of them.
    pub fn random(&self, rng: &mut fastrand::Rng) -> u64 {
        self.va(rng.u64(..self.len))
    }

    /// Pins and unpins the next regions in `dev` until `n` of them are cached there.
    pub fn fill(&mut self, dev: &Device, n: u64) -> Result<(), String> {
        while self.len < n {
            let p = g(dev.pin(self.va(self.len), K64, PinFlags::empty()), "pin")?;
            g(dev.unpin(p.handle), "unpin")?;
            self.len += 1;
        }
        Ok(())
    }
}

/// The CUDA allocations that hold `n` 64 KiB regions, in chunks of at most [`CHUNK_PAGES`]
/// pages: the chunks and their pages each (a [`Regions`]' layout).
pub fn region_chunks(cuda: &Cuda, n: u64) -> Result<(Vec<u64>, u64), String> {
    let chunk_pages = n.clamp(1, CHUNK_PAGES);
    let chunks = (0..n.div_ceil(chunk_pages))
        .map(|_| c(cuda.mem_alloc((chunk_pages * K64) as usize)))
        .collect::<Result<Vec<u64>, String>>()?;
    Ok((chunks, chunk_pages))
}

/// A PIN of a random one of `regions` (cached in `dev`): a hit, its UNPIN untimed.
fn random_hit(dev: &Device, regions: Regions, rng: &mut fastrand::Rng) -> Result<Duration, String> {
    let va = regions.random(rng);
    let (p, t) = timed(|| g(dev.pin(va, K64, PinFlags::empty()), "pin"))?;
    g(dev.unpin(p.handle), "unpin")?;
    Ok(t)
}

/// nvsim's counters `keys` (debugfs `nvsim/stats`), in that order.
pub fn nv_stats<const N: usize>(keys: [&str; N]) -> Result<[u64; N], String> {
    let s = nvsim::testing::stats()?;
    let mut values = [0; N];
    for (v, k) in values.iter_mut().zip(keys) {
        *v = s.get(k).copied().ok_or(format!("nvsim: no counter {k}"))?;
    }
    Ok(values)
}

/// A 64 KiB buffer, pinned in `dev` (and unpinned: its region cached) where `pinned` says.
fn buffer(dev: &Device, cuda: &Cuda, pinned: bool) -> Result<u64, String> {
    let b = c(cuda.mem_alloc(K64 as usize))?;
    if pinned {
        let p = g(dev.pin(b, K64, PinFlags::empty()), "pin")?;
        g(dev.unpin(p.handle), "unpin")?;
    }
    Ok(b)
}

/// nvsim's TOUCH of `cold` pages chosen among 16 MiB and `hot` among two, a cache line of
/// each: P4's floor on this machine (what the pages a hit among many regions reads, and a hit
/// among few does not, cost however little of each it reads).
fn timed_touch(
    gpu: &nvsim::Gpu,
    cold: u32,
    hot: u32,
    rng: &mut fastrand::Rng,
) -> Result<Duration, String> {
    let seed = rng.u32(..);
    let touch = || gpu.touch(cold, hot, 1, seed);
    Ok(timed(|| touch().map_err(|e| format!("nvsim TOUCH: {e}")))?.1)
}

/// `cuMemFree` of a 64 KiB buffer pinned in `dev` (an invalidation), or of one nobody pinned.
fn timed_free(dev: &Device, cuda: &Cuda, pinned: bool) -> Result<Duration, String> {
    let b = buffer(dev, cuda, pinned)?;
    Ok(timed(|| c(cuda.mem_free(b)))?.1)
}

/// The time gdrpeer's free callback took in a `cuMemFree` of a 64 KiB buffer pinned in `dev`,
/// by nvsim's clock around the call (`callback_ns`): gdrpeer's own share of an invalidation.
fn timed_callback(dev: &Device, cuda: &Cuda) -> Result<Duration, String> {
    let b = buffer(dev, cuda, true)?;
    let keys = ["callbacks_fired", "callback_ns"];
    let [calls, ns] = nv_stats(keys)?;
    c(cuda.mem_free(b))?;
    let [calls_after, ns_after] = nv_stats(keys)?;
    let (calls, ns) = (calls_after - calls, ns_after - ns);
    if calls != 1 || ns == 0 {
        return Err(format!(
            "P5: {calls} free callbacks in a cuMemFree of one pinned buffer, {ns} ns in them: \
             expected 1, some"
        ));
    }
    Ok(Duration::from_nanos(ns))
}

/// P4 and P5 interleaved, with `regions` cached in `dev` (the largest size): hits there
/// against hits in a second context of `small` regions, and invalidations against frees of
/// unpinned memory.
fn scaling_interleaved(
    dev: &Device,
    cuda: &Cuda,
    cfg: &Config,
    regions: Regions,
    small: u64,
) -> Result<Vec<Interleaved>, String> {
    let other = g(Device::open_default(), "open")?;
    let (buf, chunk_pages) = region_chunks(cuda, small)?;
    let mut few = Regions::new(&buf, chunk_pages);
    few.fill(&other, small)?;
    let (mut many_rng, mut few_rng) = (
        fastrand::Rng::with_seed(cfg.seed + 1),
        fastrand::Rng::with_seed(cfg.seed + 2),
    );
    let gpu = nvsim::Gpu::open().map_err(|e| format!("/dev/nvsim: {e}"))?;
    let [mut hot_rng, mut cold_rng, mut one_rng, mut hot_hit_rng, mut cold_hit_rng] =
        [3, 4, 5, 6, 7].map(|n| fastrand::Rng::with_seed(cfg.seed + n));
    // A TOUCH, then a hit at the smallest size, both timed: what the touched pages cost the
    // hit that follows them, besides their own reads.
    let touch_then_hit = |cold, hot, rng: &mut fastrand::Rng| -> Result<Duration, String> {
        let touch = timed_touch(&gpu, cold, hot, rng)?;
        Ok(touch + random_hit(&other, few, rng)?)
    };
    let block = cfg.reps / ROUNDS;
    let p4 = interleave::measure(
        "P4",
        "hits at the largest cache size and at the smallest (a second context), and what \
         pages no recent call read cost here (nvsim's TOUCH)",
        vec![
            Step::new("hit_largest", "hit, largest cache", block, || {
                random_hit(dev, regions, &mut many_rng)
            }),
            Step::new("hit_smallest", "hit, smallest cache", block, || {
                random_hit(&other, few, &mut few_rng)
            }),
            Step::new("touch_hot", "TOUCH of 2 hot pages", block, || {
                timed_touch(&gpu, 0, 2, &mut hot_rng)
            }),
            Step::new(
                "touch_cold",
                "TOUCH of 2 cold pages of 16 MiB",
                block,
                || timed_touch(&gpu, 2, 0, &mut cold_rng),
            ),
            Step::new(
                "touch_cold_one",
                "TOUCH of 1 cold page and 1 hot",
                block,
                || timed_touch(&gpu, 1, 1, &mut one_rng),
            ),
            Step::new(
                "hot_then_hit",
                "TOUCH of 2 hot pages, then a hit at the smallest size",
                block,
                || touch_then_hit(0, 2, &mut hot_hit_rng),
            ),
            Step::new(
                "cold_then_hit",
                "TOUCH of 2 cold pages, then a hit at the smallest size",
                block,
                || touch_then_hit(2, 0, &mut cold_hit_rng),
            ),
        ],
        interleave::quotient,
    )?;
    for (ctx, n) in [(dev, regions.len), (&other, small)] {
        let cached = g(ctx.stats(), "stats")?.file.regions;
        if cached != n {
            return Err(format!(
                "P4: {cached} regions cached, expected {n}: hits were misses"
            ));
        }
    }
    drop(other);
    for chunk in buf {
        c(cuda.mem_free(chunk))?;
    }
    let block = cfg.slow_reps / ROUNDS;
    let p5 = interleave::measure(
        "P5",
        "cuMemFree of pinned and of unpinned 64 KiB, at the largest cache size",
        vec![
            Step::new("invalidate", "cuMemFree, pinned", block, || {
                timed_free(dev, cuda, true)
            }),
            Step::new("free_unpinned", "cuMemFree, unpinned", block, || {
                timed_free(dev, cuda, false)
            }),
            Step::new(
                "invalidate_callback",
                "gdrpeer's free callback in a cuMemFree, pinned (nvsim's clock)",
                block,
                || timed_callback(dev, cuda),
            ),
        ],
        interleave::quotient,
    )?;
    Ok(vec![p4, p5])
}

/// Fills the cache to each size in turn and measures hits and invalidations there.
fn scaling(
    dev: &Device,
    cuda: &Cuda,
    cfg: &Config,
    skipped: &mut Vec<String>,
    interleaved: &mut Vec<Interleaved>,
) -> Result<(Vec<Point>, Vec<u64>, u64), String> {
    let mut rng = fastrand::Rng::with_seed(cfg.seed);
    let mut sizes = cfg.sizes.clone();
    sizes.sort_unstable();
    // What the invalidation measurements allocate besides the cached regions, and the
    // second context of P4's interleaved hits.
    let spare = 64 + sizes.first().copied().unwrap_or(0);
    let room = pinnable_pages()?.saturating_sub(spare);
    if let Some(too_big) = sizes.iter().position(|&n| n > room) {
        skipped.push(format!(
            "{:?} regions: {room} pages of 64 KiB can be pinned (tests/vm/run --bar-size)",
            &sizes[too_big..]
        ));
        sizes.truncate(too_big);
    }
    // The allocations come first, so that the slab growth measured is the regions'.
    let largest = sizes.last().copied().unwrap_or(0);
    let (chunks, chunk_pages) = region_chunks(cuda, largest)?;
    let mut regions = Regions::new(&chunks, chunk_pages);
    let mut points = Vec::new();
    let slab_empty = meminfo("Slab")?;
    for &n in &sizes {
        regions.fill(dev, n)?;
        let slab = meminfo("Slab")?;
        let own = own_per_region();
        let cached = g(dev.stats(), "stats")?.file.regions;
        if cached != n {
            return Err(format!("{cached} regions cached, expected {n}"));
        }
        let hit = series(cfg.reps, || random_hit(dev, regions, &mut rng))?;
        let invalidate = series(cfg.slow_reps, || timed_free(dev, cuda, true))?;
        let free_unpinned = series(cfg.slow_reps, || timed_free(dev, cuda, false))?;
        let p = Point {
            regions: n,
            hit,
            invalidate,
            free_unpinned,
            slab_per_region: slab.saturating_sub(slab_empty) / n,
            own_per_region: own,
        };
        eprintln!(
            "bench: {n} regions: hit {} ns, invalidation {} ns, free {} ns, {} slab bytes/region, \
             {own:?} own bytes/region",
            p.hit.median_ns, p.invalidate.median_ns, p.free_unpinned.median_ns, p.slab_per_region
        );
        points.push(p);
    }
    if let [smallest, _, ..] = sizes[..] {
        interleaved.extend(scaling_interleaved(dev, cuda, cfg, regions, smallest)?);
    }
    let cached = regions.len;
    Ok((points, chunks, cached))
}

/// The run-time checkers of the running kernel that slow down what is measured.
fn checkers() -> String {
    let exists = |path: &str| std::path::Path::new(path).exists();
    let boot_log = std::process::Command::new("dmesg")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let found: Vec<&str> = [
        (
            "KASAN",
            boot_log.contains("KernelAddressSanitizer initialized"),
        ),
        ("lockdep", exists("/proc/lockdep")),
        ("kmemleak", exists("/sys/kernel/debug/kmemleak")),
    ]
    .into_iter()
    .filter_map(|(name, on)| on.then_some(name))
    .collect();
    if found.is_empty() {
        "no checkers".into()
    } else {
        found.join(", ")
    }
}

/// Why a run stopped.
pub enum Failure {
    /// No CUDA driver library could be loaded.
    NoCuda(String),
    /// Anything else.
    Other(String),
}

impl From<String> for Failure {
    fn from(e: String) -> Self {
        Failure::Other(e)
    }
}

/// Runs everything.
pub fn run(cfg: &Config) -> Result<Report, Failure> {
    let cuda = Cuda::load().map_err(|e| Failure::NoCuda(e.to_string()))?;
    let dev = g(Device::open_default(), "open")?;
    let abi = dev.version().abi_string();
    let (mut ops, mut nv_costs) = single_ops(&dev, &cuda, cfg)?;
    let mut skipped = Vec::new();
    let mut interleaved = Vec::new();
    let (copies, apiperf) = crate::mapping::run(
        &dev,
        &cuda,
        cfg,
        &mut ops,
        &mut nv_costs,
        &mut skipped,
        &mut interleaved,
    )?;
    ops.extend(crate::dmabuf::run(
        &cuda,
        cfg,
        &mut skipped,
        &mut interleaved,
    )?);
    let (scaling, chunks, close_regions) =
        scaling(&dev, &cuda, cfg, &mut skipped, &mut interleaved)?;
    interleaved.sort_by(|a, b| a.id.cmp(&b.id));
    // Closing the file unpins every cached region; then the chunks go, calling back nobody.
    let close = Instant::now();
    drop(dev);
    let close_ns = close.elapsed().as_nanos() as u64;
    for ch in chunks {
        c(cuda.mem_free(ch))?;
    }
    let mut report = Report {
        kernel: rustix::system::uname()
            .release()
            .to_string_lossy()
            .into_owned(),
        checkers: checkers(),
        abi,
        pin_cost_us: nvsim::testing::param("pin_cost_us")?,
        pin_cost_per_page_us: nvsim::testing::param("pin_cost_per_page_us")?,
        ops,
        copies,
        scaling,
        skipped,
        close_regions,
        close_ns,
        nv_costs,
        apiperf,
        interleaved,
        targets: Vec::new(),
    };
    report.targets = report.targets();
    Ok(report)
}
