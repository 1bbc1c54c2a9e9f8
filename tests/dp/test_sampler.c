/* Exact samplers: goodness of fit of the discrete Gaussian and discrete Laplace against their
 * exact PMFs, mean and variance, and the internal Bernoulli coins.
 *
 * Every statistical check uses a fixed ChaCha20 seed, so the test is deterministic; the
 * thresholds are set so that a correct sampler would fail a check with probability about
 * 1e-6 on a fresh seed (chi-square upper 1e-6 quantile; mean and variance at 5 standard
 * errors, two-sided 5.7e-7). */

#include <math.h>
#include <string.h>

#include "discrete_noise.h"
#include "exact_coins.h"
#include "fl_test.h"
#include "flotilla/dp.h"
#include "geometric_bits.h"

#define Z_1E6 4.753424 /* upper 1e-6 quantile of N(0, 1) */

static fl_dp_rng *seeded(uint8_t tag) {
    uint8_t seed[FL_DP_SEED_BYTES];
    memset(seed, 0x5a, sizeof(seed));
    seed[0] = tag;
    fl_dp_rng *rng = NULL;
    assert_int_equal(fl_dp_rng_create_chacha20(&rng, seed, sizeof(seed), NULL), FL_OK);
    return rng;
}

/* Upper 1e-6 quantile of chi-square with k degrees of freedom (Wilson-Hilferty; within 1%
 * for k >= 5, which is far below the slack of a fixed-seed test). */
static double chi2_quantile_1e6(double k) {
    double h = 2.0 / (9.0 * k);
    double c = 1.0 - h + Z_1E6 * sqrt(h);
    return k * c * c * c;
}

/* Unnormalised log-PMF of the distribution under test at integer x. */
typedef double (*logpmf_fn)(double x, double param);

static double lp_gauss(double x, double s2) {
    return -x * x / (2.0 * s2);
}
static double lp_laplace(double x, double b) {
    return -fabs(x) / b;
}

#define MAXB 256

/* Bins [-R, R] into at most ~60 bins of equal integer width plus two tail bins, computes
 * exact bin probabilities from the PMF (summed over |x| <= 60 scale + 50), and returns the
 * chi-square statistic of the samples; *df_out gets bins - 1. Also checks mean and variance
 * at 5 standard errors. */
static double fit(const int64_t *xs, size_t n, logpmf_fn lp, double param, double scale,
                  double *df_out) {
    long lim = (long)ceil(60.0 * scale) + 50;
    double z = 0, m2 = 0, m4 = 0;
    for (long x = -lim; x <= lim; x++) {
        double p = exp(lp((double)x, param));
        z += p;
        m2 += p * (double)x * (double)x;
        m4 += p * (double)x * (double)x * (double)x * (double)x;
    }
    m2 /= z;
    m4 /= z;
    /* Core range [-r, r] in bins of width `width`; outside it, two tail bins. */
    long r = (long)ceil(3.5 * scale);
    long width = r / 30 + 1;
    long nb_core = (2 * r + 1 + width - 1) / width;
    size_t nb = (size_t)nb_core + 2;
    assert_true(nb <= MAXB);
    double expect[MAXB] = {0};
    double count[MAXB] = {0};
    for (long x = -lim; x <= lim; x++) {
        double p = exp(lp((double)x, param)) / z;
        size_t b = x < -r ? 0 : x > r ? nb - 1 : 1 + (size_t)((x + r) / width);
        expect[b] += p * (double)n;
    }
    double sum = 0, sumsq = 0;
    for (size_t i = 0; i < n; i++) {
        long x = (long)xs[i];
        size_t b = x < -r ? 0 : x > r ? nb - 1 : 1 + (size_t)((x + r) / width);
        count[b] += 1;
        sum += (double)x;
        sumsq += (double)x * (double)x;
    }
    /* Merge tail bins with expected count < 5 into their inner neighbours. */
    size_t lo = 0, hi = nb - 1;
    while (lo < hi && expect[lo] < 5) {
        expect[lo + 1] += expect[lo];
        count[lo + 1] += count[lo];
        lo++;
    }
    while (hi > lo && expect[hi] < 5) {
        expect[hi - 1] += expect[hi];
        count[hi - 1] += count[hi];
        hi--;
    }
    double chi = 0;
    size_t used = 0;
    for (size_t b = lo; b <= hi; b++) {
        assert_true(expect[b] >= 5);
        chi += (count[b] - expect[b]) * (count[b] - expect[b]) / expect[b];
        used++;
    }
    *df_out = (double)used - 1;
    double mean = sum / (double)n;
    double var = sumsq / (double)n - mean * mean;
    assert_true(fabs(mean) < 5.0 * sqrt(m2 / (double)n));
    assert_true(fabs(var - m2) < 5.0 * sqrt((m4 - m2 * m2) / (double)n) + 1e-12);
    return chi;
}

