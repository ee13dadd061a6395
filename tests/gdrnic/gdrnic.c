// SPDX-License-Identifier: GPL-2.0
/*
 * gdrnic: a sample NIC driver on gdrpeer's kernel API (include/gdrpeer-kapi.h).
 *
 * It binds QEMU's edu device, whose DMA engine stands in for a NIC's, and
 * moves bytes between (simulated) GPU memory and its own host buffer by
 * peer-to-peer DMA: the GPU side of every transfer is the edu device reading
 * or writing the GPU BAR at the DMA addresses gdrpeer returned for it.
 * User space drives it through /dev/gdrnic (gdrnic_uapi.h): register GPU
 * memory, "send" (GPU -> NIC) and "receive" (NIC -> GPU); tests also read
 * through any DMA address (DMA_READ) and see a dma-buf mapping's segments.
 *
 * Each open file is one gdrpeer context, created in the opening process,
 * like an RDMA verbs context; registrations are gdrpeer_mr's, or dma-buf
 * imports (REG_DMABUF) made as drivers/infiniband/core/umem_dmabuf.c makes
 * them for ibv_reg_dmabuf_mr(): a dynamic attachment with peer2peer and an
 * invalidate op, a pinned one (dma_buf_pin) with the same op, or a pinned
 * one without it (ib_umem_dmabuf_get_pinned(), GDRNIC_DMABUF_PINNED_NOREVOKE),
 * which only a persistent export accepts.
 *
 * Locks, in the order they are taken:
 *
 * 0. gdrnic_dev.remove_sem (rw_semaphore): read by every open, ioctl and
 *    release, written by the device's removal, which so waits for them, then ends
 *    every open file's registrations and gdrpeer context, as an RDMA driver's
 *    removal ends its verbs contexts' memory registrations: nothing stays
 *    DMA-mapped for the device once it is unbound. Then gdrnic_dev.files_lock
 *    (mutex), the list of open files, which their release also takes.
 * 1. gdrnic_file.lock (mutex): serialises the file's registrations (REG).
 *    Held around gdrpeer_mr_pin(), so the invalidate callback never takes
 *    it. DEREG does not take it: the xarray's own lock hands a handle's
 *    registration out once.
 * 2. gdrnic_dev.engine_lock (mutex): the DMA engine and its buffers, held for
 *    one chunk of a transfer (at most two edu DMAs), which other chunks queue
 *    for. Never taken by an invalidation: one registration's invalidation
 *    must not wait for every chunk of the device's queue.
 * 3. gdrnic_mr.dma_lock (mutex), after lock 2: a kernel-API registration's
 *    DMA, held by its chunk around the dead check and the DMA. The
 *    invalidate callback takes it alone: once it has, no DMA of the
 *    registration is in flight, and the dead flag it sets keeps any from
 *    starting; it waits for that registration's one chunk in flight at most.
 *
 * A dma-buf import's reservation lock comes after lock 2: each chunk of a
 * transfer takes the engine, then the reservation, around the mapping and
 * the DMA, and the import's invalidate op, which the exporter calls with the
 * reservation held, unmaps there. So once an invalidation has returned, no
 * DMA uses the old addresses, and no chunk holds the reservation while it
 * queues for the engine (the exporter's revocation would wait for the queue).
 *
 * The invalidate callback runs under the NVIDIA driver's global lock: it
 * waits for at most one chunk in flight, its registration's, and takes
 * nothing else.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/debugfs.h>
#include <linux/delay.h>
#include <linux/dma-buf.h>
#include <linux/dma-mapping.h>
#include <linux/dma-resv.h>
#include <linux/iopoll.h>
#include <linux/kref.h>
#include <linux/kthread.h>
#include <linux/miscdevice.h>
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/overflow.h>
#include <linux/pci.h>
#include <linux/pid.h>
#include <linux/prandom.h>
#include <linux/random.h>
#include <linux/rwsem.h>
#include <linux/sizes.h>
#include <linux/slab.h>
#include <linux/uaccess.h>
#include <linux/xarray.h>

#include <gdrpeer-kapi.h>
#include "gdrnic_uapi.h"

/* QEMU's edu device (docs/specs/edu.rst in QEMU). */
#define EDU_VENDOR		0x1234
#define EDU_DEVICE		0x11e8
#define EDU_ID			0x00
#define EDU_ID_MAGIC		0xed
#define EDU_DMA_SRC		0x80
#define EDU_DMA_DST		0x88
#define EDU_DMA_COUNT		0x90
#define EDU_DMA_CMD		0x98
#define EDU_DMA_RUN		0x1
#define EDU_DMA_TO_PCI		0x2	/* edu buffer -> bus; else bus -> edu buffer */
#define EDU_BUF			0x40000	/* the engine's 4 KiB buffer, in edu's space */
/* A DMA may not reach the end of the 4 KiB buffer (QEMU 7.2 aborts). */
#define EDU_DMA_MAX		4032
#define EDU_DMA_TIMEOUT_US	(2 * USEC_PER_SEC)

struct gdrnic_dev {
	struct kref ref;
	struct pci_dev *pdev;
	void __iomem *mmio;
	/* The NIC's own host buffer, one chunk: the far end of every transfer. */
	void *host_buf;
	dma_addr_t host_dma;
	struct mutex engine_lock;	/* lock 2 */
	bool gone;			/* written under engine_lock: unbound */
	struct rw_semaphore remove_sem;	/* lock 0 */
	bool removed;			/* under remove_sem: files emptied */
	struct mutex files_lock;	/* after lock 0: files */
	struct list_head files;		/* gdrnic_file.node */
	struct miscdevice misc;
};

struct gdrnic_file {
	struct gdrnic_dev *nic;
	struct list_head node;		/* in nic->files, under its files_lock */
	struct gdrpeer_ctx *ctx;	/* NULL once the device was removed, or CTX_DESTROY */
	struct pid *owner;		/* the opener's thread group: ctx's process */
	struct mutex lock;		/* lock 1: serialises REG */
	/*
	 * Handle - 1 -> gdrnic_mr, lookups under its xa_lock. Indexed from 0
	 * (handles from 1, as the uAPI says): a file with one registration keeps
	 * it in the xarray's head, so REG and DEREG allocate and RCU-free no node.
	 */
	struct xarray mrs;
	/* A registration's memory kept for the next (gdrnic_mr_alloc), or NULL. */
	struct gdrnic_mr *spare;
	/*
	 * The device REG registers for: the NIC's own, or, with the knob
	 * reg_peer set at open, another function of its bus, held until the
	 * file's release (a driver of a multi-function NIC registering for its
	 * other functions; REG only: no transfer uses the addresses).
	 */
	struct pci_dev *peer;
};

struct gdrnic_mr {
	struct kref ref;		/* the file's, and one per transfer using it */
	struct gdrnic_file *file;	/* outlives the registration */
	struct gdrnic_dev *nic;
	struct gdrpeer_mr *mr;
	struct gdrpeer_mr_info info;
	u64 va, len;
	struct mutex dma_lock;		/* lock 3: a kernel-API registration's DMA */
	bool dead;			/* under dma_lock: invalidated */
	/* A dma-buf import instead of @mr; the rest under its reservation lock. */
	struct dma_buf_attachment *attach;
	struct sg_table *sgt;		/* the mapping, until invalidated */
	bool pinned;			/* dma_buf_pin()ned */
	bool revoked;			/* a pinned import was invalidated, or released */
};

/* The one bound device; a second edu is not taken. */
static DEFINE_MUTEX(gdrnic_bind_lock);
static struct gdrnic_dev *gdrnic_bound;

static struct {
	atomic64_t registrations;	/* live */
	atomic64_t invalidations;
	atomic64_t transfers;
	atomic64_t failed_transfers;
	atomic64_t gpu_dma_bytes;	/* moved between the GPU BAR and edu */
	atomic64_t dma_ops;
	atomic64_t dmabuf_imports;	/* live */
	atomic64_t dmabuf_maps;		/* dma_buf_map_attachment() calls that succeeded */
	atomic64_t dmabuf_invalidations;
	atomic64_t chunk_delays;	/* chunks that began chunk_delay_ms, the engine held */
} gdrnic_stats;

/*
 * Test knobs: extra milliseconds the invalidate callback takes; whether it
 * takes the file's lock, the AB-BA that lockdep must report; whether the
 * device's removal leaves the open files' registrations and contexts to
 * their close, as a driver with that bug would; the function (devfn + 1, 0:
 * the NIC itself) on the NIC's bus that files opened from now on register
 * for.
 */
static u32 gdrnic_invalidate_delay_ms;
static bool gdrnic_invalidate_takes_file_lock;
static bool gdrnic_remove_leaves_files;
static u32 gdrnic_reg_peer;
static struct dentry *gdrnic_dir;

static void gdrnic_dev_release(struct kref *ref)
{
	kfree(container_of(ref, struct gdrnic_dev, ref));
}

/* One edu DMA of @len bytes, with the engine lock held. */
static int edu_dma(struct gdrnic_dev *nic, u64 src, u64 dst, u32 len, bool to_pci)
{
	u32 cmd;
	int ret;

	lockdep_assert_held(&nic->engine_lock);
	writeq(src, nic->mmio + EDU_DMA_SRC);
	writeq(dst, nic->mmio + EDU_DMA_DST);
	writeq(len, nic->mmio + EDU_DMA_COUNT);
	writeq(EDU_DMA_RUN | (to_pci ? EDU_DMA_TO_PCI : 0), nic->mmio + EDU_DMA_CMD);
	ret = readl_poll_timeout(nic->mmio + EDU_DMA_CMD, cmd, !(cmd & EDU_DMA_RUN),
				 1000, EDU_DMA_TIMEOUT_US);
	if (ret) {
		/* The engine may still run: take the device out of service. */
		pci_err(nic->pdev, "DMA of %u bytes did not finish\n", len);
		WRITE_ONCE(nic->gone, true);
		return ret;
	}
	atomic64_inc(&gdrnic_stats.dma_ops);
	return 0;
}

