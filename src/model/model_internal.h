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
  /* An F8_E4M3 checkpoint weight (data is then its F32 dequantisation, or
   * NULL for a linear loaded for the tensor forward: m->f8_only): the f8
   * bytes [rows, cols] and one f32 scale per row, for kernels that read f8
   * directly (the tensor forward's expert ops and ingot_f8matmul_*); NULL
   * otherwise. */
  const uint8_t *f8;
  const float *f8_scale;
} qweight;

/* The sparse MLP of one layer (qwen3_moe): router, routed experts, and the
 * optional shared expert with its [1, dim] sigmoid gate (has_shared). */
typedef struct moe_weights {
  qweight router;            /* [n_experts, dim] */
  qweight *gate, *up, *down; /* n_experts each: [eff, dim], [eff, dim], [dim, eff] */
  bool has_shared;
  qweight sh_gate, sh_up, sh_down, sh_router;
} moe_weights;

typedef struct layer {
  const float *attn_norm, *ffn_norm, *q_norm, *k_norm; /* F32 in the mapping */
  qweight wq, wk, wv, wo, w_gate, w_up, w_down;
  moe_weights *moe; /* NULL: the dense MLP (w_gate, w_up, w_down) */
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
  double *inv_freq;         /* [head_dim/2] RoPE frequencies, scaling applied */
  float *k_cache, *v_cache; /* [layers, ctx, kv_heads, head_dim] */
  int64_t n_past;
  /* scratch for one chunk of tokens */
  float *x, *xb, *xb2, *q, *k, *v, *hb, *hb2, *att, *rope_cs;
  bool exact_matvec;         /* float activations in linear layers (see ingot_model_options) */
  bool f8_only;              /* HF load for the tensor forward: f8 linears without an F32 copy */
  struct hf_state *hf;       /* HF directory models (model_hf.c): checkpoint + owned buffers */
  struct moe_scratch *moe_s; /* expert block buffers (moe_block.c), NULL for dense models */
  moe_weights *moe_w;        /* GGUF expert blocks: n_layers of them, then their expert qweights */
  struct dev_model *devm;    /* the tensor forward (forward_dev.c); NULL on the raw CPU path */
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

/* Causal attention of the T queries in m->q (positions p0..p0+T-1) over
 * layer l's KV cache, into m->xb [T, n_heads * head_dim] (attn_cpu.c). */
void model_attention(ingot_model *m, int l, int64_t p0, int64_t T);
/* Floats of m->att that model_attention needs for chunks of up to `chunk`
 * tokens at context c->ctx; 0 when the size overflows. */
size_t model_attention_scratch(const ingot_model_config *c, int64_t chunk);

/* The SwiGLU MLP y[n, dim] = down(silu(gate x) * up x) of x[n, dim] with the
 * model's matvec; h1, h2 hold n x gate->rows floats (llama.c). */
ingot_status model_mlp(const ingot_model *m, const qweight *gate, const qweight *up,
                       const qweight *down, const float *x, int64_t n, float *h1, float *h2,
                       float *y);
/* Largest MLP width of the model (dense, routed expert, shared expert). */
int64_t model_ffn_max(const ingot_model_config *c);

/* The sparse expert block (src/model/moe_block.c): buffers for a chunk of
 * up to chunk tokens; the block maps x[T, dim] (normed) to out[T, dim]. */
bool moe_alloc(ingot_model *m, int64_t chunk);
void moe_free(ingot_model *m);
ingot_status moe_forward(ingot_model *m, const moe_weights *w, const float *x, int64_t T,
                         float *out);

#endif
