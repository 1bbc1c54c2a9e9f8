/* The public discrete Laplace sampler (fl_dp_discrete_laplace), which the other dp tests
 * reach only through the Gaussian sampler's internals: argument checks, and the empirical
 * distribution for an integer scale (s = 1) and a fractional one (s > 1) against the exact
 * law P(y) = (1 - q) / (1 + q) * q^|y|, q = exp(-1/b). The rng is seeded, so the samples are
 * the same on every run; the tolerances are 6 standard errors. */
#include <math.h>
#include <string.h>

#include "fl_test.h"
#include "flotilla/dp.h"

#define N 40000

static fl_dp_rng *seeded(uint8_t tag) {
    uint8_t seed[FL_DP_SEED_BYTES];
    memset(seed, tag, sizeof(seed));
    fl_dp_rng *rng = NULL;
    assert_int_equal(fl_dp_rng_create_chacha20(&rng, seed, sizeof(seed), NULL), FL_OK);
    return rng;
}

static void test_arguments(void **state) {
    (void)state;
    fl_dp_rng *rng = seeded(1);
    int64_t x[4];
    const uint64_t lim = (uint64_t)1 << 40;
    assert_int_equal(fl_dp_discrete_laplace(NULL, x, 4, 1, 1), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_discrete_laplace(rng, NULL, 4, 1, 1), FL_ERR_MISUSE);
    assert_non_null(strstr(fl_dp_rng_errmsg(rng), "out is NULL"));
    assert_int_equal(fl_dp_discrete_laplace(rng, x, 4, 0, 1), FL_ERR_MISUSE);
    assert_non_null(strstr(fl_dp_rng_errmsg(rng), "scale"));
    assert_int_equal(fl_dp_discrete_laplace(rng, x, 4, 1, 0), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_discrete_laplace(rng, x, 4, lim + 1, 1), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_discrete_laplace(rng, x, 4, 1, lim + 1), FL_ERR_MISUSE);
    /* Nothing asked, nothing done; the largest scales are accepted. */
    assert_int_equal(fl_dp_discrete_laplace(rng, NULL, 0, 1, 1), FL_OK);
    assert_int_equal(fl_dp_discrete_laplace(rng, x, 4, lim, lim), FL_OK);
    assert_int_equal(fl_dp_discrete_laplace(rng, x, 1, lim, 1), FL_OK);
    fl_dp_rng_destroy(rng);
}

/* Compares N samples of scale num/den with the exact law: P(0), the mean and the variance
 * 2q / (1 - q)^2. */
static void check_law(uint64_t num, uint64_t den, uint8_t tag) {
    fl_dp_rng *rng = seeded(tag);
    static int64_t x[N];
    assert_int_equal(fl_dp_discrete_laplace(rng, x, N, num, den), FL_OK);
    double b = (double)num / (double)den, q = exp(-1.0 / b);
    double p0 = (1.0 - q) / (1.0 + q), var = 2.0 * q / ((1.0 - q) * (1.0 - q));
    double zeros = 0.0, sum = 0.0, sq = 0.0;
    for (size_t i = 0; i < N; i++) {
        zeros += x[i] == 0;
        sum += (double)x[i];
        sq += (double)x[i] * (double)x[i];
    }
    double mean = sum / N, v = sq / N - mean * mean;
    print_message("scale %llu/%llu: P(0) %.4f (exact %.4f), mean %.4f, variance %.3f (exact "
                  "%.3f)\n",
                  (unsigned long long)num, (unsigned long long)den, zeros / N, p0, mean, v,
                  var);
    assert_true(fabs(zeros / N - p0) < 6.0 * sqrt(p0 * (1.0 - p0) / N));
    assert_true(fabs(mean) < 6.0 * sqrt(var / N));
    /* The variance of x^2 for this law is below 6 var^2 at these scales. */
    assert_true(fabs(v - var) < 6.0 * sqrt(6.0 * var * var / N));
    fl_dp_rng_destroy(rng);
}

static void test_integer_scale(void **state) {
    (void)state;
    check_law(3, 1, 2);
}

static void test_fractional_scale(void **state) {
    (void)state;
    check_law(5, 2, 3);
    check_law(1, 4, 4); /* b = 1/4: mostly zeros */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_arguments),
        cmocka_unit_test(test_integer_scale),
        cmocka_unit_test(test_fractional_scale),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
