// CUDA shape kernels: CAT, FLIP, ROLL, REPEAT, TRIL, TRIU (contracts in
// src/core/ops_shape.c; CPU reference src/cpu/shape.c).
//
// Design: all six ops are pure data movement, so one kernel serves them, by
// element size (1, 2, 4, 8 or 16 bytes), never per dtype. One thread per
// output element (grid-stride, 64-bit indices): the output linear index is
// decomposed over the output shape; each dim maps its output coordinate to
// an input coordinate (identity, roll shift or repeat modulo); FLIP is the
// identity map read through negative input strides. TRIL/TRIU keep the last
// two dims apart (row, col) and write zero where col - row is outside k.
// CAT launches the same kernel once per input into its region of the output
// view (any strides). Dims of size 1 are dropped and identity dims that are
// contiguous in both operands are merged, so plain copies index cheaply.
#include <string.h>

#include "cuda_common.cuh"

namespace {

enum MapMode : int8_t { MAP_ID = 0, MAP_ROLL = 1, MAP_REPEAT = 2, MAP_ROW = 3, MAP_COL = 4 };

struct MapGeom {
  int ndim;
  int tri;     // 0: none, 1: tril (zero col - row > k), 2: triu (zero col - row < k)
  int64_t k;
  int64_t oshape[INGOT_MAX_DIMS];
  int64_t ostride[INGOT_MAX_DIMS];  // elements
  int64_t istride[INGOT_MAX_DIMS];  // elements (may be negative: flip)
  int64_t iarg[INGOT_MAX_DIMS];     // roll shift / repeat input size
  int8_t mode[INGOT_MAX_DIMS];
};

struct alignas(8) b16_t { uint64_t lo, hi; };

template <class T>
__global__ void map_copy_kernel(char *__restrict__ out, const char *__restrict__ in, MapGeom g,
                                int64_t n) {
  CUDA_GRID_STRIDE(i, n) {
    int64_t r = i, oo = 0, io = 0, row = 0, col = 0;
    for (int d = g.ndim - 1; d >= 0; d--) {
      int64_t sz = g.oshape[d];
      int64_t c = r % sz;
      r /= sz;
      oo += c * g.ostride[d];
      int64_t ic = c;
      switch (g.mode[d]) {
      case MAP_ROLL: ic = c >= g.iarg[d] ? c - g.iarg[d] : c - g.iarg[d] + sz; break;
      case MAP_REPEAT: ic = c % g.iarg[d]; break;
      case MAP_ROW: row = c; break;
      case MAP_COL: col = c; break;
      default: break;
      }
      io += ic * g.istride[d];
    }
    T *o = (T *)(out + oo * (int64_t)sizeof(T));
    // col - row cannot overflow: both are in [0, 2^63).
    bool zero = (g.tri == 1 && col - row > g.k) || (g.tri == 2 && col - row < g.k);
    *o = zero ? T{} : *(const T *)(in + io * (int64_t)sizeof(T));
  }
}

// Drop size-1 identity dims and merge contiguous identity runs (outer into
// inner order, as make_geom does).
MapGeom coalesce(const MapGeom &in) {
  MapGeom g = in;
  g.ndim = 0;
  for (int d = 0; d < in.ndim; d++) {
    bool id = in.mode[d] == MAP_ID;
    if (id && in.oshape[d] == 1) continue;
    if (id && g.ndim > 0 && g.mode[g.ndim - 1] == MAP_ID &&
        g.ostride[g.ndim - 1] == in.ostride[d] * in.oshape[d] &&
        g.istride[g.ndim - 1] == in.istride[d] * in.oshape[d]) {
      g.oshape[g.ndim - 1] *= in.oshape[d];
      g.ostride[g.ndim - 1] = in.ostride[d];
      g.istride[g.ndim - 1] = in.istride[d];
      continue;
    }
    int e = g.ndim++;
    g.oshape[e] = in.oshape[d];
    g.ostride[e] = in.ostride[d];
    g.istride[e] = in.istride[d];
    g.iarg[e] = in.iarg[d];
    g.mode[e] = in.mode[d];
  }
  return g;
}

ingot_status launch_map(void *out, const void *in, int es, const MapGeom &g0, int64_t n,
                        cudaStream_t s) {
  if (n == 0) return INGOT_OK;
  MapGeom g = coalesce(g0);
  const int threads = 256;
  unsigned blocks = grid_for(n, threads);
  char *o = (char *)out;
  const char *i = (const char *)in;
  switch (es) {
  case 1: map_copy_kernel<uint8_t><<<blocks, threads, 0, s>>>(o, i, g, n); break;
  case 2: map_copy_kernel<uint16_t><<<blocks, threads, 0, s>>>(o, i, g, n); break;
  case 4: map_copy_kernel<uint32_t><<<blocks, threads, 0, s>>>(o, i, g, n); break;
  case 8: map_copy_kernel<uint64_t><<<blocks, threads, 0, s>>>(o, i, g, n); break;
  case 16: map_copy_kernel<b16_t><<<blocks, threads, 0, s>>>(o, i, g, n); break;
  default: return ingot_set_error(INGOT_ERR_DTYPE, "cuda shape: element size %d", es);
  }
  return launch_status("shape copy kernel");
}

// Identity geometry of out (its strides) read from in (its strides).
MapGeom identity_geom(const ingot_tensor *out, const ingot_tensor *in) {
  MapGeom g;
  memset(&g, 0, sizeof g);
  g.ndim = ingot_ndim(out);
  for (int d = 0; d < g.ndim; d++) {
    g.oshape[d] = ingot_shape(out)[d];
    g.ostride[d] = ingot_strides(out)[d];
    g.istride[d] = ingot_strides(in)[d];
    g.mode[d] = MAP_ID;
  }
  return g;
}

int elem_size(const ingot_tensor *t) { return (int)ingot_dtype_size(ingot_dtype_of(t)); }

ingot_status k_cat(ingot_op_args *a) {
  ingot_tensor *out = a->out[0];
  ingot_status st = cuda_use_device_of(out);
  if (st) return st;
  cudaStream_t s = stream_of(out);
  int dim = (int)a->iarg[0];
  int es = elem_size(out);
  int64_t pos = 0;
  for (int i = 0; i < a->nin && st == INGOT_OK; i++) {
    ingot_tensor *in = a->in[i];
    MapGeom g = identity_geom(in, in);  // in's shape
    for (int d = 0; d < g.ndim; d++) g.ostride[d] = ingot_strides(out)[d];
    char *dst = (char *)ingot_tensor_data(out) + pos * ingot_strides(out)[dim] * (int64_t)es;
    st = launch_map(dst, ingot_tensor_data(in), es, g, ingot_numel(in), s);
    pos += ingot_shape(in)[dim];
  }
  return st;
}

ingot_status k_flip(ingot_op_args *a) {
  ingot_tensor *in = a->in[0], *out = a->out[0];
  int64_t n = ingot_numel(out);
  if (n == 0) return INGOT_OK;
  ingot_status st = cuda_use_device_of(out);
  if (st) return st;
  int es = elem_size(out);
  MapGeom g = identity_geom(out, in);
  int64_t off = 0;  // elements from in's first element to the flipped start
  for (int d = 0; d < g.ndim; d++) {
    if (a->dims & (1u << d)) {
      off += (g.oshape[d] - 1) * g.istride[d];
      g.istride[d] = -g.istride[d];
    }
  }
  const char *src = (const char *)ingot_tensor_data(in) + off * es;
  return launch_map(ingot_tensor_data(out), src, es, g, n, stream_of(out));
}

ingot_status k_roll(ingot_op_args *a) {
  ingot_tensor *in = a->in[0], *out = a->out[0];
  int64_t n = ingot_numel(out);
  if (n == 0) return INGOT_OK;
  ingot_status st = cuda_use_device_of(out);
  if (st) return st;
  MapGeom g = identity_geom(out, in);
  for (int d = 0; d < g.ndim; d++) {
    if (a->iarg[d] != 0) {
      g.mode[d] = MAP_ROLL;
      g.iarg[d] = a->iarg[d];
    }
  }
  return launch_map(ingot_tensor_data(out), ingot_tensor_data(in), elem_size(out), g, n,
                    stream_of(out));
}

ingot_status k_repeat(ingot_op_args *a) {
  ingot_tensor *in = a->in[0], *out = a->out[0];
  int64_t n = ingot_numel(out);
  if (n == 0) return INGOT_OK;
  ingot_status st = cuda_use_device_of(out);
  if (st) return st;
  MapGeom g = identity_geom(out, in);
  for (int d = 0; d < g.ndim; d++) {
    int64_t isz = ingot_shape(in)[d];  // > 0: out is non-empty
    if (isz == 1) {
      g.istride[d] = 0;  // broadcast: stays an identity dim and can merge
    } else if (isz != g.oshape[d]) {
      g.mode[d] = MAP_REPEAT;
      g.iarg[d] = isz;
    }
  }
  return launch_map(ingot_tensor_data(out), ingot_tensor_data(in), elem_size(out), g, n,
                    stream_of(out));
}

ingot_status triangle(ingot_op_args *a, bool lower) {
  ingot_tensor *in = a->in[0], *out = a->out[0];
  int64_t n = ingot_numel(out);
  if (n == 0) return INGOT_OK;
  ingot_status st = cuda_use_device_of(out);
  if (st) return st;
  MapGeom g = identity_geom(out, in);
  g.mode[g.ndim - 2] = MAP_ROW;
  g.mode[g.ndim - 1] = MAP_COL;
  g.tri = lower ? 1 : 2;
  g.k = a->iarg[0];
  return launch_map(ingot_tensor_data(out), ingot_tensor_data(in), elem_size(out), g, n,
                    stream_of(out));
}

ingot_status k_tril(ingot_op_args *a) { return triangle(a, true); }
ingot_status k_triu(ingot_op_args *a) { return triangle(a, false); }

}  // namespace

extern "C" void cuda_register_shape(ingot_backend *be) {
  be->kernels[INGOT_OP_CAT] = k_cat;
  be->kernels[INGOT_OP_FLIP] = k_flip;
  be->kernels[INGOT_OP_ROLL] = k_roll;
  be->kernels[INGOT_OP_REPEAT] = k_repeat;
  be->kernels[INGOT_OP_TRIL] = k_tril;
  be->kernels[INGOT_OP_TRIU] = k_triu;
}
