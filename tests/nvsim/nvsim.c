// SPDX-License-Identifier: GPL-2.0
/*
 * nvsim: a simulator of the NVIDIA driver's nv-p2p interface.
 *
 * It binds QEMU's ivshmem-plain device and uses its memory BAR as GPU BAR1,
 * and exports the nv-p2p functions with the C ABI of nv-p2p.h.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/module.h>
#include <linux/pci.h>
#include <nv-p2p.h>

#define NVSIM_VENDOR_ID 0x1af4	/* Red Hat, Inc. */
#define NVSIM_DEVICE_ID 0x1110	/* Inter-VM shared memory */
#define NVSIM_BAR1 2		/* ivshmem's memory BAR */

static struct pci_dev *nvsim_pdev;

int nvidia_p2p_get_pages(u64 p2p_token, u32 va_space, u64 virtual_address,
			 u64 length, struct nvidia_p2p_page_table **page_table,
			 void (*free_callback)(void *data), void *data)
{
	return -EINVAL;
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
	return -EINVAL;
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
	return 0;
}
EXPORT_SYMBOL(nvidia_p2p_free_page_table);

int nvidia_p2p_dma_map_pages(struct pci_dev *peer,
			     struct nvidia_p2p_page_table *page_table,
			     struct nvidia_p2p_dma_mapping **dma_mapping)
{
	return -EINVAL;
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
	return 0;
}
EXPORT_SYMBOL(nvidia_p2p_free_dma_mapping);

static int nvsim_probe(struct pci_dev *pdev, const struct pci_device_id *id)
{
	int ret;

	if (nvsim_pdev)
		return -EBUSY;	/* one simulated GPU */
	ret = pcim_enable_device(pdev);
	if (ret)
		return ret;
	nvsim_pdev = pdev;
	pci_info(pdev, "simulated GPU, BAR1 %pR\n", &pdev->resource[NVSIM_BAR1]);
	return 0;
}

static void nvsim_remove(struct pci_dev *pdev)
{
	nvsim_pdev = NULL;
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
module_pci_driver(nvsim_driver);

MODULE_DESCRIPTION("Simulator of the NVIDIA nv-p2p interface for gdrpeer tests");
MODULE_LICENSE("Dual MIT/GPL");
