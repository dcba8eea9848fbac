/* The accelerator workloads of ../shared/bench/WORKLOADS.md (copy, GEMM,
 * FP8 scaled_mm, decode GEMV, softmax, top-k, linear algebra, a MoE layer), timed with
 * device events:
 * the median of many runs after warm-up, weight sets larger than L2 rotated
 * so the cache does not serve them. Inputs are random, never zeros. Small
 * workloads also report graph-replay and host-only timings (_graph,
 * _graph_x20, _host ids) that separate host work, launch overhead and kernel
 * time. The PyTorch side of the comparison is bench/compare.py. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

typedef ingot_tensor *(*gpu_fn)(void *arg, int iter);

static int cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

/* Median seconds of fn over runs, each bracketed by events on the current
 * stream; outputs are released after the stream is done with them. */
static double event_time(ingot_device dev, gpu_fn fn, void *arg, int warm, int runs) {
  ingot_event *e0 = ingot_event_create(dev, true), *e1 = ingot_event_create(dev, true);
  float *ms = calloc((size_t)runs, sizeof *ms);
  double result = -1;
  if (!e0 || !e1 || !ms) goto done;
  for (int i = 0; i < warm; i++) {
    ingot_tensor *o = fn(arg, i);
    if (!o) goto done;
    ingot_release(o);
  }
  ingot_synchronize(dev);
  for (int i = 0; i < runs; i++) {
    ingot_event_record(e0, NULL);
    ingot_tensor *o = fn(arg, warm + i);
    ingot_event_record(e1, NULL);
    if (!o || ingot_event_synchronize(e1) != INGOT_OK) goto done;
    ingot_event_elapsed_ms(e0, e1, &ms[i]);
    ingot_release(o);
  }
  qsort(ms, (size_t)runs, sizeof *ms, cmp_float);
  result = ms[runs / 2] * 1e-3;
done:
  free(ms);
  ingot_event_destroy(e0);
  ingot_event_destroy(e1);
  return result;
}

/* The same op captured once in a device graph (public graph API), then timed
 * per replay: `single` brackets one replay with events (graph launch + GPU
 * time, no per-op host work); otherwise `burst` replays run back to back
 * between the events and the time per replay is the GPU's alone (launch
 * latency hidden behind the previous replay). Median seconds, < 0 on failure. */
static double graph_time(ingot_device dev, gpu_fn fn, void *arg, int burst, int runs) {
  ingot_event *e0 = ingot_event_create(dev, true), *e1 = ingot_event_create(dev, true);
  float *ms = calloc((size_t)runs, sizeof *ms);
  ingot_graph *g = NULL;
  double result = -1;
  if (!e0 || !e1 || !ms || ingot_graph_begin(dev) != INGOT_OK) goto done;
  ingot_tensor *o = fn(arg, 0);
  g = ingot_graph_end(dev);
  ingot_release(o); /* its memory stays with the graph's pool */
  if (!o || !g) goto done;
  for (int i = 0; i < 3; i++)
    if (ingot_graph_replay(g) != INGOT_OK) goto done;
  ingot_synchronize(dev);
  for (int i = 0; i < runs; i++) {
    ingot_event_record(e0, NULL);
    for (int b = 0; b < burst; b++)
      if (ingot_graph_replay(g) != INGOT_OK) goto done;
    ingot_event_record(e1, NULL);
    if (ingot_event_synchronize(e1) != INGOT_OK) goto done;
    ingot_event_elapsed_ms(e0, e1, &ms[i]);
    ms[i] /= (float)burst;
  }
  qsort(ms, (size_t)runs, sizeof *ms, cmp_float);
  result = ms[runs / 2] * 1e-3;
done:
  ingot_graph_destroy(g);
  free(ms);
  ingot_event_destroy(e0);
  ingot_event_destroy(e1);
  return result;
}

/* Record workload id timed at t seconds (t <= 0: it failed) doing work
 * units, reported as work / t * scale in metric. */
