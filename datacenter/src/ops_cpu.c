/* CPU compute backend: the reference path. Plain C loops for the elementwise work and
 * OpenBLAS for GEMMs (a straightforward triple loop when built without OpenBLAS). Every
 * reduction runs in a fixed order so results are reproducible bit for bit. */
#include <math.h>
#include <string.h>

#include "dc_internal.h"

#ifdef FL_DC_WITH_OPENBLAS
#include <cblas.h>
#endif

static fl_status cpu_alloc(struct fl__dc_dev *d, void **p, size_t bytes) {
    *p = fl__calloc(d->alloc, 1, bytes ? bytes : 1);
    if (!*p)
        return fl__err_set(&d->err, FL_ERR_NOMEM, "no memory for %zu bytes", bytes);
    return FL_OK;
}

/* The CPU backend's allocations carry no size, so the byte count given to the
 * allocator's free hook is 0 (documented as "what was asked" only for core objects). */
static void cpu_free(struct fl__dc_dev *d, void *p) { fl__free(d->alloc, p, 0); }

static fl_status cpu_copy(struct fl__dc_dev *d, void *dst, const void *src, size_t bytes) {
    if (bytes && dst != src)
        memmove(dst, src, bytes);
    return FL_OK;
}

static fl_status cpu_zero(struct fl__dc_dev *d, void *p, size_t bytes) {
    if (bytes)
        memset(p, 0, bytes);
    return FL_OK;
}

#ifndef FL_DC_WITH_OPENBLAS
/* Element (r, k) of op(X) for a row-major X with row stride ld. */
static inline float at(const float *X, bool t, int ld, int r, int k) {
    return t ? X[(size_t)k * (size_t)ld + (size_t)r] : X[(size_t)r * (size_t)ld + (size_t)k];
}
#endif

static fl_status cpu_gemm(struct fl__dc_dev *d, bool ta, bool tb, int M, int N, int K,
                          float alpha, const float *A, int lda, const float *B, int ldb,
                          float beta, float *C, int ldc) {
    if (M <= 0 || N <= 0)
        return FL_OK;
#ifdef FL_DC_WITH_OPENBLAS
    if (K <= 0) {
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++)
                C[(size_t)i * (size_t)ldc + (size_t)j] *= beta;
        return FL_OK;
    }
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M,
                N, K, alpha, A, lda, B, ldb, beta, C, ldc);
#else
    for (int i = 0; i < M; i++) {
        for (int j = 0; j < N; j++) {
            float s = 0.0f;
            for (int k = 0; k < K; k++)
                s += at(A, ta, lda, i, k) * at(B, tb, ldb, k, j);
            float *c = &C[(size_t)i * (size_t)ldc + (size_t)j];
            *c = alpha * s + (beta == 0.0f ? 0.0f : beta * *c);
        }
    }
#endif
    return FL_OK;
}

static fl_status cpu_bias_add(struct fl__dc_dev *d, float *Y, const float *b, int M, int N) {
    for (int i = 0; i < M; i++) {
        float *y = Y + (size_t)i * (size_t)N;
        for (int j = 0; j < N; j++)
            y[j] += b[j];
    }
    return FL_OK;
}

static fl_status cpu_relu(struct fl__dc_dev *d, float *Y, size_t n) {
    for (size_t i = 0; i < n; i++)
        Y[i] = Y[i] > 0.0f ? Y[i] : 0.0f;
    return FL_OK;
}

static fl_status cpu_relu_bwd(struct fl__dc_dev *d, float *dY, const float *H, size_t n) {
    for (size_t i = 0; i < n; i++)
        dY[i] = H[i] > 0.0f ? dY[i] : 0.0f;
    return FL_OK;
}

static fl_status cpu_bias_grad(struct fl__dc_dev *d, float *db, const float *dY, int M, int N,
                               float beta) {
    for (int j = 0; j < N; j++)
        db[j] = beta == 0.0f ? 0.0f : beta * db[j];
    for (int i = 0; i < M; i++) {
        const float *r = dY + (size_t)i * (size_t)N;
        for (int j = 0; j < N; j++)
            db[j] += r[j];
    }
    return FL_OK;
}

