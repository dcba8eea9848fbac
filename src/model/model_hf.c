/* HF model directories: config.json (llama, qwen3, qwen3_moe), safetensors weights
 * (single file or sharded) and tokenizer.json. Linear weights in F32, F16 or
 * BF16 stay in the mapping and go through ingot_ggml_matvec (ggml types 0, 1,
 * 30 are plain row-major rows); F8_E4M3 weights with a per-row "<name>_scale"
 * are dequantised to an owned F32 copy at load. Norm vectors are copied to
 * F32. HF rotates half-split RoPE pairs (x[i], x[i + d/2]): cfg.rope_neox. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fileio.h"
#include "../core/internal.h"
#include "ingot/dtype.h"
#include "ingot/quant.h"
#include "ingot/safetensors.h"
#include "json.h"
#include "model_internal.h"

typedef struct hf_state {
  ingot_checkpoint *ck;
  void **owned;
  int n_owned, cap_owned;
  unsigned char *sparse; /* [n_layers] 1: the layer's MLP is the expert block */
} hf_state;

void hf_free(ingot_model *m) {
  if (!m || !m->hf) return;
  hf_state *h = m->hf;
  for (int i = 0; i < h->n_owned; i++) free(h->owned[i]);
  free(h->owned);
  ingot_checkpoint_close(h->ck);
  free(h);
  m->hf = NULL;
}

/* malloc'd memory freed with the model. */
static void *own(ingot_model *m, size_t bytes) {
  hf_state *h = m->hf;
  if (h->n_owned == h->cap_owned) {
    int nc = h->cap_owned ? 2 * h->cap_owned : 64;
    void **no = realloc(h->owned, (size_t)nc * sizeof *no);
    if (!no) return ingot_fail(INGOT_ERR_OOM, "model: out of memory");
    h->owned = no;
    h->cap_owned = nc;
  }
  void *p = malloc(bytes ? bytes : 1);
  if (!p) return ingot_fail(INGOT_ERR_OOM, "model: out of memory (%zu bytes)", bytes);
  h->owned[h->n_owned++] = p;
  return p;
}

/* A JSON document from dir/file; NULL (error set unless optional and absent). */
static json_doc *read_json(const char *dir, const char *file, bool optional) {
  char *p = model_path_join(dir, file);
  if (!p) return ingot_fail(INGOT_ERR_OOM, "model: out of memory");
  size_t len;
  char *text = model_read_file(p, &len);
  if (!text) {
    if (!optional) ingot_fail(INGOT_ERR_IO, "%s: cannot read it", p);
    free(p);
    return NULL;
  }
  char err[160];
  json_doc *d = json_parse(text, len, err, sizeof err);
  free(text);
  if (!d) ingot_fail(INGOT_ERR_IO, "%s: malformed JSON: %s", p, err);
  free(p);
  return d;
}

/* ---- config.json ---- */

typedef struct cfg_reader {
  const json_doc *d;
  int32_t root;
  const char *path;
} cfg_reader;

static bool has(const cfg_reader *r, const char *key) {
  return json_type_of(r->d, json_get(r->d, r->root, key)) != JSON_NULL;
}

/* A positive integer field (bounded); def < 0: required. */
static bool cfg_int(const cfg_reader *r, const char *key, int64_t def, int64_t max, int64_t *out) {
  int32_t n = json_get(r->d, r->root, key);
  if (json_type_of(r->d, n) == JSON_NULL) {
    if (def < 0) {
      ingot_fail(INGOT_ERR_IO, "%s/config.json: missing '%s'", r->path, key);
      return false;
    }
    *out = def;
    return true;
  }
  double v = json_num(r->d, n);
  if (json_type_of(r->d, n) != JSON_NUM || !(v >= 1 && v <= (double)max) || v != floor(v)) {
    ingot_fail(INGOT_ERR_IO, "%s/config.json: '%s' must be an integer in [1, %lld]", r->path, key,
               (long long)max);
    return false;
  }
  *out = (int64_t)v;
  return true;
}

