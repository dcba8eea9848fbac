/* The llama-family transformer on the CPU (llama2.c in spirit): weights stay
 * quantised in the GGUF mapping and every linear layer is ingot_ggml_matvec_q8
 * (int8 activations, as llama.cpp) or, with exact_matvec, ingot_ggml_matvec;
 * RMSNorm, RoPE, grouped-query attention over a float KV cache, SwiGLU.
 * Prompts run in chunks of up to CHUNK tokens through the same matvec (it
 * reads each weight row once per chunk). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../core/internal.h"
#include "ingot/gguf.h"
#include "ingot/model.h"
#include "ingot/quant.h"
#include "ingot/tokenizer.h"
#include "forward_dev.h"
#include "../core/env.h"
#include "model_internal.h"
#include "quant_q8.h"

#define CHUNK 64
#define DEFAULT_CTX 2048

/* ---- loading ---- */

static bool meta_int(const ingot_gguf *g, const char *arch, const char *key, int64_t *out) {
  char full[160];
  snprintf(full, sizeof full, "%s.%s", arch, key);
  return ingot_gguf_get_int(g, full, out);
}

static bool meta_float(const ingot_gguf *g, const char *arch, const char *key, double *out) {
  char full[160];
  snprintf(full, sizeof full, "%s.%s", arch, key);
  return ingot_gguf_get_float(g, full, out);
}

/* A required positive integer hyper-parameter, bounded to keep sizes sane. */
static bool meta_dim(const ingot_gguf *g, const char *arch, const char *key, int *out,
                     const char *path) {
  int64_t v;
  if (!meta_int(g, arch, key, &v)) {
    ingot_fail(INGOT_ERR_IO, "%s: missing metadata '%s.%s'", path, arch, key);
    return false;
  }
  if (v <= 0 || v > (1 << 20)) {
    ingot_fail(INGOT_ERR_IO, "%s: metadata '%s.%s' = %lld is out of range", path, arch, key,
               (long long)v);
    return false;
  }
  *out = (int)v;
  return true;
}

