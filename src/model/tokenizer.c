/* Byte-level BPE (GPT-2 / HF `tokenizers`): vocabulary, merge table, PCRE2
 * pre-tokenizer, encode/decode, the GGUF loader and the ChatML template. */
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/internal.h"
#include "tokenizer_internal.h"

enum { MAX_SPLITS = 8 };

struct ingot_tokenizer {
  int64_t n;
  char *text; /* token texts, concatenated */
  int64_t *toff;
  uint32_t *tlen;
  int64_t text_len, text_cap;
  uint8_t *kind;
  char *dec; /* decoded bytes of each token: dec[doff[i] .. doff[i+1]) */
  int64_t *doff;
  int32_t *slots; /* string -> id hash (open addressing, -1 empty) */
  uint64_t nslots;
  uint64_t *mkey; /* (left id, right id) -> merge; key UINT64_MAX = empty */
  int32_t *mrank, *mnew;
  uint64_t mslots;
  int64_t nmerges, merge_calls;
  int32_t byte_id[256];
  char alpha[256][2]; /* UTF-8 of each byte's alphabet character */
  uint8_t alpha_len[256];
  pcre2_code *re[MAX_SPLITS];
  int nre;
  int prefix_stage; /* stage where ByteLevel(add_prefix_space) applies */
  int32_t *added;   /* matchable added tokens, by first byte then longest first */
  int32_t first_start[257];
  int32_t bos, eos, unk;
  bool ignore_merges, add_prefix_space;
};

/* ---- GPT-2 byte <-> unicode alphabet ---- */

static void byte_alphabet(uint32_t cp_of[256], int16_t byte_of[324]) {
  for (int i = 0; i < 324; i++) byte_of[i] = -1;
  int extra = 0;
  for (int b = 0; b < 256; b++) {
    bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    cp_of[b] = printable ? (uint32_t)b : (uint32_t)(256 + extra++);
    byte_of[cp_of[b]] = (int16_t)b;
  }
}

static int utf8_put(char *o, uint32_t cp) {
  if (cp < 0x80) {
    o[0] = (char)cp;
    return 1;
  }
  o[0] = (char)(0xC0 | (cp >> 6)); /* alphabet code points are < 0x800 */
  o[1] = (char)(0x80 | (cp & 0x3F));
  return 2;
}

/* Next code point of s[0..n) (n >= 1); *adv bytes; -1 if invalid. */
static int32_t utf8_next(const unsigned char *s, size_t n, size_t *adv) {
  unsigned c = s[0];
  size_t k = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
  if (k == 0 || k > n) {
    *adv = 1;
    return -1;
  }
  uint32_t cp = k == 1 ? c : k == 2 ? (c & 0x1F) : k == 3 ? (c & 0x0F) : (c & 0x07);
  for (size_t i = 1; i < k; i++) {
    if ((s[i] & 0xC0) != 0x80) {
      *adv = 1;
      return -1;
    }
    cp = (cp << 6) | (s[i] & 0x3F);
  }
  *adv = k;
  return (int32_t)cp;
}

/* ---- hashing ---- */

static uint64_t hash_bytes(const char *s, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
  return h;
}

static uint64_t mix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}

static uint64_t pow2_at_least(uint64_t n) {
  uint64_t c = 16;
  while (c < n) c *= 2;
  return c;
}

/* ---- building ---- */

ingot_tokenizer *tok_new(int64_t n) {
  if (n <= 0 || n > INT32_MAX)
    return ingot_fail(INGOT_ERR_ARG, "tokenizer: bad vocabulary size %lld", (long long)n);
  ingot_tokenizer *t = calloc(1, sizeof *t);
  if (!t) return ingot_fail(INGOT_ERR_OOM, "tokenizer: out of memory");
  t->n = n;
  t->toff = calloc((size_t)n, sizeof *t->toff);
  t->tlen = calloc((size_t)n, sizeof *t->tlen);
  t->kind = malloc((size_t)n);
  if (!t->toff || !t->tlen || !t->kind) {
    ingot_tokenizer_free(t);
    return ingot_fail(INGOT_ERR_OOM, "tokenizer: out of memory");
  }
  memset(t->kind, TOK_UNUSED, (size_t)n);
  t->bos = t->eos = t->unk = -1;
  return t;
}

