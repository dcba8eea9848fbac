// CUDA elementwise kernels (being written).
#include "cuda_common.cuh"

extern "C" void cuda_register_elementwise(ingot_backend *be) { (void)be; }
