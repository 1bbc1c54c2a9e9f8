/* The exact coins behind the samplers (exact_coins.h, geometric_bits.h, sampler_exact.h) on
 * the paths ordinary sampling rarely or never takes:
 *   - denominators of 2^64 and more (128-bit coins), checked by frequency with fixed seeds
 *     (5 standard errors, two-sided 5.7e-7);
 *   - a uniform U that ties with a stored 1024-bit constant on every bit, which must fall
 *     back to the exact algorithm on fresh bits (chosen bits give a known answer);
 *   - a failed rng, on which every coin answers 0 and every loop ends;
 *   - fl__dp_cmp_exp against double arithmetic where U is far from v, including thresholds
 *     v >= 1 (always true) and exponents that are multiples of 32. */

#include <math.h>
#include <string.h>

#include "exact_coins.h"
#include "fl_test.h"
#include "flotilla/dp.h"
#include "geometric_bits.h"
#include "sampler_exact.h"

#define Z5 5.0

static fl_dp_rng *seeded(uint8_t tag) {
    uint8_t seed[FL_DP_SEED_BYTES];
    memset(seed, 0xc3, sizeof(seed));
    seed[0] = tag;
    fl_dp_rng *rng = NULL;
    assert_int_equal(fl_dp_rng_create_chacha20(&rng, seed, sizeof(seed), NULL), FL_OK);
    return rng;
}

/* A source that serves `words` first, then `fill` bytes, and fails after `good` refills
 * (good < 0: never). */
struct script {
    const uint64_t *words;
    size_t nwords;
    uint8_t fill;
    long good, fills;
};

static fl_status script_fill(void *user, uint8_t *buf, size_t n) {
    struct script *s = user;
    if (s->good >= 0 && s->fills >= s->good)
        return FL_ERR_IO;
    memset(buf, s->fill, n);
    if (s->fills == 0 && s->words)
        memcpy(buf, s->words, s->nwords * sizeof(uint64_t));
    s->fills++;
    return FL_OK;
}

static fl_dp_rng *scripted(struct script *s) {
    fl_dp_rng_source so = {sizeof(so), script_fill, s};
    fl_dp_rng *rng = NULL;
    assert_int_equal(fl_dp_rng_create(&rng, &so, NULL), FL_OK);
    return rng;
}

/* |hits/N - p| within 5 standard errors. */
static void assert_freq(long hits, long n, double p) {
    double f = (double)hits / (double)n, se = sqrt(p * (1 - p) / (double)n);
    if (fabs(f - p) > Z5 * se)
        print_message("frequency %.6f, expected %.6f (se %.2g)\n", f, p, se);
    assert_true(fabs(f - p) <= Z5 * se);
}

/* ---- 128-bit denominators ---- */

static void test_wide_denominators(void **state) {
    (void)state;
    fl_dp_rng *rng = seeded(1);
    const long N = 200000;
    /* Bernoulli(a / b) with b >= 2^64: a / b = 1/3 (up to 2^-100). */
    fl__dp_u128 b = ((fl__dp_u128)3 << 100) + 3, a = ((fl__dp_u128)1 << 100) + 1;
    long hits = 0;
    for (long i = 0; i < N; i++)
        hits += fl__dp_coin128(rng, a, b);
    assert_freq(hits, N, 1.0 / 3.0);
    /* Bernoulli(exp(-n/d)) on the three paths: d < 2^48 (64-bit coins), 2^48 <= d < 2^110
     * (byte-wise 128-bit coins), d >= 2^110 (Bernoulli(gamma) AND Bernoulli(1/k)). */
    struct {
        fl__dp_u128 n, d;
        double gamma;
    } cs[] = {
        {(fl__dp_u128)1 << 39, (fl__dp_u128)1 << 40, 0.5},
        {((fl__dp_u128)1 << 99) + 6172, ((fl__dp_u128)1 << 100) + 12345, 0.5},
        {((fl__dp_u128)1 << 114), ((fl__dp_u128)3 << 114), 1.0 / 3.0},
        {((fl__dp_u128)7 << 112), ((fl__dp_u128)1 << 115), 7.0 / 8.0},
        /* gamma > 1 on a wide denominator: an exp(-1) coin, then the fraction. */
        {((fl__dp_u128)3 << 112), ((fl__dp_u128)1 << 113), 1.5},
    };
    for (size_t k = 0; k < sizeof cs / sizeof cs[0]; k++) {
        hits = 0;
        for (long i = 0; i < N; i++)
            hits += fl__dp_bern_exp(rng, cs[k].n, cs[k].d);
        assert_freq(hits, N, exp(-cs[k].gamma));
    }
    assert_int_equal(fl__dp_bern_exp_frac(rng, 0, (fl__dp_u128)1 << 120), 1); /* exp(0) */
    fl_dp_rng_destroy(rng);
}

