/* Key rules (docs/design.md section 3): 1..1024 bytes of [a-zA-Z0-9.-_!@#%^*()+=:;]. */
#include "common/keys.h"

#include "common/error.h"
#include "ds/kv_client.h"

#include <stdio.h>
#include <string.h>

/* Which bytes a key may hold, one flag per byte value: the check runs on
 * every key of every request, on both sides. */
static const bool key_byte[256] = {
    ['a'] = 1, ['b'] = 1, ['c'] = 1, ['d'] = 1, ['e'] = 1, ['f'] = 1, ['g'] = 1, ['h'] = 1,
    ['i'] = 1, ['j'] = 1, ['k'] = 1, ['l'] = 1, ['m'] = 1, ['n'] = 1, ['o'] = 1, ['p'] = 1,
    ['q'] = 1, ['r'] = 1, ['s'] = 1, ['t'] = 1, ['u'] = 1, ['v'] = 1, ['w'] = 1, ['x'] = 1,
    ['y'] = 1, ['z'] = 1, ['A'] = 1, ['B'] = 1, ['C'] = 1, ['D'] = 1, ['E'] = 1, ['F'] = 1,
    ['G'] = 1, ['H'] = 1, ['I'] = 1, ['J'] = 1, ['K'] = 1, ['L'] = 1, ['M'] = 1, ['N'] = 1,
    ['O'] = 1, ['P'] = 1, ['Q'] = 1, ['R'] = 1, ['S'] = 1, ['T'] = 1, ['U'] = 1, ['V'] = 1,
    ['W'] = 1, ['X'] = 1, ['Y'] = 1, ['Z'] = 1, ['0'] = 1, ['1'] = 1, ['2'] = 1, ['3'] = 1,
    ['4'] = 1, ['5'] = 1, ['6'] = 1, ['7'] = 1, ['8'] = 1, ['9'] = 1, ['.'] = 1, ['-'] = 1,
    ['_'] = 1, ['!'] = 1, ['@'] = 1, ['#'] = 1, ['%'] = 1, ['^'] = 1, ['*'] = 1, ['('] = 1,
    [')'] = 1, ['+'] = 1, ['='] = 1, [':'] = 1, [';'] = 1,
};

static bool key_byte_ok(unsigned char c)
{
    return key_byte[c];
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
