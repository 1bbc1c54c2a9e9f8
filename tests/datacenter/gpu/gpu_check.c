/* Single-GPU check of the datacenter trainer (run by datacenter/scripts/gpu-check.sh):
 *   1. the CUDA backend against the CPU backend (same model, data and steps): FP32 within
 *      1e-5 relative (L2 per tensor) and 1e-4 (max entry per tensor); TF32/BF16 reported;
 *   2. dumps (initial weights, batches, weights after K steps) for torch_ref.py, which
 *      replays the same steps in PyTorch and compares;
 *   3. timings: a full training step (784-128-10 and a wider MLP) and the same step's GEMMs
 *      through cuBLAS alone.
 * Data are synthetic (a random linear teacher) so the check needs nothing but the tree.
 * An executable: cudaCheck/cublasCheck print file:line and exit. */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dc_internal.h"

#define cudaCheck(call)                                                                    \
    do {                                                                                   \
        cudaError_t e_ = (call);                                                           \
        if (e_ != cudaSuccess) {                                                           \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,                  \
                    cudaGetErrorString(e_));                                               \
            exit(2);                                                                       \
        }                                                                                  \
    } while (0)
#define cublasCheck(call)                                                                  \
    do {                                                                                   \
        cublasStatus_t s_ = (call);                                                        \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                 \
            fprintf(stderr, "%s:%d: %s: cuBLAS status %d\n", __FILE__, __LINE__, #call,    \
                    (int)s_);                                                              \
            exit(2);                                                                       \
        }                                                                                  \
    } while (0)
#define flCheck(call, tr)                                                                  \
    do {                                                                                   \
        fl_status r_ = (call);                                                             \
        if (r_ != FL_OK) {                                                                 \
            fprintf(stderr, "%s:%d: %s: %s: %s\n", __FILE__, __LINE__, #call,              \
                    fl_status_name(r_), (tr) ? fl_dc_trainer_errmsg(tr) : fl_dc_last_error()); \
            exit(2);                                                                       \
        }                                                                                  \
    } while (0)

enum { N_EX = 8192, DIM = 784, CLS = 10, K_STEPS = 5 };
static int failures = 0;

static fl_dc_dataset *synthetic(void) {
    float *x = malloc((size_t)N_EX * DIM * sizeof(float)), *w = malloc(DIM * CLS * sizeof(float));
    int32_t *y = malloc(N_EX * sizeof(int32_t));
    uint64_t s = 2024;
    for (size_t i = 0; i < (size_t)N_EX * DIM; i++)
        x[i] = (float)(fl__dc_splitmix64(&s) >> 40) / 16777216.0f;
    for (int i = 0; i < DIM * CLS; i++)
        w[i] = (float)(fl__dc_splitmix64(&s) >> 40) / 16777216.0f - 0.5f;
    for (int n = 0; n < N_EX; n++) {
        int best = 0;
        float bv = -1e30f;
        for (int c = 0; c < CLS; c++) {
            float v = 0;
            for (int k = 0; k < DIM; k++)
                v += x[(size_t)n * DIM + k] * w[k * CLS + c];
            if (v > bv) {
                bv = v;
                best = c;
            }
        }
        y[n] = best;
    }
    fl_dc_dataset *ds = NULL;
    flCheck(fl_dc_dataset_from_memory(&ds, x, N_EX, DIM, y, CLS, NULL), NULL);
    free(x);
    free(w);
    free(y);
    return ds;
}

static void base_cfg(fl_dc_config *c, int hidden, int batch) {
    fl_dc_config_init(c);
    c->sizes[1] = hidden;
    c->global_batch = batch;
    c->seed = 1;
    c->lr = 1e-3f;
    c->weight_decay = 0.01f;
}

static float *train(const fl_dc_config *cfg, fl_dc_dataset *ds, int steps, double *loss) {
    fl_dc_comm *c = NULL;
    fl_dc_trainer *tr = NULL;
    flCheck(fl_dc_comm_open(&c, FL_DC_COMM_SINGLE, NULL), NULL);
    flCheck(fl_dc_trainer_create(&tr, cfg, c, NULL), tr);
    fl_dc_step_stats st = {.struct_size = sizeof(st)};
    for (int i = 0; i < steps; i++)
        flCheck(fl_dc_trainer_step(tr, ds, &st), tr);
    if (loss)
        *loss = st.loss;
    size_t n = fl_dc_trainer_param_count(tr);
    float *p = malloc(n * sizeof(float));
    flCheck(fl_dc_trainer_params_get(tr, p, n), tr);
    fl_dc_trainer_destroy(tr);
    fl_dc_comm_close(c);
    return p;
}

