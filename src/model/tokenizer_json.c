/* HF tokenizer.json loader: model BPE (vocab + merges), added_tokens, and a
 * byte-level pre-tokenizer (ByteLevel, Split(Regex, Isolated), Digits,
 * Sequence). bos/eos come from tokenizer_config.json beside the file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fileio.h"
#include "../core/internal.h"
#include "json.h"
#include "tokenizer_internal.h"

static bool str_is(const json_doc *d, int32_t node, const char *s) {
  size_t n;
  const char *v = json_str(d, node, &n);
  return v && n == strlen(s) && memcmp(v, s, n) == 0;
}

typedef struct pre_state {
  bool byte_level, add_prefix_space;
} pre_state;

/* Regex for a Split pattern {"Regex": ...} or {"String": ...} (quoted). */
static char *split_pattern(const json_doc *d, int32_t pat) {
  size_t n;
  const char *s = json_str(d, json_get(d, pat, "Regex"), &n);
  if (s) return strndup(s, n);
  s = json_str(d, json_get(d, pat, "String"), &n);
  if (!s) return NULL;
  char *r = malloc(n * 4 + 8);
  if (!r) return NULL;
  /* \Q..\E, splitting any \E inside the literal. */
  size_t o = 0;
  memcpy(r + o, "\\Q", 2);
  o += 2;
  for (size_t i = 0; i < n; i++) {
    if (s[i] == '\\' && i + 1 < n && s[i + 1] == 'E') {
      memcpy(r + o, "\\E\\\\\\Q", 6);
      o += 6;
      continue;
    }
    r[o++] = s[i];
  }
  memcpy(r + o, "\\E", 3);
  return r;
}

static bool pre_tok(ingot_tokenizer *t, const json_doc *d, int32_t p, pre_state *st, int depth) {
  int32_t type = json_get(d, p, "type");
  if (depth > 8) return ingot_set_error(INGOT_ERR_IO, "pre_tokenizer nested too deeply"), false;
  if (str_is(d, type, "Sequence")) {
    int32_t list = json_get(d, p, "pretokenizers");
    if (json_type_of(d, list) != JSON_ARR)
      return ingot_set_error(INGOT_ERR_IO, "pre_tokenizer Sequence without a pretokenizers list"),
             false;
    for (int32_t c = json_first(d, list); c >= 0; c = json_next(d, c))
      if (!pre_tok(t, d, c, st, depth + 1)) return false;
    return true;
  }
  if (str_is(d, type, "ByteLevel")) {
    int32_t ur = json_get(d, p, "use_regex");
    bool use_regex = json_type_of(d, ur) == JSON_BOOL ? json_bool(d, ur) : true;
    st->byte_level = true;
    st->add_prefix_space = json_bool(d, json_get(d, p, "add_prefix_space"));
    if (st->add_prefix_space) tok_set_prefix_space(t);
    return !use_regex || tok_add_split(t, TOK_RE_GPT2);
  }
  if (str_is(d, type, "Digits")) {
    return tok_add_split(
        t, json_bool(d, json_get(d, p, "individual_digits")) ? TOK_RE_DIGIT : TOK_RE_DIGITS);
  }
  if (str_is(d, type, "Split")) {
    if (!str_is(d, json_get(d, p, "behavior"), "Isolated") ||
        json_bool(d, json_get(d, p, "invert")))
      return ingot_set_error(INGOT_ERR_UNSUPPORTED,
                             "pre_tokenizer Split: only behavior Isolated without invert is "
                             "supported"),
             false;
    char *re = split_pattern(d, json_get(d, p, "pattern"));
    if (!re) return ingot_set_error(INGOT_ERR_IO, "pre_tokenizer Split without a pattern"), false;
    bool ok = tok_add_split(t, re);
    free(re);
    return ok;
  }
  size_t n = 0;
  const char *ts = json_str(d, type, &n);
  ingot_set_error(INGOT_ERR_UNSUPPORTED, "pre_tokenizer type '%.*s' is not supported",
                  (int)(n > 64 ? 64 : n), ts ? ts : "(none)");
  return false;
}

