// SPDX-License-Identifier: GPL-2.0

//! A simulated `libcuda.so.1` over `/dev/nvsim`.
//!
//! It implements the CUDA driver API subset a GPUDirect RDMA user (a program
//! built on gdrpeer's user-space library, or on a gdrcopy-like API) needs,
//! with CUDA's own signatures, enum values and error codes, so that a program
//! that loads `libcuda.so.1` dynamically runs unchanged against real CUDA on a
//! GPU machine and against nvsim in the test guest (`LD_LIBRARY_PATH`).
//!
//! Memory comes from nvsim and belongs to the calling process, so nv-p2p pins
//! made in this process find it, and freeing it fires their free callbacks,
//! as with real CUDA. There is one device, H100-like (compute capability
//! 9.0), whose primary context and the contexts of `cuCtxCreate` own the memory allocated in
//! them, each current in the threads that made it current.
//!
//! The modules follow the driver API's sections: [`context`] (initialisation
//! and contexts), [`device`] (with [`attributes`], its table), [`memory`], [`vmm`] (virtual memory management:
//! `cuMemCreate`, `cuMemMap`, ...), [`pointer`] (pointer attributes) and
//! [`errors`].

#![allow(non_snake_case, clippy::missing_safety_doc)]

use std::ffi::{c_int, c_uint, c_void};

pub mod attributes;
pub mod context;
pub mod device;
pub mod errors;
pub mod memory;
pub mod pointer;
pub mod vmm;

/// `CUresult`.
pub type CUresult = c_uint;
/// `CUdeviceptr`.
pub type CUdeviceptr = u64;
/// `CUdevice`.
pub type CUdevice = c_int;
/// `CUcontext`: an opaque pointer.
pub type CUcontext = *mut c_void;

#[cfg(test)]
pub(crate) mod test_util {
    /// True where this machine has no simulated GPU, as on a build host: calls that need one
    /// must then fail cleanly.
    pub fn no_nvsim() -> bool {
        !std::path::Path::new("/dev/nvsim").exists()
    }
}
