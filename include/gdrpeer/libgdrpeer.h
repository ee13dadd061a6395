/* SPDX-License-Identifier: GPL-2.0 */
/*
 * libgdrpeer: a C library for /dev/gdrpeer, the gdrpeer module's own
 * interface (Documentation/user/uapi.rst): pinning NVIDIA GPU memory for
 * GPUDirect RDMA, the pages' bus and DMA addresses, CPU mappings, dma-buf
 * export and revocation events. Built from the gdrpeer Rust crate
 * (userspace/gdrpeer-c); installed as /usr/include/gdrpeer/libgdrpeer.h and
 * libgdrpeer.so.0. Link with -lgdrpeer.
 *
 * Errors: every function that can fail returns 0 (or a count, or a
 * descriptor) on success and a negative errno on failure (-EINVAL, ...), and
 * sets errno. gdrpeer_last_error() then gives a message naming the call, the
 * errno and its likely cause for that call, e.g.
 *   "PIN: EINVAL (Invalid argument) (the memory is not this process's live
 *    GPU memory (host memory, another process's, or freed), or a bad
 *    request: ...)".
 * Errors that are not the kernel's: -EINVAL for a bad argument to the
 * library itself (a NULL device, an unparsable PCI address), -EPROTO for a
 * module whose ABI this library cannot use, -ENOSPC when an address array is
 * too short.
 *
 * Threads: a gdrpeer_t may be used from any thread of the process that
 * opened it, several at once; only gdrpeer_close() must not race the others.
 * A forked child or a process that received the descriptor gets -EACCES
 * from every call but gdrpeer_version() (and gdrpeer_unmap(), which unmaps
 * nothing in a child). The library's list of mappings is held across
 * fork() (pthread_atfork), so a child forked while another thread maps or
 * unmaps finds it free; a fork from a signal handler that interrupted
 * gdrpeer_map() or gdrpeer_unmap() on the same thread waits for ever.
 *
 * Pointers: unless said otherwise, a pointer argument must be valid for what
 * the function reads or writes through it for the duration of the call, and
 * output pointers may be NULL where said so. A gdrpeer_t argument must come
 * from gdrpeer_open() and not be closed yet; NULL gives -EINVAL.
 */
#ifndef LIBGDRPEER_H
#define LIBGDRPEER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* An open /dev/gdrpeer. */
typedef struct gdrpeer gdrpeer_t;

/* Flags of gdrpeer_pin() (the uAPI's GDRPEER_PIN_*). */
#define GDRPEER_LIB_PIN_PERSISTENT (1U << 0) /* never revoked; needs driver support */
#define GDRPEER_LIB_PIN_NOCACHE (1U << 1)    /* a pin of its own, given back at unpin */

/* Flags of gdrpeer_export_dmabuf_range() (the uAPI's GDRPEER_EXPORT_*). */
#define GDRPEER_LIB_EXPORT_PERSISTENT (1U << 0) /* ABI 1.5: survives cuMemFree */

/* States of struct gdrpeer_lib_info. */
#define GDRPEER_LIB_STATE_VALID 0   /* pinned, addresses usable */
#define GDRPEER_LIB_STATE_REVOKED 1 /* the driver freed the memory: unpin */

/* Types of struct gdrpeer_lib_event. */
#define GDRPEER_LIB_EVENT_REVOKED 1 /* the driver freed the handle's memory */

struct gdrpeer_lib_version {
	uint32_t abi;            /* major << 16 | minor */
	uint32_t nv_page_table;  /* nv-p2p page-table version built for */
	uint32_t nv_dma_mapping; /* nv-p2p DMA-mapping version built for */
};

struct gdrpeer_lib_pin {
	uint64_t handle;     /* names the pin in later calls */
	uint64_t aligned_va; /* the window's start: va rounded down to page_size */
	uint64_t offset;     /* va - aligned_va */
	uint32_t page_count; /* GPU pages in the window */
	uint32_t page_size;  /* bytes per GPU page (65536) */
};

