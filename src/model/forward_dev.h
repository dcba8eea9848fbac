/* The model forward over Ingot tensors and ops (src/model/forward_dev.c):
 * weights uploaded once to the model's device, a KV cache allocated once
 * there, prefill in chunks, and the decode step of the generation loop.
 * Serves every device, the CPU included (ingot_model_options.tensor_forward). */
#ifndef INGOT_MODEL_FORWARD_DEV_H
#define INGOT_MODEL_FORWARD_DEV_H

#include "ingot/ingot.h"

typedef struct dev_weight {
  ingot_tensor *t; /* uint8 [rows, row_bytes]: ggml blocks */
  int type;        /* ggml type id */
  int64_t cols;
} dev_weight;

typedef struct dev_layer {
  ingot_tensor *attn_norm, *ffn_norm, *q_norm, *k_norm; /* float32 */
  dev_weight wq, wk, wv, wo, gate, up, down;
  ingot_tensor *k_cache, *v_cache; /* float32 [ctx, kv_heads, head_dim] */
} dev_layer;

typedef struct dev_model {
  ingot_device dev;
  int n_layers;
  dev_layer *layers; /* n_layers slots, each NULL or owned */
  dev_weight embd, lm_head;
  ingot_tensor *out_norm;  /* float32 [dim] */
  ingot_tensor *inv_freq;  /* float64 [head_dim / 2] */
  ingot_tensor *logits;    /* float32 [1, vocab]: the last token's logits */
  ingot_tensor *tok, *pos; /* int32 [1]: the decode step's token and its position */
} dev_model;

struct ingot_model;
/* Upload m's weights (read by the loader) to dev and allocate the cache. */
bool dev_model_init(struct ingot_model *m, ingot_device dev);
void dev_model_free(dev_model *d);
/* ingot_model_forward on the tensor path (arguments already checked): the
 * last token's logits land in d->logits and, if logits_out, on the host. */
ingot_status dev_forward(struct ingot_model *m, const int32_t *tokens, int64_t n,
                         float *logits_out);
/* One decode step, all on the device: forward d->tok at d->pos into
 * d->logits, pos += 1. No host round trip (capturable). */
ingot_status dev_forward_step(struct ingot_model *m);

#endif
