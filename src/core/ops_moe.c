/* Mixture-of-experts fronts (include/ingot/moe.h): argument checks, dense
 * copies of the small operands, output allocation and dispatch. Expert ids
 * are data on the device, so their range is checked by the kernels (the CPU
 * fails with an error; CUDA writes NaN rows, see src/cuda/moe.cu).
 *
 * Kernel contracts (every input contiguous, outputs fresh and contiguous):
 * MOE_ROUTE:   in[0] logits [T,E] f32/bf16/f16; iarg[0] = k (1..E),
 *              iarg[1] = renorm; out[0] weights f32 [T,k], out[1] ids int32
 *              [T,k]. nin 2 (the router-linear form): in[0] x [T,D] and
 *              in[1] router [E,D] (f32/bf16/f16 each), the logits being
 *              the f32 dot products x[t] . router[e] (any order).
 *              Softmax in f32 (m = the row's max, p = expf(x - m) / sum),
 *              top-k by logit (descending, ties to the lower id, NaN largest),
 *              weights = p (/ sum of the k p when renorm).
 *              nin 3: in[2] norm f32 [D], farg[0] eps, x f32: x is first
 *              normalised as the RMS_NORM kernel does ((x * inv) * norm, f32)
 *              into out[2] xn f32 [T,D], and the logits are xn[t] . router[e].
 * MOE_GATE_UP: in[0] x [T,K] f32/bf16/f16, in[1] w [E,2I,K] bf16/f16/f32/f8e4m3fn,
 *              in[2] ids int32 [T,k], in[3] scale f32 [E,2I] or NULL; nin 5:
 *              in[4] the down weight [E,K',I] that reads h next, a hint only
 *              (CUDA prefetches the chosen experts' rows into L2; any result
 *              is unchanged, kernels may ignore it);
 *              out[0] h f32 [T,k,I] = silu(g) * u, g/u the f32 dot products
 *              of x[t] with rows i and I+i of w[e] (times their scales).
 * MOE_DOWN:    in[0] h f32 [T,k,I], in[1] w [E,K,I], in[2] ids int32 [T,k],
 *              in[3] weights f32 [T,k], in[4] scale f32 [E,K] or NULL;
 *              out[0] y f32 [T,K] = sum_j weights[t,j] * (h[t,j] . w[e] rows);
 *              nin 6: in[5] res f32 [T,K], and y = res + that sum (one f32
 *              addition, as ingot_add's).
 * MOE_BLOCK:   in[0] x f32 [T,D], in[1] norm f32 [D], in[2] router [E,D]
 *              f32/bf16/f16, in[3] gate_up w [E,2I,D], in[4] its scale or
 *              NULL, in[5] down w [E,D,I], in[6] its scale or NULL (weights
 *              as MOE_GATE_UP's), in[7] a mailbox int64 [>= E] or NULL
 *              (contiguous, zero; a kernel that uses it leaves it zero;
 *              the results do not depend on it); iarg[0] = k, iarg[1] =
 *              renorm, farg[0] = eps; out[0] y f32 [T,D], out[1] weights f32
 *              [T,k], out[2] ids
 *              int32 [T,k]: MOE_ROUTE (nin 3) of x, then MOE_GATE_UP of its
 *              xn, then MOE_DOWN with res = x (moe_block_compose), up to the
 *              order of each f32 sum. T >= 1, D >= 1, I >= 1. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "moe_compose.h"

static bool is_float16ish(ingot_dtype dt) {
  return dt == INGOT_F32 || dt == INGOT_BF16 || dt == INGOT_F16;
}

static bool weight_dtype_ok(ingot_dtype dt) {
  return dt == INGOT_BF16 || dt == INGOT_F16 || dt == INGOT_F32 || dt == INGOT_F8E4M3FN;
}

/* t as a contiguous tensor of dtype dt (a new reference, or NULL + error). */
static ingot_tensor *dense(const ingot_tensor *t, ingot_dtype dt) {
  return t->dtype == dt ? ingot_contiguous(t) : ingot_cast(t, dt);
}