/* worst per-tensor relative differences (L2 and max-entry) */
static void rel(const fl_dc_config *cfg, const float *a, const float *b, double *l2, double *mx) {
    size_t off = 0;
    *l2 = *mx = 0.0;
    for (int i = 0; i < cfg->n_layers; i++) {
        size_t lens[2] = {(size_t)cfg->sizes[i + 1] * (size_t)cfg->sizes[i],
                          (size_t)cfg->sizes[i + 1]};
        for (int t = 0; t < 2; t++) {
            double d2 = 0, r2 = 0, dm = 0, rm = 0;
            for (size_t k = 0; k < lens[t]; k++) {
                double d = fabs((double)a[off + k] - b[off + k]), r = fabs((double)b[off + k]);
                d2 += d * d;
                r2 += r * r;
                dm = d > dm ? d : dm;
                rm = r > rm ? r : rm;
            }
            double x = sqrt(d2 / (r2 > 0 ? r2 : 1)), y = dm / (rm > 0 ? rm : 1);
            *l2 = x > *l2 ? x : *l2;
            *mx = y > *mx ? y : *mx;
            off += lens[t];
        }
    }
}

static void check(const char *name, bool ok, double l2, double mx) {
    printf("CHECK %-44s %s  L2 %.2e  max %.2e\n", name, ok ? "PASS" : "FAIL", l2, mx);
    failures += !ok;
}

static void write_bin(const char *dir, const char *name, const void *p, size_t bytes) {
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, bytes, f) != bytes) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(2);
    }
    fclose(f);
}

/* 1. CUDA vs CPU backend */
static void check_backends(fl_dc_dataset *ds) {
    fl_dc_config cpu, gpu;
    base_cfg(&cpu, 128, 256);
    cpu.backend = FL_DC_BACKEND_CPU;
    gpu = cpu;
    gpu.backend = FL_DC_BACKEND_CUDA;
    double lc, lg, l2, mx;
    float *a = train(&cpu, ds, 10, &lc), *b = train(&gpu, ds, 10, &lg);
    rel(&cpu, b, a, &l2, &mx);
    check("cuda fp32 vs cpu, 784-128-10, 10 AdamW steps", l2 <= 1e-5 && mx <= 1e-4, l2, mx);
    printf("      loss after 10 steps: cpu %.6f cuda %.6f\n", lc, lg);
    free(b);
    /* SGD: no per-element normalisation, so the max-entry bound is tight too */
    cpu.optim = gpu.optim = FL_DC_OPTIM_SGD;
    cpu.lr = gpu.lr = 0.05f;
    float *c = train(&cpu, ds, 10, NULL), *d = train(&gpu, ds, 10, NULL);
    rel(&cpu, d, c, &l2, &mx);
    check("cuda fp32 vs cpu, 784-128-10, 10 SGD steps", l2 <= 1e-5 && mx <= 1e-5, l2, mx);
    free(c);
    free(d);
    gpu.optim = FL_DC_OPTIM_ADAMW;
    gpu.lr = 1e-3f;
    gpu.math = FL_DC_MATH_TF32;
    float *e = train(&gpu, ds, 10, &lg);
    rel(&gpu, e, a, &l2, &mx);
    check("cuda tf32 vs cpu fp32 (loose: L2 <= 1e-2)", l2 <= 1e-2, l2, mx);
    free(e);
    gpu.math = FL_DC_MATH_BF16;
    float *f = train(&gpu, ds, 10, &lg);
    rel(&gpu, f, a, &l2, &mx);
    check("cuda bf16 vs cpu fp32 (loose: L2 <= 5e-2)", l2 <= 5e-2, l2, mx);
    free(f);
    free(a);
}

