/* Fronts of the decode-time attention ops (include/ingot/attention.h): rope,
 * kv_cache_write, attention_cached, rope_kv_write (the first two fused),
 * qmatmul_rope_kv (the q|k|v product with rope_kv_write) and
 * rope_kv_attention (rope_kv_write with attention_cached).
 * Kernels receive contiguous tensors (the fronts copy strided inputs; q, k,
 * v of rope_kv_write only need a unit last stride) and read positions on
 * the device. */
#include <string.h>

#include "internal.h"
#include "qkv_rope.h"

/* Contiguous reference to t (owned), or NULL with the error naming op. */
static ingot_tensor *contig(const char *op, const ingot_tensor *t) {
  ingot_tensor *c = ingot_contiguous(t);
  return c ? c : fail_in(op);
}

static bool is_3d(const char *op, const char *name, const ingot_tensor *t) {
  if (t->ndim == 3) return true;
  ingot_set_error(INGOT_ERR_SHAPE, "%s: '%s' must be 3-D [rows, heads, head_dim], got %d dims", op,
                  name, t->ndim);
  return false;
}

/* pos: int32 [T]. */
static bool check_pos(const char *op, const ingot_tensor *pos, int64_t T) {
  if (pos->dtype != INGOT_I32) {
    ingot_set_error(INGOT_ERR_DTYPE, "%s: 'pos' must be int32, got %s", op,
                    ingot_dtype_name(pos->dtype));
    return false;
  }
  if (pos->ndim != 1 || pos->shape[0] != T) {
    ingot_set_error(INGOT_ERR_SHAPE, "%s: 'pos' must be [%lld] (one position per row)", op,
                    (long long)T);
    return false;
  }
  return true;
}

static bool check_f32(const char *op, const char *name, const ingot_tensor *t) {
  if (t->dtype == INGOT_F32) return true;
  ingot_set_error(INGOT_ERR_DTYPE, "%s: '%s' must be float32, got %s", op, name,
                  ingot_dtype_name(t->dtype));
  return false;
}

/* Caches: contiguous [ctx, Hkv, D], float32 or float16, the same geometry. */
static bool check_caches(const char *op, const ingot_tensor *kc, const ingot_tensor *vc) {
  if (!is_3d(op, "k_cache", kc) || !is_3d(op, "v_cache", vc)) return false;
  if (kc->dtype != vc->dtype || (kc->dtype != INGOT_F32 && kc->dtype != INGOT_F16)) {
    ingot_set_error(INGOT_ERR_DTYPE, "%s: caches must both be float32 or float16, got %s and %s",
                    op, ingot_dtype_name(kc->dtype), ingot_dtype_name(vc->dtype));
    return false;
  }
  if (memcmp(kc->shape, vc->shape, 3 * sizeof kc->shape[0])) {
    ingot_set_error(INGOT_ERR_SHAPE, "%s: k_cache and v_cache shapes differ", op);
    return false;
  }
  if (!ingot_is_contiguous(kc) || !ingot_is_contiguous(vc)) {
    ingot_set_error(INGOT_ERR_ARG, "%s: caches must be contiguous", op);
    return false;
  }
  if (kc->shape[0] <= 0 || kc->shape[0] > INT32_MAX) {
    ingot_set_error(INGOT_ERR_SHAPE, "%s: cache length %lld is outside [1, 2^31)", op,
                    (long long)kc->shape[0]);
    return false;
  }
  return true;
}

/* Run a (inputs set, nin contiguous copies in tmp) into a fresh float32
 * out of shape, then release tmp. */
static ingot_tensor *run_out(ingot_op_args *a, const int64_t *shape, ingot_device dev,
                             ingot_tensor **tmp, int ntmp) {
  ingot_tensor *r = NULL;
  a->out[0] = tensor_new(3, shape, INGOT_F32, dev);
  if (a->out[0]) r = dispatch_out(a);
  for (int i = 0; i < ntmp; i++) ingot_release(tmp[i]);
  return r;
}

/* ROPE: in[0] = x float32 [T, H, D] (contiguous), in[1] = pos int32 [T],
 * in[2] = inv_freq float64 [D/2], iarg[0] = neox; out[0] float32 [T, H, D]. */