static bool check_ids(const char *op, const ingot_tensor *ids, int64_t T) {
  if (ids->ndim != 2 || ids->shape[0] != T) {
    ingot_set_error(INGOT_ERR_SHAPE, "%s: ids must be [%lld, k], got a %d-d tensor", op,
                    (long long)T, ids->ndim);
    return false;
  }
  if (!ingot_dtype_is_integral(ids->dtype) || ids->dtype == INGOT_BOOL) {
    ingot_set_error(INGOT_ERR_DTYPE, "%s: ids must be an integer tensor, got %s", op,
                    ingot_dtype_name(ids->dtype));
    return false;
  }
  return true;
}

/* w [E, rows, cols] contiguous of a weight dtype; scale NULL or f32 [E, rows]. */
static bool check_weight(const char *op, const ingot_tensor *w, const ingot_tensor *scale) {
  if (w->ndim != 3) {
    ingot_set_error(INGOT_ERR_SHAPE, "%s: w must be 3-d [E, rows, cols], got %d-d", op, w->ndim);
    return false;
  }
  if (!weight_dtype_ok(w->dtype)) {
    ingot_set_error(INGOT_ERR_DTYPE,
                    "%s: w must be bfloat16, float16, float32 or float8_e4m3fn, got %s", op,
                    ingot_dtype_name(w->dtype));
    return false;
  }
  if (!ingot_is_contiguous(w)) {
    ingot_set_error(INGOT_ERR_ARG, "%s: w must be contiguous", op);
    return false;
  }
  if (w->shape[0] < 1) {
    ingot_set_error(INGOT_ERR_SHAPE, "%s: w has no experts", op);
    return false;
  }
  if (!scale) return true;
  if (scale->dtype != INGOT_F32) {
    ingot_set_error(INGOT_ERR_DTYPE, "%s: scale must be float32, got %s", op,
                    ingot_dtype_name(scale->dtype));
    return false;
  }
  if (scale->ndim != 2 || scale->shape[0] != w->shape[0] || scale->shape[1] != w->shape[1]) {
    ingot_set_error(INGOT_ERR_SHAPE, "%s: scale must be [%lld, %lld] (one per output channel)", op,
                    (long long)w->shape[0], (long long)w->shape[1]);
    return false;
  }
  return true;
}

/* Dispatch MOE_ROUTE over the contiguous copies of in0 (and in1 when not
 * NULL: the router-linear form; norm when not NULL: x normalised first, into
 * *xn); the outputs only on success. */
static ingot_status route(const ingot_tensor *in0, const ingot_tensor *in1,
                          const ingot_tensor *norm, double eps, int64_t T, int k, bool renorm,
                          ingot_tensor **weights, ingot_tensor **ids, ingot_tensor **xn) {
  int64_t shape[2] = {T, k}, xshape[2] = {T, in0->shape[1]};
  ingot_op_args a = {.op = INGOT_OP_MOE_ROUTE, .nin = norm ? 3 : in1 ? 2 : 1, .nout = norm ? 3 : 2};
  a.in[0] = ingot_contiguous(in0);
  a.in[1] = in1 ? ingot_contiguous(in1) : NULL;
  a.in[2] = norm ? ingot_contiguous(norm) : NULL;
  a.iarg[0] = k;
  a.iarg[1] = renorm;
  a.farg[0] = eps;
  ingot_status st = INGOT_OK;
  if (!a.in[0] || (in1 && !a.in[1]) || (norm && !a.in[2]))
    st = ingot_last_status();
  else if (!(a.out[0] = tensor_new(2, shape, INGOT_F32, in0->device)) ||
           !(a.out[1] = tensor_new(2, shape, INGOT_I32, in0->device)) ||
           (norm && !(a.out[2] = tensor_new(2, xshape, INGOT_F32, in0->device))))
    st = ingot_last_status();
  else
    st = dispatch(&a);
  ingot_release(a.in[0]);
  ingot_release(a.in[1]);
  ingot_release(a.in[2]);
  if (st != INGOT_OK) {
    ingot_release(a.out[0]);
    ingot_release(a.out[1]);
    ingot_release(a.out[2]);
    return st;
  }
  *weights = a.out[0];
  *ids = a.out[1];
  if (xn) *xn = a.out[2];
  return INGOT_OK;
}

