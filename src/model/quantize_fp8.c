/* FP8 quantization of an HF checkpoint directory (include/ingot/convert.h):
 * per-output-row scales, e4m3fn values rounded as PyTorch does
 * (src/core/fpconv.h), written with the safetensors writer one tensor at a
 * time, so memory stays at about one tensor whatever the model size. The
 * scale name "<weight>_scale" and its [rows] F32 shape are what model_hf.c
 * loads. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../core/fpconv.h"
#include "../core/internal.h"
#include "fileio.h"
#include "ingot/convert.h"
#include "ingot/safetensors.h"

#define F8_MAX 448.0f

enum { COPY, F8_VALUES, F8_SCALE };

typedef struct qctx {
  ingot_checkpoint *ck;
  int64_t n;
  ingot_safetensors_entry *e;
  int64_t *src; /* input tensor of entry i */
  unsigned char *kind;
  char **owned_names;
  const ingot_quantize_options *o;
} qctx;

static bool ends_with(const char *s, const char *suffix) {
  size_t a = strlen(s), b = strlen(suffix);
  return a >= b && !memcmp(s + a - b, suffix, b);
}

/* A 2-D linear weight to quantize: not an embedding, a MoE router (its
 * top-k is a discrete choice that rounding would move) or a skipped head. */
static bool is_linear_weight(const ingot_safetensors_info *ti, bool skip_head) {
  const char *n = ti->name;
  if (ti->ndim != 2 || !ends_with(n, ".weight")) return false;
  if (strstr(n, "embed_tokens") || strstr(n, "norm")) return false;
  if (ends_with(n, ".mlp.gate.weight") || ends_with(n, "shared_expert_gate.weight")) return false;
  return !(skip_head && !strcmp(n, "lm_head.weight"));
}

static void row_f32(ingot_dtype dt, const uint8_t *p, int64_t n, float *out) {
  for (int64_t k = 0; k < n; k++) {
    uint16_t h;
    switch (dt) {
      case INGOT_F32:
        memcpy(&out[k], p + 4 * k, 4);
        break;
      case INGOT_F16:
        memcpy(&h, p + 2 * k, 2);
        out[k] = fp_f16_to_f32(h);
        break;
      default: /* BF16 */
        memcpy(&h, p + 2 * k, 2);
        out[k] = fp_bf16_to_f32(h);
        break;
    }
  }
}

/* amax(row) / 448, or 1 for an all-zero row; -1 if the row is not finite. */
static float row_scale(const float *x, int64_t n) {
  float amax = 0;
  for (int64_t k = 0; k < n; k++) {
    if (!isfinite(x[k])) return -1;
    float a = fabsf(x[k]);
    amax = a > amax ? a : amax;
  }
  return amax > 0 ? amax / F8_MAX : 1.0f;
}

/* Entry i's bytes: a copy, the e4m3 values of a weight, or its scales. */
static ingot_status fill(int64_t i, void *buf, size_t nbytes, void *user) {
  qctx *q = user;
  ingot_safetensors_info ti;
  if (!ingot_checkpoint_info_get(q->ck, q->src[i], &ti)) return ingot_last_status();
  if (q->o && q->o->progress) q->o->progress((double)(i + 1) / (double)q->n, q->o->progress_user);
  if (q->kind[i] == COPY) {
    memcpy(buf, ti.data, nbytes);
    return INGOT_OK;
  }
  int64_t rows = ti.shape[0], cols = ti.shape[1];
  size_t esz = ingot_dtype_size(ti.dtype);
  int64_t bad = -1;
#pragma omp parallel
  {
    float *x = malloc((size_t)cols * sizeof(float));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
      if (!x) {
#pragma omp critical
        bad = -2;
        continue;
      }
      row_f32(ti.dtype, (const uint8_t *)ti.data + (size_t)r * (size_t)cols * esz, cols, x);
      float s = row_scale(x, cols);
      if (s < 0) {
#pragma omp critical
        bad = bad == -1 || (bad >= 0 && r < bad) ? r : bad;
        continue;
      }
      if (q->kind[i] == F8_SCALE) {
        ((float *)buf)[r] = s;
        continue;
      }
      uint8_t *out = (uint8_t *)buf + (size_t)r * (size_t)cols;
      for (int64_t k = 0; k < cols; k++) {
        float v = x[k] / s;
        v = v > F8_MAX ? F8_MAX : v < -F8_MAX ? -F8_MAX : v; /* saturate: 448 < |v| < 480 */
        out[k] = fp_f32_to_f8e4m3fn(v);
      }
    }
    free(x);
  }
  if (bad == -2) {
    ingot_fail(INGOT_ERR_OOM, "ingot_quantize_fp8: out of memory");
    return INGOT_ERR_OOM;
  }
  if (bad >= 0) {
    ingot_fail(INGOT_ERR_ARG, "ingot_quantize_fp8: tensor '%s' row %lld holds NaN or inf", ti.name,
               (long long)bad);
    return INGOT_ERR_ARG;
  }
  return INGOT_OK;
}

