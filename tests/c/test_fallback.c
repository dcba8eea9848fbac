/* A backend registered from outside the library (on INGOT_DEVICE_EXT0, with
 * host memory) that implements only COPY and FILL: the ops it lacks fail with
 * the documented message, and run on the CPU with INGOT_ENABLE_CPU_FALLBACK=1
 * (one warning per op name on stderr). */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ingot/ingot.h"
#include "test.h"

static int64_t live_bytes, allocs; /* device memory accounting */

static int dev_count(void) { return 1; }
static int dev_info(int index, ingot_device_info *info) {
  (void)index;
  strcpy(info->name, "test device");
  info->total_memory = 1 << 20;
  return 0;
}
static void *dev_alloc(int index, size_t n) {
  (void)index;
  void *p = malloc(n);
  if (!p) ingot_set_error(INGOT_ERR_OOM, "testdev: out of memory");
  live_bytes += (int64_t)n;
  allocs++;
  return p;
}
static void dev_free(int index, void *p, size_t n) {
  (void)index;
  live_bytes -= (int64_t)n;
  free(p);
}
static ingot_status dev_copy(int index, void *dst, const void *src, size_t n) {
  (void)index;
  memcpy(dst, src, n);
  return INGOT_OK;
}
/* Its memory is host memory, so the CPU's kernels can do the work. */
static ingot_status k_copy(ingot_op_args *a) {
  return ingot_backend_get(INGOT_DEVICE_CPU)->kernels[INGOT_OP_COPY](a);
}
static ingot_status k_fill(ingot_op_args *a) {
  return ingot_backend_get(INGOT_DEVICE_CPU)->kernels[INGOT_OP_FILL](a);
}

static ingot_backend testdev = {
    .name = "testdev",
    .kind = INGOT_DEVICE_EXT0,
    .device_count = dev_count,
    .device_info = dev_info,
    .alloc = dev_alloc,
    .free = dev_free,
    .copy_to_host = dev_copy,
    .copy_from_host = dev_copy,
    .copy_on_device = dev_copy,
    .kernels = {[INGOT_OP_COPY] = k_copy, [INGOT_OP_FILL] = k_fill},
};

static const ingot_device DEV = {INGOT_DEVICE_EXT0, 0};

static bool values_equal(const ingot_tensor *a, const ingot_tensor *b) {
  int64_t n = ingot_numel(a);
  if (n != ingot_numel(b) || ingot_dtype_of(a) != ingot_dtype_of(b)) return false;
  size_t nb = (size_t)n * ingot_dtype_size(ingot_dtype_of(a));
  char *x = malloc(nb + 1), *y = malloc(nb + 1);
  bool ok = ingot_to_host(a, x, nb) == INGOT_OK && ingot_to_host(b, y, nb) == INGOT_OK &&
            memcmp(x, y, nb) == 0;
  free(x);
  free(y);
  return ok;
}

static const char *expected_msg(const char *op) {
  static char buf[256];
  snprintf(buf, sizeof buf,
           "operator '%s' is not implemented for the testdev device; set "
           "INGOT_ENABLE_CPU_FALLBACK=1 to run it on the CPU (slower)",
           op);
  return buf;
}