ingot_status ingot_moe_route(const ingot_tensor *logits, int k, bool renorm, ingot_tensor **weights,
                             ingot_tensor **ids) {
  if (!weights || !ids) return ingot_set_error(INGOT_ERR_ARG, "moe_route: NULL output pointer");
  *weights = *ids = NULL;
  if (!check_tensors("moe_route", 1, &logits)) return ingot_last_status();
  if (logits->ndim != 2)
    return ingot_set_error(INGOT_ERR_SHAPE, "moe_route: logits must be [T, E], got %d-d",
                           logits->ndim);
  if (!is_float16ish(logits->dtype))
    return ingot_set_error(INGOT_ERR_DTYPE,
                           "moe_route: logits must be float32, bfloat16 or float16, got %s",
                           ingot_dtype_name(logits->dtype));
  int64_t T = logits->shape[0], E = logits->shape[1];
  if (k < 1 || k > E)
    return ingot_set_error(INGOT_ERR_ARG, "moe_route: k (%d) must be in [1, %lld]", k,
                           (long long)E);
  return route(logits, NULL, NULL, 0, T, k, renorm, weights, ids, NULL);
}

/* Checks of the router-linear forms (op names the caller). */
static ingot_status check_route_linear(const char *op, const ingot_tensor *x,
                                       const ingot_tensor *router, int k) {
  const ingot_tensor *ts[2] = {x, router};
  if (!check_tensors(op, 2, ts)) return ingot_last_status();
  if (x->ndim != 2 || router->ndim != 2)
    return ingot_set_error(INGOT_ERR_SHAPE,
                           "%s: x must be [T, D] and router [E, D], got %d-d and %d-d", op, x->ndim,
                           router->ndim);
  if (!is_float16ish(x->dtype) || !is_float16ish(router->dtype))
    return ingot_set_error(INGOT_ERR_DTYPE,
                           "%s: x and router must be float32, bfloat16 or float16, got %s and %s",
                           op, ingot_dtype_name(x->dtype), ingot_dtype_name(router->dtype));
  if (router->shape[1] != x->shape[1])
    return ingot_set_error(INGOT_ERR_SHAPE, "%s: x has D = %lld but router rows have %lld", op,
                           (long long)x->shape[1], (long long)router->shape[1]);
  int64_t E = router->shape[0];
  if (k < 1 || k > E)
    return ingot_set_error(INGOT_ERR_ARG, "%s: k (%d) must be in [1, %lld]", op, k, (long long)E);
  return INGOT_OK;
}

ingot_status ingot_moe_route_linear(const ingot_tensor *x, const ingot_tensor *router, int k,
                                    bool renorm, ingot_tensor **weights, ingot_tensor **ids) {
  const char *op = "moe_route_linear";
  if (!weights || !ids) return ingot_set_error(INGOT_ERR_ARG, "%s: NULL output pointer", op);
  *weights = *ids = NULL;
  ingot_status st = check_route_linear(op, x, router, k);
  return st ? st : route(x, router, NULL, 0, x->shape[0], k, renorm, weights, ids, NULL);
}