/*
 * Whether the device was unbound (or its engine failed), for a new
 * registration to refuse: read without engine_lock, as a registration that
 * passes may see the device go right after anyway. Transfers read the flag
 * under the lock, around the DMA.
 */
static bool gdrnic_gone(struct gdrnic_dev *nic)
{
	return READ_ONCE(nic->gone);
}

/* Called by gdrpeer when the NVIDIA driver frees the registered memory. */
static void gdrnic_invalidate(void *data)
{
	struct gdrnic_mr *m = data;

	if (gdrnic_invalidate_delay_ms)
		msleep(gdrnic_invalidate_delay_ms);
	if (gdrnic_invalidate_takes_file_lock) {
		/* Wrong: REG holds this lock around gdrpeer_mr_pin(). */
		mutex_lock(&m->file->lock);
		mutex_unlock(&m->file->lock);
	}
	/* Waits for its chunk in flight, if any; none starts after. */
	mutex_lock(&m->dma_lock);
	m->dead = true;
	mutex_unlock(&m->dma_lock);
	atomic64_inc(&gdrnic_stats.invalidations);
}

/*
 * A dma-buf import's invalidate op, called by the exporter with the
 * reservation lock held: no chunk is in flight (each holds that lock), and
 * the mapping is given back before returning. A dynamic import maps again on
 * its next transfer; a pinned one takes the invalidation as a revocation, as
 * ib_umem_dmabuf's revocable pinned imports do.
 */
static void gdrnic_dmabuf_invalidate(struct dma_buf_attachment *attach)
{
	struct gdrnic_mr *m = attach->importer_priv;

	dma_resv_assert_held(attach->dmabuf->resv);
	if (gdrnic_invalidate_delay_ms)
		msleep(gdrnic_invalidate_delay_ms);
	if (m->sgt) {
		dma_buf_unmap_attachment(attach, m->sgt, DMA_BIDIRECTIONAL);
		m->sgt = NULL;
	}
	if (m->pinned) {
		dma_buf_unpin(attach);
		m->pinned = false;
		m->revoked = true;
	}
	atomic64_inc(&gdrnic_stats.dmabuf_invalidations);
}

static const struct dma_buf_attach_ops gdrnic_dmabuf_ops = {
	.allow_peer2peer = true,
	.invalidate_mappings = gdrnic_dmabuf_invalidate,
};

/* Importers an exporter of peer memory without a revoke path must refuse. */
static const struct dma_buf_attach_ops gdrnic_dmabuf_no_p2p_ops = {
	.allow_peer2peer = false,
	.invalidate_mappings = gdrnic_dmabuf_invalidate,
};

/*
 * Without an invalidate op: a pinned import with these ops is
 * ib_umem_dmabuf_get_pinned()'s (ib_umem_dmabuf_attach_pinned_ops), which
 * gdrpeer refuses unless the dma-buf is a persistent export.
 */
static const struct dma_buf_attach_ops gdrnic_dmabuf_no_invalidate_ops = {
	.allow_peer2peer = true,
};

/* Maps a dma-buf import if it is not mapped, as ib_umem_dmabuf_map_pages(). */
static int gdrnic_dmabuf_map(struct gdrnic_mr *m)
{
	struct dma_resv *resv = m->attach->dmabuf->resv;
	struct sg_table *sgt;
	long ret;

	dma_resv_assert_held(resv);
	if (m->revoked)
		return -ENXIO;
	if (!m->sgt) {
		sgt = dma_buf_map_attachment(m->attach, DMA_BIDIRECTIONAL);
		if (IS_ERR(sgt))
			return PTR_ERR(sgt);
		m->sgt = sgt;
		atomic64_inc(&gdrnic_stats.dmabuf_maps);
	}
	/* The exporter's moves, had it any, end before the memory is used. */
	ret = dma_resv_wait_timeout(resv, DMA_RESV_USAGE_KERNEL, false, MAX_SCHEDULE_TIMEOUT);
	if (ret < 0)
		return ret;
	return ret ? 0 : -ETIMEDOUT;
}

/* The DMA address of [@pos, @pos + @n) of the dma-buf, which one segment must hold. */
static int gdrnic_dmabuf_addr(struct gdrnic_mr *m, u64 pos, u32 n, u64 *dma)
{
	struct scatterlist *sg;
	u64 cur = 0;
	unsigned int i;

	for_each_sgtable_dma_sg(m->sgt, sg, i) {
		u64 len = sg_dma_len(sg);

		if (pos >= cur && pos + n <= cur + len) {
			*dma = sg_dma_address(sg) + (pos - cur);
			return 0;
		}
		cur += len;
	}
	return -EINVAL;
}

/*
 * A registration's memory, zeroed: the file's spare, or a new allocation.
 * The spare is exchanged atomically: no lock is taken for it.
 */
static struct gdrnic_mr *gdrnic_mr_alloc(struct gdrnic_file *f)
{
	struct gdrnic_mr *m = xchg(&f->spare, NULL);

	if (m)
		memset(m, 0, sizeof(*m));
	else
		m = kzalloc_obj(*m, GFP_KERNEL);
	if (m)
		mutex_init(&m->dma_lock);
	return m;
}

/* Frees @m of @f, keeping it as the file's spare (freeing the one it replaces). */
static void gdrnic_mr_free(struct gdrnic_file *f, struct gdrnic_mr *m)
{
	kfree(xchg(&f->spare, m));
}

static void gdrnic_mr_release(struct kref *ref)
{
	struct gdrnic_mr *m = container_of(ref, struct gdrnic_mr, ref);

	/* The device no longer uses the addresses: no transfer holds a reference. */
	if (m->attach) {
		struct dma_buf *dmabuf = m->attach->dmabuf;

		dma_resv_lock(dmabuf->resv, NULL);
		if (m->sgt)
			dma_buf_unmap_attachment(m->attach, m->sgt, DMA_BIDIRECTIONAL);
		m->sgt = NULL;
		if (m->pinned)
			dma_buf_unpin(m->attach);
		m->pinned = false;
		m->revoked = true;
		dma_resv_unlock(dmabuf->resv);
		dma_buf_detach(dmabuf, m->attach);
		dma_buf_put(dmabuf);
		atomic64_dec(&gdrnic_stats.dmabuf_imports);
	} else {
		gdrpeer_mr_unpin(m->mr);
	}
	atomic64_dec(&gdrnic_stats.registrations);
	gdrnic_mr_free(m->file, m);
}

static void gdrnic_mr_put(struct gdrnic_mr *m)
{
	kref_put(&m->ref, gdrnic_mr_release);
}

/* Files a registration, giving it its handle (its index in f->mrs, plus 1). */
static int gdrnic_mr_add(struct gdrnic_file *f, struct gdrnic_mr *m, u32 *handle)
{
	u32 index;
	int ret;

	ret = xa_alloc(&f->mrs, &index, m, XA_LIMIT(0, INT_MAX - 1), GFP_KERNEL);
	if (!ret)
		*handle = index + 1;
	return ret;
}

/* Takes the registration of @handle out of the file; NULL if there is none. */
static struct gdrnic_mr *gdrnic_mr_take(struct gdrnic_file *f, u32 handle)
{
	return handle ? xa_erase(&f->mrs, handle - 1) : NULL;
}

/*
 * Files @m, whose reference the caller gives up, writing its handle to
 * *@handle, then copies @args (@size bytes, *@handle in them) to @uarg. Once
 * filed, a DEREG of the handle (guessed) may free @m: it is not read again.
 */
static int gdrnic_mr_publish(struct gdrnic_file *f, struct gdrnic_mr *m, u32 *handle,
			     void __user *uarg, const void *args, size_t size)
{
	int ret = gdrnic_mr_add(f, m, handle);

	if (ret) {
		gdrnic_mr_put(m);
		return ret;
	}
	if (copy_to_user(uarg, args, size)) {
		m = gdrnic_mr_take(f, *handle);
		if (m)
			gdrnic_mr_put(m);
		return -EFAULT;
	}
	return 0;
}

static struct gdrnic_mr *gdrnic_mr_get(struct gdrnic_file *f, u32 handle)
{
	struct gdrnic_mr *m;

	if (!handle)
		return NULL;
	xa_lock(&f->mrs);
	m = xa_load(&f->mrs, handle - 1);
	if (m)
		kref_get(&m->ref);
	xa_unlock(&f->mrs);
	return m;
}

static long gdrnic_reg(struct gdrnic_file *f, void __user *uarg)
{
	struct gdrnic_reg_args a;
	struct gdrnic_mr *m;
	int ret;
	u32 n;

	if (copy_from_user(&a, uarg, sizeof(a)))
		return -EFAULT;
	m = gdrnic_mr_alloc(f);
	if (!m)
		return -ENOMEM;
	kref_init(&m->ref);
	m->file = f;
	m->nic = f->nic;
	m->va = a.va;
	m->len = a.len;

	mutex_lock(&f->lock);
	/* Unbound: the device may no longer be given addresses. */
	if (gdrnic_gone(f->nic) || !f->ctx) {
		mutex_unlock(&f->lock);
		gdrnic_mr_free(f, m);
		return -ENODEV;
	}
	m->mr = gdrpeer_mr_pin(f->ctx, f->peer, a.va, a.len, gdrnic_invalidate, m, &m->info);
	if (IS_ERR(m->mr)) {
		ret = PTR_ERR(m->mr);
		mutex_unlock(&f->lock);
		gdrnic_mr_free(f, m);
		return ret;
	}
	mutex_unlock(&f->lock);
	atomic64_inc(&gdrnic_stats.registrations);

	/* Read and copied out before the registration is filed (gdrnic_mr_publish). */
	a.aligned_va = m->info.aligned_va;
	a.offset = m->info.offset;
	a.page_count = m->info.page_count;
	a.page_size = m->info.page_size;
	n = min(a.addrs_cap, m->info.page_count);
	if (a.addrs && copy_to_user(u64_to_user_ptr(a.addrs), m->info.dma_addrs,
				    n * sizeof(u64))) {
		gdrnic_mr_put(m);
		return -EFAULT;
	}
	return gdrnic_mr_publish(f, m, &a.handle, uarg, &a, sizeof(a));
}

