/* The message layouts documented per opcode in src/common/wire.h, read with
 * the same ds__rbuf calls the worker (src/worker/ops/ops.c) and the client make,
 * for the fuzz targets. Each parse copies every field it reads into a
 * ds_wbuf_t with the matching writer, so a caller can check that the codec
 * round-trips: a message that parses completely must re-encode to the very
 * bytes it came from. */
#ifndef DS_FUZZ_LAYOUTS_H
#define DS_FUZZ_LAYOUTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/wire.h"

typedef struct {
    bool complete;        /* every byte consumed, no read past the end */
    bool error_only;      /* a response holding only its error string */
    uint64_t inline_data; /* GET response: bytes of inline values announced */
    uint64_t set_data;    /* SET request: bytes of values announced */
    uint32_t nkeys;       /* keys (or handles) the message listed */
} fz_parse_t;

/* Parses a request's metadata; echo (may be NULL) receives the re-encoding. */
void fz_parse_request(uint16_t op, const uint8_t *meta, size_t len, ds_wbuf_t *echo,
                      fz_parse_t *out);
/* Parses a response's metadata (the error string first, then the layout). */
void fz_parse_response(uint16_t op, const uint8_t *meta, size_t len, ds_wbuf_t *echo,
                       fz_parse_t *out);
/* True when op's successful response is only the error string. */
bool fz_response_is_bare(uint16_t op);

#endif