bool tok_set_token(ingot_tokenizer *t, int32_t id, const char *s, size_t len, int kind) {
  if (id < 0 || id >= t->n) {
    ingot_set_error(INGOT_ERR_INDEX, "tokenizer: token id %d out of range [0, %lld)", id,
                    (long long)t->n);
    return false;
  }
  if (len > UINT32_MAX / 2) {
    ingot_set_error(INGOT_ERR_ARG, "tokenizer: token %d is too long", id);
    return false;
  }
  if (t->text_len + (int64_t)len > t->text_cap) {
    int64_t nc = t->text_cap ? t->text_cap : 1 << 16;
    while (nc < t->text_len + (int64_t)len) nc *= 2;
    char *p = realloc(t->text, (size_t)nc);
    if (!p) {
      ingot_set_error(INGOT_ERR_OOM, "tokenizer: out of memory");
      return false;
    }
    t->text = p;
    t->text_cap = nc;
  }
  if (len) memcpy(t->text + t->text_len, s, len);
  t->toff[id] = t->text_len;
  t->tlen[id] = (uint32_t)len;
  t->text_len += (int64_t)len;
  t->kind[id] = (uint8_t)kind;
  return true;
}

static const char *tok_text(const ingot_tokenizer *t, int32_t id, size_t *len) {
  *len = t->tlen[id];
  return t->text + t->toff[id];
}

bool tok_index(ingot_tokenizer *t) {
  t->nslots = pow2_at_least((uint64_t)t->n * 2);
  t->slots = malloc(t->nslots * sizeof *t->slots);
  if (!t->slots) {
    ingot_set_error(INGOT_ERR_OOM, "tokenizer: out of memory");
    return false;
  }
  memset(t->slots, 0xFF, t->nslots * sizeof *t->slots);
  for (int32_t id = 0; id < t->n; id++) {
    if (t->kind[id] == TOK_UNUSED && t->tlen[id] == 0) continue;
    size_t len;
    const char *s = tok_text(t, id, &len);
    uint64_t h = hash_bytes(s, len) & (t->nslots - 1);
    for (;; h = (h + 1) & (t->nslots - 1)) {
      int32_t o = t->slots[h];
      if (o < 0) {
        t->slots[h] = id;
        break;
      }
      size_t ol;
      const char *os = tok_text(t, o, &ol);
      if (ol == len && memcmp(os, s, len) == 0) break; /* duplicate text: the first id wins */
    }
  }
  return true;
}

int32_t tok_find(const ingot_tokenizer *t, const char *s, size_t len) {
  if (!t->slots) return -1;
  uint64_t h = hash_bytes(s, len) & (t->nslots - 1);
  for (;; h = (h + 1) & (t->nslots - 1)) {
    int32_t o = t->slots[h];
    if (o < 0) return -1;
    size_t ol;
    const char *os = tok_text(t, o, &ol);
    if (ol == len && memcmp(os, s, len) == 0) return o;
  }
}

static bool merge_grow(ingot_tokenizer *t) {
  uint64_t nc = t->mslots ? t->mslots * 2 : 1 << 16;
  uint64_t *k = malloc(nc * sizeof *k);
  int32_t *r = malloc(nc * sizeof *r), *nw = malloc(nc * sizeof *nw);
  if (!k || !r || !nw) {
    free(k);
    free(r);
    free(nw);
    ingot_set_error(INGOT_ERR_OOM, "tokenizer: out of memory");
    return false;
  }
  memset(k, 0xFF, nc * sizeof *k);
  for (uint64_t i = 0; i < t->mslots; i++) {
    if (t->mkey[i] == UINT64_MAX) continue;
    uint64_t h = mix64(t->mkey[i]) & (nc - 1);
    while (k[h] != UINT64_MAX) h = (h + 1) & (nc - 1);
    k[h] = t->mkey[i];
    r[h] = t->mrank[i];
    nw[h] = t->mnew[i];
  }
  free(t->mkey);
  free(t->mrank);
  free(t->mnew);
  t->mkey = k;
  t->mrank = r;
  t->mnew = nw;
  t->mslots = nc;
  return true;
}

bool tok_add_merge(ingot_tokenizer *t, const char *a, size_t alen, const char *b, size_t blen) {
  int64_t rank = t->merge_calls++;
  if (rank > INT32_MAX) return true;
  int32_t ia = tok_find(t, a, alen), ib = tok_find(t, b, blen);
  if (ia < 0 || ib < 0 || alen + blen > 4096) return true;
  char buf[4096];
  memcpy(buf, a, alen);
  memcpy(buf + alen, b, blen);
  int32_t in = tok_find(t, buf, alen + blen);
  if (in < 0) return true;
  if ((uint64_t)(t->nmerges + 1) * 2 > t->mslots && !merge_grow(t)) return false;
  uint64_t key = (uint64_t)(uint32_t)ia << 32 | (uint32_t)ib;
  uint64_t h = mix64(key) & (t->mslots - 1);
  for (; t->mkey[h] != UINT64_MAX; h = (h + 1) & (t->mslots - 1))
    if (t->mkey[h] == key) return true; /* a repeated pair keeps its first (lowest) rank */
  t->mkey[h] = key;
  t->mrank[h] = (int32_t)rank;
  t->mnew[h] = in;
  t->nmerges++;
  return true;
}

