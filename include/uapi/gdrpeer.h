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
#define GDRPEER_ABI_MINOR 6
#define GDRPEER_ABI_VERSION ((GDRPEER_ABI_MAJOR << 16) | GDRPEER_ABI_MINOR)

#define GDRPEER_IOCTL_MAGIC 0xDB

struct gdrpeer_version {
	__u32 size;		/* in: sizeof(struct gdrpeer_version) */
	__u32 abi_version;	/* out: GDRPEER_ABI_VERSION of the module */
	__u32 nv_page_table_version;	/* out: nv-p2p page table version built for */
	__u32 nv_dma_mapping_version;	/* out: nv-p2p DMA mapping version built for */
};

#define GDRPEER_IOCTL_GET_VERSION _IOWR(GDRPEER_IOCTL_MAGIC, 255, struct gdrpeer_version)

/*
 * Pins: GPU memory is pinned in whole 64 KiB GPU pages. A pin request
 * [va, va + len) is widened to them (start rounded down, end rounded up);
 * the caller's window is that widened range and its offset. A request
 * contained in a region the file has pinned already is served from it
 * without calling the NVIDIA driver (the registration cache); UNPIN leaves
 * the region pinned for the next request until a limit or the driver
 * reclaims it.
 *
 * Every ioctl but GET_VERSION must come from the process that opened the
 * file (-EACCES otherwise). Errors: -EINVAL bad size, flags, length or
 * handle; -ENXIO the memory was freed (the handle stays until UNPIN);
 * -ENOMEM no BAR1 space even after evicting unused regions; -EOPNOTSUPP
 * persistent pins without driver support.
 */

/* Pin without a free callback: the driver never revokes it (needs driver support). */
#define GDRPEER_PIN_PERSISTENT (1U << 0)
/*
 * Since ABI 1.1: bypass the cache. The pin is a region of its own, never
 * shared with another request, and UNPIN gives it back to the driver at once:
 * pin-per-use, for comparison and for callers that manage reuse themselves.
 */
#define GDRPEER_PIN_NOCACHE (1U << 1)
#define GDRPEER_PIN_FLAGS (GDRPEER_PIN_PERSISTENT | GDRPEER_PIN_NOCACHE)

struct gdrpeer_pin {
	__u32 size;		/* in: sizeof(struct gdrpeer_pin) */
	__u32 flags;		/* in: GDRPEER_PIN_* */
	__u64 va;		/* in: GPU virtual address, any alignment */
	__u64 len;		/* in: bytes, > 0, at most module parameter max_pin_bytes */
	__u64 handle;		/* out: names the pin in later ioctls */
	__u64 aligned_va;	/* out: va rounded down to page_size */
	__u64 offset;		/* out: va - aligned_va */
	__u32 page_count;	/* out: pages in the window */
	__u32 page_size;	/* out: 65536 */
};

struct gdrpeer_unpin {
	__u32 size;		/* in: sizeof(struct gdrpeer_unpin) */
	__u32 pad;
	__u64 handle;		/* in */
};

#define GDRPEER_STATE_VALID 0	/* pinned, addresses usable */
#define GDRPEER_STATE_REVOKED 1	/* the driver freed the memory: unpin the handle */

struct gdrpeer_info {
	__u32 size;		/* in: sizeof(struct gdrpeer_info) */
	__u32 state;		/* out: GDRPEER_STATE_* */
	__u64 handle;		/* in */
	__u64 aligned_va;	/* out: the window, as PIN reported it */
	__u64 offset;		/* out */
	__u32 page_count;	/* out */
	__u32 page_size;	/* out */
	__u64 region_va;	/* out: the cached region that serves the window */
	__u64 region_len;	/* out */
	__u32 flags;		/* out: GDRPEER_PIN_PERSISTENT or 0 */
	__u32 pad;
};

/*
 * GET_PAGES: the bus (BAR1) addresses of the window's pages, one __u64 per
 * page, into the user array at addrs. Needs CAP_SYS_RAWIO (-EPERM).
 * count is in: entries at addrs (-ENOSPC when fewer than the window's
 * pages), out: entries written.
 */
struct gdrpeer_get_pages {
	__u32 size;		/* in: sizeof(struct gdrpeer_get_pages) */
	__u32 count;		/* in/out */
	__u64 handle;		/* in */
	__u64 addrs;		/* in: user pointer to __u64[count] */
};

/*
 * DMA_MAP: maps the handle's region for a peer PCI device (one mapping per
 * region and device, made on first use, freed with the region) and returns
 * the window's DMA addresses as the device sees them, like GET_PAGES.
 * Needs CAP_SYS_RAWIO (-EPERM); -ENODEV when no such PCI device exists.
 */
