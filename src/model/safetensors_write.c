/* A safetensors writer (include/ingot/safetensors.h): the JSON header with
 * offsets in entry order, padded with spaces to a multiple of 8 bytes so the
 * data section is aligned, then the tensors one by one from a fill callback
 * (only one tensor's bytes in memory at a time), through a temporary file
 * renamed at the end. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../core/internal.h"
#include "fileio.h"
#include "ingot/safetensors.h"

typedef struct sbuf {
  char *p;
  size_t len, cap;
  bool oom;
} sbuf;

static void put(sbuf *b, const char *fmt, ...) {
  if (b->oom) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? b->cap - b->len : 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
      b->oom = true;
      return;
    }
    if (b->p && b->len + (size_t)n < b->cap) {
      b->len += (size_t)n;
      return;
    }
    size_t nc = b->cap ? 2 * b->cap : 4096;
    while (nc <= b->len + (size_t)n) nc *= 2;
    char *np = realloc(b->p, nc);
    if (!np) {
      b->oom = true;
      return;
    }
    b->p = np;
    b->cap = nc;
  }
}

/* A JSON string: quotes, backslashes and control bytes escaped. */
static void put_str(sbuf *b, const char *s) {
  put(b, "\"");
  for (; *s; s++) {
    unsigned char ch = (unsigned char)*s;
    if (ch == '"' || ch == '\\')
      put(b, "\\%c", ch);
    else if (ch < 0x20)
      put(b, "\\u%04x", ch);
    else
      put(b, "%c", ch);
  }
  put(b, "\"");
}

/* The header JSON; NULL with the error set on a bad entry or OOM. */
static char *header_json(const ingot_safetensors_entry *e, int64_t n, const char *const *kv,
                         int64_t n_meta, size_t *len) {
  sbuf b = {0};
  put(&b, "{");
  if (n_meta > 0) {
    put(&b, "\"__metadata__\":{");
    for (int64_t i = 0; i < n_meta; i++) {
      if (i) put(&b, ",");
      put_str(&b, kv[2 * i]);
      put(&b, ":");
      put_str(&b, kv[2 * i + 1]);
    }
    put(&b, "}");
  }
  uint64_t off = 0;
  for (int64_t i = 0; i < n; i++) {
    const char *dn = st_dtype_name(e[i].dtype);
    uint64_t bytes = dn ? ingot_dtype_size(e[i].dtype) : 0;
    bool ok =
        dn && e[i].name && *e[i].name && e[i].ndim >= 0 && e[i].ndim <= INGOT_SAFETENSORS_MAX_DIMS;
    for (int k = 0; ok && k < e[i].ndim; k++)
      ok = e[i].shape[k] >= 0 && !__builtin_mul_overflow(bytes, (uint64_t)e[i].shape[k], &bytes);
    if (!ok || __builtin_add_overflow(off, bytes, &(uint64_t){0})) {
      free(b.p);
      ingot_fail(INGOT_ERR_ARG,
                 "ingot_safetensors_write: entry %lld ('%s') has a bad name, "
                 "dtype or shape",
                 (long long)i, e[i].name ? e[i].name : "(null)");
      return NULL;
    }
    put(&b, n_meta > 0 || i ? "," : "");
    put_str(&b, e[i].name);
    put(&b, ":{\"dtype\":\"%s\",\"shape\":[", dn);
    for (int k = 0; k < e[i].ndim; k++) put(&b, "%s%lld", k ? "," : "", (long long)e[i].shape[k]);
    put(&b, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
        (unsigned long long)(off + bytes));
    off += bytes;
  }
  put(&b, "}");
  while (!b.oom && b.len % 8) put(&b, " ");
  if (b.oom) {
    free(b.p);
    ingot_fail(INGOT_ERR_OOM, "ingot_safetensors_write: out of memory for the header");
    return NULL;
  }
  *len = b.len;
  return b.p;
}

static size_t entry_bytes(const ingot_safetensors_entry *e) {
  size_t b = ingot_dtype_size(e->dtype);
  for (int k = 0; k < e->ndim; k++) b *= (size_t)e->shape[k];
  return b;
}

ingot_status ingot_safetensors_write(const char *path, const ingot_safetensors_entry *entries,
                                     int64_t n, const char *const *meta_kv, int64_t n_meta,
                                     ingot_safetensors_fill_fn fill, void *user) {
  if (!path || n < 0 || (n && (!entries || !fill)) || n_meta < 0 || (n_meta && !meta_kv)) {
    ingot_fail(INGOT_ERR_ARG, "ingot_safetensors_write: bad arguments");
    return INGOT_ERR_ARG;
  }
  size_t hlen;
  char *hdr = header_json(entries, n, meta_kv, n_meta, &hlen);
  if (!hdr) return ingot_last_status();
  size_t plen = strlen(path);
  char *tmp = malloc(plen + 5);
  if (!tmp) {
    free(hdr);
    ingot_fail(INGOT_ERR_OOM, "ingot_safetensors_write: out of memory");
    return INGOT_ERR_OOM;
  }
  memcpy(tmp, path, plen);
  memcpy(tmp + plen, ".tmp", 5);
  ingot_status st = INGOT_OK;
  void *buf = NULL;
  FILE *f = fopen(tmp, "wb");
  if (!f) {
    ingot_fail(INGOT_ERR_IO, "%s: cannot create it: %s", tmp, strerror(errno));
    free(hdr);
    free(tmp);
    return INGOT_ERR_IO;
  }
  uint8_t le[8];
  for (int i = 0; i < 8; i++) le[i] = (uint8_t)((uint64_t)hlen >> (8 * i));
  bool io_ok = fwrite(le, 1, 8, f) == 8 && fwrite(hdr, 1, hlen, f) == hlen;
  for (int64_t i = 0; io_ok && i < n; i++) {
    size_t nb = entry_bytes(&entries[i]);
    free(buf);
    if (!(buf = malloc(nb ? nb : 1))) {
      ingot_fail(INGOT_ERR_OOM, "ingot_safetensors_write: out of memory (%zu bytes for '%s')", nb,
                 entries[i].name);
      st = INGOT_ERR_OOM;
      break;
    }
    if ((st = fill(i, buf, nb, user))) break;
    io_ok = fwrite(buf, 1, nb, f) == nb;
  }
  io_ok = fflush(f) == 0 && io_ok && !ferror(f);
  int err = errno;
  io_ok = fclose(f) == 0 && io_ok;
  if (!io_ok && !st) {
    ingot_fail(INGOT_ERR_IO, "%s: write failed: %s", tmp, strerror(err ? err : errno));
    st = INGOT_ERR_IO;
  }
  if (!st && rename(tmp, path)) {
    ingot_fail(INGOT_ERR_IO, "%s: cannot rename it to %s: %s", tmp, path, strerror(errno));
    st = INGOT_ERR_IO;
  }
  if (st) unlink(tmp);
  free(buf);
  free(hdr);
  free(tmp);
  return st;
}
