/* The heterogeneous client: device memory to the arena and back.
 *
 * A set creates each key's value in the worker's arena (ds_kv_mcreate),
 * copies the key's device blobs into it with the device backend, waits for
 * the copies, and publishes the values that were copied whole with one
 * request (ds_kv_mpublish); a value is never visible half-written. A get
 * pins each value where it lies in the worker's shared memory
 * (ds_kv_get_buffers), copies it into the blobs, waits, and only then drops
 * the pins, so an overwrite or eviction during the copy cannot reuse the
 * bytes being read. The arena is registered with the backend once per
 * mapping (page-locked for DMA on a GPU), so each byte is copied once each
 * way. Async calls run the same code on a thread of their own; the client
 * waits for them when it closes. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "client_internal.h"
#include "common/error.h"
#include "device.h"
#include "ds/hetero_client.h"

/* A range given to pre_register_device_memory. */
typedef struct {
    uint64_t p, n;
    int pinned; /* page-locked by the backend: unregistered at close */
} reg_range_t;

struct ds_hetero {
    ds_client_t *kv;
    bool remote_h2d;
    pthread_mutex_t mu;
    pthread_cond_t idle;
    int running;         /* async calls not yet finished; under mu */
    uint8_t *registered; /* arena mapping registered with the backend; under mu */
    reg_range_t *regs;   /* registered ranges, sorted by p, disjoint; under mu */
    size_t nregs, capregs;
    /* nregs, readable without mu: copies skip the range check while it is 0 */
    atomic_size_t nregs_pub;
    /* Keys dev_subscribe received, by path: straight from the publisher's
     * device memory, or from the worker's copy. */
    atomic_uint_least64_t d2d_keys, arena_keys;
};

#define MSG_MAX 512

/* The first failure of a batch: its message is the one the caller reads. */
typedef struct {
    ds_status_t code;
    char msg[MSG_MAX];
} first_err_t;

static void note(first_err_t *fe, ds_status_t *statuses, size_t i, ds_status_t st)
{
    if (statuses) statuses[i] = st;
    if (st != DS_K_OK && fe->code == DS_K_OK) {
        fe->code = st;
        snprintf(fe->msg, sizeof fe->msg, "%s", ds_last_error());
    }
}

ds_status_t ds_hetero_connect(const ds_client_options_t *opts, bool enable_remote_h2d,
                              ds_hetero_t **out)
{
    ds__clear_error();
    if (out == NULL) return ds__set_error(DS_K_INVALID, "out is NULL");
    *out = NULL;
    ds_hetero_t *h = calloc(1, sizeof *h);
    if (h == NULL) return ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory for a client");
    ds_status_t st = ds_client_connect(opts, &h->kv);
    if (st != DS_K_OK) {
        free(h);
        return st;
    }
    h->remote_h2d = enable_remote_h2d;
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->idle, NULL);
    *out = h;
    return DS_K_OK;
}

void ds_hetero_close(ds_hetero_t *h)
{
    if (h == NULL) return;
    pthread_mutex_lock(&h->mu);
    while (h->running > 0)
        pthread_cond_wait(&h->idle, &h->mu);
    pthread_mutex_unlock(&h->mu);
    if (h->nregs > 0) {
        ds_status_t code;
        const ds__device_ops_t *ops = ds__device_get(&code);
        if (ops != NULL && ops->set_device(-1) == DS_K_OK)
            for (size_t i = 0; i < h->nregs; i++)
                (void)ops->mem_unregister(h->regs[i].p, h->regs[i].pinned);
    }
    free(h->regs);
    ds_client_close(h->kv);
    pthread_mutex_destroy(&h->mu);
    pthread_cond_destroy(&h->idle);
    free(h);
}

ds_client_t *ds_hetero_kv(ds_hetero_t *h)
{
    return h ? h->kv : NULL;
}

/* Registers the client's current arena mapping with the backend, once. A
 * failure is not the call's: copies from unregistered memory are correct,
 * only slower, so it is tried once per mapping and not reported. */
static void register_arena(ds_hetero_t *h, const ds__device_ops_t *ops)
{
    ds_client_t *c = h->kv;
    pthread_mutex_lock(&c->mu);
    uint8_t *base = c->sess ? c->sess->base : NULL;
    size_t size = c->sess ? c->sess->size : 0;
    pthread_mutex_unlock(&c->mu);
    if (base == NULL) return;
    /* Registration needs a current context (CUDA); it is made portable, so
     * any device's copies see it. */
    if (ops->set_device(-1) != DS_K_OK) return;
    pthread_mutex_lock(&h->mu);
    if (h->registered != base) {
        h->registered = base;
        ds_status_t st = ops->host_register(base, size);
        (void)st;
    }
    pthread_mutex_unlock(&h->mu);
}

/* Checks a batch and gives each key's total size. */
static ds_status_t check_batch(size_t n, const char *const *keys,
                               const ds_device_blob_list_t *lists, size_t *totals)
{
    if (n == 0 || keys == NULL || lists == NULL)
        return ds__set_error(DS_K_INVALID,
                             "The input of keys and data_blob_list should not be empty");
    if (n > DS_MAX_BATCH)
        return ds__set_error(DS_K_INVALID, "%zu keys: at most %d in one call", n, DS_MAX_BATCH);
    for (size_t i = 0; i < n; i++) {
        if (keys[i] == NULL) return ds__set_error(DS_K_INVALID, "keys[%zu] is NULL", i);
        const ds_device_blob_list_t *l = &lists[i];
        if (l->n_blobs == 0 || l->blobs == NULL)
            return ds__set_error(DS_K_INVALID, "the blob list of key '%.*s' is empty", 128,
                                 keys[i]);
        uint64_t total = 0;
        for (size_t j = 0; j < l->n_blobs; j++) {
            const ds_blob_t *b = &l->blobs[j];
            if (b->dev_ptr == 0 || b->size == 0)
                return ds__set_error(
                    DS_K_INVALID, "blob %zu of key '%.*s' has a %s (pointer 0x%llx, size %llu)", j,
                    128, keys[i], b->dev_ptr == 0 ? "NULL pointer" : "size of 0",
                    (unsigned long long)b->dev_ptr, (unsigned long long)b->size);
            if (b->size > SIZE_MAX - total)
                return ds__set_error(DS_K_INVALID, "the blobs of key '%.*s' overflow a size", 128,
                                     keys[i]);
            total += b->size;
        }
        totals[i] = (size_t)total;
    }
    return DS_K_OK;
}

