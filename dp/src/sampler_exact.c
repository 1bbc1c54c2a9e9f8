/* Exact comparison of a uniform U with (a 2^e / b) exp(-n/d), and rigorous double bounds
 * of exp(-n/d): the slow, exact half of the table-driven discrete Gaussian sampler (see
 * sampler_exact.h for the contract and sampler_table.c for its use).
 *
 * Numbers here are non-negative fixed-point values x / 2^F held in little-endian arrays of
 * 32-bit limbs: F / 32 fraction limbs and HEAD integer limbs. Every operation rounds in a
 * stated direction (floor or ceil), so each computed pair (lo, hi) is a guaranteed interval
 * around the true value; the comparison doubles F until U's first F bits fall on one side of
 * the interval. Speed does not matter: the fast path reaches this with probability about
 * 2^-30 per sample. */

#include <string.h>

#include "sampler_exact.h"

#define HEAD 4 /* integer limbs above the fraction: room for a 64-bit factor */
#define NLMAX (FL__DP_CMP_MAX_BITS / 32 + HEAD)

/* ---- multi-word fixed point (n limbs, fl fraction limbs) ---- */

static int mw_cmp(const uint32_t *x, const uint32_t *y, unsigned n) {
    for (unsigned k = n; k-- > 0;)
        if (x[k] != y[k])
            return x[k] < y[k] ? -1 : 1;
    return 0;
}

/* r = x + y (the callers' values stay far below 2^(32 n)). */
static void mw_add(uint32_t *r, const uint32_t *x, const uint32_t *y, unsigned n) {
    uint64_t c = 0;
    for (unsigned k = 0; k < n; k++) {
        c += (uint64_t)x[k] + y[k];
        r[k] = (uint32_t)c;
        c >>= 32;
    }
}

/* r = x - y for x >= y. */
static void mw_sub(uint32_t *r, const uint32_t *x, const uint32_t *y, unsigned n) {
    uint64_t borrow = 0;
    for (unsigned k = 0; k < n; k++) {
        uint64_t d = (uint64_t)x[k] - y[k] - borrow;
        r[k] = (uint32_t)d;
        borrow = (d >> 32) & 1;
    }
}

static void mw_inc(uint32_t *r, unsigned n) {
    for (unsigned k = 0; k < n && ++r[k] == 0; k++)
        ;
}

static void mw_one(uint32_t *r, unsigned n, unsigned fl) {
    memset(r, 0, n * sizeof(uint32_t));
    r[fl] = 1;
}

static unsigned mw_bitlen(const uint32_t *x, unsigned n) {
    for (unsigned k = n; k-- > 0;)
        if (x[k])
            return 32 * k + 32 - (unsigned)__builtin_clz(x[k]);
    return 0;
}

/* r = floor (up = 0) or ceil (up = 1) of x y / 2^(32 fl); r may alias x or y. The product's
 * limbs above n + fl are zero for every value used here (all are below 2^128 times 2^F). */
static void mw_mulf(uint32_t *r, const uint32_t *x, const uint32_t *y, unsigned n, unsigned fl,
                    int up) {
    uint32_t t[2 * NLMAX];
    memset(t, 0, 2 * n * sizeof(uint32_t));
    for (unsigned i = 0; i < n; i++) {
        if (!x[i])
            continue;
        uint64_t c = 0;
        for (unsigned j = 0; j < n; j++) {
            c += (uint64_t)x[i] * y[j] + t[i + j];
            t[i + j] = (uint32_t)c;
            c >>= 32;
        }
        t[i + n] = (uint32_t)c;
    }
    int rest = 0;
    for (unsigned k = 0; k < fl; k++)
        rest |= t[k] != 0;
    memcpy(r, t + fl, n * sizeof(uint32_t));
    if (up && rest)
        mw_inc(r, n);
}

/* r = floor or ceil of x / j, 1 <= j < 2^32. */
static void mw_divs(uint32_t *r, const uint32_t *x, uint32_t j, unsigned n, int up) {
    uint64_t rem = 0;
    for (unsigned k = n; k-- > 0;) {
        uint64_t cur = rem << 32 | x[k];
        r[k] = (uint32_t)(cur / j);
        rem = cur % j;
    }
    if (up && rem)
        mw_inc(r, n);
}

/* r = x a exactly (x a < 2^(32 n)). */
static void mw_mul64(uint32_t *r, const uint32_t *x, uint64_t a, unsigned n) {
    fl__dp_u128 c = 0;
    for (unsigned k = 0; k < n; k++) {
        c += (fl__dp_u128)x[k] * a;
        r[k] = (uint32_t)c;
        c >>= 32;
    }
}

/* r = floor or ceil of x / b, b >= 1. */
static void mw_div64(uint32_t *r, const uint32_t *x, uint64_t b, unsigned n, int up) {
    fl__dp_u128 rem = 0;
    for (unsigned k = n; k-- > 0;) {
        fl__dp_u128 cur = rem << 32 | x[k];
        r[k] = (uint32_t)(cur / b);
        rem = cur % b;
    }
    if (up && rem)
        mw_inc(r, n);
}