static bool cfg_dim(const cfg_reader *r, const char *key, int def, int *out) {
  int64_t v;
  if (!cfg_int(r, key, def, 1 << 20, &v)) return false;
  *out = (int)v;
  return true;
}

static bool cfg_float(const cfg_reader *r, int32_t obj, const char *key, double def, double *out) {
  int32_t n = json_get(r->d, obj, key);
  if (json_type_of(r->d, n) == JSON_NULL) {
    *out = def;
    return true;
  }
  if (json_type_of(r->d, n) != JSON_NUM || !isfinite(json_num(r->d, n))) {
    ingot_fail(INGOT_ERR_IO, "%s/config.json: '%s' must be a number", r->path, key);
    return false;
  }
  *out = json_num(r->d, n);
  return true;
}

static bool cfg_str_is(const cfg_reader *r, int32_t obj, const char *key, const char *want) {
  size_t len;
  const char *s = json_str(r->d, json_get(r->d, obj, key), &len);
  return s && strlen(want) == len && !memcmp(s, want, len);
}

/* RoPE inverse frequencies per HF (default, linear, llama3). */
static bool rope_setup(ingot_model *m, const cfg_reader *r) {
  ingot_model_config *c = &m->cfg;
  int half = c->head_dim / 2;
  if (!model_rope_init(m)) return false;
  double *f = m->inv_freq;
  c->rope_factor = 1;
  /* transformers >= 5 writes "rope_parameters" (rope_type, rope_theta, factors) */
  int32_t rs = json_get(r->d, r->root, "rope_scaling");
  if (json_type_of(r->d, rs) != JSON_OBJ) rs = json_get(r->d, r->root, "rope_parameters");
  if (json_type_of(r->d, rs) == JSON_OBJ) {
    size_t len;
    const char *t = json_str(r->d, json_get(r->d, rs, "rope_type"), &len);
    if (!t) t = json_str(r->d, json_get(r->d, rs, "type"), &len);
    if (!t) {
      ingot_fail(INGOT_ERR_IO, "%s/config.json: rope_scaling without a 'rope_type'", r->path);
      return false;
    }
    double factor, lo, hi, orig;
    bool is_linear = len == 6 && !memcmp(t, "linear", 6),
         is_llama3 = len == 6 && !memcmp(t, "llama3", 6);
    if (len == 7 && !memcmp(t, "default", 7)) {
      /* plain RoPE */
    } else if (is_linear || is_llama3) {
      if (!cfg_float(r, rs, "factor", 0, &factor)) return false;
      if (!(factor > 0)) {
        ingot_fail(INGOT_ERR_IO, "%s/config.json: rope_scaling.factor must be > 0", r->path);
        return false;
      }
      c->rope_factor = (float)factor;
      if (is_linear) {
        c->rope_scaling = INGOT_ROPE_SCALING_LINEAR;
        for (int i = 0; i < half; i++) f[i] /= factor;
      } else {
        c->rope_scaling = INGOT_ROPE_SCALING_LLAMA3;
        if (!cfg_float(r, rs, "low_freq_factor", 1, &lo) ||
            !cfg_float(r, rs, "high_freq_factor", 4, &hi) ||
            !cfg_float(r, rs, "original_max_position_embeddings", 8192, &orig))
          return false;
        if (!(hi > lo) || !(lo > 0) || !(orig > 0)) {
          ingot_fail(INGOT_ERR_IO, "%s/config.json: bad llama3 rope_scaling factors", r->path);
          return false;
        }
        c->rope_low_freq_factor = (float)lo;
        c->rope_high_freq_factor = (float)hi;
        c->rope_orig_ctx = (int64_t)orig;
        /* transformers' _compute_llama3_parameters */
        double lo_wl = orig / lo, hi_wl = orig / hi;
        for (int i = 0; i < half; i++) {
          double wl = 2 * M_PI / f[i];
          if (wl > lo_wl) {
            f[i] /= factor;
          } else if (wl >= hi_wl) {
            double s = (orig / wl - lo) / (hi - lo);
            f[i] = (1 - s) * f[i] / factor + s * f[i];
          }
        }
      }
    } else {
      ingot_fail(INGOT_ERR_UNSUPPORTED, "%s/config.json: rope_scaling type '%.*s' is not supported",
                 r->path, (int)len, t);
      return false;
    }
  }
  return true;
}

