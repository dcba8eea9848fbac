/* The workloads: each measures an ingot op and, where there is one, a
 * reference doing the same work (the library Ingot calls, or a plain copy)
 * on the same buffers. */
#include <cblas.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"

static void device_name(ingot_device dev, char *buf, size_t len) {
  ingot_device_str(dev, buf, len);
  char *colon = strchr(buf, ':');
  if (colon && dev.index == 0) *colon = 0; /* "cuda" for cuda:0 */
}

/* Random [0,1) input on the device; ones when RAND is not there yet. */
static ingot_tensor *input(int ndim, const int64_t *shape, ingot_device dev) {
  ingot_tensor *t = ingot_rand(ndim, shape, INGOT_F32, dev);
  if (!t) t = ingot_full(ndim, shape, 1.0, INGOT_F32, dev);
  return t;
}

/* ---- matmul ---- */
typedef struct mm_arg {
  ingot_tensor *a, *b, *c;
  int n;
  float *ref; /* cblas output */
} mm_arg;

static bool run_matmul(void *p) {
  mm_arg *m = p;
  ingot_release(m->c);
  m->c = ingot_matmul(m->a, m->b);
  return m->c != NULL;
}

static bool run_sgemm(void *p) {
  mm_arg *m = p;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m->n, m->n, m->n, 1.0f,
              ingot_tensor_data(m->a), m->n, ingot_tensor_data(m->b), m->n, 0.0f, m->ref, m->n);
  return true;
}

void bench_matmul_f32(bench_ctx *c, int n) {
  char dev[16], id[64];
  device_name(c->dev, dev, sizeof dev);
  snprintf(id, sizeof id, "matmul_f32_%d_%s", n, dev);
  if (!bench_selected(c, id)) return;
  int64_t shape[2] = {n, n};
  mm_arg m = {input(2, shape, c->dev), input(2, shape, c->dev), NULL, n, NULL};
  bench_result r = {.metric = "TFLOP/s", .reference_value = -1};
  snprintf(r.id, sizeof r.id, "%s", id);
  snprintf(r.shape, sizeof r.shape, "%dx%d @ %dx%d", n, n, n, n);
  snprintf(r.dtype, sizeof r.dtype, "float32");
  snprintf(r.device, sizeof r.device, "%s", dev);
  double flops = 2.0 * n * (double)n * n, t = -1, tr = -1;
  bool ok = m.a && m.b;
  if (ok && c->dev.kind == INGOT_DEVICE_CPU && (m.ref = malloc((size_t)n * n * sizeof(float)))) {
    memset(m.ref, 0, (size_t)n * n * sizeof(float));
    ok = bench_time_pair(c, run_matmul, run_sgemm, &m, &t, &tr);
  } else if (ok) {
    ok = (t = bench_time(c, run_matmul, &m)) >= 0;
  }
  if (!ok) {
    bench_skip(id, ingot_last_error());
  } else {
    r.median_s = t;
    r.value = flops / t * 1e-12;
    if (tr > 0) {
      r.reference_value = flops / tr * 1e-12;
      snprintf(r.reference, sizeof r.reference, "cblas_sgemm");
      /* Same library, same inputs: the results should agree closely. */
      const float *got = ingot_tensor_data(m.c);
      double err = 0;
      for (int64_t i = 0; i < (int64_t)n * n; i++) err = fmax(err, fabs(got[i] - m.ref[i]));
      if (err > 1e-3 * n) fprintf(stderr, "warning: %s differs from cblas_sgemm by %g\n", id, err);
    }
    bench_add(c, &r);
  }
  free(m.ref);
  ingot_release(m.a);
  ingot_release(m.b);
  ingot_release(m.c);
}

/* ---- add ---- */
typedef struct add_arg {
  ingot_tensor *a, *b, *c;
  char *src, *dst; /* memcpy reference (host) */
  size_t bytes;
  int threads;
} add_arg;

static bool run_add(void *p) {
  add_arg *x = p;
  ingot_release(x->c);
  x->c = ingot_add(x->a, x->b);
  return x->c != NULL;
}

typedef struct copy_part {
  char *dst;
  const char *src;
  size_t n;
} copy_part;

static void *copy_part_run(void *p) {
  copy_part *cp = p;
  memcpy(cp->dst, cp->src, cp->n);
  return NULL;
}

/* memcpy split over the machine's cores (one piece each), as the add is. */
static bool run_memcpy(void *p) {
  add_arg *x = p;
  pthread_t th[64] = {0};
  copy_part parts[64] = {{0}};
  int t = x->threads;
  size_t chunk = (x->bytes / (size_t)t + 63) & ~(size_t)63;
  for (int i = 0; i < t; i++) {
    size_t lo = (size_t)i * chunk < x->bytes ? (size_t)i * chunk : x->bytes;
    size_t hi = lo + chunk < x->bytes ? lo + chunk : x->bytes;
    parts[i] = (copy_part){x->dst + lo, x->src + lo, hi - lo};
    if (i > 0 && pthread_create(&th[i], NULL, copy_part_run, &parts[i]) != 0) {
      copy_part_run(&parts[i]);
      th[i] = 0;
    }
  }
  copy_part_run(&parts[0]);
  for (int i = 1; i < t; i++)
    if (th[i]) pthread_join(th[i], NULL);
  return true;
}

