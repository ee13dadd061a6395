// SPDX-License-Identifier: GPL-2.0

//! User-space access to gdrpeer: GPUDirect RDMA pinning of NVIDIA GPU memory.
//!
//! ```no_run
//! let dev = gdrpeer::Device::open_default()?;
//! println!("gdrpeer ABI {}", dev.version().abi_string());
//! # Ok::<(), gdrpeer::Error>(())
//! ```

pub mod uapi;

use rustix::{fd::OwnedFd, io::Errno, ioctl};
use std::path::{Path, PathBuf};

/// Path of the gdrpeer device node.
pub const DEFAULT_PATH: &str = "/dev/gdrpeer";

/// What went wrong, with the errno where the kernel gave one.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Opening the device failed.
    #[error("cannot open {path}: {errno}{hint}", hint = open_hint(*.errno))]
    Open {
        /// The device path.
        path: PathBuf,
        /// The errno of open(2).
        errno: Errno,
    },
    /// The module speaks an ABI this library cannot use.
    #[error(
        "gdrpeer module ABI {}.{} is incompatible with this library's {}.{} \
         (need the same major and a minor >= ours)",
        .module >> 16, .module & 0xffff, uapi::ABI_MAJOR, uapi::ABI_MINOR
    )]
    AbiMismatch {
        /// The module's ABI version word.
        module: u32,
    },
    /// An ioctl failed.
    #[error("{op}: {errno}")]
    Ioctl {
        /// What was being done.
        op: &'static str,
        /// The errno the module returned.
        errno: Errno,
    },
}

fn open_hint(errno: Errno) -> &'static str {
    match errno {
        Errno::NOENT => " (is gdrpeer.ko loaded?)",
        Errno::ACCESS | Errno::PERM => {
            " (no permission: see the udev rule in Documentation/security.rst)"
        }
        _ => "",
    }
}

impl Error {
    /// The errno behind this error, if the kernel gave one.
    pub fn errno(&self) -> Option<Errno> {
        match self {
            Error::Open { errno, .. } | Error::Ioctl { errno, .. } => Some(*errno),
            Error::AbiMismatch { .. } => None,
        }
    }
}

/// The versions reported by the module.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModuleVersion {
    /// ABI version word (major << 16 | minor).
    pub abi: u32,
    /// nv-p2p page-table version the module was built for.
    pub nv_page_table: u32,
    /// nv-p2p DMA-mapping version the module was built for.
    pub nv_dma_mapping: u32,
}

impl ModuleVersion {
    /// "major.minor" of the ABI.
    pub fn abi_string(&self) -> String {
        format!("{}.{}", self.abi >> 16, self.abi & 0xffff)
    }
}

/// An open `/dev/gdrpeer`, checked to speak a compatible ABI.
#[derive(Debug)]
pub struct Device {
    fd: OwnedFd,
    version: ModuleVersion,
}

impl Device {
    /// Opens [`DEFAULT_PATH`].
    pub fn open_default() -> Result<Self, Error> {
        Self::open(DEFAULT_PATH)
    }

    /// Opens the device at `path` and checks that the module's ABI is compatible.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, Error> {
        let path = path.as_ref();
        let fd = rustix::fs::open(
            path,
            rustix::fs::OFlags::RDWR | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .map_err(|errno| Error::Open {
            path: path.to_owned(),
            errno,
        })?;
        let version = query_version(&fd)?;
        if !abi_compatible(version.abi) {
            return Err(Error::AbiMismatch {
                module: version.abi,
            });
        }
        Ok(Device { fd, version })
    }

    /// The versions the module reported when it was opened.
    pub fn version(&self) -> ModuleVersion {
        self.version
    }

    /// Asks the module for its version again (the cheapest ioctl there is).
    pub fn get_version(&self) -> Result<ModuleVersion, Error> {
        query_version(&self.fd)
    }
}

/// Same major, and a minor at least ours: with equal majors that is comparing the words.
fn abi_compatible(module: u32) -> bool {
    module >> 16 == uapi::ABI_MAJOR && module >= uapi::ABI_VERSION
}

fn query_version(fd: &OwnedFd) -> Result<ModuleVersion, Error> {
    let mut v = uapi::Version {
        size: size_of::<uapi::Version>() as u32,
        ..Default::default()
    };
    // SAFETY: IOCTL_GET_VERSION reads and writes exactly one `uapi::Version`, which is what
    // the Updater passes.
    unsafe {
        ioctl::ioctl(
            fd,
            ioctl::Updater::<{ uapi::IOCTL_GET_VERSION }, uapi::Version>::new(&mut v),
        )
    }
    .map_err(|errno| Error::Ioctl {
        op: "GET_VERSION",
        errno,
    })?;
    Ok(ModuleVersion {
        abi: v.abi_version,
        nv_page_table: v.nv_page_table_version,
        nv_dma_mapping: v.nv_dma_mapping_version,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn abi_compatibility_rule() {
        assert!(abi_compatible(uapi::ABI_VERSION));
        assert!(
            abi_compatible(uapi::ABI_VERSION + 1),
            "a newer minor is compatible"
        );
        assert!(
            !abi_compatible(uapi::ABI_VERSION + (1 << 16)),
            "another major is not"
        );
        assert!(!abi_compatible((uapi::ABI_MAJOR - 1) << 16 | 0xffff));
    }
}
