/* Exact discrete Gaussian sampler: Canonne, Kamath, Steinke, "The Discrete Gaussian for
 * Differential Privacy" (NeurIPS 2020), Algorithm 3, on the exact coins of exact_coins.h.
 *
 * Proposal: a discrete Laplace Y with P(y) ~ exp(-|y|/t). Algorithm 3 is exact for any
 * integer t; we take t = 2^s, the power of two within a factor sqrt(2) of sigma, instead of
 * the paper's floor(sigma) + 1. The acceptance rate r sqrt(pi/2) exp(-r^2/2), r = sigma/t,
 * drops from 0.76 to at worst 0.65, but the low part of the proposal then has independent
 * bits (geometric_bits.h) and is drawn with a few byte comparisons instead of Algorithm 2's
 * rejection loop (U uniform in [0, t) kept with probability exp(-U/t), 1.6 tries). The rest
 * is Algorithm 2: V = number of Bernoulli(exp(-1)) successes before the first failure,
 * X = U + t V, a sign, and (sign -, X = 0) rejected so that 0 is not counted twice.
 * Acceptance: Bernoulli of exp(-(|Y| - sigma^2/t)^2 / (2 sigma^2)); with sigma^2 = num/den
 * the exponent is the rational (|Y| t den - num)^2 / (2 t^2 num den), evaluated exactly in
 * 128-bit integers. */

#include <math.h>

#include "discrete_noise.h"
#include "exact_coins.h"
#include "geometric_bits.h"
#include "sampler_table.h"

