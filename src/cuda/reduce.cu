// CUDA reduce kernels (being written).
#include "cuda_common.cuh"

extern "C" void cuda_register_reduce(ingot_backend *be) { (void)be; }
