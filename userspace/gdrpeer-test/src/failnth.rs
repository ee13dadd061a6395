// SPDX-License-Identifier: GPL-2.0

//! Allocation-failure walks (`gdrpeer-failnth-*`): one operation of the uAPI or of the kernel
//! API, called again and again with its 1st, 2nd, ... allocation failed in turn, through
//! `/proc/thread-self/fail-nth` (the kernel's Documentation/fault-injection), until a call
//! runs with no fault injected. Every step checks:
//!
//! - the call failed with ENOMEM or succeeded (an injected failure may be absorbed: kmemleak's
//!   metadata falls back to its pool, kvmalloc to vmalloc, a page fault retries, a region
//!   that cannot be cached is released at once); any other errno is a failure, as is a call
//!   that failed with no fault injected;
//! - what the step's `finish` checks: what the call made, or that a failed call left nothing
//!   half done that the next calls trip on;
//! - nothing pinned once the step closed its files, while the GPU memory is still allocated
//!   (its free callback would release what a leak left pinned): gdrpeer's global counters at
//!   zero, and nvsim's pins, DMA mappings and BAR1 bytes;
//! - nothing leaked once the memory is freed too (the suite's `released` check: nvsim's live
//!   counters, gdrnic's registrations);
//! - the same operation, called again with no fault armed, succeeds, and leaks nothing.
//!
//! The kernel log oracle fails the run on any oops, WARN, KASAN or kmemleak report.
//!
//! fail-nth counts every allocation the calling thread makes that failslab and
//! fail_page_alloc may fail: gdrpeer's, the kernel's on the way (the file, the vma, page
//! tables), nvsim's inside the nv-p2p calls, and those of the test kernel's debugging
//! (kmemleak's metadata after each slab allocation). Each walk prints one line: how many
//! allocations it failed before the call ran without one (the allocation sites hit), how many
//! of those made the call fail, and the trail of outcomes (`E` ENOMEM, `.` absorbed, `!` a
//! check failed). A failed check does not end the walk unless something is left over after
//! the step: every failing allocation of the operation is reported.

use crate::helpers::{gdrpeer_idle, gstats};
use crate::proc;
use nvsim::testing::{errno, stat, TestResult, SKIP};
use nvsim::{check, check_eq, Gpu};
use rustix::{
    fd::OwnedFd,
    fs::{open, Mode, OFlags},
    io::{pread, pwrite, read, write, Errno},
};

/// A walk that has not ended after this many steps is a failure.
const MAX_STEPS: u32 = 500;

/// A forked step that has not reported and ended by then is a failure (a thread of the
/// child stuck in the kernel): the walk ends there, the child is left behind.
const STEP_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// What a setup made: the state of the call, and the GPU memory, freed only after the walk
/// checked that the call's file let go of it.
pub type Ready<S> = Result<(S, Option<Gpu>), String>;

/// An operation to walk.
pub struct Op<S> {
    /// The test's name ends in it: `gdrpeer-failnth-NAME`.
    pub name: &'static str,
    /// Makes what the call needs (nothing armed yet), and GPU memory if it needs some: the
    /// walk frees it only after checking that the call's file let go of it all by itself.
    pub setup: fn() -> Ready<S>,
    /// The call under test: one system call (an mmap and the first touch of the mapping for
    /// the mapping walks), with nothing else between it and fail-nth, so that user space
    /// allocates nothing meanwhile.
    pub call: fn(&mut S) -> Result<(), Errno>,
    /// Checks what the call did (or that a failed call left things usable) and undoes it
    /// and the setup, the GPU memory aside.
    pub finish: fn(S, Result<(), Errno>) -> TestResult,
    /// Runs each step in a child process: the call touches a mapping, which may raise a
    /// signal that must fail the test, not kill it.
    pub forked: bool,
}

/// One step's outcome.
#[derive(Clone, Debug)]
struct Step {
    injected: bool,
    result: Result<(), Errno>,
    /// What the checks after the call found wrong.
    wrong: Option<String>,
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let fault = if self.injected {
            "fault injected"
        } else {
            "no fault injected"
        };
        match self.result {
            Ok(()) => write!(f, "{fault}, succeeded"),
            Err(e) => write!(f, "{fault}, failed with {e}"),
        }
    }
}

