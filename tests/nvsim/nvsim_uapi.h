/* SPDX-License-Identifier: GPL-2.0 WITH Linux-syscall-note */
/*
 * /dev/nvsim: allocate and inspect simulated GPU memory (tests only).
 *
 * Allocations belong to the calling process (its tgid), like CUDA memory: the
 * nv-p2p calls of that process find them. Closing the file frees the file's
 * allocations, firing free callbacks as the real driver does on cuMemFree or
 * process exit. mmap(offset = GPU virtual address) maps an allocation's
 * backing BAR pages so tests can read and write GPU memory.
 */
#ifndef _UAPI_NVSIM_H_
#define _UAPI_NVSIM_H_

#include <linux/ioctl.h>
#include <linux/types.h>

#define NVSIM_IOCTL_MAGIC 0xDC

struct nvsim_alloc_args {
	__u64 size;		/* in: bytes (rounded up to 64 KiB inside) */
	__u64 va;		/* out: GPU virtual address, 64 KiB aligned */
	__u64 buffer_id;	/* out: unique in this boot, never reused */
	__u32 flags;		/* in: NVSIM_ALLOC_* */
	__u32 pad;		/* in: must be 0 */
};

/* Sub-allocate from a 2 MiB pool block, 256-byte aligned; size below 2 MiB. */
#define NVSIM_ALLOC_SUBALLOC	0x1
/* On the second simulated GPU (its own UUID in page tables); not with SUBALLOC. */
#define NVSIM_ALLOC_GPU1	0x2

struct nvsim_query_args {
	__u64 va;		/* in: any address inside the allocation */
	__u64 base;		/* out: start of the allocation */
	__u64 size;		/* out: size as requested at allocation */
	__u64 buffer_id;	/* out */
	__u64 p2p_token;	/* out: token of the owning VA space */
	__u32 va_space;		/* out: VA space id of the owning process */
	__u32 sync_memops;	/* out: 0 or 1 */
	__u32 flags;		/* out: NVSIM_QUERY_* */
	__u32 pad;
};

#define NVSIM_QUERY_SUBALLOC	0x1	/* a buffer inside a pool block */
#define NVSIM_QUERY_VMM		0x2	/* a VMM mapping (cuMemMap) */
#define NVSIM_QUERY_GPU1	0x4	/* the second simulated GPU's memory */

struct nvsim_sync_memops_args {
	__u64 va;		/* in: any address inside the allocation */
	__u32 value;		/* in: 0 or 1 */
	__u32 pad;		/* in: must be 0 */
};

/* VMM objects are multiples of this (cuMemGetAllocationGranularity). */
#define NVSIM_VMM_GRANULARITY	(2ULL << 20)

struct nvsim_vmm_reserve_args {
	__u64 size;		/* in: multiple of NVSIM_VMM_GRANULARITY */
	__u64 va;		/* out: start of the reserved range */
};

struct nvsim_vmm_create_args {
	__u64 size;		/* in: multiple of NVSIM_VMM_GRANULARITY */
	__u64 handle;		/* out: names the physical allocation, never 0 */
};

struct nvsim_vmm_map_args {
	__u64 va;		/* in: inside one reservation, not mapped yet */
	__u64 size;		/* in: granularity multiple, at most the allocation's */
	__u64 handle;		/* in */
	__u64 buffer_id;	/* out: of the new mapping */
};

struct nvsim_vmm_range_args {
	__u64 va;
	__u64 size;
};

#define NVSIM_IOCTL_ALLOC		_IOWR(NVSIM_IOCTL_MAGIC, 1, struct nvsim_alloc_args)
#define NVSIM_IOCTL_FREE		_IOW(NVSIM_IOCTL_MAGIC, 2, __u64)
#define NVSIM_IOCTL_QUERY		_IOWR(NVSIM_IOCTL_MAGIC, 3, struct nvsim_query_args)
#define NVSIM_IOCTL_SET_SYNC_MEMOPS	_IOW(NVSIM_IOCTL_MAGIC, 4, struct nvsim_sync_memops_args)
/* cuMemAddressReserve / cuMemAddressFree (the whole reservation, no mapping left: else -EBUSY) */
#define NVSIM_IOCTL_VMM_RESERVE		_IOWR(NVSIM_IOCTL_MAGIC, 5, struct nvsim_vmm_reserve_args)
#define NVSIM_IOCTL_VMM_UNRESERVE	_IOW(NVSIM_IOCTL_MAGIC, 6, struct nvsim_vmm_range_args)
/* cuMemCreate / cuMemRelease (the memory lives on until its last mapping goes) */
#define NVSIM_IOCTL_VMM_CREATE		_IOWR(NVSIM_IOCTL_MAGIC, 7, struct nvsim_vmm_create_args)
#define NVSIM_IOCTL_VMM_RELEASE		_IOW(NVSIM_IOCTL_MAGIC, 8, __u64)
/* cuMemMap / cuMemUnmap (whole mappings only; fires the free callbacks of their pins) */
#define NVSIM_IOCTL_VMM_MAP		_IOWR(NVSIM_IOCTL_MAGIC, 9, struct nvsim_vmm_map_args)
#define NVSIM_IOCTL_VMM_UNMAP		_IOW(NVSIM_IOCTL_MAGIC, 10, struct nvsim_vmm_range_args)

/*
 * The benchmark's measure of the machine, not of a GPU: reads `lines` cache
 * lines (each at random, as a search reads them) of each of `cold` pages among
 * NVSIM_TOUCH_PAGES pages of kernel memory, then of `hot` pages chosen among
 * the first two of them, in one system call. The same call with cold pages
 * and with hot ones differ by what reading a page that no recent call read
 * costs here (a cache hit among many regions reads such pages). The choices
 * come from `seed` (xorshift32), not from the kernel's random numbers, which
 * cost more than the reads in a guest whose generator is not seeded yet.
 */
struct nvsim_touch_args {
	__u32 cold;		/* in: at most NVSIM_TOUCH_MAX */
	__u32 hot;		/* in: at most NVSIM_TOUCH_MAX */
	__u32 lines;		/* in: 1 to 64 */
	__u32 seed;		/* in: any value */
	__u64 sum;		/* out: of the words read (they are read, not skipped) */
};

#define NVSIM_TOUCH_PAGES	4096	/* 16 MiB: the regions of 65,536 cached 64 KiB pins */
#define NVSIM_TOUCH_MAX		16

#define NVSIM_IOCTL_TOUCH		_IOWR(NVSIM_IOCTL_MAGIC, 11, struct nvsim_touch_args)

#endif /* _UAPI_NVSIM_H_ */
