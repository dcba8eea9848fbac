/* ingot_model_random (model.h): a model of a given config with random
 * weights made directly on its device (no file, no host copy), for
 * benchmarks at real shapes. Weights are randn * 0.02 drawn from the global
 * Philox generator seeded with the seed (so the CPU and CUDA get the same
 * numbers), norms 1; the forward is the tensor forward (forward_dev.c). */
#include <stdlib.h>
#include <string.h>

#include "../core/internal.h"
#include "forward_dev.h"
#include "ingot/quant.h"
#include "model_internal.h"

#define WEIGHT_STD 0.02

/* randn * 0.02 of the given shape in dt; f8 draws plain randn (its range)
 * and the caller scales by 0.02 per row. Temporaries freed on return. */
static ingot_tensor *rand_weight(int ndim, const int64_t *shape, ingot_dtype dt, ingot_device dev) {
  ingot_scope_begin();
  ingot_tensor *r = ingot_randn(ndim, shape, INGOT_F32, dev);
  if (dt != INGOT_F8E4M3FN) r = ingot_mul_scalar(r, WEIGHT_STD);
  ingot_tensor *t = ingot_keep(ingot_cast(r, dt));
  ingot_scope_end();
  return t;
}

/* A [rows, cols] matrix of dt (f32, f16, bf16; f8e4m3fn with f32 [rows]
 * scales of 0.02, as the experts) as the rows the linear layers read: a
 * uint8 [rows, row_bytes] view of the same storage. */
static bool rand_linear(int64_t rows, int64_t cols, ingot_dtype dt, ingot_device dev,
                        dev_weight *out) {
  ingot_tensor *t = rand_weight(2, (int64_t[]){rows, cols}, dt, dev);
  if (!t) return false;
  out->t = tensor_view_as_dtype(t, INGOT_U8);
  ingot_release(t);
  if (!out->t) return false;
  out->type = dt == INGOT_F32        ? INGOT_GGML_F32
              : dt == INGOT_F16      ? INGOT_GGML_F16
              : dt == INGOT_F8E4M3FN ? -1
                                     : INGOT_GGML_BF16;
  out->cols = cols;
  out->scale = dt == INGOT_F8E4M3FN ? ingot_full(1, &rows, WEIGHT_STD, INGOT_F32, dev) : NULL;
  return dt != INGOT_F8E4M3FN || out->scale;
}

static ingot_tensor *ones(int64_t n, ingot_device dev) {
  return ingot_full(1, &n, 1.0, INGOT_F32, dev);
}

/* Experts [E, rows, cols] in wdt (f8: with f32 [E, rows] scales of 0.02). */
static ingot_tensor *rand_experts(int64_t E, int64_t rows, int64_t cols, ingot_dtype wdt,
                                  ingot_device dev, ingot_tensor **scale) {
  ingot_tensor *t = rand_weight(3, (int64_t[]){E, rows, cols}, wdt, dev);
  if (t && wdt == INGOT_F8E4M3FN &&
      !(*scale = ingot_full(2, (int64_t[]){E, rows}, WEIGHT_STD, INGOT_F32, dev))) {
    ingot_release(t);
    return NULL;
  }
  return t;
}

static bool rand_layer(const ingot_model_config *c, ingot_dtype wdt, ingot_device dev,
                       dev_layer *D) {
  int64_t dim = c->dim, qd = (int64_t)c->n_heads * c->head_dim,
          kvd = (int64_t)c->n_kv_heads * c->head_dim;
  /* f8 (WORKLOADS.md's fp8 decode): experts, attention and dense MLP linears
   * f8 with row scales; router and shared expert bf16 (ldt), as Qwen's FP8
   * checkpoints keep their gates. */
  ingot_dtype ldt = wdt == INGOT_F8E4M3FN ? INGOT_BF16 : wdt;
  /* q|k|v and gate|up stacked by rows, as a loaded model's (forward_dev.c) */
  if (!(D->attn_norm = ones(dim, dev)) || !(D->ffn_norm = ones(dim, dev)) ||
      !rand_linear(qd + 2 * kvd, dim, wdt, dev, &D->qkv) || !rand_linear(dim, qd, wdt, dev, &D->wo))
    return false;
  if (c->qk_norm &&
      (!(D->q_norm = ones(c->head_dim, dev)) || !(D->k_norm = ones(c->head_dim, dev))))
    return false;
  if (!(D->sparse = c->n_experts > 0))
    return rand_linear(2 * c->ffn_dim, dim, wdt, dev, &D->gate_up) &&
           rand_linear(dim, c->ffn_dim, wdt, dev, &D->down);
  dev_moe *M = &D->moe;
  int64_t E = c->n_experts, I = c->expert_ffn_dim, S = c->shared_expert_ffn_dim;
  M->has_shared = S > 0;
  if (!rand_linear(E, dim, ldt, dev, &M->router) ||
      !(M->gate_up = rand_experts(E, 2 * I, dim, wdt, dev, &M->gate_up_scale)) ||
      !(M->down = rand_experts(E, dim, I, wdt, dev, &M->down_scale)))
    return false;
  return !M->has_shared ||
         (rand_linear(S, dim, ldt, dev, &M->sh_gate) && rand_linear(S, dim, ldt, dev, &M->sh_up) &&
          rand_linear(dim, S, ldt, dev, &M->sh_down) &&
          rand_linear(1, dim, ldt, dev, &M->sh_router));
}

