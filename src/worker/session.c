/* Client sessions. A client opens several connections (one per concurrent
 * thread) that share one session, so a pin taken on one connection can be
 * released on another. The session owns the references behind its handles;
 * when its last connection closes - including when the client process dies -
 * every reference is dropped, so a crashed reader never leaks arena space. */
#include "worker/server.h"

#include <stdlib.h>
#include <string.h>

#define NO_SLOT UINT32_MAX

ds_session_t *ds__session_new(ds_server_t *srv)
{
    ds_session_t *s = calloc(1, sizeof(*s));
    if (s == NULL) return NULL;
    s->id = ++srv->next_session;
    s->free_head = NO_SLOT;
    s->next = srv->sessions;
    srv->sessions = s;
    return s;
}

ds_session_t *ds__session_find(ds_server_t *srv, uint64_t id)
{
    for (ds_session_t *s = srv->sessions; s; s = s->next)
        if (s->id == id) return s;
    return NULL;
}

void ds__session_free(ds_server_t *srv, ds_session_t *s)
{
    for (ds_session_t **pp = &srv->sessions; *pp; pp = &(*pp)->next) {
        if (*pp == s) {
            *pp = s->next;
            break;
        }
    }
    for (uint32_t i = 0; i < s->nslots; i++)
        if (s->slots[i].obj) ds__store_unref(srv->store, s->slots[i].obj);
    free(s->slots);
    free(s);
}

uint64_t ds__session_add(ds_session_t *s, ds_obj_t *obj, uint8_t existence)
{
    uint32_t idx;
    if (s->free_head != NO_SLOT) {
        idx = s->free_head;
        s->free_head = s->slots[idx].next_free;
    } else {
        if (s->nslots == s->cap) {
            uint32_t cap = s->cap ? s->cap * 2 : 16;
            ds_slot_t *ns = realloc(s->slots, cap * sizeof(*ns));
            if (ns == NULL) return 0;
            s->slots = ns;
            s->cap = cap;
        }
        idx = s->nslots++;
        s->slots[idx].gen = 0;
    }
    ds_slot_t *sl = &s->slots[idx];
    sl->obj = obj;
    sl->gen++;
    sl->existence = existence;
    sl->next_free = NO_SLOT;
    s->live++;
    return ((uint64_t)idx << 32) | sl->gen;
}

ds_slot_t *ds__session_slot(ds_session_t *s, uint64_t handle)
{
    uint32_t idx = (uint32_t)(handle >> 32), gen = (uint32_t)handle;
    if (idx >= s->nslots) return NULL;
    ds_slot_t *sl = &s->slots[idx];
    if (sl->obj == NULL || sl->gen != gen) return NULL;
    return sl;
}

bool ds__session_release(ds_server_t *srv, ds_session_t *s, uint64_t handle)
{
    ds_slot_t *sl = ds__session_slot(s, handle);
    if (sl == NULL) return false;
    ds__store_unref(srv->store, sl->obj);
    sl->obj = NULL;
    uint32_t idx = (uint32_t)(handle >> 32);
    sl->next_free = s->free_head;
    s->free_head = idx;
    s->live--;
    return true;
}
