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
};

struct nvsim_query_args {
	__u64 va;		/* in: any address inside the allocation */
	__u64 base;		/* out: start of the allocation */
	__u64 size;		/* out: size as requested at allocation */
	__u64 buffer_id;	/* out */
	__u64 p2p_token;	/* out: token of the owning VA space */
	__u32 va_space;		/* out: VA space id of the owning process */
	__u32 sync_memops;	/* out: 0 or 1 */
};

struct nvsim_sync_memops_args {
	__u64 va;		/* in: any address inside the allocation */
	__u32 value;		/* in: 0 or 1 */
	__u32 pad;		/* in: must be 0 */
};

#define NVSIM_IOCTL_ALLOC		_IOWR(NVSIM_IOCTL_MAGIC, 1, struct nvsim_alloc_args)
#define NVSIM_IOCTL_FREE		_IOW(NVSIM_IOCTL_MAGIC, 2, __u64)
#define NVSIM_IOCTL_QUERY		_IOWR(NVSIM_IOCTL_MAGIC, 3, struct nvsim_query_args)
#define NVSIM_IOCTL_SET_SYNC_MEMOPS	_IOW(NVSIM_IOCTL_MAGIC, 4, struct nvsim_sync_memops_args)

#endif /* _UAPI_NVSIM_H_ */
