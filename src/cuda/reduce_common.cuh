// Shared by reduce.cu, scan.cu and softmax.cu: registration hooks and the geometry of
// "lines" (every 1-D line along one dim of a tensor, with its input and output bases).
#pragma once

#include "cuda_common.cuh"

void cuda_register_scan(ingot_backend *be);     // scan.cu: CUMSUM CUMPROD
void cuda_register_softmax(ingot_backend *be);  // softmax.cu: SOFTMAX LOG_SOFTMAX

struct Lines {
  int n;                                 // other dims (size-1 dims dropped)
  int64_t sh[INGOT_MAX_DIMS], ist[INGOT_MAX_DIMS], ost[INGOT_MAX_DIMS];
  int64_t count, len, xs, ys;            // lines, line length, element steps along dim
};

static inline Lines make_lines(const ingot_tensor *in, const ingot_tensor *out, int dim) {
  Lines l;
  l.n = 0, l.count = 1, l.len = 1, l.xs = 0, l.ys = 0;
  int nd = ingot_ndim(in);
  const int64_t *sh = ingot_shape(in), *is = ingot_strides(in), *os = ingot_strides(out);
  for (int d = 0; d < nd; d++) {
    if (d == dim) {
      l.len = sh[d], l.xs = is[d], l.ys = os[d];
      continue;
    }
    l.count *= sh[d];
    if (sh[d] == 1) continue;
    l.sh[l.n] = sh[d], l.ist[l.n] = is[d], l.ost[l.n] = os[d];
    l.n++;
  }
  return l;
}

// Input and output element offsets of line i.
__device__ __forceinline__ void line_offsets(const Lines &l, int64_t i, int64_t &io,
                                             int64_t &oo) {
  io = 0, oo = 0;
  for (int d = l.n - 1; d >= 0; d--) {
    int64_t k = i % l.sh[d];
    i /= l.sh[d];
    io += k * l.ist[d], oo += k * l.ost[d];
  }
}
