/* CPU index kernels: INDEX_SELECT, GATHER, EMBEDDING (one restrided gather
 * loop), SCATTER, SCATTER_ADD, INDEX_PUT, MASKED_FILL, MASKED_SELECT and
 * NONZERO. Contracts are beside the fronts in src/core/ops_index.c. */
#include <stdlib.h>
#include <string.h>

#include "cpu.h"

typedef struct b16 {
  uint64_t lo, hi;
} b16;

/* Find the first index outside [lo, hi); true if all are inside. */
static bool indices_in_range(const int64_t *idx, int64_t n, int64_t lo, int64_t hi, int64_t *bad) {
  int64_t mn = INT64_MAX, mx = INT64_MIN;
#pragma omp parallel for reduction(min : mn) reduction(max : mx) if (n >= 2 * CPU_GRAIN)
  for (int64_t i = 0; i < n; i++) {
    mn = idx[i] < mn ? idx[i] : mn;
    mx = idx[i] > mx ? idx[i] : mx;
  }
  if (n == 0 || (mn >= lo && mx < hi)) return true;
  for (int64_t i = 0; i < n; i++) {
    if (idx[i] < lo || idx[i] >= hi) {
      *bad = idx[i];
      break;
    }
  }
  return false;
}

static ingot_status range_error(const char *op, int64_t bad, int d, int64_t size) {
  return ingot_set_error(INGOT_ERR_INDEX, "%s: index %lld is out of bounds for dimension %d with "
                         "size %lld (index out of range in self)", op, (long long)bad, d,
                         (long long)size);
}

ingot_status cpu_check_index(const char *op, const ingot_tensor *idx, int64_t size, int d) {
  int64_t bad = 0;
  if (!indices_in_range((const int64_t *)tensor_ptr(idx), ingot_numel(idx), 0, size, &bad))
    return range_error(op, bad, d, size);
  return INGOT_OK;
}

/* ---- gather family: out[i] = src[i + index[i] * sdim] over restrided operands ---- */
typedef struct gather_ctx {
  int64_t sdim; /* bytes */
  size_t es;
} gather_ctx;

static void loop_gather(char **p, const int64_t *s, int64_t n, void *vctx) {
  const gather_ctx *c = vctx;
  int64_t sd = c->sdim;
  switch (c->es) {
#define GATHER_W(W, T)                                                                     \
  case W:                                                                                  \
    for (int64_t i = 0; i < n; i++) {                                                      \
      int64_t j = *(const int64_t *)(p[2] + i * s[2]);                                     \
      *(T *)(p[0] + i * s[0]) = *(const T *)(p[1] + i * s[1] + j * sd);                    \
    }                                                                                      \
    break;
    GATHER_W(1, uint8_t)
    GATHER_W(2, uint16_t)
    GATHER_W(4, uint32_t)
    GATHER_W(8, uint64_t)
    GATHER_W(16, b16)
#undef GATHER_W
  }
}

/* Operand strides in bytes: out contiguous over shape; src / idx given. */
static void run_gather(ingot_tensor *out, int nd, const int64_t *shape, const ingot_tensor *src,
                       const int64_t *src_st, int64_t sdim, const ingot_tensor *idx,
                       const int64_t *idx_st) {
  int64_t es = (int64_t)ingot_dtype_size(out->dtype);
  int64_t st[3][INGOT_MAX_DIMS];
  int64_t ost[INGOT_MAX_DIMS];
  contiguous_strides(nd, shape, ost);
  for (int d = 0; d < nd; d++) {
    st[0][d] = ost[d] * es;
    st[1][d] = src_st[d] * es;
    st[2][d] = idx_st[d] * 8;
  }
  char *base[3] = {tensor_ptr(out), tensor_ptr(src), tensor_ptr(idx)};
  gather_ctx c = {sdim * es, (size_t)es};
  cpu_foreach_raw(3, base, (const int64_t(*)[INGOT_MAX_DIMS])st, nd, shape, loop_gather, &c);
}

