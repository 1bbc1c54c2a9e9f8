/* Table-driven exact discrete Gaussian N_Z(0, sigma^2), sigma^2 = num/den: rejection sampling
 * from a piecewise-uniform proposal chosen with an alias table, with acceptance decided
 * exactly (sampler_exact.h). Used for batches; the per-sample CKS20 sampler in
 * discrete_gaussian.c stays for short ones.
 *
 * Proposal over magnitudes m >= 0, with a uniform sign bit:
 *   body bin i < nbody: m uniform in [i W, (i + 1) W), bin chosen with probability q_i / 2^B;
 *   tail bin nbody:     m = R + 2^k G + J, G ~ Geometric(1/2) (P(G = g) = 2^-(g+1)), J uniform
 *                       in [0, 2^k), chosen with probability q_T / 2^B.
 * B = kbits + 32 and the integer weights q sum to 2^B exactly, so the alias table (integer
 * Vose construction, 32-bit thresholds) realises these probabilities exactly. A proposal
 * (m, sign) is accepted with probability
 *   body: v(m) = (kappa W / q_i) (1/2 if m = 0) exp(-gamma(m)),
 *   tail: v(m) = (kappa 2^(G+1+k) / q_T) exp(-gamma(m)),      gamma(m) = m^2 den / (2 num),
 * for one rational constant kappa. Then P(propose x and accept) = kappa exp(-gamma(x)) /
 * 2^(B+1) for every integer x (m = 0 is proposed with both signs, hence its 1/2), which is
 * proportional to the discrete Gaussian: the accepted samples are exactly N_Z(0, sigma^2),
 * provided every v(m) <= 1 and every decision "U < v(m)" is exact.
 *
 * v <= 1: q_i >= kappa W h_i and q_T >= kappa 2^(1+k) h_R, where h_i >= max over bin i of the
 * target weight and h_R >= exp(-gamma(R)) are rigorous upper bounds (fl__dp_exp_neg_bounds),
 * checked in exact integer arithmetic after the table is built. In the tail,
 * gamma(m) >= gamma(R) + R X / sigma^2 with X = m - R >= 2^k G and 2^k R >= sigma^2, so
 * 2^G exp(-gamma(m)) <= (2/e)^G exp(-gamma(R)) <= exp(-gamma(R)).
 *
 * Exact decisions: the first 16 (then 32) bits of U are compared with integer bounds
 * lo <= 2^32 v <= hi derived from a double approximation of v whose relative error is
 * below 2^-35 while the bounds are 2^-30 apart from it; only when the bits of U fall
 * between lo and hi (probability about 2^-30) does fl__dp_cmp_exp finish the same
 * comparison exactly. So floating point only ever picks which exact test runs. */

#include <math.h>
#include <string.h>

#include "sampler_exact.h"
#include "sampler_table.h"

#define TARGET_SIGMAS 8.0 /* the body covers magnitudes below about 8 sigma */
#define BODY_MAX 1023     /* body bins (one more column is the tail) */
#define DELTA_MAX 0.13    /* largest exponent variation within a body bin (see below) */
#define MARGIN 0x1p-30    /* relative distance of the fast bounds from the approximation */

/* ---- construction ---- */

/* exp(-x) for 0 <= x <= DELTA_MAX: Taylor to degree 7, truncation below
 * 0.13^8 / 8! < 2^-38 and rounding below 2^-48 (relative, since exp(-x) > 0.87). */
static inline double exp_neg_small(double x) {
    double p = -1.0 / 5040;
    p = p * x + 1.0 / 720;
    p = p * x - 1.0 / 120;
    p = p * x + 1.0 / 24;
    p = p * x - 1.0 / 6;
    p = p * x + 0.5;
    p = p * x - 1.0;
    return p * x + 1.0;
}