/* REG_LOOP's callback: nothing uses the addresses after the unpin. */
static void gdrnic_loop_invalidate(void *data)
{
	atomic64_inc(&gdrnic_stats.invalidations);
}

/*
 * REG_LOOP: registrations of the same memory made and dropped in the kernel,
 * under the file's lock as REG makes them, with nothing filed.
 */
static long gdrnic_reg_loop(struct gdrnic_file *f, void __user *uarg)
{
	struct gdrnic_reg_loop_args a;
	struct gdrpeer_mr_info info;
	struct gdrpeer_mr *mr;
	int ret = 0;
	u32 i;

	if (copy_from_user(&a, uarg, sizeof(a)))
		return -EFAULT;
	if (a.pad || !a.count || a.count > GDRNIC_REG_LOOP_MAX)
		return -EINVAL;
	mutex_lock(&f->lock);
	if (gdrnic_gone(f->nic) || !f->ctx)
		ret = -ENODEV;
	for (i = 0; !ret && i < a.count; i++) {
		mr = gdrpeer_mr_pin(f->ctx, f->nic->pdev, a.va + (i & 1) * a.stride,
				    a.len, gdrnic_loop_invalidate, NULL, &info);
		if (IS_ERR(mr))
			ret = PTR_ERR(mr);
		else
			gdrpeer_mr_unpin(mr);
	}
	mutex_unlock(&f->lock);
	return ret;
}

static long gdrnic_reg_dmabuf(struct gdrnic_file *f, void __user *uarg)
{
	const struct dma_buf_attach_ops *ops = &gdrnic_dmabuf_ops;
	struct gdrnic_dmabuf_args a;
	struct dma_buf *dmabuf;
	struct gdrnic_mr *m;
	u64 offset, end;
	int ret;

	if (copy_from_user(&a, uarg, sizeof(a)))
		return -EFAULT;
	if ((a.flags & ~GDRNIC_DMABUF_FLAGS) || !a.len)
		return -EINVAL;
	if ((a.flags & GDRNIC_DMABUF_KAPI_PERSISTENT) && !(a.flags & GDRNIC_DMABUF_KAPI))
		return -EINVAL;
	if (a.flags & GDRNIC_DMABUF_NO_P2P)
		ops = &gdrnic_dmabuf_no_p2p_ops;
	else if (a.flags & GDRNIC_DMABUF_NO_INVALIDATE)
		ops = &gdrnic_dmabuf_no_invalidate_ops;

	if (gdrnic_gone(f->nic))
		return -ENODEV;
	if (a.flags & GDRNIC_DMABUF_KAPI) {
		/* An in-kernel exporter's user: the va of this process, as REG. */
		u32 flags = a.flags & GDRNIC_DMABUF_KAPI_PERSISTENT ?
			    GDRPEER_DMABUF_PERSISTENT : 0;

		if (!f->ctx)
			return -ENODEV;
		dmabuf = gdrpeer_dmabuf_export_flags(f->ctx, a.offset, a.len, flags, &offset);
	} else {
		dmabuf = dma_buf_get(a.fd);
		offset = a.offset;
	}
	if (IS_ERR(dmabuf))
		return PTR_ERR(dmabuf);
	if (check_add_overflow(offset, a.len, &end) || end > dmabuf->size) {
		dma_buf_put(dmabuf);
		return -EINVAL;
	}
	m = gdrnic_mr_alloc(f);
	if (!m) {
		dma_buf_put(dmabuf);
		return -ENOMEM;
	}
	kref_init(&m->ref);
	m->file = f;
	m->nic = f->nic;
	m->len = a.len;
	m->info.offset = offset;
	m->info.page_size = SZ_64K;
	m->attach = dma_buf_dynamic_attach(dmabuf, &f->nic->pdev->dev, ops, m);
	if (IS_ERR(m->attach)) {
		ret = PTR_ERR(m->attach);
		dma_buf_put(dmabuf);
		gdrnic_mr_free(f, m);
		return ret;
	}
	atomic64_inc(&gdrnic_stats.registrations);
	atomic64_inc(&gdrnic_stats.dmabuf_imports);

	/* Mapped now, as the RDMA drivers map at registration. */
	ret = 0;
	dma_resv_lock(dmabuf->resv, NULL);
	if (a.flags & GDRNIC_DMABUF_PINNED) {
		ret = dma_buf_pin(m->attach);
		m->pinned = !ret;
	}
	if (!ret)
		ret = gdrnic_dmabuf_map(m);
	a.nents = m->sgt ? m->sgt->nents : 0;
	dma_resv_unlock(dmabuf->resv);
	if (ret) {
		gdrnic_mr_put(m);
		return ret;
	}
	return gdrnic_mr_publish(f, m, &a.handle, uarg, &a, sizeof(a));
}

static long gdrnic_dereg(struct gdrnic_file *f, u32 __user *uarg)
{
	struct gdrnic_mr *m;
	u32 handle;

	if (get_user(handle, uarg))
		return -EFAULT;
	/* The xarray's own lock suffices: the handle is taken out once. */
	m = gdrnic_mr_take(f, handle);
	if (!m)
		return -ENOENT;
	/* Unpinned now, or when the last transfer on it ends. */
	gdrnic_mr_put(m);
	return 0;
}

/*
 * Moves one chunk between the GPU (@gpu, a DMA address for edu) and @bounce,
 * through the engine's buffer and the NIC's host buffer.
 */
/* Slows each chunk down, the engine held (debugfs chunk_delay_ms): a queue. */
static u32 gdrnic_chunk_delay_ms;

/* A chunk's DMA, with the engine held, between GPU address @gpu and @bounce. */
static int gdrnic_chunk_dma(struct gdrnic_dev *nic, u64 gpu, void *bounce, u32 n, bool send)
{
	int ret;

	lockdep_assert_held(&nic->engine_lock);
	if (gdrnic_chunk_delay_ms) {
		atomic64_inc(&gdrnic_stats.chunk_delays);
		msleep(gdrnic_chunk_delay_ms);
	}
	if (nic->gone) {
		ret = -ENODEV;
	} else if (send) {
		/* GPU -> NIC: the edu device reads the GPU BAR. */
		ret = edu_dma(nic, gpu, EDU_BUF, n, false) ?:
		      edu_dma(nic, EDU_BUF, nic->host_dma, n, true);
		if (!ret)
			memcpy(bounce, nic->host_buf, n);
	} else {
		/* NIC -> GPU: the edu device writes the GPU BAR. */
		memcpy(nic->host_buf, bounce, n);
		ret = edu_dma(nic, nic->host_dma, EDU_BUF, n, false) ?:
		      edu_dma(nic, EDU_BUF, gpu, n, true);
	}
	if (!ret)
		atomic64_add(n, &gdrnic_stats.gpu_dma_bytes);
	return ret;
}

/* A chunk of a kernel-API registration, at GPU address @gpu. */
static int gdrnic_chunk(struct gdrnic_mr *m, u64 gpu, void *bounce, u32 n, bool send)
{
	int ret;

	mutex_lock(&m->nic->engine_lock);
	mutex_lock(&m->dma_lock);
	ret = m->dead ? -ENXIO : gdrnic_chunk_dma(m->nic, gpu, bounce, n, send);
	mutex_unlock(&m->dma_lock);
	mutex_unlock(&m->nic->engine_lock);
	return ret;
}

/*
 * A chunk of a dma-buf import at byte @pos of the dma-buf: the engine first,
 * then its reservation lock, held around the mapping and the DMA.
 */
static int gdrnic_dmabuf_chunk(struct gdrnic_mr *m, u64 pos, void *bounce, u32 n, bool send)
{
	struct dma_resv *resv = m->attach->dmabuf->resv;
	u64 gpu;
	int ret;

	mutex_lock(&m->nic->engine_lock);
	dma_resv_lock(resv, NULL);
	ret = gdrnic_dmabuf_map(m) ?: gdrnic_dmabuf_addr(m, pos, n, &gpu);
	if (!ret)
		ret = gdrnic_chunk_dma(m->nic, gpu, bounce, n, send);
	dma_resv_unlock(resv);
	mutex_unlock(&m->nic->engine_lock);
	return ret;
}

static long gdrnic_xfer(struct gdrnic_file *f, void __user *uarg, bool send)
{
	struct gdrnic_xfer_args a;
	struct gdrnic_mr *m;
	u8 __user *buf;
	void *bounce;
	u64 done, end;
	u32 page_size;
	int ret = 0;

	if (copy_from_user(&a, uarg, sizeof(a)))
		return -EFAULT;
	if (a.pad || !a.len || a.len > GDRNIC_XFER_MAX)
		return -EINVAL;
	m = gdrnic_mr_get(f, a.handle);
	if (!m)
		return -ENOENT;
	/*
	 * A registration made for another function (debugfs reg_peer) has that
	 * function's DMA addresses, not edu's: edu must not use them.
	 */
	if ((!m->attach && f->peer != f->nic->pdev) ||
	    check_add_overflow(a.offset, a.len, &end) || end > m->len) {
		ret = -EINVAL;
		goto out;
	}
	bounce = kmalloc(EDU_DMA_MAX, GFP_KERNEL);
	if (!bounce) {
		ret = -ENOMEM;
		goto out;
	}
	buf = u64_to_user_ptr(a.buf);
	page_size = m->info.page_size;
	for (done = 0; done < a.len && !ret;) {
		/* Position in the registration's pages; chunks stay inside one page. */
		u64 pos = m->info.offset + a.offset + done;
		u32 in_page = pos % page_size;
		u32 n = min3(a.len - done, (u64)EDU_DMA_MAX, (u64)(page_size - in_page));

		if (!send && copy_from_user(bounce, buf + done, n)) {
			ret = -EFAULT;
			break;
		}
		if (m->attach)
			ret = gdrnic_dmabuf_chunk(m, pos, bounce, n, send);
		else
			ret = gdrnic_chunk(m, m->info.dma_addrs[pos / page_size] + in_page,
					   bounce, n, send);
		if (!ret && send && copy_to_user(buf + done, bounce, n))
			ret = -EFAULT;
		done += n;
	}
	kfree(bounce);
out:
	atomic64_inc(ret ? &gdrnic_stats.failed_transfers : &gdrnic_stats.transfers);
	gdrnic_mr_put(m);
	return ret;
}

