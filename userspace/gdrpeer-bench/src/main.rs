// SPDX-License-Identifier: GPL-2.0

//! `gdrpeer-bench`: gdrpeer's benchmarks. Figures, not pass/fail.
//!
//! `gdrpeer-bench run` measures, in the test guest (`make bench`), with nvsim.ko and gdrpeer.ko
//! loaded (and gdrnic.ko, the sample NIC, for the dma-buf measurements) and the simulated libcuda
//! on the library path; it prints the table and writes the
//! figures as JSON; without a CUDA driver library it exits with status 3. `gdrpeer-bench render`
//! turns that JSON, on the host, into the table, an rst version of it and the plot.

mod dmabuf;
mod mapping;
mod measure;
mod plot;
mod profile;
mod report;

use clap::{Parser, Subcommand};
use report::Report;
use std::{path::PathBuf, process::ExitCode};

#[derive(Parser)]
#[command(version, about = "gdrpeer's benchmarks (figures, not pass/fail)")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Measure (in the test guest), print the table and write the JSON.
    Run {
        /// Repetitions of each cheap operation.
        #[arg(long, default_value_t = 5000)]
        reps: usize,
        /// Repetitions of each operation that pins or frees (nvsim sleeps in a pin).
        #[arg(long, default_value_t = 300)]
        slow_reps: usize,
        /// Cache sizes of the scaling measurements (regions), comma-separated.
        #[arg(
            long,
            value_delimiter = ',',
            default_value = "16,64,256,1024,4096,16384,65536"
        )]
        sizes: Vec<u64>,
        /// Seed of the random choice of regions.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Where to write the figures as JSON.
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// Repeat one operation, for a profiler to sample (`make profile`).
    Loop {
        #[arg(value_enum)]
        op: profile::LoopOp,
        /// Repetitions.
        #[arg(long, default_value_t = 200000)]
        reps: usize,
    },
    /// Show a run's JSON as the table (and rst), and draw the plot.
    Render {
        /// The JSON `run` wrote.
        json: PathBuf,
        /// Draw latency against cached regions into this SVG file.
        #[arg(long)]
        svg: Option<PathBuf>,
        /// Print rst tables (for Documentation/dev/performance.rst) instead of the text table.
        #[arg(long)]
        rst: bool,
    },
}

/// The exit status when no CUDA driver library can be loaded (as gdrpeer and gdrpeer-test).
const NO_CUDA: u8 = 3;

fn main() -> ExitCode {
    let result = match Cli::parse().cmd {
        Cmd::Run {
            reps,
            slow_reps,
            sizes,
            seed,
            json,
        } => match measure::run(&measure::Config {
            reps,
            slow_reps,
            sizes,
            seed,
        }) {
            Err(measure::Failure::NoCuda(e)) => {
                eprintln!("gdrpeer-bench: {e} (the benchmarks need a CUDA driver)");
                return ExitCode::from(NO_CUDA);
            }
            Err(measure::Failure::Other(e)) => Err(e),
            Ok(r) => Ok(r),
        }
        .and_then(|r| {
            print!("{}", r.table());
            match json {
                Some(path) => write_json(&r, &path),
                None => Ok(()),
            }
        }),
        Cmd::Loop { op, reps } => match profile::run(op, reps) {
            Err(measure::Failure::NoCuda(e)) => {
                eprintln!("gdrpeer-bench: {e} (the benchmarks need a CUDA driver)");
                return ExitCode::from(NO_CUDA);
            }
            Err(measure::Failure::Other(e)) => Err(e),
            Ok(()) => Ok(()),
        },
        Cmd::Render { json, svg, rst } => read_json(&json).and_then(|r| {
            if rst {
                print!("{}", r.rst());
            } else {
                print!("{}", r.table());
            }
            match svg {
                Some(path) => plot::svg(&r, &path),
                None => Ok(()),
            }
        }),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gdrpeer-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

fn write_json(r: &Report, path: &PathBuf) -> Result<(), String> {
    let text = serde_json::to_string(r).map_err(|e| e.to_string())?;
    std::fs::write(path, text + "\n").map_err(|e| format!("{}: {e}", path.display()))
}

fn read_json(path: &PathBuf) -> Result<Report, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
}
