/* ingot_bench: runs the benchmark workloads, prints a table and writes the
 * results as JSON (to stdout, or to --json FILE; the table goes to stderr
 * when the JSON takes stdout).
 *
 *   ingot_bench [--json FILE] [--filter ID] [--device cpu|cuda] [--runs N]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

static void usage(FILE *f) {
  fprintf(f, "usage: ingot_bench [--json FILE] [--filter ID] [--device cpu|cuda[:N]] [--runs N]\n"
             "  --json FILE   write the results as JSON to FILE (default: stdout, with the\n"
             "                table on stderr)\n"
             "  --filter ID   run only workloads whose id contains ID\n"
             "  --device DEV  where to run (default cpu)\n"
             "  --runs N      timed runs per measurement, median reported (default 7)\n");
}

static void print_table(FILE *f, const bench_ctx *c) {
  fprintf(f, "%-26s %-22s %-8s %-6s %11s %14s %14s %-26s %6s\n", "id", "shape", "dtype", "device",
          "median ms", "value", "reference", "reference is", "ratio");
  for (int i = 0; i < c->nresults; i++) {
    const bench_result *r = &c->results[i];
    char val[32], ref[32] = "-", ratio[16] = "-";
    snprintf(val, sizeof val, "%.3f %s", r->value, r->metric);
    if (r->reference_value > 0) {
      snprintf(ref, sizeof ref, "%.3f %s", r->reference_value, r->metric);
      snprintf(ratio, sizeof ratio, "%.3f", r->value / r->reference_value);
    }
    fprintf(f, "%-26s %-22s %-8s %-6s %11.3f %14s %14s %-26s %6s\n", r->id, r->shape, r->dtype,
            r->device, r->median_s * 1e3, val, ref, r->reference[0] ? r->reference : "-", ratio);
  }
}

static void write_json(FILE *f, const bench_ctx *c) {
  fprintf(f, "[\n");
  for (int i = 0; i < c->nresults; i++) {
    const bench_result *r = &c->results[i];
    fprintf(f,
            "  {\"id\": \"%s\", \"shape\": \"%s\", \"dtype\": \"%s\", \"device\": \"%s\", "
            "\"median_s\": %.9g, \"metric\": \"%s\", \"value\": %.6g, ",
            r->id, r->shape, r->dtype, r->device, r->median_s, r->metric, r->value);
    if (r->reference_value > 0)
      fprintf(f, "\"reference\": \"%s\", \"reference_value\": %.6g, \"ratio\": %.4f}", r->reference,
              r->reference_value, r->value / r->reference_value);
    else fprintf(f, "\"reference\": null, \"reference_value\": null, \"ratio\": null}");
    fprintf(f, "%s\n", i + 1 < c->nresults ? "," : "");
  }
  fprintf(f, "]\n");
}

int main(int argc, char **argv) {
  bench_ctx c = {.dev = INGOT_CPU, .runs = 7};
  const char *json = NULL;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    bool has = i + 1 < argc;
    if (!strcmp(a, "--json") && has) json = argv[++i];
    else if (!strcmp(a, "--filter") && has) c.filter = argv[++i];
    else if (!strcmp(a, "--runs") && has) c.runs = atoi(argv[++i]);
    else if (!strcmp(a, "--device") && has) {
      if (ingot_device_parse(argv[++i], &c.dev) != 0) {
        fprintf(stderr, "ingot_bench: unknown device '%s'\n", argv[i]);
        return 2;
      }
    } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      return 0;
    } else {
      usage(stderr);
      return 2;
    }
  }
  if (c.runs < 1) c.runs = 1;
  if (!ingot_device_available(c.dev)) {
    char buf[32];
    const char *why = ingot_last_error();
    fprintf(stderr, "ingot_bench: device %s is not available: %s\n",
            ingot_device_str(c.dev, buf, sizeof buf),
            why[0] ? why : "this build or machine has no such device");
    return 1;
  }

  bench_matmul_f32(&c, 2048);
  bench_add_f32(&c, 26);
  bench_full_f32(&c, 26);
  bench_gpu_workloads(&c);

  FILE *out = stdout;
  if (json && !(out = fopen(json, "w"))) {
    fprintf(stderr, "ingot_bench: cannot write %s\n", json);
    free(c.results);
    return 1;
  }
  print_table(json ? stdout : stderr, &c);
  write_json(out, &c);
  if (json) fclose(out);
  free(c.results);
  return 0;
}