/*
 * DMA_READ: one DMA of the engine from any DMA address, then to the host
 * buffer. Only an IOMMU checks the address; without one a stale address
 * reads whatever the BAR holds there now.
 */
static long gdrnic_dma_read(struct gdrnic_file *f, void __user *uarg)
{
	struct gdrnic_dev *nic = f->nic;
	struct gdrnic_dma_read_args a;
	void *bounce;
	int ret;

	BUILD_BUG_ON(GDRNIC_DMA_READ_MAX > EDU_DMA_MAX);
	if (!capable(CAP_SYS_RAWIO))
		return -EPERM;
	if (copy_from_user(&a, uarg, sizeof(a)))
		return -EFAULT;
	if (!a.len || a.len > GDRNIC_DMA_READ_MAX)
		return -EINVAL;
	bounce = kmalloc(a.len, GFP_KERNEL);
	if (!bounce)
		return -ENOMEM;
	mutex_lock(&nic->engine_lock);
	if (nic->gone)
		ret = -ENODEV;
	else
		ret = edu_dma(nic, a.addr, EDU_BUF, a.len, false) ?:
		      edu_dma(nic, EDU_BUF, nic->host_dma, a.len, true);
	if (!ret)
		memcpy(bounce, nic->host_buf, a.len);
	mutex_unlock(&nic->engine_lock);
	if (!ret && copy_to_user(u64_to_user_ptr(a.buf), bounce, a.len))
		ret = -EFAULT;
	kfree(bounce);
	return ret;
}

/* DMABUF_SEGS: the segments of a dma-buf import's mapping, under its reservation lock. */
static long gdrnic_dmabuf_segs(struct gdrnic_file *f, void __user *uarg)
{
	struct gdrnic_segs_args a;
	u64 *addrs = NULL, *lens = NULL;
	struct scatterlist *sg;
	struct gdrnic_mr *m;
	unsigned int i;
	u32 n = 0;
	int ret;

	if (copy_from_user(&a, uarg, sizeof(a)))
		return -EFAULT;
	if (a.pad || a.cap > SZ_64K)
		return -EINVAL;
	m = gdrnic_mr_get(f, a.handle);
	if (!m)
		return -ENOENT;
	if (!m->attach) {
		ret = -EINVAL;
		goto out;
	}
	addrs = kcalloc(a.cap, sizeof(u64), GFP_KERNEL);
	lens = kcalloc(a.cap, sizeof(u64), GFP_KERNEL);
	if (a.cap && (!addrs || !lens)) {
		ret = -ENOMEM;
		goto out;
	}
	dma_resv_lock(m->attach->dmabuf->resv, NULL);
	ret = gdrnic_dmabuf_map(m);
	if (!ret) {
		for_each_sgtable_dma_sg(m->sgt, sg, i) {
			if (n < a.cap) {
				addrs[n] = sg_dma_address(sg);
				lens[n] = sg_dma_len(sg);
			}
			n++;
		}
	}
	dma_resv_unlock(m->attach->dmabuf->resv);
	if (ret)
		goto out;
	a.nents = n;
	n = min(n, a.cap);
	if ((a.addrs && copy_to_user(u64_to_user_ptr(a.addrs), addrs, n * sizeof(u64))) ||
	    (a.lens && copy_to_user(u64_to_user_ptr(a.lens), lens, n * sizeof(u64))) ||
	    copy_to_user(uarg, &a, sizeof(a)))
		ret = -EFAULT;
out:
	kfree(addrs);
	kfree(lens);
	gdrnic_mr_put(m);
	return ret;
}

/*
 * --- Kernel-API fuzzing (GDRNIC_IOCTL_FUZZ) ----------------------------------
 *
 * One call is one session: a fixed table of contexts, registrations and
 * dma-bufs, driven by a seeded generator, all released before the call
 * returns. The session's own contexts belong to the caller; the file's
 * context to the file's opener. Each outcome is checked against what
 * Documentation/user/kernel-api.rst allows for the call, as a mask of outcomes.
 */
#define FUZZ_CTXS	2			/* the session's own contexts */
#define FUZZ_FILE_CTX	FUZZ_CTXS		/* then the file's */
#define FUZZ_MRS	32
#define FUZZ_DMABUFS	4

#define O(x)		BIT(GDRNIC_FUZZ_##x)

enum { FUZZ_FREE, FUZZ_PINNING, FUZZ_LIVE };		/* gdrnic_fuzz_mr.state */
enum { CB_NONE, CB_RUNNING, CB_RETURNED };		/* gdrnic_fuzz_mr.cb */
/* Ranges: C_CHURNED is a window of a range that may be freed, if there is one. */
enum { C_WINDOW, C_PARTIAL, C_BAD_LENGTH, C_NOT_GPU, C_CHURNED };

static const char * const gdrnic_fuzz_names[GDRNIC_FUZZ_NR_OPS] = {
	"ctx_create", "ctx_destroy", "pin", "pin_churned", "pin_partial",
	"pin_bad_length", "pin_not_gpu", "pin_null", "pin_foreign", "unpin",
	"unpin_during_callback", "unpin_after_callback", "export", "export_bad",
	"export_null", "export_foreign", "dmabuf_put", "kthread_pin",
	"kthread_export", "kthread_destroy", "kthread_own_ctx", "callback",
};

struct gdrnic_fuzz;

/* A registration of the session, and its invalidate callback's data. */
struct gdrnic_fuzz_mr {
	struct gdrnic_fuzz *s;
	struct gdrpeer_mr *mr;
	struct gdrpeer_mr_info info;
	bool stable;			/* on memory not freed during the call */
	atomic_t state;			/* FUZZ_FREE, _PINNING (in the call), _LIVE */
	atomic_t cb;			/* CB_*: its callback */
	int cb_at_unpin;		/* cb when unpin returned */
};

struct gdrnic_fuzz {
	struct gdrnic_fuzz_args *a;
	struct pci_dev *peer;
	struct rnd_state rnd;
	bool mine;			/* the caller opened the file */
	u32 enomem;			/* O(ENOMEM) where nvsim may fail, else 0 */
	struct gdrpeer_ctx *ctx[FUZZ_CTXS + 1];
	struct gdrnic_fuzz_mr mrs[FUZZ_MRS];
	struct gdrnic_fuzz_mr kmr;	/* a kernel thread's pin, which must fail */
	struct dma_buf *dmabufs[FUZZ_DMABUFS];
	atomic64_t callbacks;
	atomic_t failures;
	spinlock_t lock;		/* the first failure; never held around gdrpeer_* */
	bool failed;
};

/* A call made from a kernel thread, the session's thread waiting for it. */
struct gdrnic_fuzz_kcall {
	struct gdrnic_fuzz *s;
	int op;
	struct gdrpeer_ctx *ctx;
	u64 va, len;
	int ret;
	struct completion done;
};

static void gdrnic_fuzz_fail(struct gdrnic_fuzz *s, int op, int err, const char *what)
{
	atomic_inc(&s->failures);
	spin_lock(&s->lock);
	if (!s->failed) {
		s->failed = true;
		s->a->first_failure_op = op;
		s->a->first_failure_errno = err;
	}
	spin_unlock(&s->lock);
	pr_err_ratelimited("fuzz: %s: %s (errno %d)\n", gdrnic_fuzz_names[op], what, err);
}

static int gdrnic_fuzz_outcome(int err)
{
	switch (err) {
	case 0:
		return GDRNIC_FUZZ_OK;
	case -EINVAL:
		return GDRNIC_FUZZ_EINVAL;
	case -EACCES:
		return GDRNIC_FUZZ_EACCES;
	case -ENOMEM:
		return GDRNIC_FUZZ_ENOMEM;
	case -ENXIO:
		return GDRNIC_FUZZ_ENXIO;
	case -EOPNOTSUPP:
		return GDRNIC_FUZZ_EOPNOTSUPP;
	default:
		return GDRNIC_FUZZ_EOTHER;
	}
}

/* Counts @err for @op, a failure unless its outcome is in @allowed. */
static void gdrnic_fuzz_check(struct gdrnic_fuzz *s, int op, int err, u32 allowed)
{
	int o = gdrnic_fuzz_outcome(err);

	s->a->counts[op][o]++;
	if (!(allowed & BIT(o)))
		gdrnic_fuzz_fail(s, op, err, "an outcome the documentation does not give here");
}

static u32 gdrnic_fuzz_below(struct gdrnic_fuzz *s, u32 n)
{
	return n ? prandom_u32_state(&s->rnd) % n : 0;
}

/*
 * The invalidate callback: at most once per registration, never after its
 * unpin returned, never for memory that stays allocated; it may sleep.
 */
static void gdrnic_fuzz_invalidate(void *data)
{
	struct gdrnic_fuzz_mr *m = data;
	struct gdrnic_fuzz *s = m->s;

	atomic64_inc(&s->callbacks);
	if (atomic_read(&m->state) == FUZZ_FREE)
		gdrnic_fuzz_fail(s, GDRNIC_FUZZ_CALLBACK, 0, "called after its unpin returned");
	if (m->stable)
		gdrnic_fuzz_fail(s, GDRNIC_FUZZ_CALLBACK, 0, "called for memory not freed");
	if (atomic_cmpxchg(&m->cb, CB_NONE, CB_RUNNING) != CB_NONE) {
		gdrnic_fuzz_fail(s, GDRNIC_FUZZ_CALLBACK, 0, "called twice");
		return;
	}
	if (s->a->flags & GDRNIC_FUZZ_SLOW_CALLBACK)
		msleep(1 + get_random_u32_below(4));
	atomic_set(&m->cb, CB_RETURNED);
}

