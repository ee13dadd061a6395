/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * gdrpeer's declaration of the NVIDIA peer-to-peer kernel ABI as the Tegra
 * (Jetson, DRIVE) drivers export it: the signature set of NVIDIA's GPUDirect
 * RDMA guide, section 4.4.2 "Modification to Kernel API".
 *
 * gdrpeer is built against this header with NV_P2P_TEGRA=1 (and no
 * NVIDIA_SRC), so that the wrapper's Tegra shape is compiled in CI next to
 * the desktop one (include/nv-p2p.h). The build recognises a Tegra header,
 * this one or the driver's own, by NVIDIA_P2P_PINNED.
 *
 * On Tegra the GPU shares system memory: a page table lists the 4 KiB
 * struct pages behind the pinned range, and a DMA mapping is a list of
 * (hw_address, hw_len) segments made by dma_map_sg() for a struct device.
 * There is no persistent-pin API, and the free callback also runs when the
 * client calls nvidia_p2p_put_pages(): the client then frees the table with
 * nvidia_p2p_free_page_table() from the callback.
 *
 * Only what a peer module reads is declared (no typedefs: the driver's header
 * has nvidia_p2p_page_table_t and nvidia_p2p_dma_mapping_t too). The
 * structures are allocated by the driver; their driver-private tails (MMU
 * notifier, lock, callback) are left out, as a peer never allocates nor
 * copies them.
 */
#ifndef _GDRPEER_NV_P2P_TEGRA_H_
#define _GDRPEER_NV_P2P_TEGRA_H_

#include <linux/types.h>
#include <linux/dma-direction.h>

struct device;
struct mm_struct;
struct page;

/* Identifies this declaration; NVIDIA_P2P_PINNED identifies any Tegra one. */
#define NVIDIA_P2P_TEGRA 1

/* nvidia_p2p_page_table::mapped */
#define NVIDIA_P2P_UNINITIALIZED 0x0
#define NVIDIA_P2P_PINNED 0x1U
#define NVIDIA_P2P_MAPPED 0x2U

#define NVIDIA_P2P_MAJOR_VERSION_MASK 0xffff0000
#define NVIDIA_P2P_MINOR_VERSION_MASK 0x0000ffff

/*
 * Version words are (major << 16 | minor): a table or mapping is compatible
 * with a client when the majors are equal and the minor is at least the one
 * the client was built for.
 */

/* Tegra tables always carry NVIDIA_P2P_PAGE_SIZE_4KB. */
enum nvidia_p2p_page_size_type {
	NVIDIA_P2P_PAGE_SIZE_4KB = 0,
	NVIDIA_P2P_PAGE_SIZE_64KB,
	NVIDIA_P2P_PAGE_SIZE_128KB,
	NVIDIA_P2P_PAGE_SIZE_COUNT
};

#define NVIDIA_P2P_PAGE_TABLE_VERSION 0x00010000

struct nvidia_p2p_page_table {
	u32 version;
	u32 page_size;		/* enum nvidia_p2p_page_size_type */
	u64 size;		/* bytes pinned */
	u32 entries;		/* size / 4 KiB */
	struct page **pages;
	u64 vaddr;
	u32 mapped;		/* NVIDIA_P2P_PINNED | NVIDIA_P2P_MAPPED */
	struct mm_struct *mm;
	/* driver-private fields follow */
};

#define NVIDIA_P2P_DMA_MAPPING_VERSION 0x00010000

struct nvidia_p2p_dma_mapping {
	u32 version;
	dma_addr_t *hw_address;	/* entries segments: DMA address ... */
	u32 *hw_len;		/* ... and length in bytes */
	u32 entries;
	struct sg_table *sgt;
	struct device *dev;
	struct nvidia_p2p_page_table *page_table;
	enum dma_data_direction direction;
};

/*
 * Pins the memory [vaddr, vaddr + size) of the calling process and returns
 * its pages in *page_table. vaddr and size must be 4 KiB aligned.
 * free_callback(data), both non-NULL, runs when the memory is freed and also
 * when the client calls nvidia_p2p_put_pages().
 */
int nvidia_p2p_get_pages(u64 vaddr, u64 size,
			 struct nvidia_p2p_page_table **page_table,
			 void (*free_callback)(void *data), void *data);

/* Unpins a table; the free callback runs before it returns. */
int nvidia_p2p_put_pages(struct nvidia_p2p_page_table *page_table);

/* Frees a table; called from the free callback. */
int nvidia_p2p_free_page_table(struct nvidia_p2p_page_table *page_table);

/* Maps every page of page_table for DMA by dev. */
int nvidia_p2p_dma_map_pages(struct device *dev,
			     struct nvidia_p2p_page_table *page_table,
			     struct nvidia_p2p_dma_mapping **map,
			     enum dma_data_direction direction);

/* Unmaps and frees a mapping; not from the free callback. */
int nvidia_p2p_dma_unmap_pages(struct nvidia_p2p_dma_mapping *map);

/* Unmaps and frees a mapping; called from the free callback. */
int nvidia_p2p_free_dma_mapping(struct nvidia_p2p_dma_mapping *dma_mapping);

#endif /* _GDRPEER_NV_P2P_TEGRA_H_ */