/* qwen3_moe's expert fields (transformers' Qwen3MoeConfig defaults) and
 * which layers are sparse: not in mlp_only_layers and (l + 1) a multiple of
 * decoder_sparse_step, as Qwen3MoeDecoderLayer decides. */
static bool read_moe_config(ingot_model *m, const cfg_reader *r) {
  ingot_model_config *c = &m->cfg;
  const json_doc *d = r->d;
  int step = 1;
  /* transformers has named the expert count in several ways across versions
   * and MoE families; the first present wins. */
  const char *experts_key = "num_experts";
  for (const char *const *k =
           (const char *const[]){"num_experts", "num_local_experts", "n_routed_experts", NULL};
       *k; k++)
    if (json_type_of(d, json_get(d, r->root, *k)) != JSON_NULL) {
      experts_key = *k;
      break;
    }
  if (!cfg_dim(r, experts_key, 128, &c->n_experts) ||
      !cfg_dim(r, "num_experts_per_tok", 8, &c->n_experts_used) ||
      !cfg_dim(r, "moe_intermediate_size", 768, &c->expert_ffn_dim) ||
      !cfg_dim(r, "decoder_sparse_step", 1, &step))
    return false;
  int32_t sh = json_get(d, r->root, "shared_expert_intermediate_size");
  if (!(json_type_of(d, sh) == JSON_NUM && json_num(d, sh) == 0) &&
      !cfg_dim(r, "shared_expert_intermediate_size", 0, &c->shared_expert_ffn_dim))
    return false;
  if (c->n_experts_used > c->n_experts) {
    ingot_fail(INGOT_ERR_IO, "%s/config.json: num_experts_per_tok %d > num_experts %d", r->path,
               c->n_experts_used, c->n_experts);
    return false;
  }
  int32_t nt = json_get(d, r->root, "norm_topk_prob");
  c->norm_topk_prob = json_type_of(d, nt) == JSON_BOOL && json_bool(d, nt);
  unsigned char *sp = own(m, (size_t)c->n_layers);
  if (!(m->hf->sparse = sp)) return false;
  for (int l = 0; l < c->n_layers; l++) sp[l] = (l + 1) % step == 0;
  int32_t mo = json_get(d, r->root, "mlp_only_layers");
  if (json_type_of(d, mo) != JSON_NULL && json_type_of(d, mo) != JSON_ARR) {
    ingot_fail(INGOT_ERR_IO, "%s/config.json: 'mlp_only_layers' must be a list", r->path);
    return false;
  }
  for (int32_t e = json_first(d, mo); e >= 0; e = json_next(d, e)) {
    double v = json_num(d, e);
    if (json_type_of(d, e) != JSON_NUM || v != floor(v) || !(v >= 0 && v < c->n_layers)) {
      ingot_fail(INGOT_ERR_IO, "%s/config.json: 'mlp_only_layers' entries must be layer indices",
                 r->path);
      return false;
    }
    sp[(int)v] = 0;
  }
  return true;
}

