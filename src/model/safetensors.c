/* safetensors reader and HF checkpoint directories (see
 * include/ingot/safetensors.h). The header is parsed once with the model JSON
 * reader; every tensor's extent is checked against the data section, and the
 * tensors are kept sorted by name (lookups are a binary search). */
#include "fileio.h"
#include "ingot/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ingot/backend.h"
#include "json.h"

#define fail(...) (ingot_set_error(__VA_ARGS__), NULL)
#define MAX_HEADER ((uint64_t)100 << 20) /* the reference implementation's cap */
#define MAX_INT_JSON 9007199254740992.0  /* 2^53: larger JSON numbers are not exact */

typedef struct st_tensor {
  char *name;
  ingot_dtype dtype;
  const char *dtype_name;
  int ndim;
  int64_t shape[INGOT_SAFETENSORS_MAX_DIMS];
  int64_t numel;
  uint64_t begin, end; /* in the data section */
} st_tensor;

struct ingot_safetensors {
  char *path;
  const uint8_t *map;
  size_t size;
  uint64_t data_start;
  int64_t n;
  st_tensor *t;
  int64_t n_meta;
  char **meta; /* key, value pairs */
};

static const struct {
  const char *name;
  ingot_dtype dt;
} DTYPES[] = {{"F32", INGOT_F32},
              {"F16", INGOT_F16},
              {"BF16", INGOT_BF16},
              {"F64", INGOT_F64},
              {"F8_E4M3", INGOT_F8E4M3FN},
              {"F8_E5M2", INGOT_F8E5M2},
              {"I64", INGOT_I64},
              {"I32", INGOT_I32},
              {"I16", INGOT_I16},
              {"I8", INGOT_I8},
              {"U8", INGOT_U8},
              {"BOOL", INGOT_BOOL}};

const char *st_dtype_name(ingot_dtype dt) {
  for (size_t i = 0; i < sizeof DTYPES / sizeof DTYPES[0]; i++)
    if (DTYPES[i].dt == dt) return DTYPES[i].name;
  return NULL;
}

static bool lookup_dtype(const char *s, size_t len, st_tensor *t) {
  for (size_t i = 0; i < sizeof DTYPES / sizeof DTYPES[0]; i++)
    if (strlen(DTYPES[i].name) == len && !memcmp(DTYPES[i].name, s, len)) {
      t->dtype = DTYPES[i].dt;
      t->dtype_name = DTYPES[i].name;
      return true;
    }
  return false;
}

/* A JSON number that is a non-negative integer exactly representable. */
static bool json_uint(const json_doc *d, int32_t node, uint64_t *out) {
  if (json_type_of(d, node) != JSON_NUM) return false;
  double v = json_num(d, node);
  if (!(v >= 0 && v <= MAX_INT_JSON) || v != (double)(uint64_t)v) return false;
  *out = (uint64_t)v;
  return true;
}

static int cmp_name(const void *a, const void *b) {
  return strcmp(((const st_tensor *)a)->name, ((const st_tensor *)b)->name);
}

static int cmp_begin(const void *a, const void *b) {
  const st_tensor *x = *(st_tensor *const *)a, *y = *(st_tensor *const *)b;
  return x->begin < y->begin   ? -1
         : x->begin > y->begin ? 1
         : x->end < y->end     ? -1
                               : x->end > y->end;
}

void ingot_safetensors_close(ingot_safetensors *st) {
  if (!st) return;
  for (int64_t i = 0; i < st->n; i++) free(st->t[i].name);
  free(st->t);
  for (int64_t i = 0; i < 2 * st->n_meta; i++) free(st->meta[i]);
  free(st->meta);
  if (st->map && st->size) munmap((void *)st->map, st->size);
  free(st->path);
  free(st);
}

