/* The stand-in "model" of the pipeline demo: deterministic, cheap functions
 * that play thinker, talker and code2wav, so that every stage (and the
 * orchestrator, for its reference) can recompute what any payload of any
 * request must contain and check it byte for byte.
 *
 *   thinker   request i -> token ids int64[seq] and hidden states
 *             float32[seq, PM_HIDDEN] (seq = 32..128)
 *   talker    (hidden, ids) -> pm_num_chunks(seq) chunks of audio codes
 *             int32[PM_CODEBOOKS, PM_FRAMES]
 *   code2wav  each chunk -> PM_FRAMES * PM_HOP float32 samples; the request's
 *             waveform is the chunks' samples in order
 *
 * Checksums are FNV-1a 64 over the bytes. */
#ifndef PIPELINE_MODEL_H
#define PIPELINE_MODEL_H

#include <stddef.h>
#include <stdint.h>

#define PM_HIDDEN 1024
#define PM_MAX_SEQ 128
#define PM_CODEBOOKS 8
#define PM_FRAMES 50
#define PM_HOP 240
#define PM_CHUNK_SAMPLES (PM_FRAMES * PM_HOP)
#define PM_MAX_CHUNKS 8
#define PM_FNV_INIT 1469598103934665603ULL
/* The talker's decoder: outputs per frame, each one dot product over a
 * hidden row (PM_FRAMES * PM_DECODE_DIM * PM_HIDDEN multiply-adds a chunk). */
#define PM_DECODE_DIM 64

size_t pm_seq_len(int req);
/* seq * PM_HIDDEN floats. */
void pm_hidden(int req, float *out);
/* seq ids. */
void pm_token_ids(int req, int64_t *out);
/* How many audio-code chunks the talker emits for seq tokens (2..5). */
size_t pm_num_chunks(size_t seq);
/* Chunk k of the talker's codes: PM_CODEBOOKS * PM_FRAMES values. */
void pm_codes(const float *hidden, const int64_t *ids, size_t seq, size_t k, int32_t *out);
/* The talker's generation of chunk k: a recurrent pass over the hidden
 * states (a fixed amount of arithmetic, PM_DECODE_DIM dot products of
 * PM_HIDDEN per frame), so chunks come out over time as a real talker's
 * do; returns a digest of its final state, which the chunk carries. */
uint64_t pm_decode(const float *hidden, size_t seq, size_t k);
/* code2wav of one chunk: PM_CHUNK_SAMPLES samples. */
void pm_waveform(const int32_t *codes, size_t k, float *out);
uint64_t pm_fnv(uint64_t h, const void *p, size_t n);
/* The whole chain in one process: the checksum of request req's waveform
 * and its sample count. */
uint64_t pm_reference(int req, size_t *nsamples);

#endif