/* Entries for every input tensor (and a scale after each quantized one). */
static ingot_status plan(qctx *q, ingot_quantize_stats *stats) {
  int64_t nt = ingot_checkpoint_tensor_count(q->ck), n = 0;
  q->e = calloc((size_t)(2 * nt + 1), sizeof *q->e);
  q->src = calloc((size_t)(2 * nt + 1), sizeof *q->src);
  q->kind = calloc((size_t)(2 * nt + 1), 1);
  q->owned_names = calloc((size_t)(nt + 1), sizeof *q->owned_names);
  if (!q->e || !q->src || !q->kind || !q->owned_names) {
    ingot_fail(INGOT_ERR_OOM, "ingot_quantize_fp8: out of memory");
    return INGOT_ERR_OOM;
  }
  bool skip = q->o && q->o->skip_lm_head;
  for (int64_t i = 0; i < nt; i++) {
    ingot_safetensors_info ti;
    if (!ingot_checkpoint_info_get(q->ck, i, &ti)) return ingot_last_status();
    stats->tensors++;
    stats->bytes_in += ti.nbytes;
    ingot_safetensors_entry *e = &q->e[n];
    *e = (ingot_safetensors_entry){.name = ti.name, .dtype = ti.dtype, .ndim = ti.ndim};
    memcpy(e->shape, ti.shape, sizeof e->shape);
    q->src[n] = i;
    q->kind[n++] = COPY;
    if (!is_linear_weight(&ti, skip)) continue;
    if (ti.dtype != INGOT_F32 && ti.dtype != INGOT_F16 && ti.dtype != INGOT_BF16) {
      ingot_fail(INGOT_ERR_UNSUPPORTED,
                 "ingot_quantize_fp8: weight '%s' has dtype %s (F32, F16 or BF16 expected)", ti.name,
                 ti.dtype_name);
      return INGOT_ERR_UNSUPPORTED;
    }
    size_t len = strlen(ti.name);
    char *sn = malloc(len + 7);
    if (!(q->owned_names[stats->quantized] = sn)) {
      ingot_fail(INGOT_ERR_OOM, "ingot_quantize_fp8: out of memory");
      return INGOT_ERR_OOM;
    }
    memcpy(sn, ti.name, len);
    memcpy(sn + len, "_scale", 7);
    if (ingot_checkpoint_find(q->ck, sn, &(ingot_safetensors_info){0})) {
      ingot_fail(INGOT_ERR_UNSUPPORTED, "ingot_quantize_fp8: '%s' already exists in the input", sn);
      return INGOT_ERR_UNSUPPORTED;
    }
    stats->quantized++;
    e->dtype = INGOT_F8E4M3FN;
    q->kind[n - 1] = F8_VALUES;
    q->e[n] = (ingot_safetensors_entry){
        .name = sn, .dtype = INGOT_F32, .ndim = 1, .shape = {ti.shape[0]}};
    q->src[n] = i;
    q->kind[n++] = F8_SCALE;
  }
  q->n = n;
  for (int64_t i = 0; i < n; i++) {
    size_t b = ingot_dtype_size(q->e[i].dtype);
    for (int k = 0; k < q->e[i].ndim; k++) b *= (size_t)q->e[i].shape[k];
    stats->bytes_out += b;
  }
  return INGOT_OK;
}

