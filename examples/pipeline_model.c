/* The pipeline demo's deterministic stand-in model (see pipeline_model.h).
 * Nothing here is meant to sound like speech; it only has to be cheap, to
 * depend on every input byte it is given, and to give the same bytes in
 * every process. */
#include "pipeline_model.h"

#include <math.h>
#include <stdlib.h>

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL; /* splitmix64 */
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

size_t pm_seq_len(int req)
{
    return 32 + (size_t)(mix((uint64_t)req) % (PM_MAX_SEQ - 32 + 1));
}

void pm_hidden(int req, float *out)
{
    size_t n = pm_seq_len(req) * PM_HIDDEN;
    uint64_t x = mix((uint64_t)req ^ 0x5eedULL);
    for (size_t i = 0; i < n; i++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL; /* LCG */
        out[i] = ((float)(x >> 40) / 16777216.0f - 0.5f) * 4.0f;
    }
}

void pm_token_ids(int req, int64_t *out)
{
    size_t seq = pm_seq_len(req);
    for (size_t t = 0; t < seq; t++)
        out[t] = 151644 + (int64_t)(mix((uint64_t)req * 131 + t) % 150000);
}

size_t pm_num_chunks(size_t seq)
{
    return 1 + seq / 32;
}

void pm_codes(const float *hidden, const int64_t *ids, size_t seq, size_t k, int32_t *out)
{
    size_t n = seq * PM_HIDDEN;
    for (size_t c = 0; c < PM_CODEBOOKS; c++) {
        for (size_t f = 0; f < PM_FRAMES; f++) {
            size_t i = (k * PM_CODEBOOKS * PM_FRAMES + c * PM_FRAMES + f) * 7 % n;
            int32_t q = (int32_t)(fabsf(hidden[i]) * 4096.0f);
            out[c * PM_FRAMES + f] = (q ^ (int32_t)ids[(k + f) % seq]) & 1023;
        }
    }
}

uint64_t pm_decode(const float *hidden, size_t seq, size_t k)
{
    float state[PM_DECODE_DIM] = {0};
    for (size_t f = 0; f < PM_FRAMES; f++) {
        const float *in = hidden + ((k * PM_FRAMES + f) % seq) * PM_HIDDEN;
        for (size_t d = 0; d < PM_DECODE_DIM; d++) {
            const float *w = hidden + ((d * 7 + f) % seq) * PM_HIDDEN;
            float acc = 0.5f * state[d];
            for (size_t i = 0; i < PM_HIDDEN; i++)
                acc += in[i] * w[i];
            state[d] = acc / (1.0f + fabsf(acc)); /* bounded, as an activation keeps it */
        }
    }
    return pm_fnv(PM_FNV_INIT, state, sizeof(state));
}

void pm_waveform(const int32_t *codes, size_t k, float *out)
{
    for (size_t f = 0; f < PM_FRAMES; f++) {
        float pitch = 0.01f + (float)codes[f] * 0.0002f;
        float amp = 0.05f + (float)codes[PM_FRAMES + f] / 4096.0f;
        for (size_t s = 0; s < PM_HOP; s++) {
            float t = (float)(k * PM_CHUNK_SAMPLES + f * PM_HOP + s);
            out[f * PM_HOP + s] = amp * sinf(pitch * t);
        }
    }
}

uint64_t pm_fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ULL;
    return h;
}

uint64_t pm_reference(int req, size_t *nsamples)
{
    size_t seq = pm_seq_len(req), chunks = pm_num_chunks(seq);
    float *hidden = malloc(seq * PM_HIDDEN * sizeof(float));
    int64_t ids[PM_MAX_SEQ];
    int32_t codes[PM_CODEBOOKS * PM_FRAMES];
    static _Thread_local float wave[PM_CHUNK_SAMPLES];
    uint64_t h = PM_FNV_INIT;
    *nsamples = 0;
    if (hidden == NULL) return 0;
    pm_hidden(req, hidden);
    pm_token_ids(req, ids);
    for (size_t k = 0; k < chunks; k++) {
        pm_codes(hidden, ids, seq, k, codes);
        pm_waveform(codes, k, wave);
        h = pm_fnv(h, wave, sizeof(wave));
        *nsamples += PM_CHUNK_SAMPLES;
    }
    free(hidden);
    return h;
}
