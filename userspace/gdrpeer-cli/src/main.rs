// SPDX-License-Identifier: GPL-2.0

//! `gdrpeer`: look at the gdrpeer module from the command line.

use clap::{Parser, Subcommand};
use std::process::ExitCode;

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
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(&cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gdrpeer: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: &Cli) -> Result<(), gdrpeer::Error> {
    let dev = gdrpeer::Device::open(&cli.device)?;
    match cli.command {
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
        }
    }
    Ok(())
}
