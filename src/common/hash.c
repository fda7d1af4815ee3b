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
