/* The llama/qwen3/qwen3_moe forward over Ingot tensors (forward_dev.h): the same
 * network as llama.c's raw-pointer CPU path, written with ops only
 * (qget_rows, rms_norm, qmatmul, qmatmul_swiglu, qmatmul_rope_kv_attention, rope_kv_attention,
 * swiglu, add; sparse MLPs: forward_moe.c) so it runs on any backend. Positions live in device
 * tensors, so the decode step replays from a captured graph. Few launches a layer: q|k|v and
 * gate|up are one product each (weights stacked at load), q/k/v and gate/up are views of it,
 * rope, the cache write and attention are one op (block-quantised q|k|v: the product too), and
 * every linear goes through dev_linear_ex (norm in, residual out). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../core/internal.h"
#include "forward_dev.h"
#include "model_internal.h"

/* Rows padded to a multiple of 16 bytes (zeros; qmatmul and qget_rows skip
 * them): every row then starts 16-byte aligned, so the CUDA GEMV reads any
 * block type with 16-byte loads. One host staging buffer, one upload. */
bool dev_weight_upload(const qweight *w, ingot_device dev, dev_weight *out) {
  out->type = w->type;
  out->scale = NULL;
  out->cols = w->cols;
  const size_t rb = w->row_bytes, stride = (rb + 15) & ~(size_t)15;
  const int64_t shape[2] = {w->rows, (int64_t)stride};
  if (stride == rb) {
    out->t = ingot_from_host(w->data, 2, shape, INGOT_U8, dev);
    return out->t != NULL;
  }
  uint8_t *buf = calloc((size_t)w->rows, stride);
  if (!buf) {
    ingot_fail(INGOT_ERR_OOM, "model: out of memory staging a weight for the device");
    out->t = NULL;
    return false;
  }
  for (int64_t r = 0; r < w->rows; r++)
    memcpy(buf + (size_t)r * stride, (const uint8_t *)w->data + (size_t)r * rb, rb);
  out->t = ingot_from_host(buf, 2, shape, INGOT_U8, dev);
  free(buf);
  return out->t != NULL;
}

static ingot_tensor *upload_f32(const float *v, int64_t n, ingot_device dev) {
  return v ? ingot_from_host(v, 1, (int64_t[]){n}, INGOT_F32, dev) : NULL;
}

bool dev_linear_upload(const qweight *w, ingot_device dev, dev_weight *out) {
  if (!w->f8 || !w->f8_scale) return dev_weight_upload(w, dev, out);
  qweight b = *w; /* the f8 bytes as rows of cols bytes */
  b.data = w->f8;
  b.type = -1;
  b.row_bytes = (size_t)w->cols;
  b.nbytes = (size_t)(w->rows * w->cols);
  if (!dev_weight_upload(&b, dev, out)) return false;
  if (!(out->scale = upload_f32(w->f8_scale, w->rows, dev))) {
    ingot_release(out->t);
    out->t = NULL;
    return false;
  }
  return true;
}

void dev_weight_release(dev_weight *w) {
  ingot_release(w->t);
  ingot_release(w->scale);
}

/* w[0..n) stacked by rows into one weight on dev (one product instead of n)
 * when they share a ggml type and cols (f8 ones: all f8, scales stacked
 * too); false with nothing set otherwise (the caller uploads them one by
 * one) or on failure (error set). */
static bool upload_stacked(const qweight *const *w, int n, ingot_device dev, dev_weight *out,
                           bool *failed) {
  *failed = false;
  const bool f8 = w[0]->f8 && w[0]->f8_scale;
  int64_t rows = 0;
  for (int i = 0; i < n; i++) {
    if (w[i]->type != w[0]->type || w[i]->cols != w[0]->cols || (w[i]->f8 && w[i]->f8_scale) != f8)
      return false;
    rows += w[i]->rows;
  }
  size_t rb = f8 ? (size_t)w[0]->cols : w[0]->row_bytes;
  char *buf = malloc((size_t)rows * rb);
  float *sc = f8 ? malloc((size_t)rows * sizeof *sc) : NULL;
  if (!buf || (f8 && !sc)) {
    free(buf);
    ingot_fail(INGOT_ERR_OOM, "model: out of memory");
    *failed = true;
    return false;
  }
  for (int i = 0, r = 0; i < n; r += (int)w[i]->rows, i++) {
    memcpy(buf + (size_t)r * rb, f8 ? (const void *)w[i]->f8 : w[i]->data, (size_t)w[i]->rows * rb);
    if (f8) memcpy(sc + r, w[i]->f8_scale, (size_t)w[i]->rows * sizeof *sc);
  }
  qweight all = *w[0];
  all.rows = rows;
  if (f8) {
    all.f8 = (const uint8_t *)buf;
    all.f8_scale = sc;
  } else {
    all.data = buf;
    all.nbytes = (size_t)rows * rb;
  }
  *failed = !dev_linear_upload(&all, dev, out);
  free(buf);
  free(sc);
  return !*failed;
}

