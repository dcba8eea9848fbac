/* The composed forms of the fused decode ops (contracts in
 * src/core/ops_attention.c), from the kernels of out[0]'s backend: the CPU
 * kernels, and CUDA's path where its one-launch kernel does not apply.
 * QMATMUL_ROPE_KV: QMATMUL then ROPE_KV_WRITE through a q|k|v scratch. */
#ifndef INGOT_CORE_QKV_ROPE_H
#define INGOT_CORE_QKV_ROPE_H

#include "ingot/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

ingot_status qmatmul_rope_kv_compose(ingot_op_args *a);
/* ROPE_KV_ATTENTION: ROPE_KV_WRITE into a roped-q scratch, then ATTENTION_CACHED. */
ingot_status rope_kv_attention_compose(ingot_op_args *a);
/* QMATMUL_ROPE_KV_ATTENTION: QMATMUL_ROPE_KV into a roped-q scratch, then ATTENTION_CACHED. */
ingot_status qmatmul_rope_kv_attention_compose(ingot_op_args *a);

#ifdef __cplusplus
}
#endif
#endif