/* 2. dumps for the PyTorch replay */
static void dump_for_torch(fl_dc_dataset *ds, const char *dir) {
    fl_dc_config cfg;
    base_cfg(&cfg, 128, 256);
    cfg.backend = FL_DC_BACKEND_CUDA;
    float *init = train(&cfg, ds, 0, NULL), *fin = train(&cfg, ds, K_STEPS, NULL);
    size_t n = fl__dc_full_offset(&cfg, cfg.n_layers, false), B = (size_t)cfg.global_batch;
    uint32_t *perm = malloc(N_EX * sizeof(uint32_t));
    fl__dc_permutation(perm, N_EX, cfg.seed, 0); /* K*B < N_EX: one epoch */
    float *x = malloc(K_STEPS * B * DIM * sizeof(float));
    int32_t *y = malloc(K_STEPS * B * sizeof(int32_t));
    for (size_t r = 0; r < K_STEPS * B; r++) {
        memcpy(x + r * DIM, ds->x + (size_t)perm[r] * DIM, DIM * sizeof(float));
        y[r] = ds->y[perm[r]];
    }
    write_bin(dir, "init.bin", init, n * sizeof(float));
    write_bin(dir, "final.bin", fin, n * sizeof(float));
    write_bin(dir, "x.bin", x, K_STEPS * B * DIM * sizeof(float));
    write_bin(dir, "y.bin", y, K_STEPS * B * sizeof(int32_t));
    char meta[256];
    int len = snprintf(meta, sizeof(meta), "sizes 784 128 10\nbatch %zu\nsteps %d\nlr %g\n"
                       "beta1 %g\nbeta2 %g\neps %g\nwd %g\n", B, K_STEPS, cfg.lr, cfg.beta1,
                       cfg.beta2, cfg.eps, cfg.weight_decay);
    write_bin(dir, "meta.txt", meta, (size_t)len);
    free(init);
    free(fin);
    free(perm);
    free(x);
    free(y);
}

/* 3a. full training step time (wall, including the batch's host-to-device copy, the loss
 * read-back and the optimiser) */
static void time_steps(fl_dc_dataset *ds, int hidden, int batch, fl_dc_math math) {
    fl_dc_config cfg;
    base_cfg(&cfg, hidden, batch);
    cfg.backend = FL_DC_BACKEND_CUDA;
    cfg.math = math;
    fl_dc_comm *c = NULL;
    fl_dc_trainer *tr = NULL;
    flCheck(fl_dc_comm_open(&c, FL_DC_COMM_SINGLE, NULL), NULL);
    flCheck(fl_dc_trainer_create(&tr, &cfg, c, NULL), tr);
    for (int i = 0; i < 20; i++)
        flCheck(fl_dc_trainer_step(tr, ds, NULL), tr);
    const int iters = 200;
    double t0 = fl__dc_now();
    for (int i = 0; i < iters; i++)
        flCheck(fl_dc_trainer_step(tr, ds, NULL), tr);
    double ms = 1e3 * (fl__dc_now() - t0) / iters;
    printf("TIME flotilla step  784-%d-10 B=%-5d %-4s %8.3f ms/step %10.0f samples/s\n", hidden,
           batch, math == FL_DC_MATH_TF32 ? "tf32" : "fp32", ms, batch / ms * 1e3);
    fl_dc_trainer_destroy(tr);
    fl_dc_comm_close(c);
}

/* 3b. the five GEMMs of one 784-H-10 step, through cuBLAS alone (row-major shapes mapped as
 * the backend maps them) */
static void time_gemms(int hidden, int batch, cublasComputeType_t ct) {
    cublasHandle_t h;
    cublasCheck(cublasCreate(&h));
    int B = batch, H = hidden;
    float *X, *W0, *A1, *W1, *Z, *dZ, *dW0, *dW1, *dA;
    size_t big = (size_t)B * DIM + (size_t)H * DIM;
    cudaCheck(cudaMalloc((void **)&X, (size_t)B * DIM * 4));
    cudaCheck(cudaMalloc((void **)&W0, (size_t)H * DIM * 4));
    cudaCheck(cudaMalloc((void **)&A1, (size_t)B * H * 4));
    cudaCheck(cudaMalloc((void **)&W1, (size_t)CLS * H * 4));
    cudaCheck(cudaMalloc((void **)&Z, (size_t)B * CLS * 4));
    cudaCheck(cudaMalloc((void **)&dZ, (size_t)B * CLS * 4));
    cudaCheck(cudaMalloc((void **)&dW0, (size_t)H * DIM * 4));
    cudaCheck(cudaMalloc((void **)&dW1, (size_t)CLS * H * 4));
    cudaCheck(cudaMalloc((void **)&dA, (size_t)B * H * 4));
    (void)big;
    const float one = 1.0f, zero = 0.0f;
#define G(ta, tb, M, N, K, A, lda, Bm, ldb, C, ldc)                                        \
    cublasCheck(cublasGemmEx(h, (tb) ? CUBLAS_OP_T : CUBLAS_OP_N,                          \
                             (ta) ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &one, Bm,          \
                             CUDA_R_32F, ldb, A, CUDA_R_32F, lda, &zero, C, CUDA_R_32F,    \
                             ldc, ct, CUBLAS_GEMM_DEFAULT))
    cudaEvent_t e0, e1;
    cudaCheck(cudaEventCreate(&e0));
    cudaCheck(cudaEventCreate(&e1));
    for (int it = 0; it < 220; it++) {
        if (it == 20)
            cudaCheck(cudaEventRecord(e0, 0));
        G(0, 1, B, H, DIM, X, DIM, W0, DIM, A1, H);      /* A1 = X W0^T      */
        G(0, 1, B, CLS, H, A1, H, W1, H, Z, CLS);       /* Z = A1 W1^T      */
        G(1, 0, CLS, H, B, dZ, CLS, A1, H, dW1, H);     /* dW1 = dZ^T A1    */
        G(0, 0, B, H, CLS, dZ, CLS, W1, H, dA, H);      /* dA = dZ W1       */
        G(1, 0, H, DIM, B, dA, H, X, DIM, dW0, DIM);    /* dW0 = dA^T X     */
    }
#undef G
    cudaCheck(cudaEventRecord(e1, 0));
    cudaCheck(cudaEventSynchronize(e1));
    float ms = 0;
    cudaCheck(cudaEventElapsedTime(&ms, e0, e1));
    printf("TIME cuBLAS GEMMs   784-%d-10 B=%-5d %-4s %8.3f ms/step (5 GEMMs only)\n", hidden,
           batch, ct == CUBLAS_COMPUTE_32F ? "fp32" : "tf32", ms / 200);
    cudaFree(X); cudaFree(W0); cudaFree(A1); cudaFree(W1); cudaFree(Z);
    cudaFree(dZ); cudaFree(dW0); cudaFree(dW1); cudaFree(dA);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cublasDestroy(h);
}

