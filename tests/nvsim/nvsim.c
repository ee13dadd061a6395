// SPDX-License-Identifier: GPL-2.0
/*
 * nvsim: a simulator of the NVIDIA driver's nv-p2p interface.
 *
 * nvsim binds QEMU's ivshmem-plain device and uses its memory BAR both as GPU
 * memory and as GPU BAR1: page tables carry real PCI bus addresses inside
 * that BAR, so a peer device can DMA to them. It exports the nv-p2p functions
 * with the C ABI of nv-p2p.h and reproduces the behaviour a peer module meets
 * in the real driver (Documentation/nvsim.rst lists it):
 *
 * - 64 KiB alignment of va and len; NULL callback or data rejected;
 * - lookup of the memory by the calling process (current->tgid), or by
 *   p2p token; the range must lie inside one allocation;
 * - BAR1 accounting with a reserve, overlapping pins sharing mappings,
 *   -ENOMEM when exhausted; a pin cost, spent sleeping;
 * - put_pages from another process returns 0 and releases nothing;
 * - the free callback runs synchronously in the freeing thread while nvsim
 *   holds its global lock (nvsim_lock), which every other entry point takes;
 *   afterwards nvsim frees the table and its DMA mappings itself, poisoned;
 * - persistent pins survive freeing the memory and are never called back;
 * - DMA mappings per peer with dma_map_resource(), several peers per table;
 * - page tables and DMA mappings are recycled most recently freed first, as
 *   a slab recycles them on a kernel without KASAN's quarantine, and a call
 *   that names one recycled while it waited is reported (client_errors).
 *
 * Fault injection, counters and knobs live in debugfs (nvsim/).
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/debugfs.h>
#include <linux/delay.h>
#include <linux/dma-mapping.h>
#include <linux/fs.h>
#include <linux/hashtable.h>
#include <linux/miscdevice.h>
#include <linux/mm.h>
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/pci.h>
#include <linux/random.h>
#include <linux/sched.h>
#include <linux/seq_file.h>
#include <linux/slab.h>
#include <linux/uaccess.h>
#include <linux/workqueue.h>
#include <nv-p2p.h>

#include "nvsim_uapi.h"

#define NVSIM_VENDOR_ID 0x1af4	/* Red Hat, Inc. */
#define NVSIM_DEVICE_ID 0x1110	/* Inter-VM shared memory */
#define NVSIM_BAR 2		/* ivshmem's memory BAR */

#define GPU_PAGE_SHIFT 16
#define GPU_PAGE_SIZE BIT_ULL(GPU_PAGE_SHIFT)
#define GPU_PAGE_MASK (~(GPU_PAGE_SIZE - 1))
#define NVSIM_VA_BASE 0x200000000ULL	/* first GPU virtual address handed out */
#define NVSIM_PAGE_STRIDE 7		/* consecutive GPU pages are not contiguous in the BAR */
#define NVSIM_POISON 0x6b

static unsigned int page_table_version = 0x00020000;
module_param(page_table_version, uint, 0444);
MODULE_PARM_DESC(page_table_version,
		 "Page-table version to hand out: 0x00010002 (drivers up to 570), 0x00020000 (580+), or 0x00030000 (a future major, to test clients' version checks)");

static unsigned int pin_cost_us = 100;
module_param(pin_cost_us, uint, 0644);
MODULE_PARM_DESC(pin_cost_us, "Fixed cost of a pin in microseconds, spent sleeping (default 100)");

static unsigned int pin_cost_per_page_us = 1;
module_param(pin_cost_per_page_us, uint, 0644);
MODULE_PARM_DESC(pin_cost_per_page_us, "Cost of a pin per 64 KiB page in microseconds (default 1)");

static unsigned long bar1_reserve = 36UL << 20;
module_param(bar1_reserve, ulong, 0444);
MODULE_PARM_DESC(bar1_reserve, "BAR1 bytes kept back from pinning, as the driver does (default 36 MiB)");

/*
 * The global lock. Every exported function but the two free_* no-ops takes
 * it, and the free callback runs with it held, as in the real driver.
 */
static DEFINE_MUTEX(nvsim_lock);

/* One simulated GPU: the ivshmem device. Protected by nvsim_lock. */
static struct {
	struct pci_dev *pdev;
	phys_addr_t bar_phys;	/* CPU physical address of the BAR */
	dma_addr_t bar_bus;	/* bus address of the BAR */
	u32 npages;		/* 64 KiB pages in the BAR */
	unsigned long *used;	/* pages backing an allocation */
	unsigned long *poisoned;	/* freed pages filled with NVSIM_POISON */
	void __iomem *bar;	/* the BAR, for poisoning freed pages */
	u32 *bar1_refs;		/* per BAR page: pins that map it through BAR1 */
	u32 cursor;
	u64 bar1_size;		/* aperture; debugfs can shrink it at run time */
} gpu;

static u8 nvsim_gpu_uuid[16] = { 'n', 'v', 's', 'i', 'm', '-', 'g', 'p', 'u', '-', '0' };

/* Counters (debugfs nvsim/stats); protected by nvsim_lock unless atomic. */
static struct {
	u64 allocations_live, pins_live, persistent_pins_live;
	u64 bar1_used, callbacks_fired, get_pages_calls, get_pages_failed;
	u64 dma_map_calls, faults_injected, put_pages_wrong_process;
	u64 freed_page_writes;
	u64 buffer_id_next;
	atomic64_t free_page_table_calls, free_dma_mapping_calls;
	atomic64_t dma_mappings_live, client_errors;	/* also changed without nvsim_lock */
} st = { .buffer_id_next = 1 };

/* A process's GPU virtual address space. */
struct nvsim_space {
	struct list_head node;		/* in nvsim_spaces */
	pid_t tgid;
	u64 p2p_token;
	u32 va_space;
	struct list_head allocs;	/* sorted by va */
};

struct nvsim_file;

struct nvsim_alloc {
	struct list_head node;		/* in space->allocs, or nvsim_zombies once freed */
	struct list_head file_node;	/* in owner->allocs while not freed */
	struct list_head all_node;	/* in nvsim_all_allocs while not freed */
	struct nvsim_space *space;	/* NULL once freed */
	struct nvsim_file *owner;
	u64 va, size, buffer_id;
	u32 npages;
	u32 *pages;			/* BAR page of each GPU page */
	bool sync_memops;
	struct list_head pins;
};

/*
 * A page table or DMA mapping handed out to clients. nvsim recycles them the
 * way a slab does on a kernel without KASAN's quarantine: the most recently
 * freed object is handed out first, so a client that calls with a pointer to
 * a freed table often names a newer pin's table. nvsim keeps the objects until
 * it is unloaded, and each has a generation, bumped whenever it is handed out:
 * a call reads the generation of what it names on entry, and if that changed
 * by the time it holds nvsim_lock, the object was freed and handed to someone
 * else while it waited. That is a stale pointer in the client: reported.
 */
struct nvsim_obj {
	struct list_head free_node;	/* in its pool while free */
	struct hlist_node hash;		/* in nvsim_objs, by key, until unload */
	unsigned long key;		/* the address clients see */
	u64 gen;			/* under nvsim_pool_lock */
};

struct nvsim_table {
	struct nvsim_obj obj;		/* first: kfree() of the object */
	struct nvidia_p2p_page_table pt;
};

struct nvsim_pin {
	struct list_head node;		/* in alloc->pins */
	struct hlist_node hash;		/* in nvsim_pins, keyed by pt */
	struct nvsim_alloc *alloc;
	struct nvidia_p2p_page_table *pt;
	u32 first, count;		/* GPU pages of alloc */
	pid_t tgid;
	bool persistent;
	void (*free_callback)(void *data);
	void *data;
	struct list_head maps;
};