static inline bool merge_find(const ingot_tokenizer *t, int32_t a, int32_t b, int32_t *rank,
                              int32_t *nw) {
  if (!t->mslots) return false;
  uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
  for (uint64_t h = mix64(key) & (t->mslots - 1); t->mkey[h] != UINT64_MAX;
       h = (h + 1) & (t->mslots - 1)) {
    if (t->mkey[h] == key) {
      *rank = t->mrank[h];
      *nw = t->mnew[h];
      return true;
    }
  }
  return false;
}

bool tok_add_split(ingot_tokenizer *t, const char *pattern) {
  if (t->nre == MAX_SPLITS) {
    ingot_set_error(INGOT_ERR_UNSUPPORTED, "tokenizer: more than %d pre-tokenizer splits",
                    MAX_SPLITS);
    return false;
  }
  int code;
  PCRE2_SIZE off;
  pcre2_code *re =
      pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED,
                    PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &code, &off, NULL);
  if (!re) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(code, msg, sizeof msg);
    ingot_set_error(INGOT_ERR_ARG, "tokenizer: bad pre-tokenizer regex at offset %zu: %s (%s)",
                    (size_t)off, (const char *)msg, pattern);
    return false;
  }
  pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* falls back to the interpreter if JIT is absent */
  t->re[t->nre++] = re;
  return true;
}

void tok_set_options(ingot_tokenizer *t, int32_t bos, int32_t eos, bool ignore_merges) {
  t->bos = bos >= 0 && bos < t->n ? bos : -1;
  t->eos = eos >= 0 && eos < t->n ? eos : -1;
  t->ignore_merges = ignore_merges;
}

void tok_set_prefix_space(ingot_tokenizer *t) {
  t->add_prefix_space = true;
  t->prefix_stage = t->nre;
}

static bool is_added(int kind) {
  return kind == TOK_CONTROL || kind == TOK_USER || kind == TOK_UNKNOWN;
}

static int cmp_added(const void *pa, const void *pb, void *ctx) {
  const ingot_tokenizer *t = ctx;
  int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
  unsigned char fa = (unsigned char)t->text[t->toff[a]], fb = (unsigned char)t->text[t->toff[b]];
  if (fa != fb) return fa < fb ? -1 : 1;
  if (t->tlen[a] != t->tlen[b]) return t->tlen[a] > t->tlen[b] ? -1 : 1; /* longest first */
  return a < b ? -1 : a > b;
}

ingot_tokenizer *tok_finish(ingot_tokenizer *t) {
  uint32_t cp_of[256];
  int16_t byte_of[324];
  byte_alphabet(cp_of, byte_of);
  if (!t->slots && !tok_index(t)) goto fail;
  for (int b = 0; b < 256; b++) {
    t->alpha_len[b] = (uint8_t)utf8_put(t->alpha[b], cp_of[b]);
    t->byte_id[b] = tok_find(t, t->alpha[b], t->alpha_len[b]);
  }
  /* Decoded bytes: added tokens are raw text; others map back through the
   * alphabet (a token with a character outside it is kept as is, like HF). */
  t->doff = malloc(((size_t)t->n + 1) * sizeof *t->doff);
  t->dec = malloc(t->text_len ? (size_t)t->text_len : 1);
  if (!t->doff || !t->dec) {
    ingot_set_error(INGOT_ERR_OOM, "tokenizer: out of memory");
    goto fail;
  }
  int64_t o = 0, nadded = 0;
  for (int32_t id = 0; id < t->n; id++) {
    t->doff[id] = o;
    size_t len;
    const unsigned char *s = (const unsigned char *)tok_text(t, id, &len);
    if (is_added(t->kind[id]) && len) nadded++;
    int64_t start = o;
    bool raw = is_added(t->kind[id]);
    for (size_t i = 0; i < len && !raw;) {
      size_t adv;
      int32_t cp = utf8_next(s + i, len - i, &adv);
      if (cp < 0 || cp >= 324 || byte_of[cp] < 0) {
        raw = true;
        break;
      }
      t->dec[o++] = (char)byte_of[cp];
      i += adv;
    }
    if (raw) {
      o = start;
      memcpy(t->dec + o, s, len);
      o += (int64_t)len;
    }
  }
  t->doff[t->n] = o;
  /* Added tokens, bucketed by first byte for the text scan. */
  t->added = malloc((size_t)(nadded ? nadded : 1) * sizeof *t->added);
  if (!t->added) {
    ingot_set_error(INGOT_ERR_OOM, "tokenizer: out of memory");
    goto fail;
  }
  int64_t k = 0;
  for (int32_t id = 0; id < t->n; id++)
    if (is_added(t->kind[id]) && t->tlen[id]) t->added[k++] = id;
  qsort_r(t->added, (size_t)nadded, sizeof *t->added, cmp_added, t);
  for (int b = 0, i = 0; b <= 256; b++) {
    while (i < nadded && (unsigned char)t->text[t->toff[t->added[i]]] < b) i++;
    t->first_start[b] = i;
  }
  for (int32_t id = 0; id < t->n; id++)
    if (t->kind[id] == TOK_UNKNOWN) t->unk = id;
  if (t->nre == 0 && !tok_add_split(t, TOK_RE_GPT2)) goto fail;
  return t;
fail:
  ingot_tokenizer_free(t);
  return NULL;
}

