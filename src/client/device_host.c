/* The host device backend: host memory stands in for device memory.
 *
 * A device pointer is a host address in this process, so every copy is a
 * memcpy and a stream has nothing to queue: copies complete before they
 * return, and stream_sync only checks its argument. Registering host memory
 * has nothing to do. This is the backend of CPU-only pipelines and of every
 * test on a machine without a GPU; it exercises the same client paths as a
 * device backend (one copy into the arena, then publish; one copy out of
 * the worker's shared memory into the destination).
 *
 * Allocations are shareable with other processes of the machine, so the
 * cross-process device-to-device path really crosses processes here too:
 * each is a memfd mapped MAP_SHARED, its descriptor kept open. A handle
 * names the owner (pid, its start time and PID namespace, so a reused pid
 * is not taken for it), the descriptor and the file's identity (device and
 * inode, so a descriptor number reused for another file is refused). A peer
 * takes a copy of the descriptor with pidfd_getfd (or, where that is not
 * allowed, by opening /proc/PID/fd/N, which needs only the same user),
 * checks the identity, and maps the file read-only. Memory that is not from
 * alloc (any host address is a device pointer here) cannot be exported, and
 * neither can allocations made where memfd_create fails (they fall back to
 * the heap). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/error.h"
#include "common/procstat.h"
#include "device.h"

/* Any non-NULL token works as a stream; one static byte keeps it valid
 * across threads without an allocation to lose. */
static char host_stream_token;

static ds_status_t host_open(void)
{
    return DS_K_OK;
}

static ds_status_t host_set_device(int32_t dev_idx)
{
    if (dev_idx > 0)
        return ds__set_error(DS_K_INVALID,
                             "device index %d does not exist: the host device backend "
                             "(DS_DEVICE_BACKEND=host) has one device, index 0",
                             (int)dev_idx);
    return DS_K_OK;
}

static ds_status_t host_current_device(int32_t *dev_idx)
{
    *dev_idx = 0;
    return DS_K_OK;
}

/* The shareable allocations: address, length, memfd. Under alloc_mu. */
typedef struct shared_alloc {
    struct shared_alloc *next;
    uintptr_t base;
    size_t size;
    int fd;
} shared_alloc_t;

static pthread_mutex_t alloc_mu = PTHREAD_MUTEX_INITIALIZER;
static shared_alloc_t *allocs;

static ds_status_t host_alloc(size_t n, uint64_t *dptr)
{
    if (n == 0 || dptr == NULL) return ds__set_error(DS_K_INVALID, "device alloc of 0 bytes");
    shared_alloc_t *a = malloc(sizeof *a);
    int fd = a ? memfd_create("ds-device-memory", MFD_CLOEXEC) : -1;
    void *p = MAP_FAILED;
    if (fd >= 0 && ftruncate(fd, (off_t)n) == 0)
        p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p != MAP_FAILED) {
        *a = (shared_alloc_t){.base = (uintptr_t)p, .size = n, .fd = fd};
        pthread_mutex_lock(&alloc_mu);
        a->next = allocs;
        allocs = a;
        pthread_mutex_unlock(&alloc_mu);
        *dptr = (uint64_t)(uintptr_t)p;
        return DS_K_OK;
    }
    if (fd >= 0) close(fd);
    free(a);
    /* No memfd here (or no memory for one): private memory, not shareable. */
    p = NULL;
    if (posix_memalign(&p, 256, n) != 0)
        return ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory for %zu bytes of device memory", n);
    *dptr = (uint64_t)(uintptr_t)p;
    return DS_K_OK;
}

static ds_status_t host_free(uint64_t dptr)
{
    pthread_mutex_lock(&alloc_mu);
    shared_alloc_t **pp = &allocs;
    while (*pp && (*pp)->base != (uintptr_t)dptr)
        pp = &(*pp)->next;
    shared_alloc_t *a = *pp;
    if (a) *pp = a->next;
    pthread_mutex_unlock(&alloc_mu);
    if (a == NULL) {
        free((void *)(uintptr_t)dptr);
        return DS_K_OK;
    }
    munmap((void *)a->base, a->size);
    close(a->fd);
    free(a);
    return DS_K_OK;
}

static ds_status_t host_stream_create(void **stream)
{
    *stream = &host_stream_token;
    return DS_K_OK;
}

static ds_status_t host_stream_destroy(void *stream)
{
    (void)stream;
    return DS_K_OK;
}

static ds_status_t host_stream_sync(void *stream)
{
    (void)stream;
    return DS_K_OK;
}

