// silu(g) * u in f32 with the roundings of the CPU's SWIGLU (one division,
// one product): shared by the SWIGLU kernel (nn.cu) and the GEMV that stages
// swiglu(gate, up) as its x (qgemv_kernels.cuh).
#pragma once

__device__ __forceinline__ float silu_mul(float g, float u) {
  return __fmul_rn(__fdiv_rn(g, 1.0f + expf(-g)), u);
}
