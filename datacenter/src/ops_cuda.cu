/* CUDA compute backend: GEMMs through cuBLAS (FP32, or TF32/BF16 tensor cores with FP32
 * accumulation and FP32 master weights), elementwise work in small CUDA C kernels, all on
 * one compute stream. Every kernel mirrors a loop of ops_cpu.c, the reference, and must
 * match it within the tolerance stated in docs/datacenter.md (1e-5 relative for FP32).
 * Reductions (bias gradients, softmax) run in a fixed order: no atomics, so results are
 * reproducible bit for bit from run to run. Kernel variants are tried in datacenter/dev/
 * before one is promoted here. */
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <math.h>

extern "C" {
#include "dc_internal.h"
}

struct cuda_impl {
    int device;              /* CUDA device ordinal */
    cudaStream_t stream;     /* compute stream */
    cublasHandle_t blas;     /* bound to stream */
    cublasComputeType_t ct;  /* from fl_dc_math */
};

/* Library code returns errors (no exit): the message carries file:line. */
#define CU(d, call)                                                                        \
    do {                                                                                   \
        cudaError_t e_ = (call);                                                           \
        if (e_ != cudaSuccess)                                                             \
            return fl__err_set(&(d)->err, FL_ERR_IO, "%s:%d: %s: %s", __FILE__, __LINE__,  \
                               #call, cudaGetErrorString(e_));                             \
    } while (0)

#define KCHECK(d) CU(d, cudaGetLastError())

static inline struct cuda_impl *impl(struct fl__dc_dev *d) { return (struct cuda_impl *)d->impl; }

static unsigned grid_for(size_t n, unsigned block) {
    size_t g = (n + block - 1) / block;
    return (unsigned)(g > 65535u * 8u ? 65535u * 8u : (g ? g : 1));
}

/* ---- kernels ---- */

__global__ void k_bias_add(float *Y, const float *b, int M, int N) {
    size_t n = (size_t)M * (size_t)N;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        Y[i] += b[i % (size_t)N];
}

__global__ void k_relu(float *Y, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        Y[i] = Y[i] > 0.0f ? Y[i] : 0.0f;
}

__global__ void k_relu_bwd(float *dY, const float *H, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dY[i] = H[i] > 0.0f ? dY[i] : 0.0f;
}

/* One thread per column, rows summed in order 0..M-1 exactly as the CPU loop does; loads
 * are coalesced across the threads of a warp (consecutive columns). */
__global__ void k_bias_grad(float *db, const float *dY, int M, int N, float beta) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= N)
        return;
    float s = beta == 0.0f ? 0.0f : beta * db[j];
    for (int i = 0; i < M; i++)
        s += dY[(size_t)i * (size_t)N + (size_t)j];
    db[j] = s;
}

/* One warp per row: max, sum of exp and argmax by shuffle trees (fixed order). */
__global__ void k_xent(float *dlogits, float *losses, float *correct, const float *logits,
                       const int32_t *labels, int M, int N, float scale) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= M)
        return;
    const float *z = logits + (size_t)row * (size_t)N;
    float mx = -INFINITY;
    int arg = N;
    for (int j = lane; j < N; j += 32)
        if (z[j] > mx) {
            mx = z[j];
            arg = j;
        }
    for (int o = 16; o > 0; o /= 2) {
        float m2 = __shfl_xor_sync(0xffffffffu, mx, o);
        int a2 = __shfl_xor_sync(0xffffffffu, arg, o);
        if (m2 > mx || (m2 == mx && a2 < arg)) {
            mx = m2;
            arg = a2;
        }
    }
    float s = 0.0f;
    for (int j = lane; j < N; j += 32)
        s += expf(z[j] - mx);
    for (int o = 16; o > 0; o /= 2)
        s += __shfl_xor_sync(0xffffffffu, s, o);
    int y = labels[row];
    float inv = 1.0f / s;
    if (lane == 0) {
        losses[row] = logf(s) + mx - z[y];
        correct[row] = arg == y ? 1.0f : 0.0f;
    }
    __syncwarp();
    float *g = dlogits + (size_t)row * (size_t)N;
    for (int j = lane; j < N; j += 32) {
        float p = expf(z[j] - mx) * inv;
        g[j] = (p - (j == y ? 1.0f : 0.0f)) * scale;
    }
}

__global__ void k_adamw(float *p, const float *g, float *m, float *v, size_t n, float lr,
                        float b1, float b2, float eps, float wd, float bc1, float bc2) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float gi = g[i];
        float mi = b1 * m[i] + (1.0f - b1) * gi;
        float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        float mh = mi / bc1, vh = vi / bc2;
        p[i] -= lr * (mh / (sqrtf(vh) + eps) + wd * p[i]);
    }
}

