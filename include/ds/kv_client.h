/* The datasystem KV client (libdatasystem).
 *
 * A client talks to one worker. When the worker runs on this host the client
 * uses its Unix socket and maps the worker's shared-memory arena, so values are
 * written and read in place; otherwise it speaks the same protocol over TCP.
 *
 * Ownership: every pointer the library hands out has a named release function
 * (ds_free for values from ds_kv_get/ds_kv_mget/ds_kv_generate_key,
 * ds_buffer_release for buffers, ds_client_close for the client). Keys and
 * values passed in are only read during the call and may be freed afterwards.
 *
 * Thread safety: a ds_client_t may be used by many threads at once; calls from
 * different threads run concurrently on separate connections to the worker. A
 * ds_buffer_t may be read from any thread but released once, by one thread.
 * Buffers stay valid after ds_client_close until they are released.
 *
 * Closing while other threads are in calls: ds_client_close may run while
 * other threads are inside calls on the same client (a subscribe-get waiting
 * for a key, a set, anything). Each such call either completes normally or
 * returns promptly with DS_K_INVALID, "the client is closed"; ds_client_close
 * does not wait for them, and the client's memory is freed only when the
 * last of them has returned. What is not defined: starting a call on the
 * client once ds_client_close has been called (let alone after it returned),
 * and closing a client twice. The handle may already be freed then, as with
 * free(3); a program that closes a client other threads use has to stop
 * those threads from making new calls first (e.g. a flag they check), and
 * may then close the client to cut short the calls they are blocked in.
 *
 * Errors: every call returns a ds_status_t; on failure ds_last_error() gives a
 * message naming what was wrong. */
#ifndef DATASYSTEM_KV_CLIENT_H
#define DATASYSTEM_KV_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ds/export.h"
#include "ds/status.h"
#include "ds/version.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Limits (docs/design.md section 3). */
#define DS_MAX_KEY_LEN 1024
#define DS_MAX_BATCH 10000
#define DS_MAX_EXIST_BATCH 100000
/* Most pieces one ds_kv_setv takes. */
#define DS_MAX_SETV_PIECES 4096

typedef enum {
    DS_WRITE_NONE_L2_CACHE = 0,       /* cache only, never evicted */
    DS_WRITE_THROUGH_L2_CACHE = 1,    /* answered once durable in L2; without L2: cached */
    DS_WRITE_BACK_L2_CACHE = 2,       /* answered at once, written to L2 from a queue */
    DS_WRITE_NONE_L2_CACHE_EVICT = 3, /* volatile: evicted when space is needed */
    DS_WRITE_BACK_L2_CACHE_EVICT = 4, /* write-back; evictable once written to L2 */
} ds_write_mode_t;

typedef enum {
    DS_EXISTENCE_NONE = 0, /* overwrite an existing key */
    /* Set only if the key does not exist. As in Yuanrong, an existing key
     * is a success (DS_K_OK) that keeps the old value unchanged. */
    DS_EXISTENCE_NX = 1,
} ds_existence_t;

typedef struct {
    ds_write_mode_t write_mode;
    uint32_t ttl_second; /* 0 = no expiry */
    ds_existence_t existence;
} ds_set_param_t;

#define DS_SET_PARAM_INIT                                                                          \
    {                                                                                              \
        DS_WRITE_NONE_L2_CACHE, 0, DS_EXISTENCE_NONE                                               \
    }

typedef enum {
    DS_TRANSPORT_AUTO = 0,  /* shared memory when the worker is on this host, else TCP */
    DS_TRANSPORT_TCP = 1,   /* always TCP, even to a local worker */
    DS_TRANSPORT_LOCAL = 2, /* shared memory or fail */
} ds_transport_t;