ingot_tensor *ingot_rope(const ingot_tensor *x, const ingot_tensor *pos,
                         const ingot_tensor *inv_freq, bool neox) {
  const char *op = "rope";
  const ingot_tensor *ts[3] = {x, pos, inv_freq};
  if (!check_tensors(op, 3, ts)) return NULL;
  if (!is_3d(op, "x", x) || !check_f32(op, "x", x) || !check_pos(op, pos, x->shape[0])) return NULL;
  if (x->shape[2] % 2)
    return ingot_fail(INGOT_ERR_SHAPE, "rope: head_dim %lld is odd", (long long)x->shape[2]);
  if (inv_freq->ndim != 1 || inv_freq->shape[0] != x->shape[2] / 2)
    return ingot_fail(INGOT_ERR_SHAPE, "rope: 'inv_freq' must be [%lld] (head_dim / 2)",
                      (long long)(x->shape[2] / 2));
  if (inv_freq->dtype != INGOT_F32 && inv_freq->dtype != INGOT_F64)
    return ingot_fail(INGOT_ERR_DTYPE, "rope: 'inv_freq' must be float32 or float64, got %s",
                      ingot_dtype_name(inv_freq->dtype));
  ingot_tensor *tmp[3] = {
      contig(op, x), contig(op, pos),
      inv_freq->dtype == INGOT_F64 ? contig(op, inv_freq) : ingot_cast(inv_freq, INGOT_F64)};
  if (!tmp[0] || !tmp[1] || !tmp[2]) {
    for (int i = 0; i < 3; i++) ingot_release(tmp[i]);
    return fail_in(op);
  }
  ingot_op_args a = {.op = INGOT_OP_ROPE, .nin = 3, .nout = 1};
  for (int i = 0; i < 3; i++) a.in[i] = tmp[i];
  a.iarg[0] = neox;
  return run_out(&a, x->shape, x->device, tmp, 3);
}

/* KV_CACHE_WRITE: in[0] = k, in[1] = v (float32 [T, Hkv, D], contiguous),
 * in[2] = pos int32 [T]; out[0] = k_cache, out[1] = v_cache (written in
 * place, contiguous [ctx, Hkv, D], float32 or float16). */
ingot_status ingot_kv_cache_write(ingot_tensor *k_cache, ingot_tensor *v_cache,
                                  const ingot_tensor *k, const ingot_tensor *v,
                                  const ingot_tensor *pos) {
  const char *op = "kv_cache_write";
  const ingot_tensor *ts[5] = {k_cache, v_cache, k, v, pos};
  if (!check_tensors(op, 5, ts)) return ingot_last_status();
  if (!check_caches(op, k_cache, v_cache) || !is_3d(op, "k", k) || !is_3d(op, "v", v) ||
      !check_f32(op, "k", k) || !check_f32(op, "v", v) || !check_pos(op, pos, k->shape[0]))
    return ingot_last_status();
  if (memcmp(k->shape, v->shape, sizeof k->shape[0] * 3) || k->shape[1] != k_cache->shape[1] ||
      k->shape[2] != k_cache->shape[2])
    return ingot_set_error(INGOT_ERR_SHAPE,
                           "kv_cache_write: k and v must be [T, %lld, %lld] like the caches",
                           (long long)k_cache->shape[1], (long long)k_cache->shape[2]);
  ingot_tensor *tmp[3] = {contig(op, k), contig(op, v), contig(op, pos)};
  ingot_status st = INGOT_OK;
  if (!tmp[0] || !tmp[1] || !tmp[2]) {
    st = ingot_last_status();
  } else {
    ingot_op_args a = {.op = INGOT_OP_KV_CACHE_WRITE, .nin = 3, .nout = 2};
    for (int i = 0; i < 3; i++) a.in[i] = tmp[i];
    a.out[0] = k_cache;
    a.out[1] = v_cache;
    if ((st = dispatch(&a))) fail_in(op);
  }
  for (int i = 0; i < 3; i++) ingot_release(tmp[i]);
  return st;
}

