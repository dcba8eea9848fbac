/* CPU binary kernels (being written). */
#include "cpu.h"

void cpu_register_binary(ingot_backend *be) { (void)be; }
