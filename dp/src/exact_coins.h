#ifndef FLOTILLA_DP_EXACT_COINS_H
#define FLOTILLA_DP_EXACT_COINS_H

/* Exact Bernoulli coins for the discrete samplers: Bernoulli(a/b) for rational a/b and
 * Bernoulli(exp(-n/d)) for rational n/d >= 0 (CKS20 Algorithm 1). Integer arithmetic only.
 *
 * Bernoulli(a/b) compares a uniform real U in [0, 1) with a/b, reading U w bits at a time:
 * with x the next w bits, U < a/b is certain when (x+1) b <= a 2^w and impossible when
 * x b >= a 2^w; otherwise (one value of x in 2^w) the comparison continues on the next
 * w bits against the remainder (a 2^w - x b) / b. So one coin costs about w bits and a
 * multiplication, and the answer is exact. Every loop also stops when the rng has failed
 * (the buffer then reads as zeros, the answers are meaningless and the caller reports
 * rng->failed). */

#include "rng_bits.h"

#define FL__DP_COIN_BITS 8 /* bits of U read per comparison step */

/* Bernoulli(a / b) for 0 <= a <= b, 1 <= b < 2^64, reading U FL__DP_COIN_BITS bits at a time
 * (a step is undecided with probability 2^-8, which costs another step). */
static inline unsigned fl__dp_coin64(struct fl_dp_rng *rng, uint64_t a, uint64_t b) {
    const unsigned w = FL__DP_COIN_BITS;
    for (;;) {
        uint64_t x = fl__dp_rng_take(rng, w);
        fl__dp_u128 p = (fl__dp_u128)x * b;
        fl__dp_u128 big_a = (fl__dp_u128)a << w;
        if (p + b <= big_a)
            return 1;
        if (p >= big_a)
            return 0;
        a = (uint64_t)(big_a - p);
        if (rng->failed)
            return 0;
    }
}

/* Bernoulli(a / b) for 0 <= a <= b, 1 <= b < 2^127. Same comparison on 192-bit products. */
static inline unsigned fl__dp_coin128(struct fl_dp_rng *rng, fl__dp_u128 a, fl__dp_u128 b) {
    if ((b >> 64) == 0)
        return fl__dp_coin64(rng, (uint64_t)a, (uint64_t)b);
    uint64_t bl = (uint64_t)b, bh = (uint64_t)(b >> 64);
    for (;;) {
        uint64_t x = fl__dp_rng_u64(rng);
        /* p = x * b = top * 2^64 + lo; the target is a * 2^64. */
        fl__dp_u128 pl = (fl__dp_u128)x * bl;
        fl__dp_u128 top = (fl__dp_u128)x * bh + (pl >> 64);
        uint64_t lo = (uint64_t)pl;
        if (top >= a)
            return 0;
        /* q = p + b */
        uint64_t qlo = lo + bl;
        fl__dp_u128 qtop = top + bh + (qlo < lo);
        if (qtop < a || (qtop == a && qlo == 0))
            return 1;
        /* a 2^64 - p < b < 2^127 */
        a = ((a - top) << 64) - lo;
        if (rng->failed)
            return 0;
    }
}

/* floor(exp(-1) 2^1024), most significant byte first. Generated with exact rational
 * arithmetic: sum_{k=0}^{399} (-1)^k / k! (the tail is below 1/400! < 2^-1100), times 2^1024,
 * floored; tests/dp/test_sampler.c re-derives the first 120 bits independently. */
static const uint64_t fl__dp_exp_m1_words[16] = {
    0x5e2d58d8b3bcdf1au, 0xbadec7829054f90du, 0xda9805aab56c7733u, 0x3024b9d0a507daedu,
    0xb16400bf472b4215u, 0xb8245b669d90d27au, 0x5aea5550968dc392u, 0x29f03c6276dcaa58u,
    0xc0ec2b3bdbaa9270u, 0xd925fdbd580cf14du, 0xc087c3f3fe444626u, 0xcd2ade4e58d11243u,
    0x67a81bea3764ed4fu, 0x7dd5c1b8d90c4ef7u, 0xd6dd9188d1c956a5u, 0xa3be55cd31b7802cu,
};

/* Bernoulli(exp(-1)) by CKS20 Algorithm 1 with gamma = 1: A_1 = Bernoulli(1) is always 1,
 * A_2 = Bernoulli(1/2) is one bit; K is the first k with A_k = 0; the answer is K odd. */
static inline unsigned fl__dp_bern_exp1_alg1(struct fl_dp_rng *rng) {
    if (!fl__dp_rng_bit(rng))
        return 0; /* K = 2 */
    uint64_t k = 3;
    while (fl__dp_coin64(rng, 1, k) && !rng->failed)
        k++;
    return (unsigned)(k & 1) & !rng->failed;
}

/* Bernoulli(exp(-1)): a uniform U against the binary expansion of exp(-1), a byte at a time
 * (decided after one byte with probability 255/256). Only if the first 1024 bits of U equal
 * those of exp(-1) (probability 2^-1024) does it fall back to Algorithm 1 with fresh bits,
 * which shifts the coin's bias by at most 2^-1024. */
