// SPDX-License-Identifier: GPL-2.0

//! `gdrpeer`: look at the gdrpeer module from the command line (Documentation/user/cli.rst).

mod doctor;
mod output;

use clap::{Args, CommandFactory, Parser, Subcommand};
use gdrpeer::{cuda::Cuda, Device, PciAddress, PinFlags};
use output::{Allocation, Event, EventLine, Hex, Range, SCHEMA_VERSION};
use std::{io::Write, path::PathBuf, process::ExitCode, thread, time::Duration};

/// The exit statuses, for --help and the man page (Documentation/user/cli.rst).
const EXIT_STATUS: &str = "\
Exit status:
  0  success; doctor: nothing stops GPUDirect RDMA (warnings allowed)
  1  failure: the device, the module or CUDA refused (the message is on stderr);
     doctor: at least one check FAILs; events: --timeout passed without an event
  2  usage error: the command line does not parse, or asks for what the command
     cannot do (an address of GPU memory to pin, --json where there is none)
  3  no CUDA driver library (libcuda.so.1) could be loaded: pin, pages, dma-map,
     dmabuf, events and demo allocate the GPU memory they use through CUDA

Global options (--device, --json) go before or after the subcommand.";

/// What the pin family can and cannot do, for their --help.
const PIN_NOTE: &str = "gdrpeer pins only the calling process's own GPU memory (the NVIDIA \
driver refuses any other address with EINVAL), so this command cannot pin another process's \
buffer: it allocates its own (cuMemAlloc, --alloc), pins the range --offset/--len of it, \
shows what it got, unpins and frees it. It shows whether pinning works here and what a pin \
of that size looks like; programs pin their own memory through the gdrpeer crate or \
/dev/gdrdrv.";

#[derive(Parser)]
#[command(
    name = "gdrpeer",
    version,
    propagate_version = true,
    about = "Inspect and exercise the gdrpeer kernel module",
    after_help = EXIT_STATUS
)]
struct Cli {
    /// The gdrpeer device node.
    #[arg(long, global = true, value_name = "PATH", default_value = gdrpeer::DEFAULT_PATH)]
    device: String,
    /// Print JSON instead of text (info, stats, pin, pages, dma-map, dmabuf, gdrdrv-info,
    /// doctor: one document; events: one a line). Schemas: Documentation/user/cli.rst.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Show the module's ABI, the nv-p2p versions it was built for, and its limits
    /// (debugfs: root only).
    Info,
    /// Print the registration-cache counters of all open files of the module.
    Stats,
    /// Allocate GPU memory, pin a range of it, show the window, unpin and free it.
    #[command(after_help = PIN_NOTE)]
    Pin {
        #[command(flatten)]
        pin: PinArgs,
        /// Also print the pages' bus (BAR1) addresses (needs CAP_SYS_RAWIO).
        #[arg(long)]
        pages: bool,
        /// Keep the memory pinned this many seconds (after printing) before unpinning.
        #[arg(long, value_name = "SECONDS")]
        hold: Option<u64>,
    },
    /// Allocate GPU memory, pin a range of it and print its pages' bus (BAR1) addresses,
    /// one a line (needs CAP_SYS_RAWIO).
    #[command(after_help = PIN_NOTE)]
    Pages {
        #[command(flatten)]
        pin: PinArgs,
    },
    /// Allocate GPU memory, pin a range of it and print its pages' DMA addresses as a PCI
    /// device (--peer) sees them, one a line (needs CAP_SYS_RAWIO).
    #[command(after_help = PIN_NOTE)]
    DmaMap {
        #[command(flatten)]
        pin: PinArgs,
        /// The peer device, as lspci writes it: [DDDD:]BB:DD.F.
        #[arg(long, value_name = "PCI")]
        peer: PciAddress,
    },
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
        #[arg(long, value_name = "PATH", default_value = gdrpeer::gdrdrv::DEFAULT_PATH)]
        path: String,
    },
    /// Allocate GPU memory (cuMemAlloc), export a range of it as a dma-buf (module ABI 1.4)
    /// and show the dma-buf: its descriptor, window, and what the kernel says of it. An
    /// importer (an RDMA driver) would take the descriptor and the offset.
    Dmabuf {
        #[command(flatten)]
        alloc: AllocArgs,
        /// Keep the dma-buf this many seconds (after printing) before closing it.
        #[arg(long, value_name = "SECONDS")]
        hold: Option<u64>,
    },
    /// A quick end-to-end look with CUDA: allocate, register through the user-space cache,
    /// hit, free and reallocate (the BUFFER_ID tag check), free. Text only.
    Demo,
    /// Check what GPUDirect RDMA with gdrpeer needs on this machine: the kernel's Rust and
    /// headers, the NVIDIA driver's flavour, gdrpeer and its devices, the IOMMU, each GPU's
    /// BAR1, the PCIe path from each GPU to each RDMA device, Secure Boot and the module's
    /// signature. One line a check (ok, warn, FAIL) with its fix. Exit status 0: nothing
    /// stops GPUDirect RDMA; 1: some FAIL does; 2: usage error.
    Doctor {
        /// Read /sys, /proc, /dev, /boot, /lib/modules and /etc under this directory
        /// instead of / (tests); runs no command and opens no device.
        #[arg(long, value_name = "DIR", hide = true)]
        root: Option<PathBuf>,
    },
    /// Write the man pages or a shell's completions, generated from these definitions
    /// (make install and the Debian package run it).
    #[command(hide = true)]
    Generate {
        #[command(subcommand)]
        what: Generate,
    },
}

