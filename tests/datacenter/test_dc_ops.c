/* CPU compute backend against plain double-precision references, and the model layout
 * (TP slices cover the model exactly; buckets are padded for ZeRO). */
#include "fl_test.h"

#include <math.h>
#include <string.h>

#include "dc_internal.h"

static float frand(uint64_t *s) {
    return (float)(fl__dc_splitmix64(s) >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f;
}

static void test_gemm(void **state) {
    struct fl__dc_dev *d = NULL;
    assert_int_equal(fl__dc_dev_cpu_create(&d, NULL), FL_OK);
    enum { M = 7, N = 5, K = 9 };
    float A[M * K], At[K * M], B[K * N], Bt[N * K], C[M * N];
    uint64_t s = 1;
    for (int i = 0; i < M; i++)
        for (int k = 0; k < K; k++)
            At[k * M + i] = A[i * K + k] = frand(&s);
    for (int k = 0; k < K; k++)
        for (int j = 0; j < N; j++)
            Bt[j * K + k] = B[k * N + j] = frand(&s);
    for (int ta = 0; ta < 2; ta++) {
        for (int tb = 0; tb < 2; tb++) {
            for (int i = 0; i < M * N; i++)
                C[i] = 1.0f;
            assert_int_equal(d->ops->gemm(d, ta, tb, M, N, K, 2.0f, ta ? At : A, ta ? M : K,
                                          tb ? Bt : B, tb ? K : N, 0.5f, C, N),
                             FL_OK);
            for (int i = 0; i < M; i++) {
                for (int j = 0; j < N; j++) {
                    double r = 0.5;
                    for (int k = 0; k < K; k++)
                        r += 2.0 * A[i * K + k] * B[k * N + j];
                    assert_true(fabs(C[i * N + j] - r) < 1e-5);
                }
            }
        }
    }
    d->ops->destroy(d);
}

static void test_elementwise(void **state) {
    struct fl__dc_dev *d = NULL;
    assert_int_equal(fl__dc_dev_cpu_create(&d, NULL), FL_OK);
    const struct fl__dc_ops *o = d->ops;
    float Y[6] = {-1, 2, -3, 4, 0, 6}, b[3] = {1, 1, 1}, db[3] = {9, 9, 9};
    o->bias_add(d, Y, b, 2, 3);
    assert_true(Y[0] == 0.0f && Y[5] == 7.0f);
    o->relu(d, Y, 6);
    float H[6];
    memcpy(H, Y, sizeof(H));
    assert_true(Y[2] == 0.0f && Y[1] == 3.0f);
    float dY[6] = {1, 1, 1, 1, 1, 1};
    o->relu_bwd(d, dY, H, 6);
    assert_true(dY[0] == 0.0f && dY[1] == 1.0f && dY[2] == 0.0f);
    o->bias_grad(d, db, dY, 2, 3, 0.0f);
    assert_true(db[0] == 1.0f && db[1] == 2.0f && db[2] == 1.0f);

    /* cross-entropy: loss, accuracy and gradient against a double computation */
    float z[6] = {1.0f, 2.0f, 0.5f, -1.0f, 0.0f, 3.0f}, g[6], loss[2], hit[2];
    int32_t y[2] = {1, 0};
    o->xent(d, g, loss, hit, z, y, 2, 3, 0.5f);
    for (int i = 0; i < 2; i++) {
        double m = 0, e[3];
        for (int j = 0; j < 3; j++)
            m += e[j] = exp(z[i * 3 + j]);
        assert_true(fabs(loss[i] - (log(m) - z[i * 3 + y[i]])) < 1e-5);
        for (int j = 0; j < 3; j++)
            assert_true(fabs(g[i * 3 + j] - 0.5 * (e[j] / m - (j == y[i]))) < 1e-6);
    }
    assert_true(hit[0] == 1.0f && hit[1] == 0.0f);

    /* AdamW one step from zero state: update is lr * sign(g) (bias-corrected), plus decay */
    float p[2] = {1.0f, -1.0f}, gr[2] = {0.5f, -2.0f}, m[2] = {0}, v[2] = {0};
    o->adamw(d, p, gr, m, v, 2, 0.1f, 0.9f, 0.999f, 1e-8f, 0.01f, 1);
    assert_true(fabsf(p[0] - (1.0f - 0.1f * (1.0f + 0.01f))) < 1e-6f);
    assert_true(fabsf(p[1] - (-1.0f + 0.1f * (1.0f + 0.01f))) < 1e-6f);
    /* SGD with momentum */
    float q[1] = {1.0f}, gq[1] = {2.0f}, mq[1] = {1.0f};
    o->sgd(d, q, gq, mq, 1, 0.1f, 0.5f, 0.0f);
    assert_true(fabsf(mq[0] - 2.5f) < 1e-7f && fabsf(q[0] - 0.75f) < 1e-7f);
    d->ops->destroy(d);
}

/* For tp = 1..4 and a 3-layer MLP: COL/ROW/REP assignment, exact coverage of every weight by
 * the TP slices, and bucket padding to multiples of 4*dp. */
static void test_layout(void **state) {
    fl_dc_config cfg;
    fl_dc_config_init(&cfg);
    cfg.n_layers = 3;
    cfg.sizes[0] = 13;
    cfg.sizes[1] = 10;
    cfg.sizes[2] = 7;
    cfg.sizes[3] = 3;
    cfg.bucket_bytes = 64;
    size_t full = fl__dc_full_offset(&cfg, 3, false);
    assert_int_equal(full, 10 * 14 + 7 * 11 + 3 * 8);
    for (int tp = 1; tp <= 4; tp++) {
        cfg.tp = tp;
        cfg.dp = 3;
        int *cover = calloc(full, sizeof(int));
        for (int r = 0; r < tp; r++) {
            struct fl__dc_layer L[FL_DC_MAX_LAYERS];
            struct fl__dc_bucket B[2 * FL_DC_MAX_LAYERS];
            int nb;
            size_t len;
            fl__dc_layout(&cfg, r, L, B, &nb, &len);
            if (tp > 1) {
                assert_int_equal(L[0].split, FL__DC_COL);
                assert_int_equal(L[1].split, FL__DC_ROW);
                assert_int_equal(L[2].split, FL__DC_REP);
                assert_int_equal(L[0].out_l, L[1].in_l);
            }
            for (int b = 0; b < nb; b++) {
                assert_int_equal(B[b].padded % 12, 0);
                assert_true(B[b].padded >= B[b].len);
                if (b + 1 < nb)
                    assert_int_equal(B[b].off + B[b].padded, B[b + 1].off);
            }
            assert_int_equal(B[nb - 1].off + B[nb - 1].padded, len);
            for (int i = 0; i < 3; i++) {
                if (L[i].split == FL__DC_REP && r > 0)
                    continue;
                size_t w = fl__dc_full_offset(&cfg, i, false);
                for (int o = 0; o < L[i].out_l; o++)
                    for (int k = 0; k < L[i].in_l; k++)
                        cover[w + (size_t)(o + L[i].out_off) * (size_t)L[i].in + (size_t)k +
                              (size_t)L[i].in_off]++;
                if (L[i].split == FL__DC_ROW && r > 0)
                    continue;
                size_t bo = fl__dc_full_offset(&cfg, i, true);
                for (int o = 0; o < L[i].b_len; o++)
                    cover[bo + (size_t)o + (L[i].split == FL__DC_COL ? (size_t)L[i].out_off : 0)]++;
            }
        }
        for (size_t k = 0; k < full; k++)
            assert_int_equal(cover[k], 1);
        free(cover);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemm),
        cmocka_unit_test(test_elementwise),
        cmocka_unit_test(test_layout),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
