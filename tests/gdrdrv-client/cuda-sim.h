/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The CUDA driver API calls gdrdrv-client uses, declared as cuda.h declares
 * them (the _v2 entry points its macros select), without the typedefs:
 * CUresult is int, CUdeviceptr unsigned long long, CUcontext void *.
 */
#ifndef _GDRDRV_CLIENT_CUDA_SIM_H_
#define _GDRDRV_CLIENT_CUDA_SIM_H_

#include <stddef.h>

#define CUDA_SUCCESS 0
#define CU_POINTER_ATTRIBUTE_P2P_TOKENS 5
#define CU_POINTER_ATTRIBUTE_SYNC_MEMOPS 6

/* CUDA_POINTER_ATTRIBUTE_P2P_TOKENS. */
struct cuda_p2p_tokens {
	unsigned long long p2p_token;
	unsigned int va_space_token;
};

int cuInit(unsigned int flags);
int cuDevicePrimaryCtxRetain(void **ctx, int dev);
int cuCtxSetCurrent(void *ctx);
int cuMemAlloc_v2(unsigned long long *dptr, size_t size);
int cuMemFree_v2(unsigned long long dptr);
int cuMemGetAddressRange_v2(unsigned long long *base, size_t *size,
			    unsigned long long dptr);
int cuMemcpyHtoD_v2(unsigned long long dst, const void *src, size_t n);
int cuMemcpyDtoH_v2(void *dst, unsigned long long src, size_t n);
int cuPointerGetAttribute(void *data, unsigned int attr,
			  unsigned long long dptr);
int cuPointerSetAttribute(const void *value, unsigned int attr,
			  unsigned long long dptr);

#endif /* _GDRDRV_CLIENT_CUDA_SIM_H_ */
