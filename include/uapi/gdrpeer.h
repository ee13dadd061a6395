/* SPDX-License-Identifier: GPL-2.0 WITH Linux-syscall-note */
/*
 * gdrpeer user-space ABI: ioctls on /dev/gdrpeer.
 *
 * Every argument struct starts with a __u32 size that the caller sets to
 * sizeof() of the struct it was built with; the kernel rejects sizes it does
 * not know with -EINVAL, so later versions can append fields. Fields are
 * fixed-size with explicit padding; "in" fields are read, "out" fields are
 * written, padding must be zero. Unknown commands fail with -ENOTTY, bad user
 * pointers with -EFAULT.
 */
#ifndef _UAPI_GDRPEER_H_
#define _UAPI_GDRPEER_H_

#include <linux/ioctl.h>
#include <linux/types.h>

#define GDRPEER_DEVICE_NAME "gdrpeer"

/* ABI version: major << 16 | minor. Same major and minor >= yours: compatible. */
#define GDRPEER_ABI_MAJOR 1
#define GDRPEER_ABI_MINOR 0
#define GDRPEER_ABI_VERSION ((GDRPEER_ABI_MAJOR << 16) | GDRPEER_ABI_MINOR)

#define GDRPEER_IOCTL_MAGIC 0xDB

struct gdrpeer_version {
	__u32 size;		/* in: sizeof(struct gdrpeer_version) */
	__u32 abi_version;	/* out: GDRPEER_ABI_VERSION of the module */
	__u32 nv_page_table_version;	/* out: nv-p2p page table version built for */
	__u32 nv_dma_mapping_version;	/* out: nv-p2p DMA mapping version built for */
};

#define GDRPEER_IOCTL_GET_VERSION _IOWR(GDRPEER_IOCTL_MAGIC, 255, struct gdrpeer_version)

#endif /* _UAPI_GDRPEER_H_ */