static void test_registration(void) {
  ingot_backend bad = testdev;
  bad.kind = INGOT_DEVICE_CPU;
  CHECK(ingot_backend_register(&bad) == INGOT_ERR_ARG);
  bad.kind = INGOT_DEVICE_EXT1;
  bad.alloc = NULL;
  CHECK(ingot_backend_register(&bad) == INGOT_ERR_ARG);
  CHECK(ingot_backend_register(NULL) != INGOT_OK);
  CHECK(ingot_backend_get(INGOT_DEVICE_EXT1) == NULL);
  CHECK_EQ_INT(ingot_device_count(INGOT_DEVICE_EXT0), 0);

  CHECK(ingot_backend_register(&testdev) == INGOT_OK);
  CHECK(ingot_backend_get(INGOT_DEVICE_EXT0) == &testdev);
  CHECK_EQ_INT(ingot_device_count(INGOT_DEVICE_EXT0), 1);
  CHECK(ingot_device_available(DEV));
  CHECK(!ingot_device_available((ingot_device){INGOT_DEVICE_EXT0, 1}));
  CHECK_STR(ingot_device_kind_name(INGOT_DEVICE_EXT0), "testdev");
  char buf[32];
  CHECK_STR(ingot_device_str(DEV, buf, sizeof buf), "testdev:0");
  ingot_device parsed;
  CHECK(ingot_device_parse("testdev:0", &parsed) == 0 && ingot_device_equal(parsed, DEV));
  ingot_device_info info;
  CHECK(ingot_device_get_info(DEV, &info) == 0);
  CHECK_STR(info.name, "test device");

  /* The support table: what each backend implements. */
  const ingot_backend *cpu = ingot_backend_get(INGOT_DEVICE_CPU);
  const ingot_backend *ext = ingot_backend_get(INGOT_DEVICE_EXT0);
  CHECK(cpu && ext);
  ingot_op have[] = {INGOT_OP_COPY,     INGOT_OP_FILL, INGOT_OP_ARANGE, INGOT_OP_LINSPACE,
                     INGOT_OP_EYE,      INGOT_OP_RAND, INGOT_OP_RANDN,  INGOT_OP_RANDINT,
                     INGOT_OP_NEG,      INGOT_OP_ADD};
  for (size_t i = 0; i < sizeof have / sizeof *have; i++) CHECK(cpu->kernels[have[i]] != NULL);
  int n_ext = 0;
  for (int op = 0; op < INGOT_OP_COUNT; op++) n_ext += ext->kernels[op] != NULL;
  CHECK_EQ_INT(n_ext, 2);
  CHECK(ext->kernels[INGOT_OP_COPY] && ext->kernels[INGOT_OP_FILL]);
  /* Op names are distinct and non-empty. */
  for (int i = 0; i < INGOT_OP_COUNT; i++) {
    CHECK(ingot_op_name((ingot_op)i)[0] != 0);
    for (int j = 0; j < i; j++)
      if (!strcmp(ingot_op_name((ingot_op)i), ingot_op_name((ingot_op)j))) CHECK(!"dup name");
  }
}

static void test_native_ops(void) {
  ingot_tensor *f = ingot_full(2, (int64_t[]){2, 3}, 2.5, INGOT_F32, DEV);
  CHECK(f && ingot_device_of(f).kind == INGOT_DEVICE_EXT0);
  float buf[6];
  CHECK(ingot_to_host(f, buf, sizeof buf) == INGOT_OK);
  CHECK(buf[0] == 2.5f && buf[5] == 2.5f);
  /* COPY: casts, clones, a strided view to host, moves. */
  ingot_tensor *c = ingot_cast(f, INGOT_I16);
  int16_t ib[6];
  CHECK(ingot_to_host(c, ib, sizeof ib) == INGOT_OK && ib[3] == 2);
  float src[6] = {0, 1, 2, 3, 4, 5};
  ingot_tensor *h = ingot_from_host(src, 2, (int64_t[]){2, 3}, INGOT_F32, DEV);
  ingot_tensor *tr = ingot_transpose(h, 0, 1);
  CHECK(ingot_to_host(tr, buf, sizeof buf) == INGOT_OK);
  CHECK(buf[1] == 3 && buf[2] == 1 && buf[5] == 5);
  ingot_tensor *on_cpu = ingot_to(tr, INGOT_CPU);
  CHECK(on_cpu && ingot_device_of(on_cpu).kind == INGOT_DEVICE_CPU);
  ingot_tensor *back = ingot_to(on_cpu, DEV);
  CHECK(values_equal(back, tr));
  CHECK(ingot_copy_(f, tr) == INGOT_ERR_SHAPE);
  ingot_tensor *sl = ingot_slice(h, 1, 0, 3, 2);
  ingot_tensor *m1 = ingot_full(0, NULL, -1, INGOT_F32, INGOT_CPU);
  CHECK(ingot_copy_(sl, m1) == INGOT_OK); /* a CPU scalar broadcast into a device view */
  ingot_release(m1);
  CHECK(ingot_to_host(h, buf, sizeof buf) == INGOT_OK);
  CHECK(buf[0] == -1 && buf[1] == 1 && buf[2] == -1 && buf[3] == -1);
  ingot_release(sl);
  ingot_release(back);
  ingot_release(on_cpu);
  ingot_release(tr);
  ingot_release(h);
  ingot_release(c);
  ingot_release(f);
}

