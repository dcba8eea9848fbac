// In-graph timeline of the decode kernels (a diagnostic build only: cmake
// -DINGOT_TIMELINE=ON; compiled out otherwise). ncu serialises kernels and
// cannot show what a graph replay does between them; here every block of an
// instrumented kernel records (kernel id, block, grid, %globaltimer at entry
// and at thread 0's exit) into one device buffer, which timeline.c writes to
// $INGOT_TIMELINE_OUT at exit (bench/timeline.py summarises it).
// Usage: `TL_SCOPE(kTlGemvx);` as a kernel's first statement, optionally
// `TL_MARK();` at up to twelve points of it (phases), and once in
// the file `TL_DEFINE_ATTACH(cuda_tl_attach_<file>)` (listed in timeline.c).
#pragma once

#include <stdint.h>

#include "cuda_kernels.h"

enum TlKernel : uint32_t {
  kTlGemvx = 1,
  kTlAttention = 2,
  kTlMoeBlock = 3,
  kTlSample = 4,
  kTlQgemv = 5,
  kTlGetRows = 6,
};

#ifdef INGOT_TIMELINE
namespace {

// Each translation unit's view of the buffer (no relocatable device code):
// set once by tl_attach() from the host before the unit's first launch.
__device__ cuda_tl_rec *tl_recs;
__device__ unsigned long long *tl_count;

__device__ __forceinline__ uint64_t tl_now() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

struct TlScope {
  uint32_t kid, nm = 0;
  uint64_t t0, m[CUDA_TL_MARKS] = {};
  __device__ explicit TlScope(uint32_t k) : kid(k), t0(threadIdx.x == 0 ? tl_now() : 0) {}
  __device__ void mark() {
    if (threadIdx.x == 0 && nm < CUDA_TL_MARKS) m[nm++] = tl_now();
  }
  __device__ ~TlScope() {
    if (threadIdx.x != 0 || !tl_recs) return;
    const uint64_t t1 = tl_now();  // before the atomic: its round trip is not the kernel's
    const unsigned long long i = atomicAdd(tl_count, 1ull);
    if (i >= CUDA_TL_CAP) return;
    const uint32_t b = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    cuda_tl_rec rec = {kid, b, gridDim.x * gridDim.y * gridDim.z, nm, t0, t1, {}};
    for (int k = 0; k < CUDA_TL_MARKS; k++) rec.mark[k] = m[k];
    tl_recs[i] = rec;
  }
};

// Points this unit's symbols at the process's buffer (backend setup, before
// any capture: cuda_timeline_attach_all).
inline void tl_attach() {
  cuda_tl_rec *r = nullptr;
  unsigned long long *c = nullptr;
  if (!cuda_timeline_buffers(&r, &c)) return;
  cudaMemcpyToSymbol(tl_recs, &r, sizeof r);
  cudaMemcpyToSymbol(tl_count, &c, sizeof c);
}

}  // namespace
#define TL_SCOPE(kid) TlScope tl_scope_(kid)
// A point inside the kernel (thread 0's time; at most CUDA_TL_MARKS a kernel).
#define TL_MARK() tl_scope_.mark()
// The file's attach function, called by cuda_timeline_attach_all (timeline.c).
#define TL_DEFINE_ATTACH(name) \
  extern "C" void name(void) { tl_attach(); }
#else
#define TL_SCOPE(kid) \
  do {                \
  } while (0)
#define TL_MARK() \
  do {            \
  } while (0)
#define TL_DEFINE_ATTACH(name)
#endif