/// Walks `op`'s allocations; `released` is the suite's check that nothing is held any more.
/// A step whose checks fail is reported and the walk goes on, as long as `released` finds
/// nothing left over.
///
/// Each failed allocation's stack goes to the kernel log (fault injection's `verbose` 2), and
/// the host judges the walk by them: one that failed no allocation of gdrpeer's own code
/// proved nothing of gdrpeer, and fails (tests/vm/report).
pub fn walk<S>(op: &Op<S>, released: fn() -> TestResult) -> TestResult {
    walk_sites(op, released).map(|_| ())
}

/// A call that must allocate nothing: its walk ends at the first step, with no fault injected.
/// (A walk of it would fail no allocation of gdrpeer's, and the host would fail it.)
pub fn allocates_nothing<S>(op: &Op<S>, released: fn() -> TestResult) -> TestResult {
    let sites = walk_sites(op, released)?;
    check_eq!(sites, 0, format!("{}: allocations made", op.name));
    Ok(())
}

/// [`walk`]: the number of allocation sites the call has.
fn walk_sites<S>(op: &Op<S>, released: fn() -> TestResult) -> Result<u32, String> {
    let _faults = FaultConfig::fail_sleeping_allocations()?;
    let mut trail = String::new();
    let mut failed = 0;
    let mut wrong = Vec::new();
    let mut sites = None;
    for n in 1..=MAX_STEPS {
        let what = format!("allocation {n} failed");
        let step = run_step(op, n).map_err(|e| format!("{}: {what}: {e}", op.name))?;
        let mut outcome = match step.result {
            Ok(()) => '.',
            Err(Errno::NOMEM) => 'E',
            Err(_) if step.injected => {
                wrong.push(format!("{what}: {step}, not ENOMEM"));
                '!'
            }
            Err(_) => {
                wrong.push(format!("{what}: {step}"));
                '!'
            }
        };
        if let Some(e) = &step.wrong {
            wrong.push(format!("{what}: {step}: {e}"));
            outcome = '!';
        }
        let left_over = |e: String| {
            wrong.push(format!("{what} ({step}): {e}"));
            format!("{}: {}", op.name, wrong.join("; "))
        };
        released().map_err(left_over)?;
        let normal = run_step(op, 0).map_err(|e| format!("{}: {what}: {e}", op.name))?;
        if normal.result.is_err() || normal.wrong.is_some() {
            wrong.push(format!(
                "{what}: the next call, with no fault armed: {normal}{}",
                normal
                    .wrong
                    .as_ref()
                    .map(|e| format!(": {e}"))
                    .unwrap_or_default()
            ));
        }
        let left_over = |e: String| {
            wrong.push(format!("{what}: after the next call: {e}"));
            format!("{}: {}", op.name, wrong.join("; "))
        };
        released().map_err(left_over)?;
        if !step.injected {
            sites = Some(n - 1);
            break;
        }
        if step.result.is_err() {
            failed += 1;
        }
        trail.push(outcome);
    }
    let Some(sites) = sites else {
        return Err(format!(
            "{}: still failing allocations after {MAX_STEPS}",
            op.name
        ));
    };
    println!(
        "failnth {}: {sites} allocation sites, {failed} failed the call: {trail}",
        op.name
    );
    check!(wrong.is_empty(), "{}: {}", op.name, wrong.join("; "));
    Ok(sites)
}

/// `op` once with its `n`-th allocation failed: what the call returned. An error if no fault
/// was injected or the step's checks failed.
pub fn fail_once<S>(op: &Op<S>, n: u32) -> Result<Result<(), Errno>, String> {
    let _faults = FaultConfig::fail_sleeping_allocations()?;
    let step = run_step(op, n).map_err(|e| format!("{}: {e}", op.name))?;
    check!(step.injected, "{}: {step} (no allocation {n})", op.name);
    if let Some(e) = &step.wrong {
        return Err(format!("{}: allocation {n} failed: {step}: {e}", op.name));
    }
    Ok(step.result)
}