static bool read_config(ingot_model *m, const cfg_reader *r) {
  ingot_model_config *c = &m->cfg;
  const json_doc *d = r->d;
  size_t len;
  const char *mt = json_str(d, json_get(d, r->root, "model_type"), &len);
  const char *ar = json_str(d, json_first(d, json_get(d, r->root, "architectures")), NULL);
  if (mt ? (len == 5 && !memcmp(mt, "llama", 5)) : ar && !strcmp(ar, "LlamaForCausalLM")) {
    c->arch = INGOT_ARCH_LLAMA;
    strcpy(c->arch_name, "llama");
  } else if (mt ? (len == 5 && !memcmp(mt, "qwen3", 5)) : ar && !strcmp(ar, "Qwen3ForCausalLM")) {
    c->arch = INGOT_ARCH_QWEN3;
    strcpy(c->arch_name, "qwen3");
    c->qk_norm = true;
  } else if (mt ? (len == 9 && !memcmp(mt, "qwen3_moe", 9))
                : ar && !strcmp(ar, "Qwen3MoeForCausalLM")) {
    c->arch = INGOT_ARCH_QWEN3_MOE;
    strcpy(c->arch_name, "qwen3_moe");
    c->qk_norm = true;
  } else {
    ingot_fail(INGOT_ERR_UNSUPPORTED,
               "%s/config.json: model_type '%.*s' is not supported (llama, qwen3, qwen3_moe)",
               r->path, mt ? (int)len : (int)strlen(ar ? ar : "?"),
               mt   ? mt
               : ar ? ar
                    : "?");
    return false;
  }
  c->rope_neox = true; /* HF checkpoints rotate half-split pairs */
  if (!cfg_dim(r, "hidden_size", -1, &c->dim) ||
      !cfg_dim(r, "intermediate_size", -1, &c->ffn_dim) ||
      !cfg_dim(r, "num_hidden_layers", -1, &c->n_layers) ||
      !cfg_dim(r, "num_attention_heads", -1, &c->n_heads) ||
      !cfg_dim(r, "num_key_value_heads", c->n_heads, &c->n_kv_heads) ||
      !cfg_dim(r, "head_dim", c->dim / c->n_heads > 0 ? c->dim / c->n_heads : 1, &c->head_dim) ||
      !cfg_dim(r, "vocab_size", -1, &c->vocab))
    return false;
  if (c->n_heads % c->n_kv_heads || c->head_dim % 2) {
    ingot_fail(INGOT_ERR_IO, "%s/config.json: %d heads, %d kv heads, head dim %d: inconsistent",
               r->path, c->n_heads, c->n_kv_heads, c->head_dim);
    return false;
  }
  if (!cfg_int(r, "max_position_embeddings", 2048, INT64_C(1) << 40, &c->ctx_train)) return false;
  double eps, theta;
  if (!cfg_float(r, r->root, "rms_norm_eps", 1e-6, &eps) ||
      !cfg_float(r, r->root, "rope_theta", 10000, &theta))
    return false;
  int32_t rp = json_get(d, r->root, "rope_parameters");
  if (!has(r, "rope_theta") && json_type_of(d, rp) == JSON_OBJ &&
      !cfg_float(r, rp, "rope_theta", 10000, &theta))
    return false;
  if (!(eps > 0) || !(theta > 1)) {
    ingot_fail(INGOT_ERR_IO, "%s/config.json: bad rms_norm_eps %g or rope_theta %g", r->path, eps,
               theta);
    return false;
  }
  c->rms_eps = (float)eps;
  c->rope_base = (float)theta;
  if (has(r, "hidden_act") && !cfg_str_is(r, r->root, "hidden_act", "silu")) {
    ingot_fail(INGOT_ERR_UNSUPPORTED,
               "%s/config.json: hidden_act other than 'silu' is not supported", r->path);
    return false;
  }
  for (int i = 0; i < 3; i++) { /* features this runtime does not implement */
    const char *k = i == 2 ? "use_sliding_window" : i ? "mlp_bias" : "attention_bias";
    int32_t n = json_get(d, r->root, k);
    if (json_type_of(d, n) == JSON_BOOL && json_bool(d, n)) {
      ingot_fail(INGOT_ERR_UNSUPPORTED, "%s/config.json: %s = true is not supported", r->path, k);
      return false;
    }
  }
  int32_t tie = json_get(d, r->root, "tie_word_embeddings");
  c->tied_embeddings = json_type_of(d, tie) == JSON_BOOL && json_bool(d, tie);
  /* eos_token_id: an id or a list of ids; they end generation. */
  int32_t eos = json_get(d, r->root, "eos_token_id");
  int32_t one = json_type_of(d, eos) == JSON_ARR ? json_first(d, eos) : eos;
  for (; one >= 0 && m->n_stop < 3; one = json_type_of(d, eos) == JSON_ARR ? json_next(d, one) : -1)
    if (json_type_of(d, one) == JSON_NUM && json_num(d, one) >= 0 && json_num(d, one) < c->vocab)
      m->stop[m->n_stop++] = (int32_t)json_num(d, one);
  return (c->arch != INGOT_ARCH_QWEN3_MOE || read_moe_config(m, r)) && rope_setup(m, r);
}

