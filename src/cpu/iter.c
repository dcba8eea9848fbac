/* The strided N-d loop: drops size-1 dims, merges dims that are contiguous
 * for every operand, then hands rows (or pieces of one long row) to
 * threads. Kernels only write the inner loop. */
#include <omp.h>
#include <string.h>

#include "cpu.h"

int cpu_threads(void) { return omp_get_max_threads(); }

void cpu_foreach_raw(int nops, char *const *base, const int64_t (*strides)[INGOT_MAX_DIMS],
                     int ndim, const int64_t *shape, cpu_loop_fn fn, void *ctx) {
  int64_t sh[INGOT_MAX_DIMS], st[INGOT_OP_MAX_IN + INGOT_OP_MAX_OUT][INGOT_MAX_DIMS];
  int n = 0;
  for (int d = 0; d < ndim; d++) {
    if (shape[d] == 0) return;
    if (shape[d] == 1) continue;
    if (n > 0) {
      bool merge = true;
      for (int k = 0; k < nops && merge; k++) merge = st[k][n - 1] == strides[k][d] * shape[d];
      if (merge) {
        sh[n - 1] *= shape[d];
        for (int k = 0; k < nops; k++) st[k][n - 1] = strides[k][d];
        continue;
      }
    }
    sh[n] = shape[d];
    for (int k = 0; k < nops; k++) st[k][n] = strides[k][d];
    n++;
  }
  if (n == 0) {
    sh[0] = 1;
    for (int k = 0; k < nops; k++) st[k][0] = 0;
    n = 1;
  }
  int64_t inner = sh[n - 1], rows = 1;
  for (int d = 0; d < n - 1; d++) rows *= sh[d];
  int64_t inner_st[INGOT_OP_MAX_IN + INGOT_OP_MAX_OUT];
  for (int k = 0; k < nops; k++) inner_st[k] = st[k][n - 1];

  int threads = cpu_threads();
  int64_t total = rows * inner;
  int64_t chunk = inner, chunks = 1;
  if (total >= 2 * CPU_GRAIN && threads > 1 && rows < 4 * threads) {
    /* Few long rows: split each row so every thread gets work. */
    chunks = (4 * threads + rows - 1) / rows;
    chunk = (inner + chunks - 1) / chunks;
    if (chunk < CPU_GRAIN / 4) chunk = CPU_GRAIN / 4;
    chunks = (inner + chunk - 1) / chunk;
  }
  int64_t tasks = rows * chunks;
#pragma omp parallel for schedule(static) if (total >= 2 * CPU_GRAIN && threads > 1)
  for (int64_t task = 0; task < tasks; task++) {
    int64_t r = task / chunks, c = task % chunks;
    char *p[INGOT_OP_MAX_IN + INGOT_OP_MAX_OUT];
    for (int k = 0; k < nops; k++) p[k] = base[k];
    for (int d = n - 2; d >= 0; d--) {
      int64_t i = r % sh[d];
      r /= sh[d];
      for (int k = 0; k < nops; k++) p[k] += i * st[k][d];
    }
    int64_t start = c * chunk;
    int64_t len = inner - start < chunk ? inner - start : chunk;
    for (int k = 0; k < nops; k++) p[k] += start * inner_st[k];
    fn(p, inner_st, len, ctx);
  }
}

void cpu_foreach(int nops, ingot_tensor *const *ts, cpu_loop_fn fn, void *ctx) {
  char *base[INGOT_OP_MAX_IN + INGOT_OP_MAX_OUT];
  int64_t strides[INGOT_OP_MAX_IN + INGOT_OP_MAX_OUT][INGOT_MAX_DIMS];
  const ingot_tensor *t0 = ts[0];
  for (int k = 0; k < nops; k++) {
    int64_t es = (int64_t)ingot_dtype_size(ts[k]->dtype);
    base[k] = tensor_ptr(ts[k]);
    for (int d = 0; d < t0->ndim; d++) strides[k][d] = ts[k]->strides[d] * es;
  }
  cpu_foreach_raw(nops, base, (const int64_t(*)[INGOT_MAX_DIMS])strides, t0->ndim, t0->shape,
                  fn, ctx);
}
