/* Dense matrix kernels of the built-in trainer. Row-major float32 throughout.
 * With FL_CLIENT_HAVE_CBLAS the three products go to cblas_sgemm (OpenBLAS); otherwise
 * portable loops written so that GCC/Clang vectorize the inner loop at -O2: the inner loop
 * of every product walks contiguous memory (axpy form), and the one dot-product form keeps
 * eight independent partial sums. */

#include <string.h>

#include "client_internal.h"

#ifdef FL_CLIENT_HAVE_CBLAS
#include <cblas.h>
#endif

int fl__client_kernels_blas(void) {
#ifdef FL_CLIENT_HAVE_CBLAS
    return 1;
#else
    return 0;
#endif
}

#ifndef FL_CLIENT_HAVE_CBLAS
/* dot(a, b) over n floats with 8 partial sums (exact order fixed: deterministic). */
static float dot8(const float *restrict a, const float *restrict b, size_t n) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    size_t k = 0;
    for (; k + 8 <= n; k += 8)
        for (int u = 0; u < 8; u++)
            acc[u] += a[k + u] * b[k + u];
    float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; k < n; k++)
        s += a[k] * b[k];
    return s;
}

/* y[0..n) += alpha * x[0..n) */
static void axpy(float *restrict y, const float *restrict x, float alpha, size_t n) {
    for (size_t j = 0; j < n; j++)
        y[j] += alpha * x[j];
}
#endif

void fl__client_gemm_nt(float *c, const float *a, const float *b, size_t m, size_t n, size_t k,
                        int accumulate) {
#ifdef FL_CLIENT_HAVE_CBLAS
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)n, (int)k, 1.0f, a, (int)k,
                b, (int)k, accumulate ? 1.0f : 0.0f, c, (int)n);
#else
    /* (M, N) = (M, K) x (N, K)^T: each output is a dot product of two contiguous rows. */
    for (size_t i = 0; i < m; i++) {
        const float *ai = a + i * k;
        float *ci = c + i * n;
        for (size_t j = 0; j < n; j++) {
            float v = dot8(ai, b + j * k, k);
            ci[j] = accumulate ? ci[j] + v : v;
        }
    }
#endif
}

void fl__client_gemm_tn_acc(float *c, const float *a, const float *b, size_t m, size_t n,
                            size_t k) {
#ifdef FL_CLIENT_HAVE_CBLAS
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)m, (int)n, (int)k, 1.0f, a, (int)m,
                b, (int)n, 1.0f, c, (int)n);
#else
    /* (M, N) += (K, M)^T x (K, N): rank-1 updates, rows of B are contiguous. */
    for (size_t p = 0; p < k; p++) {
        const float *ap = a + p * m;
        const float *bp = b + p * n;
        for (size_t i = 0; i < m; i++)
            if (ap[i] != 0.0f)
                axpy(c + i * n, bp, ap[i], n);
    }
#endif
}

void fl__client_gemm_nn(float *c, const float *a, const float *b, size_t m, size_t n, size_t k) {
#ifdef FL_CLIENT_HAVE_CBLAS
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, (int)n, (int)k, 1.0f, a,
                (int)k, b, (int)n, 0.0f, c, (int)n);
#else
    /* (M, N) = (M, K) x (K, N) */
    for (size_t i = 0; i < m; i++) {
        float *ci = c + i * n;
        memset(ci, 0, n * sizeof(float));
        const float *ai = a + i * k;
        for (size_t p = 0; p < k; p++)
            if (ai[p] != 0.0f)
                axpy(ci, b + p * n, ai[p], n);
    }
#endif
}
