// CUDA kernel of sample_tokens (front: src/core/ops_sample.c; reference:
// ingot_sample in src/model/sample.c, which the CPU kernel calls). One launch
// does the whole step so a decode step needs no host round trip.
// - V <= kSlice (or top-p over the whole vocabulary): one block of 1024
//   threads copies the logits with the repetition penalty applied (each
//   distinct ring token once) and samples from the copy.
// - V > kSlice: block b takes logits [b * kSlice, (b + 1) * kSlice) into
//   shared memory with the penalty of its ring tokens, and writes its
//   candidates (greedy: its argmax; else its top-k) to scratch; then
//   __threadfence and an arrival ticket (a counter zeroed by a memset node
//   before the launch, or, when step is int64 [2], step[1]: zero between
//   calls, reset by the last block, so no memset node): the last block to arrive merges the
//   candidates and draws. Blocks own ascending id ranges, so "lowest id first" ties survive the
//   merge (candidates are laid out in id order of equal keys).
// Drawing: greedy is the argmax (first NaN, else the first maximum: the CPU's
// rule); else logits / temperature (NaN -> -inf), the top-k candidates by
// radix select on order-preserving keys (ties at the threshold: lowest ids,
// as the CPU's total order), a bitonic sort by (logit desc, id asc), softmax
// in double and the top-p cut summed serially in the CPU's order, and the
// same Philox draw (seed, step).
// Finally the token is written, hist[step % W] = token and step += 1 (and,
// from ingot_sample_tokens_into, tok = token and pos += 1).
// Both kernels launch with PDL (pdl.cuh) and wait before their first read.
// Sampling with temperature handles at most kMaxCand candidates (top_k, or
// V when top_k is off).
#include <cub/block/block_scan.cuh>
#include <math.h>

#include "../core/philox.h"
#include "cuda_common.cuh"
#define PDL_FAMILY "sample"  // INGOT_NO_PDL=sample turns this file's PDL off
#include "pdl.cuh"
#include "timeline.cuh"