static void add_result(bench_ctx *c, const char *id, const char *shape, const char *dtype, double t,
                       const char *metric, double work, double scale) {
  bench_result r = {.metric = metric, .reference_value = -1};
  snprintf(r.id, sizeof r.id, "%s", id);
  snprintf(r.shape, sizeof r.shape, "%s", shape);
  snprintf(r.dtype, sizeof r.dtype, "%s", dtype);
  ingot_device_str(c->dev, r.device, sizeof r.device);
  bench_record(c, &r, t > 0, t, -1, work, scale);
}

/* Host seconds per call of fn alone: batches of calls queued back to back
 * with no wait (the device absorbs them), median over batches; < 0 on failure. */
static double host_time(ingot_device dev, gpu_fn fn, void *arg, int batch, int runs) {
  double *t = calloc((size_t)runs, sizeof *t), result = -1;
  if (!t) return -1;
  for (int r = 0; r < runs; r++) {
    double t0 = bench_now();
    for (int i = 0; i < batch; i++) {
      ingot_tensor *o = fn(arg, i);
      if (!o) goto done;
      ingot_release(o);
    }
    t[r] = (bench_now() - t0) / batch;
    ingot_synchronize(dev);
  }
  for (int i = 1; i < runs; i++) /* insertion sort: a handful of values */
    for (int j = i; j > 0 && t[j] < t[j - 1]; j--) {
      double x = t[j];
      t[j] = t[j - 1], t[j - 1] = x;
    }
  result = t[runs / 2];
done:
  free(t);
  return result;
}

/* id_host: host seconds per eager call of fn (rate in call/s). */
static void bench_host_variant(bench_ctx *c, const char *id, const char *shape, const char *dtype,
                               gpu_fn fn, void *arg) {
  char hid[64];
  if (snprintf(hid, sizeof hid, "%s_host", id) >= (int)sizeof hid) return;
  add_result(c, hid, shape, dtype, host_time(c->dev, fn, arg, 50, 9), "call/s", 1.0, 1.0);
}

/* Variants of a small workload that tell per-op host work, launch overhead
 * and kernel time apart: id_graph (one replay between events), id_graph_x20
 * (GPU time per replay of 20 back to back) and id_host (host time per eager
 * call, nothing waited for). */
static void bench_graph_variants(bench_ctx *c, const char *id, const char *shape, const char *dtype,
                                 gpu_fn fn, void *arg, const char *metric, double work) {
  char gid[64];
  if (snprintf(gid, sizeof gid, "%s_graph", id) >= (int)sizeof gid) return;
  add_result(c, gid, shape, dtype, graph_time(c->dev, fn, arg, 1, 100), metric, work, 1e-9);
  if (snprintf(gid, sizeof gid, "%s_graph_x20", id) >= (int)sizeof gid) return;
  add_result(c, gid, shape, dtype, graph_time(c->dev, fn, arg, 20, 50), metric, work, 1e-9);
  bench_host_variant(c, id, shape, dtype, fn, arg);
}

/* Normal random tensor of a dtype (drawn in f32, then cast). */
static ingot_tensor *randn_as(int ndim, const int64_t *shape, ingot_dtype dt, ingot_device dev) {
  ingot_tensor *f = ingot_randn(ndim, shape, INGOT_F32, dev);
  if (!f || dt == INGOT_F32) return f;
  ingot_tensor *t = ingot_cast(f, dt);
  ingot_release(f);
  return t;
}

/* ---- copy_1GiB ---- */
typedef struct copy_arg {
  ingot_tensor *a, *b;
} copy_arg;

static ingot_tensor *run_copy(void *p, int iter) {
  (void)iter;
  copy_arg *c = p;
  return ingot_copy_(c->b, c->a) == INGOT_OK ? ingot_retain(c->b) : NULL;
}

static void bench_copy(bench_ctx *c) {
  const char *id = "copy_1GiB";
  if (!bench_selected(c, id)) return;
  int64_t n = (int64_t)1 << 30;
  copy_arg a = {ingot_randint(0, 255, 1, &n, INGOT_U8, c->dev),
                ingot_empty(1, &n, INGOT_U8, c->dev)};
  double t = a.a && a.b ? event_time(c->dev, run_copy, &a, 3, 20) : -1;
  add_result(c, id, "2^30", "uint8", t, "GB/s", 2.0 * (double)n, 1e-9);
  ingot_release(a.a);
  ingot_release(a.b);
}

