// SPDX-License-Identifier: GPL-2.0
/*
 * gdrdrv-client: a client of /dev/gdrdrv written from the gdrdrv ABI as
 * libgdrapi's users know it (include/uapi/gdrpeer-gdrdrv.h), over the CUDA
 * driver API (the simulated libcuda in the test guest). It runs gdrcopy-style
 * sanity checks and prints one line per check:
 *
 *	PASS name
 *	FAIL name: why
 *
 * and exits with status 1 if any check failed. The checks that end with a
 * SIGBUS run in a child that re-executes this program (a CUDA context does not
 * survive fork): "gdrdrv-client --scenario NAME".
 *
 * Run with nvsim.ko and gdrpeer.ko loaded; reads nvsim's and gdrpeer's debugfs
 * counters (root).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
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
/*
 * CUDA carves allocations below 2 MiB out of shared blocks, so two of them may
 * share a GPU page, and freeing one revokes pins over the other's pages too.
 * Checks that free one buffer and keep another use allocations of this size.
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

static int open_gdrdrv(void)
{
	return open("/dev/gdrdrv", O_RDWR | O_CLOEXEC);
}

/* A debugfs counter: "name value" lines. */
static long long counter(const char *file, const char *name)
{
	char key[64];
	long long v;
	FILE *f = fopen(file, "r");

	if (!f)
		return -1;
	while (fscanf(f, "%63s %lld", key, &v) == 2) {
		if (!strcmp(key, name)) {
			fclose(f);
			return v;
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

static int pin_v2(int fd, unsigned long long addr, size_t size, __u32 flags,
		  __u64 *handle)
{
	struct gdrdrv_pin_buffer_v2 p = {
		.addr = addr, .size = size, .flags = flags,
	};

	if (ioctl(fd, GDRDRV_IOC_PIN_BUFFER_V2, &p))
		return -errno;
	*handle = p.handle;
	return 0;
}

static int unpin(int fd, __u64 handle)
{
	struct gdrdrv_unpin_buffer u = { .handle = handle };

	return ioctl(fd, GDRDRV_IOC_UNPIN_BUFFER, &u) ? -errno : 0;
}

static int info_v2(int fd, __u64 handle, struct gdrdrv_get_info_v2 *i)
{
	memset(i, 0, sizeof(*i));
	i->handle = handle;
	return ioctl(fd, GDRDRV_IOC_GET_INFO_V2, i) ? -errno : 0;
}

/* mmap as gdr_map does: the handle is the offset in pages. */
static void *map(int fd, __u64 handle, size_t len, size_t off)
{
	return mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
		    (off_t)(handle * HOST_PAGE + off));
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

/* A cuMemAlloc'd buffer, pinned and mapped whole, as a gdrcopy program does. */
struct buf {
	unsigned long long d;	/* the buffer */
	size_t size;
	__u64 handle;
	struct gdrdrv_get_info_v2 info;
	unsigned char *map;	/* the pinned window */
	unsigned char *p;	/* the buffer in the mapping */
};

static int buf_pin_map(int fd, struct buf *b, unsigned long long d,
		       size_t size, __u32 flags)
{
	int r;

	b->d = d;
	b->size = size;
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
	b->map = map(fd, b->handle, b->info.mapped_size, 0);
	if (b->map == MAP_FAILED)
		return fail("mmap of handle %llu: %s",
			    (unsigned long long)b->handle, strerror(errno));
	b->p = b->map + (d - b->info.va);
	return 0;
}

static void buf_unmap_unpin(int fd, struct buf *b)
{
	munmap(b->map, b->info.mapped_size);
	unpin(fd, b->handle);
}

/* Unmaps, unpins and frees a buffer of alloc_pin_map's. */
static int buf_free(int fd, struct buf *b)
{
	buf_unmap_unpin(fd, b);
	return cu(cuMemFree_v2(b->d), "cuMemFree_v2");
}

/* Allocates `size` bytes and pins and maps the allocation's whole range. */
static int alloc_pin_map(int fd, struct buf *b, size_t size)
{
	unsigned long long d, base;
	size_t len;

	if (cu(cuMemAlloc_v2(&d, size), "cuMemAlloc_v2"))
		return -1;
	if (cu(cuMemGetAddressRange_v2(&base, &len, d), "cuMemGetAddressRange_v2"))
		return -1;
	return buf_pin_map(fd, b, base, len, 0);
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

/* Buffers that start inside a GPU page, smaller than a host page, across pages. */
static int check_unaligned_and_small(void)
{
	static const size_t offs[] = { 1, 5000, GPU_PAGE - 1, GPU_PAGE + 12345 };
	static const size_t lens[] = { 1, 100, 2, 3 * HOST_PAGE };
	unsigned long long d;
	struct buf b;
	int fd = open_gdrdrv(), ret = 0;
	size_t i;

	if (cu(cuMemAlloc_v2(&d, 4 * GPU_PAGE), "cuMemAlloc_v2"))
		return -1;
	for (i = 0; i < ARRAY_SIZE(offs) && !ret; i++) {
		ret = buf_pin_map(fd, &b, d + offs[i], lens[i], 0);
		if (!ret)
			ret = round_trip(&b, b.d, lens[i], 10 + i);
		if (!ret)
			buf_unmap_unpin(fd, &b);
	}
	if (cu(cuMemFree_v2(d), "cuMemFree_v2"))
		return -1;
	close(fd);
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
	if (cu(cuMemFree_v2(a.d), "cuMemFree_v2"))
		return -1;
	f.handle = a.handle;
	if (ioctl(fd, GDRDRV_IOC_GET_CB_FLAG, &f) || f.flag != 1)
		return fail("GET_CB_FLAG of the freed buffer: %u", f.flag);
	f.handle = b.handle;
	f.flag = 7;
	if (ioctl(fd, GDRDRV_IOC_GET_CB_FLAG, &f) || f.flag != 0)
		return fail("GET_CB_FLAG of the live buffer: %u", f.flag);
	ret = round_trip(&b, b.d, b.size, 20);
	munmap(a.map, a.info.mapped_size);
	unpin(fd, a.handle);
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
	munmap(b.map, b.info.mapped_size);
	if (cu(cuMemFree_v2(b.d), "cuMemFree_v2"))
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
	if (alloc_pin_map(fd, &b, 2 * GPU_PAGE))
		return 1;
	memset(b.p, 0x11, b.size);
	if (!strcmp(name, "after-cumemfree")) {
		if (cu(cuMemFree_v2(b.d), "cuMemFree_v2"))
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
static int not_opener_gets_eacces(int fd, __u64 handle)
{
	struct gdrdrv_get_info_v2 i;
	struct gdrpeer_event e;
	void *m = map(fd, handle, HOST_PAGE, 0);

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

/* The end of a check with a socket pair, a pin and a buffer: all go; `ret` or -1. */
static int release_all(int sv[2], int fd, __u64 h, unsigned long long d, int ret)
{
	close(sv[0]);
	close(sv[1]);
	unpin(fd, h);
	if (cu(cuMemFree_v2(d), "cuMemFree_v2"))
		ret = -1;
	close(fd);
	return ret;
}

/* Fork before map: the child may not map what the parent pinned. */
static int check_fork_before_map(void)
{
	unsigned long long d;
	__u64 h = 0;
	int fd = open_gdrdrv(), ret, sv[2];
	char c = 0;
	pid_t pid;

	if (cu(cuMemAlloc_v2(&d, GPU_PAGE), "cuMemAlloc_v2"))
		return -1;
	ret = pin_v2(fd, d, GPU_PAGE, 0, &h);
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
	{
		unsigned char *m = map(fd, h, GPU_PAGE, 0);

		if (m == MAP_FAILED) {
			ret = fail("parent mmap: %s", strerror(errno));
		} else {
			m[0] = 1;
			if (write(sv[0], &c, 1) != 1)
				ret = fail("sync");
			if (!ret)
				ret = child_ok(pid, "the child's mmap, GET_INFO_V2 or read was not EACCES");
			munmap(m, GPU_PAGE);
		}
	}
	return release_all(sv, fd, h, d, ret);
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
	unsigned long long d;
	__u64 h = 0;
	int fd, ret, sv[2];
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
	if (cu(cuMemAlloc_v2(&d, GPU_PAGE), "cuMemAlloc_v2"))
		return -1;
	ret = pin_v2(fd, d, GPU_PAGE, 0, &h);
	if (ret)
		return fail("PIN_BUFFER_V2: %s", strerror(-ret));
	if (send_fd(sv[0], fd) || write(sv[0], &h, sizeof(h)) != sizeof(h))
		ret = fail("send");
	if (!ret)
		ret = child_ok(pid, "the receiver's mmap, GET_INFO_V2 or read was not EACCES");
	return release_all(sv, fd, h, d, ret);
}

/* PIN_BUFFER with the buffer's P2P tokens; wrong tokens are EINVAL. */
static int check_tokens(void)
{
	struct cuda_p2p_tokens t = { 0 };
	struct gdrdrv_pin_buffer p = { 0 };
	struct buf b;
	unsigned long long d;
	int fd = open_gdrdrv(), ret;

	if (cu(cuMemAlloc_v2(&d, 2 * GPU_PAGE), "cuMemAlloc_v2"))
		return -1;
	if (cu(cuPointerGetAttribute(&t, CU_POINTER_ATTRIBUTE_P2P_TOKENS, d), "cuPointerGetAttribute"))
		return -1;
	p.addr = d;
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
	b.d = d;
	b.size = 2 * GPU_PAGE;
	b.handle = p.handle;
	if (info_v2(fd, b.handle, &b.info))
		return fail("GET_INFO_V2");
	b.map = map(fd, b.handle, b.info.mapped_size, 0);
	if (b.map == MAP_FAILED)
		return fail("mmap: %s", strerror(errno));
	b.p = b.map + (d - b.info.va);
	ret = round_trip(&b, d, b.size, 40);
	buf_unmap_unpin(fd, &b);
	if (cu(cuMemFree_v2(d), "cuMemFree_v2"))
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
	__u64 h = 0;

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
	__u64 h = 0;
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

/* Freeing a buffer queues one REVOKED event per handle of it, once. */
static int check_events_once_per_revocation(void)
{
	struct gdrpeer_event e[8];
	unsigned long long a, b;
	__u64 h1 = 0, h2 = 0, h3 = 0;
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
	run_check("pin-map-copy", check_pin_map_copy);
	run_check("unaligned-and-small", check_unaligned_and_small);
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
