// SPDX-License-Identifier: GPL-2.0

//! `/dev/gdrnic` from user space: the test rig's sample NIC driver (tests/gdrnic, its
//! interface in gdrnic_uapi.h), which registers GPU memory through gdrpeer's kernel API or
//! imports gdrpeer's dma-bufs, and moves bytes by peer-to-peer DMA. Used by gdrpeer-test and
//! gdrpeer-bench.

use rustix::{
    fd::OwnedFd,
    fs::{open, Mode, OFlags},
    io::Errno,
    ioctl,
};

/// The NIC's page: GPU pages are 64 KiB.
const PAGE: u64 = 1 << 16;

/// `struct gdrnic_reg_args` (tests/gdrnic/gdrnic_uapi.h).
#[repr(C)]
#[derive(Default, Debug, Clone, Copy)]
pub struct RegArgs {
    pub va: u64,
    pub len: u64,
    pub addrs: u64,
    pub addrs_cap: u32,
    pub handle: u32,
    pub aligned_va: u64,
    pub offset: u64,
    pub page_count: u32,
    pub page_size: u32,
}

/// `struct gdrnic_xfer_args`.
#[repr(C)]
#[derive(Default, Debug, Clone, Copy)]
pub struct XferArgs {
    pub handle: u32,
    pub pad: u32,
    pub offset: u64,
    pub len: u64,
    pub buf: u64,
}

/// `struct gdrnic_dmabuf_args`.
#[repr(C)]
#[derive(Default, Debug, Clone, Copy)]
struct DmabufArgs {
    fd: i32,
    flags: u32,
    offset: u64,
    len: u64,
    handle: u32,
    nents: u32,
}

/// `struct gdrnic_dma_read_args`.
#[repr(C)]
#[derive(Default, Debug, Clone, Copy)]
struct DmaReadArgs {
    addr: u64,
    len: u64,
    buf: u64,
}

/// `struct gdrnic_segs_args`.
#[repr(C)]
#[derive(Default, Debug, Clone, Copy)]
struct SegsArgs {
    handle: u32,
    cap: u32,
    addrs: u64,
    lens: u64,
    nents: u32,
    pad: u32,
}

/// `struct gdrnic_reg_loop_args`.
#[repr(C)]
#[derive(Default, Debug, Clone, Copy)]
struct RegLoopArgs {
    va: u64,
    len: u64,
    stride: u64,
    count: u32,
    pad: u32,
}

/// `GDRNIC_REG_LOOP_MAX`: the most registrations of one REG_LOOP.
pub const REG_LOOP_MAX: u32 = 4096;

/// `GDRNIC_DMA_READ_MAX`: the longest DMA_READ.
pub const DMA_READ_MAX: usize = 4032;

/// `GDRNIC_DMABUF_PINNED`: a pinned import (dma_buf_pin) that takes invalidation as
/// revocation.
pub const DMABUF_PINNED: u32 = 1 << 0;
/// `GDRNIC_DMABUF_KAPI`: the NIC exports `[offset, offset + len)` of the caller's GPU memory
/// itself with `gdrpeer_dmabuf_export()`, then imports it.
pub const DMABUF_KAPI: u32 = 1 << 1;
/// `GDRNIC_DMABUF_NO_P2P`: an importer without `allow_peer2peer` (gdrpeer must refuse it).
pub const DMABUF_NO_P2P: u32 = 1 << 2;
/// `GDRNIC_DMABUF_NO_INVALIDATE`: an importer without an invalidate op (refused likewise,
/// unless the dma-buf is a persistent export).
pub const DMABUF_NO_INVALIDATE: u32 = 1 << 3;
/// `GDRNIC_DMABUF_KAPI_PERSISTENT`: with [`DMABUF_KAPI`], the NIC exports with
/// `gdrpeer_dmabuf_export_flags(GDRPEER_DMABUF_PERSISTENT)`.
pub const DMABUF_KAPI_PERSISTENT: u32 = 1 << 4;
/// `GDRNIC_DMABUF_PINNED_NOREVOKE`: `ib_umem_dmabuf_get_pinned()`'s import, pinned and
/// without an invalidate op, which only a persistent export takes.
pub const DMABUF_PINNED_NOREVOKE: u32 = DMABUF_PINNED | DMABUF_NO_INVALIDATE;