/* ---- GEMM and FP8 scaled_mm ---- */
typedef struct mm_arg {
  ingot_tensor *a, *b, *sa, *sb;
} mm_arg;

static ingot_tensor *run_mm(void *p, int iter) {
  (void)iter;
  mm_arg *m = p;
  return ingot_matmul(m->a, m->b);
}

static ingot_tensor *run_scaled_mm(void *p, int iter) {
  (void)iter;
  mm_arg *m = p;
  return ingot_scaled_mm(m->a, m->b, m->sa, m->sb, NULL, INGOT_BF16);
}

static void bench_gemm(bench_ctx *c, ingot_dtype dt, const char *id) {
  if (!bench_selected(c, id)) return;
  int64_t s[2] = {8192, 8192};
  mm_arg m = {randn_as(2, s, dt, c->dev), randn_as(2, s, dt, c->dev), NULL, NULL};
  double t = m.a && m.b ? event_time(c->dev, run_mm, &m, 3, 10) : -1;
  add_result(c, id, "8192^3", ingot_dtype_name(dt), t, "TFLOP/s", 2.0 * pow(8192, 3), 1e-12);
  ingot_release(m.a);
  ingot_release(m.b);
}

static void bench_fp8(bench_ctx *c) {
  const char *id = "scaled_mm_fp8_8192";
  if (!bench_selected(c, id)) return;
  int64_t s[2] = {8192, 8192};
  ingot_tensor *bt = randn_as(2, s, INGOT_F8E4M3FN, c->dev);
  mm_arg m = {randn_as(2, s, INGOT_F8E4M3FN, c->dev), ingot_transpose(bt, 0, 1),
              ingot_scalar(1.0, INGOT_F32, c->dev), ingot_scalar(1.0, INGOT_F32, c->dev)};
  ingot_release(bt);
  double t = m.a && m.b && m.sa && m.sb ? event_time(c->dev, run_scaled_mm, &m, 3, 10) : -1;
  add_result(c, id, "8192^3", "float8_e4m3fn", t, "TFLOP/s", 2.0 * pow(8192, 3), 1e-12);
  ingot_release(m.a);
  ingot_release(m.b);
  ingot_release(m.sa);
  ingot_release(m.sb);
}

/* ---- decode GEMV: y[1,N] = x[1,K]·W[N,K]^T over rotated weight copies ---- */
#define MAX_COPIES 16
typedef struct gemv_arg {
  ingot_tensor *x, *wt[MAX_COPIES];
  int copies;
} gemv_arg;

static ingot_tensor *run_gemv(void *p, int iter) {
  gemv_arg *g = p;
  return ingot_matmul(g->x, g->wt[iter % g->copies]);
}

static void bench_gemv(bench_ctx *c, int64_t K, int64_t N) {
  char id[64], shape[64];
  snprintf(id, sizeof id, "gemv_bf16_K%lld_N%lld", (long long)K, (long long)N);
  if (!bench_selected(c, id)) return;
  double bytes = (double)K * (double)N * 2;
  gemv_arg g = {.copies = (int)ceil(240e6 / bytes)};
  if (g.copies > MAX_COPIES) g.copies = MAX_COPIES;
  bool ok = (g.x = randn_as(2, (int64_t[]){1, K}, INGOT_BF16, c->dev)) != NULL;
  for (int i = 0; i < g.copies && ok; i++) {
    ingot_tensor *w = randn_as(2, (int64_t[]){N, K}, INGOT_BF16, c->dev);
    ok = w && (g.wt[i] = ingot_transpose(w, 0, 1));
    ingot_release(w);
  }
  double t = ok ? event_time(c->dev, run_gemv, &g, 5, 50) : -1;
  snprintf(shape, sizeof shape, "[1,%lld]x[%lld,%lld]^T", (long long)K, (long long)N, (long long)K);
  add_result(c, id, shape, "bfloat16", t, "GB/s", bytes, 1e-9);
  /* Graph replays read one weight copy: only where it is larger than L2. */
  if (ok && bytes > 100e6)
    bench_graph_variants(c, id, shape, "bfloat16", run_gemv, &g, "GB/s", bytes);
  else if (ok)
    bench_host_variant(c, id, shape, "bfloat16", run_gemv, &g);
  ingot_release(g.x);
  for (int i = 0; i < g.copies; i++) ingot_release(g.wt[i]);
}