/* One header entry: {"dtype", "shape", "data_offsets"}. */
static bool parse_entry(ingot_safetensors *st, const json_doc *d, int32_t node, const char *name,
                        size_t name_len, uint64_t data_size, st_tensor *t) {
  const char *p = st->path;
  if (strlen(name) != name_len) {
    ingot_set_error(INGOT_ERR_IO, "%s: a tensor name contains a NUL byte", p);
    return false;
  }
  if (json_type_of(d, node) != JSON_OBJ) {
    ingot_set_error(INGOT_ERR_IO, "%s: tensor '%s': header entry is not a JSON object", p, name);
    return false;
  }
  int32_t dt = json_get(d, node, "dtype"), sh = json_get(d, node, "shape"),
          off = json_get(d, node, "data_offsets");
  size_t len;
  const char *ds = json_str(d, dt, &len);
  if (!ds) {
    ingot_set_error(INGOT_ERR_IO, "%s: tensor '%s': missing or non-string 'dtype'", p, name);
    return false;
  }
  if (!lookup_dtype(ds, len, t)) {
    ingot_set_error(INGOT_ERR_IO, "%s: tensor '%s': unsupported dtype '%.*s'", p, name, (int)len,
                    ds);
    return false;
  }
  if (json_type_of(d, sh) != JSON_ARR) {
    ingot_set_error(INGOT_ERR_IO, "%s: tensor '%s': missing or non-array 'shape'", p, name);
    return false;
  }
  if (json_len(d, sh) > INGOT_SAFETENSORS_MAX_DIMS) {
    ingot_set_error(INGOT_ERR_IO, "%s: tensor '%s': %lld dims, at most %d are supported", p, name,
                    (long long)json_len(d, sh), INGOT_SAFETENSORS_MAX_DIMS);
    return false;
  }
  /* numel and bytes, refusing anything past INT64_MAX */
  uint64_t numel = 1, esz = ingot_dtype_size(t->dtype);
  t->ndim = 0;
  for (int32_t c = json_first(d, sh); c >= 0; c = json_next(d, c)) {
    uint64_t v;
    if (!json_uint(d, c, &v)) {
      ingot_set_error(INGOT_ERR_IO, "%s: tensor '%s': shape entries must be non-negative integers",
                      p, name);
      return false;
    }
    if (v && numel > (uint64_t)INT64_MAX / esz / v) {
      ingot_set_error(INGOT_ERR_IO, "%s: tensor '%s': shape overflows", p, name);
      return false;
    }
    numel *= v;
    t->shape[t->ndim++] = (int64_t)v;
  }
  uint64_t b, e;
  if (json_type_of(d, off) != JSON_ARR || json_len(d, off) != 2 ||
      !json_uint(d, json_first(d, off), &b) ||
      !json_uint(d, json_next(d, json_first(d, off)), &e)) {
    ingot_set_error(INGOT_ERR_IO,
                    "%s: tensor '%s': 'data_offsets' must be [begin, end] non-negative integers", p,
                    name);
    return false;
  }
  if (b > e || e > data_size) {
    ingot_set_error(INGOT_ERR_IO,
                    "%s: tensor '%s': data_offsets [%llu, %llu] outside the data section (%llu "
                    "bytes)",
                    p, name, (unsigned long long)b, (unsigned long long)e,
                    (unsigned long long)data_size);
    return false;
  }
  if (e - b != numel * esz) {
    ingot_set_error(
        INGOT_ERR_IO,
        "%s: tensor '%s': data_offsets span %llu bytes but %s x %llu elements need %llu", p, name,
        (unsigned long long)(e - b), t->dtype_name, (unsigned long long)numel,
        (unsigned long long)(numel * esz));
    return false;
  }
  t->numel = (int64_t)numel;
  t->begin = b;
  t->end = e;
  if (!(t->name = strdup(name))) {
    ingot_set_error(INGOT_ERR_OOM, "%s: out of memory", p);
    return false;
  }
  return true;
}

static bool parse_metadata(ingot_safetensors *st, const json_doc *d, int32_t node) {
  if (json_type_of(d, node) != JSON_OBJ) {
    ingot_set_error(INGOT_ERR_IO, "%s: '__metadata__' is not a JSON object", st->path);
    return false;
  }
  int64_t n = json_len(d, node);
  if (!(st->meta = calloc((size_t)(2 * n + 1), sizeof *st->meta))) {
    ingot_set_error(INGOT_ERR_OOM, "%s: out of memory", st->path);
    return false;
  }
  for (int32_t c = json_first(d, node); c >= 0; c = json_next(d, c)) {
    size_t kl, vl;
    const char *k = json_key(d, c, &kl), *v = json_str(d, c, &vl);
    if (!v) {
      ingot_set_error(INGOT_ERR_IO, "%s: '__metadata__' value of '%s' is not a string", st->path,
                      k);
      return false;
    }
    char *kk = strndup(k, kl), *vv = strndup(v, vl);
    st->meta[2 * st->n_meta] = kk;
    st->meta[2 * st->n_meta + 1] = vv;
    st->n_meta++;
    if (!kk || !vv) {
      ingot_set_error(INGOT_ERR_OOM, "%s: out of memory", st->path);
      return false;
    }
  }
  return true;
}