#[derive(Subcommand)]
enum Generate {
    /// Write gdrpeer.1 and a page per subcommand (gdrpeer-info.1, ...) into DIR.
    Man {
        #[arg(value_name = "DIR")]
        dir: PathBuf,
    },
    /// Print SHELL's completion script for gdrpeer.
    Completions {
        #[arg(value_name = "SHELL")]
        shell: clap_complete::Shell,
    },
    /// Write the man pages into DIR/man and the completions of bash, zsh and fish into
    /// DIR/completions, named as each shell looks for them: gdrpeer, _gdrpeer,
    /// gdrpeer.fish.
    All {
        #[arg(value_name = "DIR")]
        dir: PathBuf,
    },
}

/// The shells `generate all` writes completions for, with the file each looks for.
const COMPLETIONS: [(clap_complete::Shell, &str); 3] = [
    (clap_complete::Shell::Bash, "gdrpeer"),
    (clap_complete::Shell::Zsh, "_gdrpeer"),
    (clap_complete::Shell::Fish, "gdrpeer.fish"),
];

/// Exit status: a failure (the device, the module or CUDA refused; doctor: some FAIL).
const FAILURE: u8 = 1;
/// Exit status of a command line that does not parse or asks for the impossible.
const USAGE: u8 = 2;
/// Exit status when there is no CUDA driver library.
const NO_CUDA: u8 = 3;

/// The GPU memory a command allocates and the range of it that it uses.
#[derive(Args)]
struct AllocArgs {
    /// Bytes of GPU memory to allocate (cuMemAlloc; decimal, or hex with 0x).
    #[arg(long = "alloc", value_name = "BYTES", value_parser = parse_number, default_value = "65536")]
    size: u64,
    /// Where the range starts in the allocation.
    #[arg(long, value_name = "BYTES", value_parser = parse_number, default_value = "0")]
    offset: u64,
    /// Bytes in the range: by default, the rest of the allocation.
    #[arg(long, value_name = "BYTES", value_parser = parse_number)]
    len: Option<u64>,
}

impl AllocArgs {
    /// The range's offset in the allocation and its length, checked against it.
    fn range(&self) -> Result<(u64, u64), CliError> {
        if self.size == 0 {
            return Err(CliError::Usage("--alloc must be at least 1 byte".into()));
        }
        if self.offset >= self.size {
            return Err(CliError::Usage(format!(
                "--offset {} is not inside the {}-byte allocation",
                self.offset, self.size
            )));
        }
        let len = self.len.unwrap_or(self.size - self.offset);
        if len == 0 || len > self.size - self.offset {
            return Err(CliError::Usage(format!(
                "--len {len} does not fit the allocation: 1 to {} bytes from --offset {}",
                self.size - self.offset,
                self.offset
            )));
        }
        Ok((self.offset, len))
    }
}

