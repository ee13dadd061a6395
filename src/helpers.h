/* SPDX-License-Identifier: GPL-2.0 */
/*
 * gdrpeer: C helpers of src/vma.rs, src/dma_buf.rs, src/iova.rs, src/miscdev.rs and
 * src/sys.rs
 * (src/helpers.c). The Rust side is generated from this header by bindgen, so
 * that the two cannot drift.
 */
#ifndef _GDRPEER_HELPERS_H_
#define _GDRPEER_HELPERS_H_

#include <linux/device.h>
#include <linux/fs.h>
#include <linux/mm_types.h>
#include <linux/pci.h>
#include <linux/scatterlist.h>
#include <linux/types.h>

/*
 * VM_PFNMAP | VM_IO | VM_DONTEXPAND | VM_DONTDUMP | VM_DONTCOPY, write-combining
 * if wc, else with the vma's default (cached) protection.
 */
void gdrpeer_vma_set_pfnmap(struct vm_area_struct *vma, bool wc);
/*
 * Whether the vma is a shared mapping (VM_MAYSHARE; mmap() leaves VM_SHARED out
 * of one on a file not open for writing). In C: the kernel crate's binding of
 * VM_MAYSHARE is VM_MAYEXEC's value (rust/bindings/bindings_helper.h, 7.2).
 */
bool gdrpeer_vma_is_shared(struct vm_area_struct *vma);
struct vm_area_struct *gdrpeer_vmf_vma(struct vm_fault *vmf);
unsigned long gdrpeer_vmf_pgoff(struct vm_fault *vmf);
/* vmf_insert_pfn_prot() at the fault's address with the vma's protection. */
vm_fault_t gdrpeer_vmf_insert_pfn(struct vm_fault *vmf, unsigned long pfn);

/*
 * Reserves write-combining as the CPU memory type of the device memory
 * [phys, phys + size) (arch_io_reserve_memtype_wc()), freed by
 * gdrpeer_io_free_wc(). On x86 with PAT, vmf_insert_pfn_prot() gives a PFN the
 * type reserved for it, and uncached-minus where none is. 0 on architectures
 * that keep no memory types.
 */
int gdrpeer_io_reserve_wc(phys_addr_t phys, u64 size);
void gdrpeer_io_free_wc(phys_addr_t phys, u64 size);

/*
 * A DMA-only scatterlist entry, as dma-buf exporters of memory without struct
 * pages make them: no page, DMA address @addr, DMA length @len.
 */
void gdrpeer_sg_set_dma(struct scatterlist *sg, dma_addr_t addr, unsigned int len);

/* dma_mapping_error(), a static inline: checks what dma_map_resource() returned. */
int gdrpeer_dma_mapping_error(struct device *dev, dma_addr_t addr);

/*
 * device_is_registered(), a static inline: false once the device was removed
 * from the system (device_del()), though a reference still keeps its memory.
 */
bool gdrpeer_device_is_registered(struct device *dev);

/*
 * Whether @pdev is still the device found at its address on the PCI bus: false
 * once its removal took it off the bus (bus_remove_device(), before the bus's
 * BUS_NOTIFY_REMOVED_DEVICE), though a reference still keeps its memory.
 * pci_domain_nr() is a static inline on x86.
 */
bool gdrpeer_pci_dev_on_bus(struct pci_dev *pdev);

/*
 * The lockdep class that stands for NVIDIA's lock (src/notify.rs): taken
 * around a notifier called from the free callback (a peer driver's invalidate
 * callback, the invalidation of dma-buf importers), and touched where a caller
 * may wait for one.
 */
void gdrpeer_invalidate_begin(void);
void gdrpeer_invalidate_end(void);
void gdrpeer_invalidate_might_wait(void);

/*
 * Claims FMODE_NOWAIT for @file, being opened: its reads honour IOCB_NOWAIT
 * (gdrpeer_kiocb_nowait()), so RWF_NOWAIT reads are taken and io_uring tries
 * them inline before it polls. A macro with a cast, which bindgen cannot read.
 */
void gdrpeer_file_set_nowait(struct file *file);
/* Whether @iocb is IOCB_NOWAIT: the read must fail with -EAGAIN, not wait. */
bool gdrpeer_kiocb_nowait(const struct kiocb *iocb);

/*
 * Gives @file, being opened, an address space of its own as its f_mapping:
 * its vmas join that one's tree, so that unmap_mapping_pages() of the file's
 * offsets zaps its own mappings only (the handles of two files of one device
 * have the same offsets). -ENOMEM, or 0.
 */
int gdrpeer_file_own_mapping(struct file *file);
/*
 * Frees what gdrpeer_file_own_mapping() gave @file, being released (no vma
 * of it is left: each holds the file), or failing its open.
 */
void gdrpeer_file_put_mapping(struct file *file);

#endif
