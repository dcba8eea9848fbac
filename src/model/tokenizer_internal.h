/* Builder shared by the tokenizer loaders (GGUF in tokenizer.c, tokenizer.json
 * in tokenizer_json.c). Each call returns false with the error set. */
#ifndef INGOT_MODEL_TOKENIZER_INTERNAL_H
#define INGOT_MODEL_TOKENIZER_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ingot/tokenizer.h"

/* Token kinds (GGUF token_type values). */
enum {
  TOK_NORMAL = 1,
  TOK_UNKNOWN = 2,
  TOK_CONTROL = 3,
  TOK_USER = 4,
  TOK_UNUSED = 5,
  TOK_BYTE = 6
};

/* Pre-tokenizer patterns (HF `tokenizers` forms). */
#define TOK_RE_GPT2 \
  "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"
#define TOK_RE_LLAMA3                                                        \
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| " \
  "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define TOK_RE_QWEN2                                                    \
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| " \
  "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define TOK_RE_DIGIT "\\p{N}"
#define TOK_RE_DIGITS "\\p{N}+"

/* Vocabulary of n tokens, all empty and TOK_UNUSED until set. */
ingot_tokenizer *tok_new(int64_t n);
/* Token id's text as stored (byte-level alphabet for normal tokens, raw
 * text for control/user tokens) and kind. */
bool tok_set_token(ingot_tokenizer *t, int32_t id, const char *s, size_t len, int kind);
/* After all tokens: index the vocabulary. */
bool tok_index(ingot_tokenizer *t);
/* Id of a token text (-1 if absent); valid after tok_index. */
int32_t tok_find(const ingot_tokenizer *t, const char *s, size_t len);
/* Merge "a b" of rank = call order; pairs whose parts or result are not in
 * the vocabulary are skipped (returns true). */
bool tok_add_merge(ingot_tokenizer *t, const char *a, size_t alen, const char *b, size_t blen);
/* Append a pre-tokenizer split stage (an "isolated" regex split). */
bool tok_add_split(ingot_tokenizer *t, const char *pattern);
void tok_set_options(ingot_tokenizer *t, int32_t bos, int32_t eos, bool ignore_merges);
/* ByteLevel(add_prefix_space): a space goes before every piece made by the
 * splits added so far that does not start with one. */
void tok_set_prefix_space(ingot_tokenizer *t);
/* Final checks and tables; frees t and returns NULL on failure. */
ingot_tokenizer *tok_finish(ingot_tokenizer *t);

#endif
