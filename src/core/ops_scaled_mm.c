/* FP8 scaled matrix product (torch._scaled_mm) and the allow_tf32 switch.
 *
 * Kernel contract for INGOT_OP_SCALED_MM:
 *   in[0]  a: [M, K] float8_e4m3fn or float8_e5m2, row-major: stride[1] == 1
 *          (when K > 0), stride[0] >= K (any when M <= 1)
 *   in[1]  b: [K, N] float8, column-major: stride[0] == 1 (when K > 0),
 *          stride[1] >= K (any when N <= 1); not e5m2 when a is e5m2
 *   in[2]  scale_a: float32, contiguous: 1 element, or M when rowwise
 *   in[3]  scale_b: float32, contiguous: 1 element, or N when rowwise
 *   in[4]  bias (only when nin == 5): [N] contiguous, dtype of out[0]
 *   iarg[0] 1 = rowwise scales, 0 = tensorwise
 *   out[0] [M, N] bfloat16, float16 or float32, fresh and contiguous
 *   out[i][j] = round(f32(sum_k a[i][k] * b[k][j]) * scale_a[i] * scale_b[j]
 *               + bias[j]), the sum accumulated in float32 (K == 0: 0).
 *   K and N are multiples of 16. */
#include <stdatomic.h>

#include "internal.h"

static atomic_bool allow_tf32 = false;

void ingot_set_allow_tf32(bool allow) { atomic_store(&allow_tf32, allow); }
bool ingot_get_allow_tf32(void) { return atomic_load(&allow_tf32); }

static bool is_f8(ingot_dtype dt) { return dt == INGOT_F8E4M3FN || dt == INGOT_F8E5M2; }

/* Which scaling the scales ask for: 0 tensorwise, 1 rowwise, -1 error set. */
static int scaling_type(const ingot_tensor *sa, const ingot_tensor *sb, int64_t m, int64_t n) {
  if (sa->dtype != INGOT_F32 || sb->dtype != INGOT_F32) {
    ingot_set_error(INGOT_ERR_DTYPE,
                    "scaled_mm: Both scale_a and scale_b must be float (fp32) tensors.");
    return -1;
  }
  if (ingot_numel(sa) == 1 && ingot_numel(sb) == 1) return 0;
  if (sa->ndim != 2 || sb->ndim != 2) {
    ingot_set_error(INGOT_ERR_SHAPE,
                    "scaled_mm: For non-TensorWise scaling, scale tensors must be "
                    "2-dimensional, but got scale_a.dim()=%d and scale_b.dim()=%d",
                    sa->ndim, sb->ndim);
    return -1;
  }
  if (sa->shape[0] == m && sa->shape[1] == 1 && sb->shape[0] == 1 && sb->shape[1] == n) {
    if (!ingot_is_contiguous(sa) || !ingot_is_contiguous(sb)) {
      ingot_set_error(INGOT_ERR_ARG, "scaled_mm: Both scale_a and scale_b must be contiguous "
                                     "for RowWise scaling.");
      return -1;
    }
    return 1;
  }
  ingot_set_error(INGOT_ERR_SHAPE,
                  "scaled_mm: Invalid scaling configuration. For TensorWise scaling, both "
                  "scales should be scalar. For RowWise scaling, scale_a should be (%lld, 1) and "
                  "scale_b should be (1, %lld). Got scale_a.size()=(%lld, %lld) and "
                  "scale_b.size()=(%lld, %lld)",
                  (long long)m, (long long)n, (long long)sa->shape[0], (long long)sa->shape[1],
                  (long long)sb->shape[0], (long long)sb->shape[1]);
  return -1;
}

/* a is row-major and b column-major (strides of size-1 dims do not matter). */
static bool layout_ok(const ingot_tensor *a, const ingot_tensor *b) {
  int64_t m = a->shape[0], k = a->shape[1], n = b->shape[1];
  if (k == 0) return true;
  bool ra = (k <= 1 || a->strides[1] == 1) && (m <= 1 || a->strides[0] >= k);
  bool cb = (k <= 1 || b->strides[0] == 1) && (n <= 1 || b->strides[1] >= k);
  return ra && cb;
}

