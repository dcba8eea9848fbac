/* Errors: a failing call returns NULL or a non-zero status and sets a
 * thread-local message; NULL tensor inputs propagate. */
#ifndef INGOT_ERROR_H
#define INGOT_ERROR_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ingot_status {
  INGOT_OK = 0,
  INGOT_ERR_ARG,         /* bad or NULL argument */
  INGOT_ERR_SHAPE,       /* shapes do not match or broadcast */
  INGOT_ERR_DTYPE,       /* dtype not supported by the op */
  INGOT_ERR_DEVICE,      /* wrong or mixed devices */
  INGOT_ERR_INDEX,       /* dimension or index out of range */
  INGOT_ERR_OOM,         /* out of memory */
  INGOT_ERR_UNSUPPORTED, /* op not implemented for the device */
  INGOT_ERR_BACKEND,     /* the device or its library failed */
  INGOT_ERR_IO,          /* file or format errors */
  INGOT_ERR_NUMERIC      /* singular matrix, non-finite input, ... */
} ingot_status;

/* Message of the last failure on this thread ("" if none). */
const char *ingot_last_error(void);
/* Status of the last failure on this thread (INGOT_OK if none). */
ingot_status ingot_last_status(void);
/* Forget the last failure on this thread. */
void ingot_clear_error(void);

#ifdef __cplusplus
}
#endif
#endif