struct nvsim_map {
	struct nvsim_obj obj;		/* first: kfree() of the object */
	struct list_head node;		/* in pin->maps */
	struct nvidia_p2p_dma_mapping m;
};

struct nvsim_file {
	struct list_head allocs;
};

static LIST_HEAD(nvsim_spaces);
static LIST_HEAD(nvsim_zombies);	/* freed, still held by persistent pins */
static LIST_HEAD(nvsim_all_allocs);
static DEFINE_HASHTABLE(nvsim_pins, 12);
/*
 * nvsim_pins and every pin's maps list change under both nvsim_lock and
 * nvsim_map_lock, and may be read under either. dma_unmap_pages takes only
 * nvsim_map_lock, as the real driver takes only its table's mapping-list lock
 * there (not the global one): a free callback may wait for an unmap.
 */
static DEFINE_SPINLOCK(nvsim_map_lock);
static u32 unmap_delay_us;	/* debugfs unmap_delay_us */

/* Recycled tables and mappings (struct nvsim_obj). */
static DEFINE_SPINLOCK(nvsim_pool_lock);
static DEFINE_HASHTABLE(nvsim_objs, 12);
static LIST_HEAD(nvsim_free_tables);
static LIST_HEAD(nvsim_free_maps);

/*
 * One-shot test knobs (debugfs): the next put_pages or dma_map_pages sleeps
 * this long on entry, before it takes nvsim_lock, so that a free and a new pin
 * can come in between; calls_delayed counts the calls asleep there.
 */
static u32 put_pages_delay_us, dma_map_delay_us;
static atomic_t calls_delayed = ATOMIC_INIT(0);

/* Fault injection: fail the next `times` calls (or `percent`% of calls). */
struct nvsim_fault {
	int times;			/* -1: no limit */
	unsigned int percent;
	int err;
};

static struct nvsim_fault fault_get_pages, fault_dma_map;

/* A free of one allocation, armed to happen later (debugfs free, free_on_pin). */
static struct {
	u64 buffer_id;		/* 0: none armed for free_on_pin */
	unsigned int delay_us;
} free_on_pin;

struct nvsim_delayed_free {
	struct list_head node;		/* in nvsim_delayed_frees */
	struct delayed_work work;
	u64 buffer_id;
};

static int nvsim_fault_hit(struct nvsim_fault *f)
{
	lockdep_assert_held(&nvsim_lock);
	if (!f->times || !f->err)
		return 0;
	if (f->percent < 100 && get_random_u32_below(100) >= f->percent)
		return 0;
	if (f->times > 0)
		f->times--;
	st.faults_injected++;
	return -f->err;
}

static struct nvsim_space *nvsim_space_by_tgid(pid_t tgid)
{
	struct nvsim_space *s;

	list_for_each_entry(s, &nvsim_spaces, node)
		if (s->tgid == tgid)
			return s;
	return NULL;
}

static struct nvsim_space *nvsim_space_by_token(u64 p2p_token, u32 va_space)
{
	struct nvsim_space *s;

	list_for_each_entry(s, &nvsim_spaces, node)
		if (s->p2p_token == p2p_token && s->va_space == va_space)
			return s;
	return NULL;
}

/* The allocation of @s containing [va, va + len), or NULL. */
static struct nvsim_alloc *nvsim_find(struct nvsim_space *s, u64 va, u64 len)
{
	struct nvsim_alloc *a;

	if (!s)
		return NULL;
	list_for_each_entry(a, &s->allocs, node) {
		u64 end = a->va + ((u64)a->npages << GPU_PAGE_SHIFT);

		if (va >= a->va && va < end)
			return len <= end - va ? a : NULL;
	}
	return NULL;
}

static struct nvsim_alloc *nvsim_find_by_id(u64 buffer_id)
{
	struct nvsim_alloc *a;

	list_for_each_entry(a, &nvsim_all_allocs, all_node)
		if (a->buffer_id == buffer_id)
			return a;
	return NULL;
}

/* The calling process's allocation whose requested size covers @va, or NULL. */
static struct nvsim_alloc *nvsim_caller_alloc(u64 va)
{
	struct nvsim_alloc *a = nvsim_find(nvsim_space_by_tgid(current->tgid), va, 1);

	return a && va < a->va + a->size ? a : NULL;
}

static dma_addr_t nvsim_page_bus(u32 bar_page)
{
	return gpu.bar_bus + ((dma_addr_t)bar_page << GPU_PAGE_SHIFT);
}

/* Maps GPU pages [first, first + count) of @a through BAR1; returns the bytes newly mapped. */
static u64 nvsim_bar1_new_bytes(struct nvsim_alloc *a, u32 first, u32 count)
{
	u64 bytes = 0;
	u32 i;

	for (i = first; i < first + count; i++)
		if (!gpu.bar1_refs[a->pages[i]])
			bytes += GPU_PAGE_SIZE;
	return bytes;
}

static void nvsim_bar1_get(struct nvsim_alloc *a, u32 first, u32 count)
{
	u32 i;

	for (i = first; i < first + count; i++)
		if (!gpu.bar1_refs[a->pages[i]]++)
			st.bar1_used += GPU_PAGE_SIZE;
}

static void nvsim_bar1_put(struct nvsim_alloc *a, u32 first, u32 count)
{
	u32 i;

	for (i = first; i < first + count; i++)
		if (!--gpu.bar1_refs[a->pages[i]])
			st.bar1_used -= GPU_PAGE_SIZE;
}

/*
 * Hands out the most recently freed object of @pool, or @fresh (a new object
 * of @size, zeroed, whose client-visible part starts @key_off bytes in) when
 * the pool is empty; NULL without memory.
 */
static struct nvsim_obj *nvsim_obj_get(struct list_head *pool, size_t size, size_t key_off)
{
	struct nvsim_obj *o;

	spin_lock(&nvsim_pool_lock);
	o = list_first_entry_or_null(pool, struct nvsim_obj, free_node);
	if (o)
		list_del(&o->free_node);
	spin_unlock(&nvsim_pool_lock);
	if (!o) {
		o = kzalloc(size, GFP_KERNEL);
		if (!o)
			return NULL;
		o->key = (unsigned long)o + key_off;
		spin_lock(&nvsim_pool_lock);
		hash_add(nvsim_objs, &o->hash, o->key);
		spin_unlock(&nvsim_pool_lock);
	}
	memset((void *)o->key, 0, size - key_off);
	spin_lock(&nvsim_pool_lock);
	o->gen++;
	spin_unlock(&nvsim_pool_lock);
	return o;
}

/* Poisons what clients see of @o and puts it first in @pool. */
static void nvsim_obj_put(struct nvsim_obj *o, struct list_head *pool, size_t size)
{
	memset((void *)o->key, NVSIM_POISON, size - (o->key - (unsigned long)o));
	spin_lock(&nvsim_pool_lock);
	list_add(&o->free_node, pool);
	spin_unlock(&nvsim_pool_lock);
}

/* The generation of what clients know as @key; 0 if nvsim never handed it out. */
static u64 nvsim_obj_gen(const void *key)
{
	struct nvsim_obj *o;
	u64 gen = 0;

	spin_lock(&nvsim_pool_lock);
	hash_for_each_possible(nvsim_objs, o, hash, (unsigned long)key) {
		if (o->key == (unsigned long)key) {
			gen = o->gen;
			break;
		}
	}
	spin_unlock(&nvsim_pool_lock);
	return gen;
}