static void check_gauss(uint64_t num, uint64_t den, size_t n, uint8_t tag) {
    fl_dp_rng *rng = seeded(tag);
    int64_t *xs = malloc(n * sizeof(int64_t));
    assert_non_null(xs);
    assert_int_equal(fl_dp_discrete_gaussian(rng, xs, n, num, den), FL_OK);
    double s2 = (double)num / (double)den, df;
    double chi = fit(xs, n, lp_gauss, s2, sqrt(s2), &df);
    print_message("dgauss sigma^2=%llu/%llu n=%zu chi2=%.1f df=%.0f limit=%.1f\n",
                  (unsigned long long)num, (unsigned long long)den, n, chi, df,
                  chi2_quantile_1e6(df));
    assert_true(df >= 2);
    assert_true(chi < chi2_quantile_1e6(df));
    free(xs);
    fl_dp_rng_destroy(rng);
}

static void test_gauss_sigma_half(void **state) {
    (void)state;
    check_gauss(1, 4, 1000000, 1);
}
static void test_gauss_sigma_1(void **state) {
    (void)state;
    check_gauss(1, 1, 1000000, 2);
}
static void test_gauss_sigma_10(void **state) {
    (void)state;
    check_gauss(100, 1, 1000000, 3);
}
static void test_gauss_sigma_1000(void **state) {
    (void)state;
    check_gauss(1000000, 1, 1000000, 4);
}
/* A non-integer variance with a large reduced denominator: 2 t^2 num den >= 2^64 exercises
 * the 128-bit coins. sigma^2 = (2^40 - 1) / 2^37 ~ 8. */
static void test_gauss_big_rational(void **state) {
    (void)state;
    check_gauss(((uint64_t)1 << 40) - 1, (uint64_t)1 << 37, 1000000, 5);
}
/* Tiny variance: almost all mass at 0. */
static void test_gauss_tiny(void **state) {
    (void)state;
    fl_dp_rng *rng = seeded(6);
    int64_t xs[1000];
    assert_int_equal(fl_dp_discrete_gaussian(rng, xs, 1000, 1, 1000), FL_OK);
    for (int i = 0; i < 1000; i++)
        assert_int_equal(xs[i], 0); /* P(x != 0) ~ 2 exp(-500) */
    fl_dp_rng_destroy(rng);
}

static void check_laplace(uint64_t num, uint64_t den, size_t n, uint8_t tag) {
    fl_dp_rng *rng = seeded(tag);
    int64_t *xs = malloc(n * sizeof(int64_t));
    assert_non_null(xs);
    assert_int_equal(fl_dp_discrete_laplace(rng, xs, n, num, den), FL_OK);
    double b = (double)num / (double)den, df;
    double chi = fit(xs, n, lp_laplace, b, b + 1, &df);
    print_message("dlaplace b=%llu/%llu n=%zu chi2=%.1f df=%.0f limit=%.1f\n",
                  (unsigned long long)num, (unsigned long long)den, n, chi, df,
                  chi2_quantile_1e6(df));
    assert_true(chi < chi2_quantile_1e6(df));
    free(xs);
    fl_dp_rng_destroy(rng);
}

static void test_laplace(void **state) {
    (void)state;
    check_laplace(1, 2, 200000, 10);
    check_laplace(7, 3, 200000, 11);
    check_laplace(100, 1, 200000, 12);
}

/* Bernoulli(exp(-n/d)) frequencies, 5 standard errors. */
static void check_bexp(fl_dp_rng *rng, fl__dp_u128 n, fl__dp_u128 d, double gamma) {
    const long trials = 400000;
    long hits = 0;
    for (long i = 0; i < trials; i++)
        hits += fl__dp_bern_exp(rng, n, d);
    double p = exp(-gamma), f = (double)hits / (double)trials;
    assert_true(fabs(f - p) < 5.0 * sqrt(p * (1 - p) / (double)trials) + 1e-9);
}