void ingot_tokenizer_free(ingot_tokenizer *t) {
  if (!t) return;
  free(t->text);
  free(t->toff);
  free(t->tlen);
  free(t->kind);
  free(t->dec);
  free(t->doff);
  free(t->slots);
  free(t->mkey);
  free(t->mrank);
  free(t->mnew);
  free(t->added);
  for (int i = 0; i < t->nre; i++) pcre2_code_free(t->re[i]);
  free(t);
}

/* ---- queries ---- */

int64_t ingot_tokenizer_vocab_size(const ingot_tokenizer *t) { return t ? t->n : 0; }
int32_t ingot_tokenizer_bos(const ingot_tokenizer *t) { return t ? t->bos : -1; }
int32_t ingot_tokenizer_eos(const ingot_tokenizer *t) { return t ? t->eos : -1; }
bool ingot_tokenizer_is_special(const ingot_tokenizer *t, int32_t id) {
  return t && id >= 0 && id < t->n && (t->kind[id] == TOK_CONTROL || t->kind[id] == TOK_UNKNOWN);
}

/* ---- encoding ---- */

typedef struct sym {
  int32_t id, prev, next;
} sym;

typedef struct cand {
  int32_t rank, pos, right, a, b, nw;
} cand;

/* Per-call cache of piece -> ids (repeated words are common). */
typedef struct cache {
  int64_t *keyoff; /* into bytes; -1 empty */
  uint32_t *keylen;
  int64_t *idoff; /* into ids */
  uint32_t *nids;
  uint64_t nslots, used;
  char *bytes;
  int64_t nbytes, capbytes;
  int32_t *ids;
  int64_t nidsall, capids;
} cache;

typedef struct enc {
  const ingot_tokenizer *t;
  int32_t *out;
  int64_t cap, count;
  pcre2_match_data *md;
  sym *syms;
  cand *heap;
  int64_t symcap, heapcap, nheap;
  char *buf;
  size_t bufcap;
  cache c;
  bool use_cache;
  bool failed;
} enc;

static bool oom(enc *e) {
  e->failed = true;
  ingot_set_error(INGOT_ERR_OOM, "tokenize: out of memory");
  return false;
}

static inline void emit(enc *e, int32_t id) {
  if (e->count < e->cap) e->out[e->count] = id;
  e->count++;
}

static bool cand_less(const cand *x, const cand *y) {
  return x->rank < y->rank || (x->rank == y->rank && x->pos < y->pos);
}

static void heap_push(enc *e, cand c) {
  int64_t i = e->nheap++;
  while (i > 0) {
    int64_t p = (i - 1) / 2;
    if (!cand_less(&c, &e->heap[p])) break;
    e->heap[i] = e->heap[p];
    i = p;
  }
  e->heap[i] = c;
}

static cand heap_pop(enc *e) {
  cand top = e->heap[0], last = e->heap[--e->nheap];
  int64_t i = 0, n = e->nheap;
  for (;;) {
    int64_t l = 2 * i + 1;
    if (l >= n) break;
    int64_t m = (l + 1 < n && cand_less(&e->heap[l + 1], &e->heap[l])) ? l + 1 : l;
    if (!cand_less(&e->heap[m], &last)) break;
    e->heap[i] = e->heap[m];
    i = m;
  }
  if (n > 0) e->heap[i] = last;
  return top;
}

static void try_pair(enc *e, int32_t l) {
  int32_t r = e->syms[l].next;
  if (r < 0) return;
  cand c = {0, l, r, e->syms[l].id, e->syms[r].id, 0};
  if (merge_find(e->t, c.a, c.b, &c.rank, &c.nw)) heap_push(e, c);
}

/* Byte-level string of piece (alphabet-mapped) into e->buf. */
static bool to_alphabet(enc *e, const unsigned char *s, size_t n, size_t *outlen) {
  if (e->bufcap < 2 * n) {
    size_t nc = 2 * n > 256 ? 2 * n : 256;
    char *b = realloc(e->buf, nc);
    if (!b) return oom(e);
    e->buf = b;
    e->bufcap = nc;
  }
  size_t o = 0;
  for (size_t i = 0; i < n; i++) {
    memcpy(e->buf + o, e->t->alpha[s[i]], e->t->alpha_len[s[i]]);
    o += e->t->alpha_len[s[i]];
  }
  *outlen = o;
  return true;
}

