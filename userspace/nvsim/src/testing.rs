// SPDX-License-Identifier: GPL-2.0

//! What the in-guest test programs share: nvsim's debugfs, p2pclient's command file, the
//! check macros and the test runner.

use std::{collections::HashMap, io::Write, os::unix::fs::FileExt};

pub type TestResult = Result<(), String>;

/// An errno as a test failure.
pub fn errno(e: rustix::io::Errno) -> String {
    e.to_string()
}

/// p2pclient's command file: one command, one result.
pub fn client(cmd: &str) -> Result<String, String> {
    let path = "/sys/kernel/debug/p2pclient/cmd";
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|e| format!("{path}: {e}"))?;
    f.write_all(cmd.as_bytes())
        .map_err(|e| format!("{cmd}: {e}"))?;
    let mut buf = vec![0u8; 4096];
    let n = f.read_at(&mut buf, 0).map_err(|e| e.to_string())?;
    Ok(String::from_utf8_lossy(&buf[..n]).into_owned())
}

/// A pin made through p2pclient.
#[derive(Debug)]
pub struct Pin {
    pub handle: u32,
    pub version: u32,
    pub entries: usize,
    /// The table's flags word (2.x tables; 0 for others).
    pub flags: u32,
    pub pa: Vec<u64>,
}

/// Runs a pin command: Ok(pin) or Err(errno as a negative number).
pub fn pin(cmd: &str) -> Result<Result<Pin, i32>, String> {
    let out = client(cmd)?;
    parse_pin(&out).ok_or_else(|| format!("{cmd}: unexpected answer '{out}'"))
}

fn field<'a>(s: &'a str, key: &str) -> Option<&'a str> {
    s.split_whitespace()
        .find_map(|w| w.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
}

fn hex(s: &str) -> Option<u64> {
    u64::from_str_radix(s.trim_start_matches("0x"), 16).ok()
}

pub fn parse_pin(out: &str) -> Option<Result<Pin, i32>> {
    let mut words = out.split_whitespace();
    match words.next()? {
        "err" => Some(Err(words.next()?.parse().ok()?)),
        "ok" => {
            let handle = words.next()?.parse().ok()?;
            let pa = field(out, "pa")?
                .split(',')
                .map(hex)
                .collect::<Option<Vec<_>>>()?;
            Some(Ok(Pin {
                handle,
                version: hex(field(out, "version")?)? as u32,
                entries: field(out, "entries")?.parse().ok()?,
                flags: field(out, "flags").map_or(Some(0), hex)? as u32,
                pa,
            }))
        }
        _ => None,
    }
}

/// Result of a command that answers "ok ..." or "err E".
pub fn status(cmd: &str) -> Result<i32, String> {
    let out = client(cmd)?;
    match out.split_whitespace().collect::<Vec<_>>().as_slice() {
        ["ok", ..] => Ok(0),
        ["err", e, ..] => e.parse().map_err(|_| format!("{cmd}: '{out}'")),
        _ => Err(format!("{cmd}: unexpected answer '{out}'")),
    }
}

/// A file of `name value` lines (decimal or 0x hex values), as the test modules' debugfs
/// counters are.
pub fn name_values(path: &str) -> Result<HashMap<String, u64>, String> {
    let s = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
    Ok(s.lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(' ')?;
            let v = if let Some(h) = v.strip_prefix("0x") {
                u64::from_str_radix(h, 16).ok()?
            } else {
                v.parse().ok()?
            };
            Some((k.to_string(), v))
        })
        .collect())
}

/// nvsim's counters.
pub fn stats() -> Result<HashMap<String, u64>, String> {
    name_values("/sys/kernel/debug/nvsim/stats")
}

pub fn stat(name: &str) -> Result<u64, String> {
    stats()?
        .get(name)
        .copied()
        .ok_or_else(|| format!("no counter {name}"))
}

/// nvsim's `freed_page_writes` after it checked every freed page for writes made since its
/// free (debugfs `check_freed`): the counter alone counts such a write only when the page
/// is allocated again, perhaps in a later test.
pub fn freed_page_writes() -> Result<u64, String> {
    debugfs("check_freed", "1")?;
    stat("freed_page_writes")
}

/// A module parameter of nvsim (`/sys/module/nvsim/parameters/NAME`), in decimal.
pub fn param(name: &str) -> Result<u64, String> {
    let path = format!("/sys/module/nvsim/parameters/{name}");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
    text.trim()
        .parse()
        .map_err(|e| format!("{path}: {:?}: {e}", text.trim()))
}

/// Sets a writable module parameter of nvsim and returns its old value (as sysfs shows it).
pub fn set_param(name: &str, value: &str) -> Result<String, String> {
    let path = format!("/sys/module/nvsim/parameters/{name}");
    let old = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
    std::fs::write(&path, value).map_err(|e| format!("{path} <- {value}: {e}"))?;
    Ok(old.trim().to_string())
}

