// CUDA sort kernels (being written).
#include "cuda_common.cuh"

extern "C" void cuda_register_sort(ingot_backend *be) { (void)be; }
