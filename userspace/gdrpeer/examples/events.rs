// SPDX-License-Identifier: GPL-2.0

//! Revocation events: when the GPU memory behind a pin is freed (`cuMemFree`, or its owner
//! exiting), the device file becomes readable and reports the handle, so that a library can
//! drop its registration without asking about every handle.
//!
//! Pins two buffers, frees one, and waits (poll) for its event. Needs `/dev/gdrpeer` and
//! `libcuda.so.1`: `cargo run --example events`.

use gdrpeer::{cuda::Cuda, Device, EventKind, EventSource, PinFlags, PinState};
use std::time::Duration;

mod common;

fn main() -> std::process::ExitCode {
    common::exit(run())
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let cuda = Cuda::load()?;
    let dev = Device::open_default()?;
    let len = 2 << 20;
    let (kept, freed) = (cuda.mem_alloc(len)?, cuda.mem_alloc(len)?);
    let keep = dev.pin_guard(kept, len as u64, PinFlags::empty())?;
    let gone = dev.pin_guard(freed, len as u64, PinFlags::empty())?;
    println!("pinned handles {} and {}", keep.handle, gone.handle);
    if !dev.try_read_events()?.is_empty() {
        return Err("an event before any free".into());
    }

    cuda.mem_free(freed)?;
    // The descriptor is pollable (dev.as_fd() goes to epoll as well).
    if !dev.wait_events(Some(Duration::from_secs(10)))? {
        return Err("no event within 10 s of cuMemFree".into());
    }
    let events = dev.read_events()?;
    for e in &events {
        println!("event: handle {} {:?}", e.handle, e.kind);
    }
    if events.len() != 1 || events[0].handle != gone.handle || events[0].kind != EventKind::Revoked
    {
        return Err(format!("expected one revocation of handle {}", gone.handle).into());
    }
    // The handle stays until unpinned, and says it was revoked.
    assert_eq!(dev.info(gone.handle)?.state, PinState::Revoked);
    assert_eq!(dev.info(keep.handle)?.state, PinState::Valid);
    gone.unpin()?;
    keep.unpin()?;
    cuda.mem_free(kept)?;
    println!("ok");
    Ok(())
}