struct gdrpeer_dma_map {
	__u32 size;		/* in: sizeof(struct gdrpeer_dma_map) */
	__u32 count;		/* in/out, as for GET_PAGES */
	__u64 handle;		/* in */
	__u64 addrs;		/* in: user pointer to __u64[count] */
	__u32 pci_domain;	/* in: the peer, as domain:bus:devfn */
	__u8 pci_bus;		/* in */
	__u8 pci_devfn;		/* in: PCI_DEVFN(slot, function) */
	__u16 pad;
};

/* Counters of one registration cache, or of all of them. */
struct gdrpeer_cache_stats {
	__u64 regions;		/* pinned regions */
	__u64 pinned_bytes;	/* bytes pinned (in use and unused) */
	__u64 hits;		/* pins served from the cache */
	__u64 misses;		/* pins that called the driver */
	__u64 evictions_limit;	/* unused regions unpinned over a limit */
	__u64 evictions_enomem;	/* unused regions unpinned when BAR1 ran out */
	__u64 callbacks;	/* regions the driver freed (free callback) */
	__u64 deferred;		/* regions left for the callback by a close elsewhere */
};

struct gdrpeer_stats {
	__u32 size;		/* in: sizeof(struct gdrpeer_stats) */
	__u32 pad;
	__u64 handles;		/* out: this file's live handles */
	struct gdrpeer_cache_stats file;	/* out: this file's cache */
	struct gdrpeer_cache_stats global;	/* out: all caches; deferred: still waiting */
};

/*
 * Since ABI 1.2: CPU access by mmap. A handle's window (the pin request
 * rounded to 64 KiB pages, from aligned_va) is mapped with
 *
 *	mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
 *	     GDRPEER_MMAP_OFFSET(handle, off));
 *
 * where off is a multiple of 4 KiB (the CPU page size) and off + len lies in
 * the window: the mapping shows the window's bytes [off, off + len). Any
 * number of mappings of a handle, at any such offset, may coexist. Only
 * handles below 2^24 can be encoded (the offset has 64 bits).
 * Pages are mapped on first access, write-combining, or cached where the
 * driver's page table says the CPU may cache them (coherent platforms).
 *
 * - Only the process that opened the file may map it (-EACCES); MAP_SHARED
 *   only (-EINVAL for MAP_PRIVATE); a range past the window or an unknown
 *   handle: -EINVAL; memory the driver freed already: -ENXIO. The mapping
 *   cannot grow (mremap) and is not inherited across fork (the child has no
 *   mapping there).
 * - A mapping keeps the file open (close() of the descriptor does not end
 *   it) and its handle's region in use (never evicted). Since ABI 1.3, UNPIN
 *   of a mapped handle withdraws its mappings (ABI 1.2: -EBUSY): a later
 *   access raises SIGBUS; munmap them.
 * - When the driver frees the memory (cuMemFree, the owner's exit), every
 *   mapping of it is torn down before the driver's page table is freed; a
 *   later access raises SIGBUS. GET_INFO then reports GDRPEER_STATE_REVOKED;
 *   munmap and UNPIN the handle.
 */
#define GDRPEER_MMAP_HANDLE_SHIFT 40
#define GDRPEER_MMAP_OFFSET_MASK ((1ULL << GDRPEER_MMAP_HANDLE_SHIFT) - 1)
#define GDRPEER_MMAP_OFFSET(handle, off) \
	(((__u64)(handle) << GDRPEER_MMAP_HANDLE_SHIFT) | ((__u64)(off) & GDRPEER_MMAP_OFFSET_MASK))


/*
 * Since ABI 1.3: invalidation events. When the driver frees memory that a
 * handle of this file pins (cuMemFree, the owner's exit), the handle is
 * revoked and one event is queued on the file for it: poll/epoll report the
 * file readable (EPOLLIN | EPOLLRDNORM) while events are queued, and read(2)
 * returns them as whole struct gdrpeer_event records, oldest first, as many
 * as fit in the buffer. A buffer smaller than one record: -EINVAL; nothing
 * queued: -EAGAIN with O_NONBLOCK, else read waits (interruptibly). Since
 * ABI 1.6 a RWF_NOWAIT read (preadv2(), io_uring) fails with -EAGAIN instead
 * of waiting when nothing is queued. Each
 * revocation of a handle is reported once; UNPIN and close are not reported.
 * Since ABI 1.6, UNPIN of a revoked handle takes its event out of the queue
 * if no read has taken it yet.
 * Only the process that opened the file may read it (-EACCES; poll reports
 * EPOLLERR to others). /dev/gdrdrv files report their revoked handles the
 * same way, with gdrdrv handles.
 */
#define GDRPEER_EVENT_REVOKED 1	/* the driver freed the handle's memory */

struct gdrpeer_event {
	__u64 handle;		/* the handle revoked */
	__u32 type;		/* GDRPEER_EVENT_REVOKED */
	__u32 pad;		/* 0 */
};

