// SPDX-License-Identifier: GPL-2.0
/*
 * libgdrpeer-test: a C program that uses /dev/gdrpeer through libgdrpeer
 * (include/gdrpeer/libgdrpeer.h, -lgdrpeer) over the CUDA driver API (the
 * simulated libcuda in the test guest): open, versions, pin, info, pages,
 * a CPU mapping checked against cuMemcpyDtoH/HtoD, dma-buf export, revocation
 * events after cuMemFree, and the errors of bad input with their messages.
 *
 * Prints "PASS name" or "FAIL name: why" per check; exits 0 when all pass,
 * 1 otherwise.
 */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/wait.h>

#include <gdrpeer/libgdrpeer.h>

#include "cuda-sim.h"

_Static_assert(sizeof(struct gdrpeer_lib_version) == 12, "version");
_Static_assert(sizeof(struct gdrpeer_lib_pin) == 32, "pin");
_Static_assert(sizeof(struct gdrpeer_lib_info) == 48, "info");
_Static_assert(sizeof(struct gdrpeer_lib_dmabuf) == 32, "dmabuf");
_Static_assert(sizeof(struct gdrpeer_lib_event) == 16, "event");

#define GPU_PAGE 65536ULL

static int failures;
static char why[512];

static int failf(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	return -1;
}

static void run(const char *name, int (*check)(gdrpeer_t *), gdrpeer_t *g)
{
	why[0] = 0;
	if (check(g)) {
		printf("FAIL %s: %s\n", name, why);
		failures++;
	} else {
		printf("PASS %s\n", name);
	}
	fflush(stdout);
}

/* ret is -expect, errno and gdrpeer_last_errno() say expect, and the message holds text. */
static int expect_error(const char *what, int ret, int expect, const char *text)
{
	const char *msg = gdrpeer_last_error();

	if (ret != -expect)
		return failf("%s: returned %d, not -%d (%s)", what, ret, expect, msg);
	if (errno != expect || gdrpeer_last_errno() != expect)
		return failf("%s: errno %d, last errno %d, not %d", what, errno, gdrpeer_last_errno(),
			     expect);
	if (!strstr(msg, text))
		return failf("%s: message \"%s\" lacks \"%s\"", what, msg, text);
	printf("  %s: %s\n", what, msg);
	return 0;
}

static int check_open_missing(gdrpeer_t *g)
{
	(void)g;
	errno = 0;
	if (gdrpeer_open("/nonexistent/gdrpeer"))
		return failf("opened a path that does not exist");
	return expect_error("open of a missing node", -errno, ENOENT, "is gdrpeer.ko loaded?");
}

static int check_version(gdrpeer_t *g)
{
	struct gdrpeer_lib_version v;
	uint32_t lib = gdrpeer_library_abi_version();

	if (gdrpeer_version(g, &v))
		return failf("gdrpeer_version: %s", gdrpeer_last_error());
	printf("  module ABI %u.%u, library %u.%u\n", v.abi >> 16, v.abi & 0xffff, lib >> 16,
	       lib & 0xffff);
	if (v.abi >> 16 != lib >> 16 || (v.abi & 0xffff) < 4)
		return failf("module ABI %#x: not the library's major with dma-buf export", v.abi);
	return gdrpeer_fd(g) >= 0 ? 0 : failf("gdrpeer_fd: %d", gdrpeer_fd(g));
}

/*
 * A forked child has none of its parent's mappings (the kernel leaves them
 * out): its gdrpeer_unmap of one returns 0 and unmaps nothing, not even the
 * child's own memory at that address.
 */
static int check_unmap_in_forked_child(void *map, size_t window)
{
	int status;
	pid_t child = fork();

	if (child < 0)
		return failf("fork: %s", strerror(errno));
	if (child == 0) {
		unsigned char *own = mmap(map, 4096, PROT_READ | PROT_WRITE,
					  MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE,
					  -1, 0);

		if (own != map)
			_exit(2);
		own[0] = 0x5a;
		if (gdrpeer_unmap(map, window))
			_exit(3);
		_exit(own[0] == 0x5a ? 0 : 4);
	}
	if (waitpid(child, &status, 0) != child)
		return failf("waitpid: %s", strerror(errno));
	if (!WIFEXITED(status) || WEXITSTATUS(status))
		return failf("the child's gdrpeer_unmap of its parent's mapping: status %#x (2: the range was mapped in the child, 3: it failed, a signal: it unmapped the child's own memory)",
			     status);
	printf("  gdrpeer_unmap in a forked child: unmapped nothing\n");
	return 0;
}