/* ---- weights ---- */

static int ggml_type_of(ingot_dtype dt) {
  return dt == INGOT_F32    ? INGOT_GGML_F32
         : dt == INGOT_F16  ? INGOT_GGML_F16
         : dt == INGOT_BF16 ? INGOT_GGML_BF16
                            : -1;
}

static float elem_f32(ingot_dtype dt, const uint8_t *p) {
  uint32_t u;
  uint16_t h;
  float f;
  switch (dt) {
    case INGOT_F32:
      memcpy(&u, p, 4);
      memcpy(&f, &u, 4);
      return f;
    case INGOT_F16:
      memcpy(&h, p, 2);
      return ingot_f16_to_f32(h);
    case INGOT_BF16:
      memcpy(&h, p, 2);
      return ingot_bf16_to_f32(h);
    case INGOT_F8E4M3FN:
      return ingot_f8e4m3fn_to_f32(*p);
    default:
      return NAN;
  }
}

static bool find(ingot_model *m, const char *name, ingot_safetensors_info *ti) {
  if (ingot_checkpoint_find(m->hf->ck, name, ti)) return true;
  ingot_fail(INGOT_ERR_IO, "%s: missing tensor '%s'", m->path, name);
  return false;
}

static bool check_shape(ingot_model *m, const ingot_safetensors_info *ti, int64_t rows,
                        int64_t cols) {
  bool ok = rows ? ti->ndim == 2 && ti->shape[0] == rows && ti->shape[1] == cols
                 : ti->ndim == 1 && ti->shape[0] == cols;
  if (ok) return true;
  char have[128] = "";
  int o = 0;
  for (int k = 0; k < ti->ndim && o < 100; k++)
    o += snprintf(have + o, sizeof have - (size_t)o, "%s%lld", k ? ", " : "",
                  (long long)ti->shape[k]);
  if (rows)
    ingot_fail(INGOT_ERR_IO,
               "%s: tensor '%s' has shape [%s], expected [%lld, %lld] for this config", m->path,
               ti->name, have, (long long)rows, (long long)cols);
  else
    ingot_fail(INGOT_ERR_IO, "%s: tensor '%s' has shape [%s], expected [%lld] for this config",
               m->path, ti->name, have, (long long)cols);
  return false;
}

/* A [rows, cols] weight as matvec rows: mapped if F32/F16/BF16 and aligned,
 * else an owned copy (F8_E4M3 x per-row scale -> F32). f8_linear: the tensor
 * forward reads this weight only as f8 when it is f8 (a linear other than
 * the router, or an expert), so with m->f8_only no F32 copy is made (data
 * NULL: 4 bytes a weight of host memory saved). */