#ifdef FL_DC_WITH_MPI
#include <mpi.h>
/* NCCL path on one GPU (mpirun -np 1): MPI bootstrap, unique-id broadcast, grid splits,
 * comm streams, polling sync. With one rank every collective is a copy, so the weights must
 * equal the single-communicator CUDA run bit for bit. */
static void check_nccl(fl_dc_dataset *ds) {
    fl_dc_config cfg;
    base_cfg(&cfg, 128, 256);
    cfg.backend = FL_DC_BACKEND_CUDA;
    cfg.zero_stage = 1;
    cfg.bucket_bytes = 64 << 10;
    float *ref = train(&cfg, ds, 10, NULL);
    fl_dc_comm *c = NULL;
    fl_dc_trainer *tr = NULL;
    flCheck(fl_dc_comm_open(&c, FL_DC_COMM_NCCL, NULL), NULL);
    flCheck(fl_dc_trainer_create(&tr, &cfg, c, NULL), tr);
    fl_dc_step_stats st = {.struct_size = sizeof(st)};
    for (int i = 0; i < 10; i++)
        flCheck(fl_dc_trainer_step(tr, ds, &st), tr);
    size_t n = fl_dc_trainer_param_count(tr);
    float *p = malloc(n * sizeof(float));
    flCheck(fl_dc_trainer_params_get(tr, p, n), tr);
    bool same = memcmp(p, ref, n * sizeof(float)) == 0;
    printf("CHECK %-44s %s  (comm busy %.3f ms in the last step)\n",
           "nccl comm (1 rank, zero-1) == single comm", same ? "PASS" : "FAIL", 1e3 * st.comm_s);
    failures += !same;
    fl_dc_trainer_destroy(tr);
    fl_dc_comm_close(c);
    free(p);
    free(ref);
}
#endif

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : ".";
#ifdef FL_DC_WITH_MPI
    if (argc > 2 && strcmp(argv[2], "--nccl") == 0) {
        MPI_Init(&argc, &argv);
        fl_dc_dataset *ds = synthetic();
        check_nccl(ds);
        fl_dc_dataset_close(ds);
        MPI_Finalize();
        return failures ? 1 : 0;
    }
#endif
    int n = 0;
    cudaCheck(cudaGetDeviceCount(&n));
    struct cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s, %d SMs, CC %d.%d\n", prop.name, prop.multiProcessorCount, prop.major,
           prop.minor);
    fl_dc_dataset *ds = synthetic();
    check_backends(ds);
    dump_for_torch(ds, dir);
    int shapes[][2] = {{128, 256}, {128, 4096}, {1024, 4096}};
    for (int i = 0; i < 3; i++) {
        time_steps(ds, shapes[i][0], shapes[i][1], FL_DC_MATH_FP32);
        time_gemms(shapes[i][0], shapes[i][1], CUBLAS_COMPUTE_32F);
        time_steps(ds, shapes[i][0], shapes[i][1], FL_DC_MATH_TF32);
        time_gemms(shapes[i][0], shapes[i][1], CUBLAS_COMPUTE_32F_FAST_TF32);
    }
    fl_dc_dataset_close(ds);
    printf("gpu_check: %d failure(s)\n", failures);
    return failures ? 1 : 0;
}