static int check_pin_map_copy(gdrpeer_t *g)
{
	unsigned long long alloc;
	size_t len = 256 << 10;
	struct gdrpeer_lib_pin pin;
	struct gdrpeer_lib_info info;
	uint64_t addrs[16];
	uint32_t n = 0;
	unsigned char w[4096], r[4096];
	volatile unsigned char *p;
	void *map;
	size_t window, i;
	int ret = -1;

	if (cuMemAlloc_v2(&alloc, len + GPU_PAGE) != CUDA_SUCCESS)
		return failf("cuMemAlloc failed");
	uint64_t va = alloc + 1000;
	unsigned int one = 1;

	/* A cuMemcpyHtoD is in the memory when it returns, where the mapping reads. */
	if (cuPointerSetAttribute(&one, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, alloc) != CUDA_SUCCESS) {
		failf("cuPointerSetAttribute(SYNC_MEMOPS) failed");
		goto free;
	}

	if (gdrpeer_pin(g, va, len, 0, &pin)) {
		failf("gdrpeer_pin: %s", gdrpeer_last_error());
		goto free;
	}
	window = (size_t)pin.page_count * pin.page_size;
	if (pin.aligned_va + pin.offset != va || pin.page_size != GPU_PAGE ||
	    pin.aligned_va + window < va + len) {
		failf("window %#llx+%zu, offset %llu does not hold the request",
		      (unsigned long long)pin.aligned_va, window, (unsigned long long)pin.offset);
		goto unpin;
	}
	if (gdrpeer_get_info(g, pin.handle, &info) || info.state != GDRPEER_LIB_STATE_VALID ||
	    info.page_count != pin.page_count || info.aligned_va != pin.aligned_va) {
		failf("gdrpeer_get_info: %s", gdrpeer_last_error());
		goto unpin;
	}
	if (expect_error("gdrpeer_get_pages into no room",
			 gdrpeer_get_pages(g, pin.handle, NULL, 0, &n), ENOSPC,
			 "shorter than the window") ||
	    n != pin.page_count) {
		if (!why[0])
			failf("the pages needed: %u, not %u", n, pin.page_count);
		goto unpin;
	}
	if (gdrpeer_get_pages(g, pin.handle, addrs, 16, &n) || n != pin.page_count || !addrs[0]) {
		failf("gdrpeer_get_pages: %d pages (%s)", n, gdrpeer_last_error());
		goto unpin;
	}
	if (gdrpeer_map(g, pin.handle, 0, window, &map)) {
		failf("gdrpeer_map: %s", gdrpeer_last_error());
		goto unpin;
	}
	p = (volatile unsigned char *)map + pin.offset;
	for (i = 0; i < sizeof(w); i++) {
		w[i] = (unsigned char)(i * 13 + 5);
		p[i] = w[i];
	}
	__sync_synchronize();
	if (cuMemcpyDtoH_v2(r, va, sizeof(r)) != CUDA_SUCCESS || memcmp(w, r, sizeof(r))) {
		failf("the bytes written through the mapping are not in GPU memory");
		goto unmap;
	}
	if (cuMemcpyHtoD_v2(va + 8192, "libgdrpeer", 10) != CUDA_SUCCESS) {
		failf("cuMemcpyHtoD failed");
		goto unmap;
	}
	for (i = 0; i < 10; i++)
		r[i] = p[8192 + i];
	if (memcmp(r, "libgdrpeer", 10)) {
		failf("the mapping does not show what cuMemcpyHtoD wrote");
		goto unmap;
	}
	if (expect_error("gdrpeer_unmap of an address it did not return",
			 gdrpeer_unmap((char *)map + 4096, window - 4096), EINVAL,
			 "not a mapping gdrpeer_map returned") ||
	    check_unmap_in_forked_child(map, window))
		goto unmap;
	ret = 0;
unmap:
	if (gdrpeer_unmap(map, window) && !ret)
		ret = failf("gdrpeer_unmap: %s", gdrpeer_last_error());
	if (!ret && expect_error("a second gdrpeer_unmap", gdrpeer_unmap(map, window), EINVAL,
				 "not a mapping gdrpeer_map returned"))
		ret = -1;
unpin:
	if (gdrpeer_unpin(g, pin.handle) && !ret)
		ret = failf("gdrpeer_unpin: %s", gdrpeer_last_error());
free:
	cuMemFree_v2(alloc);
	return ret;
}

