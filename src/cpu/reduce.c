/* CPU reductions and scans. A reduction views its input as kept dims
 * (one per output element) times reduced dims, both coalesced; for each
 * output it walks the reduced elements row by row, converts each row in
 * blocks into int64, double or complex-double buffers, and folds the blocks
 * into a small accumulator. Accumulators merge, so a few long reductions are
 * split across threads and merged in order (argmax keeps the first index). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../core/reduce_ops.h"
#include "cpu.h"

void cpu_register_softmax(ingot_backend *be); /* src/cpu/softmax.c */

#define RB 256 /* elements per converted block */

/* A converted block; what it holds is the reduction's rdom (src/core/reduce_ops.h). */
typedef struct rbuf {
  double x[RB], y[RB];
  int64_t i[RB];
} rbuf;

/* ---- block loaders: n elements from p, st bytes apart ---- */
#define LOAD_LOOP(dst, T, expr)         \
  do {                                  \
    if (st == (int64_t)sizeof(T)) {     \
      const T *q = (const T *)p;        \
      for (int64_t k = 0; k < n; k++) { \
        T v = q[k];                     \
        dst[k] = (expr);                \
      }                                 \
    } else {                            \
      for (int64_t k = 0; k < n; k++) { \
        T v = *(const T *)(p + k * st); \
        dst[k] = (expr);                \
      }                                 \
    }                                   \
  } while (0)

static void load_i(ingot_dtype dt, const char *p, int64_t st, int64_t n, int64_t *d) {
  switch (dt) {
    case INGOT_BOOL:
      LOAD_LOOP(d, uint8_t, v != 0);
      break;
    case INGOT_U8:
      LOAD_LOOP(d, uint8_t, v);
      break;
    case INGOT_I8:
      LOAD_LOOP(d, int8_t, v);
      break;
    case INGOT_I16:
      LOAD_LOOP(d, int16_t, v);
      break;
    case INGOT_I32:
      LOAD_LOOP(d, int32_t, v);
      break;
    case INGOT_I64:
      LOAD_LOOP(d, int64_t, v);
      break;
    default:
      for (int64_t k = 0; k < n; k++) d[k] = f64_to_i64(load_f64(dt, p + k * st));
  }
}

static void load_d(ingot_dtype dt, const char *p, int64_t st, int64_t n, double *d) {
  switch (dt) {
    case INGOT_F32:
      LOAD_LOOP(d, float, v);
      break;
    case INGOT_F64:
      LOAD_LOOP(d, double, v);
      break;
    case INGOT_F16:
      LOAD_LOOP(d, uint16_t, ingot_f16_to_f32(v));
      break;
    case INGOT_BF16:
      LOAD_LOOP(d, uint16_t, ingot_bf16_to_f32(v));
      break;
    case INGOT_BOOL:
      LOAD_LOOP(d, uint8_t, v != 0);
      break;
    case INGOT_U8:
      LOAD_LOOP(d, uint8_t, v);
      break;
    case INGOT_I8:
      LOAD_LOOP(d, int8_t, v);
      break;
    case INGOT_I16:
      LOAD_LOOP(d, int16_t, v);
      break;
    case INGOT_I32:
      LOAD_LOOP(d, int32_t, v);
      break;
    case INGOT_I64:
      LOAD_LOOP(d, int64_t, (double)v);
      break;
    default:
      for (int64_t k = 0; k < n; k++) d[k] = load_f64(dt, p + k * st);
  }
}

static void load_z(ingot_dtype dt, const char *p, int64_t st, int64_t n, double *x, double *y) {
  if (dt == INGOT_C64) {
    for (int64_t k = 0; k < n; k++) {
      const float *q = (const float *)(p + k * st);
      x[k] = q[0], y[k] = q[1];
    }
  } else if (dt == INGOT_C128) {
    for (int64_t k = 0; k < n; k++) {
      const double *q = (const double *)(p + k * st);
      x[k] = q[0], y[k] = q[1];
    }
  } else {
    load_d(dt, p, st, n, x);
    for (int64_t k = 0; k < n; k++) y[k] = 0;
  }
}