/*
 * A range of class @c in *@va and *@len, and the outcomes a pin or export of
 * it with a context of the caller may have. *@stable: inside memory that
 * stays allocated.
 */
static u32 gdrnic_fuzz_range(struct gdrnic_fuzz *s, int c, u64 *va, u64 *len, bool *stable)
{
	const struct gdrnic_fuzz_range *r = &s->a->ranges[gdrnic_fuzz_below(s, s->a->nranges)];
	u64 start;
	u32 i;

	/* Windows to be left to the callback are of memory that goes. */
	for (i = 0; c == C_CHURNED && i < s->a->nranges && (r->flags & GDRNIC_FUZZ_STABLE); i++)
		r = &s->a->ranges[i];
	if (c == C_CHURNED)
		c = C_WINDOW;
	start = gdrnic_fuzz_below(s, r->len);

	*stable = false;
	switch (c) {
	case C_WINDOW:
		*stable = r->flags & GDRNIC_FUZZ_STABLE;
		if (!gdrnic_fuzz_below(s, 8)) {
			*va = r->va;
			*len = r->len;
		} else {
			*va = r->va + start;
			*len = 1 + gdrnic_fuzz_below(s, min_t(u64, r->len - start, 3 * SZ_64K));
		}
		/* Another process's memory is not the caller's GPU memory. */
		if (!s->mine)
			return O(EINVAL) | s->enomem;
		/* Freed before the call, or during it. */
		return *stable ? O(OK) | s->enomem : O(OK) | O(EINVAL) | O(ENXIO) | s->enomem;
	case C_PARTIAL:
		/* Past the allocation's end: not GPU memory of one allocation. */
		*va = r->va + start;
		*len = r->len - start + 1 + gdrnic_fuzz_below(s, 2 * SZ_64K);
		return O(EINVAL) | s->enomem;
	case C_BAD_LENGTH:
		/* Refused before any NVIDIA call. */
		*va = r->va + start;
		switch (gdrnic_fuzz_below(s, 4)) {
		case 0:
			*len = 0;
			break;
		case 1:		/* longer than any max_pin_bytes */
			*len = BIT_ULL(63) + gdrnic_fuzz_below(s, SZ_64K);
			break;
		case 2:		/* va + len wraps */
			*len = U64_MAX - *va + 1 + gdrnic_fuzz_below(s, SZ_64K);
			break;
		default:	/* va + len fits, rounded up to 64 KiB it wraps */
			*va = U64_MAX - SZ_64K + 2 + gdrnic_fuzz_below(s, SZ_32K);
			*len = 1 + gdrnic_fuzz_below(s, (u32)(U64_MAX - *va));
			break;
		}
		return O(EINVAL);
	default:
		switch (gdrnic_fuzz_below(s, 3)) {
		case 0:		/* below nvsim's GPU addresses */
			*va = SZ_64K + gdrnic_fuzz_below(s, SZ_1G);
			break;
		case 1:		/* where user space keeps host memory */
			*va = 0x7f0000000000ULL + gdrnic_fuzz_below(s, SZ_1G);
			break;
		default:	/* a kernel address */
			*va = 0xffff888000000000ULL + gdrnic_fuzz_below(s, SZ_1G);
			break;
		}
		*len = 1 + gdrnic_fuzz_below(s, 3 * SZ_64K);
		return O(EINVAL) | s->enomem;
	}
}

/* A context for a call: a live one of the session's, or the file's. */
static int gdrnic_fuzz_pick_ctx(struct gdrnic_fuzz *s)
{
	int i = gdrnic_fuzz_below(s, FUZZ_CTXS + 1);

	while (!s->ctx[i])
		i = (i + 1) % (FUZZ_CTXS + 1);
	return i;
}

/* A live context of the session's own, or -1. */
static int gdrnic_fuzz_pick_own_ctx(struct gdrnic_fuzz *s)
{
	int i, start = gdrnic_fuzz_below(s, FUZZ_CTXS);

	for (i = 0; i < FUZZ_CTXS; i++)
		if (s->ctx[(start + i) % FUZZ_CTXS])
			return (start + i) % FUZZ_CTXS;
	return -1;
}

/* A free registration slot, or NULL; its callback must not have run since its unpin. */
static struct gdrnic_fuzz_mr *gdrnic_fuzz_free_mr(struct gdrnic_fuzz *s)
{
	int i, start = gdrnic_fuzz_below(s, FUZZ_MRS);

	for (i = 0; i < FUZZ_MRS; i++) {
		struct gdrnic_fuzz_mr *m = &s->mrs[(start + i) % FUZZ_MRS];

		if (atomic_read(&m->state) != FUZZ_FREE)
			continue;
		if (atomic_read(&m->cb) != m->cb_at_unpin)
			gdrnic_fuzz_fail(s, GDRNIC_FUZZ_CALLBACK, 0, "called after its unpin returned");
		return m;
	}
	return NULL;
}

/* Pins into @m; the outcome must be in @allowed. */
static void gdrnic_fuzz_pin_call(struct gdrnic_fuzz *s, int op, struct gdrnic_fuzz_mr *m,
				 struct gdrpeer_ctx *ctx, struct pci_dev *peer, u64 va, u64 len,
				 void (*invalidate)(void *data), struct gdrpeer_mr_info *info,
				 bool stable, u32 allowed)
{
	struct gdrpeer_mr *mr;
	int ret;

	m->s = s;
	m->stable = stable;
	m->mr = NULL;
	atomic_set(&m->cb, CB_NONE);
	m->cb_at_unpin = CB_NONE;
	atomic_set(&m->state, FUZZ_PINNING);
	mr = gdrpeer_mr_pin(ctx, peer, va, len, invalidate, m, info);
	ret = PTR_ERR_OR_ZERO(mr);
	gdrnic_fuzz_check(s, op, ret, allowed);
	if (ret) {
		/* A callback during a failed pin has returned with it. */
		if (atomic_read(&m->cb) == CB_RUNNING)
			gdrnic_fuzz_fail(s, op, ret, "the callback runs after the pin failed");
		m->cb_at_unpin = atomic_read(&m->cb);
		atomic_set(&m->state, FUZZ_FREE);
		return;
	}
	if (!info)
		;	/* failed already: a NULL info is -EINVAL */
	else if (info->aligned_va != round_down(va, SZ_64K) || info->offset != va % SZ_64K ||
	    info->page_size != SZ_64K || !info->dma_addrs ||
	    info->page_count != DIV_ROUND_UP(info->offset + len, SZ_64K))
		gdrnic_fuzz_fail(s, op, 0, "wrong gdrpeer_mr_info");
	else if (!info->dma_addrs[0] || !info->dma_addrs[info->page_count - 1])
		gdrnic_fuzz_fail(s, op, 0, "a DMA address 0");
	m->mr = mr;
	atomic_set(&m->state, FUZZ_LIVE);
}

static void gdrnic_fuzz_unpin(struct gdrnic_fuzz *s, struct gdrnic_fuzz_mr *m)
{
	int cb = atomic_read(&m->cb), op;

	gdrpeer_mr_unpin(m->mr);
	/* A running callback was waited for; none starts after. */
	m->cb_at_unpin = atomic_read(&m->cb);
	atomic_set(&m->state, FUZZ_FREE);
	op = cb == CB_RUNNING ? GDRNIC_FUZZ_UNPIN_DURING_CALLBACK :
	     cb == CB_RETURNED ? GDRNIC_FUZZ_UNPIN_AFTER_CALLBACK : GDRNIC_FUZZ_UNPIN;
	s->a->counts[op][GDRNIC_FUZZ_OK]++;
	if (m->cb_at_unpin == CB_RUNNING)
		gdrnic_fuzz_fail(s, op, 0, "returned while the callback runs");
}

static void gdrnic_fuzz_unpin_some(struct gdrnic_fuzz *s);

/*
 * A pin of a range of class @c with context @i, or one of the session's or
 * the file's if @i is negative.
 */
static void gdrnic_fuzz_pin(struct gdrnic_fuzz *s, int c, int i)
{
	static const int ops[] = {
		[C_WINDOW] = GDRNIC_FUZZ_PIN,
		[C_PARTIAL] = GDRNIC_FUZZ_PIN_PARTIAL,
		[C_BAD_LENGTH] = GDRNIC_FUZZ_PIN_BAD_LENGTH,
		[C_NOT_GPU] = GDRNIC_FUZZ_PIN_NOT_GPU,
	};
	struct gdrnic_fuzz_mr *m = gdrnic_fuzz_free_mr(s);
	int op = ops[c == C_CHURNED ? C_WINDOW : c];
	bool stable;
	u32 allowed;
	u64 va, len;

	if (!m)
		return;
	if (i < 0)
		i = gdrnic_fuzz_pick_ctx(s);
	allowed = gdrnic_fuzz_range(s, c, &va, &len, &stable);
	if (c == C_CHURNED)
		c = C_WINDOW;
	if (c == C_WINDOW && !stable)
		op = GDRNIC_FUZZ_PIN_CHURNED;
	if (i == FUZZ_FILE_CTX && !s->mine) {
		/* The opener's context: the check of the caller may come first. */
		op = GDRNIC_FUZZ_PIN_FOREIGN;
		allowed = O(EACCES) | (c == C_WINDOW ? 0 : O(EINVAL));
	}
	gdrnic_fuzz_pin_call(s, op, m, s->ctx[i], s->peer, va, len, gdrnic_fuzz_invalidate,
			     &m->info, stable, allowed);
}