static int check_bad_input(gdrpeer_t *g)
{
	static char host[1 << 17];
	struct gdrpeer_lib_pin pin;
	unsigned long long alloc;
	uint32_t n;
	int ret = -1;

	if (expect_error("PIN of host memory",
			 gdrpeer_pin(g, (uint64_t)(uintptr_t)host, sizeof(host), 0, &pin), EINVAL,
			 "not this process's live GPU memory"))
		return -1;
	if (expect_error("PIN with unknown flags", gdrpeer_pin(g, 0x1000, 4096, 1U << 7, &pin),
			 EINVAL, "unknown flags"))
		return -1;
	if (expect_error("PIN on no device", gdrpeer_pin(NULL, 0x1000, 4096, 0, &pin), EINVAL,
			 "no device"))
		return -1;
	if (expect_error("UNPIN of an unknown handle", gdrpeer_unpin(g, 999999), EINVAL,
			 "an unknown handle"))
		return -1;
	if (expect_error("mmap of an unknown handle",
			 gdrpeer_map(g, 999999, 0, 4096, &(void *){ NULL }), EINVAL,
			 "an unknown handle"))
		return -1;
	if (cuMemAlloc_v2(&alloc, GPU_PAGE) != CUDA_SUCCESS)
		return failf("cuMemAlloc failed");
	/* A pin whose handle the caller could not get back is not made. */
	if (expect_error("PIN with out NULL", gdrpeer_pin(g, alloc, GPU_PAGE, 0, NULL), EINVAL,
			 "out is NULL"))
		goto free;
	if (gdrpeer_pin(g, alloc, GPU_PAGE, 0, &pin)) {
		failf("gdrpeer_pin: %s", gdrpeer_last_error());
		goto free;
	}
	if (expect_error("DMA_MAP for no device",
			 gdrpeer_dma_map(g, pin.handle, "00ff:ff:1f.7", NULL, 0, &n), ENODEV,
			 "no PCI device at that address") ||
	    expect_error("DMA_MAP for a malformed address",
			 gdrpeer_dma_map(g, pin.handle, "not-a-pci-address", NULL, 0, &n), EINVAL,
			 "gdrpeer_dma_map"))
		goto unpin;
	ret = 0;
unpin:
	gdrpeer_unpin(g, pin.handle);
free:
	cuMemFree_v2(alloc);
	return ret;
}

static int check_export_dmabuf(gdrpeer_t *g)
{
	unsigned long long alloc;
	struct gdrpeer_lib_pin pin;
	struct gdrpeer_lib_dmabuf buf, range;
	int ret = -1;

	if (cuMemAlloc_v2(&alloc, 3 * GPU_PAGE) != CUDA_SUCCESS)
		return failf("cuMemAlloc failed");
	if (gdrpeer_pin(g, alloc + 100, 2 * GPU_PAGE, 0, &pin)) {
		failf("gdrpeer_pin: %s", gdrpeer_last_error());
		goto free;
	}
	if (gdrpeer_export_dmabuf(g, pin.handle, &buf)) {
		failf("gdrpeer_export_dmabuf: %s", gdrpeer_last_error());
		goto unpin;
	}
	printf("  dma-buf fd %d: %llu bytes, %u pages, offset %llu\n", buf.fd,
	       (unsigned long long)buf.size, buf.page_count, (unsigned long long)buf.offset);
	if (buf.fd < 0 || buf.size != (uint64_t)pin.page_count * pin.page_size ||
	    buf.offset != pin.offset || buf.aligned_va != pin.aligned_va ||
	    lseek(buf.fd, 0, SEEK_END) != (off_t)buf.size) {
		failf("the dma-buf does not cover the window");
		goto close;
	}
	if (gdrpeer_export_dmabuf_range(g, alloc + GPU_PAGE, 4096, 0, &range)) {
		failf("gdrpeer_export_dmabuf_range: %s", gdrpeer_last_error());
		goto close;
	}
	if (range.page_count != 1 || range.offset != 0 || range.size != GPU_PAGE)
		failf("the range's dma-buf: %u pages, offset %llu", range.page_count,
		      (unsigned long long)range.offset);
	else
		ret = expect_error("EXPORT_DMABUF with an unknown flag",
				   gdrpeer_export_dmabuf_range(g, alloc, 4096, 1U << 1, &range),
				   EINVAL, "unknown flags");
	close(range.fd);
close:
	close(buf.fd);
unpin:
	gdrpeer_unpin(g, pin.handle);
free:
	cuMemFree_v2(alloc);
	return ret;
}