static void test_without_fallback(void) {
  int64_t live = ingot_live_tensors(), bytes = live_bytes;
  unsetenv("INGOT_ENABLE_CPU_FALLBACK");
  CHECK(ingot_arange(0, 5, 1, INGOT_F32, DEV) == NULL);
  CHECK_EQ_INT(ingot_last_status(), INGOT_ERR_UNSUPPORTED);
  CHECK_STR(ingot_last_error(), expected_msg("arange"));
  CHECK(ingot_linspace(0, 1, 5, INGOT_F32, DEV) == NULL);
  CHECK_STR(ingot_last_error(), expected_msg("linspace"));
  CHECK(ingot_rand(1, (int64_t[]){5}, INGOT_F32, DEV) == NULL);
  CHECK_STR(ingot_last_error(), expected_msg("rand"));
  setenv("INGOT_ENABLE_CPU_FALLBACK", "0", 1); /* "0" means off */
  CHECK(ingot_eye(3, -1, INGOT_F32, DEV) == NULL);
  CHECK_STR(ingot_last_error(), expected_msg("eye"));
  ingot_tensor *x = ingot_full(1, (int64_t[]){4}, 1.5, INGOT_F32, DEV);
  CHECK(ingot_neg(x) == NULL);
  CHECK_STR(ingot_last_error(), expected_msg("neg"));
  CHECK(ingot_add(x, x) == NULL);
  CHECK_STR(ingot_last_error(), expected_msg("add"));
  /* Mixed devices are an error, not a silent move. */
  ingot_tensor *y = ingot_full(1, (int64_t[]){4}, 1, INGOT_F32, INGOT_CPU);
  CHECK(ingot_add(x, y) == NULL);
  CHECK_EQ_INT(ingot_last_status(), INGOT_ERR_DEVICE);
  ingot_release(y);
  ingot_release(x);
  CHECK_EQ_INT(ingot_live_tensors(), live);
  CHECK_EQ_INT(live_bytes, bytes);
}

/* Run fn with stderr going to a temp file; returns the captured text. */
static char *capture_stderr(void (*fn)(void)) {
  char path[] = "/tmp/ingot_fallback_XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) return NULL;
  fflush(stderr);
  int saved = dup(2);
  dup2(fd, 2);
  fn();
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  off_t n = lseek(fd, 0, SEEK_END);
  char *text = calloc(1, (size_t)n + 1);
  if (text && pread(fd, text, (size_t)n, 0) != n) text[0] = 0;
  close(fd);
  unlink(path);
  return text;
}