ingot_tensor *ingot_scaled_mm(const ingot_tensor *a, const ingot_tensor *b,
                              const ingot_tensor *scale_a, const ingot_tensor *scale_b,
                              const ingot_tensor *bias, ingot_dtype out_dtype) {
  const ingot_tensor *ts[5] = {a, b, scale_a, scale_b, bias};
  if (!check_tensors("scaled_mm", bias ? 5 : 4, ts)) return NULL;
  if (a->ndim != 2) return ingot_fail(INGOT_ERR_SHAPE, "scaled_mm: mat1 must be a matrix");
  if (b->ndim != 2) return ingot_fail(INGOT_ERR_SHAPE, "scaled_mm: mat2 must be a matrix");
  int64_t m = a->shape[0], k = a->shape[1], n = b->shape[1];
  if (b->shape[0] != k)
    return ingot_fail(INGOT_ERR_SHAPE,
                      "scaled_mm: mat1 and mat2 shapes cannot be multiplied (%lldx%lld and "
                      "%lldx%lld)",
                      (long long)m, (long long)k, (long long)b->shape[0], (long long)n);
  int rowwise = scaling_type(scale_a, scale_b, m, n);
  if (rowwise < 0) return NULL;
  if (bias && ingot_numel(bias) != n)
    return ingot_fail(INGOT_ERR_SHAPE, "scaled_mm: Bias must be size %lld but got %lld",
                      (long long)n, (long long)ingot_numel(bias));
  if (k % 16 != 0)
    return ingot_fail(INGOT_ERR_SHAPE,
                      "scaled_mm: Expected trailing dimension of mat1 to be divisible by 16 but "
                      "got mat1 shape: (%lldx%lld).",
                      (long long)m, (long long)k);
  if (n % 16 != 0)
    return ingot_fail(INGOT_ERR_SHAPE, "scaled_mm: mat2 shape (%lldx%lld) must be divisible by 16",
                      (long long)k, (long long)n);
  if (out_dtype != INGOT_BF16 && out_dtype != INGOT_F16 && out_dtype != INGOT_F32)
    return ingot_fail(INGOT_ERR_DTYPE,
                      "scaled_mm: out_dtype must be bfloat16, float16 or float32, but got %s",
                      out_dtype >= 0 && out_dtype < INGOT_DTYPE_COUNT
                          ? ingot_dtype_name(out_dtype)
                          : "an invalid dtype");
  if (!is_f8(a->dtype))
    return ingot_fail(INGOT_ERR_DTYPE, "scaled_mm: Expected mat1 to be Float8 matrix got %s",
                      ingot_dtype_name(a->dtype));
  if (!is_f8(b->dtype))
    return ingot_fail(INGOT_ERR_DTYPE, "scaled_mm: Expected mat2 to be Float8 matrix got %s",
                      ingot_dtype_name(b->dtype));
  if (a->dtype == INGOT_F8E5M2 && b->dtype == INGOT_F8E5M2)
    return ingot_fail(INGOT_ERR_DTYPE,
                      "scaled_mm: Multiplication of two Float8_e5m2 matrices is not supported");
  if (bias && bias->dtype != out_dtype)
    return ingot_fail(INGOT_ERR_DTYPE, "scaled_mm: Bias must be %s to compute %s output, but got %s",
                      ingot_dtype_name(out_dtype), ingot_dtype_name(out_dtype),
                      ingot_dtype_name(bias->dtype));
  if (!layout_ok(a, b))
    return ingot_fail(INGOT_ERR_ARG, "scaled_mm: Only multiplication of row-major and "
                                     "column-major matrices is supported by cuBLASLt");

  /* Kernels read scales and bias as plain contiguous vectors. */
  ingot_tensor *sa = ingot_contiguous(scale_a), *sb = ingot_contiguous(scale_b);
  ingot_tensor *bv = NULL;
  if (bias) {
    ingot_tensor *flat = ingot_reshape(bias, 1, &n);
    bv = flat ? ingot_contiguous(flat) : NULL;
    ingot_release(flat);
  }
  ingot_tensor *r = NULL;
  if (sa && sb && (!bias || bv)) {
    int64_t shape[2] = {m, n};
    ingot_tensor *out = tensor_new(2, shape, out_dtype, a->device);
    if (out) {
      ingot_op_args args = {.op = INGOT_OP_SCALED_MM, .nin = bias ? 5 : 4, .nout = 1};
      args.in[0] = (ingot_tensor *)a;
      args.in[1] = (ingot_tensor *)b;
      args.in[2] = sa;
      args.in[3] = sb;
      args.in[4] = bv;
      args.iarg[0] = rowwise;
      args.out[0] = out;
      r = dispatch_out(&args);
    }
  }
  ingot_release(sa);
  ingot_release(sb);
  ingot_release(bv);
  return r;
}