/* x y <= q exactly, for finite doubles x, y >= 0 and an integer q >= 1. */
static int prod_le(double x, double y, uint64_t q) {
    if (x == 0 || y == 0)
        return 1;
    int ex, ey;
    double fx = frexp(x, &ex), fy = frexp(y, &ey);
    uint64_t mx = (uint64_t)ldexp(fx, 53), my = (uint64_t)ldexp(fy, 53); /* exact */
    fl__dp_u128 pm = (fl__dp_u128)mx * my;                               /* < 2^106 */
    int e = ex + ey - 106;                                               /* x y = pm 2^e */
    if (e >= 0)
        return e < 64 && pm <= (fl__dp_u128)(q >> e); /* pm 2^e <= q iff pm <= q >> e */
    unsigned s = (unsigned)-e;
    if (s >= 106)
        return 1; /* x y < 1 <= q */
    fl__dp_u128 ceil_shift = (pm >> s) + ((pm & ((((fl__dp_u128)1) << s) - 1)) != 0);
    return ceil_shift <= q;
}

fl_status fl__dp_table_build(struct fl__dp_sampler_table *t, uint64_t num, uint64_t den) {
    return fl__dp_table_build_shape(t, num, den, TARGET_SIGMAS);
}

fl_status fl__dp_table_build_shape(struct fl__dp_sampler_table *t, uint64_t num, uint64_t den,
                                   double body_sigmas) {
    memset(t, 0, sizeof(*t));
    t->num = num;
    t->den = den;
    /* Shape (efficiency only; exactness does not depend on it): W the smallest power of two
     * with at most BODY_MAX bins of width W below body_sigmas sigma. */
    const double sd = sqrt((double)num / (double)den);
    unsigned wbits = 0;
    while (ceil(body_sigmas * sd / ldexp(1.0, (int)wbits)) > BODY_MAX)
        wbits++;
    double nb = ceil(body_sigmas * sd / ldexp(1.0, (int)wbits));
    uint32_t nbody = nb < 1 ? 1 : (uint32_t)nb;
    unsigned kbits = 0;
    while ((1u << kbits) < nbody + 1)
        kbits++;
    const uint64_t W = (uint64_t)1 << wbits, R = (uint64_t)nbody << wbits;
    /* 2^tbits R den >= num, i.e. 2^tbits >= sigma^2 / R. */
    unsigned tbits = 0;
    while (((fl__dp_u128)den * R << tbits) < num)
        tbits++;
    t->kbits = kbits;
    t->wbits = wbits;
    t->tbits = tbits;
    t->nbody = nbody;
    t->r = R;
    t->c = (double)den / (2.0 * (double)num);
    const fl__dp_u128 d2 = (fl__dp_u128)2 * num;
    if (wbits > 0) {
        /* Largest exponent variation inside a body bin: (2i + 1) W^2 c for the last bin;
         * about 8 * 16 / 1023 by the choice of W. The fast path's polynomial assumes it. */
        double dmax = (2.0 * (double)nbody - 1.0) * (double)W * (double)W * t->c;
        if (!FL_ALWAYS(dmax <= DELTA_MAX))
            return FL_ERR_INTERNAL;
    }

    /* Weights r_i = W h_i (body), 2^(1+k) h_R (tail): upper bounds of the target mass. */
    double r[FL__DP_TABLE_COLS], mid[FL__DP_TABLE_COLS];
    double sum = 0;
    for (uint32_t i = 0; i <= nbody; i++) {
        double lo, hi;
        if (i == 0) {
            /* Bin 0: m = 0 has weight 1/2 (it is proposed with both signs); m >= 1 below 1. */
            lo = hi = wbits == 0 ? 0.5 : 1.0;
        } else {
            uint64_t m = i == nbody ? R : (uint64_t)i << wbits;
            fl__dp_exp_neg_bounds((fl__dp_u128)m * m * den, d2, &lo, &hi);
        }
        mid[i] = 0.5 * (lo + hi);
        r[i] = i == nbody ? ldexp(hi, 1 + (int)tbits) : ldexp(hi, (int)wbits);
        sum += r[i];
    }
    /* q_i = ceil(F r_i) with F leaving room for the ceilings; the rest of 2^B goes to bin 0
     * (more weight never breaks v <= 1). */
    const unsigned B = kbits + 32;
    const double F = (ldexp(1.0, (int)B) - 4.0 * (double)(1u << kbits)) / sum;
    uint64_t total = 0;
    for (uint32_t i = 0; i <= nbody; i++) {
        double qi = ceil(F * r[i]);
        t->q[i] = qi < 1 ? 1 : (uint64_t)qi;
        total += t->q[i];
    }
    if (!FL_ALWAYS(total <= (uint64_t)1 << B))
        return FL_ERR_INTERNAL;
    t->q[0] += ((uint64_t)1 << B) - total;
    /* kappa slightly below F, so that kappa r_i < ceil(F r_i) despite rounding; verified
     * exactly below. */
    const double kappa = F * (1.0 - 0x1p-40);
    int ke;
    double kf = frexp(kappa, &ke);
    t->kappa_mant = (uint64_t)ldexp(kf, 53);
    t->kappa_exp = ke - 53;
    for (uint32_t i = 0; i <= nbody; i++)
        if (!FL_ALWAYS(prod_le(kappa, r[i], t->q[i])))
            return FL_ERR_INTERNAL;

    /* Fast-path approximations of v at the left end of each body bin. */
    for (uint32_t i = 0; i < nbody; i++) {
        double v = kappa * ldexp(mid[i], (int)wbits) / (double)t->q[i];
        if (i == 0)
            v = kappa * (double)W / (double)t->q[0]; /* exp(-gamma(0)) = 1 */
        t->p[i] = v;
        /* Bounds of v over the bin on the 32-bit scale. W = 1: v is one number (bin 0 is
         * m = 0, with its 1/2). W > 1 (a squeeze): v(m) = p_i exp(-delta(m)) falls from p_i
         * (at m = i W; bin 0: at m = 1, since m = 0 has the 1/2) to its value at the bin's
         * last magnitude (bin 0: or p_0 / 2 at m = 0), so most proposals are decided
         * without evaluating v(m); the polynomial errors (below 2^-38) are inside MARGIN. */
        double vmin = v, vmax = v;
        if (wbits == 0) {
            vmin = vmax = i == 0 ? 0.5 * v : v;
        } else {
            uint64_t base = (uint64_t)i << wbits, last = base + W - 1;
            vmin = v * exp_neg_small((double)(last * last - base * base) * t->c);
            if (i == 0)
                vmin = fmin(vmin, 0.5 * v);
        }
        t->lo[i] = (uint64_t)(vmin * ((1.0 - MARGIN) * 0x1p32));
        t->hi[i] = (uint64_t)(vmax * ((1.0 + MARGIN) * 0x1p32)) + 1;
    }

    /* Alias table (Vose) in integers: each column holds 2^32; column s keeps threshold
     * w_s of its own bin and gives the rest to alias l. Bins above nbody weigh 0. */
    const uint64_t cap = (uint64_t)1 << 32;
    const uint32_t K = 1u << kbits;
    uint64_t w[FL__DP_TABLE_COLS];
    uint16_t small[FL__DP_TABLE_COLS], large[FL__DP_TABLE_COLS];
    unsigned ns = 0, nl = 0;
    for (uint32_t c = 0; c < K; c++) {
        w[c] = c <= nbody ? t->q[c] : 0;
        if (w[c] < cap)
            small[ns++] = (uint16_t)c;
        else
            large[nl++] = (uint16_t)c;
    }
    while (ns > 0 && nl > 0) {
        unsigned s = small[--ns], l = large[--nl];
        t->col[s] = w[s] | (uint64_t)l << 33;
        w[l] -= cap - w[s];
        if (w[l] < cap)
            small[ns++] = (uint16_t)l;
        else
            large[nl++] = (uint16_t)l;
    }
    /* The weights sum to K 2^32 exactly, so what is left is full. */
    if (!FL_ALWAYS(ns == 0))
        return FL_ERR_INTERNAL;
    while (nl > 0) {
        unsigned l = large[--nl];
        if (!FL_ALWAYS(w[l] == cap))
            return FL_ERR_INTERNAL;
        t->col[l] = cap | (uint64_t)l << 33;
    }
    return FL_OK;
}