static void test_bernoulli_exp(void **state) {
    (void)state;
    fl_dp_rng *rng = seeded(20);
    check_bexp(rng, 0, 1, 0.0);
    check_bexp(rng, 1, 3, 1.0 / 3);
    check_bexp(rng, 1, 1, 1.0);
    check_bexp(rng, 5, 2, 2.5);
    check_bexp(rng, 7, 1, 7.0);
    /* 128-bit denominators: gamma = 0.5 and 1.75 with d = 3 * 2^70. */
    fl__dp_u128 d = (fl__dp_u128)3 << 70;
    check_bexp(rng, d / 2, d, 0.5);
    check_bexp(rng, d + d / 2 + d / 4, d, 1.75);
    /* Bernoulli(a/b) coins: exact ties at b = 2^k and b close to 2^64. */
    long hits = 0;
    for (int i = 0; i < 400000; i++)
        hits += fl__dp_coin64(rng, UINT64_MAX / 3, UINT64_MAX);
    assert_true(fabs(hits / 400000.0 - 1.0 / 3) < 5 * sqrt(2.0 / 9 / 400000));
    for (int i = 0; i < 1000; i++) {
        assert_int_equal(fl__dp_coin64(rng, 5, 5), 1);
        assert_int_equal(fl__dp_coin64(rng, 0, 5), 0);
        assert_int_equal(fl__dp_coin128(rng, d, d), 1);
        assert_int_equal(fl__dp_coin128(rng, 0, d), 0);
    }
    fl_dp_rng_destroy(rng);
}

/* The exp(-1) expansion: its first 120 bits against the series sum_k (-1)^k floor(2^120/k!),
 * which is within 41 of exp(-1) 2^120 (41 floors, tail below 1). */
static void test_exp_m1_table(void **state) {
    (void)state;
    fl__dp_u128 t = (fl__dp_u128)1 << 120, s = 0;
    int neg = 0;
    for (unsigned k = 0; k <= 40; k++) {
        if (k > 0)
            t /= k;
        s = neg ? s - t : s + t;
        neg = !neg;
    }
    fl__dp_u128 tab = ((fl__dp_u128)fl__dp_exp_m1_words[0] << 56) | (fl__dp_exp_m1_words[1] >> 8);
    fl__dp_u128 diff = tab > s ? tab - s : s - tab;
    assert_true(diff <= 41);
    /* And the coin's frequency. */
    fl_dp_rng *rng = seeded(21);
    long hits = 0;
    for (long i = 0; i < 400000; i++)
        hits += fl__dp_bern_exp1(rng);
    double p = exp(-1.0);
    assert_true(fabs(hits / 400000.0 - p) < 5 * sqrt(p * (1 - p) / 400000));
    long h2 = 0;
    for (long i = 0; i < 400000; i++)
        h2 += fl__dp_bern_exp1_alg1(rng);
    assert_true(fabs(h2 / 400000.0 - p) < 5 * sqrt(p * (1 - p) / 400000));
    fl_dp_rng_destroy(rng);
}

/* Proposal low part for t = 2^s: table bytes agree with libm, and U follows exp(-u/2^s)
 * (chi-square at the 1e-6 level); the exact fallback coin has the right frequency. */
static void test_geometric_bits(void **state) {
    (void)state;
    for (unsigned j = 1; j <= FL__DP_GEO_MAX_S; j++) {
        double p = 1.0 / (1.0 + exp(ldexp(1.0, -(int)j)));
        double top = (fl__dp_geo_p[j - 1][0] * 256.0 + fl__dp_geo_p[j - 1][1]) / 65536.0;
        assert_true(p >= top && p < top + 1.0 / 65536);
    }
    fl_dp_rng *rng = seeded(22);
    uint8_t th[32];
    const unsigned ss[3] = {3, 9, 17};
    for (int c = 0; c < 3; c++) {
        unsigned s = ss[c];
        fl__dp_geo_thresholds(th, s);
        /* Bin u by its top 3 bits: P(bin b) ~ sum over the bin of exp(-u/2^s). */
        const long n = 400000;
        double cnt[8] = {0}, ex[8] = {0}, z = 0;
        for (uint64_t u = 0; u < ((uint64_t)1 << s); u++) {
            double w = exp(-ldexp((double)u, -(int)s));
            ex[u >> (s - 3)] += w;
            z += w;
        }
        for (long i = 0; i < n; i++) {
            uint64_t u = fl__dp_geo_low(rng, s, th);
            assert_true(u < ((uint64_t)1 << s));
            cnt[u >> (s - 3)] += 1;
        }
        double chi = 0;
        for (int b = 0; b < 8; b++) {
            double e = ex[b] / z * (double)n;
            chi += (cnt[b] - e) * (cnt[b] - e) / e;
        }
        assert_true(chi < chi2_quantile_1e6(7));
    }
    assert_int_equal(fl__dp_geo_low(rng, 0, th), 0);
    for (unsigned j = 1; j <= 2; j++) {
        double p = 1.0 / (1.0 + exp(ldexp(1.0, -(int)j)));
        long hits = 0;
        for (long i = 0; i < 100000; i++)
            hits += fl__dp_geo_bit_fallback(rng, j);
        assert_true(fabs(hits / 100000.0 - p) < 5 * sqrt(p * (1 - p) / 100000));
    }
    fl_dp_rng_destroy(rng);
}

