/* The sparse expert MLP of qwen3_moe on the tensor forward (forward_dev.h):
 * the same block as moe_block.c's raw CPU path, written with ops only.
 * router linear -> ingot_moe_route (softmax, top-k, renormalise if
 * norm_topk_prob; at decode both in ingot_moe_route_linear) ->
 * ingot_moe_experts (gate/up over the experts packed into one [E, 2I, dim]
 * tensor, then down over [E, dim, I]), plus the shared expert scaled by
 * sigmoid(shared_expert_gate . x) where the config has one. Experts keep the
 * checkpoint's dtype (f8e4m3fn ones with their per-row scales). Expert ids
 * stay on the device, so the block is capturable. */
#include <stdlib.h>
#include <string.h>

#include "../core/internal.h"
#include "forward_dev.h"
#include "ingot/quant.h"
#include "model_internal.h"

/* True if every expert of ws (parts x E) came from F8_E4M3 with row scales. */
static bool all_f8(const qweight *const *ws, int parts, int64_t E) {
  for (int p = 0; p < parts; p++)
    for (int64_t e = 0; e < E; e++)
      if (!ws[p][e].f8 || !ws[p][e].f8_scale) return false;
  return true;
}

/* E experts' weights stacked into one [E, parts * rows, cols] tensor on dev,
 * part p of expert e being ws[p][e] (gate then up, or down alone): f8 bytes
 * with *scale = f32 [E, parts * rows] if the checkpoint had f8 experts, else
 * their float dtype (scale NULL). Packed on the host one layer at a time. */
static ingot_tensor *pack_experts(const qweight *const *ws, int parts, int64_t E, int layer,
                                  ingot_device dev, ingot_tensor **scale) {
  const qweight *w0 = &ws[0][0];
  bool f8 = all_f8(ws, parts, E);
  int dt = f8 ? INGOT_F8E4M3FN : dev_float_dtype(w0->type);
  for (int p = 0; p < parts; p++)
    for (int64_t e = 0; e < E; e++)
      if (ws[p][e].type != w0->type || ws[p][e].rows != w0->rows || ws[p][e].cols != w0->cols ||
          (!f8 && !ws[p][e].data)) /* f8 with others: no F32 copy (m->f8_only) to pack */
        dt = -1;
  if (dt < 0) {
    const char *tn = ingot_ggml_type_name(w0->type);
    return ingot_fail(INGOT_ERR_UNSUPPORTED,
                      "model: layer %d's experts are %s (or of mixed types); the tensor "
                      "forward's expert ops take one of f32, f16, bf16, f8e4m3fn for all experts",
                      layer, tn ? tn : "an unknown type");
  }
  int64_t rows = w0->rows, cols = w0->cols, n = (int64_t)parts * E;
  size_t part = f8 ? (size_t)(rows * cols) : w0->nbytes;
  char *buf = calloc((size_t)n, part); /* calloc: gcc cannot see the loop fill every byte */
  float *sc = f8 ? malloc((size_t)(n * rows) * sizeof(float)) : NULL;
  if (!buf || (f8 && !sc)) {
    free(buf);
    return ingot_fail(INGOT_ERR_OOM, "model: out of memory packing layer %d's experts", layer);
  }
  for (int64_t e = 0; e < E; e++)
    for (int p = 0; p < parts; p++) {
      const qweight *w = &ws[p][e];
      size_t i = (size_t)e * (size_t)parts + (size_t)p;
      memcpy(buf + i * part, f8 ? (const void *)w->f8 : w->data, part);
      if (f8) memcpy(sc + i * (size_t)rows, w->f8_scale, (size_t)rows * sizeof(float));
    }
  ingot_tensor *t =
      ingot_from_host(buf, 3, (int64_t[]){E, parts * rows, cols}, (ingot_dtype)dt, dev);
  if (t && f8 && !(*scale = ingot_from_host(sc, 2, (int64_t[]){E, parts * rows}, INGOT_F32, dev))) {
    ingot_release(t);
    t = NULL;
  }
  free(buf);
  free(sc);
  return t;
}

