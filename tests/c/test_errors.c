/* Error paths of every public function of ops.h and tensor.h:
 * (a) NULL inputs give NULL / -1 / a non-zero status without crashing, and a
 *     NULL produced by an earlier failure keeps that FIRST message;
 * (b) no failing call leaks a tensor handle (ingot_live_tensors unchanged);
 * (c) bad arguments give an informative message naming the op. */
#include <math.h>
#include <stdint.h>

#include "ingot/ingot.h"
#include "test.h"

/* ---- fixtures (created once, alive for the whole run) ---- */
static ingot_tensor *f23;      /* f32 [2,3] */
static ingot_tensor *f234;     /* f32 [2,3,4] */
static ingot_tensor *f4;       /* f32 [4] */
static ingot_tensor *c23;      /* c64 [2,3] */
static ingot_tensor *b23;      /* bool [2,3] */
static ingot_tensor *i23;      /* i64 [2,3] */
static ingot_tensor *idx;      /* i64 [2] = {0, 1} */
static ingot_tensor *idxoob;   /* i64 [2] = {0, 5} */
static ingot_tensor *idx23oob; /* i64 [2,3] with a 7 */
static ingot_tensor *fidx;     /* f32 [2] */

/* ---- NULL inputs ----
 * Each case runs twice: with BAD = NULL (no prior error: status ARG and a
 * message naming the op), then with BAD = a failing ingot_reshape (the
 * reshape's message and status must survive the op). */
static int g_mode;
static char g_first_msg[1024];
static ingot_status g_first_status;
static ingot_tensor *g_idx;     /* out slot for max_dim/sort/topk */
static ingot_tensor *g_outs[4]; /* out slots for split/chunk */

static ingot_tensor *bad(void) { return g_mode ? ingot_reshape(f23, 1, (int64_t[]){7}) : NULL; }
#define BAD bad()

static void null_verdict(const char *op, int failed, int64_t live, int line) {
  if (!failed) fprintf(stderr, "line %d: %s did not fail on a NULL input\n", line, op);
  CHECK(failed);
  CHECK_EQ_INT(ingot_live_tensors(), live);
  CHECK(g_idx == NULL);
  for (int i = 0; i < 4; i++) CHECK(g_outs[i] == NULL);
  if (g_mode == 0) {
    if (ingot_last_status() != INGOT_ERR_ARG || !strstr(ingot_last_error(), op))
      fprintf(stderr, "line %d: %s(NULL): status %d, message \"%s\"\n", line, op,
              ingot_last_status(), ingot_last_error());
    CHECK_EQ_INT(ingot_last_status(), INGOT_ERR_ARG);
    CHECK_HAS(ingot_last_error(), op);
  } else {
    if (strcmp(ingot_last_error(), g_first_msg))
      fprintf(stderr, "line %d: %s replaced the first error\n", line, op);
    CHECK_STR(ingot_last_error(), g_first_msg);
    CHECK_EQ_INT(ingot_last_status(), g_first_status);
  }
}

static void reset_slots(void) {
  g_idx = NULL;
  for (int i = 0; i < 4; i++) g_outs[i] = NULL;
}

/* A tensor-returning call. */
#define NT(op, expr)                                 \
  do {                                               \
    for (g_mode = 0; g_mode < 2; g_mode++) {         \
      reset_slots();                                 \
      int64_t live_ = ingot_live_tensors();          \
      ingot_clear_error();                           \
      ingot_tensor *r_ = (expr);                     \
      null_verdict(op, r_ == NULL, live_, __LINE__); \
      ingot_release(r_);                             \
      ingot_release(g_idx);                          \
    }                                                \
  } while (0)

/* A call whose failure is given by a condition on its result. */
#define NS(op, failed_cond)                             \
  do {                                                  \
    for (g_mode = 0; g_mode < 2; g_mode++) {            \
      reset_slots();                                    \
      int64_t live_ = ingot_live_tensors();             \
      ingot_clear_error();                              \
      null_verdict(op, (failed_cond), live_, __LINE__); \
    }                                                   \
  } while (0)

