/* Consumer of an installed Ingot: built by run.sh via find_package and pkg-config. */
#include <ingot/ingot.h>

#include <stdio.h>

int main(void) {
    printf("ingot %s\n", ingot_version());
    ingot_tensor *t = ingot_ones(2, (int64_t[]){2, 3}, INGOT_F32, INGOT_CPU);
    if (!t) { fprintf(stderr, "ingot_ones failed\n"); return 1; }
    ingot_tensor *s = ingot_sum(t, NULL, 0, false); /* NULL dims: sum over all */
    if (!s) { fprintf(stderr, "ingot_sum failed\n"); ingot_release(t); return 1; }
    double v = ingot_item(s);
    ingot_release(s);
    ingot_release(t);
    if (v != 6.0) { fprintf(stderr, "sum of ones(2,3) = %g, want 6\n", v); return 1; }
    puts("install example ok");
    return 0;
}
