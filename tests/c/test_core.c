/* Core behaviour: error messages and statuses, NULL propagation through
 * chains, no leaked handles on any error path, metadata and devices. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ingot/ingot.h"
#include "test.h"

static int64_t live0;

/* Every error path must give back what it allocated. */
#define CHECK_NO_LEAK() CHECK_EQ_INT(ingot_live_tensors(), live0)

static ingot_tensor *iota(int ndim, const int64_t *shape) {
  int64_t n = 1;
  for (int i = 0; i < ndim; i++) n *= shape[i];
  ingot_tensor *flat = ingot_arange(0, (double)n, 1, INGOT_F32, INGOT_CPU);
  ingot_tensor *t = ingot_reshape(flat, ndim, shape);
  ingot_release(flat);
  return t;
}

static void test_messages(void) {
  ingot_clear_error();
  CHECK_STR(ingot_last_error(), "");
  CHECK_EQ_INT(ingot_last_status(), INGOT_OK);
  ingot_tensor *t = iota(2, (int64_t[]){3, 4});
  CHECK(t != NULL);

  CHECK(ingot_select(t, 0, 3) == NULL);
  CHECK_EQ_INT(ingot_last_status(), INGOT_ERR_INDEX);
  CHECK_HAS(ingot_last_error(), "select: index 3 out of range");

  CHECK(ingot_transpose(t, 0, 2) == NULL);
  CHECK_EQ_INT(ingot_last_status(), INGOT_ERR_INDEX);
  CHECK_HAS(ingot_last_error(), "dimension out of range");

  CHECK(ingot_reshape(t, 2, (int64_t[]){5, -1}) == NULL);
  CHECK_EQ_INT(ingot_last_status(), INGOT_ERR_SHAPE);
  CHECK_HAS(ingot_last_error(), "reshape");

  CHECK(ingot_cast(t, (ingot_dtype)77) == NULL);
  CHECK_EQ_INT(ingot_last_status(), INGOT_ERR_DTYPE);

  CHECK(ingot_arange(0, 1, 0, INGOT_F32, INGOT_CPU) == NULL);
  CHECK_EQ_INT(ingot_last_status(), INGOT_ERR_ARG);
  CHECK_HAS(ingot_last_error(), "step");

  CHECK(ingot_empty(2, (int64_t[]){INT64_C(1) << 62, INT64_C(1) << 62}, INGOT_F32, INGOT_CPU) ==
        NULL);
  CHECK_EQ_INT(ingot_last_status(), INGOT_ERR_SHAPE);
  CHECK(ingot_empty(9, (int64_t[]){1, 1, 1, 1, 1, 1, 1, 1, 1}, INGOT_F32, INGOT_CPU) == NULL);
  CHECK_EQ_INT(ingot_last_status(), INGOT_ERR_SHAPE);
  CHECK(ingot_zeros(1, (int64_t[]){4}, INGOT_F32, ingot_cuda(99)) == NULL);
  CHECK_EQ_INT(ingot_last_status(), INGOT_ERR_DEVICE);

  CHECK(ingot_rand(1, (int64_t[]){4}, INGOT_I32, INGOT_CPU) == NULL);
  CHECK_EQ_INT(ingot_last_status(), INGOT_ERR_DTYPE);

  CHECK(ingot_promote_types(INGOT_F8E4M3FN, INGOT_F32) == INGOT_DTYPE_INVALID);
  CHECK_EQ_INT(ingot_last_status(), INGOT_ERR_DTYPE);

  ingot_clear_error();
  CHECK_STR(ingot_last_error(), "");
  CHECK_EQ_INT(ingot_last_status(), INGOT_OK);
  ingot_release(t);
  CHECK_NO_LEAK();
}