static void test_null_unary(void) {
  NT("neg", ingot_neg(BAD));
  NT("abs", ingot_abs(BAD));
  NT("sign", ingot_sign(BAD));
  NT("exp", ingot_exp(BAD));
  NT("exp2", ingot_exp2(BAD));
  NT("log", ingot_log(BAD));
  NT("log2", ingot_log2(BAD));
  NT("log1p", ingot_log1p(BAD));
  NT("expm1", ingot_expm1(BAD));
  NT("sqrt", ingot_sqrt(BAD));
  NT("rsqrt", ingot_rsqrt(BAD));
  NT("reciprocal", ingot_reciprocal(BAD));
  NT("sin", ingot_sin(BAD));
  NT("cos", ingot_cos(BAD));
  NT("tan", ingot_tan(BAD));
  NT("tanh", ingot_tanh(BAD));
  NT("sigmoid", ingot_sigmoid(BAD));
  NT("silu", ingot_silu(BAD));
  NT("gelu", ingot_gelu(BAD));
  NT("gelu_tanh", ingot_gelu_tanh(BAD));
  NT("relu", ingot_relu(BAD));
  NT("erf", ingot_erf(BAD));
  NT("floor", ingot_floor(BAD));
  NT("ceil", ingot_ceil(BAD));
  NT("round", ingot_round(BAD));
  NT("trunc", ingot_trunc(BAD));
  NT("isnan", ingot_isnan(BAD));
  NT("isinf", ingot_isinf(BAD));
  NT("isfinite", ingot_isfinite(BAD));
  NT("logical_not", ingot_logical_not(BAD));
  NT("bitwise_not", ingot_bitwise_not(BAD));
}

/* Both argument positions of a binary op. */
#define NB(op, fn)        \
  do {                    \
    NT(op, fn(BAD, f23)); \
    NT(op, fn(f23, BAD)); \
  } while (0)

static void test_null_binary(void) {
  NB("add", ingot_add);
  NB("sub", ingot_sub);
  NB("mul", ingot_mul);
  NB("div", ingot_div);
  NB("floor_divide", ingot_floor_divide);
  NB("remainder", ingot_remainder);
  NB("pow", ingot_pow);
  NB("atan2", ingot_atan2);
  NB("maximum", ingot_maximum);
  NB("minimum", ingot_minimum);
  NB("eq", ingot_eq);
  NB("ne", ingot_ne);
  NB("lt", ingot_lt);
  NB("le", ingot_le);
  NB("gt", ingot_gt);
  NB("ge", ingot_ge);
  NB("logical_and", ingot_logical_and);
  NB("logical_or", ingot_logical_or);
  NB("logical_xor", ingot_logical_xor);
  NB("bitwise_and", ingot_bitwise_and);
  NB("bitwise_or", ingot_bitwise_or);
  NB("bitwise_xor", ingot_bitwise_xor);
  NB("left_shift", ingot_left_shift);
  NB("right_shift", ingot_right_shift);
  NT("add", ingot_add_scalar(BAD, 1));
  NT("sub", ingot_sub_scalar(BAD, 1));
  NT("mul", ingot_mul_scalar(BAD, 1));
  NT("div", ingot_div_scalar(BAD, 1));
  NT("pow", ingot_pow_scalar(BAD, 1));
  NT("where", ingot_where(BAD, f23, f23));
  NT("where", ingot_where(b23, BAD, f23));
  NT("where", ingot_where(b23, f23, BAD));
  NT("clamp", ingot_clamp(BAD, 0, 1));
}

static void test_null_reduce(void) {
  int d[1] = {0};
  NT("sum", ingot_sum(BAD, d, 1, false));
  NT("mean", ingot_mean(BAD, d, 1, false));
  NT("prod", ingot_prod(BAD, d, 1, false));
  NT("amax", ingot_amax(BAD, d, 1, false));
  NT("amin", ingot_amin(BAD, NULL, 0, false));
  NT("max", ingot_max_dim(BAD, 0, false, &g_idx));
  NT("min", ingot_min_dim(BAD, 0, false, &g_idx));
  NT("argmax", ingot_argmax(BAD, 0, false));
  NT("argmin", ingot_argmin(BAD, INGOT_ALL_DIMS, false));
  NT("var", ingot_var(BAD, d, 1, 1, false));
  NT("std", ingot_std(BAD, d, 1, 1, false));
  NT("norm", ingot_norm(BAD, 2, d, 1, false));
  NT("logsumexp", ingot_logsumexp(BAD, d, 1, false));
  NT("any", ingot_any(BAD, d, 1, false));
  NT("all", ingot_all(BAD, NULL, 0, false));
  NT("cumsum", ingot_cumsum(BAD, 0));
  NT("cumprod", ingot_cumprod(BAD, 0));
  NT("softmax", ingot_softmax(BAD, 0));
  NT("log_softmax", ingot_log_softmax(BAD, 0));
}