/* The argument rules of attention_cached (op names the caller): q float32
 * [T, Hq, D], the caches, pos [T], D in [1, 256] as the caches', Hq a
 * multiple of Hkv, scale not NaN. */
static bool check_attention(const char *op, const ingot_tensor *q, const ingot_tensor *k_cache,
                            const ingot_tensor *v_cache, const ingot_tensor *pos, double scale) {
  if (!is_3d(op, "q", q) || !check_f32(op, "q", q) || !check_caches(op, k_cache, v_cache) ||
      !check_pos(op, pos, q->shape[0]))
    return false;
  int64_t hq = q->shape[1], hkv = k_cache->shape[1], d = q->shape[2];
  if (d != k_cache->shape[2] || d <= 0 || d > 256) {
    ingot_set_error(INGOT_ERR_SHAPE,
                    "%s: head_dim of q (%lld) and the caches (%lld) must agree and lie in [1, 256]",
                    op, (long long)d, (long long)k_cache->shape[2]);
    return false;
  }
  if (hkv <= 0 || hq % hkv) {
    ingot_set_error(INGOT_ERR_SHAPE, "%s: %lld query heads are not a multiple of %lld kv heads", op,
                    (long long)hq, (long long)hkv);
    return false;
  }
  if (!(scale == scale)) {
    ingot_set_error(INGOT_ERR_ARG, "%s: scale is NaN", op);
    return false;
  }
  return true;
}

/* ATTENTION_CACHED: in[0] = q float32 [T, Hq, D] (contiguous), in[1] =
 * k_cache, in[2] = v_cache (contiguous [ctx, Hkv, D], float32 or float16),
 * in[3] = pos int32 [T]; farg[0] = scale; out[0] float32 [T, Hq, D]. */
ingot_tensor *ingot_attention_cached(const ingot_tensor *q, const ingot_tensor *k_cache,
                                     const ingot_tensor *v_cache, const ingot_tensor *pos,
                                     double scale) {
  const char *op = "attention_cached";
  const ingot_tensor *ts[4] = {q, k_cache, v_cache, pos};
  if (!check_tensors(op, 4, ts) || !check_attention(op, q, k_cache, v_cache, pos, scale))
    return NULL;
  ingot_tensor *tmp[2] = {contig(op, q), contig(op, pos)};
  if (!tmp[0] || !tmp[1]) {
    ingot_release(tmp[0]);
    ingot_release(tmp[1]);
    return fail_in(op);
  }
  ingot_op_args a = {.op = INGOT_OP_ATTENTION_CACHED, .nin = 4, .nout = 1};
  a.in[0] = tmp[0];
  a.in[1] = (ingot_tensor *)k_cache;
  a.in[2] = (ingot_tensor *)v_cache;
  a.in[3] = tmp[1];
  a.farg[0] = scale;
  return run_out(&a, q->shape, q->device, tmp, 2);
}

/* x as a kernel input with unit last stride (a view itself, else a
 * contiguous copy; owned) and its row and head strides in s[0], s[1]. */
static ingot_tensor *unit_last(const char *op, const ingot_tensor *x, int64_t *s) {
  ingot_tensor *r = x->strides[2] == 1 ? ingot_retain((ingot_tensor *)x) : contig(op, x);
  if (r) s[0] = r->strides[0], s[1] = r->strides[1];
  return r;
}

static bool check_norm(const char *op, const char *name, const ingot_tensor *w, int64_t d) {
  if (!check_f32(op, name, w)) return false;
  if (w->ndim == 1 && w->shape[0] == d) return true;
  ingot_set_error(INGOT_ERR_SHAPE, "%s: '%s' must be [%lld] (head_dim)", op, name, (long long)d);
  return false;
}

/* The checks rope_kv_write and qmatmul_rope_kv (op) share once head_dim D
 * is known: D even and <= 256, inv_freq [D/2] float32/float64, the norms
 * (o->q_norm and o->k_norm both given or both NULL) float32 [D], eps not NaN. */
