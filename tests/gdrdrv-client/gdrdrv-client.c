// SPDX-License-Identifier: GPL-2.0
/*
 * gdrdrv-client: a client of /dev/gdrdrv written from the gdrdrv ABI as
 * libgdrapi's users know it (include/uapi/gdrpeer-gdrdrv.h), over the CUDA
 * driver API (the simulated libcuda in the test guest). It maps as libgdrapi
 * 2.6's default gdr_map() does (REQ_MAPPING_TYPE NONE, an mmap of the window
 * from its first byte at offset handle << 12, then GET_INFO_V2), keeps each
 * handle in 32 bits as libgdrapi does, and allocates GPU memory as gdrcopy's
 * tests do: padded, so that a 64 KiB-aligned address fits in it.
 *
 * It runs gdrcopy-style sanity checks: version and attributes; pin, map and
 * bytes through the mapping against cuMemcpyDtoH/HtoD; an unaligned pin and
 * the second of two small buffers in one GPU page that pin but do not map;
 * aligned small buffers; REQ_MAPPING_TYPE's answers; the mapping type the
 * driver picks and one requested; mmap's refusals; handle numbering (from 0,
 * spaced by the window's host pages, all below 2^32); two mappings with one
 * buffer freed; close with a mapping live; SIGBUS after cuMemFree and after
 * UNPIN; fork before and after map and a receiver of the file (EACCES); P2P
 * tokens; a thread pinning; a re-pin served by the cache; one event per
 * revocation. It prints one line per check:
 *
 *	PASS name
 *	FAIL name: why
 *
 * and exits with status 1 if any check failed. The checks that end with a
 * SIGBUS run in a child that re-executes this program (a CUDA context does not
 * survive fork): "gdrdrv-client --scenario NAME".
 *
 * Run with nvsim.ko and gdrpeer.ko loaded; reads nvsim's and gdrpeer's debugfs
 * counters (root), and nvsim's "coherent" line for whether the memory is
 * CPU-cacheable.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <uapi/gdrpeer.h>
#include <uapi/gdrpeer-gdrdrv.h>

#include "cuda-sim.h"

#define GPU_PAGE 65536UL
#define HOST_PAGE 4096UL
#define HOST_PAGE_SHIFT 12
/* A handle no pin of these checks gets (they start at 0 and stay small). */
#define UNKNOWN_HANDLE 0xfffffff0U
/*
 * CUDA carves allocations below 2 MiB out of shared blocks, so two of them may
 * share a GPU page, and freeing one may revoke pins over the other's pages
 * too, or (the driver's rule: the callback belongs to the block) nothing at
 * all. Checks that free one buffer and keep another, or that need the free's
 * callback, use allocations of this size.
 */
#define OWN_PAGES_SIZE (2UL << 20)
#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

static int failures;
static const char *check_name;
/* What a failure line starts with: a child scenario's say so without counting as a check. */
static const char *fail_prefix = "FAIL ";

/* Ends the current check with FAIL and a reason; returns -1 for "return fail(...)". */
static int fail(const char *fmt, ...)
{
	va_list ap;

	printf("%s%s: ", fail_prefix, check_name);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	failures++;
	return -1;
}

static void run_check(const char *name, int (*check)(void))
{
	check_name = name;
	if (check() == 0) {
		printf("PASS %s\n", name);
		fflush(stdout);
	}
}

/* A CUDA call's result: 0, or FAIL with the call's name and -1. */
static int cu(int r, const char *call)
{
	return r == CUDA_SUCCESS ? 0 : fail("%s: CUresult %d", call, r);
}

/* A call's result for failure lines: "ok" or the errno's text. */
static const char *err_str(int r)
{
	return r ? strerror(-r) : "ok";
}

static int open_gdrdrv(void)
{
	return open("/dev/gdrdrv", O_RDWR | O_CLOEXEC);
}

/* A debugfs counter: "name value" lines, the value decimal or 0x-prefixed hex. */
static long long counter(const char *file, const char *name)
{
	char line[128], key[64], value[64];
	FILE *f = fopen(file, "r");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "%63s %63s", key, value) == 2 && !strcmp(key, name)) {
			fclose(f);
			return strtoll(value, NULL, 0);
		}
	}
	fclose(f);
	return -1;
}

static long long nvsim_stat(const char *name)
{
	return counter("/sys/kernel/debug/nvsim/stats", name);
}

static long long gdrpeer_stat(const char *name)
{
	return counter("/sys/kernel/debug/gdrpeer/stats", name);
}

/* Whether nvsim simulates CPU-cacheable GPU memory (coherent=1): 1, 0, or FAIL and -1. */
static int cpu_cacheable(void)
{
	long long c = nvsim_stat("coherent");

	if (c < 0)
		return fail("no \"coherent\" line in nvsim's stats");
	return c != 0;
}

static unsigned long long gpu_round_up(unsigned long long n)
{
	return (n + GPU_PAGE - 1) & ~(GPU_PAGE - 1);
}

/* A handle's mmap offset, as gdr_map computes it from the 32-bit handle. */
static off_t handle_offset(uint32_t handle)
{
	return (off_t)((__u64)handle << HOST_PAGE_SHIFT);
}

/*
 * A PIN's handle as libgdrapi keeps it, in 32 bits. One that does not fit
 * (which libgdrapi would silently truncate) is unpinned: -EOVERFLOW.
 */
static int keep_handle(int fd, __u64 h64, uint32_t *handle)
{
	struct gdrdrv_unpin_buffer u = { .handle = h64 };

	if (h64 > UINT32_MAX) {
		ioctl(fd, GDRDRV_IOC_UNPIN_BUFFER, &u);
		return -EOVERFLOW;
	}
	*handle = (uint32_t)h64;
	return 0;
}

/* PIN_BUFFER_V2 with the handle as the kernel wrote it, 64 bits. */
static int pin_v2_raw(int fd, unsigned long long addr, size_t size, __u32 flags,
		      __u64 *h64)
{
	struct gdrdrv_pin_buffer_v2 p = {
		.addr = addr, .size = size, .flags = flags,
	};

	if (ioctl(fd, GDRDRV_IOC_PIN_BUFFER_V2, &p))
		return -errno;
	*h64 = p.handle;
	return 0;
}

static int pin_v2(int fd, unsigned long long addr, size_t size, __u32 flags,
		  uint32_t *handle)
{
	__u64 h64 = 0;
	int r = pin_v2_raw(fd, addr, size, flags, &h64);

	return r ? r : keep_handle(fd, h64, handle);
}

static int unpin(int fd, uint32_t handle)
{
	struct gdrdrv_unpin_buffer u = { .handle = (__u64)handle };

	return ioctl(fd, GDRDRV_IOC_UNPIN_BUFFER, &u) ? -errno : 0;
}

static int info_v2(int fd, uint32_t handle, struct gdrdrv_get_info_v2 *i)
{
	memset(i, 0, sizeof(*i));
	i->handle = (__u64)handle;
	return ioctl(fd, GDRDRV_IOC_GET_INFO_V2, i) ? -errno : 0;
}

static int info_v1(int fd, uint32_t handle, struct gdrdrv_get_info *i)
{
	memset(i, 0, sizeof(*i));
	i->handle = (__u64)handle;
	return ioctl(fd, GDRDRV_IOC_GET_INFO, i) ? -errno : 0;
}

static int req_mapping_type(int fd, uint32_t handle, __u32 type)
{
	struct gdrdrv_req_mapping_type r = {
		.handle = (__u64)handle, .mapping_type = type,
	};

	return ioctl(fd, GDRDRV_IOC_REQ_MAPPING_TYPE, &r) ? -errno : 0;
}