static ingot_tensor *new_cache(const ingot_model_config *c, ingot_device dev) {
  return ingot_empty(3, (int64_t[]){c->ctx, c->n_kv_heads, c->head_dim}, INGOT_F32, dev);
}

bool dev_model_alloc(ingot_model *m, ingot_device dev) {
  const ingot_model_config *c = &m->cfg;
  dev_model *d = calloc(1, sizeof *d);
  if (!d) {
    ingot_fail(INGOT_ERR_OOM, "model: out of memory");
    return false;
  }
  m->devm = d;
  d->dev = dev;
  d->layers = calloc((size_t)c->n_layers, sizeof *d->layers);
  d->n_layers = c->n_layers;
  if (!d->layers) {
    ingot_fail(INGOT_ERR_OOM, "model: out of memory");
    return false;
  }
  d->inv_freq = ingot_from_host(m->inv_freq, 1, (int64_t[]){c->head_dim / 2}, INGOT_F64, dev);
  d->logits = ingot_empty(2, (int64_t[]){1, c->vocab}, INGOT_F32, dev);
  d->tok = ingot_zeros(1, (int64_t[]){1}, INGOT_I64, dev);
  d->pos = ingot_zeros(1, (int64_t[]){1}, INGOT_I32, dev);
  d->arrivals = ingot_zeros(1, (int64_t[]){c->n_heads + 2 * c->n_kv_heads}, INGOT_I32, dev);
  if (!d->inv_freq || !d->logits || !d->tok || !d->pos || !d->arrivals) return false;
  /* one mailbox for every layer: the layers run one after another on a stream */
  if (c->n_experts > 0 &&
      !(d->moe_mail = ingot_zeros(1, (int64_t[]){c->n_experts}, INGOT_I64, dev)))
    return false;
  for (int l = 0; l < c->n_layers; l++)
    if (!(d->layers[l].k_cache = new_cache(c, dev)) || !(d->layers[l].v_cache = new_cache(c, dev)))
      return false;
  return true;
}

bool dev_model_init(ingot_model *m, ingot_device dev) {
  const ingot_model_config *c = &m->cfg;
  if (!dev_model_alloc(m, dev)) return false;
  dev_model *d = m->devm;
  if (!dev_weight_upload(&m->embd, dev, &d->embd)) return false;
  if (m->lm_head.data == m->embd.data) {
    d->lm_head = d->embd;
    ingot_retain(d->lm_head.t);
  } else if (!dev_linear_upload(&m->lm_head, dev, &d->lm_head)) { /* an f8 head stays f8 */
    return false;
  }
  if (!(d->out_norm = upload_f32(m->out_norm, c->dim, dev))) return false;
  for (int l = 0; l < c->n_layers; l++) {
    const layer *L = &m->layers[l];
    dev_layer *D = &d->layers[l];
    bool failed;
    if (!(D->attn_norm = upload_f32(L->attn_norm, c->dim, dev)) ||
        !(D->ffn_norm = upload_f32(L->ffn_norm, c->dim, dev)) ||
        !dev_linear_upload(&L->wo, dev, &D->wo))
      return false;
    if (!upload_stacked((const qweight *[]){&L->wq, &L->wk, &L->wv}, 3, dev, &D->qkv, &failed) &&
        (failed || !dev_linear_upload(&L->wq, dev, &D->wq) ||
         !dev_linear_upload(&L->wk, dev, &D->wk) || !dev_linear_upload(&L->wv, dev, &D->wv)))
      return false;
    D->sparse = L->moe != NULL;
    if (D->sparse) {
      if (!dev_moe_init(L->moe, c, l, dev, &D->moe)) return false;
    } else if ((!upload_stacked((const qweight *[]){&L->w_gate, &L->w_up}, 2, dev, &D->gate_up,
                                &failed) &&
                (failed || !dev_linear_upload(&L->w_gate, dev, &D->gate) ||
                 !dev_linear_upload(&L->w_up, dev, &D->up))) ||
               !dev_linear_upload(&L->w_down, dev, &D->down)) {
      return false;
    }
    if (c->qk_norm && (!(D->q_norm = upload_f32(L->q_norm, c->head_dim, dev)) ||
                       !(D->k_norm = upload_f32(L->k_norm, c->head_dim, dev))))
      return false;
  }
  return true;
}