static bool check_rope_opts(const char *op, int64_t D, const ingot_tensor *inv_freq,
                            const ingot_rope_kv_options *o) {
  bool norm = o->q_norm != NULL;
  if (D % 2 || D > 256) {
    ingot_set_error(INGOT_ERR_SHAPE, "%s: head_dim %lld must be even and <= 256", op, (long long)D);
    return false;
  }
  if (inv_freq->ndim != 1 || inv_freq->shape[0] != D / 2) {
    ingot_set_error(INGOT_ERR_SHAPE, "%s: 'inv_freq' must be [%lld] (head_dim / 2)", op,
                    (long long)(D / 2));
    return false;
  }
  if (inv_freq->dtype != INGOT_F32 && inv_freq->dtype != INGOT_F64) {
    ingot_set_error(INGOT_ERR_DTYPE, "%s: 'inv_freq' must be float32 or float64, got %s", op,
                    ingot_dtype_name(inv_freq->dtype));
    return false;
  }
  if (norm && (!check_norm(op, "q_norm", o->q_norm, D) || !check_norm(op, "k_norm", o->k_norm, D)))
    return false;
  if (norm && !(o->eps == o->eps)) {
    ingot_set_error(INGOT_ERR_ARG, "%s: eps is NaN", op);
    return false;
  }
  return true;
}

/* The kernel inputs after q, k, v (owned; NULL where a copy failed or a
 * norm is absent): pos, inv_freq as float64, q_norm, k_norm. */
static void rope_inputs(const char *op, const ingot_tensor *pos, const ingot_tensor *inv_freq,
                        const ingot_rope_kv_options *o, ingot_tensor **tmp) {
  tmp[0] = contig(op, pos);
  tmp[1] = inv_freq->dtype == INGOT_F64 ? contig(op, inv_freq) : ingot_cast(inv_freq, INGOT_F64);
  tmp[2] = o->q_norm ? contig(op, o->q_norm) : NULL;
  tmp[3] = o->k_norm ? contig(op, o->k_norm) : NULL;
}

/* The argument rules of rope_kv_write (op names the caller): options given,
 * both norms or neither, q float32 [T, Hq, D], k and v [T, Hkv, D] like the
 * caches, pos [T], then check_rope_opts. */
static bool check_rope_kv(const char *op, const ingot_tensor *q, const ingot_tensor *k,
                          const ingot_tensor *v, const ingot_tensor *pos,
                          const ingot_tensor *inv_freq, const ingot_rope_kv_options *o,
                          const ingot_tensor *k_cache, const ingot_tensor *v_cache) {
  if (!o) {
    ingot_set_error(INGOT_ERR_ARG, "%s: options are NULL", op);
    return false;
  }
  bool norm = o->q_norm || o->k_norm;
  if (norm && (!o->q_norm || !o->k_norm)) {
    ingot_set_error(INGOT_ERR_ARG, "%s: give both q_norm and k_norm, or neither", op);
    return false;
  }
  const ingot_tensor *ts[9] = {q, k, v, pos, inv_freq, k_cache, v_cache, o->q_norm, o->k_norm};
  if (!check_tensors(op, norm ? 9 : 7, ts)) return false;
  if (!is_3d(op, "q", q) || !is_3d(op, "k", k) || !is_3d(op, "v", v) || !check_f32(op, "q", q) ||
      !check_f32(op, "k", k) || !check_f32(op, "v", v) || !check_caches(op, k_cache, v_cache) ||
      !check_pos(op, pos, q->shape[0]))
    return false;
  int64_t T = q->shape[0], D = q->shape[2];
  const int64_t *cs = k_cache->shape;
  if (memcmp(k->shape, v->shape, 3 * sizeof k->shape[0]) || k->shape[0] != T ||
      k->shape[1] != cs[1] || k->shape[2] != cs[2] || D != cs[2]) {
    ingot_set_error(INGOT_ERR_SHAPE,
                    "%s: q must be [%lld, Hq, %lld] and k, v [%lld, %lld, %lld] like the caches",
                    op, (long long)T, (long long)cs[2], (long long)T, (long long)cs[1],
                    (long long)cs[2]);
    return false;
  }
  return check_rope_opts(op, D, inv_freq, o);
}

/* ROPE_KV_WRITE's inputs and arguments in a (in[0..nin), iarg, farg[0],
 * out[1..2]) with the owned copies in tmp[7] (release them all); false when
 * a copy failed. */
