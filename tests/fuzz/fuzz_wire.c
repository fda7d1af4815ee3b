/* libFuzzer target for the wire codec (src/common/wire.c): the input is one
 * frame, a 32-byte header and its metadata. The header goes through
 * ds__wire_header_decode; a header that decodes must re-encode to the same
 * 32 bytes. The metadata is then read with the layout of its opcode (request
 * or response, by the header's flag) using the ds__rbuf calls the worker and
 * client use, and a message that parses completely must re-encode, through the
 * ds__wbuf writers, to exactly the bytes it came from. Any crash, sanitizer
 * report or failed check is a bug. */
#include "layouts.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_wire: check failed: %s (line %d)\n", #cond, __LINE__);           \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < DS_WIRE_HEADER_LEN) return 0;
    /* The worker's default frame limit (--max_frame_mb 2048). */
    const uint64_t max_data = 2048ull << 20;
    ds_wire_header_t h;
    char err[256];
    int rc = ds__wire_header_decode(data, max_data, &h, err, sizeof(err));
    if (rc != 0) {
        CHECK(err[0] != '\0');
        return 0;
    }
    CHECK(h.magic == DS_WIRE_MAGIC && h.version == DS_WIRE_VERSION);
    CHECK(ds__opcode_name(h.opcode) != NULL);
    CHECK(h.meta_len <= DS_WIRE_MAX_META && h.data_len <= max_data);
    uint8_t again[DS_WIRE_HEADER_LEN];
    ds__wire_header_encode(&h, again);
    CHECK(memcmp(again, data, DS_WIRE_HEADER_LEN) == 0);

    const uint8_t *meta = data + DS_WIRE_HEADER_LEN;
    size_t avail = size - DS_WIRE_HEADER_LEN;
    size_t mlen = h.meta_len < avail ? h.meta_len : avail;
    ds_wbuf_t echo;
    ds__wbuf_init(&echo);
    fz_parse_t p;
    if (h.flags & DS_FLAG_RESPONSE)
        fz_parse_response(h.opcode, meta, mlen, &echo, &p);
    else
        fz_parse_request(h.opcode, meta, mlen, &echo, &p);
    CHECK(!echo.oom);
    if (p.complete) {
        CHECK(echo.len == mlen);
        CHECK(mlen == 0 || memcmp(echo.buf, meta, mlen) == 0);
    } else {
        /* Whatever was read before the error re-encodes to a prefix. */
        CHECK(echo.len <= mlen);
        CHECK(echo.len == 0 || memcmp(echo.buf, meta, echo.len) == 0);
    }
    ds__wbuf_free(&echo);
    return 0;
}
