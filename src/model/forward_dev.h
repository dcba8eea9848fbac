/* The model forward over Ingot tensors and ops (src/model/forward_dev.c):
 * weights uploaded once to the model's device, a KV cache allocated once
 * there, prefill in chunks, and the decode step of the generation loop.
 * Serves every device, the CPU included (ingot_model_options.tensor_forward). */
#ifndef INGOT_MODEL_FORWARD_DEV_H
#define INGOT_MODEL_FORWARD_DEV_H

#include "ingot/ingot.h"

typedef struct dev_weight {
  ingot_tensor *t; /* uint8 [rows, row_bytes]: ggml blocks (f8: cols f8e4m3fn bytes) */
  int type;        /* ggml type id; -1 for f8 rows */
  int64_t cols;
  ingot_tensor *scale; /* f8 rows: f32 [rows], each row's scale (ingot_f8matmul_*); else NULL */
} dev_weight;

/* A sparse MLP (qwen3_moe, forward_moe.c): router, the experts packed in
 * the checkpoint's dtype, the optional shared expert and its gate. */
typedef struct dev_moe {
  dev_weight router;                        /* [E, dim] */
  ingot_tensor *gate_up, *down;             /* [E, 2I, dim] (gate rows then up rows), [E, dim, I] */
  ingot_tensor *gate_up_scale, *down_scale; /* f8 experts: f32 [E, 2I], [E, dim]; else NULL */
  bool has_shared;
  dev_weight sh_gate, sh_up, sh_down, sh_router; /* sh_router: [1, dim] */
} dev_moe;

typedef struct dev_layer {
  ingot_tensor *attn_norm, *ffn_norm, *q_norm, *k_norm; /* float32 */
  /* qkv = wq|wk|wv and gate_up = gate|up stacked by rows, when the parts share
   * a ggml type and cols (one product each); then wq/wk/wv (gate/up) are
   * unset. gate/up/down/gate_up: dense layers only. */
  dev_weight qkv, wq, wk, wv, wo, gate_up, gate, up, down;
  bool sparse; /* the MLP is moe */
  dev_moe moe;
  ingot_tensor *k_cache, *v_cache; /* float32 [ctx, kv_heads, head_dim] */
} dev_layer;

typedef struct dev_model {
  ingot_device dev;
  int n_layers;
  dev_layer *layers; /* n_layers slots, each NULL or owned */
  dev_weight embd, lm_head;
  ingot_tensor *out_norm; /* float32 [dim] */
  ingot_tensor *inv_freq; /* float64 [head_dim / 2] */
  ingot_tensor *logits;   /* float32 [1, vocab]: the last prompt token's logits */
  ingot_tensor *tok;      /* int64 [1]: the decode step's token (an index: no cast a step) */
  ingot_tensor *pos;      /* int32 [1]: its position */
  ingot_tensor *arrivals; /* int32 [n_heads + 2 n_kv_heads], zero: qmatmul_rope_kv's counters */
  ingot_tensor *moe_mail; /* int64 [n_experts], zero: moe_block's mailbox (MoE models) */
} dev_model;

#define DEV_CHUNK 512 /* prefill rows per pass (one launch set per chunk and layer) */

struct ingot_model;
struct qweight;
struct moe_weights;
/* w (a loader's weight) as ggml-block rows on dev. */
bool dev_weight_upload(const struct qweight *w, ingot_device dev, dev_weight *out);
/* w as dev_weight_upload, except that an F8_E4M3 checkpoint weight (w->f8
 * with row scales) goes up as its f8 bytes and scales: the linears' form. */
bool dev_linear_upload(const struct qweight *w, ingot_device dev, dev_weight *out);
/* Release w's tensors (weight and scale). */
void dev_weight_release(dev_weight *w);
/* x [T, cols] times w^T: f32 [T, w rows]. */
ingot_tensor *dev_linear(const ingot_tensor *x, const dev_weight *w);
/* The tensor dtype of a float ggml type (F32, F16, BF16), or -1 for
 * block-quantised ones. */
int dev_float_dtype(int ggml_type);
/* Layer `layer`'s expert block w uploaded to dev; an error names the layer
 * if the experts are not of one float type. */
bool dev_moe_init(const struct moe_weights *w, const ingot_model_config *c, int layer,
                  ingot_device dev, dev_moe *out);
void dev_moe_free(dev_moe *m);
/* x + the sparse MLP of rms_norm(x, norm, eps) (x [T, dim] f32, the
 * residual stream): f32 [T, dim], in the caller's scope. mail: the model's
 * moe_block mailbox (int64 [n_experts], zero) or NULL. */
ingot_tensor *dev_moe_forward(const dev_moe *m, const ingot_model_config *c, const ingot_tensor *x,
                              const ingot_tensor *norm, double eps, const ingot_tensor *mail);
/* m->devm with its layer slots, KV caches, RoPE frequencies (m->inv_freq),
 * logits and step tensors on dev; no weights yet. */
bool dev_model_alloc(struct ingot_model *m, ingot_device dev);
/* Upload m's weights (read by the loader) to dev and allocate the cache. */
bool dev_model_init(struct ingot_model *m, ingot_device dev);
void dev_model_free(dev_model *d);
/* ingot_model_forward on the tensor path (arguments already checked): the
 * last token's logits land in d->logits and, if logits_out, on the host. */
ingot_status dev_forward(struct ingot_model *m, const int32_t *tokens, int64_t n,
                         float *logits_out);
/* One decode step, all on the device: forward d->tok at d->pos (the
 * sampler then advances pos: ingot_sample_tokens_into); *logits = f32 [1,
 * vocab] in the caller's scope (not copied into d->logits). No host round
 * trip (capturable). */
ingot_status dev_forward_step(struct ingot_model *m, ingot_tensor **logits);
/* On a device other than the CPU: forwards of a full prefill chunk, of a
 * short prompt and of a single token, and draws of the sampler, cache and position left as
 * they were (n_past kept; rows past it are rewritten before any read), so
 * that the first prompt pays no first-use costs (lazy kernel module loads,
 * cuBLASLt handle, workspace and heuristics, allocator growth).
 * INGOT_NO_WARMUP=1 skips it (src/model/warmup_dev.c). */
ingot_status dev_model_warmup(struct ingot_model *m);

#endif