/* BPE of one piece, ids emitted in order. */
static bool bpe_piece(enc *e, const unsigned char *s, size_t n) {
  const ingot_tokenizer *t = e->t;
  if (n == 1 && t->byte_id[s[0]] >= 0) {
    emit(e, t->byte_id[s[0]]);
    return true;
  }
  if (t->ignore_merges) {
    size_t bl;
    if (!to_alphabet(e, s, n, &bl)) return false;
    int32_t id = tok_find(t, e->buf, bl);
    if (id >= 0) {
      emit(e, id);
      return true;
    }
  }
  if ((int64_t)n > e->symcap) {
    int64_t nc = (int64_t)n > 64 ? (int64_t)n : 64;
    sym *ns = realloc(e->syms, (size_t)nc * sizeof *ns);
    if (!ns) return oom(e);
    e->syms = ns;
    e->symcap = nc;
  }
  if (2 * (int64_t)n > e->heapcap) {
    int64_t nc = 2 * (int64_t)n > 128 ? 2 * (int64_t)n : 128;
    cand *nh = realloc(e->heap, (size_t)nc * sizeof *nh);
    if (!nh) return oom(e);
    e->heap = nh;
    e->heapcap = nc;
  }
  int32_t m = 0;
  for (size_t i = 0; i < n; i++) {
    int32_t id = t->byte_id[s[i]];
    if (id < 0) id = t->unk;
    if (id < 0) continue; /* a byte the vocabulary cannot express */
    e->syms[m] = (sym){id, m - 1, m + 1};
    m++;
  }
  if (m == 0) return true;
  e->syms[m - 1].next = -1;
  e->nheap = 0;
  for (int32_t i = 0; i + 1 < m; i++) try_pair(e, i);
  while (e->nheap > 0) {
    cand c = heap_pop(e);
    sym *l = &e->syms[c.pos];
    if (l->id != c.a || l->next != c.right || e->syms[c.right].id != c.b) continue; /* stale */
    sym *r = &e->syms[c.right];
    l->id = c.nw;
    l->next = r->next;
    if (r->next >= 0) e->syms[r->next].prev = c.pos;
    r->id = -1;
    if (e->nheap + 2 > e->heapcap) {
      int64_t nc = e->heapcap * 2;
      cand *nh = realloc(e->heap, (size_t)nc * sizeof *nh);
      if (!nh) return oom(e);
      e->heap = nh;
      e->heapcap = nc;
    }
    if (l->prev >= 0) try_pair(e, l->prev);
    try_pair(e, c.pos);
  }
  for (int32_t i = 0; i >= 0; i = e->syms[i].next) emit(e, e->syms[i].id);
  return true;
}

static void cache_free(cache *c) {
  free(c->keyoff);
  free(c->keylen);
  free(c->idoff);
  free(c->nids);
  free(c->bytes);
  free(c->ids);
  memset(c, 0, sizeof *c);
}

static bool cache_init(cache *c) {
  c->nslots = 1 << 14;
  c->keyoff = malloc(c->nslots * sizeof *c->keyoff);
  c->keylen = malloc(c->nslots * sizeof *c->keylen);
  c->idoff = malloc(c->nslots * sizeof *c->idoff);
  c->nids = malloc(c->nslots * sizeof *c->nids);
  if (!c->keyoff || !c->keylen || !c->idoff || !c->nids) return false;
  memset(c->keyoff, 0xFF, c->nslots * sizeof *c->keyoff);
  return true;
}

static bool grow_buf(void **p, int64_t *cap, int64_t need, size_t elt) {
  if (need <= *cap) return true;
  int64_t nc = *cap ? *cap : 4096;
  while (nc < need) nc *= 2;
  void *np = realloc(*p, (size_t)nc * elt);
  if (!np) return false;
  *p = np;
  *cap = nc;
  return true;
}