static int check_events(gdrpeer_t *g)
{
	unsigned long long kept, freed;
	struct gdrpeer_lib_pin keep, gone;
	struct gdrpeer_lib_info info;
	struct gdrpeer_lib_event ev[4];
	struct pollfd pfd = { .fd = gdrpeer_fd(g), .events = POLLIN };
	size_t len = 2 << 20;
	int n, ret = -1;

	if (cuMemAlloc_v2(&kept, len) != CUDA_SUCCESS || cuMemAlloc_v2(&freed, len) != CUDA_SUCCESS)
		return failf("cuMemAlloc failed");
	if (gdrpeer_pin(g, kept, len, 0, &keep) || gdrpeer_pin(g, freed, len, 0, &gone))
		return failf("gdrpeer_pin: %s", gdrpeer_last_error());
	n = gdrpeer_read_events(g, ev, 4, 0);
	if (n != 0) {
		failf("%d events before any free (%s)", n, gdrpeer_last_error());
		goto out;
	}
	if (cuMemFree_v2(freed) != CUDA_SUCCESS) {
		failf("cuMemFree failed");
		goto out;
	}
	if (poll(&pfd, 1, 10000) != 1 || !(pfd.revents & POLLIN)) {
		failf("the descriptor did not become readable within 10 s of cuMemFree");
		goto out;
	}
	n = gdrpeer_read_events(g, ev, 4, -1);
	if (n != 1 || ev[0].handle != gone.handle || ev[0].type != GDRPEER_LIB_EVENT_REVOKED) {
		failf("%d events (first: handle %llu type %u), not one revocation of %llu (%s)", n,
		      n > 0 ? (unsigned long long)ev[0].handle : 0ULL, n > 0 ? ev[0].type : 0,
		      (unsigned long long)gone.handle, gdrpeer_last_error());
		goto out;
	}
	printf("  revoked handle %llu\n", (unsigned long long)ev[0].handle);
	if (gdrpeer_get_info(g, gone.handle, &info) || info.state != GDRPEER_LIB_STATE_REVOKED) {
		failf("the freed handle is not reported revoked");
		goto out;
	}
	if (expect_error("GET_PAGES of a revoked handle",
			 gdrpeer_get_pages(g, gone.handle, NULL, 0, NULL), ENXIO, "was freed"))
		goto out;
	if (gdrpeer_read_events(g, ev, 4, 100) != 0) {
		failf("an event returned twice");
		goto out;
	}
	ret = 0;
out:
	gdrpeer_unpin(g, gone.handle);
	if (!ret)
		ret = expect_error("a second UNPIN", gdrpeer_unpin(g, gone.handle), EINVAL,
				   "unpinned already");
	gdrpeer_unpin(g, keep.handle);
	cuMemFree_v2(kept);
	return ret;
}

int main(void)
{
	void *ctx;
	gdrpeer_t *g;

	if (cuInit(0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS ||
	    cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
		printf("FAIL setup: no CUDA context\n");
		return 1;
	}
	run("open-missing-node", check_open_missing, NULL);
	g = gdrpeer_open(NULL);
	if (!g) {
		printf("FAIL open: %s\n", gdrpeer_last_error());
		return 1;
	}
	run("version", check_version, g);
	run("pin-map-copy", check_pin_map_copy, g);
	run("bad-input", check_bad_input, g);
	run("export-dmabuf", check_export_dmabuf, g);
	run("events", check_events, g);
	gdrpeer_close(g);
	return failures ? 1 : 0;
}
