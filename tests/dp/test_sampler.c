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
#include "sampler_exact.h"
#include "sampler_table.h"

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

/* ---- table-driven sampler (sampler_table.c) and its exact comparisons (sampler_exact.c) ---- */

/* An rng that serves fixed 64-bit words, then zeros (or ones with tail_ones). */
struct words_src {
    const uint64_t *w;
    size_t n, pos;
    int tail_ones;
};

static fl_status words_fill(void *user, uint8_t *buf, size_t len) {
    struct words_src *s = user;
    for (size_t i = 0; i + 8 <= len; i += 8) {
        uint64_t v = s->pos < s->n ? s->w[s->pos] : s->tail_ones ? ~(uint64_t)0 : 0;
        s->pos++;
        memcpy(buf + i, &v, 8);
    }
    return FL_OK;
}

/* fl__dp_cmp_exp on a U whose bits are the given words (then zeros or ones). */
static int cmp_words(const uint64_t *w, size_t n, int tail_ones, uint64_t prefix, unsigned kbits,
                     uint64_t a, int e, uint64_t b, fl__dp_u128 num, fl__dp_u128 den) {
    struct words_src s = {w, n, 0, tail_ones};
    fl_dp_rng_source src = {sizeof(src), words_fill, &s};
    fl_dp_rng *rng = NULL;
    assert_int_equal(fl_dp_rng_create(&rng, &src, NULL), FL_OK);
    int r = fl__dp_cmp_exp(rng, prefix, kbits, a, e, b, num, den);
    assert_int_equal(rng->failed, FL_OK);
    fl_dp_rng_destroy(rng);
    return r;
}

/* Exact dyadic and rational thresholds, decided at the first bit where U differs, however
 * deep; an infinite tie ends in -1 after FL__DP_CMP_MAX_BITS bits. */
static void test_cmp_exact_values(void **state) {
    (void)state;
    uint64_t w = 0xbfffffffffffffffu;
    assert_int_equal(cmp_words(&w, 1, 1, 0, 0, 3, -2, 1, 0, 1), 1); /* U < 3/4 */
    w = 0xc000000000000000u;
    assert_int_equal(cmp_words(&w, 1, 0, 0, 0, 3, -2, 1, 0, 1), 0);
    assert_int_equal(cmp_words(NULL, 0, 0, 0xbfffffffu, 32, 3, -2, 1, 0, 1), 1);
    assert_int_equal(cmp_words(NULL, 0, 0, 0xc0000000u, 32, 3, -2, 1, 0, 1), 0);
    assert_int_equal(cmp_words(NULL, 0, 1, 0xffffffffu, 32, 1, 0, 1, 0, 1), 1); /* v = 1 */
    /* 5/7 = 0.(101) in binary: U equal to it for 3000 bits, then below / above. */
    uint64_t per[64];
    for (unsigned i = 0; i < 64; i++) {
        uint64_t x = 0;
        for (unsigned k = 0; k < 64; k++) {
            unsigned bit = 64 * i + k; /* bit index after the binary point, from 0 */
            x = x << 1 | (bit % 3 != 1);
        }
        per[i] = x;
    }
    assert_int_equal(cmp_words(per, 47, 0, 0, 0, 5, 0, 7, 0, 1), 1);
    assert_int_equal(cmp_words(per, 47, 1, 0, 0, 5, 0, 7, 0, 1), 0);
    assert_int_equal(cmp_words(per, 64, 0, 0, 0, 5, 0, 7, 0, 1), -1);
    /* With a 32-bit prefix the rng continues the same U: the top half of the first word
     * drawn, then whole words. */
    uint64_t shifted[47];
    shifted[0] = per[0] << 32;
    for (unsigned i = 1; i < 47; i++)
        shifted[i] = per[i];
    assert_int_equal(cmp_words(shifted, 47, 0, per[0] >> 32, 32, 5, 0, 7, 0, 1), 1);
    assert_int_equal(cmp_words(shifted, 47, 1, per[0] >> 32, 32, 5, 0, 7, 0, 1), 0);
}