/* ---- quantised decode GEMV (ingot_qmatmul[_fused]) on SmolLM2's shapes ----
 * W: random bytes [N, S] (S = the row's bytes padded to 16, as the model
 * uploads them; the time does not depend on the values), up to 16 rotated
 * copies: the small products then sit in L2 (in a decode step the 96 MB of
 * weights do not), the LM head streams from DRAM. GB/s of weight bytes.
 * fused: norm and res on (one qmatmul_fused launch). */
typedef struct qgemv_arg {
  ingot_tensor *x, *norm, *res, *wt[MAX_COPIES];
  int copies, type;
  int64_t k;
} qgemv_arg;

static ingot_tensor *run_qgemv(void *p, int iter) {
  qgemv_arg *g = p;
  return ingot_qmatmul_fused(g->x, g->wt[iter % g->copies], g->type, g->k, g->norm, 1e-5, g->res);
}

static void bench_qgemv(bench_ctx *c, int type, int64_t K, int64_t N, bool fused) {
  char id[64], shape[64];
  snprintf(id, sizeof id, "qgemv%s_%s_K%lld_N%lld", fused ? "_fused" : "",
           ingot_ggml_type_name(type), (long long)K, (long long)N);
  if (!bench_selected(c, id)) return;
  const int64_t S = ((int64_t)ingot_ggml_row_size(type, K) + 15) / 16 * 16;
  const double bytes = (double)N * (double)S;
  qgemv_arg g = {.copies = (int)ceil(240e6 / bytes), .type = type, .k = K};
  if (g.copies > MAX_COPIES) g.copies = MAX_COPIES;
  bool ok = (g.x = randn_as(2, (int64_t[]){1, K}, INGOT_F32, c->dev)) != NULL;
  if (fused)
    ok = ok && (g.norm = randn_as(1, (int64_t[]){K}, INGOT_F32, c->dev)) &&
         (g.res = randn_as(2, (int64_t[]){1, N}, INGOT_F32, c->dev));
  for (int i = 0; i < g.copies && ok; i++)
    ok = (g.wt[i] = ingot_randint(0, 255, 2, (int64_t[]){N, S}, INGOT_U8, c->dev)) != NULL;
  double t = ok ? event_time(c->dev, run_qgemv, &g, 5, 50) : -1;
  snprintf(shape, sizeof shape, "[1,%lld]x[%lld,%lld]^T", (long long)K, (long long)N, (long long)K);
  add_result(c, id, shape, ingot_ggml_type_name(type), t, "GB/s", bytes, 1e-9);
  if (ok)
    bench_graph_variants(c, id, shape, ingot_ggml_type_name(type), run_qgemv, &g, "GB/s", bytes);
  ingot_release(g.x);
  ingot_release(g.norm);
  ingot_release(g.res);
  for (int i = 0; i < g.copies; i++) ingot_release(g.wt[i]);
}

/* ---- softmax and top-k over a vocabulary ---- */
static ingot_tensor *run_softmax(void *p, int iter) {
  (void)iter;
  return ingot_softmax(p, -1);
}

static ingot_tensor *run_topk(void *p, int iter) {
  (void)iter;
  ingot_tensor *idx = NULL;
  ingot_tensor *v = ingot_topk(p, 8, -1, true, true, &idx);
  ingot_release(idx);
  return v;
}