static uint64_t gcd_u64(uint64_t a, uint64_t b) {
    while (b) {
        uint64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

fl_status fl__dp_dgauss_prepare(struct fl__dp_dgauss *g, uint64_t num, uint64_t den) {
    if (num == 0 || den == 0 || num > FL_DP_SIGMA2_MAX || den > FL_DP_SIGMA2_MAX)
        return FL_ERR_MISUSE;
    uint64_t c = gcd_u64(num, den);
    num /= c;
    den /= c;
    g->num = num;
    g->den = den;
    /* Smallest s with 4^s >= sigma^2 / 2, i.e. sigma/sqrt(2) <= t = 2^s < sigma sqrt(2)
     * (t = 1 when sigma < sqrt(2)); s <= 21 since sigma <= 2^20. */
    unsigned sh = 0;
    while (((fl__dp_u128)2 * den << (2 * sh)) < num)
        sh++;
    g->s = sh;
    g->t = (uint64_t)1 << sh;
    fl__dp_geo_thresholds(g->geo_th, sh);
    g->tden = (fl__dp_u128)g->t * den; /* t^2 den <= 2 num or t = 1: both <= 2^41 */
    /* 2 t^2 num den <= 4 num^2 <= 2^82, or 2 num den <= 2^81 when t = 1. */
    g->d = 2 * (fl__dp_u128)g->t * g->t * num * den;
    /* |Y| t den must stay below 2^63 so that its square fits in 128 bits. */
    g->xmax = (uint64_t)((((fl__dp_u128)1) << 63) / g->tden);
    return FL_OK;
}

/* One discrete Laplace magnitude-and-sign draw with scale t = 2^s (CKS20 Algorithm 2).
 * Returns 0 on success, -1 if X would exceed xmax (probability below exp(-2^21)), or 1 when
 * the rng failed. */
static int laplace_t(struct fl_dp_rng *rng, unsigned s, const uint8_t *th, uint64_t xmax,
                     uint64_t *x_out, unsigned *neg_out) {
    const uint64_t t = (uint64_t)1 << s;
    for (;;) {
        if (rng->failed)
            return 1;
        uint64_t u = fl__dp_geo_low(rng, s, th);
        /* V: four Bernoulli(exp(-1)) coins at once from one 32-bit draw (byte i < 0x5e is a
         * success, == 0x5e a tie on the first byte of exp(-1)); V is the number of leading
         * successes. Ties before the first failure, or four successes, continue coin by coin
         * on fresh bits, which is the same sequence of independent coins. */
        uint64_t v = 0;
        {
            uint32_t r = (uint32_t)fl__dp_rng_take(rng, 32);
            unsigned succ = 0, tie = 0;
            for (unsigned i = 0; i < 4; i++) {
                unsigned b = (r >> (8 * i)) & 0xffu;
                succ |= (unsigned)(b < 0x5e) << i;
                tie |= (unsigned)(b == 0x5e) << i;
            }
            unsigned f = (unsigned)__builtin_ctz(~succ); /* first failing lane, 4 if none */
            if (__builtin_expect((tie & ((2u << f) - 1)) != 0 || f == 4, 0)) {
                /* Resolve lane by lane: a tied lane finishes its comparison on fresh bytes. */
                for (f = 0; f < 4; f++) {
                    unsigned c = (tie >> f) & 1 ? fl__dp_bern_exp1_rest(rng) : (succ >> f) & 1;
                    if (!c)
                        break;
                }
                v = f;
                if (f == 4)
                    while (fl__dp_bern_exp1(rng))
                        v++;
            } else {
                v = f;
            }
        }
        if (rng->failed)
            return 1;
        /* v t + u <= xmax; xmax / t >= 2^21, so the division only runs for huge v. */
        if (v >= (uint64_t)1 << 20 && v > (xmax - u) / t)
            return -1;
        uint64_t x = u + t * v;
        unsigned neg = fl__dp_rng_bit(rng);
        if (neg && x == 0)
            continue;
        *x_out = x;
        *neg_out = neg;
        return 0;
    }
}

fl_status fl__dp_dgauss_one(struct fl_dp_rng *rng, const struct fl__dp_dgauss *g, int64_t *out) {
    for (;;) {
        uint64_t x;
        unsigned neg;
        int r = laplace_t(rng, g->s, g->geo_th, g->xmax, &x, &neg);
        if (r > 0)
            return rng->failed;
        if (r < 0)
            return FL_ERR_RANGE;
        fl__dp_u128 a = (fl__dp_u128)x * g->tden; /* < 2^63 */
        /* |a - num| without a branch (its sign is a coin flip for the predictor). */
        fl__dp_u128 diff = a - g->num, neg_mask = (fl__dp_u128)0 - (diff >> 127);
        diff = (diff ^ neg_mask) - neg_mask;
        if (fl__dp_bern_exp(rng, diff * diff, g->d)) {
            if (rng->failed)
                return rng->failed;
            *out = neg ? -(int64_t)x : (int64_t)x;
            return FL_OK;
        }
    }
}

fl_status fl_dp_discrete_gaussian(fl_dp_rng *rng, int64_t *out, size_t n, uint64_t sigma2_num,
                                  uint64_t sigma2_den) {
    if (!rng)
        return FL_ERR_MISUSE;
    if (!out && n > 0)
        return fl__err_set(&rng->err, FL_ERR_MISUSE, "fl_dp_discrete_gaussian: out is NULL");
    struct fl__dp_dgauss g;
    if (fl__dp_dgauss_prepare(&g, sigma2_num, sigma2_den) != FL_OK)
        return fl__err_set(
            &rng->err, FL_ERR_MISUSE,
            "fl_dp_discrete_gaussian: sigma^2 = %llu/%llu outside [1, 2^40]/[1, 2^40]",
            (unsigned long long)sigma2_num, (unsigned long long)sigma2_den);
    if (rng->failed)
        return rng->failed;
    const struct fl__dp_sampler_table *t =
        n >= FL__DP_TABLE_MIN_N ? fl__dp_table_get(rng, g.num, g.den) : NULL;
    if (t) {
        size_t bad;
        fl_status st = fl__dp_table_sample(rng, t, out, n, 0, &bad);
        if (st == FL_ERR_RANGE)
            return fl__err_set(&rng->err, st, "fl_dp_discrete_gaussian: proposal overflow");
        return st;
    }
    for (size_t i = 0; i < n; i++) {
        fl_status st = fl__dp_dgauss_one(rng, &g, &out[i]);
        if (st == FL_ERR_RANGE)
            return fl__err_set(&rng->err, st, "fl_dp_discrete_gaussian: proposal overflow");
        if (st != FL_OK)
            return st;
    }
    return FL_OK;
}

fl_status fl_dp_discrete_gaussian_add(fl_dp_rng *rng, int64_t *vec, size_t n, uint64_t sigma2_num,
                                      uint64_t sigma2_den) {
    if (!rng)
        return FL_ERR_MISUSE;
    if (!vec && n > 0)
        return fl__err_set(&rng->err, FL_ERR_MISUSE, "fl_dp_discrete_gaussian_add: vec is NULL");
    struct fl__dp_dgauss g;
    if (fl__dp_dgauss_prepare(&g, sigma2_num, sigma2_den) != FL_OK)
        return fl__err_set(&rng->err, FL_ERR_MISUSE,
                           "fl_dp_discrete_gaussian_add: sigma^2 = %llu/%llu out of range",
                           (unsigned long long)sigma2_num, (unsigned long long)sigma2_den);
    if (rng->failed)
        return rng->failed;
    const struct fl__dp_sampler_table *t =
        n >= FL__DP_TABLE_MIN_N ? fl__dp_table_get(rng, g.num, g.den) : NULL;
    if (t) {
        size_t bad;
        fl_status st = fl__dp_table_sample(rng, t, vec, n, 1, &bad);
        if (st == FL_ERR_RANGE && bad < n)
            return fl__err_set(&rng->err, st,
                               "fl_dp_discrete_gaussian_add: element %zu overflows int64", bad);
        if (st == FL_ERR_RANGE)
            return fl__err_set(&rng->err, st, "fl_dp_discrete_gaussian_add: proposal overflow");
        return st;
    }
    for (size_t i = 0; i < n; i++) {
        int64_t z;
        fl_status st = fl__dp_dgauss_one(rng, &g, &z);
        if (st == FL_ERR_RANGE)
            return fl__err_set(&rng->err, st, "fl_dp_discrete_gaussian_add: proposal overflow");
        if (st != FL_OK)
            return st;
        if ((z > 0 && vec[i] > INT64_MAX - z) || (z < 0 && vec[i] < INT64_MIN - z))
            return fl__err_set(&rng->err, FL_ERR_RANGE,
                               "fl_dp_discrete_gaussian_add: element %zu overflows int64", i);
        vec[i] += z;
    }
    return FL_OK;
}

fl_status fl_dp_variance_to_rational(uint64_t *sigma2_num, uint64_t *sigma2_den, double x,
                                     uint64_t den) {
    if (!sigma2_num || !sigma2_den || den == 0 || den > ((uint64_t)1 << 20) || !isfinite(x) ||
        !(x > 0) || x * (double)den > (double)FL_DP_SIGMA2_MAX)
        return FL_ERR_MISUSE;
    double prod = x * (double)den;
    uint64_t num = (uint64_t)ceil(prod);
    if (num == 0)
        num = 1;
    /* fma gives the sign of x*den - num exactly: round up if the rounding of prod hid a
     * remainder. */
    while (fma(x, (double)den, -(double)num) > 0)
        num++;
    if (num > FL_DP_SIGMA2_MAX)
        return FL_ERR_MISUSE;
    uint64_t c = gcd_u64(num, den);
    *sigma2_num = num / c;
    *sigma2_den = den / c;
    return FL_OK;
}