static ds_status_t check_ptrs(uintptr_t a, uintptr_t b, size_t n)
{
    if (n != 0 && (a == 0 || b == 0))
        return ds__set_error(DS_K_INVALID, "a copy of %zu bytes with a NULL address", n);
    return DS_K_OK;
}

static ds_status_t host_copy_d2h(void *dst, uint64_t src, size_t n, void *stream)
{
    (void)stream;
    ds_status_t st = check_ptrs((uintptr_t)dst, (uintptr_t)src, n);
    if (st == DS_K_OK && n) memcpy(dst, (const void *)(uintptr_t)src, n);
    return st;
}

static ds_status_t host_copy_h2d(uint64_t dst, const void *src, size_t n, void *stream)
{
    (void)stream;
    ds_status_t st = check_ptrs((uintptr_t)dst, (uintptr_t)src, n);
    if (st == DS_K_OK && n) memcpy((void *)(uintptr_t)dst, src, n);
    return st;
}

static ds_status_t host_copy_d2d(uint64_t dst, uint64_t src, size_t n, void *stream)
{
    (void)stream;
    ds_status_t st = check_ptrs((uintptr_t)dst, (uintptr_t)src, n);
    if (st == DS_K_OK && n) memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);
    return st;
}

static ds_status_t host_register(void *p, size_t n)
{
    (void)p;
    (void)n;
    return DS_K_OK;
}

static ds_status_t host_unregister(void *p)
{
    (void)p;
    return DS_K_OK;
}

/* Host memory needs no registration for copies; the client records the
 * range and checks later copies against it. */
static ds_status_t host_mem_register(uint64_t p, size_t n, int *pinned)
{
    (void)p;
    (void)n;
    *pinned = 0;
    return DS_K_OK;
}

static ds_status_t host_mem_unregister(uint64_t p, int pinned)
{
    (void)p;
    (void)pinned;
    return DS_K_OK;
}

/* ---- cross-process handles ---- */

#define HOST_IPC_MAGIC 0x43504948u /* "HIPC" */

typedef struct {
    uint32_t magic;
    int32_t pid;
    int32_t fd;
    uint32_t reserved;
    uint64_t size;     /* the allocation's length */
    uint64_t ino, dev; /* the memfd's identity */
    uint64_t pidns;    /* the owner's PID namespace (its inode) */
    uint64_t start;    /* the owner's start time, in clock ticks after boot */
} host_handle_t;

_Static_assert(sizeof(host_handle_t) <= DS__IPC_HANDLE_BYTES, "host handle too large");

/* The process's start time, which tells a process from a later one given
 * the same pid. 0 when unreadable. */
static uint64_t proc_start_time(int32_t pid)
{
    ds_proc_stat_t s;
    return ds__proc_stat((pid_t)pid, &s) == 0 ? s.starttime : 0;
}

static uint64_t pid_ns(int32_t pid)
{
    char path[64];
    struct stat st;
    if (pid == 0)
        snprintf(path, sizeof path, "/proc/self/ns/pid");
    else
        snprintf(path, sizeof path, "/proc/%d/ns/pid", (int)pid);
    return stat(path, &st) == 0 ? (uint64_t)st.st_ino : 0;
}

static ds_status_t host_ipc_export(uint64_t p, size_t n, ds__ipc_handle_t *h, uint64_t *offset)
{
    host_handle_t hh = {.magic = HOST_IPC_MAGIC, .pid = (int32_t)getpid(), .fd = -1};
    pthread_mutex_lock(&alloc_mu);
    for (shared_alloc_t *a = allocs; a; a = a->next) {
        if ((uintptr_t)p < a->base || (uintptr_t)p - a->base >= a->size) continue;
        if (n > a->size - ((uintptr_t)p - a->base)) break;
        hh.fd = a->fd;
        hh.size = a->size;
        *offset = (uintptr_t)p - a->base;
        break;
    }
    pthread_mutex_unlock(&alloc_mu);
    if (hh.fd < 0)
        return ds__set_error(DS_K_NOT_SUPPORTED,
                             "0x%llx + %zu is not within one shareable allocation of the host "
                             "device backend (ds_device_malloc)",
                             (unsigned long long)p, n);
    struct stat st;
    if (fstat(hh.fd, &st) != 0)
        return ds__set_error(DS_K_RUNTIME_ERROR, "fstat of a device allocation's memfd: %s",
                             strerror(errno));
    hh.ino = (uint64_t)st.st_ino;
    hh.dev = (uint64_t)st.st_dev;
    hh.pidns = pid_ns(0);
    hh.start = proc_start_time(hh.pid);
    memset(h, 0, sizeof *h);
    memcpy(h->b, &hh, sizeof hh);
    return DS_K_OK;
}