static bool rope_kv_args(const char *op, const ingot_tensor *q, const ingot_tensor *k,
                         const ingot_tensor *v, const ingot_tensor *pos,
                         const ingot_tensor *inv_freq, const ingot_rope_kv_options *o,
                         ingot_tensor *k_cache, ingot_tensor *v_cache, ingot_op_args *a,
                         ingot_tensor **tmp) {
  a->nin = o->q_norm ? 7 : 5;
  tmp[0] = unit_last(op, q, a->iarg + 1);
  tmp[1] = unit_last(op, k, a->iarg + 3);
  tmp[2] = unit_last(op, v, a->iarg + 5);
  rope_inputs(op, pos, inv_freq, o, tmp + 3);
  bool ok = true;
  for (int i = 0; i < a->nin; i++) ok = ok && (a->in[i] = tmp[i]);
  a->iarg[0] = o->neox;
  a->farg[0] = o->eps;
  a->out[1] = k_cache;
  a->out[2] = v_cache;
  return ok;
}

/* Run a (out[1..2] the borrowed caches) into a fresh float32 out[0] of
 * shape, release tmp[7]; the result, or NULL with the error naming op. */
static ingot_tensor *run_into_caches(const char *op, ingot_op_args *a, bool ok,
                                     const int64_t *shape, ingot_device dev, ingot_tensor **tmp) {
  ingot_tensor *r = NULL;
  if (ok && (r = tensor_new(3, shape, INGOT_F32, dev))) {
    a->out[0] = r; /* the caches are borrowed: only r is released on failure */
    if (dispatch(a)) {
      ingot_release(r);
      r = NULL;
    }
  }
  for (int i = 0; i < 7; i++) ingot_release(tmp[i]);
  return r ? r : fail_in(op);
}

/* ROPE_KV_WRITE: in[0] = q [T, Hq, D], in[1] = k, in[2] = v [T, Hkv, D]
 * (float32, unit last stride; row and head strides in iarg[1..2], [3..4],
 * [5..6]), in[3] = pos int32 [T], in[4] = inv_freq float64 [D/2], in[5] =
 * q_norm, in[6] = k_norm (float32 [D], only with nin 7); iarg[0] = neox,
 * farg[0] = eps; out[0] = roped q float32 [T, Hq, D] (fresh), out[1] =
 * k_cache, out[2] = v_cache (written in place, as KV_CACHE_WRITE). */
ingot_tensor *ingot_rope_kv_write(const ingot_tensor *q, const ingot_tensor *k,
                                  const ingot_tensor *v, const ingot_tensor *pos,
                                  const ingot_tensor *inv_freq, const ingot_rope_kv_options *o,
                                  ingot_tensor *k_cache, ingot_tensor *v_cache) {
  const char *op = "rope_kv_write";
  if (!check_rope_kv(op, q, k, v, pos, inv_freq, o, k_cache, v_cache)) return NULL;
  ingot_op_args a = {.op = INGOT_OP_ROPE_KV_WRITE, .nout = 3};
  ingot_tensor *tmp[7] = {NULL};
  bool ok = rope_kv_args(op, q, k, v, pos, inv_freq, o, k_cache, v_cache, &a, tmp);
  return run_into_caches(op, &a, ok, q->shape, q->device, tmp);
}

/* ROPE_KV_ATTENTION: ROPE_KV_WRITE's inputs, arguments and caches (out[1],
 * out[2]), farg[1] = scale, iarg[7] = o->settled (a hint: no copy of
 * in[3..6] made here); out[0] = the attention output float32 [T, Hq,
 * D] (fresh). Results: ROPE_KV_WRITE into a roped q, then ATTENTION_CACHED
 * of it (rope_kv_attention_compose). */