/* The index of the registered range with the largest start <= p, or
 * nregs when there is none. Under mu. */
static size_t reg_find(const ds_hetero_t *h, uint64_t p)
{
    size_t lo = 0, hi = h->nregs;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (h->regs[mid].p <= p)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo == 0 ? h->nregs : lo - 1;
}

/* A blob that starts in a registered range must end in it: the range is
 * the memory its owner said copies would use, so running past it is a
 * wrong size or pointer, refused before any byte moves. */
static ds_status_t check_registered(ds_hetero_t *h, const ds_device_blob_list_t *l, const char *key)
{
    if (atomic_load_explicit(&h->nregs_pub, memory_order_relaxed) == 0) return DS_K_OK;
    ds_status_t st = DS_K_OK;
    pthread_mutex_lock(&h->mu);
    for (size_t j = 0; j < l->n_blobs && st == DS_K_OK; j++) {
        const ds_blob_t *b = &l->blobs[j];
        size_t r = reg_find(h, b->dev_ptr);
        if (r == h->nregs) continue;
        const reg_range_t *g = &h->regs[r];
        uint64_t in = b->dev_ptr - g->p;
        if (in >= g->n) continue; /* after the range: not registered memory */
        if (b->size > g->n - in)
            st = ds__set_error(DS_K_INVALID,
                               "blob %zu of key '%.*s' (0x%llx, %llu bytes) starts in the "
                               "registered device memory 0x%llx + %llu and runs past its end",
                               j, 128, key, (unsigned long long)b->dev_ptr,
                               (unsigned long long)b->size, (unsigned long long)g->p,
                               (unsigned long long)g->n);
    }
    pthread_mutex_unlock(&h->mu);
    return st;
}

/* The stream of the device the next key is on: a key on another device
 * than the last waits for the last device's copies and moves to the new
 * one, since a stream belongs to its device's context. */
typedef struct {
    const ds__device_ops_t *ops;
    void *stream;
    int32_t dev;
    bool open;
} devcur_t;

static ds_status_t devcur_sync(devcur_t *d)
{
    ds_status_t st = DS_K_OK;
    if (d->stream) {
        st = d->ops->stream_sync(d->stream);
        ds_status_t st2 = d->ops->stream_destroy(d->stream);
        if (st == DS_K_OK) st = st2;
        d->stream = NULL;
    }
    return st;
}

static ds_status_t devcur_use(devcur_t *d, int32_t dev)
{
    if (d->open && d->dev == dev) return DS_K_OK;
    ds_status_t st = devcur_sync(d);
    if (st != DS_K_OK) return st;
    d->open = false;
    if ((st = d->ops->set_device(dev)) != DS_K_OK) return st;
    if ((st = d->ops->stream_create(&d->stream)) != DS_K_OK) return st;
    d->dev = dev;
    d->open = true;
    return DS_K_OK;
}

/* Copies one key's blobs, in order, on the stream of the key's device: into
 * the host bytes at to_host, or (to_host NULL) out of those at from_host. */
static ds_status_t copy_key(devcur_t *d, const ds_device_blob_list_t *l, uint8_t *to_host,
                            const uint8_t *from_host)
{
    ds_status_t ks = devcur_use(d, l->dev_idx);
    size_t off = 0;
    for (size_t j = 0; ks == DS_K_OK && j < l->n_blobs; j++) {
        const ds_blob_t *b = &l->blobs[j];
        ks = to_host ? d->ops->copy_d2h(to_host + off, b->dev_ptr, (size_t)b->size, d->stream)
                     : d->ops->copy_h2d(b->dev_ptr, from_host + off, (size_t)b->size, d->stream);
        off += (size_t)b->size;
    }
    return ks;
}

/* A batch that failed as a whole: every key gets the call's status. */
static void fill_statuses(ds_status_t *statuses, size_t n, ds_status_t st)
{
    if (statuses)
        for (size_t i = 0; i < n; i++)
            statuses[i] = st;
}

/* ---- the device-to-device record of a published key ----
 *
 * dev_publish stores a key's value as its bytes followed by a record that
 * names, for each of the publisher's blobs, the device allocation holding
 * it (the backend's IPC handle), the blob's offset in it and its size, and
 * the publisher: pid, backend, machine (boot id). A subscriber on the same
 * machine and backend opens the handles and copies device to device; any
 * other (another machine, a handle that no longer opens because the
 * publisher exited or freed the memory, DS_DEVICE_IPC=0) copies the bytes
 * from the worker's copy instead, so either way it receives the value the
 * publisher wrote. The record ends with a footer (its length and a magic
 * number); a value without one is all data. */
#define REC_MAGIC 0x3143504956454421ull /* "!DEVIPC1" */
#define REC_VERSION 1

typedef struct {
    uint64_t magic;
    uint32_t version;
    uint32_t nblobs;      /* entries that follow */
    uint32_t has_handles; /* 0: the entries hold sizes only (nothing to open) */
    int32_t pid;          /* the publisher */
    uint64_t nonce;       /* the publisher process's (process_nonce) */
    uint64_t data_len;
    char backend[8];
    char boot_id[40];
} rec_head_t;

typedef struct {
    uint64_t size, offset, dptr; /* dptr: the publisher's own pointer */
    ds__ipc_handle_t handle;
} rec_blob_t;

typedef struct {
    uint64_t rec_len; /* head + entries + footer */
    uint64_t magic;
} rec_foot_t;

static pthread_once_t boot_once = PTHREAD_ONCE_INIT;
static char boot_id[40];

static void read_boot_id(void)
{
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f == NULL) return;
    if (fgets(boot_id, sizeof boot_id, f) == NULL) boot_id[0] = 0;
    fclose(f);
    boot_id[strcspn(boot_id, "\n")] = 0;
}

/* A random number per process, drawn again in a forked child: with the pid
 * it tells this process from one of another PID namespace with the same
 * pid, whose pointers are not this process's. */
static pthread_mutex_t nonce_mu = PTHREAD_MUTEX_INITIALIZER;
static pid_t nonce_pid;
static uint64_t nonce_val;

