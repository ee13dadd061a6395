// SPDX-License-Identifier: GPL-2.0

//! What a run measured (written as JSON in the guest, read back on the host), and how it is
//! shown: the table, the ratios the benchmarks exist to answer, and an rst version of both.

use crate::mapping::mb_per_s;
use serde::{Deserialize, Serialize};
use std::fmt::Write;

/// The median, 99th percentile and mean of one operation's latency.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Latency {
    /// Timed repetitions (after a few untimed ones); 0: not measured.
    pub reps: usize,
    /// Nanoseconds.
    pub median_ns: u64,
    /// Nanoseconds.
    pub p99_ns: u64,
    /// Nanoseconds (0 in runs older than the apiperf loop, which did not record it).
    #[serde(default)]
    pub mean_ns: u64,
}

impl Latency {
    /// The latency of `samples` (nanoseconds, in any order).
    pub fn of(mut samples: Vec<u64>) -> Self {
        samples.sort_unstable();
        let n = samples.len();
        if n == 0 {
            return Latency::default();
        }
        Latency {
            reps: n,
            median_ns: samples[n / 2],
            // The smallest sample at or above 99% of them.
            p99_ns: samples[(n * 99).div_ceil(100) - 1],
            mean_ns: samples.iter().sum::<u64>() / n as u64,
        }
    }
}

/// One operation measured at one size.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Op {
    /// Short key (`null`, `hit`, ...), used by the ratios.
    pub key: String,
    /// What was timed.
    pub what: String,
    pub latency: Latency,
}

/// The measurements made with a given number of regions in the context's cache.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Point {
    /// Regions cached (pinned, unused) in the benchmark's context.
    pub regions: u64,
    /// A pin of one of them, picked at random: a hit.
    pub hit: Latency,
    /// cuMemFree of a pinned 64 KiB buffer: NVIDIA's free callback into gdrpeer.
    pub invalidate: Latency,
    /// cuMemFree of a 64 KiB buffer nobody pinned: the same path without gdrpeer.
    pub free_unpinned: Latency,
    /// Kernel slab memory grown since the cache was empty, per cached region, in bytes.
    pub slab_per_region: u64,
    /// gdrpeer's own memory per cached region, by its own accounting (debugfs
    /// `gdrpeer/stats`: `region_memory_bytes` / `regions`), in bytes; `None` where gdrpeer
    /// does not report it.
    #[serde(default)]
    pub own_per_region: Option<u64>,
}

/// nvsim's own cost in a series of misses (NOCACHE pin + unpin): the time its get_pages
/// and put_pages took (debugfs `nvsim/stats`, read before and after each repetition,
/// outside the part timed).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NvCost {
    /// The operation (`Op::key`) of the series.
    pub key: String,
    /// nvsim's get_pages and put_pages calls in the timed repetitions (one each a
    /// repetition, or the figures are not the miss's).
    pub get_calls: u64,
    pub put_calls: u64,
    /// get_pages + put_pages, per repetition.
    pub nvsim: Latency,
    /// The repetition's time less nvsim's: the client's own overhead in a miss.
    pub overhead: Latency,
}

impl NvCost {
    /// Whether each repetition made one get_pages and one put_pages.
    pub fn one_each(&self) -> bool {
        let reps = self.nvsim.reps as u64;
        reps > 0 && self.get_calls == reps && self.put_calls == reps
    }
}

/// What a target asks of a figure.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub enum Bound {
    AtMost(f64),
    AtLeast(f64),
    /// Reported, with no bound of its own.
    Reported,
}

/// One row of issue 21's targets: a figure of this run against its target.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Target {
    /// `P1` .. `P8`, P8's rows `P8a`, `P8b`, ...
    pub id: String,
    /// What is divided by what (or counted).
    pub what: String,
    /// The figure, `None` where this run did not measure what it needs.
    pub value: Option<f64>,
    /// `x` (a ratio of medians) or `B` (bytes).
    pub unit: String,
    pub bound: Bound,
    /// The bound in words, e.g. `<= 1.2x`.
    pub target: String,
    /// Whether the figure meets the bound; `None` when reported only or not measured.
    pub met: Option<bool>,
}

impl Target {
    fn new(id: &str, what: String, value: Option<f64>, unit: &str, bound: Bound) -> Self {
        let num = |v: f64| match unit {
            "x" => format!("{v}x"),
            u => format!("{v} {u}"),
        };
        let target = match bound {
            Bound::AtMost(v) => format!("<= {}", num(v)),
            Bound::AtLeast(v) => format!(">= {}", num(v)),
            Bound::Reported => "reported".into(),
        };
        let met = value.and_then(|v| match bound {
            Bound::AtMost(b) => Some(v <= b),
            Bound::AtLeast(b) => Some(v >= b),
            Bound::Reported => None,
        });
        Target {
            id: id.into(),
            what,
            value,
            unit: unit.into(),
            bound,
            target,
            met,
        }
    }

    /// The figure as shown: `1.07x`, `200 B`, `n/a`.
    pub fn figure(&self) -> String {
        match (self.value, self.unit.as_str()) {
            (None, _) => "n/a".into(),
            (Some(v), "x") => format!("{v:.2}x"),
            (Some(v), u) => format!("{v:.0} {u}"),
        }
    }

    /// `yes`, `NO`, or `-` (reported only, or not measured).
    pub fn verdict(&self) -> &'static str {
        match self.met {
            Some(true) => "yes",
            Some(false) => "NO",
            None => "-",
        }
    }
}

/// CPU copies of one size through a mapping of pinned GPU memory.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CopyPoint {
    /// Bytes copied.
    pub bytes: u64,
    /// Host buffer to the mapping.
    pub write: Latency,
    /// The mapping to a host buffer.
    pub read: Latency,
}

/// gdrcopy's apiperf loop through `/dev/gdrdrv` at one size: each iteration PIN_BUFFER_V2,
/// `gdr_map` (REQ_MAPPING_TYPE, mmap, GET_INFO_V2), GET_INFO_V2, munmap and UNPIN_BUFFER of
/// the same buffer, each phase timed on its own.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ApiPerf {
    /// The buffer's size.
    pub bytes: u64,
    /// With the cache (the re-pin a hit, the unpin lazy), or a pin per use
    /// (`GDRDRV_PIN_FLAG_GDRPEER_NOCACHE`, as gdrdrv).
    pub cached: bool,
    pub pin: Latency,
    pub map: Latency,
    pub get_info: Latency,
    pub unmap: Latency,
    pub unpin: Latency,
    /// The whole iteration (the sum of its phases).
    pub total: Latency,
}