static ingot_status k_index_select(ingot_op_args *a) {
  ingot_tensor *t = a->in[0], *idx = a->in[1], *out = a->out[0];
  int d = (int)a->iarg[0];
  int64_t size = t->ndim ? t->shape[d] : 1;
  ingot_status st = cpu_check_index("index_select", idx, size, d);
  if (st != INGOT_OK) return st;
  int64_t sst[INGOT_MAX_DIMS], ist[INGOT_MAX_DIMS] = {0};
  memcpy(sst, t->strides, sizeof sst);
  int64_t sdim = t->ndim ? t->strides[d] : 0;
  if (t->ndim) sst[d] = 0, ist[d] = 1;
  run_gather(out, out->ndim, out->shape, t, sst, sdim, idx, ist);
  return INGOT_OK;
}

static ingot_status k_gather(ingot_op_args *a) {
  ingot_tensor *t = a->in[0], *idx = a->in[1], *out = a->out[0];
  int d = (int)a->iarg[0];
  int64_t size = t->ndim ? t->shape[d] : 1;
  ingot_status st = cpu_check_index("gather", idx, size, d);
  if (st != INGOT_OK) return st;
  int64_t sst[INGOT_MAX_DIMS] = {0}, ist[INGOT_MAX_DIMS];
  memcpy(sst, t->strides, sizeof(int64_t) * t->ndim);
  contiguous_strides(idx->ndim, idx->shape, ist);
  int64_t sdim = t->ndim ? t->strides[d] : 0;
  if (t->ndim) sst[d] = 0;
  run_gather(out, out->ndim, out->shape, t, sst, sdim, idx, ist);
  return INGOT_OK;
}

static ingot_status k_embedding(ingot_op_args *a) {
  ingot_tensor *w = a->in[0], *idx = a->in[1], *out = a->out[0];
  ingot_status st = cpu_check_index("embedding", idx, w->shape[0], 0);
  if (st != INGOT_OK) return st;
  int64_t n = ingot_numel(idx), dsz = w->shape[1];
  if (n == 0 || dsz == 0) return INGOT_OK;
  if (w->strides[1] == 1 || dsz == 1) {
    /* Contiguous rows: one memcpy per looked-up row. */
    size_t es = ingot_dtype_size(w->dtype), row = (size_t)dsz * es;
    const int64_t *ix = (const int64_t *)tensor_ptr(idx);
    char *ob = tensor_ptr(out), *wb = tensor_ptr(w);
    int64_t ws = w->strides[0] * (int64_t)es;
#pragma omp parallel for schedule(static) if (n * dsz >= 2 * CPU_GRAIN && n > 1)
    for (int64_t i = 0; i < n; i++) memcpy(ob + i * (int64_t)row, wb + ix[i] * ws, row);
    return INGOT_OK;
  }
  int64_t shape[2] = {n, dsz};
  int64_t sst[2] = {0, w->strides[1]}, ist[2] = {1, 0};
  run_gather(out, 2, shape, w, sst, w->strides[0], idx, ist);
  return INGOT_OK;
}

/* ---- element-wise add for every dtype (wrapping ints, bool = or) ---- */
#define ADD_TYPES(X)                                                                       \
  X(INGOT_BOOL, uint8_t, (uint8_t)((x) | (y)))                                             \
  X(INGOT_U8, uint8_t, (uint8_t)((x) + (y)))                                               \
  X(INGOT_I8, int8_t, (int8_t)((x) + (y)))                                                 \
  X(INGOT_I16, int16_t, (int16_t)((x) + (y)))                                              \
  X(INGOT_I32, int32_t, (int32_t)((uint32_t)(x) + (uint32_t)(y)))                          \
  X(INGOT_I64, int64_t, (int64_t)((uint64_t)(x) + (uint64_t)(y)))                          \
  X(INGOT_F16, uint16_t, ingot_f32_to_f16(ingot_f16_to_f32(x) + ingot_f16_to_f32(y)))      \
  X(INGOT_BF16, uint16_t, ingot_f32_to_bf16(ingot_bf16_to_f32(x) + ingot_bf16_to_f32(y)))  \
  X(INGOT_F32, float, (x) + (y))                                                           \
  X(INGOT_F64, double, (x) + (y))                                                          \
  X(INGOT_C64, c64_t, (x) + (y))                                                           \
  X(INGOT_C128, c128_t, (x) + (y))                                                         \
  X(INGOT_F8E4M3FN, uint8_t,                                                               \
    ingot_f32_to_f8e4m3fn(ingot_f8e4m3fn_to_f32(x) + ingot_f8e4m3fn_to_f32(y)))            \
  X(INGOT_F8E5M2, uint8_t, ingot_f32_to_f8e5m2(ingot_f8e5m2_to_f32(x) + ingot_f8e5m2_to_f32(y)))

