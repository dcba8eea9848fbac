// CUDA index kernels (being written).
#include "cuda_common.cuh"

extern "C" void cuda_register_index(ingot_backend *be) { (void)be; }