/* Whether @key was handed out again since a call read @gen on entry. */
static bool nvsim_recycled_since(const void *key, u64 gen)
{
	return gen && nvsim_obj_gen(key) != gen;
}

static void nvsim_objs_destroy(void)
{
	struct hlist_node *tmp;
	struct nvsim_obj *o;
	int bkt;

	hash_for_each_safe(nvsim_objs, bkt, tmp, o, hash) {
		hash_del(&o->hash);
		kfree(o);
	}
}

/* Sleeps on entry to a call if the test armed @knob (one shot). */
static void nvsim_entry_delay(u32 *knob)
{
	u32 us = xchg(knob, 0);

	if (!us)
		return;
	atomic_inc(&calls_delayed);
	fsleep(us);
	atomic_dec(&calls_delayed);
}

static struct nvsim_map *nvsim_map_get(void)
{
	struct nvsim_obj *o = nvsim_obj_get(&nvsim_free_maps, sizeof(struct nvsim_map),
					    offsetof(struct nvsim_map, m));

	return o ? container_of(o, struct nvsim_map, obj) : NULL;
}

static void nvsim_map_put(struct nvsim_map *map)
{
	nvsim_obj_put(&map->obj, &nvsim_free_maps, sizeof(*map));
}

/* Unmaps and frees a mapping already unlinked from its pin. */
static void nvsim_unmap_one(struct nvsim_map *map)
{
	u32 i;

	for (i = 0; i < map->m.entries; i++)
		dma_unmap_resource(&map->m.pci_dev->dev, map->m.dma_addresses[i],
				   GPU_PAGE_SIZE, DMA_BIDIRECTIONAL, 0);
	memset(map->m.dma_addresses, NVSIM_POISON, sizeof(u64) * map->m.entries);
	kfree(map->m.dma_addresses);
	nvsim_map_put(map);
	atomic64_dec(&st.dma_mappings_live);
}

static void nvsim_table_put(struct nvidia_p2p_page_table *pt)
{
	struct nvsim_table *t = container_of(pt, struct nvsim_table, pt);

	nvsim_obj_put(&t->obj, &nvsim_free_tables, sizeof(*t));
}

static struct nvidia_p2p_page_table *nvsim_table_alloc(struct nvsim_alloc *a, u32 first, u32 count)
{
	struct nvidia_p2p_page_table *pt = NULL;
	struct nvidia_p2p_page *pages;
	struct nvsim_obj *o;
	u32 i;

	o = nvsim_obj_get(&nvsim_free_tables, sizeof(struct nvsim_table),
			  offsetof(struct nvsim_table, pt));
	pages = kcalloc(count, sizeof(*pages), GFP_KERNEL);
	if (o) {
		pt = &container_of(o, struct nvsim_table, obj)->pt;
		pt->pages = kcalloc(count, sizeof(*pt->pages), GFP_KERNEL);
	}
	if (!pt || !pages || !pt->pages) {
		kfree(pages);
		if (pt) {
			kfree(pt->pages);
			nvsim_table_put(pt);
		}
		return NULL;
	}
	pt->version = page_table_version;
	pt->page_size = NVIDIA_P2P_PAGE_SIZE_64KB;
	pt->entries = count;
	pt->gpu_uuid = nvsim_gpu_uuid;
	for (i = 0; i < count; i++) {
		pages[i].physical_address = nvsim_page_bus(a->pages[first + i]);
		pt->pages[i] = &pages[i];
	}
	return pt;
}

static void nvsim_table_free(struct nvidia_p2p_page_table *pt)
{
	struct nvidia_p2p_page *pages = pt->pages[0];
	u32 n = pt->entries;

	memset(pages, NVSIM_POISON, sizeof(*pages) * n);
	kfree(pages);
	memset(pt->pages, NVSIM_POISON, sizeof(*pt->pages) * n);
	kfree(pt->pages);
	nvsim_table_put(pt);
}

/* Releases a pin: its DMA mappings, its BAR1 mapping, its table. */
static void nvsim_pin_release(struct nvsim_pin *pin)
{
	struct nvsim_map *map, *next;
	LIST_HEAD(maps);

	lockdep_assert_held(&nvsim_lock);
	spin_lock(&nvsim_map_lock);
	list_splice_init(&pin->maps, &maps);
	hash_del(&pin->hash);
	spin_unlock(&nvsim_map_lock);
	list_for_each_entry_safe(map, next, &maps, node)
		nvsim_unmap_one(map);
	nvsim_bar1_put(pin->alloc, pin->first, pin->count);
	list_del(&pin->node);
	nvsim_table_free(pin->pt);
	if (pin->persistent)
		st.persistent_pins_live--;
	else
		st.pins_live--;
	kfree(pin);
}

/*
 * Freed memory is poisoned. A peer that is still using a page after the free
 * callbacks returned (a client that did not stop its device) changes the
 * poison; nvsim finds that when the page is allocated again or when debugfs
 * check_freed asks, and counts it in freed_page_writes.
 */
#define NVSIM_POISON_WORD 0x6b6b6b6b6b6b6b6bULL	/* NVSIM_POISON in every byte */

static void __iomem *nvsim_page_io(u32 bar_page)
{
	return gpu.bar + ((size_t)bar_page << GPU_PAGE_SHIFT);
}

static void nvsim_poison(u32 bar_page)
{
	memset_io(nvsim_page_io(bar_page), NVSIM_POISON, GPU_PAGE_SIZE);
	set_bit(bar_page, gpu.poisoned);
}

/* Checks a poisoned page; one written since is counted once and poisoned again. */
static void nvsim_check_poison(u32 bar_page)
{
	void __iomem *io = nvsim_page_io(bar_page);
	u32 off;

	lockdep_assert_held(&nvsim_lock);
	for (off = 0; off < GPU_PAGE_SIZE; off += sizeof(u64)) {
		if (readq(io + off) != NVSIM_POISON_WORD) {
			st.freed_page_writes++;
			pr_err("BAR page %u written at offset %#x after its memory was freed\n",
			       bar_page, off);
			memset_io(io, NVSIM_POISON, GPU_PAGE_SIZE);
			return;
		}
	}
}

static void nvsim_alloc_destroy(struct nvsim_alloc *a)
{
	u32 i;

	for (i = 0; i < a->npages; i++) {
		nvsim_poison(a->pages[i]);
		clear_bit(a->pages[i], gpu.used);
	}
	list_del(&a->node);
	kfree(a->pages);
	kfree(a);
	st.allocations_live--;
}

/*
 * Frees an allocation as cuMemFree or process exit does: every callback pin
 * gets its free callback, synchronously and under nvsim_lock, and is then
 * torn down by nvsim. Persistent pins keep the memory alive.
 */
static void nvsim_free_alloc(struct nvsim_alloc *a)
{
	struct nvsim_pin *pin, *next;
	struct nvsim_space *s = a->space;

	lockdep_assert_held(&nvsim_lock);
	list_for_each_entry_safe(pin, next, &a->pins, node) {
		if (pin->persistent)
			continue;
		pin->free_callback(pin->data);
		st.callbacks_fired++;
		nvsim_pin_release(pin);
	}
	list_del(&a->file_node);
	list_del(&a->all_node);
	a->space = NULL;
	a->owner = NULL;
	if (list_empty(&a->pins))
		nvsim_alloc_destroy(a);
	else
		list_move(&a->node, &nvsim_zombies);
	if (s && list_empty(&s->allocs)) {
		list_del(&s->node);
		kfree(s);
	}
}