static void test_null_matmul_shape_index_sort(void) {
  NB("matmul", ingot_matmul);
  NB("bmm", ingot_bmm);
  NT("cat", ingot_cat((ingot_tensor *[]){f23, BAD}, 2, 0));
  NT("cat", ingot_cat((ingot_tensor *[]){BAD, f23}, 2, 0));
  NT("stack", ingot_stack((ingot_tensor *[]){f23, BAD}, 2, 0));
  NT("flip", ingot_flip(BAD, (int[]){0}, 1));
  NT("roll", ingot_roll(BAD, (int64_t[]){1}, (int[]){0}, 1));
  NT("repeat", ingot_repeat(BAD, (int64_t[]){1, 1}, 2));
  NT("tril", ingot_tril(BAD, 0));
  NT("triu", ingot_triu(BAD, 0));

  NT("index_select", ingot_index_select(BAD, 0, idx));
  NT("index_select", ingot_index_select(f23, 0, BAD));
  NT("gather", ingot_gather(BAD, 0, i23));
  NT("gather", ingot_gather(f23, 0, BAD));
  NT("scatter", ingot_scatter(BAD, 0, i23, f23));
  NT("scatter", ingot_scatter(f23, 0, BAD, f23));
  NT("scatter", ingot_scatter(f23, 0, i23, BAD));
  NT("scatter_add", ingot_scatter_add(BAD, 0, i23, f23));
  NT("scatter_add", ingot_scatter_add(f23, 0, BAD, f23));
  NT("scatter_add", ingot_scatter_add(f23, 0, i23, BAD));
  NT("index_put", ingot_index_put(BAD, (ingot_tensor *[]){idx}, 1, f4, false));
  NT("index_put", ingot_index_put(f23, (ingot_tensor *[]){BAD}, 1, f4, false));
  NT("index_put", ingot_index_put(f23, (ingot_tensor *[]){idx}, 1, BAD, true));
  NT("masked_fill", ingot_masked_fill(BAD, b23, 0));
  NT("masked_fill", ingot_masked_fill(f23, BAD, 0));
  NT("masked_select", ingot_masked_select(BAD, b23));
  NT("masked_select", ingot_masked_select(f23, BAD));
  NT("nonzero", ingot_nonzero(BAD));
  NT("embedding", ingot_embedding(BAD, idx));
  NT("embedding", ingot_embedding(f23, BAD));

  NT("topk", ingot_topk(BAD, 1, 0, true, true, &g_idx));
  NT("sort", ingot_sort(BAD, 0, false, &g_idx));
  NT("argsort", ingot_argsort(BAD, 0, false));
}

static void test_null_tensor_api(void) {
  NT("empty_like", ingot_empty_like(BAD));
  NT("zeros_like", ingot_zeros_like(BAD));
  NT("full_like", ingot_full_like(BAD, 1));
  NT("cast", ingot_cast(BAD, INGOT_F64));
  NT("to", ingot_to(BAD, INGOT_CPU));
  NT("clone", ingot_clone(BAD));
  NT("contiguous", ingot_contiguous(BAD));
  NS("copy_", ingot_copy_(BAD, f23) != INGOT_OK);
  {
    ingot_tensor *dst = ingot_zeros(2, (int64_t[]){2, 3}, INGOT_F32, INGOT_CPU);
    NS("copy_", ingot_copy_(dst, BAD) != INGOT_OK);
    ingot_release(dst);
  }
  float buf[6];
  NS("to_host", ingot_to_host(BAD, buf, sizeof buf) != INGOT_OK);

  NT("slice", ingot_slice(BAD, 0, 0, 1, 1));
  NT("select", ingot_select(BAD, 0, 0));
  NT("narrow", ingot_narrow(BAD, 0, 0, 1));
  NT("transpose", ingot_transpose(BAD, 0, 1));
  NT("permute", ingot_permute(BAD, (int[]){1, 0}));
  NT("expand", ingot_expand(BAD, 2, (int64_t[]){2, 3}));
  NT("squeeze", ingot_squeeze(BAD, INGOT_ALL_DIMS));
  NT("unsqueeze", ingot_unsqueeze(BAD, 0));
  NT("reshape", ingot_reshape(BAD, 1, (int64_t[]){6}));
  NT("view", ingot_view(BAD, 1, (int64_t[]){6}));
  NT("flatten", ingot_flatten(BAD, 0, -1));
  NS("split", ingot_split(BAD, 1, 0, g_outs, 4) == -1);
  NS("chunk", ingot_chunk(BAD, 2, 0, g_outs, 4) == -1);

  /* Metadata and ownership calls have no error channel: fixed answers. */
  int64_t live = ingot_live_tensors();
  CHECK_EQ_INT(ingot_ndim(NULL), -1);
  CHECK_EQ_INT(ingot_size(NULL, 0), -1);
  CHECK(ingot_shape(NULL) == NULL);
  CHECK(ingot_strides(NULL) == NULL);
  CHECK_EQ_INT(ingot_offset(NULL), -1);
  CHECK_EQ_INT(ingot_numel(NULL), -1);
  CHECK_EQ_INT(ingot_dtype_of(NULL), INGOT_DTYPE_INVALID);
  CHECK(!ingot_is_contiguous(NULL));
  CHECK(!ingot_shares_storage(NULL, f23));
  CHECK(!ingot_shares_storage(f23, NULL));
  CHECK(ingot_retain(NULL) == NULL);
  CHECK(ingot_keep(NULL) == NULL);
  ingot_release(NULL);
  CHECK(isnan(ingot_item(NULL)));
  CHECK_EQ_INT(ingot_live_tensors(), live);
}

