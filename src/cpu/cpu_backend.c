/* The CPU backend: host memory, device info and the kernel table. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cpu.h"

static int cpu_count(void) { return 1; }

static int cpu_info(int index, ingot_device_info *info) {
  (void)index;
  snprintf(info->name, sizeof info->name, "CPU");
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (f) {
    char line[256];
    while (fgets(line, sizeof line, f)) {
      if (!strncmp(line, "model name", 10)) {
        char *v = strchr(line, ':');
        if (v) {
          v++;
          while (*v == ' ') v++;
          v[strcspn(v, "\n")] = 0;
          snprintf(info->name, sizeof info->name, "%s", v);
        }
        break;
      }
    }
    fclose(f);
  }
  long pages = sysconf(_SC_PHYS_PAGES), avail = sysconf(_SC_AVPHYS_PAGES);
  long psize = sysconf(_SC_PAGESIZE);
  info->total_memory = pages > 0 ? (size_t)pages * (size_t)psize : 0;
  info->free_memory = avail > 0 ? (size_t)avail * (size_t)psize : 0;
  info->compute_units = cpu_threads();
  return INGOT_OK;
}

static void *cpu_alloc(int index, size_t nbytes) {
  (void)index;
  return cpu_host_alloc(nbytes);
}

static void cpu_free(int index, void *p, size_t nbytes) {
  (void)index;
  cpu_host_free(p, nbytes);
}

static ingot_status cpu_memcpy(int index, void *dst, const void *src, size_t n) {
  (void)index;
  memcpy(dst, src, n);
  return INGOT_OK;
}

static ingot_status cpu_sync(int index) {
  (void)index;
  return INGOT_OK;
}

void cpu_backend_init(ingot_backend *be) {
  memset(be, 0, sizeof *be);
  be->name = "cpu";
  be->kind = INGOT_DEVICE_CPU;
  be->device_count = cpu_count;
  be->device_info = cpu_info;
  be->alloc = cpu_alloc;
  be->free = cpu_free;
  be->copy_to_host = cpu_memcpy;
  be->copy_from_host = cpu_memcpy;
  be->copy_on_device = cpu_memcpy;
  be->synchronize = cpu_sync;
  cpu_register_copy(be);
  cpu_register_unary(be);
  cpu_register_binary(be);
  cpu_register_reduce(be);
  cpu_register_matmul(be);
  cpu_register_shape(be);
  cpu_register_index(be);
  cpu_register_sort(be);
  cpu_register_scaled_mm(be);
  cpu_register_linalg(be);
  cpu_register_linalg_decomp(be);
  cpu_register_attention(be);
  cpu_register_sample(be);
  cpu_register_nn(be);
  cpu_register_moe(be);
}