/* Cached BPE: pieces up to 64 bytes, table capped at half full. */
static bool bpe_cached(enc *e, const unsigned char *s, size_t n) {
  cache *c = &e->c;
  if (!e->use_cache || n < 2 || n > 64) return bpe_piece(e, s, n);
  uint64_t h = hash_bytes((const char *)s, n) & (c->nslots - 1);
  for (; c->keyoff[h] >= 0; h = (h + 1) & (c->nslots - 1)) {
    if (c->keylen[h] == n && memcmp(c->bytes + c->keyoff[h], s, n) == 0) {
      const int32_t *ids = c->ids + c->idoff[h];
      for (uint32_t i = 0; i < c->nids[h]; i++) emit(e, ids[i]);
      return true;
    }
  }
  int64_t before = e->count;
  int32_t *saved_out = e->out;
  int64_t saved_cap = e->cap;
  /* Run into the id pool (so ids past cap are known), then copy out. */
  if (!grow_buf((void **)&c->ids, &c->capids, c->nidsall + (int64_t)n, sizeof *c->ids))
    return oom(e);
  e->out = c->ids + c->nidsall - before;
  e->cap = before + (int64_t)n;
  bool ok = bpe_piece(e, s, n);
  e->out = saved_out;
  e->cap = saved_cap;
  if (!ok) return false;
  int64_t k = e->count - before;
  const int32_t *ids = c->ids + c->nidsall;
  for (int64_t i = 0; i < k; i++)
    if (before + i < e->cap) e->out[before + i] = ids[i];
  if (c->used * 2 < c->nslots) {
    if (!grow_buf((void **)&c->bytes, &c->capbytes, c->nbytes + (int64_t)n, 1)) return oom(e);
    memcpy(c->bytes + c->nbytes, s, n);
    c->keyoff[h] = c->nbytes;
    c->keylen[h] = (uint32_t)n;
    c->idoff[h] = c->nidsall;
    c->nids[h] = (uint32_t)k;
    c->nbytes += (int64_t)n;
    c->nidsall += k;
    c->used++;
  }
  return true;
}

static bool split_stage(enc *e, const char *s, size_t n, int stage);

static bool piece(enc *e, const char *s, size_t n, int stage) {
  const ingot_tokenizer *t = e->t;
  if (n == 0) return true;
  if (stage == t->prefix_stage && t->add_prefix_space && s[0] != ' ') {
    char *tmp = malloc(n + 1);
    if (!tmp) return oom(e);
    tmp[0] = ' ';
    memcpy(tmp + 1, s, n);
    bool ok = split_stage(e, tmp, n + 1, stage);
    free(tmp);
    return ok;
  }
  return split_stage(e, s, n, stage);
}

/* Isolated split by regex `stage`: matches and the gaps between them are pieces. */
static bool split_stage(enc *e, const char *s, size_t n, int stage) {
  const ingot_tokenizer *t = e->t;
  if (stage == t->nre) return bpe_cached(e, (const unsigned char *)s, n);
  size_t pos = 0, prev = 0;
  while (pos < n) {
    int rc = pcre2_match(t->re[stage], (PCRE2_SPTR)s, n, pos, 0, e->md, NULL);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof msg);
      e->failed = true;
      ingot_set_error(INGOT_ERR_BACKEND, "tokenize: regex match failed: %s", (const char *)msg);
      return false;
    }
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(e->md);
    size_t ms = ov[0], me = ov[1];
    if (me == ms) { /* empty match: step one character */
      pos = ms + 1;
      while (pos < n && ((unsigned char)s[pos] & 0xC0) == 0x80) pos++;
      continue;
    }
    if (ms > prev && !piece(e, s + prev, ms - prev, stage + 1)) return false;
    if (!piece(e, s + ms, me - ms, stage + 1)) return false;
    prev = pos = me;
  }
  if (n > prev && !piece(e, s + prev, n - prev, stage + 1)) return false;
  return true;
}

int64_t ingot_tokenize(const ingot_tokenizer *t, const char *text, size_t len, bool parse_special,
                       int32_t *ids, int64_t cap) {
  if (!t || (!text && len) || cap < 0 || (!ids && cap > 0)) {
    ingot_set_error(INGOT_ERR_ARG, "tokenize: NULL tokenizer, text or ids");
    return -1;
  }
  enc e = {0};
  e.t = t;
  e.out = ids;
  e.cap = cap;
  e.md = pcre2_match_data_create(4, NULL);
  if (!e.md) {
    ingot_set_error(INGOT_ERR_OOM, "tokenize: out of memory");
    return -1;
  }
  e.use_cache = len >= 4096;
  if (e.use_cache && !cache_init(&e.c)) {
    oom(&e);
    goto done;
  }
  const unsigned char *u = (const unsigned char *)text;
  size_t seg = 0;
  for (size_t pos = 0; pos < len && !e.failed;) {
    int32_t best = -1;
    for (int32_t i = t->first_start[u[pos]]; i < t->first_start[u[pos] + 1]; i++) {
      int32_t id = t->added[i];
      if (!parse_special && t->kind[id] != TOK_USER) continue;
      size_t tl = t->tlen[id];
      if (tl <= len - pos && memcmp(t->text + t->toff[id], text + pos, tl) == 0) {
        best = id;
        break;
      }
    }
    if (best < 0) {
      pos++;
      continue;
    }
    if (pos > seg && !piece(&e, text + seg, pos - seg, 0)) break;
    emit(&e, best);
    pos += t->tlen[best];
    seg = pos;
  }
  if (!e.failed && len > seg) piece(&e, text + seg, len - seg, 0);
done:
  pcre2_match_data_free(e.md);
  free(e.syms);
  free(e.heap);
  free(e.buf);
  cache_free(&e.c);
  return e.failed ? -1 : e.count;
}