static struct workqueue_struct *nvsim_wq;
static LIST_HEAD(nvsim_delayed_frees);	/* protected by nvsim_lock */

static void nvsim_delayed_free_fn(struct work_struct *work)
{
	struct nvsim_delayed_free *df =
		container_of(to_delayed_work(work), struct nvsim_delayed_free, work);
	struct nvsim_alloc *a;

	mutex_lock(&nvsim_lock);
	list_del(&df->node);
	a = nvsim_find_by_id(df->buffer_id);
	if (a)
		nvsim_free_alloc(a);
	mutex_unlock(&nvsim_lock);
	kfree(df);
}

/* Frees allocation @buffer_id from a worker after @delay_us, firing its callbacks there. */
static void nvsim_schedule_free(u64 buffer_id, unsigned int delay_us)
{
	struct nvsim_delayed_free *df = kzalloc_obj(*df, GFP_KERNEL);

	lockdep_assert_held(&nvsim_lock);
	if (!df)
		return;
	df->buffer_id = buffer_id;
	INIT_DELAYED_WORK(&df->work, nvsim_delayed_free_fn);
	list_add(&df->node, &nvsim_delayed_frees);
	queue_delayed_work(nvsim_wq, &df->work, usecs_to_jiffies(delay_us));
}

static int nvsim_get_pages(u64 p2p_token, u32 va_space, u64 va, u64 len,
			   struct nvidia_p2p_page_table **page_table,
			   void (*free_callback)(void *data), void *data,
			   bool persistent)
{
	struct nvsim_space *s;
	struct nvsim_alloc *a;
	struct nvsim_pin *pin;
	u32 first, count;
	int ret;

	if (!page_table || !len || (va & ~GPU_PAGE_MASK) || (len & ~GPU_PAGE_MASK))
		return -EINVAL;
	if (!persistent && (!free_callback || !data))
		return -EINVAL;

	mutex_lock(&nvsim_lock);
	st.get_pages_calls++;
	ret = nvsim_fault_hit(&fault_get_pages);
	if (ret)
		goto out;
	ret = -ENODEV;
	if (!gpu.pdev)
		goto out;

	ret = -EINVAL;
	if (p2p_token)
		s = nvsim_space_by_token(p2p_token, va_space);
	else if (current->flags & PF_KTHREAD)
		s = NULL;	/* no process, no VA space */
	else
		s = nvsim_space_by_tgid(current->tgid);
	a = nvsim_find(s, va, len);
	if (!a)
		goto out;
	first = (va - a->va) >> GPU_PAGE_SHIFT;
	count = len >> GPU_PAGE_SHIFT;

	ret = -ENOMEM;
	if (st.bar1_used + nvsim_bar1_new_bytes(a, first, count) + bar1_reserve > gpu.bar1_size)
		goto out;
	pin = kzalloc_obj(*pin, GFP_KERNEL);
	if (!pin)
		goto out;
	pin->pt = nvsim_table_alloc(a, first, count);
	if (!pin->pt) {
		kfree(pin);
		goto out;
	}
	/* Pinning is expensive in the real driver; so it is here, under the lock. */
	fsleep(pin_cost_us + (unsigned long)pin_cost_per_page_us * count);

	pin->alloc = a;
	pin->first = first;
	pin->count = count;
	pin->tgid = current->tgid;
	pin->persistent = persistent;
	pin->free_callback = free_callback;
	pin->data = data;
	INIT_LIST_HEAD(&pin->maps);
	list_add_tail(&pin->node, &a->pins);
	spin_lock(&nvsim_map_lock);
	hash_add(nvsim_pins, &pin->hash, (unsigned long)pin->pt);
	spin_unlock(&nvsim_map_lock);
	nvsim_bar1_get(a, first, count);
	if (persistent)
		st.persistent_pins_live++;
	else
		st.pins_live++;
	*page_table = pin->pt;
	ret = 0;

	if (free_on_pin.buffer_id == a->buffer_id) {
		free_on_pin.buffer_id = 0;
		nvsim_schedule_free(a->buffer_id, free_on_pin.delay_us);
	}
out:
	if (ret)
		st.get_pages_failed++;
	mutex_unlock(&nvsim_lock);
	return ret;
}

int nvidia_p2p_get_pages(u64 p2p_token, u32 va_space, u64 virtual_address,
			 u64 length, struct nvidia_p2p_page_table **page_table,
			 void (*free_callback)(void *data), void *data)
{
	return nvsim_get_pages(p2p_token, va_space, virtual_address, length,
			       page_table, free_callback, data, false);
}
EXPORT_SYMBOL(nvidia_p2p_get_pages);

int nvidia_p2p_get_pages_persistent(u64 virtual_address, u64 length,
				    struct nvidia_p2p_page_table **page_table,
				    u32 flags)
{
	if (flags)
		return -EINVAL;
	return nvsim_get_pages(0, 0, virtual_address, length, page_table,
			       NULL, NULL, true);
}
EXPORT_SYMBOL(nvidia_p2p_get_pages_persistent);

static struct nvsim_pin *nvsim_pin_by_table(struct nvidia_p2p_page_table *pt)
{
	struct nvsim_pin *pin;

	hash_for_each_possible(nvsim_pins, pin, hash, (unsigned long)pt)
		if (pin->pt == pt)
			return pin;
	return NULL;
}

static void nvsim_pin_put(struct nvsim_pin *pin)
{
	struct nvsim_alloc *a = pin->alloc;
	bool mapped;

	spin_lock(&nvsim_map_lock);
	mapped = !list_empty(&pin->maps);
	spin_unlock(&nvsim_map_lock);
	if (mapped) {
		pr_err("put_pages with %s DMA mappings still live\n", "its");
		atomic64_inc(&st.client_errors);
	}
	nvsim_pin_release(pin);
	if (!a->space && list_empty(&a->pins))
		nvsim_alloc_destroy(a);	/* freed earlier, held only by this pin */
}

static u64 nvsim_pin_va(struct nvsim_pin *pin)
{
	return pin->alloc->va + ((u64)pin->first << GPU_PAGE_SHIFT);
}

int nvidia_p2p_put_pages(u64 p2p_token, u32 va_space, u64 virtual_address,
			 struct nvidia_p2p_page_table *page_table)
{
	u64 gen = nvsim_obj_gen(page_table);
	struct nvsim_pin *pin;

	nvsim_entry_delay(&put_pages_delay_us);
	mutex_lock(&nvsim_lock);
	pin = nvsim_pin_by_table(page_table);
	/*
	 * A table that was freed after its callback is only a key here: 0. The
	 * driver looks the key up with the caller's process and address, so a
	 * recycled table of another process or address is not found either. One
	 * that now belongs to a newer pin of the caller at the same address is:
	 * that pin is released, as the driver would release it.
	 */
	if (pin && nvsim_recycled_since(page_table, gen)) {
		if (pin->persistent || pin->tgid != current->tgid ||
		    nvsim_pin_va(pin) != virtual_address) {
			pin = NULL;
		} else {
			pr_err("stale put_pages(%#llx): its table was freed by the free callback and handed to a newer pin at that address while the call waited; that pin is released\n",
			       virtual_address);
			atomic64_inc(&st.client_errors);
		}
	}
	if (pin && !pin->persistent) {
		/* From another process the lookup finds nothing: 0, nothing released. */
		if (pin->tgid != current->tgid || (current->flags & PF_KTHREAD))
			st.put_pages_wrong_process++;
		else
			nvsim_pin_put(pin);
	} else if (pin) {
		pr_err("put_pages on a persistent pin\n");
		atomic64_inc(&st.client_errors);
	}
	mutex_unlock(&nvsim_lock);
	return 0;
}
EXPORT_SYMBOL(nvidia_p2p_put_pages);