static bool read_config(const ingot_gguf *g, const char *path, ingot_model_config *c) {
  size_t len;
  const char *a = ingot_gguf_get_string(g, "general.architecture", &len);
  if (!a) {
    ingot_fail(INGOT_ERR_IO, "%s: missing metadata 'general.architecture'", path);
    return false;
  }
  if (len >= sizeof c->arch_name) len = sizeof c->arch_name - 1;
  memcpy(c->arch_name, a, len);
  c->arch_name[len] = 0;
  if (!strcmp(c->arch_name, "llama")) {
    c->arch = INGOT_ARCH_LLAMA;
  } else if (!strcmp(c->arch_name, "qwen3")) {
    c->arch = INGOT_ARCH_QWEN3;
    c->qk_norm = true;
    c->rope_neox = true; /* llama.cpp: LLAMA_ROPE_TYPE_NEOX */
  } else if (!strcmp(c->arch_name, "qwen3moe")) {
    c->arch = INGOT_ARCH_QWEN3_MOE;
    c->qk_norm = true;
    c->rope_neox = true;
    c->norm_topk_prob = true; /* llama.cpp's qwen3moe graph always renormalises */
  } else {
    ingot_fail(INGOT_ERR_UNSUPPORTED,
               "%s: architecture '%s' is not supported (llama, qwen3, qwen3moe)", path,
               c->arch_name);
    return false;
  }
  const char *an = c->arch_name;
  if (!meta_dim(g, an, "block_count", &c->n_layers, path) ||
      !meta_dim(g, an, "embedding_length", &c->dim, path) ||
      !meta_dim(g, an, "feed_forward_length", &c->ffn_dim, path) ||
      !meta_dim(g, an, "attention.head_count", &c->n_heads, path))
    return false;
  int64_t v;
  c->n_kv_heads = c->n_heads;
  if (meta_int(g, an, "attention.head_count_kv", &v) &&
      !meta_dim(g, an, "attention.head_count_kv", &c->n_kv_heads, path))
    return false;
  c->head_dim = c->dim / c->n_heads;
  if (meta_int(g, an, "attention.key_length", &v) &&
      !meta_dim(g, an, "attention.key_length", &c->head_dim, path))
    return false;
  if (meta_int(g, an, "attention.value_length", &v) && v != c->head_dim) {
    ingot_fail(INGOT_ERR_UNSUPPORTED, "%s: value_length %lld != key_length %d is not supported",
               path, (long long)v, c->head_dim);
    return false;
  }
  if (c->head_dim <= 0 || c->n_heads % c->n_kv_heads || c->head_dim % 2) {
    ingot_fail(INGOT_ERR_IO, "%s: %d heads, %d kv heads, head dim %d: inconsistent", path,
               c->n_heads, c->n_kv_heads, c->head_dim);
    return false;
  }
  c->ctx_train = meta_int(g, an, "context_length", &v) && v > 0 ? v : DEFAULT_CTX;
  double d;
  c->rms_eps = meta_float(g, an, "attention.layer_norm_rms_epsilon", &d) ? (float)d : 1e-5f;
  c->rope_base = meta_float(g, an, "rope.freq_base", &d) ? (float)d : 10000.0f;
  if (!(c->rms_eps > 0) || !(c->rope_base > 1)) {
    ingot_fail(INGOT_ERR_IO, "%s: bad rms epsilon %g or rope base %g", path, c->rms_eps,
               c->rope_base);
    return false;
  }
  c->rope_factor = 1;
  char key[160];
  snprintf(key, sizeof key, "%s.rope.scaling.type", an);
  const char *st = ingot_gguf_get_string(g, key, &len);
  if (st && !(len == 4 && !memcmp(st, "none", 4))) {
    if (len == 6 && !memcmp(st, "linear", 6)) {
      c->rope_scaling = INGOT_ROPE_SCALING_LINEAR;
      if (!meta_float(g, an, "rope.scaling.factor", &d) || !(d > 0)) {
        ingot_fail(INGOT_ERR_IO, "%s: linear rope scaling without a valid factor", path);
        return false;
      }
      c->rope_factor = (float)d;
    } else if (!(len == 6 && !memcmp(st, "llama3", 6))) {
      ingot_fail(INGOT_ERR_UNSUPPORTED, "%s: rope scaling '%.*s' is not supported", path, (int)len,
                 st);
      return false;
    }
  }
  if (c->arch == INGOT_ARCH_QWEN3_MOE) {
    if (!meta_dim(g, an, "expert_count", &c->n_experts, path) ||
        !meta_dim(g, an, "expert_used_count", &c->n_experts_used, path) ||
        !meta_dim(g, an, "expert_feed_forward_length", &c->expert_ffn_dim, path))
      return false;
    if (c->n_experts_used > c->n_experts) {
      ingot_fail(INGOT_ERR_IO, "%s: expert_used_count %d > expert_count %d", path,
                 c->n_experts_used, c->n_experts);
      return false;
    }
  } else if (meta_int(g, an, "expert_count", &v) && v > 0) {
    ingot_fail(INGOT_ERR_UNSUPPORTED, "%s: mixture-of-experts models are not supported yet", path);
    return false;
  }
  return true;
}

/* Tensor `name`: present, ne == {cols, rows} (rows 0 for 1-D), and of a
 * type the matvec handles; the error names the tensor and both shapes. */
static bool get_tensor(ingot_model *m, const char *name, int64_t cols, int64_t rows, qweight *w) {
  int64_t i = ingot_gguf_find_tensor(m->g, name);
  if (i < 0) {
    ingot_fail(INGOT_ERR_IO, "%s: missing tensor '%s'", m->path, name);
    return false;
  }
  ingot_gguf_tensor_info ti;
  if (!ingot_gguf_tensor_info_get(m->g, i, &ti)) return false;
  int want_ndim = rows ? 2 : 1;
  bool ok = ti.ne[0] == cols && (rows ? ti.ndim == 2 && ti.ne[1] == rows : ti.ndim == 1);
  if (!ok) {
    char have[96] = "", want[64];
    int o = 0;
    for (int k = 0; k < ti.ndim && o < 80; k++)
      o +=
          snprintf(have + o, sizeof have - (size_t)o, "%s%lld", k ? ", " : "", (long long)ti.ne[k]);
    if (rows)
      snprintf(want, sizeof want, "%lld, %lld", (long long)cols, (long long)rows);
    else
      snprintf(want, sizeof want, "%lld", (long long)cols);
    ingot_fail(INGOT_ERR_IO,
               "%s: tensor '%s' has shape [%s], expected [%s] (ggml order, %d-D) for this "
               "config",
               m->path, name, have, want, want_ndim);
    return false;
  }
  size_t rs = ingot_ggml_row_size(ti.type, cols);
  const char *tn = ingot_ggml_type_name(ti.type);
  if (!rs || (!rows && ti.type != INGOT_GGML_F32)) {
    ingot_fail(INGOT_ERR_UNSUPPORTED, "%s: tensor '%s' has type %s (%d), not supported here",
               m->path, name, tn ? tn : "unknown", ti.type);
    return false;
  }
  int64_t nrows = rows ? rows : 1;
  if (ti.nbytes != rs * (size_t)nrows || ((uintptr_t)ti.data & 3)) {
    ingot_fail(INGOT_ERR_IO, "%s: tensor '%s' has %zu bytes (or misaligned data), expected %zu",
               m->path, name, ti.nbytes, rs * (size_t)nrows);
    return false;
  }
  w->data = ti.data;
  w->type = ti.type;
  w->rows = nrows;
  w->cols = cols;
  w->row_bytes = rs;
  w->nbytes = ti.nbytes;
  return true;
}