/* A bare mmap at a file offset, for the cases gdr_map would not send. */
static void *mmap_at(int fd, off_t off, size_t len, int flags)
{
	return mmap(NULL, len, PROT_READ | PROT_WRITE, flags, fd, off);
}

/* Which step of the last failed gdr_map failed, and the line to print. */
enum map_step { MAP_STEP_REQ, MAP_STEP_MMAP, MAP_STEP_INFO, MAP_STEP_TYPE };
static enum map_step map_step;
static char map_why[96];

/*
 * libgdrapi 2.6's gdr_map_v2: REQ_MAPPING_TYPE `type` (NONE: the driver
 * chooses), an mmap of the window from its first byte at offset handle << 12
 * (`size` rounded up to 64 KiB), then GET_INFO_V2. Fails as the library does
 * when the type reported is NONE (not mapped) or, for a request other than
 * NONE, not the one asked for. Returns 0 with *ptr, or -errno (-EPROTO for the
 * type) with map_step and map_why saying where.
 */
static int gdr_map_v2(int fd, uint32_t handle, size_t size, __u32 type, void **ptr)
{
	struct gdrdrv_get_info_v2 i;
	size_t len = gpu_round_up(size);
	void *m;
	int r;

	map_step = MAP_STEP_REQ;
	r = req_mapping_type(fd, handle, type);
	if (r) {
		snprintf(map_why, sizeof(map_why), "REQ_MAPPING_TYPE %u: %s", type,
			 strerror(-r));
		return r;
	}
	map_step = MAP_STEP_MMAP;
	m = mmap_at(fd, handle_offset(handle), len, MAP_SHARED);
	if (m == MAP_FAILED) {
		r = -errno;
		snprintf(map_why, sizeof(map_why), "mmap of handle %u: %s", handle,
			 strerror(-r));
		return r;
	}
	map_step = MAP_STEP_INFO;
	r = info_v2(fd, handle, &i);
	if (r) {
		snprintf(map_why, sizeof(map_why), "GET_INFO_V2: %s", strerror(-r));
	} else if (i.mapping_type == GDRDRV_MAPPING_TYPE_NONE) {
		map_step = MAP_STEP_TYPE;
		snprintf(map_why, sizeof(map_why),
			 "not mapped: GET_INFO_V2 says mapping type NONE after mmap");
		r = -EPROTO;
	} else if (type != GDRDRV_MAPPING_TYPE_NONE && i.mapping_type != type) {
		map_step = MAP_STEP_TYPE;
		snprintf(map_why, sizeof(map_why),
			 "GET_INFO_V2 says mapping type %u, asked %u", i.mapping_type, type);
		r = -EPROTO;
	}
	if (r) {
		munmap(m, len);
		return r;
	}
	*ptr = m;
	return 0;
}

/* libgdrapi's default gdr_map: the driver chooses the mapping type. */
static int gdr_map(int fd, uint32_t handle, size_t size, void **ptr)
{
	return gdr_map_v2(fd, handle, size, GDRDRV_MAPPING_TYPE_NONE, ptr);
}

/* libgdrapi's gdr_unmap. */
static void gdr_unmap(void *ptr, size_t size)
{
	munmap(ptr, gpu_round_up(size));
}

static void pattern(unsigned char *p, size_t n, unsigned int seed)
{
	size_t i;

	for (i = 0; i < n; i++)
		p[i] = (unsigned char)((i * 2654435761u >> 13) ^ seed);
}

/* Byte-wise copies through the mapping, each access made (device memory). */
static void to_map(unsigned char *dst, const unsigned char *src, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		__atomic_store_n(&dst[i], src[i], __ATOMIC_RELAXED);
	__sync_synchronize();
}

static void from_map(unsigned char *dst, const unsigned char *src, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		dst[i] = __atomic_load_n(&src[i], __ATOMIC_RELAXED);
}

/*
 * GPU memory as gdrcopy's tests allocate it: a cuMemAlloc padded by a GPU
 * page, so that a 64 KiB-aligned range of the size asked for fits in it
 * (small allocations are only 256-byte aligned, and gdrdrv maps only pins
 * that start on a GPU page).
 */
struct dmem {
	unsigned long long alloc;	/* what cuMemAlloc returned, for cuMemFree */
	unsigned long long p;		/* the first 64 KiB-aligned address in it */
};

/*
 * With SYNC_MEMOPS set, as gdrcopy's tests allocate: a cuMemcpyHtoD is in the
 * memory when it returns, where the mapping reads it next.
 */
static int dmem_alloc(struct dmem *m, size_t size)
{
	unsigned int one = 1;

	if (cu(cuMemAlloc_v2(&m->alloc, gpu_round_up(size) + GPU_PAGE), "cuMemAlloc_v2"))
		return -1;
	if (cu(cuPointerSetAttribute(&one, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, m->alloc),
	       "cuPointerSetAttribute(SYNC_MEMOPS)")) {
		cuMemFree_v2(m->alloc);
		return -1;
	}
	m->p = gpu_round_up(m->alloc);
	return 0;
}

static int dmem_free(struct dmem *m)
{
	return cu(cuMemFree_v2(m->alloc), "cuMemFree_v2");
}

/* A buffer, pinned and mapped as a gdrcopy program does (gdr_pin_buffer, gdr_map). */
struct buf {
	unsigned long long alloc;	/* the allocation to free, or 0 */
	unsigned long long d;	/* the buffer */
	size_t size;
	uint32_t handle;	/* as libgdrapi keeps it */
	struct gdrdrv_get_info_v2 info;
	unsigned char *map;	/* the mapping, from the window's first byte */
	size_t map_len;		/* its length: size rounded up to 64 KiB */
	unsigned char *p;	/* the buffer in the mapping */
};

/* Pins a buffer and checks the window GET_INFO_V2 reports. */
static int buf_pin(int fd, struct buf *b, unsigned long long d, size_t size, __u32 flags)
{
	int r;

	b->alloc = 0;
	b->d = d;
	b->size = size;
	b->map = NULL;
	b->map_len = gpu_round_up(size);
	r = pin_v2(fd, d, size, flags, &b->handle);
	if (r)
		return fail("PIN_BUFFER_V2 of %zu bytes at %#llx: %s", size, d,
			    strerror(-r));
	r = info_v2(fd, b->handle, &b->info);
	if (r)
		return fail("GET_INFO_V2: %s", strerror(-r));
	if (b->info.va != (d & ~(GPU_PAGE - 1)) ||
	    b->info.va + b->info.mapped_size < d + size ||
	    b->info.page_size != GPU_PAGE)
		return fail("window %#llx + %#llx (page %u) for %#llx + %#zx",
			    (unsigned long long)b->info.va,
			    (unsigned long long)b->info.mapped_size,
			    b->info.page_size, d, size);
	return 0;
}

/* gdr_map of a pinned buffer. */
static int buf_map(int fd, struct buf *b)
{
	void *m;

	if (gdr_map(fd, b->handle, b->size, &m))
		return fail("gdr_map of handle %u: %s", b->handle, map_why);
	b->map = m;
	b->p = b->map + (b->d - b->info.va);
	return 0;
}

static int buf_pin_map(int fd, struct buf *b, unsigned long long d,
		       size_t size, __u32 flags)
{
	return buf_pin(fd, b, d, size, flags) ? -1 : buf_map(fd, b);
}

static void buf_unmap_unpin(int fd, struct buf *b)
{
	if (b->map)
		gdr_unmap(b->map, b->size);
	b->map = NULL;
	unpin(fd, b->handle);
}

