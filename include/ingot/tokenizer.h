/* Byte-level BPE tokenizer (GPT-2 / HF `tokenizers` style): the text is cut
 * at added/special tokens, split into pieces by the model's pre-tokenizer
 * regexes (PCRE2), each piece's bytes are mapped through the GPT-2
 * byte-to-unicode alphabet and merged by rank. Read from GGUF metadata
 * (tokenizer.ggml.*) or an HF tokenizer.json. A tokenizer is immutable after
 * loading: encode/decode may run on several threads at once. */
#ifndef INGOT_TOKENIZER_H
#define INGOT_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ingot_tokenizer ingot_tokenizer;

/* From tokenizer.ggml.* metadata (model "gpt2"; pre "gpt2"/"default",
 * "llama-bpe"/"llama3"/"smaug-bpe", "qwen2", "smollm"/"starcoder", ...). NULL
 * and an error naming the missing/bad key on failure. */
ingot_tokenizer *ingot_tokenizer_from_gguf(const ingot_gguf *g);
/* From an HF tokenizer.json (model.type BPE, byte-level pre-tokenizer). bos/eos
 * come from a tokenizer_config.json beside it when there is one. */
ingot_tokenizer *ingot_tokenizer_from_json(const char *path);
void ingot_tokenizer_free(ingot_tokenizer *t);

int64_t ingot_tokenizer_vocab_size(const ingot_tokenizer *t);
int32_t ingot_tokenizer_bos(const ingot_tokenizer *t); /* -1 if none */
int32_t ingot_tokenizer_eos(const ingot_tokenizer *t); /* -1 if none */
/* Control / added special tokens (false for out-of-range ids). */
bool ingot_tokenizer_is_special(const ingot_tokenizer *t, int32_t id);

/* Encode UTF-8 text (invalid UTF-8 is encoded byte by byte): writes
 * min(count, cap) ids and returns count (call again with a bigger buffer if
 * count > cap); -1 and an error on failure. parse_special: special tokens
 * written in the text become their ids (non-special added tokens always do). */
int64_t ingot_tokenize(const ingot_tokenizer *t, const char *text, size_t len, bool parse_special,
                       int32_t *ids, int64_t cap);
/* Decode to UTF-8 bytes (pieces map back through the byte alphabet; invalid
 * UTF-8 is kept as bytes). Writes min(count, cap) bytes, no NUL, and returns
 * the byte count (may exceed cap); -1 and an INGOT_ERR_INDEX error for an id
 * out of range. skip_special drops special tokens. */
int64_t ingot_detokenize(const ingot_tokenizer *t, const int32_t *ids, int64_t n, bool skip_special,
                         char *out, int64_t cap);

/* ChatML prompt for n messages ("<|im_start|>role\ncontent<|im_end|>\n"); if
 * the first role is not "system" and default_system is not NULL, a system
 * message with it comes first; add_generation_prompt appends
 * "<|im_start|>assistant\n". Writes min(count, cap) bytes and a NUL if room
 * is left; returns the byte count (may exceed cap), -1 on bad arguments. */
int64_t ingot_chat_template(const char *const *roles, const char *const *contents, int n,
                            const char *default_system, bool add_generation_prompt, char *out,
                            int64_t cap);

#ifdef __cplusplus
}
#endif
#endif
