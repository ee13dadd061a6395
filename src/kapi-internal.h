/* SPDX-License-Identifier: GPL-2.0 */
/* Between gdrpeer's Rust code and src/kapi-exports.c; not part of the API. */
#ifndef _GDRPEER_KAPI_INTERNAL_H_
#define _GDRPEER_KAPI_INTERNAL_H_

#include "gdrpeer-kapi.h"

/* The kernel API's implementation, in Rust (src/kapi.rs). */
u32 gdrpeer_rs_kapi_version(void);
struct gdrpeer_ctx *gdrpeer_rs_ctx_create(void);
void gdrpeer_rs_ctx_destroy(struct gdrpeer_ctx *ctx);
struct gdrpeer_mr *gdrpeer_rs_mr_pin(struct gdrpeer_ctx *ctx, struct pci_dev *peer,
				     u64 va, u64 len, void (*invalidate)(void *data),
				     void *data, struct gdrpeer_mr_info *info);
void gdrpeer_rs_mr_unpin(struct gdrpeer_mr *mr);
struct dma_buf *gdrpeer_rs_dmabuf_export(struct gdrpeer_ctx *ctx, u64 va, u64 len,
					 u32 flags, u64 *offset);

/*
 * The same functions' types, for bindgen: the Rust definitions are assigned to
 * these fields, so a definition that drifts from the prototypes above does not
 * compile, and the wrappers in kapi-exports.c are checked against
 * gdrpeer-kapi.h by the C compiler.
 */
struct gdrpeer_rs_fns {
	typeof(gdrpeer_rs_kapi_version) *kapi_version;
	typeof(gdrpeer_rs_ctx_create) *ctx_create;
	typeof(gdrpeer_rs_ctx_destroy) *ctx_destroy;
	typeof(gdrpeer_rs_mr_pin) *mr_pin;
	typeof(gdrpeer_rs_mr_unpin) *mr_unpin;
	typeof(gdrpeer_rs_dmabuf_export) *dmabuf_export;
};

#endif /* _GDRPEER_KAPI_INTERNAL_H_ */
