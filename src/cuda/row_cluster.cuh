// One thread-block cluster per row (sm_90): the row's slices sit in the registers of
// kRowClusterBlocks blocks of one cluster, so HBM is read once and written once, and the
// blocks merge their partial results through distributed shared memory (no global scratch,
// no grid barrier, one ordinary launch that graphs capture). Used by the vocabulary-sized
// softmax (softmax.cu).
//
// Layout: a row of len elements is cut into kRowClusterBlocks slices of `chunk` elements
// (a multiple of the 16-byte vector, so that a slice of a 16-byte aligned row starts
// aligned); thread t of a block holds the vectors t, t + T, ..., t + (NV - 1) T of its slice
// (T = kRowClusterThreads: consecutive threads read consecutive 16 bytes). Rows whose start
// is not 16-byte aligned are read element by element (same layout).
//
// Cluster barrier protocol of the kernels: every thread arrives (relaxed) at the start and
// waits before its block first writes into another block's shared memory (a block's shared
// memory exists only once it runs); each exchange is then remote stores, arrive (release),
// wait (acquire), local reads. No block touches another's shared memory after the last
// barrier, so blocks may exit freely.
#pragma once

#include <stdlib.h>

#include <atomic>
#include <type_traits>
#include <utility>

#include "../core/env.h"
#include "cuda_common.cuh"

constexpr int kRowClusterBlocks = 8;      // portable cluster size
constexpr int kRowClusterThreads = 1024;  // one block per SM: 20-24 values a thread in registers
constexpr int64_t kRowClusterMinLen = 16384;

// Elements per 16-byte vector.
template <class T>
struct Vec {
  static constexpr int N = 16 / (int)sizeof(T);
};

// Vectors a thread holds: 20 values for f32, 24 for 16-bit types.
template <class T>
struct RowVecs {
  static constexpr int NV = sizeof(T) == 4 ? 5 : 3;
};

// Types with a row-cluster path (loaded as 16-byte vectors, computed in float).
template <class T>
struct RowClusterType {
  static constexpr bool value = std::is_same<T, float>::value || std::is_same<T, bf16_t>::value ||
                                std::is_same<T, f16_t>::value;
};

// Longest row the cluster holds.
template <class T>
constexpr int64_t row_cluster_cap() {
  return (int64_t)kRowClusterBlocks * kRowClusterThreads * RowVecs<T>::NV * Vec<T>::N;
}

// Rows the cluster path takes: kRowClusterMinLen to the cap elements, at most 65535 rows
// (grid y), and many rows only when long (short rows leave most of a block's registers
// empty: a block per row does them better).
template <class T>
static inline bool row_cluster_fits(int64_t len, int64_t rows) {
  return len >= kRowClusterMinLen && len <= row_cluster_cap<T>() && rows <= 65535 &&
         (rows < 132 || len >= 65536);
}

// Slice length of a row of len elements: a multiple of the vector (n elements).
static inline int64_t row_cluster_chunk(int64_t len, int n) {
  int64_t c = (len + kRowClusterBlocks - 1) / kRowClusterBlocks;
  return (c + n - 1) / n * n;
}

// Per device (and per including file): 0 while cluster launches work, 1 after one was
// refused (then the callers keep to their other paths; a refusal queues nothing).
static inline std::atomic<int> *row_cluster_refused() {
  static std::atomic<int> refused[64];
  return refused;
}
// False after a refusal, or with INGOT_NO_ROW_CLUSTER=1 (read once: A/B measurements).
static inline bool row_cluster_usable(int dev) {
  static const bool off = ingot_env_on("INGOT_NO_ROW_CLUSTER");
  return !off && dev >= 0 && dev < 64 &&
         row_cluster_refused()[dev].load(std::memory_order_relaxed) == 0;
}
static inline void row_cluster_refuse(int dev) {
  if (dev >= 0 && dev < 64) row_cluster_refused()[dev].store(1, std::memory_order_relaxed);
}

// kernel<<<(kRowClusterBlocks, rows), kRowClusterThreads, 0, s>>>(args...) (the cluster
// dims are compiled into the kernel); false when refused: nothing queued, the error cleared,
// the device marked. The launch's own status (not a stale one) decides.
template <typename... KArgs, typename... Args>
static inline bool row_cluster_launch(int dev, void (*kernel)(KArgs...), int64_t rows,
                                      cudaStream_t s, Args &&...args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(kRowClusterBlocks, (unsigned)rows, 1);
  cfg.blockDim = dim3(kRowClusterThreads, 1, 1);
  cfg.stream = s;
  if (cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...) == cudaSuccess) return true;
  (void)cudaGetLastError();
  row_cluster_refuse(dev);
  return false;
}