/// What the pin family pins.
#[derive(Args)]
struct PinArgs {
    #[command(flatten)]
    alloc: AllocArgs,
    /// Pin without a free callback, so the driver never revokes it.
    #[arg(long)]
    persistent: bool,
    /// An address of GPU memory, as older versions took: refused with an explanation.
    #[arg(hide = true, value_name = "ADDRESS")]
    address: Vec<String>,
}

impl PinArgs {
    fn flags(&self) -> PinFlags {
        if self.persistent {
            PinFlags::PERSISTENT
        } else {
            PinFlags::empty()
        }
    }

    /// Refuses an address argument: the command has no way to pin memory it does not own.
    fn no_address(&self, cmd: &str) -> Result<(), CliError> {
        match self.address.first() {
            None => Ok(()),
            Some(a) => Err(CliError::Usage(format!(
                "{cmd} takes no address ({a}): gdrpeer pins only the calling process's own GPU \
                 memory, and the NVIDIA driver refuses another process's address with EINVAL; \
                 {cmd} allocates, pins and frees a buffer of its own (--alloc BYTES, --offset, \
                 --len). Pin your program's memory through the gdrpeer crate or /dev/gdrdrv"
            ))),
        }
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

/// The errno behind a library error. The one place that knows the library's errno type.
fn errno_of(e: &gdrpeer::Error) -> Option<i32> {
    e.errno()
}

/// The exit status for a command line clap refused or answered (help, version).
fn parse_status(e: &clap::Error) -> u8 {
    if e.use_stderr() {
        USAGE
    } else {
        0
    }
}

fn main() -> ExitCode {
    // A reader that goes away (`gdrpeer pages | head -1`) ends the program as it ends other
    // tools, by SIGPIPE, rather than with a panic in println!.
    // SAFETY: restoring a signal's default disposition, before any thread is started.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // Help and version go to stdout and succeed; usage errors fail with status 2.
            let _ = e.print();
            return ExitCode::from(parse_status(&e));
        }
    };
    match run(&cli) {
        Ok(status) => ExitCode::from(status),
        Err(e @ CliError::Gdrpeer(gdrpeer::Error::CudaLoad(_))) => {
            eprintln!(
                "gdrpeer: {e} (pin, pages, dma-map, dmabuf, events and demo need a CUDA driver)"
            );
            ExitCode::from(e.status())
        }
        Err(e) => {
            eprintln!("gdrpeer: {e}");
            ExitCode::from(e.status())
        }
    }
}

