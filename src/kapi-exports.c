// SPDX-License-Identifier: GPL-2.0
/*
 * gdrpeer: the exports of the kernel API (include/gdrpeer-kapi.h). The API is
 * implemented in Rust (src/kapi.rs); EXPORT_SYMBOL_GPL exists only in C, so
 * these wrappers carry the exports, with CRCs from the header's prototypes.
 */
#include <linux/export.h>
#include <linux/module.h>

#include "gdrpeer-kapi.h"
#include "kapi-internal.h"

/*
 * The kernel crate's module! has no version key; modinfo shows this one.
 * Keep equal to GDRPEER_VERSION in the Makefile (make deb sets it to the
 * package's).
 */
MODULE_VERSION("0.1.0");
/* dma-buf export (src/dma_buf.rs): the core's symbols are in this namespace. */
MODULE_IMPORT_NS("DMA_BUF");

u32 gdrpeer_kapi_version(void)
{
	return gdrpeer_rs_kapi_version();
}
EXPORT_SYMBOL_GPL(gdrpeer_kapi_version);

struct gdrpeer_ctx *gdrpeer_ctx_create(void)
{
	return gdrpeer_rs_ctx_create();
}
EXPORT_SYMBOL_GPL(gdrpeer_ctx_create);

void gdrpeer_ctx_destroy(struct gdrpeer_ctx *ctx)
{
	gdrpeer_rs_ctx_destroy(ctx);
}
EXPORT_SYMBOL_GPL(gdrpeer_ctx_destroy);

struct gdrpeer_mr *gdrpeer_mr_pin(struct gdrpeer_ctx *ctx, struct pci_dev *peer,
				  u64 va, u64 len, void (*invalidate)(void *data),
				  void *data, struct gdrpeer_mr_info *info)
{
	return gdrpeer_rs_mr_pin(ctx, peer, va, len, invalidate, data, info);
}
EXPORT_SYMBOL_GPL(gdrpeer_mr_pin);

void gdrpeer_mr_unpin(struct gdrpeer_mr *mr)
{
	gdrpeer_rs_mr_unpin(mr);
}
EXPORT_SYMBOL_GPL(gdrpeer_mr_unpin);

struct dma_buf *gdrpeer_dmabuf_export(struct gdrpeer_ctx *ctx, u64 va, u64 len,
				      u64 *offset)
{
	return gdrpeer_rs_dmabuf_export(ctx, va, len, 0, offset);
}
EXPORT_SYMBOL_GPL(gdrpeer_dmabuf_export);

struct dma_buf *gdrpeer_dmabuf_export_flags(struct gdrpeer_ctx *ctx, u64 va, u64 len,
					    u32 flags, u64 *offset)
{
	return gdrpeer_rs_dmabuf_export(ctx, va, len, flags, offset);
}
EXPORT_SYMBOL_GPL(gdrpeer_dmabuf_export_flags);
