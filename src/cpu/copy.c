/* COPY (strided copy with casts between every pair of dtypes), FILL,
 * ARANGE, LINSPACE, EYE and the Philox draws. */
#include <math.h>
#include <string.h>

#include "../core/philox.h"
#include "cpu.h"

typedef struct copy_ctx {
  ingot_dtype dst, src;
} copy_ctx;

static void loop_same(char **p, const int64_t *s, int64_t n, void *vctx) {
  size_t es = ingot_dtype_size(((copy_ctx *)vctx)->dst);
  if (s[0] == (int64_t)es && s[1] == (int64_t)es) {
    memcpy(p[0], p[1], (size_t)n * es);
    return;
  }
  char *d = p[0], *x = p[1];
  switch (es) {
#define COPY_W(W, T)                                                                       \
  case W:                                                                                  \
    for (int64_t i = 0; i < n; i++) *(T *)(d + i * s[0]) = *(const T *)(x + i * s[1]);     \
    break;
    COPY_W(1, uint8_t)
    COPY_W(2, uint16_t)
    COPY_W(4, uint32_t)
    COPY_W(8, uint64_t)
#undef COPY_W
  default:
    for (int64_t i = 0; i < n; i++) memcpy(d + i * s[0], x + i * s[1], es);
  }
}

static void loop_cast(char **p, const int64_t *s, int64_t n, void *vctx) {
  copy_ctx *c = vctx;
  for (int64_t i = 0; i < n; i++) store_sval(c->dst, p[0] + i * s[0], load_sval(c->src, p[1] + i * s[1]));
}

/* Fast paths for the casts decode and mixed precision use most. */
static void loop_f32_to_bf16(char **p, const int64_t *s, int64_t n, void *c) {
  (void)c;
  for (int64_t i = 0; i < n; i++)
    *(uint16_t *)(p[0] + i * s[0]) = ingot_f32_to_bf16(*(const float *)(p[1] + i * s[1]));
}
static void loop_f32_to_f16(char **p, const int64_t *s, int64_t n, void *c) {
  (void)c;
  for (int64_t i = 0; i < n; i++)
    *(uint16_t *)(p[0] + i * s[0]) = ingot_f32_to_f16(*(const float *)(p[1] + i * s[1]));
}
static void loop_bf16_to_f32(char **p, const int64_t *s, int64_t n, void *c) {
  (void)c;
  for (int64_t i = 0; i < n; i++)
    *(float *)(p[0] + i * s[0]) = ingot_bf16_to_f32(*(const uint16_t *)(p[1] + i * s[1]));
}
static void loop_f16_to_f32(char **p, const int64_t *s, int64_t n, void *c) {
  (void)c;
  for (int64_t i = 0; i < n; i++)
    *(float *)(p[0] + i * s[0]) = ingot_f16_to_f32(*(const uint16_t *)(p[1] + i * s[1]));
}

ingot_status cpu_copy(ingot_tensor *dst, const ingot_tensor *src) {
  copy_ctx c = {dst->dtype, src->dtype};
  cpu_loop_fn fn = loop_cast;
  if (c.dst == c.src) fn = loop_same;
  else if (c.src == INGOT_F32 && c.dst == INGOT_BF16) fn = loop_f32_to_bf16;
  else if (c.src == INGOT_F32 && c.dst == INGOT_F16) fn = loop_f32_to_f16;
  else if (c.src == INGOT_BF16 && c.dst == INGOT_F32) fn = loop_bf16_to_f32;
  else if (c.src == INGOT_F16 && c.dst == INGOT_F32) fn = loop_f16_to_f32;
  ingot_tensor *ts[2] = {dst, (ingot_tensor *)src};
  cpu_foreach(2, ts, fn, &c);
  return INGOT_OK;
}

static ingot_status k_copy(ingot_op_args *a) { return cpu_copy(a->out[0], a->in[0]); }