/* ---- bad arguments: the op fails with status st (0: any error) and a
 * message naming the op, leaking nothing ---- */
static void bad_verdict(const char *op, int failed, int st, int64_t live, int line) {
  const char *msg = ingot_last_error();
  int ok = failed && ingot_last_status() != INGOT_OK &&
           (st == 0 || (int)ingot_last_status() == st) && strstr(msg, op) &&
           ingot_live_tensors() == live;
  if (!ok)
    fprintf(stderr, "line %d: %s: failed=%d status=%d (want %d) leak=%lld message \"%s\"\n", line,
            op, failed, ingot_last_status(), st, (long long)(ingot_live_tensors() - live), msg);
  CHECK(failed);
  CHECK(ingot_last_status() != INGOT_OK);
  if (st) CHECK_EQ_INT(ingot_last_status(), st);
  CHECK_HAS(msg, op);
  CHECK_EQ_INT(ingot_live_tensors(), live);
}

#define BT(op, st, expr)                              \
  do {                                                \
    reset_slots();                                    \
    int64_t live_ = ingot_live_tensors();             \
    ingot_clear_error();                              \
    ingot_tensor *r_ = (expr);                        \
    bad_verdict(op, r_ == NULL, st, live_, __LINE__); \
    CHECK(g_idx == NULL);                             \
    ingot_release(r_);                                \
    ingot_release(g_idx);                             \
  } while (0)

#define BS(op, st, failed_cond)                          \
  do {                                                   \
    reset_slots();                                       \
    int64_t live_ = ingot_live_tensors();                \
    ingot_clear_error();                                 \
    bad_verdict(op, (failed_cond), st, live_, __LINE__); \
  } while (0)

/* Expected statuses (ANY: any error). */
#define ANY 0
#define ARG ((int)INGOT_ERR_ARG)
#define SHP ((int)INGOT_ERR_SHAPE)
#define DT ((int)INGOT_ERR_DTYPE)
#define IDX ((int)INGOT_ERR_INDEX)
#define DEV ((int)INGOT_ERR_DEVICE)

static void test_bad_elementwise(void) {
  /* PyTorch refuses these dtypes too. */
  BT("neg", DT, ingot_neg(b23));
  BT("bitwise_not", DT, ingot_bitwise_not(f23));
  BT("floor", DT, ingot_floor(c23));
  BT("relu", DT, ingot_relu(c23));
  BT("erf", DT, ingot_erf(c23));
  BT("gelu", DT, ingot_gelu(c23));

  /* [2,3] and [4] do not broadcast. */
  ingot_tensor *(*bin[])(const ingot_tensor *, const ingot_tensor *) = {
      ingot_add,       ingot_sub,         ingot_mul,        ingot_div,        ingot_floor_divide,
      ingot_remainder, ingot_pow,         ingot_atan2,      ingot_maximum,    ingot_minimum,
      ingot_eq,        ingot_ne,          ingot_lt,         ingot_le,         ingot_gt,
      ingot_ge,        ingot_logical_and, ingot_logical_or, ingot_logical_xor};
  const char *bin_names[] = {"add",       "sub",         "mul",        "div",        "floor_divide",
                             "remainder", "pow",         "atan2",      "maximum",    "minimum",
                             "eq",        "ne",          "lt",         "le",         "gt",
                             "ge",        "logical_and", "logical_or", "logical_xor"};
  for (size_t i = 0; i < sizeof bin / sizeof *bin; i++) BT(bin_names[i], SHP, bin[i](f23, f4));
  ingot_tensor *i4 = ingot_zeros(1, (int64_t[]){4}, INGOT_I64, INGOT_CPU);
  BT("bitwise_and", SHP, ingot_bitwise_and(i23, i4));
  BT("bitwise_or", SHP, ingot_bitwise_or(i23, i4));
  BT("bitwise_xor", SHP, ingot_bitwise_xor(i23, i4));
  BT("left_shift", SHP, ingot_left_shift(i23, i4));
  BT("right_shift", SHP, ingot_right_shift(i23, i4));
  ingot_release(i4);

  BT("bitwise_and", DT, ingot_bitwise_and(f23, f23));
  BT("bitwise_or", DT, ingot_bitwise_or(f23, i23));
  BT("bitwise_xor", DT, ingot_bitwise_xor(c23, c23));
  BT("left_shift", DT, ingot_left_shift(f23, f23));
  BT("right_shift", DT, ingot_right_shift(i23, f23));
  BT("maximum", DT, ingot_maximum(c23, c23));
  BT("atan2", DT, ingot_atan2(c23, c23));
  BT("pow", ANY, ingot_pow_scalar(i23, -1));
  BT("sub", DT, ingot_sub(b23, b23));
  BT("where", DT, ingot_where(f23, f23, f23));
  BT("where", SHP, ingot_where(b23, f23, f4));
  BT("clamp", DT, ingot_clamp(c23, 0, 1));
}