static uint64_t process_nonce(void)
{
    pthread_mutex_lock(&nonce_mu);
    if (nonce_pid != getpid()) {
        uint64_t v = 0;
        if (getrandom(&v, sizeof v, 0) != (ssize_t)sizeof v) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            v = ((uint64_t)ts.tv_sec * 1000000007ull) ^ (uint64_t)ts.tv_nsec ^
                ((uint64_t)getpid() << 32);
        }
        nonce_val = v | 1; /* never 0 */
        nonce_pid = getpid();
    }
    uint64_t v = nonce_val;
    pthread_mutex_unlock(&nonce_mu);
    return v;
}

static size_t rec_len(size_t nblobs)
{
    return sizeof(rec_head_t) + nblobs * sizeof(rec_blob_t) + sizeof(rec_foot_t);
}

/* Writes key l's record at out (rec_len(l->n_blobs) bytes): handles when
 * every blob can be exported, else sizes only. The key's device is
 * current. */
static void rec_write(const ds__device_ops_t *ops, const ds_device_blob_list_t *l,
                      uint64_t data_len, uint8_t *out)
{
    pthread_once(&boot_once, read_boot_id);
    rec_head_t hd;
    memset(&hd, 0, sizeof hd);
    hd.magic = REC_MAGIC;
    hd.version = REC_VERSION;
    hd.nblobs = (uint32_t)l->n_blobs;
    hd.has_handles = boot_id[0] != 0;
    hd.pid = (int32_t)getpid();
    hd.nonce = process_nonce();
    hd.data_len = data_len;
    snprintf(hd.backend, sizeof hd.backend, "%s", ops->name);
    memcpy(hd.boot_id, boot_id, sizeof hd.boot_id);
    uint8_t *at = out + sizeof hd;
    for (size_t j = 0; j < l->n_blobs; j++, at += sizeof(rec_blob_t)) {
        rec_blob_t rb;
        memset(&rb, 0, sizeof rb);
        rb.size = l->blobs[j].size;
        rb.dptr = l->blobs[j].dev_ptr;
        if (hd.has_handles &&
            ops->ipc_export(rb.dptr, (size_t)rb.size, &rb.handle, &rb.offset) != DS_K_OK)
            hd.has_handles = 0; /* not shareable: subscribers read the worker's copy */
        memcpy(at, &rb, sizeof rb);
    }
    ds__clear_error();
    memcpy(out, &hd, sizeof hd);
    rec_foot_t ft = {rec_len(l->n_blobs), REC_MAGIC};
    memcpy(at, &ft, sizeof ft);
}

/* The record at the end of a value of size bytes, if it has one: *hd, its
 * entries at *blobs; false (all data) otherwise. */
static bool rec_parse(const uint8_t *v, size_t size, rec_head_t *hd, const uint8_t **blobs)
{
    rec_foot_t ft;
    if (size < sizeof(rec_head_t) + sizeof ft) return false;
    memcpy(&ft, v + size - sizeof ft, sizeof ft);
    if (ft.magic != REC_MAGIC || ft.rec_len > size || ft.rec_len < rec_len(0)) return false;
    memcpy(hd, v + size - ft.rec_len, sizeof *hd);
    if (hd->magic != REC_MAGIC || hd->version != REC_VERSION ||
        (ft.rec_len - rec_len(0)) / sizeof(rec_blob_t) != hd->nblobs ||
        rec_len(hd->nblobs) != ft.rec_len || hd->data_len != size - ft.rec_len)
        return false;
    hd->backend[sizeof hd->backend - 1] = 0;
    hd->boot_id[sizeof hd->boot_id - 1] = 0;
    *blobs = v + size - ft.rec_len + sizeof *hd;
    return true;
}

static ds_status_t mset_d2h_rec(ds_hetero_t *h, size_t n, const char *const *keys,
                                const ds_device_blob_list_t *lists, const ds_set_param_t *param,
                                ds_status_t *statuses, bool with_rec);

static ds_status_t mset_d2h(ds_hetero_t *h, size_t n, const char *const *keys,
                            const ds_device_blob_list_t *lists, const ds_set_param_t *param,
                            ds_status_t *statuses)
{
    return mset_d2h_rec(h, n, keys, lists, param, statuses, false);
}

/* with_rec: each value is followed by its device-to-device record. */
static ds_status_t mset_d2h_rec(ds_hetero_t *h, size_t n, const char *const *keys,
                                const ds_device_blob_list_t *lists, const ds_set_param_t *param,
                                ds_status_t *statuses, bool with_rec)
{
    ds__clear_error();
    if (h == NULL) return ds__set_error(DS_K_INVALID, "client is NULL");
    size_t *totals = malloc((n ? n : 1) * sizeof *totals);
    ds_buffer_t **bufs = calloc(n ? n : 1, sizeof *bufs);
    ds_buffer_t **ok = calloc(n ? n : 1, sizeof *ok);
    ds_status_t *pub = calloc(n ? n : 1, sizeof *pub);
    size_t *okidx = calloc(n ? n : 1, sizeof *okidx);
    ds_status_t st;
    if (!totals || !bufs || !ok || !pub || !okidx) {
        st = ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory for a batch of %zu keys", n);
        goto out;
    }
    if ((st = check_batch(n, keys, lists, totals)) != DS_K_OK) goto fail_all;
    devcur_t d = {.ops = ds__device_get(&st)};
    if (d.ops == NULL) goto fail_all;
    /* okidx holds the sizes to create: the data, and the record after it. */
    for (size_t i = 0; i < n; i++) {
        okidx[i] = totals[i];
        if (with_rec) {
            if (totals[i] > SIZE_MAX - rec_len(lists[i].n_blobs)) {
                st = ds__set_error(DS_K_INVALID, "the blobs of key '%.*s' overflow a size", 128,
                                   keys[i]);
                goto fail_all;
            }
            okidx[i] += rec_len(lists[i].n_blobs);
        }
    }
    if ((st = ds_kv_mcreate(h->kv, n, keys, okidx, param, bufs)) != DS_K_OK) goto fail_all;
    register_arena(h, d.ops);
    first_err_t fe = {DS_K_OK, ""};
    bool *copied = (bool *)pub; /* reused: one flag per key until publish */
    for (size_t i = 0; i < n; i++) {
        copied[i] = false;
        uint8_t *to = ds_buffer_mutable_data(bufs[i]);
        ds_status_t ks = check_registered(h, &lists[i], keys[i]);
        if (ks == DS_K_OK) ks = copy_key(&d, &lists[i], to, NULL);
        /* The key's device is current: its blobs are exported there. */
        if (ks == DS_K_OK && with_rec) rec_write(d.ops, &lists[i], totals[i], to + totals[i]);
        if (ks != DS_K_OK)
            note(&fe, statuses, i, ks);
        else
            copied[i] = true;
    }
    ds_status_t sync = devcur_sync(&d);
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (!copied[i]) continue;
        if (sync != DS_K_OK) {
            note(&fe, statuses, i, sync);
            continue;
        }
        okidx[m] = i;
        ok[m++] = bufs[i];
    }
    if (m > 0) {
        for (size_t k = 0; k < m; k++)
            pub[k] = DS_K_OK;
        ds_status_t ps = ds_kv_mpublish(h->kv, m, ok, pub);
        for (size_t k = 0; k < m; k++) {
            ds_status_t ks = pub[k];
            if (ps != DS_K_OK && ks == DS_K_OK && m == 1) ks = ps;
            note(&fe, statuses, okidx[k], ks);
        }
        if (ps != DS_K_OK && fe.code == DS_K_OK) {
            fe.code = ps;
            snprintf(fe.msg, sizeof fe.msg, "%s", ds_last_error());
        }
    }
    ds__buffers_release(bufs, n);
    st = fe.code;
    if (st != DS_K_OK) ds__set_error(st, "%s", fe.msg);
    goto out;
