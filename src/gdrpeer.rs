// SPDX-License-Identifier: GPL-2.0

//! gdrpeer: GPUDirect RDMA peer memory for PCIe devices.
//!
//! gdrpeer pins NVIDIA GPU memory through the driver's nv-p2p interface and
//! gives its bus and DMA addresses to peers: user space through `/dev/gdrpeer`
//! and RDMA NIC drivers through an exported kernel API.
//!
//! A user-space program checks the module's ABI version like this:
//!
//! ```c
//! #include <fcntl.h>
//! #include <stdio.h>
//! #include <sys/ioctl.h>
//! #include <linux/gdrpeer.h>
//!
//! int main(void)
//! {
//!     struct gdrpeer_version v = { .size = sizeof(v) };
//!     int fd = open("/dev/gdrpeer", O_RDWR | O_CLOEXEC);
//!
//!     if (fd < 0 || ioctl(fd, GDRPEER_IOCTL_GET_VERSION, &v) < 0) {
//!         perror("gdrpeer");
//!         return 1;
//!     }
//!     printf("ABI %u.%u\n", v.abi_version >> 16, v.abi_version & 0xffff);
//!     return 0;
//! }
//! ```

mod chardev;
mod nv_p2p;
#[allow(
    dead_code,
    reason = "the pin path is the core issue's; the math is tested now"
)]
mod range;
mod uapi;

use kernel::{miscdevice::MiscDeviceRegistration, prelude::*};

module! {
    type: GdrpeerModule,
    name: "gdrpeer",
    authors: ["The gdrpeer developers"],
    description: "GPUDirect RDMA peer memory for PCIe devices",
    license: "GPL",
}

#[pin_data]
struct GdrpeerModule {
    #[pin]
    _chardev: MiscDeviceRegistration<chardev::GdrpeerFile>,
}

impl kernel::InPlaceModule for GdrpeerModule {
    fn init(_module: &'static ThisModule) -> impl PinInit<Self, Error> {
        pr_info!(
            "gdrpeer ABI {}.{}, nv-p2p page table {:#010x}, DMA mapping {:#010x}\n",
            uapi::ABI_VERSION >> 16,
            uapi::ABI_VERSION & 0xffff,
            nv_p2p::PAGE_TABLE_VERSION,
            nv_p2p::DMA_MAPPING_VERSION,
        );
        try_pin_init!(Self {
            _chardev <- chardev::register(),
        })
    }
}
