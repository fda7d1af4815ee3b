/* Allocation of the buffers libomniconn hands out for omni_free (see
 * buffer.c for why big ones are huge-page-backed mappings). */
#ifndef OMNI_CONNECTOR_BUFFER_H
#define OMNI_CONNECTOR_BUFFER_H

#include <stddef.h>

/* size bytes, 64-byte aligned, uninitialized; NULL when memory runs out. */
void *omni__buf_alloc(size_t size);
/* Releases a buffer from omni__buf_alloc. NULL is fine. */
void omni__buf_free(void *p);

#endif