/* ---- decoding ---- */

int64_t ingot_detokenize(const ingot_tokenizer *t, const int32_t *ids, int64_t n, bool skip_special,
                         char *out, int64_t cap) {
  if (!t || n < 0 || (!ids && n > 0) || cap < 0 || (!out && cap > 0)) {
    ingot_set_error(INGOT_ERR_ARG, "detokenize: NULL tokenizer, ids or output");
    return -1;
  }
  for (int64_t i = 0; i < n; i++) {
    if (ids[i] < 0 || ids[i] >= t->n) {
      ingot_set_error(INGOT_ERR_INDEX,
                      "detokenize: token id %d at position %lld out of range [0, %lld)", ids[i],
                      (long long)i, (long long)t->n);
      return -1;
    }
  }
  int64_t o = 0;
  for (int64_t i = 0; i < n; i++) {
    int32_t id = ids[i];
    if (skip_special && ingot_tokenizer_is_special(t, id)) continue;
    int64_t k = t->doff[id + 1] - t->doff[id];
    if (o < cap) memcpy(out + o, t->dec + t->doff[id], (size_t)(k < cap - o ? k : cap - o));
    o += k;
  }
  return o;
}

/* ---- GGUF ---- */

static const char *pre_pattern(const char *pre, size_t len, bool *digits, bool *ignore_merges) {
  static const struct {
    const char *name;
    int re; /* 0 gpt2, 1 llama3, 2 qwen2 */
    bool digits, ignore_merges;
  } map[] = {
      {"gpt2", 0, false, false},      {"default", 0, false, false},   {"mpt", 0, false, false},
      {"olmo", 0, false, false},      {"jais", 0, false, false},      {"llama-bpe", 1, false, true},
      {"llama3", 1, false, true},     {"smaug-bpe", 1, false, true},  {"qwen2", 2, false, false},
      {"stablelm2", 2, false, false}, {"smollm", 0, true, false},     {"starcoder", 0, true, false},
      {"refact", 0, true, false},     {"command-r", 0, true, false},  {"codeshell", 0, true, false},
      {"exaone", 0, true, false},     {"minerva-7b", 0, true, false},
  };
  static const char *re[] = {TOK_RE_GPT2, TOK_RE_LLAMA3, TOK_RE_QWEN2};
  for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
    if (strlen(map[i].name) == len && memcmp(map[i].name, pre, len) == 0) {
      *digits = map[i].digits;
      *ignore_merges = map[i].ignore_merges;
      return re[map[i].re];
    }
  }
  return NULL;
}