/* ---- scatter: each position of the non-dim dims owns its output column,
 * so columns run in parallel and each walks dim in index order ---- */
typedef struct scatter_ctx {
  ingot_dtype dt;
  bool add;
  int64_t k;                     /* index.size(dim) */
  int64_t out_sd, idx_sd, src_sd; /* bytes along dim */
} scatter_ctx;

static void loop_scatter(char **p, const int64_t *s, int64_t n, void *vctx) {
  const scatter_ctx *c = vctx;
  if (!c->add) {
    switch (ingot_dtype_size(c->dt)) {
#define SCATTER_W(W, T)                                                                    \
  case W:                                                                                  \
    for (int64_t i = 0; i < n; i++)                                                        \
      for (int64_t k = 0; k < c->k; k++) {                                                 \
        int64_t j = *(const int64_t *)(p[1] + i * s[1] + k * c->idx_sd);                   \
        *(T *)(p[0] + i * s[0] + j * c->out_sd) = *(const T *)(p[2] + i * s[2] + k * c->src_sd); \
      }                                                                                    \
    break;
      SCATTER_W(1, uint8_t)
      SCATTER_W(2, uint16_t)
      SCATTER_W(4, uint32_t)
      SCATTER_W(8, uint64_t)
      SCATTER_W(16, b16)
#undef SCATTER_W
    }
    return;
  }
  switch (c->dt) {
#define SCATTER_ADD(E, T, EXPR)                                                            \
  case E:                                                                                  \
    for (int64_t i = 0; i < n; i++)                                                        \
      for (int64_t k = 0; k < c->k; k++) {                                                 \
        int64_t j = *(const int64_t *)(p[1] + i * s[1] + k * c->idx_sd);                   \
        T *o = (T *)(p[0] + i * s[0] + j * c->out_sd);                                     \
        T x = *o, y = *(const T *)(p[2] + i * s[2] + k * c->src_sd);                       \
        *o = EXPR;                                                                         \
      }                                                                                    \
    break;
    ADD_TYPES(SCATTER_ADD)
#undef SCATTER_ADD
  default: break;
  }
}

static ingot_status k_scatter(ingot_op_args *a) {
  ingot_tensor *out = a->out[0], *idx = a->in[1], *src = a->in[2];
  int d = (int)a->iarg[0];
  const char *name = a->op == INGOT_OP_SCATTER_ADD ? "scatter_add" : "scatter";
  int64_t size = out->ndim ? out->shape[d] : 1;
  ingot_status s = cpu_check_index(name, idx, size, d);
  if (s != INGOT_OK) return s;
  if (ingot_numel(idx) == 0) return INGOT_OK;
  int64_t es = (int64_t)ingot_dtype_size(out->dtype);
  int64_t ist[INGOT_MAX_DIMS], shape[INGOT_MAX_DIMS], st[3][INGOT_MAX_DIMS];
  contiguous_strides(idx->ndim, idx->shape, ist);
  int nd = 0;
  for (int i = 0; i < idx->ndim; i++) {
    if (i == d) continue;
    shape[nd] = idx->shape[i];
    st[0][nd] = out->strides[i] * es;
    st[1][nd] = ist[i] * 8;
    st[2][nd] = src->strides[i] * es;
    nd++;
  }
  scatter_ctx c = {out->dtype, a->op == INGOT_OP_SCATTER_ADD, idx->ndim ? idx->shape[d] : 1,
                   out->ndim ? out->strides[d] * es : 0, idx->ndim ? ist[d] * 8 : 0,
                   src->ndim ? src->strides[d] * es : 0};
  char *base[3] = {tensor_ptr(out), tensor_ptr(idx), tensor_ptr(src)};
  cpu_foreach_raw(3, base, (const int64_t(*)[INGOT_MAX_DIMS])st, nd, shape, loop_scatter, &c);
  return INGOT_OK;
}

