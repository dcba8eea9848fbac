/* Element-indexed generators shared by every backend: arange, linspace, eye
 * and the Philox draws. Element i depends only on the parameters and i, so
 * the CPU and CUDA give the same values for a seed. */
#ifndef INGOT_CORE_GENERATE_H
#define INGOT_CORE_GENERATE_H

#include <math.h>

#include "ingot/backend.h"
#include "numeric.h"
#include "philox.h"

typedef struct gen_params {
  int op; /* INGOT_OP_ARANGE ... INGOT_OP_RANDINT */
  ingot_dtype dt;
  double f0, f1;
  int64_t n, cols; /* numel; columns (eye) */
  uint64_t seed, offset;
  int64_t low, high;
} gen_params;

/* Unpack the op arguments core sets (see src/core/creation.c). */
static inline void gen_params_from_args(gen_params *c, int op, ingot_dtype dt, int64_t n,
                                        int64_t cols, const double *farg, const int64_t *iarg) {
  c->op = op;
  c->dt = dt;
  c->f0 = farg[0];
  c->f1 = farg[1];
  c->n = n;
  c->cols = cols;
  c->seed = (uint64_t)iarg[0];
  c->offset = (uint64_t)iarg[1];
  c->low = iarg[2];
  c->high = iarg[3];
}

/* Plain multiply-add without contraction into an FMA (nvcc contracts by
 * default), so both devices round the same way. */
FPCONV_FN double gen_mul_add(double a, double b, double c) {
#ifdef __CUDA_ARCH__
  return __dadd_rn(__dmul_rn(a, b), c);
#else
  return a * b + c;
#endif
}

/* Mantissa bits (with the implicit one) a uniform draw keeps, so u < 1. */
FPCONV_FN int gen_mant_bits(ingot_dtype dt) {
  switch (dt) {
  case INGOT_F16: return 11;
  case INGOT_BF16: return 8;
  case INGOT_F8E4M3FN: return 4;
  case INGOT_F8E5M2: return 3;
  case INGOT_F64: case INGOT_C128: return 32;
  default: return 24;
  }
}

FPCONV_FN void gen_value(const gen_params *c, int64_t i, char *p) {
  sval v = {1, 0, 0, 0};
  bool cplx = c->dt == INGOT_C64 || c->dt == INGOT_C128;
  switch (c->op) {
  case INGOT_OP_ARANGE:
    if ((c->dt >= INGOT_U8 && c->dt <= INGOT_I64) && c->f0 == trunc(c->f0) && c->f1 == trunc(c->f1)) {
      v.kind = 0;
      v.i = (int64_t)c->f0 + i * (int64_t)c->f1;
    } else {
      v.re = gen_mul_add((double)i, c->f1, c->f0);
    }
    break;
  case INGOT_OP_LINSPACE: {
    /* PyTorch's symmetric form: the second half counts back from the end. */
    double step = c->n > 1 ? (c->f1 - c->f0) / (double)(c->n - 1) : 0;
    v.re = c->n == 1        ? c->f0
           : i < c->n / 2 ? gen_mul_add(step, (double)i, c->f0)
                          : gen_mul_add(-step, (double)(c->n - 1 - i), c->f1);
    if ((c->dt >= INGOT_U8 && c->dt <= INGOT_I64)) v.re = trunc(v.re);
    break;
  }
  case INGOT_OP_EYE:
    v.kind = 0;
    v.i = i / c->cols == i % c->cols;
    break;
  case INGOT_OP_RAND: {
    int bits = gen_mant_bits(c->dt);
    double u[2] = {0, 0};
    for (int k = 0; k < 1 + cplx; k++) {
      uint32_t w = philox_word(c->seed, c->offset, i * (1 + cplx) + k);
      u[k] = ldexp((double)(w >> (32 - bits)), -bits);
    }
    v.kind = cplx ? 2 : 1;
    v.re = u[0];
    v.im = u[1];
    break;
  }
  case INGOT_OP_RANDN: {
    double z[2] = {0, 0};
    for (int k = 0; k < 1 + cplx; k++) {
      int64_t j = i * (1 + cplx) + k;
      philox4 b = philox4x32_10(c->seed, c->offset + (uint64_t)j / 4);
      int pair = (int)(j % 4) / 2;
      double u1 = ((double)b.v[2 * pair] + 1.0) * 0x1p-32;
      double u2 = (double)b.v[2 * pair + 1] * 0x1p-32;
      double r = sqrt(-2.0 * log(u1)), th = 6.283185307179586 * u2;
      z[k] = j % 2 == 0 ? r * cos(th) : r * sin(th);
      if (cplx) z[k] *= 0.7071067811865476; /* complex normal: unit total variance */
    }
    v.kind = cplx ? 2 : 1;
    v.re = z[0];
    v.im = z[1];
    break;
  }
  case INGOT_OP_RANDINT: {
    philox4 b = philox4x32_10(c->seed, c->offset + (uint64_t)i / 2);
    int h = (int)(i % 2);
    uint64_t x = (uint64_t)b.v[2 * h] | ((uint64_t)b.v[2 * h + 1] << 32);
    uint64_t range = (uint64_t)c->high - (uint64_t)c->low;
    v.kind = 0;
    v.i = (int64_t)((uint64_t)c->low + x % range);
    break;
  }
  }
  store_sval(c->dt, p, v);
}

#endif