fail_all:
    fill_statuses(statuses, n, st);
out:
    free(totals);
    free(bufs);
    free(ok);
    free(pub);
    free(okidx);
    return st;
}

/* The get side of a batch: each key's blob total, the pinned value the
 * worker holds for it (NULL where it holds none) and the key's own status. */
typedef struct {
    size_t *totals;
    ds_buffer_t **bufs;
    ds_status_t *ks_all;
} getbatch_t;

static bool getbatch_alloc(getbatch_t *g, size_t n)
{
    g->totals = malloc((n ? n : 1) * sizeof *g->totals);
    g->bufs = calloc(n ? n : 1, sizeof *g->bufs);
    g->ks_all = calloc(n ? n : 1, sizeof *g->ks_all);
    return g->totals && g->bufs && g->ks_all;
}

static void getbatch_free(getbatch_t *g)
{
    free(g->totals);
    free(g->bufs);
    free(g->ks_all);
}

/* Checks the batch, takes the device backend into d->ops and pins the
 * values the worker holds, waiting up to sub_timeout_ms for them; a key
 * with no value is not yet an error. */
static ds_status_t getbatch_fetch(ds_hetero_t *h, getbatch_t *g, size_t n, const char *const *keys,
                                  const ds_device_blob_list_t *lists, int32_t sub_timeout_ms,
                                  devcur_t *d)
{
    ds_status_t st = check_batch(n, keys, lists, g->totals);
    if (st != DS_K_OK) return st;
    d->ops = ds__device_get(&st);
    if (d->ops == NULL) return st;
    st = ds_kv_get_buffers(h->kv, n, keys, sub_timeout_ms, g->bufs);
    if (st != DS_K_OK && st != DS_K_NOT_FOUND) return st;
    register_arena(h, d->ops);
    return DS_K_OK;
}

static ds_status_t value_missing(const char *key)
{
    return ds__set_error(DS_K_NOT_FOUND, "Can't find object %.*s", 256, key);
}

/* A key's value of len data bytes must hold the blobs' total from their
 * source offset on. */
static ds_status_t check_span(const char *key, size_t len, size_t total, uint64_t from)
{
    if (from > len || total > len - from)
        return ds__set_error(DS_K_INVALID,
                             "key '%.*s': the value has %zu bytes, the blobs want %zu "
                             "from offset %llu",
                             256, key, len, total, (unsigned long long)from);
    return DS_K_OK;
}

/* Once the copies are synced (sync): whether key i is done; a key that
 * failed on its own keeps its status, the others fail with the sync's. */
static bool key_done(first_err_t *fe, ds_status_t *statuses, const getbatch_t *g, ds_status_t sync,
                     size_t i)
{
    if (g->ks_all[i] != DS_K_OK) return false;
    if (sync != DS_K_OK) {
        note(fe, statuses, i, sync);
        return false;
    }
    if (statuses) statuses[i] = DS_K_OK;
    return true;
}

/* A get-side batch succeeds when any key is done; the first failure's
 * message stays readable otherwise. */
static ds_status_t batch_end(const first_err_t *fe, bool any)
{
    ds_status_t st = any ? DS_K_OK : fe->code;
    if (fe->code != DS_K_OK) ds__set_error(fe->code, "%s", fe->msg);
    if (st == DS_K_OK) ds__clear_error();
    return st;
}

static ds_status_t mget_h2d(ds_hetero_t *h, size_t n, const char *const *keys,
                            const ds_device_blob_list_t *lists, int32_t sub_timeout_ms,
                            ds_status_t *statuses)
{
    ds__clear_error();
    if (h == NULL) return ds__set_error(DS_K_INVALID, "client is NULL");
    getbatch_t g;
    devcur_t d = {.ops = NULL};
    ds_status_t st;
    if (!getbatch_alloc(&g, n)) {
        st = ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory for a batch of %zu keys", n);
        goto out;
    }
    if ((st = getbatch_fetch(h, &g, n, keys, lists, sub_timeout_ms, &d)) != DS_K_OK) goto fail_all;
    first_err_t fe = {DS_K_OK, ""};
    for (size_t i = 0; i < n; i++) {
        uint64_t from = lists[i].src_offset;
        ds_status_t ks;
        if (g.bufs[i] == NULL)
            ks = value_missing(keys[i]);
        else if ((ks = check_span(keys[i], ds_buffer_size(g.bufs[i]), g.totals[i], from)) ==
                     DS_K_OK &&
                 (ks = check_registered(h, &lists[i], keys[i])) == DS_K_OK)
            ks = copy_key(&d, &lists[i], NULL, (const uint8_t *)ds_buffer_data(g.bufs[i]) + from);
        g.ks_all[i] = ks;
        if (ks != DS_K_OK) note(&fe, statuses, i, ks);
    }
    /* The pins are dropped only once the copies out of them are done. */
    ds_status_t sync = devcur_sync(&d);
    bool any = false;
    ds__buffers_release(g.bufs, n);
    for (size_t i = 0; i < n; i++)
        if (key_done(&fe, statuses, &g, sync, i)) any = true;
    st = batch_end(&fe, any);
    goto out;
fail_all:
    fill_statuses(statuses, n, st);
out:
    getbatch_free(&g);
    return st;
}