/* r = x 2^s (callers check that it fits). */
static void mw_shl(uint32_t *r, const uint32_t *x, unsigned s, unsigned n) {
    unsigned w = s / 32, bsh = s % 32;
    for (unsigned k = n; k-- > 0;) {
        uint32_t hi = k >= w ? x[k - w] : 0, lo = k >= w + 1 ? x[k - w - 1] : 0;
        r[k] = bsh ? (hi << bsh) | (lo >> (32 - bsh)) : hi;
    }
}

/* r = floor or ceil of x / 2^s. */
static void mw_shr(uint32_t *r, const uint32_t *x, unsigned s, unsigned n, int up) {
    unsigned w = s / 32, bsh = s % 32;
    int rest = 0;
    for (unsigned k = 0; k < n && k < w; k++)
        rest |= x[k] != 0;
    if (bsh && w < n)
        rest |= (x[w] & ((1u << bsh) - 1)) != 0;
    for (unsigned k = 0; k < n; k++) {
        uint32_t lo = k + w < n ? x[k + w] : 0, hi = k + w + 1 < n ? x[k + w + 1] : 0;
        r[k] = bsh ? (lo >> bsh) | (hi << (32 - bsh)) : lo;
    }
    if (up && rest)
        mw_inc(r, n);
}

/* ---- exp(-x) on intervals ---- */

/* Upper (up = 1) or lower bound of exp(-x) for fixed-point 0 <= x <= 1. Taylor series with
 * each term T_j = x^j / j! enclosed in [tlo, thi] (floor and ceil at every step); the series
 * alternates with decreasing terms, so stopping before the first term with thi <= 1 ulp
 * leaves a remainder of at most 1 ulp. */
static void exp_series(uint32_t *out, const uint32_t *x, unsigned n, unsigned fl, int up) {
    uint32_t pos[NLMAX], neg[NLMAX], tlo[NLMAX], thi[NLMAX];
    mw_one(pos, n, fl);
    memset(neg, 0, n * sizeof(uint32_t));
    mw_one(tlo, n, fl);
    mw_one(thi, n, fl);
    for (uint32_t j = 1;; j++) {
        mw_mulf(tlo, tlo, x, n, fl, 0);
        mw_divs(tlo, tlo, j, n, 0);
        mw_mulf(thi, thi, x, n, fl, 1);
        mw_divs(thi, thi, j, n, 1);
        if (mw_bitlen(thi, n) <= 1)
            break;
        if (j & 1)
            mw_add(neg, neg, up ? tlo : thi, n); /* subtract as little / as much as possible */
        else
            mw_add(pos, pos, up ? thi : tlo, n);
    }
    if (up) {
        mw_inc(pos, n); /* + remainder bound */
        mw_sub(out, pos, neg, n);
    } else {
        mw_inc(neg, n); /* - remainder bound */
        if (mw_cmp(pos, neg, n) >= 0)
            mw_sub(out, pos, neg, n);
        else
            memset(out, 0, n * sizeof(uint32_t));
    }
}

/* [lo, hi] around v = (a 2^e / b) exp(-n/d) at F = 32 fl fraction bits, clamped to [0, 1]. */
static void bound_v(uint32_t *lo, uint32_t *hi, unsigned n, unsigned fl, uint64_t a, int e,
                    uint64_t b, fl__dp_u128 num, fl__dp_u128 den) {
    const unsigned F = 32 * fl;
    uint32_t one[NLMAX], t[NLMAX], blo[NLMAX], bhi[NLMAX];
    mw_one(one, n, fl);
    fl__dp_u128 k = num / den, fnum = num % den;
    /* exp(-k) = exp(-1)^k by binary powering; exp(-k) < 2^-F once k >= F. */
    if (k >= F) {
        memset(lo, 0, n * sizeof(uint32_t));
        memset(hi, 0, n * sizeof(uint32_t));
        hi[0] = 1;
    } else {
        mw_one(lo, n, fl);
        mw_one(hi, n, fl);
        exp_series(blo, one, n, fl, 0);
        exp_series(bhi, one, n, fl, 1);
        for (unsigned kk = (unsigned)k; kk; kk >>= 1) {
            if (kk & 1) {
                mw_mulf(lo, lo, blo, n, fl, 0);
                mw_mulf(hi, hi, bhi, n, fl, 1);
            }
            if (kk > 1) {
                mw_mulf(blo, blo, blo, n, fl, 0);
                mw_mulf(bhi, bhi, bhi, n, fl, 1);
            }
        }
    }
    /* exp(-f), f = fnum / den in [0, 1): x = floor(f 2^F) by long division, exact when the
     * remainder is 0; exp is decreasing, so lower bound at x + [rem != 0], upper at x. */
    if (fnum) {
        memset(t, 0, n * sizeof(uint32_t));
        fl__dp_u128 r = fnum;
        for (unsigned i = F; i-- > 0;) {
            r <<= 1; /* r < den < 2^127 */
            if (r >= den) {
                r -= den;
                t[i / 32] |= 1u << (i % 32);
            }
        }
        exp_series(bhi, t, n, fl, 1);
        if (r)
            mw_inc(t, n);
        exp_series(blo, t, n, fl, 0);
        mw_mulf(lo, lo, blo, n, fl, 0);
        mw_mulf(hi, hi, bhi, n, fl, 1);
    }
    /* times a / b, then 2^e. */
    mw_mul64(lo, lo, a, n);
    mw_div64(lo, lo, b, n, 0);
    mw_mul64(hi, hi, a, n);
    mw_div64(hi, hi, b, n, 1);
    if (e >= 0) {
        /* A value that would pass 2^F (= 1) is clamped to 1: U < 1 decides the same. */
        unsigned bl = mw_bitlen(lo, n), bh = mw_bitlen(hi, n);
        if (bl > 0 && bl + (unsigned)e > F + 1) /* lo 2^e >= 2^(F+1) */
            memcpy(lo, one, n * sizeof(uint32_t));
        else
            mw_shl(lo, lo, (unsigned)e, n); /* fits: below 2^(F+1) (or 0) */
        if (bh > 0 && bh + (unsigned)e > F + 1)
            memcpy(hi, one, n * sizeof(uint32_t));
        else
            mw_shl(hi, hi, (unsigned)e, n);
    } else {
        mw_shr(lo, lo, (unsigned)-e, n, 0);
        mw_shr(hi, hi, (unsigned)-e, n, 1);
    }
    if (mw_cmp(lo, one, n) > 0)
        memcpy(lo, one, n * sizeof(uint32_t));
    if (mw_cmp(hi, one, n) > 0)
        memcpy(hi, one, n * sizeof(uint32_t));
}