static bool get_mat_ex(ingot_model *m, const char *name, int64_t rows, int64_t cols, qweight *w,
                       bool f8_linear) {
  ingot_safetensors_info ti;
  if (!find(m, name, &ti) || !check_shape(m, &ti, rows, cols)) return false;
  int type = ggml_type_of(ti.dtype);
  const void *data = ti.data;
  const uint8_t *f8 = NULL;
  const float *f8_scale = NULL;
  if (type >= 0) {
    size_t esz = ingot_dtype_size(ti.dtype);
    if ((uintptr_t)data % esz) { /* typed loads need natural alignment */
      void *copy = own(m, ti.nbytes);
      if (!copy) return false;
      memcpy(copy, data, ti.nbytes);
      data = copy;
    }
  } else if (ti.dtype == INGOT_F8E4M3FN) {
    char sname[300];
    snprintf(sname, sizeof sname, "%s_scale", name);
    ingot_safetensors_info si;
    if (!ingot_checkpoint_find(m->hf->ck, sname, &si)) {
      ingot_fail(INGOT_ERR_UNSUPPORTED,
                 "%s: F8_E4M3 tensor '%s' has no per-row scale '%s' (other fp8 layouts are not "
                 "supported yet)",
                 m->path, name, sname);
      return false;
    }
    if (si.numel != rows || ggml_type_of(si.dtype) < 0) {
      ingot_fail(INGOT_ERR_UNSUPPORTED,
                 "%s: scale '%s' must be a float tensor of %lld elements (one per output row)",
                 m->path, sname, (long long)rows);
      return false;
    }
    const bool copy = !(m->f8_only && f8_linear);
    float *f = copy ? own(m, (size_t)(rows * cols) * sizeof(float)) : NULL;
    float *scale = own(m, (size_t)rows * sizeof(float));
    if ((copy && !f) || !scale) return false;
    const uint8_t *q = ti.data, *s = si.data;
    size_t ssz = ingot_dtype_size(si.dtype);
    for (int64_t r = 0; r < rows; r++) scale[r] = elem_f32(si.dtype, s + (size_t)r * ssz);
    if (copy) {
#pragma omp parallel for schedule(static)
      for (int64_t r = 0; r < rows; r++)
        for (int64_t k = 0; k < cols; k++)
          f[r * cols + k] = ingot_f8e4m3fn_to_f32(q[r * cols + k]) * scale[r];
    }
    data = f;
    type = INGOT_GGML_F32;
    f8 = q;
    f8_scale = scale;
  } else {
    ingot_fail(INGOT_ERR_UNSUPPORTED,
               "%s: tensor '%s' has dtype %s, not a supported weight type "
               "(F32, F16, BF16, F8_E4M3)",
               m->path, name, ti.dtype_name);
    return false;
  }
  size_t row_bytes = ingot_ggml_row_size(type, cols);
  *w = (qweight){.data = data,
                 .type = type,
                 .rows = rows,
                 .cols = cols,
                 .row_bytes = row_bytes,
                 .nbytes = row_bytes * (size_t)rows,
                 .f8 = f8,
                 .f8_scale = f8_scale};
  return true;
}

/* A linear weight (read as f8 by the tensor forward when it is f8). */
static bool get_mat(ingot_model *m, const char *name, int64_t rows, int64_t cols, qweight *w) {
  return get_mat_ex(m, name, rows, cols, w, true);
}

/* A norm vector of n floats, copied to F32. */
static bool get_vec(ingot_model *m, const char *name, int64_t n, const float **out) {
  ingot_safetensors_info ti;
  if (!find(m, name, &ti) || !check_shape(m, &ti, 0, n)) return false;
  if (ggml_type_of(ti.dtype) < 0) {
    ingot_fail(INGOT_ERR_UNSUPPORTED, "%s: tensor '%s' has dtype %s (F32, F16 or BF16 expected)",
               m->path, name, ti.dtype_name);
    return false;
  }
  float *f = own(m, (size_t)n * sizeof(float));
  if (!f) return false;
  size_t esz = ingot_dtype_size(ti.dtype);
  for (int64_t i = 0; i < n; i++) f[i] = elem_f32(ti.dtype, (const uint8_t *)ti.data + i * esz);
  *out = f;
  return true;
}

/* Expert e's [rows, cols] slice of a fused [E, k * rows, cols] tensor
 * (transformers >= 5 stores experts as gate_up_proj and down_proj), part
 * `part` of k along the rows. */
static bool get_fused(ingot_model *m, const ingot_safetensors_info *ti, int64_t E, int k, int e,
                      int part, int64_t rows, int64_t cols, qweight *w) {
  int type = ggml_type_of(ti->dtype);
  if (ti->ndim != 3 || ti->shape[0] != E || ti->shape[1] != k * rows || ti->shape[2] != cols) {
    ingot_fail(INGOT_ERR_IO,
               "%s: tensor '%s' has %d dims, expected [%lld, %lld, %lld] for this config", m->path,
               ti->name, ti->ndim, (long long)E, (long long)(k * rows), (long long)cols);
    return false;
  }
  if (type < 0 || (uintptr_t)ti->data % ingot_dtype_size(ti->dtype)) {
    ingot_fail(INGOT_ERR_UNSUPPORTED, "%s: fused expert tensor '%s' must be aligned F32/F16/BF16",
               m->path, ti->name);
    return false;
  }
  size_t row_bytes = ingot_ggml_row_size(type, cols), nbytes = row_bytes * (size_t)rows;
  *w = (qweight){.data = (const char *)ti->data + ((size_t)e * (size_t)k + (size_t)part) * nbytes,
                 .type = type,
                 .rows = rows,
                 .cols = cols,
                 .row_bytes = row_bytes,
                 .nbytes = nbytes};
  return true;
}