const MAGIC: u8 = 0xDD;
const REG: ioctl::Opcode = ioctl::opcode::read_write::<RegArgs>(MAGIC, 1);
const DEREG: ioctl::Opcode = ioctl::opcode::write::<u32>(MAGIC, 2);
pub const SEND: ioctl::Opcode = ioctl::opcode::write::<XferArgs>(MAGIC, 3);
pub const RECV: ioctl::Opcode = ioctl::opcode::write::<XferArgs>(MAGIC, 4);
const REG_DMABUF: ioctl::Opcode = ioctl::opcode::read_write::<DmabufArgs>(MAGIC, 5);
const FUZZ: ioctl::Opcode = ioctl::opcode::read_write::<FuzzArgs>(MAGIC, 6);
const DMA_READ: ioctl::Opcode = ioctl::opcode::write::<DmaReadArgs>(MAGIC, 7);
const DMABUF_SEGS: ioctl::Opcode = ioctl::opcode::read_write::<SegsArgs>(MAGIC, 8);
const REG_LOOP: ioctl::Opcode = ioctl::opcode::write::<RegLoopArgs>(MAGIC, 9);
const CTX_DESTROY: ioctl::Opcode = ioctl::opcode::none(MAGIC, 10);
/// A command gdrnic does not know (number 0 is none of its): its dispatch returns ENOTTY
/// at once, so the ioctl costs the system call alone.
const UNKNOWN: ioctl::Opcode = ioctl::opcode::none(MAGIC, 0);
/// GDRNIC_XFER_MAX.
pub const XFER_MAX: u64 = 1 << 20;

/// `GDRNIC_FUZZ_RANGES`: the most ranges one FUZZ call takes.
pub const FUZZ_RANGES: usize = 8;
/// `GDRNIC_FUZZ_STABLE`: a range not freed during the call.
pub const FUZZ_STABLE: u32 = 1 << 0;
/// `GDRNIC_FUZZ_FAULTS`: nvsim may fail get_pages and dma_map_pages with ENOMEM.
pub const FUZZ_FAULTS: u32 = 1 << 0;
/// `GDRNIC_FUZZ_SLOW_CALLBACK`: the module's invalidate callbacks sleep 1-8 ms.
pub const FUZZ_SLOW_CALLBACK: u32 = 1 << 1;
/// The op kinds of FUZZ, in the order of the module's enum (the rows of
/// [`FuzzArgs::counts`]).
pub const FUZZ_OPS: [&str; 22] = [
    "ctx_create",
    "ctx_destroy",
    "pin",
    "pin_churned",
    "pin_partial",
    "pin_bad_length",
    "pin_not_gpu",
    "pin_null",
    "pin_foreign",
    "unpin",
    "unpin_during_callback",
    "unpin_after_callback",
    "export",
    "export_bad",
    "export_null",
    "export_foreign",
    "dmabuf_put",
    "kthread_pin",
    "kthread_export",
    "kthread_destroy",
    "kthread_own_ctx",
    "callback",
];
/// The outcomes of FUZZ's calls (the columns of [`FuzzArgs::counts`]); "other" is an
/// errno that no call documents.
pub const FUZZ_OUTCOMES: [&str; 7] = [
    "ok",
    "EINVAL",
    "EACCES",
    "ENOMEM",
    "ENXIO",
    "EOPNOTSUPP",
    "other",
];

/// `struct gdrnic_fuzz_range`.
#[repr(C)]
#[derive(Default, Debug, Clone, Copy)]
pub struct FuzzRange {
    pub va: u64,
    pub len: u64,
    pub flags: u32,
    pub pad: u32,
}

/// `struct gdrnic_fuzz_args`: FUZZ's request and its outcomes.
#[repr(C)]
#[derive(Default, Debug, Clone, Copy)]
pub struct FuzzArgs {
    pub seed: u64,
    pub ops: u32,
    pub flags: u32,
    pub nranges: u32,
    pub failures: u32,
    pub ranges: [FuzzRange; FUZZ_RANGES],
    pub first_failure_op: u32,
    pub first_failure_errno: i32,
    /// Calls made, by op kind ([`FUZZ_OPS`]) and outcome ([`FUZZ_OUTCOMES`]).
    pub counts: [[u64; 8]; 24],
}

/// A registration of GPU memory with the NIC.
#[derive(Debug, Clone)]
pub struct Mr {
    pub handle: u32,
    pub aligned_va: u64,
    pub offset: u64,
    pub page_size: u32,
    /// The DMA addresses the NIC uses, one per GPU page.
    pub dma: Vec<u64>,
}

/// A registration that is a dma-buf import: transfers take offsets from its start, as for
/// [`Mr`].
#[derive(Debug, Clone, Copy)]
pub struct DmabufMr {
    pub handle: u32,
    /// DMA segments of the import's first mapping.
    pub nents: u32,
}

