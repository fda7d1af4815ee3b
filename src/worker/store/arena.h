/* The worker's shared-memory arena: one memfd of --shared_memory_size_mb,
 * mapped shared and pre-faulted at start so that no client write ever pays a
 * page fault on the worker's side. Local clients receive the fd over the Unix
 * socket (SCM_RIGHTS) and map it once. */
#ifndef DS_WORKER_ARENA_H
#define DS_WORKER_ARENA_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    int fd;
    uint8_t *base;
    uint64_t size;
} ds_arena_t;

/* 0, or -1 with a message (e.g. not enough memory for the arena). */
int ds__arena_create(ds_arena_t *a, uint64_t size, char *err, size_t err_cap);
void ds__arena_destroy(ds_arena_t *a);

#endif