/* The config's sizes, checked before anything is allocated. */
static bool check_config(const ingot_model_config *c, int wdt) {
  const char *bad =
      c->n_layers <= 0                           ? "n_layers must be > 0"
      : c->dim <= 0                              ? "dim must be > 0"
      : c->n_heads <= 0 || c->n_kv_heads <= 0    ? "head counts must be > 0"
      : c->n_heads % c->n_kv_heads               ? "n_heads must be a multiple of n_kv_heads"
      : c->head_dim <= 0 || c->head_dim % 2      ? "head_dim must be even and > 0"
      : c->vocab <= 0                            ? "vocab must be > 0"
      : !(c->rms_eps > 0) || !(c->rope_base > 0) ? "rms_eps and rope_base must be > 0"
      : c->n_experts < 0                         ? "n_experts must be >= 0"
      : !c->n_experts && c->ffn_dim <= 0         ? "ffn_dim must be > 0 (dense model)"
      : c->n_experts && c->expert_ffn_dim <= 0   ? "expert_ffn_dim must be > 0"
      : c->n_experts && (c->n_experts_used < 1 || c->n_experts_used > c->n_experts)
          ? "n_experts_used must be in [1, n_experts]"
      : c->shared_expert_ffn_dim < 0 ? "shared_expert_ffn_dim must be >= 0"
      : wdt != INGOT_F32 && wdt != INGOT_F16 && wdt != INGOT_BF16 && wdt != INGOT_F8E4M3FN
          ? "weight_dtype must be float32, float16, bfloat16 or float8_e4m3fn"
          : NULL;
  if (bad) ingot_fail(INGOT_ERR_ARG, "ingot_model_random: %s", bad);
  return !bad;
}

ingot_model *ingot_model_random(const ingot_model_config *cfg, int weight_dtype, uint64_t seed,
                                ingot_device dev) {
  if (!cfg) return ingot_fail(INGOT_ERR_ARG, "ingot_model_random: cfg is NULL");
  if (!check_config(cfg, weight_dtype)) return NULL;
  ingot_model *m = calloc(1, sizeof *m);
  if (!m) return ingot_fail(INGOT_ERR_OOM, "ingot_model_random: out of memory");
  m->cfg = *cfg;
  ingot_model_config *c = &m->cfg;
  c->ctx = c->ctx > 0 ? c->ctx : c->ctx_train > 0 ? c->ctx_train : 2048;
  if (c->ctx_train < c->ctx) c->ctx_train = c->ctx;
  c->tied_embeddings = false;
  if (!c->arch_name[0])
    strcpy(c->arch_name, c->n_experts ? "qwen3_moe" : c->qk_norm ? "qwen3" : "llama");
  ingot_dtype wdt = (ingot_dtype)weight_dtype, ldt = wdt == INGOT_F8E4M3FN ? INGOT_BF16 : wdt;
  ingot_manual_seed(seed);
  if (!model_rope_init(m) || !dev_model_alloc(m, dev)) goto fail;
  dev_model *d = m->devm;
  if (!rand_linear(c->vocab, c->dim, ldt, dev, &d->embd) ||
      !rand_linear(c->vocab, c->dim, ldt, dev, &d->lm_head) || !(d->out_norm = ones(c->dim, dev)))
    goto fail;
  for (int l = 0; l < c->n_layers; l++)
    if (!rand_layer(c, wdt, dev, &d->layers[l])) goto fail;
  return m;
fail:
  fail_in("ingot_model_random");
  ingot_model_free(m);
  return NULL;
}