static void test_bad_reduce(void) {
  int d5[1] = {5}, d00[2] = {0, 0};
  BT("sum", IDX, ingot_sum(f23, d5, 1, false));
  BT("sum", ANY, ingot_sum(f23, d00, 2, false));
  BT("mean", IDX, ingot_mean(f23, d5, 1, false));
  BT("mean", DT, ingot_mean(i23, NULL, 0, false));
  BT("prod", IDX, ingot_prod(f23, d5, 1, true));
  BT("amax", IDX, ingot_amax(f23, d5, 1, false));
  BT("amin", IDX, ingot_amin(f23, d5, 1, false));
  BT("max", IDX, ingot_max_dim(f23, 2, false, &g_idx));
  BT("min", IDX, ingot_min_dim(f23, -3, false, &g_idx));
  BT("argmax", IDX, ingot_argmax(f23, 2, false));
  BT("argmin", IDX, ingot_argmin(f23, -3, false));
  BT("var", IDX, ingot_var(f23, d5, 1, 1, false));
  BT("var", DT, ingot_var(i23, NULL, 0, 1, false));
  BT("std", IDX, ingot_std(f23, d5, 1, 1, false));
  BT("std", DT, ingot_std(i23, NULL, 0, 1, false));
  BT("norm", IDX, ingot_norm(f23, 2, d5, 1, false));
  BT("norm", DT, ingot_norm(i23, 2, NULL, 0, false));
  BT("logsumexp", IDX, ingot_logsumexp(f23, d5, 1, false));
  BT("any", IDX, ingot_any(f23, d5, 1, false));
  BT("all", IDX, ingot_all(f23, d5, 1, false));
  BT("cumsum", IDX, ingot_cumsum(f23, 2));
  BT("cumprod", IDX, ingot_cumprod(f23, -3));
  BT("softmax", IDX, ingot_softmax(f23, 2));
  BT("log_softmax", IDX, ingot_log_softmax(f23, 2));
  /* max/argmax of an empty dim have no answer. */
  ingot_tensor *e = ingot_zeros(2, (int64_t[]){0, 3}, INGOT_F32, INGOT_CPU);
  BT("amax", ANY, ingot_amax(e, (int[]){0}, 1, false));
  BT("argmax", ANY, ingot_argmax(e, 0, false));
  BT("max", ANY, ingot_max_dim(e, 0, false, &g_idx));
  ingot_release(e);
}

static void test_bad_matmul(void) {
  BT("matmul", SHP, ingot_matmul(f23, f23));
  BT("matmul", SHP, ingot_matmul(f4, f23));
  ingot_tensor *s = ingot_scalar(1, INGOT_F32, INGOT_CPU);
  BT("matmul", ANY, ingot_matmul(s, f4));
  ingot_release(s);
  BT("bmm", SHP, ingot_bmm(f23, f23));
  BT("bmm", SHP, ingot_bmm(f234, f234));
}

