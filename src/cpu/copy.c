/* COPY (strided copy with casts between every pair of dtypes), FILL,
 * ARANGE, LINSPACE, EYE and the Philox draws. */
#include <math.h>
#include <string.h>

#include "../core/generate.h"
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
static void loop_fill(char **p, const int64_t *s, int64_t n, void *vctx) {
  const gen_params *c = vctx;
  unsigned char v[16];
  sval x = {1, 0, c->f0, 0};
  store_sval(c->dt, (char *)v, x);
  size_t es = ingot_dtype_size(c->dt);
  char *d = p[0];
  switch (es) {
#define FILL_W(W, T)                                                                       \
  case W: {                                                                                \
    T val;                                                                                 \
    memcpy(&val, v, W);                                                                    \
    if (s[0] == W)                                                                         \
      for (int64_t i = 0; i < n; i++) ((T *)d)[i] = val;                                   \
    else                                                                                   \
      for (int64_t i = 0; i < n; i++) *(T *)(d + i * s[0]) = val;                          \
    break;                                                                                 \
  }
    FILL_W(1, uint8_t)
    FILL_W(2, uint16_t)
    FILL_W(4, uint32_t)
    FILL_W(8, uint64_t)
#undef FILL_W
  default:
    for (int64_t i = 0; i < n; i++) memcpy(d + i * s[0], v, es);
  }
}

static ingot_status k_fill(ingot_op_args *a) {
  gen_params c = {.dt = a->out[0]->dtype, .f0 = a->farg[0]};
  cpu_foreach(1, a->out, loop_fill, &c);
  return INGOT_OK;
}

/* Element-indexed generators (generate.h) over a contiguous output. */
static ingot_status k_generate(ingot_op_args *a) {
  ingot_tensor *out = a->out[0];
  gen_params c;
  gen_params_from_args(&c, a->op, out->dtype, ingot_numel(out), out->ndim == 2 ? out->shape[1] : 0,
                       a->farg, a->iarg);
  size_t es = ingot_dtype_size(out->dtype);
  char *base = tensor_ptr(out);
  int64_t n = c.n;
#pragma omp parallel for schedule(static) if (n >= 2 * CPU_GRAIN)
  for (int64_t i = 0; i < n; i++) gen_value(&c, i, base + i * (int64_t)es);
  return INGOT_OK;
}

void cpu_register_copy(ingot_backend *be) {
  be->kernels[INGOT_OP_COPY] = k_copy;
  be->kernels[INGOT_OP_FILL] = k_fill;
  be->kernels[INGOT_OP_ARANGE] = k_generate;
  be->kernels[INGOT_OP_LINSPACE] = k_generate;
  be->kernels[INGOT_OP_EYE] = k_generate;
  be->kernels[INGOT_OP_RAND] = k_generate;
  be->kernels[INGOT_OP_RANDN] = k_generate;
  be->kernels[INGOT_OP_RANDINT] = k_generate;
}