typedef struct {
    const char *host;            /* worker host, e.g. "127.0.0.1" */
    int port;                    /* worker port, e.g. 31501 */
    int connect_timeout_ms;      /* default 9000 */
    int request_timeout_ms;      /* per request; 0 = default 60000. Subscribe waits add theirs. */
    ds_transport_t transport;    /* default DS_TRANSPORT_AUTO */
    const char *token;           /* shared secret for authenticated workers, or NULL */
    const char *unix_socket_dir; /* where the worker's socket lives; NULL = default */
    /* Polling for replies: after sending a request, watch the socket for
     * the reply for up to this many microseconds before sleeping on it, so
     * that a round trip costs no wake-up of the calling thread. The window
     * adapts per connection: it grows while replies come within the limit,
     * shrinks when they take longer (a subscribe-get that waits, a large
     * value) and stops when the CPU has other work, so a quiet client burns
     * nothing. Pairs with the worker's --busy_poll_us. 0 = $DS_BUSY_POLL_US
     * (0 there: off), or 200; -1 = off: always sleep. */
    int busy_poll_us;
    /* Remote gets over UCX (https://openucx.org: RDMA, or TCP, as UCX_TLS
     * allows). 1: when the session is remote (TCP), a value larger than the
     * worker's inline limit is sent by the worker with UCX straight into the
     * buffer it is read into (the caller's for ds_kv_get_into, the one
     * ds_kv_get returns), with no intermediate copy; the control messages
     * stay on TCP. The worker must run with --enable_rdma true (otherwise
     * such a get fails DS_K_NOT_SUPPORTED saying so), and UCX failing to start
     * here fails ds_client_connect with the reason: there is no silent
     * fall-back. -1: off. 0 = $DS_CLIENT_UCX (1 or 0), or off. Local sessions
     * read the arena in place either way. */
    int enable_ucx;
    /* TLS over TCP, for a worker started with --enable_tls (OpenSSL; TLS
     * 1.2 or later). 1: on, -1: off, 0 = $DATASYSTEM_ENABLE_TLS (1/true or
     * 0/false), else off. With it, the worker's certificate must chain to
     * tls_ca (NULL = $DATASYSTEM_TLS_CA, else the system's CAs); host names
     * are not checked. tls_cert and tls_key (NULL = $DATASYSTEM_TLS_CERT,
     * $DATASYSTEM_TLS_KEY) are this client's certificate and key, for a
     * worker with --tls_verify_client. Sessions over the worker's Unix
     * socket (a local worker) do not use TLS. Cannot be combined with
     * enable_ucx (UCX moves values unencrypted). */
    int enable_tls;
    const char *tls_ca;
    const char *tls_cert;
    const char *tls_key;
    /* Service discovery (ds/service_discovery.h): when set, host and port
     * are ignored and the worker is the one it selects. It must outlive the
     * client. NULL = host and port. */
    struct ds_service_discovery *service_discovery;
    /* Failover (Yuanrong's enable_cross_node_connection), with a
     * service_discovery: 1 = when the worker stops answering, the next
     * call that needs a new session asks the discovery for another ready
     * worker (the one that failed is left out while others are listed) and
     * carries on there; 0 = stay with the first worker. The call that
     * found the worker gone still fails (DS_K_CLIENT_WORKER_DISCONNECT or
     * DS_K_RPC_UNAVAILABLE). What was stored only on the lost worker is
     * gone with it (its NONE_L2_CACHE values included, as in Yuanrong);
     * values on other workers of the cluster are read as before. Buffers
     * of the old session stay valid until released. */
    int enable_cross_node_connection;
} ds_client_options_t;

typedef struct ds_client ds_client_t;
typedef struct ds_buffer ds_buffer_t;

/* One value of a multi-get. status is DS_K_OK with data/len set (free data with
 * ds_free), or DS_K_NOT_FOUND with data NULL. */
typedef struct {
    ds_status_t status;
    void *data;
    size_t len;
} ds_value_t;

/* Fills defaults; host and port still have to be set. */
DS_EXPORT void ds_client_options_init(ds_client_options_t *opts);

/* Connects (first connection and arena mapping happen here) and checks the
 * worker answers. *out is NULL on failure. */
DS_EXPORT ds_status_t ds_client_connect(const ds_client_options_t *opts, ds_client_t **out);
/* Closes connections. Buffers still held stay valid until released. NULL is
 * fine. Calls in progress on other threads return (see "Closing" above). */
