/* Client sessions (see session.h): handles, and ids and keys that nobody
 * can guess. */
#include "worker/net/net.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#define NO_SLOT UINT32_MAX

static bool random_bytes(void *buf, size_t n)
{
    uint8_t *p = buf;
    while (n > 0) {
        ssize_t r = getrandom(p, n, 0);
        if (r <= 0) return false;
        p += r;
        n -= (size_t)r;
    }
    return true;
}

ds_session_t *ds__session_new(ds_net_t *net, bool is_unix)
{
    ds_session_t *s = calloc(1, sizeof(*s));
    if (s == NULL) return NULL;
    uint8_t key[DS_SESSION_KEY_HEX / 2];
    /* 0 means "a new session" on the wire, and ids never repeat in practice. */
    do {
        if (!random_bytes(&s->id, sizeof(s->id)) || !random_bytes(key, sizeof(key))) {
            free(s);
            return NULL;
        }
    } while (s->id == 0 || ds__session_find(net, s->id) != NULL);
    for (size_t i = 0; i < sizeof(key); i++)
        snprintf(s->key + 2 * i, 3, "%02x", key[i]);
    s->is_unix = is_unix;
    s->free_head = NO_SLOT;
    s->next = net->sessions;
    net->sessions = s;
    net->nsessions++;
    return s;
}

ds_session_t *ds__session_find(ds_net_t *net, uint64_t id)
{
    for (ds_session_t *s = net->sessions; s; s = s->next)
        if (s->id == id) return s;
    return NULL;
}

void ds__session_free(ds_net_t *net, ds_session_t *s)
{
    if (net->session_end) net->session_end(net->session_end_ctx, s);
    for (ds_session_t **pp = &net->sessions; *pp; pp = &(*pp)->next) {
        if (*pp == s) {
            *pp = s->next;
            net->nsessions--;
            break;
        }
    }
    for (uint32_t i = 0; i < s->nslots; i++)
        if (s->slots[i].obj) ds__store_unref(net->store, s->slots[i].obj);
    if (s->pins_off) ds__store_pins_close(net->store, s->pins_off);
    free(s->slots);
    free(s->ucx_addr);
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

uint64_t ds__session_rehandle(ds_session_t *s, uint64_t handle)
{
    ds_slot_t *sl = ds__session_slot(s, handle);
    if (sl == NULL) return 0;
    if (++sl->gen == 0) sl->gen = 1;
    return (handle & ~(uint64_t)UINT32_MAX) | sl->gen;
}

bool ds__session_release(ds_store_t *store, ds_session_t *s, uint64_t handle)
{
    ds_slot_t *sl = ds__session_slot(s, handle);
    if (sl == NULL) return false;
    if (sl->obj->state == DS_OBJ_RESERVED) s->spaces--;
    ds__store_unref(store, sl->obj);
    sl->obj = NULL;
    uint32_t idx = (uint32_t)(handle >> 32);
    sl->next_free = s->free_head;
    s->free_head = idx;
    s->live--;
    return true;
}