ds_status_t ds_hetero_mset_d2h(ds_hetero_t *h, size_t n, const char *const *keys,
                               const ds_device_blob_list_t *lists, const ds_set_param_t *param,
                               ds_status_t *statuses)
{
    return mset_d2h(h, n, keys, lists, param, statuses);
}

ds_status_t ds_hetero_mget_h2d(ds_hetero_t *h, size_t n, const char *const *keys,
                               const ds_device_blob_list_t *lists, int32_t sub_timeout_ms,
                               ds_status_t *statuses)
{
    return mget_h2d(h, n, keys, lists, sub_timeout_ms, statuses);
}

/* ---- dev_publish / dev_subscribe ---- */

ds_status_t ds_hetero_dev_publish(ds_hetero_t *h, size_t n, const char *const *keys,
                                  const ds_device_blob_list_t *lists, ds_status_t *statuses)
{
    ds_set_param_t p = DS_SET_PARAM_INIT;
    return mset_d2h_rec(h, n, keys, lists, &p, statuses, true);
}

ds_status_t ds_hetero_dev_wait_received(ds_hetero_t *h, size_t n, const char *const *keys,
                                        int32_t timeout_ms, ds_status_t *statuses)
{
    ds__clear_error();
    if (h == NULL) return ds__set_error(DS_K_INVALID, "client is NULL");
    if (n == 0 || keys == NULL || n > DS_MAX_BATCH)
        return ds__set_error(DS_K_INVALID, "%zu keys: from 1 to %d in one call", n, DS_MAX_BATCH);
    bool *ex = calloc(n, sizeof *ex);
    bool *done = calloc(n, sizeof *done);
    const char **pend = calloc(n, sizeof *pend);
    size_t *at = calloc(n, sizeof *at);
    if (!ex || !done || !pend || !at) {
        free(ex);
        free(done);
        free(pend);
        free(at);
        return ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory for %zu keys", n);
    }
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    long sleep_us = 1000;
    ds_status_t st = DS_K_OK;
    size_t left = n;
    for (;;) {
        size_t m = 0;
        for (size_t i = 0; i < n; i++)
            if (!done[i]) {
                pend[m] = keys[i];
                at[m++] = i;
            }
        if ((st = ds_kv_exist(h->kv, m, pend, ex)) != DS_K_OK) break;
        for (size_t k = 0; k < m; k++)
            if (!ex[k]) {
                done[at[k]] = true;
                left--;
            }
        if (left == 0) break;
        clock_gettime(CLOCK_MONOTONIC, &now);
        long long ms = (now.tv_sec - t0.tv_sec) * 1000LL + (now.tv_nsec - t0.tv_nsec) / 1000000;
        if (timeout_ms >= 0 && ms >= timeout_ms) {
            st = DS_K_FUTURE_TIMEOUT;
            break;
        }
        usleep((useconds_t)sleep_us);
        if (sleep_us < 20000) sleep_us *= 2;
    }
    char msg[MSG_MAX];
    if (st != DS_K_OK && st != DS_K_FUTURE_TIMEOUT)
        snprintf(msg, sizeof msg, "%s", ds_last_error());
    const char *first = NULL;
    for (size_t i = 0; i < n; i++) {
        if (statuses) statuses[i] = done[i] ? DS_K_OK : st;
        if (!done[i] && first == NULL) first = keys[i];
    }
    free(ex);
    free(done);
    free(pend);
    free(at);
    if (st == DS_K_FUTURE_TIMEOUT)
        return ds__set_error(st,
                             "key '%.*s' was not received by a dev_subscribe within %d ms; it "
                             "stays published",
                             128, first ? first : "", (int)timeout_ms);
    if (st != DS_K_OK) return ds__set_error(st, "%s", msg);
    return DS_K_OK;
}

/* A publisher's allocation mapped into this process during one subscribe
 * call; the same allocation (on the same device) is opened once. */
typedef struct {
    ds__ipc_handle_t handle;
    int32_t dev;
    uint64_t base;
    size_t size;
    void *opened;
} opened_t;

typedef struct {
    opened_t *v;
    size_t n, cap;
} opened_set_t;

static ds_status_t open_peer(const ds__device_ops_t *ops, opened_set_t *os, const rec_blob_t *rb,
                             int32_t dev, uint64_t *ptr)
{
    const opened_t *o = NULL;
    for (size_t k = 0; k < os->n && o == NULL; k++)
        if (os->v[k].dev == dev && memcmp(&os->v[k].handle, &rb->handle, sizeof rb->handle) == 0)
            o = &os->v[k];
    if (o == NULL) {
        if (os->n == os->cap) {
            size_t cap = os->cap ? os->cap * 2 : 8;
            opened_t *v = realloc(os->v, cap * sizeof *v);
            if (v == NULL) return ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory");
            os->v = v;
            os->cap = cap;
        }
        opened_t *nw = &os->v[os->n];
        nw->handle = rb->handle;
        nw->dev = dev;
        ds_status_t st = ops->ipc_open(&rb->handle, &nw->base, &nw->size, &nw->opened);
        if (st != DS_K_OK) return st;
        os->n++;
        o = nw;
    }
    if (rb->offset > o->size || rb->size > o->size - rb->offset)
        return ds__set_error(DS_K_INVALID,
                             "a published blob (offset %llu, %llu bytes) runs past "
                             "its device allocation (%zu bytes)",
                             (unsigned long long)rb->offset, (unsigned long long)rb->size, o->size);
    *ptr = o->base + rb->offset;
    return DS_K_OK;
}

static void close_peers(const ds__device_ops_t *ops, opened_set_t *os)
{
    for (size_t k = 0; k < os->n; k++)
        (void)ops->ipc_close(os->v[k].opened);
    free(os->v);
    os->v = NULL;
    os->n = os->cap = 0;
}

/* Whether this process may copy from publishers' device memory: the
 * backend's, on this machine, unless DS_DEVICE_IPC=0. */