DS_EXPORT void ds_client_close(ds_client_t *client);
/* True when this client reads and writes the worker's arena in place. */
DS_EXPORT bool ds_client_is_local(const ds_client_t *client);
DS_EXPORT ds_status_t ds_client_health_check(ds_client_t *client);

/* Frees memory returned by ds_kv_get, ds_kv_mget and ds_kv_generate_key. */
DS_EXPORT void ds_free(void *p);

/* Set one key. param NULL means DS_SET_PARAM_INIT. */
DS_EXPORT ds_status_t ds_kv_set(ds_client_t *c, const char *key, const void *val, size_t len,
                                const ds_set_param_t *param);
/* Set one key to the concatenation of n pieces (1..DS_MAX_SETV_PIECES), as
 * ds_kv_set of the joined bytes would, without joining them: a local client
 * copies each piece once, straight into the worker's arena, and publishes
 * the value with one request (no pin is kept, so nothing is left to
 * release); a remote one sends the pieces as they are. A piece may be empty
 * (lens[i] 0, pieces[i] may then be NULL); all of them together may not. The
 * pieces are only read during the call. */
DS_EXPORT ds_status_t ds_kv_setv(ds_client_t *c, const char *key, size_t n,
                                 const void *const *pieces, const size_t *lens,
                                 const ds_set_param_t *param);
/* Set n keys in one request. statuses (n entries, may be NULL) receives each
 * key's result; the return value is DS_K_OK when all succeeded, else the first
 * failure's code. */
DS_EXPORT ds_status_t ds_kv_mset(ds_client_t *c, size_t n, const char *const *keys,
                                 const void *const *vals, const size_t *lens,
                                 const ds_set_param_t *param, ds_status_t *statuses);

/* Get one key into a new allocation (*val, free with ds_free). With
 * sub_timeout_ms > 0 the worker waits up to that long for the key to be
 * published; 0 does not wait. A missing key is DS_K_NOT_FOUND. */
DS_EXPORT ds_status_t ds_kv_get(ds_client_t *c, const char *key, int32_t sub_timeout_ms, void **val,
                                size_t *len);
/* Get one key into the caller's buffer. A value larger than cap is
 * DS_K_INVALID with *len set to the needed size. */
DS_EXPORT ds_status_t ds_kv_get_into(ds_client_t *c, const char *key, int32_t sub_timeout_ms,
                                     void *buf, size_t cap, size_t *len);
/* Get n keys; waits until all are published or the timeout passes, then
 * returns what there is. Returns DS_K_OK when at least one key was found,
 * DS_K_NOT_FOUND when none was. */
DS_EXPORT ds_status_t ds_kv_mget(ds_client_t *c, size_t n, const char *const *keys,
                                 int32_t sub_timeout_ms, ds_value_t *out);

/* Zero-copy read: out[i] is a buffer pinning the key's current version (it
 * stays intact if the key is overwritten or deleted) or NULL when missing.
 * Same return rule as ds_kv_mget. Release each with ds_buffer_release. */
DS_EXPORT ds_status_t ds_kv_get_buffers(ds_client_t *c, size_t n, const char *const *keys,
                                        int32_t sub_timeout_ms, ds_buffer_t **out);

/* Zero-copy write: create reserves size bytes (in the worker's arena for a
 * local client), the caller fills ds_buffer_mutable_data, publish makes it
 * visible atomically. A buffer released unpublished is discarded. */
DS_EXPORT ds_status_t ds_kv_create(ds_client_t *c, const char *key, size_t size,
                                   const ds_set_param_t *param, ds_buffer_t **out);
DS_EXPORT ds_status_t ds_kv_mcreate(ds_client_t *c, size_t n, const char *const *keys,
                                    const size_t *sizes, const ds_set_param_t *param,
                                    ds_buffer_t **out);
/* Publishes a created buffer. The buffer can still be read afterwards and must
 * still be released. */
DS_EXPORT ds_status_t ds_kv_publish(ds_client_t *c, ds_buffer_t *buf);
DS_EXPORT ds_status_t ds_kv_mpublish(ds_client_t *c, size_t n, ds_buffer_t *const *bufs,
                                     ds_status_t *statuses);

