/* Local training throughput of the client SDK's built-in trainer: MLP 784-H-10, softmax
 * cross-entropy, SGD with momentum, one thread (OpenBLAS pinned to 1 thread), through the
 * public API of libflotilla-client-sdk.so (fl_client_trainer_train on in-memory data).
 *
 * Data: Fashion-MNIST (gzipped IDX from --data-dir, default /usr/share/datasets/fashion-mnist)
 * or, when absent or with --synthetic, synthetic data of the same shape (class templates plus
 * noise in [0, 1], so the problem is learnable and the loss is meaningful).
 *
 * usage: bench_train [--batch B] [--hidden H] [--epochs E] [--samples N] [--lr LR]
 *                    [--momentum M] [--repeat R] [--synthetic] [--data-dir DIR] [--json]
 * Prints samples/s (best of R runs, each from the same initial model), the last epoch's mean
 * loss and, on Fashion-MNIST, the test accuracy. An executable: exits on setup failures. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef BENCH_HAVE_ZLIB
#include <zlib.h>
#endif

#include "flotilla/client.h"

#define BENCH_NAME "bench_train"
#include "bench_util.h"

#ifdef BENCH_HAVE_OPENBLAS
void openblas_set_num_threads(int n);
#endif

#define IN 784
#define CLASSES 10

/* ---- data ---- */

#ifdef BENCH_HAVE_ZLIB
static uint8_t *read_gz(const char *dir, const char *name, size_t *len) {
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    gzFile f = gzopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 1 << 20, n = 0;
    uint8_t *b = malloc(cap);
    int r;
    while (b && (r = gzread(f, b + n, (unsigned)(cap - n))) > 0) {
        n += (size_t)r;
        if (n == cap) {
            uint8_t *nb = realloc(b, cap *= 2);
            if (!nb) {
                free(b);
                b = NULL;
                break;
            }
            b = nb;
        }
    }
    gzclose(f);
    *len = n;
    return b;
}

static uint32_t be32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Images (n, 784) scaled to [0, 1] and labels; returns n, 0 when the files are missing. */
static size_t load_idx(const char *dir, const char *img, const char *lab, float **x,
                       int32_t **y) {
    size_t il = 0, ll = 0;
    uint8_t *ib = read_gz(dir, img, &il), *lb = read_gz(dir, lab, &ll);
    size_t n = 0;
    if (!ib || !lb || il < 16 || ll < 8 || be32(ib) != 2051 || be32(lb) != 2049 ||
        be32(ib + 8) * be32(ib + 12) != IN)
        goto out;
    n = be32(ib + 4);
    if (il != 16 + n * IN || ll != 8 + n) {
        n = 0;
        goto out;
    }
    *x = malloc(n * IN * sizeof(float));
    *y = malloc(n * sizeof(int32_t));
    if (!*x || !*y)
        bench_die("out of memory", NULL);
    for (size_t i = 0; i < n * IN; i++)
        (*x)[i] = ib[16 + i] / 255.0f;
    for (size_t i = 0; i < n; i++)
        (*y)[i] = lb[8 + i];
out:
    free(ib);
    free(lb);
    return n;
}
#endif

/* n synthetic examples: a random [0, 1] template per class plus uniform noise. */
static void synthetic(size_t n, float **x, int32_t **y, uint64_t seed) {
    static float tmpl[CLASSES][IN];
    uint64_t s = seed;
    for (int c = 0; c < CLASSES; c++)
        for (int j = 0; j < IN; j++)
            tmpl[c][j] = (float)(bench_splitmix64(&s) >> 40) / 16777216.0f;
    *x = malloc(n * IN * sizeof(float));
    *y = malloc(n * sizeof(int32_t));
    if (!*x || !*y)
        bench_die("out of memory", NULL);
    for (size_t i = 0; i < n; i++) {
        int c = (int)(bench_splitmix64(&s) % CLASSES);
        (*y)[i] = c;
        for (int j = 0; j < IN; j++) {
            float noise = (float)(bench_splitmix64(&s) >> 40) / 16777216.0f;
            (*x)[i * IN + j] = 0.5f * tmpl[c][j] + 0.5f * noise;
        }
    }
}

/* ---- main ---- */

int main(int argc, char **argv) {
    uint32_t batch = 32, hidden = 128, epochs = 1, repeat = 1;
    size_t samples = 0; /* 0 = the whole training set (60000 synthetic) */
    double lr = 0.02, momentum = 0.9;
    int json = 0, force_synth = 0;
    const char *dir = getenv("FL_FMNIST_DIR") ? getenv("FL_FMNIST_DIR")
                                              : "/usr/share/datasets/fashion-mnist";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--json"))
            json = 1;
        else if (!strcmp(a, "--synthetic"))
            force_synth = 1;
        else if (v && !strcmp(a, "--batch") && ++i)
            batch = (uint32_t)strtoul(v, NULL, 10);
        else if (v && !strcmp(a, "--hidden") && ++i)
            hidden = (uint32_t)strtoul(v, NULL, 10);
        else if (v && !strcmp(a, "--epochs") && ++i)
            epochs = (uint32_t)strtoul(v, NULL, 10);
        else if (v && !strcmp(a, "--samples") && ++i)
            samples = (size_t)strtoull(v, NULL, 10);
        else if (v && !strcmp(a, "--repeat") && ++i)
            repeat = (uint32_t)strtoul(v, NULL, 10);
        else if (v && !strcmp(a, "--lr") && ++i)
            lr = strtod(v, NULL);
        else if (v && !strcmp(a, "--momentum") && ++i)
            momentum = strtod(v, NULL);
        else if (v && !strcmp(a, "--data-dir") && ++i)
            dir = v;
        else {
            fprintf(stderr, "usage: bench_train [--batch B] [--hidden H] [--epochs E] "
                            "[--samples N] [--lr LR] [--momentum M] [--repeat R] "
                            "[--synthetic] [--data-dir DIR] [--json]\n");
            return 2;
        }
    }
    if (!batch || !hidden || !epochs || !repeat)
        bench_die("--batch, --hidden, --epochs and --repeat must be >= 1", NULL);
