/* The device registry, op dispatch and the CPU fallback. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <threads.h>

#include "env.h"
#include "internal.h"

static const ingot_backend *registry[INGOT_DEVICE_KIND_COUNT];
static ingot_backend builtin_cpu;
#ifdef INGOT_HAVE_CUDA
static ingot_backend builtin_cuda;
#endif
static once_flag init_once = ONCE_FLAG_INIT;

static void init_builtin(void) {
  cpu_backend_init(&builtin_cpu);
  registry[INGOT_DEVICE_CPU] = &builtin_cpu;
#ifdef INGOT_HAVE_CUDA
  cuda_backend_init(&builtin_cuda);
  registry[INGOT_DEVICE_CUDA] = &builtin_cuda;
#endif
}

void backends_ensure_init(void) { call_once(&init_once, init_builtin); }

static const char *const op_names[INGOT_OP_COUNT] = {
#define OP_NAME(e, s) s,
    INGOT_OP_LIST(OP_NAME)
#undef OP_NAME
};

const char *ingot_op_name(ingot_op op) {
  return op >= 0 && op < INGOT_OP_COUNT ? op_names[op] : "unknown";
}

ingot_status ingot_backend_register(const ingot_backend *backend) {
  backends_ensure_init();
  if (!backend) return ingot_set_error(INGOT_ERR_ARG, "backend_register: NULL backend");
  if (backend->kind <= INGOT_DEVICE_CPU || backend->kind >= INGOT_DEVICE_KIND_COUNT)
    return ingot_set_error(INGOT_ERR_ARG, "backend_register: kind %d cannot be registered",
                           backend->kind);
  if (!backend->alloc || !backend->free || !backend->copy_to_host || !backend->copy_from_host ||
      !backend->device_count)
    return ingot_set_error(INGOT_ERR_ARG, "backend_register: '%s' lacks memory functions",
                           backend->name ? backend->name : "?");
  registry[backend->kind] = backend;
  return INGOT_OK;
}

const ingot_backend *ingot_backend_get(ingot_device_kind kind) {
  backends_ensure_init();
  return kind >= 0 && kind < INGOT_DEVICE_KIND_COUNT ? registry[kind] : NULL;
}

const ingot_backend *backend_for(ingot_device dev) {
  const ingot_backend *be = ingot_backend_get(dev.kind);
  char buf[32];
  if (!be)
    return ingot_fail(INGOT_ERR_DEVICE, "device %s: no backend for it in this build",
                      ingot_device_str(dev, buf, sizeof buf));
  if (dev.index < 0 || dev.index >= be->device_count())
    return ingot_fail(INGOT_ERR_DEVICE, "device %s is not available (%d %s device(s) found)",
                      ingot_device_str(dev, buf, sizeof buf), be->device_count(), be->name);
  return be;
}

const ingot_backend *backend_with(ingot_device dev, const char *op, int n, const ingot_op *ops) {
  const ingot_backend *be = backend_for(dev);
  for (int i = 0; be && i < n; i++)
    if (!be->kernels[ops[i]])
      return ingot_fail(INGOT_ERR_UNSUPPORTED, "%s: the %s backend lacks %s", op,
                        ingot_device_kind_name(dev.kind), ingot_op_name(ops[i]));
  return be;
}

/* ---- devices ---- */
ingot_device ingot_cuda(int index) { return (ingot_device){INGOT_DEVICE_CUDA, index}; }

int ingot_device_count(ingot_device_kind kind) {
  const ingot_backend *be = ingot_backend_get(kind);
  return be ? be->device_count() : 0;
}

bool ingot_device_available(ingot_device dev) {
  const ingot_backend *be = ingot_backend_get(dev.kind);
  return be && dev.index >= 0 && dev.index < be->device_count();
}

ingot_device ingot_default_device(void) {
  if (ingot_device_count(INGOT_DEVICE_CUDA) > 0) return ingot_cuda(0);
  if (ingot_device_count(INGOT_DEVICE_METAL) > 0) return (ingot_device){INGOT_DEVICE_METAL, 0};
  return INGOT_CPU;
}

