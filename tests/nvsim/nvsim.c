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
 * - small allocations carved from shared 2 MiB pool blocks; VMM objects
 *   (reservations, physical allocations, mappings), a mapping pinned and
 *   called back like an allocation;
 * - persistent-pin flags; a cache-coherent platform (module parameter
 *   coherent) whose pins bypass BAR1 unless FORCE_BAR1_MAPPING asks for it;
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
#include <linux/timekeeping.h>
#include <linux/uaccess.h>
#include <linux/vmalloc.h>
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
#define NVSIM_VMM_VA_BASE 0x10000000000ULL	/* first reserved VMM range (1 TiB) */
#define NVSIM_POOL_BLOCK (2ULL << 20)	/* pool block of sub-allocations */
#define NVSIM_SUB_ALIGN 256		/* cudaMalloc's alignment guarantee */
#define NVSIM_PAGE_STRIDE 7		/* consecutive GPU pages are not contiguous in the BAR */
#define NVSIM_POISON 0x6b

static unsigned int page_table_version = 0x00020000;
module_param(page_table_version, uint, 0444);
MODULE_PARM_DESC(page_table_version,
		 "Page-table version to hand out: 0x00010002 (drivers up to 570), 0x00020000 (580+), or 0x00030000 (a future major, to test clients' version checks)");

static bool coherent;
module_param(coherent, bool, 0444);
MODULE_PARM_DESC(coherent,
		 "Simulate a cache-coherent platform: 2.x tables carry CPU_CACHEABLE and pins use no BAR1, unless persistent with NVIDIA_P2P_FLAGS_FORCE_BAR1_MAPPING (default 0)");

static unsigned int pin_cost_us = 100;
module_param(pin_cost_us, uint, 0644);
MODULE_PARM_DESC(pin_cost_us, "Fixed cost of a pin in microseconds, spent sleeping (default 100)");

static unsigned int pin_cost_per_page_us = 1;
module_param(pin_cost_per_page_us, uint, 0644);
MODULE_PARM_DESC(pin_cost_per_page_us, "Cost of a pin per 64 KiB page in microseconds (default 1)");

static unsigned long bar1_reserve = 36UL << 20;
module_param(bar1_reserve, ulong, 0444);
MODULE_PARM_DESC(bar1_reserve, "BAR1 bytes kept back from pinning, as the driver does (default 36 MiB)");

static bool gdrdrv_standin;
module_param(gdrdrv_standin, bool, 0444);
MODULE_PARM_DESC(gdrdrv_standin,
		 "Register a misc device named gdrdrv that answers nothing, standing in for gdrcopy's gdrdrv, so that gdrpeer finds /dev/gdrdrv taken (default 0)");

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
	u64 buffer_id_next, vmm_handle_next;
	u64 vmm_reservations_live, vmm_handles_live, suballocations_live;
	u64 persistent_flags_last, put_persistent_flags_last, force_bar1_pins;
	atomic64_t free_page_table_calls, free_dma_mapping_calls;
	atomic64_t dma_mappings_live, client_errors;	/* also changed without nvsim_lock */
	/*
	 * Time spent in get_pages and put_pages (persistent or not), entry to
	 * return, cost-model sleep and lock wait included; and put_pages calls.
	 * What a client's own overhead is measured against (gdrpeer-bench).
	 */
	atomic64_t get_pages_ns, put_pages_ns, put_pages_calls;
} st = { .buffer_id_next = 1, .vmm_handle_next = 1 };

/* A process's GPU virtual address space. */
struct nvsim_space {
	struct list_head node;		/* in nvsim_spaces */
	pid_t tgid;
	u64 p2p_token;
	u32 va_space;
	struct list_head allocs;	/* sorted by va */
	struct list_head reserves;	/* VMM reservations, sorted by va */
};

/* A VMM reservation (cuMemAddressReserve): VA only. */
struct nvsim_reserve {
	struct list_head node;		/* in space->reserves */
	struct list_head file_node;	/* in owner->reserves */
	struct nvsim_space *space;
	u64 va, size;
};

/*
 * A VMM physical allocation (cuMemCreate). Its pages live while the handle
 * is not released or a mapping (an nvsim_alloc, live or held by persistent
 * pins) uses them.
 */
struct nvsim_phys {
	struct list_head file_node;	/* in owner->phys until released */
	struct list_head all_node;	/* in nvsim_all_phys until freed */
	u64 handle, size;
	u32 npages;
	u32 *pages;
	unsigned int refs;		/* the handle + each mapping */
};

/* A buffer carved from a pool block (small cuMemAlloc). */
struct nvsim_sub {
	struct list_head node;		/* in block->subs, sorted by va */
	u64 va, size, buffer_id;
	bool sync_memops;
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
	bool pool;			/* a pool block: buffers are in subs */
	struct list_head subs;
	struct nvsim_phys *phys;	/* a VMM mapping: pages are phys's */
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
	bool bar1;			/* mapped through BAR1 (not a coherent pin) */
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
	struct list_head reserves;
	struct list_head phys;
};

static LIST_HEAD(nvsim_spaces);
static LIST_HEAD(nvsim_zombies);	/* freed, still held by persistent pins */
static LIST_HEAD(nvsim_all_allocs);
static LIST_HEAD(nvsim_all_phys);
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

/* The live allocation with @buffer_id, or the pool block of the buffer with it (*subp). */
static struct nvsim_alloc *nvsim_find_by_id(u64 buffer_id, struct nvsim_sub **subp)
{
	struct nvsim_alloc *a;
	struct nvsim_sub *sub;