/// A target measured with its operations interleaved ([`crate::interleave`]): a block of each
/// operation per round, so that what the machine does meanwhile weighs on both sides alike.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Interleaved {
    /// The target (`P4`, `P5`, `P7`, `P9`).
    pub id: String,
    /// What was run in turn.
    pub what: String,
    /// Each operation over all rounds.
    pub ops: Vec<Op>,
    /// The repetitions of each operation's block, in the order of `ops`.
    pub blocks: Vec<usize>,
    /// The target from the medians of `ops`.
    pub value: Option<f64>,
    /// The target from each round's medians.
    pub rounds: Vec<f64>,
}

impl Interleaved {
    /// The lower quartile, median and upper quartile of the rounds' figures.
    pub fn quartiles(&self) -> Option<[f64; 3]> {
        let mut r = self.rounds.clone();
        r.sort_by(f64::total_cmp);
        let at = |q: usize| r[(r.len() - 1) * q / 4];
        (!r.is_empty()).then(|| [at(1), at(2), at(3)])
    }

    /// One line: the figure, and how its rounds spread.
    pub fn summary(&self) -> String {
        let value = self.value.map_or("n/a".into(), |v| format!("{v:.2}x"));
        let blocks = self
            .ops
            .iter()
            .zip(&self.blocks)
            .map(|(o, b)| format!("{b} x {}", o.key))
            .collect::<Vec<_>>()
            .join(" + ");
        match self.quartiles() {
            Some([q1, q2, q3]) => format!(
                "{value} over {} rounds of {blocks}; per round {q1:.2}x / {q2:.2}x / {q3:.2}x \
                 (quartiles)",
                self.rounds.len()
            ),
            None => format!("{value} ({blocks}; no round gave a figure)"),
        }
    }
}

/// A whole run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// `uname -r` of the guest.
    pub kernel: String,
    /// The checkers built into that kernel, as far as the guest can see them.
    #[serde(default)]
    pub checkers: String,
    /// gdrpeer's ABI version, `major.minor`.
    pub abi: String,
    /// nvsim's pin cost model: fixed microseconds, and microseconds per 64 KiB page.
    pub pin_cost_us: u64,
    pub pin_cost_per_page_us: u64,
    pub ops: Vec<Op>,
    /// CPU copies through a mapping, 1 B to 4 MiB.
    #[serde(default)]
    pub copies: Vec<CopyPoint>,
    pub scaling: Vec<Point>,
    /// Sizes asked for but not measured, and why.
    pub skipped: Vec<String>,
    /// Closing the file with the most regions cached: its regions and the time it took.
    pub close_regions: u64,
    pub close_ns: u64,
    /// nvsim's own cost in the series of misses (NOCACHE pin + unpin, 64 KiB).
    #[serde(default)]
    pub nv_costs: Vec<NvCost>,
    /// gdrcopy's apiperf loop through `/dev/gdrdrv`, per size, cached and NOCACHE.
    #[serde(default)]
    pub apiperf: Vec<ApiPerf>,
    /// Timed targets measured again with their operations interleaved; where one is here,
    /// its target takes this figure (runs before it have none).
    #[serde(default)]
    pub interleaved: Vec<Interleaved>,
    /// Issue 21's targets as this run met them (what `targets()` computed in the guest;
    /// `table` and `rst` compute them again from the figures).
    #[serde(default)]
    pub targets: Vec<Target>,
}