/* Converts into b's slots [o, o + n). */
static void load_block(rdom dom, ingot_dtype dt, const char *p, int64_t st, int64_t n, rbuf *b,
                       int64_t o) {
  double *x = b->x + o, *y = b->y + o;
  switch (dom) {
    case DOM_I:
      load_i(dt, p, st, n, b->i + o);
      break;
    case DOM_D:
      load_d(dt, p, st, n, x);
      break;
    case DOM_Z:
      load_z(dt, p, st, n, x, y);
      break;
    case DOM_ABS:
      if (ingot_dtype_is_complex(dt)) {
        load_z(dt, p, st, n, x, y);
        for (int64_t k = 0; k < n; k++) x[k] = hypot(x[k], y[k]);
      } else {
        load_d(dt, p, st, n, x);
        for (int64_t k = 0; k < n; k++) x[k] = fabs(x[k]);
      }
      break;
    case DOM_TRUTH:
      if (ingot_dtype_is_complex(dt)) {
        load_z(dt, p, st, n, x, y);
        for (int64_t k = 0; k < n; k++) x[k] = x[k] != 0 || y[k] != 0;
      } else {
        load_d(dt, p, st, n, x);
        for (int64_t k = 0; k < n; k++) x[k] = x[k] != 0; /* NaN is true */
      }
      break;
  }
}

/* ---- accumulators (rctx, racc: src/core/reduce_ops.h) ---- */
static double sum_d(const double *x, int64_t n) {
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int64_t k = 0;
  for (; k + 4 <= n; k += 4) s0 += x[k], s1 += x[k + 1], s2 += x[k + 2], s3 += x[k + 3];
  for (; k < n; k++) s0 += x[k];
  return (s0 + s1) + (s2 + s3);
}

static void block_moments(const double *x, int64_t n, double *mean, double *m2) {
  double mu = sum_d(x, n) / (double)n, s = 0;
  for (int64_t k = 0; k < n; k++) s += (x[k] - mu) * (x[k] - mu);
  *mean = mu, *m2 = s;
}

static void acc_block(racc *s, const rctx *c, const rbuf *b, int64_t n, int64_t idx0) {
  const double *x = b->x, *y = b->y;
  switch (c->op) {
    case INGOT_OP_SUM:
    case INGOT_OP_MEAN:
      if (c->dom == DOM_I) {
        uint64_t u = 0;
        for (int64_t k = 0; k < n; k++) u += (uint64_t)b->i[k];
        s->u += u;
      } else {
        s->a += sum_d(x, n);
        if (c->dom == DOM_Z) s->b += sum_d(y, n);
      }
      break;
    case INGOT_OP_PROD:
      if (c->dom == DOM_I) {
        for (int64_t k = 0; k < n; k++) s->u *= (uint64_t)b->i[k];
      } else if (c->dom == DOM_Z) {
        for (int64_t k = 0; k < n; k++) {
          double re = s->a * x[k] - s->b * y[k], im = s->a * y[k] + s->b * x[k];
          s->a = re, s->b = im;
        }
      } else {
        for (int64_t k = 0; k < n; k++) s->a *= x[k];
      }
      break;
    case INGOT_OP_AMAX:
    case INGOT_OP_AMIN:
    case INGOT_OP_MAX_DIM:
    case INGOT_OP_MIN_DIM:
    case INGOT_OP_ARGMAX:
    case INGOT_OP_ARGMIN: {
      int64_t k = 0;
      if (s->flag) break; /* the first NaN already won */
      if (c->dom == DOM_I) {
        if (s->n == 0) s->i = b->i[0], s->idx = idx0, k = 1;
        for (; k < n; k++)
          if (red_better_i(c->is_max, b->i[k], s->i)) s->i = b->i[k], s->idx = idx0 + k;
      } else {
        if (s->n == 0) s->a = x[0], s->idx = idx0, k = 1, s->flag = isnan(x[0]);
        for (; k < n && !s->flag; k++) {
          if (isnan(x[k]))
            s->a = x[k], s->idx = idx0 + k, s->flag = 1;
          else if (red_better_d(c->is_max, x[k], s->a))
            s->a = x[k], s->idx = idx0 + k;
        }
      }
      break;
    }
    case INGOT_OP_VAR:
    case INGOT_OP_STD: {
      double mu, m2;
      block_moments(x, n, &mu, &m2);
      red_chan_merge(s->n, &s->a, &s->b, n, mu, m2);
      if (c->dom == DOM_Z) {
        block_moments(y, n, &mu, &m2);
        red_chan_merge(s->n, &s->c, &s->d, n, mu, m2);
      }
      break;
    }
    case INGOT_OP_NORM: {
      double p = c->p;
      if (p == INFINITY || p == -INFINITY) {
        for (int64_t k = 0; k < n; k++) {
          if (isnan(x[k]))
            s->flag = 1;
          else if (red_better_d(p > 0, x[k], s->a))
            s->a = x[k];
        }
      } else if (p == 0) {
        for (int64_t k = 0; k < n; k++) s->a += x[k] != 0;
      } else if (p == 1) {
        s->a += sum_d(x, n);
      } else if (p == 2) {
        double t = 0;
        for (int64_t k = 0; k < n; k++) t += x[k] * x[k];
        s->a += t;
      } else {
        for (int64_t k = 0; k < n; k++) s->a += pow(x[k], p);
      }
      break;
    }
    case INGOT_OP_LOGSUMEXP: {
      /* a = running max (the shift), b = sum of exp(x - a). */
      double bm = -INFINITY;
      for (int64_t k = 0; k < n; k++) {
        if (isnan(x[k]))
          s->flag = 1;
        else if (x[k] > bm)
          bm = x[k];
      }
      if (s->flag) break;
      if (bm > s->a) s->b *= exp(s->a - bm), s->a = bm;
      if (isinf(s->a)) break; /* +inf wins outright; all -inf so far adds nothing */
      double t = 0;
      for (int64_t k = 0; k < n; k++) t += exp(x[k] - s->a);
      s->b += t;
      break;
    }
    case INGOT_OP_ANY:
      for (int64_t k = 0; k < n && !s->flag; k++) s->flag = x[k] != 0;
      break;
    case INGOT_OP_ALL:
      for (int64_t k = 0; k < n && s->flag; k++) s->flag = x[k] != 0;
      break;
    default:
      break;
  }
  s->n += n;
}

