// SPDX-License-Identifier: GPL-2.0

//! The registration cache: pin a CUDA allocation on first use, serve later uses of any
//! pointer into it from the cache, and notice when the memory was freed (and reallocated).
//!
//! This is what a communication library (UCX, NCCL) keeps between a user's buffer and the
//! pin it registered with the NIC. Needs `/dev/gdrpeer` and `libcuda.so.1`:
//! `cargo run --example regcache`.

use gdrpeer::{cuda::Cuda, regcache::RegCache, Device, Error};

mod common;

fn main() -> std::process::ExitCode {
    common::exit(run())
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let cuda = Cuda::load()?;
    let dev = Device::open_default()?;
    // At most 16 allocations pinned; the least recently used goes first.
    let mut cache = RegCache::new(&dev, &cuda, 16);

    let size = 1 << 20;
    let buf = cuda.mem_alloc(size)?;
    // First use: a miss, which pins the whole allocation.
    let a = cache.get(buf + 4096, 8192)?;
    // Another pointer into the same allocation: a hit, the same pin.
    let b = cache.get(buf + 65536, 4096)?;
    println!(
        "handle {} serves both ranges: offsets {} and {}",
        a.handle, a.offset, b.offset
    );
    let s = cache.stats();
    println!("{} miss, {} hit", s.misses, s.hits);
    if a.handle != b.handle || (s.misses, s.hits) != (1, 1) {
        return Err("the second use of the allocation was not a hit".into());
    }

    // A range past the allocation's end is refused.
    match cache.get(buf + size as u64 - 10, 100) {
        Err(e @ Error::OutOfRange { .. }) => println!("refused: {e}"),
        other => return Err(format!("a range past the allocation: {other:?}").into()),
    }

    // Freed: the buffer-id tag check drops the entry and refuses the pointer.
    cuda.mem_free(buf)?;
    match cache.get(buf + 4096, 8192) {
        Err(e @ Error::InvalidPointer { .. }) => println!("after cuMemFree: {e}"),
        other => return Err(format!("a freed pointer was served: {other:?}").into()),
    }
    let s = cache.stats();
    println!(
        "{} misses, {} hits, {} invalid pointers, {} entries",
        s.misses, s.hits, s.invalid_pointers, s.entries
    );
    if s.entries != 0 || s.invalid_pointers != 1 {
        return Err("the freed allocation's entry was not dropped".into());
    }
    println!("ok");
    Ok(())
}
