// ingot_read_floor: what one decode kernel can reach on this GPU, apart from
// ingot's own kernels (docs/perf-notes.md, "H200 measurements of 2026-11-30
// (eleventh session)"). Two tables, each timed as a CUDA graph of 48
// back-to-back launches (replayed 20 times, events around the replays):
//  1. pure reads: each launch streams S bytes once (its own buffer, `stride`
//     bytes after the last one's: stride 0 = the same bytes, L2-resident;
//     1250 MB = spread over 60 GB, for TLB reach), grid and loads in flight
//     varied;
//  2. a one-row bf16 GEMV built up from the read: + the dot products and a
//     row store (compute), + an RMS norm of x (block sum), + PDL, + x loaded
//     before the weights; Qwen3-30B-A3B's q|k|v (5120 x 2048) and o (2048 x
//     4096) shapes.
// Needs 62 GB of device memory. Usage: ingot_read_floor (no arguments).
// It links nothing of ingot; it shares the weight load (ld_stream) with the
// library's kernels through src/cuda/weight_chunk.cuh.
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "weight_chunk.cuh"  // ld_stream: the streaming load ingot's GEMVs use

namespace {

void check(cudaError_t e, const char *what) {
  if (e == cudaSuccess) return;
  fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
  exit(1);
}

// Block b streams 16-byte pieces [n16 b / G, n16 (b + 1) / G), U loads a
// thread in flight; the XOR of the bytes is stored only if it hits a magic
// value (never), so nothing is optimised away.
template <int U>
__global__ void __launch_bounds__(256)
    read_kernel(const uint4 *base, long long n16, unsigned *out) {
  const long long b0 = n16 * blockIdx.x / gridDim.x, b1 = n16 * (blockIdx.x + 1) / gridDim.x;
  unsigned acc = 0;
  for (long long i = b0 + threadIdx.x; i < b1; i += 256LL * U) {
    uint4 v[U];
#pragma unroll
    for (int u = 0; u < U; u++)
      v[u] = i + 256LL * u < b1 ? ld_stream(base + i + 256LL * u) : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int u = 0; u < U; u++) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  if (acc == 0x12345678u) out[blockIdx.x] = acc;
}

__global__ void empty_kernel() {}

// F: kCompute (dots, warp sums, one store a row), kNorm (x^2 block sum),
// kPdl (launched as a programmatic dependent: griddepcontrol), kXFirst (x
// before the weights). Rows of 256 16-byte chunks (bf16 K = 2048), NX chunks
// a thread (2: K = 4096); block b owns rows [m b / G, m (b + 1) / G), thread t
// chunk t (+ 256) of each, a ring of 16 loads.
constexpr int kCompute = 1, kNorm = 2, kPdl = 4, kXFirst = 8;
template <int F, int NX>
__global__ void __launch_bounds__(256, 2)
    gemv_parts(const uint4 *w, long long m, const float *x, float *out) {
  constexpr int R = 16;
  const int t = threadIdx.x;
  const long long r0 = m * blockIdx.x / gridDim.x, r1 = m * (blockIdx.x + 1) / gridDim.x;
  const int nrows = (int)(r1 - r0), nitem = nrows * NX;
  __shared__ float part[64][8];
  __shared__ float red[8];
  uint4 wv[R];
  float xs[8 * NX];
  auto load_x = [&] {
    const float4 *x4 = reinterpret_cast<const float4 *>(x);
#pragma unroll
    for (int j = 0; j < NX; j++) {
      const float4 a = __ldg(x4 + (t + 256 * j) * 2), b = __ldg(x4 + (t + 256 * j) * 2 + 1);
      const float v[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
      for (int e = 0; e < 8; e++) xs[8 * j + e] = v[e];
    }
  };
  auto item = [&](int v) { return w + (r0 + v / NX) * 256 * NX + t + 256 * (v % NX); };
  if (F & kXFirst) {
    if (F & kPdl) asm volatile("griddepcontrol.wait;" ::: "memory");
    load_x();
  }
#pragma unroll
  for (int s = 0; s < R; s++)
    if (s < nitem) wv[s] = ld_stream(item(s));
  if (!(F & kXFirst)) {
    if (F & kPdl) asm volatile("griddepcontrol.wait;" ::: "memory");
    load_x();
  }
  if (F & kPdl) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  if (F & kNorm) {
    float ss = 0.f;
    for (int i = 0; i < 8 * NX; i++) ss += xs[i] * xs[i];
    for (int o = 16; o; o >>= 1) ss += __shfl_xor_sync(~0u, ss, o);
    if (t % 32 == 0) red[t / 32] = ss;
    __syncthreads();
    float tot = 0.f;
    for (int i = 0; i < 8; i++) tot += red[i];
    const float iv = rsqrtf(tot / (2048 * NX) + 1e-6f);
    for (int i = 0; i < 8 * NX; i++) xs[i] *= iv;
  }
  unsigned bits = 0;
  float acc = 0.f;
  for (int base = 0; base < nitem; base += R) {
#pragma unroll
    for (int s = 0; s < R; s++) {
      const int v = base + s;
      if (v >= nitem) continue;
      if (F & kCompute) {
        const uint32_t wd[4] = {wv[s].x, wv[s].y, wv[s].z, wv[s].w};
#pragma unroll
        for (int q = 0; q < 4; q++) {
          acc = fmaf(__uint_as_float(wd[q] << 16), xs[(s % NX) * 8 + 2 * q], acc);
          acc = fmaf(__uint_as_float(wd[q] & 0xffff0000u), xs[(s % NX) * 8 + 2 * q + 1], acc);
        }
        if (s % NX == NX - 1) {
          for (int o = 16; o; o >>= 1) acc += __shfl_xor_sync(~0u, acc, o);
          if (t % 32 == 0) part[v / NX][t / 32] = acc;
          acc = 0.f;
        }
      } else {
        bits ^= wv[s].x ^ wv[s].y ^ wv[s].z ^ wv[s].w;
      }
      if (v + R < nitem) wv[s] = ld_stream(item(v + R));
    }
  }
  if (F & kCompute) {
    __syncthreads();
    if (t < nrows) {
      float y = 0.f;
      for (int i = 0; i < 8; i++) y += part[t][i];
      out[r0 + t] = y;
    }
  } else if (bits == 0x12345u) {
    out[blockIdx.x] = 1.f;
  }
}

// Microseconds a launch: 48 launches of launch(l) captured once, replayed.
template <class L>
double time_chain(cudaStream_t s, L launch) {
  cudaGraph_t g;
  cudaGraphExec_t ge;
  check(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), "capture");
  for (int l = 0; l < 48; l++) launch(l);
  check(cudaStreamEndCapture(s, &g), "end capture");
  check(cudaGraphInstantiate(&ge, g, 0), "instantiate");
  for (int i = 0; i < 3; i++) check(cudaGraphLaunch(ge, s), "warm-up replay");
  cudaEvent_t e0, e1;
  check(cudaEventCreate(&e0), "event");
  check(cudaEventCreate(&e1), "event");
  check(cudaEventRecord(e0, s), "record");
  for (int i = 0; i < 20; i++) check(cudaGraphLaunch(ge, s), "replay");
  check(cudaEventRecord(e1, s), "record");
  check(cudaEventSynchronize(e1), "sync");
  float ms = 0.f;
  check(cudaEventElapsedTime(&ms, e0, e1), "elapsed");
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  return ms * 1000.0 / 20 / 48;
}

void read_table(const char *buf, size_t total, unsigned *out, int sms, cudaStream_t s) {
  struct Case {
    double mb, stride_mb;
    int blocks_per_sm, U;
  };
  const Case cases[] = {
      {0, 0, 2, 16},       {21.0, 21.0, 2, 16}, {21.0, 1250.0, 2, 16}, {21.0, 0, 2, 16},
      {21.0, 21.0, 1, 16}, {21.0, 21.0, 4, 8},  {21.0, 21.0, 8, 4},    {16.8, 16.8, 2, 16},
      {10.5, 10.5, 2, 16}, {10.5, 0, 2, 16},    {75.5, 75.5, 2, 16},   {75.5, 1250.0, 2, 16},
      {2.0, 2.0, 2, 16},   {5.0, 5.0, 2, 16},   {40.0, 40.0, 2, 16},   {622.0, 622.0, 2, 16},
  };
  printf("pure reads (a graph of 48 launches, each its own S bytes):\n");
  for (const Case &c : cases) {
    const long long n16 = (long long)(c.mb * 1e6 / 16);
    const size_t stride = (size_t)(c.stride_mb * 1e6) / 4096 * 4096;
    if (47 * stride + (size_t)n16 * 16 > total) continue;
    const int grid = sms * c.blocks_per_sm;
    const double us = time_chain(s, [&](int l) {
      const uint4 *p = reinterpret_cast<const uint4 *>(buf + (size_t)l * stride);
      if (c.mb == 0)
        empty_kernel<<<grid, 256, 0, s>>>();
      else if (c.U == 16)
        read_kernel<16><<<grid, 256, 0, s>>>(p, n16, out);
      else if (c.U == 8)
        read_kernel<8><<<grid, 256, 0, s>>>(p, n16, out);
      else
        read_kernel<4><<<grid, 256, 0, s>>>(p, n16, out);
    });
    printf("  S %6.1f MB  stride %7.1f MB  grid %4d  loads %2d: %7.2f us  %5.0f GB/s\n", c.mb,
           c.stride_mb, grid, c.U, us, c.mb ? c.mb * 1e3 / us : 0.0);
  }
}

template <int F, int NX>
void gemv_row(const char *buf, long long m, const float *x, float *out, int sms, cudaStream_t s) {
  const size_t stride = (size_t)m * 256 * NX * 16;
  const double us = time_chain(s, [&](int l) {
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(2 * sms);
    cfg.blockDim = dim3(256);
    cfg.stream = s;
    cfg.attrs = attr;
    cfg.numAttrs = (F & kPdl) ? 1 : 0;
    check(cudaLaunchKernelEx(&cfg, gemv_parts<F, NX>,
                             reinterpret_cast<const uint4 *>(buf + l * stride), m, x, out),
          "launch");
  });
  printf("  %4lld x %4d  %-8s%-5s%-4s%-8s: %6.2f us\n", m, 2048 * NX,
         F & kCompute ? "compute" : "read", F & kNorm ? "norm" : "", F & kPdl ? "pdl" : "",
         F & kXFirst ? "x-first" : "", us);
}

}  // namespace