/* The E experts of a 3-D GGUF tensor, ne == {cols, rows, E}: expert e is
 * the e-th [rows, cols] slab, each row in a type the matvec handles. */
static bool get_experts(ingot_model *m, const char *name, int64_t cols, int64_t rows, int64_t E,
                        qweight *out) {
  int64_t i = ingot_gguf_find_tensor(m->g, name);
  ingot_gguf_tensor_info ti;
  if (i < 0) {
    ingot_fail(INGOT_ERR_IO, "%s: missing tensor '%s'", m->path, name);
    return false;
  }
  if (!ingot_gguf_tensor_info_get(m->g, i, &ti)) return false;
  if (ti.ndim != 3 || ti.ne[0] != cols || ti.ne[1] != rows || ti.ne[2] != E) {
    ingot_fail(INGOT_ERR_IO,
               "%s: tensor '%s' has %d dims [%lld, %lld, ...], expected [%lld, %lld, %lld] "
               "(ggml order) for this config",
               m->path, name, ti.ndim, (long long)ti.ne[0], (long long)ti.ne[1], (long long)cols,
               (long long)rows, (long long)E);
    return false;
  }
  size_t rs = ingot_ggml_row_size(ti.type, cols);
  if (!rs || ti.nbytes != rs * (size_t)(rows * E) || ((uintptr_t)ti.data & 3)) {
    ingot_fail(INGOT_ERR_UNSUPPORTED, "%s: tensor '%s' has an unsupported type or size", m->path,
               name);
    return false;
  }
  for (int64_t e = 0; e < E; e++)
    out[e] = (qweight){.data = (const char *)ti.data + (size_t)e * rs * (size_t)rows,
                       .type = ti.type,
                       .rows = rows,
                       .cols = cols,
                       .row_bytes = rs,
                       .nbytes = rs * (size_t)rows};
  return true;
}

/* blk.l's expert block: router ffn_gate_inp, experts ffn_{gate,up,down}_exps. */
static bool get_moe(ingot_model *m, int l, moe_weights *w, qweight *ex) {
  const ingot_model_config *c = &m->cfg;
  int64_t E = c->n_experts, dim = c->dim, eff = c->expert_ffn_dim;
  *w = (moe_weights){.gate = ex, .up = ex + E, .down = ex + 2 * E};
  char n[96];
  snprintf(n, sizeof n, "blk.%d.ffn_gate_inp.weight", l);
  if (!get_tensor(m, n, dim, E, &w->router)) return false;
  snprintf(n, sizeof n, "blk.%d.ffn_gate_exps.weight", l);
  if (!get_experts(m, n, dim, eff, E, w->gate)) return false;
  snprintf(n, sizeof n, "blk.%d.ffn_up_exps.weight", l);
  if (!get_experts(m, n, dim, eff, E, w->up)) return false;
  snprintf(n, sizeof n, "blk.%d.ffn_down_exps.weight", l);
  return get_experts(m, n, eff, dim, E, w->down);
}

static bool get_norm(ingot_model *m, const char *name, int64_t n, const float **out) {
  qweight w;
  if (!get_tensor(m, name, n, 0, &w)) return false;
  *out = w.data;
  return true;
}