static bool parse_header(ingot_safetensors *st, const json_doc *d, uint64_t data_size) {
  int32_t root = json_root(d);
  if (json_type_of(d, root) != JSON_OBJ) {
    ingot_set_error(INGOT_ERR_IO, "%s: the safetensors header is not a JSON object", st->path);
    return false;
  }
  int64_t n = json_len(d, root);
  if (!(st->t = calloc((size_t)n + 1, sizeof *st->t))) {
    ingot_set_error(INGOT_ERR_OOM, "%s: out of memory", st->path);
    return false;
  }
  bool seen_meta = false;
  for (int32_t c = json_first(d, root); c >= 0; c = json_next(d, c)) {
    size_t kl;
    const char *k = json_key(d, c, &kl);
    if (!strcmp(k, "__metadata__")) {
      if (seen_meta) {
        ingot_set_error(INGOT_ERR_IO, "%s: duplicate '__metadata__'", st->path);
        return false;
      }
      seen_meta = true;
      if (!parse_metadata(st, d, c)) return false;
      continue;
    }
    if (!parse_entry(st, d, c, k, kl, data_size, &st->t[st->n])) return false;
    st->n++;
  }
  qsort(st->t, (size_t)st->n, sizeof *st->t, cmp_name);
  for (int64_t i = 1; i < st->n; i++)
    if (!strcmp(st->t[i - 1].name, st->t[i].name)) {
      ingot_set_error(INGOT_ERR_IO, "%s: duplicate tensor '%s'", st->path, st->t[i].name);
      return false;
    }
  /* Extents must not overlap (empty tensors take no bytes). */
  st_tensor **by = malloc(((size_t)st->n + 1) * sizeof *by);
  if (!by) {
    ingot_set_error(INGOT_ERR_OOM, "%s: out of memory", st->path);
    return false;
  }
  int64_t m = 0;
  for (int64_t i = 0; i < st->n; i++)
    if (st->t[i].end > st->t[i].begin) by[m++] = &st->t[i];
  qsort(by, (size_t)m, sizeof *by, cmp_begin);
  for (int64_t i = 1; i < m; i++)
    if (by[i]->begin < by[i - 1]->end) {
      ingot_set_error(INGOT_ERR_IO, "%s: tensors '%s' and '%s' overlap in the data section",
                      st->path, by[i - 1]->name, by[i]->name);
      free(by);
      return false;
    }
  free(by);
  return true;
}