/* bos/eos token text from tokenizer_config.json beside path (string or {content}). */
static int32_t config_token(ingot_tokenizer *t, const json_doc *cfg, const char *key) {
  int32_t v = json_get(cfg, json_root(cfg), key);
  if (json_type_of(cfg, v) == JSON_OBJ) v = json_get(cfg, v, "content");
  size_t n;
  const char *s = json_str(cfg, v, &n);
  return s ? tok_find(t, s, n) : -1;
}

static json_doc *load_config(const char *path) {
  const char *slash = strrchr(path, '/');
  size_t dir = slash ? (size_t)(slash - path + 1) : 0;
  char *cp = malloc(dir + 32);
  if (!cp) return NULL;
  memcpy(cp, path, dir);
  strcpy(cp + dir, "tokenizer_config.json");
  size_t len;
  char *text = model_read_file(cp, &len);
  free(cp);
  if (!text) return NULL;
  char err[16];
  json_doc *d = json_parse(text, len, err, sizeof err);
  free(text);
  return d;
}

static ingot_tokenizer *build(const json_doc *d, const char *path) {
  int32_t root = json_root(d);
  int32_t model = json_get(d, root, "model");
  if (json_type_of(d, model) != JSON_OBJ) return ingot_fail(INGOT_ERR_IO, "no \"model\" object");
  int32_t mtype = json_get(d, model, "type");
  if (mtype >= 0 && !str_is(d, mtype, "BPE"))
    return ingot_fail(INGOT_ERR_UNSUPPORTED, "model.type is not BPE");
  if (json_bool(d, json_get(d, model, "byte_fallback")))
    return ingot_fail(INGOT_ERR_UNSUPPORTED, "byte_fallback BPE (not byte-level) is not supported");
  int32_t vocab = json_get(d, model, "vocab"), merges = json_get(d, model, "merges");
  if (json_type_of(d, vocab) != JSON_OBJ)
    return ingot_fail(INGOT_ERR_IO, "model.vocab is not an object");
  if (json_type_of(d, merges) != JSON_ARR)
    return ingot_fail(INGOT_ERR_IO, "model.merges is not a list");
  int32_t added = json_get(d, root, "added_tokens");
  if (added >= 0 && json_type_of(d, added) != JSON_ARR)
    return ingot_fail(INGOT_ERR_IO, "added_tokens is not a list");
  /* Vocabulary size: one past the largest id. */
  int64_t n = 0;
  for (int pass = 0; pass < 2; pass++) {
    int32_t list = pass ? added : vocab;
    for (int32_t c = json_first(d, list); c >= 0; c = json_next(d, c)) {
      int32_t idn = pass ? json_get(d, c, "id") : c;
      double id = json_num(d, idn);
      if (json_type_of(d, idn) != JSON_NUM || id < 0 || id >= INT32_MAX ||
          id != (double)(int64_t)id)
        return ingot_fail(INGOT_ERR_IO, "%s has a bad token id",
                          pass ? "added_tokens" : "model.vocab");
      if ((int64_t)id + 1 > n) n = (int64_t)id + 1;
    }
  }
  if (n == 0) return ingot_fail(INGOT_ERR_IO, "empty vocabulary");
  ingot_tokenizer *t = tok_new(n);
  if (!t) return NULL;
  for (int32_t c = json_first(d, vocab); c >= 0; c = json_next(d, c)) {
    size_t kl;
    const char *k = json_key(d, c, &kl);
    if (!tok_set_token(t, (int32_t)json_num(d, c), k, kl, TOK_NORMAL)) goto fail;
  }
  for (int32_t c = json_first(d, added); c >= 0; c = json_next(d, c)) {
    size_t kl;
    const char *k = json_str(d, json_get(d, c, "content"), &kl);
    if (!k) {
      ingot_set_error(INGOT_ERR_IO, "added token without content");
      goto fail;
    }
    int kind = json_bool(d, json_get(d, c, "special")) ? TOK_CONTROL : TOK_USER;
    if (!tok_set_token(t, (int32_t)json_num(d, json_get(d, c, "id")), k, kl, kind)) goto fail;
  }
  if (!tok_index(t)) goto fail;
  for (int32_t c = json_first(d, merges); c >= 0; c = json_next(d, c)) {
    const char *a, *b;
    size_t al, bl;
    if (json_type_of(d, c) == JSON_STR) { /* "left right" */
      size_t n2;
      const char *s = json_str(d, c, &n2);
      const char *sp = n2 > 1 ? memchr(s + 1, ' ', n2 - 1) : NULL;
      if (!sp) {
        ingot_set_error(INGOT_ERR_IO, "merge '%.*s' is not 'left right'", (int)(n2 > 64 ? 64 : n2),
                        s);
        goto fail;
      }
      a = s;
      al = (size_t)(sp - s);
      b = sp + 1;
      bl = n2 - al - 1;
    } else { /* ["left", "right"] */
      int32_t x = json_first(d, c), y = json_next(d, x);
      a = json_str(d, x, &al);
      b = json_str(d, y, &bl);
      if (json_len(d, c) != 2 || !a || !b) {
        ingot_set_error(INGOT_ERR_IO, "a merge is neither \"left right\" nor [left, right]");
        goto fail;
      }
    }
    if (!tok_add_merge(t, a, al, b, bl)) goto fail;
  }
  int32_t norm = json_get(d, root, "normalizer");
  /* NFC is accepted (and not applied): text that is already NFC encodes the same. */
  if (norm >= 0 && json_type_of(d, norm) != JSON_NULL &&
      !str_is(d, json_get(d, norm, "type"), "NFC")) {
    ingot_set_error(INGOT_ERR_UNSUPPORTED, "normalizers are not supported (except NFC)");
    goto fail;
  }
  pre_state st = {false, false};
  int32_t pre = json_get(d, root, "pre_tokenizer");
  if (json_type_of(d, pre) != JSON_OBJ || !pre_tok(t, d, pre, &st, 0)) {
    if (json_type_of(d, pre) != JSON_OBJ)
      ingot_set_error(INGOT_ERR_UNSUPPORTED, "no pre_tokenizer");
    goto fail;
  }
  if (!st.byte_level) {
    ingot_set_error(INGOT_ERR_UNSUPPORTED, "not a byte-level BPE (no ByteLevel pre-tokenizer)");
    goto fail;
  }
  int32_t bos = -1, eos = -1;
  json_doc *cfg = load_config(path);
  if (cfg) {
    bos = config_token(t, cfg, "bos_token");
    eos = config_token(t, cfg, "eos_token");
    json_free(cfg);
  } else {
    static const char *bos_names[] = {"<|begin_of_text|>", "<s>"};
    static const char *eos_names[] = {"<|end_of_text|>", "<|endoftext|>", "</s>"};
    for (size_t i = 0; i < 2 && bos < 0; i++) bos = tok_find(t, bos_names[i], strlen(bos_names[i]));
    for (size_t i = 0; i < 3 && eos < 0; i++) eos = tok_find(t, eos_names[i], strlen(eos_names[i]));
  }
  tok_set_options(t, bos, eos, json_bool(d, json_get(d, model, "ignore_merges")));
  return tok_finish(t);
fail:
  ingot_tokenizer_free(t);
  return NULL;
}

ingot_tokenizer *ingot_tokenizer_from_json(const char *path) {
  if (!path) return ingot_fail(INGOT_ERR_ARG, "tokenizer_from_json: NULL path");
  size_t len;
  char *text = model_read_file(path, &len);
  if (!text) return ingot_fail(INGOT_ERR_IO, "tokenizer_from_json: cannot read %s", path);
  char err[200];
  json_doc *d = json_parse(text, len, err, sizeof err);
  free(text);
  if (!d) return ingot_fail(INGOT_ERR_IO, "tokenizer_from_json: %s: malformed JSON: %s", path, err);
  ingot_tokenizer *t = build(d, path);
  json_free(d);
  if (!t) {
    char msg[512];
    snprintf(msg, sizeof msg, "%s", ingot_last_error());
    if (strncmp(msg, "tokenizer", 9) == 0)
      return ingot_fail(ingot_last_status(), "%s (%s)", msg, path);
    return ingot_fail(ingot_last_status(), "tokenizer_from_json: %s: %s", path, msg);
  }
  return t;
}
