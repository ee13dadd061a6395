// SPDX-License-Identifier: GPL-2.0

//! `/dev/nvsim` from user space: simulated GPU memory (tests/nvsim/nvsim_uapi.h).
//!
//! Used by nvsim's tests and by the simulated libcuda; [`gdrnic`] (the sample NIC),
//! [`testing`] and [`cuda_vmm`] by the in-guest test programs.

pub mod cuda_vmm;
pub mod gdrnic;
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
    pub flags: u32,
    pub pad: u32,
}

/// `NVSIM_ALLOC_SUBALLOC`: carve the buffer from a shared 2 MiB pool block, 256-byte aligned.
pub const ALLOC_SUBALLOC: u32 = 1;
/// `NVSIM_ALLOC_GPU1`: the second simulated GPU's memory, whose tables carry its own UUID (not
/// with [`ALLOC_SUBALLOC`]).
pub const ALLOC_GPU1: u32 = 2;
/// `NVSIM_QUERY_SUBALLOC`: the pointer lies in a buffer of a pool block.
pub const QUERY_SUBALLOC: u32 = 1;
/// `NVSIM_QUERY_VMM`: the pointer lies in a VMM mapping.
pub const QUERY_VMM: u32 = 2;
/// `NVSIM_QUERY_GPU1`: the pointer lies in the second simulated GPU's memory.
pub const QUERY_GPU1: u32 = 4;
/// `NVSIM_VMM_GRANULARITY`: VMM sizes and mapping addresses are multiples of it.
pub const VMM_GRANULARITY: u64 = 2 << 20;
/// Small allocations are sub-allocated below this size (nvsim's pool block).
pub const POOL_BLOCK: u64 = 2 << 20;

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
    pub flags: u32,
    pub pad: u32,
}

/// `struct nvsim_vmm_reserve_args`.
#[repr(C)]
#[derive(Default, Debug, Clone, Copy)]
pub struct VmmReserveArgs {
    pub size: u64,
    pub va: u64,
}

/// `struct nvsim_vmm_create_args`.
#[repr(C)]
#[derive(Default, Debug, Clone, Copy)]
pub struct VmmCreateArgs {
    pub size: u64,
    pub handle: u64,
}

/// `struct nvsim_vmm_map_args`.
#[repr(C)]
#[derive(Default, Debug, Clone, Copy)]
pub struct VmmMapArgs {
    pub va: u64,
    pub size: u64,
    pub handle: u64,
    pub buffer_id: u64,
}

/// `struct nvsim_vmm_range_args`.
#[repr(C)]
#[derive(Default, Debug, Clone, Copy)]
pub struct VmmRangeArgs {
    pub va: u64,
    pub size: u64,
}

/// `struct nvsim_sync_memops_args`.
/// `NVSIM_IOCTL_TOUCH`'s arguments ([`Gpu::touch`]).
#[repr(C)]
#[derive(Default, Debug, Clone, Copy)]
pub struct TouchArgs {
    pub cold: u32,
    pub hot: u32,
    pub lines: u32,
    pub seed: u32,
    pub sum: u64,
}

