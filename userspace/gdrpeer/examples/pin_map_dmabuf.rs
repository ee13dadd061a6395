// SPDX-License-Identifier: GPL-2.0

//! Allocate GPU memory (CUDA) → pin it → map it for the CPU → export it as a dma-buf.
//!
//! Writes a pattern through the CPU mapping and reads it back with `cuMemcpyDtoH`, so the
//! bytes went to the GPU memory pinned; then exports the pinned window as a dma-buf, as a NIC
//! driver's `ibv_reg_dmabuf_mr(pd, buf.offset, len, va, fd, access)` would take it.
//!
//! Needs `/dev/gdrpeer` and `libcuda.so.1`: `cargo run --example pin_map_dmabuf`.

use gdrpeer::{cuda::Cuda, regcache::PointerInfo, Device, PinFlags, PinState};
use std::os::fd::AsRawFd;

mod common;

fn main() -> std::process::ExitCode {
    common::exit(run())
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let cuda = Cuda::load()?;
    let dev = Device::open_default()?;
    println!("gdrpeer module ABI {}", dev.version().abi_string());

    // 256 KiB of GPU memory, at an address 1000 bytes into the allocation: gdrpeer widens
    // the pin to whole 64 KiB GPU pages and says where the address lies in the window.
    let len: usize = 256 << 10;
    let alloc = cuda.mem_alloc(len + 65536)?;
    // SYNC_MEMOPS: a cuMemcpy to this memory is in it when the call returns, where the CPU
    // mapping (or a NIC) reads it next; without it the copy may still be in flight.
    cuda.set_sync_memops(alloc)
        .map_err(|e| format!("SYNC_MEMOPS: {e:?}"))?;
    let va = alloc + 1000;
    let pin = dev.pin_guard(va, len as u64, PinFlags::empty())?;
    println!(
        "pinned {va:#x}+{len:#x}: handle {}, window {:#x}, {} pages of {} bytes, va at offset {}",
        pin.handle, pin.aligned_va, pin.page_count, pin.page_size, pin.offset
    );
    let info = dev.info(pin.handle)?;
    assert_eq!(info.state, PinState::Valid);

    // The CPU mapping of the window: write through it, read back through CUDA.
    let map = dev.map(
        pin.handle,
        0,
        pin.page_count as usize * pin.page_size as usize,
    )?;
    let pattern: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 3) as u8).collect();
    map.write(pin.offset as usize, &pattern);
    let mut back = vec![0u8; pattern.len()];
    cuda.copy_from_device(&mut back, va)?;
    if back != pattern {
        return Err("the bytes written through the mapping are not in GPU memory".into());
    }
    // And the other way: CUDA writes, the mapping reads.
    cuda.copy_to_device(va + 8192, b"from the GPU")?;
    let mut seen = [0u8; 12];
    map.read(pin.offset as usize + 8192, &mut seen);
    if &seen != b"from the GPU" {
        return Err("the mapping does not show what cuMemcpyHtoD wrote".into());
    }
    println!(
        "mapped {} bytes: CPU writes reach the GPU and back",
        map.len()
    );
    drop(map);

    // The window as a dma-buf: it holds the memory itself, the handle may go.
    let buf = dev.export_dmabuf(pin.handle)?;
    println!(
        "dma-buf fd {}: {} bytes, {} pages, va at offset {}",
        buf.fd.as_raw_fd(),
        buf.size,
        buf.page_count,
        buf.offset
    );
    if buf.size != u64::from(pin.page_count) * u64::from(pin.page_size) || buf.offset != pin.offset
    {
        return Err("the dma-buf does not cover the pinned window".into());
    }
    pin.unpin()?;
    drop(buf);
    cuda.mem_free(alloc)?;
    println!("ok");
    Ok(())
}
