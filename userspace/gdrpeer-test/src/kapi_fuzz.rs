// SPDX-License-Identifier: GPL-2.0

//! Fuzzing of gdrpeer's kernel API from inside the sample NIC (`GDRNIC_IOCTL_FUZZ`,
//! tests/gdrnic): the module makes random sequences of kernel-API calls (contexts created and
//! destroyed, pins of windows, of ranges past an allocation's end, of bad lengths, of memory
//! that is not GPU memory, with NULL arguments, unpins during and after invalidate callbacks,
//! dma-buf exports and puts, calls from kernel threads) and checks every outcome against
//! Documentation/user/kernel-api.rst; a call the documentation does not allow is a failure it
//! counts and logs. Here, user space gives it GPU memory from the simulated libcuda, frees and
//! reallocates part of that memory under the calls (`cuMemFree`: NVIDIA's free callback, then
//! the module's invalidate callbacks, which sleep a little so that unpins meet them running),
//! makes nvsim fail `get_pages` and `dma_map_pages` with `ENOMEM`, and runs the fuzzing from a
//! forked child too, on the parent's file: the file's context is then another process's
//! (`-EACCES`) and the parent's memory is not the child's (`-EINVAL`). At the end nothing may
//! be left: the pages that contexts destroyed from kernel threads left to NVIDIA's callback
//! are released when the memory is freed.
//!
//! `gdrnic-kapi-fuzz-short` (in `gdrpeer-test --nic`) and
//! `gdrpeer-test --kapi-fuzz OPS THREADS SEED` (`make fuzz`).

use crate::nic::{nic, nic_released};
use crate::proc;
use crate::sanity::{self, c, cu};
use nvsim::check;
use nvsim::gdrnic::{
    FuzzArgs, FuzzRange, Nic, FUZZ_FAULTS, FUZZ_OPS, FUZZ_OUTCOMES, FUZZ_RANGES,
    FUZZ_SLOW_CALLBACK, FUZZ_STABLE,
};
use nvsim::testing::{debugfs, stat, TestResult};
use std::{
    sync::Mutex,
    thread,
    time::{Duration, Instant},
};

/// Each buffer is an allocation of its own (libcuda-sim carves smaller ones from shared pool
/// blocks) and all have this size, so they lie on a grid from nvsim's first GPU address: a
/// buffer reallocated where one was freed never crosses the ends of a range the module knows,
/// and a pin past a range's end always crosses an allocation's end.
const BUF: u64 = 2 << 20;
/// nvsim's first GPU virtual address (`NVSIM_VA_BASE`).
const NVSIM_VA_BASE: u64 = 0x2_0000_0000;
/// Each thread's buffers: the first [`STABLE`] are never freed during the calls, the others
/// are freed and reallocated. The threads' memory is their own. A page may have any number
/// of registrations (up to the module's 32), in any of its contexts: gdrpeer maps it once
/// for the NIC however many regions hold it, which the kernel's DMA-API debugging (it WARNs
/// at the ninth live mapping of a page) checks on the test kernel.
const PER_THREAD: usize = 4;
const STABLE: usize = 2;
/// Calls per FUZZ ioctl: each ioctl is one session, which releases all it made.
const PER_IOCTL: u64 = 1000;
/// nvsim's injected failures: this percentage of its calls fail with ENOMEM.
const FAULT_PERCENT: u32 = 5;
const ENOMEM: i32 = 12;

/// The counts of all sessions, and their failures.
struct Totals {
    counts: [[u64; 8]; 24],
    sessions: u64,
    failures: Vec<String>,
}

impl Totals {
    fn new() -> Self {
        Totals {
            counts: [[0; 8]; 24],
            sessions: 0,
            failures: Vec::new(),
        }
    }

    fn add(&mut self, a: &FuzzArgs, who: &str) {
        for (t, c) in self.counts.iter_mut().zip(a.counts.iter()) {
            for (t, c) in t.iter_mut().zip(c.iter()) {
                *t += c;
            }
        }
        self.sessions += 1;
        if a.failures > 0 {
            let op = FUZZ_OPS.get(a.first_failure_op as usize).unwrap_or(&"?");
            self.failures.push(format!(
                "{who} seed {}: {} outcomes not documented, the first {op} errno {} (kernel log: \
                 'gdrnic: fuzz:')",
                a.seed, a.failures, a.first_failure_errno
            ));
        }
    }

    fn get(&self, op: &str, outcome: &str) -> u64 {
        let o = FUZZ_OUTCOMES.iter().position(|x| *x == outcome).unwrap();
        FUZZ_OPS
            .iter()
            .position(|x| *x == op)
            .map_or(0, |i| self.counts[i][o])
    }