ingot_tensor *ingot_rope_kv_attention(const ingot_tensor *q, const ingot_tensor *k,
                                      const ingot_tensor *v, const ingot_tensor *pos,
                                      const ingot_tensor *inv_freq, const ingot_rope_kv_options *o,
                                      ingot_tensor *k_cache, ingot_tensor *v_cache, double scale) {
  const char *op = "rope_kv_attention";
  if (!check_rope_kv(op, q, k, v, pos, inv_freq, o, k_cache, v_cache) ||
      !check_attention(op, q, k_cache, v_cache, pos, scale))
    return NULL;
  ingot_op_args a = {.op = INGOT_OP_ROPE_KV_ATTENTION, .nout = 3};
  ingot_tensor *tmp[7] = {NULL};
  bool ok = rope_kv_args(op, q, k, v, pos, inv_freq, o, k_cache, v_cache, &a, tmp);
  a.farg[1] = scale;
  /* settled holds for the caller's tensors, not for a copy made just now */
  a.iarg[7] = o->settled && ok && tmp[3] == pos && tmp[4] == inv_freq && tmp[5] == o->q_norm &&
              tmp[6] == o->k_norm;
  return run_into_caches(op, &a, ok, q->shape, q->device, tmp);
}

/* The roped q of a->op's first step (first: ROPE_KV_WRITE or QMATMUL_ROPE_KV,
 * on a's arguments and caches) into a scratch, then ATTENTION_CACHED of it
 * over the caches at pos (in[3]) with scale into out[0]: the composed
 * ROPE_KV_ATTENTION and QMATMUL_ROPE_KV_ATTENTION. */
static ingot_status roped_then_attention(ingot_op_args *a, const char *name, ingot_op first,
                                         double scale) {
  ingot_tensor *out = a->out[0];
  const ingot_backend *be =
      backend_with(out->device, name, 2, (ingot_op[]){first, INGOT_OP_ATTENTION_CACHED});
  if (!be) return ingot_last_status();
  ingot_tensor *q = tensor_new(3, out->shape, INGOT_F32, out->device); /* the roped q */
  if (!q) return ingot_last_status();
  ingot_op_args r = *a;
  r.op = first;
  r.out[0] = q;
  ingot_status st = be->kernels[first](&r);
  if (!st) {
    ingot_op_args c = {.op = INGOT_OP_ATTENTION_CACHED, .nin = 4, .nout = 1};
    c.in[0] = q, c.in[1] = a->out[1], c.in[2] = a->out[2], c.in[3] = a->in[3];
    c.farg[0] = scale;
    c.out[0] = out;
    st = be->kernels[INGOT_OP_ATTENTION_CACHED](&c);
  }
  ingot_release(q); /* stream-ordered on a device: reused only after this stream's work */
  return st;
}

ingot_status rope_kv_attention_compose(ingot_op_args *a) {
  return roped_then_attention(a, "rope_kv_attention", INGOT_OP_ROPE_KV_WRITE, a->farg[1]);
}

/* QMATMUL_ROPE_KV: in[0] = x float32 [T, K] (contiguous), in[1] = W u8
 * [N, S] (contiguous; as QMATMUL) with N = (Hq + 2 Hkv) D, in[2] = norm
 * float32 [K] or NULL, in[3] = pos int32 [T], in[4] = inv_freq float64
 * [D/2], in[5] = q_norm, in[6] = k_norm (float32 [D], or both NULL), in[7]
 * = arrivals int32 [>= Hq + 2 Hkv] (contiguous, zero; kernels that use it
 * leave it zero) or NULL; iarg[0] = ggml type, iarg[1] = K, iarg[2] = neox;
 * farg[0] = eps of norm, farg[1] = eps of q_norm/k_norm; out[0] = roped q
 * float32 [T, Hq, D] (fresh), out[1] = k_cache, out[2] = v_cache (written
 * in place, as ROPE_KV_WRITE). T > 0. Results: QMATMUL's product into
 * [T, N], then ROPE_KV_WRITE of its column views (qmatmul_rope_kv_compose). */