const char *ingot_device_kind_name(ingot_device_kind kind) {
  const ingot_backend *be = ingot_backend_get(kind);
  if (be) return be->name;
  static const char *const names[] = {"cpu", "cuda", "metal", "ext0", "ext1"};
  return kind >= 0 && kind < INGOT_DEVICE_KIND_COUNT ? names[kind] : NULL;
}

const char *ingot_device_str(ingot_device dev, char *buf, size_t len) {
  const char *name = ingot_device_kind_name(dev.kind);
  if (!name) name = "unknown";
  if (dev.kind == INGOT_DEVICE_CPU)
    snprintf(buf, len, "cpu");
  else
    snprintf(buf, len, "%s:%d", name, dev.index);
  return buf;
}

int ingot_device_parse(const char *s, ingot_device *out) {
  if (!s || !out) return ingot_set_error(INGOT_ERR_ARG, "device_parse: NULL argument");
  for (int k = 0; k < INGOT_DEVICE_KIND_COUNT; k++) {
    const char *name = ingot_device_kind_name((ingot_device_kind)k);
    size_t n = name ? strlen(name) : 0;
    if (!n || strncmp(s, name, n)) continue;
    if (s[n] == 0) {
      *out = (ingot_device){(ingot_device_kind)k, 0};
      return INGOT_OK;
    }
    if (s[n] == ':' && k != INGOT_DEVICE_CPU) {
      char *end;
      long idx = strtol(s + n + 1, &end, 10);
      if (*end == 0 && end != s + n + 1 && idx >= 0 && idx < 1024) {
        *out = (ingot_device){(ingot_device_kind)k, (int)idx};
        return INGOT_OK;
      }
    }
  }
  return ingot_set_error(INGOT_ERR_ARG, "unknown device '%s' (expected cpu, cuda or cuda:N)", s);
}

bool ingot_device_equal(ingot_device a, ingot_device b) {
  return a.kind == b.kind && a.index == b.index;
}

int ingot_device_get_info(ingot_device dev, ingot_device_info *info) {
  if (!info) return ingot_set_error(INGOT_ERR_ARG, "device_get_info: NULL info");
  const ingot_backend *be = backend_for(dev);
  if (!be) return ingot_last_status();
  memset(info, 0, sizeof *info);
  return be->device_info ? be->device_info(dev.index, info) : INGOT_OK;
}

int ingot_synchronize(ingot_device dev) {
  const ingot_backend *be = backend_for(dev);
  if (!be) return ingot_last_status();
  return be->synchronize ? be->synchronize(dev.index) : INGOT_OK;
}

ingot_status copy_bytes(ingot_device dst_dev, void *dst, ingot_device src_dev, const void *src,
                        size_t nbytes) {
  if (nbytes == 0) return INGOT_OK;
  bool dst_cpu = dst_dev.kind == INGOT_DEVICE_CPU, src_cpu = src_dev.kind == INGOT_DEVICE_CPU;
  if (dst_cpu && src_cpu) {
    memcpy(dst, src, nbytes);
    return INGOT_OK;
  }
  if (dst_cpu) return backend_for(src_dev)->copy_to_host(src_dev.index, dst, src, nbytes);
  if (src_cpu) return backend_for(dst_dev)->copy_from_host(dst_dev.index, dst, src, nbytes);
  if (ingot_device_equal(dst_dev, src_dev) && backend_for(dst_dev)->copy_on_device)
    return backend_for(dst_dev)->copy_on_device(dst_dev.index, dst, src, nbytes);
  /* Between two devices without a direct path: through the host. */
  void *tmp = malloc(nbytes);
  if (!tmp) return ingot_set_error(INGOT_ERR_OOM, "out of host memory staging a copy");
  ingot_status st = backend_for(src_dev)->copy_to_host(src_dev.index, tmp, src, nbytes);
  if (st == INGOT_OK) st = backend_for(dst_dev)->copy_from_host(dst_dev.index, dst, tmp, nbytes);
  free(tmp);
  return st;
}

/* ---- dispatch ---- */
static bool fallback_enabled(void) { return ingot_env_on("INGOT_ENABLE_CPU_FALLBACK"); }

static atomic_uchar warned[INGOT_OP_COUNT];

/* Ops whose outputs core pre-fills (with a copy of in[0]) before the kernel
 * updates them in place: the fallback must carry that content over. */
