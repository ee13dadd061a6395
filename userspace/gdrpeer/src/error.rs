// SPDX-License-Identifier: GPL-2.0

//! The crate's one error type, [`Error`], and what each errno of each call means.

use crate::{uapi, Op};
use std::{fmt, path::PathBuf};

/// Where the table of bad input and its errnos lives (read by the unit test that checks
/// every row has a hint here).
#[cfg(test)]
const UAPI_DOC: &str = include_str!("../../../Documentation/user/uapi.rst");

/// What went wrong, in any call of this crate, with the errno where the kernel gave one
/// ([`Error::errno`]).
///
/// Its `Display` says what failed, the errno's name and text, and the errno's likely cause
/// for that call (the causes `Documentation/user/uapi.rst` and `gdrdrv.rst` list):
///
/// ```
/// let err = gdrpeer::Device::open("/nonexistent/gdrpeer").unwrap_err();
/// assert_eq!(err.errno(), Some(2)); // ENOENT
/// assert!(err.to_string().contains("is gdrpeer.ko loaded?"), "{err}");
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// Opening the device failed.
    #[non_exhaustive]
    Open {
        /// The device path.
        path: PathBuf,
        /// The errno of open(2).
        errno: i32,
    },
    /// The module speaks an ABI this library cannot use.
    #[non_exhaustive]
    AbiMismatch {
        /// The module's ABI version word.
        module: u32,
    },
    /// `/dev/gdrdrv` speaks a gdrdrv ABI of another major version than 2.
    #[non_exhaustive]
    GdrdrvVersion {
        /// The device's `GDRDRV_VERSION` word.
        driver: u32,
    },
    /// `/dev/gdrdrv` answered against the ABI (what libgdrapi checks after a call).
    Gdrdrv(&'static str),
    /// An ioctl, mmap(2) or read(2) of the device failed.
    #[non_exhaustive]
    Ioctl {
        /// The call that failed.
        op: Op,
        /// The errno the kernel returned.
        errno: i32,
    },
    /// No usable CUDA driver library: `libcuda.so.1` is missing, lacks an entry point, or
    /// its initialisation failed.
    CudaLoad(String),
    /// A CUDA driver call failed.
    #[non_exhaustive]
    Cuda {
        /// The entry point.
        call: &'static str,
        /// The CUresult.
        code: u32,
        /// `cuGetErrorName`'s name for it.
        name: String,
        /// `cuGetErrorString`'s text for it.
        text: String,
    },
    /// The registration cache was asked for a pointer that is not live CUDA device memory
    /// (freed, or never allocated).
    #[non_exhaustive]
    InvalidPointer {
        /// The pointer asked for.
        ptr: u64,
    },
    /// The registration cache was asked for a range that runs past the end of its
    /// allocation, or for an empty one (`len` 0).
    #[non_exhaustive]
    OutOfRange {
        /// The pointer asked for.
        ptr: u64,
        /// The length asked for.
        len: u64,
        /// The allocation's start.
        base: u64,
        /// The allocation's size.
        size: u64,
    },
    /// A CUDA pointer query of the registration cache failed otherwise (the CUresult).
    CudaQuery(i32),
}

impl Error {
    /// The raw errno behind this error (`EINVAL` is 22), if the kernel gave one.
    pub fn errno(&self) -> Option<i32> {
        match self {
            Error::Open { errno, .. } | Error::Ioctl { errno, .. } => Some(*errno),
            _ => None,
        }
    }

    /// The call that failed with an errno, if it was one of the device's.
    pub fn op(&self) -> Option<Op> {
        match self {
            Error::Ioctl { op, .. } => Some(*op),
            _ => None,
        }
    }

    /// An ioctl, mmap or read error.
    pub(crate) fn ioctl(op: Op, errno: rustix::io::Errno) -> Self {
        Error::Ioctl {
            op,
            errno: errno.raw_os_error(),
        }
    }

    /// An error of `op` with the raw `errno`, for code that calls the device itself (the C
    /// library, tests that compare errors).
    pub fn from_errno(op: Op, errno: i32) -> Self {
        Error::Ioctl { op, errno }
    }

