/* Key rules (docs/design.md section 3): 1..1024 bytes of [a-zA-Z0-9.-_!@#%^*()+=:;]. */
#include "common/keys.h"

#include "common/error.h"
#include "datasystem/kv_client.h"

#include <stdio.h>
#include <string.h>

static bool key_byte_ok(unsigned char c)
{
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
    return c != '\0' && strchr(".-_!@#%^*()+=:;", c) != NULL;
}

int ds__key_check(const char *key, size_t len, char *msg, size_t cap)
{
    if (key == NULL || len == 0) {
        snprintf(msg, cap, "key is empty");
        return -1;
    }
    if (len > DS_MAX_KEY_LEN) {
        snprintf(msg, cap, "key of %zu bytes is longer than the limit of %d", len, DS_MAX_KEY_LEN);
        return -1;
    }
    for (size_t i = 0; i < len; i++) {
        if (!key_byte_ok((unsigned char)key[i])) {
            snprintf(msg, cap, "key '%.*s' has invalid byte 0x%02x at offset %zu",
                     (int)(len > 64 ? 64 : len), key, (unsigned char)key[i], i);
            return -1;
        }
    }
    return 0;
}

ds_status_t ds_key_validate(const char *key, size_t len)
{
    char msg[256];
    if (ds__key_check(key, len, msg, sizeof(msg)) != 0)
        return ds__set_error(DS_K_INVALID, "%s", msg);
    return DS_K_OK;
}
