/* A small JSON reader (RFC 8259) for model metadata files: parses a whole
 * document into a flat node table. Nodes are addressed by index; -1 means
 * "none". Strings are unescaped (\uXXXX incl. surrogate pairs -> UTF-8) and
 * NUL-terminated; they may contain NUL bytes, so use the returned length. */
#ifndef INGOT_MODEL_JSON_H
#define INGOT_MODEL_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum json_type { JSON_NULL, JSON_BOOL, JSON_NUM, JSON_STR, JSON_ARR, JSON_OBJ } json_type;

typedef struct json_doc json_doc;

/* NULL on failure with a message "line L col C: what" in err. */
json_doc *json_parse(const char *text, size_t len, char *err, size_t errlen);
void json_free(json_doc *d);

int32_t json_root(const json_doc *d);
json_type json_type_of(const json_doc *d, int32_t node); /* JSON_NULL for -1 */
bool json_bool(const json_doc *d, int32_t node);
double json_num(const json_doc *d, int32_t node);
/* String value (NULL if not a string). */
const char *json_str(const json_doc *d, int32_t node, size_t *len);
/* Children of an array/object: count, first, next sibling. */
int64_t json_len(const json_doc *d, int32_t node);
int32_t json_first(const json_doc *d, int32_t node);
int32_t json_next(const json_doc *d, int32_t node);
/* Key of an object member node (NULL if not a member). */
const char *json_key(const json_doc *d, int32_t node, size_t *len);
/* Member of object obj called key (-1 if absent or obj is not an object). */
int32_t json_get(const json_doc *d, int32_t obj, const char *key);

#endif