/* Layer l's expert block: router, experts (one tensor per expert and
 * projection, or transformers 5's fused gate_up_proj/down_proj) and the
 * shared expert if the config has one. */
static bool load_moe(ingot_model *m, int l, layer *L) {
  const ingot_model_config *c = &m->cfg;
  int64_t E = c->n_experts, dim = c->dim, eff = c->expert_ffn_dim, sff = c->shared_expert_ffn_dim;
  moe_weights *w = own(m, sizeof *w);
  qweight *ex = own(m, 3 * (size_t)E * sizeof *ex);
  if (!w || !ex) return false;
  memset(w, 0, sizeof *w);
  *w = (moe_weights){.gate = ex, .up = ex + E, .down = ex + 2 * E, .has_shared = sff > 0};
  L->moe = w;
  char n[160];
  snprintf(n, sizeof n, "model.layers.%d.mlp.gate.weight", l);
  if (!get_mat_ex(m, n, E, dim, &w->router, false)) return false; /* read as floats */
  ingot_safetensors_info gu, dn;
  char gn[160], dnn[160];
  snprintf(gn, sizeof gn, "model.layers.%d.mlp.experts.gate_up_proj", l);
  snprintf(dnn, sizeof dnn, "model.layers.%d.mlp.experts.down_proj", l);
  if (ingot_checkpoint_find(m->hf->ck, gn, &gu)) {
    if (!find(m, dnn, &dn)) return false;
    for (int e = 0; e < E; e++)
      if (!get_fused(m, &gu, E, 2, e, 0, eff, dim, &w->gate[e]) ||
          !get_fused(m, &gu, E, 2, e, 1, eff, dim, &w->up[e]) ||
          !get_fused(m, &dn, E, 1, e, 0, dim, eff, &w->down[e]))
        return false;
  } else {
    for (int e = 0; e < E; e++) {
      const char *proj[3] = {"gate", "up", "down"};
      for (int p = 0; p < 3; p++) {
        snprintf(n, sizeof n, "model.layers.%d.mlp.experts.%d.%s_proj.weight", l, e, proj[p]);
        qweight *q = p == 0 ? &w->gate[e] : p == 1 ? &w->up[e] : &w->down[e];
        if (!get_mat(m, n, p == 2 ? dim : eff, p == 2 ? eff : dim, q)) return false;
      }
    }
  }
  if (!w->has_shared) return true;
  const char *sp[4] = {"shared_expert.gate_proj", "shared_expert.up_proj",
                       "shared_expert.down_proj", "shared_expert_gate"};
  qweight *sq[4] = {&w->sh_gate, &w->sh_up, &w->sh_down, &w->sh_router};
  for (int p = 0; p < 4; p++) {
    snprintf(n, sizeof n, "model.layers.%d.mlp.%s.weight", l, sp[p]);
    int64_t rows = p == 3 ? 1 : p == 2 ? dim : sff, cols = p == 2 ? sff : dim;
    if (!get_mat(m, n, rows, cols, sq[p])) return false;
  }
  return true;
}

