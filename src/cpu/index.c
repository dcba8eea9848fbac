/* CPU index kernels (being written). */
#include "cpu.h"

void cpu_register_index(ingot_backend *be) { (void)be; }