typedef struct {
    void *map;
    size_t len;
} host_opened_t;

/* A copy of descriptor fd of the process behind pidfd (or pid). */
static int peer_fd(int pidfd, int32_t pid, int fd)
{
#ifdef SYS_pidfd_getfd
    int got = (int)syscall(SYS_pidfd_getfd, pidfd, fd, 0);
    if (got >= 0) return got;
#else
    (void)pidfd;
#endif
    /* pidfd_getfd needs ptrace rights (Yama may refuse them between
     * siblings); /proc/PID/fd needs only the same user. */
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)pid, fd);
    return open(path, O_RDONLY | O_CLOEXEC);
}

static ds_status_t host_ipc_open(const ds__ipc_handle_t *h, uint64_t *base, size_t *size,
                                 void **opened)
{
    host_handle_t hh;
    memcpy(&hh, h->b, sizeof hh);
    if (hh.magic != HOST_IPC_MAGIC || hh.pid <= 0 || hh.fd < 0 || hh.size == 0)
        return ds__set_error(DS_K_INVALID, "not a host device backend handle");
    if (hh.pidns == 0 || hh.pidns != pid_ns(0))
        return ds__set_error(DS_K_NOT_SUPPORTED,
                             "the exporting process %d is in another PID namespace", (int)hh.pid);
    int pidfd = -1;
#ifdef SYS_pidfd_open
    pidfd = (int)syscall(SYS_pidfd_open, hh.pid, 0);
    if (pidfd < 0 && errno == ESRCH)
        return ds__set_error(DS_K_NOT_FOUND, "the exporting process %d has exited", (int)hh.pid);
#endif
    /* Checked after pidfd_open: the pidfd is the process whose start time
     * is read, so a pid reused in between is caught. */
    uint64_t start = proc_start_time(hh.pid);
    if (start == 0 || start != hh.start) {
        if (pidfd >= 0) close(pidfd);
        return ds__set_error(DS_K_NOT_FOUND, "the exporting process %d has exited", (int)hh.pid);
    }
    int fd = peer_fd(pidfd, hh.pid, hh.fd);
    int err = errno;
    if (pidfd >= 0) close(pidfd);
    if (fd < 0)
        return ds__set_error(err == EPERM || err == EACCES ? DS_K_NOT_SUPPORTED : DS_K_NOT_FOUND,
                             "cannot take descriptor %d of process %d: %s", hh.fd, (int)hh.pid,
                             strerror(err));
    struct stat st;
    if (fstat(fd, &st) != 0 || (uint64_t)st.st_ino != hh.ino || (uint64_t)st.st_dev != hh.dev ||
        st.st_size < 0 || (uint64_t)st.st_size < hh.size) {
        close(fd);
        return ds__set_error(DS_K_NOT_FOUND,
                             "the device allocation of process %d is gone (descriptor %d names "
                             "another file now)",
                             (int)hh.pid, hh.fd);
    }
    host_opened_t *o = malloc(sizeof *o);
    void *p = o ? mmap(NULL, hh.size, PROT_READ, MAP_SHARED, fd, 0) : MAP_FAILED;
    err = errno;
    close(fd);
    if (p == MAP_FAILED) {
        free(o);
        return ds__set_error(DS_K_RUNTIME_ERROR, "cannot map process %d's device allocation: %s",
                             (int)hh.pid, o ? strerror(err) : "out of memory");
    }
    o->map = p;
    o->len = hh.size;
    *base = (uint64_t)(uintptr_t)p;
    *size = hh.size;
    *opened = o;
    return DS_K_OK;
}

static ds_status_t host_ipc_close(void *opened)
{
    host_opened_t *o = opened;
    if (o) {
        munmap(o->map, o->len);
        free(o);
    }
    return DS_K_OK;
}

const ds__device_ops_t ds__device_host = {
    .name = "host",
    .open = host_open,
    .set_device = host_set_device,
    .current_device = host_current_device,
    .alloc = host_alloc,
    .free = host_free,
    .stream_create = host_stream_create,
    .stream_destroy = host_stream_destroy,
    .stream_sync = host_stream_sync,
    .copy_d2h = host_copy_d2h,
    .copy_h2d = host_copy_h2d,
    .copy_d2d = host_copy_d2d,
    .host_register = host_register,
    .host_unregister = host_unregister,
    .mem_register = host_mem_register,
    .mem_unregister = host_mem_unregister,
    .ipc_export = host_ipc_export,
    .ipc_open = host_ipc_open,
    .ipc_close = host_ipc_close,
};
