/* Prints the OpenBLAS core type the loaded library chose (openblas_get_corename()), after one
 * small sgemm through its kernels checked against plain loops, so a forced OPENBLAS_CORETYPE
 * whose instructions the CPU lacks fails here (SIGILL) rather than in a benchmark.
 * Used by test_openblas_coretype.sh. An executable: exit 1 when the product is wrong. */
#include <math.h>
#include <stdio.h>

#include <cblas.h>

#define M 13 /* odd sizes reach the kernels' edge paths */
#define N 37
#define K 29

int main(void) {
    static float a[M * K], b[K * N], c[M * N]; /* row-major (M, K), (K, N), (M, N) */
    for (int i = 0; i < M * K; i++)
        a[i] = (float)((i * 7) % 11) - 5.0f;
    for (int i = 0; i < K * N; i++)
        b[i] = (float)((i * 5) % 13) - 6.0f;
    openblas_set_num_threads(1);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.0f, a, K, b, N, 0.0f, c,
                N);
    for (int i = 0; i < M; i++) {
        for (int j = 0; j < N; j++) {
            float ref = 0.0f; /* small integers: exact in float whatever the order */
            for (int k = 0; k < K; k++)
                ref += a[i * K + k] * b[k * N + j];
            if (fabsf(c[i * N + j] - ref) > 0.0f) {
                fprintf(stderr, "sgemm wrong at (%d, %d): %g, expected %g\n", i, j,
                        (double)c[i * N + j], (double)ref);
                return 1;
            }
        }
    }
    printf("%s\n", openblas_get_corename());
    return 0;
}