ingot_status ingot_moe_route_linear_norm(const ingot_tensor *x, const ingot_tensor *norm,
                                         double eps, const ingot_tensor *router, int k, bool renorm,
                                         ingot_tensor **xn, ingot_tensor **weights,
                                         ingot_tensor **ids) {
  const char *op = "moe_route_linear_norm";
  if (!xn || !weights || !ids) return ingot_set_error(INGOT_ERR_ARG, "%s: NULL output pointer", op);
  *xn = *weights = *ids = NULL;
  ingot_status st = check_route_linear(op, x, router, k);
  if (st) return st;
  if (!check_tensors(op, 2, (const ingot_tensor *[]){x, norm})) return ingot_last_status();
  if (x->dtype != INGOT_F32 || norm->dtype != INGOT_F32 || norm->ndim != 1 ||
      norm->shape[0] != x->shape[1])
    return ingot_set_error(INGOT_ERR_ARG, "%s: x must be float32 and norm float32 [%lld]", op,
                           (long long)x->shape[1]);
  return route(x, router, norm, eps, x->shape[0], k, renorm, weights, ids, xn);
}

/* ingot_moe_gate_up with the down weight that will read h as a hint (NULL: none). */
static ingot_tensor *gate_up(const ingot_tensor *x, const ingot_tensor *w,
                             const ingot_tensor *scale, const ingot_tensor *ids,
                             const ingot_tensor *next) {
  const char *op = "moe_gate_up";
  const ingot_tensor *ts[4] = {x, w, ids, scale};
  if (!check_tensors(op, scale ? 4 : 3, ts)) return NULL;
  if (x->ndim != 2)
    return ingot_fail(INGOT_ERR_SHAPE, "%s: x must be [T, K], got %d-d", op, x->ndim);
  if (!is_float16ish(x->dtype))
    return ingot_fail(INGOT_ERR_DTYPE, "%s: x must be float32, bfloat16 or float16, got %s", op,
                      ingot_dtype_name(x->dtype));
  if (!check_weight(op, w, scale) || !check_ids(op, ids, x->shape[0])) return NULL;
  if (w->shape[1] % 2 != 0)
    return ingot_fail(INGOT_ERR_SHAPE,
                      "%s: w must be [E, 2I, K] (gate rows, then up rows), got "
                      "%lld rows",
                      op, (long long)w->shape[1]);
  if (w->shape[2] != x->shape[1])
    return ingot_fail(INGOT_ERR_SHAPE, "%s: x has K = %lld but w rows have %lld", op,
                      (long long)x->shape[1], (long long)w->shape[2]);
  int64_t shape[3] = {x->shape[0], ids->shape[1], w->shape[1] / 2};
  ingot_op_args a = {.op = INGOT_OP_MOE_GATE_UP, .nin = next ? 5 : 4, .nout = 1};
  a.in[0] = ingot_contiguous(x);
  a.in[1] = (ingot_tensor *)w;
  a.in[4] = (ingot_tensor *)next;
  a.in[2] = dense(ids, INGOT_I32);
  a.in[3] = scale ? ingot_contiguous(scale) : NULL;
  ingot_tensor *r = NULL;
  if (a.in[0] && a.in[2] && (!scale || a.in[3])) {
    a.out[0] = tensor_new(3, shape, INGOT_F32, x->device);
    if (a.out[0]) r = dispatch_out(&a);
  }
  ingot_release(a.in[0]);
  ingot_release(a.in[2]);
  ingot_release(a.in[3]);
  return r ? r : fail_in(op);
}

ingot_tensor *ingot_moe_gate_up(const ingot_tensor *x, const ingot_tensor *w,
                                const ingot_tensor *scale, const ingot_tensor *ids) {
  return gate_up(x, w, scale, ids, NULL);
}