namespace {

const int kThreads = 1024;
const int kMaxCand = 1024;  // = kThreads: one sort element per thread
const int kSlice = 4096;    // logits a block takes in the many-block path

// The CPU argmax rule: a beats b if it is NaN and b is not, or both are
// numbers and a > b, or they tie (both NaN or equal) and a comes first.
__device__ __forceinline__ bool argmax_better(float a, int ia, float b, int ib) {
  bool na = isnan(a), nb = isnan(b);
  if (na != nb) return na;
  if (!na && a != b) return a > b;
  return ia < ib;
}

// Candidate order of the CPU (cand_cmp): logit descending, id ascending.
__device__ __forceinline__ bool cand_before(float a, int ia, float b, int ib) {
  return a > b || (a == b && ia < ib);
}

// Monotone unsigned key of a logit (NaN already replaced, -0 folded into +0).
__device__ __forceinline__ uint32_t order_key(float l) {
  uint32_t u = __float_as_uint(l);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ float cand_logit(float w, float temp) {
  float l = w / temp;
  if (isnan(l)) return -INFINITY;
  return l == 0.f ? 0.f : l;
}

struct Params {
  const float *logits;
  float *work;    // single block: [V] penalised logits
  float *cand_l;  // many blocks: per block, its argmax or kb candidates
  int *cand_i;
  unsigned *ticket;  // many blocks: arrivals (zeroed before the launch)
  int64_t *step;
  int32_t *hist;  // may be NULL
  int32_t *out;
  void *tok;     // may be NULL: also gets the token (int64 when tok64, else int32)
  int32_t *pos;  // may be NULL: incremented
  bool tok64;
  int V, W, top_k, kb;
  float temp, top_p, penalty;
  uint64_t seed;
};

// Penalised logits, raw: element i of the range the block holds.
struct RawSrc {
  const float *v;
  int base;
  float temp;
  __device__ float raw(int i) const { return v[i]; }
  __device__ float logit(int i) const { return cand_logit(v[i], temp); }
  __device__ int id(int i) const { return base + i; }
};
// Candidates of the blocks (logits already divided by the temperature).
struct CandSrc {
  const float *l;
  const int *ids;
  __device__ float raw(int i) const { return l[i]; }
  __device__ float logit(int i) const { return l[i]; }
  __device__ int id(int i) const { return ids[i]; }
};

struct Shared {
  cub::BlockScan<int, kThreads>::TempStorage scan;
  float cl[kMaxCand];
  int ci[kMaxCand];
  double cp[kMaxCand];
  unsigned bins[256];
  uint32_t prefix, mask;
  int remaining, ngt, token, last;
};

// v[i - lo] (i in [lo, lo + n)) with the repetition penalty of the ring's
// tokens in that range, each distinct token once (its first ring slot).
__device__ void penalise(const Params &P, float *v, int lo, int n) {
  if (!P.hist || P.penalty == 1.f || !(P.penalty > 0)) return;
  for (int i = threadIdx.x; i < P.W; i += kThreads) {
    int t = P.hist[i];
    if (t < lo || t >= lo + n || t >= P.V) continue;
    bool seen = false;
    for (int j = 0; j < i && !seen; j++) seen = P.hist[j] == t;
    if (!seen) v[t - lo] = v[t - lo] > 0 ? v[t - lo] / P.penalty : v[t - lo] * P.penalty;
  }
}

// (best, bi) = the better of itself and (b, ib) by argmax_better (id
// 0x7fffffff: no element).
__device__ __forceinline__ void argmax_merge(float &best, int &bi, float b, int ib) {
  if (ib != 0x7fffffff && (bi == 0x7fffffff || argmax_better(b, ib, best, bi))) best = b, bi = ib;
}

// The argmax over the warp's lanes, in every lane (argmax_better is a total
// order on (value, id): the butterfly gives every lane the same winner).
__device__ __forceinline__ void warp_argmax(float &best, int &bi) {
  for (int o = 16; o > 0; o >>= 1)
    argmax_merge(best, bi, __shfl_xor_sync(0xffffffffu, best, o),
                 __shfl_xor_sync(0xffffffffu, bi, o));
}

// The block's argmax of src[0, n) (by raw value) into sh.cl[0], sh.ci[0] (an
// id): per thread, per warp (shuffles), then warp 0 over the kThreads / 32
// warps' winners (two barriers).
template <class Src>
__device__ void block_argmax(const Src &src, int n, Shared &sh) {
  static_assert(kThreads == 32 * 32, "warp 0 merges one winner a lane");
  const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
  float best = NAN;
  int bi = 0x7fffffff;
  for (int i = tid; i < n; i += kThreads) argmax_merge(best, bi, src.raw(i), src.id(i));
  warp_argmax(best, bi);
  if (lane == 0) sh.cl[w] = best, sh.ci[w] = bi;
  __syncthreads();
  if (w == 0) {
    best = sh.cl[lane], bi = sh.ci[lane];
    warp_argmax(best, bi);
    if (lane == 0) sh.cl[0] = best, sh.ci[0] = bi;
  }
  __syncthreads();
}

// The K (<= kMaxCand) best of src[0, n) into sh.cl/sh.ci[0, min(K, n)) (keys
// above the K-th, then the first ones equal to it, in src order), the rest of
// the kMaxCand slots padding that sorts last.
template <class Src>
__device__ void select_top(const Src &src, int n, int K, Shared &sh) {
  const int tid = threadIdx.x;
  // Each thread owns a contiguous range, so ranks follow src order.
  int per = (n + kThreads - 1) / kThreads, lo = min(tid * per, n), hi = min(lo + per, n);
  bool all = K >= n;
  if (tid == 0) sh.prefix = 0, sh.mask = 0, sh.remaining = all ? n : K;
  __syncthreads();
  if (!all) {  // radix select of the K-th largest key
    for (int shift = 24; shift >= 0; shift -= 8) {
      for (int b = tid; b < 256; b += kThreads) sh.bins[b] = 0;
      __syncthreads();
      uint32_t prefix = sh.prefix, mask = sh.mask;
      for (int i = lo; i < hi; i++) {
        uint32_t k = order_key(src.logit(i));
        if ((k & mask) == prefix) atomicAdd(&sh.bins[(k >> shift) & 255u], 1u);
      }
      __syncthreads();
      if (tid == 0) {
        int rem = sh.remaining, above = 0, b = 255;
        for (; b > 0 && above + (int)sh.bins[b] < rem; b--) above += (int)sh.bins[b];
        sh.remaining = rem - above;
        sh.prefix = prefix | ((uint32_t)b << shift);
        sh.mask = mask | (255u << shift);
      }
      __syncthreads();
    }
  }
  // Candidates: every key above the threshold, then the first remaining
  // ones equal to it (everything when K >= n).
  uint32_t thr = sh.prefix;
  int n_gt = 0, n_eq = 0;
  for (int i = lo; i < hi; i++) {
    uint32_t k = order_key(src.logit(i));
    if (all)
      n_eq++;
    else if (k > thr)
      n_gt++;
    else if (k == thr)
      n_eq++;
  }
  int gt_off, eq_off;
  typedef cub::BlockScan<int, kThreads> Scan;
  Scan(sh.scan).ExclusiveSum(n_gt, gt_off);
  __syncthreads();
  Scan(sh.scan).ExclusiveSum(n_eq, eq_off);
  if (tid == kThreads - 1) sh.ngt = gt_off + n_gt;
  sh.cl[tid] = -INFINITY;
  sh.ci[tid] = 0x7fffffff;  // padding sorts last
  __syncthreads();
  int take_eq = sh.remaining, ngt = all ? 0 : sh.ngt;
  for (int i = lo; i < hi; i++) {
    float l = src.logit(i);
    uint32_t k = order_key(l);
    if (!all && k > thr) {
      sh.cl[gt_off] = l, sh.ci[gt_off] = src.id(i), gt_off++;
    } else if (all || k == thr) {
      if (eq_off < take_eq) sh.cl[ngt + eq_off] = l, sh.ci[ngt + eq_off] = src.id(i);
      eq_off++;
    }
  }
  __syncthreads();
}

// Sort sh's candidates, cut, draw: the token into sh.token.
__device__ void sort_and_draw(const Params &P, int K, Shared &sh) {
  const int tid = threadIdx.x;
  for (int k = 2; k <= kMaxCand; k <<= 1) {  // bitonic sort, one entry per thread
    for (int j = k >> 1; j > 0; j >>= 1) {
      int ixj = tid ^ j;
      if (ixj > tid) {
        bool up = (tid & k) == 0;
        bool swap = up ? cand_before(sh.cl[ixj], sh.ci[ixj], sh.cl[tid], sh.ci[tid])
                       : cand_before(sh.cl[tid], sh.ci[tid], sh.cl[ixj], sh.ci[ixj]);
        if (swap) {
          float tl = sh.cl[tid];
          int ti = sh.ci[tid];
          sh.cl[tid] = sh.cl[ixj], sh.ci[tid] = sh.ci[ixj];
          sh.cl[ixj] = tl, sh.ci[ixj] = ti;
        }
      }
      __syncthreads();
    }
  }
  if (tid < K) sh.cp[tid] = exp((double)sh.cl[tid] - (double)sh.cl[0]);
  __syncthreads();
  if (tid == 0) {  // serial sums in the CPU's order
    int n = K;
    double sum = 0;
    for (int i = 0; i < n; i++) sum += sh.cp[i];
    if (P.top_p > 0 && P.top_p < 1) {
      double cum = 0;
      for (int i = 0; i < n; i++) {
        cum += sh.cp[i] / sum;
        if (cum >= P.top_p) {
          n = i + 1;
          break;
        }
      }
      sum = 0;
      for (int i = 0; i < n; i++) sum += sh.cp[i];
    }
    philox4 b = philox4x32_10(P.seed, (uint64_t)*P.step);
    double u = (double)(((uint64_t)b.v[0] << 21) ^ (b.v[1] >> 11)) * 0x1p-53 * sum;
    int tok = sh.ci[n - 1];
    double cum = 0;
    for (int i = 0; i < n; i++) {
      cum += sh.cp[i];
      if (u < cum) {
        tok = sh.ci[i];
        break;
      }
    }
    sh.token = tok;
  }
  __syncthreads();
}

__device__ void finish(const Params &P, int token) {
  if (threadIdx.x == 0) {
    int64_t st = *P.step;
    *P.out = token;
    if (P.hist) P.hist[(uint64_t)st % (uint64_t)P.W] = token;
    *P.step = st + 1;
    if (P.tok && P.tok64) *(int64_t *)P.tok = token;
    if (P.tok && !P.tok64) *(int32_t *)P.tok = token;
    if (P.pos) *P.pos += 1;
  }
}

__device__ int top_k_of(const Params &P) { return P.top_k > 0 && P.top_k < P.V ? P.top_k : P.V; }

__global__ void __launch_bounds__(kThreads) sample_kernel(Params P) {
  TL_SCOPE(kTlSample);
  __shared__ Shared sh;
  const int V = P.V;
  pdl_wait();  // the logits come from the previous kernel
  pdl_launch_dependents();
  for (int i = threadIdx.x; i < V; i += kThreads) P.work[i] = P.logits[i];
  __syncthreads();
  penalise(P, P.work, 0, V);
  __syncthreads();
  RawSrc src{P.work, 0, P.temp};
  if (!(P.temp > 0)) {
    block_argmax(src, V, sh);
    finish(P, sh.ci[0]);
    return;
  }
  int K = top_k_of(P);
  select_top(src, V, K, sh);
  sort_and_draw(P, K, sh);
  finish(P, sh.token);
}

__global__ void __launch_bounds__(kThreads) sample_many_kernel(Params P) {
  TL_SCOPE(kTlSample);
  __shared__ Shared sh;
  __shared__ float sl[kSlice];
  const int b = blockIdx.x, nb = gridDim.x, lo = b * kSlice, n = min(kSlice, P.V - lo);
  pdl_wait();  // the logits come from the previous kernel
  pdl_launch_dependents();
  for (int i = threadIdx.x; i < n; i += kThreads) sl[i] = P.logits[lo + i];
  __syncthreads();
  penalise(P, sl, lo, n);
  __syncthreads();
  RawSrc src{sl, lo, P.temp};
  bool greedy = !(P.temp > 0);
  int K = top_k_of(P);
  if (greedy) {
    block_argmax(src, n, sh);
    if (threadIdx.x == 0) P.cand_l[b] = sh.cl[0], P.cand_i[b] = sh.ci[0];
  } else {
    select_top(src, n, K, sh);  // P.kb = min(K, kSlice) slots; padding past n
    for (int i = threadIdx.x; i < P.kb; i += kThreads)
      P.cand_l[(int64_t)b * P.kb + i] = sh.cl[i], P.cand_i[(int64_t)b * P.kb + i] = sh.ci[i];
  }
  __threadfence();  // this block's candidates are visible before its arrival counts
  __syncthreads();
  if (threadIdx.x == 0) sh.last = atomicAdd(P.ticket, 1u) == (unsigned)(nb - 1);
  __syncthreads();
  if (!sh.last) return;                 // block-uniform
  if (threadIdx.x == 0) *P.ticket = 0;  // every block has arrived: ready for the next call
  __threadfence();  // the other blocks' candidates (fenced before their arrival)
  CandSrc cs{P.cand_l, P.cand_i};
  if (greedy) {
    block_argmax(cs, nb, sh);
    finish(P, sh.ci[0]);
    return;
  }
  select_top(cs, nb * P.kb, K, sh);
  sort_and_draw(P, K, sh);
  finish(P, sh.token);
}

ingot_status k_sample_tokens(ingot_op_args *a) {
  ingot_tensor *out = a->out[0];
  ingot_status st = cuda_use_device_of(out);
  if (st) return st;
  Params P;
  P.V = (int)ingot_numel(a->in[0]);
  P.top_k = a->iarg[0] > INT32_MAX ? INT32_MAX : a->iarg[0] < 0 ? 0 : (int)a->iarg[0];
  P.temp = (float)a->farg[0];
  P.top_p = (float)a->farg[1];
  P.penalty = (float)a->farg[2];
  P.seed = (uint64_t)a->iarg[1];
  int K = P.top_k > 0 && P.top_k < P.V ? P.top_k : P.V;
  if (P.temp > 0 && K > kMaxCand)
    return ingot_set_error(INGOT_ERR_UNSUPPORTED,
                           "sample_tokens: %d candidates (top_k %d, vocab %d) exceed the %d "
                           "that cuda samples from; set top_k in [1, %d]",
                           K, P.top_k, P.V, kMaxCand, kMaxCand);
  P.logits = (const float *)ingot_tensor_data(a->in[0]);
  P.step = (int64_t *)ingot_tensor_data(a->in[1]);
  P.hist = a->nin > 2 && a->in[2] ? (int32_t *)ingot_tensor_data(a->in[2]) : nullptr;
  P.tok = a->nin > 3 && a->in[3] ? ingot_tensor_data(a->in[3]) : nullptr;
  P.tok64 = P.tok && ingot_dtype_of(a->in[3]) == INGOT_I64;
  P.pos = a->nin > 4 && a->in[4] ? (int32_t *)ingot_tensor_data(a->in[4]) : nullptr;
  P.W = P.hist ? (int)ingot_numel(a->in[2]) : 0;
  P.out = (int32_t *)ingot_tensor_data(out);
  P.work = P.cand_l = nullptr;
  P.kb = 0;
  P.cand_i = nullptr;
  P.ticket = nullptr;
  int dev = ingot_device_of(out).index;
  cudaStream_t s = stream_of(out);
  int nb = (P.V + kSlice - 1) / kSlice;
  if (nb == 1) {
    P.work = (float *)cuda_scratch_alloc(dev, (size_t)P.V * sizeof(float), s);
    if (!P.work) return ingot_last_status();
    launch_pdl(sample_kernel, dim3(1), dim3(kThreads), 0, s, P);
    st = launch_status("sample_tokens kernel");
    cuda_scratch_free(dev, P.work, s);
    return st;
  }
  P.kb = P.temp > 0 ? K : 1;  // K <= kMaxCand < kSlice
  size_t ncand = (size_t)nb * (size_t)P.kb;
  char *scratch = (char *)cuda_scratch_alloc(dev, 256 + ncand * (sizeof(float) + sizeof(int)), s);
  if (!scratch) return ingot_last_status();
  // step [2]: the ticket is step[1] (zero between calls); else a memset node.
  const bool own_ticket = ingot_numel(a->in[1]) == 2;
  P.ticket = own_ticket ? (unsigned *)(P.step + 1) : (unsigned *)scratch;
  P.cand_l = (float *)(scratch + 256);
  P.cand_i = (int *)(P.cand_l + ncand);
  if (!own_ticket)
    st = cuda_check(cudaMemsetAsync(P.ticket, 0, sizeof(unsigned), s), "cudaMemsetAsync");
  if (!st) {
    launch_pdl(sample_many_kernel, dim3(nb), dim3(kThreads), 0, s, P);
    st = launch_status("sample_tokens kernel");
  }
  cuda_scratch_free(dev, scratch, s);
  return st;
}

}  // namespace

TL_DEFINE_ATTACH(cuda_tl_attach_sample)

extern "C" void cuda_register_sample(ingot_backend *be) {
  be->kernels[INGOT_OP_SAMPLE_TOKENS] = k_sample_tokens;
}