#ifdef BENCH_HAVE_OPENBLAS
    openblas_set_num_threads(1);
#endif

    float *x = NULL, *xte = NULL;
    int32_t *y = NULL, *yte = NULL;
    size_t n = 0, nte = 0;
    const char *data = "synthetic";
#ifdef BENCH_HAVE_ZLIB
    if (!force_synth) {
        n = load_idx(dir, "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", &x, &y);
        nte = load_idx(dir, "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz", &xte,
                       &yte);
        if (n)
            data = "fashion-mnist";
    }
#endif
    if (!n) {
        n = samples ? samples : 60000;
        synthetic(n, &x, &y, 42);
        nte = 0;
    }
    if (samples && samples < n)
        n = samples;

    uint32_t sizes[3] = {IN, hidden, CLASSES};
    size_t mlen = 0;
    fl_client_model_init(NULL, 0, &mlen, sizes, 3, 1, NULL);
    uint8_t *model = malloc(mlen);
    if (!model || fl_client_model_init(model, mlen, &mlen, sizes, 3, 1, NULL) != FL_OK)
        bench_die("model_init failed", NULL);
    fl_client_train_params p;
    fl_client_train_params_init(&p);
    p.epochs = epochs;
    p.batch_size = batch;
    p.learning_rate = lr;
    p.momentum = momentum;
    p.seed = 1;

    /* Wall time decides; process CPU time is reported too because shared machines stretch
     * wall time (one thread: CPU time ~ the work done). */
    double best = 1e30, best_cpu = 1e30, loss = 0, acc = -1;
    for (uint32_t r = 0; r < repeat; r++) {
        fl_client_trainer *tr = NULL;
        if (fl_client_trainer_create(&tr, model, mlen, NULL) != FL_OK)
            bench_die("trainer_create failed", NULL);
        double t0 = bench_wall_s(), c0 = bench_clock_s(CLOCK_PROCESS_CPUTIME_ID);
        fl_status rc = fl_client_trainer_train(tr, x, y, n, &p, &loss);
        double dt = bench_wall_s() - t0;
        double dc = bench_clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
        if (rc != FL_OK) {
            fprintf(stderr, "bench_train: train: %s\n", fl_client_trainer_errmsg(tr));
            return 1;
        }
        if (dt < best)
            best = dt;
        if (dc < best_cpu)
            best_cpu = dc;
        if (r + 1 == repeat && nte &&
            fl_client_trainer_evaluate(tr, xte, yte, nte, NULL, &acc) != FL_OK)
            bench_die("evaluate failed", NULL);
        fl_client_trainer_destroy(tr);
    }
    double sps = (double)epochs * (double)n / best;
#ifdef BENCH_HAVE_OPENBLAS
    const int blas = 1;
#else
    const int blas = 0;
#endif
    if (json) {
        printf("{\"bench\":\"client_train\",\"impl\":\"flotilla\",\"data\":\"%s\","
               "\"samples\":%zu,\"epochs\":%u,\"batch\":%u,\"hidden\":%u,\"lr\":%g,"
               "\"momentum\":%g,\"threads\":1,\"blas\":%s,\"repeat\":%u,\"seconds\":%.4f,"
               "\"samples_per_s\":%.1f,\"cpu_seconds\":%.4f,\"cpu_samples_per_s\":%.1f,"
               "\"final_loss\":%.5f",
               data, n, epochs, batch, hidden, lr, momentum, blas ? "true" : "false", repeat,
               best, sps, best_cpu, (double)epochs * (double)n / best_cpu, loss);
        if (acc >= 0)
            printf(",\"test_accuracy\":%.4f", acc);
        printf("}\n");
    } else {
        printf("flotilla MLP 784-%u-10, %s, %zu samples x %u epochs, batch %u, 1 thread%s: "
               "%.3f s, %.0f samples/s (CPU %.3f s, %.0f samples/s), loss %.4f",
               hidden, data, n, epochs, batch, blas ? " (OpenBLAS)" : " (C loops)", best, sps,
               best_cpu, (double)epochs * (double)n / best_cpu, loss);
        if (acc >= 0)
            printf(", test accuracy %.4f", acc);
        printf("\n");
    }
    free(model);
    free(x);
    free(y);
    free(xte);
    free(yte);
    return 0;
}
