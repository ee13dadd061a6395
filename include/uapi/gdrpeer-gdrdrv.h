/* SPDX-License-Identifier: GPL-2.0 WITH Linux-syscall-note */
/*
 * The gdrdrv ABI as gdrpeer's /dev/gdrdrv speaks it: what libgdrapi (gdrcopy
 * 2.x) sends, so that its programs run on gdrpeer unchanged. Command numbers,
 * layouts and semantics are gdrdrv 2.6's; Documentation/user/gdrdrv.rst lists where
 * gdrpeer behaves differently on purpose (lazy unpin, several mappings per
 * pin, invalidation events) and its one extension flag.
 *
 * Several commands encode the size of a pointer (8) rather than of their
 * struct, as the library sends them: the kernel copies the whole struct
 * whatever the command says. All structs are little-endian with natural
 * alignment; the kernel checks these layouts at build time.
 */
#ifndef _UAPI_GDRPEER_GDRDRV_H_
#define _UAPI_GDRPEER_GDRDRV_H_

#include <linux/ioctl.h>
#include <linux/types.h>

#define GDRDRV_DEVICE_NAME "gdrdrv"

#define GDRDRV_MAJOR_VERSION 2
#define GDRDRV_MINOR_VERSION 6
#define GDRDRV_VERSION ((GDRDRV_MAJOR_VERSION << 16) | GDRDRV_MINOR_VERSION)
#define GDRDRV_MINIMUM_GDR_API_VERSION ((2 << 16) | 0)

#define GDRDRV_IOCTL_MAGIC 0xDA

/* Mapping types (REQ_MAPPING_TYPE in, GET_INFO_V2 out). */
#define GDRDRV_MAPPING_TYPE_NONE 0
#define GDRDRV_MAPPING_TYPE_WC 1
#define GDRDRV_MAPPING_TYPE_CACHING 2
#define GDRDRV_MAPPING_TYPE_DEVICE 3

/* GET_ATTR attributes. */
#define GDRDRV_ATTR_USE_PERSISTENT_MAPPING 1
#define GDRDRV_ATTR_SUPPORT_PIN_FLAG_FORCE_PCIE 2

/* PIN_BUFFER_V2 flags. */
#define GDRDRV_PIN_FLAG_FORCE_PCIE (1U << 0)
/*
 * gdrpeer's extension: bypass the registration cache for this pin (as
 * GDRPEER_PIN_NOCACHE): UNPIN gives the memory back to the driver at once.
 * gdrdrv itself rejects the flag with -EINVAL.
 */
#define GDRDRV_PIN_FLAG_GDRPEER_NOCACHE (1U << 31)

struct gdrdrv_pin_buffer {
	__u64 addr;		/* in: GPU virtual address */
	__u64 size;		/* in: bytes */
	__u64 p2p_token;	/* in: 0, or the buffer's P2P token */
	__u32 va_space;		/* in: the buffer's VA-space token (with p2p_token) */
	__u32 pad;
	__u64 handle;		/* out: handle, also the mmap offset in pages */
};

struct gdrdrv_pin_buffer_v2 {
	__u64 addr;		/* in */
	__u64 size;		/* in */
	__u32 flags;		/* in: GDRDRV_PIN_FLAG_* */
	__u32 pad;
	__u64 handle;		/* out */
};

struct gdrdrv_unpin_buffer {
	__u64 handle;		/* in */
};

struct gdrdrv_get_cb_flag {
	__u64 handle;		/* in */
	__u32 flag;		/* out: 1 once the memory was freed under the pin */
	__u32 pad;
};

struct gdrdrv_get_info {
	__u64 handle;		/* in */
	__u64 va;		/* out: start of the pinned 64 KiB-aligned window */
	__u64 mapped_size;	/* out: its length */
	__u32 page_size;	/* out: 65536 */
	__u32 tsc_khz;		/* out: TSC frequency, for tm_cycles */
	__u64 tm_cycles;	/* out: TSC cycles the pin took */
	__u32 mapped;		/* out: 1 while the handle is mapped */
	__u32 wc_mapping;	/* out: 1 when mappings are write-combining */
};

struct gdrdrv_get_info_v2 {
	__u64 handle;		/* in */
	__u64 va;		/* out */
	__u64 mapped_size;	/* out */
	__u32 page_size;	/* out */
	__u32 tsc_khz;		/* out */
	__u64 tm_cycles;	/* out */
	__u32 mapping_type;	/* out: GDRDRV_MAPPING_TYPE_* of the handle's mappings */
	__u32 pad;
};

struct gdrdrv_get_attr {
	__u32 attr;		/* in: GDRDRV_ATTR_* */
	__u32 val;		/* out */
};

struct gdrdrv_req_mapping_type {
	__u64 handle;		/* in */
	__u32 mapping_type;	/* in: GDRDRV_MAPPING_TYPE_* for the next mmap */
	__u32 pad;
};

struct gdrdrv_get_version {
	__u32 gdrdrv_version;		/* out: GDRDRV_VERSION */
	__u32 minimum_gdr_api_version;	/* out: GDRDRV_MINIMUM_GDR_API_VERSION */
};

/* The numbers libgdrapi sends; some encode sizeof(void *), not the struct's. */
#define GDRDRV_IOC_PIN_BUFFER		_IOWR(GDRDRV_IOCTL_MAGIC, 1, struct gdrdrv_pin_buffer)
#define GDRDRV_IOC_UNPIN_BUFFER		_IOWR(GDRDRV_IOCTL_MAGIC, 2, struct gdrdrv_unpin_buffer *)
#define GDRDRV_IOC_GET_CB_FLAG		_IOWR(GDRDRV_IOCTL_MAGIC, 3, struct gdrdrv_get_cb_flag *)
#define GDRDRV_IOC_GET_INFO		_IOWR(GDRDRV_IOCTL_MAGIC, 4, struct gdrdrv_get_info *)
#define GDRDRV_IOC_GET_INFO_V2		_IOWR(GDRDRV_IOCTL_MAGIC, 5, struct gdrdrv_get_info_v2 *)
#define GDRDRV_IOC_GET_ATTR		_IOWR(GDRDRV_IOCTL_MAGIC, 6, struct gdrdrv_get_attr *)
#define GDRDRV_IOC_PIN_BUFFER_V2	_IOWR(GDRDRV_IOCTL_MAGIC, 7, struct gdrdrv_pin_buffer_v2)
#define GDRDRV_IOC_REQ_MAPPING_TYPE	_IOWR(GDRDRV_IOCTL_MAGIC, 8, struct gdrdrv_req_mapping_type *)
#define GDRDRV_IOC_GET_VERSION		_IOWR(GDRDRV_IOCTL_MAGIC, 255, struct gdrdrv_get_version *)

#endif /* _UAPI_GDRPEER_GDRDRV_H_ */