/// One step: setup, the call with its `n`-th allocation failed (none if `n` is 0), finish;
/// in a child if the operation asks for it. Err: the step could not run.
fn run_step<S>(op: &Op<S>, n: u32) -> Result<Step, String> {
    if !op.forked {
        return step(op, n);
    }
    let (mine, theirs) = proc::unix_pair()?;
    let child = proc::fork(|| {
        let report = match step(op, n) {
            Ok(s) => format!(
                "{} {} {}",
                u8::from(s.injected),
                s.result.err().map_or(0, |e| e.raw_os_error()),
                s.wrong.unwrap_or_default()
            ),
            Err(e) => format!("error {e}"),
        };
        write(&theirs, report.as_bytes()).map_err(errno)?;
        // Closed for the whole child: a thread of it stuck in the kernel keeps the files.
        drop(theirs);
        Ok(())
    })?;
    // The parent's `theirs` went with the closure.
    let deadline = std::time::Instant::now() + STEP_TIMEOUT;
    let mut report = Vec::new();
    let mut buf = [0u8; 512];
    let stuck = |report: &[u8]| {
        format!(
            "the step's child (pid {child}) did not end within {} s, left behind: '{}'",
            STEP_TIMEOUT.as_secs(),
            String::from_utf8_lossy(report)
        )
    };
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let mut fds = [rustix::event::PollFd::new(
            &mine,
            rustix::event::PollFlags::IN,
        )];
        let ts = rustix::event::Timespec {
            tv_sec: left.as_secs() as _,
            tv_nsec: left.subsec_nanos() as _,
        };
        match rustix::event::poll(&mut fds, Some(&ts)) {
            Ok(0) => return Err(stuck(&report)),
            Ok(_) | Err(Errno::INTR) => {}
            Err(e) => return Err(errno(e)),
        }
        match read(&mine, &mut buf) {
            Ok(0) => break,
            Ok(k) => report.extend_from_slice(&buf[..k]),
            Err(Errno::INTR | Errno::AGAIN) => continue,
            Err(e) => return Err(errno(e)),
        }
    }
    let status = loop {
        let mut status = 0;
        // SAFETY: reaps our own child without waiting.
        match unsafe { libc::waitpid(child, &mut status, libc::WNOHANG) } {
            0 if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(10))
            }
            0 => {
                // SAFETY: our own child; it may not die while a thread of it is stuck.
                unsafe { libc::kill(child, libc::SIGKILL) };
                return Err(stuck(&report));
            }
            r if r == child => break status,
            _ => return Err(format!("waitpid: {}", std::io::Error::last_os_error())),
        }
    };
    let report = String::from_utf8_lossy(&report).into_owned();
    if libc::WIFSIGNALED(status) {
        let signal = libc::WTERMSIG(status);
        return Err(format!("the child died of signal {signal} ({report})"));
    }
    match libc::WEXITSTATUS(status) {
        0 => {}
        code => return Err(format!("the child exited with {code} ({report})")),
    }
    if let Some(e) = report.strip_prefix("error ") {
        return Err(e.to_string());
    }
    let mut words = report.splitn(3, ' ');
    let mut number = || words.next().and_then(|w| w.parse::<i32>().ok());
    match (number(), number()) {
        (Some(injected), Some(e)) => Ok(Step {
            injected: injected != 0,
            result: if e == 0 {
                Ok(())
            } else {
                Err(Errno::from_raw_os_error(e))
            },
            wrong: words.next().filter(|w| !w.is_empty()).map(str::to_string),
        }),
        _ => Err(format!("the child reported '{report}'")),
    }
}

fn step<S>(op: &Op<S>, n: u32) -> Result<Step, String> {
    let nth = FailNth::open()?;
    let (mut state, memory) = (op.setup)()?;
    let (injected, result) = if n == 0 {
        (false, (op.call)(&mut state))
    } else {
        nth.arm(n)?;
        let result = (op.call)(&mut state);
        (nth.injected()?, result)
    };
    let wrong = (op.finish)(state, result)
        // Before the memory is freed: its free callback would release what was left pinned.
        .and_then(|()| nothing_pinned().map_err(|e| format!("before the GPU memory is freed: {e}")))
        .err();
    drop(memory);
    Ok(Step {
        injected,
        result,
        wrong,
    })
}