DS_EXPORT const void *ds_buffer_data(const ds_buffer_t *buf);
/* Writable only before publish; NULL after. */
DS_EXPORT void *ds_buffer_mutable_data(ds_buffer_t *buf);
/* Yuanrong's Buffer::MemoryCopy: copies length bytes of data (the caller's,
 * not kept) to the start of an unpublished buffer, with the copy a set uses
 * into the arena (faster than a plain memcpy for large values); from 256 KiB
 * into a local buffer it also wakes the worker ahead of the publish that
 * is expected next, as a set wakes it ahead of its request. K_INVALID
 * for a NULL buffer or data, a length not in (0, size], or a published
 * buffer. */
DS_EXPORT ds_status_t ds_buffer_memory_copy(ds_buffer_t *buf, const void *data, size_t length);
DS_EXPORT size_t ds_buffer_size(const ds_buffer_t *buf);
DS_EXPORT const char *ds_buffer_key(const ds_buffer_t *buf);
/* Drops the pin (or discards an unpublished buffer). NULL is fine. */
DS_EXPORT void ds_buffer_release(ds_buffer_t *buf);
/* As ds_buffer_release, and the buffer is freed at once, but a local read
 * pin of up to 4 MiB is told to the worker with the client's next request
 * (in the same write, so it costs no frame of its own) instead of now: until
 * then the worker keeps that version (its memory is not reused, a volatile
 * value not evicted). At most 16 pins of 8 MiB together wait; one past that
 * sends them all at once, as do larger and unpublished buffers. Sizes are
 * the buffers' own: a ds_kv_read range counts its length, though the whole
 * value stays pinned, so defer only ranges of values you would keep pinned
 * anyway. A session that ends (the client closed, the worker lost) drops
 * them too. */
DS_EXPORT void ds_buffer_release_deferred(ds_buffer_t *buf);

/* Delete n keys; a missing key is not an error. */
DS_EXPORT ds_status_t ds_kv_del(ds_client_t *c, size_t n, const char *const *keys,
                                ds_status_t *statuses);
/* exists[i] = whether keys[i] is published. Up to DS_MAX_EXIST_BATCH keys. */
DS_EXPORT ds_status_t ds_kv_exist(ds_client_t *c, size_t n, const char *const *keys, bool *exists);
/* Set a new TTL (0 removes it). A missing key's status is DS_K_NOT_FOUND. */
DS_EXPORT ds_status_t ds_kv_expire(ds_client_t *c, size_t n, const char *const *keys,
                                   uint32_t ttl_second, ds_status_t *statuses);
/* sizes[i] = value size, or 0 with statuses[i] = DS_K_NOT_FOUND. */
DS_EXPORT ds_status_t ds_kv_query_size(ds_client_t *c, size_t n, const char *const *keys,
                                       uint64_t *sizes, ds_status_t *statuses);
/* A new unique key starting with prefix (may be NULL or ""); free with ds_free. */
DS_EXPORT ds_status_t ds_kv_generate_key(ds_client_t *c, const char *prefix, char **out);

/* ---- partial reads (Yuanrong's KVClient.Read with ReadParam) ---- */

/* A range of a value: size bytes from offset; size 0 reads to the end, and a
 * range past the end is cut there. */
typedef struct {
    const char *key;
    uint64_t offset;
    uint64_t size;
} ds_read_param_t;

/* Reads n ranges without moving whole values: a local client gets buffers
 * over the range in the worker's arena (pinning that version, as
 * ds_kv_get_buffers), a remote one receives only the range's bytes.
 * out[i] is the buffer (release with ds_buffer_release) or NULL, with
 * statuses[i] (may be NULL) saying why: DS_K_NOT_FOUND for a missing key,
 * DS_K_INVALID for an offset beyond the value's size. Returns DS_K_OK when
 * any range was read, else the first failure's code. */
DS_EXPORT ds_status_t ds_kv_read(ds_client_t *c, size_t n, const ds_read_param_t *params,
                                 ds_buffer_t **out, ds_status_t *statuses);