    /// An open(2) error.
    pub(crate) fn open(path: PathBuf, errno: rustix::io::Errno) -> Self {
        Error::Open {
            path,
            errno: errno.raw_os_error(),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Open { path, errno } => {
                write!(f, "cannot open {}: {}", path.display(), Errno(*errno))?;
                if let Some(h) = open_hint(*errno) {
                    write!(f, " ({h})")?;
                }
                Ok(())
            }
            Error::AbiMismatch { module } => write!(
                f,
                "gdrpeer module ABI {}.{} is incompatible with this library's {}.{} \
                 (need the same major and a minor >= {})",
                module >> 16,
                module & 0xffff,
                uapi::ABI_MAJOR,
                uapi::ABI_MINOR,
                uapi::ABI_MINOR_NEEDED
            ),
            Error::GdrdrvVersion { driver } => write!(
                f,
                "/dev/gdrdrv speaks gdrdrv {}.{}, this library gdrdrv {}.x",
                driver >> 16,
                driver & 0xffff,
                crate::gdrdrv::VERSION >> 16
            ),
            Error::Gdrdrv(what) => write!(f, "/dev/gdrdrv: {what}"),
            Error::Ioctl { op, errno } => {
                write!(f, "{op}: {}", Errno(*errno))?;
                if let Some(h) = hint(*op, *errno) {
                    write!(f, " ({h})")?;
                }
                Ok(())
            }
            Error::CudaLoad(why) => write!(f, "no usable CUDA driver library: {why}"),
            Error::Cuda {
                call, name, text, ..
            } => write!(f, "{call}: {name} ({text})"),
            Error::InvalidPointer { ptr } => write!(f, "{ptr:#x} is not live CUDA device memory"),
            Error::OutOfRange { ptr, len: 0, .. } => write!(
                f,
                "{ptr:#x}+0 is an empty range: a registration needs at least one byte"
            ),
            Error::OutOfRange {
                ptr,
                len,
                base,
                size,
            } => write!(
                f,
                "{ptr:#x}+{len:#x} runs past its allocation {base:#x}+{size:#x}"
            ),
            Error::CudaQuery(r) => write!(f, "CUDA error {r} on a pointer query"),
        }
    }
}

impl std::error::Error for Error {}

/// An errno shown as its name and the C library's text: "EINVAL (Invalid argument)".
struct Errno(i32);

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = std::io::Error::from_raw_os_error(self.0).to_string();
        // std appends " (os error N)"; the name says it better.
        let text = text.split(" (os error").next().unwrap_or(&text);
        match errno_name(self.0) {
            Some(name) => write!(f, "{name} ({text})"),
            None => write!(f, "errno {} ({text})", self.0),
        }
    }
}

/// Raw errno values (Linux's, the same on every architecture this crate builds for).
pub(crate) mod errno {
    use rustix::io::Errno;
    pub const EPERM: i32 = Errno::PERM.raw_os_error();
    pub const ENOENT: i32 = Errno::NOENT.raw_os_error();
    pub const EINTR: i32 = Errno::INTR.raw_os_error();
    pub const EIO: i32 = Errno::IO.raw_os_error();
    pub const ENXIO: i32 = Errno::NXIO.raw_os_error();
    pub const EBADF: i32 = Errno::BADF.raw_os_error();
    pub const EAGAIN: i32 = Errno::AGAIN.raw_os_error();
    pub const ENOMEM: i32 = Errno::NOMEM.raw_os_error();
    pub const EACCES: i32 = Errno::ACCESS.raw_os_error();
    pub const EFAULT: i32 = Errno::FAULT.raw_os_error();
    pub const EBUSY: i32 = Errno::BUSY.raw_os_error();
    pub const ENODEV: i32 = Errno::NODEV.raw_os_error();
    pub const EINVAL: i32 = Errno::INVAL.raw_os_error();
    pub const EMFILE: i32 = Errno::MFILE.raw_os_error();
    pub const ENOTTY: i32 = Errno::NOTTY.raw_os_error();
    pub const ENOSPC: i32 = Errno::NOSPC.raw_os_error();
    pub const EOVERFLOW: i32 = Errno::OVERFLOW.raw_os_error();
    pub const EOPNOTSUPP: i32 = Errno::OPNOTSUPP.raw_os_error();
}
use errno::*;