ingot_status cpu_via_f32(ingot_op_args *a, ingot_kernel_fn kernel) {
  ingot_op_args b = *a;
  ingot_status st = INGOT_OK;
  bool in_tmp[INGOT_OP_MAX_IN] = {false}, out_tmp[INGOT_OP_MAX_OUT] = {false};
  for (int i = 0; i < a->nin && st == INGOT_OK; i++) {
    if (a->in[i] && cpu_is_lowp(a->in[i]->dtype)) {
      b.in[i] = tensor_new(a->in[i]->ndim, a->in[i]->shape, INGOT_F32, INGOT_CPU);
      if (!b.in[i]) st = ingot_last_status();
      else cpu_copy(b.in[i], a->in[i]), in_tmp[i] = true;
    }
  }
  for (int o = 0; o < a->nout && st == INGOT_OK; o++) {
    if (a->out[o] && cpu_is_lowp(a->out[o]->dtype)) {
      b.out[o] = tensor_new(a->out[o]->ndim, a->out[o]->shape, INGOT_F32, INGOT_CPU);
      if (!b.out[o]) st = ingot_last_status();
      else out_tmp[o] = true;
    }
  }
  if (st == INGOT_OK) st = kernel(&b);
  for (int o = 0; o < a->nout; o++) {
    if (out_tmp[o]) {
      if (st == INGOT_OK) cpu_copy(a->out[o], b.out[o]);
      ingot_release(b.out[o]);
    } else {
      a->out[o] = b.out[o]; /* kernels that allocate their outputs */
    }
  }
  for (int i = 0; i < a->nin; i++)
    if (in_tmp[i]) ingot_release(b.in[i]);
  return st;
}

/* ---- fills ---- */
typedef struct fill_ctx {
  ingot_dtype dt;
  double f0, f1;
  int64_t n;
  uint64_t seed, offset;
  int64_t low, high;
  int mode;
} fill_ctx;

static void loop_fill(char **p, const int64_t *s, int64_t n, void *vctx) {
  fill_ctx *c = vctx;
  unsigned char v[16];
  store_sval(c->dt, (char *)v, (sval){1, 0, c->f0, 0});
  size_t es = ingot_dtype_size(c->dt);
  for (int64_t i = 0; i < n; i++) memcpy(p[0] + i * s[0], v, es);
}

static ingot_status k_fill(ingot_op_args *a) {
  fill_ctx c = {.dt = a->out[0]->dtype, .f0 = a->farg[0]};
  cpu_foreach(1, a->out, loop_fill, &c);
  return INGOT_OK;
}

/* Element-indexed generators over a contiguous output, in parallel. */
static void gen_value(const fill_ctx *c, int64_t i, char *p);

static ingot_status gen_all(ingot_tensor *out, fill_ctx *c) {
  int64_t n = ingot_numel(out);
  size_t es = ingot_dtype_size(out->dtype);
  char *base = tensor_ptr(out);
  c->dt = out->dtype;
  c->n = n;
#pragma omp parallel for schedule(static) if (n >= 2 * CPU_GRAIN)
  for (int64_t i = 0; i < n; i++) gen_value(c, i, base + i * (int64_t)es);
  return INGOT_OK;
}

enum { GEN_ARANGE, GEN_LINSPACE, GEN_EYE, GEN_RAND, GEN_RANDN, GEN_RANDINT };

static int mant_bits(ingot_dtype dt) {
  switch (dt) {
  case INGOT_F16: return 11;
  case INGOT_BF16: return 8;
  case INGOT_F8E4M3FN: return 4;
  case INGOT_F8E5M2: return 3;
  default: return 24;
  }
}