__global__ void k_sgd(float *p, const float *g, float *m, size_t n, float lr, float mom,
                      float wd) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float gi = g[i] + wd * p[i];
        if (m) {
            m[i] = mom * m[i] + gi;
            gi = m[i];
        }
        p[i] -= lr * gi;
    }
}

/* ---- vtable ---- */

static fl_status c_alloc(struct fl__dc_dev *d, void **p, size_t bytes) {
    *p = NULL;
    CU(d, cudaMalloc(p, bytes ? bytes : 1));
    CU(d, cudaMemsetAsync(*p, 0, bytes ? bytes : 1, impl(d)->stream));
    return FL_OK;
}

static void c_free(struct fl__dc_dev *d, void *p) {
    if (p)
        cudaFree(p);
}

/* pageable host memory: the copy has left the host buffer when the call returns */
static fl_status c_h2d(struct fl__dc_dev *d, void *dst, const void *src, size_t bytes) {
    if (bytes)
        CU(d, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, impl(d)->stream));
    return FL_OK;
}

static fl_status c_d2h(struct fl__dc_dev *d, void *dst, const void *src, size_t bytes) {
    if (bytes) {
        CU(d, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, impl(d)->stream));
        CU(d, cudaStreamSynchronize(impl(d)->stream));
    }
    return FL_OK;
}

static fl_status c_d2d(struct fl__dc_dev *d, void *dst, const void *src, size_t bytes) {
    if (bytes && dst != src)
        CU(d, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, impl(d)->stream));
    return FL_OK;
}

static fl_status c_zero(struct fl__dc_dev *d, void *p, size_t bytes) {
    if (bytes)
        CU(d, cudaMemsetAsync(p, 0, bytes, impl(d)->stream));
    return FL_OK;
}

static const char *blas_str(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "cuBLAS error";
    }
}

/* Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the operands and
 * keep each one's transpose flag. */
static fl_status c_gemm(struct fl__dc_dev *d, bool ta, bool tb, int M, int N, int K,
                        float alpha, const float *A, int lda, const float *B, int ldb,
                        float beta, float *C, int ldc) {
    if (M <= 0 || N <= 0)
        return FL_OK;
    cublasStatus_t s = cublasGemmEx(impl(d)->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                    ta ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha, B,
                                    CUDA_R_32F, ldb, A, CUDA_R_32F, lda, &beta, C, CUDA_R_32F,
                                    ldc, impl(d)->ct, CUBLAS_GEMM_DEFAULT);
    if (s != CUBLAS_STATUS_SUCCESS)
        return fl__err_set(&d->err, FL_ERR_IO, "%s:%d: cublasGemmEx(%d,%d,%d): %s", __FILE__,
                           __LINE__, M, N, K, blas_str(s));
    return FL_OK;
}

static fl_status c_bias_add(struct fl__dc_dev *d, float *Y, const float *b, int M, int N) {
    size_t n = (size_t)M * (size_t)N;
    k_bias_add<<<grid_for(n, 256), 256, 0, impl(d)->stream>>>(Y, b, M, N);
    KCHECK(d);
    return FL_OK;
}

static fl_status c_relu(struct fl__dc_dev *d, float *Y, size_t n) {
    k_relu<<<grid_for(n, 256), 256, 0, impl(d)->stream>>>(Y, n);
    KCHECK(d);
    return FL_OK;
}

static fl_status c_relu_bwd(struct fl__dc_dev *d, float *dY, const float *H, size_t n) {
    k_relu_bwd<<<grid_for(n, 256), 256, 0, impl(d)->stream>>>(dY, H, n);
    KCHECK(d);
    return FL_OK;
}

static fl_status c_bias_grad(struct fl__dc_dev *d, float *db, const float *dY, int M, int N,
                             float beta) {
    k_bias_grad<<<(unsigned)((N + 127) / 128), 128, 0, impl(d)->stream>>>(db, dY, M, N, beta);
    KCHECK(d);
    return FL_OK;
}

static fl_status c_xent(struct fl__dc_dev *d, float *dlogits, float *losses, float *correct,
                        const float *logits, const int32_t *labels, int M, int N, float scale) {
    if (M <= 0)
        return FL_OK;
    k_xent<<<(unsigned)((M + 7) / 8), 256, 0, impl(d)->stream>>>(dlogits, losses, correct,
                                                                 logits, labels, M, N, scale);
    KCHECK(d);
    return FL_OK;
}