int nvidia_p2p_put_pages_persistent(u64 virtual_address,
				    struct nvidia_p2p_page_table *page_table,
				    u32 flags)
{
	struct nvsim_pin *pin;
	int ret = -EINVAL;

	mutex_lock(&nvsim_lock);
	pin = nvsim_pin_by_table(page_table);
	if (pin && pin->persistent && !flags) {
		nvsim_pin_put(pin);
		ret = 0;
	} else {
		atomic64_inc(&st.client_errors);
	}
	mutex_unlock(&nvsim_lock);
	return ret;
}
EXPORT_SYMBOL(nvidia_p2p_put_pages_persistent);

/* Called from free callbacks, under nvsim_lock: must not take it. */
int nvidia_p2p_free_page_table(struct nvidia_p2p_page_table *page_table)
{
	atomic64_inc(&st.free_page_table_calls);
	return 0;
}
EXPORT_SYMBOL(nvidia_p2p_free_page_table);

/* Called from free callbacks, under nvsim_lock: must not take it. */
int nvidia_p2p_free_dma_mapping(struct nvidia_p2p_dma_mapping *dma_mapping)
{
	atomic64_inc(&st.free_dma_mapping_calls);
	return 0;
}
EXPORT_SYMBOL(nvidia_p2p_free_dma_mapping);

int nvidia_p2p_dma_map_pages(struct pci_dev *peer,
			     struct nvidia_p2p_page_table *page_table,
			     struct nvidia_p2p_dma_mapping **dma_mapping)
{
	u64 gen = nvsim_obj_gen(page_table);
	struct nvsim_pin *pin;
	struct nvsim_map *map;
	u32 i;
	int ret;

	if (!peer || !page_table || !dma_mapping)
		return -EINVAL;

	nvsim_entry_delay(&dma_map_delay_us);
	mutex_lock(&nvsim_lock);
	st.dma_map_calls++;
	ret = nvsim_fault_hit(&fault_dma_map);
	if (ret)
		goto out;
	ret = -EINVAL;
	pin = nvsim_pin_by_table(page_table);
	if (!pin)
		goto out;
	if (nvsim_recycled_since(page_table, gen)) {
		pr_err("stale dma_map_pages: its table was freed by the free callback and handed to a newer pin while the call waited; that pin's memory is mapped\n");
		atomic64_inc(&st.client_errors);
	}
	ret = -ENOMEM;
	map = nvsim_map_get();
	if (!map)
		goto out;
	map->m.dma_addresses = kcalloc(pin->count, sizeof(u64), GFP_KERNEL);
	if (!map->m.dma_addresses) {
		nvsim_map_put(map);
		goto out;
	}
	map->m.version = NVIDIA_P2P_DMA_MAPPING_VERSION;
	map->m.page_size_type = NVIDIA_P2P_PAGE_SIZE_64KB;
	map->m.pci_dev = peer;
	map->m.private = pin;
	for (i = 0; i < pin->count; i++) {
		u32 bar_page = pin->alloc->pages[pin->first + i];
		dma_addr_t addr = dma_map_resource(&peer->dev, nvsim_page_bus(bar_page),
						   GPU_PAGE_SIZE, DMA_BIDIRECTIONAL, 0);

		if (dma_mapping_error(&peer->dev, addr)) {
			map->m.entries = i;
			atomic64_inc(&st.dma_mappings_live);
			nvsim_unmap_one(map);
			ret = -EIO;
			goto out;
		}
		map->m.dma_addresses[i] = addr;
	}
	map->m.entries = pin->count;
	spin_lock(&nvsim_map_lock);
	list_add_tail(&map->node, &pin->maps);
	spin_unlock(&nvsim_map_lock);
	atomic64_inc(&st.dma_mappings_live);
	*dma_mapping = &map->m;
	ret = 0;
out:
	mutex_unlock(&nvsim_lock);
	return ret;
}
EXPORT_SYMBOL(nvidia_p2p_dma_map_pages);

int nvidia_p2p_dma_unmap_pages(struct pci_dev *peer,
			       struct nvidia_p2p_page_table *page_table,
			       struct nvidia_p2p_dma_mapping *dma_mapping)
{
	u64 table_gen = nvsim_obj_gen(page_table), map_gen = nvsim_obj_gen(dma_mapping);
	struct nvsim_map *map, *found = NULL;
	struct nvsim_pin *pin;

	if (!peer || !page_table || !dma_mapping)
		return -EINVAL;

	/* Test knob: a slow unmap, so that a free callback can come during it. */
	if (unmap_delay_us)
		fsleep(unmap_delay_us);
	/* Not nvsim_lock: the real driver takes only the mapping list's lock. */
	spin_lock(&nvsim_map_lock);
	pin = nvsim_pin_by_table(page_table);
	if (pin) {
		list_for_each_entry(map, &pin->maps, node) {
			if (&map->m == dma_mapping && !WARN_ON(map->m.pci_dev != peer)) {
				list_del(&map->node);
				found = map;
				break;
			}
		}
	}
	spin_unlock(&nvsim_map_lock);
	if (!found) {
		/* A table whose callback returned is freed memory in the real driver. */
		atomic64_inc(&st.client_errors);
		return -EINVAL;
	}
	if (nvsim_recycled_since(page_table, table_gen) ||
	    nvsim_recycled_since(dma_mapping, map_gen)) {
		pr_err("stale dma_unmap_pages: its table or mapping was freed by the free callback and handed out again while the call waited; that mapping is unmapped\n");
		atomic64_inc(&st.client_errors);
	}
	nvsim_unmap_one(found);
	return 0;
}
EXPORT_SYMBOL(nvidia_p2p_dma_unmap_pages);

/* --- /dev/nvsim: simulated GPU memory for the tests ------------------------ */

static struct nvsim_space *nvsim_space_get(pid_t tgid)
{
	struct nvsim_space *s = nvsim_space_by_tgid(tgid);

	if (s)
		return s;
	s = kzalloc_obj(*s, GFP_KERNEL);
	if (!s)
		return NULL;
	s->tgid = tgid;
	s->p2p_token = get_random_u64() | 1;	/* randomised, never 0 */
	s->va_space = get_random_u32();
	INIT_LIST_HEAD(&s->allocs);
	list_add(&s->node, &nvsim_spaces);
	return s;
}

/* First fit in @s from NVSIM_VA_BASE: a freed range is handed out again. */
static struct list_head *nvsim_va_fit(struct nvsim_space *s, u64 bytes, u64 *va)
{
	struct nvsim_alloc *a;
	u64 cand = NVSIM_VA_BASE;

	list_for_each_entry(a, &s->allocs, node) {
		if (cand + bytes <= a->va)
			break;
		cand = a->va + ((u64)a->npages << GPU_PAGE_SHIFT);
	}
	*va = cand;
	return &a->node;	/* insert before this one (or at the tail) */
}