struct gdrpeer_lib_info {
	uint32_t state;      /* GDRPEER_LIB_STATE_* */
	uint32_t persistent; /* 1 if the region is a persistent pin */
	uint64_t aligned_va;
	uint64_t offset;
	uint32_t page_count;
	uint32_t page_size;
	uint64_t region_va;  /* the cached region serving the window */
	uint64_t region_len;
};

struct gdrpeer_lib_dmabuf {
	int fd;              /* the dma-buf; the caller owns it (close(2)) */
	uint32_t page_count;
	uint64_t aligned_va; /* GPU address of its first byte */
	uint64_t offset;     /* where the requested address lies in it */
	uint64_t size;       /* bytes: page_count whole GPU pages */
};

/* Laid out as the uAPI's struct gdrpeer_event. */
struct gdrpeer_lib_event {
	uint64_t handle; /* the handle revoked */
	uint32_t type;   /* GDRPEER_LIB_EVENT_* */
	uint32_t pad;
};

/*
 * Opens path (NULL: /dev/gdrpeer) and checks that the module speaks an ABI
 * this library can use. Returns NULL on failure (errno set;
 * gdrpeer_last_error() says why: ENOENT when the module is not loaded,
 * EACCES when the device mode excludes the user, EPROTO for an incompatible
 * ABI). path, if not NULL, is a NUL-terminated UTF-8 string.
 */
gdrpeer_t *gdrpeer_open(const char *path);

/*
 * Closes the device: every pin of it is unpinned once no mapping of it is
 * left. A mapping holds the open file, so while one lives every pin of the
 * file stays (munmap, or gdrpeer_unmap(), the mappings to give them back).
 * Exported dma-bufs live on (each holds its memory). NULL is ignored. g must
 * not be used afterwards, nor closed twice.
 */
void gdrpeer_close(gdrpeer_t *g);

/*
 * The device's descriptor, for poll/epoll of its events (readable while
 * revocations are queued) and for calls this library does not wrap. It stays
 * g's: do not close it.
 */
int gdrpeer_fd(const gdrpeer_t *g);

/* The versions the module reports (GET_VERSION). out may be NULL. */
int gdrpeer_version(const gdrpeer_t *g, struct gdrpeer_lib_version *out);

/* The ABI version word this library was built for. */
uint32_t gdrpeer_library_abi_version(void);

/*
 * Pins [va, va + len) of this process's GPU memory (cuMemAlloc'd), widened
 * to whole 64 KiB GPU pages; flags are GDRPEER_LIB_PIN_*. *out receives the
 * handle and the window (out NULL: -EINVAL, nothing pinned). The pin lasts until gdrpeer_unpin()
 * or gdrpeer_close(); when the driver frees the memory it is revoked (an
 * event is queued) and must still be unpinned.
 */
int gdrpeer_pin(const gdrpeer_t *g, uint64_t va, uint64_t len, uint32_t flags,
		struct gdrpeer_lib_pin *out);

/* Releases a handle (its region may stay cached for later pins). */
int gdrpeer_unpin(const gdrpeer_t *g, uint64_t handle);

/* Describes a handle: its window, its state and its region. out may be NULL. */
int gdrpeer_get_info(const gdrpeer_t *g, uint64_t handle, struct gdrpeer_lib_info *out);

/*
 * The bus (BAR1) addresses of the handle's pages, one per GPU page, into
 * addrs, which has room for count entries (addrs may be NULL when count is
 * 0). *written (written may be NULL) receives the number of pages; if they
 * do not fit the call fails with -ENOSPC and *written says how many are
 * needed. Needs CAP_SYS_RAWIO (-EPERM).
 */
int gdrpeer_get_pages(const gdrpeer_t *g, uint64_t handle, uint64_t *addrs, uint32_t count,
		      uint32_t *written);

/*
 * The DMA addresses of the handle's pages as the PCI device peer
 * ("DDDD:BB:DD.F", as lspci -D writes it; a NUL-terminated string) sees
 * them, mapping them for it (through its IOMMU) on first use; addrs, count
 * and written as for gdrpeer_get_pages(): an array too short gives -ENOSPC
 * after the pages were mapped for the device, which stay mapped as the
 * region's. Needs CAP_SYS_RAWIO; -ENODEV when no device has that address.
 */
