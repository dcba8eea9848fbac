/* Version and build description. */
#include "internal.h"

#ifndef INGOT_VERSION_STRING
#define INGOT_VERSION_STRING "0.0.0"
#endif

const char *ingot_version(void) { return INGOT_VERSION_STRING; }

const char *ingot_build_info(void) {
  return "backends: cpu"
#ifdef INGOT_HAVE_CUDA
         ", cuda (sm_90)"
#endif
         "; blas: OpenBLAS; threads: OpenMP"
#if defined(__SANITIZE_ADDRESS__)
         "; sanitizers: address,undefined"
#endif
      ;
}