/// Why a command failed.
#[derive(Debug, thiserror::Error)]
enum CliError {
    #[error(transparent)]
    Gdrpeer(#[from] gdrpeer::Error),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Failed(String),
    #[error("{0}")]
    Usage(String),
}

impl CliError {
    /// The exit status this error ends the program with.
    fn status(&self) -> u8 {
        match self {
            CliError::Usage(_) => USAGE,
            CliError::Gdrpeer(gdrpeer::Error::CudaLoad(_)) => NO_CUDA,
            _ => FAILURE,
        }
    }
}

/// A pin of the command's own buffer failed: the library's message, and what EINVAL means
/// when the memory is the caller's.
fn pin_failed(e: gdrpeer::Error) -> CliError {
    if errno_of(&e) == Some(libc::EINVAL) {
        CliError::Failed(format!(
            "{e}; the range is GPU memory this command allocated itself, so the refusal is \
             the NVIDIA driver's (nvidia_p2p_get_pages), not one of ownership"
        ))
    } else {
        e.into()
    }
}

/// Prints `text` or, with --json, the document; flushed, for readers of a held command.
fn emit<T: serde::Serialize>(json: bool, doc: &T, text: impl FnOnce() -> String) {
    if json {
        println!("{}", output::pretty(doc));
    } else {
        print!("{}", text());
    }
    let _ = std::io::stdout().flush();
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

fn run(cli: &Cli) -> Result<u8, CliError> {
    let json = cli.json;
    match &cli.command {
        Command::Doctor { root } => {
            let sys = match root {
                Some(r) => doctor::Sys::at(r),
                None => doctor::Sys::live(),
            };
            let findings = doctor::run(&sys);
            if json {
                println!("{:#}", doctor::to_json(&findings));
            } else {
                print!("{}", doctor::to_text(&findings));
            }
            return Ok(doctor::exit_status(&findings));
        }
        Command::Generate { what } => {
            if json {
                return Err(CliError::Usage("generate has no JSON output".into()));
            }
            generate(what)?;
            return Ok(0);
        }
        Command::Demo if json => {
            return Err(CliError::Usage(
                "demo has no JSON output (it is a walk-through; see --help)".into(),
            ))
        }
        Command::Pin { pin, .. } | Command::Pages { pin } | Command::DmaMap { pin, .. } => {
            pin.no_address(command_name(&cli.command))?;
            pin.alloc.range()?;
        }
        Command::Dmabuf { alloc, .. } => {
            alloc.range()?;
        }
        Command::Events { sizes, .. } if sizes.contains(&0) => {
            return Err(CliError::Usage("--alloc must be at least 1 byte".into()));
        }
        Command::GdrdrvInfo { path } => return gdrdrv_info(path, json).map(|()| 0),
        _ => {}
    }
    // The commands that allocate say first whether there is CUDA at all.
    let cuda = match cli.command {
        Command::Demo
        | Command::Events { .. }
        | Command::Dmabuf { .. }
        | Command::Pin { .. }
        | Command::Pages { .. }
        | Command::DmaMap { .. } => Some(Cuda::load()?),
        _ => None,
    };
    if let Command::Events {
        sizes,
        gdrdrv: true,
        free_after,
        timeout,
    } = &cli.command
    {
        let g = gdrpeer::gdrdrv::Gdrdrv::open_default()?;
        let cu = cuda.as_ref().expect("loaded above");
        watch(&g, cu, sizes, *free_after, *timeout, json, |g, va, len| {
            g.pin_v2(va, len, 0)
        })?;
        return Ok(0);
    }
    let dev = Device::open(&cli.device)?;
    match &cli.command {
        Command::Info => info(&dev, &cli.device, json),
        Command::Stats => stats(&dev, json)?,
        Command::Pin { pin, pages, hold } => {
            let cu = cuda.as_ref().expect("loaded above");
            with_pin(&dev, cu, pin, |guard, mut doc| {
                if *pages {
                    doc.pages = Some(hexes(&dev.get_pages(guard.handle)?));
                }
                emit(json, &doc, || {
                    let mut s = pin_text(&doc);
                    s += &addresses_text(doc.pages.as_deref().unwrap_or_default());
                    s
                });
                if let Some(secs) = hold {
                    thread::sleep(Duration::from_secs(*secs));
                }
                Ok(())
            })?
        }
        Command::Pages { pin } => {
            let cu = cuda.as_ref().expect("loaded above");
            with_pin(&dev, cu, pin, |guard, mut doc| {
                doc.pages = Some(hexes(&dev.get_pages(guard.handle)?));
                emit(json, &doc, || {
                    addresses_text(doc.pages.as_deref().unwrap_or_default())
                });
                Ok(())
            })?
        }
        Command::DmaMap { pin, peer } => {
            let cu = cuda.as_ref().expect("loaded above");
            with_pin(&dev, cu, pin, |guard, mut doc| {
                doc.dma_addresses = Some(hexes(&dev.dma_map(guard.handle, *peer)?));
                doc.peer = Some(peer.to_string());
                emit(json, &doc, || {
                    addresses_text(doc.dma_addresses.as_deref().unwrap_or_default())
                });
                Ok(())
            })?
        }
        Command::Demo => demo(&dev, cuda.as_ref().expect("loaded above"))?,
        Command::Events {
            sizes,
            free_after,
            timeout,
            ..
        } => {
            let cu = cuda.as_ref().expect("loaded above");
            watch(
                &dev,
                cu,
                sizes,
                *free_after,
                *timeout,
                json,
                |d, va, len| {
                    d.pin(va, len, PinFlags::empty())
                        .map(|p| p.handle)
                        .map_err(pin_failed)
                },
            )?
        }
        Command::Dmabuf { alloc, hold } => {
            let cu = cuda.as_ref().expect("loaded above");
            let (offset, len) = alloc.range()?;
            let va = cu.mem_alloc(alloc.size as usize)?;
            let shown = show_dmabuf(&dev, va, alloc.size, offset, len, *hold, json);
            cu.mem_free(va)?;
            shown?;
        }
        Command::GdrdrvInfo { .. } | Command::Doctor { .. } | Command::Generate { .. } => {}
    }
    Ok(0)
}

/// The subcommand's name, as typed.
fn command_name(c: &Command) -> &'static str {
    match c {
        Command::Pin { .. } => "pin",
        Command::Pages { .. } => "pages",
        Command::DmaMap { .. } => "dma-map",
        _ => "gdrpeer",
    }
}

/// `generate`: the man pages into a directory, or a shell's completions to stdout.
fn generate(what: &Generate) -> Result<(), CliError> {
    let cmd = Cli::command();
    match what {
        Generate::Man { dir } => {
            let mut cmd = cmd.disable_help_subcommand(true);
            cmd.build();
            std::fs::create_dir_all(dir)
                .and_then(|()| man_pages(&cmd, dir))
                .map_err(|e| in_dir(dir, e))?;
        }
        Generate::Completions { shell } => {
            let mut cmd = cmd;
            clap_complete::generate(*shell, &mut cmd, "gdrpeer", &mut std::io::stdout());
        }
        Generate::All { dir } => {
            generate(&Generate::Man {
                dir: dir.join("man"),
            })?;
            let comp = dir.join("completions");
            std::fs::create_dir_all(&comp).map_err(|e| in_dir(&comp, e))?;
            for (shell, file) in COMPLETIONS {
                let path = comp.join(file);
                let mut out = std::fs::File::create(&path).map_err(|e| in_dir(&path, e))?;
                clap_complete::generate(shell, &mut Cli::command(), "gdrpeer", &mut out);
                out.flush().map_err(|e| in_dir(&path, e))?;
            }
        }
    }
    Ok(())
}

/// A file-system error, with the path it concerns.
fn in_dir(path: &std::path::Path, e: std::io::Error) -> CliError {
    CliError::Failed(format!("{}: {e}", path.display()))
}

/// Writes `cmd`'s man page and its visible subcommands' into `dir`, as
/// clap_mangen::generate_to does, with the after-help text under a heading of its own:
/// EXIT STATUS on gdrpeer.1, NOTES on a subcommand's page.
fn man_pages(cmd: &clap::Command, dir: &std::path::Path) -> std::io::Result<()> {
    use clap_mangen::roff::{roman, Roff};
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        man_pages(sub, dir)?;
    }
    let man = clap_mangen::Man::new(cmd.clone());
    let mut f = std::fs::File::create(dir.join(man.get_filename()))?;
    man.render_title(&mut f)?;
    man.render_name_section(&mut f)?;
    man.render_synopsis_section(&mut f)?;
    man.render_description_section(&mut f)?;
    if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        man.render_options_section(&mut f)?;
    }
    if cmd.get_subcommands().any(|s| !s.is_hide_set()) {
        man.render_subcommands_section(&mut f)?;
    }
    if let Some(after) = cmd.get_after_help() {
        let text = after.to_string();
        let (heading, body) = match text.strip_prefix("Exit status:\n") {
            Some(body) => ("EXIT STATUS", body),
            None => ("NOTES", text.as_str()),
        };
        let mut roff = Roff::new();
        roff.control("SH", [heading]);
        if heading == "NOTES" {
            roff.text([roman(body)]);
        } else {
            // The table as --help shows it.
            roff.control("nf", []);
            for line in body.lines() {
                roff.text([roman(line)]);
            }
            roff.control("fi", []);
        }
        roff.to_writer(&mut f)?;
    }
    if cmd.get_version().is_some() {
        man.render_version_section(&mut f)?;
    }
    f.flush()
}

