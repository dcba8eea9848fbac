/* GGUF reader: mmap the file, walk the header once validating every count,
 * length, type and offset against the file size, and keep an index (keys,
 * value positions, tensor infos, hash tables) so the accessors are O(1) and
 * never read outside the mapping. Layout (v2 and v3, little-endian):
 *   "GGUF" u32 version, u64 n_tensors, u64 n_kv,
 *   n_kv x (string key, u32 type, value), n_tensors x (string name, u32 ndim,
 *   u64 ne[ndim], u32 ggml type, u64 offset), padding to general.alignment,
 *   tensor data (offsets relative to its start).
 * A string is u64 length + bytes; an array is u32 element type + u64 count +
 * elements. */
#include "ingot/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ingot/backend.h"
#include "ingot/quant.h"

/* ingot_set_error for pointer-returning functions. */
#define fail(...) (ingot_set_error(__VA_ARGS__), NULL)

#define MAX_NEST 4 /* arrays of arrays of ... deeper than this are refused */

typedef struct kv {
  char *key;
  int type;           /* INGOT_GGUF_* */
  int elem_type;      /* arrays: element type, else -1 */
  uint64_t count;     /* arrays: element count */
  const uint8_t *val; /* the value (arrays: the first element) */
  uint64_t *str_offs; /* string arrays: offset of element i from val */
} kv;

typedef struct tinfo {
  char *name;
  int ndim;
  int64_t ne[4];
  int type;
  uint64_t offset; /* from the data section's start */
  size_t nbytes;
} tinfo;

struct ingot_gguf {
  const uint8_t *map;
  size_t size;
  uint32_t version;
  int64_t n_kv, n_tensors;
  kv *kvs;
  tinfo *tensors;
  uint64_t alignment;
  uint64_t data_start;
  int64_t *kv_hash, *t_hash; /* open addressing: indices, -1 empty */
  uint64_t kv_cap, t_cap;
};

/* ---- ggml types: block size and bytes per block (0: unknown) ---- */
typedef struct gtype {
  const char *name;
  int64_t block;
  size_t size;
} gtype;

static const gtype GTYPES[] = {
    [0] = {"f32", 1, 4},         [1] = {"f16", 1, 2},         [2] = {"q4_0", 32, 18},
    [3] = {"q4_1", 32, 20},      [6] = {"q5_0", 32, 22},      [7] = {"q5_1", 32, 24},
    [8] = {"q8_0", 32, 34},      [9] = {"q8_1", 32, 40},      [10] = {"q2_K", 256, 84},
    [11] = {"q3_K", 256, 110},   [12] = {"q4_K", 256, 144},   [13] = {"q5_K", 256, 176},
    [14] = {"q6_K", 256, 210},   [15] = {"q8_K", 256, 292},   [16] = {"iq2_xxs", 256, 66},
    [17] = {"iq2_xs", 256, 74},  [18] = {"iq3_xxs", 256, 98}, [19] = {"iq1_s", 256, 50},
    [20] = {"iq4_nl", 32, 18},   [21] = {"iq3_s", 256, 110},  [22] = {"iq2_s", 256, 82},
    [23] = {"iq4_xs", 256, 136}, [24] = {"i8", 1, 1},         [25] = {"i16", 1, 2},
    [26] = {"i32", 1, 4},        [27] = {"i64", 1, 8},        [28] = {"f64", 1, 8},
    [29] = {"iq1_m", 256, 56},   [30] = {"bf16", 1, 2},       [34] = {"tq1_0", 256, 54},
    [35] = {"tq2_0", 256, 66},   [39] = {"mxfp4", 32, 17},
};
#define N_GTYPES ((int)(sizeof GTYPES / sizeof GTYPES[0]))

static const gtype *gtype_of(uint32_t t) {
  return t < (uint32_t)N_GTYPES && GTYPES[t].block ? &GTYPES[t] : NULL;
}

/* Byte size of fixed-size value types; 0 for string/array/unknown. */
static size_t value_size(uint32_t t) {
  static const size_t sz[13] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
  return t < 13 ? sz[t] : 0;
}

/* ---- a bounds-checked cursor over the mapping ---- */
typedef struct cursor {
  const uint8_t *p;
  uint64_t pos, size;
  const char *path;
} cursor;