/* Unmaps, unpins and frees a buffer of alloc_pin_map's. */
static int buf_free(int fd, struct buf *b)
{
	buf_unmap_unpin(fd, b);
	return cu(cuMemFree_v2(b->alloc), "cuMemFree_v2");
}

/* Allocates `size` bytes 64 KiB-aligned, and pins and maps them. */
static int alloc_pin_map(int fd, struct buf *b, size_t size)
{
	struct dmem m;

	if (dmem_alloc(&m, size))
		return -1;
	if (buf_pin_map(fd, b, m.p, size, 0)) {
		dmem_free(&m);
		return -1;
	}
	b->alloc = m.alloc;
	return 0;
}

/* Writes through the mapping and reads with cuMemcpyDtoH, then the reverse. */
static int round_trip(struct buf *b, unsigned long long at, size_t n,
		      unsigned int seed)
{
	unsigned char *w = malloc(n), *r = malloc(n);
	size_t off = at - b->d;
	int ret = 0;

	if (!w || !r) {
		ret = fail("malloc");
		goto out;
	}
	pattern(w, n, seed);
	to_map(b->p + off, w, n);
	if (cuMemcpyDtoH_v2(r, at, n) != CUDA_SUCCESS || memcmp(w, r, n)) {
		ret = fail("cuMemcpyDtoH differs from the bytes written through the mapping");
		goto out;
	}
	pattern(w, n, seed + 1);
	if (cuMemcpyHtoD_v2(at, w, n) != CUDA_SUCCESS) {
		ret = fail("cuMemcpyHtoD");
		goto out;
	}
	from_map(r, b->p + off, n);
	if (memcmp(w, r, n))
		ret = fail("the mapping differs from what cuMemcpyHtoD wrote");
out:
	free(w);
	free(r);
	return ret;
}

/* One byte written through a mapping of `d`, read back there and with cuMemcpyDtoH. */
static int byte_through(unsigned char *map, unsigned long long d, unsigned char v)
{
	unsigned char back = ~v;

	__atomic_store_n(map, v, __ATOMIC_RELAXED);
	__sync_synchronize();
	if (__atomic_load_n(map, __ATOMIC_RELAXED) != v)
		return fail("a byte written through the mapping reads back differently");
	if (cuMemcpyDtoH_v2(&back, d, 1) != CUDA_SUCCESS || back != v)
		return fail("cuMemcpyDtoH: %#x, written %#x", back, v);
	return 0;
}