static bool load_weights(ingot_model *m) {
  const ingot_model_config *c = &m->cfg;
  int64_t dim = c->dim, qd = (int64_t)c->n_heads * c->head_dim,
          kvd = (int64_t)c->n_kv_heads * c->head_dim;
  int64_t ti = ingot_gguf_find_tensor(m->g, "token_embd.weight");
  ingot_gguf_tensor_info info;
  if (ti < 0) {
    ingot_fail(INGOT_ERR_IO, "%s: missing tensor 'token_embd.weight'", m->path);
    return false;
  }
  if (!ingot_gguf_tensor_info_get(m->g, ti, &info)) return false;
  if (info.ndim != 2 || info.ne[1] <= 0 || info.ne[1] > INT32_MAX) {
    ingot_fail(INGOT_ERR_IO, "%s: tensor 'token_embd.weight' is not a [%lld, vocab] matrix",
               m->path, (long long)dim);
    return false;
  }
  m->cfg.vocab = (int)info.ne[1];
  if (!get_tensor(m, "token_embd.weight", dim, c->vocab, &m->embd)) return false;
  if (!get_norm(m, "output_norm.weight", dim, &m->out_norm)) return false;
  m->cfg.tied_embeddings = ingot_gguf_find_tensor(m->g, "output.weight") < 0;
  if (c->tied_embeddings)
    m->lm_head = m->embd;
  else if (!get_tensor(m, "output.weight", dim, c->vocab, &m->lm_head))
    return false;

  m->layers = calloc((size_t)c->n_layers, sizeof *m->layers);
  if (!m->layers) {
    ingot_fail(INGOT_ERR_OOM, "model: out of memory");
    return false;
  }
  char n[96];
#define T(field, suffix, cols, rows) \
  (snprintf(n, sizeof n, "blk.%d." suffix ".weight", l), get_tensor(m, n, cols, rows, &L->field))
#define N(field, suffix, len) \
  (snprintf(n, sizeof n, "blk.%d." suffix ".weight", l), get_norm(m, n, len, &L->field))
  bool moe = c->arch == INGOT_ARCH_QWEN3_MOE; /* every layer sparse, as llama.cpp */
  size_t E = (size_t)c->n_experts;
  if (moe &&
      !(m->moe_w = calloc((size_t)c->n_layers, sizeof(moe_weights) + 3 * E * sizeof(qweight)))) {
    ingot_fail(INGOT_ERR_OOM, "model: out of memory");
    return false;
  }
  for (int l = 0; l < c->n_layers; l++) {
    layer *L = &m->layers[l];
    if (!N(attn_norm, "attn_norm", dim) || !N(ffn_norm, "ffn_norm", dim) ||
        !T(wq, "attn_q", dim, qd) || !T(wk, "attn_k", dim, kvd) || !T(wv, "attn_v", dim, kvd) ||
        !T(wo, "attn_output", qd, dim))
      return false;
    if (moe) {
      L->moe = &m->moe_w[l];
      if (!get_moe(m, l, L->moe, (qweight *)(m->moe_w + c->n_layers) + (size_t)l * 3 * E))
        return false;
    } else if (!T(w_gate, "ffn_gate", dim, c->ffn_dim) || !T(w_up, "ffn_up", dim, c->ffn_dim) ||
               !T(w_down, "ffn_down", c->ffn_dim, dim)) {
      return false;
    }
    if (c->qk_norm &&
        (!N(q_norm, "attn_q_norm", c->head_dim) || !N(k_norm, "attn_k_norm", c->head_dim)))
      return false;
  }
#undef T
#undef N
  /* RoPE inverse frequencies, with llama3 per-frequency factors if given. */
  int half = c->head_dim / 2;
  if (!model_rope_init(m)) return false;
  const float *factors = NULL;
  if (ingot_gguf_find_tensor(m->g, "rope_freqs.weight") >= 0) {
    if (!get_norm(m, "rope_freqs.weight", half, &factors)) return false;
    m->cfg.rope_scaling = INGOT_ROPE_SCALING_LLAMA3;
  }
  for (int i = 0; i < half; i++) {
    if (factors) m->inv_freq[i] /= factors[i];
    if (c->rope_scaling == INGOT_ROPE_SCALING_LINEAR) m->inv_freq[i] /= c->rope_factor;
  }
  return true;
}

bool model_rope_init(ingot_model *m) {
  const ingot_model_config *c = &m->cfg;
  int half = c->head_dim / 2;
  m->inv_freq = malloc((size_t)half * sizeof *m->inv_freq); /* freed by ingot_model_free */
  if (!m->inv_freq) {
    ingot_fail(INGOT_ERR_OOM, "model: out of memory");
    return false;
  }
  for (int i = 0; i < half; i++) m->inv_freq[i] = pow((double)c->rope_base, -2.0 * i / c->head_dim);
  return true;
}

