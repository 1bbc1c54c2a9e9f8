/* CPU backend step time on synthetic data (single process). Usage: bench_dc_step [steps]
 * For multi-rank figures run flotilla-train under mpirun; its progress lines carry
 * samples/s and per-rank compute vs communication time. */
#include <stdio.h>
#include <stdlib.h>

#include "dc_internal.h"

int main(int argc, char **argv) {
    int steps = argc > 1 ? (int)strtol(argv[1], NULL, 10) : 50;
    enum { N = 4096, D = 784 };
    float *x = malloc((size_t)N * D * sizeof(float));
    int32_t *y = malloc(N * sizeof(int32_t));
    uint64_t s = 5;
    for (size_t i = 0; i < (size_t)N * D; i++)
        x[i] = (float)(fl__dc_splitmix64(&s) >> 40) / 16777216.0f;
    for (int i = 0; i < N; i++)
        y[i] = (int32_t)(fl__dc_splitmix64(&s) % 10);
    fl_dc_dataset *ds = NULL;
    fl_dc_comm *c = NULL;
    if (fl_dc_dataset_from_memory(&ds, x, N, D, y, 10, NULL) != FL_OK ||
        fl_dc_comm_open(&c, FL_DC_COMM_SINGLE, NULL) != FL_OK)
        return 1;
    int shapes[][2] = {{128, 64}, {128, 256}, {1024, 256}};
    for (int k = 0; k < 3; k++) {
        fl_dc_config cfg;
        fl_dc_config_init(&cfg);
        cfg.backend = FL_DC_BACKEND_CPU;
        cfg.sizes[1] = shapes[k][0];
        cfg.global_batch = shapes[k][1];
        fl_dc_trainer *tr = NULL;
        if (fl_dc_trainer_create(&tr, &cfg, c, NULL) != FL_OK)
            return 1;
        for (int i = 0; i < 5; i++)
            fl_dc_trainer_step(tr, ds, NULL);
        double t0 = fl__dc_now();
        for (int i = 0; i < steps; i++)
            fl_dc_trainer_step(tr, ds, NULL);
        double ms = 1e3 * (fl__dc_now() - t0) / steps;
        printf("cpu 784-%d-10 B=%-4d %8.3f ms/step %9.0f samples/s\n", shapes[k][0],
               shapes[k][1], ms, shapes[k][1] / ms * 1e3);
        fl_dc_trainer_destroy(tr);
    }
    fl_dc_comm_close(c);
    fl_dc_dataset_close(ds);
    free(x);
    free(y);
    return 0;
}
