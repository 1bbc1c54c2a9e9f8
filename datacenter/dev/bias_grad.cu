// Kernel lab: bias gradient db(N) = column sums of dY(M, N), deterministic.
//   v1: one thread per column, rows 0..M-1 in order (what ops_cuda.cu uses; equals the CPU
//       loop bit for bit)
//   v2: blocks of 32 columns x 8 row-groups; each row-group sums a fixed, strided set of
//       rows in order, then the 8 partials are added in a fixed tree: deterministic run to
//       run, but a different (pairwise) order than the CPU, so compared at 1e-5 relative.
// usage: bias_grad [M N]
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <vector>
#include <cuda_runtime.h>

#define cudaCheck(x)                                                                       \
    do {                                                                                   \
        cudaError_t e_ = (x);                                                              \
        if (e_ != cudaSuccess) {                                                           \
            std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
            std::exit(1);                                                                  \
        }                                                                                  \
    } while (0)

__global__ void v1(float *db, const float *dY, int M, int N) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= N) return;
    float s = 0.0f;
    for (int i = 0; i < M; i++) s += dY[(size_t)i * N + j];
    db[j] = s;
}

__global__ void v2(float *db, const float *dY, int M, int N) {
    __shared__ float part[8][33];
    int j = blockIdx.x * 32 + threadIdx.x, g = threadIdx.y;
    float s = 0.0f;
    if (j < N)
        for (int i = g; i < M; i += 8) s += dY[(size_t)i * N + j];
    part[g][threadIdx.x] = s;
    __syncthreads();
    for (int w = 4; w > 0; w /= 2) {
        if (g < w) part[g][threadIdx.x] += part[g + w][threadIdx.x];
        __syncthreads();
    }
    if (g == 0 && j < N) db[j] = part[0][threadIdx.x];
}

int main(int argc, char **argv) {
    int M = argc > 2 ? (int)std::strtol(argv[1], nullptr, 10) : 4096;
    int N = argc > 2 ? (int)std::strtol(argv[2], nullptr, 10) : 10;
    std::vector<float> h((size_t)M * N), ref(N, 0.0f), out(N);
    unsigned s = 1;
    for (auto &x : h) { s = s * 1664525u + 1013904223u; x = (float)(s >> 8) / 16777216.0f - 0.5f; }
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) ref[j] += h[(size_t)i * N + j];
    float *dY, *db;
    cudaCheck(cudaMalloc(&dY, h.size() * 4));
    cudaCheck(cudaMalloc(&db, N * 4));
    cudaCheck(cudaMemcpy(dY, h.data(), h.size() * 4, cudaMemcpyHostToDevice));
    cudaEvent_t a, b;
    cudaCheck(cudaEventCreate(&a));
    cudaCheck(cudaEventCreate(&b));
    for (int v = 1; v <= 2; v++) {
        auto launch = [&] {
            if (v == 1) v1<<<(N + 127) / 128, 128>>>(db, dY, M, N);
            else v2<<<(N + 31) / 32, dim3(32, 8)>>>(db, dY, M, N);
        };
        launch();
        cudaCheck(cudaGetLastError());
        cudaCheck(cudaMemcpy(out.data(), db, N * 4, cudaMemcpyDeviceToHost));
        double worst = 0, mx = 0;
        for (int j = 0; j < N; j++) {
            worst = std::fmax(worst, std::fabs(out[j] - ref[j]));
            mx = std::fmax(mx, std::fabs(ref[j]));
        }
        cudaCheck(cudaEventRecord(a));
        for (int it = 0; it < 200; it++) launch();
        cudaCheck(cudaEventRecord(b));
        cudaCheck(cudaEventSynchronize(b));
        float ms;
        cudaCheck(cudaEventElapsedTime(&ms, a, b));
        bool ok = v == 1 ? worst == 0.0 : worst <= 1e-5 * (mx > 1 ? mx : 1);
        std::printf("v%d M=%d N=%d: %s (max abs diff %.2e) %.2f us\n", v, M, N,
                    ok ? "OK" : "MISMATCH", worst, ms * 1e3 / 200);
    }
    return 0;
}
