/* Recursive-descent JSON parser into a flat node table (see json.h). */
#include "json.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_DEPTH = 256 };

typedef struct node {
  json_type type;
  int32_t first, last, next; /* children (arrays/objects), sibling */
  int64_t n;                 /* child count, or string length */
  int64_t str, key;          /* offsets into the string pool; -1 if none */
  int64_t keylen;
  double num;
  bool b;
} node;

struct json_doc {
  node *nodes;
  int32_t count, cap;
  char *pool;
  int64_t pool_len, pool_cap;
};

typedef struct parser {
  const char *s;
  size_t len, pos;
  json_doc *d;
  char *err;
  size_t errlen;
  bool failed;
} parser;

static void perr(parser *p, const char *fmt, ...) {
  if (p->failed) return;
  p->failed = true;
  size_t line = 1, col = 1;
  for (size_t i = 0; i < p->pos && i < p->len; i++) {
    if (p->s[i] == '\n') {
      line++;
      col = 1;
    } else {
      col++;
    }
  }
  int k = snprintf(p->err, p->errlen, "line %zu col %zu: ", line, col);
  if (k < 0 || (size_t)k >= p->errlen) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(p->err + k, p->errlen - (size_t)k, fmt, ap);
  va_end(ap);
}

static int32_t new_node(parser *p, json_type t) {
  json_doc *d = p->d;
  if (d->count == d->cap) {
    if (d->cap > INT32_MAX / 2) {
      perr(p, "too many values");
      return -1;
    }
    int32_t nc = d->cap ? d->cap * 2 : 1024;
    node *nn = realloc(d->nodes, (size_t)nc * sizeof(node));
    if (!nn) {
      perr(p, "out of memory");
      return -1;
    }
    d->nodes = nn;
    d->cap = nc;
  }
  node *n = &d->nodes[d->count];
  memset(n, 0, sizeof *n);
  n->type = t;
  n->first = n->last = n->next = -1;
  n->str = n->key = -1;
  return d->count++;
}

static bool pool_put(parser *p, const void *src, size_t n) {
  json_doc *d = p->d;
  if (d->pool_len + (int64_t)n + 1 > d->pool_cap) {
    int64_t nc = d->pool_cap ? d->pool_cap : 4096;
    while (nc < d->pool_len + (int64_t)n + 1) nc *= 2;
    char *np = realloc(d->pool, (size_t)nc);
    if (!np) {
      perr(p, "out of memory");
      return false;
    }
    d->pool = np;
    d->pool_cap = nc;
  }
  memcpy(d->pool + d->pool_len, src, n);
  d->pool_len += (int64_t)n;
  return true;
}

static void skip_ws(parser *p) {
  while (p->pos < p->len) {
    char c = p->s[p->pos];
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
    p->pos++;
  }
}

static int hex4(parser *p) {
  if (p->len - p->pos < 4) return -1;
  int v = 0;
  for (int i = 0; i < 4; i++) {
    char c = p->s[p->pos + (size_t)i];
    int h = (c >= '0' && c <= '9')   ? c - '0'
            : (c >= 'a' && c <= 'f') ? c - 'a' + 10
            : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                                     : -1;
    if (h < 0) return -1;
    v = v * 16 + h;
  }
  p->pos += 4;
  return v;
}