/// Nothing pinned nor mapped for a peer any more, nvsim says, and gdrpeer holds nothing.
fn nothing_pinned() -> TestResult {
    gdrpeer_idle().map_err(|e| {
        let held = gstats().map_or_else(
            |e| e,
            |s| {
                ["contexts", "regions", "pinned_bytes", "deferred_releases"]
                    .map(|k| format!("{k} {}", s.get(k).copied().unwrap_or_default()))
                    .join(", ")
            },
        );
        format!("{e} (gdrpeer holds {held})")
    })?;
    for c in ["pins_live", "dma_mappings_live", "bar1_used"] {
        check_eq!(stat(c)?, 0, c);
    }
    Ok(())
}

/// The calling thread's `/proc/thread-self/fail-nth`.
struct FailNth(OwnedFd);

impl FailNth {
    fn open() -> Result<Self, String> {
        open(
            "/proc/thread-self/fail-nth",
            OFlags::RDWR | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map(FailNth)
        .map_err(|e| format!("/proc/thread-self/fail-nth: {e}"))
    }

    /// Makes the thread's `n`-th allocation from now fail (0: none). Allocates nothing in
    /// user space: an allocation there could make a system call that the fault hits.
    fn arm(&self, n: u32) -> TestResult {
        let mut digits = [0u8; 10];
        let mut at = digits.len();
        let mut v = n;
        loop {
            at -= 1;
            digits[at] = b'0' + (v % 10) as u8;
            v /= 10;
            if v == 0 {
                break;
            }
        }
        pwrite(&self.0, &digits[at..], 0)
            .map(|_| ())
            .map_err(|e| format!("fail-nth <- {n}: {e}"))
    }

    /// Whether the armed fault was injected (fail-nth reads 0); disarms it.
    fn injected(&self) -> Result<bool, String> {
        let mut buf = [0u8; 16];
        let read = pread(&self.0, &mut buf, 0);
        self.arm(0)?;
        let k = read.map_err(|e| format!("fail-nth: {e}"))?;
        let text = String::from_utf8_lossy(&buf[..k]);
        let left: u32 = text
            .trim()
            .parse()
            .map_err(|e| format!("fail-nth: '{}': {e}", text.trim()))?;
        Ok(left == 0)
    }
}

/// failslab and fail_page_alloc set so that fail-nth may fail any allocation: sleeping ones
/// (GFP_KERNEL) and highmem and order-0 pages too, with no random failures (probability 0),
/// each failure dumped with its stack. The old settings come back on drop.
struct FaultConfig {
    saved: Vec<(String, String)>,
}

const SETTINGS: [(&str, &str); 10] = [
    ("failslab/ignore-gfp-wait", "N"),
    ("failslab/probability", "0"),
    ("fail_page_alloc/ignore-gfp-wait", "N"),
    ("fail_page_alloc/ignore-gfp-highmem", "N"),
    ("fail_page_alloc/min-order", "0"),
    ("fail_page_alloc/probability", "0"),
    // Each failed allocation's stack to the kernel log, none ratelimited away: the host
    // counts the walk's failures in gdrpeer's own code by them.
    ("failslab/verbose", "2"),
    ("failslab/verbose_ratelimit_interval_ms", "0"),
    ("fail_page_alloc/verbose", "2"),
    ("fail_page_alloc/verbose_ratelimit_interval_ms", "0"),
];

impl FaultConfig {
    fn fail_sleeping_allocations() -> Result<Self, String> {
        if !std::path::Path::new("/proc/thread-self/fail-nth").exists() {
            return Err(format!(
                "{SKIP}the kernel is built without fault injection (CONFIG_FAULT_INJECTION); \
                 the walks run on the test kernel"
            ));
        }
        let mut me = FaultConfig { saved: Vec::new() };
        for (file, value) in SETTINGS {
            let path = format!("/sys/kernel/debug/{file}");
            let old = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
            std::fs::write(&path, value).map_err(|e| format!("{path} <- {value}: {e}"))?;
            me.saved.push((path, old.trim().to_string()));
        }
        Ok(me)
    }
}

impl Drop for FaultConfig {
    fn drop(&mut self) {
        for (path, old) in self.saved.iter().rev() {
            let _ = std::fs::write(path, old);
        }
    }
}