static void test_null_chains(void) {
  ingot_tensor *t = iota(2, (int64_t[]){3, 4});
  /* The first failure's message survives the NULLs it feeds. */
  ingot_clear_error();
  ingot_tensor *r = ingot_unsqueeze(
      ingot_transpose(ingot_cast(ingot_slice(ingot_select(t, 1, 9), 0, 0, 2, 1), INGOT_F64), 0, 1),
      0);
  CHECK(r == NULL);
  CHECK_EQ_INT(ingot_last_status(), INGOT_ERR_INDEX);
  CHECK_HAS(ingot_last_error(), "select: index 9");

  ingot_clear_error();
  CHECK(ingot_reshape(ingot_expand(ingot_permute(t, (int[]){0, 0}), 2, (int64_t[]){3, 4}), 1,
                      (int64_t[]){-1}) == NULL);
  CHECK_HAS(ingot_last_error(), "permute");

  /* A NULL with no error pending names the op. */
  ingot_clear_error();
  CHECK(ingot_slice(NULL, 0, 0, 1, 1) == NULL);
  CHECK_EQ_INT(ingot_last_status(), INGOT_ERR_ARG);
  CHECK_HAS(ingot_last_error(), "slice");
  ingot_clear_error();
  CHECK(ingot_cast(NULL, INGOT_F32) == NULL);
  CHECK(ingot_clone(NULL) == NULL);
  CHECK(ingot_contiguous(NULL) == NULL);
  CHECK(ingot_to(NULL, INGOT_CPU) == NULL);
  CHECK(ingot_full_like(NULL, 1) == NULL);
  CHECK(ingot_keep(NULL) == NULL);
  CHECK(isnan(ingot_item(NULL)));
  CHECK(ingot_to_host(NULL, NULL, 0) != INGOT_OK);
  CHECK(ingot_copy_(NULL, t) != INGOT_OK);
  CHECK(ingot_copy_(t, NULL) != INGOT_OK);
  ingot_tensor *out[4];
  CHECK_EQ_INT(ingot_split(NULL, 1, 0, out, 4), -1);
  CHECK_EQ_INT(ingot_chunk(NULL, 1, 0, out, 4), -1);
  ingot_release(NULL);
  CHECK_EQ_INT(ingot_ndim(NULL), -1);
  CHECK_EQ_INT(ingot_numel(NULL), -1);
  CHECK_EQ_INT(ingot_size(NULL, 0), -1);
  CHECK(ingot_shape(NULL) == NULL);
  CHECK(!ingot_shares_storage(NULL, t));
  CHECK_EQ_INT(ingot_dtype_of(NULL), INGOT_DTYPE_INVALID);
  ingot_release(t);
  CHECK_NO_LEAK();
}