static bool load_weights(ingot_model *m) {
  const ingot_model_config *c = &m->cfg;
  int64_t dim = c->dim, qd = (int64_t)c->n_heads * c->head_dim,
          kvd = (int64_t)c->n_kv_heads * c->head_dim, ffn = c->ffn_dim;
  if (!get_mat_ex(m, "model.embed_tokens.weight", c->vocab, dim, &m->embd, false) ||
      !get_vec(m, "model.norm.weight", dim, &m->out_norm))
    return false;
  ingot_safetensors_info ti;
  bool has_head = ingot_checkpoint_find(m->hf->ck, "lm_head.weight", &ti);
  if (c->tied_embeddings || !has_head) {
    m->cfg.tied_embeddings = true; /* no lm_head.weight: the embedding is the head */
    m->lm_head = m->embd;
  } else if (!get_mat(m, "lm_head.weight", c->vocab, dim, &m->lm_head)) {
    return false;
  }
  m->layers = calloc((size_t)c->n_layers, sizeof *m->layers);
  if (!m->layers) {
    ingot_fail(INGOT_ERR_OOM, "model: out of memory");
    return false;
  }
  char n[128];
#define W(field, suffix, rows, cols)                              \
  (snprintf(n, sizeof n, "model.layers.%d." suffix ".weight", l), \
   get_mat(m, n, rows, cols, &L->field))
#define V(field, suffix, len) \
  (snprintf(n, sizeof n, "model.layers.%d." suffix ".weight", l), get_vec(m, n, len, &L->field))
  for (int l = 0; l < c->n_layers; l++) {
    layer *L = &m->layers[l];
    if (!V(attn_norm, "input_layernorm", dim) || !V(ffn_norm, "post_attention_layernorm", dim) ||
        !W(wq, "self_attn.q_proj", qd, dim) || !W(wk, "self_attn.k_proj", kvd, dim) ||
        !W(wv, "self_attn.v_proj", kvd, dim) || !W(wo, "self_attn.o_proj", dim, qd))
      return false;
    if (m->hf->sparse && m->hf->sparse[l]
            ? !load_moe(m, l, L)
            : !W(w_gate, "mlp.gate_proj", ffn, dim) || !W(w_up, "mlp.up_proj", ffn, dim) ||
                  !W(w_down, "mlp.down_proj", dim, ffn))
      return false;
    if (c->qk_norm && (!V(q_norm, "self_attn.q_norm", c->head_dim) ||
                       !V(k_norm, "self_attn.k_norm", c->head_dim)))
      return false;
  }
#undef W
#undef V
  return true;
}

/* Touch the mapped shards now (reporting progress), not in the first prompt. */
static bool checkpoint_span(const void *src, int64_t i, const void **data, size_t *nbytes) {
  ingot_safetensors_info ti;
  if (!ingot_checkpoint_info_get(src, i, &ti)) return false;
  *data = ti.data;
  *nbytes = ti.nbytes;
  return true;
}

bool hf_load(ingot_model *m, const ingot_model_options *opts) {
  if (!(m->hf = calloc(1, sizeof *m->hf))) {
    ingot_fail(INGOT_ERR_OOM, "model: out of memory");
    return false;
  }
  json_doc *d = read_json(m->path, "config.json", false);
  if (!d) return false;
  cfg_reader r = {d, json_root(d), m->path};
  bool ok = json_type_of(d, r.root) == JSON_OBJ;
  if (!ok) ingot_fail(INGOT_ERR_IO, "%s/config.json: not a JSON object", m->path);
  ok = ok && read_config(m, &r);
  json_free(d);
  if (!ok) return false;
  if (!(m->hf->ck = ingot_checkpoint_open_dir(m->path)) || !load_weights(m)) return false;
  char *tp = model_path_join(m->path, "tokenizer.json");
  if (!tp) {
    ingot_fail(INGOT_ERR_OOM, "model: out of memory");
    return false;
  }
  m->tok = ingot_tokenizer_from_json(tp);
  free(tp);
  if (!m->tok) return false;
  /* The chat template, if tokenizer_config.json has one as a string. */
  json_doc *tc = read_json(m->path, "tokenizer_config.json", true);
  if (tc) {
    size_t len;
    const char *t = json_str(tc, json_get(tc, json_root(tc), "chat_template"), &len);
    if (t && !(m->chat_template = strndup(t, len))) {
      json_free(tc);
      ingot_fail(INGOT_ERR_OOM, "model: out of memory");
      return false;
    }
    json_free(tc);
  } else {
    ingot_clear_error();
  }
  model_prefault(ingot_checkpoint_tensor_count(m->hf->ck), checkpoint_span, m->hf->ck, opts);
  return true;
}
