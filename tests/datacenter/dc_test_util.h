#ifndef FL_DC_TEST_UTIL_H
#define FL_DC_TEST_UTIL_H
/* Helpers shared by the datacenter tests: the Fashion-MNIST location, a tolerance check
 * on canonical-order models, and temporary directories. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "flotilla/datacenter.h"

#define DC_FASHION_DIR "/usr/share/datasets/fashion-mnist"
#define DC_TRAIN_IMAGES DC_FASHION_DIR "/train-images-idx3-ubyte.gz"
#define DC_TRAIN_LABELS DC_FASHION_DIR "/train-labels-idx1-ubyte.gz"

static inline int dc_have_fashion(void) { return access(DC_TRAIN_IMAGES, R_OK) == 0; }

/* Relative differences between two models in canonical order (ref = b), the worst over
 * tensors of: norm: ||a-b||_2 / ||b||_2; max: max|a-b| / max|b|. */
static inline double dc_model_rel_diff2(const fl_dc_config *cfg, const float *a, const float *b,
                                        double *norm_out) {
    double worst = 0.0, worst_norm = 0.0;
    size_t off = 0;
    for (int i = 0; i < cfg->n_layers; i++) {
        size_t lens[2] = {(size_t)cfg->sizes[i + 1] * (size_t)cfg->sizes[i],
                          (size_t)cfg->sizes[i + 1]};
        for (int t = 0; t < 2; t++) {
            double d = 0.0, m = 0.0, d2 = 0.0, m2 = 0.0;
            for (size_t k = 0; k < lens[t]; k++) {
                double x = fabs((double)a[off + k] - (double)b[off + k]);
                double y = fabs((double)b[off + k]);
                d = x > d ? x : d;
                m = y > m ? y : m;
                d2 += x * x;
                m2 += y * y;
            }
            double r = d / (m > 0.0 ? m : 1.0), rn = sqrt(d2) / (m2 > 0.0 ? sqrt(m2) : 1.0);
            worst = r > worst ? r : worst;
            worst_norm = rn > worst_norm ? rn : worst_norm;
            off += lens[t];
        }
    }
    if (norm_out)
        *norm_out = worst_norm;
    return worst;
}

static inline double dc_model_rel_diff(const fl_dc_config *cfg, const float *a, const float *b) {
    return dc_model_rel_diff2(cfg, a, b, NULL);
}

/* Removes a checkpoint tree made by the tests (two levels deep). */
static inline void dc_rm_tree(const char *dir) {
    char cmd[1200];
    if (strncmp(dir, "/tmp/", 5) != 0)
        return;
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
}

/* Writes len bytes of buf to path: 0, or -1 on any failure (dc_write_file_ok asserts 0 in
 * cmocka tests). */
static inline int dc_write_file(const char *path, const void *buf, size_t len) {
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t w = fwrite(buf, 1, len, f);
    return fclose(f) == 0 && w == len ? 0 : -1;
}
#define dc_write_file_ok(path, buf, len) assert_int_equal(dc_write_file(path, buf, len), 0)

/* Big-endian u32, as IDX headers store their sizes. */
static inline void dc_put_be32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

#endif
