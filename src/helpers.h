/* SPDX-License-Identifier: GPL-2.0 */
/*
 * gdrpeer: C helpers of src/vma.rs and src/dma_buf.rs (src/helpers.c). The Rust side is generated
 * from this header by bindgen, so that the two cannot drift.
 */
#ifndef _GDRPEER_HELPERS_H_
#define _GDRPEER_HELPERS_H_

#include <linux/mm_types.h>
#include <linux/scatterlist.h>

/*
 * VM_PFNMAP | VM_IO | VM_DONTEXPAND | VM_DONTDUMP | VM_DONTCOPY, write-combining
 * if wc, else with the vma's default (cached) protection.
 */
void gdrpeer_vma_set_pfnmap(struct vm_area_struct *vma, bool wc);
struct vm_area_struct *gdrpeer_vmf_vma(struct vm_fault *vmf);
unsigned long gdrpeer_vmf_pgoff(struct vm_fault *vmf);
/* vmf_insert_pfn_prot() at the fault's address with the vma's protection. */
vm_fault_t gdrpeer_vmf_insert_pfn(struct vm_fault *vmf, unsigned long pfn);

/*
 * A DMA-only scatterlist entry, as dma-buf exporters of memory without struct
 * pages make them: no page, DMA address @addr, DMA length @len.
 */
void gdrpeer_sg_set_dma(struct scatterlist *sg, dma_addr_t addr, unsigned int len);

#endif