static void test_error_paths_do_not_leak(void) {
  ingot_tensor *t = iota(3, (int64_t[]){2, 3, 4});
  int64_t base = ingot_live_tensors();
  ingot_tensor *tr = ingot_transpose(t, 0, 2);
  ingot_tensor *out[2] = {NULL, NULL};
  /* Each failing call leaves the live count where it was. */
  CHECK(ingot_view(tr, 1, (int64_t[]){-1}) == NULL);
  CHECK_EQ_INT(ingot_live_tensors(), base + 1);
  CHECK(ingot_expand(t, 3, (int64_t[]){2, 5, 4}) == NULL);
  CHECK(ingot_narrow(t, 1, 2, 2) == NULL);
  CHECK(ingot_squeeze(t, 3) == NULL);
  CHECK(ingot_unsqueeze(t, 4) == NULL);
  CHECK(ingot_flatten(t, 2, 0) == NULL);
  CHECK_EQ_INT(ingot_split(t, 1, 0, out, 1), -1); /* 2 pieces, 1 slot */
  CHECK_EQ_INT(ingot_chunk(t, 0, 0, out, 2), -1);
  CHECK(ingot_randint(3, 3, 1, (int64_t[]){4}, INGOT_I64, INGOT_CPU) == NULL);
  CHECK(ingot_linspace(0, 1, -2, INGOT_F32, INGOT_CPU) == NULL);
  CHECK(ingot_eye(-1, 2, INGOT_F32, INGOT_CPU) == NULL);
  CHECK(ingot_from_host(NULL, 1, (int64_t[]){3}, INGOT_F32, INGOT_CPU) == NULL);
  CHECK(ingot_empty(1, (int64_t[]){-3}, INGOT_F32, INGOT_CPU) == NULL);
  CHECK(ingot_empty(1, NULL, INGOT_F32, INGOT_CPU) == NULL);
  float buf[24];
  CHECK(ingot_to_host(tr, buf, sizeof buf - 1) == INGOT_ERR_ARG);
  CHECK_HAS(ingot_last_error(), "to_host");
  CHECK(ingot_copy_(t, ingot_expand(t, 3, (int64_t[]){2, 2, 4})) != INGOT_OK);
  ingot_tensor *small = ingot_zeros(1, (int64_t[]){3}, INGOT_F32, INGOT_CPU);
  CHECK(ingot_copy_(t, small) == INGOT_ERR_SHAPE); /* 3 does not broadcast to 4 */
  ingot_release(small);
  CHECK_EQ_INT(ingot_live_tensors(), base + 1);
  /* The successful paths: a copying reshape makes one handle. */
  CHECK(ingot_to_host(tr, buf, sizeof buf) == INGOT_OK);
  CHECK(buf[1] == 12.0f && buf[2] == 4.0f); /* tr[0,0,1] = t[1,0,0], tr[0,1,0] = t[0,1,0] */
  ingot_tensor *flat = ingot_reshape(tr, 1, (int64_t[]){-1});
  CHECK(flat && !ingot_shares_storage(flat, t));
  CHECK_EQ_INT(ingot_live_tensors(), base + 2);
  ingot_release(flat);
  ingot_release(tr);
  ingot_release(t);
  CHECK_NO_LEAK();
}

static void test_refcounts_and_metadata(void) {
  ingot_tensor *t = iota(3, (int64_t[]){2, 3, 4});
  CHECK_EQ_INT(ingot_ndim(t), 3);
  CHECK_EQ_INT(ingot_size(t, -1), 4);
  CHECK_EQ_INT(ingot_size(t, 3), -1);
  CHECK_EQ_INT(ingot_size(t, -4), -1);
  CHECK_EQ_INT(ingot_numel(t), 24);
  CHECK_EQ_INT(ingot_strides(t)[0], 12);
  CHECK(ingot_is_contiguous(t));
  CHECK(ingot_retain(t) == t);
  ingot_release(t);
  CHECK_EQ_INT(ingot_live_tensors(), live0 + 1);
  /* A view keeps the storage alive after its base is released. */
  ingot_tensor *v = ingot_select(t, 1, 2);
  ingot_release(t);
  float row[8];
  CHECK(ingot_to_host(v, row, sizeof row) == INGOT_OK);
  CHECK(row[0] == 8.0f && row[7] == 23.0f);
  CHECK_EQ_INT(ingot_offset(v), 8);
  CHECK(ingot_device_equal(ingot_device_of(v), INGOT_CPU));
  ingot_release(v);
  CHECK_NO_LEAK();
}