/* Copy in/name to out/name. */
static ingot_status copy_file(const char *in, const char *out, const char *name) {
  char *src = model_path_join(in, name), *dst = model_path_join(out, name);
  ingot_status st = INGOT_OK;
  int fi = -1, fo = -1;
  if (!src || !dst) {
    ingot_fail(INGOT_ERR_OOM, "ingot_quantize_fp8: out of memory");
    st = INGOT_ERR_OOM;
    goto done;
  }
  if ((fi = open(src, O_RDONLY)) < 0 || (fo = open(dst, O_WRONLY | O_CREAT | O_TRUNC, 0644)) < 0) {
    ingot_fail(INGOT_ERR_IO, "ingot_quantize_fp8: cannot copy %s to %s: %s", src, dst, strerror(errno));
    st = INGOT_ERR_IO;
    goto done;
  }
  char buf[1 << 16];
  ssize_t r;
  while ((r = read(fi, buf, sizeof buf)) > 0)
    if (write(fo, buf, (size_t)r) != r) {
      r = -1;
      break;
    }
  if (r < 0 || close(fo)) {
    ingot_fail(INGOT_ERR_IO, "ingot_quantize_fp8: writing %s failed: %s", dst, strerror(errno));
    st = INGOT_ERR_IO;
  }
  fo = -1;
done:
  if (fi >= 0) close(fi);
  if (fo >= 0) close(fo);
  free(src);
  free(dst);
  return st;
}

/* Every regular file of in_dir but the weights. */
static ingot_status copy_side_files(const char *in_dir, const char *out_dir) {
  DIR *d = opendir(in_dir);
  if (!d) {
    ingot_fail(INGOT_ERR_IO, "ingot_quantize_fp8: cannot list %s: %s", in_dir, strerror(errno));
    return INGOT_ERR_IO;
  }
  ingot_status st = INGOT_OK;
  struct dirent *de;
  while (!st && (de = readdir(d))) {
    const char *n = de->d_name;
    if (n[0] == '.' || ends_with(n, ".safetensors") || !strcmp(n, "model.safetensors.index.json"))
      continue;
    char *p = model_path_join(in_dir, n);
    struct stat sb;
    bool reg = p && !stat(p, &sb) && S_ISREG(sb.st_mode);
    free(p);
    if (reg) st = copy_file(in_dir, out_dir, n);
  }
  closedir(d);
  return st;
}

ingot_status ingot_quantize_fp8(const char *in_dir, const char *out_dir,
                                const ingot_quantize_options *opts, ingot_quantize_stats *stats) {
  if (!in_dir || !out_dir) {
    ingot_fail(INGOT_ERR_ARG, "ingot_quantize_fp8: a directory is NULL");
    return INGOT_ERR_ARG;
  }
  ingot_quantize_stats local;
  if (!stats) stats = &local;
  memset(stats, 0, sizeof *stats);
  if (mkdir(out_dir, 0755) && errno != EEXIST) {
    ingot_fail(INGOT_ERR_IO, "ingot_quantize_fp8: cannot create %s: %s", out_dir, strerror(errno));
    return INGOT_ERR_IO;
  }
  char a[PATH_MAX], b[PATH_MAX];
  if (!realpath(in_dir, a) || !realpath(out_dir, b)) {
    ingot_fail(INGOT_ERR_IO, "ingot_quantize_fp8: %s: %s", realpath(in_dir, a) ? out_dir : in_dir,
               strerror(errno));
    return INGOT_ERR_IO;
  }
  if (!strcmp(a, b)) {
    ingot_fail(INGOT_ERR_ARG, "ingot_quantize_fp8: the output directory is the input directory");
    return INGOT_ERR_ARG;
  }
  char *stale = model_path_join(out_dir, "model.safetensors.index.json");
  bool has_stale = stale && !access(stale, F_OK);
  free(stale);
  if (has_stale) {
    ingot_fail(INGOT_ERR_ARG,
               "ingot_quantize_fp8: %s holds a model.safetensors.index.json (it would shadow the "
               "output); use an empty directory",
               out_dir);
    return INGOT_ERR_ARG;
  }
  qctx q = {.o = opts};
  if (!(q.ck = ingot_checkpoint_open_dir(in_dir))) return ingot_last_status();
  ingot_status st = plan(&q, stats);
  char *path = st ? NULL : model_path_join(out_dir, "model.safetensors");
  if (!st && !path) {
    ingot_fail(INGOT_ERR_OOM, "ingot_quantize_fp8: out of memory");
    st = INGOT_ERR_OOM;
  }
  static const char *const meta[] = {"format", "pt"};
  if (!st) st = ingot_safetensors_write(path, q.e, q.n, meta, 1, fill, &q);
  if (!st) st = copy_side_files(in_dir, out_dir);
  free(path);
  for (int64_t i = 0; q.owned_names && q.owned_names[i]; i++) free(q.owned_names[i]);
  free(q.owned_names);
  free(q.e);
  free(q.src);
  free(q.kind);
  ingot_checkpoint_close(q.ck);
  return st;
}