/* Fold o (the elements after s's) into s. */
static void acc_merge(racc *s, const racc *o, const rctx *c) {
  if (o->n == 0) return;
  switch (c->op) {
    case INGOT_OP_AMAX:
    case INGOT_OP_AMIN:
    case INGOT_OP_MAX_DIM:
    case INGOT_OP_MIN_DIM:
    case INGOT_OP_ARGMAX:
    case INGOT_OP_ARGMIN:
      if (s->n == 0 ||
          (!s->flag && (o->flag || (c->dom == DOM_I ? red_better_i(c->is_max, o->i, s->i)
                                                    : red_better_d(c->is_max, o->a, s->a)))))
        s->a = o->a, s->i = o->i, s->idx = o->idx, s->flag = o->flag;
      break;
    default:
      red_merge(s, o, c);
      break;
  }
  s->n += o->n;
}

/* ---- geometry ---- */
typedef struct rplan {
  int nk, nr;
  int64_t ksh[INGOT_MAX_DIMS], kst[INGOT_MAX_DIMS]; /* kept dims, byte strides */
  int64_t rsh[INGOT_MAX_DIMS], rst[INGOT_MAX_DIMS]; /* reduced dims */
  int64_t nout, nred;
} rplan;

static void plan_build(rplan *pl, const ingot_tensor *t, uint32_t mask) {
  int64_t es = (int64_t)ingot_dtype_size(t->dtype);
  pl->nk = pl->nr = 0;
  pl->nout = pl->nred = 1;
  for (int d = 0; d < t->ndim; d++) {
    int64_t size = t->shape[d], stride = t->strides[d] * es;
    if (mask & (1u << d)) {
      red_push_dim(&pl->nr, pl->rsh, pl->rst, size, stride);
      pl->nred *= size;
    } else {
      red_push_dim(&pl->nk, pl->ksh, pl->kst, size, stride);
      pl->nout *= size;
    }
  }
}

/* Fold the reduced elements [lo, hi) (row-major over the reduced dims) at
 * base p0 into s. */