static bool run_clone(void *p) {
  add_arg *x = p;
  ingot_release(x->c);
  x->c = ingot_clone(x->a);
  return x->c != NULL;
}

void bench_add_f32(bench_ctx *c, int log2n) {
  char dev[16], id[64];
  device_name(c->dev, dev, sizeof dev);
  snprintf(id, sizeof id, "add_f32_2e%d_%s", log2n, dev);
  if (!bench_selected(c, id)) return;
  int64_t n = (int64_t)1 << log2n;
  add_arg x = {input(1, &n, c->dev), input(1, &n, c->dev), NULL, NULL, NULL, 0, 1};
  bench_result r = {.metric = "GB/s", .reference_value = -1};
  snprintf(r.id, sizeof r.id, "%s", id);
  snprintf(r.shape, sizeof r.shape, "2^%d + 2^%d", log2n, log2n);
  snprintf(r.dtype, sizeof r.dtype, "float32");
  snprintf(r.device, sizeof r.device, "%s", dev);
  double bytes = 3.0 * 4.0 * (double)n; /* read a and b, write the sum */
  double t = -1, tr = -1;
  bool ok = x.a && x.b;
  if (ok && c->dev.kind == INGOT_DEVICE_CPU) {
    /* memcpy of as many bytes as the add reads and writes (read+write counted). */
    x.bytes = (size_t)n * 4 * 3 / 2;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    x.threads = cores < 1 ? 1 : cores > 64 ? 64 : (int)cores;
    x.src = malloc(x.bytes);
    x.dst = malloc(x.bytes);
    if (x.src && x.dst) {
      memset(x.src, 1, x.bytes);
      memset(x.dst, 0, x.bytes); /* touched: the copy measures bandwidth, not page faults */
      ok = bench_time_pair(c, run_add, run_memcpy, &x, &t, &tr);
      snprintf(r.reference, sizeof r.reference, "memcpy (%d threads)", x.threads);
    } else {
      ok = (t = bench_time(c, run_add, &x)) >= 0;
    }
  } else if (ok) {
    /* The device's own copy (read+write counted) is the bandwidth floor. */
    ok = bench_time_pair(c, run_add, run_clone, &x, &t, &tr);
    snprintf(r.reference, sizeof r.reference, "ingot_clone (device copy)");
  }
  bench_record(c, &r, ok, t, tr, bytes, 1e-9);
  free(x.src);
  free(x.dst);
  ingot_release(x.a);
  ingot_release(x.b);
  ingot_release(x.c);
}

/* ---- fresh output: allocation + first write ---- */
typedef struct fill_arg {
  ingot_tensor *t;
  int64_t n;
  ingot_device dev;
  char *buf; /* memset reference */
} fill_arg;

static bool run_full(void *p) {
  fill_arg *f = p;
  ingot_release(f->t);
  f->t = ingot_full(1, &f->n, 1.0, INGOT_F32, f->dev);
  return f->t != NULL;
}

static bool run_memset(void *p) {
  fill_arg *f = p;
  memset(f->buf, 0, (size_t)f->n * 4);
  return true;
}

/* What every op with a fresh output pays before its own work: ingot_full
 * (a new tensor, written once) against memset into memory already mapped. */
void bench_full_f32(bench_ctx *c, int log2n) {
  char dev[16], id[64];
  device_name(c->dev, dev, sizeof dev);
  snprintf(id, sizeof id, "full_f32_2e%d_%s", log2n, dev);
  if (!bench_selected(c, id)) return;
  fill_arg f = {NULL, (int64_t)1 << log2n, c->dev, NULL};
  bench_result r = {.metric = "GB/s", .reference_value = -1};
  snprintf(r.id, sizeof r.id, "%s", id);
  snprintf(r.shape, sizeof r.shape, "2^%d", log2n);
  snprintf(r.dtype, sizeof r.dtype, "float32");
  snprintf(r.device, sizeof r.device, "%s", dev);
  double bytes = 4.0 * (double)f.n, t = -1, tr = -1;
  bool ok;
  if (c->dev.kind == INGOT_DEVICE_CPU && (f.buf = malloc((size_t)f.n * 4))) {
    memset(f.buf, 1, (size_t)f.n * 4);
    ok = bench_time_pair(c, run_full, run_memset, &f, &t, &tr);
    snprintf(r.reference, sizeof r.reference, "memset (mapped, 1 thread)");
  } else {
    ok = (t = bench_time(c, run_full, &f)) >= 0;
  }
  bench_record(c, &r, ok, t, tr, bytes, 1e-9);
  free(f.buf);
  ingot_release(f.t);
}