/// The symbolic name of the errnos the device's calls return.
pub(crate) fn errno_name(e: i32) -> Option<&'static str> {
    Some(match e {
        EPERM => "EPERM",
        ENOENT => "ENOENT",
        EINTR => "EINTR",
        EIO => "EIO",
        ENXIO => "ENXIO",
        EBADF => "EBADF",
        EAGAIN => "EAGAIN",
        ENOMEM => "ENOMEM",
        EACCES => "EACCES",
        EFAULT => "EFAULT",
        EBUSY => "EBUSY",
        ENODEV => "ENODEV",
        EINVAL => "EINVAL",
        EMFILE => "EMFILE",
        ENOTTY => "ENOTTY",
        ENOSPC => "ENOSPC",
        EOVERFLOW => "EOVERFLOW",
        EOPNOTSUPP => "EOPNOTSUPP",
        _ => return None,
    })
}

/// The likely cause of open(2) of the device failing with `errno`.
pub(crate) fn open_hint(errno: i32) -> Option<&'static str> {
    Some(match errno {
        ENOENT => "is gdrpeer.ko loaded? `modprobe gdrpeer` creates the node",
        EACCES | EPERM => {
            "no permission: the udev rule gives the device to the group gdrpeer; join it with \
             sudo usermod -aG gdrpeer $USER and log in again (Documentation/user/install.rst)"
        }
        ENXIO | ENODEV => "the node names no loaded driver: is gdrpeer.ko loaded?",
        ENOMEM => "a kernel allocation failed (the system is out of memory)",
        _ => return None,
    })
}