// 16-byte load of N elements (p 16-byte aligned), converted to float.
template <class T>
__device__ __forceinline__ void load_vec(const T *p, float (&v)[Vec<T>::N]) {
  uint4 u = __ldg((const uint4 *)p);
  if constexpr (std::is_same<T, float>::value) {
    v[0] = __uint_as_float(u.x), v[1] = __uint_as_float(u.y);
    v[2] = __uint_as_float(u.z), v[3] = __uint_as_float(u.w);
  } else {
    uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {  // little endian: the lower address is the low half
      v[2 * i] = to_acc(T{(uint16_t)(w[i] & 0xffffu)});
      v[2 * i + 1] = to_acc(T{(uint16_t)(w[i] >> 16)});
    }
  }
}

template <class T>
__device__ __forceinline__ void store_vec(T *p, const float (&y)[Vec<T>::N]) {
  uint4 u;
  if constexpr (std::is_same<T, float>::value) {
    u.x = __float_as_uint(y[0]), u.y = __float_as_uint(y[1]);
    u.z = __float_as_uint(y[2]), u.w = __float_as_uint(y[3]);
  } else {
    uint32_t w[4];
#pragma unroll
    for (int i = 0; i < 4; i++)
      w[i] = (uint32_t)from_acc<T>(y[2 * i]).x | ((uint32_t)from_acc<T>(y[2 * i + 1]).x << 16);
    u.x = w[0], u.y = w[1], u.z = w[2], u.w = w[3];
  }
  *(uint4 *)p = u;
}

// Row index of element c of the thread's vector i, counted from the slice start lo.
template <class T>
__device__ __forceinline__ int64_t slice_index(int64_t lo, int i, int c) {
  return lo + ((int64_t)i * kRowClusterThreads + threadIdx.x) * Vec<T>::N + c;
}

// The thread's part of x[lo, hi) into v; elements past hi read as pad. All loads are issued
// before any is used (one memory latency).
template <class T, int NV>
__device__ __forceinline__ void slice_load(const T *x, int64_t lo, int64_t hi,
                                           float (&v)[NV][Vec<T>::N], float pad) {
  constexpr int N = Vec<T>::N;
  const bool vec = ((uintptr_t)(x + lo) & 15) == 0;
#pragma unroll
  for (int i = 0; i < NV; i++) {
    int64_t b = slice_index<T>(lo, i, 0);
    if (vec && b + N <= hi) {
      load_vec(x + b, v[i]);
    } else {
#pragma unroll
      for (int c = 0; c < N; c++) v[i][c] = b + c < hi ? (float)to_acc(x[b + c]) : pad;
    }
  }
}

// The thread's part of y[lo, hi) from o (the layout of slice_load).
template <class T, int NV>
__device__ __forceinline__ void slice_store(T *y, int64_t lo, int64_t hi,
                                            const float (&o)[NV][Vec<T>::N]) {
  constexpr int N = Vec<T>::N;
  const bool vec = ((uintptr_t)(y + lo) & 15) == 0;
#pragma unroll
  for (int i = 0; i < NV; i++) {
    int64_t b = slice_index<T>(lo, i, 0);
    if (vec && b + N <= hi) {
      store_vec(y + b, o[i]);
    } else {
#pragma unroll
      for (int c = 0; c < N; c++)
        if (b + c < hi) y[b + c] = from_acc<T>(o[i][c]);
    }
  }
}

// Slice [lo, hi) of block `rank` (empty past the row's end).
__device__ __forceinline__ void slice_bounds(int rank, int64_t chunk, int64_t len, int64_t &lo,
                                             int64_t &hi) {
  lo = (int64_t)rank * chunk;
  if (lo > len) lo = len;
  hi = lo + chunk < len ? lo + chunk : len;
}

// The cluster barrier: arrive with release (this thread's earlier writes, remote ones
// included, become visible), wait with acquire.
__device__ __forceinline__ void row_cluster_sync() {
  __cluster_barrier_arrive();
  __cluster_barrier_wait();
}

// Address of `p` (a __shared__ object of this block) in block `rank` of the cluster.
template <class P>
__device__ __forceinline__ P *row_cluster_peer(P *p, int rank) {
  return (P *)__cluster_map_shared_rank((void *)p, (unsigned)rank);
}