	*subp = NULL;
	list_for_each_entry(a, &nvsim_all_allocs, all_node) {
		if (a->buffer_id == buffer_id)
			return a;
		list_for_each_entry(sub, &a->subs, node) {
			if (sub->buffer_id == buffer_id) {
				*subp = sub;
				return a;
			}
		}
	}
	return NULL;
}

/*
 * The calling process's allocation whose requested size covers @va, or NULL;
 * in a pool block, only where a buffer covers @va, returned in *subp.
 */
static struct nvsim_alloc *nvsim_caller_alloc(u64 va, struct nvsim_sub **subp)
{
	struct nvsim_alloc *a = nvsim_find(nvsim_space_by_tgid(current->tgid), va, 1);
	struct nvsim_sub *sub;

	*subp = NULL;
	if (!a || !a->pool)
		return a && va < a->va + a->size ? a : NULL;
	list_for_each_entry(sub, &a->subs, node) {
		if (va >= sub->va && va < sub->va + sub->size) {
			*subp = sub;
			return a;
		}
	}
	return NULL;
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

static struct nvidia_p2p_page_table *nvsim_table_alloc(struct nvsim_alloc *a, u32 first, u32 count,
						      bool bar1)
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
	/*
	 * A coherent pin carries the memory's CPU physical address (the same
	 * as the bus address in the guest) and CPU_CACHEABLE; 1.x tables have
	 * no flags word.
	 */
	if (page_table_version >> 16 >= 2 && !bar1)
		pt->flags = NVIDIA_P2P_PAGE_TABLE_FLAGS_CPU_CACHEABLE;
	for (i = 0; i < count; i++) {
		u32 bar_page = a->pages[first + i];

		pages[i].physical_address = bar1 ? nvsim_page_bus(bar_page) :
			gpu.bar_phys + ((phys_addr_t)bar_page << GPU_PAGE_SHIFT);
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
	if (pin->bar1)
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

static void nvsim_pages_free(u32 *pages, u32 npages)
{
	u32 i;

	for (i = 0; i < npages; i++) {
		nvsim_poison(pages[i]);
		clear_bit(pages[i], gpu.used);
	}
	kfree(pages);
}

/* Drops a reference to a VMM physical allocation; the last one frees its pages. */
static void nvsim_phys_put(struct nvsim_phys *phys)
{
	lockdep_assert_held(&nvsim_lock);
	if (--phys->refs)
		return;
	nvsim_pages_free(phys->pages, phys->npages);
	list_del(&phys->all_node);
	kfree(phys);
	st.vmm_handles_live--;
}

static void nvsim_alloc_destroy(struct nvsim_alloc *a)
{
	struct nvsim_sub *sub, *next;

	if (a->phys)
		nvsim_phys_put(a->phys);
	else
		nvsim_pages_free(a->pages, a->npages);
	list_for_each_entry_safe(sub, next, &a->subs, node) {
		kfree(sub);
		st.suballocations_live--;
	}
	list_del(&a->node);
	kfree(a);
	st.allocations_live--;
}

static void nvsim_space_put_if_empty(struct nvsim_space *s)
{
	if (s && list_empty(&s->allocs) && list_empty(&s->reserves)) {
		list_del(&s->node);
		kfree(s);
	}
}

static void nvsim_fire_callback(struct nvsim_pin *pin)
{
	pin->free_callback(pin->data);
	st.callbacks_fired++;
	nvsim_pin_release(pin);
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
	list_for_each_entry_safe(pin, next, &a->pins, node)
		if (!pin->persistent)
			nvsim_fire_callback(pin);
	list_del(&a->file_node);
	list_del(&a->all_node);
	a->space = NULL;
	a->owner = NULL;
	if (list_empty(&a->pins))
		nvsim_alloc_destroy(a);
	else
		list_move(&a->node, &nvsim_zombies);
	nvsim_space_put_if_empty(s);
}

static u64 nvsim_pin_va(struct nvsim_pin *pin)
{
	return pin->alloc->va + ((u64)pin->first << GPU_PAGE_SHIFT);
}

/*
 * Frees buffer @sub of pool block @a as cuMemFree does: the free callbacks
 * of the pins over the 64 KiB pages the buffer occupied fire, and the block
 * goes (with every pin over it) when its last buffer does. The freed bytes
 * are not poisoned: the pages stay in use by the block.
 */
static void nvsim_free_sub(struct nvsim_alloc *a, struct nvsim_sub *sub)
{
	u64 lo = round_down(sub->va, GPU_PAGE_SIZE);
	u64 hi = round_up(sub->va + sub->size, GPU_PAGE_SIZE);
	struct nvsim_pin *pin, *next;

	lockdep_assert_held(&nvsim_lock);
	list_del(&sub->node);
	kfree(sub);
	st.suballocations_live--;
	if (list_empty(&a->subs)) {
		nvsim_free_alloc(a);
		return;
	}
	list_for_each_entry_safe(pin, next, &a->pins, node) {
		u64 va = nvsim_pin_va(pin);

		if (!pin->persistent && va < hi &&
		    va + ((u64)pin->count << GPU_PAGE_SHIFT) > lo)
			nvsim_fire_callback(pin);
	}
}

/* Frees what debugfs names by @buffer_id: an allocation or a pool block's buffer. */
static bool nvsim_free_by_id(u64 buffer_id)
{
	struct nvsim_sub *sub;
	struct nvsim_alloc *a = nvsim_find_by_id(buffer_id, &sub);

	if (a && sub)
		nvsim_free_sub(a, sub);
	else if (a)
		nvsim_free_alloc(a);
	return a;
}

static struct workqueue_struct *nvsim_wq;
static LIST_HEAD(nvsim_delayed_frees);	/* protected by nvsim_lock */

static void nvsim_delayed_free_fn(struct work_struct *work)
{
	struct nvsim_delayed_free *df =
		container_of(to_delayed_work(work), struct nvsim_delayed_free, work);

	mutex_lock(&nvsim_lock);
	list_del(&df->node);
	nvsim_free_by_id(df->buffer_id);
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

/* Whether @pin covers allocation @buffer_id, or a pool block's buffer with it. */
static bool nvsim_pin_has_id(struct nvsim_pin *pin, u64 buffer_id)
{
	u64 lo = nvsim_pin_va(pin), hi = lo + ((u64)pin->count << GPU_PAGE_SHIFT);
	struct nvsim_sub *sub;

	if (pin->alloc->buffer_id == buffer_id)
		return true;
	list_for_each_entry(sub, &pin->alloc->subs, node)
		if (sub->buffer_id == buffer_id)
			return sub->va < hi && sub->va + sub->size > lo;
	return false;
}

static int nvsim_do_get_pages(u64 p2p_token, u32 va_space, u64 va, u64 len,
			      struct nvidia_p2p_page_table **page_table,
			      void (*free_callback)(void *data), void *data,
			      bool persistent, bool force_bar1)
{
	bool bar1 = !coherent || force_bar1;
	unsigned long cost_us;
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
	/* Tokens are not supported for cuMemCreate memory. */
	if (!a || (p2p_token && a->phys))
		goto out;
	first = (va - a->va) >> GPU_PAGE_SHIFT;
	count = len >> GPU_PAGE_SHIFT;

	ret = -ENOMEM;
	if (bar1 &&
	    st.bar1_used + nvsim_bar1_new_bytes(a, first, count) + bar1_reserve > gpu.bar1_size)
		goto out;
	pin = kzalloc_obj(*pin, GFP_KERNEL);
	if (!pin)
		goto out;
	pin->pt = nvsim_table_alloc(a, first, count, bar1);
	if (!pin->pt) {
		kfree(pin);
		goto out;
	}
	/*
	 * Pinning is expensive in the real driver; so it is here, under the lock.
	 * An hrtimer sleep, never shorter than asked: fsleep() of 20 ms and more
	 * is msleep(), which counts jiffies from a value that may lag the clock
	 * get_pages_ns is read from.
	 */
	cost_us = pin_cost_us + (unsigned long)pin_cost_per_page_us * count;
	if (cost_us)
		usleep_range(cost_us, cost_us + cost_us / 4);

	pin->alloc = a;
	pin->first = first;
	pin->count = count;
	pin->tgid = current->tgid;
	pin->persistent = persistent;
	pin->bar1 = bar1;
	pin->free_callback = free_callback;
	pin->data = data;
	INIT_LIST_HEAD(&pin->maps);
	list_add_tail(&pin->node, &a->pins);
	spin_lock(&nvsim_map_lock);
	hash_add(nvsim_pins, &pin->hash, (unsigned long)pin->pt);
	spin_unlock(&nvsim_map_lock);
	if (bar1)
		nvsim_bar1_get(a, first, count);
	if (persistent)
		st.persistent_pins_live++;
	else
		st.pins_live++;
	if (force_bar1)
		st.force_bar1_pins++;
	*page_table = pin->pt;
	ret = 0;

	if (free_on_pin.buffer_id && nvsim_pin_has_id(pin, free_on_pin.buffer_id)) {
		nvsim_schedule_free(free_on_pin.buffer_id, free_on_pin.delay_us);
		free_on_pin.buffer_id = 0;
	}
out:
	if (ret)
		st.get_pages_failed++;
	mutex_unlock(&nvsim_lock);
	return ret;
}

static int nvsim_get_pages(u64 p2p_token, u32 va_space, u64 va, u64 len,
			   struct nvidia_p2p_page_table **page_table,
			   void (*free_callback)(void *data), void *data,
			   bool persistent, bool force_bar1)
{
	u64 start = ktime_get_ns();
	int ret = nvsim_do_get_pages(p2p_token, va_space, va, len, page_table,
				     free_callback, data, persistent, force_bar1);

	atomic64_add(ktime_get_ns() - start, &st.get_pages_ns);
	return ret;
}

int nvidia_p2p_get_pages(u64 p2p_token, u32 va_space, u64 virtual_address,
			 u64 length, struct nvidia_p2p_page_table **page_table,
			 void (*free_callback)(void *data), void *data)
{
	return nvsim_get_pages(p2p_token, va_space, virtual_address, length,
			       page_table, free_callback, data, false, false);
}
EXPORT_SYMBOL(nvidia_p2p_get_pages);

int nvidia_p2p_get_pages_persistent(u64 virtual_address, u64 length,
				    struct nvidia_p2p_page_table **page_table,
				    u32 flags)
{
	/* Recorded for the tests (stats: persistent_flags_last), whatever the outcome. */
	WRITE_ONCE(st.persistent_flags_last, flags);
	if (flags & ~NVIDIA_P2P_FLAGS_FORCE_BAR1_MAPPING)
		return -EINVAL;
	return nvsim_get_pages(0, 0, virtual_address, length, page_table, NULL, NULL,
			       true, flags & NVIDIA_P2P_FLAGS_FORCE_BAR1_MAPPING);
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

/* Counts a put_pages call (persistent or not) that started at @start. */
static void nvsim_put_pages_timed(u64 start)
{
	atomic64_inc(&st.put_pages_calls);
	atomic64_add(ktime_get_ns() - start, &st.put_pages_ns);
}

int nvidia_p2p_put_pages(u64 p2p_token, u32 va_space, u64 virtual_address,
			 struct nvidia_p2p_page_table *page_table)
{
	u64 gen = nvsim_obj_gen(page_table), start = ktime_get_ns();
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
	nvsim_put_pages_timed(start);
	return 0;
}
EXPORT_SYMBOL(nvidia_p2p_put_pages);

int nvidia_p2p_put_pages_persistent(u64 virtual_address,
				    struct nvidia_p2p_page_table *page_table,
				    u32 flags)
{
	u64 start = ktime_get_ns();
	struct nvsim_pin *pin;
	int ret = -EINVAL;

	WRITE_ONCE(st.put_persistent_flags_last, flags);
	if (flags & ~NVIDIA_P2P_FLAGS_FORCE_BAR1_MAPPING)
		return -EINVAL;
	mutex_lock(&nvsim_lock);
	pin = nvsim_pin_by_table(page_table);
	if (pin && pin->persistent) {
		nvsim_pin_put(pin);
		ret = 0;
	} else {
		atomic64_inc(&st.client_errors);
	}
	mutex_unlock(&nvsim_lock);
	nvsim_put_pages_timed(start);
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
	INIT_LIST_HEAD(&s->reserves);
	list_add(&s->node, &nvsim_spaces);
	return s;
}

/* First fit in @s from NVSIM_VA_BASE: a freed range is handed out again. */
static u64 nvsim_va_fit(struct nvsim_space *s, u64 bytes)
{
	struct nvsim_alloc *a;
	u64 cand = NVSIM_VA_BASE;

	list_for_each_entry(a, &s->allocs, node) {
		if (cand + bytes <= a->va)
			break;
		cand = a->va + ((u64)a->npages << GPU_PAGE_SHIFT);
	}
	return cand;
}

/* Whether an allocation of @s overlaps [va, va + len). */
static bool nvsim_va_used(struct nvsim_space *s, u64 va, u64 len)
{
	struct nvsim_alloc *a;

	list_for_each_entry(a, &s->allocs, node)
		if (a->va < va + len && a->va + ((u64)a->npages << GPU_PAGE_SHIFT) > va)
			return true;
	return false;
}

/* Takes @npages free GPU pages, NVSIM_PAGE_STRIDE BAR pages apart, into *pagesp. */
static int nvsim_pages_take(u32 **pagesp, u64 npages)
{
	u32 *pages, i, p;

	lockdep_assert_held(&nvsim_lock);
	if (!gpu.pdev)
		return -ENODEV;
	if (npages > gpu.npages - bitmap_weight(gpu.used, gpu.npages))
		return -ENOMEM;
	pages = kcalloc(npages, sizeof(*pages), GFP_KERNEL);
	if (!pages)
		return -ENOMEM;
	for (i = 0, p = gpu.cursor; i < npages; i++) {
		while (test_bit(p, gpu.used))
			p = (p + 1) % gpu.npages;
		set_bit(p, gpu.used);
		if (test_and_clear_bit(p, gpu.poisoned))
			nvsim_check_poison(p);
		pages[i] = p;
		p = (p + NVSIM_PAGE_STRIDE) % gpu.npages;
	}
	gpu.cursor = p;
	*pagesp = pages;
	return 0;
}

/* Gives @a (its va set) a buffer id and links it into @s, in va order, and @f. */
static void nvsim_alloc_insert(struct nvsim_file *f, struct nvsim_space *s, struct nvsim_alloc *a)
{
	struct nvsim_alloc *b;

	a->buffer_id = st.buffer_id_next++;
	a->space = s;
	a->owner = f;
	INIT_LIST_HEAD(&a->pins);
	INIT_LIST_HEAD(&a->subs);
	list_for_each_entry(b, &s->allocs, node)
		if (b->va > a->va)
			break;
	list_add_tail(&a->node, &b->node);
	list_add(&a->file_node, &f->allocs);
	list_add(&a->all_node, &nvsim_all_allocs);
	st.allocations_live++;
}

/* A new allocation of @size bytes for the calling process, owned by @f, or an ERR_PTR. */
static struct nvsim_alloc *nvsim_alloc_new(struct nvsim_file *f, u64 size)
{
	u64 npages = DIV_ROUND_UP_ULL(size, GPU_PAGE_SIZE);
	struct nvsim_space *s;
	struct nvsim_alloc *a;
	int ret;

	lockdep_assert_held(&nvsim_lock);
	if (!gpu.pdev)
		return ERR_PTR(-ENODEV);
	s = nvsim_space_get(current->tgid);
	if (!s)
		return ERR_PTR(-ENOMEM);
	a = kzalloc_obj(*a, GFP_KERNEL);
	ret = a ? nvsim_pages_take(&a->pages, npages) : -ENOMEM;
	if (ret) {
		kfree(a);
		nvsim_space_put_if_empty(s);
		return ERR_PTR(ret);
	}
	a->npages = npages;
	a->size = size;
	a->va = nvsim_va_fit(s, npages << GPU_PAGE_SHIFT);
	nvsim_alloc_insert(f, s, a);
	return a;
}

/* The first 256-byte aligned gap of @need bytes in pool block @a (0: none); *pos: before it. */
static u64 nvsim_sub_fit(struct nvsim_alloc *a, u64 need, struct list_head **pos)
{
	struct nvsim_sub *sub;
	u64 cand = a->va;

	list_for_each_entry(sub, &a->subs, node) {
		if (cand + need <= sub->va)
			break;
		cand = round_up(sub->va + sub->size, NVSIM_SUB_ALIGN);
	}
	*pos = &sub->node;
	return cand + need <= a->va + a->size ? cand : 0;
}

/* Carves a buffer from the first of @f's pool blocks with room, or from a new block. */
static int nvsim_sub_alloc(struct nvsim_file *f, struct nvsim_alloc_args *req)
{
	struct nvsim_space *s = nvsim_space_by_tgid(current->tgid);
	u64 need = round_up(req->size, NVSIM_SUB_ALIGN), va = 0;
	struct nvsim_alloc *a = NULL, *b;
	struct list_head *pos = NULL;
	struct nvsim_sub *sub;

	sub = kzalloc_obj(*sub, GFP_KERNEL);
	if (!sub)
		return -ENOMEM;
	if (s) {
		list_for_each_entry(b, &s->allocs, node) {
			if (b->pool && b->owner == f) {
				va = nvsim_sub_fit(b, need, &pos);
				if (va) {
					a = b;
					break;
				}
			}
		}
	}
	if (!a) {
		a = nvsim_alloc_new(f, NVSIM_POOL_BLOCK);
		if (IS_ERR(a)) {
			kfree(sub);
			return PTR_ERR(a);
		}
		a->pool = true;
		va = a->va;
		pos = &a->subs;
	}
	sub->va = va;
	sub->size = req->size;
	sub->buffer_id = st.buffer_id_next++;
	list_add_tail(&sub->node, pos);
	st.suballocations_live++;
	req->va = va;
	req->buffer_id = sub->buffer_id;
	return 0;
}

static int nvsim_ioctl_alloc(struct nvsim_file *f, struct nvsim_alloc_args __user *uarg)
{
	struct nvsim_alloc_args req;
	struct nvsim_alloc *a;
	int ret = 0;

	if (copy_from_user(&req, uarg, sizeof(req)))
		return -EFAULT;
	if (!req.size || DIV_ROUND_UP_ULL(req.size, GPU_PAGE_SIZE) > U32_MAX || req.pad ||
	    (req.flags & ~NVSIM_ALLOC_SUBALLOC) ||
	    ((req.flags & NVSIM_ALLOC_SUBALLOC) && req.size >= NVSIM_POOL_BLOCK))
		return -EINVAL;

	mutex_lock(&nvsim_lock);
	if (req.flags & NVSIM_ALLOC_SUBALLOC) {
		ret = nvsim_sub_alloc(f, &req);
	} else {
		a = nvsim_alloc_new(f, req.size);
		if (IS_ERR(a)) {
			ret = PTR_ERR(a);
		} else {
			req.va = a->va;
			req.buffer_id = a->buffer_id;
		}
	}
	mutex_unlock(&nvsim_lock);
	if (!ret && copy_to_user(uarg, &req, sizeof(req)))
		ret = -EFAULT;	/* the allocation stays; closing the file frees it */
	return ret;
}

/* cuMemFree: an allocation or a pool block's buffer, by its base; not a VMM mapping. */
static int nvsim_ioctl_free(struct nvsim_file *f, u64 __user *uarg)
{
	struct nvsim_sub *sub;
	struct nvsim_alloc *a;
	u64 va;
	int ret = -EINVAL;

	if (get_user(va, uarg))
		return -EFAULT;
	mutex_lock(&nvsim_lock);
	a = nvsim_caller_alloc(va, &sub);
	if (a && a->owner == f && sub && sub->va == va) {
		nvsim_free_sub(a, sub);
		ret = 0;
	} else if (a && a->owner == f && !sub && !a->phys && a->va == va) {
		nvsim_free_alloc(a);
		ret = 0;
	}
	mutex_unlock(&nvsim_lock);
	return ret;
}

static int nvsim_ioctl_query(struct nvsim_query_args __user *uarg)
{
	struct nvsim_query_args q;
	struct nvsim_sub *sub;
	struct nvsim_alloc *a;
	int ret = -EINVAL;

	if (copy_from_user(&q, uarg, sizeof(q)))
		return -EFAULT;
	mutex_lock(&nvsim_lock);
	a = nvsim_caller_alloc(q.va, &sub);
	if (a) {
		q.base = sub ? sub->va : a->va;
		q.size = sub ? sub->size : a->size;
		q.buffer_id = sub ? sub->buffer_id : a->buffer_id;
		q.sync_memops = sub ? sub->sync_memops : a->sync_memops;
		q.p2p_token = a->space->p2p_token;
		q.va_space = a->space->va_space;
		q.flags = (sub ? NVSIM_QUERY_SUBALLOC : 0) | (a->phys ? NVSIM_QUERY_VMM : 0);
		q.pad = 0;
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
	struct nvsim_sub *sub;
	struct nvsim_alloc *a;
	int ret = -EINVAL;

	if (copy_from_user(&req, uarg, sizeof(req)))
		return -EFAULT;
	if (req.value > 1 || req.pad)
		return -EINVAL;
	mutex_lock(&nvsim_lock);
	a = nvsim_caller_alloc(req.va, &sub);
	if (sub)
		sub->sync_memops = req.value;
	else if (a)
		a->sync_memops = req.value;
	ret = a ? 0 : -EINVAL;
	mutex_unlock(&nvsim_lock);
	return ret;
}

/* --- VMM: reservations, physical allocations, mappings ---------------------- */

static bool nvsim_vmm_size_ok(u64 size)
{
	return size && !(size % NVSIM_VMM_GRANULARITY) && size <= (1ULL << 40);
}

static void nvsim_reserve_free(struct nvsim_reserve *r)
{
	list_del(&r->node);
	list_del(&r->file_node);
	nvsim_space_put_if_empty(r->space);
	kfree(r);
	st.vmm_reservations_live--;
}

/* cuMemAddressReserve: first fit from NVSIM_VMM_VA_BASE, granularity-aligned. */
static int nvsim_ioctl_vmm_reserve(struct nvsim_file *f,
				   struct nvsim_vmm_reserve_args __user *uarg)
{
	struct nvsim_vmm_reserve_args req;
	struct nvsim_reserve *r, *o;
	struct nvsim_space *s;
	u64 cand = NVSIM_VMM_VA_BASE;
	int ret = -ENOMEM;

	if (copy_from_user(&req, uarg, sizeof(req)))
		return -EFAULT;
	if (!nvsim_vmm_size_ok(req.size))
		return -EINVAL;
	r = kzalloc_obj(*r, GFP_KERNEL);
	if (!r)
		return -ENOMEM;
	mutex_lock(&nvsim_lock);
	s = nvsim_space_get(current->tgid);
	if (!s) {
		kfree(r);
		goto out;
	}
	list_for_each_entry(o, &s->reserves, node) {
		if (cand + req.size <= o->va)
			break;
		cand = o->va + o->size;
	}
	r->va = cand;
	r->size = req.size;
	r->space = s;
	list_add_tail(&r->node, &o->node);
	list_add(&r->file_node, &f->reserves);
	st.vmm_reservations_live++;
	req.va = r->va;
	ret = 0;
out:
	mutex_unlock(&nvsim_lock);
	if (!ret && copy_to_user(uarg, &req, sizeof(req)))
		ret = -EFAULT;	/* the reservation stays; closing the file frees it */
	return ret;
}

/* cuMemAddressFree: exactly a reservation of @f, with nothing mapped in it (else -EBUSY). */
static int nvsim_ioctl_vmm_unreserve(struct nvsim_file *f,
				     struct nvsim_vmm_range_args __user *uarg)
{
	struct nvsim_vmm_range_args req;
	struct nvsim_reserve *r;
	int ret = -EINVAL;

	if (copy_from_user(&req, uarg, sizeof(req)))
		return -EFAULT;
	mutex_lock(&nvsim_lock);
	list_for_each_entry(r, &f->reserves, file_node) {
		if (r->va != req.va || r->size != req.size)
			continue;
		ret = -EBUSY;
		if (!nvsim_va_used(r->space, r->va, r->size)) {
			nvsim_reserve_free(r);
			ret = 0;
		}
		break;
	}
	mutex_unlock(&nvsim_lock);
	return ret;
}

/* cuMemCreate: physical memory, named by a handle, mapped nowhere yet. */
static int nvsim_ioctl_vmm_create(struct nvsim_file *f,
				  struct nvsim_vmm_create_args __user *uarg)
{
	struct nvsim_vmm_create_args req;
	struct nvsim_phys *phys;
	int ret;

	if (copy_from_user(&req, uarg, sizeof(req)))
		return -EFAULT;
	if (!nvsim_vmm_size_ok(req.size))
		return -EINVAL;
	phys = kzalloc_obj(*phys, GFP_KERNEL);
	if (!phys)
		return -ENOMEM;
	mutex_lock(&nvsim_lock);
	ret = nvsim_pages_take(&phys->pages, req.size >> GPU_PAGE_SHIFT);
	if (ret) {
		kfree(phys);
	} else {
		phys->npages = req.size >> GPU_PAGE_SHIFT;
		phys->size = req.size;
		phys->handle = st.vmm_handle_next++;
		phys->refs = 1;
		list_add(&phys->file_node, &f->phys);
		list_add(&phys->all_node, &nvsim_all_phys);
		st.vmm_handles_live++;
		req.handle = phys->handle;
	}
	mutex_unlock(&nvsim_lock);
	if (!ret && copy_to_user(uarg, &req, sizeof(req)))
		ret = -EFAULT;	/* the allocation stays; closing the file frees it */
	return ret;
}

static struct nvsim_phys *nvsim_phys_by_handle(struct nvsim_file *f, u64 handle)
{
	struct nvsim_phys *phys;

	list_for_each_entry(phys, &f->phys, file_node)
		if (phys->handle == handle)
			return phys;
	return NULL;
}

/* Drops the handle's reference on a physical allocation of @f. */
static void nvsim_phys_release(struct nvsim_phys *phys)
{
	list_del(&phys->file_node);
	nvsim_phys_put(phys);
}

/* cuMemRelease: the memory goes when its last mapping does. */
static int nvsim_ioctl_vmm_release(struct nvsim_file *f, u64 __user *uarg)
{
	struct nvsim_phys *phys;
	u64 handle;
	int ret = -EINVAL;

	if (get_user(handle, uarg))
		return -EFAULT;
	mutex_lock(&nvsim_lock);
	phys = nvsim_phys_by_handle(f, handle);
	if (phys) {
		nvsim_phys_release(phys);
		ret = 0;
	}
	mutex_unlock(&nvsim_lock);
	return ret;
}

/* The reservation of @s holding [va, va + len), or NULL. */
static struct nvsim_reserve *nvsim_reserve_find(struct nvsim_space *s, u64 va, u64 len)
{
	struct nvsim_reserve *r;

	if (!s)
		return NULL;
	list_for_each_entry(r, &s->reserves, node)
		if (va >= r->va && va + len <= r->va + r->size)
			return r;
	return NULL;
}

/*
 * cuMemMap: the first @size bytes of a physical allocation at @va, inside a
 * reservation and over nothing mapped. The mapping is an allocation of its
 * own (own buffer id), sharing the physical allocation's pages.
 */
static int nvsim_ioctl_vmm_map(struct nvsim_file *f, struct nvsim_vmm_map_args __user *uarg)
{
	struct nvsim_vmm_map_args req;
	struct nvsim_phys *phys;
	struct nvsim_space *s;
	struct nvsim_alloc *a;
	int ret = -EINVAL;

	if (copy_from_user(&req, uarg, sizeof(req)))
		return -EFAULT;
	if (!nvsim_vmm_size_ok(req.size) || req.va % NVSIM_VMM_GRANULARITY)
		return -EINVAL;
	a = kzalloc_obj(*a, GFP_KERNEL);
	if (!a)
		return -ENOMEM;
	mutex_lock(&nvsim_lock);
	phys = nvsim_phys_by_handle(f, req.handle);
	s = nvsim_space_by_tgid(current->tgid);
	/* A handle whose memory went with the GPU (nvsim_remove) has no pages. */
	ret = phys && !phys->npages ? -ENODEV : -EINVAL;
	if (!phys || !phys->npages || req.size > phys->size ||
	    !nvsim_reserve_find(s, req.va, req.size) || nvsim_va_used(s, req.va, req.size)) {
		kfree(a);
		goto out;
	}
	a->va = req.va;
	a->size = req.size;
	a->npages = req.size >> GPU_PAGE_SHIFT;
	a->pages = phys->pages;
	a->phys = phys;
	phys->refs++;
	nvsim_alloc_insert(f, s, a);
	req.buffer_id = a->buffer_id;
	ret = 0;
out:
	mutex_unlock(&nvsim_lock);
	if (!ret && copy_to_user(uarg, &req, sizeof(req)))
		ret = -EFAULT;	/* the mapping stays; closing the file frees it */
	return ret;
}

/*
 * cuMemUnmap: every mapping in [va, va + size), each wholly inside it (at
 * least one), else -EINVAL. Their pins are called back before it returns.
 */
static int nvsim_ioctl_vmm_unmap(struct nvsim_file *f, struct nvsim_vmm_range_args __user *uarg)
{
	struct nvsim_vmm_range_args req;
	struct nvsim_alloc *a, *next;
	struct nvsim_space *s;
	int ret = -EINVAL;

	if (copy_from_user(&req, uarg, sizeof(req)))
		return -EFAULT;
	if (!req.size || req.va + req.size < req.va)
		return -EINVAL;
	mutex_lock(&nvsim_lock);
	s = nvsim_space_by_tgid(current->tgid);
	if (!s)
		goto out;
	list_for_each_entry(a, &s->allocs, node) {
		u64 end = a->va + a->size;

		if (a->va >= req.va + req.size || end <= req.va)
			continue;
		if (!a->phys || a->owner != f || a->va < req.va || end > req.va + req.size)
			goto out;
		ret = 0;
	}
	if (ret)
		goto out;
	list_for_each_entry_safe(a, next, &s->allocs, node)
		if (a->va < req.va + req.size && a->va + a->size > req.va)
			nvsim_free_alloc(a);
out:
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
	case NVSIM_IOCTL_VMM_RESERVE:
		return nvsim_ioctl_vmm_reserve(f, uarg);
	case NVSIM_IOCTL_VMM_UNRESERVE:
		return nvsim_ioctl_vmm_unreserve(f, uarg);
	case NVSIM_IOCTL_VMM_CREATE:
		return nvsim_ioctl_vmm_create(f, uarg);
	case NVSIM_IOCTL_VMM_RELEASE:
		return nvsim_ioctl_vmm_release(f, uarg);
	case NVSIM_IOCTL_VMM_MAP:
		return nvsim_ioctl_vmm_map(f, uarg);
	case NVSIM_IOCTL_VMM_UNMAP:
		return nvsim_ioctl_vmm_unmap(f, uarg);
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
	INIT_LIST_HEAD(&f->reserves);
	INIT_LIST_HEAD(&f->phys);
	file->private_data = f;
	return 0;
}

/* Like the process exiting or closing its NVIDIA fd: callbacks fire here. */
static int nvsim_release(struct inode *inode, struct file *file)
{
	struct nvsim_file *f = file->private_data;
	struct nvsim_reserve *r, *rnext;
	struct nvsim_phys *phys, *pnext;
	struct nvsim_alloc *a, *next;

	mutex_lock(&nvsim_lock);
	list_for_each_entry_safe(a, next, &f->allocs, file_node)
		nvsim_free_alloc(a);
	list_for_each_entry_safe(r, rnext, &f->reserves, file_node)
		nvsim_reserve_free(r);
	list_for_each_entry_safe(phys, pnext, &f->phys, file_node)
		nvsim_phys_release(phys);
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

/*
 * gdrdrv_standin=1: a /dev/gdrdrv that is not gdrpeer's (gdrcopy's gdrdrv
 * loaded first). It opens and answers every ioctl with ENOTTY.
 */
static const struct file_operations nvsim_gdrdrv_fops = {
	.owner = THIS_MODULE,
};

static struct miscdevice nvsim_gdrdrv_misc = {
	.minor = MISC_DYNAMIC_MINOR,
	.name = "gdrdrv",
	.fops = &nvsim_gdrdrv_fops,
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
	seq_printf(m, "get_pages_ns %lld\n", atomic64_read(&st.get_pages_ns));
	seq_printf(m, "put_pages_calls %lld\n", atomic64_read(&st.put_pages_calls));
	seq_printf(m, "put_pages_ns %lld\n", atomic64_read(&st.put_pages_ns));
	seq_printf(m, "dma_map_calls %llu\n", st.dma_map_calls);
	seq_printf(m, "faults_injected %llu\n", st.faults_injected);
	seq_printf(m, "put_pages_wrong_process %llu\n", st.put_pages_wrong_process);
	seq_printf(m, "client_errors %lld\n", atomic64_read(&st.client_errors));
	seq_printf(m, "calls_delayed %d\n", atomic_read(&calls_delayed));
	seq_printf(m, "freed_page_writes %llu\n", st.freed_page_writes);
	seq_printf(m, "free_page_table_calls %lld\n", atomic64_read(&st.free_page_table_calls));
	seq_printf(m, "free_dma_mapping_calls %lld\n", atomic64_read(&st.free_dma_mapping_calls));
	seq_printf(m, "page_table_version 0x%08x\n", page_table_version);
	seq_printf(m, "coherent %d\n", coherent);
	seq_printf(m, "suballocations_live %llu\n", st.suballocations_live);
	seq_printf(m, "vmm_reservations_live %llu\n", st.vmm_reservations_live);
	seq_printf(m, "vmm_handles_live %llu\n", st.vmm_handles_live);
	seq_printf(m, "persistent_flags_last 0x%llx\n", READ_ONCE(st.persistent_flags_last));
	seq_printf(m, "put_persistent_flags_last 0x%llx\n",
		   READ_ONCE(st.put_persistent_flags_last));
	seq_printf(m, "force_bar1_pins %llu\n", st.force_bar1_pins);
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
	struct nvsim_sub *sub;
	char buf[48];
	ssize_t ret = nvsim_read_line(ubuf, len, buf, sizeof(buf));
	u64 id;

	if (ret < 0)
		return ret;
	if (sscanf(buf, "%llu %u", &id, &delay_us) < 1)
		return -EINVAL;
	mutex_lock(&nvsim_lock);
	if (!nvsim_find_by_id(id, &sub))
		ret = -ENOENT;
	else if (delay_us)
		nvsim_schedule_free(id, delay_us);
	else
		nvsim_free_by_id(id);
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

static void nvsim_unmap_bar(void *va)
{
	vunmap(va);
}

/*
 * nvsim's own mapping of the BAR, for poisoning and checking freed pages.
 * NVIDIA's driver reserves no CPU memory type for the BAR1 pages it hands out
 * through nv-p2p, so nvsim maps them without one where it can (vmap_pfn()):
 * a peer's write-combining mapping then gets the type the peer reserves (x86
 * PAT). ioremap() would reserve uncached-minus for the whole BAR, and every
 * later mapping of its pages would inherit it.
 */
static void __iomem *nvsim_map_bar(struct pci_dev *pdev, resource_size_t len)
{
	unsigned long first = pci_resource_start(pdev, NVSIM_BAR) >> PAGE_SHIFT;
	unsigned long i, n = len >> PAGE_SHIFT;
	unsigned long *pfns;
	void *va;

	if (!IS_ENABLED(CONFIG_VMAP_PFN))
		return devm_ioremap(&pdev->dev, pci_resource_start(pdev, NVSIM_BAR), len);
	pfns = kvmalloc_array(n, sizeof(*pfns), GFP_KERNEL);
	if (!pfns)
		return NULL;
	for (i = 0; i < n; i++)
		pfns[i] = first + i;
	va = vmap_pfn(pfns, n, pgprot_noncached(PAGE_KERNEL));
	kvfree(pfns);
	if (!va || devm_add_action_or_reset(&pdev->dev, nvsim_unmap_bar, va))
		return NULL;
	return (void __force __iomem *)va;
}

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
	bar = nvsim_map_bar(pdev, len);
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
	struct nvsim_phys *phys;

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
	/* Handles not released yet keep no pages: the memory went with the GPU. */
	list_for_each_entry(phys, &nvsim_all_phys, all_node) {
		kfree(phys->pages);
		phys->pages = NULL;
		phys->npages = 0;
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
	if (coherent && page_table_version >> 16 < 2) {
		pr_err("coherent needs page tables with a flags word (2.0 or later)\n");
		return -EINVAL;
	}
	nvsim_wq = alloc_workqueue("nvsim", WQ_UNBOUND, 0);
	if (!nvsim_wq)
		return -ENOMEM;
	nvsim_debugfs_init();
	ret = misc_register(&nvsim_misc);
	if (ret)
		goto err_misc;
	if (gdrdrv_standin) {
		ret = misc_register(&nvsim_gdrdrv_misc);
		if (ret)
			goto err_standin;
	}
	ret = pci_register_driver(&nvsim_driver);
	if (ret)
		goto err_pci;
	return 0;

err_pci:
	if (gdrdrv_standin)
		misc_deregister(&nvsim_gdrdrv_misc);
err_standin:
	misc_deregister(&nvsim_misc);
err_misc:
	debugfs_remove_recursive(nvsim_debugfs);
	destroy_workqueue(nvsim_wq);
	return ret;
}

static void __exit nvsim_exit(void)
{
	struct nvsim_delayed_free *df;

	if (gdrdrv_standin)
		misc_deregister(&nvsim_gdrdrv_misc);
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