static bool put_utf8(parser *p, uint32_t cp) {
  unsigned char b[4];
  size_t n;
  if (cp < 0x80) {
    b[0] = (unsigned char)cp;
    n = 1;
  } else if (cp < 0x800) {
    b[0] = (unsigned char)(0xC0 | (cp >> 6));
    b[1] = (unsigned char)(0x80 | (cp & 0x3F));
    n = 2;
  } else if (cp < 0x10000) {
    b[0] = (unsigned char)(0xE0 | (cp >> 12));
    b[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    b[2] = (unsigned char)(0x80 | (cp & 0x3F));
    n = 3;
  } else {
    b[0] = (unsigned char)(0xF0 | (cp >> 18));
    b[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    b[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    b[3] = (unsigned char)(0x80 | (cp & 0x3F));
    n = 4;
  }
  return pool_put(p, b, n);
}

/* Parses a string at p->pos (which is '"'); returns its pool offset, sets *n. */
static int64_t parse_string(parser *p, int64_t *n) {
  p->pos++; /* opening quote */
  int64_t start = p->d->pool_len;
  for (;;) {
    size_t run = p->pos;
    while (run < p->len && p->s[run] != '"' && p->s[run] != '\\' &&
           (unsigned char)p->s[run] >= 0x20)
      run++;
    if (run > p->pos && !pool_put(p, p->s + p->pos, run - p->pos)) return -1;
    p->pos = run;
    if (p->pos >= p->len) {
      perr(p, "unterminated string");
      return -1;
    }
    char c = p->s[p->pos];
    if (c == '"') {
      p->pos++;
      break;
    }
    if (c != '\\') {
      perr(p, "control character in string");
      return -1;
    }
    if (++p->pos >= p->len) {
      perr(p, "unterminated string");
      return -1;
    }
    char e = p->s[p->pos++];
    char out;
    switch (e) {
      case '"':
        out = '"';
        break;
      case '\\':
        out = '\\';
        break;
      case '/':
        out = '/';
        break;
      case 'b':
        out = '\b';
        break;
      case 'f':
        out = '\f';
        break;
      case 'n':
        out = '\n';
        break;
      case 'r':
        out = '\r';
        break;
      case 't':
        out = '\t';
        break;
      case 'u': {
        int u = hex4(p);
        if (u < 0) {
          perr(p, "bad \\u escape");
          return -1;
        }
        uint32_t cp = (uint32_t)u;
        if (cp >= 0xD800 && cp < 0xDC00 && p->len - p->pos >= 6 && p->s[p->pos] == '\\' &&
            p->s[p->pos + 1] == 'u') {
          size_t save = p->pos;
          p->pos += 2;
          int lo = hex4(p);
          if (lo >= 0xDC00 && lo < 0xE000) {
            cp = 0x10000 + ((cp - 0xD800) << 10) + ((uint32_t)lo - 0xDC00);
          } else {
            p->pos = save; /* lone high surrogate: keep as is */
          }
        }
        if (!put_utf8(p, cp)) return -1;
        continue;
      }
      default:
        perr(p, "bad escape \\%c", e);
        return -1;
    }
    if (!pool_put(p, &out, 1)) return -1;
  }
  *n = p->d->pool_len - start;
  char z = 0;
  if (!pool_put(p, &z, 1)) return -1;
  return start;
}

static int32_t parse_value(parser *p, int depth);

static void add_child(json_doc *d, int32_t parent, int32_t child) {
  node *pn = &d->nodes[parent];
  if (pn->last < 0) {
    pn->first = child;
  } else {
    d->nodes[pn->last].next = child;
  }
  pn->last = child;
  pn->n++;
}

static int32_t parse_container(parser *p, int depth, bool obj) {
  int32_t self = new_node(p, obj ? JSON_OBJ : JSON_ARR);
  if (self < 0) return -1;
  p->pos++;
  skip_ws(p);
  char close = obj ? '}' : ']';
  if (p->pos < p->len && p->s[p->pos] == close) {
    p->pos++;
    return self;
  }
  for (;;) {
    int64_t key = -1, keylen = 0;
    if (obj) {
      skip_ws(p);
      if (p->pos >= p->len || p->s[p->pos] != '"') {
        perr(p, "expected a string key");
        return -1;
      }
      key = parse_string(p, &keylen);
      if (key < 0) return -1;
      skip_ws(p);
      if (p->pos >= p->len || p->s[p->pos] != ':') {
        perr(p, "expected ':'");
        return -1;
      }
      p->pos++;
    }
    int32_t child = parse_value(p, depth + 1);
    if (child < 0) return -1;
    p->d->nodes[child].key = key;
    p->d->nodes[child].keylen = keylen;
    add_child(p->d, self, child);
    skip_ws(p);
    if (p->pos < p->len && p->s[p->pos] == ',') {
      p->pos++;
      continue;
    }
    if (p->pos < p->len && p->s[p->pos] == close) {
      p->pos++;
      return self;
    }
    perr(p, obj ? "expected ',' or '}'" : "expected ',' or ']'");
    return -1;
  }
}

static bool lit(parser *p, const char *w) {
  size_t n = strlen(w);
  if (p->len - p->pos < n || memcmp(p->s + p->pos, w, n) != 0) return false;
  p->pos += n;
  return true;
}

static int32_t parse_value(parser *p, int depth) {
  if (depth > MAX_DEPTH) {
    perr(p, "nesting deeper than %d", MAX_DEPTH);
    return -1;
  }
  skip_ws(p);
  if (p->pos >= p->len) {
    perr(p, "unexpected end of input");
    return -1;
  }
  char c = p->s[p->pos];
  if (c == '{' || c == '[') return parse_container(p, depth, c == '{');
  if (c == '"') {
    int64_t n = 0;
    int64_t off = parse_string(p, &n);
    if (off < 0) return -1;
    int32_t self = new_node(p, JSON_STR);
    if (self < 0) return -1;
    p->d->nodes[self].str = off;
    p->d->nodes[self].n = n;
    return self;
  }
  if (lit(p, "true") || lit(p, "false")) {
    int32_t self = new_node(p, JSON_BOOL);
    if (self >= 0) p->d->nodes[self].b = p->s[p->pos - 1] == 'e' && p->s[p->pos - 2] == 'u';
    return self;
  }
  if (lit(p, "null")) return new_node(p, JSON_NULL);
  if (c == '-' || (c >= '0' && c <= '9')) {
    size_t i = p->pos;
    if (p->s[i] == '-') i++;
    size_t digits = i;
    while (i < p->len && p->s[i] >= '0' && p->s[i] <= '9') i++;
    if (i == digits) {
      perr(p, "bad number");
      return -1;
    }
    if (i < p->len && p->s[i] == '.') {
      i++;
      size_t f = i;
      while (i < p->len && p->s[i] >= '0' && p->s[i] <= '9') i++;
      if (i == f) {
        perr(p, "bad number");
        return -1;
      }
    }
    if (i < p->len && (p->s[i] == 'e' || p->s[i] == 'E')) {
      i++;
      if (i < p->len && (p->s[i] == '+' || p->s[i] == '-')) i++;
      size_t f = i;
      while (i < p->len && p->s[i] >= '0' && p->s[i] <= '9') i++;
      if (i == f) {
        perr(p, "bad number");
        return -1;
      }
    }
    char buf[64];
    size_t n = i - p->pos;
    if (n >= sizeof buf) n = sizeof buf - 1; /* precision beyond this is irrelevant here */
    memcpy(buf, p->s + p->pos, n);
    buf[n] = 0;
    p->pos = i;
    int32_t self = new_node(p, JSON_NUM);
    if (self >= 0) p->d->nodes[self].num = strtod(buf, NULL);
    return self;
  }
  perr(p, "unexpected character '%c'", c);
  return -1;
}

json_doc *json_parse(const char *text, size_t len, char *err, size_t errlen) {
  json_doc *d = calloc(1, sizeof *d);
  if (!d) {
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  parser p = {text, len, 0, d, err, errlen, false};
  int32_t root = parse_value(&p, 0);
  if (root >= 0) {
    skip_ws(&p);
    if (p.pos != p.len) perr(&p, "trailing characters after the document");
  }
  if (p.failed || root < 0) {
    json_free(d);
    return NULL;
  }
  return d;
}

void json_free(json_doc *d) {
  if (!d) return;
  free(d->nodes);
  free(d->pool);
  free(d);
}

static const node *get(const json_doc *d, int32_t i) {
  return (d && i >= 0 && i < d->count) ? &d->nodes[i] : NULL;
}

int32_t json_root(const json_doc *d) { return d && d->count > 0 ? 0 : -1; }
json_type json_type_of(const json_doc *d, int32_t i) {
  const node *n = get(d, i);
  return n ? n->type : JSON_NULL;
}
bool json_bool(const json_doc *d, int32_t i) {
  const node *n = get(d, i);
  return n && n->type == JSON_BOOL && n->b;
}
double json_num(const json_doc *d, int32_t i) {
  const node *n = get(d, i);
  return n && n->type == JSON_NUM ? n->num : 0.0;
}
const char *json_str(const json_doc *d, int32_t i, size_t *len) {
  const node *n = get(d, i);
  if (!n || n->type != JSON_STR) return NULL;
  if (len) *len = (size_t)n->n;
  return d->pool + n->str;
}
int64_t json_len(const json_doc *d, int32_t i) {
  const node *n = get(d, i);
  return n && (n->type == JSON_ARR || n->type == JSON_OBJ) ? n->n : 0;
}
int32_t json_first(const json_doc *d, int32_t i) {
  const node *n = get(d, i);
  return n && (n->type == JSON_ARR || n->type == JSON_OBJ) ? n->first : -1;
}
int32_t json_next(const json_doc *d, int32_t i) {
  const node *n = get(d, i);
  return n ? n->next : -1;
}
const char *json_key(const json_doc *d, int32_t i, size_t *len) {
  const node *n = get(d, i);
  if (!n || n->key < 0) return NULL;
  if (len) *len = (size_t)n->keylen;
  return d->pool + n->key;
}
int32_t json_get(const json_doc *d, int32_t obj, const char *key) {
  if (json_type_of(d, obj) != JSON_OBJ) return -1;
  size_t kl = strlen(key);
  for (int32_t c = json_first(d, obj); c >= 0; c = json_next(d, c)) {
    const node *n = &d->nodes[c];
    if ((size_t)n->keylen == kl && memcmp(d->pool + n->key, key, kl) == 0) return c;
  }
  return -1;
}