/* ---- index_put: rows of out addressed by n index columns ---- */
static void put_cols(ingot_dtype dt, bool acc, char *o, const char *v, int64_t vs, int64_t c0,
                     int64_t c1) {
  if (!acc) {
    switch (ingot_dtype_size(dt)) {
#define PUT_W(W, T)                                                                        \
  case W:                                                                                  \
    for (int64_t c = c0; c < c1; c++) ((T *)o)[c] = *(const T *)(v + c * vs);              \
    break;
      PUT_W(1, uint8_t)
      PUT_W(2, uint16_t)
      PUT_W(4, uint32_t)
      PUT_W(8, uint64_t)
      PUT_W(16, b16)
#undef PUT_W
    }
    return;
  }
  switch (dt) {
#define PUT_ADD(E, T, EXPR)                                                                \
  case E:                                                                                  \
    for (int64_t c = c0; c < c1; c++) {                                                    \
      T x = ((T *)o)[c], y = *(const T *)(v + c * vs);                                     \
      ((T *)o)[c] = EXPR;                                                                  \
    }                                                                                      \
    break;
    ADD_TYPES(PUT_ADD)
#undef PUT_ADD
  default: break;
  }
}

static ingot_status k_index_put(ingot_op_args *a) {
  ingot_tensor *out = a->out[0], *vals = a->in[1], *idx = a->in[2];
  int n = (int)a->iarg[0];
  bool acc = a->iarg[1] != 0;
  int64_t nb = idx->shape[1], rest = vals->shape[1];
  const int64_t *ix = (const int64_t *)tensor_ptr(idx);
  for (int j = 0; j < n; j++) {
    int64_t bad = 0, size = out->shape[j];
    if (!indices_in_range(ix + j * nb, nb, -size, size, &bad))
      return ingot_set_error(INGOT_ERR_INDEX, "index_put: index %lld is out of bounds for dimension %d with "
                             "size %lld", (long long)bad, j, (long long)size);
  }
  if (nb == 0 || rest == 0) return INGOT_OK;
  int64_t es = (int64_t)ingot_dtype_size(out->dtype);
  int64_t vs0 = vals->strides[0] * es, vs1 = vals->strides[1] * es;
  char *ob = tensor_ptr(out), *vb = tensor_ptr(vals);
  /* Column blocks run in parallel; rows in k order within a block, so
   * duplicates accumulate (or overwrite) deterministically. */
  int64_t blk = rest, nblk = 1;
  if (rest * nb >= 2 * CPU_GRAIN && rest >= 1024 && cpu_threads() > 1) {
    nblk = cpu_threads();
    blk = (rest + nblk - 1) / nblk;
    nblk = (rest + blk - 1) / blk;
  }
#pragma omp parallel for schedule(static) if (nblk > 1)
  for (int64_t b = 0; b < nblk; b++) {
    int64_t c0 = b * blk, c1 = c0 + blk < rest ? c0 + blk : rest;
    for (int64_t k = 0; k < nb; k++) {
      int64_t off = 0;
      for (int j = 0; j < n; j++) {
        int64_t i = ix[j * nb + k];
        off += (i < 0 ? i + out->shape[j] : i) * out->strides[j];
      }
      put_cols(out->dtype, acc, ob + off * es, vb + k * vs0, vs1, c0, c1);
    }
  }
  return INGOT_OK;
}

/* ---- masked_fill ---- */
typedef struct fill_ctx {
  size_t es;
  unsigned char v[16];
} fill_ctx;

static void loop_masked_fill(char **p, const int64_t *s, int64_t n, void *vctx) {
  const fill_ctx *c = vctx;
  switch (c->es) {
#define MF_W(W, T)                                                                         \
  case W: {                                                                                \
    T v;                                                                                   \
    memcpy(&v, c->v, sizeof v);                                                            \
    for (int64_t i = 0; i < n; i++) {                                                      \
      T x = *(const T *)(p[1] + i * s[1]);                                                 \
      *(T *)(p[0] + i * s[0]) = *(const uint8_t *)(p[2] + i * s[2]) ? v : x;               \
    }                                                                                      \
    break;                                                                                 \
  }
    MF_W(1, uint8_t)
    MF_W(2, uint16_t)
    MF_W(4, uint32_t)
    MF_W(8, uint64_t)
    MF_W(16, b16)
#undef MF_W
  }
}

