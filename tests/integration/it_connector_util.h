/* Helpers shared by the connector integration tests (it_connector*.c): build
 * a datasystem-backed connector aimed at a harness worker, time calls, and
 * ask the store directly what a connector left there. Header-only, like
 * it_fault_util.h, since each test is its own program. */
#ifndef IT_CONNECTOR_UTIL_H
#define IT_CONNECTOR_UTIL_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/net.h"
#include "harness.h"
#include "omni/connector.h"

/* Extras naming w, plus up to 4 more pairs (NULL-terminated list). Strings
 * live in the struct, so a spec built from it is valid while it is. */
typedef struct {
    char port[16];
    omni_kv_t kv[12];
    omni_connector_spec_t spec;
} itc_spec_t;

static inline const omni_connector_spec_t *itc_spec(itc_spec_t *s, const dst_worker_t *w,
                                                    const char *name, const char *const *more)
{
    size_t n = 0;
    snprintf(s->port, sizeof(s->port), "%d", w->port);
    s->kv[n++] = (omni_kv_t){"host", w->host};
    s->kv[n++] = (omni_kv_t){"port", s->port};
    if (w->sockdir[0] != '\0') s->kv[n++] = (omni_kv_t){"unix_socket_dir", w->sockdir};
    const char *token = getenv("DS_TEST_TOKEN");
    if (token != NULL) s->kv[n++] = (omni_kv_t){"token", token};
    for (size_t i = 0; more != NULL && more[i] != NULL && n + 1 < 12; i += 2)
        s->kv[n++] = (omni_kv_t){more[i], more[i + 1]};
    s->spec = (omni_connector_spec_t){name, s->kv, n};
    return &s->spec;
}

/* A connector of the given name on w; more = extra key/value pairs. */
static inline omni_connector_t *itc_open(const dst_worker_t *w, const char *name,
                                         const char *const *more)
{
    itc_spec_t s;
    omni_connector_t *c = NULL;
    if (omni_factory_create(itc_spec(&s, w, name, more), &c) != DS_K_OK) {
        fprintf(stderr, "create %s: %s\n", name, ds_last_error());
        return NULL;
    }
    return c;
}

static inline double itc_ms_since(uint64_t t0)
{
    return (double)(ds__now_ns() - t0) / 1e6;
}

/* Whether key is published in the store. */
static inline bool itc_exists(ds_client_t *kv, const char *key)
{
    bool e = false;
    const char *k = key;
    if (ds_kv_exist(kv, 1, &k, &e) != DS_K_OK) {
        fprintf(stderr, "exist %s: %s\n", key, ds_last_error());
        return true; /* fail the caller's "gone" check loudly */
    }
    return e;
}

#endif