const struct fl__dp_sampler_table *fl__dp_table_get(struct fl_dp_rng *rng, uint64_t num,
                                                    uint64_t den) {
    struct fl__dp_sampler_table *t = rng->table;
    if (t && t->num == num && t->den == den)
        return t;
    if (!t) {
        t = fl__alloc(&rng->alloc, sizeof(*t));
        if (!t)
            return NULL;
        rng->table = t;
    }
    if (fl__dp_table_build(t, num, den) != FL_OK) {
        t->num = 0; /* never matches a valid key */
        return NULL;
    }
    return t;
}

/* ---- sampling ---- */

/* Finishes "U < v" when U's first kb bits `u` fell between the fast bounds lo, hi (on the
 * 32-bit scale): the remaining 32 - kb bits, then, if still undecided, the exact comparison
 * with the same 32-bit prefix. Returns 1, 0 or -1 (range). */
static int decide_slow(struct fl_dp_rng *rng, const struct fl__dp_sampler_table *t, uint64_t u,
                       unsigned kb, uint64_t lo, uint64_t hi, unsigned bin, uint64_t m) {
    uint64_t u32 = u << (32 - kb) | fl__dp_rng_take(rng, 32 - kb);
    if (u32 + 1 <= lo)
        return 1;
    if (u32 >= hi)
        return 0;
    return fl__dp_cmp_exp(rng, u32, 32, t->kappa_mant, t->kappa_exp + (int)t->wbits - (m == 0),
                          t->q[bin], (fl__dp_u128)m * m * t->den, (fl__dp_u128)2 * t->num);
}