static void test_args(void **state) {
    (void)state;
    fl_dp_rng *rng = seeded(30);
    int64_t x[4] = {0};
    assert_int_equal(fl_dp_discrete_gaussian(NULL, x, 4, 1, 1), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_discrete_gaussian(rng, NULL, 4, 1, 1), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_discrete_gaussian(rng, x, 4, 0, 1), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_discrete_gaussian(rng, x, 4, 1, 0), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_discrete_gaussian(rng, x, 4, FL_DP_SIGMA2_MAX + 1, 1), FL_ERR_MISUSE);
    assert_true(strlen(fl_dp_rng_errmsg(rng)) > 0);
    assert_int_equal(fl_dp_discrete_gaussian(rng, NULL, 0, 1, 1), FL_OK);
    assert_int_equal(fl_dp_discrete_laplace(rng, x, 4, 0, 1), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_discrete_laplace(rng, x, 4, 1, (uint64_t)1 << 41), FL_ERR_MISUSE);
    /* Extreme but valid variances run. */
    assert_int_equal(fl_dp_discrete_gaussian(rng, x, 4, FL_DP_SIGMA2_MAX, 1), FL_OK);
    assert_int_equal(fl_dp_discrete_gaussian(rng, x, 4, 1, FL_DP_SIGMA2_MAX), FL_OK);
    assert_int_equal(fl_dp_discrete_gaussian(rng, x, 4, FL_DP_SIGMA2_MAX, FL_DP_SIGMA2_MAX - 1),
                     FL_OK);
    /* _add: overflow is reported, not wrapped. */
    int64_t big[2] = {INT64_MAX, INT64_MIN};
    fl_status st = FL_OK;
    for (int i = 0; i < 50 && st == FL_OK; i++) {
        big[0] = INT64_MAX;
        big[1] = INT64_MIN;
        st = fl_dp_discrete_gaussian_add(rng, big, 2, 100, 1);
    }
    assert_int_equal(st, FL_ERR_RANGE);
    int64_t v[3] = {10, 20, 30};
    assert_int_equal(fl_dp_discrete_gaussian_add(rng, v, 3, 1, 1000), FL_OK);
    assert_int_equal(v[0], 10);
    assert_int_equal(v[2], 30);
    fl_dp_rng_destroy(rng);
}

static void test_variance_to_rational(void **state) {
    (void)state;
    uint64_t n, d;
    assert_int_equal(fl_dp_variance_to_rational(&n, &d, 0.25, 1024), FL_OK);
    assert_true(n == 1 && d == 4);
    assert_int_equal(fl_dp_variance_to_rational(&n, &d, 0.1, 1u << 20), FL_OK);
    assert_true((double)n / (double)d >= 0.1);
    assert_true((double)n / (double)d < 0.1 + 2.0 / (1u << 20));
    assert_int_equal(fl_dp_variance_to_rational(&n, &d, 3.0, 1), FL_OK);
    assert_true(n == 3 && d == 1);
    assert_int_equal(fl_dp_variance_to_rational(&n, &d, NAN, 8), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_variance_to_rational(&n, &d, -1, 8), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_variance_to_rational(&n, &d, 1, 0), FL_ERR_MISUSE);
    assert_int_equal(fl_dp_variance_to_rational(&n, &d, 1e13, 1), FL_ERR_MISUSE);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gauss_sigma_half),
        cmocka_unit_test(test_gauss_sigma_1),
        cmocka_unit_test(test_gauss_sigma_10),
        cmocka_unit_test(test_gauss_sigma_1000),
        cmocka_unit_test(test_gauss_big_rational),
        cmocka_unit_test(test_gauss_tiny),
        cmocka_unit_test(test_laplace),
        cmocka_unit_test(test_bernoulli_exp),
        cmocka_unit_test(test_args),
        cmocka_unit_test(test_variance_to_rational),
        cmocka_unit_test(test_exp_m1_table),
        cmocka_unit_test(test_geometric_bits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
