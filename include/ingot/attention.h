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

/* Causal grouped-query attention of q [T, Hq, D] (float32) over the cache
 * rows 0..pos[t] of k_cache, v_cache [ctx, Hkv, D] (float32 or float16, Hq a
 * multiple of Hkv; head h reads kv head h / (Hq / Hkv)): softmax(scale * q.k)
 * weighted sum of v. Returns float32 [T, Hq, D]. The CPU fails on a position
 * outside [0, ctx); CUDA clamps it into that range. D <= 256. */
ingot_tensor *ingot_attention_cached(const ingot_tensor *q, const ingot_tensor *k_cache,
                                     const ingot_tensor *v_cache, const ingot_tensor *pos,
                                     double scale);

#ifdef __cplusplus
}
#endif
#endif
