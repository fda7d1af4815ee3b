/* MurmurHash3 (x86, 32-bit), used for the object table and the cluster's hash
 * ring so that every worker places a key on the same owner. */
#ifndef DS_COMMON_HASH_H
#define DS_COMMON_HASH_H

#include <stddef.h>
#include <stdint.h>

uint32_t ds__murmur3_32(const void *key, size_t len, uint32_t seed);

/* FNV-1a over 8-byte words, then the tail bytes, continuing from h (start
 * with DS_SUM64_SEED): a fast checksum that tells a torn or foreign file from
 * one we wrote (the L2 backends), not a defence against an attacker. */
#define DS_SUM64_SEED 0xcbf29ce484222325ull
uint64_t ds__sum64(uint64_t h, const void *p, size_t n);

#endif
