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
 * dynamic attachment that allows peer-to-peer and takes invalidations, a
 * pinned one with an invalidate op (GDRNIC_DMABUF_PINNED), or a pinned one
 * that cannot be invalidated (GDRNIC_DMABUF_PINNED_NOREVOKE, the import of
 * ib_umem_dmabuf_get_pinned(): efa, mana, bnxt_re, ionic). A dynamic import
 * maps the dma-buf on the first transfer after each invalidation, under the
 * reservation lock, which every chunk of a transfer holds: once an
 * invalidation has run, no DMA uses the old addresses.
 *
 * Errors: -EINVAL bad arguments or a range outside the registration;
 * -ENOENT unknown handle; -ENXIO the GPU memory was freed (the registration
 * was invalidated); -EACCES registering from a process other than the one
 * that opened the file; -EFAULT bad user pointers; -ETIMEDOUT the DMA engine
 * did not finish; -ENODEV the device is gone. gdrpeer's errors pass through
 * (REG_DMABUF: -EOPNOTSUPP an importer the dma-buf refuses, -ENXIO memory
 * freed under a revocable export).
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
/* Importers gdrpeer must refuse, unless the dma-buf is a persistent export: */
#define GDRNIC_DMABUF_NO_P2P		(1U << 2)	/* allow_peer2peer false (always refused) */
#define GDRNIC_DMABUF_NO_INVALIDATE	(1U << 3)	/* no invalidate_mappings op */
/* With KAPI: gdrpeer_dmabuf_export_flags(GDRPEER_DMABUF_PERSISTENT). */
#define GDRNIC_DMABUF_KAPI_PERSISTENT	(1U << 4)
#define GDRNIC_DMABUF_FLAGS		0x1f
/*
 * ib_umem_dmabuf_get_pinned(): dma_buf_dynamic_attach() with importer ops
 * that allow peer-to-peer and have no invalidate_mappings, dma_buf_pin(),
 * mapped at registration, never revoked. Only a persistent export takes it.
 */
#define GDRNIC_DMABUF_PINNED_NOREVOKE	(GDRNIC_DMABUF_PINNED | GDRNIC_DMABUF_NO_INVALIDATE)

struct gdrnic_dmabuf_args {
	__s32 fd;		/* in: a dma-buf (not with GDRNIC_DMABUF_KAPI) */
	__u32 flags;		/* in: GDRNIC_DMABUF_* */
	__u64 offset;		/* in: byte offset in the dma-buf; with KAPI: the GPU va */
	__u64 len;		/* in: bytes */
	__u32 handle;		/* out: the registration, > 0 */
	__u32 nents;		/* out: DMA segments of the first mapping */
};

/*
 * DMA_READ: the edu engine reads @len bytes at DMA address @addr, whatever
 * it is (needs CAP_SYS_RAWIO): no registration is looked up, and an IOMMU is
 * the only check. Tests read through the addresses gdrpeer handed out for
 * the edu function (DMA_MAP's, the kernel API's, a dma-buf's segments) to
 * see that they reach the GPU memory behind them; a read of an address whose
 * mapping was torn down is the planted DMA after revocation, which a
 * translating IOMMU blocks and logs as a DMA fault.
 */
#define GDRNIC_DMA_READ_MAX	4032	/* one DMA of the engine */

struct gdrnic_dma_read_args {
	__u64 addr;		/* in: a DMA address of the edu function */
	__u64 len;		/* in: bytes, 1 .. GDRNIC_DMA_READ_MAX */
	__u64 buf;		/* in: user buffer the bytes are copied to */
};

/*
 * REG_LOOP: @count registrations of [@va, @va + @len) of the caller's GPU
 * memory, every second one at @va + @stride instead, each unregistered at
 * once (gdrpeer_mr_pin() then gdrpeer_mr_unpin(), in the kernel: what a NIC
 * driver's registration costs in gdrpeer, without a system call or the NIC's
 * bookkeeping of its own). Stops at the first error, which it returns.
 * -EINVAL: @count 0 or above GDRNIC_REG_LOOP_MAX, or @pad not 0.
 */
#define GDRNIC_REG_LOOP_MAX	4096

struct gdrnic_reg_loop_args {
	__u64 va;		/* in: GPU virtual address, any alignment */
	__u64 len;		/* in: bytes */
	__u64 stride;		/* in: bytes from @va of every second one, or 0 */
	__u32 count;		/* in: 1 .. GDRNIC_REG_LOOP_MAX */
	__u32 pad;		/* in: 0 */
};

