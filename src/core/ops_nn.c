/* Fronts of the fused transformer ops (include/ingot/nn.h). Contracts:
 *
 * QMATMUL:   in[0] = x, f32 [M, K] contiguous; in[1] = W, u8 [N, S]
 *            contiguous (row n = ggml blocks of K elements in its first
 *            row_bytes bytes, S >= row_bytes: padding ignored); in[2] = norm,
 *            f32 [K] contiguous, or NULL; in[3] = res, f32 [M, N] contiguous,
 *            or NULL; iarg[0] = ggml type, iarg[1] = K; farg[0] = eps;
 *            out[0] = f32 [M, N] = (norm ? rms_norm(x, norm, eps) : x) . W^T
 *            (+ res). M, N, K > 0. nin = 4 (slots 2 and 3 may be NULL).
 *            iarg[2] = 1 (swiglu): x is f32 [M, 2K] = gate | up, norm NULL,
 *            and the product takes silu(gate) * up (the SWIGLU op's values)
 *            in x's place; iarg[2] = 0 otherwise.
 *            f8 weights (ingot_f8matmul_*): nin = 5, in[4] = scale, f32 [N]
 *            contiguous; row n of W holds K f8e4m3fn bytes; iarg[0] = -1 (no
 *            ggml type); out[0][m, n] = scale[n] * (x'[m] . W[n]) (+ res).
 * QGET_ROWS: in[0] = W as above [rows, S]; in[1] = ids, int64 [T]
 *            contiguous; iarg[0] = type, iarg[1] = cols; out[0] = f32
 *            [T, cols]. Ids outside [0, rows) fail with INGOT_ERR_INDEX
 *            (message of embedding) before anything is written.
 * RMS_NORM:  in[0] = x [R, n] contiguous (f32/bf16/f16), in[1] = weight [n]
 *            contiguous (f32 or x's dtype); farg[0] = eps; out[0] = x's
 *            shape and dtype. R, n > 0.
 * SWIGLU:    in[0] = gate, in[1] = up: same shape and dtype (f32/bf16/f16),
 *            viewed as [rows, n] with unit column stride and row strides
 *            iarg[0] (gate), iarg[1] (up) in elements (views such as the
 *            halves of a fused gate|up product need no copy); iarg[2] = n;
 *            out[0] contiguous, gate's shape and dtype; numel > 0.
 * Core makes the other inputs contiguous (a copy only when they are not), so
 * kernels see flat rows. */
#include <string.h>

#include "internal.h"

static bool is_float16_32(ingot_dtype dt) {
  return dt == INGOT_F32 || dt == INGOT_BF16 || dt == INGOT_F16;
}

/* Checks of a ggml-block table W [rows, S] holding cols elements of type in
 * the first row_bytes of each row (S >= row_bytes); false + error naming op. */
bool check_qtable(const char *op, const ingot_tensor *w, int type, int64_t cols) {
  const int64_t bs = ingot_ggml_block_size(type);
  if (bs <= 0) {
    ingot_set_error(INGOT_ERR_ARG, "%s: unknown ggml type %d", op, type);
    return false;
  }
  if (cols <= 0 || cols % bs) {
    ingot_set_error(INGOT_ERR_ARG,
                    "%s: cols (%lld) must be a positive multiple of the %s block size %lld", op,
                    (long long)cols, ingot_ggml_type_name(type), (long long)bs);
    return false;
  }
  if (w->dtype != INGOT_U8) {
    ingot_set_error(INGOT_ERR_DTYPE, "%s: weight blocks must be uint8, got %s", op,
                    ingot_dtype_name(w->dtype));
    return false;
  }
  const size_t rb = ingot_ggml_row_size(type, cols);
  if (w->ndim != 2 || (size_t)w->shape[1] < rb) {
    ingot_set_error(INGOT_ERR_SHAPE,
                    "%s: weight must be [rows, >= %zu] (%lld %s elements per row), got %d dims "
                    "with %lld bytes per row",
                    op, rb, (long long)cols, ingot_ggml_type_name(type), w->ndim,
                    (long long)(w->ndim == 2 ? w->shape[1] : -1));
    return false;
  }
  return true;
}

