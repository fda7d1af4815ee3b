/* A small blocking etcd v3 client over etcd's JSON gateway (HTTP + libcurl):
 * leases, put, prefix range, delete and a streaming prefix watch. Used only
 * from the cluster's membership thread, never from the event loop. Several
 * endpoints may be given ("h1:p1,h2:p2"); each call tries them in turn,
 * starting with the one that answered last. Shared by the worker (membership)
 * and dscli (query cluster). */
#ifndef DS_COMMON_ETCD_H
#define DS_COMMON_ETCD_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct ds_etcd ds_etcd_t;

typedef struct {
    char *key;
    char *value;
    int64_t mod_revision; /* etcd's revision of the key's last change */
} ds_etcd_kv_t;

/* endpoints: comma-separated host:port list. NULL with a message on bad input. */
ds_etcd_t *ds__etcd_new(const char *endpoints, char *err, size_t err_cap);
void ds__etcd_free(ds_etcd_t *e);

/* Each returns 0 on success, -1 with a message (unreachable, bad answer). */
int ds__etcd_grant(ds_etcd_t *e, int ttl_s, int64_t *lease, char *err, size_t err_cap);
/* *ttl_left = 0 means the lease no longer exists. */
int ds__etcd_keepalive(ds_etcd_t *e, int64_t lease, int64_t *ttl_left, char *err, size_t err_cap);
int ds__etcd_revoke(ds_etcd_t *e, int64_t lease);
int ds__etcd_put(ds_etcd_t *e, const char *key, const char *value, int64_t lease, char *err,
                 size_t err_cap);
int ds__etcd_delete(ds_etcd_t *e, const char *key);
/* Every key with the prefix; free with ds__etcd_kvs_free. */
int ds__etcd_range_prefix(ds_etcd_t *e, const char *prefix, ds_etcd_kv_t **out, size_t *n,
                          char *err, size_t err_cap);
void ds__etcd_kvs_free(ds_etcd_kv_t *kvs, size_t n);

/* Watches the prefix, calling on_event for every change batch, until the
 * stream ends, an error occurs, or *stop becomes true (checked at least every
 * 200 ms). Returns 0 when stopped, -1 on error. */
int ds__etcd_watch(ds_etcd_t *e, const char *prefix, void (*on_event)(void *ctx), void *ctx,
                   atomic_bool *stop, char *err, size_t err_cap);

#endif
