/* MurmurHash3 (x86, 32-bit), used for the object table and the cluster's hash
 * ring so that every worker places a key on the same owner. */
#ifndef DS_COMMON_HASH_H
#define DS_COMMON_HASH_H

#include <stddef.h>
#include <stdint.h>

uint32_t ds__murmur3_32(const void *key, size_t len, uint32_t seed);

#endif
