/* Big buffers that are cheap to fill on first touch (see bigbuf.c for why
 * big ones are huge-page-backed mappings). Used for the memory the client
 * library and libomniconn hand to callers. */
#ifndef DS_COMMON_BIGBUF_H
#define DS_COMMON_BIGBUF_H

#include <stddef.h>

/* size bytes, 64-byte aligned, uninitialized; NULL when memory runs out. */
void *ds__bigbuf_alloc(size_t size);
/* Releases a buffer from ds__bigbuf_alloc. NULL is fine. */
void ds__bigbuf_free(void *p);

#endif
