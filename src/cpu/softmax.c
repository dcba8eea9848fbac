/* CPU softmax and log_softmax along one dim: per line, the max, then the
 * sum of exp(x - max) (in double), then the outputs. f16/bf16/f8 run on
 * float32 copies. A line of all -inf gives nan, as in PyTorch. */
#include <math.h>

#include "cpu.h"

void cpu_register_softmax(ingot_backend *be);

#define SOFTMAX_LINE(NAME, T, EXP, LOG)                                               \
  static void NAME(const T *x, int64_t xs, T *y, int64_t ys, int64_t n, bool logsm) { \
    T m = -INFINITY;                                                                  \
    bool nan = false;                                                                 \
    for (int64_t k = 0; k < n; k++) {                                                 \
      T v = x[k * xs];                                                                \
      nan |= v != v;                                                                  \
      m = v > m ? v : m;                                                              \
    }                                                                                 \
    if (nan) m = NAN;                                                                 \
    double s = 0;                                                                     \
    if (logsm) {                                                                      \
      for (int64_t k = 0; k < n; k++) s += EXP(x[k * xs] - m);                        \
      T ls = (T)LOG(s); /* (x - m) - ls: folding m into ls would lose digits */       \
      for (int64_t k = 0; k < n; k++) y[k * ys] = (x[k * xs] - m) - ls;               \
    } else {                                                                          \
      for (int64_t k = 0; k < n; k++) {                                               \
        T e = EXP(x[k * xs] - m);                                                     \
        y[k * ys] = e;                                                                \
        s += e;                                                                       \
      }                                                                               \
      T r = (T)(1.0 / s);                                                             \
      for (int64_t k = 0; k < n; k++) y[k * ys] *= r;                                 \
    }                                                                                 \
  }
SOFTMAX_LINE(line_f32, float, expf, log)
SOFTMAX_LINE(line_f64, double, exp, log)
#undef SOFTMAX_LINE

static ingot_status k_softmax_f32(ingot_op_args *a) {
  const ingot_tensor *in = a->in[0];
  ingot_tensor *out = a->out[0];
  int dim = (int)a->iarg[0];
  bool logsm = a->op == INGOT_OP_LOG_SOFTMAX;
  bool f64 = in->dtype == INGOT_F64;
  int64_t sh[INGOT_MAX_DIMS], ist[INGOT_MAX_DIMS], ost[INGOT_MAX_DIMS];
  int n = 0;
  int64_t count = 1, len = 1, xs = 0, ys = 0;
  for (int d = 0; d < in->ndim; d++) {
    if (d == dim) {
      len = in->shape[d], xs = in->strides[d], ys = out->strides[d];
      continue;
    }
    sh[n] = in->shape[d], ist[n] = in->strides[d], ost[n] = out->strides[d];
    count *= sh[n++];
  }
  if (count == 0 || len == 0) return INGOT_OK;
  int64_t es = (int64_t)ingot_dtype_size(in->dtype);
  char *ib = tensor_ptr(in), *ob = tensor_ptr(out);
#pragma omp parallel for schedule(static) if (cpu_threads() > 1 && count * len >= 2 * CPU_GRAIN)
  for (int64_t i = 0; i < count; i++) {
    int64_t io = 0, oo = 0, r = i;
    for (int d = n - 1; d >= 0; d--) {
      int64_t k = r % sh[d];
      r /= sh[d];
      io += k * ist[d], oo += k * ost[d];
    }
    if (f64)
      line_f64((const double *)(ib + io * es), xs, (double *)(ob + oo * es), ys, len, logsm);
    else
      line_f32((const float *)(ib + io * es), xs, (float *)(ob + oo * es), ys, len, logsm);
  }
  return INGOT_OK;
}

static ingot_status k_softmax(ingot_op_args *a) { return cpu_via_f32(a, k_softmax_f32); }

void cpu_register_softmax(ingot_backend *be) {
  be->kernels[INGOT_OP_SOFTMAX] = k_softmax;
  be->kernels[INGOT_OP_LOG_SOFTMAX] = k_softmax;
}
