/* Decode-time attention ops of the model runtime: rotary embeddings, writes
 * into a preallocated KV cache and causal attention over that cache. Token
 * positions are int32 tensors on the op's device, read by the kernels (never
 * by the host), so a captured decode step replays as the position advances. */
#ifndef INGOT_ATTENTION_H
#define INGOT_ATTENTION_H

#include <stdbool.h>

#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Rotary embedding of x [T, H, D] (float32, D even) at positions pos (int32
 * [T]) with inv_freq [D/2] (float32 or float64): the angle of pair i of token
 * t is pos[t] * inv_freq[i], in double. neox: pairs (i, i + D/2), else (2i,
 * 2i+1). Returns a new float32 [T, H, D] tensor. */
ingot_tensor *ingot_rope(const ingot_tensor *x, const ingot_tensor *pos,
                         const ingot_tensor *inv_freq, bool neox);

/* k_cache[pos[t]] = k[t] and v_cache[pos[t]] = v[t], in place. Caches are
 * contiguous [ctx, Hkv, D] float32 or float16 (one dtype); k, v float32 [T,
 * Hkv, D]. The CPU fails (nothing written) on a position outside [0, ctx);
 * CUDA, which cannot check without a host round trip, skips such rows. */
ingot_status ingot_kv_cache_write(ingot_tensor *k_cache, ingot_tensor *v_cache,
                                  const ingot_tensor *k, const ingot_tensor *v,
                                  const ingot_tensor *pos);

/* Options of ingot_rope_kv_write: the RoPE pair layout and the optional
 * per-head RMS norms applied before it (qwen3's q_norm/k_norm). */
typedef struct ingot_rope_kv_options {
  bool neox;                           /* pairs (i, i + D/2); false: (2i, 2i+1) */
  const ingot_tensor *q_norm, *k_norm; /* float32 [D] or NULL (both or neither) */
  double eps;                          /* of the norms */
  /* true: pos, inv_freq, the norms and the caches' rows other than pos[t]
   * were not written by the op just before on this stream (a decode loop
   * writes pos at the step's start), so CUDA's one-launch
   * ingot_rope_kv_attention may read them while that op drains. false: after. */
  bool settled;
} ingot_rope_kv_options;

/* The decode step's rope and cache write in one op: q and k (float32 [T, H,
 * D] views with unit last stride, e.g. column slices of one fused q|k|v
 * product: no copy) normed per head if o has norms, then roped at pos (as
 * ingot_rope) with inv_freq; k and v written to the caches at pos (as
 * ingot_kv_cache_write). Returns the roped q as a new float32 [T, Hq, D];
 * D <= 256. The CPU fails (nothing written) on a position outside [0, ctx);
 * CUDA skips those cache rows. */
ingot_tensor *ingot_rope_kv_write(const ingot_tensor *q, const ingot_tensor *k,
                                  const ingot_tensor *v, const ingot_tensor *pos,
                                  const ingot_tensor *inv_freq, const ingot_rope_kv_options *o,
                                  ingot_tensor *k_cache, ingot_tensor *v_cache);

/* Options of ingot_qmatmul_rope_kv: the norm of x before the product and
 * the rope/cache options of ingot_rope_kv_write. */
typedef struct ingot_qkv_rope_options {
  const ingot_tensor *norm; /* float32 [cols]: rms_norm(x, norm, eps) first; NULL: x as is */
  double eps;               /* of norm */
  ingot_rope_kv_options rope;
  ingot_tensor *arrivals; /* int32 [>= Hq + 2 Hkv], zero (and left zero): CUDA's one-launch
                             path for T = 1; NULL: the two-op path */
} ingot_qkv_rope_options;

/* The decode step's q|k|v product, rope and cache write in one op: qkv =
 * ingot_qmatmul_fused(x [T, cols], w, ggml_type, cols, o->norm, o->eps,
 * NULL) with W's rows = (Hq + 2 Hkv) * D (q heads, then k, then v; Hkv, D
 * from the caches), then ingot_rope_kv_write of its q, k, v column views.
 * Returns the roped q float32 [T, Hq, D]; results are those of the two ops
 * (the CPU runs exactly them). On CUDA with arrivals and T = 1 one kernel:
 * the warp that completes a head's rows ropes and writes it. */
ingot_tensor *ingot_qmatmul_rope_kv(const ingot_tensor *x, const ingot_tensor *w, int ggml_type,
                                    int64_t cols, const ingot_tensor *pos,
                                    const ingot_tensor *inv_freq, const ingot_qkv_rope_options *o,
                                    ingot_tensor *k_cache, ingot_tensor *v_cache);

/* Causal grouped-query attention of q [T, Hq, D] (float32) over the cache
 * rows 0..pos[t] of k_cache, v_cache [ctx, Hkv, D] (float32 or float16, Hq a
 * multiple of Hkv; head h reads kv head h / (Hq / Hkv)): softmax(scale * q.k)
 * weighted sum of v. Returns float32 [T, Hq, D]. The CPU fails on a position
 * outside [0, ctx); CUDA clamps it into that range. D <= 256. */
ingot_tensor *ingot_attention_cached(const ingot_tensor *q, const ingot_tensor *k_cache,
                                     const ingot_tensor *v_cache, const ingot_tensor *pos,
                                     double scale);

/* The decode step's rope, cache write and attention in one op: exactly
 * ingot_attention_cached(ingot_rope_kv_write(q, k, v, pos, inv_freq, o,
 * k_cache, v_cache), k_cache, v_cache, pos, scale), with both ops' argument
 * rules. Returns the attention output float32 [T, Hq, D]; the caches are
 * written as rope_kv_write writes them. On CUDA for T = 1 one kernel (the
 * attention's prologue ropes q, k and writes the cache row). */
ingot_tensor *ingot_rope_kv_attention(const ingot_tensor *q, const ingot_tensor *k,
                                      const ingot_tensor *v, const ingot_tensor *pos,
                                      const ingot_tensor *inv_freq, const ingot_rope_kv_options *o,
                                      ingot_tensor *k_cache, ingot_tensor *v_cache, double scale);

/* The decode step's q|k|v product, rope, cache write and attention in one
 * op: exactly ingot_attention_cached(ingot_qmatmul_rope_kv(x, w, ggml_type,
 * cols, pos, inv_freq, o, k_cache, v_cache), k_cache, v_cache, pos, scale),
 * with both ops' argument rules. Returns the attention output float32 [T,
 * Hq, D]. On CUDA for T = 1 and few heads (8 Hq blocks fit on the SMs) one
 * kernel: each head's cluster makes its q, k and v rows itself. */
ingot_tensor *ingot_qmatmul_rope_kv_attention(const ingot_tensor *x, const ingot_tensor *w,
                                              int ggml_type, int64_t cols, const ingot_tensor *pos,
                                              const ingot_tensor *inv_freq,
                                              const ingot_qkv_rope_options *o,
                                              ingot_tensor *k_cache, ingot_tensor *v_cache,
                                              double scale);

#ifdef __cplusplus
}
#endif
#endif