/// `info`.
fn info(dev: &Device, path: &str, json: bool) {
    let v = dev.version();
    let params = limits();
    let doc = output::Info {
        version: SCHEMA_VERSION,
        device: path.to_string(),
        abi: v.abi_string(),
        library_abi: format!("{}.{}", gdrpeer::uapi::ABI_MAJOR, gdrpeer::uapi::ABI_MINOR),
        nv_page_table: format!("{:#010x}", v.nv_page_table),
        nv_dma_mapping: format!("{:#010x}", v.nv_dma_mapping),
        params: params.as_ref().map(|p| {
            p.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.parse().ok()?)))
                .collect()
        }),
    };
    emit(json, &doc, || {
        let mut s = format!("device:               {}\n", doc.device);
        s += &format!(
            "module ABI:           {} (library {})\n",
            doc.abi, doc.library_abi
        );
        s += &format!("nv-p2p page table:    {}\n", doc.nv_page_table);
        s += &format!("nv-p2p DMA mapping:   {}\n", doc.nv_dma_mapping);
        match &params {
            Some(params) => {
                for (k, v) in params {
                    s += &format!("{:<22}{v}\n", format!("{k}:"));
                }
            }
            None => {
                s += "limits:               not readable (debugfs gdrpeer/params: root, \
                      debugfs mounted)\n"
            }
        }
        s
    });
}