static bool ipc_usable(const ds__device_ops_t *ops, const rec_head_t *hd)
{
    const char *env = getenv("DS_DEVICE_IPC");
    if (env && strcmp(env, "0") == 0) return false;
    pthread_once(&boot_once, read_boot_id);
    return hd->has_handles && boot_id[0] && strcmp(hd->backend, ops->name) == 0 &&
           strcmp(hd->boot_id, boot_id) == 0;
}

/* Copies bytes [from, from + the blobs' total) of the value that the
 * publisher's blobs (src[k], sizes[k]) make up into l's blobs, device to
 * device on d's stream. */
static ds_status_t copy_d2d_key(devcur_t *d, const ds_device_blob_list_t *l, uint64_t from,
                                const uint64_t *src, const uint64_t *sizes, size_t nsrc)
{
    size_t si = 0;
    uint64_t soff = from;
    while (si < nsrc && soff >= sizes[si])
        soff -= sizes[si++];
    for (size_t j = 0; j < l->n_blobs; j++) {
        uint64_t dp = l->blobs[j].dev_ptr, left = l->blobs[j].size;
        while (left > 0) {
            if (si >= nsrc)
                return ds__set_error(DS_K_INVALID, "the published value ends before the blobs");
            uint64_t take = sizes[si] - soff < left ? sizes[si] - soff : left;
            ds_status_t st = d->ops->copy_d2d(dp, src[si] + soff, (size_t)take, d->stream);
            if (st != DS_K_OK) return st;
            dp += take;
            left -= take;
            soff += take;
            if (soff == sizes[si]) {
                si++;
                soff = 0;
            }
        }
    }
    return DS_K_OK;
}

/* The device-to-device copy of one key from the publisher's memory: false
 * (nothing copied, the error cleared) when its handles cannot be used here,
 * so the caller reads the worker's copy. *ks: a copy's own failure. */
static bool try_d2d(devcur_t *d, opened_set_t *os, const ds_device_blob_list_t *l, uint64_t from,
                    const rec_head_t *hd, const uint8_t *recs, ds_status_t *ks)
{
    if (!ipc_usable(d->ops, hd) || hd->nblobs == 0) return false;
    uint64_t *src = malloc(hd->nblobs * sizeof *src);
    uint64_t *sizes = malloc(hd->nblobs * sizeof *sizes);
    bool own = hd->pid == (int32_t)getpid() && hd->nonce == process_nonce();
    bool ok = src && sizes && devcur_use(d, l->dev_idx) == DS_K_OK;
    uint64_t sum = 0;
    for (uint32_t k = 0; ok && k < hd->nblobs; k++) {
        rec_blob_t rb;
        memcpy(&rb, recs + k * sizeof rb, sizeof rb);
        sizes[k] = rb.size;
        sum += rb.size;
        /* The publisher's own pointers are this process's: no handle. */
        if (own)
            src[k] = rb.dptr;
        else
            ok = open_peer(d->ops, os, &rb, d->dev, &src[k]) == DS_K_OK;
    }
    if (ok && sum != hd->data_len) ok = false;
    if (ok) *ks = copy_d2d_key(d, l, from, src, sizes, hd->nblobs);
    if (!ok) ds__clear_error();
    free(src);
    free(sizes);
    return ok;
}

ds_status_t ds_hetero_dev_subscribe(ds_hetero_t *h, size_t n, const char *const *keys,
                                    const ds_device_blob_list_t *lists, int32_t sub_timeout_ms,
                                    ds_status_t *statuses)
{
    ds__clear_error();
    if (h == NULL) return ds__set_error(DS_K_INVALID, "client is NULL");
    getbatch_t g;
    bool ok = getbatch_alloc(&g, n);
    bool *via_d2d = calloc(n ? n : 1, sizeof *via_d2d);
    const char **got = calloc(n ? n : 1, sizeof *got);
    opened_set_t os = {NULL, 0, 0};
    devcur_t d = {.ops = NULL};
    ds_status_t st;
    if (!ok || !via_d2d || !got) {
        st = ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory for a batch of %zu keys", n);
        goto out;
    }
    if ((st = getbatch_fetch(h, &g, n, keys, lists, sub_timeout_ms, &d)) != DS_K_OK) goto fail_all;
    first_err_t fe = {DS_K_OK, ""};
    for (size_t i = 0; i < n; i++) {
        ds_status_t ks = DS_K_OK;
        if (g.bufs[i] == NULL) {
            ks = value_missing(keys[i]);
        } else {
            const uint8_t *v = ds_buffer_data(g.bufs[i]);
            size_t size = ds_buffer_size(g.bufs[i]);
            rec_head_t hd;
            const uint8_t *recs = NULL;
            bool has_rec = rec_parse(v, size, &hd, &recs);
            size_t data_len = has_rec ? (size_t)hd.data_len : size;
            uint64_t from = lists[i].src_offset;
            if ((ks = check_span(keys[i], data_len, g.totals[i], from)) == DS_K_OK &&
                (ks = check_registered(h, &lists[i], keys[i])) == DS_K_OK) {
                via_d2d[i] = has_rec && try_d2d(&d, &os, &lists[i], from, &hd, recs, &ks);
                if (!via_d2d[i]) ks = copy_key(&d, &lists[i], NULL, v + from);
            }
        }
        g.ks_all[i] = ks;
        if (ks != DS_K_OK) note(&fe, statuses, i, ks);
    }
    /* The pins and the peers' mappings go only once the copies are done. */
    ds_status_t sync = devcur_sync(&d);
    close_peers(d.ops, &os);
    ds__buffers_release(g.bufs, n);
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (!key_done(&fe, statuses, &g, sync, i)) continue;
        atomic_fetch_add(via_d2d[i] ? &h->d2d_keys : &h->arena_keys, 1);
        got[m++] = keys[i];
    }
    /* Received: the object is consumed (Yuanrong deletes it), which is also
     * what tells the publisher its memory is free again. */
    if (m > 0) (void)ds_kv_del(h->kv, m, got, NULL);
    st = batch_end(&fe, m > 0);
    goto out;
fail_all:
    fill_statuses(statuses, n, st);
out:
    getbatch_free(&g);
    free(via_d2d);
    free(got);
    return st;
}

