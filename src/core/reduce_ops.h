/* Reduction state shared by the CPU (src/cpu/reduce.c) and CUDA
 * (src/cuda/reduce.cu) reductions: the context and accumulator layouts, their
 * initialisation, the merge of two accumulators for every op but the max
 * family (whose tie and NaN rules differ between the backends' merge orders),
 * and the finalisation that turns an accumulator into the output element.
 * Header-only (FPCONV_FN: static inline in C, __host__ __device__ under nvcc). */
#ifndef INGOT_CORE_REDUCE_OPS_H
#define INGOT_CORE_REDUCE_OPS_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "ingot/backend.h"
#include "numeric.h"

/* What a reduction folds: int64 values, doubles, complex (x + iy), |x| for
 * complex or real inputs, or 0/1 truth values. */
typedef enum rdom { DOM_I, DOM_D, DOM_Z, DOM_ABS, DOM_TRUTH } rdom;

typedef struct rctx {
  ingot_op op;
  rdom dom;
  ingot_dtype in_dt, out_dt;
  double p, corr; /* NORM's p, VAR/STD's correction */
  int64_t nred;
  bool is_max;
} rctx;

/* a..d are per-op slots (sum, max, mean/M2 pairs, ...); n counts elements. */
typedef struct racc {
  double a, b, c, d;
  uint64_t u; /* integer sum/product, wrapping as two's complement */
  int64_t i, idx, n;
  int flag; /* NaN seen (max family, norm, logsumexp) or any/all's value */
} racc;

/* Append a dim of a reduction plan, merging it into the previous one when
 * memory allows (host only). */
static inline void red_push_dim(int *n, int64_t *sh, int64_t *st, int64_t size, int64_t stride) {
  if (size == 1) return;
  if (*n > 0 && st[*n - 1] == stride * size) {
    sh[*n - 1] *= size;
    st[*n - 1] = stride;
    return;
  }
  sh[*n] = size, st[*n] = stride;
  (*n)++;
}

/* The domain a reduction op folds an input dtype in (host only). */
static inline rdom red_pick_dom(ingot_op op, ingot_dtype dt) {
  bool cx = ingot_dtype_is_complex(dt), in = !cx && !ingot_dtype_is_floating(dt);
  switch (op) {
    case INGOT_OP_NORM:
      return DOM_ABS;
    case INGOT_OP_ANY:
    case INGOT_OP_ALL:
      return DOM_TRUTH;
    case INGOT_OP_LOGSUMEXP:
      return DOM_D;
    case INGOT_OP_SUM:
    case INGOT_OP_PROD:
      return in ? DOM_I : cx ? DOM_Z : DOM_D;
    case INGOT_OP_MEAN:
    case INGOT_OP_VAR:
    case INGOT_OP_STD:
      return cx ? DOM_Z : DOM_D;
    default:
      return in ? DOM_I : DOM_D;
  }
}

/* Whether op keeps the largest value (or its index). */
static inline bool red_is_max(ingot_op op) {
  return op == INGOT_OP_AMAX || op == INGOT_OP_MAX_DIM || op == INGOT_OP_ARGMAX;
}

FPCONV_FN void red_acc_init(racc *s, const rctx *c) {
  s->a = s->b = s->c = s->d = 0;
  s->u = 0;
  s->i = s->idx = s->n = 0;
  s->flag = 0;
  switch (c->op) {
    case INGOT_OP_PROD: s->u = 1, s->a = 1; break;
    case INGOT_OP_NORM: s->a = c->p == -INFINITY ? INFINITY : 0; break;
    case INGOT_OP_LOGSUMEXP: s->a = -INFINITY; break;
    case INGOT_OP_ALL: s->flag = 1; break;
    default: break;
  }
}

FPCONV_FN bool red_better_d(bool is_max, double v, double cur) { return is_max ? v > cur : v < cur; }
FPCONV_FN bool red_better_i(bool is_max, int64_t v, int64_t cur) {
  return is_max ? v > cur : v < cur;
}

/* Chan's update of (count, mean, M2) with another such triple. */
FPCONV_FN void red_chan_merge(int64_t n, double *mean, double *m2, int64_t nb, double bmean,
                              double bm2) {
  if (nb == 0) return;
  if (n == 0) {
    *mean = bmean, *m2 = bm2;
    return;
  }
  double tot = (double)(n + nb), delta = bmean - *mean;
  *mean += delta * (double)nb / tot;
  *m2 += bm2 + delta * delta * (double)n * (double)nb / tot;
}

/* Fold o (the elements after s's) into s for every op but AMAX AMIN MAX_DIM
 * MIN_DIM ARGMAX ARGMIN (left to the caller); s->n is the caller's too. */
