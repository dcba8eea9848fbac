/* Small file helpers shared by the model loaders. */
#ifndef INGOT_MODEL_FILEIO_H
#define INGOT_MODEL_FILEIO_H

#include <stddef.h>

/* The whole file in a malloc'd buffer (*len bytes); NULL with errno set on
 * failure (ENOMEM when out of memory). */
char *model_read_file(const char *path, size_t *len);
/* "dir/file" in a malloc'd string; NULL when out of memory. */
char *model_path_join(const char *dir, const char *file);

#endif
