/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * gdrpeer's declaration of the NVIDIA peer-to-peer kernel ABI (nv-p2p).
 *
 * gdrpeer is built against this header when no NVIDIA driver source is given
 * (NVIDIA_SRC=), and tests/nvsim implements it. It declares the ABI as the
 * desktop/server drivers export it: the same function signatures, structure
 * layouts and version words, so that a module built here loads next to
 * nvidia.ko. Only what a peer module uses is declared.
 *
 * Version words are (major << 16 | minor). A table or mapping is compatible
 * with a client when the majors are equal and the minor is at least the one
 * the client was built for. Page tables are 1.2 up to the 570 drivers and 2.0
 * (with a trailing flags word) from 580; clients that accept both must say so
 * explicitly.
 */
#ifndef _GDRPEER_NV_P2P_H_
#define _GDRPEER_NV_P2P_H_

#include <linux/types.h>

struct pci_dev;

enum {
	NVIDIA_P2P_ARCHITECTURE_TESLA = 0,
	NVIDIA_P2P_ARCHITECTURE_FERMI,
	NVIDIA_P2P_ARCHITECTURE_CURRENT = NVIDIA_P2P_ARCHITECTURE_FERMI
};

#define NVIDIA_P2P_PARAMS_VERSION 0x00010001

/* Page sizes the tables can carry; desktop GPUs always use 64 KiB. */
enum nvidia_p2p_page_size_type {
	NVIDIA_P2P_PAGE_SIZE_4KB = 0,
	NVIDIA_P2P_PAGE_SIZE_64KB = 1,
	NVIDIA_P2P_PAGE_SIZE_128KB = 2,
	NVIDIA_P2P_PAGE_SIZE_COUNT
};

typedef struct nvidia_p2p_page {
	u64 physical_address;
	union nvidia_p2p_request_registers {
		struct {
			u32 wreqmb_h;
			u32 rreqmb_h;
			u32 rreqmb_0;
			u32 reserved[3];
		} fermi;
	} registers;
} nvidia_p2p_page_t;

#define NVIDIA_P2P_PAGE_TABLE_VERSION 0x00020000

#define NVIDIA_P2P_PAGE_TABLE_VERSION_COMPATIBLE(p) \
	((((p)->version) & 0xffff0000) == (NVIDIA_P2P_PAGE_TABLE_VERSION & 0xffff0000) && \
	 (((p)->version) & 0xffff) >= (NVIDIA_P2P_PAGE_TABLE_VERSION & 0xffff))

/* Set in nvidia_p2p_page_table::flags (2.0 tables) on cache-coherent platforms. */
#define NVIDIA_P2P_PAGE_TABLE_FLAGS_CPU_CACHEABLE 0x1

typedef struct nvidia_p2p_page_table {
	u32 version;
	u32 page_size;		/* enum nvidia_p2p_page_size_type */
	struct nvidia_p2p_page **pages;
	u32 entries;
	u8 *gpu_uuid;		/* 16 bytes */
	u32 flags;		/* only in 2.x tables */
} nvidia_p2p_page_table_t;

#define NVIDIA_P2P_DMA_MAPPING_VERSION 0x00020003

#define NVIDIA_P2P_DMA_MAPPING_VERSION_COMPATIBLE(p) \
	((((p)->version) & 0xffff0000) == (NVIDIA_P2P_DMA_MAPPING_VERSION & 0xffff0000) && \
	 (((p)->version) & 0xffff) >= (NVIDIA_P2P_DMA_MAPPING_VERSION & 0xffff))

typedef struct nvidia_p2p_dma_mapping {
	u32 version;
	enum nvidia_p2p_page_size_type page_size_type;
	u32 entries;
	u64 *dma_addresses;
	void *private;
	struct pci_dev *pci_dev;
} nvidia_p2p_dma_mapping_t;

/*
 * Pins the GPU memory [va, va + len) of the calling process (p2p_token 0) and
 * returns its BAR1 pages in *page_table. va and len must be 64 KiB aligned.
 * free_callback(data) is called, under the driver's global lock, when the
 * memory is freed before nvidia_p2p_put_pages(); afterwards the driver frees
 * the table and its DMA mappings itself.
 * Returns 0, -EINVAL, -ENOMEM (BAR1 exhausted), -ENOTSUPP, -EBUSY, -ENODEV, -EIO.
 */
int nvidia_p2p_get_pages(u64 p2p_token, u32 va_space, u64 virtual_address,
			 u64 length, struct nvidia_p2p_page_table **page_table,
			 void (*free_callback)(void *data), void *data);

/* Unpins a table from nvidia_p2p_get_pages(); only the pinning process may. */
int nvidia_p2p_put_pages(u64 p2p_token, u32 va_space, u64 virtual_address,
			 struct nvidia_p2p_page_table *page_table);

/* Persistent pins: never called back, released by put_pages_persistent. */
#define NVIDIA_P2P_CAP_GET_PAGES_PERSISTENT_API

/*
 * flags of the persistent calls. FORCE_BAR1_MAPPING asks for BAR1 addresses
 * even on a cache-coherent platform (where pins otherwise get the GPU
 * memory's coherent addresses and CPU_CACHEABLE tables); other bits: -EINVAL.
 */
#define NVIDIA_P2P_FLAGS_DEFAULT		0
#define NVIDIA_P2P_FLAGS_FORCE_BAR1_MAPPING	1

int nvidia_p2p_get_pages_persistent(u64 virtual_address, u64 length,
				    struct nvidia_p2p_page_table **page_table,
				    u32 flags);

int nvidia_p2p_put_pages_persistent(u64 virtual_address,
				    struct nvidia_p2p_page_table *page_table,
				    u32 flags);

/* Called from the free callback only; the driver frees after it returns. */
int nvidia_p2p_free_page_table(struct nvidia_p2p_page_table *page_table);

/* Maps every page of page_table for DMA by peer. */
int nvidia_p2p_dma_map_pages(struct pci_dev *peer,
			     struct nvidia_p2p_page_table *page_table,
			     struct nvidia_p2p_dma_mapping **dma_mapping);

int nvidia_p2p_dma_unmap_pages(struct pci_dev *peer,
			       struct nvidia_p2p_page_table *page_table,
			       struct nvidia_p2p_dma_mapping *dma_mapping);

/* Called from the free callback only; the driver frees after it returns. */
int nvidia_p2p_free_dma_mapping(struct nvidia_p2p_dma_mapping *dma_mapping);

#endif /* _GDRPEER_NV_P2P_H_ */
