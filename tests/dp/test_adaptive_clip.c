/* Adaptive clipping: the clip norm converges towards the target quantile of a synthetic norm
 * distribution (log-normal, quantiles known in closed form) under noised bit counts. */

#include <math.h>

#include "fl_test.h"
#include "flotilla/dp.h"

static double unif(fl_dp_rng *r) {
    uint64_t v;
    assert_int_equal(fl_dp_rng_uniform(r, &v, (uint64_t)1 << 53), FL_OK);
    return ((double)v + 0.5) * 0x1p-53;
}

/* exp(N(mu, 1)) by Box-Muller: the test's synthetic update norms. */
static double lognormal(fl_dp_rng *r, double mu) {
    double u1 = unif(r), u2 = unif(r);
    return exp(mu + sqrt(-2 * log(u1)) * cos(2 * 3.14159265358979 * u2));
}

/* Runs `rounds` rounds with m clients; returns the mean of log C over the last 50. */
static double run(double quantile, double c0, int rounds, int m, uint8_t tag) {
    uint8_t seed[FL_DP_SEED_BYTES] = {tag, 1};
    fl_dp_rng *r = NULL;
    assert_int_equal(fl_dp_rng_create_chacha20(&r, seed, sizeof(seed), NULL), FL_OK);
    fl_dp_adaptive_clip_config cfg;
    fl_dp_adaptive_clip_config_init(&cfg);
    cfg.initial_clip = c0;
    cfg.target_quantile = quantile;
    cfg.learning_rate = 0.2;
    cfg.bit_sigma2_num = 25; /* noise std 5 on a count of m = 200 */
    cfg.bit_sigma2_den = 1;
    fl_dp_adaptive_clip st;
    assert_int_equal(fl_dp_adaptive_clip_init(&st, &cfg), FL_OK);
    double acc = 0;
    for (int t = 0; t < rounds; t++) {
        uint64_t bits = 0;
        for (int i = 0; i < m; i++)
            bits += (uint64_t)fl_dp_adaptive_clip_bit(lognormal(r, 0.0), st.clip);
        int64_t noised;
        assert_int_equal(fl_dp_adaptive_clip_update(&st, r, bits, (uint64_t)m, &noised), FL_OK);
        if (t >= rounds - 50)
            acc += log(st.clip);
    }
    assert_int_equal(st.rounds, (uint64_t)rounds);
    fl_dp_rng_destroy(r);
    return acc / 50;
}

static void test_converges_median(void **state) {
    (void)state;
    /* Median of exp(N(0,1)) is 1: log C -> 0, from 100x below. */
    double lc = run(0.5, 0.01, 300, 200, 1);
    print_message("median target: mean log C = %.3f (want 0)\n", lc);
    assert_true(fabs(lc) < 0.15);
}

static void test_converges_q90(void **state) {
    (void)state;
    /* 0.9-quantile of exp(N(0,1)) is exp(1.28155), from 10x above. */
    double lc = run(0.9, 36.0, 300, 200, 2);
    print_message("q90 target: mean log C = %.3f (want 1.282)\n", lc);
    assert_true(fabs(lc - 1.28155) < 0.2);
}

static void test_noised_and_bounds(void **state) {
    (void)state;
    fl_dp_adaptive_clip_config cfg;
    fl_dp_adaptive_clip_config_init(&cfg);
    cfg.initial_clip = 1.0;
    cfg.min_clip = 0.5;
    cfg.max_clip = 2.0;
    fl_dp_adaptive_clip st;
    assert_int_equal(fl_dp_adaptive_clip_init(&st, &cfg), FL_OK);
    /* All clients unclipped (b_hat = 1 > 0.5): C shrinks by exp(-0.2 * 0.5). */
    assert_int_equal(fl_dp_adaptive_clip_update_noised(&st, 100, 100), FL_OK);
    assert_true(fabs(st.clip - exp(-0.1)) < 1e-12);
    assert_true(st.last_fraction == 1.0);
    for (int i = 0; i < 100; i++)
        assert_int_equal(fl_dp_adaptive_clip_update_noised(&st, 100, 100), FL_OK);
    assert_true(st.clip == 0.5);
    for (int i = 0; i < 100; i++)
        assert_int_equal(fl_dp_adaptive_clip_update_noised(&st, -3, 100), FL_OK);
    assert_true(st.clip == 2.0);
    assert_int_equal(fl_dp_adaptive_clip_update_noised(&st, 1, 0), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_adaptive_clip_bit(1.0, 1.0), 1);
    assert_int_equal(fl_dp_adaptive_clip_bit(1.5, 1.0), 0);
    assert_int_equal(fl_dp_adaptive_clip_bit(NAN, 1.0), 0);
}

static void test_config_and_multiplier(void **state) {
    (void)state;
    fl_dp_adaptive_clip_config cfg;
    fl_dp_adaptive_clip st;
    fl_dp_adaptive_clip_config_init(&cfg);
    cfg.target_quantile = 1.0;
    assert_int_equal(fl_dp_adaptive_clip_init(&st, &cfg), FL_ERR_MISUSE);
    fl_dp_adaptive_clip_config_init(&cfg);
    cfg.initial_clip = NAN;
    assert_int_equal(fl_dp_adaptive_clip_init(&st, &cfg), FL_ERR_MISUSE);
    fl_dp_adaptive_clip_config_init(&cfg);
    cfg.bit_sigma2_den = 0;
    assert_int_equal(fl_dp_adaptive_clip_init(&st, &cfg), FL_ERR_MISUSE);
    fl_dp_adaptive_clip_config_init(&cfg);
    cfg.min_clip = 3;
    cfg.max_clip = 2;
    assert_int_equal(fl_dp_adaptive_clip_init(&st, &cfg), FL_ERR_MISUSE);
    fl_dp_adaptive_clip_config_init(&cfg);
    cfg.struct_size = 8;
    assert_int_equal(fl_dp_adaptive_clip_init(&st, &cfg), FL_ERR_MISUSE);
    fl_dp_adaptive_clip_config_init(&cfg);
    assert_int_equal(fl_dp_adaptive_clip_init(&st, &cfg), FL_OK);
    uint8_t seed[FL_DP_SEED_BYTES] = {3};
    fl_dp_rng *r = NULL;
    assert_int_equal(fl_dp_rng_create_chacha20(&r, seed, sizeof(seed), NULL), FL_OK);
    assert_int_equal(fl_dp_adaptive_clip_update(&st, r, 5, 4, NULL), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_adaptive_clip_update(&st, NULL, 1, 4, NULL), FL_ERR_MISUSE);
    fl_dp_rng_destroy(r);
    /* AMR21: z = 1, sigma_b = 10 -> z_delta = (1 - 1/400)^(-1/2). */
    double zd;
    assert_int_equal(fl_dp_adaptive_clip_update_multiplier(&zd, 1.0, 10.0), FL_OK);
    assert_true(fabs(zd - 1.0 / sqrt(1 - 1.0 / 400)) < 1e-12);
    assert_int_equal(fl_dp_adaptive_clip_update_multiplier(&zd, 1.0, 0.5), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_adaptive_clip_update_multiplier(&zd, 0.0, 5), FL_ERR_MISUSE);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_converges_median),
        cmocka_unit_test(test_converges_q90),
        cmocka_unit_test(test_noised_and_bounds),
        cmocka_unit_test(test_config_and_multiplier),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
