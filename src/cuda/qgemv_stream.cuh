// The streaming GEMV for M = 1 over many rows (an LM head: SmolLM2's Q8_0
// head is 49152 rows, 30 MB): qgemv_smem_kernel's tasks and arithmetic, but
// each warp's row spans are copied global -> shared with cp.async into a
// ring of STAGES slots, so STAGES - 1 spans (not one) are in flight while a
// warp computes: the register double buffer of qgemv_smem_kernel keeps ~40
// KB in flight an SM, short of the ~100 KB that 4.8 TB/s at ~2 us loaded
// latency asks for (Little's law). No registers hold the spans in flight.
#pragma once

#include "qgemv_kernels.cuh"

namespace qgemv {

constexpr int kStreamMaxStages = 4;

__device__ __forceinline__ void cp_async16(void *dst, const void *src) {
  const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;" ::: "memory");
}
// Waits until at most N of this thread's committed groups are pending.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// This lane's 16-byte pieces of the task at rows [r0, r0 + rows) into wb.
__device__ __forceinline__ void copy_task_async(const uint8_t *__restrict__ w, int64_t rs,
                                                int64_t r0, int64_t rows, int lane, uint8_t *wb) {
  const int4 *src = reinterpret_cast<const int4 *>(w + r0 * rs);
  int4 *dst = reinterpret_cast<int4 *>(wb);
  const int nvec = (int)(rows * rs / 16);
  for (int i = lane; i < nvec; i += 32) cp_async16(dst + i, src + i);
}

// Host guarantees as qgemv_smem_kernel's (M = 1), with dynamic shared memory
// = smem_x_bytes(1, k) + warps * STAGES * slot, slot = smem_warp_bytes(rw *
// rs) rounded up to 16. Every lane commits one group per stage (empty ones
// too) so that the wait counts agree over the warp.
template <int TYPE, int STAGES>
__global__ void __launch_bounds__(kSmemMaxThreads, smem_blocks_per_sm(TYPE, 1))
    qgemv_stream_kernel(const uint8_t *__restrict__ w, int64_t rs, const float *__restrict__ x,
                        int k, int64_t n, float *__restrict__ y, const float *__restrict__ res,
                        const float *__restrict__ norm, float eps, int lpr, int rw, int slot,
                        bool xvec, bool glu) {
  static_assert(STAGES >= 2 && STAGES <= kStreamMaxStages, "ring of 2 to 4 slots");
  constexpr int C = kRowsPerGroup;
  extern __shared__ int4 smem_raw[];
  const int units = (k + ggml::kUnit - 1) / ggml::kUnit;
  const int lane = threadIdx.x & 31, wib = threadIdx.x >> 5, nw = blockDim.x >> 5;
  const int sub = lane % lpr, grp = lane / lpr;
  float *xs = reinterpret_cast<float *>(smem_raw);
  float *inv = xs + units * kXSkew;
  uint8_t *ring =
      reinterpret_cast<uint8_t *>(smem_raw) + smem_x_bytes(1, k) + (int64_t)wib * STAGES * slot;
  const int64_t ntask = (n + rw - 1) / rw, step = (int64_t)gridDim.x * nw;
  const int64_t first = (int64_t)blockIdx.x * nw + wib;
  // The first STAGES - 1 spans (weights only) are in flight while the
  // previous kernel drains (PDL) and x is staged.
#pragma unroll
  for (int s = 0; s < STAGES - 1; s++) {
    const int64_t t = first + s * step;
    if (t < ntask)
      copy_task_async(w, rs, t * rw, min((int64_t)rw, n - t * rw), lane, ring + s * slot);
    cp_async_commit();
  }
  pdl_wait();
  pdl_launch_dependents();
  stage_x(x, 1, k, xvec, glu, norm, eps, xs, inv);
  int it = 0;
  // The loop bound is uniform over the warp: every lane reaches the shuffles.
  for (int64_t task = first; task < ntask; task += step, it++) {
    // The slot of the span STAGES - 1 tasks ahead was read by the previous
    // iteration (ended by __syncwarp).
    const int64_t ahead = task + (int64_t)(STAGES - 1) * step;
    if (ahead < ntask)
      copy_task_async(w, rs, ahead * rw, min((int64_t)rw, n - ahead * rw), lane,
                      ring + ((it + STAGES - 1) % STAGES) * slot);
    cp_async_commit();
    cp_async_wait<STAGES - 1>();  // this task's group (committed STAGES - 1 groups ago) landed
    __syncwarp();                 // ... for every lane's pieces
    const uint8_t *wb = ring + (it % STAGES) * slot;
    const int64_t r0 = task * rw, rows = min((int64_t)rw, n - r0);
    float acc[C][1];
#pragma unroll
    for (int c = 0; c < C; c++) acc[c][0] = 0.f;
    const int lr0 = grp * C;  // this group's first row within the task
    if (lr0 < rows) {
      for (int u = sub; u < units; u += lpr) {
        float v[C][ggml::kUnit];
#pragma unroll
        for (int c = 0; c < C; c++) {
          if (lr0 + c < rows) {
            ggml::decode_unit<TYPE, true>(wb + (lr0 + c) * rs, u, k, true, v[c]);
          } else {
#pragma unroll
            for (int i = 0; i < ggml::kUnit; i++) v[c][i] = 0.f;
          }
        }
        const int rest = k - u * ggml::kUnit;
        dot_rows<1, C, true>(v, xs + u * kXSkew, units * kXSkew, 1,
                             rest < ggml::kUnit ? rest : ggml::kUnit, true, acc);
      }
    }
    group_sum<1, C>(acc, lpr);
    if (sub == 0) store_rows<1, C>(acc, r0 + lr0, r0 + rows, n, 1, y, res);
    __syncwarp();  // the slot is refilled by the next iteration
  }
  cp_async_wait<0>();  // no copy outlives the block (only empty groups remain)
}

}  // namespace qgemv