int main() {
  const size_t total = (size_t)60 << 30;
  char *buf = nullptr;
  float *x = nullptr, *out = nullptr;
  check(cudaMalloc(&buf, total), "cudaMalloc 60 GB");
  check(cudaMemset(buf, 0x11, total), "memset");
  check(cudaMalloc(&x, 1 << 20), "cudaMalloc");
  check(cudaMalloc(&out, 1 << 20), "cudaMalloc");
  check(cudaMemset(x, 0, 1 << 20), "memset");
  int sms = 0;
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "SM count");
  cudaStream_t s;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream");
  read_table(buf, total, reinterpret_cast<unsigned *>(out), sms, s);
  printf("one-row bf16 GEMV, built up from the read (grid %d):\n", 2 * sms);
  gemv_row<0, 1>(buf, 5120, x, out, sms, s);
  gemv_row<kCompute, 1>(buf, 5120, x, out, sms, s);
  gemv_row<kCompute | kNorm, 1>(buf, 5120, x, out, sms, s);
  gemv_row<kPdl, 1>(buf, 5120, x, out, sms, s);
  gemv_row<kCompute | kPdl, 1>(buf, 5120, x, out, sms, s);
  gemv_row<kCompute | kNorm | kPdl, 1>(buf, 5120, x, out, sms, s);
  gemv_row<kCompute | kNorm | kPdl | kXFirst, 1>(buf, 5120, x, out, sms, s);
  gemv_row<0, 2>(buf, 2048, x, out, sms, s);
  gemv_row<kCompute, 2>(buf, 2048, x, out, sms, s);
  gemv_row<kCompute | kPdl, 2>(buf, 2048, x, out, sms, s);
  gemv_row<kCompute | kPdl | kXFirst, 2>(buf, 2048, x, out, sms, s);
  return 0;
}
