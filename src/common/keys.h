/* Key validation shared by client (early, friendly errors) and worker (the
 * authority: it never trusts a client to have checked). */
#ifndef DS_COMMON_KEYS_H
#define DS_COMMON_KEYS_H

#include <stdbool.h>
#include <stddef.h>

/* 0 when key[0..len) is a valid key; else -1 with a message naming the
 * offending byte or length. */
int ds__key_check(const char *key, size_t len, char *msg, size_t cap);

#endif
