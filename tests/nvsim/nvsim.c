// SPDX-License-Identifier: GPL-2.0
/*
 * nvsim: a simulator of the NVIDIA driver's nv-p2p interface.
 *
 * nvsim binds QEMU's ivshmem-plain device and uses its memory BAR both as GPU
 * memory and as GPU BAR1: page tables carry real PCI bus addresses inside
 * that BAR, so a peer device can DMA to them. It exports the nv-p2p functions
 * with the C ABI of nv-p2p.h and reproduces the behaviour a peer module meets
 * in the real driver (Documentation/dev/nvsim.rst lists it, with the place in
 * NVIDIA's open modules each behaviour comes from):
 *
 * - 64 KiB alignment of va and len; a NULL callback rejected, NULL callback
 *   data accepted;
 * - lookup of the memory by the calling process (current->tgid), or by
 *   p2p token; the range must lie inside one allocation;
 * - pinning and callback registration are two steps under the global lock,
 *   which is dropped between them: memory freed in between fails the pin;
 * - BAR1 accounting with a reserve, overlapping pins sharing mappings,
 *   -ENOMEM when exhausted; a pin cost, spent sleeping; contiguous BAR
 *   extents (or, with fragmented_bar, scattered pages);
 * - the driver's allocations: the page table inside a larger private object
 *   that also holds the DMA-mapping list and its semaphore, the pages array,
 *   one slab object per page and the GPU UUID each an allocation of its own,
 *   every DMA mapping one too; all freed after the free callback returns (or
 *   at put_pages), so that KASAN sees any later use (recycle=1 poisons them
 *   and hands them out again, most recently freed first, instead);
 * - put_pages finds the pin by (calling process, table); from another
 *   process it returns 0 and releases nothing;
 * - the free callback runs synchronously in the freeing thread (or in a
 *   kernel thread, for a deferred close) while nvsim holds its global lock
 *   (nvsim_lock), which every other entry point but dma_unmap_pages takes;
 *   an nv-p2p call from inside the callback fails (put_pages with a WARN);
 * - dma_unmap_pages takes only the table's mapping-list semaphore: it may
 *   sleep, as every nv-p2p call may;
 * - persistent pins survive freeing the memory and are never called back;
 *   their flags as the driver reads them; a FORCE_BAR1 pin cannot be
 *   DMA-mapped;
 * - DMA mappings per peer with dma_map_resource(), several peers per table;
 *   two GPUs, told apart by the UUID in their tables, and the driver's PCIe
 *   topology check, which refuses a peer with -ENOTSUPP (refuse_peers);
 * - small allocations carved from shared 2 MiB pool blocks, the callbacks
 *   belonging to each buffer (callback_per_buffer, the default, stricter
 *   than the driver) or, as on the driver, to the block (the RM memory
 *   object); VMM objects (reservations, physical
 *   allocations, mappings), a mapping pinned and called back like an
 *   allocation;
 * - a cache-coherent platform (module parameter coherent) whose pins bypass
 *   BAR1 unless FORCE_BAR1_MAPPING asks for it.
 *
 * A call that names a freed table or mapping is what the real driver turns
 * into a use-after-free: nvsim does not touch the freed object, counts the
 * call in client_errors and logs it. Fault injection, counters and knobs live
 * in debugfs (nvsim/).
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
#include <linux/refcount.h>
#include <linux/sched.h>
#include <linux/semaphore.h>
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
#define NVSIM_PAGE_STRIDE 7		/* fragmented_bar: GPU pages this far apart in the BAR */
#define NVSIM_POISON 0x6b
#define NVSIM_UUID_LEN 16

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

static int recycle = -1;
module_param(recycle, int, 0644);
MODULE_PARM_DESC(recycle,
		 "Page tables and DMA mappings: 0 freed after the callback (or at put_pages), so that KASAN sees a later use; 1 poisoned and handed out again, most recently freed first, as a slab without KASAN's quarantine does (the stale-call tests); -1 (default) 1 unless the kernel has KASAN");

static bool fragmented_bar;
module_param(fragmented_bar, bool, 0444);
MODULE_PARM_DESC(fragmented_bar,
		 "Scatter consecutive GPU pages in the BAR (7 pages apart) instead of handing out contiguous extents (default 0)");

static bool callback_per_buffer = true;
module_param(callback_per_buffer, bool, 0644);
MODULE_PARM_DESC(callback_per_buffer,
		 "1 (default): freeing a sub-allocated buffer calls back the pins over its 64 KiB pages, and a pool block goes with its last buffer (stricter than the driver); 0: the driver's rule, callbacks belong to the pool block, which is kept when empty until its file is closed or debugfs trim");

static unsigned int deferred_close;
module_param(deferred_close, uint, 0644);
MODULE_PARM_DESC(deferred_close,
		 "Percentage of /dev/nvsim closes whose frees (and callbacks) run later in a kernel thread, as the driver defers a close to its own thread (default 0)");

/* Whether freed tables and mappings are recycled (module parameter recycle). */
static bool nvsim_recycling(void)
{
	int r = READ_ONCE(recycle);

	return r < 0 ? !IS_ENABLED(CONFIG_KASAN) : r;
}

/*
 * The global lock, the driver's RM API lock. Every exported function but
 * dma_unmap_pages and the two free_* no-ops takes it, and the free callback
 * runs with it held, as in the real driver. nvsim_lock_owner says which task
 * holds it: an nv-p2p call from inside a callback finds itself there and
 * fails, as the driver's re-entrant acquire of its lock does.
 */
static DEFINE_MUTEX(nvsim_lock);
static struct task_struct *nvsim_lock_owner;

static void nvsim_lock_acquire(void)
{
	mutex_lock(&nvsim_lock);
	WRITE_ONCE(nvsim_lock_owner, current);
}

static void nvsim_lock_release(void)
{
	WRITE_ONCE(nvsim_lock_owner, NULL);
	mutex_unlock(&nvsim_lock);
}

/* Whether the caller holds nvsim_lock: an nv-p2p call from a free callback. */
static bool nvsim_lock_held_by_me(void)
{
	return READ_ONCE(nvsim_lock_owner) == current;
}

/*
 * The ivshmem device: the memory of both simulated GPUs (nvsim_gpu_uuid).
 * Protected by nvsim_lock.
 */
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

/*
 * The UUIDs of the two simulated GPUs. Both share the ivshmem BAR: an
 * allocation made with NVSIM_ALLOC_GPU1 is the second GPU's memory, and its
 * tables carry the second UUID.
 */
#define NVSIM_GPUS 2
static const u8 nvsim_gpu_uuid[NVSIM_GPUS][NVSIM_UUID_LEN] = {
	{ 'n', 'v', 's', 'i', 'm', '-', 'g', 'p', 'u', '-', '0' },
	{ 'n', 'v', 's', 'i', 'm', '-', 'g', 'p', 'u', '-', '1' },
};

/* Counters (debugfs nvsim/stats); protected by nvsim_lock unless atomic. */
static struct {
	u64 allocations_live, pins_live, persistent_pins_live;
	u64 bar1_used, callbacks_fired, get_pages_calls, get_pages_failed;
	u64 dma_map_calls, faults_injected, put_pages_wrong_process;
	u64 freed_page_writes;
	u64 buffer_id_next, vmm_handle_next;
	u64 vmm_reservations_live, vmm_handles_live, suballocations_live;
	u64 pool_blocks_cached;
	u64 persistent_flags_last, put_persistent_flags_last, force_bar1_pins;
	u64 pins_failed_between_steps, deferred_closes;
	u64 topology_refusals;
	atomic64_t free_page_table_calls, free_dma_mapping_calls;
	atomic64_t dma_mappings_live, client_errors;	/* also changed without nvsim_lock */
	/*
	 * dma_map_pages calls that read a live table and found it freed once they
	 * had the lock: the window every nv-p2p client is left (Documentation/dev/design.rst, "The
	 * DMA-mapping window"), counted apart from client_errors so that a run
	 * says how often it was entered.
	 */
	atomic64_t dma_map_window;
	/* The driver's allocations behind what clients see, live. */
	atomic64_t tables_live, page_objects_live, uuids_live, mapping_objects_live;
	atomic64_t objects_recycled;	/* tables and mappings handed out again */
	atomic_t deferred_closes_pending;
	/*
	 * Time spent in get_pages and put_pages (persistent or not), entry to
	 * return, cost-model sleep and lock wait included; and put_pages calls.
	 * What a client's own overhead is measured against (gdrpeer-bench).
	 */
	atomic64_t get_pages_ns, put_pages_ns, put_pages_calls;
	/*
	 * Time spent in clients' free callbacks, call to return: the client's
	 * share of a free that revokes pins (gdrpeer-bench's P5).
	 */
	atomic64_t callback_ns;
} st = { .buffer_id_next = 1, .vmm_handle_next = 1 };