/* ---- read latches (Yuanrong's ReadOnlyBuffer.rlatch / unrlatch) ---- */

/* Takes a read latch on each key for this client's session, held until
 * released or until timeout_ms passes (1..the worker's
 * --max_read_latch_timeout_ms, 600000 by default; longer: DS_K_INVALID).
 * While a key is latched, a set, publish or delete of it waits for the
 * latch to go (then proceeds). While another client holds a write latch on
 * the key (ds_object_wlatch), the latch is retried until timeout_ms, then
 * that key answers DS_K_TRY_AGAIN. Latches are released when the client closes.
 * statuses[i] (may be NULL): DS_K_NOT_FOUND for a missing key,
 * DS_K_OUT_OF_MEMORY past the worker's --max_read_latches_per_client or
 * --max_read_latches. DS_K_OK when all succeeded. */
DS_EXPORT ds_status_t ds_kv_rlatch(ds_client_t *c, size_t n, const char *const *keys,
                                   int32_t timeout_ms, ds_status_t *statuses);
/* Releases one latch this client holds on each key (none: DS_K_NOT_FOUND). */
DS_EXPORT ds_status_t ds_kv_unrlatch(ds_client_t *c, size_t n, const char *const *keys,
                                     ds_status_t *statuses);

/* Mutable objects (Yuanrong's pattern: a published object written under a
 * write latch and published again) are whole versions here: take the write
 * latch, ds_kv_mcreate the key's next version, fill it (a copy of the
 * current bytes, then the changes), ds_kv_mpublish it, release the latch.
 * Readers holding the old version keep its bytes; later reads see the new
 * one, never a half-written one. The Python Buffer does this on its first
 * write to a published buffer. Sealing (Yuanrong's seal: no later writes)
 * is the worker's: ds_object_seal. */

/* Write latches (Yuanrong's Buffer.wlatch / unwlatch): while this client
 * holds one on a key, other clients' write latches and read latches
 * (ds_kv_rlatch) of the key are refused, and their set, publish and delete
 * of it wait; this client itself may still read, latch and publish it (the
 * mutable-object pattern: wlatch, write a new version, publish, unwlatch).
 * A key held by another client is retried until timeout_ms (1..INT32_MAX)
 * has passed, then answers DS_K_TRY_AGAIN; ds_kv_rlatch does the same
 * while another client holds a write latch. A write latch is held until
 * ds_object_unwlatch, the client's close (or death), or the worker's
 * --max_read_latch_timeout_ms. A missing key: DS_K_NOT_FOUND. statuses[i]
 * (may be NULL, caller-owned, n entries) is each key's result; the return
 * is DS_K_OK when all succeeded, else the first failure's code. */
DS_EXPORT ds_status_t ds_object_wlatch(ds_client_t *c, size_t n, const char *const *keys,
                                       int32_t timeout_ms, ds_status_t *statuses);
/* Releases one write latch this client holds on each key (none: DS_K_NOT_FOUND). */
DS_EXPORT ds_status_t ds_object_unwlatch(ds_client_t *c, size_t n, const char *const *keys,
                                         ds_status_t *statuses);

/* Seals each key's current version (Yuanrong's Buffer.seal, after its
 * publish): on the worker that holds it, a later set or publish of the key
 * by any client answers DS_K_OC_ALREADY_SEALED and the sealed version stays
 * (ds_kv_del still deletes it; an NX set keeps it, as for any existing key).
 * A missing key: DS_K_NOT_FOUND. statuses[i] (may be NULL, caller-owned, n
 * entries) is each key's result; the return is DS_K_OK when all succeeded,
 * else the first failure's code. In a cluster the mark is the key's owner's
 * as well: a set or publish through any worker is refused (message "...
 * already be sealed.", Yuanrong's), until the key is deleted. */
DS_EXPORT ds_status_t ds_object_seal(ds_client_t *c, size_t n, const char *const *keys,
                                     ds_status_t *statuses);

/* ---- global references (Yuanrong's ObjectClient) ---- */