/// `stats`: the counters over all files. The STATS ioctl's per-file counters are left out:
/// they are this command's own file's, opened a moment before, and always 0.
fn stats(dev: &Device, json: bool) -> Result<(), CliError> {
    let stats = dev.stats()?;
    let doc = output::Stats {
        version: SCHEMA_VERSION,
        global: counters(&stats.global),
    };
    emit(json, &doc, || {
        let mut s = format!("{:<18} {:>14}\n", "counter", "all files");
        for (name, all) in stats.global.counters() {
            s += &format!("{name:<18} {all:>14}\n");
        }
        s
    });
    Ok(())
}

/// The counters by name.
fn counters(c: &gdrpeer::CacheStats) -> std::collections::BTreeMap<String, u64> {
    c.counters()
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
}

fn hexes(v: &[u64]) -> Vec<Hex> {
    v.iter().copied().map(Hex).collect()
}

/// The pin family: allocates, pins the range, hands the guard and the document so far to
/// `show`, then unpins and frees, whatever `show` did.
fn with_pin(
    dev: &Device,
    cu: &Cuda,
    args: &PinArgs,
    show: impl FnOnce(&gdrpeer::PinGuard<'_>, output::Pin) -> Result<(), CliError>,
) -> Result<(), CliError> {
    let (offset, len) = args.alloc.range()?;
    let base = cu.mem_alloc(args.alloc.size as usize)?;
    let va = base + offset;
    let pinned = (|| -> Result<(), CliError> {
        let guard = dev.pin_guard(va, len, args.flags()).map_err(pin_failed)?;
        let doc = output::Pin {
            version: SCHEMA_VERSION,
            allocation: Allocation {
                va: Hex(base),
                size: args.alloc.size,
            },
            range: Range { va: Hex(va), len },
            persistent: args.persistent,
            handle: guard.handle,
            aligned_va: Hex(guard.aligned_va),
            offset: guard.offset,
            page_count: guard.page_count,
            page_size: guard.page_size,
            pages: None,
            peer: None,
            dma_addresses: None,
        };
        show(&guard, doc)?;
        guard.unpin()?;
        Ok(())
    })();
    let freed = cu.mem_free(base);
    pinned?;
    Ok(freed?)
}

/// `pin`'s text.
fn pin_text(p: &output::Pin) -> String {
    format!(
        "allocation: {} bytes at {:#x} (cuMemAlloc, freed before exit)\n\
         range:      {:#x} + {:#x}\n\
         handle:     {}\n\
         aligned va: {:#x}\n\
         offset:     {:#x}\n\
         pages:      {}\n\
         page size:  {}\n",
        p.allocation.size,
        p.allocation.va.0,
        p.range.va.0,
        p.range.len,
        p.handle,
        p.aligned_va.0,
        p.offset,
        p.page_count,
        p.page_size
    )
}

/// One address a line, in hex.
fn addresses_text(addrs: &[Hex]) -> String {
    addrs.iter().map(|a| format!("{:#x}\n", a.0)).collect()
}

fn demo(dev: &Device, cu: &Cuda) -> Result<(), CliError> {
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
        Ok(_) => return Err(CliError::Failed("demo: a freed pointer was served".into())),
    }
    let s = cache.stats();
    println!(
        "user-space cache:  {} hits, {} misses, {} tag mismatches, {} invalid pointers",
        s.hits, s.misses, s.tag_mismatches, s.invalid_pointers
    );
    Ok(())
}

