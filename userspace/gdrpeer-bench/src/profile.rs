// SPDX-License-Identifier: GPL-2.0

//! `gdrpeer-bench loop`: one operation repeated for a sampling profiler (`make profile` runs
//! it under `perf record` in the benchmark guest). Prints the mean time per repetition.

use crate::dmabuf::KAPI_LOOP;
use crate::measure::{c, g, region_chunks, Failure, Regions};
use gdrpeer::{cuda::Cuda, gdrdrv::Gdrdrv, Device, PinFlags};
use nvsim::gdrnic::Nic;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

const K64: u64 = 1 << 16;
/// The cache sizes of [`LoopOp::HitMany`] and [`LoopOp::HitFew`].
const MANY: u64 = 65536;
const FEW: u64 = 16;
/// The seed of their random choice of regions.
const SEED: u64 = 1;

/// What the loop repeats.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum LoopOp {
    /// GDRPEER_IOCTL_GET_VERSION: the ioctl floor.
    Null,
    /// PIN of a cached 64 KiB region (a hit) and its UNPIN (lazy).
    Hit,
    /// PIN of a random one of 65,536 cached 64 KiB regions and its UNPIN: the hit at P4's
    /// largest cache (`make bench`'s default sizes).
    HitMany,
    /// The same among 16 cached regions: the hit at P4's smallest cache.
    HitFew,
    /// PIN of 64 KiB with GDRPEER_PIN_NOCACHE (NVIDIA's pin) and its UNPIN (NVIDIA's unpin).
    Miss,
    /// cuMemAlloc of 64 KiB, PIN, UNPIN (cached) and cuMemFree: NVIDIA's free callback.
    Inval,
    /// cuMemAlloc of 64 KiB and cuMemFree, nothing pinned: what Inval adds gdrpeer to.
    Free,
    /// gdrcopy's apiperf loop through /dev/gdrdrv, 64 KiB, cached: PIN_BUFFER_V2 (a hit),
    /// gdr_map (REQ_MAPPING_TYPE, mmap, GET_INFO_V2), GET_INFO_V2, munmap, UNPIN_BUFFER.
    Apiperf,
    /// The sample NIC's REG + DEREG of a cached 64 KiB region through gdrpeer's kernel API
    /// (`gdrpeer_mr_pin`, `gdrpeer_mr_unpin`): P7c.
    Kapi,
    /// The same pin and unpin made by the NIC in the kernel (REG_LOOP, 16 a system call;
    /// a repetition is one of them): the kernel-API hit (P7).
    KapiLoop,
}

/// perf record's control FIFO and its acknowledgements (`perf record --control`).
struct PerfControl {
    ctl: std::fs::File,
    ack: BufReader<std::fs::File>,
}

impl PerfControl {
    /// Opens the two FIFOs that perf record listens and answers on: `paths` is the control
    /// FIFO, then the acknowledgement one.
    fn open(paths: &[PathBuf]) -> Result<Self, String> {
        let [ctl, ack] = paths else {
            return Err("--perf-control takes two FIFOs".into());
        };
        let open = |p: &Path, write: bool| {
            std::fs::OpenOptions::new()
                .read(!write)
                .write(write)
                .open(p)
                .map_err(|e| format!("{}: {e}", p.display()))
        };
        Ok(PerfControl {
            ctl: open(ctl, true)?,
            ack: BufReader::new(open(ack, false)?),
        })
    }

    /// Sends `command` ("enable", "disable") and waits until perf has carried it out.
    fn send(&mut self, command: &str) -> Result<(), String> {
        writeln!(self.ctl, "{command}").map_err(|e| format!("perf control: {e}"))?;
        let mut answer = String::new();
        self.ack
            .read_line(&mut answer)
            .map_err(|e| format!("perf control: {e}"))?;
        // perf writes its answer with the string's NUL: "ack\n\0".
        match answer.trim_matches(|c: char| c == '\0' || c.is_whitespace()) {
            "ack" => Ok(()),
            other => Err(format!("perf control: '{other}' in answer to {command}")),
        }
    }
}

