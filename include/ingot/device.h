/* Devices: the registry of backends (cpu, cuda:N, ...), discovery, memory
 * and synchronisation. */
#ifndef INGOT_DEVICE_H
#define INGOT_DEVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ingot_device_kind {
  INGOT_DEVICE_CPU = 0,
  INGOT_DEVICE_CUDA = 1,
  INGOT_DEVICE_METAL = 2,
  /* Free slots for out-of-tree backends (tests register one here). */
  INGOT_DEVICE_EXT0 = 3,
  INGOT_DEVICE_EXT1 = 4,
  INGOT_DEVICE_KIND_COUNT = 5
} ingot_device_kind;

typedef struct ingot_device {
  ingot_device_kind kind;
  int index;
} ingot_device;

#define INGOT_CPU ((ingot_device){INGOT_DEVICE_CPU, 0})

/* cuda:index as a device value (not checked until used). */
ingot_device ingot_cuda(int index);
/* Number of devices of a kind (0 when its backend is absent or finds none). */
int ingot_device_count(ingot_device_kind kind);
/* True when the device exists and can be used. */
bool ingot_device_available(ingot_device dev);
/* The best available accelerator (cuda:0 first), else the CPU. */
ingot_device ingot_default_device(void);
/* Backend name of a kind: "cpu", "cuda", ... (NULL if none registered). */
const char *ingot_device_kind_name(ingot_device_kind kind);
/* "cpu" or "cuda:0" into buf; returns buf. */
const char *ingot_device_str(ingot_device dev, char *buf, size_t len);
/* Parse "cpu", "cuda", "cuda:1"; returns 0 on success. */
int ingot_device_parse(const char *s, ingot_device *out);
bool ingot_device_equal(ingot_device a, ingot_device b);

typedef struct ingot_device_info {
  char name[128];       /* "NVIDIA H200", CPU model name, ... */
  size_t total_memory;  /* bytes */
  size_t free_memory;   /* bytes */
  int compute_units;    /* SMs or CPU threads */
  int capability_major; /* CUDA compute capability, 0 elsewhere */
  int capability_minor;
} ingot_device_info;

/* Fill info for a device; non-zero status (and an error) if it is absent. */
int ingot_device_get_info(ingot_device dev, ingot_device_info *info);
/* Block until all work queued on the device has finished. */
int ingot_synchronize(ingot_device dev);

#ifdef __cplusplus
}
#endif
#endif