static bool out_prefilled(ingot_op op) {
  return op == INGOT_OP_SCATTER || op == INGOT_OP_SCATTER_ADD || op == INGOT_OP_INDEX_PUT ||
         op == INGOT_OP_KV_CACHE_WRITE || op == INGOT_OP_ROPE_KV_WRITE ||
         op == INGOT_OP_ROPE_KV_ATTENTION || op == INGOT_OP_QMATMUL_ROPE_KV_ATTENTION;
}

static ingot_status run_on_cpu(ingot_op_args *a, ingot_device dev, const ingot_backend *be) {
  const ingot_backend *cpu = ingot_backend_get(INGOT_DEVICE_CPU);
  if (!atomic_exchange(&warned[a->op], 1))
    fprintf(stderr,
            "ingot: warning: operator '%s' is not implemented for the %s device; running it on "
            "the CPU (INGOT_ENABLE_CPU_FALLBACK=1)\n",
            ingot_op_name(a->op), be->name);
  ingot_op_args c = *a;
  int64_t lo[INGOT_OP_MAX_OUT] = {0};
  bool span[INGOT_OP_MAX_OUT] = {false};
  ingot_status st = INGOT_OK;
  for (int i = 0; i < a->nin; i++) {
    c.in[i] = NULL;
    if (a->in[i] && !(c.in[i] = ingot_to(a->in[i], INGOT_CPU))) st = ingot_last_status();
  }
  for (int o = 0; o < a->nout; o++) {
    ingot_tensor *d = a->out[o];
    c.out[o] = NULL;
    if (!d || st != INGOT_OK) continue;
    /* Outputs with content or a strided layout travel as their storage span. */
    span[o] = out_prefilled(a->op) || !ingot_is_contiguous(d);
    c.out[o] =
        span[o] ? tensor_host_span(d, &lo[o]) : tensor_new(d->ndim, d->shape, d->dtype, INGOT_CPU);
    if (!c.out[o]) st = ingot_last_status();
  }
  if (st == INGOT_OK) st = cpu->kernels[a->op](&c);
  for (int o = 0; o < a->nout && st == INGOT_OK; o++) {
    ingot_tensor *d = a->out[o];
    if (d) {
      size_t es = ingot_dtype_size(d->dtype);
      char *dst = (char *)d->storage->data + (span[o] ? lo[o] : d->offset) * (int64_t)es;
      st = copy_bytes(dev, dst, INGOT_CPU, c.out[o]->storage->data, c.out[o]->storage->nbytes);
    } else if (c.out[o]) {
      if (!(a->out[o] = ingot_to(c.out[o], dev))) st = ingot_last_status();
    }
  }
  for (int i = 0; i < a->nin; i++) ingot_release(c.in[i]);
  for (int o = 0; o < a->nout; o++) ingot_release(c.out[o]);
  return st;
}

ingot_status dispatch(ingot_op_args *a) {
  ingot_device dev = a->nin > 0 && a->in[0] ? a->in[0]->device : a->out[0]->device;
  const ingot_backend *be = backend_for(dev);
  if (!be) return ingot_last_status();
  if (be->kernels[a->op]) return be->kernels[a->op](a);
  const ingot_backend *cpu = ingot_backend_get(INGOT_DEVICE_CPU);
  if (dev.kind == INGOT_DEVICE_CPU || !cpu->kernels[a->op])
    return ingot_set_error(INGOT_ERR_UNSUPPORTED,
                           "operator '%s' is not implemented for the %s "
                           "device",
                           ingot_op_name(a->op), be->name);
  if (!fallback_enabled())
    return ingot_set_error(INGOT_ERR_UNSUPPORTED,
                           "operator '%s' is not implemented for the %s device; set "
                           "INGOT_ENABLE_CPU_FALLBACK=1 to run it on the CPU (slower)",
                           ingot_op_name(a->op), be->name);
  return run_on_cpu(a, dev, be);
}

ingot_tensor *dispatch_out(ingot_op_args *a) {
  if (dispatch(a) != INGOT_OK) {
    for (int o = 0; o < a->nout; o++) ingot_release(a->out[o]);
    return NULL;
  }
  return a->out[0];
}