/* A pin with one NULL argument, of a window with a context of the caller's. */
static void gdrnic_fuzz_pin_null(struct gdrnic_fuzz *s)
{
	struct gdrnic_fuzz_mr *m = gdrnic_fuzz_free_mr(s);
	int i = s->mine ? gdrnic_fuzz_pick_ctx(s) : gdrnic_fuzz_pick_own_ctx(s);
	struct gdrpeer_ctx *ctx = i < 0 ? NULL : s->ctx[i];
	void (*invalidate)(void *data) = gdrnic_fuzz_invalidate;
	struct gdrpeer_mr_info *info;
	struct pci_dev *peer = s->peer;
	bool stable;
	u64 va, len;

	if (!m)
		return;
	info = &m->info;
	gdrnic_fuzz_range(s, C_WINDOW, &va, &len, &stable);
	switch (gdrnic_fuzz_below(s, 4)) {
	case 0:
		ctx = NULL;
		break;
	case 1:
		peer = NULL;
		break;
	case 2:
		info = NULL;
		break;
	default:
		invalidate = NULL;
		break;
	}
	gdrnic_fuzz_pin_call(s, GDRNIC_FUZZ_PIN_NULL, m, ctx, peer, va, len, invalidate, info,
			     stable, O(EINVAL));
}

static void gdrnic_fuzz_put_dmabuf(struct gdrnic_fuzz *s, int i)
{
	dma_buf_put(s->dmabufs[i]);
	s->dmabufs[i] = NULL;
	s->a->counts[GDRNIC_FUZZ_DMABUF_PUT][GDRNIC_FUZZ_OK]++;
}

/* Keeps @buf, made by an export of @va and @len, or puts it. */
static void gdrnic_fuzz_keep_dmabuf(struct gdrnic_fuzz *s, int op, struct dma_buf *buf,
				    u64 va, u64 len, u64 offset)
{
	int i;

	if (offset != va % SZ_64K || buf->size != ALIGN(offset + len, SZ_64K))
		gdrnic_fuzz_fail(s, op, 0, "wrong offset or dma-buf size");
	for (i = 0; i < FUZZ_DMABUFS; i++) {
		if (!s->dmabufs[i]) {
			s->dmabufs[i] = buf;
			return;
		}
	}
	dma_buf_put(buf);
	s->a->counts[GDRNIC_FUZZ_DMABUF_PUT][GDRNIC_FUZZ_OK]++;
}

/* gdrpeer_dmabuf_export() of a range of class @c, or with a NULL argument. */
static void gdrnic_fuzz_export(struct gdrnic_fuzz *s, int c, bool null)
{
	int i = gdrnic_fuzz_pick_ctx(s), ret;
	int op = c == C_WINDOW ? GDRNIC_FUZZ_EXPORT : GDRNIC_FUZZ_EXPORT_BAD;
	struct gdrpeer_ctx *ctx = s->ctx[i];
	u64 va, len, offset, *offp = &offset;
	struct dma_buf *buf;
	bool stable;
	u32 allowed;

	allowed = gdrnic_fuzz_range(s, c, &va, &len, &stable);
	if (null) {
		op = GDRNIC_FUZZ_EXPORT_NULL;
		allowed = O(EINVAL);
		if (gdrnic_fuzz_below(s, 2))
			ctx = NULL;
		else
			offp = NULL;
	} else if (i == FUZZ_FILE_CTX && !s->mine) {
		op = GDRNIC_FUZZ_EXPORT_FOREIGN;
		allowed = O(EACCES) | (c == C_WINDOW ? 0 : O(EINVAL));
	}
	/* A third are persistent exports: the same outcomes (nvsim takes persistent pins). */
	if (gdrnic_fuzz_below(s, 3))
		buf = gdrpeer_dmabuf_export(ctx, va, len, offp);
	else
		buf = gdrpeer_dmabuf_export_flags(ctx, va, len, GDRPEER_DMABUF_PERSISTENT, offp);
	ret = PTR_ERR_OR_ZERO(buf);
	gdrnic_fuzz_check(s, op, ret, allowed);
	if (!ret)
		gdrnic_fuzz_keep_dmabuf(s, op, buf, va, len, offset);
}

static int gdrnic_fuzz_kthread(void *data)
{
	struct gdrnic_fuzz_kcall *k = data;
	struct gdrnic_fuzz *s = k->s;
	struct gdrpeer_ctx *own = NULL;
	struct gdrpeer_mr *mr;
	struct dma_buf *buf;
	u64 offset;

	switch (k->op) {
	case GDRNIC_FUZZ_KTHREAD_OWN_CTX:
		own = gdrpeer_ctx_create();
		if (IS_ERR(own)) {
			k->ret = PTR_ERR(own);
			break;
		}
		k->ctx = own;
		fallthrough;
	case GDRNIC_FUZZ_KTHREAD_PIN:
		atomic_set(&s->kmr.state, FUZZ_PINNING);
		mr = gdrpeer_mr_pin(k->ctx, s->peer, k->va, k->len, gdrnic_fuzz_invalidate,
				    &s->kmr, &s->kmr.info);
		k->ret = PTR_ERR_OR_ZERO(mr);
		if (!k->ret)
			gdrpeer_mr_unpin(mr);
		s->kmr.cb_at_unpin = atomic_read(&s->kmr.cb);
		atomic_set(&s->kmr.state, FUZZ_FREE);
		if (own)
			gdrpeer_ctx_destroy(own);
		break;
	case GDRNIC_FUZZ_KTHREAD_EXPORT:
		buf = gdrpeer_dmabuf_export(k->ctx, k->va, k->len, &offset);
		k->ret = PTR_ERR_OR_ZERO(buf);
		if (!k->ret)
			dma_buf_put(buf);
		break;
	default:
		/* Not the owner: the regions stay pinned until NVIDIA frees the memory. */
		gdrpeer_ctx_destroy(k->ctx);
		k->ret = 0;
		break;
	}
	kthread_complete_and_exit(&k->done, 0);
}

/*
 * A call from a kernel thread, which is not the process of any context: with
 * a context of the caller's, pins and exports fail with -EACCES and a destroy
 * leaves the pages to the callback; with one of its own, there is no GPU
 * memory to pin.
 */
static void gdrnic_fuzz_kcall(struct gdrnic_fuzz *s, int op, int i)
{
	struct gdrnic_fuzz_kcall k = { .s = s, .op = op };
	struct task_struct *t;
	bool stable;
	u32 allowed;
	int c;

	if (op != GDRNIC_FUZZ_KTHREAD_OWN_CTX) {
		if (i < 0)
			i = gdrnic_fuzz_pick_own_ctx(s);
		if (i < 0)
			return;
		k.ctx = s->ctx[i];
	}
	c = gdrnic_fuzz_below(s, 4);
	allowed = gdrnic_fuzz_range(s, c, &k.va, &k.len, &stable);
	if (op == GDRNIC_FUZZ_KTHREAD_OWN_CTX)
		allowed = c == C_BAD_LENGTH ? O(EINVAL) : O(EINVAL) | s->enomem;
	else if (op != GDRNIC_FUZZ_KTHREAD_DESTROY)
		allowed = O(EACCES) | (c == C_WINDOW ? 0 : O(EINVAL));
	else
		allowed = O(OK);
	s->kmr.s = s;
	s->kmr.stable = stable;
	atomic_set(&s->kmr.cb, CB_NONE);
	s->kmr.cb_at_unpin = CB_NONE;
	init_completion(&k.done);
	t = kthread_run(gdrnic_fuzz_kthread, &k, "gdrnic-fuzz");
	if (IS_ERR(t)) {
		if (op == GDRNIC_FUZZ_KTHREAD_DESTROY) {
			gdrpeer_ctx_destroy(k.ctx);
			s->ctx[i] = NULL;
		}
		return;
	}
	wait_for_completion(&k.done);
	gdrnic_fuzz_check(s, op, k.ret, allowed);
	if (atomic_read(&s->kmr.cb) != s->kmr.cb_at_unpin)
		gdrnic_fuzz_fail(s, GDRNIC_FUZZ_CALLBACK, 0, "called after its unpin returned");
	if (op == GDRNIC_FUZZ_KTHREAD_DESTROY)
		s->ctx[i] = NULL;
}

/* Unpins a live registration, most often one whose callback runs now. */
static void gdrnic_fuzz_unpin_some(struct gdrnic_fuzz *s)
{
	int i, start = gdrnic_fuzz_below(s, FUZZ_MRS);
	struct gdrnic_fuzz_mr *pick = NULL;

	for (i = 0; i < FUZZ_MRS; i++) {
		struct gdrnic_fuzz_mr *m = &s->mrs[(start + i) % FUZZ_MRS];

		if (atomic_read(&m->state) != FUZZ_LIVE)
			continue;
		if (atomic_read(&m->cb) == CB_RUNNING) {
			pick = m;
			break;
		}
		if (!pick)
			pick = m;
	}
	if (pick)
		gdrnic_fuzz_unpin(s, pick);
}

/* A new context of the session in its slot @i. */
static bool gdrnic_fuzz_ctx_create(struct gdrnic_fuzz *s, int i)
{
	struct gdrpeer_ctx *ctx = gdrpeer_ctx_create();

	gdrnic_fuzz_check(s, GDRNIC_FUZZ_CTX_CREATE, PTR_ERR_OR_ZERO(ctx), O(OK));
	if (IS_ERR(ctx))
		return false;
	s->ctx[i] = ctx;
	return true;
}

/*
 * A new context with registrations of memory that may be freed, destroyed
 * from a kernel thread: its pages stay pinned and mapped until the memory is
 * freed, and its registrations are still to be unpinned. (Of memory that
 * stays, those regions would stay pinned for the whole run.)
 */
static void gdrnic_fuzz_kdestroy(struct gdrnic_fuzz *s)
{
	int i, n;

	for (i = 0; i < FUZZ_CTXS && s->ctx[i]; i++)
		;
	if (i == FUZZ_CTXS || !gdrnic_fuzz_ctx_create(s, i))
		return;
	for (n = 1 + gdrnic_fuzz_below(s, 3); n; n--)
		gdrnic_fuzz_pin(s, C_CHURNED, i);
	gdrnic_fuzz_kcall(s, GDRNIC_FUZZ_KTHREAD_DESTROY, i);
}