ingot_tokenizer *ingot_tokenizer_from_gguf(const ingot_gguf *g) {
  if (!g) return ingot_fail(INGOT_ERR_ARG, "tokenizer_from_gguf: NULL file");
  size_t mlen;
  const char *model = ingot_gguf_get_string(g, "tokenizer.ggml.model", &mlen);
  if (!model)
    return ingot_fail(INGOT_ERR_IO, "tokenizer_from_gguf: missing key tokenizer.ggml.model");
  if (mlen != 4 || memcmp(model, "gpt2", 4) != 0)
    return ingot_fail(INGOT_ERR_UNSUPPORTED,
                      "tokenizer_from_gguf: tokenizer.ggml.model '%.*s' is not supported (only "
                      "byte-level BPE 'gpt2')",
                      (int)(mlen > 64 ? 64 : mlen), model);
  int64_t n = ingot_gguf_array_len(g, "tokenizer.ggml.tokens");
  if (n <= 0 || ingot_gguf_array_type(g, "tokenizer.ggml.tokens") != INGOT_GGUF_STRING)
    return ingot_fail(INGOT_ERR_IO,
                      "tokenizer_from_gguf: missing or bad key tokenizer.ggml.tokens");
  int64_t nm = ingot_gguf_array_len(g, "tokenizer.ggml.merges");
  if (nm < 0 || ingot_gguf_array_type(g, "tokenizer.ggml.merges") != INGOT_GGUF_STRING)
    return ingot_fail(INGOT_ERR_IO,
                      "tokenizer_from_gguf: missing or bad key tokenizer.ggml.merges");
  int64_t ntypes = ingot_gguf_array_len(g, "tokenizer.ggml.token_type");
  if (ntypes >= 0 && ntypes != n)
    return ingot_fail(INGOT_ERR_IO,
                      "tokenizer_from_gguf: tokenizer.ggml.token_type has %lld entries for %lld "
                      "tokens",
                      (long long)ntypes, (long long)n);
  size_t plen = 0;
  const char *pre = ingot_gguf_get_string(g, "tokenizer.ggml.pre", &plen);
  bool digits = false, ignore_merges = false;
  const char *pattern = TOK_RE_GPT2;
  if (pre) {
    pattern = pre_pattern(pre, plen, &digits, &ignore_merges);
    if (!pattern)
      return ingot_fail(
          INGOT_ERR_UNSUPPORTED,
          "tokenizer_from_gguf: pre-tokenizer tokenizer.ggml.pre '%.*s' is not supported",
          (int)(plen > 64 ? 64 : plen), pre);
  }
  ingot_tokenizer *t = tok_new(n);
  if (!t) return NULL;
  for (int64_t i = 0; i < n; i++) {
    size_t len;
    const char *s = ingot_gguf_array_string(g, "tokenizer.ggml.tokens", i, &len);
    int64_t kind = TOK_NORMAL;
    if (ntypes > 0 && !ingot_gguf_array_int(g, "tokenizer.ggml.token_type", i, &kind)) kind = -1;
    if (!s || kind < 1 || kind > 6) {
      ingot_tokenizer_free(t);
      return ingot_fail(INGOT_ERR_IO, "tokenizer_from_gguf: bad token %lld (text or type)",
                        (long long)i);
    }
    if (!tok_set_token(t, (int32_t)i, s, len, (int)kind)) {
      ingot_tokenizer_free(t);
      return NULL;
    }
  }
  if (!tok_index(t)) {
    ingot_tokenizer_free(t);
    return NULL;
  }
  for (int64_t i = 0; i < nm; i++) {
    size_t len;
    const char *s = ingot_gguf_array_string(g, "tokenizer.ggml.merges", i, &len);
    const char *sp = s && len > 1 ? memchr(s + 1, ' ', len - 1) : NULL;
    if (!sp) {
      ingot_tokenizer_free(t);
      return ingot_fail(INGOT_ERR_IO, "tokenizer_from_gguf: merge %lld is not 'left right'",
                        (long long)i);
    }
    size_t al = (size_t)(sp - s);
    if (!tok_add_merge(t, s, al, sp + 1, len - al - 1)) {
      ingot_tokenizer_free(t);
      return NULL;
    }
  }
  if ((digits && !tok_add_split(t, TOK_RE_DIGIT)) || !tok_add_split(t, pattern)) {
    ingot_tokenizer_free(t);
    return NULL;
  }
  int64_t bos = -1, eos = -1;
  if (!ingot_gguf_get_int(g, "tokenizer.ggml.bos_token_id", &bos)) bos = -1;
  if (!ingot_gguf_get_int(g, "tokenizer.ggml.eos_token_id", &eos)) eos = -1;
  tok_set_options(t, bos >= 0 && bos < n ? (int32_t)bos : -1,
                  eos >= 0 && eos < n ? (int32_t)eos : -1, ignore_merges);
  return tok_finish(t);
}

/* ---- ChatML ---- */

typedef struct sbuf {
  char *out;
  int64_t cap, len;
} sbuf;

static void put(sbuf *b, const char *s) {
  size_t n = strlen(s);
  if (b->len < b->cap) {
    int64_t k = b->cap - b->len < (int64_t)n ? b->cap - b->len : (int64_t)n;
    memcpy(b->out + b->len, s, (size_t)k);
  }
  b->len += (int64_t)n;
}

static void put_msg(sbuf *b, const char *role, const char *content) {
  put(b, "<|im_start|>");
  put(b, role);
  put(b, "\n");
  put(b, content);
  put(b, "<|im_end|>\n");
}

int64_t ingot_chat_template(const char *const *roles, const char *const *contents, int n,
                            const char *default_system, bool add_generation_prompt, char *out,
                            int64_t cap) {
  if (n < 0 || (n > 0 && (!roles || !contents)) || cap < 0 || (!out && cap > 0)) {
    ingot_set_error(INGOT_ERR_ARG, "chat_template: bad arguments");
    return -1;
  }
  for (int i = 0; i < n; i++) {
    if (!roles[i] || !contents[i]) {
      ingot_set_error(INGOT_ERR_ARG, "chat_template: message %d has a NULL role or content", i);
      return -1;
    }
  }
  sbuf b = {out, cap, 0};
  if (default_system && n > 0 && (strcmp(roles[0], "system") != 0))
    put_msg(&b, "system", default_system);
  for (int i = 0; i < n; i++) put_msg(&b, roles[i], contents[i]);
  if (add_generation_prompt) put(&b, "<|im_start|>assistant\n");
  if (b.len < cap) out[b.len] = 0;
  return b.len;
}
