/* Transformer models read from GGUF or HF directories (llama, qwen3; and
 * qwen3_moe from HF directories): load with
 * validation, forward over a KV cache, sampling and a generation loop.
 * The quantized weights stay mmapped from the file; the CPU path multiplies
 * them directly (ingot_ggml_matvec), without a dequantised copy. */
#ifndef INGOT_MODEL_H
#define INGOT_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "device.h"
#include "error.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ingot_tokenizer ingot_tokenizer;

typedef enum ingot_model_arch {
  INGOT_ARCH_LLAMA = 0,
  INGOT_ARCH_QWEN3 = 1,
  INGOT_ARCH_QWEN3_MOE = 2 /* qwen3 attention, sparse mixture-of-experts MLP (HF only) */
} ingot_model_arch;

typedef enum ingot_rope_scaling {
  INGOT_ROPE_SCALING_NONE = 0,
  INGOT_ROPE_SCALING_LINEAR = 1, /* positions divided by rope_factor */
  INGOT_ROPE_SCALING_LLAMA3 = 2  /* per-frequency factors (rope_freqs.weight or metadata) */
} ingot_rope_scaling;

/* Hyper-parameters, from the GGUF metadata "<arch>.*" keys. */
typedef struct ingot_model_config {
  ingot_model_arch arch;
  char arch_name[32]; /* general.architecture */
  int n_layers;       /* block_count */
  int dim;            /* embedding_length */
  int ffn_dim;        /* feed_forward_length */
  int n_heads;        /* attention.head_count */
  int n_kv_heads;     /* attention.head_count_kv (grouped-query attention) */
  int head_dim;       /* attention.key_length, else dim / n_heads */
  int vocab;          /* rows of token_embd.weight */
  int64_t ctx_train;  /* context_length */
  int64_t ctx;        /* KV cache length actually allocated (<= ctx_train) */
  float rms_eps;      /* attention.layer_norm_rms_epsilon */
  float rope_base;    /* rope.freq_base */
  bool rope_neox;     /* rotate half-split pairs (qwen3); false: adjacent pairs (llama) */
  ingot_rope_scaling rope_scaling;
  float rope_factor;                                 /* rope.scaling.factor */
  float rope_low_freq_factor, rope_high_freq_factor; /* llama3 */
  int64_t rope_orig_ctx;                             /* rope.scaling.original_context_length */
  bool qk_norm;         /* RMSNorm on each q/k head before RoPE (qwen3) */
  bool tied_embeddings; /* no output.weight: the LM head is token_embd.weight */
  /* Mixture of experts (qwen3_moe; 0 for dense models): n_experts routed
   * experts of expert_ffn_dim (moe_intermediate_size), n_experts_used of them
   * per token (num_experts_per_tok), their softmax weights renormalised to
   * sum 1 if norm_topk_prob; a shared expert of shared_expert_ffn_dim (0:
   * none) scaled by sigmoid(shared_expert_gate . x). Which layers are sparse:
   * decoder_sparse_step and mlp_only_layers (ingot_model_layer_is_moe). */
  int n_experts, n_experts_used;
  int expert_ffn_dim, shared_expert_ffn_dim;
  bool norm_topk_prob;
} ingot_model_config;

typedef struct ingot_model ingot_model;

/* Called while loading with the fraction done in [0, 1]. */
typedef void (*ingot_progress_fn)(double fraction, void *user);

typedef struct ingot_model_options {
  int64_t max_ctx;            /* cap on the KV cache length; 0: 2048 */
  ingot_progress_fn progress; /* may be NULL */
  void *progress_user;
  /* Linear layers take float activations (ingot_ggml_matvec) instead of the
   * default int8-rounded ones as llama.cpp (ingot_ggml_matvec_q8: faster, less
   * exact). The environment variable INGOT_EXACT_MATVEC=1 also selects it. */
  bool exact_matvec;
  /* Run the CPU model through the tensor forward (Ingot ops, as on devices)
   * instead of the raw-pointer path; INGOT_TENSOR_FORWARD=1 also selects it.
   * Models on other devices always use it. */
  bool tensor_forward;
} ingot_model_options;

/* Open, validate (every tensor present, with the shape the config implies)
 * and map a model: a GGUF file, or a directory in the HF layout (config.json,
 * model.safetensors or sharded with model.safetensors.index.json,
 * tokenizer.json). On a device other than the CPU the weights are uploaded
 * there once and the KV cache lives there. NULL on failure
 * with an error naming the problem (INGOT_ERR_IO for file/format errors,
 * INGOT_ERR_UNSUPPORTED for architectures or types not handled). */
ingot_model *ingot_model_load(const char *path, ingot_device dev);
ingot_model *ingot_model_load_ex(const char *path, ingot_device dev,
                                 const ingot_model_options *opts);
void ingot_model_free(ingot_model *m);
/* A model of config cfg with random weights made on dev (no file, no
 * tokenizer: generate by token ids), for benchmarks at real shapes. Weights
 * randn * 0.02 from the global generator reseeded with seed (same numbers on
 * every device), norms 1, untied head, unscaled RoPE; every layer sparse if
 * cfg->n_experts > 0. weight_dtype (an ingot_dtype): float32, float16,
 * bfloat16, or float8_e4m3fn (experts, q/k/v/o and dense MLP linears f8
 * with per-row f32 scales of 0.02; router, shared expert, embeddings and
 * head bfloat16). KV cache length: cfg->ctx, else
 * ctx_train, else 2048. NULL and INGOT_ERR_ARG on a bad config. */
