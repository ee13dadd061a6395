// SPDX-License-Identifier: GPL-2.0

//! The raw uAPI of `/dev/gdrpeer`, mirroring `include/uapi/gdrpeer.h`.
//!
//! The layouts and ioctl numbers are checked against the C header by the
//! `uapi_matches_c_header` test, which compiles a C program that includes it.

/// ABI major version this library speaks.
pub const ABI_MAJOR: u32 = 1;
/// ABI minor version this library was built for.
pub const ABI_MINOR: u32 = 0;
/// `GDRPEER_ABI_VERSION`.
pub const ABI_VERSION: u32 = (ABI_MAJOR << 16) | ABI_MINOR;
/// `GDRPEER_IOCTL_MAGIC`.
pub const IOCTL_MAGIC: u8 = 0xDB;

/// `struct gdrpeer_version`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Version {
    /// In: `size_of::<Version>()`.
    pub size: u32,
    /// Out: the module's `GDRPEER_ABI_VERSION`.
    pub abi_version: u32,
    /// Out: the nv-p2p page-table version the module was built for.
    pub nv_page_table_version: u32,
    /// Out: the nv-p2p DMA-mapping version the module was built for.
    pub nv_dma_mapping_version: u32,
}

/// `GDRPEER_IOCTL_GET_VERSION`.
pub const IOCTL_GET_VERSION: rustix::ioctl::Opcode =
    rustix::ioctl::opcode::read_write::<Version>(IOCTL_MAGIC, 255);

#[cfg(test)]
mod tests {
    use super::*;
    use std::{path::Path, process::Command};

    /// Compiles a C program against the header and compares what it prints
    /// (sizes, offsets, ioctl numbers, versions) with this module.
    #[test]
    fn uapi_matches_c_header() {
        let include = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../include");
        let dir = std::env::temp_dir().join(format!("gdrpeer-uapi-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let src = dir.join("probe.c");
        std::fs::write(
            &src,
            r#"
#include <stddef.h>
#include <stdio.h>
#include <uapi/gdrpeer.h>
#define S(t) printf(#t " size %zu\n", sizeof(struct t))
#define O(t, f) printf(#t "." #f " %zu\n", offsetof(struct t, f))
int main(void)
{
	printf("abi %u\n", GDRPEER_ABI_VERSION);
	printf("magic %u\n", GDRPEER_IOCTL_MAGIC);
	printf("get_version %lu\n", (unsigned long)GDRPEER_IOCTL_GET_VERSION);
	S(gdrpeer_version);
	O(gdrpeer_version, size);
	O(gdrpeer_version, abi_version);
	O(gdrpeer_version, nv_page_table_version);
	O(gdrpeer_version, nv_dma_mapping_version);
	return 0;
}
"#,
        )
        .unwrap();
        let exe = dir.join("probe");
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
        let status = Command::new(cc)
            .arg("-I")
            .arg(&include)
            .arg(&src)
            .arg("-o")
            .arg(&exe)
            .status()
            .expect("a C compiler is needed to check the uAPI against its header");
        assert!(status.success(), "the uAPI header does not compile");
        let out = String::from_utf8(Command::new(&exe).output().unwrap().stdout).unwrap();
        std::fs::remove_dir_all(&dir).ok();

        let expected = format!(
            "abi {}\nmagic {}\nget_version {}\n\
             gdrpeer_version size {}\n\
             gdrpeer_version.size {}\n\
             gdrpeer_version.abi_version {}\n\
             gdrpeer_version.nv_page_table_version {}\n\
             gdrpeer_version.nv_dma_mapping_version {}\n",
            ABI_VERSION,
            IOCTL_MAGIC,
            IOCTL_GET_VERSION,
            size_of::<Version>(),
            std::mem::offset_of!(Version, size),
            std::mem::offset_of!(Version, abi_version),
            std::mem::offset_of!(Version, nv_page_table_version),
            std::mem::offset_of!(Version, nv_dma_mapping_version),
        );
        assert_eq!(out, expected);
    }
}