static void run_range(const rplan *pl, const rctx *c, racc *s, const char *p0, int64_t lo,
                      int64_t hi, rbuf *b) {
  if (lo >= hi) return;
  int nr = pl->nr;
  if (nr == 0) {
    load_block(c->dom, c->in_dt, p0, 0, 1, b, 0);
    acc_block(s, c, b, 1, 0);
    return;
  }
  int64_t idx[INGOT_MAX_DIMS], rem = lo;
  for (int d = nr - 1; d >= 0; d--) idx[d] = rem % pl->rsh[d], rem /= pl->rsh[d];
  int64_t pos = lo, st = pl->rst[nr - 1];
  while (pos < hi) {
    const char *p = p0;
    for (int d = 0; d < nr - 1; d++) p += idx[d] * pl->rst[d];
    int64_t len = pl->rsh[nr - 1] - idx[nr - 1];
    if (len > hi - pos) len = hi - pos;
    p += idx[nr - 1] * st;
    for (int64_t off = 0; off < len; off += RB) {
      int64_t m = len - off < RB ? len - off : RB;
      load_block(c->dom, c->in_dt, p + off * st, st, m, b, 0);
      acc_block(s, c, b, m, pos + off);
    }
    pos += len;
    idx[nr - 1] = 0;
    for (int d = nr - 2; d >= 0; d--) {
      if (++idx[d] < pl->rsh[d]) break;
      idx[d] = 0;
    }
  }
}

/* Column reductions (the innermost kept dim is denser in memory than the
 * reduced ones, e.g. sum over dim 0 of a row-major matrix): GRP neighbouring
 * outputs walk their reductions together, so each read uses a whole cache
 * line; the values are transposed into per-output blocks, keeping each
 * output's element order (and so argmax's first index). */
#define GRP 16

static void run_group(const rplan *pl, const rctx *c, racc *acc, int64_t g, const char *p0,
                      int64_t gst, rbuf *stage, rbuf *b) {
  int nr = pl->nr;
  int64_t idx[INGOT_MAX_DIMS] = {0}, pos = 0, st = pl->rst[nr - 1], per = RB / GRP;
  int64_t len = pl->rsh[nr - 1];
  while (pos < pl->nred) {
    const char *p = p0;
    for (int d = 0; d < nr - 1; d++) p += idx[d] * pl->rst[d];
    for (int64_t off = 0; off < len; off += per) {
      int64_t m = len - off < per ? len - off : per;
      for (int64_t k = 0; k < m; k++)
        load_block(c->dom, c->in_dt, p + (off + k) * st, gst, g, stage, k * g);
      for (int64_t j = 0; j < g; j++) {
        if (c->dom == DOM_I) {
          for (int64_t k = 0; k < m; k++) b->i[k] = stage->i[k * g + j];
        } else {
          for (int64_t k = 0; k < m; k++) b->x[k] = stage->x[k * g + j];
          if (c->dom == DOM_Z)
            for (int64_t k = 0; k < m; k++) b->y[k] = stage->y[k * g + j];
        }
        acc_block(&acc[j], c, b, m, pos + off);
      }
    }
    pos += len;
    for (int d = nr - 2; d >= 0; d--) {
      if (++idx[d] < pl->rsh[d]) break;
      idx[d] = 0;
    }
  }
}

static bool use_groups(const rplan *pl) {
  return pl->nr > 0 && pl->nk > 0 && pl->nred > 0 && pl->ksh[pl->nk - 1] >= GRP / 2 &&
         llabs(pl->kst[pl->nk - 1]) < llabs(pl->rst[pl->nr - 1]);
}

static const char *out_base(const rplan *pl, const char *base, int64_t o) {
  for (int d = pl->nk - 1; d >= 0; d--) base += (o % pl->ksh[d]) * pl->kst[d], o /= pl->ksh[d];
  return base;
}

#define MAX_SPLIT 64

