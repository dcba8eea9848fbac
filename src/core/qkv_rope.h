/* The composed form of QMATMUL_ROPE_KV (contract in src/core/ops_attention.c):
 * the QMATMUL and ROPE_KV_WRITE kernels of out[0]'s backend, one after the
 * other through a q|k|v scratch. The CPU kernel, and CUDA's path where its
 * one-launch kernel does not apply. */
#ifndef INGOT_CORE_QKV_ROPE_H
#define INGOT_CORE_QKV_ROPE_H

#include "ingot/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

ingot_status qmatmul_rope_kv_compose(ingot_op_args *a);

#ifdef __cplusplus
}
#endif
#endif
