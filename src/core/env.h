/* Environment switches: one reading of "NAME is on" for every INGOT_* flag. */
#ifndef INGOT_CORE_ENV_H
#define INGOT_CORE_ENV_H

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* Whether the variable name is set to something other than "" and "0". */
static inline bool ingot_env_on(const char *name) {
  const char *v = getenv(name);
  return v && *v && strcmp(v, "0") != 0;
}

/* Whether name is set to a number that reads as 0 ("0", "00"): a switch that
 * is on by default, turned off (the kernels' A/B switches, read per call). */
static inline bool ingot_env_off(const char *name) {
  const char *v = getenv(name);
  return v && *v && atoi(v) == 0;
}

#endif