static void fallback_body(void) {
  ingot_tensor *cpu, *dev;
  for (int rep = 0; rep < 3; rep++) { /* repeats must not warn again */
    dev = ingot_arange(2, 20, 3, INGOT_I32, DEV);
    cpu = ingot_arange(2, 20, 3, INGOT_I32, INGOT_CPU);
    CHECK(dev && ingot_device_of(dev).kind == INGOT_DEVICE_EXT0 && values_equal(dev, cpu));
    ingot_release(dev);
    ingot_release(cpu);
  }
  dev = ingot_linspace(-1, 1, 9, INGOT_F64, DEV);
  cpu = ingot_linspace(-1, 1, 9, INGOT_F64, INGOT_CPU);
  CHECK(values_equal(dev, cpu));
  ingot_release(dev);
  ingot_release(cpu);
  dev = ingot_eye(3, 4, INGOT_BF16, DEV);
  cpu = ingot_eye(3, 4, INGOT_BF16, INGOT_CPU);
  CHECK(values_equal(dev, cpu));
  ingot_release(dev);
  ingot_release(cpu);
  /* The same seed gives the same numbers on every device. */
  ingot_manual_seed(123);
  dev = ingot_randn(2, (int64_t[]){5, 7}, INGOT_F32, DEV);
  ingot_manual_seed(123);
  cpu = ingot_randn(2, (int64_t[]){5, 7}, INGOT_F32, INGOT_CPU);
  CHECK(values_equal(dev, cpu));
  ingot_release(dev);
  ingot_release(cpu);
  /* Elementwise ops: inputs copied over (strided too), result copied back. */
  float v[6] = {1, -2, 3, -4, 5, -6};
  ingot_tensor *x = ingot_from_host(v, 2, (int64_t[]){2, 3}, INGOT_F32, DEV);
  ingot_tensor *xt = ingot_transpose(x, 0, 1);
  for (int rep = 0; rep < 2; rep++) {
    ingot_tensor *n = ingot_neg(xt);
    float out[6];
    CHECK(n && ingot_device_of(n).kind == INGOT_DEVICE_EXT0);
    CHECK(ingot_to_host(n, out, sizeof out) == INGOT_OK);
    CHECK(out[0] == -1 && out[1] == 4 && out[2] == 2 && out[5] == 6);
    ingot_release(n);
  }
  ingot_tensor *s = ingot_add(x, x);
  float out[6];
  CHECK(s && ingot_to_host(s, out, sizeof out) == INGOT_OK && out[3] == -8);
  ingot_release(s);
  ingot_release(xt);
  ingot_release(x);
}

static int count_lines(const char *s, const char *needle) {
  int n = 0;
  for (const char *p = s; p && *p;) {
    const char *nl = strchr(p, '\n');
    size_t len = nl ? (size_t)(nl - p) : strlen(p);
    char line[512];
    snprintf(line, sizeof line, "%.*s", (int)(len < 511 ? len : 511), p);
    if (strstr(line, needle)) n++;
    p = nl ? nl + 1 : p + len;
  }
  return n;
}

static void test_with_fallback(void) {
  int64_t live = ingot_live_tensors(), bytes = live_bytes;
  setenv("INGOT_ENABLE_CPU_FALLBACK", "1", 1);
  char *err = capture_stderr(fallback_body);
  CHECK(err != NULL);
  if (!err) return;
  /* One line per op name: arange, linspace, eye, randn, neg, add. */
  const char *ops[] = {"arange", "linspace", "eye", "randn", "neg", "add"};
  int total = 0;
  for (size_t i = 0; i < sizeof ops / sizeof *ops; i++) {
    char needle[64];
    snprintf(needle, sizeof needle, "operator '%s' is not implemented for the testdev", ops[i]);
    CHECK_EQ_INT(count_lines(err, needle), 1);
    total++;
  }
  CHECK_EQ_INT(count_lines(err, "warning"), total);
  CHECK_EQ_INT(count_lines(err, "ingot"), total); /* nothing else printed */
  free(err);
  unsetenv("INGOT_ENABLE_CPU_FALLBACK");
  CHECK_EQ_INT(ingot_live_tensors(), live);
  CHECK_EQ_INT(live_bytes, bytes);
}

int main(void) {
  int64_t live0 = ingot_live_tensors();
  test_registration();
  test_native_ops();
  test_without_fallback();
  test_with_fallback();
  CHECK_EQ_INT(ingot_live_tensors(), live0);
  CHECK_EQ_INT(live_bytes, 0);
  CHECK(allocs > 10);
  return test_report();
}