static void bench_vocab(bench_ctx *c, int64_t B) {
  const int64_t V = 151936;
  char sid[64], tid[64], shape[32];
  snprintf(sid, sizeof sid, "softmax_f32_B%lld_V%lld", (long long)B, (long long)V);
  snprintf(tid, sizeof tid, "topk8_f32_B%lld_V%lld", (long long)B, (long long)V);
  snprintf(shape, sizeof shape, "[%lld,%lld]", (long long)B, (long long)V);
  if (!bench_selected(c, sid) && !bench_selected(c, tid)) return;
  ingot_tensor *x = randn_as(2, (int64_t[]){B, V}, INGOT_F32, c->dev);
  double bytes = (double)B * (double)V * 4;
  if (bench_selected(c, sid)) {
    double t = x ? event_time(c->dev, run_softmax, x, 10, 100) : -1;
    add_result(c, sid, shape, "float32", t, "GB/s", 2 * bytes, 1e-9);
    if (x) bench_graph_variants(c, sid, shape, "float32", run_softmax, x, "GB/s", 2 * bytes);
  }
  if (bench_selected(c, tid)) {
    double t = x ? event_time(c->dev, run_topk, x, 10, 100) : -1;
    add_result(c, tid, shape, "float32", t, "GB/s", bytes, 1e-9);
    if (x) bench_graph_variants(c, tid, shape, "float32", run_topk, x, "GB/s", bytes);
  }
  ingot_release(x);
}

/* ---- linear algebra (times are the goals in WORKLOADS.md; GFLOP/s uses
 * the textbook counts: svd 22 n^3 (U, S, Vh), qr 4/3 n^3, lu 8/3 n^3 real
 * flops for complex, inv 2 n^3 per matrix, trsm n^2 * nrhs) ---- */
typedef struct la_arg {
  ingot_tensor *a, *b;
  int op;
} la_arg;

static ingot_tensor *run_linalg(void *p, int iter) {
  (void)iter;
  la_arg *l = p;
  ingot_tensor *x = NULL, *y = NULL, *r = NULL;
  switch (l->op) {
    case 0:
      r = ingot_linalg_svd(l->a, false, &x, &y);
      break;
    case 1:
      r = ingot_linalg_qr(l->a, INGOT_QR_REDUCED, &x);
      break;
    case 2:
      r = ingot_linalg_lu_factor(l->a, &x);
      break;
    case 3:
      r = ingot_linalg_inv(l->a);
      break;
    default:
      r = ingot_linalg_solve_triangular(l->a, l->b, false, true, false);
      break;
  }
  ingot_release(x);
  ingot_release(y);
  return r;
}

static void bench_linalg_one(bench_ctx *c, const char *id, int op, ingot_dtype dt, int64_t batch,
                             int64_t n, double flops, int runs) {
  if (!bench_selected(c, id)) return;
  int64_t s3[3] = {batch, n, n}, *s = batch ? s3 : s3 + 1;
  int nd = batch ? 3 : 2;
  la_arg l = {randn_as(nd, s, dt, c->dev), NULL, op};
  if (l.a && op == 3) { /* well conditioned: 0.1 * randn + I */
    ingot_tensor *eye = ingot_eye(n, n, dt, c->dev), *sc = ingot_mul_scalar(l.a, 0.1);
    ingot_release(l.a);
    l.a = eye && sc ? ingot_add(sc, eye) : NULL;
    ingot_release(eye);
    ingot_release(sc);
  }
  if (l.a && op == 4) { /* lower triangle with a strong diagonal */
    ingot_tensor *eye = ingot_eye(n, n, dt, c->dev), *d = eye ? ingot_mul_scalar(eye, 64) : NULL;
    ingot_tensor *lo = ingot_tril(l.a, 0);
    ingot_release(l.a);
    l.a = d && lo ? ingot_add(lo, d) : NULL;
    l.b = randn_as(nd, s, dt, c->dev);
    ingot_release(eye);
    ingot_release(d);
    ingot_release(lo);
  }
  double t = l.a && (op != 4 || l.b) ? event_time(c->dev, run_linalg, &l, 2, runs) : -1;
  char shape[64];
  if (batch)
    snprintf(shape, sizeof shape, "%lldx%lldx%lld", (long long)batch, (long long)n, (long long)n);
  else
    snprintf(shape, sizeof shape, "%lld^2", (long long)n);
  add_result(c, id, shape, ingot_dtype_name(dt), t, "GFLOP/s", flops, 1e-9);
  ingot_release(l.a);
  ingot_release(l.b);
}