/* exp(-1) against the independently computed 1024-bit table in exact_coins.h: U equal to its
 * floor is below exp(-1), one unit in the last place above is above (needs 2048-bit work). */
static void test_cmp_exp_m1_deep(void **state) {
    (void)state;
    uint64_t w[16];
    memcpy(w, fl__dp_exp_m1_words, sizeof(w));
    assert_int_equal(cmp_words(w, 16, 0, 0, 0, 1, 0, 1, 1, 1), 1);
    w[15] += 1;
    assert_int_equal(cmp_words(w, 16, 0, 0, 0, 1, 0, 1, 1, 1), 0);
    /* Same through a 64-bit prefix and as exp(-n/d) with a large d: 2^100 / 2^100. */
    assert_int_equal(
        cmp_words(w + 1, 15, 0, w[0], 64, 1, 0, 1, (fl__dp_u128)1 << 100, (fl__dp_u128)1 << 100),
        0);
    w[15] -= 1;
    assert_int_equal(
        cmp_words(w + 1, 15, 0, w[0], 64, 1, 0, 1, (fl__dp_u128)1 << 100, (fl__dp_u128)1 << 100),
        1);
    /* 2 exp(-1) (e = 1) against 2 * table: the same bits moved up by one. */
    uint64_t w2[16];
    for (unsigned i = 0; i < 16; i++)
        w2[i] = w[i] << 1 | (i < 15 ? w[i + 1] >> 63 : 0);
    assert_int_equal(cmp_words(w2, 16, 0, 0, 0, 1, 1, 1, 1, 1), 1);
    w2[15] += 2;
    assert_int_equal(cmp_words(w2, 16, 0, 0, 0, 1, 1, 1, 1, 1), 0);
}

/* U given as 256 bits agreeing with v to 100 or 190 bits: the decision must match v computed
 * with 200-digit decimal arithmetic (Python's decimal module: v = a 2^e / b exp(-n/d),
 * U's bits = v's first bits, then random, the next bit flipped in every other case). */
