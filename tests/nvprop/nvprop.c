// SPDX-License-Identifier: GPL-2.0
/*
 * nvprop: a stand-in for NVIDIA's proprietary kernel module (nvidia.ko as the
 * proprietary flavour builds it), for one test only.
 *
 * It exports the nv-p2p functions of include/nv-p2p.h (the same prototypes
 * as nvsim, so the same symbol CRCs) under NVIDIA's license string. The kernel
 * then marks it proprietary (taint P), and since Linux 5.9 it refuses to load
 * a module that uses GPL-only symbols (gdrpeer: every export of the Rust
 * kernel crate is EXPORT_SYMBOL_GPL) together with symbols of a proprietary
 * module: "module using GPL-only symbols uses symbols ... from proprietary
 * module nvidia". tests/plans/check.sh checks that gdrpeer's load fails so.
 *
 * The functions do nothing (gdrpeer never gets to call them); the module
 * uses no GPL-only symbol of its own, which modpost would refuse.
 */
/*
 * nvsim.c's includes, all of them: a symbol's CRC covers the types its
 * prototype reaches (struct pci_dev and all it points to), as complete as the
 * including file sees them, so the same CRCs need the same view.
 */
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

int nvidia_p2p_get_pages(u64 p2p_token, u32 va_space, u64 virtual_address,
			 u64 length, struct nvidia_p2p_page_table **page_table,
			 void (*free_callback)(void *data), void *data)
{
	return -ENODEV;
}
EXPORT_SYMBOL(nvidia_p2p_get_pages);

int nvidia_p2p_put_pages(u64 p2p_token, u32 va_space, u64 virtual_address,
			 struct nvidia_p2p_page_table *page_table)
{
	return -EINVAL;
}
EXPORT_SYMBOL(nvidia_p2p_put_pages);

int nvidia_p2p_get_pages_persistent(u64 virtual_address, u64 length,
				    struct nvidia_p2p_page_table **page_table,
				    u32 flags)
{
	return -ENODEV;
}
EXPORT_SYMBOL(nvidia_p2p_get_pages_persistent);

int nvidia_p2p_put_pages_persistent(u64 virtual_address,
				    struct nvidia_p2p_page_table *page_table,
				    u32 flags)
{
	return -EINVAL;
}
EXPORT_SYMBOL(nvidia_p2p_put_pages_persistent);

int nvidia_p2p_free_page_table(struct nvidia_p2p_page_table *page_table)
{
	return -EINVAL;
}
EXPORT_SYMBOL(nvidia_p2p_free_page_table);

int nvidia_p2p_dma_map_pages(struct pci_dev *peer,
			     struct nvidia_p2p_page_table *page_table,
			     struct nvidia_p2p_dma_mapping **dma_mapping)
{
	return -ENODEV;
}
EXPORT_SYMBOL(nvidia_p2p_dma_map_pages);

int nvidia_p2p_dma_unmap_pages(struct pci_dev *peer,
			       struct nvidia_p2p_page_table *page_table,
			       struct nvidia_p2p_dma_mapping *dma_mapping)
{
	return -EINVAL;
}
EXPORT_SYMBOL(nvidia_p2p_dma_unmap_pages);

int nvidia_p2p_free_dma_mapping(struct nvidia_p2p_dma_mapping *dma_mapping)
{
	return -EINVAL;
}
EXPORT_SYMBOL(nvidia_p2p_free_dma_mapping);

MODULE_DESCRIPTION("gdrpeer tests: a proprietary-licensed nv-p2p exporter (stands in for nvidia.ko)");
MODULE_LICENSE("NVIDIA");