/// An open `/dev/gdrnic`: one gdrpeer context of the opening process.
pub struct Nic {
    fd: OwnedFd,
}

impl Nic {
    pub fn open() -> Result<Self, Errno> {
        let fd = open("/dev/gdrnic", OFlags::RDWR | OFlags::CLOEXEC, Mode::empty())?;
        Ok(Nic { fd })
    }

    /// Registers `[va, va + len)` of the caller's GPU memory.
    pub fn reg(&self, va: u64, len: u64) -> Result<Mr, Errno> {
        let mut dma = vec![0u64; (len / PAGE + 2) as usize];
        let mut a = RegArgs {
            va,
            len,
            ..Default::default()
        };
        self.reg_into(&mut a, &mut dma)?;
        dma.truncate(a.page_count as usize);
        Ok(Mr {
            handle: a.handle,
            aligned_va: a.aligned_va,
            offset: a.offset,
            page_size: a.page_size,
            dma,
        })
    }

    /// REG of `a.va` and `a.len`, the DMA addresses written to `dma`; `a` gets the rest.
    pub fn reg_into(&self, a: &mut RegArgs, dma: &mut [u64]) -> Result<(), Errno> {
        a.addrs = dma.as_mut_ptr() as u64;
        a.addrs_cap = dma.len() as u32;
        // SAFETY: REG reads and writes one `RegArgs` and writes at most `addrs_cap` u64s to
        // `addrs`, which points to that many.
        unsafe { ioctl::ioctl(&self.fd, ioctl::Updater::<REG, RegArgs>::new(a)) }
    }

    /// Imports `len` bytes at byte `offset` of the dma-buf `fd` (a raw number: the NIC
    /// checks it) and maps it, as ibv_reg_dmabuf_mr() does; `flags` are `DMABUF_*`. With
    /// [`DMABUF_KAPI`], `fd` is unused and `offset` is the GPU va that the NIC exports itself.
    pub fn reg_dmabuf(
        &self,
        fd: i32,
        flags: u32,
        offset: u64,
        len: u64,
    ) -> Result<DmabufMr, Errno> {
        let mut a = DmabufArgs {
            fd,
            flags,
            offset,
            len,
            ..Default::default()
        };
        // SAFETY: REG_DMABUF reads and writes one `DmabufArgs`, which holds no pointers.
        unsafe {
            ioctl::ioctl(
                &self.fd,
                ioctl::Updater::<REG_DMABUF, DmabufArgs>::new(&mut a),
            )
        }?;
        Ok(DmabufMr {
            handle: a.handle,
            nents: a.nents,
        })
    }

    /// An ioctl gdrnic answers without doing anything (ENOTTY, Ok here; any other result
    /// is an error): what a system call into the NIC's driver costs, for gdrpeer-bench.
    pub fn null_ioctl(&self) -> Result<(), Errno> {
        // SAFETY: a command without an argument.
        match unsafe { ioctl::ioctl(&self.fd, ioctl::NoArg::<UNKNOWN>::new()) } {
            Err(Errno::NOTTY) => Ok(()),
            Ok(()) => Err(Errno::INVAL),
            Err(e) => Err(e),
        }
    }

    /// REG_LOOP: the NIC registers `[va, va + len)` and unregisters it at once, `count` times
    /// (1 ..= [`REG_LOOP_MAX`]), every second time at `va + stride` instead, in the kernel:
    /// gdrpeer_mr_pin() and gdrpeer_mr_unpin() without a system call each. Stops at the
    /// first error, which it returns.
    pub fn reg_loop(&self, va: u64, len: u64, stride: u64, count: u32) -> Result<(), Errno> {
        let a = RegLoopArgs {
            va,
            len,
            stride,
            count,
            pad: 0,
        };
        // SAFETY: REG_LOOP reads one `RegLoopArgs`, which holds no pointers.
        unsafe { ioctl::ioctl(&self.fd, ioctl::Setter::<REG_LOOP, RegLoopArgs>::new(a)) }
    }

    /// FUZZ: the module makes `a.ops` random kernel-API calls and checks each outcome
    /// against the documentation; `a` gets the counts and failures.
    pub fn fuzz(&self, a: &mut FuzzArgs) -> Result<(), Errno> {
        // SAFETY: FUZZ reads and writes one `FuzzArgs`, which holds no pointers.
        unsafe { ioctl::ioctl(&self.fd, ioctl::Updater::<FUZZ, FuzzArgs>::new(a)) }
    }