static void test_cmp_decimal_vectors(void **state) {
    (void)state;
    static const struct {
        uint64_t a;
        int e;
        uint64_t b, n, d;
        uint64_t u[4];
        int want;
    } vs[] = {
        {9007199254740991ull,
         -53,
         3ull,
         777777ull,
         1000001ull,
         {0x2734536cdfd606bcu, 0xf929936b1ec99108u, 0xdb5b5fab8f4d3e27u, 0xdda1494c73cf256du},
         0},
        {9007199254740991ull,
         -53,
         3ull,
         777777ull,
         1000001ull,
         {0x2734536cdfd606bcu, 0xf929936b15ae4455u, 0x8201e2bd73ab4876u, 0x7734d7c1c7fde805u},
         0},
        {9007199254740991ull,
         -53,
         3ull,
         777777ull,
         1000001ull,
         {0x2734536cdfd606bcu, 0xf929936b12554882u, 0xe49b5e12fa1320c8u, 0x309d6b79965eda32u},
         1},
        {9007199254740991ull,
         -53,
         3ull,
         777777ull,
         1000001ull,
         {0x2734536cdfd606bcu, 0xf929936b12554882u, 0xe49b5e12fa1320cbu, 0x830c71c2cdcc6929u},
         0},
        {1ull,
         0,
         1ull,
         3ull,
         10ull,
         {0xbda6434e1be02746u, 0xf969b58b91818799u, 0x2fa91425cb008853u, 0x9d2c67eda13ffe79u},
         1},
        {1ull,
         0,
         1ull,
         3ull,
         10ull,
         {0xbda6434e1be02746u, 0xf969b58b909e7d15u, 0x17362f25244caf9cu, 0x4dabb4817253edc6u},
         1},
        {1ull,
         0,
         1ull,
         3ull,
         10ull,
         {0xbda6434e1be02746u, 0xf969b58b97e40dd8u, 0x39b395a7711f8fd2u, 0xe3eff9c0cf44dd3fu},
         0},
        {1ull,
         0,
         1ull,
         3ull,
         10ull,
         {0xbda6434e1be02746u, 0xf969b58b97e40dd8u, 0x39b395a7711f8fd0u, 0x0ab8ab67a26b7f62u},
         1},
        {5ull,
         0,
         7ull,
         5ull,
         2ull,
         {0x0f02841bd81c1a2eu, 0x67ea6ec3ea767779u, 0x73f778aaf6fa5db8u, 0x656abd72fb710734u},
         0},
        {5ull,
         0,
         7ull,
         5ull,
         2ull,
         {0x0f02841bd81c1a2eu, 0x67ea6ec3e1f8558au, 0x28518867a66b0d38u, 0x9d95847ebd299753u},
         1},
        {5ull,
         0,
         7ull,
         5ull,
         2ull,
         {0x0f02841bd81c1a2eu, 0x67ea6ec3e2b8a76du, 0xbc48c90ef31eeddeu, 0xd4ea65d003d71684u},
         0},
        {5ull,
         0,
         7ull,
         5ull,
         2ull,
         {0x0f02841bd81c1a2eu, 0x67ea6ec3e2b8a76du, 0xbc48c90ef31eeddeu, 0x0f3ebdd3102b938bu},
         1},
        {123456789ull,
         -20,
         999ull,
         1000000000007ull,
         100000000003ull,
         {0x000059c4c5afa5ffu, 0x92dc4224307b37e1u, 0x998092253deffa38u, 0xe12b2b8f30b17d0bu},
         1},
        {123456789ull,
         -20,
         999ull,
         1000000000007ull,
         100000000003ull,
         {0x000059c4c5afa5ffu, 0x92dc4224317491e2u, 0x70c6a5b85387f613u, 0x76c468aec7321cc0u},
         1},
        {123456789ull,
         -20,
         999ull,
         1000000000007ull,
         100000000003ull,
         {0x000059c4c5afa5ffu, 0x92dc4224374901d4u, 0xfc6bbef7697631eeu, 0x320094ead7a94dedu},
         0},
        {123456789ull,
         -20,
         999ull,
         1000000000007ull,
         100000000003ull,
         {0x000059c4c5afa5ffu, 0x92dc4224374901d4u, 0xfc6bbef7697631efu, 0xa3ea284d3bd03346u},
         0},
        {1ull,
         40,
         1ull,
         3242591731706757120ull,
         108086391056891904ull,
         {0x1a56e0c2ac7f74d5u, 0x0fd4e3d407513923u, 0x15c1d2dfa9964aefu, 0x012d0ea67ff12229u},
         0},
        {1ull,
         40,
         1ull,
         3242591731706757120ull,
         108086391056891904ull,
         {0x1a56e0c2ac7f74d5u, 0x0fd4e3d400d1fe1du, 0xff6665896822a6b2u, 0x4735af1ca7a11490u},
         1},
        {1ull,
         40,
         1ull,
         3242591731706757120ull,
         108086391056891904ull,
         {0x1a56e0c2ac7f74d5u, 0x0fd4e3d400f81e6bu, 0x7e3875e1b3df521bu, 0xee82ec3ffee5a5b2u},
         0},
        {1ull,
         40,
         1ull,
         3242591731706757120ull,
         108086391056891904ull,
         {0x1a56e0c2ac7f74d5u, 0x0fd4e3d400f81e6bu, 0x7e3875e1b3df521bu, 0xb53302fc154cd2aau},
         0},
        {9223372036854775813ull,
         -70,
         1099511627777ull,
         9223372036854775819ull,
         4611686018427387905ull,
         {0x000000000000454au, 0xaa8efdc1e49fe85bu, 0x834c687a3acb6266u, 0xc20ba2c250b601fcu},
         0},
        {9223372036854775813ull,
         -70,
         1099511627777ull,
         9223372036854775819ull,
         4611686018427387905ull,
         {0x000000000000454au, 0xaa8efdc1e9ba1192u, 0xc42b7170902a174fu, 0x11fa2ac0079dd25au},
         0},
        {9223372036854775813ull,
         -70,
         1099511627777ull,
         9223372036854775819ull,
         4611686018427387905ull,
         {0x000000000000454au, 0xaa8efdc1e3cdd548u, 0x971b197a54b48c53u, 0x1b98fbe466809a11u},
         0},
        {9223372036854775813ull,
         -70,
         1099511627777ull,
         9223372036854775819ull,
         4611686018427387905ull,
         {0x000000000000454au, 0xaa8efdc1e3cdd548u, 0x971b197a54b48c52u, 0x62f28d1a4a789cb3u},
         0},
    };
    for (size_t k = 0; k < sizeof(vs) / sizeof(vs[0]); k++)
        assert_int_equal(
            cmp_words(vs[k].u, 4, 0, 0, 0, vs[k].a, vs[k].e, vs[k].b, vs[k].n, vs[k].d),
            vs[k].want);
}

