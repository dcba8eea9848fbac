/* CPU shape kernels (contracts in src/core/ops_shape.c). All of them are
 * copies between strided views, done by cpu_copy (element-size based for
 * equal dtypes), so one code path serves every dtype. */
#include <string.h>

#include "cpu.h"

/* A view of t: same strides, shape sh, first element at t's element
 * offset + off (all in elements). */
static ingot_tensor *sub_view(const ingot_tensor *t, const int64_t *sh, int64_t off) {
  return tensor_view(t, t->ndim, sh, t->strides, t->offset + off);
}

static ingot_status copy_views(const ingot_tensor *dst, const int64_t *dsh, int64_t doff,
                               const ingot_tensor *src, const int64_t *ssh, int64_t soff) {
  ingot_tensor *d = sub_view(dst, dsh, doff), *s = d ? sub_view(src, ssh, soff) : NULL;
  if (s) cpu_copy(d, s);
  ingot_release(d);
  ingot_release(s);
  return s ? INGOT_OK : ingot_last_status();
}

static ingot_status k_cat(ingot_op_args *a) {
  ingot_tensor *out = a->out[0];
  int dim = (int)a->iarg[0];
  int64_t pos = 0;
  for (int i = 0; i < a->nin; i++) {
    ingot_tensor *in = a->in[i];
    ingot_status st = copy_views(out, in->shape, pos * out->strides[dim], in, in->shape, 0);
    if (st != INGOT_OK) return st;
    pos += in->shape[dim];
  }
  return INGOT_OK;
}

static ingot_status k_flip(ingot_op_args *a) {
  ingot_tensor *in = a->in[0], *out = a->out[0];
  if (ingot_numel(out) == 0) return INGOT_OK;
  /* Read the input through negative strides on the flipped dims. */
  int64_t st[INGOT_MAX_DIMS], off = in->offset;
  for (int d = 0; d < in->ndim; d++) {
    st[d] = in->strides[d];
    if (a->dims & (1u << d)) {
      off += (in->shape[d] - 1) * st[d];
      st[d] = -st[d];
    }
  }
  ingot_tensor *v = tensor_view(in, in->ndim, in->shape, st, off);
  if (!v) return ingot_last_status();
  cpu_copy(out, v);
  ingot_release(v);
  return INGOT_OK;
}

/* Each rolled dim splits into two blocks, [0, n-s) -> [s, n) and
 * [n-s, n) -> [0, s); every combination of blocks is one strided copy. */
static ingot_status k_roll(ingot_op_args *a) {
  ingot_tensor *in = a->in[0], *out = a->out[0];
  int nd = in->ndim;
  if (ingot_numel(out) == 0) return INGOT_OK;
  int rolled[INGOT_MAX_DIMS], nr = 0;
  for (int d = 0; d < nd; d++)
    if (a->iarg[d] != 0) rolled[nr++] = d;
  for (unsigned combo = 0; combo < (1u << nr); combo++) {
    int64_t sh[INGOT_MAX_DIMS], soff = 0, doff = 0;
    memcpy(sh, in->shape, sizeof sh);
    for (int r = 0; r < nr; r++) {
      int d = rolled[r];
      int64_t n = in->shape[d], s = a->iarg[d];
      if (combo & (1u << r)) { /* tail of the input wraps to the front */
        sh[d] = s;
        soff += (n - s) * in->strides[d];
      } else {
        sh[d] = n - s;
        doff += s * out->strides[d];
      }
    }
    ingot_status st = copy_views(out, sh, doff, in, sh, soff);
    if (st != INGOT_OK) return st;
  }
  return INGOT_OK;
}

/* Copy the input into the output's first tile, then grow the filled
 * region dim by dim, doubling it each time (log2(repeats) copies per dim). */
static ingot_status k_repeat(ingot_op_args *a) {
  ingot_tensor *in = a->in[0], *out = a->out[0];
  int nd = out->ndim;
  if (ingot_numel(out) == 0) return INGOT_OK;
  int64_t cur[INGOT_MAX_DIMS];
  memcpy(cur, in->shape, sizeof cur);
  ingot_status st = copy_views(out, cur, 0, in, cur, 0);
  for (int d = nd - 1; d >= 0 && st == INGOT_OK; d--) {
    int64_t total = out->shape[d];
    for (int64_t c = cur[d]; c < total && st == INGOT_OK;) {
      int64_t len = total - c < c ? total - c : c;
      int64_t sh[INGOT_MAX_DIMS];
      memcpy(sh, cur, sizeof sh);
      sh[d] = len;
      st = copy_views(out, sh, c * out->strides[d], out, sh, 0);
      c += len;
    }
    cur[d] = total;
  }
  return st;
}

/* Copy everything, then zero the other triangle of each matrix row. */
static ingot_status triangle(ingot_op_args *a, bool lower) {
  ingot_tensor *in = a->in[0], *out = a->out[0];
  int nd = out->ndim;
  int64_t rows = out->shape[nd - 2], cols = out->shape[nd - 1];
  if (ingot_numel(out) == 0) return INGOT_OK;
  cpu_copy(out, in);
  /* Clamp k so that i + k cannot overflow; the result is the same. */
  int64_t k = a->iarg[0];
  if (k < -rows - 1) k = -rows - 1;
  if (k > cols + 1) k = cols + 1;
  size_t es = ingot_dtype_size(out->dtype);
  char *base = tensor_ptr(out);
  int64_t nrows = ingot_numel(out) / cols;
#pragma omp parallel for schedule(static) if (nrows * cols >= 2 * CPU_GRAIN)
  for (int64_t r = 0; r < nrows; r++) {
    int64_t i = r % rows, lo, hi; /* zero columns [lo, hi) */
    if (lower) {
      lo = i + k + 1 < 0 ? 0 : i + k + 1;
      hi = cols;
    } else {
      lo = 0;
      hi = i + k > cols ? cols : i + k;
    }
    if (hi > lo) memset(base + (r * cols + lo) * (int64_t)es, 0, (size_t)(hi - lo) * es);
  }
  return INGOT_OK;
}

static ingot_status k_tril(ingot_op_args *a) { return triangle(a, true); }
static ingot_status k_triu(ingot_op_args *a) { return triangle(a, false); }

void cpu_register_shape(ingot_backend *be) {
  be->kernels[INGOT_OP_CAT] = k_cat;
  be->kernels[INGOT_OP_FLIP] = k_flip;
  be->kernels[INGOT_OP_ROLL] = k_roll;
  be->kernels[INGOT_OP_REPEAT] = k_repeat;
  be->kernels[INGOT_OP_TRIL] = k_tril;
  be->kernels[INGOT_OP_TRIU] = k_triu;
}
