/* Thread-local error state. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

static _Thread_local char err_msg[1024];
static _Thread_local ingot_status err_status = INGOT_OK;

const char *ingot_last_error(void) { return err_msg; }

ingot_status ingot_last_status(void) { return err_status; }

void ingot_clear_error(void) {
  err_msg[0] = 0;
  err_status = INGOT_OK;
}

static void set_error_v(ingot_status status, const char *fmt, va_list ap) {
  vsnprintf(err_msg, sizeof err_msg, fmt, ap);
  err_status = status;
}

ingot_status ingot_set_error(ingot_status status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  set_error_v(status, fmt, ap);
  va_end(ap);
  return status;
}

void *fail_in(const char *op) {
  size_t n = strlen(op);
  if (n + 3 < sizeof err_msg && (strncmp(err_msg, op, n) != 0 || err_msg[n] != ':')) {
    size_t len = strlen(err_msg), room = sizeof err_msg - n - 3;
    if (len > room) len = room;
    memmove(err_msg + n + 2, err_msg, len);
    err_msg[n + 2 + len] = 0;
    memcpy(err_msg, op, n);
    err_msg[n] = ':';
    err_msg[n + 1] = ' ';
  }
  return NULL;
}

void *ingot_fail(ingot_status status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  set_error_v(status, fmt, ap);
  va_end(ap);
  return NULL;
}