static ingot_status k_reduce(ingot_op_args *a) {
  const ingot_tensor *in = a->in[0];
  rctx c = {.op = a->op,
            .in_dt = in->dtype,
            .out_dt = a->out[0]->dtype,
            .p = a->farg[0],
            .corr = a->farg[0]};
  c.dom = red_pick_dom(c.op, in->dtype);
  c.is_max = red_is_max(c.op);
  rplan pl;
  plan_build(&pl, in, a->dims);
  c.nred = pl.nred;
  if (pl.nout == 0) return INGOT_OK;
  const char *base = tensor_ptr(in);
  char *out0 = tensor_ptr(a->out[0]);
  char *out1 = a->nout > 1 && a->out[1] ? tensor_ptr(a->out[1]) : NULL;
  int64_t oes = (int64_t)ingot_dtype_size(c.out_dt);
  int threads = cpu_threads();
  int64_t total = pl.nout * (pl.nred > 0 ? pl.nred : 1);

  if (threads > 1 && pl.nout < threads && pl.nred >= 2 * CPU_GRAIN) {
    /* Few long reductions: split each over threads, merge pieces in order. */
    int64_t pieces = pl.nred / (CPU_GRAIN / 4);
    if (pieces > 4 * threads) pieces = 4 * threads;
    if (pieces > MAX_SPLIT) pieces = MAX_SPLIT;
    int64_t chunk = (pl.nred + pieces - 1) / pieces;
    for (int64_t o = 0; o < pl.nout; o++) {
      racc part[MAX_SPLIT];
      const char *p0 = out_base(&pl, base, o);
#pragma omp parallel for schedule(static)
      for (int64_t q = 0; q < pieces; q++) {
        rbuf b;
        int64_t lo = q * chunk, hi = lo + chunk < pl.nred ? lo + chunk : pl.nred;
        red_acc_init(&part[q], &c);
        run_range(&pl, &c, &part[q], p0, lo, hi, &b);
      }
      for (int64_t q = 1; q < pieces; q++) acc_merge(&part[0], &part[q], &c);
      red_finish(&part[0], &c, out0 + o * oes, out1 ? (int64_t *)out1 + o : NULL);
    }
    return INGOT_OK;
  }
  if (use_groups(&pl)) {
    int64_t inner = pl.ksh[pl.nk - 1], per_row = (inner + GRP - 1) / GRP;
    int64_t tasks = pl.nout / inner * per_row;
#pragma omp parallel for schedule(static) if (threads > 1 && total >= 2 * CPU_GRAIN)
    for (int64_t t = 0; t < tasks; t++) {
      rbuf stage, b;
      racc acc[GRP];
      int64_t j0 = t % per_row * GRP, o = t / per_row * inner + j0;
      int64_t g = inner - j0 < GRP ? inner - j0 : GRP;
      for (int64_t j = 0; j < g; j++) red_acc_init(&acc[j], &c);
      run_group(&pl, &c, acc, g, out_base(&pl, base, o), pl.kst[pl.nk - 1], &stage, &b);
      for (int64_t j = 0; j < g; j++)
        red_finish(&acc[j], &c, out0 + (o + j) * oes, out1 ? (int64_t *)out1 + (o + j) : NULL);
    }
    return INGOT_OK;
  }
#pragma omp parallel for schedule(static) if (threads > 1 && total >= 2 * CPU_GRAIN)
  for (int64_t o = 0; o < pl.nout; o++) {
    rbuf b;
    racc s;
    red_acc_init(&s, &c);
    run_range(&pl, &c, &s, out_base(&pl, base, o), 0, pl.nred, &b);
    red_finish(&s, &c, out0 + o * oes, out1 ? (int64_t *)out1 + o : NULL);
  }
  return INGOT_OK;
}

/* ---- inclusive scans along one dim ---- */
typedef struct lines {
  int n;
  int64_t sh[INGOT_MAX_DIMS], ist[INGOT_MAX_DIMS], ost[INGOT_MAX_DIMS];
  int64_t count, len, istep, ostep; /* byte steps along dim */
} lines;

static void lines_build(lines *l, const ingot_tensor *in, const ingot_tensor *out, int dim) {
  int64_t ies = (int64_t)ingot_dtype_size(in->dtype), oes = (int64_t)ingot_dtype_size(out->dtype);
  l->n = 0, l->count = 1, l->len = 1, l->istep = l->ostep = 0;
  for (int d = 0; d < in->ndim; d++) {
    if (d == dim) {
      l->len = in->shape[d], l->istep = in->strides[d] * ies, l->ostep = out->strides[d] * oes;
      continue;
    }
    l->sh[l->n] = in->shape[d], l->ist[l->n] = in->strides[d] * ies;
    l->ost[l->n] = out->strides[d] * oes;
    l->count *= in->shape[d];
    l->n++;
  }
}

static void line_ptrs(const lines *l, int64_t i, const char **ip, char **op) {
  for (int d = l->n - 1; d >= 0; d--) {
    int64_t k = i % l->sh[d];
    i /= l->sh[d];
    *ip += k * l->ist[d], *op += k * l->ost[d];
  }
}

