/* Randomized Hadamard rotation: invertible, norm-preserving, seed-dependent, and it flattens
 * a spike (max |coordinate| ~ ||x|| / sqrt(n)). */

#include <math.h>
#include <string.h>

#include "fl_test.h"
#include "flotilla/dp.h"

static double nrm(const double *x, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += x[i] * x[i];
    return sqrt(s);
}

static void test_roundtrip(void **state) {
    (void)state;
    uint8_t seed[FL_DP_SEED_BYTES] = {7, 7, 7};
    size_t sizes[] = {1, 2, 8, 1024, 1 << 15};
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        size_t n = sizes[k];
        double *x = malloc(n * sizeof(double)), *x0 = malloc(n * sizeof(double));
        for (size_t i = 0; i < n; i++)
            x0[i] = x[i] = sin((double)i * 1.3) + (double)(i % 7) - 3.0;
        double n0 = nrm(x0, n);
        assert_int_equal(fl_dp_rotation_forward(x, n, seed), FL_OK);
        assert_true(fabs(nrm(x, n) - n0) <= 1e-12 * n0 + 1e-15);
        if (n >= 8)
            assert_true(memcmp(x, x0, n * sizeof(double)) != 0);
        assert_int_equal(fl_dp_rotation_inverse(x, n, seed), FL_OK);
        for (size_t i = 0; i < n; i++)
            assert_true(fabs(x[i] - x0[i]) < 1e-11);
        free(x);
        free(x0);
    }
}

static void test_flattens_and_depends_on_seed(void **state) {
    (void)state;
    const size_t n = 4096;
    double *a = calloc(n, sizeof(double)), *b = calloc(n, sizeof(double));
    a[5] = b[5] = 1.0;
    uint8_t s1[FL_DP_SEED_BYTES] = {1}, s2[FL_DP_SEED_BYTES] = {2};
    assert_int_equal(fl_dp_rotation_forward(a, n, s1), FL_OK);
    assert_int_equal(fl_dp_rotation_forward(b, n, s2), FL_OK);
    for (size_t i = 0; i < n; i++)
        assert_true(fabs(fabs(a[i]) - 1.0 / 64) < 1e-15); /* a spike spreads to 1/sqrt(n) */
    /* A dense vector (all ones, norm 64): max coordinate stays O(sqrt(log n)). */
    for (size_t i = 0; i < n; i++)
        a[i] = 1.0;
    assert_int_equal(fl_dp_rotation_forward(a, n, s1), FL_OK);
    double mx = 0;
    for (size_t i = 0; i < n; i++)
        mx = fmax(mx, fabs(a[i]));
    assert_true(mx < 64.0 / 64 * 6); /* sub-Gaussian with proxy 1: P(> 6) ~ 1e-9 per coord */
    /* Another seed gives another rotation of the same dense vector. */
    for (size_t i = 0; i < n; i++)
        b[i] = 1.0;
    assert_int_equal(fl_dp_rotation_forward(b, n, s2), FL_OK);
    assert_true(memcmp(a, b, n * sizeof(double)) != 0);
    free(a);
    free(b);
}

static void test_misuse(void **state) {
    (void)state;
    double x[6] = {0};
    uint8_t seed[FL_DP_SEED_BYTES] = {0};
    assert_int_equal(fl_dp_rotation_forward(x, 6, seed), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_rotation_forward(x, 0, seed), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_rotation_forward(NULL, 4, seed), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_rotation_inverse(x, 4, NULL), FL_ERR_MISUSE);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_flattens_and_depends_on_seed),
        cmocka_unit_test(test_misuse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