static void gdrnic_fuzz_one(struct gdrnic_fuzz *s)
{
	/* Weights of the ops, in this order. */
	static const u8 weights[] = { 3, 2, 30, 4, 4, 3, 3, 30, 6, 3, 2, 4, 1, 1, 1, 1 };
	u32 x = gdrnic_fuzz_below(s, 98);
	int i, n = 0;

	for (n = 0; n < ARRAY_SIZE(weights) - 1 && x >= weights[n]; n++)
		x -= weights[n];
	switch (n) {
	case 0:
		i = gdrnic_fuzz_below(s, FUZZ_CTXS);
		if (!s->ctx[i])
			gdrnic_fuzz_ctx_create(s, i);
		break;
	case 1:
		/* Its registrations and dma-bufs live on, to be unpinned and put later. */
		i = gdrnic_fuzz_pick_own_ctx(s);
		if (i >= 0) {
			gdrpeer_ctx_destroy(s->ctx[i]);
			s->ctx[i] = NULL;
			s->a->counts[GDRNIC_FUZZ_CTX_DESTROY][GDRNIC_FUZZ_OK]++;
		}
		break;
	case 2 ... 5:	/* C_WINDOW, C_PARTIAL, C_BAD_LENGTH, C_NOT_GPU */
		gdrnic_fuzz_pin(s, n - 2, -1);
		break;
	case 6:
		gdrnic_fuzz_pin_null(s);
		break;
	case 7:
		gdrnic_fuzz_unpin_some(s);
		break;
	case 8:
		gdrnic_fuzz_export(s, C_WINDOW, false);
		break;
	case 9:
		gdrnic_fuzz_export(s, 1 + gdrnic_fuzz_below(s, 3), false);
		break;
	case 10:
		gdrnic_fuzz_export(s, C_WINDOW, true);
		break;
	case 11:
		i = gdrnic_fuzz_below(s, FUZZ_DMABUFS);
		if (s->dmabufs[i])
			gdrnic_fuzz_put_dmabuf(s, i);
		break;
	case 12:
		gdrnic_fuzz_kcall(s, GDRNIC_FUZZ_KTHREAD_PIN, -1);
		break;
	case 13:
		gdrnic_fuzz_kcall(s, GDRNIC_FUZZ_KTHREAD_EXPORT, -1);
		break;
	case 14:
		gdrnic_fuzz_kdestroy(s);
		break;
	default:
		gdrnic_fuzz_kcall(s, GDRNIC_FUZZ_KTHREAD_OWN_CTX, -1);
		break;
	}
}

/* Releases what the session holds, in an order of its choosing. */
static void gdrnic_fuzz_end(struct gdrnic_fuzz *s)
{
	bool dmabufs_first = gdrnic_fuzz_below(s, 2);
	int i;

	for (i = 0; i < FUZZ_MRS; i++)
		if (atomic_read(&s->mrs[i].state) == FUZZ_LIVE)
			gdrnic_fuzz_unpin(s, &s->mrs[i]);
	for (i = 0; i < FUZZ_DMABUFS; i++)
		if (dmabufs_first && s->dmabufs[i])
			gdrnic_fuzz_put_dmabuf(s, i);
	for (i = 0; i < FUZZ_CTXS; i++) {
		if (s->ctx[i]) {
			gdrpeer_ctx_destroy(s->ctx[i]);
			s->ctx[i] = NULL;
			s->a->counts[GDRNIC_FUZZ_CTX_DESTROY][GDRNIC_FUZZ_OK]++;
		}
	}
	for (i = 0; i < FUZZ_DMABUFS; i++)
		if (s->dmabufs[i])
			gdrnic_fuzz_put_dmabuf(s, i);
	for (i = 0; i < FUZZ_MRS; i++)
		if (atomic_read(&s->mrs[i].cb) != s->mrs[i].cb_at_unpin)
			gdrnic_fuzz_fail(s, GDRNIC_FUZZ_CALLBACK, 0, "called after its unpin returned");
}

static long gdrnic_fuzz(struct gdrnic_file *f, void __user *uarg)
{
	struct gdrnic_fuzz *s;
	u32 i, n;
	long ret = 0;

	s = kzalloc_obj(*s, GFP_KERNEL);
	if (!s)
		return -ENOMEM;
	s->a = kzalloc_obj(*s->a, GFP_KERNEL);
	if (!s->a) {
		kfree(s);
		return -ENOMEM;
	}
	if (copy_from_user(s->a, uarg, sizeof(*s->a))) {
		ret = -EFAULT;
		goto out;
	}
	n = s->a->nranges;
	if (!s->a->ops || s->a->ops > GDRNIC_FUZZ_MAX_OPS || (s->a->flags & ~GDRNIC_FUZZ_FLAGS) ||
	    !n || n > GDRNIC_FUZZ_RANGES) {
		ret = -EINVAL;
		goto out;
	}
	for (i = 0; i < n; i++) {
		const struct gdrnic_fuzz_range *r = &s->a->ranges[i];

		if (r->pad || (r->flags & ~GDRNIC_FUZZ_STABLE) || !r->len ||
		    !IS_ALIGNED(r->va | r->len, SZ_64K) || r->va + r->len < r->va) {
			ret = -EINVAL;
			goto out;
		}
	}
	/* The outputs start at 0 whatever the caller passed. */
	s->a->failures = 0;
	s->a->first_failure_op = 0;
	s->a->first_failure_errno = 0;
	memset(s->a->counts, 0, sizeof(s->a->counts));

	if (gdrnic_gone(f->nic) || !f->ctx) {
		ret = -ENODEV;
		goto out;
	}
	s->peer = f->nic->pdev;
	s->mine = task_tgid(current) == f->owner;
	s->enomem = s->a->flags & GDRNIC_FUZZ_FAULTS ? O(ENOMEM) : 0;
	s->ctx[FUZZ_FILE_CTX] = f->ctx;
	spin_lock_init(&s->lock);
	prandom_seed_state(&s->rnd, s->a->seed);

	for (i = 0; i < s->a->ops; i++) {
		if (fatal_signal_pending(current)) {
			ret = -EINTR;
			break;
		}
		gdrnic_fuzz_one(s);
		cond_resched();
	}
	gdrnic_fuzz_end(s);
	s->a->counts[GDRNIC_FUZZ_CALLBACK][GDRNIC_FUZZ_OK] = atomic64_read(&s->callbacks);
	s->a->failures = atomic_read(&s->failures);
	if (!ret && copy_to_user(uarg, s->a, sizeof(*s->a)))
		ret = -EFAULT;
out:
	kfree(s->a);
	kfree(s);
	return ret;
}

static long gdrnic_ioctl_locked(struct gdrnic_file *f, unsigned int cmd, void __user *uarg)
{
	switch (cmd) {
	case GDRNIC_IOCTL_REG:
		return gdrnic_reg(f, uarg);
	case GDRNIC_IOCTL_DEREG:
		return gdrnic_dereg(f, uarg);
	case GDRNIC_IOCTL_SEND:
		return gdrnic_xfer(f, uarg, true);
	case GDRNIC_IOCTL_RECV:
		return gdrnic_xfer(f, uarg, false);
	case GDRNIC_IOCTL_REG_DMABUF:
		return gdrnic_reg_dmabuf(f, uarg);
	case GDRNIC_IOCTL_FUZZ:
		return gdrnic_fuzz(f, uarg);
	case GDRNIC_IOCTL_DMA_READ:
		return gdrnic_dma_read(f, uarg);
	case GDRNIC_IOCTL_DMABUF_SEGS:
		return gdrnic_dmabuf_segs(f, uarg);
	case GDRNIC_IOCTL_REG_LOOP:
		return gdrnic_reg_loop(f, uarg);
	default:
		return -ENOTTY;
	}
}

/*
 * CTX_DESTROY: the file's context goes, its registrations stay. Taken as the
 * device's removal takes it, so that no ioctl runs meanwhile: the others read
 * f->ctx under remove_sem.
 */
static long gdrnic_ctx_destroy(struct gdrnic_file *f)
{
	long ret = -ENODEV;

	down_write(&f->nic->remove_sem);
	if (!f->nic->removed && f->ctx) {
		gdrpeer_ctx_destroy(f->ctx);
		f->ctx = NULL;
		ret = 0;
	}
	up_write(&f->nic->remove_sem);
	return ret;
}

static long gdrnic_ioctl(struct file *file, unsigned int cmd, unsigned long arg)
{
	struct gdrnic_file *f = file->private_data;
	long ret = -ENODEV;

	if (cmd == GDRNIC_IOCTL_CTX_DESTROY)
		return gdrnic_ctx_destroy(f);
	/* A removed device's files have no registrations nor context left. */
	down_read(&f->nic->remove_sem);
	if (!f->nic->removed)
		ret = gdrnic_ioctl_locked(f, cmd, (void __user *)arg);
	up_read(&f->nic->remove_sem);
	return ret;
}

/* Ends @f's registrations and its gdrpeer context; no ioctl of it runs. */
static void gdrnic_file_empty(struct gdrnic_file *f)
{
	struct gdrnic_mr *m;
	unsigned long handle;

	xa_for_each(&f->mrs, handle, m) {
		xa_erase(&f->mrs, handle);
		gdrnic_mr_put(m);
	}
	if (f->ctx)
		gdrpeer_ctx_destroy(f->ctx);
	f->ctx = NULL;
}

