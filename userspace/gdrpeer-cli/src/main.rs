// SPDX-License-Identifier: GPL-2.0

//! `gdrpeer`: look at the gdrpeer module from the command line.

mod doctor;

use clap::{Args, Parser, Subcommand};
use gdrpeer::{Device, PciAddress, PinFlags, PinGuard};
use std::{path::PathBuf, process::ExitCode, thread, time::Duration};

#[derive(Parser)]
#[command(version, about = "Inspect and exercise the gdrpeer kernel module")]
struct Cli {
    /// The gdrpeer device node.
    #[arg(long, default_value = gdrpeer::DEFAULT_PATH)]
    device: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Show the module's ABI and the nv-p2p versions it was built for.
    Info,
    /// Pin GPU memory, show the window, and unpin it.
    Pin {
        #[command(flatten)]
        pin: PinArgs,
        /// Also print the pages' bus addresses (needs CAP_SYS_RAWIO).
        #[arg(long)]
        pages: bool,
        /// Keep the memory pinned this many seconds before unpinning.
        #[arg(long, value_name = "SECONDS")]
        hold: Option<u64>,
    },
    /// Pin GPU memory and print its pages' bus (BAR1) addresses, one a line.
    Pages {
        #[command(flatten)]
        pin: PinArgs,
    },
    /// Pin GPU memory and print its pages' DMA addresses as a PCI device sees them.
    DmaMap {
        #[command(flatten)]
        pin: PinArgs,
        /// The peer device, as lspci writes it: [DDDD:]BB:DD.F.
        pci: PciAddress,
    },
    /// Print the registration-cache counters of this file and of all files, as a table.
    Stats,
    /// Pin GPU memory, then wait for and print its invalidation events (ABI 1.3): one line
    /// per handle revoked, as the driver frees the memory. Events are per file and pins are
    /// of the caller's own memory, so this allocates (CUDA) and pins what it watches; the
    /// memory goes when another thread frees it (--free-after) or the driver does.
    Events {
        /// Allocate (cuMemAlloc) and pin buffers of these sizes (decimal, or hex with 0x).
        /// CUDA carves buffers under 2 MiB out of shared blocks, and freeing one need not
        /// revoke anything: give 2 MiB or more to see the free's event.
        #[arg(long = "alloc", value_name = "BYTES", value_parser = parse_number, required = true)]
        sizes: Vec<u64>,
        /// Pin through /dev/gdrdrv (PIN_BUFFER_V2) instead of /dev/gdrpeer.
        #[arg(long)]
        gdrdrv: bool,
        /// cuMemFree the buffers, one a second, this many seconds after pinning them.
        #[arg(long, value_name = "SECONDS")]
        free_after: Option<u64>,
        /// Give up after this many seconds without an event (status 1).
        #[arg(long, value_name = "SECONDS")]
        timeout: Option<u64>,
    },
    /// Show what /dev/gdrdrv (gdrpeer's gdrdrv-compatible device) reports: its version,
    /// the oldest library API it serves, and its attributes.
    GdrdrvInfo {
        /// The gdrdrv device node.
        #[arg(long, default_value = gdrpeer::gdrdrv::DEFAULT_PATH)]
        path: String,
    },
    /// Allocate GPU memory (cuMemAlloc), export a range of it as a dma-buf (module ABI 1.4)
    /// and show the dma-buf: its descriptor, window, and what the kernel says of it. An
    /// importer (an RDMA driver) would take the descriptor and the offset.
    Dmabuf {
        /// Bytes to allocate (decimal, or hex with 0x).
        #[arg(long = "alloc", value_name = "BYTES", value_parser = parse_number)]
        size: u64,
        /// Where the range starts in the allocation.
        #[arg(long, value_name = "BYTES", value_parser = parse_number, default_value = "0")]
        offset: u64,
        /// Bytes to export: by default, the rest of the allocation.
        #[arg(long, value_name = "BYTES", value_parser = parse_number)]
        len: Option<u64>,
        /// Keep the dma-buf this many seconds before closing it.
        #[arg(long, value_name = "SECONDS")]
        hold: Option<u64>,
    },
    /// A quick end-to-end look with CUDA: allocate, register through the user-space cache,
    /// hit, free and reallocate (the BUFFER_ID tag check), free. Exits with status 3 when no
    /// CUDA driver library can be loaded.
    Demo,
    /// Check what GPUDirect RDMA with gdrpeer needs on this machine: the kernel's Rust and
    /// headers, the NVIDIA driver's flavour, gdrpeer and its devices, the IOMMU, each GPU's
    /// BAR1, the PCIe path from each GPU to each RDMA device, Secure Boot and the module's
    /// signature. One line a check (ok, warn, FAIL) with its fix. Exit status 0: nothing
    /// stops GPUDirect RDMA; 1: some FAIL does; 2: usage error.
    Doctor {
        /// Print the findings as JSON.
        #[arg(long)]
        json: bool,
        /// Read /sys, /proc, /dev, /boot, /lib/modules and /etc under this directory
        /// instead of / (tests); runs no command and opens no device.
        #[arg(long, value_name = "DIR", hide = true)]
        root: Option<PathBuf>,
    },
}