int gdrpeer_dma_map(const gdrpeer_t *g, uint64_t handle, const char *peer, uint64_t *addrs,
		    uint32_t count, uint32_t *written);

/*
 * Maps len bytes of the handle's window from byte offset (a multiple of
 * the page size, 4 KiB on x86) for CPU access, shared, read-write; *out (out
 * must not be NULL)
 * receives the address. Cached where NVIDIA's page table marks the memory
 * CPU-cacheable, write-combining otherwise: after stores, a store fence
 * (sfence, or any full fence) makes them visible. The caller's address va
 * of a pin is at byte pin.offset of the window. After gdrpeer_unpin() of the
 * handle or the memory being freed, access raises SIGBUS. Unmap with
 * gdrpeer_unmap(), not munmap(2): the library lists its mappings, and a
 * range munmap(2) gave back stays listed, so a later gdrpeer_unmap() of it
 * would unmap whatever was mapped there since. -EOVERFLOW for a handle of
 * 2^24 or more: handles count up from 1 with every pin of a gdrpeer_t, so
 * one that pinned 16 million times must be reopened to map again.
 */
int gdrpeer_map(const gdrpeer_t *g, uint64_t handle, uint64_t offset, size_t len, void **out);

/*
 * Unmaps a mapping gdrpeer_map() returned: addr and len exactly as mapped
 * and given, once. Nothing may access the range afterwards. Returns 0;
 * -EINVAL for an address and length gdrpeer_map() did not return (or one
 * unmapped already), or munmap(2)'s -errno. In a forked child, which has
 * none of its parent's mappings, it unmaps nothing and returns 0.
 */
int gdrpeer_unmap(void *addr, size_t len);

/*
 * Exports the handle's window as a dma-buf (module ABI 1.4), for
 * ibv_reg_dmabuf_mr(pd, out->offset, len, va, out->fd, access). *out (out
 * must not be NULL) receives the descriptor, which the caller owns and
 * closes; the dma-buf holds the memory itself, so the handle may be unpinned
 * and the device closed.
 */
int gdrpeer_export_dmabuf(const gdrpeer_t *g, uint64_t handle, struct gdrpeer_lib_dmabuf *out);

/*
 * Exports [va, va + len), widened to whole GPU pages, as a dma-buf without a
 * handle (module ABI 1.4); flags GDRPEER_LIB_EXPORT_PERSISTENT (ABI 1.5)
 * backs it by a persistent pin that outlives cuMemFree (-EOPNOTSUPP where
 * the driver refuses persistent pins). out as for gdrpeer_export_dmabuf().
 */
int gdrpeer_export_dmabuf_range(const gdrpeer_t *g, uint64_t va, uint64_t len, uint32_t flags,
				struct gdrpeer_lib_dmabuf *out);

/*
 * Reads up to max queued revocation events (module ABI 1.3) into events,
 * which has room for max records (max > 0), oldest first; each event is
 * returned once. Waits up to timeout_ms milliseconds for one (0: not at all,
 * a negative value: for ever; a descriptor the caller made O_NONBLOCK
 * answers -EAGAIN instead of waiting). Returns the number read, 0 if none came in time. A signal
 * does not end the wait: it goes on for the time left. With a timeout, a
 * module of ABI 1.6 or later is never waited on past it, also when threads
 * read one gdrpeer_t at once; before 1.6 a thread that another beat to the
 * last event waits in read(2) for the next, until a signal (then 0).
 */
int gdrpeer_read_events(const gdrpeer_t *g, struct gdrpeer_lib_event *events, size_t max,
			int timeout_ms);

/*
 * The message of this thread's last failed call ("" before any): the call,
 * the errno's name and text, and its likely cause. The string stays valid
 * until this thread's next failure.
 */
const char *gdrpeer_last_error(void);

/* The errno of this thread's last failed call (0 before any). */
int gdrpeer_last_errno(void);

#ifdef __cplusplus
}
#endif

#endif /* LIBGDRPEER_H */