/// The likely cause of `op` failing with `errno`: every errno each call returns, as the
/// uAPI's bad-input table and gdrdrv's answer tables give them.
pub(crate) fn hint(op: Op, errno: i32) -> Option<&'static str> {
    use Op::*;
    let gdrdrv = matches!(
        op,
        GdrdrvPinBuffer
            | GdrdrvPinBufferV2
            | GdrdrvUnpinBuffer
            | GdrdrvGetCbFlag
            | GdrdrvGetInfo
            | GdrdrvGetInfoV2
            | GdrdrvGetAttr
            | GdrdrvReqMappingType
            | GdrdrvGetVersion
            | GdrdrvMmap
    );
    Some(match (op, errno) {
        // Each call's own causes first.
        (Pin, EINVAL) => {
            "the memory is not this process's live GPU memory (host memory, another \
             process's, or freed), or a bad request: length 0 or above max_pin_bytes, a \
             range past 2^64 (rounded up to 64 KiB), unknown flags, a wrong struct size"
        }
        (Pin, ENOMEM) => {
            "no BAR1 space, even after evicting unused regions, or a kernel allocation failed"
        }
        (Pin, ENXIO) => "the GPU memory was freed while it was being pinned",
        (Pin, EOPNOTSUPP) => {
            "the NVIDIA driver refuses persistent pins: MIG, vGPU, confidential computing, or \
             no persistent API"
        }
        (Unpin, EINVAL) => {
            "an unknown handle (never returned, unpinned already, or another file's), padding \
             not zero, or a wrong struct size"
        }
        (GetInfo, EINVAL) => {
            "an unknown handle (never returned, unpinned already, or another file's), or a \
             wrong struct size"
        }
        (GetPages | DmaMap, EINVAL) => {
            "an unknown handle (never returned, unpinned already, or another file's), padding \
             not zero, or a wrong struct size"
        }
        (GetPages | DmaMap, EFAULT) => "the argument or its address array is not mapped memory",
        (GetPages | DmaMap, EPERM) => "needs CAP_SYS_RAWIO",
        (GetPages | DmaMap, ENOSPC) => "the address array is shorter than the window",
        (GetPages | DmaMap, ENXIO) => "the GPU memory was freed (revoked): unpin the handle",
        (DmaMap, ENODEV) => "no PCI device at that address",
        (DmaMap, ENOMEM) => "a kernel allocation or the IOMMU mapping for the peer failed",
        (Stats, EINVAL) => "padding not zero, or a wrong struct size",
        (ExportDmabuf, EINVAL) => {
            "an unknown flag, an unknown handle, both or neither of a handle and a range, a \
             range PIN refuses, or a wrong struct size"
        }
        (ExportDmabuf, ENXIO) => "the GPU memory was freed (revoked): unpin the handle",
        (ExportDmabuf, EFAULT) => {
            "the argument is not mapped, or cannot be written back (no descriptor was \
             installed)"
        }
        (ExportDmabuf, ENOMEM) => "no BAR1 space, or a kernel allocation failed",
        (ExportDmabuf, EMFILE) => "no file descriptor left in this process",
        (ExportDmabuf, ENOTTY) => "the module predates dma-buf export: ABI 1.4 needed",
        (ExportDmabuf, EOPNOTSUPP) => {
            "the NVIDIA driver refuses persistent pins: MIG, vGPU, confidential computing, or \
             no persistent API"
        }
        (ExportDmabuf, EBADF) => "the module reported no descriptor",
        (Mmap, EINVAL) => {
            "an unknown handle, MAP_PRIVATE, an offset not a multiple of 4 KiB, or a range \
             past the handle's window"
        }
        (Mmap, ENXIO) => "the GPU memory was freed (revoked): unpin the handle",
        (Mmap, ENOMEM) => "a kernel allocation failed, or no address space left",
        (Mmap, EBUSY) => {
            "another mapping holds the pages write-back, which write-combining cannot share"
        }
        (Mmap, EOVERFLOW) => "handles from 2^24 up cannot be encoded in an mmap offset",
        (ReadEvents, EINVAL) => {
            "the module predates events (ABI 1.3 needed), or the buffer is shorter than one \
             record"
        }
        (ReadEvents, EACCES) => "only the process that opened the file may read its events",
        (ReadEvents, EAGAIN) => "no event queued (non-blocking file)",
        (ReadEvents, EFAULT) => "the buffer is not mapped memory; the events stay queued",
        (ReadEvents, EIO) => "the module returned a partial record",
        (GetVersion, ENOTTY) => "not a gdrpeer device",
        (GdrdrvPinBuffer | GdrdrvPinBufferV2, EINVAL) => {
            "the memory is not this process's live GPU memory, or a bad request: size 0 or \
             too long, a range past 2^64, unknown flags (FORCE_PCIE), bad P2P tokens"
        }
        (GdrdrvPinBuffer | GdrdrvPinBufferV2, ENOMEM) => {
            "BAR1 is full even after evicting unused regions, the file's handles have no room \
             left for the window, or a kernel allocation failed"
        }
        (GdrdrvPinBuffer | GdrdrvPinBufferV2, ENXIO) => {
            "the GPU memory was freed while it was being pinned"
        }
        (GdrdrvPinBuffer | GdrdrvPinBufferV2, EOPNOTSUPP) => {
            "P2P tokens other than 0 on Tegra, whose nv-p2p API has none"
        }
        (GdrdrvUnpinBuffer | GdrdrvGetCbFlag | GdrdrvGetInfo | GdrdrvGetInfoV2, EINVAL) => {
            "the handle names no live pin of this file"
        }
        (GdrdrvGetAttr, EINVAL) => "an attribute gdrdrv 2.6 does not define",
        (GdrdrvReqMappingType, EINVAL) => {
            "a mapping type past DEVICE (3), or a handle that names no pin"
        }
        (GdrdrvReqMappingType, EBUSY) => "the handle is mapped: munmap it first",
        (GdrdrvReqMappingType, EOPNOTSUPP) => {
            "the memory cannot be mapped so: CACHING needs memory NVIDIA lets the CPU cache, \
             DEVICE is never offered"
        }
        (GdrdrvMmap, EINVAL) => {
            "an offset that names no pin, a handle mapped already or freed, a pin not \
             starting on a 64 KiB page, MAP_PRIVATE, or longer than the window"
        }
        (GdrdrvMmap, EOVERFLOW) => "the handle and offset overflow an mmap offset",
        (GdrdrvMmap, ENOMEM) => "a kernel allocation failed, or no address space left",
        // Then what every call of a device file may get.
        (GetVersion, _) => return None,
        (_, EACCES) => {
            "the file belongs to another process (a forked child, a descriptor received over \
             a socket): open the device in this process"
        }
        (_, ENXIO) if !gdrdrv => "the GPU memory was freed (revoked): unpin the handle",
        (_, EFAULT) if op != Mmap && op != GdrdrvMmap => "the argument is not mapped memory",
        (_, ENOTTY) if op != Mmap && op != GdrdrvMmap && op != ReadEvents => {
            "the module does not know this command (an older module: check its ABI version), \
             or its number encodes another argument size"
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// /dev/gdrdrv of another major version says so in gdrdrv's terms, not gdrpeer's ABI.
    #[test]
    fn a_gdrdrv_version_mismatch_names_gdrdrv() {
        let e = Error::GdrdrvVersion {
            driver: (3 << 16) | 1,
        };
        assert_eq!(
            e.to_string(),
            "/dev/gdrdrv speaks gdrdrv 3.1, this library gdrdrv 2.x"
        );
    }

    /// Every gdrpeer ioctl (not mmap, read or gdrdrv's).
    const IOCTLS: [Op; 8] = [
        Op::GetVersion,
        Op::Pin,
        Op::Unpin,
        Op::GetInfo,
        Op::GetPages,
        Op::DmaMap,
        Op::Stats,
        Op::ExportDmabuf,
    ];

    /// What a row of the bad-input table names: open(2), or calls.
    #[derive(Debug)]
    enum Target {
        Open,
        Ops(Vec<Op>),
    }

    /// The calls a row names, from the commands in its input column, or, for rows that
    /// speak of "any command", by the row's name.
    fn row_targets(row: &str, input: &str) -> Vec<Target> {
        let all_but_version = IOCTLS[1..].to_vec();
        match row {
            "open-unprivileged" => return vec![Target::Open],
            "wrong-struct-size" | "bad-argument-pointer" | "handle-of-another-file" => {
                return vec![Target::Ops(all_but_version)]
            }
            "unknown-command" | "command-size-mismatch" => {
                return vec![Target::Ops(IOCTLS.to_vec())]
            }
            _ => {}
        }
        let mut ops = Vec::new();
        let mut targets = Vec::new();
        for (i, word) in input.split("``").enumerate() {
            // Odd pieces are between double backquotes.
            let quoted = i % 2 == 1;
            let op = match word {
                "PIN" if quoted => Op::Pin,
                "UNPIN" if quoted => Op::Unpin,
                "GET_INFO" if quoted => Op::GetInfo,
                "GET_PAGES" if quoted => Op::GetPages,
                "DMA_MAP" if quoted => Op::DmaMap,
                "STATS" if quoted => Op::Stats,
                "EXPORT_DMABUF" if quoted => Op::ExportDmabuf,
                "PIN_BUFFER" if quoted => Op::GdrdrvPinBuffer,
                "mmap" if quoted => Op::Mmap,
                w if !quoted => {
                    if w.split([' ', ',']).any(|t| t == "open") {
                        targets.push(Target::Open);
                    }
                    if w.split([' ', ',']).any(|t| t == "mmap") {
                        ops.push(Op::Mmap);
                    }
                    continue;
                }
                _ => continue,
            };
            ops.push(op);
        }
        if !ops.is_empty() {
            targets.push(Target::Ops(ops));
        }
        targets
    }

    /// The rows of the bad-input table: (row, input, errno name).
    fn bad_input_rows() -> Vec<(String, String, String)> {
        let body = UAPI_DOC
            .split_once("\nBad input\n=========\n")
            .expect("uapi.rst has a Bad input section")
            .1;
        let mut lines = body.lines().skip_while(|l| !l.starts_with("====="));
        let border = lines.next().expect("the table's top border");
        // Column starts, from the border's runs of '='.
        let cols: Vec<usize> = border
            .char_indices()
            .filter(|&(i, c)| c == '=' && (i == 0 || border.as_bytes()[i - 1] == b' '))
            .map(|(i, _)| i)
            .collect();
        assert_eq!(cols.len(), 3, "three columns: {border}");
        let col = |l: &str, n: usize| -> String {
            let end = cols.get(n + 1).copied().unwrap_or(l.len()).min(l.len());
            l.get(cols[n].min(l.len())..end)
                .unwrap_or("")
                .trim()
                .to_string()
        };
        let mut rows: Vec<(String, String, String)> = Vec::new();
        let mut borders = 0;
        for l in lines {
            if l.starts_with("=====") {
                borders += 1;
                if borders == 2 {
                    break;
                }
                continue;
            }
            if borders == 0 {
                continue; // the heading row
            }
            let (name, input, errno) = (col(l, 0), col(l, 1), col(l, 2));
            if name.is_empty() {
                rows.last_mut()
                    .expect("a continuation line follows a row")
                    .1 += &format!(" {input}");
            } else {
                rows.push((
                    name.trim_matches('`').into(),
                    input,
                    errno.trim_matches('`').into(),
                ));
            }
        }
        assert!(rows.len() > 20, "the table read: {rows:?}");
        rows
    }

    fn errno_by_name(name: &str) -> i32 {
        (1..200)
            .find(|&e| errno_name(e) == Some(name))
            .unwrap_or_else(|| panic!("{name} has no name in errno_name"))
    }

    #[test]
    fn every_documented_bad_input_gets_a_specific_hint() {
        let mut pairs = 0;
        for (row, input, errno) in bad_input_rows() {
            let e = errno_by_name(&errno);
            let targets = row_targets(&row, &input);
            assert!(
                !targets.is_empty(),
                "row {row}: no call recognised in {input:?}"
            );
            for t in targets {
                match t {
                    Target::Open => {
                        assert!(
                            open_hint(e).is_some(),
                            "row {row}: open {errno} has no hint"
                        );
                        pairs += 1;
                    }
                    Target::Ops(ops) => {
                        for op in ops {
                            let h = hint(op, e);
                            assert!(h.is_some(), "row {row}: {op} {errno} has no hint");
                            let msg = Error::Ioctl { op, errno: e }.to_string();
                            assert!(msg.ends_with(&format!("({})", h.unwrap())), "{msg}");
                            pairs += 1;
                        }
                    }
                }
            }
        }
        assert!(pairs > 40, "{pairs} (call, errno) pairs checked");
    }

    #[test]
    fn hints_name_the_cause_of_each_call() {
        let h = |op, e| hint(op, e).unwrap_or_default();
        assert!(h(Op::Pin, EINVAL).contains("not this process's live GPU memory"));
        assert!(!h(Op::Stats, EINVAL).contains("handle"));
        assert!(h(Op::GetPages, ENOSPC).contains("shorter than the window"));
        assert!(h(Op::ExportDmabuf, ENOTTY).contains("ABI 1.4"));
        assert!(h(Op::ReadEvents, EACCES).contains("opened the file"));
        assert!(h(Op::GdrdrvReqMappingType, EBUSY).contains("munmap"));
        // Meanings the uAPI gives only to other calls.
        assert_eq!(hint(Op::Pin, EPERM), None);
        assert_eq!(hint(Op::Stats, ENOMEM), None);
        assert_eq!(hint(Op::GetPages, ENODEV), None);
        assert_eq!(hint(Op::GetVersion, EACCES), None);
        assert_eq!(hint(Op::Pin, EBADF), None);
        assert_eq!(
            Error::Ioctl {
                op: Op::DmaMap,
                errno: ENODEV
            }
            .to_string(),
            "DMA_MAP: ENODEV (No such device) (no PCI device at that address)"
        );
        assert_eq!(
            Error::Ioctl {
                op: Op::Stats,
                errno: 9999
            }
            .to_string(),
            "STATS: errno 9999 (Unknown error 9999)"
        );
    }

    #[test]
    fn errno_is_the_raw_value() {
        let e = Error::ioctl(Op::Pin, rustix::io::Errno::INVAL);
        assert_eq!(e.errno(), Some(22));
        assert_eq!(e.op(), Some(Op::Pin));
        assert_eq!(Error::Gdrdrv("x").errno(), None);
        assert_eq!(Error::CudaLoad("x".into()).errno(), None);
    }
}
