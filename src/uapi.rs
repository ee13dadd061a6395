// SPDX-License-Identifier: GPL-2.0

//! The user-space ABI of `/dev/gdrpeer`, generated from
//! `include/uapi/gdrpeer.h` so that the C header and the module cannot drift.

use kernel::{
    ioctl::_IOWR,
    transmute::{AsBytes, FromBytes},
};

#[allow(
    dead_code,
    non_camel_case_types,
    non_upper_case_globals,
    missing_docs,
    unreachable_pub,
    unsafe_op_in_unsafe_fn,
    clippy::all,
    clippy::undocumented_unsafe_blocks
)]
mod bindings {
    include!("uapi_generated.rs");
}

pub(crate) use bindings::gdrpeer_version as Version;

// SAFETY: The uAPI structs consist of integer fields only, with explicit padding fields:
// every bit pattern is valid and they contain no uninitialised bytes.
unsafe impl FromBytes for Version {}
// SAFETY: As above.
unsafe impl AsBytes for Version {}

/// ABI version reported by `GDRPEER_IOCTL_GET_VERSION`.
pub(crate) const ABI_VERSION: u32 = bindings::GDRPEER_ABI_VERSION;

const MAGIC: u32 = bindings::GDRPEER_IOCTL_MAGIC;

/// `GDRPEER_IOCTL_GET_VERSION`.
pub(crate) const IOCTL_GET_VERSION: u32 = _IOWR::<Version>(MAGIC, 255);