static bool alloc_buffers(ingot_model *m) {
  const ingot_model_config *c = &m->cfg;
  size_t qd = (size_t)c->n_heads * c->head_dim, kvd = (size_t)c->n_kv_heads * c->head_dim;
  size_t wide = qd > (size_t)c->dim ? qd : (size_t)c->dim;
  size_t cache, att;
  /* The context comes from the file and the caller: sizes must not wrap. */
  if (c->ctx <= 0 || __builtin_mul_overflow((size_t)c->n_layers * kvd, (size_t)c->ctx, &cache) ||
      __builtin_mul_overflow(cache, 2 * sizeof(float), &(size_t){0}) ||
      !(att = model_attention_scratch(c, CHUNK))) {
    ingot_fail(INGOT_ERR_ARG, "model: a context of %lld positions is too large", (long long)c->ctx);
    return false;
  }
  m->k_cache = malloc(cache * sizeof(float));
  m->v_cache = malloc(cache * sizeof(float));
  m->x = malloc(CHUNK * (size_t)c->dim * sizeof(float));
  m->xb = malloc(CHUNK * wide * sizeof(float));
  m->xb2 = malloc(CHUNK * (size_t)c->dim * sizeof(float));
  m->q = malloc(CHUNK * qd * sizeof(float));
  m->k = malloc(CHUNK * kvd * sizeof(float));
  m->v = malloc(CHUNK * kvd * sizeof(float));
  m->hb = malloc(CHUNK * (size_t)model_ffn_max(c) * sizeof(float));
  m->hb2 = malloc(CHUNK * (size_t)model_ffn_max(c) * sizeof(float));
  m->att = malloc(att * sizeof(float));
  m->rope_cs = malloc(CHUNK * (size_t)c->head_dim * sizeof(float));
  if (!m->k_cache || !m->v_cache || !m->x || !m->xb || !m->xb2 || !m->q || !m->k || !m->v ||
      !m->hb || !m->hb2 || !m->att || !m->rope_cs) {
    ingot_fail(INGOT_ERR_OOM, "model: out of memory for the KV cache (%zu MiB) and buffers",
               2 * cache * sizeof(float) >> 20);
    return false;
  }
  return c->n_experts <= 0 || moe_alloc(m, CHUNK);
}

int64_t model_ffn_max(const ingot_model_config *c) {
  int64_t f = c->ffn_dim;
  if (c->n_experts > 0 && c->expert_ffn_dim > f) f = c->expert_ffn_dim;
  return c->shared_expert_ffn_dim > f ? c->shared_expert_ffn_dim : f;
}

/* Fault the mapped weights in now (reporting progress) rather than during
 * the first prompt. */
void model_prefault(int64_t n, model_span_fn span, const void *src, const ingot_model_options *o) {
  size_t total = 0, done = 0, nbytes;
  const void *data;
  for (int64_t i = 0; i < n; i++)
    if (span(src, i, &data, &nbytes)) total += nbytes;
  volatile unsigned char sink = 0;
  for (int64_t i = 0; i < n; i++) {
    if (!span(src, i, &data, &nbytes)) continue;
    const unsigned char *p = data;
    for (size_t off = 0; off < nbytes; off += 4096) sink ^= p[off];
    done += nbytes;
    if (o && o->progress && total) o->progress((double)done / (double)total, o->progress_user);
  }
  (void)sink;
}

static bool gguf_span(const void *src, int64_t i, const void **data, size_t *nbytes) {
  ingot_gguf_tensor_info ti;
  if (!ingot_gguf_tensor_info_get(src, i, &ti)) return false;
  *data = ti.data;
  *nbytes = ti.nbytes;
  return true;
}

static void add_stop_token(ingot_model *m, const char *text) {
  int32_t ids[4];
  int64_t n = ingot_tokenize(m->tok, text, strlen(text), true, ids, 4);
  if (n != 1 || !ingot_tokenizer_is_special(m->tok, ids[0])) {
    ingot_clear_error();
    return;
  }
  for (int i = 0; i < m->n_stop; i++)
    if (m->stop[i] == ids[0]) return;
  if (m->n_stop < (int)(sizeof m->stop / sizeof m->stop[0])) m->stop[m->n_stop++] = ids[0];
}

