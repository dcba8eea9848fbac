/* Scopes: per-thread stacks of tensors to release at ingot_scope_end. A
 * tensor remembers its slot so that an early release clears the entry. */
#include <stdlib.h>

#include "internal.h"

#define MAX_SCOPE_DEPTH 64

typedef struct scope {
  ingot_tensor **items;
  int64_t len, cap;
} scope;

static _Thread_local scope scopes[MAX_SCOPE_DEPTH];
static _Thread_local int depth = 0;      /* open scopes */
static _Thread_local int overflowed = 0; /* scopes opened past the limit */

void ingot_scope_begin(void) {
  if (depth == MAX_SCOPE_DEPTH) {
    overflowed++; /* tensors go to the deepest real scope */
    return;
  }
  scopes[depth].len = 0;
  depth++;
}

static bool scope_push(int d, ingot_tensor *t) {
  scope *s = &scopes[d];
  if (s->len == s->cap) {
    int64_t cap = s->cap ? s->cap * 2 : 64;
    ingot_tensor **items = realloc(s->items, (size_t)cap * sizeof *items);
    if (!items) return false;
    s->items = items;
    s->cap = cap;
  }
  t->scope_depth = d;
  t->scope_slot = s->len;
  s->items[s->len++] = t;
  return true;
}

void scope_register(ingot_tensor *t) {
  t->scope_depth = -1;
  if (depth > 0) scope_push(depth - 1, t);
}

void scope_forget(ingot_tensor *t) {
  if (t->scope_depth >= 0 && t->scope_depth < depth) {
    scope *s = &scopes[t->scope_depth];
    if (t->scope_slot < s->len && s->items[t->scope_slot] == t) s->items[t->scope_slot] = NULL;
  }
  t->scope_depth = -1;
}

void ingot_scope_end(void) {
  if (overflowed) {
    overflowed--;
    return;
  }
  if (depth == 0) return;
  scope *s = &scopes[depth - 1];
  /* Release newest first; entries cleared by earlier releases are skipped. */
  for (int64_t i = s->len - 1; i >= 0; i--) {
    ingot_tensor *t = s->items[i];
    if (!t) continue;
    s->items[i] = NULL;
    t->scope_depth = -1;
    ingot_release(t);
  }
  free(s->items);
  s->items = NULL;
  s->len = s->cap = 0;
  depth--;
}

ingot_tensor *ingot_keep(ingot_tensor *t) {
  if (!t) return NULL;
  if (t->scope_depth >= 0 && t->scope_depth == depth - 1) {
    scope_forget(t);
    if (depth >= 2) scope_push(depth - 2, t);
  }
  return t;
}
