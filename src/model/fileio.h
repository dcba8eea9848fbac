/* Small file helpers shared by the model loaders. */
#ifndef INGOT_MODEL_FILEIO_H
#define INGOT_MODEL_FILEIO_H

#include <stddef.h>

#include "ingot/dtype.h"

/* The whole file in a malloc'd buffer (*len bytes); NULL with errno set on
 * failure (ENOMEM when out of memory). */
char *model_read_file(const char *path, size_t *len);
/* "dir/file" in a malloc'd string; NULL when out of memory. */
char *model_path_join(const char *dir, const char *file);

/* The safetensors name of dt ("BF16", "F8_E4M3", ...), NULL if it has none
 * (safetensors.c). */
const char *st_dtype_name(ingot_dtype dt);

#endif
