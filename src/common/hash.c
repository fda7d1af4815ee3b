/* MurmurHash3_x86_32, written from Austin Appleby's public-domain description, and the
 * word-wise FNV-1a checksum the L2 backends keep with each file. */
#include "common/hash.h"

#include <string.h>

static inline uint32_t rotl32(uint32_t x, int r)
{
    return (x << r) | (x >> (32 - r));
}

uint32_t ds__murmur3_32(const void *key, size_t len, uint32_t seed)
{
    const uint8_t *data = key;
    const size_t nblocks = len / 4;
    const uint32_t c1 = 0xcc9e2d51, c2 = 0x1b873593;
    uint32_t h = seed;
    for (size_t i = 0; i < nblocks; i++) {
        uint32_t k;
        memcpy(&k, data + i * 4, 4); /* little-endian hosts only, like the reference */
        k *= c1;
        k = rotl32(k, 15);
        k *= c2;
        h ^= k;
        h = rotl32(h, 13);
        h = h * 5 + 0xe6546b64;
    }
    const uint8_t *tail = data + nblocks * 4;
    uint32_t k = 0;
    switch (len & 3) {
    case 3:
        k ^= (uint32_t)tail[2] << 16;
        /* fall through */
    case 2:
        k ^= (uint32_t)tail[1] << 8;
        /* fall through */
    case 1:
        k ^= tail[0];
        k *= c1;
        k = rotl32(k, 15);
        k *= c2;
        h ^= k;
    }
    h ^= (uint32_t)len;
    h ^= h >> 16;
    h *= 0x85ebca6b;
    h ^= h >> 13;
    h *= 0xc2b2ae35;
    h ^= h >> 16;
    return h;
}

uint64_t ds__sum64(uint64_t h, const void *p, size_t n)
{
    const uint8_t *b = p;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, b, 8);
        h = (h ^ w) * 0x100000001b3ull;
        b += 8;
        n -= 8;
    }
    while (n-- > 0)
        h = (h ^ *b++) * 0x100000001b3ull;
    return h;
}

void ds__sum4_init(ds_sum4_t *s)
{
    for (int i = 0; i < 4; i++)
        s->h[i] = DS_SUM64_SEED + (uint64_t)i;
}

void ds__sum4_update(ds_sum4_t *s, const void *p, size_t n)
{
    const uint8_t *b = p;
    uint64_t h0 = s->h[0], h1 = s->h[1], h2 = s->h[2], h3 = s->h[3];
    while (n >= 32) {
        uint64_t w[4];
        memcpy(w, b, 32);
        h0 = (h0 ^ w[0]) * 0x100000001b3ull;
        h1 = (h1 ^ w[1]) * 0x100000001b3ull;
        h2 = (h2 ^ w[2]) * 0x100000001b3ull;
        h3 = (h3 ^ w[3]) * 0x100000001b3ull;
        b += 32;
        n -= 32;
    }
    /* the tail (only in the last piece) goes to lane 0, byte-wise after
     * its words, as ds__sum64 does */
    h0 = ds__sum64(h0, b, n);
    s->h[0] = h0;
    s->h[1] = h1;
    s->h[2] = h2;
    s->h[3] = h3;
}

uint64_t ds__sum4_final(const ds_sum4_t *s)
{
    return ds__sum64(DS_SUM64_SEED, s->h, sizeof(s->h));
}