static ingot_status k_masked_fill(ingot_op_args *a) {
  fill_ctx c = {ingot_dtype_size(a->out[0]->dtype), {0}};
  store_f64(a->out[0]->dtype, c.v, a->farg[0]);
  ingot_tensor *ts[3] = {a->out[0], a->in[0], a->in[1]};
  cpu_foreach(3, ts, loop_masked_fill, &c);
  return INGOT_OK;
}

/* ---- masked_select / nonzero: flags, per-block counts, prefix, fill ---- */
#define NZ_BLOCK 65536

/* Row-major walk over a strided shape (byte strides). */
typedef struct walk {
  int nd;
  int64_t shape[INGOT_MAX_DIMS], st[INGOT_MAX_DIMS], co[INGOT_MAX_DIMS];
  int64_t off;
} walk;

static void walk_start(walk *w, const ingot_tensor *t, int64_t flat) {
  int64_t es = (int64_t)ingot_dtype_size(t->dtype);
  w->nd = t->ndim;
  w->off = 0;
  for (int d = t->ndim - 1; d >= 0; d--) {
    w->shape[d] = t->shape[d];
    w->st[d] = t->strides[d] * es;
    w->co[d] = flat % t->shape[d];
    flat /= t->shape[d];
    w->off += w->co[d] * w->st[d];
  }
}

static inline void walk_next(walk *w) {
  for (int d = w->nd - 1; d >= 0; d--) {
    w->off += w->st[d];
    if (++w->co[d] < w->shape[d]) return;
    w->off -= w->co[d] * w->st[d];
    w->co[d] = 0;
  }
}

typedef struct nz_ctx {
  ingot_dtype dt;
} nz_ctx;

/* flag = element != 0 (NaN counts; -0.0 does not). */
static void loop_flag(char **p, const int64_t *s, int64_t n, void *vctx) {
  ingot_dtype dt = ((const nz_ctx *)vctx)->dt;
  uint8_t *f = (uint8_t *)p[0];
  const char *x = p[1];
  switch (dt) {
#define NZ(T, EXPR)                                                                        \
  for (int64_t i = 0; i < n; i++) {                                                        \
    T v = *(const T *)(x + i * s[1]);                                                      \
    f[i] = (EXPR);                                                                         \
  }                                                                                        \
  break;
  case INGOT_BOOL: case INGOT_U8: case INGOT_I8: NZ(uint8_t, v != 0)
  case INGOT_F8E4M3FN: case INGOT_F8E5M2: NZ(uint8_t, (v & 0x7f) != 0)
  case INGOT_I16: NZ(uint16_t, v != 0)
  case INGOT_F16: case INGOT_BF16: NZ(uint16_t, (v & 0x7fff) != 0)
  case INGOT_I32: NZ(uint32_t, v != 0)
  case INGOT_F32: NZ(float, v != 0)
  case INGOT_I64: NZ(uint64_t, v != 0)
  case INGOT_F64: NZ(double, v != 0)
  case INGOT_C64: NZ(c64_t, crealf(v) != 0 || cimagf(v) != 0)
  case INGOT_C128: NZ(c128_t, creal(v) != 0 || cimag(v) != 0)
#undef NZ
  default: break;
  }
}