static void store_block_d(ingot_dtype dt, char *p, int64_t st, int64_t n, const double *x) {
  switch (dt) {
    case INGOT_F32:
      for (int64_t k = 0; k < n; k++) *(float *)(p + k * st) = (float)x[k];
      break;
    case INGOT_F64:
      for (int64_t k = 0; k < n; k++) *(double *)(p + k * st) = x[k];
      break;
    default:
      for (int64_t k = 0; k < n; k++) store_f64(dt, p + k * st, x[k]);
  }
}

static void scan_line(const rctx *c, const char *ip, char *op, const lines *l, rbuf *b) {
  bool sum = c->op == INGOT_OP_CUMSUM;
  uint64_t u = sum ? 0 : 1;
  double re = sum ? 0 : 1, im = 0;
  float f = sum ? 0.0f : 1.0f; /* f16/bf16 accumulate in float32 */
  bool lowp = cpu_is_lowp(c->in_dt);
  for (int64_t off = 0; off < l->len; off += RB) {
    int64_t m = l->len - off < RB ? l->len - off : RB;
    load_block(c->dom, c->in_dt, ip + off * l->istep, l->istep, m, b, 0);
    char *o = op + off * l->ostep;
    if (c->dom == DOM_I) {
      for (int64_t k = 0; k < m; k++) {
        u = sum ? u + (uint64_t)b->i[k] : u * (uint64_t)b->i[k];
        *(int64_t *)(o + k * l->ostep) = (int64_t)u;
      }
    } else if (c->dom == DOM_Z) {
      for (int64_t k = 0; k < m; k++) {
        if (sum) {
          re += b->x[k], im += b->y[k];
        } else {
          double r = re * b->x[k] - im * b->y[k];
          im = re * b->y[k] + im * b->x[k], re = r;
        }
        red_store_z(c->out_dt, o + k * l->ostep, re, im);
      }
    } else {
      for (int64_t k = 0; k < m; k++) {
        if (lowp) {
          f = sum ? f + (float)b->x[k] : f * (float)b->x[k];
          b->x[k] = f;
        } else {
          re = sum ? re + b->x[k] : re * b->x[k];
          b->x[k] = re;
        }
      }
      store_block_d(c->out_dt, o, l->ostep, m, b->x);
    }
  }
}

static ingot_status k_scan(ingot_op_args *a) {
  const ingot_tensor *in = a->in[0];
  ingot_tensor *out = a->out[0];
  rctx c = {.op = a->op, .in_dt = in->dtype, .out_dt = out->dtype};
  c.dom = ingot_dtype_is_complex(in->dtype)    ? DOM_Z
          : ingot_dtype_is_floating(in->dtype) ? DOM_D
                                               : DOM_I;
  lines l;
  lines_build(&l, in, out, (int)a->iarg[0]);
  if (l.count == 0 || l.len == 0) return INGOT_OK;
  const char *ibase = tensor_ptr(in);
  char *obase = tensor_ptr(out);
  int64_t total = l.count * l.len;
#pragma omp parallel for schedule(static) if (cpu_threads() > 1 && total >= 2 * CPU_GRAIN)
  for (int64_t i = 0; i < l.count; i++) {
    rbuf b;
    const char *ip = ibase;
    char *op = obase;
    line_ptrs(&l, i, &ip, &op);
    scan_line(&c, ip, op, &l, &b);
  }
  return INGOT_OK;
}

void cpu_register_reduce(ingot_backend *be) {
  static const ingot_op ops[] = {
      INGOT_OP_SUM,     INGOT_OP_MEAN,    INGOT_OP_PROD,      INGOT_OP_AMAX,   INGOT_OP_AMIN,
      INGOT_OP_MAX_DIM, INGOT_OP_MIN_DIM, INGOT_OP_ARGMAX,    INGOT_OP_ARGMIN, INGOT_OP_VAR,
      INGOT_OP_STD,     INGOT_OP_NORM,    INGOT_OP_LOGSUMEXP, INGOT_OP_ANY,    INGOT_OP_ALL};
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) be->kernels[ops[i]] = k_reduce;
  be->kernels[INGOT_OP_CUMSUM] = k_scan;
  be->kernels[INGOT_OP_CUMPROD] = k_scan;
  cpu_register_softmax(be);
}