/// Exit status of `demo` when there is no CUDA driver library.
const NO_CUDA: u8 = 3;
/// Exit status of a command line that does not parse.
const USAGE: u8 = 2;

/// What to pin.
#[derive(Args)]
struct PinArgs {
    /// GPU virtual address (decimal, or hex with 0x).
    #[arg(value_parser = parse_number)]
    va: u64,
    /// Length in bytes (decimal, or hex with 0x).
    #[arg(value_parser = parse_number)]
    len: u64,
    /// Pin without a free callback, so the driver never revokes it.
    #[arg(long)]
    persistent: bool,
}

impl PinArgs {
    fn pin<'a>(&self, dev: &'a Device) -> Result<PinGuard<'a>, gdrpeer::Error> {
        let flags = if self.persistent {
            PinFlags::PERSISTENT
        } else {
            PinFlags::empty()
        };
        dev.pin_guard(self.va, self.len, flags)
    }
}

/// A decimal number, or a hex one after 0x.
fn parse_number(s: &str) -> Result<u64, String> {
    let (digits, radix) = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => (hex, 16),
        None => (s, 10),
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return Err("not a number: expected decimal digits, or hex ones after 0x".into());
    }
    u64::from_str_radix(digits, radix).map_err(|e| e.to_string())
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // Help and version go to stdout and succeed; usage errors fail with status 2.
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(USAGE)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    if let Command::Doctor { json, root } = &cli.command {
        let sys = match root {
            Some(r) => doctor::Sys::at(r),
            None => doctor::Sys::live(),
        };
        let findings = doctor::run(&sys);
        if *json {
            println!("{:#}", doctor::to_json(&findings));
        } else {
            print!("{}", doctor::to_text(&findings));
        }
        return ExitCode::from(doctor::exit_status(&findings));
    }
    match run(&cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(CliError::Gdrpeer(e @ gdrpeer::Error::CudaLoad(_))) => {
            eprintln!("gdrpeer: {e} (demo, events and dmabuf need a CUDA driver)");
            ExitCode::from(NO_CUDA)
        }
        Err(e) => {
            eprintln!("gdrpeer: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Why a command failed.
#[derive(Debug, thiserror::Error)]
enum CliError {
    #[error(transparent)]
    Gdrpeer(#[from] gdrpeer::Error),
    #[error("{0}")]
    Demo(&'static str),
    #[error("{0}")]
    Usage(String),
}

/// The module parameters, where the caller may read them (debugfs: root).
fn limits() -> Option<Vec<(String, String)>> {
    let s = std::fs::read_to_string("/sys/kernel/debug/gdrpeer/params").ok()?;
    Some(
        s.lines()
            .filter_map(|l| l.split_once(' '))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    )
}

fn demo(dev: &Device, cu: &gdrpeer::cuda::Cuda) -> Result<(), CliError> {
    use gdrpeer::regcache::RegCache;
    let size = 1 << 20;
    let p = cu.mem_alloc(size)?;
    println!("cuMemAlloc:        {size} bytes at {p:#x}");
    let mut cache = RegCache::new(dev, cu, 16);
    let r = cache.get(p + 4096, 8192)?;
    println!(
        "first use:         pinned the allocation, handle {}, window {:#x} + {:#x}",
        r.handle, r.aligned_va, r.offset
    );
    let r = cache.get(p + 65536, 100)?;
    println!(
        "second use:        handle {} (a hit: one BUFFER_ID query)",
        r.handle
    );
    cu.mem_free(p)?;
    let q = cu.mem_alloc(size)?;
    let r = cache.get(q, 100)?;
    println!(
        "free + realloc:    {q:#x}, new BUFFER_ID: pinned again, handle {}",
        r.handle
    );
    cu.mem_free(q)?;
    match cache.get(q, 100) {
        Err(e) => println!("after cuMemFree:   {e}"),
        Ok(_) => return Err(CliError::Demo("a freed pointer was served")),
    }
    let s = cache.stats();
    println!(
        "user-space cache:  {} hits, {} misses, {} tag mismatches, {} invalid pointers",
        s.hits, s.misses, s.tag_mismatches, s.invalid_pointers
    );
    Ok(())
}

/// `gdrdrv-info`.
fn gdrdrv_info(path: &str) -> Result<(), CliError> {
    use gdrpeer::gdrdrv::{self, Gdrdrv};
    let g = Gdrdrv::open(path)?;
    let v = g.version()?;
    let ver = |w: u32| format!("{}.{}", w >> 16, w & 0xffff);
    println!("device:                         {path}");
    println!("gdrdrv version:                 {}", ver(v.driver));
    println!("minimum library API:            {}", ver(v.minimum_api));
    for (name, attr) in [
        (
            "use persistent mapping",
            gdrdrv::ATTR_USE_PERSISTENT_MAPPING,
        ),
        (
            "supports FORCE_PCIE pin flag",
            gdrdrv::ATTR_SUPPORT_PIN_FLAG_FORCE_PCIE,
        ),
    ] {
        println!("{:<32}{}", format!("{name}:"), g.attr(attr)?);
    }
    Ok(())
}

/// `events`: allocates `sizes`, pins each through `src` (`pin` makes a handle) and prints
/// the handles; frees them one a second from `free_after` seconds on, if asked; prints each
/// event until every handle was revoked or `timeout` passed without one.
fn watch<S: gdrpeer::EventSource>(
    src: &S,
    cu: &gdrpeer::cuda::Cuda,
    sizes: &[u64],
    free_after: Option<u64>,
    timeout: Option<u64>,
    pin: impl Fn(&S, u64, u64) -> Result<u64, gdrpeer::Error>,
) -> Result<(), CliError> {
    use std::io::Write;
    let mut bufs = Vec::new();
    for &size in sizes {
        let va = cu.mem_alloc(size as usize)?;
        bufs.push(va);
        let h = pin(src, va, size)?;
        println!("watching handle {h}: {size} bytes at {va:#x}");
    }
    // The output is read as it comes (a pipe, a log).
    let _ = std::io::stdout().flush();
    // The frees are this thread's (a CUDA context is current per thread): between waits.
    let start = std::time::Instant::now();
    let mut to_free = bufs.iter().enumerate().filter_map(|(i, &va)| {
        free_after.map(|after| (start + Duration::from_secs(after + i as u64), va))
    });
    let mut next_free = to_free.next();
    let mut last_event = std::time::Instant::now();
    let mut seen = 0;
    while seen < sizes.len() {
        let now = std::time::Instant::now();
        if let Some((_, va)) = next_free.filter(|(at, _)| *at <= now) {
            match cu.mem_free(va) {
                Ok(()) => println!("cuMemFree {va:#x}"),
                Err(e) => println!("cuMemFree {va:#x}: {e}"),
            }
            next_free = to_free.next();
            continue;
        }
        let deadline = timeout.map(|t| last_event + Duration::from_secs(t));
        let wait = [deadline, next_free.map(|(at, _)| at)]
            .into_iter()
            .flatten()
            .min()
            .map(|t| t.saturating_duration_since(now));
        if !src.wait_events(wait)? {
            if deadline.is_some_and(|d| std::time::Instant::now() >= d) {
                return Err(CliError::Usage(format!(
                    "no event within {} s ({seen} of {} handles revoked)",
                    timeout.unwrap_or(0),
                    sizes.len()
                )));
            }
            continue;
        }
        for e in src.try_read_events()? {
            match e.kind {
                gdrpeer::EventKind::Revoked => println!("revoked handle {}", e.handle),
                gdrpeer::EventKind::Other(t) => {
                    println!("event of unknown type {t} on handle {}", e.handle)
                }
            }
            seen += 1;
        }
        last_event = std::time::Instant::now();
        let _ = std::io::stdout().flush();
    }
    Ok(())
}

fn run(cli: &Cli) -> Result<(), CliError> {
    // The demo and events say first whether there is CUDA at all.
    let cuda = match cli.command {
        Command::Demo | Command::Events { .. } | Command::Dmabuf { .. } => {
            Some(gdrpeer::cuda::Cuda::load()?)
        }
        _ => None,
    };
    match &cli.command {
        Command::GdrdrvInfo { path } => return gdrdrv_info(path),
        Command::Events {
            sizes,
            gdrdrv: true,
            free_after,
            timeout,
        } => {
            let g = gdrpeer::gdrdrv::Gdrdrv::open_default()?;
            let cu = cuda.as_ref().expect("loaded above");
            return watch(&g, cu, sizes, *free_after, *timeout, |g, va, len| {
                g.pin_v2(va, len, 0)
            });
        }
        _ => {}
    }
    let dev = Device::open(&cli.device)?;
    match &cli.command {
        Command::Info => {
            let v = dev.version();
            println!("device:               {}", cli.device);
            println!(
                "module ABI:           {} (library {}.{})",
                v.abi_string(),
                gdrpeer::uapi::ABI_MAJOR,
                gdrpeer::uapi::ABI_MINOR
            );
            println!("nv-p2p page table:    {:#010x}", v.nv_page_table);
            println!("nv-p2p DMA mapping:   {:#010x}", v.nv_dma_mapping);
            match limits() {
                Some(params) => {
                    for (k, v) in params {
                        println!("{:<22}{v}", format!("{k}:"));
                    }
                }
                None => println!("limits:               need root (debugfs gdrpeer/params)"),
            }
        }
        Command::Pin { pin, pages, hold } => {
            let guard = pin.pin(&dev)?;
            println!("handle:     {}", guard.handle);
            println!("aligned va: {:#x}", guard.aligned_va);
            println!("offset:     {:#x}", guard.offset);
            println!("pages:      {}", guard.page_count);
            println!("page size:  {}", guard.page_size);
            if *pages {
                print_addresses(&dev.get_pages(guard.handle)?);
            }
            if let Some(secs) = hold {
                thread::sleep(Duration::from_secs(*secs));
            }
            guard.unpin()?;
        }
        Command::Pages { pin } => {
            let guard = pin.pin(&dev)?;
            print_addresses(&dev.get_pages(guard.handle)?);
            guard.unpin()?;
        }
        Command::DmaMap { pin, pci } => {
            let guard = pin.pin(&dev)?;
            print_addresses(&dev.dma_map(guard.handle, *pci)?);
            guard.unpin()?;
        }
        Command::Demo => {
            if let Some(cu) = &cuda {
                demo(&dev, cu)?;
            }
        }
        Command::Events {
            sizes,
            free_after,
            timeout,
            ..
        } => {
            let cu = cuda.as_ref().expect("loaded above");
            watch(&dev, cu, sizes, *free_after, *timeout, |d, va, len| {
                d.pin(va, len, PinFlags::empty()).map(|p| p.handle)
            })?
        }
        Command::GdrdrvInfo { .. } | Command::Doctor { .. } => {}
        Command::Dmabuf {
            size,
            offset,
            len,
            hold,
        } => {
            let cu = cuda.as_ref().expect("loaded above");
            let len = len.unwrap_or(size.saturating_sub(*offset));
            let va = cu.mem_alloc(*size as usize)?;
            let shown = show_dmabuf(&dev, va + offset, len, *hold);
            cu.mem_free(va)?;
            shown?;
        }
        Command::Stats => {
            let stats = dev.stats()?;
            println!("{:<18} {:>14} {:>14}", "counter", "this file", "all files");
            println!("{:<18} {:>14} {:>14}", "handles", stats.handles, "-");
            for ((name, mine), (_, all)) in stats
                .file
                .counters()
                .into_iter()
                .zip(stats.global.counters())
            {
                println!("{name:<18} {mine:>14} {all:>14}");
            }
        }
    }
    Ok(())
}

/// `dmabuf`: exports `[va, va + len)` and prints the dma-buf; keeps it `hold` seconds.
fn show_dmabuf(dev: &Device, va: u64, len: u64, hold: Option<u64>) -> Result<(), CliError> {
    use std::os::fd::AsRawFd;
    let buf = dev.export_dmabuf_range(va, len)?;
    let fd = buf.fd.as_raw_fd();
    println!("range:      {va:#x} + {len:#x}");
    println!("fd:         {fd}");
    println!("aligned va: {:#x}", buf.aligned_va);
    println!("offset:     {:#x}", buf.offset);
    println!("pages:      {}", buf.page_count);
    println!("size:       {}", buf.size);
    // What the dma-buf core says of it (name, size, references).
    if let Ok(info) = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}")) {
        let fields: Vec<String> = info
            .lines()
            .filter_map(|l| l.split_once(':'))
            .filter(|(k, _)| ["size", "count", "exp_name", "name"].contains(k))
            .map(|(k, v)| format!("{k} {}", v.trim()))
            .collect();
        println!("fdinfo:     {}", fields.join(", "));
    }
    if let Some(secs) = hold {
        thread::sleep(Duration::from_secs(secs));
    }
    Ok(())
}

/// One address a line, in hex.
fn print_addresses(addrs: &[u64]) {
    for a in addrs {
        println!("{a:#x}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn numbers_are_decimal_or_0x_hex() {
        assert_eq!(parse_number("4096"), Ok(4096));
        assert_eq!(parse_number("0x7f0000001000"), Ok(0x7f00_0000_1000));
        assert_eq!(parse_number("0XfF"), Ok(0xff));
        assert_eq!(parse_number("0xffffffffffffffff"), Ok(u64::MAX));
        for bad in [
            "",
            "0x",
            "ff",
            "+1",
            "-1",
            "0x+1",
            "1 ",
            "0x1_0",
            "0x10000000000000000",
        ] {
            assert!(parse_number(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn subcommands_parse() {
        let cli = Cli::try_parse_from([
            "gdrpeer",
            "pin",
            "0x10000",
            "4096",
            "--persistent",
            "--pages",
            "--hold",
            "5",
        ])
        .unwrap();
        let Command::Pin { pin, pages, hold } = cli.command else {
            panic!("not pin");
        };
        assert_eq!((pin.va, pin.len, pin.persistent), (0x10000, 4096, true));
        assert_eq!((pages, hold), (true, Some(5)));

        let cli = Cli::try_parse_from(["gdrpeer", "dma-map", "0x1000", "1", "3b:00.1"]).unwrap();
        let Command::DmaMap { pin, pci } = cli.command else {
            panic!("not dma-map");
        };
        assert_eq!((pin.va, pin.len, pin.persistent), (0x1000, 1, false));
        assert_eq!(pci.to_string(), "0000:3b:00.1");

        let err = Cli::try_parse_from(["gdrpeer", "dma-map", "0", "1", "3b:00"])
            .err()
            .unwrap();
        assert!(err.use_stderr());
        assert!(err.to_string().contains("bad PCI address"), "{err}");
        assert!(Cli::try_parse_from(["gdrpeer", "pages", "zz", "1"]).is_err());
        assert!(Cli::try_parse_from(["gdrpeer", "stats"]).is_ok());
        assert!(Cli::try_parse_from(["gdrpeer", "demo"]).is_ok());

        let cli = Cli::try_parse_from([
            "gdrpeer", "dmabuf", "--alloc", "0x30000", "--offset", "100", "--len", "5000",
        ])
        .unwrap();
        let Command::Dmabuf {
            size,
            offset,
            len,
            hold,
        } = cli.command
        else {
            panic!("not dmabuf");
        };
        assert_eq!((size, offset, len, hold), (0x30000, 100, Some(5000), None));
        assert!(
            Cli::try_parse_from(["gdrpeer", "dmabuf"]).is_err(),
            "--alloc is required"
        );
    }
}