/// `gdrdrv-info`.
fn gdrdrv_info(path: &str, json: bool) -> Result<(), CliError> {
    use gdrpeer::gdrdrv::{self, Gdrdrv};
    let g = Gdrdrv::open(path)?;
    let v = g.version()?;
    let ver = |w: u32| format!("{}.{}", w >> 16, w & 0xffff);
    let doc = output::GdrdrvInfo {
        version: SCHEMA_VERSION,
        device: path.to_string(),
        gdrdrv_version: ver(v.driver),
        minimum_api: ver(v.minimum_api),
        attributes: output::GdrdrvAttributes {
            use_persistent_mapping: g.attr(gdrdrv::ATTR_USE_PERSISTENT_MAPPING)?,
            support_pin_flag_force_pcie: g.attr(gdrdrv::ATTR_SUPPORT_PIN_FLAG_FORCE_PCIE)?,
        },
    };
    emit(json, &doc, || {
        let mut s = format!("device:                         {path}\n");
        s += &format!("gdrdrv version:                 {}\n", doc.gdrdrv_version);
        s += &format!("minimum library API:            {}\n", doc.minimum_api);
        for (name, val) in [
            (
                "use persistent mapping",
                doc.attributes.use_persistent_mapping,
            ),
            (
                "supports FORCE_PCIE pin flag",
                doc.attributes.support_pin_flag_force_pcie,
            ),
        ] {
            s += &format!("{:<32}{val}\n", format!("{name}:"));
        }
        s
    });
    Ok(())
}

/// `events`: allocates `sizes`, pins each through `src` (`pin` makes a handle) and prints
/// the handles; frees them one a second from `free_after` seconds on, if asked; prints each
/// event until every handle was revoked or `timeout` passed without one.
#[allow(clippy::too_many_arguments)]
fn watch<S: gdrpeer::EventSource, E: Into<CliError>>(
    src: &S,
    cu: &Cuda,
    sizes: &[u64],
    free_after: Option<u64>,
    timeout: Option<u64>,
    json: bool,
    pin: impl Fn(&S, u64, u64) -> Result<u64, E>,
) -> Result<(), CliError> {
    let say = |e: Event| {
        if json {
            println!("{}", output::line(&EventLine::new(e)));
        } else {
            match e {
                Event::Watching { handle, va, size } => {
                    println!("watching handle {handle}: {size} bytes at {:#x}", va.0)
                }
                Event::Freed { va, error: None } => println!("cuMemFree {:#x}", va.0),
                Event::Freed { va, error: Some(e) } => println!("cuMemFree {:#x}: {e}", va.0),
                Event::Revoked { handle } => println!("revoked handle {handle}"),
                Event::Unknown { kind, handle } => {
                    println!("event of unknown type {kind} on handle {handle}")
                }
            }
        }
        // The output is read as it comes (a pipe, a log).
        let _ = std::io::stdout().flush();
    };
    let mut bufs = Vec::new();
    for &size in sizes {
        let va = cu.mem_alloc(size as usize)?;
        bufs.push(va);
        let handle = pin(src, va, size).map_err(Into::into)?;
        say(Event::Watching {
            handle,
            va: Hex(va),
            size,
        });
    }
    // The frees are this thread's (a CUDA context is current per thread): between waits.
    let start = std::time::Instant::now();
    let mut to_free = bufs.iter().enumerate().filter_map(|(i, &va)| {
        // An instant past what the clock can hold is never: that buffer is not freed.
        let at = free_after.and_then(|after| after.checked_add(i as u64));
        at.and_then(|s| start.checked_add(Duration::from_secs(s)))
            .map(|at| (at, va))
    });
    let mut next_free = to_free.next();
    let mut last_event = std::time::Instant::now();
    let mut seen = 0;
    while seen < sizes.len() {
        let now = std::time::Instant::now();
        if let Some((_, va)) = next_free.filter(|(at, _)| *at <= now) {
            say(Event::Freed {
                va: Hex(va),
                error: cu.mem_free(va).err().map(|e| e.to_string()),
            });
            next_free = to_free.next();
            // The timeout counts from the last free too: the events it brings take time.
            last_event = std::time::Instant::now();
            continue;
        }
        // No timeout while a free of ours is still to come: its event cannot come before.
        let deadline = timeout
            .filter(|_| next_free.is_none())
            .and_then(|t| last_event.checked_add(Duration::from_secs(t)));
        let wait = [deadline, next_free.map(|(at, _)| at)]
            .into_iter()
            .flatten()
            .min()
            .map(|t| t.saturating_duration_since(now));
        if !src.wait_events(wait)? {
            if deadline.is_some_and(|d| std::time::Instant::now() >= d) {
                return Err(CliError::Failed(format!(
                    "no event within {} s ({seen} of {} handles revoked)",
                    timeout.unwrap_or(0),
                    sizes.len()
                )));
            }
            continue;
        }
        let events = src.try_read_events()?;
        if !events.is_empty() {
            last_event = std::time::Instant::now();
        }
        for e in events {
            say(match e.kind {
                gdrpeer::EventKind::Revoked => Event::Revoked { handle: e.handle },
                gdrpeer::EventKind::Other(t) => Event::Unknown {
                    kind: t,
                    handle: e.handle,
                },
            });
            seen += 1;
        }
    }
    Ok(())
}