ingot_safetensors *ingot_safetensors_open(const char *path) {
  if (!path) return fail(INGOT_ERR_ARG, "ingot_safetensors_open: path is NULL");
  ingot_safetensors *st = calloc(1, sizeof *st);
  if (!st || !(st->path = strdup(path))) {
    free(st);
    return fail(INGOT_ERR_OOM, "ingot_safetensors_open: out of memory");
  }
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    ingot_set_error(INGOT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    goto fail;
  }
  struct stat sb;
  if (fstat(fd, &sb) || !S_ISREG(sb.st_mode)) {
    close(fd);
    ingot_set_error(INGOT_ERR_IO, "%s: not a regular file", path);
    goto fail;
  }
  st->size = (size_t)sb.st_size;
  if (st->size < 8) {
    close(fd);
    ingot_set_error(INGOT_ERR_IO, "%s: %zu bytes is too short for a safetensors file", path,
                    st->size);
    st->size = 0;
    goto fail;
  }
  void *map = mmap(NULL, st->size, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (map == MAP_FAILED) {
    ingot_set_error(INGOT_ERR_IO, "%s: mmap failed: %s", path, strerror(errno));
    st->size = 0;
    goto fail;
  }
  st->map = map;
  uint64_t hl = 0;
  for (int i = 7; i >= 0; i--) hl = hl << 8 | st->map[i];
  if (hl == 0 || hl > MAX_HEADER || hl > st->size - 8) {
    ingot_set_error(INGOT_ERR_IO,
                    "%s: header length %llu is invalid (file has %zu bytes; not a safetensors "
                    "file?)",
                    path, (unsigned long long)hl, st->size);
    goto fail;
  }
  st->data_start = 8 + hl;
  char err[160];
  json_doc *d = json_parse((const char *)st->map + 8, (size_t)hl, err, sizeof err);
  if (!d) {
    ingot_set_error(INGOT_ERR_IO, "%s: malformed JSON header: %s", path, err);
    goto fail;
  }
  bool ok = parse_header(st, d, st->size - st->data_start);
  json_free(d);
  if (!ok) goto fail;
  return st;
fail:
  ingot_safetensors_close(st);
  return NULL;
}

int64_t ingot_safetensors_tensor_count(const ingot_safetensors *st) { return st ? st->n : 0; }

int64_t ingot_safetensors_find(const ingot_safetensors *st, const char *name) {
  if (!st || !name) return -1;
  int64_t lo = 0, hi = st->n;
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    int c = strcmp(st->t[mid].name, name);
    if (!c) return mid;
    if (c < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return -1;
}

static void fill_info(const ingot_safetensors *st, const st_tensor *t, ingot_safetensors_info *o) {
  o->name = t->name;
  o->dtype = t->dtype;
  o->dtype_name = t->dtype_name;
  o->ndim = t->ndim;
  for (int i = 0; i < INGOT_SAFETENSORS_MAX_DIMS; i++) o->shape[i] = i < t->ndim ? t->shape[i] : 1;
  o->numel = t->numel;
  o->data = st->map + st->data_start + t->begin;
  o->nbytes = (size_t)(t->end - t->begin);
}

bool ingot_safetensors_info_get(const ingot_safetensors *st, int64_t i,
                                ingot_safetensors_info *out) {
  if (!st || !out || i < 0 || i >= st->n) {
    ingot_set_error(INGOT_ERR_INDEX, "ingot_safetensors_info_get: index %lld out of range",
                    (long long)i);
    return false;
  }
  fill_info(st, &st->t[i], out);
  return true;
}

const char *ingot_safetensors_metadata(const ingot_safetensors *st, const char *key) {
  if (!st || !key) return NULL;
  for (int64_t i = 0; i < st->n_meta; i++)
    if (!strcmp(st->meta[2 * i], key)) return st->meta[2 * i + 1];
  return NULL;
}

static ingot_tensor *load_info(const ingot_safetensors_info *ti, ingot_dtype dt, ingot_device dev) {
  if (ingot_dtype_size(dt) == 0)
    return fail(INGOT_ERR_DTYPE, "load_tensor: invalid dtype %d", (int)dt);
  /* ingot_from_host copies with memcpy, so unaligned mapped data is fine. */
  ingot_tensor *h = ingot_from_host(ti->data, ti->ndim, ti->shape, ti->dtype, INGOT_CPU);
  if (!h) return NULL;
  ingot_tensor *c = h;
  if (dt != ti->dtype) {
    c = ingot_cast(h, dt);
    ingot_release(h);
    if (!c) return NULL;
  }
  if (dev.kind == INGOT_DEVICE_CPU) return c;
  ingot_tensor *r = ingot_to(c, dev);
  ingot_release(c);
  return r;
}

ingot_tensor *ingot_safetensors_load_tensor(const ingot_safetensors *st, const char *name,
                                            ingot_dtype dt, ingot_device dev) {
  if (!st || !name) return fail(INGOT_ERR_ARG, "ingot_safetensors_load_tensor: NULL argument");
  int64_t i = ingot_safetensors_find(st, name);
  if (i < 0)
    return fail(INGOT_ERR_ARG, "ingot_safetensors_load_tensor: %s has no tensor '%s'", st->path,
                name);
  ingot_safetensors_info ti;
  fill_info(st, &st->t[i], &ti);
  return load_info(&ti, dt, dev);
}

/* ---- checkpoint directories ---- */

typedef struct ck_entry {
  const char *name; /* owned by the shard */
  int shard;
  int64_t index;
} ck_entry;

struct ingot_checkpoint {
  int n_shards;
  ingot_safetensors **shards;
  int64_t n;
  ck_entry *e; /* sorted by name */
};

void ingot_checkpoint_close(ingot_checkpoint *ck) {
  if (!ck) return;
  for (int i = 0; i < ck->n_shards; i++) ingot_safetensors_close(ck->shards[i]);
  free(ck->shards);
  free(ck->e);
  free(ck);
}

static int cmp_entry(const void *a, const void *b) {
  return strcmp(((const ck_entry *)a)->name, ((const ck_entry *)b)->name);
}

static int add_shard(ingot_checkpoint *ck, const char *dir, const char *file) {
  char *p = model_path_join(dir, file);
  if (!p) {
    ingot_set_error(INGOT_ERR_OOM, "ingot_checkpoint_open_dir: out of memory");
    return -1;
  }
  ingot_safetensors *st = ingot_safetensors_open(p);
  free(p);
  if (!st) return -1;
  ingot_safetensors **ns = realloc(ck->shards, (size_t)(ck->n_shards + 1) * sizeof *ns);
  if (!ns) {
    ingot_safetensors_close(st);
    ingot_set_error(INGOT_ERR_OOM, "ingot_checkpoint_open_dir: out of memory");
    return -1;
  }
  ck->shards = ns;
  ck->shards[ck->n_shards] = st;
  return ck->n_shards++;
}

/* The shard files named by the index: opened once each, in order of first use. */
static bool open_index(ingot_checkpoint *ck, const char *dir, const char *ipath) {
  size_t len;
  char *text = model_read_file(ipath, &len);
  if (!text) {
    ingot_set_error(INGOT_ERR_IO, "%s: cannot read: %s", ipath, strerror(errno));
    return false;
  }
  char err[160];
  json_doc *d = json_parse(text, len, err, sizeof err);
  free(text);
  if (!d) {
    ingot_set_error(INGOT_ERR_IO, "%s: malformed JSON: %s", ipath, err);
    return false;
  }
  bool ok = false;
  int32_t wm = json_get(d, json_root(d), "weight_map");
  if (json_type_of(d, wm) != JSON_OBJ) {
    ingot_set_error(INGOT_ERR_IO, "%s: missing or non-object 'weight_map'", ipath);
    goto done;
  }
  int64_t n = json_len(d, wm);
  const char **files = calloc((size_t)n + 1, sizeof *files); /* shard i's file name */
  ck->e = calloc((size_t)n + 1, sizeof *ck->e);
  if (!files || !ck->e) {
    free(files);
    ingot_set_error(INGOT_ERR_OOM, "ingot_checkpoint_open_dir: out of memory");
    goto done;
  }
  for (int32_t c = json_first(d, wm); c >= 0; c = json_next(d, c)) {
    size_t kl, fl;
    const char *name = json_key(d, c, &kl), *file = json_str(d, c, &fl);
    if (!file || strlen(file) != fl || !fl || strchr(file, '/') || !strcmp(file, "..") ||
        !strcmp(file, ".")) {
      ingot_set_error(INGOT_ERR_IO, "%s: weight_map['%s'] is not a file name in the directory",
                      ipath, name);
      goto done_files;
    }
    int s = -1;
    for (int i = 0; i < ck->n_shards; i++)
      if (!strcmp(files[i], file)) s = i;
    if (s < 0) {
      if ((s = add_shard(ck, dir, file)) < 0) goto done_files;
      files[s] = file;
    }
    int64_t idx = ingot_safetensors_find(ck->shards[s], name);
    if (idx < 0 || strlen(name) != kl) {
      ingot_set_error(INGOT_ERR_IO, "%s: tensor '%s' is mapped to %s, which does not have it",
                      ipath, name, file);
      goto done_files;
    }
    ck->e[ck->n++] = (ck_entry){ck->shards[s]->t[idx].name, s, idx};
  }
  qsort(ck->e, (size_t)ck->n, sizeof *ck->e, cmp_entry);
  for (int64_t i = 1; i < ck->n; i++)
    if (!strcmp(ck->e[i - 1].name, ck->e[i].name)) {
      ingot_set_error(INGOT_ERR_IO, "%s: tensor '%s' is mapped twice", ipath, ck->e[i].name);
      goto done_files;
    }
  if (ck->n_shards == 0) {
    ingot_set_error(INGOT_ERR_IO, "%s: 'weight_map' is empty", ipath);
    goto done_files;
  }
  ok = true;
done_files:
  free(files);
done:
  json_free(d);
  return ok;
}

ingot_checkpoint *ingot_checkpoint_open_dir(const char *dir) {
  if (!dir) return fail(INGOT_ERR_ARG, "ingot_checkpoint_open_dir: dir is NULL");
  ingot_checkpoint *ck = calloc(1, sizeof *ck);
  if (!ck) return fail(INGOT_ERR_OOM, "ingot_checkpoint_open_dir: out of memory");
  char *ipath = model_path_join(dir, "model.safetensors.index.json");
  char *single = model_path_join(dir, "model.safetensors");
  if (!ipath || !single) {
    ingot_set_error(INGOT_ERR_OOM, "ingot_checkpoint_open_dir: out of memory");
    goto fail;
  }
  struct stat sb;
  if (!stat(ipath, &sb)) {
    if (!open_index(ck, dir, ipath)) goto fail;
  } else if (!stat(single, &sb)) {
    if (add_shard(ck, dir, "model.safetensors") < 0) goto fail;
    ingot_safetensors *st = ck->shards[0];
    if (!(ck->e = calloc((size_t)st->n + 1, sizeof *ck->e))) {
      ingot_set_error(INGOT_ERR_OOM, "ingot_checkpoint_open_dir: out of memory");
      goto fail;
    }
    for (int64_t i = 0; i < st->n; i++) ck->e[i] = (ck_entry){st->t[i].name, 0, i};
    ck->n = st->n; /* already sorted */
  } else {
    ingot_set_error(INGOT_ERR_IO,
                    "%s: no model.safetensors or model.safetensors.index.json in the directory",
                    dir);
    goto fail;
  }
  free(ipath);
  free(single);
  return ck;
fail:
  free(ipath);
  free(single);
  ingot_checkpoint_close(ck);
  return NULL;
}

int64_t ingot_checkpoint_tensor_count(const ingot_checkpoint *ck) { return ck ? ck->n : 0; }
int64_t ingot_checkpoint_shard_count(const ingot_checkpoint *ck) { return ck ? ck->n_shards : 0; }

bool ingot_checkpoint_info_get(const ingot_checkpoint *ck, int64_t i, ingot_safetensors_info *out) {
  if (!ck || !out || i < 0 || i >= ck->n) {
    ingot_set_error(INGOT_ERR_INDEX, "ingot_checkpoint_info_get: index %lld out of range",
                    (long long)i);
    return false;
  }
  const ck_entry *e = &ck->e[i];
  fill_info(ck->shards[e->shard], &ck->shards[e->shard]->t[e->index], out);
  return true;
}

bool ingot_checkpoint_find(const ingot_checkpoint *ck, const char *name,
                           ingot_safetensors_info *out) {
  if (!ck || !name || !out) return false;
  ck_entry key = {name, 0, 0};
  const ck_entry *e = bsearch(&key, ck->e, (size_t)ck->n, sizeof *ck->e, cmp_entry);
  if (!e) return false;
  fill_info(ck->shards[e->shard], &ck->shards[e->shard]->t[e->index], out);
  return true;
}

ingot_tensor *ingot_checkpoint_load_tensor(const ingot_checkpoint *ck, const char *name,
                                           ingot_dtype dt, ingot_device dev) {
  if (!ck || !name) return fail(INGOT_ERR_ARG, "ingot_checkpoint_load_tensor: NULL argument");
  ingot_safetensors_info ti;
  if (!ingot_checkpoint_find(ck, name, &ti))
    return fail(INGOT_ERR_ARG, "ingot_checkpoint_load_tensor: no tensor '%s'", name);
  return load_info(&ti, dt, dev);
}