/* cuInit and device 0's primary context, current in this thread. */
static int cuda_setup(void)
{
	void *ctx;

	if (cuInit(0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS)
		return -1;
	return cuCtxSetCurrent(ctx) == CUDA_SUCCESS ? 0 : -1;
}

/* --- The checks --------------------------------------------------------- */

static int check_version(void)
{
	struct gdrdrv_get_version v = { 0 };
	int fd = open_gdrdrv();

	if (fd < 0)
		return fail("open /dev/gdrdrv: %s", strerror(errno));
	if (ioctl(fd, GDRDRV_IOC_GET_VERSION, &v)) {
		close(fd);
		return fail("GET_VERSION: %s", strerror(errno));
	}
	close(fd);
	if (v.gdrdrv_version != GDRDRV_VERSION ||
	    v.minimum_gdr_api_version != GDRDRV_MINIMUM_GDR_API_VERSION)
		return fail("version %#x, minimum API %#x", v.gdrdrv_version,
			    v.minimum_gdr_api_version);
	return 0;
}

static int check_attributes(void)
{
	struct gdrdrv_get_attr a = { .attr = GDRDRV_ATTR_USE_PERSISTENT_MAPPING };
	int fd = open_gdrdrv(), ret = 0;

	if (ioctl(fd, GDRDRV_IOC_GET_ATTR, &a) || a.val != 0)
		ret = fail("USE_PERSISTENT_MAPPING: %s, %u", strerror(errno), a.val);
	a.attr = GDRDRV_ATTR_SUPPORT_PIN_FLAG_FORCE_PCIE;
	if (!ret && (ioctl(fd, GDRDRV_IOC_GET_ATTR, &a) || a.val != 0))
		ret = fail("SUPPORT_PIN_FLAG_FORCE_PCIE: %s, %u", strerror(errno), a.val);
	a.attr = 99;
	if (!ret && (ioctl(fd, GDRDRV_IOC_GET_ATTR, &a) == 0 || errno != EINVAL))
		ret = fail("unknown attribute: not EINVAL");
	close(fd);
	return ret;
}

static int check_pin_map_copy(void)
{
	struct buf b;
	int fd = open_gdrdrv(), ret;

	ret = alloc_pin_map(fd, &b, 3 * GPU_PAGE + 300);
	if (!ret)
		ret = round_trip(&b, b.d, b.size, 1);
	if (!ret && buf_free(fd, &b))
		return -1;
	close(fd);
	return ret;
}

/*
 * gdrcopy's basic_unaligned_mapping: a buffer that does not start on a GPU
 * page, pinned as is: the pin succeeds and covers the enclosing GPU pages,
 * gdr_map fails (mmap -EINVAL).
 */
static int check_unaligned_pin_does_not_map(void)
{
	static const size_t offs[] = { 1, 5000, GPU_PAGE - 1, GPU_PAGE + 12345 };
	static const size_t lens[] = { 1, 100, 2, 3 * HOST_PAGE };
	struct gdrdrv_get_info_v2 i;
	struct dmem m;
	struct buf b;
	void *ptr;
	int fd = open_gdrdrv(), ret = 0, r;
	size_t k;

	if (dmem_alloc(&m, 4 * GPU_PAGE))
		return -1;
	for (k = 0; k < ARRAY_SIZE(offs) && !ret; k++) {
		ret = buf_pin(fd, &b, m.p + offs[k], lens[k], 0);
		if (ret)
			break;
		r = gdr_map(fd, b.handle, lens[k], &ptr);
		if (!r) {
			gdr_unmap(ptr, lens[k]);
			ret = fail("gdr_map of a pin at GPU page offset %#zx succeeded",
				   (size_t)((m.p + offs[k]) & (GPU_PAGE - 1)));
		} else if (r != -EINVAL || map_step != MAP_STEP_MMAP) {
			ret = fail("gdr_map of a pin at offset %#zx: %s, not mmap EINVAL",
				   offs[k], map_why);
		} else if (info_v2(fd, b.handle, &i) ||
			   i.mapping_type != GDRDRV_MAPPING_TYPE_NONE) {
			ret = fail("GET_INFO_V2 after the refused map: type %u",
				   i.mapping_type);
		}
		unpin(fd, b.handle);
	}
	close(fd);
	if (dmem_free(&m))
		return -1;
	return ret;
}

/*
 * gdrcopy's basic_small_buffers_mapping: two small buffers in one GPU page.
 * The first starts on the page and maps; the second pins, but its map fails
 * (mmap -EINVAL): its pin does not start on a GPU page.
 */
static int check_small_buffers_second_does_not_map(void)
{
	struct dmem m;
	struct buf a, b;
	void *ptr;
	int fd = open_gdrdrv(), ret, r;

	if (dmem_alloc(&m, GPU_PAGE))
		return -1;
	ret = buf_pin_map(fd, &a, m.p, 100, 0);
	if (!ret)
		ret = round_trip(&a, a.d, 100, 50);
	if (!ret && !buf_pin(fd, &b, m.p + HOST_PAGE, 100, 0)) {
		r = gdr_map(fd, b.handle, 100, &ptr);
		if (!r) {
			gdr_unmap(ptr, 100);
			ret = fail("the second buffer's gdr_map succeeded");
		} else if (r != -EINVAL || map_step != MAP_STEP_MMAP) {
			ret = fail("the second buffer's gdr_map: %s, not mmap EINVAL",
				   map_why);
		}
		unpin(fd, b.handle);
	} else if (!ret) {
		ret = -1;
	}
	buf_unmap_unpin(fd, &a);
	close(fd);
	if (dmem_free(&m))
		return -1;
	return ret;
}

/* Buffers smaller than a host page at a 64 KiB-aligned address pin, map and round-trip. */
static int check_aligned_small_buffers(void)
{
	static const size_t lens[] = { 1, 100 };
	struct dmem m;
	struct buf b;
	int fd = open_gdrdrv(), ret = 0;
	size_t k;

	if (dmem_alloc(&m, GPU_PAGE))
		return -1;
	for (k = 0; k < ARRAY_SIZE(lens) && !ret; k++) {
		ret = buf_pin_map(fd, &b, m.p, lens[k], 0);
		if (ret)
			break;
		ret = round_trip(&b, b.d, lens[k], 60 + k);
		buf_unmap_unpin(fd, &b);
	}
	close(fd);
	if (dmem_free(&m))
		return -1;
	return ret;
}

/* REQ_MAPPING_TYPE of `type` on `handle` answers `want` (0 or -errno); else FAIL. */
static int expect_req(int fd, uint32_t handle, __u32 type, int want, const char *when)
{
	int r = req_mapping_type(fd, handle, type);

	if (r != want)
		return fail("REQ_MAPPING_TYPE %#x %s: %s, not %s", type, when,
			    err_str(r), err_str(want));
	return 0;
}

/*
 * REQ_MAPPING_TYPE answers in gdrdrv's order: a type above DEVICE -EINVAL, an
 * unknown handle -EINVAL, a mapped handle -EBUSY, CACHING of memory the CPU
 * may not cache -EOPNOTSUPP, DEVICE -EOPNOTSUPP (x86); NONE and WC accepted.
 */
static int check_req_mapping_type_answers(void)
{
	int cacheable = cpu_cacheable();
	const struct {
		__u32 type;
		int want;
	} unmapped[] = {
		{ GDRDRV_MAPPING_TYPE_NONE, 0 },
		{ GDRDRV_MAPPING_TYPE_WC, 0 },
		{ GDRDRV_MAPPING_TYPE_CACHING, cacheable == 1 ? 0 : -EOPNOTSUPP },
		{ GDRDRV_MAPPING_TYPE_DEVICE, -EOPNOTSUPP },
		{ 4, -EINVAL },
		{ 0xffffffff, -EINVAL },
	};
	struct dmem m;
	uint32_t h;
	void *ptr = NULL;
	int fd, ret = 0, r;
	__u32 t;
	size_t k;

	if (cacheable < 0 || dmem_alloc(&m, GPU_PAGE))
		return -1;
	fd = open_gdrdrv();
	r = pin_v2(fd, m.p, GPU_PAGE, 0, &h);
	if (r) {
		ret = fail("PIN_BUFFER_V2: %s", strerror(-r));
		goto out;
	}
	for (k = 0; k < ARRAY_SIZE(unmapped) && !ret; k++)
		ret = expect_req(fd, h, unmapped[k].type, unmapped[k].want,
				 "of an unmapped handle");
	if (!ret)
		ret = expect_req(fd, UNKNOWN_HANDLE, GDRDRV_MAPPING_TYPE_WC, -EINVAL,
				 "of an unknown handle");
	if (!ret && gdr_map(fd, h, GPU_PAGE, &ptr))
		ret = fail("gdr_map: %s", map_why);
	for (t = GDRDRV_MAPPING_TYPE_NONE; t <= GDRDRV_MAPPING_TYPE_DEVICE && !ret; t++)
		ret = expect_req(fd, h, t, -EBUSY, "of a mapped handle");
	if (!ret)
		ret = expect_req(fd, h, 4, -EINVAL, "of a mapped handle");
	if (ptr)
		gdr_unmap(ptr, GPU_PAGE);
	if (!ret)
		ret = expect_req(fd, h, GDRDRV_MAPPING_TYPE_NONE, 0, "after munmap");
	if (!ret)
		ret = expect_req(fd, h, GDRDRV_MAPPING_TYPE_WC, 0, "after munmap");
	unpin(fd, h);
out:
	close(fd);
	if (dmem_free(&m))
		return -1;
	return ret;
}

/* GET_INFO_V2's mapping_type and GET_INFO's mapped and wc_mapping are as expected. */
static int expect_info(int fd, uint32_t h, __u32 type, const char *when)
{
	struct gdrdrv_get_info_v2 i2;
	struct gdrdrv_get_info i1;
	int r;

	r = info_v2(fd, h, &i2);
	if (r)
		return fail("GET_INFO_V2 %s: %s", when, strerror(-r));
	if (i2.mapping_type != type)
		return fail("GET_INFO_V2 %s: mapping type %u, not %u", when,
			    i2.mapping_type, type);
	r = info_v1(fd, h, &i1);
	if (r)
		return fail("GET_INFO %s: %s", when, strerror(-r));
	if (i1.mapped != (type != GDRDRV_MAPPING_TYPE_NONE) ||
	    i1.wc_mapping != (type == GDRDRV_MAPPING_TYPE_WC))
		return fail("GET_INFO %s: mapped %u, wc_mapping %u (type %u)", when,
			    i1.mapped, i1.wc_mapping, type);
	return 0;
}

/*
 * gdr_map's default (NONE) maps cached where the memory is CPU-cacheable,
 * else write-combining; GET_INFO(_V2) report it while the mapping lives, and
 * NONE / not mapped before and after.
 */
static int check_default_map_type(void)
{
	int cacheable = cpu_cacheable();
	__u32 want = cacheable == 1 ? GDRDRV_MAPPING_TYPE_CACHING : GDRDRV_MAPPING_TYPE_WC;
	struct dmem m;
	uint32_t h;
	void *ptr;
	int fd, ret, r;

	if (cacheable < 0 || dmem_alloc(&m, GPU_PAGE))
		return -1;
	fd = open_gdrdrv();
	r = pin_v2(fd, m.p, GPU_PAGE, 0, &h);
	if (r) {
		ret = fail("PIN_BUFFER_V2: %s", strerror(-r));
		goto out;
	}
	ret = expect_info(fd, h, GDRDRV_MAPPING_TYPE_NONE, "before mmap");
	if (!ret && gdr_map(fd, h, GPU_PAGE, &ptr))
		ret = fail("gdr_map: %s", map_why);
	if (!ret) {
		ret = expect_info(fd, h, want, "while mapped");
		if (!ret)
			ret = byte_through(ptr, m.p, 0x5a);
		gdr_unmap(ptr, GPU_PAGE);
	}
	if (!ret)
		ret = expect_info(fd, h, GDRDRV_MAPPING_TYPE_NONE, "after munmap");
	unpin(fd, h);
out:
	close(fd);
	if (dmem_free(&m))
		return -1;
	return ret;
}

/* gdr_map_v2 with GDR_MAP_FLAG_REQ_WC: the mapping is write-combining. */
static int check_map_wc_requested(void)
{
	struct dmem m;
	uint32_t h;
	void *ptr;
	int fd, ret, r;

	if (dmem_alloc(&m, GPU_PAGE))
		return -1;
	fd = open_gdrdrv();
	r = pin_v2(fd, m.p, GPU_PAGE, 0, &h);
	if (r) {
		ret = fail("PIN_BUFFER_V2: %s", strerror(-r));
		goto out;
	}
	ret = gdr_map_v2(fd, h, GPU_PAGE, GDRDRV_MAPPING_TYPE_WC, &ptr);
	if (ret) {
		ret = fail("gdr_map with WC requested: %s", map_why);
	} else {
		ret = expect_info(fd, h, GDRDRV_MAPPING_TYPE_WC, "while mapped");
		if (!ret)
			ret = byte_through(ptr, m.p, 0xa5);
		gdr_unmap(ptr, GPU_PAGE);
	}
	unpin(fd, h);
out:
	close(fd);
	if (dmem_free(&m))
		return -1;
	return ret;
}

/* An mmap that must be refused with EINVAL; FAIL (and unmap) if not. */
static int expect_mmap_einval(int fd, off_t off, size_t len, int flags, const char *what)
{
	void *p = mmap_at(fd, off, len, flags);

	if (p != MAP_FAILED) {
		munmap(p, len);
		return fail("mmap of %s succeeded", what);
	}
	if (errno != EINVAL)
		return fail("mmap of %s: %s, not EINVAL", what, strerror(errno));
	return 0;
}

/*
 * mmap's refusals, each EINVAL: an offset naming no handle; a second mapping
 * of a handle while the first lives (after its munmap a new one is made); an
 * offset inside a window; a length past the window; MAP_PRIVATE; a handle
 * whose memory was freed.
 */
static int check_mmap_refusals(void)
{
	struct gdrdrv_get_cb_flag f = { 0 };
	struct dmem m, own;
	size_t win = 2 * GPU_PAGE;
	void *first, *again;
	uint32_t h, hf;
	off_t off;
	int fd, ret, r;

	if (dmem_alloc(&m, win))
		return -1;
	fd = open_gdrdrv();
	r = pin_v2(fd, m.p, win, 0, &h);
	if (r) {
		ret = fail("PIN_BUFFER_V2: %s", strerror(-r));
		goto out;
	}
	off = handle_offset(h);
	ret = expect_mmap_einval(fd, handle_offset(UNKNOWN_HANDLE), GPU_PAGE, MAP_SHARED,
				 "an unknown handle");
	if (!ret)
		ret = expect_mmap_einval(fd, off + HOST_PAGE, GPU_PAGE, MAP_SHARED,
					 "a page inside the window");
	if (!ret)
		ret = expect_mmap_einval(fd, off, win + GPU_PAGE, MAP_SHARED,
					 "a GPU page past the window");
	if (!ret)
		ret = expect_mmap_einval(fd, off, win, MAP_PRIVATE, "MAP_PRIVATE");
	if (ret)
		goto unpin;
	first = mmap_at(fd, off, win, MAP_SHARED);
	if (first == MAP_FAILED) {
		ret = fail("mmap of the window: %s", strerror(errno));
		goto unpin;
	}
	ret = expect_mmap_einval(fd, off, win, MAP_SHARED, "a handle mapped already");
	munmap(first, win);
	if (!ret) {
		again = mmap_at(fd, off, win, MAP_SHARED);
		if (again == MAP_FAILED)
			ret = fail("mmap after the first mapping's munmap: %s",
				   strerror(errno));
		else
			munmap(again, win);
	}
unpin:
	unpin(fd, h);
	if (ret || dmem_alloc(&own, OWN_PAGES_SIZE))
		goto out;
	r = pin_v2(fd, own.p, GPU_PAGE, 0, &hf);
	if (r) {
		ret = fail("PIN_BUFFER_V2 of the buffer to free: %s", strerror(-r));
		dmem_free(&own);
		goto out;
	}
	if (dmem_free(&own)) {
		ret = -1;
		goto out;
	}
	f.handle = (__u64)hf;
	if (ioctl(fd, GDRDRV_IOC_GET_CB_FLAG, &f) || f.flag != 1)
		ret = fail("GET_CB_FLAG after cuMemFree: %u", f.flag);
	if (!ret)
		ret = expect_mmap_einval(fd, handle_offset(hf), GPU_PAGE, MAP_SHARED,
					 "a handle whose memory was freed");
	unpin(fd, hf);
out:
	close(fd);
	if (dmem_free(&m))
		return -1;
	return ret;
}

#define HANDLE_LOOPS 100000
#define HANDLE_LOOPS_SPACED 16	/* the first pins whose spacing is checked */
#define HANDLE_LOOPS_MAP_EVERY 1000
#define HANDLE_PINS 1024

struct handle_span {
	uint32_t h;
	__u64 pages;	/* the window's host pages: the handles it takes */
};

static int cmp_span(const void *a, const void *b)
{
	const struct handle_span *x = a, *y = b;

	return x->h < y->h ? -1 : x->h > y->h;
}

/*
 * Pins 1024 windows of 1..4 GPU pages (overlapping) of `m` at once: their
 * handle ranges [h, h + window / 4096) are pairwise disjoint and below 2^32.
 */
static int many_pins_disjoint(int fd, struct dmem *m)
{
	struct handle_span *s = calloc(HANDLE_PINS, sizeof(*s));
	struct gdrdrv_get_info_v2 i;
	int n, k, ret = 0, r;

	if (!s)
		return fail("calloc");
	for (n = 0; n < HANDLE_PINS && !ret; n++) {
		size_t pages = 1 + n % 4, start = (n * 7) % 29;

		r = pin_v2(fd, m->p + start * GPU_PAGE, pages * GPU_PAGE, 0, &s[n].h);
		if (r) {
			ret = fail("pin %d of %d held: %s", n, HANDLE_PINS, strerror(-r));
			break;
		}
		r = info_v2(fd, s[n].h, &i);
		if (r || i.mapped_size != pages * GPU_PAGE)
			ret = fail("GET_INFO_V2 of pin %d: %s, window %#llx", n, err_str(r),
				   (unsigned long long)i.mapped_size);
		s[n].pages = i.mapped_size / HOST_PAGE;
	}
	if (!ret) {
		qsort(s, n, sizeof(*s), cmp_span);
		for (k = 0; k < n && !ret; k++) {
			if ((__u64)s[k].h + s[k].pages > (1ULL << 32))
				ret = fail("handle %u + %llu pages passes 2^32", s[k].h,
					   (unsigned long long)s[k].pages);
			else if (k + 1 < n && (__u64)s[k].h + s[k].pages > s[k + 1].h)
				ret = fail("handles %u (%llu pages) and %u overlap", s[k].h,
					   (unsigned long long)s[k].pages, s[k + 1].h);
		}
	}
	for (k = 0; k < n; k++)
		unpin(fd, s[k].h);
	free(s);
	return ret;
}

/*
 * gdrcopy_apiperf's loop: pin and unpin one 64 KiB buffer 100,000 times on
 * one file through the 32-bit handle (every 1000th also gdr_map, a byte through,
 * munmap). Every handle fits 32 bits, and each next one follows the previous
 * by the window's host pages (16), as gdrdrv numbers them, although the
 * previous was unpinned. Then many pins held at once take disjoint handle
 * ranges.
 */
static int check_handles_fit_32_bits(void)
{
	__u64 h64 = 0, prev = 0;
	struct dmem m;
	uint32_t h;
	void *ptr;
	int fd, ret = 0, r, n;

	if (dmem_alloc(&m, OWN_PAGES_SIZE))
		return -1;
	fd = open_gdrdrv();
	for (n = 0; n < HANDLE_LOOPS && !ret; n++) {
		r = pin_v2_raw(fd, m.p, GPU_PAGE, 0, &h64);
		if (r) {
			ret = fail("pin %d: %s", n, strerror(-r));
			break;
		}
		if (h64 > UINT32_MAX) {
			struct gdrdrv_unpin_buffer u = { .handle = h64 };

			ioctl(fd, GDRDRV_IOC_UNPIN_BUFFER, &u);
			ret = fail("pin %d: handle %#llx does not fit 32 bits", n,
				   (unsigned long long)h64);
			break;
		}
		h = (uint32_t)h64;
		if (n > 0 && n < HANDLE_LOOPS_SPACED && h64 != prev + GPU_PAGE / HOST_PAGE)
			ret = fail("pin %d: handle %u after %llu, not %llu", n, h,
				   (unsigned long long)prev,
				   (unsigned long long)(prev + GPU_PAGE / HOST_PAGE));
		prev = h64;
		if (!ret && n % HANDLE_LOOPS_MAP_EVERY == 0) {
			if (gdr_map(fd, h, GPU_PAGE, &ptr)) {
				ret = fail("pin %d: gdr_map of handle %u: %s", n, h, map_why);
			} else {
				ret = byte_through(ptr, m.p, (unsigned char)(n / HANDLE_LOOPS_MAP_EVERY));
				gdr_unmap(ptr, GPU_PAGE);
			}
		}
		r = unpin(fd, h);
		if (r && !ret)
			ret = fail("unpin %d of handle %u: %s", n, h, strerror(-r));
	}
	if (!ret)
		ret = many_pins_disjoint(fd, &m);
	close(fd);
	if (dmem_free(&m))
		return -1;
	return ret;
}

/* A fresh file's first pin gets handle 0, the next one 0 + the first window's host pages. */
static int check_first_handle_is_zero(void)
{
	struct gdrdrv_get_info_v2 i;
	uint32_t h0 = 1, h1 = 0;
	struct dmem m;
	int fd, ret = 0, r;

	if (dmem_alloc(&m, 2 * GPU_PAGE))
		return -1;
	fd = open_gdrdrv();
	r = pin_v2(fd, m.p, 2 * GPU_PAGE, 0, &h0);
	if (r) {
		ret = fail("first PIN_BUFFER_V2: %s", strerror(-r));
		goto out;
	}
	if (h0 != 0)
		ret = fail("the first handle is %u, not 0", h0);
	r = info_v2(fd, h0, &i);
	if (!ret && (r || i.mapped_size != 2 * GPU_PAGE))
		ret = fail("GET_INFO_V2 of handle 0: %s, window %#llx", err_str(r),
			   (unsigned long long)i.mapped_size);
	r = pin_v2(fd, m.p, GPU_PAGE, 0, &h1);
	if (!ret && r)
		ret = fail("second PIN_BUFFER_V2: %s", strerror(-r));
	else if (!ret && h1 != h0 + 2 * GPU_PAGE / HOST_PAGE)
		ret = fail("the second handle is %u, not %lu", h1,
			   h0 + 2 * GPU_PAGE / HOST_PAGE);
	if (!r)
		unpin(fd, h1);
	unpin(fd, h0);
out:
	close(fd);
	if (dmem_free(&m))
		return -1;
	return ret;
}

/* Two buffers mapped; the first is freed: the second keeps working. */
static int check_two_mappings_one_freed(void)
{
	struct buf a, b;
	struct gdrdrv_get_cb_flag f = { 0 };
	int fd = open_gdrdrv(), ret;

	ret = alloc_pin_map(fd, &a, OWN_PAGES_SIZE);
	if (!ret)
		ret = alloc_pin_map(fd, &b, OWN_PAGES_SIZE);
	if (ret)
		return ret;
	if (cu(cuMemFree_v2(a.alloc), "cuMemFree_v2"))
		return -1;
	f.handle = (__u64)a.handle;
	if (ioctl(fd, GDRDRV_IOC_GET_CB_FLAG, &f) || f.flag != 1)
		return fail("GET_CB_FLAG of the freed buffer: %u", f.flag);
	f.handle = (__u64)b.handle;
	f.flag = 7;
	if (ioctl(fd, GDRDRV_IOC_GET_CB_FLAG, &f) || f.flag != 0)
		return fail("GET_CB_FLAG of the live buffer: %u", f.flag);
	ret = round_trip(&b, b.d, b.size, 20);
	buf_unmap_unpin(fd, &a);
	if (buf_free(fd, &b))
		return -1;
	close(fd);
	return ret;
}

/* The descriptor closed with a mapping live: the mapping holds the file. */
static int check_close_with_mapping(void)
{
	struct buf b;
	int fd = open_gdrdrv(), ret;

	ret = alloc_pin_map(fd, &b, GPU_PAGE);
	if (ret)
		return ret;
	close(fd);
	ret = round_trip(&b, b.d, b.size, 30);
	gdr_unmap(b.map, b.size);
	if (cu(cuMemFree_v2(b.alloc), "cuMemFree_v2"))
		return -1;
	return ret;
}

/*
 * The scenarios that end in SIGBUS, each in a fresh process: map, write,
 * withdraw the mapping, touch it again.
 */
static int scenario(const char *name)
{
	struct buf b;
	int fd = open_gdrdrv();

	check_name = name;
	fail_prefix = "child: ";
	if (cuda_setup())
		return fail("no CUDA");
	/* An allocation of its own, so that its cuMemFree calls back. */
	if (alloc_pin_map(fd, &b, OWN_PAGES_SIZE))
		return 1;
	memset(b.p, 0x11, b.size);
	if (!strcmp(name, "after-cumemfree")) {
		if (cu(cuMemFree_v2(b.alloc), "cuMemFree_v2"))
			return -1;
	} else if (!strcmp(name, "after-unpin")) {
		if (unpin(fd, b.handle))
			return fail("UNPIN");
	} else if (!strcmp(name, "after-unpin-and-close")) {
		/* libgdrapi's gdr_close: UNPIN each handle, then close. */
		if (unpin(fd, b.handle))
			return fail("UNPIN");
		close(fd);
	} else {
		return fail("unknown: %s", name);
	}
	__atomic_store_n(&b.p[GPU_PAGE + 8], 0x55, __ATOMIC_RELAXED);
	return fail("the touch went through");
}

static int expect_sigbus(const char *name)
{
	long long writes = nvsim_stat("freed_page_writes");
	int status;
	pid_t pid = fork();

	if (pid == 0) {
		execl("/proc/self/exe", "gdrdrv-client", "--scenario", name, NULL);
		_exit(127);
	}
	if (pid < 0 || waitpid(pid, &status, 0) != pid)
		return fail("fork/wait");
	if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGBUS)
		return fail("the child ended with status %#x, not SIGBUS", status);
	if (nvsim_stat("freed_page_writes") != writes)
		return fail("a write reached freed GPU memory");
	return 0;
}