static bool truncated(cursor *c, const char *what) {
  ingot_set_error(INGOT_ERR_IO,
                  "%s: truncated GGUF file: %s at offset %llu runs past the end (%llu bytes)",
                  c->path, what, (unsigned long long)c->pos, (unsigned long long)c->size);
  return false;
}

static bool rd(cursor *c, void *dst, uint64_t n, const char *what) {
  if (n > c->size - c->pos) return truncated(c, what);
  memcpy(dst, c->p + c->pos, n);
  c->pos += n;
  return true;
}

static bool skip(cursor *c, uint64_t n, const char *what) {
  if (n > c->size - c->pos) return truncated(c, what);
  c->pos += n;
  return true;
}

/* A string: its bytes at *s (into the mapping), length *len. */
static bool rd_str(cursor *c, const uint8_t **s, uint64_t *len, const char *what) {
  if (!rd(c, len, 8, what)) return false;
  if (*len > c->size - c->pos) {
    ingot_set_error(INGOT_ERR_IO, "%s: %s at offset %llu has length %llu, past the end of the file",
                    c->path, what, (unsigned long long)(c->pos - 8), (unsigned long long)*len);
    return false;
  }
  *s = c->p + c->pos;
  c->pos += *len;
  return true;
}

static char *dup_name(cursor *c, const uint8_t *s, uint64_t len, const char *what) {
  if (len == 0 || memchr(s, 0, len)) {
    ingot_set_error(INGOT_ERR_IO, "%s: %s at offset %llu is empty or contains a NUL byte", c->path,
                    what, (unsigned long long)(s - c->p));
    return NULL;
  }
  char *r = malloc(len + 1);
  if (!r) {
    ingot_set_error(INGOT_ERR_OOM, "%s: out of memory", c->path);
    return NULL;
  }
  memcpy(r, s, len);
  r[len] = 0;
  return r;
}

/* Skip a value of type t (depth: array nesting); validates types and sizes. */
static bool skip_value(cursor *c, uint32_t t, int depth, const char *key);

static bool skip_array_body(cursor *c, uint32_t et, uint64_t n, int depth, const char *key) {
  size_t es = value_size(et);
  if (es) {
    if (n > (c->size - c->pos) / es) {
      ingot_set_error(INGOT_ERR_IO, "%s: array '%s' of %llu elements runs past the end of the file",
                      c->path, key, (unsigned long long)n);
      return false;
    }
    c->pos += n * es;
    return true;
  }
  /* Strings take >= 8 bytes each, arrays >= 12: a quick bound on n. */
  uint64_t min = et == INGOT_GGUF_STRING ? 8 : 12;
  if (n > (c->size - c->pos) / min) {
    ingot_set_error(INGOT_ERR_IO, "%s: array '%s' of %llu elements runs past the end of the file",
                    c->path, key, (unsigned long long)n);
    return false;
  }
  for (uint64_t i = 0; i < n; i++)
    if (!skip_value(c, et, depth, key)) return false;
  return true;
}

static bool skip_value(cursor *c, uint32_t t, int depth, const char *key) {
  if (t > INGOT_GGUF_F64) {
    ingot_set_error(INGOT_ERR_IO, "%s: key '%s' has unknown value type %u (offset %llu)", c->path,
                    key, t, (unsigned long long)c->pos);
    return false;
  }
  if (t == INGOT_GGUF_STRING) {
    const uint8_t *s;
    uint64_t len;
    char what[96];
    snprintf(what, sizeof what, "string value of '%.60s'", key);
    return rd_str(c, &s, &len, what);
  }
  if (t != INGOT_GGUF_ARRAY) return skip(c, value_size(t), key);
  if (depth >= MAX_NEST) {
    ingot_set_error(INGOT_ERR_IO, "%s: key '%s' nests arrays deeper than %d levels", c->path, key,
                    MAX_NEST);
    return false;
  }
  uint32_t et;
  uint64_t n;
  if (!rd(c, &et, 4, "array type") || !rd(c, &n, 8, "array length")) return false;
  if (et > INGOT_GGUF_F64) {
    ingot_set_error(INGOT_ERR_IO, "%s: array '%s' has unknown element type %u", c->path, key, et);
    return false;
  }
  return skip_array_body(c, et, n, depth + 1, key);
}

