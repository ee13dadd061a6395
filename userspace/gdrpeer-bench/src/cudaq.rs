// SPDX-License-Identifier: GPL-2.0

//! `gdrpeer-bench cuda-queries`: what the CUDA pointer queries of gdrpeer's user-space
//! registration cache cost, without the module (on a GPU machine, over NVIDIA's libcuda; in
//! the guest, over libcuda-sim). A cache hit is one `BUFFER_ID` query (the tag check) and a
//! lookup; a miss adds `cuMemGetAddressRange` and `SYNC_MEMOPS` before it pins.

use crate::measure::{series, timed};
use crate::report::Latency;
use gdrpeer::{cuda::Cuda, regcache::PointerInfo};

/// The queries' latencies over a 64 KiB buffer of `cuMemAlloc`, `reps` each.
pub fn run(reps: usize) -> Result<(), String> {
    let cuda = Cuda::load().map_err(|e| e.to_string())?;
    let buf = cuda.mem_alloc(64 << 10).map_err(|e| e.to_string())?;
    let q = |what: &str, e| format!("{what}: {e:?}");
    let rows: [(&str, Latency); 3] = [
        (
            "cuPointerGetAttribute(BUFFER_ID)",
            series(reps, || {
                Ok(timed(|| cuda.buffer_id(buf + 100).map_err(|e| q("BUFFER_ID", e)))?.1)
            })?,
        ),
        (
            "cuMemGetAddressRange",
            series(reps, || {
                Ok(timed(|| cuda.address_range(buf + 100).map_err(|e| q("range", e)))?.1)
            })?,
        ),
        (
            "cuPointerSetAttribute(SYNC_MEMOPS)",
            series(reps, || {
                Ok(timed(|| cuda.set_sync_memops(buf).map_err(|e| q("SYNC_MEMOPS", e)))?.1)
            })?,
        ),
    ];
    cuda.mem_free(buf).map_err(|e| e.to_string())?;
    println!(
        "{:<36} {:>8} {:>10} {:>10} {:>10}",
        "query", "reps", "median", "mean", "p99"
    );
    for (what, l) in rows {
        println!(
            "{what:<36} {:>8} {:>7.2} us {:>7.2} us {:>7.2} us",
            l.reps,
            l.median_ns as f64 / 1e3,
            l.mean_ns as f64 / 1e3,
            l.p99_ns as f64 / 1e3
        );
    }
    Ok(())
}