ingot_model *ingot_model_load_ex(const char *path, ingot_device dev,
                                 const ingot_model_options *opts) {
  if (!path) return ingot_fail(INGOT_ERR_ARG, "ingot_model_load: path is NULL");
  if (!backend_for(dev)) return fail_in("ingot_model_load");
  ingot_model *m = calloc(1, sizeof *m);
  if (!m) return ingot_fail(INGOT_ERR_OOM, "ingot_model_load: out of memory");
  m->exact_matvec = (opts && opts->exact_matvec) || ingot_env_on("INGOT_EXACT_MATVEC");
  m->path = strdup(path);
  if (!m->path) {
    free(m);
    return ingot_fail(INGOT_ERR_OOM, "ingot_model_load: out of memory");
  }
  bool tensor_forward = dev.kind != INGOT_DEVICE_CPU || (opts && opts->tensor_forward) ||
                        ingot_env_on("INGOT_TENSOR_FORWARD");
  m->f8_only = tensor_forward; /* the raw path needs every f8 weight's F32 copy */
  struct stat sb;
  bool hf = !stat(path, &sb) && S_ISDIR(sb.st_mode); /* an HF directory (model_hf.c) */
  if (hf ? !hf_load(m, opts)
         : (!(m->g = ingot_gguf_open(path)) || !read_config(m->g, path, &m->cfg) ||
            !load_weights(m)))
    goto fail;
  int64_t cap = opts && opts->max_ctx > 0 ? opts->max_ctx : DEFAULT_CTX;
  m->cfg.ctx = m->cfg.ctx_train < cap ? m->cfg.ctx_train : cap;
  if (tensor_forward ? !dev_model_init(m, dev) : !alloc_buffers(m)) goto fail;
  if (!hf) m->tok = ingot_tokenizer_from_gguf(m->g);
  if (!m->tok) goto fail;
  if (ingot_tokenizer_vocab_size(m->tok) > m->cfg.vocab) {
    ingot_fail(INGOT_ERR_IO, "%s: the tokenizer has %lld tokens but token_embd.weight %d rows",
               path, (long long)ingot_tokenizer_vocab_size(m->tok), m->cfg.vocab);
    goto fail;
  }
  if (ingot_tokenizer_eos(m->tok) >= 0) m->stop[m->n_stop++] = ingot_tokenizer_eos(m->tok);
  add_stop_token(m, "<|im_end|>");
  add_stop_token(m, "<|endoftext|>");
  add_stop_token(m, "<|eot_id|>");
  add_stop_token(m, "<|end_of_text|>");
  size_t len;
  const char *tmpl = hf ? NULL : ingot_gguf_get_string(m->g, "tokenizer.chat_template", &len);
  if (tmpl && !(m->chat_template = strndup(tmpl, len))) {
    ingot_fail(INGOT_ERR_OOM, "ingot_model_load: out of memory");
    goto fail;
  }
  if (!hf) /* hf_load prefaults its shards */
    model_prefault(ingot_gguf_tensor_count(m->g), gguf_span, m->g, opts);
  if (m->devm && dev_model_warmup(m)) goto fail; /* first-use costs here, not in a prompt */
  return m;
fail:
  ingot_model_free(m);
  return NULL;
}

ingot_model *ingot_model_load(const char *path, ingot_device dev) {
  return ingot_model_load_ex(path, dev, NULL);
}

void ingot_model_free(ingot_model *m) {
  if (!m) return;
  ingot_tokenizer_free(m->tok);
  ingot_gguf_close(m->g);
  hf_free(m);
  dev_model_free(m->devm);
  moe_free(m);
  free(m->moe_w);
  free(m->layers);
  free(m->inv_freq);
  free(m->k_cache);
  free(m->v_cache);
  free(m->x);
  free(m->xb);
  free(m->xb2);
  free(m->q);
  free(m->k);
  free(m->v);
  free(m->hb);
  free(m->hb2);
  free(m->att);
  free(m->rope_cs);
  free(m->chat_template);
  free(m->path);
  free(m);
}

const ingot_model_config *ingot_model_get_config(const ingot_model *m) {
  return m ? &m->cfg : NULL;
}
bool ingot_model_layer_is_moe(const ingot_model *m, int l) {
  if (!m || l < 0 || l >= m->cfg.n_layers) return false;
  return m->layers ? m->layers[l].moe != NULL : m->devm && m->devm->layers[l].sparse;
}
ingot_tokenizer *ingot_model_tokenizer(ingot_model *m) { return m ? m->tok : NULL; }
const char *ingot_model_chat_template(const ingot_model *m) { return m ? m->chat_template : NULL; }
void ingot_model_reset(ingot_model *m) {
  if (m) m->n_past = 0;
}
int64_t ingot_model_n_past(const ingot_model *m) { return m ? m->n_past : 0; }
ingot_status ingot_model_truncate(ingot_model *m, int64_t n) {
  if (!m || n < 0 || n > m->n_past) {
    ingot_fail(INGOT_ERR_ARG, "ingot_model_truncate: %lld is outside [0, n_past]", (long long)n);
    return INGOT_ERR_ARG;
  }
  m->n_past = n;
  return INGOT_OK;
}