bool dev_moe_init(const moe_weights *w, const ingot_model_config *c, int layer, ingot_device dev,
                  dev_moe *out) {
  int64_t E = c->n_experts;
  out->has_shared = w->has_shared;
  if (!dev_weight_upload(&w->router, dev, &out->router) ||
      !(out->gate_up = pack_experts((const qweight *[]){w->gate, w->up}, 2, E, layer, dev,
                                    &out->gate_up_scale)) ||
      !(out->down = pack_experts((const qweight *[]){w->down}, 1, E, layer, dev, &out->down_scale)))
    return false;
  return !w->has_shared || (dev_linear_upload(&w->sh_gate, dev, &out->sh_gate) &&
                            dev_linear_upload(&w->sh_up, dev, &out->sh_up) &&
                            dev_linear_upload(&w->sh_down, dev, &out->sh_down) &&
                            dev_linear_upload(&w->sh_router, dev, &out->sh_router));
}

void dev_moe_free(dev_moe *m) {
  ingot_tensor *ts[] = {m->gate_up, m->gate_up_scale, m->down, m->down_scale};
  for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) ingot_release(ts[i]);
  dev_weight *ws[] = {&m->router, &m->sh_gate, &m->sh_up, &m->sh_down, &m->sh_router};
  for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++) dev_weight_release(ws[i]);
}

/* The router's rows as a float tensor [E, dim] viewing its ggml rows, or NULL
 * (no error) when they are block-quantised or laid out otherwise. In scope. */
static ingot_tensor *router_rows(const dev_weight *w) {
  int dt = dev_float_dtype(w->type);
  if (dt < 0 || w->t->ndim != 2 || w->t->shape[1] != w->cols * (int64_t)ingot_dtype_size(dt))
    return NULL;
  return tensor_view_as_dtype(w->t, (ingot_dtype)dt); /* uint8 [E, row bytes] as [E, dim] */
}

/* x + the block of rms_norm(x, norm, eps). Inside the caller's scope: every
 * temporary, route's outputs included, goes there. */
ingot_tensor *dev_moe_forward(const dev_moe *m, const ingot_model_config *c, const ingot_tensor *x,
                              const ingot_tensor *norm, double eps, const ingot_tensor *mail) {
  ingot_tensor *weights = NULL, *ids = NULL, *rows = NULL, *xb = NULL;
  int k = c->n_experts_used;
  bool renorm = c->norm_topk_prob;
  /* The router takes the f32 activations, as the raw path: top-k is a discrete
   * choice. At decode a float router goes with the norm and the routing in
   * one op (one kernel on CUDA, which also gives the normed xb); else the
   * norm, the linear, then the routing. */
  bool decode = x && ingot_shape(x)[0] <= 8 && (rows = router_rows(&m->router));
  bool f32 = norm && ingot_dtype_of(x) == INGOT_F32 && ingot_dtype_of(norm) == INGOT_F32;
  /* Without a shared expert the whole block is one op (one kernel on CUDA at T = 1). */
  if (decode && f32 && !m->has_shared)
    return ingot_moe_block(x, norm, eps, rows, k, renorm, m->gate_up, m->gate_up_scale, m->down,
                           m->down_scale, mail, NULL, NULL);
  if (decode && f32) {
    if (ingot_moe_route_linear_norm(x, norm, eps, rows, k, renorm, &xb, &weights, &ids))
      return NULL;
  } else if (!(xb = ingot_rms_norm(x, norm, eps))) {
    return NULL;
  } else if (decode) {
    if (ingot_moe_route_linear(xb, rows, k, renorm, &weights, &ids)) return NULL;
  } else {
    ingot_tensor *logits = dev_linear(xb, &m->router);
    if (!logits || ingot_moe_route(logits, k, renorm, &weights, &ids)) return NULL;
  }
  /* Without a shared expert the down pass adds the residual (no add launch). */
  if (!m->has_shared)
    return ingot_moe_experts_add(x, xb, m->gate_up, m->gate_up_scale, m->down, m->down_scale, ids,
                                 weights);
  ingot_tensor *y =
      ingot_moe_experts(xb, m->gate_up, m->gate_up_scale, m->down, m->down_scale, ids, weights);
  if (!y) return NULL;
  ingot_tensor *sh =
      dev_linear(ingot_swiglu(dev_linear(xb, &m->sh_gate), dev_linear(xb, &m->sh_up)), &m->sh_down);
  return ingot_add(x, ingot_add(y, ingot_mul(ingot_sigmoid(dev_linear(xb, &m->sh_router)), sh)));
}
