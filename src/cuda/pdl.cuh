// Programmatic dependent launch (PDL, sm_90): a decode kernel launched with
// launch_pdl may start while the kernel before it in the stream drains, so
// its blocks are resident and can prefetch weights when the input is ready.
// That hides the launch gap (~1-2 us a kernel), which is most of a decode
// step's time on small models. CUDA graphs keep the programmatic edges.
//
// The contract, for every kernel launched with launch_pdl:
//  - every block calls pdl_wait() before it reads or writes memory that an
//    earlier kernel of the stream may read or write (activations, caches,
//    outputs), and before any early return: a block that exits without it
//    could let the grid complete before its predecessor has, and the next
//    kernel's own wait would then not cover the predecessor;
//  - only immutable data (weights) is touched before pdl_wait(), or data
//    the op's caller vouches the op just before did not write
//    (ingot_rope_kv_options.settled): its writers have completed, because
//  - pdl_launch_dependents() comes only after pdl_wait() in every kernel,
//    so when a kernel starts, all kernels before its predecessor are done.
// pdl_launch_dependents() lets the next kernel's blocks launch early; without
// it they launch as this grid's blocks retire. pdl_wait() returns only once
// the thread's loads issued before it have landed (H200: a mark after it
// that uses the loaded registers comes 0.01 us later; docs/perf-notes.md,
// twenty-second session), so loads put before the wait delay its return.
// INGOT_NO_PDL (below) launches normally (same results; for A/B measurement
// and debugging).
#pragma once

#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

#include <utility>

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// The kernel family of the including file (its PDL_FAMILY, defined before
// the include): INGOT_NO_PDL=1 turns PDL off everywhere, a comma-separated
// list of families (attn, gemv, moe, moeblock, nn, qgemv, router, sample) only for
// those. A file that measured slower with PDL also defines PDL_DEFAULT_OFF:
// its launches are plain unless INGOT_PDL lists its family. A kernel may
// take a family of its own through pdl_on_for and launch_pdl_if (the MoE
// router: on, in the moe file that is off).
#ifndef PDL_FAMILY
#define PDL_FAMILY "other"
#endif
#ifndef PDL_DEFAULT_OFF
#define PDL_DEFAULT_OFF 0
#endif

// Whether the comma-separated list e names the family f.
static inline bool pdl_listed(const char *e, const char *f) {
  const size_t n = strlen(f);
  for (const char *p = e; p && (p = strstr(p, f)); p += n)
    if ((p == e || p[-1] == ',') && (p[n] == ',' || p[n] == 0)) return true;
  return false;
}

// Whether launches of the family f use PDL: sm_90+, not turned off by
// INGOT_NO_PDL, and (when default_off) listed in INGOT_PDL. Reads the
// environment and the device: callers cache it.
static inline bool pdl_on_for(const char *f, bool default_off) {
  const char *no = getenv("INGOT_NO_PDL"), *yes = getenv("INGOT_PDL");
  int dev = 0, major = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  bool off = default_off ? !(yes && pdl_listed(yes, f)) : false;
  if (no && *no && strcmp(no, "0") != 0) off = off || !strcmp(no, "1") || pdl_listed(no, f);
  return major >= 9 && !off;
}

// Whether this file's launches use PDL (read once).
static inline bool pdl_enabled() {
  static int on = -1;
  if (on < 0) on = pdl_on_for(PDL_FAMILY, PDL_DEFAULT_OFF);
  return on;
}

// kernel<<<grid, block, smem, s>>>(args...) with the PDL attribute (when
// enabled). Returns the launch's error.
template <typename... KArgs, typename... Args>
static inline cudaError_t launch_pdl_if(bool on, void (*kernel)(KArgs...), dim3 grid, dim3 block,
                                        size_t smem, cudaStream_t s, Args &&...args) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cfg.attrs = attr;
  cfg.numAttrs = on ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

// launch_pdl_if for this file's family.
template <typename... KArgs, typename... Args>
static inline cudaError_t launch_pdl(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem,
                                     cudaStream_t s, Args &&...args) {
  return launch_pdl_if(pdl_enabled(), kernel, grid, block, smem, s, std::forward<Args>(args)...);
}
