// CUDA kernel of sample_tokens (front: src/core/ops_sample.c; reference:
// ingot_sample in src/model/sample.c, which the CPU kernel calls). One block
// of 1024 threads does the whole step so a decode step needs no host round
// trip: copy the logits with the repetition penalty applied (each distinct
// ring token once), then
// - greedy: argmax (first NaN, else the first maximum: the CPU's rule);
// - else: logits / temperature (NaN -> -inf), the top-k candidates by radix
//   select on order-preserving keys (ties at the threshold: lowest ids, as the
//   CPU's total order), a bitonic sort by (logit desc, id asc), softmax in
//   double and the top-p cut summed serially in the CPU's order, and the
//   same Philox draw (seed, step).
// Finally the token is written, hist[step % W] = token and step += 1.
// Sampling with temperature handles at most kMaxCand candidates (top_k, or
// V when top_k is off).
#include <cub/block/block_scan.cuh>
#include <math.h>

#include "../core/philox.h"
#include "cuda_common.cuh"

namespace {

const int kThreads = 1024;
const int kMaxCand = 1024;  // = kThreads: one sort element per thread

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

__device__ __forceinline__ float cand_logit(const float *work, int64_t i, float temp) {
  float l = work[i] / temp;
  if (isnan(l)) return -INFINITY;
  return l == 0.f ? 0.f : l;
}

struct Params {
  const float *logits;
  float *work;  // [V] penalised logits
  int64_t *step;
  int32_t *hist;  // may be NULL
  int32_t *out;
  int V, W, top_k;
  float temp, top_p, penalty;
  uint64_t seed;
};

__global__ void __launch_bounds__(kThreads) sample_kernel(Params P) {
  typedef cub::BlockScan<int, kThreads> Scan;
  __shared__ typename Scan::TempStorage scan_tmp;
  __shared__ float cl[kMaxCand];
  __shared__ int ci[kMaxCand];
  __shared__ double cp[kMaxCand];
  __shared__ unsigned bins[256];
  __shared__ uint32_t s_prefix, s_mask;
  __shared__ int s_remaining, s_ngt, s_token;
  const int tid = threadIdx.x, V = P.V;
  float *work = P.work;
  for (int i = tid; i < V; i += kThreads) work[i] = P.logits[i];
  __syncthreads();
  if (P.hist && P.penalty != 1.f && P.penalty > 0) {
    for (int i = tid; i < P.W; i += kThreads) {
      int t = P.hist[i];
      if (t < 0 || t >= V) continue;
      bool seen = false;  // the first occurrence in the ring applies it, once
      for (int j = 0; j < i && !seen; j++) seen = P.hist[j] == t;
      if (!seen) work[t] = work[t] > 0 ? work[t] / P.penalty : work[t] * P.penalty;
    }
  }
  __syncthreads();

  if (!(P.temp > 0)) {  // greedy
    float best = work[0];
    int bi = 0;
    for (int i = tid; i < V; i += kThreads)
      if (argmax_better(work[i], i, best, bi)) best = work[i], bi = i;
    cl[tid] = best;
    ci[tid] = bi;
    __syncthreads();
    for (int s = kThreads / 2; s > 0; s >>= 1) {
      if (tid < s && argmax_better(cl[tid + s], ci[tid + s], cl[tid], ci[tid]))
        cl[tid] = cl[tid + s], ci[tid] = ci[tid + s];
      __syncthreads();
    }
    if (tid == 0) s_token = ci[0];
  } else {
    int K = P.top_k > 0 && P.top_k < V ? P.top_k : V;
    // Each thread owns a contiguous id range, so ranks follow id order.
    int per = (V + kThreads - 1) / kThreads, lo = min(tid * per, V), hi = min(lo + per, V);
    if (tid == 0) {
      s_prefix = 0, s_mask = 0, s_remaining = K;
    }
    __syncthreads();
    if (K < V) {  // radix select of the K-th largest key
      for (int shift = 24; shift >= 0; shift -= 8) {
        for (int b = tid; b < 256; b += kThreads) bins[b] = 0;
        __syncthreads();
        uint32_t prefix = s_prefix, mask = s_mask;
        for (int i = lo; i < hi; i++) {
          uint32_t k = order_key(cand_logit(work, i, P.temp));
          if ((k & mask) == prefix) atomicAdd(&bins[(k >> shift) & 255u], 1u);
        }
        __syncthreads();
        if (tid == 0) {
          int rem = s_remaining, above = 0, b = 255;
          for (; b > 0 && above + (int)bins[b] < rem; b--) above += (int)bins[b];
          s_remaining = rem - above;
          s_prefix = prefix | ((uint32_t)b << shift);
          s_mask = mask | (255u << shift);
        }
        __syncthreads();
      }
    }
    // Candidates: every key above the threshold, then the first s_remaining
    // ids equal to it (all ids when K == V).
    uint32_t thr = s_prefix;
    bool all = K >= V;
    int n_gt = 0, n_eq = 0;
    for (int i = lo; i < hi; i++) {
      uint32_t k = order_key(cand_logit(work, i, P.temp));
      if (all)
        n_eq++;
      else if (k > thr)
        n_gt++;
      else if (k == thr)
        n_eq++;
    }
    int gt_off, eq_off;
    Scan(scan_tmp).ExclusiveSum(n_gt, gt_off);
    __syncthreads();
    Scan(scan_tmp).ExclusiveSum(n_eq, eq_off);
    if (tid == kThreads - 1) s_ngt = gt_off + n_gt;
    __syncthreads();
    int take_eq = all ? K : s_remaining, ngt = all ? 0 : s_ngt;
    cl[tid] = -INFINITY;
    ci[tid] = 0x7fffffff;  // padding sorts last
    __syncthreads();
    for (int i = lo; i < hi; i++) {
      float l = cand_logit(work, i, P.temp);
      uint32_t k = order_key(l);
      if (!all && k > thr) {
        cl[gt_off] = l, ci[gt_off] = i, gt_off++;
      } else if (all || k == thr) {
        if (eq_off < take_eq) cl[ngt + eq_off] = l, ci[ngt + eq_off] = i;
        eq_off++;
      }
    }
    __syncthreads();
    // Bitonic sort of kMaxCand entries, one per thread.
    for (int k = 2; k <= kMaxCand; k <<= 1) {
      for (int j = k >> 1; j > 0; j >>= 1) {
        int ixj = tid ^ j;
        if (ixj > tid) {
          bool up = (tid & k) == 0;
          bool swap = up ? cand_before(cl[ixj], ci[ixj], cl[tid], ci[tid])
                         : cand_before(cl[tid], ci[tid], cl[ixj], ci[ixj]);
          if (swap) {
            float tl = cl[tid];
            int ti = ci[tid];
            cl[tid] = cl[ixj], ci[tid] = ci[ixj];
            cl[ixj] = tl, ci[ixj] = ti;
          }
        }
        __syncthreads();
      }
    }
    if (tid < K) cp[tid] = exp((double)cl[tid] - (double)cl[0]);
    __syncthreads();
    if (tid == 0) {  // serial sums in the CPU's order
      int n = K;
      double sum = 0;
      for (int i = 0; i < n; i++) sum += cp[i];
      if (P.top_p > 0 && P.top_p < 1) {
        double cum = 0;
        for (int i = 0; i < n; i++) {
          cum += cp[i] / sum;
          if (cum >= P.top_p) {
            n = i + 1;
            break;
          }
        }
        sum = 0;
        for (int i = 0; i < n; i++) sum += cp[i];
      }
      philox4 b = philox4x32_10(P.seed, (uint64_t)*P.step);
      double u = (double)(((uint64_t)b.v[0] << 21) ^ (b.v[1] >> 11)) * 0x1p-53 * sum;
      int tok = ci[n - 1];
      double cum = 0;
      for (int i = 0; i < n; i++) {
        cum += cp[i];
        if (u < cum) {
          tok = ci[i];
          break;
        }
      }
      s_token = tok;
    }
  }
  __syncthreads();
  if (tid == 0) {
    int64_t st = *P.step;
    *P.out = s_token;
    if (P.hist) P.hist[(uint64_t)st % (uint64_t)P.W] = s_token;
    *P.step = st + 1;
  }
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
  P.hist = a->nin > 2 ? (int32_t *)ingot_tensor_data(a->in[2]) : nullptr;
  P.W = P.hist ? (int)ingot_numel(a->in[2]) : 0;
  P.out = (int32_t *)ingot_tensor_data(out);
  int dev = ingot_device_of(out).index;
  cudaStream_t s = stream_of(out);
  P.work = (float *)cuda_scratch_alloc(dev, (size_t)P.V * sizeof(float), s);
  if (!P.work) return ingot_last_status();
  sample_kernel<<<1, kThreads, 0, s>>>(P);
  st = launch_status("sample_tokens kernel");
  cuda_scratch_free(dev, P.work, s);
  return st;
}

}  // namespace

extern "C" void cuda_register_sample(ingot_backend *be) {
  be->kernels[INGOT_OP_SAMPLE_TOKENS] = k_sample_tokens;
}