static fl_status c_adamw(struct fl__dc_dev *d, float *p, const float *g, float *m, float *v,
                         size_t n, float lr, float b1, float b2, float eps, float wd,
                         uint64_t t) {
    /* bias corrections in double on the host, as the CPU path does */
    float bc1 = (float)(1.0 - pow((double)b1, (double)t));
    float bc2 = (float)(1.0 - pow((double)b2, (double)t));
    if (n == 0)
        return FL_OK;
    k_adamw<<<grid_for(n, 256), 256, 0, impl(d)->stream>>>(p, g, m, v, n, lr, b1, b2, eps, wd,
                                                           bc1, bc2);
    KCHECK(d);
    return FL_OK;
}

static fl_status c_sgd(struct fl__dc_dev *d, float *p, const float *g, float *m, size_t n,
                       float lr, float momentum, float wd) {
    if (n == 0)
        return FL_OK;
    k_sgd<<<grid_for(n, 256), 256, 0, impl(d)->stream>>>(p, g, m, n, lr, momentum, wd);
    KCHECK(d);
    return FL_OK;
}

static void *c_stream(struct fl__dc_dev *d) { return (void *)impl(d)->stream; }

static fl_status c_sync(struct fl__dc_dev *d) {
    CU(d, cudaStreamSynchronize(impl(d)->stream));
    return FL_OK;
}

static void c_destroy(struct fl__dc_dev *d) {
    struct cuda_impl *ci = impl(d);
    if (ci) {
        if (ci->blas)
            cublasDestroy(ci->blas);
        if (ci->stream)
            cudaStreamDestroy(ci->stream);
        fl__free(d->alloc, ci, sizeof(*ci));
    }
    fl__free(d->alloc, d, sizeof(*d));
}

static const struct fl__dc_ops cuda_ops = {
    "cuda",     FL_DC_BACKEND_CUDA, c_alloc,     c_free,  c_h2d,    c_d2h,  c_d2d,
    c_zero,     c_gemm,             c_bias_add,  c_relu,  c_relu_bwd, c_bias_grad, c_xent,
    c_adamw,    c_sgd,              c_stream,    c_sync,  c_destroy,
};

extern "C" int fl__dc_cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); /* clear the sticky "no driver" error */
        return 0;
    }
    return n;
}

extern "C" fl_status fl__dc_dev_cuda_create(struct fl__dc_dev **out, const fl_allocator *alloc,
                                            fl_dc_math math) {
    struct fl__dc_dev *d = (struct fl__dc_dev *)fl__calloc(alloc, 1, sizeof(*d));
    struct cuda_impl *ci = (struct cuda_impl *)fl__calloc(alloc, 1, sizeof(*ci));
    fl_status rc = FL_OK;
    cudaError_t e;
    cublasStatus_t s;
    *out = NULL;
    if (!d || !ci) {
        rc = fl__dc_last_error_set(FL_ERR_NOMEM, "out of memory for the CUDA backend");
        goto out_free;
    }
    d->ops = &cuda_ops;
    d->alloc = alloc;
    d->impl = ci;
    ci->ct = math == FL_DC_MATH_TF32   ? CUBLAS_COMPUTE_32F_FAST_TF32
             : math == FL_DC_MATH_BF16 ? CUBLAS_COMPUTE_32F_FAST_16BF
                                       : CUBLAS_COMPUTE_32F;
    if ((e = cudaGetDevice(&ci->device)) != cudaSuccess ||
        (e = cudaStreamCreateWithFlags(&ci->stream, cudaStreamNonBlocking)) != cudaSuccess) {
        rc = fl__dc_last_error_set(FL_ERR_IO, "%s:%d: CUDA: %s", __FILE__, __LINE__,
                                   cudaGetErrorString(e));
        goto out_free;
    }
    if ((s = cublasCreate(&ci->blas)) != CUBLAS_STATUS_SUCCESS ||
        (s = cublasSetStream(ci->blas, ci->stream)) != CUBLAS_STATUS_SUCCESS) {
        rc = fl__dc_last_error_set(FL_ERR_IO, "%s:%d: cuBLAS: %s", __FILE__, __LINE__,
                                   blas_str(s));
        goto out_free;
    }
    *out = d;
    return FL_OK;
out_free:
    if (d) {
        d->impl = ci;
        c_destroy(d);
    } else {
        fl__free(alloc, ci, sizeof(*ci));
    }
    return rc;
}