/* ---- hashing names (FNV-1a) ---- */
static uint64_t hash_str(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
  return h;
}

static int64_t *hash_new(int64_t n, uint64_t *cap) {
  uint64_t c = 16;
  while (c < (uint64_t)n * 2) c *= 2;
  int64_t *h = malloc(c * sizeof *h);
  if (h) memset(h, 0xff, c * sizeof *h); /* all -1 */
  *cap = c;
  return h;
}

/* Slot of name: either holding an index whose name equals it, or empty. */
#define HASH_FIND(tab, cap, arr, field, name, slot)                       \
  do {                                                                    \
    uint64_t h_ = hash_str(name) & ((cap)-1);                             \
    while ((tab)[h_] >= 0 && strcmp((arr)[(tab)[h_]].field, (name)) != 0) \
      h_ = (h_ + 1) & ((cap)-1);                                          \
    (slot) = h_;                                                          \
  } while (0)

/* Hash tables of keys and tensor names, refusing duplicates. */
static bool index_kvs(ingot_gguf *g, const char *path) {
  if (!(g->kv_hash = hash_new(g->n_kv, &g->kv_cap)))
    return ingot_set_error(INGOT_ERR_OOM, "%s: out of memory", path), false;
  for (int64_t i = 0; i < g->n_kv; i++) {
    uint64_t slot;
    HASH_FIND(g->kv_hash, g->kv_cap, g->kvs, key, g->kvs[i].key, slot);
    if (g->kv_hash[slot] >= 0)
      return ingot_set_error(INGOT_ERR_IO, "%s: duplicate metadata key '%s'", path, g->kvs[i].key),
             false;
    g->kv_hash[slot] = i;
  }
  return true;
}

static bool index_tensors(ingot_gguf *g, const char *path) {
  if (!(g->t_hash = hash_new(g->n_tensors, &g->t_cap)))
    return ingot_set_error(INGOT_ERR_OOM, "%s: out of memory", path), false;
  for (int64_t i = 0; i < g->n_tensors; i++) {
    uint64_t slot;
    HASH_FIND(g->t_hash, g->t_cap, g->tensors, name, g->tensors[i].name, slot);
    if (g->t_hash[slot] >= 0)
      return ingot_set_error(INGOT_ERR_IO, "%s: duplicate tensor name '%s'", path,
                             g->tensors[i].name),
             false;
    g->t_hash[slot] = i;
  }
  return true;
}

/* ---- open / close ---- */
void ingot_gguf_close(ingot_gguf *g) {
  if (!g) return;
  if (g->kvs)
    for (int64_t i = 0; i < g->n_kv; i++) {
      free(g->kvs[i].key);
      free(g->kvs[i].str_offs);
    }
  if (g->tensors)
    for (int64_t i = 0; i < g->n_tensors; i++) free(g->tensors[i].name);
  free(g->kvs);
  free(g->tensors);
  free(g->kv_hash);
  free(g->t_hash);
  if (g->map) munmap((void *)g->map, g->size);
  free(g);
}

/* Room for one more entry in *arr (n used, *cap allocated): arrays grow with
 * what the file really holds, not with the counts it claims. */
static bool grow(void **arr, int64_t n, int64_t *cap, size_t elem, const char *path) {
  if (n < *cap) return true;
  int64_t nc = *cap ? *cap * 2 : 64;
  void *p = realloc(*arr, (size_t)nc * elem);
  if (!p) {
    ingot_set_error(INGOT_ERR_OOM, "%s: out of memory", path);
    return false;
  }
  *arr = p;
  *cap = nc;
  return true;
}

