/* CPU unary kernels (being written). */
#include "cpu.h"

void cpu_register_unary(ingot_backend *be) { (void)be; }