/* ingot_moe_down, plus res [T, K] (NULL: none) added to the sum. */
static ingot_tensor *down(const ingot_tensor *h, const ingot_tensor *w, const ingot_tensor *scale,
                          const ingot_tensor *ids, const ingot_tensor *weights,
                          const ingot_tensor *res) {
  const char *op = "moe_down";
  const ingot_tensor *ts[5] = {h, w, ids, weights, scale};
  if (!check_tensors(op, scale ? 5 : 4, ts)) return NULL;
  if (h->ndim != 3)
    return ingot_fail(INGOT_ERR_SHAPE, "%s: h must be [T, k, I], got %d-d", op, h->ndim);
  if (!is_float16ish(h->dtype) || !is_float16ish(weights->dtype))
    return ingot_fail(INGOT_ERR_DTYPE, "%s: h and weights must be float32, bfloat16 or float16",
                      op);
  if (!check_weight(op, w, scale) || !check_ids(op, ids, h->shape[0])) return NULL;
  if (ids->shape[1] != h->shape[1])
    return ingot_fail(INGOT_ERR_SHAPE, "%s: h has k = %lld but ids has %lld", op,
                      (long long)h->shape[1], (long long)ids->shape[1]);
  if (weights->ndim != 2 || weights->shape[0] != h->shape[0] || weights->shape[1] != h->shape[1])
    return ingot_fail(INGOT_ERR_SHAPE, "%s: weights must be [%lld, %lld]", op,
                      (long long)h->shape[0], (long long)h->shape[1]);
  if (w->shape[2] != h->shape[2])
    return ingot_fail(INGOT_ERR_SHAPE, "%s: h has I = %lld but w rows have %lld", op,
                      (long long)h->shape[2], (long long)w->shape[2]);
  int64_t shape[2] = {h->shape[0], w->shape[1]};
  if (res && !check_tensors(op, 2, (const ingot_tensor *[]){h, res})) return NULL;
  if (res && (res->ndim != 2 || res->shape[0] != shape[0] || res->shape[1] != shape[1] ||
              !is_float16ish(res->dtype)))
    return ingot_fail(INGOT_ERR_SHAPE, "%s: res must be float32, bfloat16 or float16 [%lld, %lld]",
                      op, (long long)shape[0], (long long)shape[1]);
  ingot_op_args a = {.op = INGOT_OP_MOE_DOWN, .nin = res ? 6 : 5, .nout = 1};
  a.in[0] = dense(h, INGOT_F32);
  a.in[1] = (ingot_tensor *)w;
  a.in[2] = dense(ids, INGOT_I32);
  a.in[3] = dense(weights, INGOT_F32);
  a.in[4] = scale ? ingot_contiguous(scale) : NULL;
  a.in[5] = res ? dense(res, INGOT_F32) : NULL;
  ingot_tensor *r = NULL;
  if (a.in[0] && a.in[2] && a.in[3] && (!scale || a.in[4]) && (!res || a.in[5])) {
    a.out[0] = tensor_new(2, shape, INGOT_F32, h->device);
    if (a.out[0]) r = dispatch_out(&a);
  }
  ingot_release(a.in[0]);
  ingot_release(a.in[2]);
  ingot_release(a.in[3]);
  ingot_release(a.in[4]);
  ingot_release(a.in[5]);
  return r ? r : fail_in(op);
}

ingot_tensor *ingot_moe_down(const ingot_tensor *h, const ingot_tensor *w,
                             const ingot_tensor *scale, const ingot_tensor *ids,
                             const ingot_tensor *weights) {
  return down(h, w, scale, ids, weights, NULL);
}

/* INGOT_MOE_PREFETCH=0: no down-row hint for gate_up (to measure what it buys). */
static bool down_hint(void) {
  const char *pf = getenv("INGOT_MOE_PREFETCH");
  return !(pf && strcmp(pf, "0") == 0);
}

/* ingot_moe_experts, plus res (NULL: none) added by the down pass. */
static ingot_tensor *experts(const ingot_tensor *res, const ingot_tensor *x,
                             const ingot_tensor *gate_up_w, const ingot_tensor *gate_up_scale,
                             const ingot_tensor *down_w, const ingot_tensor *down_scale,
                             const ingot_tensor *ids, const ingot_tensor *weights) {
  const ingot_tensor *ts[3] = {x, down_w, weights};
  if (!check_tensors("moe_experts", 3, ts) || !check_weight("moe_experts", down_w, down_scale))
    return NULL;
  ingot_tensor *h = gate_up(x, gate_up_w, gate_up_scale, ids, down_hint() ? down_w : NULL);
  if (!h) return NULL;
  ingot_tensor *y = down(h, down_w, down_scale, ids, weights, res);
  ingot_release(h);
  return y;
}

