/* SPDX-License-Identifier: GPL-2.0 WITH Linux-syscall-note */
/*
 * /dev/gdrnic: the sample NIC driver's test interface (tests only).
 *
 * A process registers its own GPU memory (as ibv_reg_mr would) and asks the
 * NIC to "send" bytes of it (GPU -> NIC -> the caller's buffer, as if onto the
 * wire) or to "receive" bytes into it (the caller's buffer -> NIC -> GPU).
 * Every byte crosses the emulated PCI bus between the GPU BAR and QEMU's edu
 * device by DMA, at the addresses gdrpeer gave for the edu function.
 *
 * A registration may also be a dma-buf import (REG_DMABUF), made exactly as
 * the RDMA core's ib_umem_dmabuf makes one for ibv_reg_dmabuf_mr(): a
 * dynamic attachment that allows peer-to-peer and takes invalidations, or a
 * pinned one with an invalidate op (GDRNIC_DMABUF_PINNED). A dynamic import
 * maps the dma-buf on the first transfer after each invalidation, under the
 * reservation lock, which every chunk of a transfer holds: once an
 * invalidation has run, no DMA uses the old addresses.
 *
 * Errors: -EINVAL bad arguments or a range outside the registration;
 * -ENOENT unknown handle; -ENXIO the GPU memory was freed (the registration
 * was invalidated); -EACCES registering from a process other than the one
 * that opened the file; -EFAULT bad user pointers; -ETIMEDOUT the DMA engine
 * did not finish; -ENODEV the device is gone. gdrpeer's errors pass through.
 */
#ifndef _UAPI_GDRNIC_H_
#define _UAPI_GDRNIC_H_

#include <linux/ioctl.h>
#include <linux/types.h>

#define GDRNIC_IOCTL_MAGIC 0xDD

/* Longest SEND or RECV. */
#define GDRNIC_XFER_MAX (1U << 20)

struct gdrnic_reg_args {
	__u64 va;		/* in: GPU virtual address, any alignment */
	__u64 len;		/* in: bytes */
	__u64 addrs;		/* in: user array for the DMA addresses, or 0 */
	__u32 addrs_cap;	/* in: entries in that array */
	__u32 handle;		/* out: the registration, > 0 */
	__u64 aligned_va;	/* out: va rounded down to page_size */
	__u64 offset;		/* out: va - aligned_va */
	__u32 page_count;	/* out: DMA addresses (pages) of the registration */
	__u32 page_size;	/* out: 65536 */
};

struct gdrnic_xfer_args {
	__u32 handle;		/* in: a registration */
	__u32 pad;		/* in: 0 */
	__u64 offset;		/* in: byte offset from the registered va */
	__u64 len;		/* in: bytes, 1 .. GDRNIC_XFER_MAX */
	__u64 buf;		/* in: user buffer: SEND fills it, RECV reads it */
};

/* REG_DMABUF flags. */
#define GDRNIC_DMABUF_PINNED		(1U << 0)	/* dma_buf_pin(), revocable */
#define GDRNIC_DMABUF_KAPI		(1U << 1)	/* export va/len with gdrpeer_dmabuf_export() */
/* Importers gdrpeer must refuse (tests): */
#define GDRNIC_DMABUF_NO_P2P		(1U << 2)	/* allow_peer2peer false */
#define GDRNIC_DMABUF_NO_INVALIDATE	(1U << 3)	/* no invalidate_mappings op */
#define GDRNIC_DMABUF_FLAGS		0xf

struct gdrnic_dmabuf_args {
	__s32 fd;		/* in: a dma-buf (not with GDRNIC_DMABUF_KAPI) */
	__u32 flags;		/* in: GDRNIC_DMABUF_* */
	__u64 offset;		/* in: byte offset in the dma-buf; with KAPI: the GPU va */
	__u64 len;		/* in: bytes */
	__u32 handle;		/* out: the registration, > 0 */
	__u32 nents;		/* out: DMA segments of the first mapping */
};

#define GDRNIC_IOCTL_REG	_IOWR(GDRNIC_IOCTL_MAGIC, 1, struct gdrnic_reg_args)
#define GDRNIC_IOCTL_DEREG	_IOW(GDRNIC_IOCTL_MAGIC, 2, __u32)
#define GDRNIC_IOCTL_SEND	_IOW(GDRNIC_IOCTL_MAGIC, 3, struct gdrnic_xfer_args)
#define GDRNIC_IOCTL_RECV	_IOW(GDRNIC_IOCTL_MAGIC, 4, struct gdrnic_xfer_args)
#define GDRNIC_IOCTL_REG_DMABUF	_IOWR(GDRNIC_IOCTL_MAGIC, 5, struct gdrnic_dmabuf_args)

#endif /* _UAPI_GDRNIC_H_ */