ingot_model *ingot_model_random(const ingot_model_config *cfg, int weight_dtype, uint64_t seed,
                                ingot_device dev);

const ingot_model_config *ingot_model_get_config(const ingot_model *m);
/* Whether layer l's MLP is the sparse expert block (false for dense models,
 * mlp_only_layers and layers off the decoder_sparse_step, or l out of range). */
bool ingot_model_layer_is_moe(const ingot_model *m, int l);
/* The tokenizer from the same GGUF (owned by the model). */
ingot_tokenizer *ingot_model_tokenizer(ingot_model *m);
/* Chat template of the file (tokenizer.chat_template) or NULL. */
const char *ingot_model_chat_template(const ingot_model *m);

/* Clear the KV cache. */
void ingot_model_reset(ingot_model *m);
/* Tokens in the KV cache. */
int64_t ingot_model_n_past(const ingot_model *m);
/* Forget the cache beyond its first n tokens (n <= n_past). */
ingot_status ingot_model_truncate(ingot_model *m, int64_t n);

/* Run tokens[0..n) at positions n_past.. and append them to the KV cache;
 * logits_out (vocab floats, may be NULL) receives the last token's logits.
 * Fails (cache unchanged) if a token is out of range or the cache is full. */
ingot_status ingot_model_forward(ingot_model *m, const int32_t *tokens, int64_t n,
                                 float *logits_out);

/* ---- sampling (src/model/sample.c) ---- */
typedef struct ingot_sample_options {
  float temperature;    /* <= 0: greedy (argmax) */
  int top_k;            /* <= 0: off */
  float top_p;          /* >= 1: off */
  float repeat_penalty; /* 1: off; divides positive / multiplies negative logits of recent tokens */
  int repeat_last_n;    /* window of recent tokens for the penalty (0: 64) */
  uint64_t seed;        /* same seed and inputs -> same tokens (Philox counter stream) */
} ingot_sample_options;

/* Defaults: greedy, top_k 40, top_p 0.95, repeat_penalty 1, seed 0. */
ingot_sample_options ingot_sample_defaults(void);

/* One token from logits[vocab] (modified in place: penalty, temperature).
 * history: the recent tokens for the repetition penalty; step: the counter
 * that picks the random draw (use the index of the generated token).
 * Returns the token id or -1 on error. */
int32_t ingot_sample(const ingot_sample_options *o, float *logits, int64_t vocab,
                     const int32_t *history, int64_t n_history, uint64_t step);

/* The same sampling as one op on logits' device (no host round trip): logits
 * float32 [V] (not modified); step int64 [1] picks the draw as ingot_sample's
 * step and is incremented on the device (int64 [2] with step[1] = 0: CUDA
 * keeps its arrival counter there, no memset a call; it stays 0); hist (may be NULL: no penalty) is
 * an int32 ring [W] of the recent tokens (W replaces repeat_last_n; entries outside [0, V) are
 * empty), and the token is written at hist[step % W]. Returns int32 [1]. CUDA samples with
 * temperature only when top_k is in [1, 1024] (greedy has no limit). */
ingot_tensor *ingot_sample_tokens(const ingot_tensor *logits, const ingot_sample_options *o,
                                  ingot_tensor *hist, ingot_tensor *step);
/* ingot_sample_tokens, and in the same launch: tok (int64 or int32 [1]; may
 * be NULL) = the token and pos (int32 [1]; may be NULL) += 1, a decode
 * step's bookkeeping (next token id, next position) without launches of its own. */
ingot_tensor *ingot_sample_tokens_into(const ingot_tensor *logits, const ingot_sample_options *o,
                                       ingot_tensor *hist, ingot_tensor *step, ingot_tensor *tok,
                                       ingot_tensor *pos);

/* ---- generation ---- */
typedef struct ingot_generate_options {
  int64_t max_tokens; /* new tokens at most (<= 0: until EOS or the cache is full) */
  ingot_sample_options sample;
  bool stop_at_eos; /* stop at the tokenizer's EOS (and <|im_end|>/<|endoftext|>) */
} ingot_generate_options;

ingot_generate_options ingot_generate_defaults(void);

typedef struct ingot_generate_stats {
  int64_t prompt_tokens, generated_tokens;
  double prompt_seconds, decode_seconds;
  double prompt_tps, decode_tps; /* tokens per second */
} ingot_generate_stats;

/* Called for every new token with its text (special tokens give ""); a
 * non-zero return stops generation. */
typedef int (*ingot_token_fn)(int32_t token, const char *piece, size_t len, void *user);

/* Feed prompt[0..n) after what is in the cache, then sample until EOS,
 * max_tokens or a full cache. The stop token itself is not fed back into the
 * cache; every other generated token is. out_tokens (may be NULL, cap
 * entries) receives the generated ids; stats may be NULL. */
ingot_status ingot_generate(ingot_model *m, const int32_t *prompt, int64_t n,
                            const ingot_generate_options *opts, ingot_token_fn cb, void *user,
                            int32_t *out_tokens, int64_t cap, int64_t *n_out,
                            ingot_generate_stats *stats);

#ifdef __cplusplus
}
#endif
#endif