void ds_hetero_dev_stats(ds_hetero_t *h, ds_hetero_dev_stats_t *out)
{
    if (out == NULL) return;
    out->d2d_keys = h ? atomic_load(&h->d2d_keys) : 0;
    out->arena_keys = h ? atomic_load(&h->arena_keys) : 0;
}

/* Whether [p, p + n) and range g share a byte. */
static bool overlaps(uint64_t p, uint64_t n, const reg_range_t *g)
{
    return p < g->p + g->n && g->p < p + n;
}

ds_status_t ds_hetero_pre_register_device_memory(ds_hetero_t *h, size_t n, const uint64_t *dev_ptrs,
                                                 const uint64_t *sizes)
{
    ds__clear_error();
    if (h == NULL) return ds__set_error(DS_K_INVALID, "client is NULL");
    if (n == 0 || dev_ptrs == NULL || sizes == NULL)
        return ds__set_error(DS_K_INVALID, "The input of dev_ptrs and sizes should not be empty");
    for (size_t i = 0; i < n; i++) {
        if (dev_ptrs[i] == 0) return ds__set_error(DS_K_INVALID, "dev_ptrs[%zu] is 0", i);
        if (sizes[i] == 0) return ds__set_error(DS_K_INVALID, "sizes[%zu] is 0", i);
        if (sizes[i] > UINT64_MAX - dev_ptrs[i] || sizes[i] > SIZE_MAX)
            return ds__set_error(DS_K_INVALID, "dev_ptrs[%zu] + sizes[%zu] overflows", i, i);
    }
    ds_status_t st;
    const ds__device_ops_t *ops = ds__device_get(&st);
    if (ops == NULL) return st;
    if ((st = ops->set_device(-1)) != DS_K_OK) return st;
    pthread_mutex_lock(&h->mu);
    /* All or nothing: every new range is checked against the registered
     * ones and the call's others first. The same range again is already
     * registered and is kept as it is. */
    bool *is_new = calloc(n, sizeof *is_new);
    if (h->nregs + n > h->capregs) {
        size_t cap = (h->nregs + n) * 2;
        reg_range_t *r = realloc(h->regs, cap * sizeof *r);
        if (r == NULL || is_new == NULL) {
            if (r != NULL) h->regs = r;
            pthread_mutex_unlock(&h->mu);
            free(is_new);
            return ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory for %zu ranges", n);
        }
        h->regs = r;
        h->capregs = cap;
    } else if (is_new == NULL) {
        pthread_mutex_unlock(&h->mu);
        return ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory for %zu ranges", n);
    }
    st = DS_K_OK;
    for (size_t i = 0; i < n && st == DS_K_OK; i++) {
        reg_range_t want = {dev_ptrs[i], sizes[i], 0};
        is_new[i] = true;
        for (size_t k = 0; k < h->nregs + i && st == DS_K_OK; k++) {
            const reg_range_t *g = k < h->nregs ? &h->regs[k] : NULL;
            reg_range_t other;
            if (g == NULL) {
                size_t o = k - h->nregs;
                if (!is_new[o]) continue;
                other = (reg_range_t){dev_ptrs[o], sizes[o], 0};
                g = &other;
            }
            if (!overlaps(want.p, want.n, g)) continue;
            if (g->p == want.p && g->n == want.n) {
                is_new[i] = false;
                break;
            }
            st = ds__set_error(DS_K_INVALID,
                               "dev_ptrs[%zu] (0x%llx, %llu bytes) overlaps the registered "
                               "device memory 0x%llx + %llu",
                               i, (unsigned long long)want.p, (unsigned long long)want.n,
                               (unsigned long long)g->p, (unsigned long long)g->n);
        }
    }
    size_t added = 0;
    for (size_t i = 0; i < n && st == DS_K_OK; i++) {
        if (!is_new[i]) continue;
        int pinned = 0;
        st = ops->mem_register(dev_ptrs[i], (size_t)sizes[i], &pinned);
        if (st == DS_K_OK) {
            h->regs[h->nregs + added++] = (reg_range_t){dev_ptrs[i], sizes[i], pinned};
        } else {
            char msg[MSG_MAX];
            snprintf(msg, sizeof msg, "%s", ds_last_error());
            st = ds__set_error(st, "dev_ptrs[%zu]: %s", i, msg);
        }
    }
    if (st != DS_K_OK) {
        /* Roll back what this call registered; keep the error's message. */
        char msg[MSG_MAX];
        snprintf(msg, sizeof msg, "%s", ds_last_error());
        for (size_t k = 0; k < added; k++)
            (void)ops->mem_unregister(h->regs[h->nregs + k].p, h->regs[h->nregs + k].pinned);
        ds__set_error(st, "%s", msg);
    } else {
        /* Insertion sort of the new ranges: registration is rare. */
        for (size_t k = h->nregs; k < h->nregs + added; k++) {
            reg_range_t v = h->regs[k];
            size_t j = k;
            while (j > 0 && h->regs[j - 1].p > v.p) {
                h->regs[j] = h->regs[j - 1];
                j--;
            }
            h->regs[j] = v;
        }
        h->nregs += added;
        atomic_store_explicit(&h->nregs_pub, h->nregs, memory_order_relaxed);
    }
    pthread_mutex_unlock(&h->mu);
    free(is_new);
    return st;
}

/* ---- futures ---- */

struct ds_future {
    ds_hetero_t *h;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
    bool released; /* ds_future_release came first: the thread frees it */
    ds_status_t st;
    char msg[MSG_MAX];
    bool is_set;
    size_t n;
    char **keys;
    ds_device_blob_list_t *lists;
    ds_blob_t *blobs;
    ds_set_param_t param;
    int32_t sub_timeout_ms;
    ds_status_t *statuses;
};

static void future_free(ds_future_t *f)
{
    if (f->keys)
        for (size_t i = 0; i < f->n; i++)
            free(f->keys[i]);
    free(f->keys);
    free(f->lists);
    free(f->blobs);
    free(f->statuses);
    pthread_mutex_destroy(&f->mu);
    pthread_cond_destroy(&f->cv);
    free(f);
}