/* Dispatch a with fresh out[0] of the given geometry; releases tmp[0..ntmp). */
static ingot_tensor *run_nn(ingot_op_args *a, int ndim, const int64_t *shape, ingot_dtype dt,
                            ingot_device dev, ingot_tensor **tmp, int ntmp) {
  ingot_tensor *r = NULL;
  bool ok = true;
  for (int i = 0; i < ntmp; i++) ok = ok && tmp[i];
  if (ok) {
    a->out[0] = tensor_new(ndim, shape, dt, dev);
    if (a->out[0]) r = dispatch_out(a);
  }
  for (int i = 0; i < ntmp; i++) ingot_release(tmp[i]);
  return r;
}

/* The optional operands of qmatmul_fused and qmatmul_swiglu (op): norm f32
 * [cols], res f32 [M, N]. */
bool check_fused(const char *op, const ingot_tensor *norm, double eps, const ingot_tensor *res,
                 int64_t cols, const int64_t *yshape) {
  if (norm && (norm->dtype != INGOT_F32 || norm->ndim != 1 || norm->shape[0] != cols)) {
    ingot_set_error(INGOT_ERR_SHAPE, "%s: norm must be float32 [%lld], got %s with %d dims", op,
                    (long long)cols, ingot_dtype_name(norm->dtype), norm->ndim);
    return false;
  }
  if (norm && !(eps >= 0)) {
    ingot_set_error(INGOT_ERR_ARG, "%s: eps must be >= 0, got %g", op, eps);
    return false;
  }
  if (res && (res->dtype != INGOT_F32 || res->ndim != 2 || res->shape[0] != yshape[0] ||
              res->shape[1] != yshape[1])) {
    ingot_set_error(INGOT_ERR_SHAPE, "%s: res must be float32 [%lld, %lld], got %s with %d dims",
                    op, (long long)yshape[0], (long long)yshape[1], ingot_dtype_name(res->dtype),
                    res->ndim);
    return false;
  }
  return true;
}

/* Checks of an f8e4m3fn table W [N, S >= cols] (u8) and its scale f32 [N]. */
static bool check_f8table(const char *op, const ingot_tensor *w, const ingot_tensor *scale,
                          int64_t cols) {
  if (cols <= 0) {
    ingot_set_error(INGOT_ERR_ARG, "%s: cols must be > 0, got %lld", op, (long long)cols);
    return false;
  }
  if (w->dtype != INGOT_U8) {
    ingot_set_error(INGOT_ERR_DTYPE, "%s: weight bytes must be uint8, got %s", op,
                    ingot_dtype_name(w->dtype));
    return false;
  }
  if (w->ndim != 2 || w->shape[1] < cols) {
    ingot_set_error(INGOT_ERR_SHAPE, "%s: weight must be [rows, >= %lld], got %d dims", op,
                    (long long)cols, w->ndim);
    return false;
  }
  if (scale->dtype != INGOT_F32 || scale->ndim != 1 || scale->shape[0] != w->shape[0]) {
    ingot_set_error(INGOT_ERR_SHAPE, "%s: scale must be float32 [%lld], got %s with %d dims", op,
                    (long long)w->shape[0], ingot_dtype_name(scale->dtype), scale->ndim);
    return false;
  }
  return true;
}

/* qmatmul, qmatmul_fused and (glu: x = gate | up, [M, 2 cols]) qmatmul_swiglu
 * (op names the caller in errors; norm, res may be NULL); scale != NULL: the
 * f8 forms (W f8e4m3fn rows, ggml_type unused). */