    /// One line per op kind with the outcomes it had.
    fn print(&self, who: &str) {
        let calls: u64 = self.counts[..FUZZ_OPS.len() - 1].iter().flatten().sum();
        println!(
            "kapi-fuzz {who}: {calls} calls in {} sessions",
            self.sessions
        );
        for (op, c) in FUZZ_OPS.iter().zip(self.counts.iter()) {
            let outcomes: Vec<String> = FUZZ_OUTCOMES
                .iter()
                .zip(c.iter())
                .filter(|(_, n)| **n > 0)
                .map(|(o, n)| format!("{o} {n}"))
                .collect();
            if !outcomes.is_empty() {
                println!("  {op:<22} {}", outcomes.join(", "));
            }
        }
    }

    /// Fails unless every call had a documented outcome and each of `wanted` (op, outcome)
    /// happened.
    fn check(&self, who: &str, wanted: &[(&str, &str)]) -> TestResult {
        check!(
            self.failures.is_empty(),
            "{who}: {}",
            self.failures.join("; ")
        );
        for (op, outcome) in wanted {
            check!(
                self.get(op, outcome) > 0,
                "{who}: no {op} with outcome {outcome}"
            );
        }
        Ok(())
    }
}

/// `ops` calls on `n` in sessions of [`PER_IOCTL`], each with the ranges `ranges()` gives.
fn fuzz_calls(
    n: &Nic,
    ranges: impl Fn() -> Vec<FuzzRange>,
    seed: u64,
    ops: u64,
    totals: &Mutex<Totals>,
    who: &str,
) -> TestResult {
    let mut left = ops;
    let mut session = 0u64;
    while left > 0 {
        let k = left.min(PER_IOCTL);
        let r = ranges();
        let mut a = FuzzArgs {
            seed: seed.wrapping_mul(1_000_003).wrapping_add(session),
            ops: k as u32,
            flags: FUZZ_FAULTS | FUZZ_SLOW_CALLBACK,
            nranges: r.len() as u32,
            ..Default::default()
        };
        a.ranges[..r.len()].copy_from_slice(&r);
        n.fuzz(&mut a)
            .map_err(|e| format!("{who}: FUZZ seed {}: {e}", a.seed))?;
        totals.lock().unwrap().add(&a, who);
        left -= k;
        session += 1;
    }
    Ok(())
}

/// Sets nvsim's injected failures ("TIMES ERRNO PERCENT", "0 0" for none).
fn faults(spec: &str) -> TestResult {
    debugfs("fail_get_pages", spec)?;
    debugfs("fail_dma_map", spec)
}

/// A buffer of [`BUF`] bytes from libcuda, on the grid.
fn alloc() -> Result<u64, String> {
    let va = cu().mem_alloc(BUF as usize).map_err(c)?;
    check!(
        va >= NVSIM_VA_BASE && (va - NVSIM_VA_BASE) % BUF == 0,
        "cuMemAlloc gave {va:#x}, off the {BUF:#x} grid: another allocation of this process is \
         of another size"
    );
    Ok(va)
}