static void bench_linalg(bench_ctx *c) {
  double n2k = 2048.0, n4k = 4096.0;
  bench_linalg_one(c, "svd_f32_2048", 0, INGOT_F32, 0, 2048, 22 * n2k * n2k * n2k, 5);
  bench_linalg_one(c, "qr_f32_4096", 1, INGOT_F32, 0, 4096, 4.0 / 3 * n4k * n4k * n4k, 10);
  bench_linalg_one(c, "lu_c64_2048", 2, INGOT_C64, 0, 2048, 8.0 / 3 * n2k * n2k * n2k, 20);
  bench_linalg_one(c, "inv_f32_batch10000_8x8", 3, INGOT_F32, 10000, 8, 2.0 * 512 * 10000, 200);
  bench_linalg_one(c, "trsm_f32_4096", 4, INGOT_F32, 0, 4096, n4k * n4k * n4k, 20);
}

/* ---- one MoE FFN of Qwen3-30B-A3B at batch 1 (torch_anchors.py "moe"):
 * router GEMV + route (softmax, top-8, renormalise), gate/up + SiLU*up and
 * down + weighted sum, as forward_moe.c runs a layer at decode: one
 * ingot_moe_block, which also does the RMS norm before the router (weight
 * ones here) and adds the residual (more than the anchor's FFN, not less):
 * one kernel on CUDA (INGOT_MOE_BLOCK=0: the three composed ones). Timed eagerly
 * and as graph replays. The inputs rotate over MOE_INPUTS tokens (different
 * experts) so that the active 76 MB, which is more than L2, is not served
 * from one fixed set. ---- */
#define MOE_INPUTS 4
typedef struct moe_arg {
  ingot_tensor *x[MOE_INPUTS], *norm, *wg, *gate_up, *down, *s_gu, *s_d;
  ingot_tensor *mail; /* the op's mailbox (int64 [E], zero), as the model passes it */
  ingot_graph *graph[MOE_INPUTS];
  ingot_tensor *gy[MOE_INPUTS]; /* the outputs the graphs write */
} moe_arg;

static ingot_tensor *moe_layer(const moe_arg *m, const ingot_tensor *x) {
  return ingot_moe_block(x, m->norm, 1e-6, m->wg, 8, true, m->gate_up, m->s_gu, m->down, m->s_d,
                         m->mail, NULL, NULL);
}

static ingot_tensor *run_moe(void *p, int iter) {
  moe_arg *m = p;
  return moe_layer(m, m->x[iter % MOE_INPUTS]);
}

static ingot_tensor *run_moe_graph(void *p, int iter) {
  moe_arg *m = p;
  int i = iter % MOE_INPUTS;
  return ingot_graph_replay(m->graph[i]) == INGOT_OK ? ingot_retain(m->gy[i]) : NULL;
}

/* Capture one graph per input (after an eager warm-up); false on failure. */
static bool moe_capture(ingot_device dev, moe_arg *m) {
  ingot_tensor *warm = moe_layer(m, m->x[0]);
  bool ok = warm && ingot_synchronize(dev) == INGOT_OK;
  ingot_release(warm);
  for (int i = 0; i < MOE_INPUTS && ok; i++) {
    ok = ingot_graph_begin(dev) == INGOT_OK;
    if (!ok) break;
    m->gy[i] = moe_layer(m, m->x[i]);
    m->graph[i] = ingot_graph_end(dev);
    ok = m->gy[i] && m->graph[i];
  }
  return ok;
}