static fl_status cpu_xent(struct fl__dc_dev *d, float *dlogits, float *losses, float *correct,
                          const float *logits, const int32_t *labels, int M, int N,
                          float scale) {
    for (int i = 0; i < M; i++) {
        const float *z = logits + (size_t)i * (size_t)N;
        float *g = dlogits + (size_t)i * (size_t)N;
        int y = labels[i];
        float mx = z[0];
        int arg = 0;
        for (int j = 1; j < N; j++)
            if (z[j] > mx) {
                mx = z[j];
                arg = j;
            }
        float sum = 0.0f;
        for (int j = 0; j < N; j++)
            sum += expf(z[j] - mx);
        float zy = z[y];
        losses[i] = logf(sum) + mx - zy;
        correct[i] = arg == y ? 1.0f : 0.0f;
        float inv = 1.0f / sum;
        for (int j = 0; j < N; j++) {
            float p = expf(z[j] - mx) * inv;
            g[j] = (p - (j == y ? 1.0f : 0.0f)) * scale;
        }
    }
    return FL_OK;
}

static fl_status cpu_adamw(struct fl__dc_dev *d, float *p, const float *g, float *m, float *v,
                           size_t n, float lr, float b1, float b2, float eps, float wd,
                           uint64_t t) {
    float bc1 = (float)(1.0 - pow((double)b1, (double)t));
    float bc2 = (float)(1.0 - pow((double)b2, (double)t));
    for (size_t i = 0; i < n; i++) {
        float gi = g[i];
        m[i] = b1 * m[i] + (1.0f - b1) * gi;
        v[i] = b2 * v[i] + (1.0f - b2) * gi * gi;
        float mh = m[i] / bc1;
        float vh = v[i] / bc2;
        p[i] -= lr * (mh / (sqrtf(vh) + eps) + wd * p[i]);
    }
    return FL_OK;
}

static fl_status cpu_sgd(struct fl__dc_dev *d, float *p, const float *g, float *m, size_t n,
                         float lr, float momentum, float wd) {
    for (size_t i = 0; i < n; i++) {
        float gi = g[i] + wd * p[i];
        if (m) {
            m[i] = momentum * m[i] + gi;
            gi = m[i];
        }
        p[i] -= lr * gi;
    }
    return FL_OK;
}

static void *cpu_stream(struct fl__dc_dev *d) { return NULL; }

static fl_status cpu_sync(struct fl__dc_dev *d) { return FL_OK; }

static void cpu_destroy(struct fl__dc_dev *d) { fl__free(d->alloc, d, sizeof(*d)); }

static const struct fl__dc_ops cpu_ops = {
    .name = "cpu",
    .kind = FL_DC_BACKEND_CPU,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .h2d = cpu_copy,
    .d2h = cpu_copy,
    .d2d = cpu_copy,
    .zero = cpu_zero,
    .gemm = cpu_gemm,
    .bias_add = cpu_bias_add,
    .relu = cpu_relu,
    .relu_bwd = cpu_relu_bwd,
    .bias_grad = cpu_bias_grad,
    .xent = cpu_xent,
    .adamw = cpu_adamw,
    .sgd = cpu_sgd,
    .stream = cpu_stream,
    .sync = cpu_sync,
    .destroy = cpu_destroy,
};

fl_status fl__dc_dev_cpu_create(struct fl__dc_dev **out, const fl_allocator *alloc) {
    struct fl__dc_dev *d = fl__calloc(alloc, 1, sizeof(*d));
    *out = d;
    if (!d)
        return fl__dc_last_error_set(FL_ERR_NOMEM, "out of memory for the CPU backend");
    d->ops = &cpu_ops;
    d->alloc = alloc;
    return FL_OK;
}