static ingot_tensor *qmatmul_rope_kv_op(const char *op, ingot_op code, const ingot_tensor *x,
                                        const ingot_tensor *w, int ggml_type, int64_t cols,
                                        const ingot_tensor *pos, const ingot_tensor *inv_freq,
                                        const ingot_qkv_rope_options *o, ingot_tensor *k_cache,
                                        ingot_tensor *v_cache, double scale) {
  if (!o) return ingot_fail(INGOT_ERR_ARG, "%s: options are NULL", op);
  const ingot_rope_kv_options *ro = &o->rope;
  const bool qkn = ro->q_norm || ro->k_norm;
  if (qkn && (!ro->q_norm || !ro->k_norm))
    return ingot_fail(INGOT_ERR_ARG, "%s: give both q_norm and k_norm, or neither", op);
  const ingot_tensor *ts[10] = {x, w, pos, inv_freq, k_cache, v_cache};
  int nts = 6;
  if (o->norm) ts[nts++] = o->norm;
  if (qkn) ts[nts++] = ro->q_norm, ts[nts++] = ro->k_norm;
  if (o->arrivals) ts[nts++] = o->arrivals;
  if (!check_tensors(op, nts, ts) || !check_qtable(op, w, ggml_type, cols)) return NULL;
  if (!check_f32(op, "x", x)) return NULL;
  if (x->ndim != 2 || x->shape[1] != cols)
    return ingot_fail(INGOT_ERR_SHAPE, "%s: x must be [T, %lld], got %d dims", op, (long long)cols,
                      x->ndim);
  const int64_t T = x->shape[0], N = w->shape[0];
  if (!check_fused(op, o->norm, o->eps, NULL, cols, (int64_t[]){T, N}) ||
      !check_caches(op, k_cache, v_cache) || !check_pos(op, pos, T))
    return NULL;
  const int64_t hkv = k_cache->shape[1], D = k_cache->shape[2];
  if (!check_rope_opts(op, D, inv_freq, ro)) return NULL;
  if (D <= 0 || N % D || N / D <= 2 * hkv)
    return ingot_fail(INGOT_ERR_SHAPE,
                      "%s: w has %lld rows, not (Hq + 2 * %lld) * %lld with Hq >= 1 "
                      "(q, k, v heads of the caches' head_dim)",
                      op, (long long)N, (long long)hkv, (long long)D);
  const int64_t hq = N / D - 2 * hkv, qshape[3] = {T, hq, D};
  const ingot_tensor *ar = o->arrivals;
  if (ar && !check_scratch(op, "arrivals", ar, INGOT_I32, N / D, "one counter a q, k or v head"))
    return NULL;
  if (code == INGOT_OP_QMATMUL_ROPE_KV_ATTENTION) { /* attention_cached's rules on the roped q */
    if (hq % hkv)
      return ingot_fail(INGOT_ERR_SHAPE, "%s: %lld query heads are not a multiple of %lld kv heads",
                        op, (long long)hq, (long long)hkv);
    if (!(scale == scale)) return ingot_fail(INGOT_ERR_ARG, "%s: scale is NaN", op);
  }
  if (T == 0) return tensor_new(3, qshape, INGOT_F32, x->device);
  ingot_op_args a = {.op = code, .nin = 8, .nout = 3};
  ingot_tensor *tmp[7] = {contig(op, x), contig(op, w), o->norm ? contig(op, o->norm) : NULL};
  rope_inputs(op, pos, inv_freq, ro, tmp + 3);
  bool ok = tmp[0] && tmp[1] && (tmp[2] || !o->norm) && tmp[3] && tmp[4] && (tmp[5] || !qkn) &&
            (tmp[6] || !qkn);
  for (int i = 0; i < 7; i++) a.in[i] = tmp[i];
  a.in[7] = (ingot_tensor *)ar; /* borrowed, as the caches */
  a.iarg[0] = ggml_type;
  a.iarg[1] = cols;
  a.iarg[2] = ro->neox;
  a.farg[0] = o->eps;
  a.farg[1] = ro->eps;
  a.farg[2] = scale;
  a.out[1] = k_cache;
  a.out[2] = v_cache;
  ingot_tensor *r = NULL;
  if (ok && (r = tensor_new(3, qshape, INGOT_F32, x->device))) {
    a.out[0] = r;
    if (dispatch(&a)) {
      ingot_release(r);
      r = NULL;
    }
  }
  for (int i = 0; i < 7; i++) ingot_release(tmp[i]);
  return r ? r : fail_in(op);
}