FPCONV_FN void red_merge(racc *s, const racc *o, const rctx *c) {
  switch (c->op) {
    case INGOT_OP_SUM:
    case INGOT_OP_MEAN:
      s->u += o->u, s->a += o->a, s->b += o->b;
      break;
    case INGOT_OP_PROD:
      s->u *= o->u;
      if (c->dom == DOM_Z) {
        double re = s->a * o->a - s->b * o->b, im = s->a * o->b + s->b * o->a;
        s->a = re, s->b = im;
      } else {
        s->a *= o->a;
      }
      break;
    case INGOT_OP_VAR:
    case INGOT_OP_STD:
      red_chan_merge(s->n, &s->a, &s->b, o->n, o->a, o->b);
      red_chan_merge(s->n, &s->c, &s->d, o->n, o->c, o->d);
      break;
    case INGOT_OP_NORM:
      if (isinf(c->p)) {
        s->flag |= o->flag;
        if (red_better_d(c->p > 0, o->a, s->a)) s->a = o->a;
      } else {
        s->a += o->a;
      }
      break;
    case INGOT_OP_LOGSUMEXP: {
      s->flag |= o->flag;
      double m = s->a > o->a ? s->a : o->a;
      if (!isinf(m)) s->b = s->b * exp(s->a - m) + o->b * exp(o->a - m);
      s->a = m;
      break;
    }
    case INGOT_OP_ANY: s->flag |= o->flag; break;
    case INGOT_OP_ALL: s->flag &= o->flag; break;
    default: break;
  }
}

/* Integer value v into element p of dtype dt (wrapping as a C cast). */
FPCONV_FN void red_store_int(ingot_dtype dt, char *p, int64_t v) {
  switch (dt) {
    case INGOT_BOOL: *(uint8_t *)p = v != 0; break;
    case INGOT_U8: *(uint8_t *)p = (uint8_t)v; break;
    case INGOT_I8: *(int8_t *)p = (int8_t)v; break;
    case INGOT_I16: *(int16_t *)p = (int16_t)v; break;
    case INGOT_I32: *(int32_t *)p = (int32_t)v; break;
    case INGOT_I64: *(int64_t *)p = v; break;
    default: store_f64(dt, p, (double)v); break;
  }
}

/* re + i im into element p (the real part only for a real dtype). */
FPCONV_FN void red_store_z(ingot_dtype dt, char *p, double re, double im) {
  if (dt == INGOT_C64)
    ((float *)p)[0] = (float)re, ((float *)p)[1] = (float)im;
  else if (dt == INGOT_C128)
    ((double *)p)[0] = re, ((double *)p)[1] = im;
  else
    store_f64(dt, p, re);
}

/* Write s's result to p (an element of c->out_dt) and, for MAX_DIM / MIN_DIM
 * (and AMAX / AMIN) with idx non-null, its index to *idx. */
FPCONV_FN void red_finish(const racc *s, const rctx *c, char *p, int64_t *idx) {
  ingot_dtype dt = c->out_dt;
  double nred = (double)c->nred;
  switch (c->op) {
    case INGOT_OP_SUM:
    case INGOT_OP_PROD:
      if (c->dom == DOM_I)
        *(int64_t *)p = (int64_t)s->u;
      else
        red_store_z(dt, p, s->a, s->b);
      break;
    case INGOT_OP_MEAN:
      red_store_z(dt, p, s->a / nred, s->b / nred);
      break;
    case INGOT_OP_AMAX:
    case INGOT_OP_AMIN:
    case INGOT_OP_MAX_DIM:
    case INGOT_OP_MIN_DIM:
      if (c->dom == DOM_I)
        red_store_int(dt, p, s->i);
      else
        store_f64(dt, p, s->n ? s->a : NAN);
      if (idx) *idx = s->idx;
      break;
    case INGOT_OP_ARGMAX:
    case INGOT_OP_ARGMIN:
      *(int64_t *)p = s->idx;
      break;
    case INGOT_OP_VAR:
    case INGOT_OP_STD: {
      double div = nred - c->corr;
      double v = (s->b + s->d) / (div > 0 ? div : 0);
      if (s->n == 0) v = NAN;
      store_f64(dt, p, c->op == INGOT_OP_STD ? sqrt(v) : v);
      break;
    }
    case INGOT_OP_NORM: {
      double pp = c->p, v = s->a;
      if (isinf(pp))
        v = s->flag ? NAN : v;
      else if (pp == 2)
        v = sqrt(v);
      else if (pp != 0 && pp != 1)
        v = pow(v, 1.0 / pp);
      store_f64(dt, p, v);
      break;
    }
    case INGOT_OP_LOGSUMEXP: {
      double v = s->flag ? NAN : isinf(s->a) ? s->a : s->a + log(s->b);
      store_f64(dt, p, v);
      break;
    }
    case INGOT_OP_ANY:
    case INGOT_OP_ALL:
      *(uint8_t *)p = (uint8_t)s->flag;
      break;
    default:
      break;
  }
}

#endif