/// `dmabuf`: exports `[base + offset, + len)` of the `size`-byte allocation at `base` and
/// prints the dma-buf; keeps it `hold` seconds.
fn show_dmabuf(
    dev: &Device,
    base: u64,
    size: u64,
    offset: u64,
    len: u64,
    hold: Option<u64>,
    json: bool,
) -> Result<(), CliError> {
    use std::os::fd::AsRawFd;
    let va = base + offset;
    let buf = dev.export_dmabuf_range(va, len)?;
    let fd = buf.fd.as_raw_fd();
    // What the dma-buf core says of it (name, size, references).
    let fdinfo = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}"))
        .ok()
        .map(|info| {
            info.lines()
                .filter_map(|l| l.split_once(':'))
                .filter(|(k, _)| ["size", "count", "exp_name", "name"].contains(k))
                .map(|(k, v)| (k.to_string(), v.trim().to_string()))
                .collect::<std::collections::BTreeMap<_, _>>()
        });
    let doc = output::Dmabuf {
        version: SCHEMA_VERSION,
        allocation: Allocation {
            va: Hex(base),
            size,
        },
        range: Range { va: Hex(va), len },
        fd,
        aligned_va: Hex(buf.aligned_va),
        offset: buf.offset,
        page_count: buf.page_count,
        size: buf.size,
        fdinfo,
    };
    emit(json, &doc, || {
        let mut s = format!("range:      {va:#x} + {len:#x}\n");
        s += &format!("fd:         {fd}\n");
        s += &format!("aligned va: {:#x}\n", buf.aligned_va);
        s += &format!("offset:     {:#x}\n", buf.offset);
        s += &format!("pages:      {}\n", buf.page_count);
        s += &format!("size:       {}\n", buf.size);
        if let Some(info) = &doc.fdinfo {
            // In the order the kernel writes them.
            let fields: Vec<String> = ["size", "count", "exp_name", "name"]
                .iter()
                .filter_map(|k| info.get(*k).map(|v| format!("{k} {v}")))
                .collect();
            s += &format!("fdinfo:     {}\n", fields.join(", "));
        }
        s
    });
    if let Some(secs) = hold {
        thread::sleep(Duration::from_secs(secs));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