static void test_bad_shape(void) {
  BT("cat", SHP, ingot_cat((ingot_tensor *[]){f23, f4}, 2, 0));
  BT("cat", IDX, ingot_cat((ingot_tensor *[]){f23, f23}, 2, 2));
  BT("cat", ARG, ingot_cat(NULL, 0, 0));
  BT("stack", SHP, ingot_stack((ingot_tensor *[]){f23, f4}, 2, 0));
  BT("stack", IDX, ingot_stack((ingot_tensor *[]){f23, f23}, 2, 3));
  BT("flip", IDX, ingot_flip(f23, (int[]){2}, 1));
  BT("flip", ANY, ingot_flip(f23, (int[]){0, 0}, 2));
  BT("roll", IDX, ingot_roll(f23, (int64_t[]){1}, (int[]){2}, 1));
  BT("repeat", ARG, ingot_repeat(f23, (int64_t[]){2}, 1));
  BT("repeat", ANY, ingot_repeat(f23, (int64_t[]){1, -1}, 2));
  BT("tril", SHP, ingot_tril(f4, 0));
  BT("triu", SHP, ingot_triu(f4, 0));
}

static void test_bad_index(void) {
  BT("index_select", IDX, ingot_index_select(f23, 2, idx));
  BT("index_select", DT, ingot_index_select(f23, 0, fidx));
  BT("index_select", IDX, ingot_index_select(f23, 1, idxoob));
  BT("gather", IDX, ingot_gather(f23, 0, idx23oob));
  BT("gather", ANY, ingot_gather(f23, 0, idx));
  BT("gather", DT, ingot_gather(f23, 0, f23));
  BT("scatter", IDX, ingot_scatter(f23, 0, idx23oob, f23));
  BT("scatter", DT, ingot_scatter(f23, 0, i23, c23));
  BT("scatter_add", IDX, ingot_scatter_add(f23, 1, idx23oob, f23));
  BT("scatter_add", DT, ingot_scatter_add(f23, 0, i23, c23));
  BT("index_put", IDX, ingot_index_put(f4, (ingot_tensor *[]){idxoob}, 1, fidx, false));
  BT("index_put", DT, ingot_index_put(f23, (ingot_tensor *[]){idx}, 1, c23, false));
  BT("index_put", DT, ingot_index_put(f23, (ingot_tensor *[]){fidx}, 1, f23, false));
  BT("index_put", IDX, ingot_index_put(f4, (ingot_tensor *[]){idx, idx}, 2, f4, false));
  BT("masked_fill", DT, ingot_masked_fill(f23, f23, 0));
  BT("masked_fill", SHP, ingot_masked_fill(f4, b23, 0));
  BT("masked_select", DT, ingot_masked_select(f23, f23));
  BT("masked_select", SHP, ingot_masked_select(f4, b23));
  BT("embedding", SHP, ingot_embedding(f4, idx));
  BT("embedding", DT, ingot_embedding(f23, fidx));
  BT("embedding", IDX, ingot_embedding(f23, idxoob));
}

static void test_bad_sort(void) {
  BT("sort", IDX, ingot_sort(f23, 2, false, &g_idx));
  BT("sort", DT, ingot_sort(c23, 0, false, &g_idx));
  BT("argsort", IDX, ingot_argsort(f23, -3, false));
  BT("argsort", DT, ingot_argsort(c23, 0, false));
  BT("topk", IDX, ingot_topk(f23, 4, 1, true, true, &g_idx));
  BT("topk", IDX, ingot_topk(f23, 1, 2, true, true, &g_idx));
  BT("topk", ANY, ingot_topk(f23, -1, 1, true, true, &g_idx));
  BT("topk", DT, ingot_topk(c23, 1, 1, true, true, &g_idx));
}