/* The alias coin "y < thr" for a 32-bit uniform y whose first kb bits `y` tied with thr's:
 * the remaining bits decide. */
static unsigned alias_slow(struct fl_dp_rng *rng, uint64_t y, unsigned kb, uint64_t col,
                           unsigned c) {
    y = y << (32 - kb) | fl__dp_rng_take(rng, 32 - kb);
    return y < (col & ((((uint64_t)1) << 33) - 1)) ? c : (unsigned)(col >> 33);
}

/* A tail proposal (bin nbody): 1 with *m_out set if accepted, 0 if rejected, -1 if out of
 * the supported range (G >= 1024 or m >= 2^43, probability below 2^-1000). */
static int tail_one(struct fl_dp_rng *rng, const struct fl__dp_sampler_table *t, uint64_t *m_out) {
    uint64_t g = 0;
    for (;;) {
        uint64_t w = fl__dp_rng_u64(rng);
        if (rng->failed)
            return 0;
        if (~w) {
            g += (uint64_t)__builtin_ctzll(~w); /* leading successes of fair coins */
            break;
        }
        g += 64;
        if (g >= 1024)
            return -1;
    }
    uint64_t j = t->tbits ? fl__dp_rng_u64(rng) & ((((uint64_t)1) << t->tbits) - 1) : 0;
    uint64_t m = t->r + (g << t->tbits) + j;
    if (m >= (uint64_t)1 << 43)
        return -1;
    int acc = fl__dp_cmp_exp(rng, 0, 0, t->kappa_mant, t->kappa_exp + (int)g + 1 + (int)t->tbits,
                             t->q[t->nbody], (fl__dp_u128)m * m * t->den, (fl__dp_u128)2 * t->num);
    *m_out = m;
    return acc;
}

/* The sampling loop. State that the stores to out[] could alias (rng->pos, the table's
 * scalars) is kept in locals and written back around the rare slow calls, which read the rng
 * themselves. w1 (W = 1, a compile-time constant in each instantiation) selects the compact
 * proposal: 32 bits instead of 64, two proposals per random word.
 *
 * Proposal bits (low to high), W = 1 (32-bit half word): column (kbits), alias coin (8),
 * acceptance (8), sign (1). W > 1 (64-bit word): column (kbits), alias coin (16), offset in
 * the bin (wbits <= 14), acceptance (16, bits 47..62), sign (63). The alias coin and the
 * acceptance compare the leading bits of 32-bit uniforms; a tie reads the rest of the same
 * uniform (alias_slow, decide_slow), so every comparison is exact. */