void dev_model_free(dev_model *d) {
  if (!d) return;
  if (d->layers) {
    for (int l = 0; l < d->n_layers; l++) {
      dev_layer *D = &d->layers[l];
      ingot_tensor *ts[] = {D->attn_norm, D->ffn_norm, D->q_norm,
                            D->k_norm,    D->k_cache,  D->v_cache};
      for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) ingot_release(ts[i]);
      dev_weight *ws[] = {&D->qkv,     &D->wq,   &D->wk, &D->wv,  &D->wo,
                          &D->gate_up, &D->gate, &D->up, &D->down};
      for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++) dev_weight_release(ws[i]);
      dev_moe_free(&D->moe);
    }
    free(d->layers);
  }
  ingot_tensor *ts[] = {d->out_norm, d->inv_freq, d->logits,  d->tok,
                        d->pos,      d->arrivals, d->moe_mail};
  for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) ingot_release(ts[i]);
  dev_weight_release(&d->embd);
  dev_weight_release(&d->lm_head);
  free(d);
}

/* (norm ? rms_norm(x, norm, eps) : x) times w^T (+ res): a linear with the
 * norm before it and the residual add after it, the unit that a fused
 * product op replaces (one launch). */
static ingot_tensor *dev_linear_ex(const ingot_tensor *x, const dev_weight *w,
                                   const ingot_tensor *norm, double eps, const ingot_tensor *res) {
  if (w->scale) return ingot_f8matmul_fused(x, w->t, w->scale, w->cols, norm, eps, res);
  return ingot_qmatmul_fused(x, w->t, w->type, w->cols, norm, eps, res);
}

ingot_tensor *dev_linear(const ingot_tensor *x, const dev_weight *w) {
  return dev_linear_ex(x, w, NULL, 0, NULL);
}

/* Columns [at, at + h * hd) of x [T, n] as [T, h, hd] (a view). */
static ingot_tensor *heads(const ingot_tensor *x, int64_t at, int64_t T, int64_t h, int64_t hd) {
  return ingot_view(ingot_narrow(x, 1, at, h * hd), 3, (int64_t[]){T, h, hd});
}

int dev_float_dtype(int ggml_type) {
  return ggml_type == INGOT_GGML_F32    ? INGOT_F32
         : ggml_type == INGOT_GGML_F16  ? INGOT_F16
         : ggml_type == INGOT_GGML_BF16 ? INGOT_BF16
                                        : -1;
}

/* The attention output [T, heads, head_dim] of x [T, dim] at pos, its k and
 * v rows written into the layer's caches. Stacked block-quantised q|k|v:
 * qmatmul_rope_kv_attention (product, rope, cache write and attention: on
 * CUDA one launch for T = 1 and few heads). Stacked float or f8 q|k|v: the normed
 * product (one launch), then rope_kv_attention (rope, cache write and
 * attention: on CUDA one launch for T = 1). Else the norm, three products
 * and rope_kv_attention. */
static ingot_tensor *attn_out(const ingot_model_config *c, const dev_model *d, const dev_layer *L,
                              const ingot_tensor *x, const ingot_tensor *pos, int64_t T,
                              const ingot_rope_kv_options *ro, double scale) {
  int64_t hd = c->head_dim, nh = c->n_heads, nkv = c->n_kv_heads;
  ingot_tensor *q, *k, *v;
  if (L->qkv.t && !L->qkv.scale && dev_float_dtype(L->qkv.type) < 0) {
    ingot_qkv_rope_options o = {
        .norm = L->attn_norm, .eps = c->rms_eps, .rope = *ro, .arrivals = d->arrivals};
    return ingot_qmatmul_rope_kv_attention(x, L->qkv.t, L->qkv.type, L->qkv.cols, pos, d->inv_freq,
                                           &o, L->k_cache, L->v_cache, scale);
  }
  if (L->qkv.t) { /* q, k, v: column views of the product */
    ingot_tensor *qkv = dev_linear_ex(x, &L->qkv, L->attn_norm, c->rms_eps, NULL);
    q = heads(qkv, 0, T, nh, hd);
    k = heads(qkv, nh * hd, T, nkv, hd);
    v = heads(qkv, (nh + nkv) * hd, T, nkv, hd);
  } else {
    ingot_tensor *xb = ingot_rms_norm(x, L->attn_norm, c->rms_eps);
    q = heads(dev_linear(xb, &L->wq), 0, T, nh, hd);
    k = heads(dev_linear(xb, &L->wk), 0, T, nkv, hd);
    v = heads(dev_linear(xb, &L->wv), 0, T, nkv, hd);
  }
  return ingot_rope_kv_attention(q, k, v, pos, d->inv_freq, ro, L->k_cache, L->v_cache, scale);
}

/* x + the dense MLP of ffn_norm(x): one stacked gate|up product whose SwiGLU
 * the down product takes in (qmatmul_swiglu, the residual added: on CUDA one
 * launch), or gate and up apart, SwiGLU, the down product. */