ingot_tensor *ingot_moe_experts(const ingot_tensor *x, const ingot_tensor *gate_up_w,
                                const ingot_tensor *gate_up_scale, const ingot_tensor *down_w,
                                const ingot_tensor *down_scale, const ingot_tensor *ids,
                                const ingot_tensor *weights) {
  return experts(NULL, x, gate_up_w, gate_up_scale, down_w, down_scale, ids, weights);
}

ingot_tensor *ingot_moe_experts_add(const ingot_tensor *res, const ingot_tensor *x,
                                    const ingot_tensor *gate_up_w,
                                    const ingot_tensor *gate_up_scale, const ingot_tensor *down_w,
                                    const ingot_tensor *down_scale, const ingot_tensor *ids,
                                    const ingot_tensor *weights) {
  if (!res) return ingot_fail(INGOT_ERR_ARG, "moe_experts_add: NULL res");
  return experts(res, x, gate_up_w, gate_up_scale, down_w, down_scale, ids, weights);
}

ingot_tensor *ingot_moe_block(const ingot_tensor *x, const ingot_tensor *norm, double eps,
                              const ingot_tensor *router, int k, bool renorm,
                              const ingot_tensor *gate_up_w, const ingot_tensor *gate_up_scale,
                              const ingot_tensor *down_w, const ingot_tensor *down_scale,
                              const ingot_tensor *mailbox, ingot_tensor **weights,
                              ingot_tensor **ids) {
  const char *op = "moe_block";
  if (weights) *weights = NULL;
  if (ids) *ids = NULL;
  if (check_route_linear(op, x, router, k)) return NULL;
  const ingot_tensor *ts[4] = {x, norm, gate_up_w, down_w};
  if (!check_tensors(op, 4, ts) || !check_weight(op, gate_up_w, gate_up_scale) ||
      !check_weight(op, down_w, down_scale))
    return NULL;
  if (x->dtype != INGOT_F32 || norm->dtype != INGOT_F32 || norm->ndim != 1 ||
      norm->shape[0] != x->shape[1])
    return ingot_fail(INGOT_ERR_ARG, "%s: x must be float32 and norm float32 [%lld]", op,
                      (long long)x->shape[1]);
  const int64_t T = x->shape[0], D = x->shape[1], E = router->shape[0];
  const int64_t I = down_w->shape[2];
  if (gate_up_w->shape[0] != E || gate_up_w->shape[1] != 2 * I || gate_up_w->shape[2] != D ||
      down_w->shape[0] != E || down_w->shape[1] != D)
    return ingot_fail(INGOT_ERR_SHAPE,
                      "%s: gate_up_w must be [%lld, 2I, %lld] and down_w [%lld, %lld, I] "
                      "(router E %lld, x D %lld), got [%lld, %lld, %lld] and [%lld, %lld, %lld]",
                      op, (long long)E, (long long)D, (long long)E, (long long)D, (long long)E,
                      (long long)D, (long long)gate_up_w->shape[0], (long long)gate_up_w->shape[1],
                      (long long)gate_up_w->shape[2], (long long)down_w->shape[0],
                      (long long)down_w->shape[1], (long long)I);
  if (T > (1 << 24) || I < 1)
    return ingot_fail(INGOT_ERR_SHAPE, "%s: %s", op,
                      I < 1 ? "I must be at least 1" : "T too large");
  if (mailbox && (!check_tensors(op, 2, (const ingot_tensor *[]){x, mailbox}) ||
                  !check_scratch(op, "mailbox", mailbox, INGOT_I64, E, "one word an expert")))
    return NULL;
  int64_t yshape[2] = {T, D}, kshape[2] = {T, k};
  ingot_op_args a = {.op = INGOT_OP_MOE_BLOCK, .nin = 8, .nout = 3};
  a.in[7] = (ingot_tensor *)mailbox; /* borrowed: zero in, zero out */
  const ingot_tensor *src[7] = {x, norm, router, gate_up_w, gate_up_scale, down_w, down_scale};
  bool ok = true;
  for (int i = 0; i < 7; i++) {
    if (!src[i]) continue;
    a.in[i] = i == 3 || i == 5 ? (ingot_tensor *)src[i] : ingot_contiguous(src[i]);
    ok = ok && a.in[i];
  }
  a.iarg[0] = k;
  a.iarg[1] = renorm;
  a.farg[0] = eps;
  ingot_status st = INGOT_OK;
  if (!ok || !(a.out[0] = tensor_new(2, yshape, INGOT_F32, x->device)) ||
      !(a.out[1] = tensor_new(2, kshape, INGOT_F32, x->device)) ||
      !(a.out[2] = tensor_new(2, kshape, INGOT_I32, x->device)))
    st = ingot_last_status();
  else
    st = dispatch(&a);
  for (int i = 0; i < 7; i++)
    if (i != 3 && i != 5) ingot_release(a.in[i]);
  ingot_tensor *y = st ? NULL : a.out[0];
  if (!y) ingot_release(a.out[0]);
  if (y && weights)
    *weights = a.out[1];
  else
    ingot_release(a.out[1]);
  if (y && ids)
    *ids = a.out[2];
  else
    ingot_release(a.out[2]);
  return y ? y : fail_in(op);
}

