/* Client sessions: a client's identity across its connections. A client
 * opens several connections (one per concurrent thread) that share one
 * session, so a pin taken on one connection can be released on another. The
 * session owns the references behind its handles; when its last connection
 * closes - including when the client process dies - every reference is
 * dropped, so a crashed reader never leaks arena space.
 *
 * A session is joined by its id and its key: the id is 64 random bits, the
 * key 128 more that only the connection that created the session is told,
 * and a session created over the Unix socket is never joined over TCP (nor
 * the other way round). So no client can guess its way into another's
 * session and release its pins. */
#ifndef DS_WORKER_NET_SESSION_H
#define DS_WORKER_NET_SESSION_H

#include <stdbool.h>
#include <stdint.h>

#include "worker/store/store.h"

#define DS_SESSION_KEY_HEX 32

typedef struct ds_net ds_net_t;
typedef struct ds_session ds_session_t;

/* A handle slot: a reference the session holds on an object (a reader's pin
 * or an unpublished creation). Handles are (slot index << 32 | generation) so a
 * stale or forged handle never reaches another slot's object. */
typedef struct {
    ds_obj_t *obj;
    uint32_t gen;
    uint8_t existence; /* for CREATE: applied at publish */
    uint32_t next_free;
} ds_slot_t;

struct ds_session {
    ds_session_t *next;
    uint64_t id;
    char key[DS_SESSION_KEY_HEX + 1];
    uint32_t nconns;
    bool is_unix; /* created over the Unix socket: only Unix connections join */
    bool shm;     /* mapped the arena */
    ds_slot_t *slots;
    uint32_t nslots, cap, free_head, live;
    uint32_t spaces; /* live reservations (DS_OBJ_RESERVED slots), see ops_set.c */
    char *ucx_addr;  /* the UCX address this session registered and the worker vetted (UCX_ADDR) */
    uint64_t pins_off; /* its readers' pin table in the arena (store.h); 0 = none */
    /* Data bytes of its SETs being received or not yet answered, all its
     * connections together (guard.c). */
    uint64_t inflight;
    /* guard.c: the pause its last quota refusal got (ms, 0: none yet) and
     * when that pause ends. */
    uint32_t pause_ms;
    uint64_t pause_end_ms;
};

/* A new session with a random id and key; NULL when out of memory or
 * without randomness. */
ds_session_t *ds__session_new(ds_net_t *net, bool is_unix);
ds_session_t *ds__session_find(ds_net_t *net, uint64_t id);
/* Drops every handle's reference and frees the session. */
void ds__session_free(ds_net_t *net, ds_session_t *s);
/* Takes over the caller's reference to obj; returns the handle, 0 on OOM. */
uint64_t ds__session_add(ds_session_t *s, ds_obj_t *obj, uint8_t existence);
/* The slot for a handle, or NULL if it is not live. */
ds_slot_t *ds__session_slot(ds_session_t *s, uint64_t handle);
/* Gives a live handle's slot a new handle (same object, same reference);
 * the old handle stops working. 0 if handle is not live. */
uint64_t ds__session_rehandle(ds_session_t *s, uint64_t handle);
/* Drops the handle's reference. false if the handle is not live. */
bool ds__session_release(ds_store_t *store, ds_session_t *s, uint64_t handle);

#endif