static bool parse_kvs(ingot_gguf *g, cursor *c, uint64_t nkv) {
  int64_t cap = 0;
  for (int64_t i = 0; (uint64_t)i < nkv; i++) {
    if (!grow((void **)&g->kvs, i, &cap, sizeof *g->kvs, c->path)) return false;
    kv *e = &g->kvs[i];
    memset(e, 0, sizeof *e);
    g->n_kv = i + 1;
    const uint8_t *ks;
    uint64_t klen;
    uint32_t t;
    if (!rd_str(c, &ks, &klen, "metadata key")) return false;
    if (!(e->key = dup_name(c, ks, klen, "metadata key"))) return false;
    if (!rd(c, &t, 4, "value type")) return false;
    e->type = (int)t;
    e->elem_type = -1;
    if (t != INGOT_GGUF_ARRAY) {
      e->val = c->p + c->pos;
      if (!skip_value(c, t, 0, e->key)) return false;
      continue;
    }
    uint32_t et;
    if (!rd(c, &et, 4, "array type") || !rd(c, &e->count, 8, "array length")) return false;
    if (et > INGOT_GGUF_F64) {
      ingot_set_error(INGOT_ERR_IO, "%s: array '%s' has unknown element type %u", c->path, e->key,
                      et);
      return false;
    }
    e->elem_type = (int)et;
    e->val = c->p + c->pos;
    if (et == INGOT_GGUF_STRING) {
      /* Index the elements so array_string is O(1) (tokenizer vocabularies). */
      if (e->count > (c->size - c->pos) / 8) {
        ingot_set_error(INGOT_ERR_IO,
                        "%s: array '%s' of %llu strings runs past the end of the file", c->path,
                        e->key, (unsigned long long)e->count);
        return false;
      }
      e->str_offs = malloc((e->count ? e->count : 1) * sizeof *e->str_offs);
      if (!e->str_offs) {
        ingot_set_error(INGOT_ERR_OOM, "%s: out of memory", c->path);
        return false;
      }
      for (uint64_t j = 0; j < e->count; j++) {
        const uint8_t *s;
        uint64_t len;
        e->str_offs[j] = (uint64_t)(c->p + c->pos - e->val);
        if (!rd_str(c, &s, &len, "string array element")) return false;
      }
    } else if (!skip_array_body(c, et, e->count, 1, e->key)) {
      return false;
    }
  }
  return true;
}

static bool parse_alignment(ingot_gguf *g, const char *path) {
  g->alignment = 32;
  int64_t i = ingot_gguf_find_kv(g, "general.alignment");
  if (i < 0) return true;
  int64_t a;
  if (!ingot_gguf_get_int(g, "general.alignment", &a) || g->kvs[i].type == INGOT_GGUF_BOOL) {
    ingot_set_error(INGOT_ERR_IO, "%s: general.alignment is not an integer", path);
    return false;
  }
  if (a <= 0 || (a & (a - 1)) != 0 || a > (1 << 30)) {
    ingot_set_error(INGOT_ERR_IO, "%s: general.alignment %lld is not a power of two (up to 2^30)",
                    path, (long long)a);
    return false;
  }
  g->alignment = (uint64_t)a;
  return true;
}

static bool parse_tensor_infos(ingot_gguf *g, cursor *c, uint64_t nt) {
  int64_t cap = 0;
  for (int64_t i = 0; (uint64_t)i < nt; i++) {
    if (!grow((void **)&g->tensors, i, &cap, sizeof *g->tensors, c->path)) return false;
    tinfo *ti = &g->tensors[i];
    memset(ti, 0, sizeof *ti);
    g->n_tensors = i + 1;
    const uint8_t *ns;
    uint64_t nlen;
    uint32_t nd, type;
    if (!rd_str(c, &ns, &nlen, "tensor name")) return false;
    if (!(ti->name = dup_name(c, ns, nlen, "tensor name"))) return false;
    if (!rd(c, &nd, 4, "tensor ndim")) return false;
    if (nd < 1 || nd > 4) {
      ingot_set_error(INGOT_ERR_IO, "%s: tensor '%s' has %u dims (expected 1 to 4)", c->path,
                      ti->name, nd);
      return false;
    }
    ti->ndim = (int)nd;
    uint64_t numel = 1;
    for (int d = 0; d < 4; d++) {
      uint64_t v = 1;
      if (d < (int)nd && !rd(c, &v, 8, "tensor dims")) return false;
      if (v == 0 || v > (uint64_t)INT64_MAX || numel > (uint64_t)INT64_MAX / v) {
        ingot_set_error(INGOT_ERR_IO, "%s: tensor '%s' has a bad size %llu in dim %d", c->path,
                        ti->name, (unsigned long long)v, d);
        return false;
      }
      numel *= v;
      ti->ne[d] = (int64_t)v;
    }
    if (!rd(c, &type, 4, "tensor type") || !rd(c, &ti->offset, 8, "tensor offset")) return false;
    const gtype *gt = gtype_of(type);
    if (!gt) {
      ingot_set_error(INGOT_ERR_IO, "%s: tensor '%s' has unknown ggml type %u", c->path, ti->name,
                      type);
      return false;
    }
    ti->type = (int)type;
    if (ti->ne[0] % gt->block) {
      ingot_set_error(INGOT_ERR_IO,
                      "%s: tensor '%s' has rows of %lld elements, not a multiple of the %s block "
                      "size %lld",
                      c->path, ti->name, (long long)ti->ne[0], gt->name, (long long)gt->block);
      return false;
    }
    /* numel / block blocks of gt->size bytes; bounded by the file size below. */
    uint64_t blocks = numel / (uint64_t)gt->block;
    if (blocks > (uint64_t)SIZE_MAX / gt->size || blocks * gt->size > c->size) {
      ingot_set_error(INGOT_ERR_IO, "%s: tensor '%s' (%llu elements of %s) is larger than the file",
                      c->path, ti->name, (unsigned long long)numel, gt->name);
      return false;
    }
    ti->nbytes = (size_t)(blocks * gt->size);
    if (ti->offset % g->alignment) {
      ingot_set_error(INGOT_ERR_IO,
                      "%s: tensor '%s' data offset %llu is not a multiple of the "
                      "alignment %llu",
                      c->path, ti->name, (unsigned long long)ti->offset,
                      (unsigned long long)g->alignment);
      return false;
    }
  }
  return true;
}

