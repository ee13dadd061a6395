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

mod cache;
mod chardev;
mod gate;
mod kapi;
mod nv_p2p;
mod policy;
mod range;
mod sys;
mod uapi;

use kernel::{debugfs, miscdevice::MiscDeviceRegistration, prelude::*};

module! {
    type: GdrpeerModule,
    name: "gdrpeer",
    authors: ["The gdrpeer developers"],
    description: "GPUDirect RDMA peer memory for PCIe devices",
    license: "GPL",
    params: {
        max_pin_bytes: u64 {
            default: 1 << 38,
            description: "Largest pin request in bytes (longer ones fail with EINVAL)",
        },
        cache_max_bytes: u64 {
            default: 0,
            description: "Pinned bytes per context above which unused regions are unpinned (0: no limit)",
        },
        cache_max_regions: u64 {
            default: 1024,
            description: "Pinned regions per context above which unused regions are unpinned (0: no limit)",
        },
        global_max_bytes: u64 {
            default: 0,
            description: "Pinned bytes over all contexts above which unused regions are unpinned (0: no limit)",
        },
        invalidate_warn_ms: u64 {
            default: 100,
            description: "A peer driver's invalidate callback slower than this is reported in the kernel log",
        },
    },
}

/// Reads a module parameter. The kernel crate's `value()` returns a reference up to 7.2 and
/// the value from 7.3 on (`param_value_owned`, set by src/Kbuild).
macro_rules! param {
    ($name:ident) => {{
        #[cfg(param_value_owned)]
        let value = module_parameters::$name.value();
        #[cfg(not(param_value_owned))]
        let value = *module_parameters::$name.value();
        value
    }};
}

fn param_max_pin_bytes() -> u64 {
    param!(max_pin_bytes)
}

fn param_cache_max_bytes() -> u64 {
    param!(cache_max_bytes)
}

fn param_cache_max_regions() -> u64 {
    param!(cache_max_regions)
}

fn param_global_max_bytes() -> u64 {
    param!(global_max_bytes)
}

fn param_invalidate_warn_ms() -> u64 {
    param!(invalidate_warn_ms)
}

/// The module's data. Fields drop in order: the device goes first (no new files), the
/// callback workqueue last (drained, so no work of ours runs after unload).
#[pin_data(PinnedDrop)]
struct GdrpeerModule {
    #[pin]
    chardev: MiscDeviceRegistration<chardev::GdrpeerFile>,
    #[pin]
    _global_stats: debugfs::File<()>,
    #[pin]
    _params: debugfs::File<()>,
    /// `gdrpeer/files`: one directory per open file.
    files_dir: debugfs::Dir,
    _debugfs: debugfs::Dir,
    #[pin]
    env: cache::Env,
}

impl kernel::InPlaceModule for GdrpeerModule {
    fn init(module: &'static ThisModule) -> impl PinInit<Self, Error> {
        pr_info!(
            "gdrpeer ABI {}.{}, nv-p2p page table {:#010x}, DMA mapping {:#010x}\n",
            uapi::ABI_VERSION >> 16,
            uapi::ABI_VERSION & 0xffff,
            nv_p2p::PAGE_TABLE_VERSION,
            nv_p2p::DMA_MAPPING_VERSION,
        );
        let root = debugfs::Dir::new(c"gdrpeer");
        try_pin_init!(Self {
            env <- cache::Env::new(module),
            files_dir: root.subdir(c"files"),
            _global_stats <- root.read_callback_file(c"stats", (), &|(): &(), f| {
                cache::GLOBAL.show(f)
            }),
            // Module parameters are not in sysfs: show them here.
            _params <- root.read_callback_file(c"params", (), &|(): &(), f| {
                writeln!(f, "max_pin_bytes {}", param_max_pin_bytes())?;
                writeln!(f, "cache_max_bytes {}", param_cache_max_bytes())?;
                writeln!(f, "cache_max_regions {}", param_cache_max_regions())?;
                writeln!(f, "global_max_bytes {}", param_global_max_bytes())?;
                writeln!(f, "invalidate_warn_ms {}", param_invalidate_warn_ms())
            }),
            _debugfs: root,
            chardev <- chardev::register(),
        })
        .pin_chain(|this| {
            // SAFETY: the module's data stays in place until the module exits, and `drop`
            // withdraws it first.
            unsafe { kapi::publish_env(&this.env) };
            Ok(())
        })
    }
}

#[pinned_drop]
impl PinnedDrop for GdrpeerModule {
    fn drop(self: Pin<&mut Self>) {
        kapi::withdraw_env();
    }
}