/*
 * DMABUF_SEGS: the DMA segments of a dma-buf import's mapping, as the
 * exporter's sg_table gives them (mapped again first if an invalidation
 * took the mapping away): the first @cap segments' addresses and lengths,
 * and in @nents how many there are. -EINVAL: the handle is not a dma-buf
 * import; -ENXIO: a pinned import was revoked.
 */
struct gdrnic_segs_args {
	__u32 handle;		/* in: a REG_DMABUF registration */
	__u32 cap;		/* in: entries in each array */
	__u64 addrs;		/* in: user array for the DMA addresses, or 0 */
	__u64 lens;		/* in: user array for the lengths in bytes, or 0 */
	__u32 nents;		/* out: segments of the mapping */
	__u32 pad;		/* in: 0 */
};

/*
 * FUZZ: the module itself makes @ops random calls of gdrpeer's kernel API
 * (include/gdrpeer-kapi.h), seeded by @seed, and checks each outcome against
 * Documentation/user/kernel-api.rst: contexts created and destroyed (in the
 * caller and from kernel threads), pins of windows, of ranges running past
 * an allocation's end, of bad lengths, of memory that is not GPU memory and
 * with NULL arguments, unpins (during and after an invalidate callback),
 * dma-buf exports and their puts, and calls on the file's context, which
 * from a process other than the file's opener must fail with -EACCES. An
 * outcome the documentation does not give for the call is a failure: counted
 * in @failures and logged with the op and the errno. Everything the call
 * made is released before it returns (a fatal signal ends it early, with
 * -EINTR).
 *
 * @ranges are whole GPU allocations of the file's opener, 64 KiB aligned;
 * those without GDRNIC_FUZZ_STABLE may be freed during the call, and what
 * takes their place must not cross their ends (allocations of one size do
 * not). From another process they are memory that is not the caller's.
 */
#define GDRNIC_FUZZ_RANGES	8
#define GDRNIC_FUZZ_MAX_OPS	(1U << 24)

/* gdrnic_fuzz_range.flags */
#define GDRNIC_FUZZ_STABLE		(1U << 0)	/* not freed during the call */

/* gdrnic_fuzz_args.flags */
#define GDRNIC_FUZZ_FAULTS		(1U << 0)	/* nvsim may fail its calls with ENOMEM */
#define GDRNIC_FUZZ_SLOW_CALLBACK	(1U << 1)	/* callbacks sleep 1-8 ms */
#define GDRNIC_FUZZ_FLAGS		0x3

/* The op kinds: the first index of gdrnic_fuzz_args.counts. */
enum {
	GDRNIC_FUZZ_CTX_CREATE,		/* gdrpeer_ctx_create() */
	GDRNIC_FUZZ_CTX_DESTROY,	/* gdrpeer_ctx_destroy(), registrations live or not */
	GDRNIC_FUZZ_PIN,		/* a window of a stable range */
	GDRNIC_FUZZ_PIN_CHURNED,	/* a window of a range freed meanwhile */
	GDRNIC_FUZZ_PIN_PARTIAL,	/* from inside a range to past its end */
	GDRNIC_FUZZ_PIN_BAD_LENGTH,	/* 0, too long, va + len or its rounded end wrapping */
	GDRNIC_FUZZ_PIN_NOT_GPU,	/* low, host and kernel addresses */
	GDRNIC_FUZZ_PIN_NULL,		/* NULL ctx, peer, info or invalidate */
	GDRNIC_FUZZ_PIN_FOREIGN,	/* the file's context from another process */
	GDRNIC_FUZZ_UNPIN,		/* no callback seen */
	GDRNIC_FUZZ_UNPIN_DURING_CALLBACK,	/* its invalidate callback running */
	GDRNIC_FUZZ_UNPIN_AFTER_CALLBACK,	/* invalidated */
	GDRNIC_FUZZ_EXPORT,		/* gdrpeer_dmabuf_export() of a window */
	GDRNIC_FUZZ_EXPORT_BAD,		/* of a partial, bad-length or not-GPU range */
	GDRNIC_FUZZ_EXPORT_NULL,	/* NULL ctx or offset */
	GDRNIC_FUZZ_EXPORT_FOREIGN,	/* the file's context from another process */
	GDRNIC_FUZZ_DMABUF_PUT,		/* dma_buf_put() of an export */
	GDRNIC_FUZZ_KTHREAD_PIN,	/* a kernel thread pinning with the caller's context */
	GDRNIC_FUZZ_KTHREAD_EXPORT,	/* and exporting */
	GDRNIC_FUZZ_KTHREAD_DESTROY,	/* destroying it: its pages are left to the callback */
	GDRNIC_FUZZ_KTHREAD_OWN_CTX,	/* pinning with a context of its own: no GPU memory */
	GDRNIC_FUZZ_CALLBACK,		/* invalidate callbacks (outcome OK) */
	GDRNIC_FUZZ_NR_OPS
};

