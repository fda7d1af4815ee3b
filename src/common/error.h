/* Internal helpers for reporting errors through ds_last_error().
 *
 * One buffer per thread, one per program: the message lives in a thread-local
 * buffer in status.c, and ds_last_error() reads it. libdatasystem (the shared
 * client library) owns that buffer for every program that links it, and it
 * exports these two ds__ functions as documented internal symbols (the double
 * underscore says "not API": no compatibility promise, no public header).
 * libomniconn links the shared libdatasystem instead of compiling status.c in
 * again, so a message a connector sets lands in the same buffer the program's
 * ds_last_error() reads, whichever library the program calls it through.
 * Static builds (the worker, dscli, the tests) link exactly one copy of
 * status.c, so they share one buffer as well. */
#ifndef DS_COMMON_ERROR_H
#define DS_COMMON_ERROR_H

#include "ds/export.h"
#include "ds/status.h"

/* Records the message for this thread and returns code, so a caller can write
 * `return ds__set_error(DS_K_INVALID, "key is empty");`. fmt NULL uses the
 * code's default message. */
DS_EXPORT ds_status_t ds__set_error(ds_status_t code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
DS_EXPORT void ds__clear_error(void);

#endif
