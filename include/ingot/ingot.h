/* Ingot: a tensor library and model runtime in C. Umbrella header. */
#ifndef INGOT_INGOT_H
#define INGOT_INGOT_H

#include "attention.h"
#include "backend.h"
#include "convert.h"
#include "device.h"
#include "dtype.h"
#include "error.h"
#include "gguf.h"
#include "linalg.h"
#include "model.h"
#include "nn.h"
#include "moe.h"
#include "ops.h"
#include "quant.h"
#include "safetensors.h"
#include "stream.h"
#include "tensor.h"
#include "tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Library version, "MAJOR.MINOR.PATCH". */
const char *ingot_version(void);
/* Build options as one line: backends compiled in, BLAS, sanitizers. */
const char *ingot_build_info(void);

#ifdef __cplusplus
}
#endif
#endif