#define GDRNIC_FUZZ_OPS		24	/* room for GDRNIC_FUZZ_NR_OPS */

/* The outcomes: the second index of gdrnic_fuzz_args.counts. */
enum {
	GDRNIC_FUZZ_OK,
	GDRNIC_FUZZ_EINVAL,
	GDRNIC_FUZZ_EACCES,
	GDRNIC_FUZZ_ENOMEM,
	GDRNIC_FUZZ_ENXIO,
	GDRNIC_FUZZ_EOPNOTSUPP,
	GDRNIC_FUZZ_EOTHER,		/* any other errno: never documented */
	GDRNIC_FUZZ_NR_OUTCOMES
};

#define GDRNIC_FUZZ_OUTCOMES	8	/* room for GDRNIC_FUZZ_NR_OUTCOMES */

struct gdrnic_fuzz_range {
	__u64 va;		/* in: an allocation's start, 64 KiB aligned */
	__u64 len;		/* in: its length, 64 KiB multiple */
	__u32 flags;		/* in: GDRNIC_FUZZ_STABLE */
	__u32 pad;		/* in: 0 */
};

struct gdrnic_fuzz_args {
	__u64 seed;		/* in */
	__u32 ops;		/* in: calls, 1 .. GDRNIC_FUZZ_MAX_OPS */
	__u32 flags;		/* in: GDRNIC_FUZZ_* */
	__u32 nranges;		/* in: 1 .. GDRNIC_FUZZ_RANGES */
	__u32 failures;		/* out: outcomes the documentation does not allow */
	struct gdrnic_fuzz_range ranges[GDRNIC_FUZZ_RANGES];	/* in */
	__u32 first_failure_op;	/* out: the op kind of the first failure */
	__s32 first_failure_errno;	/* out: and what it got */
	__u64 counts[GDRNIC_FUZZ_OPS][GDRNIC_FUZZ_OUTCOMES];	/* out: calls made */
};

#define GDRNIC_IOCTL_REG	_IOWR(GDRNIC_IOCTL_MAGIC, 1, struct gdrnic_reg_args)
#define GDRNIC_IOCTL_DEREG	_IOW(GDRNIC_IOCTL_MAGIC, 2, __u32)
#define GDRNIC_IOCTL_SEND	_IOW(GDRNIC_IOCTL_MAGIC, 3, struct gdrnic_xfer_args)
#define GDRNIC_IOCTL_RECV	_IOW(GDRNIC_IOCTL_MAGIC, 4, struct gdrnic_xfer_args)
#define GDRNIC_IOCTL_REG_DMABUF	_IOWR(GDRNIC_IOCTL_MAGIC, 5, struct gdrnic_dmabuf_args)
#define GDRNIC_IOCTL_FUZZ	_IOWR(GDRNIC_IOCTL_MAGIC, 6, struct gdrnic_fuzz_args)
#define GDRNIC_IOCTL_DMA_READ	_IOW(GDRNIC_IOCTL_MAGIC, 7, struct gdrnic_dma_read_args)
#define GDRNIC_IOCTL_DMABUF_SEGS _IOWR(GDRNIC_IOCTL_MAGIC, 8, struct gdrnic_segs_args)
#define GDRNIC_IOCTL_REG_LOOP	_IOW(GDRNIC_IOCTL_MAGIC, 9, struct gdrnic_reg_loop_args)
/*
 * CTX_DESTROY: ends the file's gdrpeer context (gdrpeer_ctx_destroy()) and
 * leaves its registrations live, as a driver whose teardown ends a context
 * before its memory registrations: DEREG, SEND and RECV still work on them;
 * REG, REG_LOOP, FUZZ and a KAPI REG_DMABUF fail with -ENODEV from then on,
 * as does a second CTX_DESTROY.
 */
#define GDRNIC_IOCTL_CTX_DESTROY _IO(GDRNIC_IOCTL_MAGIC, 10)

#endif /* _UAPI_GDRNIC_H_ */