/* In a cluster, a key whose owner changed (a worker died or joined) is
 * rebuilt at its new owner from the other workers; meanwhile its latches,
 * their releases, seals, global references, counts and nested references
 * answer DS_K_TRY_AGAIN (message naming the rebuild). These calls ask again
 * for such keys until the client's request timeout (latches: their
 * timeout_ms) has passed, so a caller sees it only when the rebuild takes
 * longer. */

/* Adds one global reference to each key (a key may be referenced before it
 * is put). statuses[i] (may be NULL) is each key's result; DS_K_OK when any
 * succeeded, else the first failure's code. In a cluster the count is the
 * cluster's (kept by the key's owner), whichever worker a client talks to. */
DS_EXPORT ds_status_t ds_object_g_increase_ref(ds_client_t *c, size_t n, const char *const *keys,
                                               ds_status_t *statuses);
/* Drops one global reference this client added to each key; when a key's
 * count (all clients') returns to 0 and no parent holds it
 * (ds_object_set_nested) the object is deleted. A key without a reference
 * of this client: DS_K_NOT_FOUND (Yuanrong's Python g_decrease_ref skips
 * such keys rather than report them). References are this client's: when
 * it closes, or dies, the worker drops the ones it still holds (Yuanrong's
 * ReleaseGRefs), deleting the objects left with none. */
DS_EXPORT ds_status_t ds_object_g_decrease_ref(ds_client_t *c, size_t n, const char *const *keys,
                                               ds_status_t *statuses);
/* Nested references (Yuanrong's Buffer.publish / seal / ObjectClient.put
 * with nested_object_keys): parent holds each of nested_keys (n up to
 * DS_MAX_BATCH - 1; the caller keeps ownership of the strings) in place of
 * the keys it held before (n 0: none). A held key is not deleted when its
 * own global references end, and its query_global_ref_num does not count the
 * hold; when the parent's global references end (the parent is deleted),
 * its holds are dropped and a held key with no references left is deleted
 * with it, and so on down. Holds are the worker's, not the client's: they
 * outlive the client that set them. In a cluster a parent's holds are kept
 * by its owner and each held key's by that key's owner, whichever worker
 * the clients talk to; this returns once every owner has them. A KV delete
 * of the parent lets go of its holds too. */
DS_EXPORT ds_status_t ds_object_set_nested(ds_client_t *c, const char *parent, size_t n,
                                           const char *const *nested_keys);
/* Yuanrong's ObjMetaInfo: an object's size and where it is. */
typedef struct {
    uint64_t size;      /* 0 when the object is not found */
    char location[300]; /* "host:port" of the worker holding it; "" when not found */
} ds_obj_meta_t;

/* Yuanrong's GetObjMetaInfo: metas[i] (caller-owned, n entries) for each
 * key. tenant_id must be NULL or "" (this datasystem has no tenants:
 * DS_K_NOT_AUTHORIZED otherwise). The location is the worker this client is
 * connected to, which answered for the object (in a cluster it may keep
 * the data elsewhere). statuses[i] (may be NULL): DS_K_NOT_FOUND for a
 * missing key. DS_K_OK when any key was found, as Yuanrong's. */
DS_EXPORT ds_status_t ds_object_get_meta_info(ds_client_t *c, const char *tenant_id, size_t n,
                                              const char *const *keys, ds_obj_meta_t *metas,
                                              ds_status_t *statuses);
/* The key's global reference count (0 when it has none). */
DS_EXPORT ds_status_t ds_object_query_global_ref_num(ds_client_t *c, const char *key,
                                                     uint32_t *count);

/* ---- request context (Yuanrong's Context.set_trace_id) ---- */

/* Sets this thread's trace id: every later request of this thread carries
 * it and the worker prints it in its log lines about them. 1..128 bytes of
 * [A-Za-z0-9._:-]; NULL or "" clears it. */
DS_EXPORT ds_status_t ds_context_set_trace_id(const char *trace_id);

/* Checks a key against the key rules without talking to the worker. */
DS_EXPORT ds_status_t ds_key_validate(const char *key, size_t len);

#ifdef __cplusplus
}
#endif
#endif
