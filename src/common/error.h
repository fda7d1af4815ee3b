/* Internal helpers for reporting errors through ds_last_error(). */
#ifndef DS_COMMON_ERROR_H
#define DS_COMMON_ERROR_H

#include "datasystem/status.h"

/* Records the message for this thread and returns code, so a caller can write
 * `return ds__set_error(DS_K_INVALID, "key is empty");`. fmt NULL uses the
 * code's default message. */
ds_status_t ds__set_error(ds_status_t code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void ds__clear_error(void);

#endif
