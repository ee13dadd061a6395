// SPDX-License-Identifier: GPL-2.0

//! CUDA's VMM structures as a program passes them to `cuMemCreate`,
//! `cuMemGetAllocationGranularity` and `cuMemSetAccess`, for the test programs that call
//! libcuda.so.1 (the simulated one in the guest, NVIDIA's on a GPU machine). libcuda-sim
//! declares its own, the side that reads them.

use std::ffi::{c_int, c_uint, c_void};

/// `CUmemAllocationProp`: pinned memory on a device.
#[repr(C)]
pub struct Prop {
    type_: c_uint,
    handle_types: c_uint,
    location: [c_int; 2],
    win32: *mut c_void,
    alloc_flags: [u8; 8],
}

impl Prop {
    /// Pinned memory (`CU_MEM_ALLOCATION_TYPE_PINNED`) on device `id`, no shareable
    /// handles, GPUDirect RDMA capable.
    pub fn device(id: c_int) -> Self {
        Prop {
            type_: 1,
            handle_types: 0,
            location: [1, id],
            win32: std::ptr::null_mut(),
            alloc_flags: [0, 1, 0, 0, 0, 0, 0, 0], // gpuDirectRDMACapable
        }
    }
}

/// `CUmemAccessDesc`.
#[repr(C)]
pub struct AccessDesc {
    location: [c_int; 2],
    flags: c_uint,
}

/// Read-write access (`CU_MEM_ACCESS_FLAGS_PROT_READWRITE`) for device 0.
pub const ACCESS_RW: AccessDesc = AccessDesc {
    location: [1, 0],
    flags: 3,
};