/* Continuing a comparison: given U's first 32 bits equal to those of exp(-1), U < exp(-1)
 * has probability frac(2^32 exp(-1)) = 0.7021...; a prefix one below or above decides. */
static void test_cmp_continues_prefix(void **state) {
    (void)state;
    fl_dp_rng *rng = seeded(40);
    const uint64_t top = fl__dp_exp_m1_words[0] >> 32;
    const double p = (double)(fl__dp_exp_m1_words[0] & 0xffffffffu) / 0x1p32;
    const long n = 20000;
    long hits = 0;
    for (long i = 0; i < n; i++)
        hits += fl__dp_cmp_exp(rng, top, 32, 1, 0, 1, 1, 1);
    assert_true(fabs((double)hits / n - p) < 5 * sqrt(p * (1 - p) / n));
    for (int i = 0; i < 100; i++) {
        assert_int_equal(fl__dp_cmp_exp(rng, top - 1, 32, 1, 0, 1, 1, 1), 1);
        assert_int_equal(fl__dp_cmp_exp(rng, top + 1, 32, 1, 0, 1, 1, 1), 0);
    }
    fl_dp_rng_destroy(rng);
}

/* Frequencies of U < (a 2^e / b) exp(-n/d) from scratch (no prefix), 5 standard errors. */
static void test_cmp_frequencies(void **state) {
    (void)state;
    fl_dp_rng *rng = seeded(41);
    const fl__dp_u128 big = (fl__dp_u128)3 << 70;
    const struct {
        uint64_t a;
        int e;
        uint64_t b;
        fl__dp_u128 n, d;
        double v;
        long trials;
    } cs[] = {
        {1, 0, 1, 3, 10, exp(-0.3), 10000},
        {5, 0, 7, 5, 2, 5.0 / 7 * exp(-2.5), 10000},
        {1, 40, 1, 30 * big, big, ldexp(exp(-30.0), 40), 10000},
        {3, -1, 1, 1, 4, 1.0, 1000},     /* 1.5 exp(-1/4) > 1: always */
        {1, 1400, 1, 1000, 1, 0.0, 100}, /* 2^1400 exp(-1000) ~ 2^-43 */
        {((uint64_t)1 << 53) - 1, -53, 3, 777777, 1000001, 0, 10000}, /* ~0.153 */
    };
    for (size_t k = 0; k < sizeof(cs) / sizeof(cs[0]); k++) {
        double v = cs[k].v;
        if (k == 5)
            v = ldexp((double)cs[k].a, cs[k].e) / (double)cs[k].b *
                exp(-(double)cs[k].n / (double)cs[k].d);
        long hits = 0;
        for (long i = 0; i < cs[k].trials; i++) {
            int r = fl__dp_cmp_exp(rng, 0, 0, cs[k].a, cs[k].e, cs[k].b, cs[k].n, cs[k].d);
            assert_true(r == 0 || r == 1);
            hits += r;
        }
        double f = (double)hits / (double)cs[k].trials;
        print_message("cmp case %zu: %.5f vs %.5f\n", k, f, v);
        assert_true(fabs(f - v) <= 5 * sqrt(v * (1 - v) / (double)cs[k].trials) + 1e-12);
    }
    fl_dp_rng_destroy(rng);
}