int fl__dp_cmp_exp(struct fl_dp_rng *rng, uint64_t prefix, unsigned kbits, uint64_t a, int e,
                   uint64_t b, fl__dp_u128 n, fl__dp_u128 d) {
    uint64_t ub[FL__DP_CMP_MAX_BITS / 64]; /* U's leading bits, most significant word first */
    unsigned have = 0;
    uint32_t u[NLMAX], lo[NLMAX], hi[NLMAX];
    for (unsigned F = 128; F <= FL__DP_CMP_MAX_BITS; F *= 2) {
        /* The first word keeps the caller's prefix on top: the same U, continued. */
        while (have < F) {
            uint64_t w;
            if (have > 0 || kbits == 0)
                w = fl__dp_rng_u64(rng);
            else if (kbits >= 64)
                w = prefix;
            else /* prefix on top, then the top bits of a fresh word */
                w = (prefix << (64 - kbits)) | (fl__dp_rng_u64(rng) >> kbits);
            ub[have / 64] = w;
            have += 64;
        }
        if (rng->failed)
            return 0;
        const unsigned fl = F / 32, nl = fl + HEAD;
        memset(u, 0, nl * sizeof(uint32_t));
        for (unsigned i = 0; i < F / 64; i++) {
            u[fl - 1 - 2 * i] = (uint32_t)(ub[i] >> 32);
            u[fl - 2 - 2 * i] = (uint32_t)ub[i];
        }
        bound_v(lo, hi, nl, fl, a, e, b, n, d);
        /* U lies in [u, u + 1) / 2^F. */
        if (mw_cmp(u, lo, nl) < 0)
            return 1; /* u + 1 <= lo <= v 2^F */
        if (mw_cmp(u, hi, nl) >= 0)
            return 0; /* u >= hi >= v 2^F */
    }
    return -1;
}

/* ---- rigorous double bounds ---- */

void fl__dp_exp_neg_bounds(fl__dp_u128 n, fl__dp_u128 d, double *lo, double *hi) {
    /* x = n/d with relative error below 3 2^-52 (two conversions and a division), so the
     * absolute error is below 700 * 3 2^-52 < 2^-41 where it is used, a factor of at most
     * exp(2^-41) on the result. */
    double x = (double)n / (double)d;
    if (x > 700) {
        /* n/d > 699, exp(-699) < 2^-1008. */
        *lo = 0;
        *hi = 0x1p-1000;
        return;
    }
    /* exp(-x) = exp(-y)^(2^s), y = x 2^-s <= 1/16 (exact scaling), s <= 14. */
    unsigned s = 0;
    double y = x;
    while (y > 0x1p-4) {
        y *= 0.5;
        s++;
    }
    /* Nested Taylor form t_j = 1 - (y/j) t_{j+1}, t_13 = 1: truncation below y^13/13! < 2^-80.
     * With (y/j) t_{j+1} <= 0.07 each level adds at most 3 roundings and damps the error of
     * the level below by 0.07, so t_1 has relative error below 1.3 2^-53. */
    double t = 1.0;
    for (unsigned j = 12; j >= 1; j--)
        t = 1.0 - (y / (double)j) * t;
    /* Each squaring doubles the relative error and adds one rounding: after s <= 14 of them
     * it is below 2^14 (1.3 + 1) 2^-53 < 2^-37. Total with the input error: < 2^-36. */
    for (unsigned i = 0; i < s; i++)
        t *= t;
    *lo = t * (1.0 - 0x1p-32);
    *hi = t * (1.0 + 0x1p-32);
}