/*
 * Since ABI 1.4: EXPORT_DMABUF turns a pinned window into a dma-buf, for
 * the upstream RDMA drivers (ibv_reg_dmabuf_mr) and any other importer that
 * takes peer-to-peer memory. The window is a handle's (handle != 0; va and
 * len must be 0), or [va, va + len) pinned as PIN would, from the cache
 * (handle == 0). The dma-buf is the window's whole 64 KiB pages,
 * page_count * page_size bytes; the caller's va lies at byte offset in it:
 *
 *	ibv_reg_dmabuf_mr(pd, e.offset, len, va, e.fd, access);
 *
 * fd is a new descriptor (O_RDWR | O_CLOEXEC) that may be passed to other
 * processes. The dma-buf keeps its region pinned, in use, for as long as it
 * lives, whatever happens to the handle or to this file; nothing more is
 * pinned, and exporting a cached region again calls no driver function.
 * When the driver frees the memory (cuMemFree, the owner's exit), every
 * importer is told to stop (dma-buf invalidation), gdrpeer waits until each
 * has unmapped, and only then lets the driver free the pages; later mappings
 * fail with -ENXIO. Importers must allow peer-to-peer (no struct pages stand
 * behind the addresses) and handle invalidation (a dynamic importer, or a
 * pinned one with an invalidate_mappings op); others are refused at attach
 * with -EOPNOTSUPP. No CPU access through the dma-buf (mmap it through
 * /dev/gdrpeer instead).
 *
 * Since ABI 1.5, GDRPEER_EXPORT_PERSISTENT exports [va, va + len) backed
 * by a persistent pin of its own, never cached, which the dma-buf holds until
 * its last reference goes and then gives back: the driver never revokes it,
 * and the memory stays valid after cuMemFree until then. With a handle, the
 * flag asks that the handle be pinned with GDRPEER_PIN_PERSISTENT (its
 * region, shared with the cache, then goes back as the cache's do). Such a
 * dma-buf also accepts importers that cannot be invalidated (a pinned
 * attachment without invalidate_mappings, as ib_umem_dmabuf_get_pinned()
 * makes for efa, mana, bnxt_re, ionic and mlx5 DEVX). Where the driver
 * refuses persistent pins (MIG, vGPU, confidential computing, or a driver
 * without the persistent API) the export fails with -EOPNOTSUPP.
 *
 * Errors: as PIN for va and len; -EINVAL unknown flags, both or neither of
 * handle and va/len, GDRPEER_EXPORT_PERSISTENT with a handle not pinned
 * persistently, an unknown handle; -ENXIO memory the driver freed already;
 * -EOPNOTSUPP a persistent pin the driver refuses; -EMFILE no descriptor
 * left.
 */

/* EXPORT_DMABUF flags (ABI 1.5). */
#define GDRPEER_EXPORT_PERSISTENT (1U << 0)	/* a persistent pin the dma-buf owns */
#define GDRPEER_EXPORT_FLAGS GDRPEER_EXPORT_PERSISTENT

struct gdrpeer_export_dmabuf {
	__u32 size;		/* in: sizeof(struct gdrpeer_export_dmabuf) */
	__u32 flags;		/* in: GDRPEER_EXPORT_*, or 0 */
	__u64 handle;		/* in: a handle, or 0 */
	__u64 va;		/* in: with handle 0: GPU virtual address, any alignment */
	__u64 len;		/* in: with handle 0: bytes */
	__s32 fd;		/* out: the dma-buf */
	__u32 page_count;	/* out: pages in the dma-buf */
	__u64 aligned_va;	/* out: the GPU address of the dma-buf's first byte */
	__u64 offset;		/* out: the va's (or the handle's) offset in the dma-buf */
	__u64 dmabuf_size;	/* out: page_count * 65536 */
};

#define GDRPEER_IOCTL_PIN _IOWR(GDRPEER_IOCTL_MAGIC, 1, struct gdrpeer_pin)
#define GDRPEER_IOCTL_UNPIN _IOW(GDRPEER_IOCTL_MAGIC, 2, struct gdrpeer_unpin)
#define GDRPEER_IOCTL_GET_INFO _IOWR(GDRPEER_IOCTL_MAGIC, 3, struct gdrpeer_info)
#define GDRPEER_IOCTL_GET_PAGES _IOWR(GDRPEER_IOCTL_MAGIC, 4, struct gdrpeer_get_pages)
#define GDRPEER_IOCTL_DMA_MAP _IOWR(GDRPEER_IOCTL_MAGIC, 5, struct gdrpeer_dma_map)
#define GDRPEER_IOCTL_STATS _IOWR(GDRPEER_IOCTL_MAGIC, 6, struct gdrpeer_stats)
#define GDRPEER_IOCTL_EXPORT_DMABUF _IOWR(GDRPEER_IOCTL_MAGIC, 7, struct gdrpeer_export_dmabuf)

#endif /* _UAPI_GDRPEER_H_ */