static int check_sigbus_after_cumemfree(void)
{
	return expect_sigbus("after-cumemfree");
}

static int check_sigbus_after_unpin(void)
{
	return expect_sigbus("after-unpin");
}

static int check_sigbus_after_unpin_and_close(void)
{
	return expect_sigbus("after-unpin-and-close");
}

/* Waits for a child that checks `what`, returning 0 if it exited with 0. */
static int child_ok(pid_t pid, const char *what)
{
	int status;

	if (pid < 0 || waitpid(pid, &status, 0) != pid)
		return fail("fork/wait");
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		return fail("%s (child status %#x)", what, status);
	return 0;
}

/* What a process that did not open the file gets: EACCES everywhere. */
static int not_opener_gets_eacces(int fd, uint32_t handle)
{
	struct gdrdrv_get_info_v2 i;
	struct gdrpeer_event e;
	void *m = mmap_at(fd, handle_offset(handle), GPU_PAGE, MAP_SHARED);

	if (m != MAP_FAILED || errno != EACCES)
		return 1;
	if (info_v2(fd, handle, &i) != -EACCES)
		return 2;
	if (read(fd, &e, sizeof(e)) != -1 || errno != EACCES)
		return 3;
	return 0;
}

/* Fork after map: the child has no mapping (VM_DONTCOPY) and gets EACCES. */
static int check_fork_after_map(void)
{
	struct buf b;
	int fd = open_gdrdrv(), ret;
	pid_t pid;
	int status;

	ret = alloc_pin_map(fd, &b, GPU_PAGE);
	if (ret)
		return ret;
	b.p[0] = 7;
	pid = fork();
	if (pid == 0)
		_exit(not_opener_gets_eacces(fd, b.handle));
	ret = child_ok(pid, "the child's mmap, GET_INFO_V2 or read was not EACCES");
	pid = fork();
	if (pid == 0) {
		/* Not mapped here: this faults. */
		(void)__atomic_load_n(b.p, __ATOMIC_RELAXED);
		_exit(0);
	}
	if (!ret && (waitpid(pid, &status, 0) != pid || !WIFSIGNALED(status) ||
		     WTERMSIG(status) != SIGSEGV))
		ret = fail("a child touching the parent's mapping: status %#x", status);
	if (!ret && b.p[0] != 7)
		ret = fail("the parent's mapping after the children");
	if (buf_free(fd, &b))
		return -1;
	close(fd);
	return ret;
}