static inline unsigned fl__dp_bern_exp1(struct fl_dp_rng *rng) {
    for (unsigned i = 0; i < 128; i++) {
        unsigned d = (unsigned)(fl__dp_exp_m1_words[i >> 3] >> (56 - 8 * (i & 7))) & 0xffu;
        unsigned x = (unsigned)fl__dp_rng_take(rng, 8);
        if (x != d)
            return (x < d) & !rng->failed; /* 0 once failed, so callers' loops end */
        if (rng->failed)
            return 0;
    }
    return fl__dp_bern_exp1_alg1(rng);
}

/* Bernoulli(exp(-1)) after the first byte of U tied with 0x5e: the remaining bytes. */
static inline unsigned fl__dp_bern_exp1_rest(struct fl_dp_rng *rng) {
    for (unsigned i = 1; i < 128; i++) {
        unsigned d = (unsigned)(fl__dp_exp_m1_words[i >> 3] >> (56 - 8 * (i & 7))) & 0xffu;
        unsigned x = (unsigned)fl__dp_rng_take(rng, 8);
        if (x != d)
            return (x < d) & !rng->failed;
        if (rng->failed)
            return 0;
    }
    return fl__dp_bern_exp1_alg1(rng);
}

/* Bernoulli(a / b) for 0 <= a <= b, 1 <= b < 2^56: fl__dp_coin64 in 64-bit arithmetic
 * ((x + 1) b <= 2^8 b < 2^64). */
static inline unsigned fl__dp_coin56(struct fl_dp_rng *rng, uint64_t a, uint64_t b) {
    const unsigned w = FL__DP_COIN_BITS;
    for (;;) {
        uint64_t x = fl__dp_rng_take(rng, w);
        uint64_t p = x * b, big_a = a << w;
        if (p + b <= big_a)
            return 1;
        if (p >= big_a)
            return 0;
        a = big_a - p;
        if (rng->failed)
            return 0;
    }
}

/* Bernoulli(a / b) for 0 <= a <= b, 1 <= b < 2^119: the same byte-wise comparison in 128-bit
 * arithmetic ((x + 1) b <= 2^8 b < 2^127). */
static inline unsigned fl__dp_coin119(struct fl_dp_rng *rng, fl__dp_u128 a, fl__dp_u128 b) {
    const unsigned w = FL__DP_COIN_BITS;
    for (;;) {
        fl__dp_u128 x = fl__dp_rng_take(rng, w);
        fl__dp_u128 p = x * b, big_a = a << w;
        if (p + b <= big_a)
            return 1;
        if (p >= big_a)
            return 0;
        a = big_a - p;
        if (rng->failed)
            return 0;
    }
}

/* Bernoulli(exp(-n/d)) for 0 <= n <= d, 1 <= d < 2^127 (CKS20 Algorithm 1, gamma in [0,1]):
 * A_k = Bernoulli(gamma / k) until the first 0 at K; the answer is K odd. */
static inline unsigned fl__dp_bern_exp_frac(struct fl_dp_rng *rng, fl__dp_u128 n, fl__dp_u128 d) {
    if (n == 0)
        return 1;
    uint64_t k = 1;
    if ((d >> 48) == 0) {
        /* d k < 2^56 while k < 256 (P(K >= 256) <= 1/255!): 64-bit coins. */
        uint64_t nn = (uint64_t)n, dd = (uint64_t)d, b = dd;
        while (k < 256 && fl__dp_coin56(rng, nn, b) && !rng->failed) {
            k++;
            b += dd;
        }
        if (k < 256 || rng->failed)
            return (unsigned)(k & 1) & !rng->failed;
    }
    if ((d >> 110) == 0) {
        /* d k < 2^119 while k < 256: byte-wise 128-bit coins. */
        fl__dp_u128 b = d * k;
        while (k < 256 && fl__dp_coin119(rng, n, b) && !rng->failed) {
            k++;
            b += d;
        }
        if (k < 256 || rng->failed)
            return (unsigned)(k & 1) & !rng->failed;
    }
    if ((d >> 64) == 0) {
        /* d k < 2^127. */
        while (fl__dp_coin128(rng, n, d * k) && !rng->failed)
            k++;
    } else {
        /* Bernoulli(gamma / k) = Bernoulli(gamma) AND Bernoulli(1/k), independent coins. */
        while (fl__dp_coin128(rng, n, d) && (k == 1 || fl__dp_coin64(rng, 1, k)) && !rng->failed)
            k++;
    }
    return (unsigned)(k & 1);
}

/* Bernoulli(exp(-n/d)) for n >= 0, 1 <= d < 2^127: exp(-gamma) = exp(-1)^floor(gamma) *
 * exp(-frac(gamma)), the first factor as independent Bernoulli(exp(-1)) coins (CKS20
 * Algorithm 1, gamma > 1). Stops at the first failing coin, so the expected work is bounded
 * whatever gamma is. */
static inline unsigned fl__dp_bern_exp(struct fl_dp_rng *rng, fl__dp_u128 n, fl__dp_u128 d) {
    while (n > d) {
        if (!fl__dp_bern_exp1(rng))
            return 0;
        n -= d;
    }
    return fl__dp_bern_exp_frac(rng, n, d);
}

#endif /* FLOTILLA_DP_EXACT_COINS_H */