static int nvsim_ioctl_alloc(struct nvsim_file *f, struct nvsim_alloc_args __user *uarg)
{
	struct nvsim_alloc_args req;
	struct nvsim_space *s;
	struct nvsim_alloc *a;
	struct list_head *pos;
	u64 npages;
	u32 i, p;
	int ret;

	if (copy_from_user(&req, uarg, sizeof(req)))
		return -EFAULT;
	npages = DIV_ROUND_UP_ULL(req.size, GPU_PAGE_SIZE);
	if (!req.size || npages > U32_MAX)
		return -EINVAL;

	mutex_lock(&nvsim_lock);
	ret = -ENODEV;
	if (!gpu.pdev)
		goto out;
	ret = -ENOMEM;
	if (npages > gpu.npages - bitmap_weight(gpu.used, gpu.npages))
		goto out;
	s = nvsim_space_get(current->tgid);
	if (!s)
		goto out;
	a = kzalloc_obj(*a, GFP_KERNEL);
	if (a)
		a->pages = kcalloc(npages, sizeof(*a->pages), GFP_KERNEL);
	if (!a || !a->pages) {
		if (a)
			kfree(a->pages);
		kfree(a);
		if (list_empty(&s->allocs)) {
			list_del(&s->node);
			kfree(s);
		}
		goto out;
	}
	/* Consecutive GPU pages land NVSIM_PAGE_STRIDE BAR pages apart. */
	for (i = 0, p = gpu.cursor; i < npages; i++) {
		while (test_bit(p, gpu.used))
			p = (p + 1) % gpu.npages;
		set_bit(p, gpu.used);
		if (test_and_clear_bit(p, gpu.poisoned))
			nvsim_check_poison(p);
		a->pages[i] = p;
		p = (p + NVSIM_PAGE_STRIDE) % gpu.npages;
	}
	gpu.cursor = p;
	a->npages = npages;
	a->size = req.size;
	a->buffer_id = st.buffer_id_next++;
	a->space = s;
	a->owner = f;
	INIT_LIST_HEAD(&a->pins);
	pos = nvsim_va_fit(s, npages << GPU_PAGE_SHIFT, &a->va);
	list_add_tail(&a->node, pos);
	list_add(&a->file_node, &f->allocs);
	list_add(&a->all_node, &nvsim_all_allocs);
	st.allocations_live++;
	req.va = a->va;
	req.buffer_id = a->buffer_id;
	ret = 0;
out:
	mutex_unlock(&nvsim_lock);
	if (!ret && copy_to_user(uarg, &req, sizeof(req)))
		ret = -EFAULT;	/* the allocation stays; closing the file frees it */
	return ret;
}

static int nvsim_ioctl_free(struct nvsim_file *f, u64 __user *uarg)
{
	struct nvsim_alloc *a;
	u64 va;
	int ret = -EINVAL;

	if (get_user(va, uarg))
		return -EFAULT;
	mutex_lock(&nvsim_lock);
	a = nvsim_caller_alloc(va);
	if (a && a->va == va && a->owner == f) {
		nvsim_free_alloc(a);
		ret = 0;
	}
	mutex_unlock(&nvsim_lock);
	return ret;
}

static int nvsim_ioctl_query(struct nvsim_query_args __user *uarg)
{
	struct nvsim_query_args q;
	struct nvsim_alloc *a;
	int ret = -EINVAL;

	if (copy_from_user(&q, uarg, sizeof(q)))
		return -EFAULT;
	mutex_lock(&nvsim_lock);
	a = nvsim_caller_alloc(q.va);
	if (a) {
		q.base = a->va;
		q.size = a->size;
		q.buffer_id = a->buffer_id;
		q.p2p_token = a->space->p2p_token;
		q.va_space = a->space->va_space;
		q.sync_memops = a->sync_memops;
		ret = 0;
	}
	mutex_unlock(&nvsim_lock);
	if (!ret && copy_to_user(uarg, &q, sizeof(q)))
		ret = -EFAULT;
	return ret;
}

static int nvsim_ioctl_sync_memops(struct nvsim_sync_memops_args __user *uarg)
{
	struct nvsim_sync_memops_args req;
	struct nvsim_alloc *a;
	int ret = -EINVAL;

	if (copy_from_user(&req, uarg, sizeof(req)))
		return -EFAULT;
	if (req.value > 1 || req.pad)
		return -EINVAL;
	mutex_lock(&nvsim_lock);
	a = nvsim_caller_alloc(req.va);
	if (a) {
		a->sync_memops = req.value;
		ret = 0;
	}
	mutex_unlock(&nvsim_lock);
	return ret;
}

static long nvsim_ioctl(struct file *file, unsigned int cmd, unsigned long arg)
{
	struct nvsim_file *f = file->private_data;
	void __user *uarg = (void __user *)arg;

	switch (cmd) {
	case NVSIM_IOCTL_ALLOC:
		return nvsim_ioctl_alloc(f, uarg);
	case NVSIM_IOCTL_FREE:
		return nvsim_ioctl_free(f, uarg);
	case NVSIM_IOCTL_QUERY:
		return nvsim_ioctl_query(uarg);
	case NVSIM_IOCTL_SET_SYNC_MEMOPS:
		return nvsim_ioctl_sync_memops(uarg);
	default:
		return -ENOTTY;
	}
}

/* mmap(offset = GPU va): the allocation's BAR pages, one 64 KiB page at a time. */
static int nvsim_mmap(struct file *file, struct vm_area_struct *vma)
{
	u64 va = (u64)vma->vm_pgoff << PAGE_SHIFT;
	u64 len = vma->vm_end - vma->vm_start;
	struct nvsim_alloc *a;
	u64 off;
	int ret = -EINVAL;

	mutex_lock(&nvsim_lock);
	a = nvsim_find(nvsim_space_by_tgid(current->tgid), va, len);
	if (!a)
		goto out;
	vm_flags_set(vma, VM_IO | VM_PFNMAP | VM_DONTEXPAND | VM_DONTDUMP);
	vma->vm_page_prot = pgprot_noncached(vma->vm_page_prot);
	for (off = 0; off < len;) {
		u64 gva = va + off - a->va;
		u64 in_page = gva & ~GPU_PAGE_MASK;
		u64 chunk = min(GPU_PAGE_SIZE - in_page, len - off);
		phys_addr_t phys = gpu.bar_phys +
			((phys_addr_t)a->pages[gva >> GPU_PAGE_SHIFT] << GPU_PAGE_SHIFT) + in_page;

		ret = io_remap_pfn_range(vma, vma->vm_start + off, phys >> PAGE_SHIFT,
					 chunk, vma->vm_page_prot);
		if (ret)
			goto out;
		off += chunk;
	}
	ret = 0;
out:
	mutex_unlock(&nvsim_lock);
	return ret;
}

static int nvsim_open(struct inode *inode, struct file *file)
{
	struct nvsim_file *f = kzalloc_obj(*f, GFP_KERNEL);

	if (!f)
		return -ENOMEM;
	INIT_LIST_HEAD(&f->allocs);
	file->private_data = f;
	return 0;
}

/* Like the process exiting or closing its NVIDIA fd: callbacks fire here. */
static int nvsim_release(struct inode *inode, struct file *file)
{
	struct nvsim_file *f = file->private_data;
	struct nvsim_alloc *a, *next;

	mutex_lock(&nvsim_lock);
	list_for_each_entry_safe(a, next, &f->allocs, file_node)
		nvsim_free_alloc(a);
	mutex_unlock(&nvsim_lock);
	kfree(f);
	return 0;
}

static const struct file_operations nvsim_fops = {
	.owner = THIS_MODULE,
	.open = nvsim_open,
	.release = nvsim_release,
	.unlocked_ioctl = nvsim_ioctl,
	.mmap = nvsim_mmap,
};

static struct miscdevice nvsim_misc = {
	.minor = MISC_DYNAMIC_MINOR,
	.name = "nvsim",
	.fops = &nvsim_fops,
	.mode = 0666,
};