    /// DMA_READ: the NIC's DMA engine reads `len` bytes (at most [`DMA_READ_MAX`]) at the
    /// DMA address `addr`, whatever it is (an IOMMU is the only check), and returns them.
    pub fn dma_read(&self, addr: u64, len: usize) -> Result<Vec<u8>, Errno> {
        let mut buf = vec![0u8; len];
        let a = DmaReadArgs {
            addr,
            len: len as u64,
            buf: buf.as_mut_ptr() as u64,
        };
        // SAFETY: DMA_READ reads one `DmaReadArgs` and writes `len` bytes to `buf`, which
        // holds that many.
        unsafe { ioctl::ioctl(&self.fd, ioctl::Setter::<DMA_READ, DmaReadArgs>::new(a)) }?;
        Ok(buf)
    }

    /// DMABUF_SEGS: the DMA segments (address, length in bytes) of a dma-buf import's
    /// mapping, as the exporter's sg_table gives them.
    pub fn dmabuf_segments(&self, handle: u32) -> Result<Vec<(u64, u64)>, Errno> {
        let mut cap = 16usize;
        loop {
            let mut addrs = vec![0u64; cap];
            let mut lens = vec![0u64; cap];
            let mut a = SegsArgs {
                handle,
                cap: cap as u32,
                addrs: addrs.as_mut_ptr() as u64,
                lens: lens.as_mut_ptr() as u64,
                ..Default::default()
            };
            // SAFETY: DMABUF_SEGS reads and writes one `SegsArgs` and writes at most `cap`
            // u64s to each of `addrs` and `lens`, which hold that many.
            unsafe {
                ioctl::ioctl(
                    &self.fd,
                    ioctl::Updater::<DMABUF_SEGS, SegsArgs>::new(&mut a),
                )
            }?;
            let n = a.nents as usize;
            if n <= cap {
                return Ok(addrs.into_iter().zip(lens).take(n).collect());
            }
            cap = n;
        }
    }

    /// Ends the file's gdrpeer context, its registrations left live (CTX_DESTROY).
    pub fn ctx_destroy(&self) -> Result<(), Errno> {
        // SAFETY: CTX_DESTROY takes no argument.
        unsafe { ioctl::ioctl(&self.fd, ioctl::NoArg::<CTX_DESTROY>::new()) }
    }

    pub fn dereg(&self, handle: u32) -> Result<(), Errno> {
        // SAFETY: DEREG reads one u32.
        unsafe { ioctl::ioctl(&self.fd, ioctl::Setter::<DEREG, u32>::new(handle)) }
    }

    /// GPU -> NIC: `len` bytes at `offset` from the registered va.
    pub fn send(&self, handle: u32, offset: u64, len: usize) -> Result<Vec<u8>, Errno> {
        let mut buf = vec![0u8; len];
        self.xfer_raw::<SEND>(handle, offset, len as u64, buf.as_mut_ptr() as u64)?;
        Ok(buf)
    }

    /// NIC -> GPU: `data` to `offset` from the registered va.
    pub fn recv(&self, handle: u32, offset: u64, data: &[u8]) -> Result<(), Errno> {
        self.xfer_raw::<RECV>(handle, offset, data.len() as u64, data.as_ptr() as u64)
    }

    pub fn xfer_raw<const OP: ioctl::Opcode>(
        &self,
        handle: u32,
        offset: u64,
        len: u64,
        buf: u64,
    ) -> Result<(), Errno> {
        let a = XferArgs {
            handle,
            pad: 0,
            offset,
            len,
            buf,
        };
        self.xfer_args::<OP>(a)
    }

    pub fn xfer_args<const OP: ioctl::Opcode>(&self, a: XferArgs) -> Result<(), Errno> {
        // SAFETY: SEND and RECV read one `XferArgs`; the kernel checks `buf` (its length is
        // `len` for every caller here but the bad-pointer test, which expects EFAULT).
        unsafe { ioctl::ioctl(&self.fd, ioctl::Setter::<OP, XferArgs>::new(a)) }
    }
}

/// A counter of gdrnic's (debugfs gdrnic/stats): `registrations` (live, dma-buf imports
/// included), `invalidations`, `transfers`, `failed_transfers`, `gpu_dma_bytes`, `dma_ops`,
/// `dmabuf_imports` (live), `dmabuf_maps`, `dmabuf_invalidations`.
pub fn nstat(name: &str) -> Result<u64, String> {
    crate::testing::name_values("/sys/kernel/debug/gdrnic/stats")?
        .get(name)
        .copied()
        .ok_or_else(|| format!("no gdrnic counter {name}"))
}