static inline fl_status sample_loop(struct fl_dp_rng *rng, const struct fl__dp_sampler_table *t,
                                    int64_t *out, size_t n, int add, size_t *bad, const int w1) {
    const unsigned kbits = t->kbits, wbits = t->wbits, nbody = t->nbody;
    const unsigned ab = w1 ? 8 : 16; /* leading bits of the alias coin and of the acceptance */
    const uint64_t kmask = ((uint64_t)1 << kbits) - 1, wmask = ((uint64_t)1 << wbits) - 1;
    const uint64_t amask = ((uint64_t)1 << ab) - 1;
    const double c = t->c;
    size_t pos = rng->pos;
    uint64_t half = 0;  /* W = 1: the unused upper half of the last word */
    unsigned nhalf = 0; /* 1 when `half` holds an unused proposal */
    for (size_t i = 0; i < n; i++) {
        uint64_t m;
        unsigned neg;
        for (;;) {
            uint64_t r;
            if (w1 && nhalf) {
                r = half;
                nhalf = 0;
            } else {
                if (__builtin_expect(pos >= FL_DP_RNG_BUFFER_BYTES, 0)) {
                    fl__dp_rng_refill(rng); /* pos = 0; zeros and `failed` on error */
                    pos = 0;
                    if (rng->failed)
                        goto out_failed;
                }
                r = rng->buf[pos / 8];
                pos += 8;
                if (w1) {
                    half = r >> 32;
                    nhalf = 1;
                    r &= 0xffffffffu;
                }
            }
            const unsigned cb = (unsigned)(r & kmask);
            const uint64_t col = t->col[cb];
            const uint64_t y = (r >> kbits) & amask, th = col >> (32 - ab) & ((amask << 1) | 1);
            unsigned bin = y < th ? cb : (unsigned)(col >> 33);
            if (__builtin_expect(y == th, 0)) {
                rng->pos = pos;
                bin = alias_slow(rng, y, ab, col, cb);
                pos = rng->pos;
            }
            uint64_t u, j = 0;
            if (w1) {
                m = bin;
                u = (r >> (kbits + 8)) & 0xff;
                neg = (unsigned)(r >> (kbits + 16)) & 1;
            } else {
                j = (r >> (kbits + 16)) & wmask;
                m = ((uint64_t)bin << wbits) + j;
                u = (r >> 47) & 0xffff;
                neg = (unsigned)(r >> 63);
            }
            /* lo <= 2^32 v <= hi over the whole bin (one value when W = 1). */
            uint64_t lo = t->lo[bin], hi = t->hi[bin];
            int acc;
            if (__builtin_expect(bin == nbody, 0)) {
                rng->pos = pos;
                acc = tail_one(rng, t, &m);
                pos = rng->pos;
            } else if (((u + 1) << (32 - ab)) <= lo) {
                break; /* U < (u + 1) 2^-ab <= lo 2^-32 <= v */
            } else if ((u << (32 - ab)) >= hi) {
                continue; /* U >= u 2^-ab >= hi 2^-32 >= v */
            } else {
                if (!w1) {
                    /* Between the bin's bounds: bounds for this m, from
                     * v = p_i exp(-(m^2 - base^2) c) (1/2 at m = 0); m^2 < 2^53 is exact. */
                    const uint64_t base = (uint64_t)bin << wbits;
                    double v = t->p[bin] * exp_neg_small((double)((2 * base + j) * j) * c);
                    v *= m == 0 ? 0.5 : 1.0;
                    lo = (uint64_t)(v * ((1.0 - MARGIN) * 0x1p32));
                    hi = (uint64_t)(v * ((1.0 + MARGIN) * 0x1p32)) + 1;
                    if (((u + 1) << (32 - ab)) <= lo)
                        break;
                    if ((u << (32 - ab)) >= hi)
                        continue;
                }
                rng->pos = pos;
                acc = decide_slow(rng, t, u, ab, lo, hi, bin, m);
                pos = rng->pos;
            }
            if (rng->failed)
                goto out_failed;
            if (__builtin_expect(acc < 0, 0)) {
                rng->pos = pos;
                *bad = n;
                return FL_ERR_RANGE;
            }
            if (acc)
                break;
        }
        const int64_t z = neg ? -(int64_t)m : (int64_t)m;
        if (!add) {
            out[i] = z;
        } else {
            if ((z > 0 && out[i] > INT64_MAX - z) || (z < 0 && out[i] < INT64_MIN - z)) {
                rng->pos = pos;
                *bad = i;
                return FL_ERR_RANGE;
            }
            out[i] += z;
        }
    }
    rng->pos = pos;
    return FL_OK;
out_failed:
    *bad = n;
    return rng->failed;
}

fl_status fl__dp_table_sample(struct fl_dp_rng *rng, const struct fl__dp_sampler_table *t,
                              int64_t *out, size_t n, int add, size_t *bad) {
    if (rng->failed) {
        *bad = n;
        return rng->failed;
    }
    return t->wbits == 0 ? sample_loop(rng, t, out, n, add, bad, 1)
                         : sample_loop(rng, t, out, n, add, bad, 0);
}