/// The fuzzing run: `ops` calls from `threads` threads of this process, a quarter as many
/// from a forked child, while the main thread frees and reallocates the churned buffers.
pub fn run(ops: u64, threads: u64, seed: u64) -> TestResult {
    check!(threads > 0, "kapi-fuzz: THREADS must be > 0");
    sanity::load()?;
    println!(
        "kapi-fuzz: {ops} calls from {threads} threads and {} from another process, seed \
         {seed}, {FAULT_PERCENT}% of nvsim's calls failing",
        ops / 4
    );
    let start = Instant::now();
    const _: () = assert!(PER_THREAD <= FUZZ_RANGES);
    // ranges[t * PER_THREAD..][..PER_THREAD] are thread t's.
    let mut bufs = Vec::new();
    for i in 0..threads as usize * PER_THREAD {
        bufs.push(FuzzRange {
            va: alloc()?,
            len: BUF,
            flags: if i % PER_THREAD < STABLE {
                FUZZ_STABLE
            } else {
                0
            },
            pad: 0,
        });
    }
    let ranges = Mutex::new(bufs);
    let mine = |t: usize| ranges.lock().unwrap()[t * PER_THREAD..][..PER_THREAD].to_vec();
    let n = nic()?;
    let faults_before = stat("faults_injected")?;
    let callbacks_before = crate::helpers::gstat("callbacks")?;
    faults(&format!("-1 {ENOMEM} {FAULT_PERCENT}"))?;
    let result = (|| -> TestResult {
        // The other process: forked while this one is single-threaded, it runs its calls
        // on this file while the threads below run theirs.
        let snapshot = mine(0);
        let child = proc::fork(|| {
            let totals = Mutex::new(Totals::new());
            fuzz_calls(
                &n,
                || snapshot.clone(),
                seed ^ 0x5eed,
                (ops / 4).max(1),
                &totals,
                "child",
            )?;
            let t = totals.into_inner().unwrap();
            t.print("other process");
            t.check(
                "other process",
                &[
                    ("pin_foreign", "EACCES"),
                    ("export_foreign", "EACCES"),
                    ("pin", "EINVAL"),
                    ("kthread_pin", "EACCES"),
                ],
            )
        })?;
        let totals = Mutex::new(Totals::new());
        let mut frees = 0u64;
        let mut rng = fastrand::Rng::with_seed(seed);
        let threads_result = thread::scope(|s| -> TestResult {
            let workers: Vec<_> = (0..threads)
                .map(|t| {
                    let (n, mine, totals) = (&n, &mine, &totals);
                    s.spawn(move || {
                        fuzz_calls(
                            n,
                            || mine(t as usize),
                            seed * 1000 + t,
                            ops / threads,
                            totals,
                            &format!("thread {t}"),
                        )
                    })
                })
                .collect();
            // Meanwhile: cuMemFree a churned buffer (its pins are called back), and
            // allocate one again a moment later, most often at the same place.
            while workers.iter().any(|w| !w.is_finished()) {
                let i = rng.usize(0..threads as usize) * PER_THREAD + rng.usize(STABLE..PER_THREAD);
                let va = ranges.lock().unwrap()[i].va;
                cu().mem_free(va).map_err(c)?;
                frees += 1;
                thread::sleep(Duration::from_micros(rng.u64(0..3000)));
                let va = alloc()?;
                ranges.lock().unwrap()[i].va = va;
                thread::sleep(Duration::from_micros(rng.u64(0..3000)));
            }
            for w in workers {
                w.join().map_err(|_| "fuzz thread panicked")??;
            }
            Ok(())
        });
        let child_result = proc::wait(child);
        threads_result?;
        let t = totals.into_inner().unwrap();
        let took = start.elapsed().as_secs_f64();
        t.print("this process");
        let calls: u64 = t.counts[..FUZZ_OPS.len() - 1].iter().flatten().sum();
        println!(
            "kapi-fuzz: {calls} calls here in {took:.1} s ({:.0} a second); {frees} cuMemFree \
             under them; nvsim injected {} failures; gdrpeer ran {} invalidate callbacks",
            calls as f64 / took,
            stat("faults_injected")? - faults_before,
            crate::helpers::gstat("callbacks")? - callbacks_before,
        );
        child_result.map_err(|e| format!("other process: {e}"))?;
        t.check(
            "this process",
            &[
                ("ctx_create", "ok"),
                ("pin", "ok"),
                ("pin", "ENOMEM"),
                ("pin_churned", "ok"),
                ("pin_partial", "EINVAL"),
                ("pin_bad_length", "EINVAL"),
                ("pin_not_gpu", "EINVAL"),
                ("pin_null", "EINVAL"),
                ("unpin", "ok"),
                ("unpin_after_callback", "ok"),
                ("export", "ok"),
                ("export_null", "EINVAL"),
                ("kthread_pin", "EACCES"),
                ("kthread_export", "EACCES"),
                ("kthread_destroy", "ok"),
                ("kthread_own_ctx", "EINVAL"),
                ("callback", "ok"),
            ],
        )?;
        check!(
            stat("faults_injected")? > faults_before,
            "nvsim injected no failure"
        );
        Ok(())
    })();
    let restored = faults("0 0");
    result?;
    restored?;
    // The file's context goes with the file; the pages that contexts destroyed from kernel
    // threads left pinned go with the memory (the run's leak checks follow).
    drop(n);
    for va in ranges.into_inner().unwrap() {
        cu().mem_free(va.va).map_err(c)?;
    }
    Ok(())
}

/// `gdrpeer-test --kapi-fuzz OPS THREADS SEED`: the long run, then the leak checks.
pub fn run_args(args: &[String]) -> TestResult {
    let num = |i: usize, default: u64| -> Result<u64, String> {
        args.get(i).map_or(Ok(default), |s| {
            s.parse()
                .map_err(|_| format!("--kapi-fuzz: bad number '{s}'"))
        })
    };
    run(num(0, 1_000_000)?, num(1, 4)?, num(2, 1)?)?;
    nic_released()
}

/// `make check`'s short run.
pub fn short() -> TestResult {
    run(6000, 2, 1)
}
