/* Scopes: temporaries are released at scope end, ingot_keep moves a tensor
 * to the enclosing scope, nesting works (also past the depth limit), and an
 * explicit release inside a scope is not released twice. */
#include "ingot/ingot.h"
#include "test.h"

static int64_t live0;

static ingot_tensor *vec(double v) {
  return ingot_full(1, (int64_t[]){3}, v, INGOT_F32, INGOT_CPU);
}

static double first(const ingot_tensor *t) {
  ingot_tensor *s = ingot_select(t, 0, 0);
  double v = ingot_item(s);
  ingot_release(s);
  return v;
}

static void test_release_at_end(void) {
  ingot_scope_begin();
  ingot_tensor *a = vec(1);
  ingot_tensor *b = ingot_cast(a, INGOT_F64);
  ingot_tensor *c = ingot_unsqueeze(ingot_transpose(ingot_unsqueeze(b, 0), 0, 1), 0);
  CHECK(c != NULL);
  CHECK_EQ_INT(ingot_live_tensors(), live0 + 5);
  ingot_scope_end();
  CHECK_EQ_INT(ingot_live_tensors(), live0);
}

static void test_keep(void) {
  ingot_scope_begin();
  ingot_tensor *tmp = vec(2);
  ingot_tensor *y = ingot_keep(ingot_cast(tmp, INGOT_I32));
  CHECK(y != NULL);
  ingot_scope_end();
  CHECK_EQ_INT(ingot_live_tensors(), live0 + 1);
  CHECK(first(y) == 2.0);
  ingot_release(y);
  CHECK_EQ_INT(ingot_live_tensors(), live0);
  /* Keeping twice or keeping a tensor made outside any scope is harmless. */
  ingot_tensor *outside = vec(3);
  ingot_scope_begin();
  CHECK(ingot_keep(outside) == outside);
  ingot_tensor *k = vec(4);
  ingot_keep(k);
  ingot_keep(k);
  ingot_scope_end();
  CHECK_EQ_INT(ingot_live_tensors(), live0 + 2);
  ingot_release(k);
  ingot_release(outside);
  CHECK_EQ_INT(ingot_live_tensors(), live0);
}

static void test_nested(void) {
  ingot_scope_begin();
  ingot_tensor *a = vec(1);
  ingot_tensor *kept = NULL;
  ingot_scope_begin();
  ingot_tensor *b = vec(2);
  kept = ingot_keep(ingot_cast(b, INGOT_F64)); /* moves to the outer scope */
  (void)vec(3);
  CHECK_EQ_INT(ingot_live_tensors(), live0 + 4);
  ingot_scope_end();
  CHECK_EQ_INT(ingot_live_tensors(), live0 + 2); /* a and kept */
  CHECK(first(kept) == 2.0 && first(a) == 1.0);
  /* Keeping it again takes it out of the outer scope too. */
  ingot_keep(kept);
  ingot_scope_end();
  CHECK_EQ_INT(ingot_live_tensors(), live0 + 1);
  CHECK(first(kept) == 2.0);
  ingot_release(kept);
  CHECK_EQ_INT(ingot_live_tensors(), live0);

  /* Three levels, keep at the innermost only goes one level up. */
  ingot_scope_begin();
  ingot_scope_begin();
  ingot_scope_begin();
  ingot_tensor *x = ingot_keep(vec(5));
  ingot_scope_end();
  CHECK_EQ_INT(ingot_live_tensors(), live0 + 1);
  ingot_scope_end();
  CHECK_EQ_INT(ingot_live_tensors(), live0);
  ingot_scope_end();
  (void)x;
}

static void test_explicit_release(void) {
  ingot_scope_begin();
  ingot_tensor *a = vec(1);
  ingot_tensor *v = ingot_select(a, 0, 1);
  ingot_release(a); /* the view keeps the storage */
  CHECK_EQ_INT(ingot_live_tensors(), live0 + 1);
  CHECK(ingot_item(v) == 1.0);
  ingot_release(v);
  CHECK_EQ_INT(ingot_live_tensors(), live0);
  /* A retained tensor: the scope drops one reference, we drop the other. */
  ingot_tensor *r = ingot_retain(vec(7));
  ingot_scope_end(); /* must not touch a or v again (ASan would see it) */
  CHECK_EQ_INT(ingot_live_tensors(), live0 + 1);
  CHECK(first(r) == 7.0);
  ingot_release(r);
  CHECK_EQ_INT(ingot_live_tensors(), live0);
}

static void test_many_and_errors(void) {
  ingot_scope_begin();
  ingot_tensor *base = vec(1);
  for (int i = 0; i < 1000; i++) { /* grows the scope's array */
    ingot_tensor *v = ingot_unsqueeze(base, 0);
    if (i % 3 == 0) ingot_release(v);
  }
  /* Failing calls inside a scope leave nothing behind. */
  CHECK(ingot_select(base, 0, 5) == NULL);
  CHECK(ingot_reshape(base, 1, (int64_t[]){4}) == NULL);
  CHECK(ingot_empty(1, (int64_t[]){-1}, INGOT_F32, INGOT_CPU) == NULL);
  ingot_scope_end();
  CHECK_EQ_INT(ingot_live_tensors(), live0);
  /* Unbalanced end is a no-op. */
  ingot_scope_end();
  CHECK_EQ_INT(ingot_live_tensors(), live0);
}

static void test_deep(void) {
  enum { DEPTH = 100 }; /* past the implementation's real depth */
  ingot_tensor *kept = NULL;
  for (int i = 0; i < DEPTH; i++) {
    ingot_scope_begin();
    (void)vec(i);
  }
  kept = vec(-1);
  CHECK_EQ_INT(ingot_live_tensors(), live0 + DEPTH + 1);
  for (int i = 0; i < DEPTH; i++) ingot_scope_end();
  CHECK_EQ_INT(ingot_live_tensors(), live0);
  (void)kept;
  /* Scope state is usable again afterwards. */
  ingot_scope_begin();
  (void)vec(1);
  ingot_scope_end();
  CHECK_EQ_INT(ingot_live_tensors(), live0);
}

int main(void) {
  live0 = ingot_live_tensors();
  test_release_at_end();
  test_keep();
  test_nested();
  test_explicit_release();
  test_many_and_errors();
  test_deep();
  return test_report();
}