/* The end of a check with a socket pair, a pin and an allocation: all go; `ret` or -1. */
static int release_all(int sv[2], int fd, uint32_t h, unsigned long long alloc, int ret)
{
	close(sv[0]);
	close(sv[1]);
	unpin(fd, h);
	if (cu(cuMemFree_v2(alloc), "cuMemFree_v2"))
		ret = -1;
	close(fd);
	return ret;
}

/* Ends a child that waits on sv[1] (it reads EOF) and reaps it. */
static void end_child(int sv[2], pid_t pid)
{
	shutdown(sv[0], SHUT_RDWR);
	if (pid > 0)
		waitpid(pid, NULL, 0);
}

/* Fork before map: the child may not map what the parent pinned. */
static int check_fork_before_map(void)
{
	struct dmem d;
	uint32_t h = 0;
	int fd = open_gdrdrv(), ret, sv[2];
	char c = 0;
	pid_t pid;
	void *m;

	if (dmem_alloc(&d, GPU_PAGE))
		return -1;
	ret = pin_v2(fd, d.p, GPU_PAGE, 0, &h);
	if (ret)
		return fail("PIN_BUFFER_V2: %s", strerror(-ret));
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
		return fail("socketpair");
	pid = fork();
	if (pid == 0) {
		/* Waits until the parent has mapped. */
		if (read(sv[1], &c, 1) != 1)
			_exit(9);
		_exit(not_opener_gets_eacces(fd, h));
	}
	if (gdr_map(fd, h, GPU_PAGE, &m)) {
		ret = fail("parent gdr_map: %s", map_why);
		end_child(sv, pid);
	} else {
		*(unsigned char *)m = 1;
		if (write(sv[0], &c, 1) != 1) {
			ret = fail("sync");
			end_child(sv, pid);
		} else {
			ret = child_ok(pid, "the child's mmap, GET_INFO_V2 or read was not EACCES");
		}
		gdr_unmap(m, GPU_PAGE);
	}
	return release_all(sv, fd, h, d.alloc, ret);
}