/// The pages [`Gpu::touch`]'s cold pages are chosen among (16 MiB).
pub const TOUCH_PAGES: u32 = 4096;
/// Cold or hot pages in one [`Gpu::touch`] at most.
pub const TOUCH_MAX: u32 = 16;

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
const VMM_RESERVE: ioctl::Opcode = ioctl::opcode::read_write::<VmmReserveArgs>(MAGIC, 5);
const VMM_UNRESERVE: ioctl::Opcode = ioctl::opcode::write::<VmmRangeArgs>(MAGIC, 6);
const VMM_CREATE: ioctl::Opcode = ioctl::opcode::read_write::<VmmCreateArgs>(MAGIC, 7);
const VMM_RELEASE: ioctl::Opcode = ioctl::opcode::write::<u64>(MAGIC, 8);
const VMM_MAP: ioctl::Opcode = ioctl::opcode::read_write::<VmmMapArgs>(MAGIC, 9);
const VMM_UNMAP: ioctl::Opcode = ioctl::opcode::write::<VmmRangeArgs>(MAGIC, 10);
const TOUCH: ioctl::Opcode = ioctl::opcode::read_write::<TouchArgs>(MAGIC, 11);

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
        self.alloc_flags(size, 0)
    }

    /// Allocates GPU memory with `NVSIM_ALLOC_*` flags: (va, buffer id).
    pub fn alloc_flags(&self, size: u64, flags: u32) -> Result<(u64, u64), Errno> {
        let mut a = AllocArgs {
            size,
            flags,
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

    /// Reads `lines` cache lines of each of `cold` pages chosen among [`TOUCH_PAGES`] pages
    /// of kernel memory, then of `hot` pages chosen among two of them, in one system call
    /// (`NVSIM_IOCTL_TOUCH`: what reading memory no recent call read costs on this machine);
    /// the pages and lines are drawn from `seed`. The sum of the words read.
    pub fn touch(&self, cold: u32, hot: u32, lines: u32, seed: u32) -> Result<u64, Errno> {
        let t = TouchArgs {
            cold,
            hot,
            lines,
            seed,
            sum: 0,
        };
        Ok(self.touch_args(t)?.sum)
    }

    /// [`Gpu::touch`] with its arguments in nvsim's layout.
    pub fn touch_args(&self, mut t: TouchArgs) -> Result<TouchArgs, Errno> {
        // SAFETY: TOUCH reads and writes one `TouchArgs`.
        unsafe { ioctl::ioctl(&self.fd, ioctl::Updater::<TOUCH, TouchArgs>::new(&mut t)) }?;
        Ok(t)
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

    /// Reserves a VMM address range (cuMemAddressReserve): its start.
    pub fn vmm_reserve(&self, size: u64) -> Result<u64, Errno> {
        let mut a = VmmReserveArgs { size, va: 0 };
        // SAFETY: VMM_RESERVE reads and writes one `VmmReserveArgs`.
        unsafe {
            ioctl::ioctl(
                &self.fd,
                ioctl::Updater::<VMM_RESERVE, VmmReserveArgs>::new(&mut a),
            )
        }?;
        Ok(a.va)
    }

    /// Frees a whole reservation (cuMemAddressFree); EBUSY while something is mapped in it.
    pub fn vmm_unreserve(&self, va: u64, size: u64) -> Result<(), Errno> {
        let a = VmmRangeArgs { va, size };
        // SAFETY: VMM_UNRESERVE reads one `VmmRangeArgs`.
        unsafe {
            ioctl::ioctl(
                &self.fd,
                ioctl::Setter::<VMM_UNRESERVE, VmmRangeArgs>::new(a),
            )
        }
    }

    /// Creates a physical allocation (cuMemCreate): its handle.
    pub fn vmm_create(&self, size: u64) -> Result<u64, Errno> {
        let mut a = VmmCreateArgs { size, handle: 0 };
        // SAFETY: VMM_CREATE reads and writes one `VmmCreateArgs`.
        unsafe {
            ioctl::ioctl(
                &self.fd,
                ioctl::Updater::<VMM_CREATE, VmmCreateArgs>::new(&mut a),
            )
        }?;
        Ok(a.handle)
    }

    /// Releases a handle (cuMemRelease); the memory goes with its last mapping.
    pub fn vmm_release(&self, handle: u64) -> Result<(), Errno> {
        // SAFETY: VMM_RELEASE reads one u64.
        unsafe { ioctl::ioctl(&self.fd, ioctl::Setter::<VMM_RELEASE, u64>::new(handle)) }
    }

    /// Maps the first `size` bytes of `handle` at `va` (cuMemMap): the mapping's buffer id.
    pub fn vmm_map(&self, va: u64, size: u64, handle: u64) -> Result<u64, Errno> {
        let mut a = VmmMapArgs {
            va,
            size,
            handle,
            buffer_id: 0,
        };
        // SAFETY: VMM_MAP reads and writes one `VmmMapArgs`.
        unsafe { ioctl::ioctl(&self.fd, ioctl::Updater::<VMM_MAP, VmmMapArgs>::new(&mut a)) }?;
        Ok(a.buffer_id)
    }

    /// Unmaps the whole mappings in `[va, va + size)` (cuMemUnmap), calling back their pins.
    pub fn vmm_unmap(&self, va: u64, size: u64) -> Result<(), Errno> {
        let a = VmmRangeArgs { va, size };
        // SAFETY: VMM_UNMAP reads one `VmmRangeArgs`.
        unsafe { ioctl::ioctl(&self.fd, ioctl::Setter::<VMM_UNMAP, VmmRangeArgs>::new(a)) }
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