/* Counts misuse by a client: the call's log line says what it was. */
#define nvsim_client_err(fmt, ...)				\
	do {							\
		pr_err("client error: " fmt, ##__VA_ARGS__);	\
		atomic64_inc(&st.client_errors);		\
	} while (0)

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
	u8 gpu;				/* which simulated GPU's memory it is */
	bool pool;			/* a pool block: buffers are in subs */
	bool cached;			/* a pool block with no buffer, kept (per-block rule) */
	struct list_head subs;
	struct nvsim_phys *phys;	/* a VMM mapping: pages are phys's */
	struct list_head pins;
};

/*
 * A pin: the driver's private object around the page table (nv_p2p_mem_info
 * in nv-p2p.c). The table clients see lives inside it, next to the callback,
 * the DMA-mapping list and the semaphore that guards that list; the table's
 * pages array, each page and the GPU UUID are allocations of their own.
 * Freed (or, with recycle, poisoned and kept for reuse) after the free
 * callback returns or at put_pages.
 */
struct nvsim_pin {
	void (*free_callback)(void *data);
	void *data;
	struct nvidia_p2p_page_table pt;
	struct {
		struct list_head head;	/* struct nvsim_map, by node */
		struct semaphore lock;
	} maps;
	/* nvsim's own bookkeeping */
	struct list_head node;		/* in alloc->pins, or the recycle pool */
	struct hlist_node hash;		/* in nvsim_pins, keyed by &pt, while registered */
	struct nvsim_alloc *alloc;
	u32 first, count;		/* GPU pages of alloc */
	pid_t tgid;
	u8 gpu;				/* its memory's GPU (the table's UUID) */
	bool persistent;
	bool bar1;			/* mapped through BAR1 (not a coherent pin) */
	bool force_bar1;		/* pinned with NVIDIA_P2P_FLAGS_FORCE_BAR1_MAPPING */
	bool registered;		/* both steps of the pin done: in nvsim_pins */
	bool orphaned;			/* its memory was freed between the two steps */
	refcount_t refs;		/* nvsim's own, and each dma_unmap_pages inside it */
};

/*
 * A node of a table's DMA-mapping list (the driver's nv_p2p_dma_mapping).
 * The mapping clients see is an allocation of its own, as in the driver.
 */
struct nvsim_map {
	struct list_head node;		/* in pin->maps.head, or the recycle pool */
	struct nvidia_p2p_dma_mapping *m;
	struct nvsim_pin *pin;
};

struct nvsim_file {
	struct list_head allocs;
	struct list_head reserves;
	struct list_head phys;
	struct work_struct deferred_close;
};

static LIST_HEAD(nvsim_spaces);
static LIST_HEAD(nvsim_zombies);	/* freed, still held by persistent pins */
static LIST_HEAD(nvsim_all_allocs);
static LIST_HEAD(nvsim_all_phys);

/*
 * Registered pins by the address of their table. Changes under nvsim_lock
 * and nvsim_pins_lock, read under either. dma_unmap_pages takes only
 * nvsim_pins_lock (to find the table and take a reference on its pin) and
 * then the table's semaphore, as the real driver takes only that semaphore
 * there: a free callback may wait for an unmap. A pin's mapping list changes
 * under its semaphore. A spinlock, so that an unmap made in atomic context
 * (a client bug) is reported by might_sleep() and not also by lockdep, which
 * would turn itself off.
 */
static DEFINE_HASHTABLE(nvsim_pins, 12);
static DEFINE_SPINLOCK(nvsim_pins_lock);
static u32 unmap_delay_us;	/* debugfs unmap_delay_us */

/* The driver's slab cache of struct nvidia_p2p_page. */
static struct kmem_cache *nvsim_page_cache;

/* recycle=1: freed pins (tables) and mappings, most recently freed first. */
static DEFINE_SPINLOCK(nvsim_pool_lock);
static LIST_HEAD(nvsim_free_pins);
static LIST_HEAD(nvsim_free_maps);

/*
 * The nv-p2p calls in progress, with the table (and mapping) each names.
 * When nvsim frees a table or a mapping it marks the calls naming it: a call
 * whose table was freed while it waited for nvsim_lock named freed memory,
 * whatever the address names by the time it gets the lock.
 */
struct nvsim_call {
	struct list_head node;		/* in nvsim_calls */
	const void *table, *mapping;
	bool table_freed, mapping_freed;
};

static LIST_HEAD(nvsim_calls);
static DEFINE_SPINLOCK(nvsim_calls_lock);

/*
 * One-shot test knobs (debugfs): the next put_pages or dma_map_pages sleeps
 * this long on entry, before it takes nvsim_lock, so that a free and a new pin
 * can come in between; calls_delayed counts the calls asleep there.
 */
static u32 put_pages_delay_us, dma_map_delay_us;

/*
 * debugfs refuse_persistent: get_pages_persistent fails with -ENOTSUPP, as
 * the driver refuses persistent pins on MIG, vGPU and confidential computing.
 */
static bool refuse_persistent;

/*
 * debugfs refuse_peers: bit N set, dma_map_pages of a table of GPU N fails
 * with -ENOTSUPP for every peer, as the driver's PCIe topology check fails a
 * peer that shares no switch with the GPU (and no allowed chipset).
 */
static u32 refuse_peers;
static atomic_t calls_delayed = ATOMIC_INIT(0);

/* Fault injection: fail the next `times` calls (or `percent`% of calls). */
struct nvsim_fault {
	int times;			/* -1: no limit */
	unsigned int percent;
	int err;
};

static struct nvsim_fault fault_get_pages, fault_dma_map, fault_put_pages;

/* A free of one allocation, armed to happen later (debugfs free, free_on_pin). */
static struct {
	u64 buffer_id;		/* 0: none armed for free_on_pin */
	unsigned int delay_us;
} free_on_pin;

/* debugfs free_between_pin_steps: a buffer freed inside the next pin that covers it. */
static u64 free_between_steps_id;

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

/* --- Calls in progress and the objects they name --------------------------- */

static void nvsim_call_begin(struct nvsim_call *c, const void *table, const void *mapping)
{
	c->table = table;
	c->mapping = mapping;
	c->table_freed = false;
	c->mapping_freed = false;
	spin_lock(&nvsim_calls_lock);
	list_add(&c->node, &nvsim_calls);
	spin_unlock(&nvsim_calls_lock);
}

static void nvsim_call_end(struct nvsim_call *c)
{
	spin_lock(&nvsim_calls_lock);
	list_del(&c->node);
	spin_unlock(&nvsim_calls_lock);
}

/* Whether the call's table (or mapping) was freed since nvsim_call_begin(). */
static bool nvsim_call_saw_free(struct nvsim_call *c, bool mapping)
{
	bool freed;

	spin_lock(&nvsim_calls_lock);
	freed = mapping ? c->mapping_freed : c->table_freed;
	spin_unlock(&nvsim_calls_lock);
	return freed;
}

/* Marks the calls in progress that name @table or @mapping: it is being freed. */
static void nvsim_calls_mark_freed(const void *table, const void *mapping)
{
	struct nvsim_call *c;

	spin_lock(&nvsim_calls_lock);
	list_for_each_entry(c, &nvsim_calls, node) {
		if (table && c->table == table)
			c->table_freed = true;
		if (mapping && c->mapping == mapping)
			c->mapping_freed = true;
	}
	spin_unlock(&nvsim_calls_lock);
}

/* The registered pin whose table is @pt, or NULL. */
static struct nvsim_pin *nvsim_pin_by_table(const struct nvidia_p2p_page_table *pt)
{
	struct nvsim_pin *pin;

	lockdep_assert(lockdep_is_held(&nvsim_lock) || lockdep_is_held(&nvsim_pins_lock));
	hash_for_each_possible(nvsim_pins, pin, hash, (unsigned long)pt)
		if (&pin->pt == pt)
			return pin;
	return NULL;
}