static bool check_tensor_data(ingot_gguf *g, const char *path) {
  if (g->n_tensors == 0) return true;
  if (g->data_start > g->size) {
    ingot_set_error(INGOT_ERR_IO,
                    "%s: truncated GGUF file: tensor data would start at %llu, past "
                    "the end (%llu bytes)",
                    path, (unsigned long long)g->data_start, (unsigned long long)g->size);
    return false;
  }
  uint64_t room = g->size - g->data_start;
  for (int64_t i = 0; i < g->n_tensors; i++) {
    tinfo *ti = &g->tensors[i];
    if (ti->offset > room || ti->nbytes > room - ti->offset) {
      ingot_set_error(INGOT_ERR_IO,
                      "%s: tensor '%s' data [%llu, +%zu) lies outside the file's "
                      "%llu data bytes",
                      path, ti->name, (unsigned long long)ti->offset, ti->nbytes,
                      (unsigned long long)room);
      return false;
    }
  }
  return true;
}

static bool parse(ingot_gguf *g, const char *path) {
  cursor c = {g->map, 0, g->size, path};
  char magic[4];
  uint64_t nt, nkv;
  if (g->size < 4 || memcmp(g->map, "GGUF", 4) != 0) {
    ingot_set_error(INGOT_ERR_IO, "%s: not a GGUF file (bad magic)", path);
    return false;
  }
  if (!rd(&c, magic, 4, "magic") || !rd(&c, &g->version, 4, "version")) return false;
  if (g->version != 2 && g->version != 3) {
    uint32_t v = g->version,
             sw = (v >> 24) | ((v >> 8) & 0xff00) | ((v << 8) & 0xff0000) | (v << 24);
    ingot_set_error(INGOT_ERR_IO, "%s: unsupported GGUF version %u (2 and 3 are supported%s)", path,
                    v, sw == 2 || sw == 3 ? "; this looks like a big-endian file" : "");
    return false;
  }
  if (!rd(&c, &nt, 8, "tensor count") || !rd(&c, &nkv, 8, "metadata count")) return false;
  /* Each tensor info takes >= 32 bytes, each key/value >= 13: bound the counts
   * by the file size before allocating anything. */
  if (nkv > (c.size - c.pos) / 13 || nt > (c.size - c.pos) / 32) {
    ingot_set_error(INGOT_ERR_IO,
                    "%s: %llu tensors and %llu metadata entries cannot fit in %llu "
                    "bytes",
                    path, (unsigned long long)nt, (unsigned long long)nkv,
                    (unsigned long long)c.size);
    return false;
  }
  if (!parse_kvs(g, &c, nkv) || !index_kvs(g, path) || !parse_alignment(g, path) ||
      !parse_tensor_infos(g, &c, nt) || !index_tensors(g, path))
    return false;
  uint64_t pad = (g->alignment - c.pos % g->alignment) % g->alignment;
  g->data_start = c.pos + pad;
  return check_tensor_data(g, path);
}