/// Runs `op` `reps` times after a warm-up, with perf's sampling on for the timed repetitions
/// alone where `perf_control` names perf record's FIFOs.
pub fn run(op: LoopOp, reps: usize, perf_control: Option<&[PathBuf]>) -> Result<(), Failure> {
    let mut perf = perf_control.map(PerfControl::open).transpose()?;
    let cuda = Cuda::load().map_err(|e| Failure::NoCuda(e.to_string()))?;
    let dev = g(Device::open_default(), "open")?;
    // For the NIC, a pool block, whose first 64 KiB are a GPU page of its own (as the NIC's
    // benchmark registers them).
    let len = match op {
        LoopOp::Kapi | LoopOp::KapiLoop => nvsim::POOL_BLOCK,
        _ => K64,
    };
    let buf = c(cuda.mem_alloc(len as usize))?;
    let gd = match op {
        LoopOp::Apiperf => Some(g(Gdrdrv::open_default(), "/dev/gdrdrv")?),
        _ => None,
    };
    let nic = match op {
        LoopOp::Kapi | LoopOp::KapiLoop => {
            Some(Nic::open().map_err(|e| format!("/dev/gdrnic: {e}"))?)
        }
        _ => None,
    };
    // The regions the hit loops pin, cached first ([`Regions`]: their addresses are
    // computed, as `make bench` computes them).
    let n = match op {
        LoopOp::HitMany => MANY,
        LoopOp::HitFew => FEW,
        _ => 0,
    };
    let (chunks, chunk_pages) = region_chunks(&cuda, n)?;
    let mut regions = Regions::new(&chunks, chunk_pages);
    regions.fill(&dev, n)?;
    let mut rng = fastrand::Rng::with_seed(SEED);
    let mut once = || -> Result<(), String> {
        match op {
            LoopOp::HitMany | LoopOp::HitFew => {
                let va = regions.random(&mut rng);
                let p = g(dev.pin(va, K64, PinFlags::empty()), "pin")?;
                g(dev.unpin(p.handle), "unpin")
            }
            LoopOp::Apiperf => {
                let gd = gd.as_ref().ok_or("no /dev/gdrdrv")?;
                let h = g(gd.pin_v2(buf, K64, 0), "PIN_BUFFER_V2")?;
                let (m, _) = g(gd.map(h, K64 as usize), "gdr_map")?;
                g(gd.info_v2(h), "GET_INFO_V2")?;
                drop(m);
                g(gd.unpin(h), "UNPIN_BUFFER")
            }
            LoopOp::Kapi => {
                let nic = nic.as_ref().ok_or("no /dev/gdrnic")?;
                let mr = nic.reg(buf, K64).map_err(|e| format!("REG: {e}"))?;
                nic.dereg(mr.handle).map_err(|e| format!("DEREG: {e}"))
            }
            LoopOp::KapiLoop => {
                let nic = nic.as_ref().ok_or("no /dev/gdrnic")?;
                nic.reg_loop(buf, K64, 0, KAPI_LOOP)
                    .map_err(|e| format!("REG_LOOP: {e}"))
            }
            LoopOp::Inval | LoopOp::Free => {
                let b = c(cuda.mem_alloc(K64 as usize))?;
                if let LoopOp::Inval = op {
                    let p = g(dev.pin(b, K64, PinFlags::empty()), "pin")?;
                    g(dev.unpin(p.handle), "unpin")?;
                }
                c(cuda.mem_free(b))
            }
            LoopOp::Null => g(dev.get_version(), "version").map(drop),
            LoopOp::Hit | LoopOp::Miss => {
                let flags = match op {
                    LoopOp::Miss => PinFlags::NOCACHE,
                    _ => PinFlags::empty(),
                };
                let p = g(dev.pin(buf, K64, flags), "pin")?;
                g(dev.unpin(p.handle), "unpin")
            }
        }
    };
    for _ in 0..crate::measure::WARMUP {
        once()?;
    }
    if let Some(perf) = perf.as_mut() {
        perf.send("enable")?;
    }
    let start = Instant::now();
    for _ in 0..reps {
        once()?;
    }
    let elapsed = start.elapsed();
    if let Some(perf) = perf.as_mut() {
        perf.send("disable")?;
    }
    let per_rep = match op {
        LoopOp::KapiLoop => reps * KAPI_LOOP as usize,
        _ => reps,
    };
    let ns = elapsed.as_nanos() / per_rep.max(1) as u128;
    println!("loop {op:?}: {per_rep} repetitions, {ns} ns each");
    drop(gd);
    drop(nic);
    drop(dev);
    for chunk in chunks {
        c(cuda.mem_free(chunk))?;
    }
    c(cuda.mem_free(buf))?;
    Ok(())
}