static int send_fd(int sock, int fd)
{
	char space[CMSG_SPACE(sizeof(int))] = { 0 };
	char c = 'f';
	struct iovec iov = { .iov_base = &c, .iov_len = 1 };
	struct msghdr msg = {
		.msg_iov = &iov, .msg_iovlen = 1,
		.msg_control = space, .msg_controllen = sizeof(space),
	};
	struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);

	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &fd, sizeof(int));
	return sendmsg(sock, &msg, 0) == 1 ? 0 : -1;
}

static int recv_fd(int sock)
{
	char space[CMSG_SPACE(sizeof(int))];
	char c;
	struct iovec iov = { .iov_base = &c, .iov_len = 1 };
	struct msghdr msg = {
		.msg_iov = &iov, .msg_iovlen = 1,
		.msg_control = space, .msg_controllen = sizeof(space),
	};
	struct cmsghdr *cm;
	int fd;

	if (recvmsg(sock, &msg, 0) != 1)
		return -1;
	cm = CMSG_FIRSTHDR(&msg);
	if (!cm || cm->cmsg_type != SCM_RIGHTS)
		return -1;
	memcpy(&fd, CMSG_DATA(cm), sizeof(int));
	return fd;
}

/* A process that received the file over SCM_RIGHTS gets EACCES. */
static int check_scm_rights(void)
{
	struct dmem d;
	uint32_t h = 0;
	int fd, ret, r, sv[2];
	pid_t pid;

	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
		return fail("socketpair");
	/* Forked before the file exists: only the received copy reaches it. */
	pid = fork();
	if (pid == 0) {
		int got = recv_fd(sv[1]);

		if (got < 0 || read(sv[1], &h, sizeof(h)) != sizeof(h))
			_exit(8);
		_exit(not_opener_gets_eacces(got, h));
	}
	fd = open_gdrdrv();
	if (dmem_alloc(&d, GPU_PAGE)) {
		end_child(sv, pid);
		close(sv[0]);
		close(sv[1]);
		close(fd);
		return -1;
	}
	r = pin_v2(fd, d.p, GPU_PAGE, 0, &h);
	if (r) {
		end_child(sv, pid);
		close(sv[0]);
		close(sv[1]);
		close(fd);
		dmem_free(&d);
		return fail("PIN_BUFFER_V2: %s", strerror(-r));
	}
	if (send_fd(sv[0], fd) || write(sv[0], &h, sizeof(h)) != sizeof(h)) {
		ret = fail("send");
		end_child(sv, pid);
	} else {
		ret = child_ok(pid, "the receiver's mmap, GET_INFO_V2 or read was not EACCES");
	}
	return release_all(sv, fd, h, d.alloc, ret);
}

/* PIN_BUFFER with the buffer's P2P tokens; wrong tokens are EINVAL. */
static int check_tokens(void)
{
	struct cuda_p2p_tokens t = { 0 };
	struct gdrdrv_pin_buffer p = { 0 };
	struct buf b;
	struct dmem d;
	int fd = open_gdrdrv(), ret;

	if (dmem_alloc(&d, 2 * GPU_PAGE))
		return -1;
	if (cu(cuPointerGetAttribute(&t, CU_POINTER_ATTRIBUTE_P2P_TOKENS, d.p),
	       "cuPointerGetAttribute"))
		return -1;
	p.addr = d.p;
	p.size = 2 * GPU_PAGE;
	p.p2p_token = t.p2p_token + 1;
	p.va_space = t.va_space_token;
	if (ioctl(fd, GDRDRV_IOC_PIN_BUFFER, &p) == 0 || errno != EINVAL)
		return fail("a pin with a wrong token: not EINVAL");
	p.p2p_token = t.p2p_token;
	if (ioctl(fd, GDRDRV_IOC_PIN_BUFFER, &p))
		return fail("PIN_BUFFER with tokens %#llx/%#x: %s",
			    (unsigned long long)t.p2p_token, t.va_space_token,
			    strerror(errno));
	b.alloc = d.alloc;
	b.d = d.p;
	b.size = 2 * GPU_PAGE;
	if (keep_handle(fd, p.handle, &b.handle))
		return fail("PIN_BUFFER's handle %#llx does not fit 32 bits",
			    (unsigned long long)p.handle);
	if (info_v2(fd, b.handle, &b.info))
		return fail("GET_INFO_V2");
	if (buf_map(fd, &b))
		return -1;
	ret = round_trip(&b, b.d, b.size, 40);
	if (buf_free(fd, &b))
		return -1;
	close(fd);
	return ret;
}