/* The rigorous double bounds bracket libm's exp (itself within an ulp) and are tight. */
static void test_exp_bounds(void **state) {
    (void)state;
    const fl__dp_u128 big = ((fl__dp_u128)1 << 90) + 12345;
    const fl__dp_u128 ns[] = {0, 1, 1, 5, 200, 7000, 1, 7 * big + 99, 1000};
    const fl__dp_u128 ds[] = {1, 3, 1, 2, 1, 10, (fl__dp_u128)1 << 100, big, 3};
    for (size_t k = 0; k < sizeof(ns) / sizeof(ns[0]); k++) {
        double lo, hi, x = (double)ns[k] / (double)ds[k], e = exp(-x);
        fl__dp_exp_neg_bounds(ns[k], ds[k], &lo, &hi);
        assert_true(lo <= e * (1 + 0x1p-45) && hi >= e * (1 - 0x1p-45));
        assert_true(hi - lo <= e * 0x1p-30);
    }
    double lo, hi;
    fl__dp_exp_neg_bounds(701, 1, &lo, &hi);
    assert_true(lo == 0 && hi == 0x1p-1000);
}

/* Table invariants: the integer weights sum to 2^B, the alias columns give each bin exactly
 * its weight, the tail block satisfies 2^k R >= sigma^2, and the fast bounds are ordered. */
static void test_table_invariants(void **state) {
    (void)state;
    const uint64_t M = FL_DP_SIGMA2_MAX;
    const uint64_t nd[][2] = {{1, 4},          {1, 1},         {100, 1}, {10000, 1},
                              {1000000, 1},    {100000000, 1}, {M, 1},   {1, M},
                              {M - 1, M >> 3}, {M, M - 1},     {3, 7},   {17, 1}};
    struct fl__dp_sampler_table *t = malloc(sizeof(*t));
    assert_non_null(t);
    for (size_t k = 0; k < sizeof(nd) / sizeof(nd[0]); k++) {
        assert_int_equal(fl__dp_table_build(t, nd[k][0], nd[k][1]), FL_OK);
        const unsigned B = t->kbits + 32;
        const uint32_t K = 1u << t->kbits;
        assert_true(t->nbody + 1 <= K && t->wbits <= 14);
        uint64_t sum = 0, cnt[FL__DP_TABLE_COLS] = {0};
        for (uint32_t i = 0; i <= t->nbody; i++) {
            assert_true(t->q[i] >= 1);
            sum += t->q[i];
        }
        assert_true(sum == (uint64_t)1 << B);
        for (uint32_t c = 0; c < K; c++) {
            uint64_t thr = t->col[c] & ((((uint64_t)1) << 33) - 1), al = t->col[c] >> 33;
            assert_true(thr <= (uint64_t)1 << 32 && al < K);
            cnt[c] += thr;
            cnt[al] += ((uint64_t)1 << 32) - thr;
        }
        for (uint32_t c = 0; c < K; c++)
            assert_true(cnt[c] == (c <= t->nbody ? t->q[c] : 0));
        assert_true(((fl__dp_u128)t->den * t->r << t->tbits) >= t->num);
        for (uint32_t i = 0; i < t->nbody; i++) {
            /* p_0 excludes the 1/2 of m = 0, which is all of bin 0 when W = 1. */
            assert_true(t->p[i] > 0 && t->p[i] <= (i == 0 && t->wbits == 0 ? 2.0 : 1.0));
            if (t->wbits == 0)
                assert_true(t->lo[i] < t->hi[i] && t->hi[i] <= ((uint64_t)1 << 32) + 8);
        }
    }
    free(t);
}

/* The tail path: a body of only 1 or 2 sigma sends many proposals to the tail; the output
 * must still fit the exact PMF. */
