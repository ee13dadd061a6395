// SPDX-License-Identifier: GPL-2.0

//! `/dev/nvsim` from user space: simulated GPU memory (tests/nvsim/nvsim_uapi.h).
//!
//! Used by nvsim's tests and by the simulated libcuda.

pub mod testing;

use rustix::{
    fd::{AsFd, OwnedFd},
    fs::{open, Mode, OFlags},
    io::Errno,
    ioctl,
    mm::{mmap, munmap, MapFlags, ProtFlags},
};

/// `struct nvsim_alloc_args`.
#[repr(C)]
#[derive(Default, Debug, Clone, Copy)]
pub struct AllocArgs {
    pub size: u64,
    pub va: u64,
    pub buffer_id: u64,
}

/// `struct nvsim_query_args`.
#[repr(C)]
#[derive(Default, Debug, Clone, Copy)]
pub struct QueryArgs {
    pub va: u64,
    pub base: u64,
    pub size: u64,
    pub buffer_id: u64,
    pub p2p_token: u64,
    pub va_space: u32,
    pub sync_memops: u32,
}

/// `struct nvsim_sync_memops_args`.
#[repr(C)]
#[derive(Default, Debug, Clone, Copy)]
pub struct SyncMemopsArgs {
    pub va: u64,
    pub value: u32,
    pub pad: u32,
}

const MAGIC: u8 = 0xDC;
const ALLOC: ioctl::Opcode = ioctl::opcode::read_write::<AllocArgs>(MAGIC, 1);
const FREE: ioctl::Opcode = ioctl::opcode::write::<u64>(MAGIC, 2);
const QUERY: ioctl::Opcode = ioctl::opcode::read_write::<QueryArgs>(MAGIC, 3);
const SYNC_MEMOPS: ioctl::Opcode = ioctl::opcode::write::<SyncMemopsArgs>(MAGIC, 4);

/// An open `/dev/nvsim`: closing it frees its allocations.
pub struct Gpu {
    fd: OwnedFd,
}

impl Gpu {
    pub fn open() -> Result<Self, Errno> {
        let fd = open("/dev/nvsim", OFlags::RDWR | OFlags::CLOEXEC, Mode::empty())?;
        Ok(Gpu { fd })
    }

    /// Allocates GPU memory: (va, buffer id).
    pub fn alloc(&self, size: u64) -> Result<(u64, u64), Errno> {
        let mut a = AllocArgs {
            size,
            ..Default::default()
        };
        // SAFETY: ALLOC reads and writes one `AllocArgs`.
        unsafe { ioctl::ioctl(&self.fd, ioctl::Updater::<ALLOC, AllocArgs>::new(&mut a)) }?;
        Ok((a.va, a.buffer_id))
    }

    /// Frees the allocation starting at `va`.
    pub fn free(&self, va: u64) -> Result<(), Errno> {
        // SAFETY: FREE reads one u64.
        unsafe { ioctl::ioctl(&self.fd, ioctl::Setter::<FREE, u64>::new(va)) }
    }

    pub fn query(&self, va: u64) -> Result<QueryArgs, Errno> {
        let mut q = QueryArgs {
            va,
            ..Default::default()
        };
        // SAFETY: QUERY reads and writes one `QueryArgs`.
        unsafe { ioctl::ioctl(&self.fd, ioctl::Updater::<QUERY, QueryArgs>::new(&mut q)) }?;
        Ok(q)
    }

    pub fn set_sync_memops(&self, va: u64, value: u32) -> Result<(), Errno> {
        let a = SyncMemopsArgs { va, value, pad: 0 };
        // SAFETY: SYNC_MEMOPS reads one `SyncMemopsArgs`.
        unsafe {
            ioctl::ioctl(
                &self.fd,
                ioctl::Setter::<SYNC_MEMOPS, SyncMemopsArgs>::new(a),
            )
        }
    }

    /// Writes `data` into GPU memory at `va` through nvsim's mapping.
    pub fn write(&self, va: u64, data: &[u8]) -> Result<(), Errno> {
        self.with_map(va, data.len(), |p| {
            // SAFETY: `p` maps at least `data.len()` bytes (with_map).
            unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), p, data.len()) }
        })
    }

    /// Sets `len` bytes of GPU memory at `va` to `byte` through nvsim's mapping.
    pub fn fill(&self, va: u64, byte: u8, len: usize) -> Result<(), Errno> {
        self.with_map(va, len, |p| {
            // SAFETY: `p` maps at least `len` bytes (with_map).
            unsafe { std::ptr::write_bytes(p, byte, len) }
        })
    }

    /// Reads `len` bytes of GPU memory at `va`.
    pub fn read(&self, va: u64, len: usize) -> Result<Vec<u8>, Errno> {
        let mut out = vec![0u8; len];
        self.with_map(va, len, |p| {
            // SAFETY: `p` maps at least `len` bytes (with_map).
            unsafe { std::ptr::copy_nonoverlapping(p, out.as_mut_ptr(), len) }
        })?;
        Ok(out)
    }

    fn with_map(&self, va: u64, len: usize, f: impl FnOnce(*mut u8)) -> Result<(), Errno> {
        let page = 4096u64;
        let start = va & !(page - 1);
        let maplen = ((va + len as u64 - start).div_ceil(page) * page) as usize;
        // SAFETY: a fresh shared mapping of nvsim's device memory; nothing else aliases it.
        let p = unsafe {
            mmap(
                std::ptr::null_mut(),
                maplen,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED,
                self.fd.as_fd(),
                start,
            )
        }?;
        // SAFETY: `va - start` is inside the mapping.
        f(unsafe { (p as *mut u8).add((va - start) as usize) });
        // SAFETY: unmapping what was mapped above.
        unsafe { munmap(p, maplen) }
    }
}
