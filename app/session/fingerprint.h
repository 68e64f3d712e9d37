/* Fingerprints that tie a session and a KV snapshot to the model that made them. The weights are
 * sampled, not read whole: config.json, the safetensors header, the file size and 64 chunks of 4
 * KiB spread over the data (enough to tell checkpoints apart without reading gigabytes at
 * start-up). */
#ifndef KVCHAT_FINGERPRINT_H
#define KVCHAT_FINGERPRINT_H

#include <stddef.h>
#include <stdint.h>

uint64_t fp_hash(uint64_t h, const void *data, size_t n);
/* 16 hex digits; -1 when a file cannot be read. */
int fp_model(const char *dir, char out[17]);
int fp_tokenizer(const char *dir, char out[17]);

#endif
