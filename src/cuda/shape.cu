// CUDA shape kernels (being written).
#include "cuda_common.cuh"

extern "C" void cuda_register_shape(ingot_backend *be) { (void)be; }