/// What the targets table's rows measure, printed under it.
const TARGET_NOTES: &str = "\
  (P1: the PIN ioctl alone, its UNPIN untimed; P2, P3: PIN + UNPIN on /dev/gdrpeer, 64 KiB;
   P3: nvsim's get_pages + put_pages per repetition, from its own clock (debugfs nvsim/stats,
   read around each repetition, outside the timing); P4: a random cached region pinned;
   P4b, P4c: nvsim's TOUCH, one cache line of each of 2 (P4c: 1) pages chosen among 16 MiB
   in a system call, less its TOUCH of 2 pages chosen among 2, added to the hit at the
   smallest size: the pages a hit among 65,536 regions reads cold (an index's, the
   region's) cost at least that on this machine, so no index apart from the regions gives
   a P4 below P4b; P4d: P4b with the toll of the 2 cold pages on a hit at the smallest size
   that follows them (TOUCH then hit, timed together, cold against hot);
   P5, P6: at the largest cache size (P6: the most of any size; n/a where gdrpeer does not
   report region_memory_bytes); P5b: P5 with the time spent in gdrpeer's free callback
   (nvsim's clock around the call, the median of a third interleaved series) taken off the
   invalidation: what the free costs besides gdrpeer's callback;
   P7: gdrpeer_mr_pin() + gdrpeer_mr_unpin() of a cached region, called by gdrnic in the
   kernel (REG_LOOP: 16 a system call, timed whole), against the same pin and release
   through /dev/gdrpeer (PIN + UNPIN, cached, both syscalls in); P7b: P7 with gdrpeer
   reloaded with dma_map_keep=0 (no DMA mapping kept for the NIC: each pin maps, each unpin
   unmaps; n/a from a gdrpeer without the parameter); P7c: gdrnic's REG + DEREG, less two
   system calls into gdrnic (its null ioctl), its own bookkeeping and copies to user space
   in; P7d: P7 with REG_LOOP alternating two cached regions, so that no pin is served by
   the registration the last unpin kept (the kernel API's registration cache: design.rst);
   P8: the same through /dev/gdrdrv (PIN_BUFFER_V2, no mmap) and dma-buf export;
   P9: gdrcopy's apiperf loop, pin + gdr_map + get_info + unmap + unpin of one buffer,
   cached against GDRDRV_PIN_FLAG_GDRPEER_NOCACHE (a pin per use, as gdrdrv))";

/// The GPU pages (64 KiB) of each region of the scaling measurements and of P6's target.
pub const PAGES_PER_REGION: u64 = 1;
/// P6: gdrpeer's own memory per cached region, at most this many bytes plus `P6_PER_PAGE`
/// per GPU page.
pub const P6_BASE: u64 = 192;
pub const P6_PER_PAGE: u64 = 8;

fn us(ns: u64) -> String {
    format!("{:.1}", ns as f64 / 1000.0)
}

/// `ns` of `l` in us, or `n/a` where `l` was not measured.
fn measured(l: &Latency, ns: u64) -> String {
    if l.reps == 0 {
        "n/a".into()
    } else {
        us(ns)
    }
}

/// The apiperf table's header.
const APIPERF_HEAD: [&str; 9] = [
    "Size", "Use", "Reps", "pin", "map", "get_info", "unmap", "unpin", "loop",
];

/// Bytes per region, or `n/a`.
fn own(b: Option<u64>) -> String {
    b.map_or("n/a".into(), |b| b.to_string())
}

/// `a / b`, `None` when either is missing or `b` is 0.
pub fn quotient(a: Option<u64>, b: Option<u64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b > 0 => Some(a as f64 / b as f64),
        _ => None,
    }
}

/// gdrnic's REG + DEREG less its two system calls (its null ioctl): a NIC driver's call of
/// gdrpeer_mr_pin() and gdrpeer_mr_unpin() with gdrnic's own bookkeeping in, P7c's numerator.
pub fn kapi_time(reg_dereg: Option<u64>, null: Option<u64>) -> Option<u64> {
    Some(reg_dereg?.saturating_sub(2 * null?))
}

/// `a / b` as a ratio, or `n/a` when either is missing.
fn ratio(a: Option<u64>, b: Option<u64>) -> String {
    match quotient(a, b) {
        Some(q) => format!("{q:.2}x"),
        None => "n/a".into(),
    }
}

/// The median of the operation `key` among `ops`; `None` where it was not measured.
fn median_of(ops: &[Op], key: &str) -> Option<u64> {
    ops.iter()
        .find(|o| o.key == key && o.latency.reps > 0)
        .map(|o| o.latency.median_ns)
}

impl Report {
    /// The median of the operation `key`; `None` where it was not measured.
    fn op(&self, key: &str) -> Option<u64> {
        median_of(&self.ops, key)
    }

    /// The median of the operation `key` of the interleaved measurement `id`, over all its
    /// rounds; `None` where it was not measured so.
    fn inter_op(&self, id: &str, key: &str) -> Option<u64> {
        median_of(&self.interleaved.iter().find(|i| i.id == id)?.ops, key)
    }

    /// P4's floor on this machine (P4b, P4c): the hit at the smallest size with what the cold
    /// pages of TOUCH's series `cold` cost more than two hot ones, over that hit.
    fn p4_floor(&self, cold: &str) -> Option<f64> {
        self.p4_floor_with(cold, "touch_hot")
    }

    /// [`Report::p4_floor`] with `hot` the series that reads hot pages (P4d's: each followed
    /// by a hit at the smallest size).
    fn p4_floor_with(&self, cold: &str, hot: &str) -> Option<f64> {
        let few = self.inter_op("P4", "hit_smallest")?;
        let extra = self
            .inter_op("P4", cold)?
            .saturating_sub(self.inter_op("P4", hot)?);
        quotient(Some(few + extra), Some(few))
    }

    /// The median of nvsim's get_pages + put_pages in the series `key`, when each of its
    /// repetitions made one of each.
    fn nv_median(&self, key: &str) -> Option<u64> {
        self.nv_costs
            .iter()
            .find(|c| c.key == key && c.one_each())
            .map(|c| c.nvsim.median_ns)
    }

    /// Issue 21's targets, from this run's figures.
    pub fn targets(&self) -> Vec<Target> {
        use Bound::{AtLeast, AtMost, Reported};
        let op = |k: &str| self.op(k);
        let (lo, hi) = (self.scaling.first(), self.scaling.last());
        let regions = |p: Option<&Point>| p.map_or(0, |p| p.regions);
        // Two sizes at least, or the quotient is 1 by construction.
        let (lo_hit, hi_hit) = match self.scaling.len() {
            0 | 1 => (None, None),
            _ => (lo.map(|p| p.hit.median_ns), hi.map(|p| p.hit.median_ns)),
        };
        let own = self.scaling.iter().filter_map(|p| p.own_per_region).max();
        // An operation measured interleaved with a target's (the median of all its rounds),
        // or else alone.
        let iop = |id: &str, key: &str| self.inter_op(id, key).or_else(|| op(key));
        let p6 = P6_BASE + P6_PER_PAGE * PAGES_PER_REGION;
        // A target measured interleaved takes that figure.
        let inter =
            |id: &str, apart: Option<f64>| match self.interleaved.iter().find(|i| i.id == id) {
                Some(i) => i.value,
                None => apart,
            };
        let mut t = vec![
            Target::new(
                "P1",
                "PIN cache hit / null ioctl (GET_VERSION)".into(),
                quotient(op("hit"), op("null")),
                "x",
                AtMost(1.2),
            ),
            Target::new(
                "P2",
                "pin-per-use (NOCACHE PIN + UNPIN) / cached reuse (PIN hit + UNPIN), 64 KiB".into(),
                quotient(op("reuse_nocache_64k"), op("reuse_cached_64k")),
                "x",
                AtLeast(50.0),
            ),
            Target::new(
                "P3",
                "miss: NOCACHE PIN + UNPIN / nvsim's get_pages + put_pages, 64 KiB".into(),
                quotient(op("reuse_nocache_64k"), self.nv_median("reuse_nocache_64k")),
                "x",
                AtMost(1.05),
            ),
            Target::new(
                "P4",
                format!(
                    "hit at {} cached regions / hit at {}",
                    regions(hi),
                    regions(lo)
                ),
                inter("P4", quotient(hi_hit, lo_hit)),
                "x",
                AtMost(1.2),
            ),
            Target::new(
                "P4b",
                "P4's floor here: (hit at the smallest size + what 2 pages no recent call read \
                 cost: TOUCH of 2 cold - of 2 hot) / hit at the smallest size"
                    .into(),
                self.p4_floor("touch_cold"),
                "x",
                Reported,
            ),
            Target::new(
                "P4c",
                "P4b for 1 page (TOUCH of 1 cold and 1 hot - of 2 hot)".into(),
                self.p4_floor("touch_cold_one"),
                "x",
                Reported,
            ),
            Target::new(
                "P4d",
                "P4b with what the 2 cold pages cost the hit after them: (hit at the smallest \
                 size + (TOUCH of 2 cold, then that hit) - (TOUCH of 2 hot, then that hit)) / \
                 hit at the smallest size"
                    .into(),
                self.p4_floor_with("cold_then_hit", "hot_then_hit"),
                "x",
                Reported,
            ),
            Target::new(
                "P5",
                format!(
                    "cuMemFree: pinned (invalidation) / unpinned, {} regions cached",
                    regions(hi)
                ),
                inter(
                    "P5",
                    quotient(
                        hi.map(|p| p.invalidate.median_ns),
                        hi.map(|p| p.free_unpinned.median_ns),
                    ),
                ),
                "x",
                AtMost(1.1),
            ),
            Target::new(
                "P5b",
                "P5 less gdrpeer's free callback (nvsim's clock): invalidation - callback / \
                 unpinned"
                    .into(),
                quotient(
                    iop("P5", "invalidate")
                        .zip(self.inter_op("P5", "invalidate_callback"))
                        .map(|(i, cb)| i.saturating_sub(cb)),
                    iop("P5", "free_unpinned"),
                ),
                "x",
                Reported,
            ),
            Target::new(
                "P6",
                "gdrpeer's own bytes per cached 64 KiB region (its accounting)".into(),
                own.map(|b| b as f64),
                "B",
                AtMost(p6 as f64),
            ),
            Target::new(
                "P7",
                "kernel-API hit (gdrpeer_mr_pin + _unpin in the NIC) / PIN + UNPIN hit".into(),
                quotient(iop("P7", "nic_kapi_hit"), iop("P7", "reuse_cached_64k")),
                "x",
                AtMost(0.5),
            ),
            Target::new(
                "P7b",
                "P7 without the mapping cache (gdrpeer loaded with dma_map_keep=0)".into(),
                quotient(op("nic_kapi_hit_nokeep"), iop("P7", "reuse_cached_64k")),
                "x",
                Reported,
            ),
            Target::new(
                "P7c",
                "the NIC's REG + DEREG less 2 null ioctls / PIN + UNPIN hit".into(),
                quotient(
                    kapi_time(iop("P7", "nic_reg_hit"), iop("P7", "nic_null")),
                    iop("P7", "reuse_cached_64k"),
                ),
                "x",
                Reported,
            ),
            Target::new(
                "P7d",
                "P7 with registrations alternating two regions (none reuses the last one)".into(),
                quotient(
                    iop("P7", "nic_kapi_hit_alternating"),
                    iop("P7", "reuse_cached_64k"),
                ),
                "x",
                Reported,
            ),
            Target::new(
                "P8a",
                "gdrdrv: PIN_BUFFER_V2 hit / null ioctl (GET_VERSION)".into(),
                quotient(op("gdrdrv_hit"), op("gdrdrv_null")),
                "x",
                Reported,
            ),
            Target::new(
                "P8b",
                "gdrdrv: NOCACHE pin + unpin / cached pin + unpin, 64 KiB".into(),
                quotient(
                    op("gdrdrv_reuse_nocache_64k"),
                    op("gdrdrv_reuse_cached_64k"),
                ),
                "x",
                Reported,
            ),
            Target::new(
                "P8c",
                "gdrdrv: miss (NOCACHE pin + unpin) / nvsim's get_pages + put_pages".into(),
                quotient(
                    op("gdrdrv_reuse_nocache_64k"),
                    self.nv_median("gdrdrv_reuse_nocache_64k"),
                ),
                "x",
                Reported,
            ),
            Target::new(
                "P8d",
                "dma-buf: EXPORT_DMABUF + close, cached region / null ioctl".into(),
                quotient(op("dmabuf_export_close"), op("null")),
                "x",
                Reported,
            ),
            Target::new(
                "P8e",
                "dma-buf: miss (NOCACHE pin, export, import, unpin) / hit, 64 KiB".into(),
                quotient(op("dmabuf_miss"), op("dmabuf_hit")),
                "x",
                Reported,
            ),
            Target::new(
                "P9",
                "gdrdrv apiperf loop, 64 KiB: cached / pin-per-use (NOCACHE)".into(),
                inter(
                    "P9",
                    quotient(op("apiperf_cached_64kib"), op("apiperf_nocache_64kib")),
                ),
                "x",
                AtMost(0.2),
            ),
        ];
        if let Some(r) = t.iter_mut().find(|x| x.id == "P6") {
            r.target = format!("<= {p6} B ({P6_BASE} + {P6_PER_PAGE}/page)");
        }
        for (row, like) in [
            ("P4b", "P4"),
            ("P4c", "P4"),
            ("P4d", "P4"),
            ("P5b", "P5"),
            ("P7b", "P7"),
            ("P7c", "P7"),
            ("P7d", "P7"),
            ("P8a", "P1"),
            ("P8b", "P2"),
            ("P8c", "P3"),
            ("P8d", "P1"),
            ("P8e", "P2"),
        ] {
            let of = t.iter().find(|x| x.id == like).map(|x| x.target.clone());
            if let (Some(of), Some(r)) = (of, t.iter_mut().find(|x| x.id == row)) {
                r.target = format!("reported ({like}: {of})");
            }
        }
        t
    }

    fn point(&self, first: bool, f: impl Fn(&Point) -> u64) -> Option<u64> {
        let p = if first {
            self.scaling.first()
        } else {
            self.scaling.last()
        };
        p.map(f)
    }

    /// The questions the benchmarks answer: (question, ratio of medians).
    pub fn ratios(&self) -> Vec<(String, String)> {
        let (lo, hi) = (
            self.scaling.first().map_or(0, |p| p.regions),
            self.scaling.last().map_or(0, |p| p.regions),
        );
        vec![
            (
                "cache hit vs null ioctl".into(),
                ratio(self.op("hit"), self.op("null")),
            ),
            (
                "pin-per-use (NOCACHE) vs cached reuse, 64 KiB".into(),
                ratio(self.op("reuse_nocache_64k"), self.op("reuse_cached_64k")),
            ),
            (
                "pin-per-use (NOCACHE) vs cached reuse, 1 MiB".into(),
                ratio(self.op("reuse_nocache_1m"), self.op("reuse_cached_1m")),
            ),
            (
                format!("hit at {hi} regions vs {lo}"),
                ratio(
                    self.point(false, |p| p.hit.median_ns),
                    self.point(true, |p| p.hit.median_ns),
                ),
            ),
            (
                format!("invalidation at {hi} regions vs {lo}"),
                ratio(
                    self.point(false, |p| p.invalidate.median_ns),
                    self.point(true, |p| p.invalidate.median_ns),
                ),
            ),
            (
                "user-space tag check + hit vs kernel hit".into(),
                ratio(self.op("tag_check_hit"), self.op("hit")),
            ),
            (
                "gdrdrv pin + map + unpin: NOCACHE vs cached, 64 KiB".into(),
                ratio(
                    self.op("gdrdrv_nocache_64kib"),
                    self.op("gdrdrv_cached_64kib"),
                ),
            ),
            (
                "gdrdrv pin + map + unpin: NOCACHE vs cached, 4 MiB".into(),
                ratio(
                    self.op("gdrdrv_nocache_4mib"),
                    self.op("gdrdrv_cached_4mib"),
                ),
            ),
            (
                "dma-buf hit vs kernel-API registration hit".into(),
                ratio(self.op("dmabuf_hit"), self.op("nic_reg_hit")),
            ),
            (
                "dma-buf hit (kernel-API export) vs kernel-API hit".into(),
                ratio(self.op("dmabuf_kapi_hit"), self.op("nic_reg_hit")),
            ),
            (
                "dma-buf miss (NOCACHE pin per use) vs dma-buf hit".into(),
                ratio(self.op("dmabuf_miss"), self.op("dmabuf_hit")),
            ),
            (
                "NIC REG + DEREG vs PIN + UNPIN (2 ioctls each), 64 KiB".into(),
                ratio(self.op("nic_reg_hit"), self.op("reuse_cached_64k")),
            ),
            (
                "kernel-API hit in the NIC vs PIN + UNPIN (2 ioctls), 64 KiB".into(),
                ratio(self.op("nic_kapi_hit"), self.op("reuse_cached_64k")),
            ),
            (
                "kernel-API hit in the NIC: no mapping cache vs mapping cache".into(),
                ratio(self.op("nic_kapi_hit_nokeep"), self.op("nic_kapi_hit")),
            ),
            (
                "apiperf loop: cached vs NOCACHE, 1 MiB".into(),
                ratio(
                    self.op("apiperf_cached_1mib"),
                    self.op("apiperf_nocache_1mib"),
                ),
            ),
            (
                "apiperf loop: cached vs NOCACHE, 4 MiB".into(),
                ratio(
                    self.op("apiperf_cached_4mib"),
                    self.op("apiperf_nocache_4mib"),
                ),
            ),
        ]
    }

    /// The apiperf loop as rows: size, use, reps, then mean / median of each phase and of
    /// the whole iteration (us).
    fn apiperf_rows(&self) -> Vec<Vec<String>> {
        let mm = |l: &Latency| format!("{} / {}", us(l.mean_ns), us(l.median_ns));
        self.apiperf
            .iter()
            .map(|a| {
                vec![
                    crate::mapping::size_label(a.bytes as usize),
                    if a.cached { "cached" } else { "NOCACHE" }.into(),
                    a.total.reps.to_string(),
                    mm(&a.pin),
                    mm(&a.map),
                    mm(&a.get_info),
                    mm(&a.unmap),
                    mm(&a.unpin),
                    mm(&a.total),
                ]
            })
            .collect()
    }

    /// nvsim's cost in the misses, a line each.
    fn nv_lines(&self) -> Vec<String> {
        self.nv_costs
            .iter()
            .map(|c| {
                let what = self
                    .ops
                    .iter()
                    .find(|o| o.key == c.key)
                    .map_or(c.key.as_str(), |o| o.what.as_str());
                let calls = if c.one_each() {
                    String::new()
                } else {
                    format!(
                        "; NOT one get_pages and one put_pages a repetition: {} and {} in {}",
                        c.get_calls, c.put_calls, c.nvsim.reps
                    )
                };
                format!(
                    "{what}: nvsim's get_pages + put_pages {} us (p99 {}); the client's \
                     overhead per miss {} us (p99 {}){calls}",
                    us(c.nvsim.median_ns),
                    us(c.nvsim.p99_ns),
                    us(c.overhead.median_ns),
                    us(c.overhead.p99_ns),
                )
            })
            .collect()
    }

    /// The plain-text table printed by `run` and `render`.
    pub fn table(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "gdrpeer-bench: kernel {} ({}), gdrpeer ABI {}, nvsim pin cost {} us + {} us/page",
            self.kernel, self.checkers, self.abi, self.pin_cost_us, self.pin_cost_per_page_us
        );
        let _ = writeln!(
            s,
            "\n{:<66} {:>8} {:>12} {:>12}",
            "operation", "reps", "median us", "p99 us"
        );
        for o in &self.ops {
            let _ = writeln!(
                s,
                "{:<66} {:>8} {:>12} {:>12}",
                o.what,
                o.latency.reps,
                measured(&o.latency, o.latency.median_ns),
                measured(&o.latency, o.latency.p99_ns)
            );
        }
        if !self.apiperf.is_empty() {
            let _ = writeln!(
                s,
                "\ngdrcopy apiperf loop through /dev/gdrdrv (us, mean / median per iteration):"
            );
            let head = APIPERF_HEAD.map(String::from).to_vec();
            for r in std::iter::once(head).chain(self.apiperf_rows()) {
                let _ = writeln!(
                    s,
                    "{:<7} {:<7} {:>5} {:>15} {:>15} {:>13} {:>13} {:>13} {:>15}",
                    r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8]
                );
            }
            let _ = writeln!(
                s,
                "(map: gdr_map, i.e. REQ_MAPPING_TYPE + mmap + GET_INFO_V2; get_info: GET_INFO_V2; \
                 unmap: munmap; NOCACHE: GDRDRV_PIN_FLAG_GDRPEER_NOCACHE, a pin per use)"
            );
        }
        if !self.copies.is_empty() {
            let _ = writeln!(
                s,
                "\n{:>8} {:>12} {:>12} {:>12} {:>12}",
                "bytes", "write us", "write MB/s", "read us", "read MB/s"
            );
            for p in &self.copies {
                let _ = writeln!(
                    s,
                    "{:>8} {:>12} {:>12.1} {:>12} {:>12.1}",
                    p.bytes,
                    us(p.write.median_ns),
                    mb_per_s(p.bytes, &p.write),
                    us(p.read.median_ns),
                    mb_per_s(p.bytes, &p.read)
                );
            }
            let _ = writeln!(
                s,
                "(CPU copies through a mapping of pinned GPU memory: medians; MB/s = 10^6 B/s)"
            );
        }
        let _ = writeln!(
            s,
            "\n{:>8} {:>11} {:>11} {:>13} {:>13} {:>13} {:>13} {:>10} {:>10}",
            "regions",
            "hit med",
            "hit p99",
            "inval med",
            "inval p99",
            "free med",
            "free p99",
            "slab/reg",
            "own/reg"
        );
        for p in &self.scaling {
            let _ = writeln!(
                s,
                "{:>8} {:>11} {:>11} {:>13} {:>13} {:>13} {:>13} {:>10} {:>10}",
                p.regions,
                us(p.hit.median_ns),
                us(p.hit.p99_ns),
                us(p.invalidate.median_ns),
                us(p.invalidate.p99_ns),
                us(p.free_unpinned.median_ns),
                us(p.free_unpinned.p99_ns),
                p.slab_per_region,
                own(p.own_per_region)
            );
        }
        let _ = writeln!(
            s,
            "(us; inval: cuMemFree of a pinned 64 KiB buffer, free: of an unpinned one; \
             slab/reg: bytes of slab grown per region; own/reg: gdrpeer's own bytes per \
             region, by its accounting)"
        );
        let nv = self.nv_lines();
        if !nv.is_empty() {
            let _ = writeln!(s, "\nnvsim's own cost in a miss (medians per repetition):");
            for l in nv {
                let _ = writeln!(s, "  {l}");
            }
        }
        if self.close_regions > 0 {
            let _ = writeln!(
                s,
                "close with {} regions cached: {} ms ({} us per region)",
                self.close_regions,
                us(self.close_ns * 1000 / 1_000_000),
                us(self.close_ns / self.close_regions)
            );
        }
        for why in &self.skipped {
            let _ = writeln!(s, "skipped: {why}");
        }
        let _ = writeln!(s, "\nratios (of medians):");
        for (q, r) in self.ratios() {
            let _ = writeln!(s, "  {q:<52} {r:>9}");
        }
        let targets = self.targets();
        let w = targets.iter().map(|t| t.what.len()).max().unwrap_or(0);
        let _ = writeln!(s, "\ntargets (issue 21; ratios of medians):");
        let _ = writeln!(
            s,
            "  {:<4} {:<w$} {:>9}  {:<26} met",
            "", "figure", "now", "target"
        );
        for t in targets {
            let _ = writeln!(
                s,
                "  {:<4} {:<w$} {:>9}  {:<26} {}",
                t.id,
                t.what,
                t.figure(),
                t.target,
                t.verdict()
            );
        }
        let _ = writeln!(s, "{TARGET_NOTES}");
        if !self.interleaved.is_empty() {
            let _ = writeln!(
                s,
                "\ninterleaved (the targets above take these figures; medians of all rounds):"
            );
            for i in &self.interleaved {
                let _ = writeln!(s, "  {} {}: {}", i.id, i.what, i.summary());
            }
        }
        s
    }

    /// The same as rst tables, for Documentation/dev/performance.rst.
    pub fn rst(&self) -> String {
        let mut rows: Vec<Vec<String>> = vec![vec![
            "Operation".into(),
            "Reps".into(),
            "Median (us)".into(),
            "p99 (us)".into(),
        ]];
        for o in &self.ops {
            rows.push(vec![
                o.what.clone(),
                o.latency.reps.to_string(),
                measured(&o.latency, o.latency.median_ns),
                measured(&o.latency, o.latency.p99_ns),
            ]);
        }
        let mut s = rst_table(&rows);
        if !self.apiperf.is_empty() {
            let mut rows = vec![APIPERF_HEAD.map(String::from).to_vec()];
            rows.extend(self.apiperf_rows());
            s.push('\n');
            s.push_str(&rst_table(&rows));
        }
        if !self.copies.is_empty() {
            let mut rows: Vec<Vec<String>> = vec![vec![
                "Bytes".into(),
                "Write median (us)".into(),
                "Write MB/s".into(),
                "Read median (us)".into(),
                "Read MB/s".into(),
            ]];
            for p in &self.copies {
                rows.push(vec![
                    p.bytes.to_string(),
                    us(p.write.median_ns),
                    format!("{:.1}", mb_per_s(p.bytes, &p.write)),
                    us(p.read.median_ns),
                    format!("{:.1}", mb_per_s(p.bytes, &p.read)),
                ]);
            }
            s.push('\n');
            s.push_str(&rst_table(&rows));
        }
        let mut rows: Vec<Vec<String>> = vec![vec![
            "Regions".into(),
            "Hit median".into(),
            "Hit p99".into(),
            "Invalidation median".into(),
            "Invalidation p99".into(),
            "Free (unpinned) median".into(),
            "Slab bytes per region".into(),
            "gdrpeer's own bytes per region".into(),
        ]];
        for p in &self.scaling {
            rows.push(vec![
                p.regions.to_string(),
                us(p.hit.median_ns),
                us(p.hit.p99_ns),
                us(p.invalidate.median_ns),
                us(p.invalidate.p99_ns),
                us(p.free_unpinned.median_ns),
                p.slab_per_region.to_string(),
                own(p.own_per_region),
            ]);
        }
        s.push('\n');
        s.push_str(&rst_table(&rows));
        if !self.nv_costs.is_empty() {
            let mut rows: Vec<Vec<String>> = vec![vec![
                "Miss (64 KiB)".into(),
                "Reps".into(),
                "Miss median (us)".into(),
                "nvsim get_pages + put_pages median (us)".into(),
                "Overhead median (us)".into(),
                "Overhead p99 (us)".into(),
            ]];
            for c in &self.nv_costs {
                let what = self
                    .ops
                    .iter()
                    .find(|o| o.key == c.key)
                    .map_or(c.key.clone(), |o| o.what.clone());
                rows.push(vec![
                    what,
                    c.nvsim.reps.to_string(),
                    self.op(&c.key).map_or("n/a".into(), us),
                    us(c.nvsim.median_ns),
                    us(c.overhead.median_ns),
                    us(c.overhead.p99_ns),
                ]);
            }
            s.push('\n');
            s.push_str(&rst_table(&rows));
        }
        let mut rows: Vec<Vec<String>> = vec![vec!["Question".into(), "Ratio of medians".into()]];
        for (q, r) in self.ratios() {
            rows.push(vec![q, r]);
        }
        s.push('\n');
        s.push_str(&rst_table(&rows));
        let mut rows: Vec<Vec<String>> = vec![vec![
            "Target".into(),
            "Figure".into(),
            "Now".into(),
            "Issue 21".into(),
            "Met".into(),
        ]];
        for t in self.targets() {
            rows.push(vec![
                t.id.clone(),
                t.what.clone(),
                t.figure(),
                t.target.clone(),
                t.verdict().into(),
            ]);
        }
        s.push('\n');
        s.push_str(&rst_table(&rows));
        if !self.interleaved.is_empty() {
            let mut rows: Vec<Vec<String>> = vec![vec![
                "Target".into(),
                "Interleaved".into(),
                "Figure, rounds".into(),
            ]];
            for i in &self.interleaved {
                rows.push(vec![i.id.clone(), i.what.clone(), i.summary()]);
            }
            s.push('\n');
            s.push_str(&rst_table(&rows));
        }
        s
    }
}

