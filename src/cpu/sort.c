/* CPU SORT and TOPK (contracts in src/core/ops_sort.c). Every element becomes
 * an unsigned key whose order is the value order (NaN above +inf, -0.0 equal
 * to 0.0; complemented for descending / largest) paired with its position;
 * pairs sort by (key, position), which makes every sort stable. Rows run in
 * parallel: a bottom-up merge sort per short row, an LSD radix sort per long
 * row, and a bounded max-heap of size k for topk with small k over long
 * rows. */
#include <stdlib.h>
#include <string.h>

#include "cpu.h"

typedef struct pair {
  uint64_t k;
  int64_t i;
} pair;

static inline bool pless(const pair *a, const pair *b) {
  return a->k < b->k || (a->k == b->k && a->i < b->i);
}

static inline uint64_t key_f32(float x) {
  if (x != x) return UINT32_MAX;
  if (x == 0) x = 0; /* -0.0 sorts with 0.0 */
  uint32_t u;
  memcpy(&u, &x, 4);
  return (u & 0x80000000u) ? (uint32_t)~u : (u | 0x80000000u);
}

static inline uint64_t key_f64(double x) {
  if (x != x) return UINT64_MAX;
  if (x == 0) x = 0;
  uint64_t u;
  memcpy(&u, &x, 8);
  return (u >> 63) ? ~u : (u | (1ull << 63));
}

static inline uint64_t key_i64(int64_t v) { return (uint64_t)v ^ (1ull << 63); }

/* Fill p[0..n) with the keys of a row (element stride st bytes). */
static void load_keys(ingot_dtype dt, const char *x, int64_t st, int64_t n, bool flip, pair *p) {
  uint64_t fm = flip ? UINT64_MAX : 0;
  switch (dt) {
#define KEYS(T, EXPR)                                                                      \
  for (int64_t i = 0; i < n; i++) {                                                        \
    T v = *(const T *)(x + i * st);                                                        \
    p[i].k = (EXPR) ^ fm;                                                                  \
    p[i].i = i;                                                                            \
  }                                                                                        \
  break;
  case INGOT_BOOL: case INGOT_U8: KEYS(uint8_t, (uint64_t)v)
  case INGOT_I8: KEYS(int8_t, key_i64(v))
  case INGOT_I16: KEYS(int16_t, key_i64(v))
  case INGOT_I32: KEYS(int32_t, key_i64(v))
  case INGOT_I64: KEYS(int64_t, key_i64(v))
  case INGOT_F16: KEYS(uint16_t, key_f32(ingot_f16_to_f32(v)))
  case INGOT_BF16: KEYS(uint16_t, key_f32(ingot_bf16_to_f32(v)))
  case INGOT_F8E4M3FN: KEYS(uint8_t, key_f32(ingot_f8e4m3fn_to_f32(v)))
  case INGOT_F8E5M2: KEYS(uint8_t, key_f32(ingot_f8e5m2_to_f32(v)))
  case INGOT_F32: KEYS(float, key_f32(v))
  case INGOT_F64: KEYS(double, key_f64(v))
#undef KEYS
  default: break;
  }
}

/* Sort a[0..n) by (key, position); tmp holds n pairs. Returns the buffer
 * that holds the result (a or tmp). */
static pair *merge_sort(pair *a, pair *tmp, int64_t n) {
  enum { RUN = 24 };
  for (int64_t s = 0; s < n; s += RUN) {
    int64_t e = s + RUN < n ? s + RUN : n;
    for (int64_t i = s + 1; i < e; i++) {
      pair v = a[i];
      int64_t j = i;
      while (j > s && pless(&v, &a[j - 1])) a[j] = a[j - 1], j--;
      a[j] = v;
    }
  }
  pair *src = a, *dst = tmp;
  for (int64_t w = RUN; w < n; w *= 2) {
    for (int64_t lo = 0; lo < n; lo += 2 * w) {
      int64_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
      int64_t i = lo, j = mid, o = lo;
      if (mid >= hi || !pless(&src[mid], &src[mid - 1])) {
        memcpy(dst + lo, src + lo, sizeof(pair) * (size_t)(hi - lo)); /* already ordered */
        continue;
      }
      while (i < mid && j < hi) dst[o++] = pless(&src[j], &src[i]) ? src[j++] : src[i++];
      while (i < mid) dst[o++] = src[i++];
      while (j < hi) dst[o++] = src[j++];
    }
    pair *t = src;
    src = dst;
    dst = t;
  }
  return src;
}

/* Stable LSD radix sort on the keys (positions arrive in order, so the
 * result is ordered by (key, position) too); byte passes on which every key
 * agrees are skipped, so 32-bit and smaller keys take at most 4 passes. */
static pair *radix_sort(pair *a, pair *tmp, int64_t n) {
  int64_t cnt[8][256];
  memset(cnt, 0, sizeof cnt);
  for (int64_t i = 0; i < n; i++)
    for (int b = 0; b < 8; b++) cnt[b][(a[i].k >> (8 * b)) & 255]++;
  pair *src = a, *dst = tmp;
  for (int b = 0; b < 8; b++) {
    if (cnt[b][(src[0].k >> (8 * b)) & 255] == n) continue;
    int64_t off[256], sum = 0;
    for (int d = 0; d < 256; d++) off[d] = sum, sum += cnt[b][d];
    for (int64_t i = 0; i < n; i++) dst[off[(src[i].k >> (8 * b)) & 255]++] = src[i];
    pair *t = src;
    src = dst;
    dst = t;
  }
  return src;
}