/* --- debugfs: counters, fault injection, knobs ------------------------------ */

static struct dentry *nvsim_debugfs;

static int nvsim_stats_show(struct seq_file *m, void *unused)
{
	mutex_lock(&nvsim_lock);
	seq_printf(m, "allocations_live %llu\n", st.allocations_live);
	seq_printf(m, "pins_live %llu\n", st.pins_live);
	seq_printf(m, "persistent_pins_live %llu\n", st.persistent_pins_live);
	seq_printf(m, "dma_mappings_live %lld\n", atomic64_read(&st.dma_mappings_live));
	seq_printf(m, "bar1_used %llu\n", st.bar1_used);
	seq_printf(m, "bar1_size %llu\n", gpu.bar1_size);
	seq_printf(m, "bar1_reserve %lu\n", bar1_reserve);
	seq_printf(m, "gpu_pages %u\n", gpu.npages);
	seq_printf(m, "gpu_pages_used %u\n",
		   gpu.used ? bitmap_weight(gpu.used, gpu.npages) : 0);
	seq_printf(m, "callbacks_fired %llu\n", st.callbacks_fired);
	seq_printf(m, "get_pages_calls %llu\n", st.get_pages_calls);
	seq_printf(m, "get_pages_failed %llu\n", st.get_pages_failed);
	seq_printf(m, "dma_map_calls %llu\n", st.dma_map_calls);
	seq_printf(m, "faults_injected %llu\n", st.faults_injected);
	seq_printf(m, "put_pages_wrong_process %llu\n", st.put_pages_wrong_process);
	seq_printf(m, "client_errors %lld\n", atomic64_read(&st.client_errors));
	seq_printf(m, "calls_delayed %d\n", atomic_read(&calls_delayed));
	seq_printf(m, "freed_page_writes %llu\n", st.freed_page_writes);
	seq_printf(m, "free_page_table_calls %lld\n", atomic64_read(&st.free_page_table_calls));
	seq_printf(m, "free_dma_mapping_calls %lld\n", atomic64_read(&st.free_dma_mapping_calls));
	seq_printf(m, "page_table_version 0x%08x\n", page_table_version);
	mutex_unlock(&nvsim_lock);
	return 0;
}
DEFINE_SHOW_ATTRIBUTE(nvsim_stats);

static int nvsim_allocations_show(struct seq_file *m, void *unused)
{
	struct nvsim_alloc *a;
	struct nvsim_pin *pin;

	mutex_lock(&nvsim_lock);
	seq_puts(m, "buffer_id tgid va size pins persistent_pins\n");
	list_for_each_entry(a, &nvsim_all_allocs, all_node) {
		unsigned int pins = 0, persistent = 0;

		list_for_each_entry(pin, &a->pins, node)
			pin->persistent ? persistent++ : pins++;
		seq_printf(m, "%llu %d 0x%llx %llu %u %u\n", a->buffer_id, a->space->tgid,
			   a->va, a->size, pins, persistent);
	}
	mutex_unlock(&nvsim_lock);
	return 0;
}
DEFINE_SHOW_ATTRIBUTE(nvsim_allocations);

static ssize_t nvsim_read_line(const char __user *ubuf, size_t len, char *buf, size_t size)
{
	if (len >= size)
		return -EINVAL;
	if (copy_from_user(buf, ubuf, len))
		return -EFAULT;
	buf[len] = '\0';
	return len;
}

/* "TIMES ERRNO [PERCENT]": fail the next TIMES calls (-1: every call) with -ERRNO. */
static ssize_t nvsim_fault_write(struct file *file, const char __user *ubuf,
				 size_t len, loff_t *ppos)
{
	struct nvsim_fault *f = file->private_data, new = { .percent = 100 };
	char buf[48];
	ssize_t ret = nvsim_read_line(ubuf, len, buf, sizeof(buf));

	if (ret < 0)
		return ret;
	if (sscanf(buf, "%d %d %u", &new.times, &new.err, &new.percent) < 2 ||
	    new.times < -1 || new.err < 0 || new.err > MAX_ERRNO || new.percent > 100)
		return -EINVAL;
	mutex_lock(&nvsim_lock);
	*f = new;
	mutex_unlock(&nvsim_lock);
	return len;
}

static ssize_t nvsim_fault_read(struct file *file, char __user *ubuf, size_t len, loff_t *ppos)
{
	struct nvsim_fault *f = file->private_data;
	char buf[48];
	int n;

	mutex_lock(&nvsim_lock);
	n = scnprintf(buf, sizeof(buf), "%d %d %u\n", f->times, f->err, f->percent);
	mutex_unlock(&nvsim_lock);
	return simple_read_from_buffer(ubuf, len, ppos, buf, n);
}

static const struct file_operations nvsim_fault_fops = {
	.open = simple_open,
	.read = nvsim_fault_read,
	.write = nvsim_fault_write,
};

/* "BUFFER_ID [DELAY_US]": free now, in the writer's thread, or later from a worker. */
static ssize_t nvsim_free_write(struct file *file, const char __user *ubuf,
				size_t len, loff_t *ppos)
{
	unsigned int delay_us = 0;
	struct nvsim_alloc *a;
	char buf[48];
	ssize_t ret = nvsim_read_line(ubuf, len, buf, sizeof(buf));
	u64 id;

	if (ret < 0)
		return ret;
	if (sscanf(buf, "%llu %u", &id, &delay_us) < 1)
		return -EINVAL;
	mutex_lock(&nvsim_lock);
	a = nvsim_find_by_id(id);
	if (!a)
		ret = -ENOENT;
	else if (delay_us)
		nvsim_schedule_free(id, delay_us);
	else
		nvsim_free_alloc(a);
	mutex_unlock(&nvsim_lock);
	return ret;
}

static const struct file_operations nvsim_free_fops = {
	.open = simple_open,
	.write = nvsim_free_write,
};

/* Any write: check every freed page's poison now (freed_page_writes). */
static ssize_t nvsim_check_freed_write(struct file *file, const char __user *ubuf,
				       size_t len, loff_t *ppos)
{
	u32 p;

	mutex_lock(&nvsim_lock);
	if (gpu.pdev)
		for_each_set_bit(p, gpu.poisoned, gpu.npages)
			nvsim_check_poison(p);
	mutex_unlock(&nvsim_lock);
	return len;
}

static const struct file_operations nvsim_check_freed_fops = {
	.open = simple_open,
	.write = nvsim_check_freed_write,
};

/* "BUFFER_ID DELAY_US": after the next successful pin of it, free it from a worker. */
static ssize_t nvsim_free_on_pin_write(struct file *file, const char __user *ubuf,
				       size_t len, loff_t *ppos)
{
	unsigned int delay_us;
	char buf[48];
	ssize_t ret = nvsim_read_line(ubuf, len, buf, sizeof(buf));
	u64 id;

	if (ret < 0)
		return ret;
	if (sscanf(buf, "%llu %u", &id, &delay_us) != 2)
		return -EINVAL;
	mutex_lock(&nvsim_lock);
	free_on_pin.buffer_id = id;
	free_on_pin.delay_us = delay_us;
	mutex_unlock(&nvsim_lock);
	return len;
}

static const struct file_operations nvsim_free_on_pin_fops = {
	.open = simple_open,
	.write = nvsim_free_on_pin_write,
};

static int nvsim_bar1_size_get(void *data, u64 *val)
{
	mutex_lock(&nvsim_lock);
	*val = gpu.bar1_size;
	mutex_unlock(&nvsim_lock);
	return 0;
}

