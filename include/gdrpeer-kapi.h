/* SPDX-License-Identifier: GPL-2.0 */
/*
 * gdrpeer kernel API: GPU memory registration for PCIe peer drivers (RDMA
 * NICs). See Documentation/user/kernel-api.rst.
 *
 * A NIC driver creates a context in the process that registers memory (the
 * process that owns the GPU memory, as for ibv_reg_mr), pins GPU virtual
 * address ranges of that process for its own PCI function and gets their DMA
 * addresses, one per 64 KiB GPU page. Pins are served from the context's
 * registration cache. When the NVIDIA driver frees the memory, gdrpeer calls
 * the registration's invalidate callback before the DMA mappings go away.
 *
 * Link with KBUILD_EXTRA_SYMBOLS=<gdrpeer>/Module.symvers.
 */
#ifndef _GDRPEER_KAPI_H_
#define _GDRPEER_KAPI_H_

#include <linux/types.h>

struct dma_buf;
struct pci_dev;

/* API version: major << 16 | minor. Same major, minor >= yours: compatible. */
#define GDRPEER_KAPI_MAJOR 1
#define GDRPEER_KAPI_MINOR 2
#define GDRPEER_KAPI_VERSION ((GDRPEER_KAPI_MAJOR << 16) | GDRPEER_KAPI_MINOR)

/* The registration cache of one process. */
struct gdrpeer_ctx;

/* One registration: a pinned window of GPU memory mapped for one peer. */
struct gdrpeer_mr;

struct gdrpeer_mr_info {
	u64 aligned_va;		/* the window: va rounded down to page_size */
	u64 offset;		/* va - aligned_va */
	u32 page_count;		/* pages in the window */
	u32 page_size;		/* 65536 */
	const u64 *dma_addrs;	/* page_count DMA addresses for the peer, valid until unpin */
};

/* GDRPEER_KAPI_VERSION of the loaded gdrpeer. */
u32 gdrpeer_kapi_version(void);

/*
 * A context for the calling process. Sleeps. Returns an ERR_PTR on failure
 * (-ENOMEM).
 */
struct gdrpeer_ctx *gdrpeer_ctx_create(void);

/*
 * Ends a context and unpins its cache. A registration still pinned lives on
 * until its gdrpeer_mr_unpin(): its pages stay pinned and mapped, and its
 * callback may run until then. From another process, or a kernel thread, the
 * pages are left to the NVIDIA driver's callback. Sleeps.
 */
void gdrpeer_ctx_destroy(struct gdrpeer_ctx *ctx);

/*
 * Pins [va, va + len) of the calling process's GPU memory (the context's
 * process) and maps it for @peer. Fills @info. Sleeps.
 *
 * @invalidate (not NULL) is called once, with @data, when the NVIDIA driver
 * frees the memory while it is registered, before gdrpeer frees the DMA
 * mappings. It may run before this call returns, even when this call then
 * fails with -ENXIO: set @data up before calling. It must stop the device's
 * use of the addresses (and wait for DMA in flight) before it returns. It runs
 * in process context under the NVIDIA driver's global lock: it may sleep
 * briefly (gdrpeer reports one slower than its invalidate_warn_ms parameter,
 * 100 ms by default), and must not take a lock that is held anywhere around a
 * gdrpeer_* call, nor call gdrpeer_* itself. The registration stays valid
 * memory until gdrpeer_mr_unpin().
 *
 * Returns the registration or an ERR_PTR: -EINVAL bad range, length or
 * arguments, -EACCES another process's context, -ENOMEM no memory or BAR1
 * space, -ENXIO freed meanwhile, -EOPNOTSUPP a topology the NVIDIA driver
 * refuses.
 */
struct gdrpeer_mr *gdrpeer_mr_pin(struct gdrpeer_ctx *ctx, struct pci_dev *peer,
				  u64 va, u64 len, void (*invalidate)(void *data),
				  void *data, struct gdrpeer_mr_info *info);

/*
 * Ends a registration; the region stays cached in the context. If its
 * invalidate callback is running, waits for it to return; after this returns
 * it will not be called. Must not be called from the callback. Sleeps.
 */
void gdrpeer_mr_unpin(struct gdrpeer_mr *mr);

/*
 * Since 1.1: exports [va, va + len) of the context's process's GPU memory,
 * widened to whole 64 KiB pages and pinned from the context's cache, as a
 * dma-buf for importers that take peer-to-peer memory and handle invalidation
 * (Documentation/user/dma-buf.rst). Sets *@offset to va's offset in it. The
 * dma-buf keeps its region pinned until its last reference goes, even after
 * gdrpeer_ctx_destroy(); when the NVIDIA driver frees the memory, every
 * importer is invalidated and waited for. Call from the context's process.
 * Sleeps.
 *
 * Returns the dma-buf with one reference (dma_buf_fd() or dma_buf_put() it)
 * or an ERR_PTR: as gdrpeer_mr_pin() for the range, -EINVAL a NULL argument.
 */
struct dma_buf *gdrpeer_dmabuf_export(struct gdrpeer_ctx *ctx, u64 va, u64 len,
				      u64 *offset);

/* gdrpeer_dmabuf_export_flags() flags (since 1.2). */
#define GDRPEER_DMABUF_PERSISTENT	(1U << 0)	/* a persistent pin the dma-buf owns */
#define GDRPEER_DMABUF_FLAGS		GDRPEER_DMABUF_PERSISTENT

/*
 * Since 1.2: gdrpeer_dmabuf_export() with @flags. GDRPEER_DMABUF_PERSISTENT
 * backs the dma-buf with a persistent pin of its own (never cached), which the
 * NVIDIA driver never revokes: the memory stays valid after cuMemFree until
 * the dma-buf's last reference goes, which gives the pin back from whatever
 * context it runs in. Such a dma-buf also accepts importers that cannot be
 * invalidated (a pinned attachment without invalidate_mappings, as
 * ib_umem_dmabuf_get_pinned() makes). Call from the context's process. Sleeps.
 *
 * Returns as gdrpeer_dmabuf_export(), and -EINVAL unknown flags; -EOPNOTSUPP
 * a persistent pin the driver refuses (MIG, vGPU, confidential computing, a
 * driver without the persistent API).
 */
struct dma_buf *gdrpeer_dmabuf_export_flags(struct gdrpeer_ctx *ctx, u64 va, u64 len,
					    u32 flags, u64 *offset);

#endif /* _GDRPEER_KAPI_H_ */
