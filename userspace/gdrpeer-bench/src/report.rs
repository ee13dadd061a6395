// SPDX-License-Identifier: GPL-2.0

//! What a run measured (written as JSON in the guest, read back on the host), and how it is
//! shown: the table, the ratios the benchmarks exist to answer, and an rst version of both.

use crate::mapping::mb_per_s;
use serde::{Deserialize, Serialize};
use std::fmt::Write;

/// The median and 99th percentile of one operation's latency.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Latency {
    /// Timed repetitions (after a few untimed ones).
    pub reps: usize,
    /// Nanoseconds.
    pub median_ns: u64,
    /// Nanoseconds.
    pub p99_ns: u64,
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
}

fn us(ns: u64) -> String {
    format!("{:.1}", ns as f64 / 1000.0)
}

/// `a / b` as a ratio, or `n/a` when either is missing.
fn ratio(a: Option<u64>, b: Option<u64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b > 0 => format!("{:.2}x", a as f64 / b as f64),
        _ => "n/a".into(),
    }
}

impl Report {
    fn op(&self, key: &str) -> Option<u64> {
        self.ops
            .iter()
            .find(|o| o.key == key)
            .map(|o| o.latency.median_ns)
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
        ]
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
            "\n{:<58} {:>8} {:>12} {:>12}",
            "operation", "reps", "median us", "p99 us"
        );
        for o in &self.ops {
            let _ = writeln!(
                s,
                "{:<58} {:>8} {:>12} {:>12}",
                o.what,
                o.latency.reps,
                us(o.latency.median_ns),
                us(o.latency.p99_ns)
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
            "\n{:>8} {:>11} {:>11} {:>13} {:>13} {:>13} {:>13} {:>10}",
            "regions",
            "hit med",
            "hit p99",
            "inval med",
            "inval p99",
            "free med",
            "free p99",
            "slab/reg"
        );
        for p in &self.scaling {
            let _ = writeln!(
                s,
                "{:>8} {:>11} {:>11} {:>13} {:>13} {:>13} {:>13} {:>10}",
                p.regions,
                us(p.hit.median_ns),
                us(p.hit.p99_ns),
                us(p.invalidate.median_ns),
                us(p.invalidate.p99_ns),
                us(p.free_unpinned.median_ns),
                us(p.free_unpinned.p99_ns),
                p.slab_per_region
            );
        }
        let _ = writeln!(
            s,
            "(us; inval: cuMemFree of a pinned 64 KiB buffer, free: of an unpinned one; \
             slab/reg: bytes)"
        );
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
        s
    }

    /// The same as rst tables, for Documentation/performance.rst.
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
                us(o.latency.median_ns),
                us(o.latency.p99_ns),
            ]);
        }
        let mut s = rst_table(&rows);
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
            ]);
        }
        s.push('\n');
        s.push_str(&rst_table(&rows));
        let mut rows: Vec<Vec<String>> = vec![vec!["Question".into(), "Ratio of medians".into()]];
        for (q, r) in self.ratios() {
            rows.push(vec![q, r]);
        }
        s.push('\n');
        s.push_str(&rst_table(&rows));
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
            free_unpinned: lat(1),
            slab_per_region: 0,
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
                op("dmabuf_hit", 20_000),
                op("dmabuf_miss", 400_000),
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
        };
        let got: Vec<String> = r.ratios().into_iter().map(|(_, v)| v).collect();
        assert_eq!(
            got,
            [
                "2.50x", "25.00x", "n/a", "1.50x", "1.10x", "1.50x", "15.00x", "n/a", "2.50x",
                "n/a", "20.00x"
            ]
            .map(String::from)
        );
        assert!(r.table().contains("hit at 65536 regions vs 16"));
        // 4096 B in 2.048 us and 8.192 us.
        assert!(r.table().contains("2000.0"), "{}", r.table());
        assert!(r.table().contains("500.0"));
        let json = serde_json::to_string(&r).unwrap();
        assert_eq!(serde_json::from_str::<Report>(&json).unwrap(), r);
        assert!(r.rst().contains("=====  ====="));
    }
}