/* Shrinks (or grows) the BAR1 aperture at run time; existing pins stay. */
static int nvsim_bar1_size_set(void *data, u64 val)
{
	mutex_lock(&nvsim_lock);
	gpu.bar1_size = val;
	mutex_unlock(&nvsim_lock);
	return 0;
}
DEFINE_DEBUGFS_ATTRIBUTE(nvsim_bar1_size_fops, nvsim_bar1_size_get, nvsim_bar1_size_set, "%llu\n");

static void nvsim_debugfs_init(void)
{
	nvsim_debugfs = debugfs_create_dir("nvsim", NULL);
	debugfs_create_file("stats", 0444, nvsim_debugfs, NULL, &nvsim_stats_fops);
	debugfs_create_file("allocations", 0444, nvsim_debugfs, NULL, &nvsim_allocations_fops);
	debugfs_create_file("fail_get_pages", 0600, nvsim_debugfs, &fault_get_pages,
			    &nvsim_fault_fops);
	debugfs_create_file("fail_dma_map", 0600, nvsim_debugfs, &fault_dma_map,
			    &nvsim_fault_fops);
	debugfs_create_file("free", 0200, nvsim_debugfs, NULL, &nvsim_free_fops);
	debugfs_create_file("check_freed", 0200, nvsim_debugfs, NULL, &nvsim_check_freed_fops);
	debugfs_create_u32("unmap_delay_us", 0600, nvsim_debugfs, &unmap_delay_us);
	debugfs_create_u32("put_pages_delay_us", 0600, nvsim_debugfs, &put_pages_delay_us);
	debugfs_create_u32("dma_map_delay_us", 0600, nvsim_debugfs, &dma_map_delay_us);
	debugfs_create_file("free_on_pin", 0200, nvsim_debugfs, NULL, &nvsim_free_on_pin_fops);
	debugfs_create_file_unsafe("bar1_size", 0600, nvsim_debugfs, NULL, &nvsim_bar1_size_fops);
}

/* --- the simulated GPU: QEMU's ivshmem-plain ------------------------------- */

static int nvsim_probe(struct pci_dev *pdev, const struct pci_device_id *id)
{
	resource_size_t len = pci_resource_len(pdev, NVSIM_BAR);
	void __iomem *bar;
	int ret;

	if (gpu.pdev)
		return -EBUSY;	/* one simulated GPU */
	if (len < GPU_PAGE_SIZE || !(pci_resource_flags(pdev, NVSIM_BAR) & IORESOURCE_MEM))
		return -ENODEV;
	ret = pcim_enable_device(pdev);
	if (ret)
		return ret;
	ret = pcim_request_region(pdev, NVSIM_BAR, "nvsim");
	if (ret)
		return ret;
	ret = dma_set_mask_and_coherent(&pdev->dev, DMA_BIT_MASK(64));
	if (ret)
		return ret;
	bar = devm_ioremap(&pdev->dev, pci_resource_start(pdev, NVSIM_BAR), len);
	if (!bar)
		return -ENOMEM;

	mutex_lock(&nvsim_lock);
	gpu.npages = len >> GPU_PAGE_SHIFT;
	gpu.bar = bar;
	gpu.used = bitmap_zalloc(gpu.npages, GFP_KERNEL);
	gpu.poisoned = bitmap_zalloc(gpu.npages, GFP_KERNEL);
	gpu.bar1_refs = kcalloc(gpu.npages, sizeof(*gpu.bar1_refs), GFP_KERNEL);
	if (!gpu.used || !gpu.poisoned || !gpu.bar1_refs) {
		bitmap_free(gpu.used);
		bitmap_free(gpu.poisoned);
		kfree(gpu.bar1_refs);
		mutex_unlock(&nvsim_lock);
		return -ENOMEM;
	}
	gpu.bar_phys = pci_resource_start(pdev, NVSIM_BAR);
	gpu.bar_bus = pci_bus_address(pdev, NVSIM_BAR);
	gpu.bar1_size = len;
	gpu.cursor = 0;
	gpu.pdev = pdev;
	mutex_unlock(&nvsim_lock);
	pci_info(pdev, "simulated GPU: BAR1 %pR (bus %pad), %u pages of 64 KiB, page tables v%u.%u\n",
		 &pdev->resource[NVSIM_BAR], &gpu.bar_bus, gpu.npages,
		 page_table_version >> 16, page_table_version & 0xffff);
	return 0;
}

/* The GPU goes away: its memory is freed as on process exit, persistent pins too. */
static void nvsim_remove(struct pci_dev *pdev)
{
	struct nvsim_alloc *a, *next;
	struct nvsim_pin *pin, *pnext;

	mutex_lock(&nvsim_lock);
	list_for_each_entry_safe(a, next, &nvsim_all_allocs, all_node)
		nvsim_free_alloc(a);
	list_for_each_entry_safe(a, next, &nvsim_zombies, node) {
		list_for_each_entry_safe(pin, pnext, &a->pins, node) {
			pr_err("persistent pin left at GPU removal\n");
			atomic64_inc(&st.client_errors);
			nvsim_pin_put(pin);
		}
	}
	bitmap_free(gpu.used);
	bitmap_free(gpu.poisoned);
	kfree(gpu.bar1_refs);
	gpu.used = NULL;
	gpu.poisoned = NULL;
	gpu.bar = NULL;
	gpu.bar1_refs = NULL;
	gpu.pdev = NULL;
	mutex_unlock(&nvsim_lock);
}

static const struct pci_device_id nvsim_ids[] = {
	{ PCI_DEVICE(NVSIM_VENDOR_ID, NVSIM_DEVICE_ID) },
	{ }
};
MODULE_DEVICE_TABLE(pci, nvsim_ids);

static struct pci_driver nvsim_driver = {
	.name = "nvsim",
	.id_table = nvsim_ids,
	.probe = nvsim_probe,
	.remove = nvsim_remove,
};

static int __init nvsim_init(void)
{
	int ret;

	if (page_table_version != 0x00010002 && page_table_version != 0x00020000 &&
	    page_table_version != 0x00030000) {
		pr_err("page_table_version must be 0x00010002, 0x00020000 or 0x00030000\n");
		return -EINVAL;
	}
	nvsim_wq = alloc_workqueue("nvsim", WQ_UNBOUND, 0);
	if (!nvsim_wq)
		return -ENOMEM;
	nvsim_debugfs_init();
	ret = misc_register(&nvsim_misc);
	if (ret)
		goto err_misc;
	ret = pci_register_driver(&nvsim_driver);
	if (ret)
		goto err_pci;
	return 0;

err_pci:
	misc_deregister(&nvsim_misc);
err_misc:
	debugfs_remove_recursive(nvsim_debugfs);
	destroy_workqueue(nvsim_wq);
	return ret;
}

static void __exit nvsim_exit(void)
{
	struct nvsim_delayed_free *df;

	misc_deregister(&nvsim_misc);
	debugfs_remove_recursive(nvsim_debugfs);
	/* Run armed frees now, then wait for them. */
	mutex_lock(&nvsim_lock);
	list_for_each_entry(df, &nvsim_delayed_frees, node)
		mod_delayed_work(nvsim_wq, &df->work, 0);
	mutex_unlock(&nvsim_lock);
	destroy_workqueue(nvsim_wq);
	pci_unregister_driver(&nvsim_driver);
	nvsim_objs_destroy();
}

module_init(nvsim_init);
module_exit(nvsim_exit);

MODULE_DESCRIPTION("Simulator of the NVIDIA nv-p2p interface for gdrpeer tests");
MODULE_LICENSE("Dual MIT/GPL");