/* ---- ties on all 1024 bits of a stored constant ---- */

/* Stream words whose bytes, in the order the reservoir hands them out (low byte first), are
 * bytes[first .. first + count) followed by `after`. */
static void byte_words(uint64_t *w, size_t nw, const uint8_t *bytes, size_t count,
                       const uint8_t *after, size_t nafter) {
    memset(w, 0, nw * sizeof(uint64_t));
    for (size_t i = 0; i < count + nafter; i++) {
        uint8_t b = i < count ? bytes[i] : after[i - count];
        w[i / 8] |= (uint64_t)b << (8 * (i % 8));
    }
}

static void test_exp_m1_full_tie(void **state) {
    (void)state;
    uint8_t e[128];
    for (int i = 0; i < 128; i++)
        e[i] = (uint8_t)(fl__dp_exp_m1_words[i >> 3] >> (56 - 8 * (i & 7)));
    assert_int_equal(e[0], 0x5e);
    uint64_t w[24];
    struct script s;
    for (int answer = 0; answer < 2; answer++) {
        /* U = exp(-1) to 1024 bits, then Algorithm 1 on fresh bits: a first bit 0 gives K = 2
         * (answer 0); bits 1 then a Bernoulli(1/3) failure (byte 0xff) give K = 3 (answer 1). */
        uint8_t after[9];
        memset(after, answer ? 0xff : 0x00, sizeof after);
        byte_words(w, 24, e, 128, after, sizeof after);
        memset(&s, 0, sizeof s);
        s.words = w;
        s.nwords = 24;
        s.fill = answer ? 0xff : 0x00;
        s.good = -1;
        fl_dp_rng *rng = scripted(&s);
        assert_int_equal(fl__dp_bern_exp1(rng), (unsigned)answer);
        fl_dp_rng_destroy(rng);
        /* The same after a first-byte tie (the vectorised V draw): bytes 1..127 tie. */
        byte_words(w, 24, e + 1, 127, after, sizeof after);
        memset(&s, 0, sizeof s);
        s.words = w;
        s.nwords = 24;
        s.fill = answer ? 0xff : 0x00;
        s.good = -1;
        rng = scripted(&s);
        assert_int_equal(fl__dp_bern_exp1_rest(rng), (unsigned)answer);
        fl_dp_rng_destroy(rng);
    }
}

static void test_geometric_bit_full_tie(void **state) {
    (void)state;
    uint64_t w[24];
    struct script s;
    for (unsigned j = 1; j <= 8; j++) {
        const uint8_t *row = fl__dp_geo_p[j - 1];
        for (int answer = 0; answer < 2; answer++) {
            /* Ties on bytes 1..127, then the fallback's Bernoulli(exp(-2^-j)) coins, each a
             * sequence of Bernoulli(2^-j / k) coins: answer 1 = one success then a failure
             * (first coin byte 0xff: fails at k = 1, so K = 1 is odd, a success; then 0x00 and
             * 0xff: K = 2, a failure); answer 0 = an immediate failure (0x00, 0xff). */
            const uint8_t one[3] = {0xff, 0x00, 0xff}, zero[2] = {0x00, 0xff};
            byte_words(w, 24, row + 1, 127, answer ? one : zero, answer ? 3 : 2);
            memset(&s, 0, sizeof s);
            s.words = w;
            s.nwords = 24;
            s.good = -1;
            fl_dp_rng *rng = scripted(&s);
            assert_int_equal(fl__dp_geo_bit_rest(rng, j), (unsigned)answer);
            fl_dp_rng_destroy(rng);
        }
    }
}

/* ---- a failed rng ---- */