static int gdrnic_open(struct inode *inode, struct file *file)
{
	struct gdrnic_dev *nic = container_of(file->private_data, struct gdrnic_dev, misc);
	struct gdrnic_file *f;
	int ret = -ENODEV;
	u32 devfn;

	down_read(&nic->remove_sem);
	if (nic->removed)
		goto out;
	ret = -ENOMEM;
	f = kzalloc_obj(*f, GFP_KERNEL);
	if (!f)
		goto out;
	/* The context of the opening process: its GPU memory is what REG pins. */
	f->ctx = gdrpeer_ctx_create();
	if (IS_ERR(f->ctx)) {
		ret = PTR_ERR(f->ctx);
		kfree(f);
		goto out;
	}
	devfn = READ_ONCE(gdrnic_reg_peer);
	if (devfn) {
		f->peer = pci_get_slot(nic->pdev->bus, devfn - 1);
		if (!f->peer) {
			ret = -ENODEV;
			gdrpeer_ctx_destroy(f->ctx);
			kfree(f);
			goto out;
		}
	} else {
		f->peer = pci_dev_get(nic->pdev);
	}
	f->owner = get_pid(task_tgid(current));
	mutex_init(&f->lock);
	xa_init_flags(&f->mrs, XA_FLAGS_ALLOC);
	kref_get(&nic->ref);
	f->nic = nic;
	mutex_lock(&nic->files_lock);
	list_add(&f->node, &nic->files);
	mutex_unlock(&nic->files_lock);
	file->private_data = f;
	ret = 0;
out:
	up_read(&nic->remove_sem);
	return ret;
}

static int gdrnic_release(struct inode *inode, struct file *file)
{
	struct gdrnic_file *f = file->private_data;

	/*
	 * No ioctl runs: the last reference to the file is gone. Under
	 * remove_sem, so that a removal of the device waits for the file's
	 * registrations to end, as it waits for those it ends itself.
	 */
	down_read(&f->nic->remove_sem);
	mutex_lock(&f->nic->files_lock);
	list_del(&f->node);
	mutex_unlock(&f->nic->files_lock);
	gdrnic_file_empty(f);
	up_read(&f->nic->remove_sem);
	xa_destroy(&f->mrs);
	kfree(f->spare);
	pci_dev_put(f->peer);
	put_pid(f->owner);
	kref_put(&f->nic->ref, gdrnic_dev_release);
	mutex_destroy(&f->lock);
	kfree(f);
	return 0;
}

static const struct file_operations gdrnic_fops = {
	.owner = THIS_MODULE,
	.open = gdrnic_open,
	.release = gdrnic_release,
	.unlocked_ioctl = gdrnic_ioctl,
	.compat_ioctl = compat_ptr_ioctl,
};

static int gdrnic_probe(struct pci_dev *pdev, const struct pci_device_id *id)
{
	u32 version = gdrpeer_kapi_version();
	struct gdrnic_dev *nic;
	int ret;

	if (version >> 16 != GDRPEER_KAPI_MAJOR || (version & 0xffff) < GDRPEER_KAPI_MINOR) {
		pci_err(pdev, "gdrpeer kernel API %u.%u, built for %u.%u\n", version >> 16,
			version & 0xffff, GDRPEER_KAPI_MAJOR, GDRPEER_KAPI_MINOR);
		return -ENODEV;
	}
	ret = pcim_enable_device(pdev);
	if (ret)
		return ret;
	/* QEMU is started with edu's dma_mask at 64 bits: it reaches the GPU BAR. */
	ret = dma_set_mask_and_coherent(&pdev->dev, DMA_BIT_MASK(64));
	if (ret)
		return ret;
	pci_set_master(pdev);

	nic = kzalloc_obj(*nic, GFP_KERNEL);
	if (!nic)
		return -ENOMEM;
	kref_init(&nic->ref);
	mutex_init(&nic->engine_lock);
	init_rwsem(&nic->remove_sem);
	mutex_init(&nic->files_lock);
	INIT_LIST_HEAD(&nic->files);
	nic->pdev = pdev;
	nic->mmio = pcim_iomap_region(pdev, 0, KBUILD_MODNAME);
	if (IS_ERR(nic->mmio)) {
		ret = PTR_ERR(nic->mmio);
		goto err_free;
	}
	if ((readl(nic->mmio + EDU_ID) & 0xff) != EDU_ID_MAGIC) {
		pci_err(pdev, "not an edu device\n");
		ret = -ENODEV;
		goto err_free;
	}
	nic->host_buf = dma_alloc_coherent(&pdev->dev, EDU_DMA_MAX, &nic->host_dma,
					   GFP_KERNEL);
	if (!nic->host_buf) {
		ret = -ENOMEM;
		goto err_free;
	}

	mutex_lock(&gdrnic_bind_lock);
	if (gdrnic_bound) {
		ret = -EBUSY;
		goto err_unlock;
	}
	nic->misc.minor = MISC_DYNAMIC_MINOR;
	nic->misc.name = KBUILD_MODNAME;
	nic->misc.fops = &gdrnic_fops;
	nic->misc.parent = &pdev->dev;
	ret = misc_register(&nic->misc);
	if (ret)
		goto err_unlock;
	gdrnic_bound = nic;
	mutex_unlock(&gdrnic_bind_lock);
	pci_set_drvdata(pdev, nic);
	pci_info(pdev, "gdrpeer kernel API %u.%u, /dev/%s\n", version >> 16, version & 0xffff,
		 nic->misc.name);
	return 0;

err_unlock:
	mutex_unlock(&gdrnic_bind_lock);
	dma_free_coherent(&pdev->dev, EDU_DMA_MAX, nic->host_buf, nic->host_dma);
err_free:
	kref_put(&nic->ref, gdrnic_dev_release);
	return ret;
}

static void gdrnic_remove(struct pci_dev *pdev)
{
	struct gdrnic_dev *nic = pci_get_drvdata(pdev);
	struct gdrnic_file *f;

	mutex_lock(&gdrnic_bind_lock);
	misc_deregister(&nic->misc);
	gdrnic_bound = NULL;
	mutex_unlock(&gdrnic_bind_lock);
	/*
	 * Waits for the ioctls in progress, then ends the open files'
	 * registrations and contexts: gdrpeer unmaps what it mapped for the
	 * device (kept mappings of cached regions included) before it goes.
	 */
	down_write(&nic->remove_sem);
	nic->removed = true;
	mutex_lock(&nic->files_lock);
	if (!READ_ONCE(gdrnic_remove_leaves_files))
		list_for_each_entry(f, &nic->files, node)
			gdrnic_file_empty(f);
	mutex_unlock(&nic->files_lock);
	up_write(&nic->remove_sem);
	/* Files still open fail their transfers with -ENODEV from here on. */
	mutex_lock(&nic->engine_lock);
	WRITE_ONCE(nic->gone, true);
	dma_free_coherent(&pdev->dev, EDU_DMA_MAX, nic->host_buf, nic->host_dma);
	mutex_unlock(&nic->engine_lock);
	kref_put(&nic->ref, gdrnic_dev_release);
}

static const struct pci_device_id gdrnic_ids[] = {
	{ PCI_DEVICE(EDU_VENDOR, EDU_DEVICE) },
	{ }
};
MODULE_DEVICE_TABLE(pci, gdrnic_ids);

static struct pci_driver gdrnic_driver = {
	.name = KBUILD_MODNAME,
	.id_table = gdrnic_ids,
	.probe = gdrnic_probe,
	.remove = gdrnic_remove,
};

static int gdrnic_stats_show(struct seq_file *s, void *unused)
{
	seq_printf(s, "registrations %lld\n", atomic64_read(&gdrnic_stats.registrations));
	seq_printf(s, "invalidations %lld\n", atomic64_read(&gdrnic_stats.invalidations));
	seq_printf(s, "transfers %lld\n", atomic64_read(&gdrnic_stats.transfers));
	seq_printf(s, "failed_transfers %lld\n", atomic64_read(&gdrnic_stats.failed_transfers));
	seq_printf(s, "gpu_dma_bytes %lld\n", atomic64_read(&gdrnic_stats.gpu_dma_bytes));
	seq_printf(s, "dma_ops %lld\n", atomic64_read(&gdrnic_stats.dma_ops));
	seq_printf(s, "dmabuf_imports %lld\n", atomic64_read(&gdrnic_stats.dmabuf_imports));
	seq_printf(s, "dmabuf_maps %lld\n", atomic64_read(&gdrnic_stats.dmabuf_maps));
	seq_printf(s, "dmabuf_invalidations %lld\n",
		   atomic64_read(&gdrnic_stats.dmabuf_invalidations));
	seq_printf(s, "chunk_delays %lld\n", atomic64_read(&gdrnic_stats.chunk_delays));
	return 0;
}
DEFINE_SHOW_ATTRIBUTE(gdrnic_stats);

static int __init gdrnic_init(void)
{
	int ret;

	gdrnic_dir = debugfs_create_dir(KBUILD_MODNAME, NULL);
	debugfs_create_file("stats", 0400, gdrnic_dir, NULL, &gdrnic_stats_fops);
	debugfs_create_u32("invalidate_delay_ms", 0600, gdrnic_dir,
			   &gdrnic_invalidate_delay_ms);
	debugfs_create_bool("invalidate_takes_file_lock", 0600, gdrnic_dir,
			    &gdrnic_invalidate_takes_file_lock);
	debugfs_create_bool("remove_leaves_files", 0600, gdrnic_dir,
			    &gdrnic_remove_leaves_files);
	debugfs_create_u32("reg_peer", 0600, gdrnic_dir, &gdrnic_reg_peer);
	debugfs_create_u32("chunk_delay_ms", 0600, gdrnic_dir, &gdrnic_chunk_delay_ms);
	ret = pci_register_driver(&gdrnic_driver);
	if (ret)
		debugfs_remove_recursive(gdrnic_dir);
	return ret;
}

static void __exit gdrnic_exit(void)
{
	pci_unregister_driver(&gdrnic_driver);
	debugfs_remove_recursive(gdrnic_dir);
}

module_init(gdrnic_init);
module_exit(gdrnic_exit);

MODULE_DESCRIPTION("Sample NIC driver on gdrpeer's kernel API, over QEMU's edu device");
MODULE_LICENSE("GPL");
MODULE_IMPORT_NS("DMA_BUF");