ingot_tensor *ingot_qmatmul_rope_kv(const ingot_tensor *x, const ingot_tensor *w, int ggml_type,
                                    int64_t cols, const ingot_tensor *pos,
                                    const ingot_tensor *inv_freq, const ingot_qkv_rope_options *o,
                                    ingot_tensor *k_cache, ingot_tensor *v_cache) {
  return qmatmul_rope_kv_op("qmatmul_rope_kv", INGOT_OP_QMATMUL_ROPE_KV, x, w, ggml_type, cols, pos,
                            inv_freq, o, k_cache, v_cache, 0);
}

/* QMATMUL_ROPE_KV_ATTENTION: QMATMUL_ROPE_KV's inputs, arguments and caches,
 * farg[2] = scale; out[0] = the attention output float32 [T, Hq, D]
 * (fresh). Results: QMATMUL_ROPE_KV into a roped q, then ATTENTION_CACHED
 * of it (qmatmul_rope_kv_attention_compose). */
ingot_tensor *ingot_qmatmul_rope_kv_attention(const ingot_tensor *x, const ingot_tensor *w,
                                              int ggml_type, int64_t cols, const ingot_tensor *pos,
                                              const ingot_tensor *inv_freq,
                                              const ingot_qkv_rope_options *o,
                                              ingot_tensor *k_cache, ingot_tensor *v_cache,
                                              double scale) {
  return qmatmul_rope_kv_op("qmatmul_rope_kv_attention", INGOT_OP_QMATMUL_ROPE_KV_ATTENTION, x, w,
                            ggml_type, cols, pos, inv_freq, o, k_cache, v_cache, scale);
}

ingot_status qmatmul_rope_kv_compose(ingot_op_args *a) {
  ingot_tensor *q = a->out[0];
  const ingot_backend *be = backend_with(q->device, "qmatmul_rope_kv", 2,
                                         (ingot_op[]){INGOT_OP_QMATMUL, INGOT_OP_ROPE_KV_WRITE});
  if (!be) return ingot_last_status();
  const int64_t T = q->shape[0], D = q->shape[2], N = a->in[1]->shape[0];
  const int64_t heads[3] = {q->shape[1], a->out[1]->shape[1], a->out[1]->shape[1]};
  ingot_tensor *qkv = tensor_new(2, (int64_t[]){T, N}, INGOT_F32, q->device);
  if (!qkv) return ingot_last_status();
  ingot_op_args m = {.op = INGOT_OP_QMATMUL, .nin = 4, .nout = 1};
  m.in[0] = a->in[0], m.in[1] = a->in[1], m.in[2] = a->in[2];
  m.iarg[0] = a->iarg[0], m.iarg[1] = a->iarg[1];
  m.farg[0] = a->farg[0];
  m.out[0] = qkv;
  ingot_status st = be->kernels[INGOT_OP_QMATMUL](&m);
  ingot_op_args r = {.op = INGOT_OP_ROPE_KV_WRITE, .nin = a->in[5] ? 7 : 5, .nout = 3};
  int64_t at = 0;
  for (int i = 0; i < 3 && !st; at += heads[i] * D, i++) {
    /* q, k, v: [T, heads, D] column views of qkv (row stride N) */
    r.in[i] =
        tensor_view(qkv, 3, (int64_t[]){T, heads[i], D}, (int64_t[]){N, D, 1}, qkv->offset + at);
    r.iarg[1 + 2 * i] = N, r.iarg[2 + 2 * i] = D;
    if (!r.in[i]) st = ingot_last_status();
  }
  if (!st) {
    for (int i = 3; i < 7; i++) r.in[i] = a->in[i];
    r.iarg[0] = a->iarg[2];
    r.farg[0] = a->farg[1];
    for (int i = 0; i < 3; i++) r.out[i] = a->out[i];
    st = be->kernels[INGOT_OP_ROPE_KV_WRITE](&r);
  }
  for (int i = 0; i < 3; i++) ingot_release(r.in[i]);
  ingot_release(qkv); /* stream-ordered on a device: reused only after this stream's work */
  return st;
}

ingot_status qmatmul_rope_kv_attention_compose(ingot_op_args *a) {
  return roped_then_attention(a, "qmatmul_rope_kv_attention", INGOT_OP_QMATMUL_ROPE_KV, a->farg[2]);
}