ingot_gguf *ingot_gguf_open(const char *path) {
  if (!path) return fail(INGOT_ERR_ARG, "ingot_gguf_open: path is NULL");
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return fail(INGOT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return fail(INGOT_ERR_IO, "%s: not a regular file", path);
  }
  if (st.st_size < 24) {
    close(fd);
    return fail(INGOT_ERR_IO,
                "%s: truncated GGUF file: %lld bytes is less than the 24-byte "
                "header",
                path, (long long)st.st_size);
  }
  ingot_gguf *g = calloc(1, sizeof *g);
  if (!g) {
    close(fd);
    return fail(INGOT_ERR_OOM, "%s: out of memory", path);
  }
  g->size = (size_t)st.st_size;
  void *m = mmap(NULL, g->size, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (m == MAP_FAILED) {
    free(g);
    return fail(INGOT_ERR_IO, "%s: mmap failed: %s", path, strerror(errno));
  }
  g->map = m;
  if (!parse(g, path)) {
    ingot_gguf_close(g);
    return NULL;
  }
  return g;
}

/* ---- metadata accessors ---- */
uint32_t ingot_gguf_version(const ingot_gguf *g) { return g ? g->version : 0; }

int64_t ingot_gguf_kv_count(const ingot_gguf *g) { return g ? g->n_kv : 0; }

const char *ingot_gguf_kv_key(const ingot_gguf *g, int64_t i) {
  return g && i >= 0 && i < g->n_kv ? g->kvs[i].key : NULL;
}

int64_t ingot_gguf_find_kv(const ingot_gguf *g, const char *key) {
  if (!g || !key) return -1;
  uint64_t slot;
  HASH_FIND(g->kv_hash, g->kv_cap, g->kvs, key, key, slot);
  return g->kv_hash[slot];
}

int ingot_gguf_kv_type(const ingot_gguf *g, int64_t i) {
  return g && i >= 0 && i < g->n_kv ? g->kvs[i].type : -1;
}

static const kv *find(const ingot_gguf *g, const char *key) {
  int64_t i = ingot_gguf_find_kv(g, key);
  return i < 0 ? NULL : &g->kvs[i];
}

/* Scalar of fixed-size type t at p as an integer (false for floats or a u64
 * past INT64_MAX). */
static bool scalar_int(int t, const uint8_t *p, int64_t *out) {
  union {
    uint8_t u8;
    int8_t i8;
    uint16_t u16;
    int16_t i16;
    uint32_t u32;
    int32_t i32;
    uint64_t u64;
    int64_t i64;
  } v;
  size_t n = value_size((uint32_t)t);
  if (!n || t == INGOT_GGUF_F32 || t == INGOT_GGUF_F64) return false;
  memcpy(&v, p, n);
  switch (t) {
    case INGOT_GGUF_U8:
      *out = v.u8;
      break;
    case INGOT_GGUF_I8:
      *out = v.i8;
      break;
    case INGOT_GGUF_U16:
      *out = v.u16;
      break;
    case INGOT_GGUF_I16:
      *out = v.i16;
      break;
    case INGOT_GGUF_U32:
      *out = v.u32;
      break;
    case INGOT_GGUF_I32:
      *out = v.i32;
      break;
    case INGOT_GGUF_BOOL:
      *out = v.u8 != 0;
      break;
    case INGOT_GGUF_I64:
      *out = v.i64;
      break;
    case INGOT_GGUF_U64:
      if (v.u64 > (uint64_t)INT64_MAX) return false;
      *out = (int64_t)v.u64;
      break;
    default:
      return false;
  }
  return true;
}

static bool scalar_float(int t, const uint8_t *p, double *out) {
  if (t == INGOT_GGUF_F32) {
    float f;
    memcpy(&f, p, 4);
    *out = f;
    return true;
  }
  if (t == INGOT_GGUF_F64) {
    memcpy(out, p, 8);
    return true;
  }
  if (t == INGOT_GGUF_U64) { /* the whole u64 range converts */
    uint64_t u;
    memcpy(&u, p, 8);
    *out = (double)u;
    return true;
  }
  int64_t i;
  if (t == INGOT_GGUF_BOOL || !scalar_int(t, p, &i)) return false;
  *out = (double)i;
  return true;
}

bool ingot_gguf_get_int(const ingot_gguf *g, const char *key, int64_t *out) {
  const kv *e = find(g, key);
  int64_t v;
  if (!e || !scalar_int(e->type, e->val, &v)) return false;
  if (out) *out = v;
  return true;
}

bool ingot_gguf_get_float(const ingot_gguf *g, const char *key, double *out) {
  const kv *e = find(g, key);
  double v;
  if (!e || !scalar_float(e->type, e->val, &v)) return false;
  if (out) *out = v;
  return true;
}

static const char *str_at(const uint8_t *p, size_t *len) {
  uint64_t n;
  memcpy(&n, p, 8);
  if (len) *len = (size_t)n;
  return (const char *)p + 8;
}

const char *ingot_gguf_get_string(const ingot_gguf *g, const char *key, size_t *len) {
  const kv *e = find(g, key);
  if (!e || e->type != INGOT_GGUF_STRING) return NULL;
  return str_at(e->val, len);
}

int64_t ingot_gguf_array_len(const ingot_gguf *g, const char *key) {
  const kv *e = find(g, key);
  return e && e->type == INGOT_GGUF_ARRAY ? (int64_t)e->count : -1;
}

int ingot_gguf_array_type(const ingot_gguf *g, const char *key) {
  const kv *e = find(g, key);
  return e && e->type == INGOT_GGUF_ARRAY ? e->elem_type : -1;
}

/* Element i of a fixed-size-element array, or NULL. */
static const uint8_t *array_elem(const ingot_gguf *g, const char *key, int64_t i, int *et) {
  const kv *e = find(g, key);
  if (!e || e->type != INGOT_GGUF_ARRAY || i < 0 || (uint64_t)i >= e->count) return NULL;
  size_t es = value_size((uint32_t)e->elem_type);
  if (!es) return NULL;
  *et = e->elem_type;
  return e->val + (uint64_t)i * es;
}

const char *ingot_gguf_array_string(const ingot_gguf *g, const char *key, int64_t i, size_t *len) {
  const kv *e = find(g, key);
  if (!e || e->type != INGOT_GGUF_ARRAY || e->elem_type != INGOT_GGUF_STRING || i < 0 ||
      (uint64_t)i >= e->count)
    return NULL;
  return str_at(e->val + e->str_offs[i], len);
}

bool ingot_gguf_array_int(const ingot_gguf *g, const char *key, int64_t i, int64_t *out) {
  int et;
  const uint8_t *p = array_elem(g, key, i, &et);
  int64_t v;
  if (!p || !scalar_int(et, p, &v)) return false;
  if (out) *out = v;
  return true;
}

bool ingot_gguf_array_float(const ingot_gguf *g, const char *key, int64_t i, double *out) {
  int et;
  const uint8_t *p = array_elem(g, key, i, &et);
  double v;
  if (!p || !scalar_float(et, p, &v)) return false;
  if (out) *out = v;
  return true;
}

/* ---- tensors ---- */
int64_t ingot_gguf_tensor_count(const ingot_gguf *g) { return g ? g->n_tensors : 0; }

int64_t ingot_gguf_find_tensor(const ingot_gguf *g, const char *name) {
  if (!g || !name) return -1;
  uint64_t slot;
  HASH_FIND(g->t_hash, g->t_cap, g->tensors, name, name, slot);
  return g->t_hash[slot];
}

bool ingot_gguf_tensor_info_get(const ingot_gguf *g, int64_t i, ingot_gguf_tensor_info *out) {
  if (!g || !out || i < 0 || i >= g->n_tensors) {
    ingot_set_error(INGOT_ERR_INDEX, "ingot_gguf_tensor_info_get: tensor index %lld out of range",
                    (long long)i);
    return false;
  }
  const tinfo *ti = &g->tensors[i];
  out->name = ti->name;
  out->ndim = ti->ndim;
  memcpy(out->ne, ti->ne, sizeof out->ne);
  out->type = ti->type;
  out->data = g->map + g->data_start + ti->offset;
  out->nbytes = ti->nbytes;
  return true;
}

/* n elements of a plain (non-block) type to float32; false if t is not one. */
static bool plain_to_f32(int t, const uint8_t *src, float *dst, int64_t n) {
  switch (t) {
    case 0:
      memcpy(dst, src, (size_t)n * 4);
      return true;
    case 1:
    case 30:
      for (int64_t k = 0; k < n; k++) {
        uint16_t h;
        memcpy(&h, src + 2 * k, 2);
        dst[k] = t == 1 ? ingot_f16_to_f32(h) : ingot_bf16_to_f32(h);
      }
      return true;
    case 28:
      for (int64_t k = 0; k < n; k++) {
        double d;
        memcpy(&d, src + 8 * k, 8);
        dst[k] = (float)d;
      }
      return true;
    default:
      return false;
  }
}

/* Rows converted per step when narrowing to f16/bf16 (bounds the f32 scratch). */
#define CHUNK_ELEMS ((int64_t)1 << 16)

ingot_tensor *ingot_gguf_load_tensor(const ingot_gguf *g, const char *name, ingot_dtype dt,
                                     ingot_device dev) {
  if (!g || !name) return fail(INGOT_ERR_ARG, "ingot_gguf_load_tensor: NULL argument");
  if (dt != INGOT_F32 && dt != INGOT_F16 && dt != INGOT_BF16)
    return fail(INGOT_ERR_DTYPE,
                "ingot_gguf_load_tensor: dtype %s not supported (float32, "
                "float16 or bfloat16)",
                ingot_dtype_name(dt));
  int64_t i = ingot_gguf_find_tensor(g, name);
  if (i < 0) return fail(INGOT_ERR_ARG, "ingot_gguf_load_tensor: no tensor '%s'", name);
  ingot_gguf_tensor_info ti;
  ingot_gguf_tensor_info_get(g, i, &ti);
  int64_t shape[4], numel = 1;
  for (int d = 0; d < ti.ndim; d++) {
    shape[d] = ti.ne[ti.ndim - 1 - d];
    numel *= shape[d];
  }
  /* Same type: straight from the mapping. */
  if ((ti.type == 0 && dt == INGOT_F32) || (ti.type == 1 && dt == INGOT_F16) ||
      (ti.type == 30 && dt == INGOT_BF16))
    return ingot_from_host(ti.data, ti.ndim, shape, dt, dev);
  if (ti.type != 0 && ti.type != 1 && ti.type != 30 && ti.type != 28 &&
      ingot_ggml_block_size(ti.type) <= 0)
    return fail(INGOT_ERR_UNSUPPORTED,
                "ingot_gguf_load_tensor: '%s' has ggml type %s, which "
                "cannot be dequantised",
                name, GTYPES[ti.type].name);
  /* Chunks hold whole rows (so whole blocks); f32 output is dequantised in
   * place, narrower output through an f32 scratch chunk. */
  int64_t row = ti.ne[0], step = row >= CHUNK_ELEMS ? row : CHUNK_ELEMS / row * row;
  size_t row_bytes = ti.nbytes / (size_t)(numel / row);
  void *buf = malloc((size_t)numel * ingot_dtype_size(dt));
  float *scratch = dt == INGOT_F32 ? buf : malloc((size_t)step * sizeof(float));
  if (!buf || !scratch) {
    free(buf);
    if (scratch != buf) free(scratch);
    return fail(INGOT_ERR_OOM, "ingot_gguf_load_tensor: out of memory for '%s'", name);
  }
  const uint8_t *src = ti.data;
  ingot_tensor *out = NULL;
  bool ok = true;
  for (int64_t k = 0; k < numel && ok; k += step) {
    int64_t n = numel - k < step ? numel - k : step;
    const uint8_t *s = src + (size_t)(k / row) * row_bytes;
    float *f = dt == INGOT_F32 ? (float *)buf + k : scratch;
    if (!plain_to_f32(ti.type, s, f, n) && ingot_ggml_dequantize(ti.type, s, f, n) != INGOT_OK) {
      ok = false;
      break;
    }
    if (dt != INGOT_F32) {
      uint16_t *o = (uint16_t *)buf + k;
      for (int64_t j = 0; j < n; j++)
        o[j] = dt == INGOT_F16 ? ingot_f32_to_f16(f[j]) : ingot_f32_to_bf16(f[j]);
    }
  }
  if (ok) out = ingot_from_host(buf, ti.ndim, shape, dt, dev);
  if (scratch != buf) free(scratch);
  free(buf);
  return out;
}