static void test_devices(void) {
  char buf[32];
  ingot_device d;
  CHECK_EQ_INT(ingot_device_parse("cpu", &d), 0);
  CHECK(d.kind == INGOT_DEVICE_CPU);
  CHECK_EQ_INT(ingot_device_parse("cuda:3", &d), 0);
  CHECK(d.kind == INGOT_DEVICE_CUDA && d.index == 3);
  CHECK_STR(ingot_device_str(d, buf, sizeof buf), "cuda:3");
  CHECK(ingot_device_parse("tpu", &d) != 0);
  CHECK_EQ_INT(ingot_last_status(), INGOT_ERR_ARG);
  CHECK(ingot_device_parse("cuda:x", &d) != 0);
  CHECK(ingot_device_parse("cpu:0", &d) != 0);
  CHECK_STR(ingot_device_str(INGOT_CPU, buf, sizeof buf), "cpu");
  CHECK(ingot_device_available(INGOT_CPU));
  CHECK(!ingot_device_available(ingot_cuda(1000)));
  CHECK_EQ_INT(ingot_device_count(INGOT_DEVICE_CPU), 1);
  CHECK_EQ_INT(ingot_device_count(INGOT_DEVICE_METAL), 0);
  ingot_device_info info;
  CHECK_EQ_INT(ingot_device_get_info(INGOT_CPU, &info), 0);
  CHECK(info.compute_units > 0);
  CHECK(ingot_device_get_info(ingot_cuda(1000), &info) != 0);
  CHECK_EQ_INT(ingot_synchronize(INGOT_CPU), 0);
  CHECK_STR(ingot_op_name(INGOT_OP_ARANGE), "arange");
  CHECK_STR(ingot_op_name(INGOT_OP_COPY), "copy");
  CHECK_STR(ingot_op_name(INGOT_OP_COUNT), "unknown");
}

/* Errors are per thread. */
static void *thread_fn(void *arg) {
  (void)arg;
  ingot_clear_error();
  CHECK(ingot_arange(0, 1, 0, INGOT_F32, INGOT_CPU) == NULL);
  return (void *)(intptr_t)ingot_last_status();
}

static void test_thread_local_errors(void) {
  ingot_clear_error();
  pthread_t th;
  void *st = NULL;
  CHECK_EQ_INT(pthread_create(&th, NULL, thread_fn, NULL), 0);
  pthread_join(th, &st);
  CHECK_EQ_INT((intptr_t)st, INGOT_ERR_ARG);
  CHECK_EQ_INT(ingot_last_status(), INGOT_OK);
  CHECK_STR(ingot_last_error(), "");
}

/* ingot_copy_to_host_async from a CPU tensor copies at once; bad arguments
 * fail naming the op and write nothing. */
static void test_copy_to_host_async_cpu(void) {
  ingot_tensor *src = ingot_arange(0, 6, 1, INGOT_I32, INGOT_CPU);
  ingot_tensor *dst = ingot_zeros(1, (int64_t[]){3}, INGOT_I32, INGOT_CPU);
  ingot_tensor *v = ingot_narrow(src, 0, 3, 3);
  CHECK_EQ_INT(ingot_copy_to_host_async(dst, v), INGOT_OK);
  const int32_t *d = ingot_tensor_data(dst);
  CHECK(d[0] == 3 && d[1] == 4 && d[2] == 5);
  ingot_tensor *strided = ingot_slice(src, 0, 0, 6, 2);
  ingot_tensor *f = ingot_zeros(1, (int64_t[]){3}, INGOT_F32, INGOT_CPU);
  CHECK(ingot_copy_to_host_async(dst, strided) != INGOT_OK);
  CHECK(strstr(ingot_last_error(), "copy_to_host_async") != NULL);
  CHECK(ingot_copy_to_host_async(f, v) != INGOT_OK);
  CHECK(ingot_copy_to_host_async(dst, src) != INGOT_OK);
  CHECK(ingot_copy_to_host_async(NULL, v) != INGOT_OK);
  CHECK(d[0] == 3 && d[1] == 4 && d[2] == 5);
  ingot_release(strided);
  ingot_release(f);
  ingot_release(v);
  ingot_release(dst);
  ingot_release(src);
}

/* The profiler range is a no-op on the CPU. */
static void test_profiler_range_cpu(void) {
  CHECK_EQ_INT(ingot_profiler_range(INGOT_CPU, true), INGOT_OK);
  CHECK_EQ_INT(ingot_profiler_range(INGOT_CPU, false), INGOT_OK);
}

int main(void) {
  live0 = ingot_live_tensors();
  test_messages();
  test_null_chains();
  test_error_paths_do_not_leak();
  test_refcounts_and_metadata();
  test_devices();
  test_thread_local_errors();
  test_copy_to_host_async_cpu();
  test_profiler_range_cpu();
  CHECK_NO_LEAK();
  return test_report();
}