static void test_failed_rng_coins(void **state) {
    (void)state;
    struct script s;
    memset(&s, 0, sizeof s);
    s.good = 0;
    fl_dp_rng *rng = scripted(&s);
    uint8_t b[8];
    assert_int_equal(fl_dp_rng_bytes(rng, b, sizeof b), FL_ERR_IO);
    /* The buffer now reads as zeros; coins that zero bits do not settle must answer 0. */
    assert_int_equal(fl__dp_coin64(rng, 1, 1000), 0);
    assert_int_equal(fl__dp_coin56(rng, 1, 1000), 0);
    assert_int_equal(fl__dp_coin119(rng, 1, (fl__dp_u128)1 << 100), 0);
    assert_int_equal(fl__dp_coin128(rng, 1, (fl__dp_u128)1 << 100), 0);
    assert_int_equal(fl__dp_bern_exp1(rng), 0);
    assert_int_equal(fl__dp_bern_exp1_rest(rng), 0);
    assert_int_equal(fl__dp_bern_exp_frac(rng, 1, 3), 0);
    assert_int_equal(fl__dp_bern_exp_frac(rng, 1, (fl__dp_u128)1 << 60), 0);
    assert_int_equal(fl__dp_bern_exp(rng, 5, 1), 0);
    assert_int_equal(fl__dp_geo_bit_rest(rng, 3), 0);
    assert_int_equal(fl__dp_geo_bit_fallback(rng, 2), 0);
    assert_int_equal(fl__dp_cmp_exp(rng, 0, 0, 1, 0, 1, 1, 2), 0);
    uint64_t u;
    assert_int_equal(fl_dp_rng_uniform(rng, &u, 3), FL_ERR_IO);
    assert_int_equal(fl_dp_rng_uniform(rng, &u, ((uint64_t)1 << 40) + 1), FL_ERR_IO);
    assert_int_equal(s.fills, 0);
    fl_dp_rng_destroy(rng);
}

/* Zero bits make every coin of Algorithm 1 succeed, so K never stops by itself: the loops end
 * when the source fails, on every width of denominator. */
static void test_zero_bits_then_failure(void **state) {
    (void)state;
    const fl__dp_u128 ds[] = {2, (fl__dp_u128)1 << 60, (fl__dp_u128)1 << 112};
    for (size_t k = 0; k < sizeof ds / sizeof ds[0]; k++) {
        struct script s;
        memset(&s, 0, sizeof s);
        s.good = 2;
        fl_dp_rng *rng = scripted(&s);
        (void)fl__dp_bern_exp_frac(rng, ds[k] / 2, ds[k]); /* the answer is meaningless */
        assert_int_equal(s.fills, 2);
        uint8_t b[8];
        assert_int_equal(fl_dp_rng_bytes(rng, b, sizeof b), FL_ERR_IO);
        fl_dp_rng_destroy(rng);
    }
}

/* ---- the exact comparison against doubles ---- */

static void test_cmp_exp_against_double(void **state) {
    (void)state;
    struct {
        uint64_t a;
        int e;
        uint64_t b;
        double scale; /* a 2^e / b */
    } cs[] = {
        {(uint64_t)1 << 32, -32, 1, 1.0}, /* shift by a whole word */
        {3, -64, 4, 0.75 * 0x1p-62},      /* two whole words: v tiny, almost always 0 */
        {1, 3, 8, 1.0},                   /* positive exponent, no clamp */
        {5, 1, 4, 2.5},                   /* v > 1: clamped, always 1 */
        {1, 40, 1, 0x1p40},
    };
    const double gammas[] = {0.0, 0.1, 0.75, 2.0};
    for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
        for (size_t g = 0; g < 4; g++) {
            uint8_t tag = (uint8_t)(16 + c * 4 + g);
            fl_dp_rng *r = seeded(tag), *twin = seeded(tag);
            fl__dp_u128 n = (fl__dp_u128)(gammas[g] * 1024), d = 1024; /* exact n / d */
            double v = cs[c].scale * exp(-(double)n / 1024.0);
            int decided = 0;
            for (int i = 0; i < 500; i++) {
                uint64_t w;
                assert_int_equal(fl_dp_rng_bytes(twin, (uint8_t *)&w, 8), FL_OK);
                double u = (double)w * 0x1p-64;
                int got = fl__dp_cmp_exp(r, 0, 0, cs[c].a, cs[c].e, cs[c].b, n, d);
                if (fabs(u - v) > 1e-9) {
                    assert_int_equal(got, u < v);
                    decided++;
                }
                /* Keep the twin in step: cmp_exp read 128 bits of U unless it went deeper,
                 * which with |U - v| > 1e-9 it never does; resynchronise otherwise. */
                uint64_t skip;
                assert_int_equal(fl_dp_rng_bytes(twin, (uint8_t *)&skip, 8), FL_OK);
            }
            assert_true(decided > 450);
            fl_dp_rng_destroy(r);
            fl_dp_rng_destroy(twin);
        }
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wide_denominators),
        cmocka_unit_test(test_exp_m1_full_tie),
        cmocka_unit_test(test_geometric_bit_full_tie),
        cmocka_unit_test(test_failed_rng_coins),
        cmocka_unit_test(test_zero_bits_then_failure),
        cmocka_unit_test(test_cmp_exp_against_double),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