/* Contiguous 0/1 flags of t's elements (bool masks copied, others tested). */
static uint8_t *make_flags(const ingot_tensor *t, int64_t n) {
  uint8_t *f = malloc(n > 0 ? (size_t)n : 1);
  if (!f) {
    ingot_set_error(INGOT_ERR_OOM, "out of host memory (%lld bytes)", (long long)n);
    return NULL;
  }
  if (n == 0) return f;
  int64_t es = (int64_t)ingot_dtype_size(t->dtype), st[2][INGOT_MAX_DIMS], cs[INGOT_MAX_DIMS];
  contiguous_strides(t->ndim, t->shape, cs);
  for (int d = 0; d < t->ndim; d++) st[0][d] = cs[d], st[1][d] = t->strides[d] * es;
  char *base[2] = {(char *)f, tensor_ptr(t)};
  nz_ctx c = {t->dtype};
  cpu_foreach_raw(2, base, (const int64_t(*)[INGOT_MAX_DIMS])st, t->ndim, t->shape, loop_flag, &c);
  return f;
}

/* Per-block counts turned into exclusive prefix offsets; returns the total. */
static int64_t block_offsets(const uint8_t *f, int64_t n, int64_t nblk, int64_t *off) {
#pragma omp parallel for schedule(static) if (nblk > 1)
  for (int64_t b = 0; b < nblk; b++) {
    int64_t e = (b + 1) * NZ_BLOCK < n ? (b + 1) * NZ_BLOCK : n, cnt = 0;
    for (int64_t i = b * NZ_BLOCK; i < e; i++) cnt += f[i];
    off[b] = cnt;
  }
  int64_t total = 0;
  for (int64_t b = 0; b < nblk; b++) {
    int64_t c = off[b];
    off[b] = total;
    total += c;
  }
  return total;
}

static ingot_status k_select_common(ingot_op_args *a, bool select) {
  ingot_tensor *t = a->in[0];
  int64_t n = ingot_numel(t), nblk = (n + NZ_BLOCK - 1) / NZ_BLOCK;
  uint8_t *f = make_flags(select ? a->in[1] : t, n);
  int64_t *off = malloc(sizeof(int64_t) * (size_t)(nblk > 0 ? nblk : 1));
  if (!f || !off) {
    free(f);
    free(off);
    return ingot_set_error(INGOT_ERR_OOM, "%s: out of host memory",
                           select ? "masked_select" : "nonzero");
  }
  int64_t total = block_offsets(f, n, nblk, off);
  int nd = t->ndim;
  ingot_tensor *out = select ? tensor_new(1, &total, t->dtype, INGOT_CPU)
                             : tensor_new(2, (int64_t[]){total, nd}, INGOT_I64, INGOT_CPU);
  if (!out) {
    free(f);
    free(off);
    return ingot_last_status();
  }
  char *ob = tensor_ptr(out);
  size_t es = ingot_dtype_size(t->dtype);
#pragma omp parallel for schedule(static) if (nblk > 1)
  for (int64_t b = 0; b < nblk; b++) {
    int64_t e = (b + 1) * NZ_BLOCK < n ? (b + 1) * NZ_BLOCK : n, o = off[b];
    walk w;
    walk_start(&w, t, b * NZ_BLOCK);
    for (int64_t i = b * NZ_BLOCK; i < e; i++, walk_next(&w)) {
      if (!f[i]) continue;
      if (select) memcpy(ob + o * (int64_t)es, tensor_ptr(t) + w.off, es);
      else if (nd) memcpy(ob + o * nd * 8, w.co, (size_t)nd * 8);
      o++;
    }
  }
  free(f);
  free(off);
  a->out[0] = out;
  return INGOT_OK;
}

static ingot_status k_masked_select(ingot_op_args *a) { return k_select_common(a, true); }
static ingot_status k_nonzero(ingot_op_args *a) { return k_select_common(a, false); }

void cpu_register_index(ingot_backend *be) {
  be->kernels[INGOT_OP_INDEX_SELECT] = k_index_select;
  be->kernels[INGOT_OP_GATHER] = k_gather;
  be->kernels[INGOT_OP_EMBEDDING] = k_embedding;
  be->kernels[INGOT_OP_SCATTER] = k_scatter;
  be->kernels[INGOT_OP_SCATTER_ADD] = k_scatter;
  be->kernels[INGOT_OP_INDEX_PUT] = k_index_put;
  be->kernels[INGOT_OP_MASKED_FILL] = k_masked_fill;
  be->kernels[INGOT_OP_MASKED_SELECT] = k_masked_select;
  be->kernels[INGOT_OP_NONZERO] = k_nonzero;
}