static void test_bad_tensor_api(void) {
  /* creation: overflowing, negative and too many sizes, bad dtypes, bad
   * ranges */
  int64_t huge[2] = {INT64_C(1) << 40, INT64_C(1) << 40};
  BT("empty", SHP, ingot_empty(2, huge, INGOT_F32, INGOT_CPU));
  BT("zeros", SHP, ingot_zeros(2, (int64_t[]){2, -1}, INGOT_F32, INGOT_CPU));
  BT("ones", DT, ingot_ones(1, (int64_t[]){2}, (ingot_dtype)99, INGOT_CPU));
  BT("full", SHP, ingot_full(9, (int64_t[]){1, 1, 1, 1, 1, 1, 1, 1, 1}, 0, INGOT_F32, INGOT_CPU));
  BT("full", ARG, ingot_full(2, NULL, 0, INGOT_F32, INGOT_CPU));
  BT("scalar", DT, ingot_scalar(1, INGOT_DTYPE_INVALID, INGOT_CPU));
  BT("arange", ARG, ingot_arange(0, 1, 0, INGOT_F32, INGOT_CPU));
  BT("arange", ARG, ingot_arange(0, 1, -1, INGOT_F32, INGOT_CPU));
  BT("arange", ARG, ingot_arange(0, NAN, 1, INGOT_F32, INGOT_CPU));
  BT("arange", ANY, ingot_arange(0, 1e30, 1e-30, INGOT_F32, INGOT_CPU));
  BT("linspace", ARG, ingot_linspace(0, 1, -1, INGOT_F32, INGOT_CPU));
  BT("linspace", ANY, ingot_linspace(0, 1, INT64_C(1) << 62, INGOT_F32, INGOT_CPU));
  BT("eye", ARG, ingot_eye(-1, -1, INGOT_F32, INGOT_CPU));
  BT("eye", ANY, ingot_eye(INT64_C(1) << 40, INT64_C(1) << 40, INGOT_F32, INGOT_CPU));
  BT("from_host", ARG, ingot_from_host(NULL, 1, (int64_t[]){3}, INGOT_F32, INGOT_CPU));
  BT("from_host", SHP, ingot_from_host(huge, 2, huge, INGOT_F32, INGOT_CPU));
  BT("rand", DT, ingot_rand(1, (int64_t[]){4}, INGOT_I32, INGOT_CPU));
  BT("rand", SHP, ingot_rand(2, huge, INGOT_F32, INGOT_CPU));
  BT("randn", DT, ingot_randn(1, (int64_t[]){4}, INGOT_I64, INGOT_CPU));
  BT("randint", ARG, ingot_randint(5, 5, 1, (int64_t[]){4}, INGOT_I64, INGOT_CPU));
  BT("randint", DT, ingot_randint(0, 5, 1, (int64_t[]){4}, INGOT_C64, INGOT_CPU));
  BT("zeros", DEV, ingot_zeros(1, (int64_t[]){4}, INGOT_F32, ingot_cuda(99)));

  /* copies and host transfer */
  BT("cast", DT, ingot_cast(f23, (ingot_dtype)77));
  BT("to", DEV, ingot_to(f23, ingot_cuda(99)));
  {
    ingot_tensor *dst = ingot_zeros(2, (int64_t[]){2, 3}, INGOT_F32, INGOT_CPU);
    BS("copy_", SHP, ingot_copy_(dst, f4) != INGOT_OK);
    BS("copy_", SHP, ingot_copy_(f4, dst) != INGOT_OK);
    ingot_release(dst);
  }
  float buf[6];
  BS("to_host", ARG, ingot_to_host(f23, buf, sizeof buf - 1) != INGOT_OK);
  BS("to_host", ARG, ingot_to_host(f23, NULL, sizeof buf) != INGOT_OK);
  BS("item", SHP, isnan(ingot_item(f23)));

  /* views */
  BT("slice", IDX, ingot_slice(f23, 2, 0, 1, 1));
  BT("slice", ARG, ingot_slice(f23, 0, 0, 1, 0));
  BT("select", IDX, ingot_select(f23, 0, 2));
  BT("select", IDX, ingot_select(f23, 1, -4));
  BT("narrow", IDX, ingot_narrow(f23, 1, 2, 2));
  BT("narrow", IDX, ingot_narrow(f23, 3, 0, 1));
  BT("transpose", IDX, ingot_transpose(f23, 0, 2));
  BT("permute", ARG, ingot_permute(f23, (int[]){0, 0}));
  BT("permute", IDX, ingot_permute(f23, (int[]){0, 2}));
  BT("expand", SHP, ingot_expand(f23, 2, (int64_t[]){2, 4}));
  BT("expand", SHP, ingot_expand(f23, 1, (int64_t[]){3}));
  BT("squeeze", IDX, ingot_squeeze(f23, 2));
  BT("unsqueeze", IDX, ingot_unsqueeze(f23, 3));
  BT("reshape", SHP, ingot_reshape(f23, 1, (int64_t[]){7}));
  BT("reshape", SHP, ingot_reshape(f23, 2, (int64_t[]){-1, -1}));
  BT("reshape", SHP, ingot_reshape(f23, 2, huge));
  ingot_tensor *tt = ingot_transpose(f23, 0, 1);
  BT("view", SHP, ingot_view(tt, 1, (int64_t[]){6}));
  ingot_release(tt);
  BT("flatten", ARG, ingot_flatten(f234, 2, 1));
  BT("flatten", IDX, ingot_flatten(f234, 0, 3));
  BS("split", ARG, ingot_split(f23, 0, 0, g_outs, 4) == -1);
  BS("split", ARG, ingot_split(f23, 1, 1, g_outs, 2) == -1);
  BS("split", IDX, ingot_split(f23, 1, 2, g_outs, 4) == -1);
  BS("chunk", ARG, ingot_chunk(f23, 0, 0, g_outs, 4) == -1);
  BS("chunk", IDX, ingot_chunk(f23, 2, -3, g_outs, 4) == -1);
  for (int i = 0; i < 4; i++) CHECK(g_outs[i] == NULL);
}