static ingot_tensor *mlp_forward(const ingot_model_config *c, const dev_layer *L,
                                 const ingot_tensor *x) {
  double eps = c->rms_eps;
  if (L->gate_up.t) {
    ingot_tensor *gu = dev_linear_ex(x, &L->gate_up, L->ffn_norm, eps, NULL);
    if (L->down.scale) return ingot_f8matmul_swiglu(gu, L->down.t, L->down.scale, L->down.cols, x);
    return ingot_qmatmul_swiglu(gu, L->down.t, L->down.type, L->down.cols, x);
  }
  ingot_tensor *xb = ingot_rms_norm(x, L->ffn_norm, eps);
  ingot_tensor *h = ingot_swiglu(dev_linear(xb, &L->gate), dev_linear(xb, &L->up));
  return dev_linear_ex(h, &L->down, NULL, 0, x);
}

/* The residual stream after every layer for tokens ids (int32 [T]) at
 * positions pos (int32 [T]); K and V rows written into the cache. Inside the
 * caller's scope. */
static ingot_tensor *layers_forward(ingot_model *m, const ingot_tensor *ids,
                                    const ingot_tensor *pos, int64_t T) {
  const ingot_model_config *c = &m->cfg;
  dev_model *d = m->devm;
  int64_t hd = c->head_dim, nh = c->n_heads;
  double eps = c->rms_eps, scale = 1.0 / sqrt((double)hd);
  /* settled: pos is written before the embedding lookup, the norms and
   * frequencies at load, the caches only by the attention itself; the op
   * before each attention is its q|k|v product. */
  ingot_rope_kv_options ro = {.neox = c->rope_neox, .eps = eps, .settled = true};
  ingot_tensor *x = ingot_qget_rows(d->embd.t, d->embd.type, d->embd.cols, ids);
  for (int l = 0; l < c->n_layers && x; l++) {
    const dev_layer *L = &d->layers[l];
    ingot_scope_begin(); /* a layer's temporaries go at its end */
    ro.q_norm = c->qk_norm ? L->q_norm : NULL;
    ro.k_norm = c->qk_norm ? L->k_norm : NULL;
    ingot_tensor *att = attn_out(c, d, L, x, pos, T, &ro, scale);
    x = dev_linear_ex(ingot_view(att, 2, (int64_t[]){T, nh * hd}), &L->wo, NULL, 0, x);
    if (L->sparse) {
      x = dev_moe_forward(&L->moe, c, x, L->ffn_norm, eps, d->moe_mail);
    } else {
      x = mlp_forward(c, L, x);
    }
    x = ingot_keep(x);
    ingot_scope_end();
  }
  return x;
}

/* The LM head of the last row of x [T, dim]: f32 [1, vocab] in the caller's
 * scope. */
static ingot_tensor *head_forward(ingot_model *m, const ingot_tensor *x, int64_t T) {
  dev_model *d = m->devm;
  ingot_tensor *last = ingot_narrow(x, 0, T - 1, 1);
  return dev_linear_ex(last, &d->lm_head, d->out_norm, m->cfg.rms_eps, NULL);
}

ingot_status dev_forward(ingot_model *m, const int32_t *tokens, int64_t n, float *logits_out) {
  dev_model *d = m->devm;
  int32_t pos[DEV_CHUNK];
  ingot_status st = INGOT_OK;
  for (int64_t i = 0; i < n && !st; i += DEV_CHUNK) {
    int64_t T = n - i < DEV_CHUNK ? n - i : DEV_CHUNK;
    for (int64_t t = 0; t < T; t++) pos[t] = (int32_t)(m->n_past + i + t);
    ingot_scope_begin();
    ingot_tensor *ids = ingot_from_host(tokens + i, 1, &T, INGOT_I32, d->dev);
    ingot_tensor *p = ingot_from_host(pos, 1, &T, INGOT_I32, d->dev);
    ingot_tensor *x = ids && p ? layers_forward(m, ids, p, T) : NULL;
    ingot_tensor *lg = x && i + T == n ? head_forward(m, x, T) : NULL;
    st = !x || (i + T == n && !lg) ? ingot_last_status()
         : lg                      ? ingot_copy_(d->logits, lg)
                                   : INGOT_OK;
    ingot_scope_end();
  }
  if (!st && logits_out)
    st = ingot_to_host(d->logits, logits_out, (size_t)m->cfg.vocab * sizeof(float));
  if (!st) m->n_past += n;
  return st;
}

ingot_status dev_forward_step(ingot_model *m, ingot_tensor **logits) {
  dev_model *d = m->devm;
  ingot_scope_begin();
  ingot_tensor *x = layers_forward(m, d->tok, d->pos, 1);
  ingot_tensor *lg = x ? head_forward(m, x, 1) : NULL;
  ingot_status st = lg ? INGOT_OK : ingot_last_status();
  *logits = st ? NULL : ingot_keep(lg);
  ingot_scope_end();
  return st;
}
