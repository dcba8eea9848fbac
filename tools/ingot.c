/* The ingot command: info (version, build, devices, op support table). */
#include <stdio.h>
#include <string.h>

#include "ingot/ingot.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: ingot <command> [options]\n"
          "commands:\n"
          "  info      version, build options, devices and the op support table\n"
          "  devices   the devices this build can use\n"
          "  help      this text\n");
}

static void print_devices(void) {
  printf("devices:\n");
  for (int k = 0; k < INGOT_DEVICE_KIND_COUNT; k++) {
    const ingot_backend *be = ingot_backend_get((ingot_device_kind)k);
    if (!be) continue;
    int n = be->device_count();
    if (n == 0) {
      printf("  %-8s none found\n", be->name);
      continue;
    }
    for (int i = 0; i < n; i++) {
      ingot_device dev = {(ingot_device_kind)k, i};
      ingot_device_info info;
      char name[32];
      ingot_device_str(dev, name, sizeof name);
      if (ingot_device_get_info(dev, &info) != INGOT_OK) {
        printf("  %-8s error: %s\n", name, ingot_last_error());
        continue;
      }
      printf("  %-8s %s, %d %s, %.1f GiB memory (%.1f GiB free)", name, info.name,
             info.compute_units, k == INGOT_DEVICE_CPU ? "threads" : "SMs",
             info.total_memory / 1073741824.0, info.free_memory / 1073741824.0);
      if (info.capability_major)
        printf(", compute capability %d.%d", info.capability_major, info.capability_minor);
      printf("\n");
    }
  }
  char buf[32];
  printf("default device: %s\n", ingot_device_str(ingot_default_device(), buf, sizeof buf));
}

/* ggml's test-backend-ops style: one row an op, one column a backend. */
static void print_support(void) {
  const ingot_backend *bes[INGOT_DEVICE_KIND_COUNT];
  int nb = 0;
  for (int k = 0; k < INGOT_DEVICE_KIND_COUNT; k++)
    if ((bes[nb] = ingot_backend_get((ingot_device_kind)k))) nb++;
  printf("op support (yes: native kernel; fallback: runs on the CPU when "
         "INGOT_ENABLE_CPU_FALLBACK=1; no: not available):\n");
  printf("  %-14s", "op");
  for (int b = 0; b < nb; b++) printf(" %-9s", bes[b]->name);
  printf("\n");
  const ingot_backend *cpu = ingot_backend_get(INGOT_DEVICE_CPU);
  int counts[INGOT_DEVICE_KIND_COUNT] = {0};
  for (int op = 0; op < INGOT_OP_COUNT; op++) {
    printf("  %-14s", ingot_op_name((ingot_op)op));
    for (int b = 0; b < nb; b++) {
      const char *s = bes[b]->kernels[op] ? "yes" : cpu->kernels[op] ? "fallback" : "no";
      if (bes[b]->kernels[op]) counts[b]++;
      printf(" %-9s", s);
    }
    printf("\n");
  }
  printf("  %-14s", "native total");
  for (int b = 0; b < nb; b++) printf(" %d/%-7d", counts[b], INGOT_OP_COUNT);
  printf("\n");
}

int main(int argc, char **argv) {
  const char *cmd = argc > 1 ? argv[1] : "info";
  if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
    usage(stdout);
    return 0;
  }
  if (!strcmp(cmd, "info")) {
    if (argc > 2 && (!strcmp(argv[2], "--help") || !strcmp(argv[2], "-h"))) {
      printf("usage: ingot info\nPrints the version, build options, devices and the op "
             "support table.\n");
      return 0;
    }
    printf("ingot %s\nbuild: %s\n", ingot_version(), ingot_build_info());
    print_devices();
    print_support();
    return 0;
  }
  if (!strcmp(cmd, "devices")) {
    print_devices();
    return 0;
  }
  fprintf(stderr, "ingot: unknown command '%s'\n", cmd);
  usage(stderr);
  return 2;
}
