/* FedBuff's fold of a plain update into its buffer sum (coordinator/src/round.c,
 * fl__coord_plain_accumulate): the vectorised loops for 4-byte words must add exactly what
 * the definition (the general per-coordinate loop) adds, for every modulus width, at the
 * centring edges (0, 2^(b-1) - 1, 2^(b-1), 2^b - 1), unclipped and clipped, fresh and
 * stale, with and without central DP's truncation; the general loop (8-byte words) is
 * checked the same way. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "coord_internal.h"
#include "fl_test.h"

enum { DIM = 4099 };

static void fill(uint8_t *b, const struct fl__coord_round_params *rp, uint32_t seed) {
    uint64_t mod = (uint64_t)1 << rp->bits;
    size_t wb = rp->bits <= 32 ? 4 : 8;
    uint32_t s = seed;
    for (size_t i = 0; i < rp->vec_len; i++) {
        s = s * 1103515245u + 12345u;
        uint64_t x = ((uint64_t)s << 16 ^ (uint64_t)(s >> 7)) % mod;
        /* The centring edges, then random words. */
        if (i < 4) {
            uint64_t half = mod >> 1;
            x = i == 0 ? 0 : i == 1 ? half - 1 : i == 2 ? half : mod - 1;
        }
        if (wb == 4)
            fl__put_u32le(b + 4 * i, (uint32_t)x);
        else
            fl__put_u64le(b + 8 * i, x);
    }
}

/* The definition: v = fl__coord_plain_value(.., scale), then f v, or trunc(f v) (f < 1). */
static void reference(double *sum, const struct fl__coord_round_params *rp, const uint8_t *b,
                      double scale, double f, bool trunc_weighted) {
    for (size_t i = 0; i < rp->dim; i++) {
        double v = (double)fl__coord_plain_value(rp, b, i, scale);
        sum[i] += trunc_weighted ? (f < 1.0 ? trunc(f * v) : v) : f * v;
    }
}

static void test_fast_path_exact(void **state) {
    (void)state;
    static const unsigned widths[] = {2, 8, 17, 20, 31, 32};
    uint8_t *b = malloc(4 * (DIM + 1));
    double *got = calloc(DIM, sizeof(double)), *want = calloc(DIM, sizeof(double));
    assert_true(b && got && want);
    for (size_t w = 0; w < sizeof(widths) / sizeof(widths[0]); w++) {
        struct fl__coord_round_params rp;
        memset(&rp, 0, sizeof(rp));
        rp.bits = widths[w];
        rp.dim = DIM;
        rp.vec_len = DIM + 1;
        for (size_t i = 0; i < DIM; i++)
            got[i] = want[i] = (double)i - 7.5; /* a running sum already there */
        static const double scales[] = {1.0, 0.37, 1e-3};
        static const double fs[] = {1.0, 0.5, 1.0 / 3.0};
        for (uint32_t u = 0; u < 3; u++) {
            fill(b, &rp, 1000u * (uint32_t)w + u);
            for (size_t sc = 0; sc < 3; sc++)
                for (size_t k = 0; k < 3; k++)
                    for (int central = 0; central < 2; central++) {
                        fl__coord_plain_accumulate(&rp, b, scales[sc], fs[k], central, got);
                        reference(want, &rp, b, scales[sc], fs[k], central);
                    }
        }
        assert_memory_equal(got, want, DIM * sizeof(double));
    }
    free(b);
    free(got);
    free(want);
}

static void test_general_path(void **state) {
    (void)state;
    struct fl__coord_round_params rp;
    memset(&rp, 0, sizeof(rp));
    rp.bits = 40; /* 8-byte words: the general loop */
    rp.dim = DIM;
    rp.vec_len = DIM + 1;
    uint8_t *b = malloc(8 * (DIM + 1));
    double *got = calloc(DIM, sizeof(double)), *want = calloc(DIM, sizeof(double));
    assert_true(b && got && want);
    fill(b, &rp, 77);
    static const double scales[] = {1.0, 0.37};
    static const double fs[] = {1.0, 0.5, 1.0 / 3.0};
    for (size_t s = 0; s < 2; s++)
        for (size_t k = 0; k < 3; k++)
            for (int central = 0; central < 2; central++) {
                fl__coord_plain_accumulate(&rp, b, scales[s], fs[k], central, got);
                reference(want, &rp, b, scales[s], fs[k], central);
            }
    assert_memory_equal(got, want, DIM * sizeof(double));
    /* Truncation toward zero under central DP: a stale update moves no coordinate by more
     * than f |v|, and an integer sum stays integral. */
    memset(got, 0, DIM * sizeof(double));
    fl__coord_plain_accumulate(&rp, b, 1.0, 0.5, true, got);
    for (size_t i = 0; i < DIM; i++) {
        double v = (double)fl__coord_plain_value(&rp, b, i, 1.0);
        assert_true(fabs(got[i]) <= 0.5 * fabs(v));
        assert_true(got[i] == trunc(got[i]));
    }
    free(b);
    free(got);
    free(want);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fast_path_exact),
        cmocka_unit_test(test_general_path),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
