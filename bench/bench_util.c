/* Timing and result bookkeeping for the benchmarks. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"

double bench_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *t, int n) {
  qsort(t, (size_t)n, sizeof *t, cmp_double);
  return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

static double timed(bench_ctx *c, bool (*fn)(void *), void *arg) {
  double t0 = bench_now();
  if (!fn(arg)) return -1;
  ingot_synchronize(c->dev);
  return bench_now() - t0;
}

double bench_time(bench_ctx *c, bool (*fn)(void *), void *arg) {
  double t[64];
  int n = c->runs < 64 ? c->runs : 64;
  if (timed(c, fn, arg) < 0) return -1; /* warm-up (also the error check) */
  for (int i = 0; i < n; i++)
    if ((t[i] = timed(c, fn, arg)) < 0) return -1;
  return median(t, n);
}

bool bench_time_pair(bench_ctx *c, bool (*fn)(void *), bool (*ref)(void *), void *arg, double *t_fn,
                     double *t_ref) {
  double t[64], r[64];
  int n = c->runs < 64 ? c->runs : 64;
  if (timed(c, fn, arg) < 0 || timed(c, ref, arg) < 0) return false;
  for (int i = 0; i < n; i++) {
    if ((t[i] = timed(c, fn, arg)) < 0 || (r[i] = timed(c, ref, arg)) < 0) return false;
  }
  *t_fn = median(t, n);
  *t_ref = median(r, n);
  return true;
}

bool bench_selected(const bench_ctx *c, const char *id) {
  return !c->filter || strstr(id, c->filter) != NULL;
}

void bench_add(bench_ctx *c, const bench_result *r) {
  if (c->nresults == c->cap) {
    int cap = c->cap ? 2 * c->cap : 16;
    bench_result *p = realloc(c->results, (size_t)cap * sizeof *p);
    if (!p) return;
    c->results = p, c->cap = cap;
  }
  c->results[c->nresults++] = *r;
}

void bench_record(bench_ctx *c, bench_result *r, bool ok, double t, double tr, double work,
                  double scale) {
  if (!ok || t <= 0) {
    bench_skip(r->id, ingot_last_error());
    return;
  }
  r->median_s = t;
  r->value = work / t * scale;
  if (tr > 0) r->reference_value = work / tr * scale;
  bench_add(c, r);
}

void bench_skip(const char *id, const char *why) { fprintf(stderr, "skip %s: %s\n", id, why); }