/// A simple rst table; the first row is the header.
fn rst_table(rows: &[Vec<String>]) -> String {
    let widths: Vec<usize> = (0..rows[0].len())
        .map(|c| rows.iter().map(|r| r[c].len()).max().unwrap_or(0))
        .collect();
    let rule = widths
        .iter()
        .map(|w| "=".repeat(*w))
        .collect::<Vec<_>>()
        .join("  ");
    let line = |r: &Vec<String>| {
        r.iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_string()
    };
    let mut s = format!("{rule}\n{}\n{rule}\n", line(&rows[0]));
    for r in &rows[1..] {
        s.push_str(&line(r));
        s.push('\n');
    }
    s.push_str(&rule);
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_p99() {
        let l = Latency::of((1..=100).rev().collect());
        assert_eq!(l.reps, 100);
        assert_eq!(l.median_ns, 51);
        assert_eq!(l.p99_ns, 99);
        let one = Latency::of(vec![7]);
        assert_eq!((one.median_ns, one.p99_ns), (7, 7));
        assert_eq!(Latency::of(vec![]), Latency::default());
    }

    fn lat(median_ns: u64) -> Latency {
        Latency {
            reps: 10,
            median_ns,
            p99_ns: median_ns * 2,
            mean_ns: median_ns + 1,
        }
    }

    #[test]
    fn ratios_divide_the_right_medians() {
        let op = |key: &str, ns| Op {
            key: key.into(),
            what: key.into(),
            latency: lat(ns),
        };
        let point = |regions, hit, invalidate| Point {
            regions,
            hit: lat(hit),
            invalidate: lat(invalidate),
            free_unpinned: lat(invalidate / 2),
            slab_per_region: 0,
            own_per_region: Some(regions / 100 + 150),
        };
        let r = Report {
            kernel: "k".into(),
            checkers: "none".into(),
            abi: "1.1".into(),
            pin_cost_us: 100,
            pin_cost_per_page_us: 1,
            ops: vec![
                op("null", 2000),
                op("hit", 5000),
                op("reuse_cached_64k", 10_000),
                op("reuse_nocache_64k", 250_000),
                op("tag_check_hit", 7500),
                op("gdrdrv_cached_64kib", 20_000),
                op("gdrdrv_nocache_64kib", 300_000),
                op("nic_reg_hit", 8000),
                op("nic_kapi_hit", 4000),
                op("nic_kapi_hit_alternating", 7000),
                op("dmabuf_hit", 20_000),
                op("dmabuf_miss", 400_000),
                op("nic_null", 1000),
                op("gdrdrv_null", 2000),
                op("gdrdrv_hit", 2200),
                op("dmabuf_export_close", 3000),
                op("apiperf_cached_64kib", 30_000),
                op("apiperf_nocache_64kib", 200_000),
                Op {
                    latency: Latency::default(),
                    ..op("nic_kapi_hit_nokeep", 0)
                },
            ],
            copies: vec![CopyPoint {
                bytes: 4096,
                write: lat(2048),
                read: lat(8192),
            }],
            scaling: vec![point(16, 4000, 300_000), point(65536, 6000, 330_000)],
            skipped: vec![],
            close_regions: 0,
            close_ns: 0,
            nv_costs: vec![NvCost {
                key: "reuse_nocache_64k".into(),
                get_calls: 10,
                put_calls: 10,
                nvsim: lat(240_000),
                overhead: lat(10_000),
            }],
            apiperf: vec![ApiPerf {
                bytes: 65536,
                cached: true,
                pin: lat(2000),
                map: lat(14_000),
                get_info: lat(800),
                unmap: lat(11_000),
                unpin: lat(3000),
                total: lat(30_000),
            }],
            // P5 measured interleaved: its figure, and P5b's from its medians; P4's TOUCH
            // series.
            interleaved: vec![
                Interleaved {
                    id: "P4".into(),
                    what: "P4".into(),
                    ops: vec![
                        op("hit_largest", 6000),
                        op("hit_smallest", 4000),
                        op("touch_hot", 1500),
                        op("touch_cold", 2700),
                        op("touch_cold_one", 2000),
                        op("hot_then_hit", 5500),
                        op("cold_then_hit", 7500),
                    ],
                    blocks: vec![200, 200, 200, 200, 200, 200, 200],
                    value: Some(1.5),
                    rounds: vec![],
                },
                Interleaved {
                    id: "P5".into(),
                    what: "P5".into(),
                    ops: vec![
                        op("invalidate", 300_000),
                        op("free_unpinned", 150_000),
                        op("invalidate_callback", 90_000),
                    ],
                    blocks: vec![12, 12, 12],
                    value: Some(1.9),
                    rounds: vec![],
                },
            ],
            targets: vec![],
        };
        let got: Vec<String> = r.ratios().into_iter().map(|(_, v)| v).collect();
        assert_eq!(
            got,
            [
                "2.50x", "25.00x", "n/a", "1.50x", "1.10x", "1.50x", "15.00x", "n/a", "2.50x",
                "n/a", "20.00x", "0.80x", "0.40x", "n/a", "n/a", "n/a"
            ]
            .map(String::from)
        );
        let targets = r.targets();
        let figures: Vec<(String, String, &str)> = targets
            .iter()
            .map(|t| (t.id.clone(), t.figure(), t.verdict()))
            .collect();
        let want = [
            ("P1", "2.50x", "NO"),
            ("P2", "25.00x", "NO"),
            ("P3", "1.04x", "yes"),
            ("P4", "1.50x", "NO"),
            // (4000 + 2700 - 1500) / 4000.
            ("P4b", "1.30x", "-"),
            // (4000 + 2000 - 1500) / 4000.
            ("P4c", "1.12x", "-"),
            // (4000 + 7500 - 5500) / 4000.
            ("P4d", "1.50x", "-"),
            // The interleaved figure.
            ("P5", "1.90x", "NO"),
            // (300000 - 90000) / 150000.
            ("P5b", "1.40x", "-"),
            // 65536 / 100 + 150 at the larger size, 150 at the smaller: the most.
            ("P6", "805 B", "NO"),
            // 4000 / 10000.
            ("P7", "0.40x", "yes"),
            // Not measured (reps 0): n/a, not a figure of 0.
            ("P7b", "n/a", "-"),
            // (8000 - 2 * 1000) / 10000.
            ("P7c", "0.60x", "-"),
            ("P7d", "0.70x", "-"),
            ("P8a", "1.10x", "-"),
            ("P8b", "n/a", "-"),
            ("P8c", "n/a", "-"),
            ("P8d", "1.50x", "-"),
            ("P8e", "20.00x", "-"),
            // 30000 / 200000.
            ("P9", "0.15x", "yes"),
        ];
        assert_eq!(
            figures,
            want.map(|(a, b, c)| (a.to_string(), b.to_string(), c))
        );
        assert_eq!(targets[4].target, "reported (P4: <= 1.2x)");
        assert_eq!(targets[6].target, "reported (P4: <= 1.2x)");
        assert_eq!(targets[8].target, "reported (P5: <= 1.1x)");
        assert_eq!(targets[9].target, "<= 200 B (192 + 8/page)");
        assert_eq!(targets[11].target, "reported (P7: <= 0.5x)");
        assert_eq!(targets[12].target, "reported (P7: <= 0.5x)");
        assert_eq!(targets[13].target, "reported (P7: <= 0.5x)");
        assert_eq!(targets[14].target, "reported (P1: <= 1.2x)");
        assert_eq!(targets[19].target, "<= 0.2x");
        // The apiperf phases, mean / median; the unmeasured row as n/a.
        let table = r.table();
        assert!(
            table.contains("64 KiB  cached     10       2.0 / 2.0     14.0 / 14.0"),
            "{table}"
        );
        assert!(table.contains("no mapping cache"), "{table}");
        assert!(
            table
                .lines()
                .any(|l| l.starts_with("nic_kapi_hit_nokeep") && l.ends_with("n/a")),
            "{table}"
        );
        assert!(r.rst().contains("get_info"));
        assert!(
            r.table().contains("P3   miss: NOCACHE PIN + UNPIN"),
            "{}",
            r.table()
        );
        assert!(r.table().contains("overhead per miss 10.0 us"));
        assert!(r.table().contains("hit at 65536 regions vs 16"));
        // 4096 B in 2.048 us and 8.192 us.
        assert!(r.table().contains("2000.0"), "{}", r.table());
        assert!(r.table().contains("500.0"));
        let json = serde_json::to_string(&r).unwrap();
        assert_eq!(serde_json::from_str::<Report>(&json).unwrap(), r);
        assert!(r.rst().contains("=====  ====="));
        // A target measured interleaved takes that figure; the others keep theirs.
        let mut r = r;
        r.interleaved.retain(|i| i.id != "P4");
        r.interleaved.push(Interleaved {
            id: "P4".into(),
            what: "hits".into(),
            ops: vec![op("hit_largest", 4400), op("hit_smallest", 4000)],
            blocks: vec![100, 100],
            value: Some(1.1),
            rounds: vec![1.3, 1.0, 1.1, 1.2, 0.9],
        });
        let t = r.targets();
        assert_eq!((t[3].figure(), t[3].verdict()), ("1.10x".into(), "yes"));
        assert_eq!(t[4].figure(), "n/a");
        assert_eq!(t[7].figure(), "1.90x");
        assert!(
            r.table().contains(
                "P4 hits: 1.10x over 5 rounds of 100 x hit_largest + 100 x hit_smallest; \
                 per round 1.00x / 1.10x / 1.20x (quartiles)"
            ),
            "{}",
            r.table()
        );
        assert!(r.rst().contains("gdrpeer's own bytes per region"));
        assert!(r.rst().contains("P8e"));
    }

    #[test]
    fn a_miss_counted_twice_is_not_compared() {
        let c = NvCost {
            key: "k".into(),
            get_calls: 10,
            put_calls: 9,
            nvsim: lat(1),
            overhead: lat(1),
        };
        assert!(!c.one_each());
        assert!(NvCost { put_calls: 10, ..c }.one_each());
    }

    #[test]
    fn targets_met_at_the_bound() {
        let at = |bound, v| Target::new("P", String::new(), Some(v), "x", bound).met;
        assert_eq!(at(Bound::AtMost(1.2), 1.2), Some(true));
        assert_eq!(at(Bound::AtMost(1.2), 1.21), Some(false));
        assert_eq!(at(Bound::AtLeast(50.0), 49.9), Some(false));
        assert_eq!(at(Bound::Reported, 3.0), None);
        let none = Target::new("P", String::new(), None, "B", Bound::AtMost(200.0));
        assert_eq!((none.figure().as_str(), none.verdict()), ("n/a", "-"));
    }

    /// Runs of earlier versions (Documentation/dev/perf) still render, targets included.
    #[test]
    fn old_runs_render() {
        for text in [
            include_str!("../../../Documentation/dev/perf/bench.json"),
            include_str!("../../../Documentation/dev/perf/bench-bc12847.json"),
            include_str!("../../../Documentation/dev/perf/bench-b7c6aa2.json"),
            include_str!("../../../Documentation/dev/perf/bench-c5674e6.json"),
            include_str!("../../../Documentation/dev/perf/bench-9c99097.json"),
            include_str!("../../../Documentation/dev/perf/bench-mapping.json"),
            include_str!("../../../Documentation/dev/perf/bench-dmabuf.json"),
            include_str!("../../../Documentation/dev/perf/bench-2787d1b.json"),
            include_str!("../../../Documentation/dev/perf/bench-d7614ef-i4.json"),
        ] {
            let r: Report = serde_json::from_str(text).unwrap();
            assert!(r.table().contains("targets (issue 21"));
            assert!(r.rst().contains("P8e"));
            assert_eq!(r.targets().len(), 20);
        }
        // A run with interleaved targets: they take those figures, and the table lists them.
        let r: Report = serde_json::from_str(include_str!(
            "../../../Documentation/dev/perf/bench-d7614ef-i4.json"
        ))
        .unwrap();
        // Before REG_LOOP, P7 interleaved was the NIC's REG + DEREG (now P7c's figure).
        let p7 = r.interleaved.iter().find(|i| i.id == "P7").unwrap();
        assert_eq!(r.targets()[10].value, None);
        assert_eq!(r.targets()[12].id, "P7c");
        assert_eq!(r.targets()[12].value, p7.value);
        assert_eq!(p7.rounds.len(), 25);
        assert!(r.table().contains("\ninterleaved ("), "{}", r.table());
    }
}