static void bench_moe(bench_ctx *c, bool fp8) {
  const char *id = fp8 ? "moe_layer_qwen3_30b_a3b_fp8" : "moe_layer_qwen3_30b_a3b";
  char gid[64];
  snprintf(gid, sizeof gid, "%s_graph", id);
  bool eager = bench_selected(c, id), graph = bench_selected(c, gid);
  if (!eager && !graph) return;
  const int64_t H = 2048, E = 128, I = 768, K = 8;
  ingot_dtype wdt = fp8 ? INGOT_F8E4M3FN : INGOT_BF16;
  moe_arg m = {0};
  m.wg = randn_as(2, (int64_t[]){E, H}, INGOT_BF16, c->dev);
  m.gate_up = randn_as(3, (int64_t[]){E, 2 * I, H}, wdt, c->dev);
  m.down = randn_as(3, (int64_t[]){E, H, I}, wdt, c->dev);
  m.norm = ingot_full(1, (int64_t[]){H}, 1.0, INGOT_F32, c->dev);
  m.mail = ingot_zeros(1, (int64_t[]){E}, INGOT_I64, c->dev);
  bool ok = m.wg && m.gate_up && m.down && m.norm && m.mail;
  if (fp8) {
    m.s_gu = ingot_full(2, (int64_t[]){E, 2 * I}, 0.02, INGOT_F32, c->dev);
    m.s_d = ingot_full(2, (int64_t[]){E, H}, 0.02, INGOT_F32, c->dev);
    ok = ok && m.s_gu && m.s_d;
  }
  for (int i = 0; i < MOE_INPUTS && ok; i++)
    ok = (m.x[i] = randn_as(2, (int64_t[]){1, H}, INGOT_F32, c->dev)) != NULL;
  double bytes = (double)K * 3 * H * I * (fp8 ? 1 : 2) + (double)E * H * 2;
  const char *shape = "[1,2048] E128 top8 I768";
  const char *dt = fp8 ? "float8_e4m3fn" : "bfloat16";
  if (eager) {
    double t = ok ? event_time(c->dev, run_moe, &m, 10, 200) : -1;
    add_result(c, id, shape, dt, t, "GB/s", bytes, 1e-9);
  }
  if (graph) {
    double t = ok && moe_capture(c->dev, &m) ? event_time(c->dev, run_moe_graph, &m, 10, 200) : -1;
    add_result(c, gid, shape, dt, t, "GB/s", bytes, 1e-9);
  }
  for (int i = 0; i < MOE_INPUTS; i++) {
    ingot_release(m.gy[i]);
    if (m.graph[i]) ingot_graph_destroy(m.graph[i]);
    ingot_release(m.x[i]);
  }
  ingot_release(m.norm);
  ingot_release(m.mail);
  ingot_release(m.wg);
  ingot_release(m.gate_up);
  ingot_release(m.down);
  ingot_release(m.s_gu);
  ingot_release(m.s_d);
}

void bench_gpu_workloads(bench_ctx *c) {
  if (c->dev.kind == INGOT_DEVICE_CPU) return;
  ingot_manual_seed(0);
  bench_copy(c);
  bench_gemm(c, INGOT_BF16, "gemm_bf16_8192");
  bench_gemm(c, INGOT_F32, "gemm_f32_8192");
  bench_fp8(c);
  bench_gemv(c, 2048, 6144);
  bench_gemv(c, 4096, 14336);
  bench_gemv(c, 2048, 151936);
  bench_gemv(c, 8192, 28672);
  bench_qgemv(c, INGOT_GGML_Q4_1, 576, 576, false);
  bench_qgemv(c, INGOT_GGML_Q4_1, 576, 576, true);
  bench_qgemv(c, INGOT_GGML_Q4_1, 576, 192, false);
  bench_qgemv(c, INGOT_GGML_Q4_1, 576, 1536, false);
  bench_qgemv(c, INGOT_GGML_Q4_1, 1536, 576, true);
  bench_qgemv(c, INGOT_GGML_Q8_0, 576, 49152, false);
  bench_vocab(c, 1);
  bench_vocab(c, 64);
  bench_linalg(c);
  bench_moe(c, false);
  bench_moe(c, true);
  bench_decode_qwen3moe(c, false);
  bench_decode_qwen3moe(c, true);
}