static void check_table_shape(uint64_t num, uint64_t den, double body_sigmas, size_t n,
                              uint8_t tag) {
    struct fl__dp_sampler_table *t = malloc(sizeof(*t));
    assert_non_null(t);
    assert_int_equal(fl__dp_table_build_shape(t, num, den, body_sigmas), FL_OK);
    fl_dp_rng *rng = seeded(tag);
    int64_t *xs = malloc(n * sizeof(int64_t));
    assert_non_null(xs);
    size_t bad = 0;
    assert_int_equal(fl__dp_table_sample(rng, t, xs, n, 0, &bad), FL_OK);
    double s2 = (double)num / (double)den, df;
    double chi = fit(xs, n, lp_gauss, s2, sqrt(s2), &df);
    print_message("table sigma^2=%llu/%llu body %.1f sigma (R=%llu) n=%zu chi2=%.1f df=%.0f\n",
                  (unsigned long long)num, (unsigned long long)den, body_sigmas,
                  (unsigned long long)t->r, n, chi, df);
    assert_true(chi < chi2_quantile_1e6(df));
    free(xs);
    free(t);
    fl_dp_rng_destroy(rng);
}

static void test_table_tail(void **state) {
    (void)state;
    check_table_shape(100, 1, 1.0, 20000, 42);        /* R = sigma: a third of the mass */
    check_table_shape(1, 4, 0.5, 20000, 43);          /* body = {0} only */
    check_table_shape(100000000, 1, 2.0, 200000, 44); /* W = 32, tail beyond 2 sigma */
}

/* Short batches take the per-sample CKS20 path; it must fit the PMF too. */
static void test_short_batches(void **state) {
    (void)state;
    const size_t n = 400000, chunk = FL__DP_TABLE_MIN_N - 1;
    fl_dp_rng *rng = seeded(45);
    int64_t *xs = malloc(n * sizeof(int64_t));
    assert_non_null(xs);
    for (size_t i = 0; i < n; i += chunk)
        assert_int_equal(
            fl_dp_discrete_gaussian(rng, xs + i, n - i < chunk ? n - i : chunk, 100, 1), FL_OK);
    assert_null(rng->table); /* never built */
    double df;
    double chi = fit(xs, n, lp_gauss, 100, 10, &df);
    assert_true(chi < chi2_quantile_1e6(df));
    free(xs);
    fl_dp_rng_destroy(rng);
}

/* Batch path: extreme variances, the cache switching sigma, and _add overflow reporting. */
static void test_table_args(void **state) {
    (void)state;
    fl_dp_rng *rng = seeded(46);
    const size_t n = 4096;
    int64_t *x = calloc(n, sizeof(int64_t));
    assert_non_null(x);
    assert_int_equal(fl_dp_discrete_gaussian(rng, x, n, FL_DP_SIGMA2_MAX, 1), FL_OK);
    assert_int_equal(fl_dp_discrete_gaussian(rng, x, n, 1, FL_DP_SIGMA2_MAX), FL_OK);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(x[i], 0); /* P(x != 0) ~ 2 exp(-2^39) */
    assert_int_equal(fl_dp_discrete_gaussian(rng, x, n, FL_DP_SIGMA2_MAX, FL_DP_SIGMA2_MAX - 1),
                     FL_OK);
    assert_true(rng->table->num == FL_DP_SIGMA2_MAX && rng->table->den == FL_DP_SIGMA2_MAX - 1);
    fl_status st = FL_OK;
    for (int k = 0; k < 60 && st == FL_OK; k++) {
        memset(x, 0, n * sizeof(int64_t));
        x[2000] = INT64_MAX;
        st = fl_dp_discrete_gaussian_add(rng, x, n, 100, 1);
    }
    assert_int_equal(st, FL_ERR_RANGE);
    assert_non_null(strstr(fl_dp_rng_errmsg(rng), "element 2000"));
    assert_true(x[2000] == INT64_MAX);
    free(x);
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
        cmocka_unit_test(test_cmp_exact_values),
        cmocka_unit_test(test_cmp_exp_m1_deep),
        cmocka_unit_test(test_cmp_decimal_vectors),
        cmocka_unit_test(test_cmp_continues_prefix),
        cmocka_unit_test(test_cmp_frequencies),
        cmocka_unit_test(test_exp_bounds),
        cmocka_unit_test(test_table_invariants),
        cmocka_unit_test(test_table_tail),
        cmocka_unit_test(test_short_batches),
        cmocka_unit_test(test_table_args),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