struct thread_arg {
	int fd;
	unsigned long long d;
	void *ctx;
	int ret;
};

static void *pin_in_thread(void *p)
{
	struct thread_arg *a = p;
	uint32_t h = 0;

	a->ret = pin_v2(a->fd, a->d, GPU_PAGE, 0, &h);
	if (!a->ret)
		a->ret = unpin(a->fd, h);
	return NULL;
}

/* Another thread of the process pins and unpins through the same file. */
static int check_thread_pins(void)
{
	struct thread_arg a = { .fd = open_gdrdrv() };
	pthread_t t;

	if (cu(cuMemAlloc_v2(&a.d, GPU_PAGE), "cuMemAlloc_v2"))
		return -1;
	if (pthread_create(&t, NULL, pin_in_thread, &a) || pthread_join(t, NULL))
		return fail("pthread");
	if (cu(cuMemFree_v2(a.d), "cuMemFree_v2"))
		return -1;
	close(a.fd);
	if (a.ret)
		return fail("pin/unpin in a thread: %s", strerror(-a.ret));
	return 0;
}

/* A re-pin after UNPIN is a cache hit; with the NOCACHE flag it is not. */
static int check_repin_is_a_cache_hit(void)
{
	unsigned long long d;
	long long hits;
	uint32_t h = 0;
	int fd = open_gdrdrv(), ret = 0;
	__u32 nocache = GDRDRV_PIN_FLAG_GDRPEER_NOCACHE;

	if (cu(cuMemAlloc_v2(&d, 2 * GPU_PAGE), "cuMemAlloc_v2"))
		return -1;
	if (pin_v2(fd, d, 2 * GPU_PAGE, 0, &h) || unpin(fd, h))
		return fail("first pin");
	hits = gdrpeer_stat("hits");
	if (pin_v2(fd, d, 2 * GPU_PAGE, 0, &h) || unpin(fd, h))
		return fail("second pin");
	if (gdrpeer_stat("hits") != hits + 1)
		ret = fail("hits %lld -> %lld", hits, gdrpeer_stat("hits"));
	if (!ret && (pin_v2(fd, d + 2, 100, nocache, &h) || unpin(fd, h)))
		ret = fail("NOCACHE pin");
	hits = gdrpeer_stat("hits");
	if (!ret && (pin_v2(fd, d + 2, 100, nocache, &h) || unpin(fd, h)))
		ret = fail("second NOCACHE pin");
	if (!ret && gdrpeer_stat("hits") != hits)
		ret = fail("a NOCACHE pin was a cache hit");
	close(fd);
	if (cu(cuMemFree_v2(d), "cuMemFree_v2"))
		return -1;
	return ret;
}

/* Reads the queued events without waiting. */
static int read_events(int fd, struct gdrpeer_event *e, int max)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	ssize_t n;

	if (poll(&p, 1, 0) != 1)
		return 0;
	n = read(fd, e, max * sizeof(*e));
	return n < 0 ? -errno : (int)(n / sizeof(*e));
}

/* Freeing a buffer queues one REVOKED event per handle of it, once, with PIN's handle. */
static int check_events_once_per_revocation(void)
{
	struct gdrpeer_event e[8];
	unsigned long long a, b;
	uint32_t h1 = 0, h2 = 0, h3 = 0;
	struct pollfd p;
	int fd = open_gdrdrv(), n, fl;

	if (cu(cuMemAlloc_v2(&a, OWN_PAGES_SIZE), "cuMemAlloc_v2"))
		return -1;
	if (cu(cuMemAlloc_v2(&b, OWN_PAGES_SIZE), "cuMemAlloc_v2"))
		return -1;
	if (pin_v2(fd, a, GPU_PAGE, 0, &h1) || pin_v2(fd, a, 100, 0, &h2) ||
	    pin_v2(fd, b, GPU_PAGE, 0, &h3))
		return fail("pins");
	p.fd = fd;
	p.events = POLLIN;
	if (poll(&p, 1, 0) != 0)
		return fail("readable before any free");
	if (cu(cuMemFree_v2(a), "cuMemFree_v2"))
		return -1;
	if (poll(&p, 1, 1000) != 1 || !(p.revents & POLLIN))
		return fail("not readable after the free");
	n = read_events(fd, e, 8);
	if (n != 2 || e[0].type != GDRPEER_EVENT_REVOKED ||
	    e[1].type != GDRPEER_EVENT_REVOKED ||
	    !((e[0].handle == h1 && e[1].handle == h2) ||
	      (e[0].handle == h2 && e[1].handle == h1)))
		return fail("%d events after the first free", n);
	fl = fcntl(fd, F_GETFL);
	fcntl(fd, F_SETFL, fl | O_NONBLOCK);
	if (read(fd, e, sizeof(e)) != -1 || errno != EAGAIN)
		return fail("a second read: not EAGAIN");
	fcntl(fd, F_SETFL, fl);
	if (unpin(fd, h1) || unpin(fd, h2))
		return fail("unpin of revoked handles");
	if (cu(cuMemFree_v2(b), "cuMemFree_v2"))
		return -1;
	n = read_events(fd, e, 8);
	if (n != 1 || e[0].handle != h3)
		return fail("%d events after the second free", n);
	unpin(fd, h3);
	close(fd);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 3 && !strcmp(argv[1], "--scenario"))
		return scenario(argv[2]) ? 1 : 0;
	if (access("/dev/gdrdrv", F_OK)) {
		printf("FAIL gdrdrv-client: no /dev/gdrdrv\n");
		return 1;
	}
	if (cuda_setup()) {
		printf("FAIL gdrdrv-client: no CUDA\n");
		return 1;
	}
	run_check("version", check_version);
	run_check("attributes", check_attributes);
	run_check("first-handle-is-zero", check_first_handle_is_zero);
	run_check("pin-map-copy", check_pin_map_copy);
	run_check("unaligned-pin-does-not-map", check_unaligned_pin_does_not_map);
	run_check("small-buffers-second-does-not-map", check_small_buffers_second_does_not_map);
	run_check("aligned-small-buffers", check_aligned_small_buffers);
	run_check("req-mapping-type-answers", check_req_mapping_type_answers);
	run_check("default-map-type", check_default_map_type);
	run_check("map-wc-requested", check_map_wc_requested);
	run_check("mmap-refusals", check_mmap_refusals);
	run_check("handles-fit-32-bits", check_handles_fit_32_bits);
	run_check("two-mappings-one-freed", check_two_mappings_one_freed);
	run_check("close-with-mapping", check_close_with_mapping);
	run_check("sigbus-after-cumemfree", check_sigbus_after_cumemfree);
	run_check("sigbus-after-unpin", check_sigbus_after_unpin);
	run_check("sigbus-after-unpin-and-close", check_sigbus_after_unpin_and_close);
	run_check("fork-after-map", check_fork_after_map);
	run_check("fork-before-map", check_fork_before_map);
	run_check("scm-rights", check_scm_rights);
	run_check("tokens", check_tokens);
	run_check("thread-pins", check_thread_pins);
	run_check("repin-is-a-cache-hit", check_repin_is_a_cache_hit);
	run_check("events-once-per-revocation", check_events_once_per_revocation);
	return failures ? 1 : 0;
}
