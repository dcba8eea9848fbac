/* The composed form of MOE_BLOCK (contract in src/core/ops_moe.c): the
 * MOE_ROUTE (with the norm), MOE_GATE_UP and MOE_DOWN kernels of out[0]'s
 * backend through xn and h scratch tensors, the calls ingot_moe_route_linear_norm
 * and ingot_moe_experts_add make. The CPU kernel, and CUDA's path where its
 * one-launch kernel does not apply. */
#ifndef INGOT_CORE_MOE_COMPOSE_H
#define INGOT_CORE_MOE_COMPOSE_H

#include "ingot/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

ingot_status moe_block_compose(ingot_op_args *a);

#ifdef __cplusplus
}
#endif
#endif
