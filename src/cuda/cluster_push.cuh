// Pushes into another block's shared memory in the same cluster that the
// receiver counts in bytes on an mbarrier of its own (sm_90 st.async with
// complete_tx): the receiver waits for the bytes it expects, and no
// cluster-wide barrier (whose release costs a GPU-scope memory barrier and
// an L1 invalidate) is needed to make the values visible.
//
// Protocol: the receiver's thread 0 calls push_bar_init, then push_bar_expect
// with the bytes that will arrive; the init is published to the cluster by
// the next cluster barrier (arrive and wait) before any block pushes. Senders
// call push_f32 / push_f32x2 with the receiver's rank; every receiver thread
// calls push_bar_wait before it reads what was pushed. A block may exit once
// its own bar has completed (everything pushed into it has landed).
#pragma once

#include <stdint.h>

#include "cuda_common.cuh"  // smem_u32

// The address of this block's shared p in block `rank` of the cluster.
__device__ __forceinline__ uint32_t cluster_addr(const void *p, uint32_t rank) {
  uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(smem_u32(p)), "r"(rank));
  return r;
}

// One arrival (push_bar_expect's) completes phase 0 once the bytes are in.
__device__ __forceinline__ void push_bar_init(uint64_t *bar) {
  asm volatile(
      "mbarrier.init.shared::cta.b64 [%0], 1;\n\t"
      "fence.mbarrier_init.release.cluster;" ::"r"(smem_u32(bar))
      : "memory");
}

__device__ __forceinline__ void push_bar_expect(uint64_t *bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)),
               "r"(bytes)
               : "memory");
}

// v into the receiver's shared memory at dst (this block's address of the
// same variable), counted on the receiver's bar.
__device__ __forceinline__ void push_f32(const float *dst, float v, const uint64_t *bar,
                                         uint32_t rank) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];" ::"r"(
                   cluster_addr(dst, rank)),
               "r"(__float_as_uint(v)), "r"(cluster_addr(bar, rank))
               : "memory");
}

// Two floats to an 8-byte aligned dst.
__device__ __forceinline__ void push_f32x2(const float *dst, float a, float b, const uint64_t *bar,
                                           uint32_t rank) {
  asm volatile(
      "st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.b32 [%0], {%1, %2}, [%3];" ::"r"(
          cluster_addr(dst, rank)),
      "r"(__float_as_uint(a)), "r"(__float_as_uint(b)), "r"(cluster_addr(bar, rank))
      : "memory");
}

// Until phase 0 of bar has completed: every byte pushed here has landed.
__device__ __forceinline__ void push_bar_wait(uint64_t *bar) {
  asm volatile(
      "{\n\t.reg .pred done;\n"
      "WAIT:\n\t"  // labels are local to the braces
      "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 done, [%0], 0;\n\t"
      "@!done bra WAIT;\n\t}" ::"r"(smem_u32(bar))
      : "memory");
}