static void *future_main(void *arg)
{
    ds_future_t *f = arg;
    ds_status_t st;
    if (f->is_set)
        st = mset_d2h(f->h, f->n, (const char *const *)f->keys, f->lists, &f->param, f->statuses);
    else
        st = mget_h2d(f->h, f->n, (const char *const *)f->keys, f->lists, f->sub_timeout_ms,
                      f->statuses);
    ds_hetero_t *h = f->h;
    pthread_mutex_lock(&f->mu);
    f->st = st;
    snprintf(f->msg, sizeof f->msg, "%s", st == DS_K_OK ? "" : ds_last_error());
    f->done = true;
    bool orphan = f->released;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
    if (orphan) future_free(f);
    /* Last: once running is 0 the client may be freed. */
    pthread_mutex_lock(&h->mu);
    if (--h->running == 0) pthread_cond_broadcast(&h->idle);
    pthread_mutex_unlock(&h->mu);
    return NULL;
}

static ds_status_t submit(ds_hetero_t *h, bool is_set, size_t n, const char *const *keys,
                          const ds_device_blob_list_t *lists, const ds_set_param_t *param,
                          int32_t sub_timeout_ms, ds_future_t **out)
{
    ds__clear_error();
    if (out == NULL) return ds__set_error(DS_K_INVALID, "out is NULL");
    *out = NULL;
    if (h == NULL) return ds__set_error(DS_K_INVALID, "client is NULL");
    size_t *totals = malloc((n ? n : 1) * sizeof *totals);
    if (totals == NULL) return ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory");
    ds_status_t st = check_batch(n, keys, lists, totals);
    free(totals);
    if (st != DS_K_OK) return st;
    const ds__device_ops_t *ops = ds__device_get(&st);
    if (ops == NULL) return st;
    /* "The current device" is the caller's: fixed here, as the call runs on
     * another thread. */
    int32_t cur = -1;
    for (size_t i = 0; i < n && cur < 0; i++)
        if (lists[i].dev_idx < 0 && (st = ops->current_device(&cur)) != DS_K_OK) return st;
    ds_future_t *f = calloc(1, sizeof *f);
    size_t nb = 0;
    for (size_t i = 0; i < n; i++)
        nb += lists[i].n_blobs;
    if (f == NULL) return ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory for a future");
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->cv, NULL);
    f->h = h;
    f->is_set = is_set;
    f->n = n;
    f->sub_timeout_ms = sub_timeout_ms;
    if (param) {
        f->param = *param;
    } else {
        ds_set_param_t p = DS_SET_PARAM_INIT;
        f->param = p;
    }
    f->keys = calloc(n, sizeof *f->keys);
    f->lists = calloc(n, sizeof *f->lists);
    f->blobs = calloc(nb, sizeof *f->blobs);
    f->statuses = calloc(n, sizeof *f->statuses);
    bool oom = !f->keys || !f->lists || !f->blobs || !f->statuses;
    size_t at = 0;
    for (size_t i = 0; !oom && i < n; i++) {
        if ((f->keys[i] = strdup(keys[i])) == NULL) oom = true;
        f->lists[i] = lists[i];
        if (f->lists[i].dev_idx < 0) f->lists[i].dev_idx = cur;
        memcpy(f->blobs + at, lists[i].blobs, lists[i].n_blobs * sizeof *f->blobs);
        f->lists[i].blobs = f->blobs + at;
        at += lists[i].n_blobs;
    }
    if (oom) {
        future_free(f);
        return ds__set_error(DS_K_OUT_OF_MEMORY, "out of memory for a future of %zu keys", n);
    }
    pthread_mutex_lock(&h->mu);
    h->running++;
    pthread_mutex_unlock(&h->mu);
    int rc = pthread_create(&f->thread, NULL, future_main, f);
    if (rc != 0) {
        pthread_mutex_lock(&h->mu);
        if (--h->running == 0) pthread_cond_broadcast(&h->idle);
        pthread_mutex_unlock(&h->mu);
        future_free(f);
        return ds__set_error(DS_K_RUNTIME_ERROR, "cannot start the async call's thread: %s",
                             strerror(rc));
    }
    *out = f;
    return DS_K_OK;
}

ds_status_t ds_hetero_async_mset_d2h(ds_hetero_t *h, size_t n, const char *const *keys,
                                     const ds_device_blob_list_t *lists,
                                     const ds_set_param_t *param, ds_future_t **out)
{
    return submit(h, true, n, keys, lists, param, 0, out);
}

ds_status_t ds_hetero_async_mget_h2d(ds_hetero_t *h, size_t n, const char *const *keys,
                                     const ds_device_blob_list_t *lists, int32_t sub_timeout_ms,
                                     ds_future_t **out)
{
    return submit(h, false, n, keys, lists, NULL, sub_timeout_ms, out);
}

ds_status_t ds_future_get(ds_future_t *f, int32_t timeout_ms, ds_status_t *statuses)
{
    ds__clear_error();
    if (f == NULL) return ds__set_error(DS_K_INVALID, "future is NULL");
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    if (timeout_ms > 0) {
        until.tv_sec += timeout_ms / 1000;
        until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
    }
    pthread_mutex_lock(&f->mu);
    while (!f->done) {
        if (timeout_ms < 0) {
            pthread_cond_wait(&f->cv, &f->mu);
        } else if (timeout_ms == 0 || pthread_cond_timedwait(&f->cv, &f->mu, &until) == ETIMEDOUT) {
            break;
        }
    }
    bool done = f->done;
    ds_status_t st = f->st;
    char msg[MSG_MAX];
    snprintf(msg, sizeof msg, "%s", f->msg);
    pthread_mutex_unlock(&f->mu);
    if (!done)
        return ds__set_error(DS_K_FUTURE_TIMEOUT, "the async call did not finish within %d ms",
                             (int)timeout_ms);
    if (statuses) memcpy(statuses, f->statuses, f->n * sizeof *statuses);
    if (st != DS_K_OK) ds__set_error(st, "%s", msg);
    return st;
}

size_t ds_future_count(const ds_future_t *f)
{
    return f ? f->n : 0;
}

void ds_future_release(ds_future_t *f)
{
    if (f == NULL) return;
    pthread_mutex_lock(&f->mu);
    if (!f->done) {
        /* Still running: it frees itself when done, so a release never
         * waits for a get that is waiting for its keys. */
        f->released = true;
        pthread_detach(f->thread);
        pthread_mutex_unlock(&f->mu);
        return;
    }
    pthread_mutex_unlock(&f->mu);
    pthread_join(f->thread, NULL);
    future_free(f);
}
