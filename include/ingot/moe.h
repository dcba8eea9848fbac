/* Mixture-of-experts ops: routing (softmax, top-k, renormalisation) and the
 * grouped expert products of a gated FFN (gate/up with SiLU, down with the
 * weighted sum over the chosen experts). Expert ids and weights stay on the
 * device: no op here waits for it, so a whole MoE layer can be captured in a
 * device graph. Weights are bf16, f16, f32 or f8e4m3fn (f8 with optional
 * per-output-channel f32 scales); products accumulate in f32. */
#ifndef INGOT_MOE_H
#define INGOT_MOE_H

#include <stdbool.h>

#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Route tokens: softmax over the E logits of each of T rows (f32/bf16/f16
 * [T,E], computed in f32), then the k largest probabilities (descending, ties
 * to the lower id; a NaN logit counts as the largest and makes its row NaN).
 * *weights = f32 [T,k] probabilities (divided by their sum when renorm),
 * *ids = int32 [T,k] expert ids. 1 <= k <= E. INGOT_OK or an error (nothing set). */
ingot_status ingot_moe_route(const ingot_tensor *logits, int k, bool renorm, ingot_tensor **weights,
                             ingot_tensor **ids);

/* The router linear and the routing in one op: logits = x · router^T in f32
 * (x [T,D], router [E,D]; f32/bf16/f16 each, any strides), then as
 * ingot_moe_route(logits, k, renorm, weights, ids). On CUDA at decode
 * (T <= 8) one kernel does both (no logits tensor, one launch fewer). */
ingot_status ingot_moe_route_linear(const ingot_tensor *x, const ingot_tensor *router, int k,
                                    bool renorm, ingot_tensor **weights, ingot_tensor **ids);

/* ingot_moe_route_linear of rms_norm(x, norm, eps), that normalised x
 * returned too (*xn f32 [T,D], ingot_rms_norm's values): at decode the norm,
 * the router product and the routing are one CUDA kernel (no rms_norm
 * launch before it). x f32 [T,D]; norm f32 [D]. */
ingot_status ingot_moe_route_linear_norm(const ingot_tensor *x, const ingot_tensor *norm,
                                         double eps, const ingot_tensor *router, int k, bool renorm,
                                         ingot_tensor **xn, ingot_tensor **weights,
                                         ingot_tensor **ids);

/* Gate and up of the chosen experts: h [T,k,I] f32 with h[t,j] =
 * silu(x[t] · G^T) * (x[t] · U^T), G = rows [0,I) and U = rows [I,2I) of
 * w[ids[t,j]] (each row times scale[e, row] when scale is given).
 * x [T,K] f32/bf16/f16; w [E,2I,K] contiguous; scale NULL or f32 [E,2I];
 * ids int32 [T,k] in [0,E) (CPU: an error otherwise; CUDA: that h row is NaN). */
ingot_tensor *ingot_moe_gate_up(const ingot_tensor *x, const ingot_tensor *w,
                                const ingot_tensor *scale, const ingot_tensor *ids);

/* Down projection and weighted sum: y [T,K] f32 with y[t] = sum over j of
 * weights[t,j] * (h[t,j] · w[ids[t,j]]^T) (w rows times scale[e, row] when
 * given). h [T,k,I] float; w [E,K,I] contiguous; scale NULL or f32 [E,K];
 * ids int32 [T,k] in [0,E) (CPU: error; CUDA: y[t] is NaN); weights [T,k] float. */
ingot_tensor *ingot_moe_down(const ingot_tensor *h, const ingot_tensor *w,
                             const ingot_tensor *scale, const ingot_tensor *ids,
                             const ingot_tensor *weights);

/* Both expert products of a gated FFN in one call: y [T,D] f32 =
 * ingot_moe_down(ingot_moe_gate_up(x, gate_up_w, gate_up_scale, ids), down_w,
 * down_scale, ids, weights), the same values; on CUDA at decode the gate/up
 * pass also asks L2 for the chosen experts' down rows, so that the down pass
 * reads them from L2 (INGOT_MOE_PREFETCH=0 in the environment: not). NULL
 * and an error (nothing made) on bad arguments. */
ingot_tensor *ingot_moe_experts(const ingot_tensor *x, const ingot_tensor *gate_up_w,
                                const ingot_tensor *gate_up_scale, const ingot_tensor *down_w,
                                const ingot_tensor *down_scale, const ingot_tensor *ids,
                                const ingot_tensor *weights);

/* res + ingot_moe_experts(x, ...), the residual added by the down pass (no
 * separate add): y [T,D] f32 = res[t] + the weighted expert sum, one f32
 * addition each (ingot_add's bits). res [T,D] f32/bf16/f16 on x's device. */
ingot_tensor *ingot_moe_experts_add(const ingot_tensor *res, const ingot_tensor *x,
                                    const ingot_tensor *gate_up_w,
                                    const ingot_tensor *gate_up_scale, const ingot_tensor *down_w,
                                    const ingot_tensor *down_scale, const ingot_tensor *ids,
                                    const ingot_tensor *weights);

/* A sparse MoE layer (no shared expert) as one op: y [T,D] f32 = x +
 * ingot_moe_experts(xn, ...) with xn = rms_norm(x, norm, eps) and the routing
 * of ingot_moe_route_linear(xn, router, k, renorm), which *weights and *ids
 * return when not NULL. x f32 [T,D]; norm f32 [D]; router [E,D] float;
 * gate_up_w [E,2I,D]; down_w [E,D,I]. On CUDA at T = 1 one kernel does the
 * router, the routing and both expert products (INGOT_MOE_BLOCK=0: the three
 * ops' kernels); otherwise, and on the CPU, the three ops' kernels run.
 * mailbox: NULL, or int64 [>= E] on x's device, zero (and left zero): the
 * one kernel then hands the router's logits over through it instead of a
 * grid barrier. One tensor serves every call on a stream; calls that may
 * run at once need their own. The results are the same either way. */
ingot_tensor *ingot_moe_block(const ingot_tensor *x, const ingot_tensor *norm, double eps,
                              const ingot_tensor *router, int k, bool renorm,
                              const ingot_tensor *gate_up_w, const ingot_tensor *gate_up_scale,
                              const ingot_tensor *down_w, const ingot_tensor *down_scale,
                              const ingot_tensor *mailbox, ingot_tensor **weights,
                              ingot_tensor **ids);

#ifdef __cplusplus
}
#endif
#endif