static void gen_value(const fill_ctx *c, int64_t i, char *p) {
  switch (c->mode) {
  case GEN_ARANGE:
    if (ingot_dtype_is_integral(c->dt) && c->f0 == trunc(c->f0) && c->f1 == trunc(c->f1))
      store_sval(c->dt, p, (sval){0, (int64_t)c->f0 + i * (int64_t)c->f1, 0, 0});
    else store_sval(c->dt, p, (sval){1, 0, c->f0 + (double)i * c->f1, 0});
    return;
  case GEN_LINSPACE: {
    /* PyTorch's symmetric form: the second half counts back from end. */
    double step = c->n > 1 ? (c->f1 - c->f0) / (double)(c->n - 1) : 0;
    double v = i < c->n / 2 ? c->f0 + step * (double)i : c->f1 - step * (double)(c->n - 1 - i);
    if (ingot_dtype_is_integral(c->dt)) v = trunc(v);
    store_sval(c->dt, p, (sval){1, 0, v, 0});
    return;
  }
  case GEN_EYE: {
    int64_t m = (int64_t)c->f1;
    store_sval(c->dt, p, (sval){0, i / m == i % m, 0, 0});
    return;
  }
  case GEN_RAND: {
    bool cplx = ingot_dtype_is_complex(c->dt);
    ingot_dtype real = c->dt == INGOT_C64 ? INGOT_F32 : c->dt == INGOT_C128 ? INGOT_F64 : c->dt;
    int bits = mant_bits(real);
    double v[2];
    for (int k = 0; k < 1 + cplx; k++) {
      uint32_t w = philox_word(c->seed, c->offset, i * (1 + cplx) + k);
      v[k] = ldexp((double)(w >> (32 - bits)), -bits);
    }
    store_sval(c->dt, p, (sval){1 + cplx, 0, v[0], cplx ? v[1] : 0});
    return;
  }
  case GEN_RANDN: {
    bool cplx = ingot_dtype_is_complex(c->dt);
    double v[2];
    for (int k = 0; k < 1 + cplx; k++) {
      int64_t j = i * (1 + cplx) + k;
      philox4 b = philox4x32_10(c->seed, c->offset + (uint64_t)j / 4);
      int pair = (int)(j % 4) / 2;
      double u1 = ((double)b.v[2 * pair] + 1.0) * 0x1p-32;
      double u2 = (double)b.v[2 * pair + 1] * 0x1p-32;
      double r = sqrt(-2.0 * log(u1)), th = 2.0 * M_PI * u2;
      v[k] = (j % 2 == 0 ? r * cos(th) : r * sin(th));
      if (cplx) v[k] *= M_SQRT1_2; /* complex normal: unit total variance */
    }
    store_sval(c->dt, p, (sval){1 + cplx, 0, v[0], cplx ? v[1] : 0});
    return;
  }
  case GEN_RANDINT: {
    philox4 b = philox4x32_10(c->seed, c->offset + (uint64_t)i / 2);
    int h = (int)(i % 2);
    uint64_t x = (uint64_t)b.v[2 * h] | ((uint64_t)b.v[2 * h + 1] << 32);
    uint64_t range = (uint64_t)c->high - (uint64_t)c->low;
    store_sval(c->dt, p, (sval){0, (int64_t)((uint64_t)c->low + x % range), 0, 0});
    return;
  }
  }
}

static ingot_status k_arange(ingot_op_args *a) {
  fill_ctx c = {.mode = GEN_ARANGE, .f0 = a->farg[0], .f1 = a->farg[1]};
  return gen_all(a->out[0], &c);
}
static ingot_status k_linspace(ingot_op_args *a) {
  fill_ctx c = {.mode = GEN_LINSPACE, .f0 = a->farg[0], .f1 = a->farg[1]};
  return gen_all(a->out[0], &c);
}
static ingot_status k_eye(ingot_op_args *a) {
  fill_ctx c = {.mode = GEN_EYE, .f1 = (double)a->out[0]->shape[1]};
  if (a->out[0]->shape[1] == 0) return INGOT_OK;
  return gen_all(a->out[0], &c);
}
static ingot_status k_random(ingot_op_args *a) {
  fill_ctx c = {.mode = a->op == INGOT_OP_RAND ? GEN_RAND : a->op == INGOT_OP_RANDN ? GEN_RANDN
                                                                                  : GEN_RANDINT,
                .seed = (uint64_t)a->iarg[0], .offset = (uint64_t)a->iarg[1],
                .low = a->iarg[2], .high = a->iarg[3]};
  return gen_all(a->out[0], &c);
}

void cpu_register_copy(ingot_backend *be) {
  be->kernels[INGOT_OP_COPY] = k_copy;
  be->kernels[INGOT_OP_FILL] = k_fill;
  be->kernels[INGOT_OP_ARANGE] = k_arange;
  be->kernels[INGOT_OP_LINSPACE] = k_linspace;
  be->kernels[INGOT_OP_EYE] = k_eye;
  be->kernels[INGOT_OP_RAND] = k_random;
  be->kernels[INGOT_OP_RANDN] = k_random;
  be->kernels[INGOT_OP_RANDINT] = k_random;
}
