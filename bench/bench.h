/* Benchmark harness: workloads register results; main prints a table and
 * writes JSON. Times are medians of several runs after a warm-up. */
#ifndef INGOT_BENCH_H
#define INGOT_BENCH_H

#include <stdbool.h>

#include "ingot/ingot.h"

typedef struct bench_result {
  char id[64];
  char shape[64];
  char dtype[16];
  char device[16];
  double median_s;
  const char *metric;     /* "TFLOP/s", "GB/s" */
  double value;           /* in metric units */
  double reference_value; /* the same metric for the reference, or < 0 for none */
  char reference[48];     /* what the reference is ("cblas_sgemm", "memcpy x2") */
} bench_result;

typedef struct bench_ctx {
  ingot_device dev;
  const char *filter; /* substring of ids to run, or NULL */
  int runs;           /* timed runs per measurement */
  bench_result *results;
  int nresults, cap;
} bench_ctx;

/* Seconds on a monotonic clock. */
double bench_now(void);
/* Median of the timed runs of fn(arg) after one warm-up call; the device is
 * synchronised after each call. Returns < 0 if fn returned false. */
double bench_time(bench_ctx *c, bool (*fn)(void *), void *arg);
/* The same for an op and its reference, runs interleaved (op, reference,
 * op, ...) so that both see the same machine; false if either fails. */
bool bench_time_pair(bench_ctx *c, bool (*fn)(void *), bool (*ref)(void *), void *arg, double *t_fn,
                     double *t_ref);
/* True when the workload id (for this device) passes the filter. */
bool bench_selected(const bench_ctx *c, const char *id);
/* Append a result (copied). */
void bench_add(bench_ctx *c, const bench_result *r);
/* Finish r: when ok, its median time t and value work / t * scale (and the
 * reference's, when tr > 0) are recorded; else the last error says why the
 * workload did not run. */
void bench_record(bench_ctx *c, bench_result *r, bool ok, double t, double tr, double work,
                  double scale);
/* Say why a workload did not run (stderr). */
void bench_skip(const char *id, const char *why);

/* The workloads (bench_workloads.c). */
void bench_matmul_f32(bench_ctx *c, int n);
void bench_add_f32(bench_ctx *c, int log2n);
void bench_full_f32(bench_ctx *c, int log2n);
/* The accelerator workloads of WORKLOADS.md (bench_gpu.c); nothing on the CPU. */
void bench_gpu_workloads(bench_ctx *c);
/* decode_qwen3moe_30b_a3b (fp8: _fp8, f8 experts): whole-model decode on a
 * random-weight model (bench_decode_moe.c); nothing on the CPU. */
void bench_decode_qwen3moe(bench_ctx *c, bool fp8);

#endif