/// Runs `f` with nvsim's module parameter `name` set to `value`, then restores it.
pub fn with_param<T>(
    name: &str,
    value: &str,
    f: impl FnOnce() -> Result<T, String>,
) -> Result<T, String> {
    let old = set_param(name, value)?;
    let r = f();
    set_param(name, &old)?;
    r
}

/// Runs `f` with nvsim's debugfs knob `file` set to `value`, then sets it to `after` (its
/// default), whatever `f` returned.
pub fn with_debugfs<T>(
    file: &str,
    value: &str,
    after: &str,
    f: impl FnOnce() -> Result<T, String>,
) -> Result<T, String> {
    debugfs(file, value)?;
    let r = f();
    debugfs(file, after)?;
    r
}

/// Checks that nvsim counted exactly `want` client errors (made on purpose by the test),
/// then clears the counter for the leak checks.
pub fn take_client_errors(want: u64, what: &str) -> TestResult {
    take_counter("client_errors", want, what)
}

/// Checks that nvsim's clearable counter `name` (`client_errors`, `dma_map_window`) is
/// `want`, then clears it for the checks after the test ([`MUST_BE_ZERO`]).
pub fn take_counter(name: &str, want: u64, what: &str) -> TestResult {
    let got = take(name)?;
    if got != want {
        return Err(format!("{name} ({what}): got {got}, expected {want}"));
    }
    Ok(())
}

/// Reads nvsim's clearable counter `name` and clears it.
pub fn take(name: &str) -> Result<u64, String> {
    let got = stat(name)?;
    debugfs(name, "0")?;
    Ok(got)
}

pub fn debugfs(file: &str, value: &str) -> TestResult {
    std::fs::write(format!("/sys/kernel/debug/nvsim/{file}"), value)
        .map_err(|e| format!("nvsim/{file} <- {value}: {e}"))
}

/// Checks a condition, naming it when it fails.
#[macro_export]
macro_rules! check {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err(format!($($fmt)+));
        }
    };
}

/// Checks equality, showing both sides when they differ.
#[macro_export]
macro_rules! check_eq {
    ($a:expr, $b:expr, $what:expr) => {{
        let (a, b) = (&$a, &$b);
        if a != b {
            return Err(format!("{}: got {:?}, expected {:?}", $what, a, b));
        }
    }};
}

/// nvsim's counters that every test must leave at zero: what is live (the driver's
/// objects behind the tables and mappings included), and misuse.
pub const MUST_BE_ZERO: [&str; 15] = [
    "allocations_live",
    "suballocations_live",
    "vmm_reservations_live",
    "vmm_handles_live",
    "pins_live",
    "persistent_pins_live",
    "dma_mappings_live",
    "tables_live",
    "page_objects_live",
    "uuids_live",
    "mapping_objects_live",
    "bar1_used",
    "client_errors",
    "freed_page_writes",
    // dma_map_pages of a freed table (the DMA-mapping window): made on purpose by a few
    // tests, which take it; entered by chance in the stress and fuzzing runs, which report
    // it and take it.
    "dma_map_window",
];

/// Checks [`MUST_BE_ZERO`], once the closes nvsim deferred to its kernel thread are done.
pub fn nvsim_counters_back_to_zero() -> TestResult {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while stats()?
        .get("deferred_closes_pending")
        .copied()
        .unwrap_or(0)
        != 0
    {
        check!(
            std::time::Instant::now() < deadline,
            "closes deferred to nvsim's kernel thread still pending after 10 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    for c in MUST_BE_ZERO {
        check_eq!(stat(c)?, 0, c);
    }
    Ok(())
}

/// The prefix of a test's error that means it did not apply here (`@@ RESULT SKIP`).
pub const SKIP: &str = "skip: ";

/// A named test.
pub type Test = (&'static str, fn() -> TestResult);

/// Runs the tests whose names contain one of the `|`-separated parts of `filter`, each
/// followed by `after` (the leak checks), printing `@@ RESULT PASS|FAIL name` lines.
/// Returns whether all passed.
pub fn run_tests(tests: &[Test], filter: &str, after: fn() -> TestResult) -> bool {
    let mut failed = 0;
    let wanted = |name: &str| filter.split('|').any(|f| name.contains(f));
    for (name, test) in tests.iter().filter(|(n, _)| wanted(n)) {
        println!("--- {name}");
        // Kernel reports during the test are charged to it (tests/vm/report).
        let _ = std::fs::write("/dev/kmsg", format!("gdrpeer-test: begin {name}"));
        match test().and_then(|()| after()) {
            Ok(()) => println!("@@ RESULT PASS {name}"),
            Err(e) if e.starts_with(SKIP) => {
                // Nothing ran: the leak checks still must hold.
                match after() {
                    Ok(()) => println!("@@ RESULT SKIP {name} {}", &e[SKIP.len()..]),
                    Err(e) => {
                        failed += 1;
                        println!("@@ RESULT FAIL {name} {e}");
                    }
                }
            }
            Err(e) => {
                failed += 1;
                println!("FAIL: {e}");
                println!("@@ RESULT FAIL {name} {e}");
            }
        }
    }
    failed == 0
}