static ingot_tensor *qmatmul(const char *op, const ingot_tensor *x, const ingot_tensor *w,
                             int ggml_type, int64_t cols, const ingot_tensor *scale,
                             const ingot_tensor *norm, double eps, const ingot_tensor *res,
                             bool glu) {
  const ingot_tensor *ts[5] = {x, w, norm, res, scale};
  int nts = 2;
  if (norm) ts[nts++] = norm;
  if (res) ts[nts++] = res;
  if (scale) ts[nts++] = scale;
  if (!check_tensors(op, nts, ts)) return NULL;
  if (scale ? !check_f8table(op, w, scale, cols) : !check_qtable(op, w, ggml_type, cols))
    return NULL;
  if (x->dtype != INGOT_F32)
    return ingot_fail(INGOT_ERR_DTYPE, "%s: x must be float32, got %s", op,
                      ingot_dtype_name(x->dtype));
  const int64_t xcols = glu ? 2 * cols : cols;
  if (x->ndim != 2 || x->shape[1] != xcols)
    return ingot_fail(INGOT_ERR_SHAPE, "%s: x must be [M, %lld], got %d dims (last %lld)", op,
                      (long long)xcols, x->ndim, (long long)(x->ndim ? x->shape[x->ndim - 1] : 0));
  const int64_t shape[2] = {x->shape[0], w->shape[0]};
  if (!check_fused(op, norm, eps, res, cols, shape)) return NULL;
  if (shape[0] == 0 || shape[1] == 0) return tensor_new(2, shape, INGOT_F32, x->device);
  ingot_op_args a = {.op = INGOT_OP_QMATMUL, .nin = scale ? 5 : 4, .nout = 1};
  ingot_tensor *tmp[5]; /* contiguous operands, packed (run_nn releases them) */
  for (int i = 0; i < nts; i++) tmp[i] = ingot_contiguous(ts[i]);
  int at = 2;
  a.in[0] = tmp[0];
  a.in[1] = tmp[1];
  a.in[2] = norm ? tmp[at++] : NULL;
  a.in[3] = res ? tmp[at++] : NULL;
  a.in[4] = scale ? tmp[at++] : NULL;
  a.iarg[0] = scale ? -1 : ggml_type;
  a.iarg[1] = cols;
  a.iarg[2] = glu;
  a.farg[0] = eps;
  return run_nn(&a, 2, shape, INGOT_F32, x->device, tmp, nts);
}

ingot_tensor *ingot_qmatmul(const ingot_tensor *x, const ingot_tensor *w, int ggml_type,
                            int64_t cols) {
  return qmatmul("qmatmul", x, w, ggml_type, cols, NULL, NULL, 0.0, NULL, false);
}

ingot_tensor *ingot_qmatmul_fused(const ingot_tensor *x, const ingot_tensor *w, int ggml_type,
                                  int64_t cols, const ingot_tensor *norm, double eps,
                                  const ingot_tensor *res) {
  return qmatmul("qmatmul_fused", x, w, ggml_type, cols, NULL, norm, eps, res, false);
}

ingot_tensor *ingot_qmatmul_swiglu(const ingot_tensor *gu, const ingot_tensor *w, int ggml_type,
                                   int64_t cols, const ingot_tensor *res) {
  return qmatmul("qmatmul_swiglu", gu, w, ggml_type, cols, NULL, NULL, 0.0, res, true);
}

ingot_tensor *ingot_f8matmul_fused(const ingot_tensor *x, const ingot_tensor *w,
                                   const ingot_tensor *scale, int64_t cols,
                                   const ingot_tensor *norm, double eps, const ingot_tensor *res) {
  if (!scale) return ingot_fail(INGOT_ERR_ARG, "f8matmul_fused: scale is NULL");
  return qmatmul("f8matmul_fused", x, w, -1, cols, scale, norm, eps, res, false);
}

ingot_tensor *ingot_f8matmul_swiglu(const ingot_tensor *gu, const ingot_tensor *w,
                                    const ingot_tensor *scale, int64_t cols,
                                    const ingot_tensor *res) {
  if (!scale) return ingot_fail(INGOT_ERR_ARG, "f8matmul_swiglu: scale is NULL");
  return qmatmul("f8matmul_swiglu", gu, w, -1, cols, scale, NULL, 0.0, res, true);
}

ingot_tensor *ingot_qget_rows(const ingot_tensor *w, int ggml_type, int64_t cols,
                              const ingot_tensor *ids) {
  const ingot_tensor *ts[2] = {w, ids};
  if (!check_tensors("qget_rows", 2, ts)) return NULL;
  if (!check_qtable("qget_rows", w, ggml_type, cols)) return NULL;
  if (ids->ndim != 1)
    return ingot_fail(INGOT_ERR_SHAPE, "qget_rows: ids must be 1-D, got %d dims", ids->ndim);
  const int64_t shape[2] = {ids->shape[0], cols};
  ingot_tensor *tmp[2] = {as_index("qget_rows", ids), NULL};
  if (!tmp[0]) return NULL;
  if (shape[0] == 0) {
    ingot_release(tmp[0]);
    return tensor_new(2, shape, INGOT_F32, w->device);
  }
  tmp[1] = ingot_contiguous(w);
  ingot_op_args a = {.op = INGOT_OP_QGET_ROWS, .nin = 2, .nout = 1};
  a.in[0] = tmp[1];
  a.in[1] = tmp[0];
  a.iarg[0] = ggml_type;
  a.iarg[1] = cols;
  return run_nn(&a, 2, shape, INGOT_F32, w->device, tmp, 2);
}