ingot_status moe_block_compose(ingot_op_args *a) {
  ingot_tensor *y = a->out[0];
  const ingot_backend *be =
      backend_with(y->device, "moe_block", 3,
                   (ingot_op[]){INGOT_OP_MOE_ROUTE, INGOT_OP_MOE_GATE_UP, INGOT_OP_MOE_DOWN});
  if (!be) return ingot_last_status();
  const int64_t T = y->shape[0], D = y->shape[1], k = a->iarg[0], I = a->in[5]->shape[2];
  ingot_tensor *xn = tensor_new(2, (int64_t[]){T, D}, INGOT_F32, y->device);
  ingot_tensor *h = tensor_new(3, (int64_t[]){T, k, I}, INGOT_F32, y->device);
  ingot_status st = xn && h ? INGOT_OK : ingot_last_status();
  if (!st) { /* the norm and the routing: weights, ids and xn */
    ingot_op_args r = {.op = INGOT_OP_MOE_ROUTE, .nin = 3, .nout = 3};
    r.in[0] = a->in[0], r.in[1] = a->in[2], r.in[2] = a->in[1];
    r.iarg[0] = k, r.iarg[1] = a->iarg[1], r.farg[0] = a->farg[0];
    r.out[0] = a->out[1], r.out[1] = a->out[2], r.out[2] = xn;
    st = be->kernels[INGOT_OP_MOE_ROUTE](&r);
  }
  if (!st) {
    ingot_op_args g = {.op = INGOT_OP_MOE_GATE_UP, .nin = down_hint() ? 5 : 4, .nout = 1};
    g.in[0] = xn, g.in[1] = a->in[3], g.in[2] = a->out[2], g.in[3] = a->in[4];
    g.in[4] = down_hint() ? a->in[5] : NULL;
    g.out[0] = h;
    st = be->kernels[INGOT_OP_MOE_GATE_UP](&g);
  }
  if (!st) {
    ingot_op_args d = {.op = INGOT_OP_MOE_DOWN, .nin = 6, .nout = 1};
    d.in[0] = h, d.in[1] = a->in[5], d.in[2] = a->out[2], d.in[3] = a->out[1];
    d.in[4] = a->in[6], d.in[5] = a->in[0];
    d.out[0] = y;
    st = be->kernels[INGOT_OP_MOE_DOWN](&d);
  }
  ingot_release(xn); /* stream-ordered on a device: reused only after this stream's work */
  ingot_release(h);
  return st;
}
