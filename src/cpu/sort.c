/* CPU sort kernels (being written). */
#include "cpu.h"

void cpu_register_sort(ingot_backend *be) { (void)be; }
