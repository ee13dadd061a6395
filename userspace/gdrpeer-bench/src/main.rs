// SPDX-License-Identifier: GPL-2.0

//! `gdrpeer-bench`: gdrpeer's benchmarks. Figures, not pass/fail.
//!
//! `gdrpeer-bench run` measures, in the test guest (`make bench`), with nvsim.ko and gdrpeer.ko
//! loaded (and gdrnic.ko, the sample NIC, for the dma-buf measurements) and the simulated libcuda
//! on the library path; it prints the table and writes the
//! figures as JSON; without a CUDA driver library it exits with status 3. `gdrpeer-bench render`
//! turns that JSON, on the host, into the table, an rst version of it and the plot.

mod apiperf;
mod cudaq;
mod dmabuf;
mod interleave;
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
        /// The NIC's kernel-API hit without the mapping cache, as `nic-hit` wrote it (the
        /// bench plan runs it first, with gdrpeer loaded with dma_map_keep=0).
        #[arg(long, conflicts_with = "no_mapping_cache_skipped")]
        no_mapping_cache: Option<PathBuf>,
        /// Why the hit without the mapping cache was not measured (shown as n/a).
        #[arg(long)]
        no_mapping_cache_skipped: Option<String>,
    },
    /// The NIC's REG + DEREG hit alone (gdrpeer loaded with dma_map_keep=0: no mapping
    /// cache), written as JSON for `run --no-mapping-cache`.
    NicHit {
        /// Repetitions.
        #[arg(long, default_value_t = 5000)]
        reps: usize,
        /// Where to write the figure.
        #[arg(long)]
        json: PathBuf,
    },
    /// Repeat one operation, for a profiler to sample (`make profile`).
    Loop {
        #[arg(value_enum)]
        op: profile::LoopOp,
        /// Repetitions.
        #[arg(long, default_value_t = 200000)]
        reps: usize,
        /// perf record's control and acknowledgement FIFOs (`perf record -D -1 --control
        /// fifo:CTL,ACK`): sampling is enabled after the set-up and the warm-up and disabled
        /// after the timed repetitions, so the profile holds the loop alone.
        #[arg(long, num_args = 2, value_names = ["CTL", "ACK"])]
        perf_control: Option<Vec<PathBuf>>,
    },
    /// The CUDA pointer queries of the user-space cache, timed without the module (on a GPU
    /// machine or in the guest).
    CudaQueries {
        /// Repetitions of each query.
        #[arg(long, default_value_t = 100000)]
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
            no_mapping_cache,
            no_mapping_cache_skipped,
        } => match no_mapping_cache_op(no_mapping_cache, no_mapping_cache_skipped)
            .map_err(measure::Failure::Other)
            .and_then(|no_mapping_cache| {
                measure::run(&measure::Config {
                    reps,
                    slow_reps,
                    sizes,
                    seed,
                    no_mapping_cache,
                })
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
        Cmd::NicHit { reps, json } => dmabuf::no_mapping_cache(reps).and_then(|o| {
            let text = serde_json::to_string(&o).map_err(|e| e.to_string())?;
            std::fs::write(&json, text + "\n").map_err(|e| format!("{}: {e}", json.display()))
        }),
        Cmd::Loop {
            op,
            reps,
            perf_control,
        } => match profile::run(op, reps, perf_control.as_deref()) {
            Err(measure::Failure::NoCuda(e)) => {
                eprintln!("gdrpeer-bench: {e} (the benchmarks need a CUDA driver)");
                return ExitCode::from(NO_CUDA);
            }
            Err(measure::Failure::Other(e)) => Err(e),
            Ok(()) => Ok(()),
        },
        Cmd::CudaQueries { reps } => cudaq::run(reps),
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

/// The hit without the mapping cache that `run` reports: read from `nic-hit`'s JSON, or why
/// there is none.
fn no_mapping_cache_op(
    path: Option<PathBuf>,
    skipped: Option<String>,
) -> Result<Result<report::Op, String>, String> {
    match path {
        Some(path) => {
            let text =
                std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            serde_json::from_str(&text)
                .map(Ok)
                .map_err(|e| format!("{}: {e}", path.display()))
        }
        None => Ok(Err(skipped.unwrap_or_else(|| {
            "not measured (the bench plan measures it with gdrpeer loaded with dma_map_keep=0)"
                .into()
        }))),
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