/* Rows this long sort by radix, shorter ones by merge sort. */
#define RADIX_MIN 128

static pair *sort_pairs(pair *a, pair *tmp, int64_t n) {
  return n >= RADIX_MIN ? radix_sort(a, tmp, n) : merge_sort(a, tmp, n);
}

static void sift_down(pair *h, int64_t k, int64_t i) {
  pair v = h[i];
  for (;;) {
    int64_t c = 2 * i + 1;
    if (c >= k) break;
    if (c + 1 < k && pless(&h[c], &h[c + 1])) c++;
    if (!pless(&v, &h[c])) break;
    h[i] = h[c];
    i = c;
  }
  h[i] = v;
}

/* The k least pairs of the row (x, n) in order, into h (holds k) using tmp
 * (holds k); returns the buffer with the result. */
static pair *heap_select(ingot_dtype dt, const char *x, int64_t st, int64_t n, bool flip,
                         int64_t k, pair *h, pair *tmp) {
  load_keys(dt, x, st, k, flip, h);
  for (int64_t i = k / 2 - 1; i >= 0; i--) sift_down(h, k, i);
  enum { CHUNK = 256 };
  pair buf[CHUNK];
  for (int64_t s = k; s < n; s += CHUNK) {
    int64_t m = n - s < CHUNK ? n - s : CHUNK;
    load_keys(dt, x + s * st, st, m, flip, buf);
    for (int64_t j = 0; j < m; j++) {
      /* Later positions lose ties, so only a strictly smaller key enters. */
      if (buf[j].k < h[0].k) {
        h[0].k = buf[j].k;
        h[0].i = buf[j].i + s;
        sift_down(h, k, 0);
      }
    }
  }
  return merge_sort(h, tmp, k);
}

/* Byte offsets of row r (all dims but d) in a tensor of shape/strides. */
static int64_t row_offset(int nd, const int64_t *shape, const int64_t *st, int d, int64_t r) {
  int64_t off = 0;
  for (int i = nd - 1; i >= 0; i--) {
    if (i == d) continue;
    off += (r % shape[i]) * st[i];
    r /= shape[i];
  }
  return off;
}

static void copy_elem(char *dst, const char *src, size_t es) {
  switch (es) {
  case 1: *(uint8_t *)dst = *(const uint8_t *)src; break;
  case 2: *(uint16_t *)dst = *(const uint16_t *)src; break;
  case 4: *(uint32_t *)dst = *(const uint32_t *)src; break;
  case 8: *(uint64_t *)dst = *(const uint64_t *)src; break;
  default: memcpy(dst, src, es);
  }
}

static ingot_status k_sort_topk(ingot_op_args *a) {
  ingot_tensor *t = a->in[0], *vo = a->out[0], *io = a->out[1];
  bool topk = a->op == INGOT_OP_TOPK;
  int d = (int)a->iarg[0], nd = t->ndim;
  bool flip = topk ? a->iarg[2] != 0 : a->iarg[1] != 0;
  int64_t n = nd ? t->shape[d] : 1, m = topk ? a->iarg[1] : n;
  int64_t numel = ingot_numel(t);
  if (numel == 0 || m == 0) return INGOT_OK;
  int64_t rows = numel / n;
  size_t es = ingot_dtype_size(t->dtype);
  int64_t ist[INGOT_MAX_DIMS], vst[INGOT_MAX_DIMS], xst[INGOT_MAX_DIMS];
  contiguous_strides(nd, vo->shape, vst);
  for (int i = 0; i < nd; i++) {
    ist[i] = t->strides[i] * (int64_t)es;
    xst[i] = vst[i] * 8;
    vst[i] *= (int64_t)es;
  }
  int64_t sd = nd ? ist[d] : 0, vsd = nd ? vst[d] : 0, xsd = nd ? xst[d] : 0;
  bool heap = topk && m * 4 <= n;
  int64_t need = heap ? 2 * m : 2 * n;
  char *tb = tensor_ptr(t), *vb = tensor_ptr(vo), *xb = tensor_ptr(io);
  int failed = 0;
#pragma omp parallel if (rows > 1 && numel >= 2 * CPU_GRAIN)
  {
    pair *buf = malloc(sizeof(pair) * (size_t)need);
    if (!buf) {
#pragma omp atomic write
      failed = 1;
    }
#pragma omp for schedule(dynamic, 1)
    for (int64_t r = 0; r < rows; r++) {
      if (!buf) continue;
      const char *x = tb + row_offset(nd, t->shape, ist, d, r);
      char *v = vb + row_offset(nd, vo->shape, vst, d, r);
      char *xi = xb + row_offset(nd, vo->shape, xst, d, r);
      pair *p;
      if (heap) {
        p = heap_select(t->dtype, x, sd, n, flip, m, buf, buf + m);
      } else {
        load_keys(t->dtype, x, sd, n, flip, buf);
        p = sort_pairs(buf, buf + n, n);
      }
      for (int64_t j = 0; j < m; j++) {
        copy_elem(v + j * vsd, x + p[j].i * sd, es);
        *(int64_t *)(xi + j * xsd) = p[j].i;
      }
    }
    free(buf);
  }
  if (failed) return ingot_set_error(INGOT_ERR_OOM, "%s: out of host memory",
                                     topk ? "topk" : "sort");
  return INGOT_OK;
}

void cpu_register_sort(ingot_backend *be) {
  be->kernels[INGOT_OP_SORT] = k_sort_topk;
  be->kernels[INGOT_OP_TOPK] = k_sort_topk;
}
