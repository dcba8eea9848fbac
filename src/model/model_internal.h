/* The model's private layout, shared by the files of src/model. */
#ifndef INGOT_MODEL_INTERNAL_H
#define INGOT_MODEL_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "ingot/gguf.h"
#include "ingot/model.h"
#include "ingot/tokenizer.h"

/* A weight matrix in the GGUF mapping: rows of quantised blocks. */
typedef struct qweight {
  const void *data;
  int type; /* ggml type id */
  int64_t rows, cols;
  size_t row_bytes, nbytes;
} qweight;

typedef struct layer {
  const float *attn_norm, *ffn_norm, *q_norm, *k_norm; /* F32 in the mapping */
  qweight wq, wk, wv, wo, w_gate, w_up, w_down;
} layer;

struct ingot_model {
  ingot_model_config cfg;
  char *path;
  ingot_gguf *g;
  ingot_tokenizer *tok;
  char *chat_template;
  int32_t stop[8]; /* ids that end generation */
  int n_stop;
  layer *layers;
  qweight embd, lm_head;
  const float *out_norm;
  double *inv_freq; /* [head_dim/2] RoPE frequencies, scaling applied */
  float *k_cache, *v_cache; /* [layers, ctx, kv_heads, head_dim] */
  int64_t n_past;
  /* scratch for one chunk of tokens */
  float *x, *xb, *xb2, *q, *k, *v, *hb, *hb2, *att, *rope_cs;
  bool exact_matvec;   /* float activations in linear layers (see ingot_model_options) */
  struct hf_state *hf; /* HF directory models (model_hf.c): checkpoint + owned buffers */
  struct dev_model *devm; /* the tensor forward (forward_dev.c); NULL on the raw CPU path */
};

/* An HF directory (config.json, safetensors, tokenizer.json) into m: config,
 * weights, RoPE frequencies, tokenizer, chat template, stop ids
 * (src/model/model_hf.c). m->path is the directory. */
bool hf_load(ingot_model *m, const ingot_model_options *opts);
void hf_free(ingot_model *m);

/* inv_freq[i] = base^(-2i/head_dim), unscaled; loaders apply their scaling. */
bool model_rope_init(ingot_model *m);
/* Data and size of tensor i of a weight source (GGUF file, checkpoint). */
typedef bool (*model_span_fn)(const void *src, int64_t i, const void **data, size_t *nbytes);
/* Touch every page of the n mapped tensors now (reporting progress) rather
 * than during the first prompt. */
void model_prefault(int64_t n, model_span_fn span, const void *src, const ingot_model_options *o);

#endif
