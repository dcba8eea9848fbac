/* The sparse expert MLP of qwen3_moe on the CPU, as transformers'
 * Qwen3MoeSparseMoeBlock: router logits -> softmax in f32 -> top-k ->
 * renormalise if norm_topk_prob -> sum_j w_j * down_e(silu(gate_e x) * up_e x),
 * plus a shared expert scaled by sigmoid(shared_expert_gate . x) where the
 * config has one (Qwen2-MoE style). Each expert runs once per chunk over the
 * tokens routed to it, so only the selected experts' weights are read. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../core/internal.h"
#include "ingot/quant.h"
#include "model_internal.h"

typedef struct moe_scratch {
  float *probs;   /* [chunk, n_experts] router softmax */
  int32_t *sel;   /* [chunk, k] chosen experts per token */
  float *wsel;    /* [chunk, k] their weights */
  int32_t *rows;  /* [chunk] tokens routed to the expert at hand */
  float *rw;      /* [chunk] their weights */
  float *xg, *y;  /* [chunk, dim] gathered inputs, expert outputs */
  float *h1, *h2; /* [chunk, ffn_max] */
} moe_scratch;

bool moe_alloc(ingot_model *m, int64_t chunk) {
  const ingot_model_config *c = &m->cfg;
  moe_scratch *s = calloc(1, sizeof *s);
  if (!(m->moe_s = s)) goto oom;
  size_t ck = (size_t)chunk, E = (size_t)c->n_experts, k = (size_t)c->n_experts_used;
  size_t dim = (size_t)c->dim, f = (size_t)model_ffn_max(c);
  s->probs = malloc(ck * E * sizeof(float));
  s->sel = malloc(ck * k * sizeof(int32_t));
  s->wsel = malloc(ck * k * sizeof(float));
  s->rows = malloc(ck * sizeof(int32_t));
  s->rw = malloc(ck * sizeof(float));
  s->xg = malloc(ck * dim * sizeof(float));
  s->y = malloc(ck * dim * sizeof(float));
  s->h1 = malloc(ck * f * sizeof(float));
  s->h2 = malloc(ck * f * sizeof(float));
  if (s->probs && s->sel && s->wsel && s->rows && s->rw && s->xg && s->y && s->h1 && s->h2)
    return true;
oom:
  ingot_fail(INGOT_ERR_OOM, "model: out of memory for the expert buffers");
  return false;
}

void moe_free(ingot_model *m) {
  moe_scratch *s = m->moe_s;
  if (!s) return;
  free(s->probs);
  free(s->sel);
  free(s->wsel);
  free(s->rows);
  free(s->rw);
  free(s->xg);
  free(s->y);
  free(s->h1);
  free(s->h2);
  free(s);
  m->moe_s = NULL;
}

/* softmax(logits[E]) in place, then the k largest (first index wins a tie,
 * as a stable descending sort would) into sel/w, renormalised if asked. */
static void route(float *p, int E, int k, bool renorm, int32_t *sel, float *w) {
  float mx = -INFINITY, sum = 0;
  for (int e = 0; e < E; e++) mx = p[e] > mx ? p[e] : mx;
  for (int e = 0; e < E; e++) sum += p[e] = expf(p[e] - mx);
  for (int e = 0; e < E; e++) p[e] /= sum;
  float tot = 0;
  for (int j = 0; j < k; j++) {
    int best = -1;
    for (int e = 0; e < E; e++) {
      bool taken = false;
      for (int i = 0; i < j && !taken; i++) taken = sel[i] == e;
      if (!taken && (best < 0 || p[e] > p[best])) best = e;
    }
    sel[j] = best;
    tot += w[j] = p[best];
  }
  if (renorm)
    for (int j = 0; j < k; j++) w[j] /= tot;
}

ingot_status moe_forward(ingot_model *m, const moe_weights *w, const float *x, int64_t T,
                         float *out) {
  const ingot_model_config *c = &m->cfg;
  moe_scratch *s = m->moe_s;
  int E = c->n_experts, k = c->n_experts_used;
  int64_t dim = c->dim;
  /* the router always takes float activations: its top-k is a discrete choice */
  ingot_status st = ingot_ggml_matvec(w->router.type, w->router.data, E, dim, x, T, s->probs);
  if (st) return st;
  for (int64_t t = 0; t < T; t++)
    route(s->probs + t * E, E, k, c->norm_topk_prob, s->sel + t * k, s->wsel + t * k);
  memset(out, 0, (size_t)(T * dim) * sizeof(float));
  for (int e = 0; e < E; e++) {
    int64_t n = 0;
    for (int64_t t = 0; t < T; t++)
      for (int j = 0; j < k; j++)
        if (s->sel[t * k + j] == e) {
          s->rows[n] = (int32_t)t;
          s->rw[n++] = s->wsel[t * k + j];
        }
    if (!n) continue;
    for (int64_t i = 0; i < n; i++)
      memcpy(s->xg + i * dim, x + (int64_t)s->rows[i] * dim, (size_t)dim * sizeof(float));
    if ((st = model_mlp(m, &w->gate[e], &w->up[e], &w->down[e], s->xg, n, s->h1, s->h2, s->y)))
      return st;
    for (int64_t i = 0; i < n; i++) {
      float *o = out + (int64_t)s->rows[i] * dim;
      const float *y = s->y + i * dim;
      for (int64_t d = 0; d < dim; d++) o[d] += s->rw[i] * y[d];
    }
  }
  if (!w->has_shared) return INGOT_OK;
  float *g = s->rw; /* [T] shared-expert gate logits */
  if ((st = ingot_ggml_matvec(w->sh_router.type, w->sh_router.data, 1, dim, x, T, g)) ||
      (st = model_mlp(m, &w->sh_gate, &w->sh_up, &w->sh_down, x, T, s->h1, s->h2, s->y)))
    return st;
  for (int64_t t = 0; t < T; t++) {
    float a = 1.0f / (1.0f + expf(-g[t]));
    for (int64_t d = 0; d < dim; d++) out[t * dim + d] += a * s->y[t * dim + d];
  }
  return INGOT_OK;
}