/* Whether @pt is the table of a registered pin now. */
static bool nvsim_table_live(const struct nvidia_p2p_page_table *pt)
{
	bool live;

	spin_lock(&nvsim_pins_lock);
	live = nvsim_pin_by_table(pt);
	spin_unlock(&nvsim_pins_lock);
	return live;
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

/* --- The driver's objects: tables and DMA mappings ------------------------- */

/* A zeroed pin (with its table), recycled under recycle=1, or NULL. */
static struct nvsim_pin *nvsim_pin_new(void)
{
	struct nvsim_pin *pin = NULL;

	if (nvsim_recycling()) {
		spin_lock(&nvsim_pool_lock);
		pin = list_first_entry_or_null(&nvsim_free_pins, struct nvsim_pin, node);
		if (pin)
			list_del(&pin->node);
		spin_unlock(&nvsim_pool_lock);
		if (pin) {
			memset(pin, 0, sizeof(*pin));
			atomic64_inc(&st.objects_recycled);
		}
	}
	if (!pin)
		pin = kzalloc_obj(*pin, GFP_KERNEL);
	if (!pin)
		return NULL;
	INIT_LIST_HEAD(&pin->maps.head);
	sema_init(&pin->maps.lock, 1);
	refcount_set(&pin->refs, 1);
	INIT_LIST_HEAD(&pin->node);
	atomic64_inc(&st.tables_live);
	return pin;
}

/*
 * Frees what the table of @pin points to (pages, each page, the UUID), then
 * the pin itself; poisoned first, so that a stale read on a kernel without
 * KASAN sees the poison. Calls in progress naming the table are marked.
 */
static void nvsim_pin_free(struct nvsim_pin *pin)
{
	struct nvidia_p2p_page_table *pt = &pin->pt;
	u32 i;

	nvsim_calls_mark_freed(pt, NULL);
	for (i = 0; pt->pages && i < pt->entries; i++) {
		memset(pt->pages[i], NVSIM_POISON, sizeof(*pt->pages[i]));
		kmem_cache_free(nvsim_page_cache, pt->pages[i]);
		atomic64_dec(&st.page_objects_live);
	}
	if (pt->pages) {
		memset(pt->pages, NVSIM_POISON, sizeof(*pt->pages) * pt->entries);
		kfree(pt->pages);
	}
	if (pt->gpu_uuid) {
		memset(pt->gpu_uuid, NVSIM_POISON, NVSIM_UUID_LEN);
		kfree(pt->gpu_uuid);
		atomic64_dec(&st.uuids_live);
	}
	memset(pin, NVSIM_POISON, sizeof(*pin));
	atomic64_dec(&st.tables_live);
	if (nvsim_recycling()) {
		spin_lock(&nvsim_pool_lock);
		list_add(&pin->node, &nvsim_free_pins);
		spin_unlock(&nvsim_pool_lock);
	} else {
		kfree(pin);
	}
}

/* Drops a reference to @pin: the last frees it. */
static void nvsim_pin_put_ref(struct nvsim_pin *pin)
{
	if (refcount_dec_and_test(&pin->refs))
		nvsim_pin_free(pin);
}

/*
 * Fills the table of @pin for GPU pages [first, first + count) of @a: the
 * pages array, one slab object per page, a GPU UUID of its own.
 */
static int nvsim_table_fill(struct nvsim_pin *pin, struct nvsim_alloc *a, u32 first,
			    u32 count, bool bar1)
{
	struct nvidia_p2p_page_table *pt = &pin->pt;
	u32 i;

	pt->pages = kcalloc(count, sizeof(*pt->pages), GFP_KERNEL);
	pin->gpu = a->gpu;
	pt->gpu_uuid = kmemdup(nvsim_gpu_uuid[a->gpu], NVSIM_UUID_LEN, GFP_KERNEL);
	if (pt->gpu_uuid)
		atomic64_inc(&st.uuids_live);
	if (!pt->pages || !pt->gpu_uuid)
		return -ENOMEM;
	pt->version = page_table_version;
	/*
	 * A coherent pin carries the memory's CPU physical address (the same
	 * as the bus address in the guest) and CPU_CACHEABLE; 1.x tables have
	 * no flags word.
	 */
	if (page_table_version >> 16 >= 2 && !bar1)
		pt->flags = NVIDIA_P2P_PAGE_TABLE_FLAGS_CPU_CACHEABLE;
	for (i = 0; i < count; i++) {
		struct nvidia_p2p_page *page = kmem_cache_zalloc(nvsim_page_cache, GFP_KERNEL);
		u32 bar_page = a->pages[first + i];

		if (!page)
			return -ENOMEM;
		atomic64_inc(&st.page_objects_live);
		page->physical_address = bar1 ? nvsim_page_bus(bar_page) :
			gpu.bar_phys + ((phys_addr_t)bar_page << GPU_PAGE_SHIFT);
		pt->pages[i] = page;
		pt->entries++;
	}
	pt->page_size = NVIDIA_P2P_PAGE_SIZE_64KB;
	return 0;
}

/* A DMA-mapping node and its mapping (zeroed), recycled under recycle=1, or NULL. */
static struct nvsim_map *nvsim_map_new(void)
{
	struct nvsim_map *map = NULL;

	if (nvsim_recycling()) {
		spin_lock(&nvsim_pool_lock);
		map = list_first_entry_or_null(&nvsim_free_maps, struct nvsim_map, node);
		if (map)
			list_del(&map->node);
		spin_unlock(&nvsim_pool_lock);
		if (map) {
			memset(map->m, 0, sizeof(*map->m));
			atomic64_inc(&st.objects_recycled);
		}
	}
	if (!map) {
		map = kzalloc_obj(*map, GFP_KERNEL);
		if (!map)
			return NULL;
		map->m = kzalloc_obj(*map->m, GFP_KERNEL);
		if (!map->m) {
			kfree(map);
			return NULL;
		}
	}
	map->pin = NULL;
	atomic64_inc(&st.mapping_objects_live);
	return map;
}

/* Frees (or, with recycle, poisons and keeps) a node and its mapping. */
static void nvsim_map_free(struct nvsim_map *map)
{
	nvsim_calls_mark_freed(NULL, map->m);
	memset(map->m, NVSIM_POISON, sizeof(*map->m));
	atomic64_dec(&st.mapping_objects_live);
	if (nvsim_recycling()) {
		spin_lock(&nvsim_pool_lock);
		list_add(&map->node, &nvsim_free_maps);
		spin_unlock(&nvsim_pool_lock);
	} else {
		kfree(map->m);
		kfree(map);
	}
}

/* Unmaps and frees a mapping already unlinked from its pin. */
static void nvsim_unmap_one(struct nvsim_map *map)
{
	struct nvidia_p2p_dma_mapping *m = map->m;
	u32 i;

	for (i = 0; i < m->entries; i++)
		dma_unmap_resource(&m->pci_dev->dev, m->dma_addresses[i],
				   GPU_PAGE_SIZE, DMA_BIDIRECTIONAL, 0);
	if (m->dma_addresses)
		memset(m->dma_addresses, NVSIM_POISON, sizeof(u64) * m->entries);
	kfree(m->dma_addresses);
	nvsim_map_free(map);
	atomic64_dec(&st.dma_mappings_live);
}

static void nvsim_pools_destroy(void)
{
	struct nvsim_pin *pin, *pnext;
	struct nvsim_map *map, *mnext;

	list_for_each_entry_safe(pin, pnext, &nvsim_free_pins, node)
		kfree(pin);
	list_for_each_entry_safe(map, mnext, &nvsim_free_maps, node) {
		kfree(map->m);
		kfree(map);
	}
}

/* Releases a pin: its DMA mappings, its BAR1 mapping, its table. */
static void nvsim_pin_release(struct nvsim_pin *pin)
{
	struct nvsim_map *map, *next;
	LIST_HEAD(maps);

	lockdep_assert_held(&nvsim_lock);
	if (pin->registered) {
		spin_lock(&nvsim_pins_lock);
		hash_del(&pin->hash);
		spin_unlock(&nvsim_pins_lock);
	}
	/* Freed for its clients from now on (an unmap in progress keeps the memory). */
	nvsim_calls_mark_freed(&pin->pt, NULL);
	down(&pin->maps.lock);
	list_splice_init(&pin->maps.head, &maps);
	up(&pin->maps.lock);
	list_for_each_entry_safe(map, next, &maps, node)
		nvsim_unmap_one(map);
	if (pin->bar1)
		nvsim_bar1_put(pin->alloc, pin->first, pin->count);
	list_del(&pin->node);
	if (pin->registered) {
		if (pin->persistent)
			st.persistent_pins_live--;
		else
			st.pins_live--;
	}
	nvsim_pin_put_ref(pin);
}

/*
 * A pin between its two steps whose memory is being freed: it loses its
 * BAR1 mapping and its allocation, and the pinning thread fails it.
 */
static void nvsim_pin_orphan(struct nvsim_pin *pin)
{
	lockdep_assert_held(&nvsim_lock);
	if (pin->bar1)
		nvsim_bar1_put(pin->alloc, pin->first, pin->count);
	list_del_init(&pin->node);
	pin->alloc = NULL;
	pin->orphaned = true;
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
	if (a->cached)
		st.pool_blocks_cached--;
	else
		st.allocations_live--;
	kfree(a);
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
	u64 start = ktime_get_ns();

	pin->free_callback(pin->data);
	atomic64_add(ktime_get_ns() - start, &st.callback_ns);
	st.callbacks_fired++;
	nvsim_pin_release(pin);
}

/*
 * Frees an allocation as cuMemFree or process exit does: every callback pin
 * gets its free callback, synchronously and under nvsim_lock, and is then
 * torn down by nvsim; a pin between its two steps fails. Persistent pins keep
 * the memory alive.
 */
static void nvsim_free_alloc(struct nvsim_alloc *a)
{
	struct nvsim_pin *pin, *next;
	struct nvsim_space *s = a->space;

	lockdep_assert_held(&nvsim_lock);
	list_for_each_entry_safe(pin, next, &a->pins, node) {
		if (!pin->registered)
			nvsim_pin_orphan(pin);
		else if (!pin->persistent)
			nvsim_fire_callback(pin);
	}
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
 * Frees buffer @sub of pool block @a as cuMemFree does. With
 * callback_per_buffer=0, the driver's rule: the callbacks belong to the block,
 * the RM memory object behind the buffers; freeing a buffer fires none, and a
 * block left without buffers is kept (cached, as CUDA's allocator keeps its
 * blocks) until its file is closed or debugfs trim gives it back. With
 * callback_per_buffer (the default), the stricter rule: the free callbacks
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
	if (!READ_ONCE(callback_per_buffer)) {
		if (list_empty(&a->subs)) {
			a->cached = true;
			st.allocations_live--;
			st.pool_blocks_cached++;
		}
		return;
	}
	if (list_empty(&a->subs)) {
		nvsim_free_alloc(a);
		return;
	}
	list_for_each_entry_safe(pin, next, &a->pins, node) {
		u64 va = nvsim_pin_va(pin);

		if (pin->persistent || va >= hi ||
		    va + ((u64)pin->count << GPU_PAGE_SHIFT) <= lo)
			continue;
		if (pin->registered)
			nvsim_fire_callback(pin);
		else
			nvsim_pin_orphan(pin);
	}
}

/* Gives every cached (empty) pool block back: the callbacks over them fire. */
static void nvsim_trim_pools(void)
{
	struct nvsim_alloc *a, *next;

	lockdep_assert_held(&nvsim_lock);
	list_for_each_entry_safe(a, next, &nvsim_all_allocs, all_node)
		if (a->cached)
			nvsim_free_alloc(a);
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

	nvsim_lock_acquire();
	list_del(&df->node);
	nvsim_free_by_id(df->buffer_id);
	nvsim_lock_release();
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

/* An nv-p2p call from inside a free callback: the driver's lock is taken already. */
static int nvsim_reentered(const char *call)
{
	nvsim_client_err("%s from inside a free callback: the driver's lock is held by this thread\n",
			 call);
	return -EIO;
}

/*
 * The first step of a pin, under nvsim_lock: finds the memory, accounts
 * BAR1, builds the table and pays the cost. A persistent pin is complete
 * after it; a callback pin is left on its allocation, not registered yet.
 */
static int nvsim_pin_step1(u64 p2p_token, u32 va_space, u64 va, u64 len, bool persistent,
			   bool force_bar1, struct nvsim_pin **pinp)
{
	bool bar1 = !coherent || force_bar1;
	unsigned long cost_us;
	struct nvsim_space *s;
	struct nvsim_alloc *a;
	struct nvsim_pin *pin;
	u32 first, count;
	int ret;

	lockdep_assert_held(&nvsim_lock);
	st.get_pages_calls++;
	ret = nvsim_fault_hit(&fault_get_pages);
	if (ret)
		return ret;
	if (!gpu.pdev)
		return -ENODEV;
	if (persistent && READ_ONCE(refuse_persistent))
		return -ENOTSUPP;

	if (p2p_token)
		s = nvsim_space_by_token(p2p_token, va_space);
	else if (current->flags & PF_KTHREAD)
		s = NULL;	/* no process, no VA space */
	else
		s = nvsim_space_by_tgid(current->tgid);
	a = nvsim_find(s, va, len);
	/* Tokens are not supported for cuMemCreate memory. */
	if (!a || (p2p_token && a->phys))
		return -EINVAL;
	first = (va - a->va) >> GPU_PAGE_SHIFT;
	count = len >> GPU_PAGE_SHIFT;

	if (bar1 &&
	    st.bar1_used + nvsim_bar1_new_bytes(a, first, count) + bar1_reserve > gpu.bar1_size)
		return -ENOMEM;
	pin = nvsim_pin_new();
	if (!pin)
		return -ENOMEM;
	if (nvsim_table_fill(pin, a, first, count, bar1)) {
		nvsim_pin_put_ref(pin);
		return -ENOMEM;
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
	pin->force_bar1 = force_bar1;
	list_add_tail(&pin->node, &a->pins);
	if (bar1)
		nvsim_bar1_get(a, first, count);
	*pinp = pin;
	return 0;
}

/* Makes @pin known to put_pages, dma_map_pages and the free paths. */
static void nvsim_pin_register(struct nvsim_pin *pin)
{
	lockdep_assert_held(&nvsim_lock);
	spin_lock(&nvsim_pins_lock);
	hash_add(nvsim_pins, &pin->hash, (unsigned long)&pin->pt);
	pin->registered = true;
	spin_unlock(&nvsim_pins_lock);
	if (pin->persistent)
		st.persistent_pins_live++;
	else
		st.pins_live++;
	if (pin->force_bar1)
		st.force_bar1_pins++;
	if (free_on_pin.buffer_id && nvsim_pin_has_id(pin, free_on_pin.buffer_id)) {
		nvsim_schedule_free(free_on_pin.buffer_id, free_on_pin.delay_us);
		free_on_pin.buffer_id = 0;
	}
}

/*
 * debugfs free_between_pin_steps: frees the armed buffer if @pin covers it,
 * in this thread, between the two steps of the pin (nvsim_lock not held).
 */
static void nvsim_free_between_steps(struct nvsim_pin *pin)
{
	nvsim_lock_acquire();
	if (free_between_steps_id && !pin->orphaned &&
	    nvsim_pin_has_id(pin, free_between_steps_id)) {
		nvsim_free_by_id(free_between_steps_id);
		free_between_steps_id = 0;
	}
	nvsim_lock_release();
}

/*
 * What a failed get_pages leaves in *page_table once the arguments passed the
 * driver's first checks: nv_p2p_get_pages() allocates the table into
 * *page_table, and on failure frees it without clearing the pointer. A client
 * that reads it reads freed memory (KASAN reports it).
 */
static void nvsim_leave_freed_table(struct nvidia_p2p_page_table **page_table)
{
	struct nvidia_p2p_page_table *t = kzalloc(sizeof(*t), GFP_KERNEL);

	WRITE_ONCE(*page_table, t);
	kfree(t);
}

static int nvsim_do_get_pages(u64 p2p_token, u32 va_space, u64 va, u64 len,
			      struct nvidia_p2p_page_table **page_table,
			      void (*free_callback)(void *data), void *data,
			      bool persistent, bool force_bar1)
{
	struct nvsim_pin *pin = NULL;
	int ret;

	might_sleep();
	if (!page_table || !len || (va & ~GPU_PAGE_MASK) || (len & ~GPU_PAGE_MASK))
		return -EINVAL;
	/* The callback data is passed back as given, NULL included. */
	if (!persistent && !free_callback)
		return -EINVAL;
	if (nvsim_lock_held_by_me())
		return nvsim_reentered("get_pages");

	nvsim_lock_acquire();
	ret = nvsim_pin_step1(p2p_token, va_space, va, len, persistent, force_bar1, &pin);
	if (!ret && persistent)
		nvsim_pin_register(pin);
	if (ret)
		st.get_pages_failed++;
	nvsim_lock_release();
	if (ret || persistent)
		goto out;

	/*
	 * The second step: the callback is registered in a new hold of the
	 * lock, as the driver registers it after pinning. Memory freed in
	 * between orphaned the pin: it fails, and no callback will come.
	 */
	if (READ_ONCE(free_between_steps_id))
		nvsim_free_between_steps(pin);
	nvsim_lock_acquire();
	if (pin->orphaned) {
		st.get_pages_failed++;
		st.pins_failed_between_steps++;
		nvsim_pin_put_ref(pin);
		ret = -EINVAL;
	} else {
		pin->free_callback = free_callback;
		pin->data = data;
		nvsim_pin_register(pin);
	}
	nvsim_lock_release();
out:
	if (!ret)
		*page_table = &pin->pt;
	else
		nvsim_leave_freed_table(page_table);
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

/*
 * The driver truncates the flags to 8 bits and reads only FORCE_BAR1_MAPPING:
 * other bits are ignored, not refused.
 */
int nvidia_p2p_get_pages_persistent(u64 virtual_address, u64 length,
				    struct nvidia_p2p_page_table **page_table,
				    u32 flags)
{
	u8 driver_flags = flags;

	/* Recorded for the tests (stats: persistent_flags_last), whatever the outcome. */
	WRITE_ONCE(st.persistent_flags_last, flags);
	return nvsim_get_pages(0, 0, virtual_address, length, page_table, NULL, NULL,
			       true, driver_flags & NVIDIA_P2P_FLAGS_FORCE_BAR1_MAPPING);
}
EXPORT_SYMBOL(nvidia_p2p_get_pages_persistent);

static void nvsim_pin_put(struct nvsim_pin *pin)
{
	struct nvsim_alloc *a = pin->alloc;
	bool mapped;

	down(&pin->maps.lock);
	mapped = !list_empty(&pin->maps.head);
	up(&pin->maps.lock);
	/* The driver unmaps them silently: a client that relies on it is counted. */
	if (mapped)
		nvsim_client_err("put_pages with DMA mappings still live\n");
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

/*
 * The driver finds the pin to release by (calling process, table pointer);
 * the address is not used. A table freed after its callback is only a key
 * here: 0, nothing released, unless its address now names a newer pin of the
 * calling process, which is released, as the driver would release it. nvsim
 * reports that newer pin's release when it can tell: the call's table was
 * freed while it waited, or the address named is not the newer pin's.
 */
int nvidia_p2p_put_pages(u64 p2p_token, u32 va_space, u64 virtual_address,
			 struct nvidia_p2p_page_table *page_table)
{
	u64 start = ktime_get_ns();
	struct nvsim_call call;
	struct nvsim_pin *pin;
	bool live, mine;
	int ret = 0;

	might_sleep();
	if (!page_table)
		return 0;
	if (nvsim_lock_held_by_me()) {
		WARN(1, "nvsim: %s() inside a free callback\n", __func__);
		return nvsim_reentered("put_pages");
	}
	nvsim_call_begin(&call, page_table, NULL);
	live = nvsim_table_live(page_table);
	nvsim_entry_delay(&put_pages_delay_us);
	nvsim_lock_acquire();
	pin = nvsim_pin_by_table(page_table);
	mine = pin && pin->tgid == current->tgid && !(current->flags & PF_KTHREAD);
	/*
	 * debugfs fail_put_pages: the driver's error (RM's status mapped to an
	 * errno) for the owner's put of a live table, and the pin left in
	 * place: its callback comes when the memory goes.
	 */
	if (mine && !pin->persistent && live)
		ret = nvsim_fault_hit(&fault_put_pages);
	if (pin && !pin->persistent && !mine) {
		/*
		 * From another process the lookup finds nothing: 0, nothing
		 * released. The pin stays until the memory goes: a misuse.
		 */
		st.put_pages_wrong_process++;
		nvsim_client_err("put_pages(%#llx) from another process or a kernel thread: the driver finds no pin and releases nothing; the pin stays until the memory is freed\n",
				 virtual_address);
	} else if (ret) {
		/* fail_put_pages: nothing released. */
	} else if (pin && !pin->persistent) {
		if (!live || nvsim_call_saw_free(&call, false))
			nvsim_client_err("stale put_pages(%#llx): its table was freed by the free callback and is now the table of a newer pin of this process at %#llx, which is released\n",
					 virtual_address, nvsim_pin_va(pin));
		else if (virtual_address != nvsim_pin_va(pin))
			nvsim_client_err("put_pages(%#llx) of the table pinned at %#llx: the driver releases that pin (it finds pins by process and table), and a recycled table looks like this\n",
					 virtual_address, nvsim_pin_va(pin));
		nvsim_pin_put(pin);
	} else if (pin) {
		nvsim_client_err("put_pages on a persistent pin\n");
	}
	nvsim_lock_release();
	nvsim_call_end(&call);
	nvsim_put_pages_timed(start);
	return ret;
}
EXPORT_SYMBOL(nvidia_p2p_put_pages);

/* The driver requires flags == 0: anything else is -EINVAL, and the pin stays. */
int nvidia_p2p_put_pages_persistent(u64 virtual_address,
				    struct nvidia_p2p_page_table *page_table,
				    u32 flags)
{
	u64 start = ktime_get_ns();
	struct nvsim_pin *pin;
	int ret = -EINVAL;

	might_sleep();
	WRITE_ONCE(st.put_persistent_flags_last, flags);
	if (flags)
		return -EINVAL;
	if (!page_table)
		return 0;
	if (nvsim_lock_held_by_me()) {
		WARN(1, "nvsim: %s() inside a free callback\n", __func__);
		return nvsim_reentered("put_pages_persistent");
	}
	nvsim_lock_acquire();
	pin = nvsim_pin_by_table(page_table);
	if (pin && pin->persistent) {
		nvsim_pin_put(pin);
		ret = 0;
	} else {
		/* The driver reaches into the table's private object: no clean error there. */
		nvsim_client_err("put_pages_persistent of %s\n",
				 pin ? "a table with a callback" : "a freed or unknown table");
	}
	nvsim_lock_release();
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

/* Maps every page of @pin for @peer into a new mapping, linked into the table's list. */
static int nvsim_dma_map(struct nvsim_pin *pin, struct pci_dev *peer,
			 struct nvidia_p2p_dma_mapping **dma_mapping)
{
	struct nvidia_p2p_dma_mapping *m;
	struct nvsim_map *map;
	u32 i;

	map = nvsim_map_new();
	if (!map)
		return -ENOMEM;
	m = map->m;
	m->dma_addresses = kcalloc(pin->count, sizeof(u64), GFP_KERNEL);
	if (!m->dma_addresses) {
		nvsim_map_free(map);
		return -ENOMEM;
	}
	m->version = NVIDIA_P2P_DMA_MAPPING_VERSION;
	m->page_size_type = NVIDIA_P2P_PAGE_SIZE_64KB;
	m->pci_dev = peer;
	map->pin = pin;
	atomic64_inc(&st.dma_mappings_live);
	for (i = 0; i < pin->count; i++) {
		u32 bar_page = pin->alloc->pages[pin->first + i];
		dma_addr_t addr = dma_map_resource(&peer->dev, nvsim_page_bus(bar_page),
						   GPU_PAGE_SIZE, DMA_BIDIRECTIONAL, 0);

		if (dma_mapping_error(&peer->dev, addr)) {
			nvsim_unmap_one(map);
			return -EIO;
		}
		m->dma_addresses[i] = addr;
		m->entries = i + 1;
	}
	down(&pin->maps.lock);
	list_add_tail(&map->node, &pin->maps.head);
	up(&pin->maps.lock);
	*dma_mapping = m;
	return 0;
}

/*
 * The driver reads the table before it takes any lock and links the new
 * mapping into the table's list after: a table freed before the call, or
 * while it waited for the lock, is a use-after-free there. nvsim counts it
 * and fails the call (-EFAULT, nvsim's choice: the driver has no defined
 * outcome), or, if the address is a newer pin's table by then, maps that
 * pin's memory as the driver would.
 */
int nvidia_p2p_dma_map_pages(struct pci_dev *peer,
			     struct nvidia_p2p_page_table *page_table,
			     struct nvidia_p2p_dma_mapping **dma_mapping)
{
	struct nvsim_call call;
	struct nvsim_pin *pin;
	bool live;
	int ret;

	might_sleep();
	if (!peer || !page_table || !dma_mapping)
		return -EINVAL;
	if (nvsim_lock_held_by_me())
		return nvsim_reentered("dma_map_pages");

	nvsim_call_begin(&call, page_table, NULL);
	live = nvsim_table_live(page_table);
	nvsim_entry_delay(&dma_map_delay_us);
	nvsim_lock_acquire();
	st.dma_map_calls++;
	pin = nvsim_pin_by_table(page_table);
	if (!live || nvsim_call_saw_free(&call, false)) {
		if (pin) {
			nvsim_client_err("stale dma_map_pages: its table was freed by the free callback and is now a newer pin's, whose memory is mapped\n");
		} else {
			/*
			 * The window every client is left: it checks that the
			 * table is live, then calls, and the free callback may
			 * run between the two or while the call waits for the
			 * lock. nvsim cannot tell such a client from one that
			 * did not check: both are counted here, and KASAN sees
			 * a client's own read of a freed table.
			 */
			pr_warn("DMA-mapping window: dma_map_pages of a table freed %s: the driver reads it before its lock and links the mapping into it after\n",
				live ? "while the call waited" : "before the call");
			atomic64_inc(&st.dma_map_window);
			ret = -EFAULT;
			goto out;
		}
	}
	ret = -ENOTSUPP;
	if (pin->force_bar1)
		goto out;
	if (READ_ONCE(refuse_peers) & BIT(pin->gpu)) {
		st.topology_refusals++;
		goto out;
	}
	ret = nvsim_fault_hit(&fault_dma_map);
	if (ret)
		goto out;
	ret = nvsim_dma_map(pin, peer, dma_mapping);
out:
	nvsim_lock_release();
	nvsim_call_end(&call);
	return ret;
}
EXPORT_SYMBOL(nvidia_p2p_dma_map_pages);

/*
 * Takes only the table's semaphore, as the driver does (not nvsim_lock):
 * it may sleep. A mapping that is not on the table's list is 0 in the driver
 * (already unlinked); a table freed before the call is a use-after-free
 * there (it takes the semaphore inside the freed object). Both are counted.
 */
int nvidia_p2p_dma_unmap_pages(struct pci_dev *peer,
			       struct nvidia_p2p_page_table *page_table,
			       struct nvidia_p2p_dma_mapping *dma_mapping)
{
	struct nvsim_map *map, *found = NULL;
	struct nvsim_call call;
	struct nvsim_pin *pin;

	might_sleep();
	if (!peer || !page_table || !dma_mapping)
		return -EINVAL;

	nvsim_call_begin(&call, page_table, dma_mapping);
	/* Test knob: a slow unmap, so that a free callback can come during it. */
	if (unmap_delay_us)
		fsleep(unmap_delay_us);
	spin_lock(&nvsim_pins_lock);
	pin = nvsim_pin_by_table(page_table);
	if (pin)
		refcount_inc(&pin->refs);
	spin_unlock(&nvsim_pins_lock);
	if (!pin) {
		nvsim_client_err("dma_unmap_pages of a freed table: the driver takes a semaphore inside freed memory\n");
		goto out;
	}
	down(&pin->maps.lock);
	list_for_each_entry(map, &pin->maps.head, node) {
		if (map->m == dma_mapping) {
			list_del(&map->node);
			found = map;
			break;
		}
	}
	up(&pin->maps.lock);
	nvsim_pin_put_ref(pin);
	if (!found && nvsim_call_saw_free(&call, false)) {
		nvsim_client_err("dma_unmap_pages of a table freed while the call waited: the driver takes a semaphore inside freed memory\n");
		goto out;
	} else if (!found) {
		nvsim_client_err("dma_unmap_pages of a mapping that is not the table's (unmapped already, or another table's)\n");
		goto out;
	}
	if (nvsim_call_saw_free(&call, false) || nvsim_call_saw_free(&call, true))
		nvsim_client_err("stale dma_unmap_pages: its table or mapping was freed and handed out again while the call waited; that mapping is unmapped\n");
	if (found->m->pci_dev != peer) {
		WARN(1, "nvsim: dma_unmap_pages with another peer than the mapping's\n");
		nvsim_client_err("dma_unmap_pages with the wrong peer\n");
	}
	nvsim_unmap_one(found);
out:
	nvsim_call_end(&call);
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

/*
 * First fit in @s from NVSIM_VA_BASE, at a multiple of @align: a freed range is
 * handed out again.
 */
static u64 nvsim_va_fit(struct nvsim_space *s, u64 bytes, u64 align)
{
	struct nvsim_alloc *a;
	u64 cand = NVSIM_VA_BASE;

	list_for_each_entry(a, &s->allocs, node) {
		if (cand + bytes <= a->va)
			break;
		cand = round_up(a->va + ((u64)a->npages << GPU_PAGE_SHIFT), align);
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

/*
 * Takes @npages free GPU pages into *pagesp. By default one contiguous extent
 * of the BAR, the first with room from the cursor on (a pin then usually
 * gets one BAR1 extent, as on the driver), page by page where no extent is
 * large enough; with fragmented_bar, NVSIM_PAGE_STRIDE BAR pages apart.
 */
static int nvsim_pages_take(u32 **pagesp, u64 npages)
{
	u32 *pages, i, p, stride = fragmented_bar ? NVSIM_PAGE_STRIDE : 1;
	unsigned long run = gpu.npages;

	lockdep_assert_held(&nvsim_lock);
	if (!gpu.pdev)
		return -ENODEV;
	if (npages > gpu.npages - bitmap_weight(gpu.used, gpu.npages))
		return -ENOMEM;
	pages = kcalloc(npages, sizeof(*pages), GFP_KERNEL);
	if (!pages)
		return -ENOMEM;
	if (!fragmented_bar) {
		run = bitmap_find_next_zero_area(gpu.used, gpu.npages, gpu.cursor, npages, 0);
		if (run >= gpu.npages)
			run = bitmap_find_next_zero_area(gpu.used, gpu.npages, 0, npages, 0);
	}
	p = run < gpu.npages ? run : gpu.cursor;
	for (i = 0; i < npages; i++) {
		while (test_bit(p, gpu.used))
			p = (p + 1) % gpu.npages;
		set_bit(p, gpu.used);
		if (test_and_clear_bit(p, gpu.poisoned))
			nvsim_check_poison(p);
		pages[i] = p;
		p = (p + stride) % gpu.npages;
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
	/*
	 * CUDA maps device memory in 2 MiB pieces: a pool block, and an
	 * allocation from 2 MiB up, start on a 2 MiB boundary (tests/cuda-trace,
	 * "ranges"). Smaller allocations of their own (no such thing in CUDA)
	 * on a 64 KiB one.
	 */
	a->va = nvsim_va_fit(s, npages << GPU_PAGE_SHIFT,
			     size >= NVSIM_POOL_BLOCK ? NVSIM_POOL_BLOCK : GPU_PAGE_SIZE);
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
	if (a && a->cached) {
		/* A kept empty block serves again, its pins (if any) still on it. */
		a->cached = false;
		st.pool_blocks_cached--;
		st.allocations_live++;
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
	/* A size whose rounding up wraps is no size: CUDA answers OUT_OF_MEMORY. */
	if (!req.size || req.size > (u64)U32_MAX << GPU_PAGE_SHIFT || req.pad ||
	    (req.flags & ~(NVSIM_ALLOC_SUBALLOC | NVSIM_ALLOC_GPU1)) ||
	    ((req.flags & NVSIM_ALLOC_SUBALLOC) && req.size >= NVSIM_POOL_BLOCK) ||
	    ((req.flags & NVSIM_ALLOC_SUBALLOC) && (req.flags & NVSIM_ALLOC_GPU1)))
		return -EINVAL;

	nvsim_lock_acquire();
	if (req.flags & NVSIM_ALLOC_SUBALLOC) {
		ret = nvsim_sub_alloc(f, &req);
	} else {
		a = nvsim_alloc_new(f, req.size);
		if (IS_ERR(a)) {
			ret = PTR_ERR(a);
		} else {
			/* Under nvsim_lock, before any pin can see it. */
			a->gpu = !!(req.flags & NVSIM_ALLOC_GPU1);
			req.va = a->va;
			req.buffer_id = a->buffer_id;
		}
	}
	nvsim_lock_release();
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
	nvsim_lock_acquire();
	a = nvsim_caller_alloc(va, &sub);
	if (a && a->owner == f && sub && sub->va == va) {
		nvsim_free_sub(a, sub);
		ret = 0;
	} else if (a && a->owner == f && !sub && !a->phys && a->va == va) {
		nvsim_free_alloc(a);
		ret = 0;
	}
	nvsim_lock_release();
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
	nvsim_lock_acquire();
	a = nvsim_caller_alloc(q.va, &sub);
	if (a) {
		q.base = sub ? sub->va : a->va;
		q.size = sub ? sub->size : a->size;
		q.buffer_id = sub ? sub->buffer_id : a->buffer_id;
		q.sync_memops = sub ? sub->sync_memops : a->sync_memops;
		q.p2p_token = a->space->p2p_token;
		q.va_space = a->space->va_space;
		q.flags = (sub ? NVSIM_QUERY_SUBALLOC : 0) | (a->phys ? NVSIM_QUERY_VMM : 0) |
			  (a->gpu ? NVSIM_QUERY_GPU1 : 0);
		q.pad = 0;
		ret = 0;
	}
	nvsim_lock_release();
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
	nvsim_lock_acquire();
	a = nvsim_caller_alloc(req.va, &sub);
	if (sub)
		sub->sync_memops = req.value;
	else if (a)
		a->sync_memops = req.value;
	ret = a ? 0 : -EINVAL;
	nvsim_lock_release();
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
	nvsim_lock_acquire();
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
	nvsim_lock_release();
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
	nvsim_lock_acquire();
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
	nvsim_lock_release();
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
	nvsim_lock_acquire();
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
	nvsim_lock_release();
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
	nvsim_lock_acquire();
	phys = nvsim_phys_by_handle(f, handle);
	if (phys) {
		nvsim_phys_release(phys);
		ret = 0;
	}
	nvsim_lock_release();
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
	if (!nvsim_vmm_size_ok(req.size) || req.va % NVSIM_VMM_GRANULARITY ||
	    req.va + req.size < req.va)
		return -EINVAL;
	a = kzalloc_obj(*a, GFP_KERNEL);
	if (!a)
		return -ENOMEM;
	nvsim_lock_acquire();
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
	nvsim_lock_release();
	if (!ret && copy_to_user(uarg, &req, sizeof(req)))
		ret = -EFAULT;	/* the mapping stays; closing the file frees it */
	return ret;
}

/*
 * cuMemUnmap: every mapping in [va, va + size), each wholly inside it (at
 * least one), else -EINVAL: a range that cuts a mapping, or holds another
 * file's or a plain allocation, unmaps nothing. Their pins are called back
 * before it returns.
 */
static int nvsim_ioctl_vmm_unmap(struct nvsim_file *f, struct nvsim_vmm_range_args __user *uarg)
{
	struct nvsim_vmm_range_args req;
	struct nvsim_alloc *a;
	struct nvsim_space *s;
	unsigned int n = 0;
	int ret = -EINVAL;

	if (copy_from_user(&req, uarg, sizeof(req)))
		return -EFAULT;
	if (!req.size || req.va + req.size < req.va)
		return -EINVAL;
	nvsim_lock_acquire();
	s = nvsim_space_by_tgid(current->tgid);
	if (!s)
		goto out;
	list_for_each_entry(a, &s->allocs, node) {
		u64 end = a->va + a->size;

		if (a->va >= req.va + req.size || end <= req.va)
			continue;
		if (!a->phys || a->owner != f || a->va < req.va || end > req.va + req.size)
			goto out;
		n++;
	}
	if (!n)
		goto out;
	ret = 0;
	/*
	 * One mapping at a time: the last allocation's free may free @s (the
	 * reservation can be gone with another file), so @s is not read after
	 * the n-th.
	 */
	while (n--) {
		list_for_each_entry(a, &s->allocs, node)
			if (a->va < req.va + req.size && a->va + a->size > req.va)
				break;
		nvsim_free_alloc(a);
	}
out:
	nvsim_lock_release();
	return ret;
}

/*
 * NVSIM_IOCTL_TOUCH's memory: NVSIM_TOUCH_PAGES pages in blocks of 1 MiB,
 * allocated at the first call and kept until unload.
 */
#define NVSIM_TOUCH_ORDER	8
#define NVSIM_TOUCH_BLOCKS	(NVSIM_TOUCH_PAGES >> NVSIM_TOUCH_ORDER)

static struct page *nvsim_touch_blocks[NVSIM_TOUCH_BLOCKS];
static bool nvsim_touch_ready;
static DEFINE_MUTEX(nvsim_touch_lock);

static int nvsim_touch_alloc(void)
{
	int i, ret = 0;

	mutex_lock(&nvsim_touch_lock);
	for (i = 0; i < NVSIM_TOUCH_BLOCKS && !nvsim_touch_ready; i++) {
		if (nvsim_touch_blocks[i])
			continue;
		nvsim_touch_blocks[i] = alloc_pages(GFP_KERNEL | __GFP_ZERO | __GFP_NOWARN,
						    NVSIM_TOUCH_ORDER);
		if (!nvsim_touch_blocks[i]) {
			ret = -ENOMEM;
			break;
		}
	}
	if (!ret) {
		/* Pairs with nvsim_ioctl_touch()'s acquire: the blocks are seen set. */
		smp_store_release(&nvsim_touch_ready, true);
	}
	mutex_unlock(&nvsim_touch_lock);
	return ret;
}

static void nvsim_touch_free(void)
{
	int i;

	for (i = 0; i < NVSIM_TOUCH_BLOCKS; i++)
		if (nvsim_touch_blocks[i])
			__free_pages(nvsim_touch_blocks[i], NVSIM_TOUCH_ORDER);
}

/* The next of the caller's pseudo-random numbers (xorshift32; never 0). */
static u32 nvsim_touch_next(u32 *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 17;
	*x ^= *x << 5;
	return *x;
}

/* Reads `lines` lines of page `n` of the touch memory, each chosen with `x`. */
static u64 nvsim_touch_page(u32 n, u32 lines, u32 *x)
{
	struct page *block = nvsim_touch_blocks[n >> NVSIM_TOUCH_ORDER];
	u8 *page = page_address(block + (n & ((1 << NVSIM_TOUCH_ORDER) - 1)));
	u32 per_page = PAGE_SIZE / L1_CACHE_BYTES;
	u64 sum = 0;
	u32 i;

	for (i = 0; i < lines; i++) {
		u32 line = nvsim_touch_next(x) % per_page;

		sum += READ_ONCE(*(u64 *)(page + line * L1_CACHE_BYTES));
	}
	return sum;
}

static int nvsim_ioctl_touch(void __user *uarg)
{
	u32 per_page = PAGE_SIZE / L1_CACHE_BYTES;
	struct nvsim_touch_args t;
	u32 i, x;
	int ret;

	if (copy_from_user(&t, uarg, sizeof(t)))
		return -EFAULT;
	if (t.cold > NVSIM_TOUCH_MAX || t.hot > NVSIM_TOUCH_MAX || !t.lines || t.lines > per_page)
		return -EINVAL;
	x = t.seed ?: 1;
	/* Pairs with nvsim_touch_alloc()'s release. */
	if (!smp_load_acquire(&nvsim_touch_ready)) {
		ret = nvsim_touch_alloc();
		if (ret)
			return ret;
	}
	t.sum = 0;
	for (i = 0; i < t.cold + t.hot; i++) {
		u32 n = nvsim_touch_next(&x) % (i < t.cold ? NVSIM_TOUCH_PAGES : 2);

		t.sum += nvsim_touch_page(n, t.lines, &x);
	}
	if (copy_to_user(uarg, &t, sizeof(t)))
		return -EFAULT;
	return 0;
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
	case NVSIM_IOCTL_TOUCH:
		return nvsim_ioctl_touch(uarg);
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

	nvsim_lock_acquire();
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
	nvsim_lock_release();
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

/* Frees what a closed file held, firing callbacks in the calling thread. */
static void nvsim_file_free(struct nvsim_file *f)
{
	struct nvsim_reserve *r, *rnext;
	struct nvsim_phys *phys, *pnext;
	struct nvsim_alloc *a, *next;

	nvsim_lock_acquire();
	list_for_each_entry_safe(a, next, &f->allocs, file_node)
		nvsim_free_alloc(a);
	list_for_each_entry_safe(r, rnext, &f->reserves, file_node)
		nvsim_reserve_free(r);
	list_for_each_entry_safe(phys, pnext, &f->phys, file_node)
		nvsim_phys_release(phys);
	nvsim_lock_release();
	kfree(f);
}

/* A close deferred to nvsim's kernel thread (module parameter deferred_close). */
static void nvsim_deferred_close_fn(struct work_struct *work)
{
	nvsim_file_free(container_of(work, struct nvsim_file, deferred_close));
	atomic_dec(&st.deferred_closes_pending);
}

/*
 * Like the process exiting or closing its NVIDIA fd: callbacks fire here, or,
 * for a share of the closes (deferred_close), later in a kernel thread, as
 * the driver defers a close to its own thread.
 */
static int nvsim_release(struct inode *inode, struct file *file)
{
	struct nvsim_file *f = file->private_data;

	if (get_random_u32_below(100) < READ_ONCE(deferred_close)) {
		nvsim_lock_acquire();
		st.deferred_closes++;
		nvsim_lock_release();
		atomic_inc(&st.deferred_closes_pending);
		INIT_WORK(&f->deferred_close, nvsim_deferred_close_fn);
		queue_work(nvsim_wq, &f->deferred_close);
		return 0;
	}
	nvsim_file_free(f);
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
	nvsim_lock_acquire();
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
	seq_printf(m, "callback_ns %lld\n", atomic64_read(&st.callback_ns));
	seq_printf(m, "get_pages_calls %llu\n", st.get_pages_calls);
	seq_printf(m, "get_pages_failed %llu\n", st.get_pages_failed);
	seq_printf(m, "get_pages_ns %lld\n", atomic64_read(&st.get_pages_ns));
	seq_printf(m, "put_pages_calls %lld\n", atomic64_read(&st.put_pages_calls));
	seq_printf(m, "put_pages_ns %lld\n", atomic64_read(&st.put_pages_ns));
	seq_printf(m, "dma_map_calls %llu\n", st.dma_map_calls);
	seq_printf(m, "faults_injected %llu\n", st.faults_injected);
	seq_printf(m, "put_pages_wrong_process %llu\n", st.put_pages_wrong_process);
	seq_printf(m, "client_errors %lld\n", atomic64_read(&st.client_errors));
	seq_printf(m, "dma_map_window %lld\n", atomic64_read(&st.dma_map_window));
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
	seq_printf(m, "pool_blocks_cached %llu\n", st.pool_blocks_cached);
	seq_printf(m, "callback_per_buffer %d\n", READ_ONCE(callback_per_buffer));
	seq_printf(m, "fragmented_bar %d\n", fragmented_bar);
	seq_printf(m, "recycling %d\n", nvsim_recycling());
	seq_printf(m, "tables_live %lld\n", atomic64_read(&st.tables_live));
	seq_printf(m, "page_objects_live %lld\n", atomic64_read(&st.page_objects_live));
	seq_printf(m, "uuids_live %lld\n", atomic64_read(&st.uuids_live));
	seq_printf(m, "mapping_objects_live %lld\n", atomic64_read(&st.mapping_objects_live));
	seq_printf(m, "objects_recycled %lld\n", atomic64_read(&st.objects_recycled));
	seq_printf(m, "pins_failed_between_steps %llu\n", st.pins_failed_between_steps);
	seq_printf(m, "deferred_closes %llu\n", st.deferred_closes);
	seq_printf(m, "topology_refusals %llu\n", st.topology_refusals);
	seq_printf(m, "deferred_closes_pending %d\n", atomic_read(&st.deferred_closes_pending));
	nvsim_lock_release();
	return 0;
}
DEFINE_SHOW_ATTRIBUTE(nvsim_stats);

static int nvsim_allocations_show(struct seq_file *m, void *unused)
{
	struct nvsim_alloc *a;
	struct nvsim_pin *pin;

	nvsim_lock_acquire();
	seq_puts(m, "buffer_id tgid va size pins persistent_pins\n");
	list_for_each_entry(a, &nvsim_all_allocs, all_node) {
		unsigned int pins = 0, persistent = 0;

		list_for_each_entry(pin, &a->pins, node)
			pin->persistent ? persistent++ : pins++;
		seq_printf(m, "%llu %d 0x%llx %llu %u %u\n", a->buffer_id, a->space->tgid,
			   a->va, a->size, pins, persistent);
	}
	nvsim_lock_release();
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
	nvsim_lock_acquire();
	*f = new;
	nvsim_lock_release();
	return len;
}

static ssize_t nvsim_fault_read(struct file *file, char __user *ubuf, size_t len, loff_t *ppos)
{
	struct nvsim_fault *f = file->private_data;
	char buf[48];
	int n;

	nvsim_lock_acquire();
	n = scnprintf(buf, sizeof(buf), "%d %d %u\n", f->times, f->err, f->percent);
	nvsim_lock_release();
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
	nvsim_lock_acquire();
	if (!nvsim_find_by_id(id, &sub))
		ret = -ENOENT;
	else if (delay_us)
		nvsim_schedule_free(id, delay_us);
	else
		nvsim_free_by_id(id);
	nvsim_lock_release();
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

	nvsim_lock_acquire();
	if (gpu.pdev)
		for_each_set_bit(p, gpu.poisoned, gpu.npages)
			nvsim_check_poison(p);
	nvsim_lock_release();
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
	nvsim_lock_acquire();
	free_on_pin.buffer_id = id;
	free_on_pin.delay_us = delay_us;
	nvsim_lock_release();
	return len;
}

static const struct file_operations nvsim_free_on_pin_fops = {
	.open = simple_open,
	.write = nvsim_free_on_pin_write,
};

/* Any write: give every cached (empty) pool block back, firing its callbacks here. */
static ssize_t nvsim_trim_write(struct file *file, const char __user *ubuf,
				size_t len, loff_t *ppos)
{
	nvsim_lock_acquire();
	nvsim_trim_pools();
	nvsim_lock_release();
	return len;
}

static const struct file_operations nvsim_trim_fops = {
	.open = simple_open,
	.write = nvsim_trim_write,
};

/* "BUFFER_ID": the next pin over it has it freed between its two steps (0 disarms). */
static ssize_t nvsim_free_between_steps_write(struct file *file, const char __user *ubuf,
					      size_t len, loff_t *ppos)
{
	char buf[48];
	ssize_t ret = nvsim_read_line(ubuf, len, buf, sizeof(buf));
	u64 id;

	if (ret < 0)
		return ret;
	if (kstrtou64(strim(buf), 0, &id))
		return -EINVAL;
	nvsim_lock_acquire();
	WRITE_ONCE(free_between_steps_id, id);
	nvsim_lock_release();
	return len;
}

static const struct file_operations nvsim_free_between_steps_fops = {
	.open = simple_open,
	.write = nvsim_free_between_steps_write,
};

/*
 * client_errors, dma_map_window: read one, or write 0 to clear it (for the
 * tests that make a client error, or enter the DMA-mapping window, on purpose
 * and have checked it). @data is the counter.
 */
static int nvsim_counter_get(void *data, u64 *val)
{
	*val = atomic64_read(data);
	return 0;
}

static int nvsim_counter_clear(void *data, u64 val)
{
	if (val)
		return -EINVAL;
	atomic64_set(data, 0);
	return 0;
}
DEFINE_DEBUGFS_ATTRIBUTE(nvsim_counter_fops, nvsim_counter_get,
			 nvsim_counter_clear, "%llu\n");

static int nvsim_bar1_size_get(void *data, u64 *val)
{
	nvsim_lock_acquire();
	*val = gpu.bar1_size;
	nvsim_lock_release();
	return 0;
}

/* Shrinks (or grows) the BAR1 aperture at run time; existing pins stay. */
static int nvsim_bar1_size_set(void *data, u64 val)
{
	nvsim_lock_acquire();
	gpu.bar1_size = val;
	nvsim_lock_release();
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
	debugfs_create_file("fail_put_pages", 0600, nvsim_debugfs, &fault_put_pages,
			    &nvsim_fault_fops);
	debugfs_create_file("free", 0200, nvsim_debugfs, NULL, &nvsim_free_fops);
	debugfs_create_file("check_freed", 0200, nvsim_debugfs, NULL, &nvsim_check_freed_fops);
	debugfs_create_u32("unmap_delay_us", 0600, nvsim_debugfs, &unmap_delay_us);
	debugfs_create_bool("refuse_persistent", 0600, nvsim_debugfs, &refuse_persistent);
	debugfs_create_x32("refuse_peers", 0600, nvsim_debugfs, &refuse_peers);
	debugfs_create_u32("put_pages_delay_us", 0600, nvsim_debugfs, &put_pages_delay_us);
	debugfs_create_u32("dma_map_delay_us", 0600, nvsim_debugfs, &dma_map_delay_us);
	debugfs_create_file("free_on_pin", 0200, nvsim_debugfs, NULL, &nvsim_free_on_pin_fops);
	debugfs_create_file_unsafe("bar1_size", 0600, nvsim_debugfs, NULL, &nvsim_bar1_size_fops);
	debugfs_create_file("trim", 0200, nvsim_debugfs, NULL, &nvsim_trim_fops);
	debugfs_create_file("free_between_pin_steps", 0200, nvsim_debugfs, NULL,
			    &nvsim_free_between_steps_fops);
	debugfs_create_file_unsafe("client_errors", 0600, nvsim_debugfs,
				   &st.client_errors, &nvsim_counter_fops);
	debugfs_create_file_unsafe("dma_map_window", 0600, nvsim_debugfs,
				   &st.dma_map_window, &nvsim_counter_fops);
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
		return -EBUSY;	/* one ivshmem device */
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

	nvsim_lock_acquire();
	gpu.npages = len >> GPU_PAGE_SHIFT;
	gpu.bar = bar;
	gpu.used = bitmap_zalloc(gpu.npages, GFP_KERNEL);
	gpu.poisoned = bitmap_zalloc(gpu.npages, GFP_KERNEL);
	gpu.bar1_refs = kcalloc(gpu.npages, sizeof(*gpu.bar1_refs), GFP_KERNEL);
	if (!gpu.used || !gpu.poisoned || !gpu.bar1_refs) {
		bitmap_free(gpu.used);
		bitmap_free(gpu.poisoned);
		kfree(gpu.bar1_refs);
		nvsim_lock_release();
		return -ENOMEM;
	}
	gpu.bar_phys = pci_resource_start(pdev, NVSIM_BAR);
	gpu.bar_bus = pci_bus_address(pdev, NVSIM_BAR);
	gpu.bar1_size = len;
	gpu.cursor = 0;
	gpu.pdev = pdev;
	nvsim_lock_release();
	pci_info(pdev, "simulated GPU: BAR1 %pR (bus %pad), %u pages of 64 KiB, page tables v%u.%u\n",
		 &pdev->resource[NVSIM_BAR], &gpu.bar_bus, gpu.npages,
		 page_table_version >> 16, page_table_version & 0xffff);
	return 0;
}

/* The GPU goes away: its memory is freed as on process exit, persistent pins too. */
static void nvsim_remove(struct pci_dev *pdev)
{
	struct nvsim_alloc *a, *next;
	struct nvsim_phys *phys;
	struct nvsim_pin *pin;

	nvsim_lock_acquire();
	list_for_each_entry_safe(a, next, &nvsim_all_allocs, all_node)
		nvsim_free_alloc(a);
	list_for_each_entry_safe(a, next, &nvsim_zombies, node) {
		/* The last put frees the zombie: its list is not read after it. */
		bool last = list_empty(&a->pins);

		while (!last) {
			pin = list_first_entry(&a->pins, struct nvsim_pin, node);
			last = list_is_singular(&a->pins);
			nvsim_client_err("persistent pin left at GPU removal\n");
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
	nvsim_lock_release();
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
	/* The driver's own cache of struct nvidia_p2p_page: one object per page. */
	nvsim_page_cache = kmem_cache_create("nvsim_p2p_page", sizeof(struct nvidia_p2p_page),
					     0, SLAB_NO_MERGE, NULL);
	if (!nvsim_page_cache)
		return -ENOMEM;
	nvsim_wq = alloc_workqueue("nvsim", WQ_UNBOUND, 0);
	if (!nvsim_wq) {
		kmem_cache_destroy(nvsim_page_cache);
		return -ENOMEM;
	}
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
	kmem_cache_destroy(nvsim_page_cache);
	return ret;
}

static void __exit nvsim_exit(void)
{
	struct nvsim_delayed_free *df;

	if (gdrdrv_standin)
		misc_deregister(&nvsim_gdrdrv_misc);
	misc_deregister(&nvsim_misc);
	debugfs_remove_recursive(nvsim_debugfs);
	/* Run armed frees now, then wait for them and for deferred closes. */
	nvsim_lock_acquire();
	list_for_each_entry(df, &nvsim_delayed_frees, node)
		mod_delayed_work(nvsim_wq, &df->work, 0);
	nvsim_lock_release();
	destroy_workqueue(nvsim_wq);
	pci_unregister_driver(&nvsim_driver);
	nvsim_pools_destroy();
	nvsim_touch_free();
	kmem_cache_destroy(nvsim_page_cache);
}

module_init(nvsim_init);
module_exit(nvsim_exit);

MODULE_DESCRIPTION("Simulator of the NVIDIA nv-p2p interface for gdrpeer tests");
MODULE_LICENSE("Dual MIT/GPL");