/* ---- forward ---- */

static void rmsnorm(float *out, const float *x, const float *w, int64_t n, float eps) {
  double ss = 0;
  for (int64_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
  float s = (float)(1.0 / sqrt(ss / (double)n + eps));
  for (int64_t i = 0; i < n; i++) out[i] = x[i] * s * w[i];
}

/* Rotate one head: adjacent pairs (x[2i], x[2i+1]) for llama GGUF files
 * (their Q/K rows are permuted by the converter), half-split pairs
 * (x[i], x[i+d/2]) for neox-style models. cs holds cos[half], sin[half]. */
static void rope(float *x, const float *cs, int hd, bool neox) {
  int half = hd / 2;
  for (int i = 0; i < half; i++) {
    int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
    float c = cs[i], s = cs[half + i], x0 = x[a], x1 = x[b];
    x[a] = x0 * c - x1 * s;
    x[b] = x0 * s + x1 * c;
  }
}

static ingot_status linear(const ingot_model *m, const qweight *w, const float *x, int64_t n,
                           float *y) {
  if (m->exact_matvec) return ingot_ggml_matvec(w->type, w->data, w->rows, w->cols, x, n, y);
  return ingot_ggml_matvec_q8(w->type, w->data, w->rows, w->cols, x, n, y);
}

/* y[i] = W[i] x for matrices that read the same x: with int8 activations
 * and one quantised type, x is quantised once and all rows form one pool
 * job (q8_matvec_many); otherwise one linear each. */
static ingot_status linear_many(const ingot_model *m, int n, const qweight *const *w,
                                const float *x, int64_t nx, float *const *y) {
  bool same = !m->exact_matvec && n <= Q8_MANY_MAX && w[0]->cols > 0 && w[0]->cols % 32 == 0 &&
              (w[0]->type == INGOT_GGML_Q4_0 || w[0]->type == INGOT_GGML_Q4_1 ||
               w[0]->type == INGOT_GGML_Q8_0);
  const void *wd[Q8_MANY_MAX];
  int64_t rows[Q8_MANY_MAX];
  for (int i = 0; same && i < n; i++) {
    same = w[i]->type == w[0]->type && w[i]->cols == w[0]->cols;
    wd[i] = w[i]->data;
    rows[i] = w[i]->rows;
  }
  if (same) return q8_matvec_many(n, w[0]->type, wd, rows, w[0]->cols, x, nx, y);
  ingot_status st = INGOT_OK;
  for (int i = 0; i < n && !st; i++) st = linear(m, w[i], x, nx, y[i]);
  return st;
}

ingot_status model_mlp(const ingot_model *m, const qweight *gate, const qweight *up,
                       const qweight *down, const float *x, int64_t n, float *h1, float *h2,
                       float *y) {
  ingot_status st;
  if ((st = linear_many(m, 2, (const qweight *[]){gate, up}, x, n, (float *[]){h1, h2}))) return st;
  int64_t nf = n * gate->rows;
  for (int64_t i = 0; i < nf; i++) {
    float g = h1[i];
    h1[i] = g / (1.0f + expf(-g)) * h2[i];
  }
  return linear(m, down, h1, n, y);
}

/* One chunk of T <= CHUNK tokens at positions n_past..; the residual stream
 * of token t ends in m->x[t]. */
static ingot_status forward_chunk(ingot_model *m, const int32_t *tok, int64_t T) {
  const ingot_model_config *c = &m->cfg;
  int64_t dim = c->dim, hd = c->head_dim, nh = c->n_heads, nkv = c->n_kv_heads;
  int64_t qd = nh * hd, kvd = nkv * hd, p0 = m->n_past;
  ingot_status st;
  for (int64_t t = 0; t < T; t++) {
    st = ingot_ggml_dequantize(m->embd.type,
                               (const char *)m->embd.data + (size_t)tok[t] * m->embd.row_bytes,
                               m->x + t * dim, dim);
    if (st) return st;
    float *cs = m->rope_cs + t * hd;
    for (int64_t i = 0; i < hd / 2; i++) {
      double a = (double)(p0 + t) * m->inv_freq[i];
      cs[i] = (float)cos(a);
      cs[hd / 2 + i] = (float)sin(a);
    }
  }
  for (int l = 0; l < c->n_layers; l++) {
    const layer *L = &m->layers[l];
    for (int64_t t = 0; t < T; t++)
      rmsnorm(m->xb + t * dim, m->x + t * dim, L->attn_norm, dim, c->rms_eps);
    if ((st = linear_many(m, 3, (const qweight *[]){&L->wq, &L->wk, &L->wv}, m->xb, T,
                          (float *[]){m->q, m->k, m->v})))
      return st;
    float *kc = m->k_cache + ((size_t)l * (size_t)c->ctx + (size_t)p0) * (size_t)kvd;
    float *vc = m->v_cache + ((size_t)l * (size_t)c->ctx + (size_t)p0) * (size_t)kvd;
    for (int64_t t = 0; t < T; t++) {
      const float *cs = m->rope_cs + t * hd;
      for (int64_t h = 0; h < nh; h++) {
        float *q = m->q + t * qd + h * hd;
        if (c->qk_norm) rmsnorm(q, q, L->q_norm, hd, c->rms_eps);
        rope(q, cs, (int)hd, c->rope_neox);
      }
      for (int64_t h = 0; h < nkv; h++) {
        float *k = m->k + t * kvd + h * hd;
        if (c->qk_norm) rmsnorm(k, k, L->k_norm, hd, c->rms_eps);
        rope(k, cs, (int)hd, c->rope_neox);
      }
    }
    memcpy(kc, m->k, (size_t)(T * kvd) * sizeof(float));
    memcpy(vc, m->v, (size_t)(T * kvd) * sizeof(float));
    model_attention(m, l, p0, T);
    if ((st = linear(m, &L->wo, m->xb, T, m->xb2))) return st;
    for (int64_t i = 0; i < T * dim; i++) m->x[i] += m->xb2[i];

    for (int64_t t = 0; t < T; t++)
      rmsnorm(m->xb + t * dim, m->x + t * dim, L->ffn_norm, dim, c->rms_eps);
    st = L->moe ? moe_forward(m, L->moe, m->xb, T, m->xb2)
                : model_mlp(m, &L->w_gate, &L->w_up, &L->w_down, m->xb, T, m->hb, m->hb2, m->xb2);
    if (st) return st;
    for (int64_t i = 0; i < T * dim; i++) m->x[i] += m->xb2[i];
  }
  m->n_past += T;
  return INGOT_OK;
}

ingot_status ingot_model_forward(ingot_model *m, const int32_t *tokens, int64_t n,
                                 float *logits_out) {
  if (!m || (!tokens && n) || n < 0) {
    ingot_fail(INGOT_ERR_ARG, "ingot_model_forward: bad arguments");
    return INGOT_ERR_ARG;
  }
  if (n > m->cfg.ctx - m->n_past) {
    ingot_fail(INGOT_ERR_ARG,
               "ingot_model_forward: %lld tokens do not fit in the context (%lld of %lld used)",
               (long long)n, (long long)m->n_past, (long long)m->cfg.ctx);
    return INGOT_ERR_ARG;
  }
  for (int64_t i = 0; i < n; i++)
    if (tokens[i] < 0 || tokens[i] >= m->cfg.vocab) {
      ingot_fail(INGOT_ERR_INDEX, "ingot_model_forward: token %d at %lld is outside [0, %d)",
                 tokens[i], (long long)i, m->cfg.vocab);
      return INGOT_ERR_INDEX;
    }
  if (n == 0) {
    if (logits_out) {
      ingot_fail(INGOT_ERR_ARG, "ingot_model_forward: no tokens to compute logits for");
      return INGOT_ERR_ARG;
    }
    return INGOT_OK;
  }
  if (m->devm) return dev_forward(m, tokens, n, logits_out);
  int64_t start = m->n_past, last = 0;
  for (int64_t i = 0; i < n; i += CHUNK) {
    int64_t T = n - i < CHUNK ? n - i : CHUNK;
    ingot_status st = forward_chunk(m, tokens + i, T);
    if (st) {
      m->n_past = start;
      return st;
    }
    last = T - 1;
  }
  if (!logits_out) return INGOT_OK;
  float *xn = m->xb;
  rmsnorm(xn, m->x + last * m->cfg.dim, m->out_norm, m->cfg.dim, m->cfg.rms_eps);
  ingot_status st = linear(m, &m->lm_head, xn, 1, logits_out);
  if (st) m->n_past = start;
  return st;
}
