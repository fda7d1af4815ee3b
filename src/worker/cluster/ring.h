/* Consistent-hash ring over the live cluster members: each member owns
 * DS_RING_TOKENS points (MurmurHash3 of "addr#i"); a key belongs to the member
 * with the first point at or after MurmurHash3(key), wrapping around. Every
 * worker builds the same ring from the same member list, so they agree on
 * each key's metadata owner without talking. Immutable once built. */
#ifndef DS_WORKER_RING_H
#define DS_WORKER_RING_H

#include <stddef.h>
#include <stdint.h>

#define DS_RING_TOKENS 16

typedef struct ds_ring ds_ring_t;

/* Copies the addresses. NULL on out of memory; n may be 0 (empty ring). */
ds_ring_t *ds__ring_build(const char *const *addrs, size_t n);
void ds__ring_free(ds_ring_t *r);
/* The owning member's address, or NULL for an empty ring. */
const char *ds__ring_owner(const ds_ring_t *r, const char *key, size_t len);
size_t ds__ring_size(const ds_ring_t *r);
const char *ds__ring_member(const ds_ring_t *r, size_t i);
/* The ring's points in ascending hash order: point i's hash and owner. */
size_t ds__ring_npoints(const ds_ring_t *r);
uint32_t ds__ring_point(const ds_ring_t *r, size_t i, const char **owner);
/* True when addr is a member. */
int ds__ring_has(const ds_ring_t *r, const char *addr);

#endif
