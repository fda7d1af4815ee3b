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

/* The same step in four interleaved lanes (word i goes to lane i % 4), so
 * the four multiply chains run in parallel: about 4x the speed of
 * ds__sum64 on large values, a different value. Streaming: update with
 * pieces whose sizes are multiples of 32 bytes, except the last. */
typedef struct {
    uint64_t h[4];
} ds_sum4_t;
void ds__sum4_init(ds_sum4_t *s);
void ds__sum4_update(ds_sum4_t *s, const void *p, size_t n);
uint64_t ds__sum4_final(const ds_sum4_t *s);

#endif
