/* The per-thread request context: Yuanrong's Context.set_trace_id. A trace id
 * set here rides on every request this thread sends afterwards (the header
 * flag DS_FLAG_TRACE, common/wire.h), and the worker prints it in its log
 * lines about those requests. */
#include "client/client_internal.h"

#include "common/error.h"

#include <string.h>

static _Thread_local char trace_id[DS_TRACE_ID_MAX + 1];

const char *ds__trace_id(void)
{
    return trace_id;
}

ds_status_t ds_context_set_trace_id(const char *id)
{
    ds__clear_error();
    size_t n = id ? strlen(id) : 0;
    if (n > DS_TRACE_ID_MAX)
        return ds__set_error(DS_K_INVALID, "trace id of %zu bytes exceeds %d", n, DS_TRACE_ID_MAX);
    for (size_t i = 0; i < n; i++) {
        char c = id[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '.' || c == '_' || c == ':' || c == '-';
        if (!ok)
            return ds__set_error(DS_K_INVALID,
                                 "trace id has invalid byte 0x%02x at offset %zu (allowed: "
                                 "[A-Za-z0-9._:-])",
                                 (unsigned char)c, i);
    }
    if (n) memcpy(trace_id, id, n);
    trace_id[n] = '\0';
    return DS_K_OK;
}