ingot_tensor *ingot_rms_norm(const ingot_tensor *x, const ingot_tensor *weight, double eps) {
  const ingot_tensor *ts[2] = {x, weight};
  if (!check_tensors("rms_norm", 2, ts)) return NULL;
  if (!is_float16_32(x->dtype))
    return ingot_fail(INGOT_ERR_DTYPE, "rms_norm: x must be float32, bfloat16 or float16, got %s",
                      ingot_dtype_name(x->dtype));
  if (weight->dtype != INGOT_F32 && weight->dtype != x->dtype)
    return ingot_fail(INGOT_ERR_DTYPE, "rms_norm: weight must be float32 or %s, got %s",
                      ingot_dtype_name(x->dtype), ingot_dtype_name(weight->dtype));
  if (x->ndim == 0) return ingot_fail(INGOT_ERR_SHAPE, "rms_norm: x must have at least one dim");
  const int64_t n = x->shape[x->ndim - 1];
  if (weight->ndim != 1 || weight->shape[0] != n)
    return ingot_fail(INGOT_ERR_SHAPE, "rms_norm: weight must be [%lld], got %d dims (first %lld)",
                      (long long)n, weight->ndim, (long long)(weight->ndim ? weight->shape[0] : 0));
  if (!(eps >= 0)) return ingot_fail(INGOT_ERR_ARG, "rms_norm: eps must be >= 0, got %g", eps);
  if (ingot_numel(x) == 0) return tensor_new(x->ndim, x->shape, x->dtype, x->device);
  ingot_tensor *tmp[2] = {ingot_contiguous(x), ingot_contiguous(weight)};
  ingot_op_args a = {.op = INGOT_OP_RMS_NORM, .nin = 2, .nout = 1};
  a.in[0] = tmp[0];
  a.in[1] = tmp[1];
  a.farg[0] = eps;
  return run_nn(&a, x->ndim, x->shape, x->dtype, x->device, tmp, 2);
}

/* The row stride of t seen as [rows, n] (n its last dim) with unit column
 * stride, or -1 when its layout is not such a view. */
static int64_t row_stride(const ingot_tensor *t) {
  const int nd = t->ndim;
  const int64_t n = nd ? t->shape[nd - 1] : 1;
  if (nd && n != 1 && t->strides[nd - 1] != 1) return -1;
  int64_t rs = n, expect = -1;
  for (int d = nd - 2; d >= 0; d--) {
    if (t->shape[d] == 1) continue;
    if (expect < 0)
      rs = t->strides[d];
    else if (t->strides[d] != expect)
      return -1;
    expect = t->strides[d] * t->shape[d];
  }
  return rs;
}

ingot_tensor *ingot_swiglu(const ingot_tensor *gate, const ingot_tensor *up) {
  const ingot_tensor *ts[2] = {gate, up};
  if (!check_tensors("swiglu", 2, ts)) return NULL;
  if (!is_float16_32(gate->dtype) || up->dtype != gate->dtype)
    return ingot_fail(INGOT_ERR_DTYPE,
                      "swiglu: gate and up must share one dtype of float32, bfloat16 or float16, "
                      "got %s and %s",
                      ingot_dtype_name(gate->dtype), ingot_dtype_name(up->dtype));
  if (gate->ndim != up->ndim ||
      memcmp(gate->shape, up->shape, sizeof(int64_t) * (size_t)gate->ndim) != 0)
    return ingot_fail(INGOT_ERR_SHAPE, "swiglu: gate and up must have the same shape");
  if (ingot_numel(gate) == 0) return tensor_new(gate->ndim, gate->shape, gate->dtype, gate->device);
  ingot_op_args a = {.op = INGOT_OP_SWIGLU, .nin = 2, .nout = 1};
  ingot_tensor *tmp[2];
  for (int i = 0; i < 2; i++) {
    int64_t rs = row_stride(ts[i]);
    tmp[i] = rs >= 0 ? ingot_retain((ingot_tensor *)ts[i]) : ingot_contiguous(ts[i]);
    a.iarg[i] = rs >= 0 ? rs : gate->ndim ? gate->shape[gate->ndim - 1] : 1;
    a.in[i] = tmp[i];
  }
  a.iarg[2] = gate->ndim ? gate->shape[gate->ndim - 1] : 1;
  return run_nn(&a, gate->ndim, gate->shape, gate->dtype, gate->device, tmp, 2);
}