/* The process keeps working after failures: one correct call per family. */
static void test_recovery(void) {
  int64_t live = ingot_live_tensors();
  CHECK(ingot_reshape(f23, 1, (int64_t[]){7}) == NULL);
  ingot_tensor *r = ingot_exp(f23);
  CHECK(r != NULL);
  ingot_release(r);
  r = ingot_sum(f23, NULL, 0, false);
  CHECK(r && ingot_item(r) == 15.0);
  ingot_release(r);
  ingot_tensor *t = ingot_transpose(f23, 0, 1);
  r = ingot_matmul(f23, t); /* [[5, 14], [14, 50]] */
  float mm[4] = {0};
  CHECK(r && ingot_to_host(r, mm, sizeof mm) == INGOT_OK);
  CHECK(mm[0] == 5 && mm[1] == 14 && mm[2] == 14 && mm[3] == 50);
  ingot_release(r);
  ingot_release(t);
  r = ingot_index_select(f23, 1, idx);
  CHECK(r != NULL);
  ingot_release(r);
  r = ingot_argsort(f23, 1, true);
  CHECK(r != NULL);
  ingot_release(r);
  r = ingot_cat((ingot_tensor *[]){f23, f23}, 2, 0);
  CHECK_EQ_INT(ingot_size(r, 0), 4);
  ingot_release(r);
  CHECK_EQ_INT(ingot_live_tensors(), live);
}

int main(void) {
  int64_t live0 = ingot_live_tensors();
  ingot_tensor *flat = ingot_arange(0, 24, 1, INGOT_F32, INGOT_CPU);
  f234 = ingot_reshape(flat, 3, (int64_t[]){2, 3, 4});
  ingot_tensor *six = ingot_narrow(flat, 0, 0, 6);
  f23 = ingot_reshape(six, 2, (int64_t[]){2, 3});
  ingot_release(six);
  ingot_release(flat);
  f4 = ingot_arange(0, 4, 1, INGOT_F32, INGOT_CPU);
  c23 = ingot_cast(f23, INGOT_C64);
  ingot_tensor *two = ingot_scalar(2, INGOT_F32, INGOT_CPU);
  b23 = ingot_gt(f23, two);
  ingot_release(two);
  i23 = ingot_zeros(2, (int64_t[]){2, 3}, INGOT_I64, INGOT_CPU);
  idx = ingot_from_host((int64_t[]){0, 1}, 1, (int64_t[]){2}, INGOT_I64, INGOT_CPU);
  idxoob = ingot_from_host((int64_t[]){0, 5}, 1, (int64_t[]){2}, INGOT_I64, INGOT_CPU);
  idx23oob =
      ingot_from_host((int64_t[]){0, 1, 0, 1, 7, 0}, 2, (int64_t[]){2, 3}, INGOT_I64, INGOT_CPU);
  fidx = ingot_zeros(1, (int64_t[]){2}, INGOT_F32, INGOT_CPU);
  CHECK(f23 && f234 && f4 && c23 && b23 && i23 && idx && idxoob && idx23oob && fidx);
  if (test_failed) return test_report();

  /* The first failure every NULL case feeds on. */
  ingot_clear_error();
  CHECK(ingot_reshape(f23, 1, (int64_t[]){7}) == NULL);
  snprintf(g_first_msg, sizeof g_first_msg, "%s", ingot_last_error());
  g_first_status = ingot_last_status();
  CHECK_HAS(g_first_msg, "reshape");

  test_null_unary();
  test_null_binary();
  test_null_reduce();
  test_null_matmul_shape_index_sort();
  test_null_tensor_api();
  test_bad_elementwise();
  test_bad_reduce();
  test_bad_matmul();
  test_bad_shape();
  test_bad_index();
  test_bad_sort();
  test_bad_tensor_api();
  test_recovery();

  ingot_tensor *fx[] = {f23, f234, f4, c23, b23, i23, idx, idxoob, idx23oob, fidx};
  for (size_t i = 0; i < sizeof fx / sizeof *fx; i++) ingot_release(fx[i]);
  return test_report() ? 1 : (ingot_live_tensors() == live0 ? 0 : 1);
}
