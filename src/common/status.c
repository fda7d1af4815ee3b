/* Status names and messages generated from the table in status.h, and the
 * per-thread "last error" message every failing call leaves behind. */
#include "common/error.h"

#include <stdarg.h>
#include <stdio.h>

const char *ds_status_name(int code)
{
    switch (code) {
#define DS__ST_NAME(name, num, msg)                                                                \
    case num:                                                                                      \
        return #name;
        DS_STATUS_MAP(DS__ST_NAME)
#undef DS__ST_NAME
    default:
        return "K_UNKNOWN";
    }
}

const char *ds_status_message(int code)
{
    switch (code) {
#define DS__ST_MSG(name, num, msg)                                                                 \
    case num:                                                                                      \
        return msg;
        DS_STATUS_MAP(DS__ST_MSG)
#undef DS__ST_MSG
    default:
        return "unknown status";
    }
}

static _Thread_local char last_error[1024];

const char *ds_last_error(void)
{
    return last_error;
}

ds_status_t ds__set_error(ds_status_t code, const char *fmt, ...)
{
    if (fmt == NULL) {
        snprintf(last_error, sizeof(last_error), "%s", ds_status_message(code));
        return code;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof(last_error), fmt, ap);
    va_end(ap);
    return code;
}

void ds__clear_error(void)
{
    last_error[0] = '\0';
}
