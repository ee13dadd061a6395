// SPDX-License-Identifier: GPL-2.0

//! Access to nvsim (`/dev/nvsim`, its debugfs) and to p2pclient's debugfs.

use rustix::{
    fd::{AsFd, OwnedFd},
    fs::{open, Mode, OFlags},
    ioctl,
    mm::{mmap, munmap, MapFlags, ProtFlags},
};
use std::{collections::HashMap, io::Write, os::unix::fs::FileExt};

pub type TestResult = Result<(), String>;

/// `struct nvsim_alloc_args`.
#[repr(C)]
#[derive(Default, Debug, Clone, Copy)]
pub struct AllocArgs {
    pub size: u64,
    pub va: u64,
    pub buffer_id: u64,
}

/// `struct nvsim_query_args`.
#[repr(C)]
#[derive(Default, Debug, Clone, Copy)]
pub struct QueryArgs {
    pub va: u64,
    pub base: u64,
    pub size: u64,
    pub buffer_id: u64,
    pub p2p_token: u64,
    pub va_space: u32,
    pub sync_memops: u32,
}

/// `struct nvsim_sync_memops_args`.
#[repr(C)]
#[derive(Default, Debug, Clone, Copy)]
pub struct SyncMemopsArgs {
    pub va: u64,
    pub value: u32,
    pub pad: u32,
}

const MAGIC: u8 = 0xDC;
const ALLOC: ioctl::Opcode = ioctl::opcode::read_write::<AllocArgs>(MAGIC, 1);
const FREE: ioctl::Opcode = ioctl::opcode::write::<u64>(MAGIC, 2);
const QUERY: ioctl::Opcode = ioctl::opcode::read_write::<QueryArgs>(MAGIC, 3);
const SYNC_MEMOPS: ioctl::Opcode = ioctl::opcode::write::<SyncMemopsArgs>(MAGIC, 4);

/// An open `/dev/nvsim`: closing it frees its allocations.
pub struct Gpu {
    fd: OwnedFd,
}

impl Gpu {
    pub fn open() -> Result<Self, String> {
        let fd = open("/dev/nvsim", OFlags::RDWR | OFlags::CLOEXEC, Mode::empty())
            .map_err(|e| format!("open /dev/nvsim: {e}"))?;
        Ok(Gpu { fd })
    }

    /// Allocates GPU memory: (va, buffer id).
    pub fn alloc(&self, size: u64) -> Result<(u64, u64), String> {
        let mut a = AllocArgs {
            size,
            ..Default::default()
        };
        // SAFETY: ALLOC reads and writes one `AllocArgs`.
        unsafe { ioctl::ioctl(&self.fd, ioctl::Updater::<ALLOC, AllocArgs>::new(&mut a)) }
            .map_err(|e| format!("alloc {size}: {e}"))?;
        Ok((a.va, a.buffer_id))
    }

    pub fn free(&self, va: u64) -> Result<(), rustix::io::Errno> {
        // SAFETY: FREE reads one u64.
        unsafe { ioctl::ioctl(&self.fd, ioctl::Setter::<FREE, u64>::new(va)) }
    }

    pub fn query(&self, va: u64) -> Result<QueryArgs, rustix::io::Errno> {
        let mut q = QueryArgs {
            va,
            ..Default::default()
        };
        // SAFETY: QUERY reads and writes one `QueryArgs`.
        unsafe { ioctl::ioctl(&self.fd, ioctl::Updater::<QUERY, QueryArgs>::new(&mut q)) }?;
        Ok(q)
    }

    pub fn set_sync_memops(&self, va: u64, value: u32) -> Result<(), rustix::io::Errno> {
        let a = SyncMemopsArgs { va, value, pad: 0 };
        // SAFETY: SYNC_MEMOPS reads one `SyncMemopsArgs`.
        unsafe {
            ioctl::ioctl(
                &self.fd,
                ioctl::Setter::<SYNC_MEMOPS, SyncMemopsArgs>::new(a),
            )
        }
    }

    /// Writes `data` into GPU memory at `va` through nvsim's mapping.
    pub fn write(&self, va: u64, data: &[u8]) -> TestResult {
        self.with_map(va, data.len(), |p| {
            // SAFETY: `p` maps at least `data.len()` bytes (with_map).
            unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), p, data.len()) }
        })
    }

    /// Reads `len` bytes of GPU memory at `va`.
    pub fn read(&self, va: u64, len: usize) -> Result<Vec<u8>, String> {
        let mut out = vec![0u8; len];
        self.with_map(va, len, |p| {
            // SAFETY: `p` maps at least `len` bytes (with_map).
            unsafe { std::ptr::copy_nonoverlapping(p, out.as_mut_ptr(), len) }
        })?;
        Ok(out)
    }

    fn with_map(&self, va: u64, len: usize, f: impl FnOnce(*mut u8)) -> TestResult {
        let page = 4096u64;
        let start = va & !(page - 1);
        let maplen = ((va + len as u64 - start).div_ceil(page) * page) as usize;
        // SAFETY: a fresh shared mapping of nvsim's device memory; nothing else aliases it.
        let p = unsafe {
            mmap(
                std::ptr::null_mut(),
                maplen,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED,
                self.fd.as_fd(),
                start,
            )
        }
        .map_err(|e| format!("mmap {va:#x}+{len}: {e}"))?;
        // SAFETY: `va - start` is inside the mapping.
        f(unsafe { (p as *mut u8).add((va - start) as usize) });
        // SAFETY: unmapping what was mapped above.
        unsafe { munmap(p, maplen) }.map_err(|e| e.to_string())
    }
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

/// nvsim's counters.
pub fn stats() -> Result<HashMap<String, u64>, String> {
    let s = std::fs::read_to_string("/sys/kernel/debug/nvsim/stats")
        .map_err(|e| format!("nvsim stats: {e}"))?;
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

pub fn stat(name: &str) -> Result<u64, String> {
    stats()?
        .get(name)
        .copied()
        .ok_or_else(|| format!("no counter {name}"))
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
