// SPDX-License-Identifier: GPL-2.0
/*
 * gdrpeer: the C side of src/vma.rs, src/dma_buf.rs, src/iova.rs,
 * src/miscdev.rs and src/sys.rs: a lockdep map, which Rust cannot define
 * statically, and what
 * bindgen cannot reach portably: vm_flags_set() and pgprot_writecombine() are
 * static inlines or macros on some architectures (arm64), the fault's vma,
 * pgoff and address sit in an anonymous const struct of struct vm_fault whose
 * generated Rust name depends on the layout, sg_dma_len() names a field that
 * exists only with CONFIG_NEED_SG_DMA_LENGTH, arch_io_reserve_memtype_wc() is
 * a static inline where the architecture keeps no memory types, and so are
 * dma_mapping_error(), device_is_registered() and, on x86, pci_domain_nr(),
 * and FMODE_NOWAIT and IOCB_NOWAIT are macros with casts.
 */
#include <linux/dma-mapping.h>
#include <linux/fs.h>
#include <linux/io.h>
#include <linux/lockdep.h>
#include <linux/mm.h>
#include <linux/pci.h>
#include <linux/scatterlist.h>
#include <linux/slab.h>

#include "helpers.h"

void gdrpeer_vma_set_pfnmap(struct vm_area_struct *vma, bool wc)
{
	vm_flags_set(vma, VM_PFNMAP | VM_IO | VM_DONTEXPAND | VM_DONTDUMP |
			  VM_DONTCOPY);
	/*
	 * A BAR is never encrypted memory: without this, a host with memory
	 * encryption (SME, SEV, TDX, CCA) maps it as encrypted, where
	 * io_remap_pfn_range() would not.
	 */
	vma->vm_page_prot = pgprot_decrypted(vm_get_page_prot(vma->vm_flags));
	if (wc)
		vma->vm_page_prot = pgprot_writecombine(vma->vm_page_prot);
}

bool gdrpeer_vma_is_shared(struct vm_area_struct *vma)
{
	return vma->vm_flags & VM_MAYSHARE;
}

struct vm_area_struct *gdrpeer_vmf_vma(struct vm_fault *vmf)
{
	return vmf->vma;
}

unsigned long gdrpeer_vmf_pgoff(struct vm_fault *vmf)
{
	return vmf->pgoff;
}

vm_fault_t gdrpeer_vmf_insert_pfn(struct vm_fault *vmf, unsigned long pfn)
{
	return vmf_insert_pfn_prot(vmf->vma, vmf->address, pfn,
				   vmf->vma->vm_page_prot);
}

int gdrpeer_io_reserve_wc(phys_addr_t phys, u64 size)
{
	return arch_io_reserve_memtype_wc(phys, size);
}

void gdrpeer_io_free_wc(phys_addr_t phys, u64 size)
{
	arch_io_free_memtype_wc(phys, size);
}

void gdrpeer_sg_set_dma(struct scatterlist *sg, dma_addr_t addr, unsigned int len)
{
	sg_set_page(sg, NULL, 0, 0);
	sg_dma_address(sg) = addr;
	sg_dma_len(sg) = len;
}

int gdrpeer_dma_mapping_error(struct device *dev, dma_addr_t addr)
{
	return dma_mapping_error(dev, addr);
}

bool gdrpeer_device_is_registered(struct device *dev)
{
	return device_is_registered(dev);
}

bool gdrpeer_pci_dev_on_bus(struct pci_dev *pdev)
{
	struct pci_dev *found;

	found = pci_get_domain_bus_and_slot(pci_domain_nr(pdev->bus),
					    pdev->bus->number, pdev->devfn);
	pci_dev_put(found);
	return found == pdev;
}

/*
 * A lockdep class for "inside a peer driver's invalidate callback". The
 * callback runs under the NVIDIA driver's global lock, which lockdep does not
 * see on real hardware; this map stands for it. Calls that may wait for a
 * callback, or that take the NVIDIA lock, touch it too, so that a peer driver
 * holding a lock around gdrpeer_* and taking the same lock in its callback is
 * reported as the AB-BA it is.
 */
#ifdef CONFIG_LOCKDEP
static struct lockdep_map gdrpeer_invalidate_map =
	STATIC_LOCKDEP_MAP_INIT("gdrpeer_invalidate", &gdrpeer_invalidate_map);
#endif

void gdrpeer_invalidate_begin(void)
{
	lock_map_acquire(&gdrpeer_invalidate_map);
}

void gdrpeer_invalidate_end(void)
{
	lock_map_release(&gdrpeer_invalidate_map);
}

void gdrpeer_invalidate_might_wait(void)
{
	lock_map_acquire(&gdrpeer_invalidate_map);
	lock_map_release(&gdrpeer_invalidate_map);
}

void gdrpeer_file_set_nowait(struct file *file)
{
	file->f_mode |= FMODE_NOWAIT;
}

bool gdrpeer_kiocb_nowait(const struct kiocb *iocb)
{
	return iocb->ki_flags & IOCB_NOWAIT;
}

int gdrpeer_file_own_mapping(struct file *file)
{
	struct inode *inode = file_inode(file);
	struct address_space *mapping;

	mapping = kzalloc_obj(*mapping, GFP_KERNEL);
	if (!mapping)
		return -ENOMEM;
	address_space_init_once(mapping);
	mapping->host = inode;
	mapping->a_ops = inode->i_mapping->a_ops;
	file->f_mapping = mapping;
	return 0;
}

void gdrpeer_file_put_mapping(struct file *file)
{
	struct address_space *mapping = file->f_mapping;
	struct inode *inode = file_inode(file);

	if (mapping == inode->i_mapping)
		return;
	file->f_mapping = inode->i_mapping;
	kfree(mapping);
}
