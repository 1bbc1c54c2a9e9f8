/* Shamir secret sharing over the prime field p = 2^256 + 297 (crypto.h contract).
 *
 * Field elements are five 64-bit limbs, little-endian, always fully reduced (< p, so the top
 * limb is 0 or 1). Arithmetic on values is branch-free and uses no secret-dependent indices:
 * the only branches depend on public data (share indices x, counts, the fixed exponent p-2).
 *
 * Reduction uses 2^256 == -297 (mod p): a wide value H*2^256 + L is congruent to L - 297*H.
 *
 * Wiping: the field helpers below are small static functions whose limb temporaries live in
 * registers or the caller's frame; wiping them on every multiplication cost more than the
 * multiplication itself, so each exported function wipes its own secret field elements
 * (coefficients, running sums, loaded shares) before it returns instead.
 *
 * Tamper detection: combine() rejects a result >= 2^256, but a wrong share turns the secret
 * into a near-uniform field element, which lands in [2^256, p) with probability only
 * 297/p ~ 2^-248. So a tampered or wrong share in practice yields a WRONG secret, not an
 * error; the protocol must authenticate what it reconstructs (e.g. recompute a public key or
 * a commitment from the reconstructed secret). */

#include <string.h>

#include "crypto.h"
#include "flotilla/common.h"

__extension__ typedef unsigned __int128 fl__sa_u128;

#define FL__SA_FE_LIMBS 5

struct sa_fe {
    uint64_t v[FL__SA_FE_LIMBS]; /* little-endian limbs, value < p */
};

/* p = 2^256 + 297 */
static const uint64_t sa_p[FL__SA_FE_LIMBS] = {297u, 0u, 0u, 0u, 1u};

/* ---- field arithmetic ---- */

/* Add and subtract with carry / borrow (0 or 1). On x86-64 the compiler intrinsics give
 * adc / sbb chains; elsewhere 128-bit temporaries. Loops over limbs are unrolled
 * (FL__SA_UNROLL): rolled, gcc -O2 keeps the carries in memory and runs 3x slower. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <x86intrin.h>
static inline uint64_t sa_adc(uint64_t a, uint64_t b, uint64_t *carry) {
    unsigned long long r;
    *carry = _addcarry_u64((unsigned char)*carry, a, b, &r);
    return (uint64_t)r;
}

static inline uint64_t sa_sbb(uint64_t a, uint64_t b, uint64_t *borrow) {
    unsigned long long r;
    *borrow = _subborrow_u64((unsigned char)*borrow, a, b, &r);
    return (uint64_t)r;
}
#else
static inline uint64_t sa_adc(uint64_t a, uint64_t b, uint64_t *carry) {
    fl__sa_u128 s = (fl__sa_u128)a + b + *carry;
    *carry = (uint64_t)(s >> 64);
    return (uint64_t)s;
}

static inline uint64_t sa_sbb(uint64_t a, uint64_t b, uint64_t *borrow) {
    fl__sa_u128 d = (fl__sa_u128)a - b - *borrow;
    *borrow = (uint64_t)(d >> 64) & 1u;
    return (uint64_t)d;
}
#endif

#if defined(__GNUC__) || defined(__clang__)
#define FL__SA_UNROLL _Pragma("GCC unroll 8")
#else
#define FL__SA_UNROLL
#endif

/* r = r - p if r >= p, in constant time. r is a 320-bit value < 2^320. */
static inline void sa_fe_cond_sub_p(uint64_t r[FL__SA_FE_LIMBS]) {
    uint64_t s[FL__SA_FE_LIMBS];
    uint64_t borrow = 0;
    FL__SA_UNROLL
    for (int i = 0; i < FL__SA_FE_LIMBS; i++)
        s[i] = sa_sbb(r[i], sa_p[i], &borrow);
    /* borrow == 1 means r < p: keep r. */
    uint64_t keep = (uint64_t)0 - borrow;
    FL__SA_UNROLL
    for (int i = 0; i < FL__SA_FE_LIMBS; i++)
        r[i] = (r[i] & keep) | (s[i] & ~keep);
}

/* out = t mod p for a wide value t (9 limbs) with t < 2^514 (any product of two reduced
 * elements, or 512 random bits).
 *
 * With L = t mod 2^256 and H = t >> 256 (< 2^258): c = 297 H < 2^267 has limbs c0..c4
 * (c4 < 2^11), and t == L - c == L - (c0..c3) + 297 c4 (mod p). Adding p makes that
 * nonnegative and below 2p + 2^21, so two conditional subtractions finish. */
static inline void sa_fe_reduce_wide(struct sa_fe *out, const uint64_t t[9]) {
    uint64_t c[5], r[FL__SA_FE_LIMBS];
    fl__sa_u128 m = 0;
    FL__SA_UNROLL
    for (int i = 0; i < 5; i++) {
        m = (fl__sa_u128)t[4 + i] * 297u + (uint64_t)(m >> 64);
        c[i] = (uint64_t)m;
    }
    /* r = L - (c0..c3) over 320 bits, then + (297 c4 + 297) + 2^256 (= + 297 c4 + p). */
    uint64_t borrow = 0, carry = 0;
    FL__SA_UNROLL
    for (int i = 0; i < 4; i++)
        r[i] = sa_sbb(t[i], c[i], &borrow);
    r[4] = (uint64_t)0 - borrow;
    r[0] = sa_adc(r[0], c[4] * 297u + 297u, &carry);
    FL__SA_UNROLL
    for (int i = 1; i < 4; i++)
        r[i] = sa_adc(r[i], 0, &carry);
    r[4] += carry + 1u;
    sa_fe_cond_sub_p(r);
    sa_fe_cond_sub_p(r);
    memcpy(out->v, r, sizeof(r));
}

/* out = a * b. The top limbs are 0 or 1, so the product is the 4 x 4-limb product of the
 * low halves plus 2^256 (a4 B + b4 A) + 2^512 a4 b4, added under masks (no branch). */
static void sa_fe_mul(struct sa_fe *out, const struct sa_fe *a, const struct sa_fe *b) {
    uint64_t t[9] = {0};
    FL__SA_UNROLL
    for (int i = 0; i < 4; i++) {
        uint64_t carry = 0;
        FL__SA_UNROLL
        for (int j = 0; j < 4; j++) {
            fl__sa_u128 m = (fl__sa_u128)a->v[i] * b->v[j] + t[i + j] + carry;
            t[i + j] = (uint64_t)m;
            carry = (uint64_t)(m >> 64);
        }
        t[i + 4] = carry;
    }
    uint64_t ma = (uint64_t)0 - a->v[4], mb = (uint64_t)0 - b->v[4];
    uint64_t c1 = 0, c2 = 0;
    FL__SA_UNROLL
    for (int i = 0; i < 4; i++) {
        t[4 + i] = sa_adc(t[4 + i], b->v[i] & ma, &c1);
        t[4 + i] = sa_adc(t[4 + i], a->v[i] & mb, &c2);
    }
    t[8] = c1 + c2 + (a->v[4] & b->v[4]);
    sa_fe_reduce_wide(out, t);
}

/* out = a * m for a public 64-bit multiplier m (a product of two share indices or index
 * differences): 5 limb products instead of 16. */
static void sa_fe_mul_small(struct sa_fe *out, const struct sa_fe *a, uint64_t m) {
    uint64_t t[9] = {0};
    uint64_t carry = 0;
    FL__SA_UNROLL
    for (int i = 0; i < FL__SA_FE_LIMBS; i++) {
        fl__sa_u128 x = (fl__sa_u128)a->v[i] * m + carry;
        t[i] = (uint64_t)x;
        carry = (uint64_t)(x >> 64);
    }
    t[FL__SA_FE_LIMBS] = carry;
    sa_fe_reduce_wide(out, t);
}

static void sa_fe_add(struct sa_fe *out, const struct sa_fe *a, const struct sa_fe *b) {
    uint64_t r[FL__SA_FE_LIMBS];
    uint64_t carry = 0;
    FL__SA_UNROLL
    for (int i = 0; i < FL__SA_FE_LIMBS; i++)
        r[i] = sa_adc(a->v[i], b->v[i], &carry);
    sa_fe_cond_sub_p(r); /* a + b < 2p */
    memcpy(out->v, r, sizeof(r));
}

/* out = a - b = (a + p) - b, which lies in (0, 2p). */
static void sa_fe_sub(struct sa_fe *out, const struct sa_fe *a, const struct sa_fe *b) {
    uint64_t r[FL__SA_FE_LIMBS];
    uint64_t carry = 0, borrow = 0;
    FL__SA_UNROLL
    for (int i = 0; i < FL__SA_FE_LIMBS; i++)
        r[i] = sa_sbb(sa_adc(a->v[i], sa_p[i], &carry), b->v[i], &borrow);
    /* a + p < 2^258 fits in 5 limbs, so the final carry and borrow cancel. */
    sa_fe_cond_sub_p(r);
    memcpy(out->v, r, sizeof(r));
}

/* out = a^(p-2) = a^-1 for a != 0 (Fermat). The exponent is public and fixed, so the
 * square-and-multiply schedule does not depend on a. */
static void sa_fe_inv(struct sa_fe *out, const struct sa_fe *a) {
    /* p - 2 = 2^256 + 295 */
    static const uint64_t e[FL__SA_FE_LIMBS] = {295u, 0u, 0u, 0u, 1u};
    struct sa_fe r = {{1u, 0u, 0u, 0u, 0u}};
    for (int bit = 256; bit >= 0; bit--) {
        sa_fe_mul(&r, &r, &r);
        if ((e[bit / 64] >> (bit % 64)) & 1u)
            sa_fe_mul(&r, &r, a);
    }
    *out = r;
    fl_memzero(&r, sizeof(r));
}

static void sa_fe_from_u32(struct sa_fe *out, uint32_t x) {
    memset(out, 0, sizeof(*out));
    out->v[0] = x;
}

/* Reads len <= 40 big-endian bytes into limbs (no reduction). */
static void sa_fe_load_be(uint64_t r[FL__SA_FE_LIMBS], const uint8_t *in, size_t len) {
    memset(r, 0, FL__SA_FE_LIMBS * sizeof(uint64_t));
    for (size_t i = 0; i < len; i++) {
        size_t bitpos = 8 * (len - 1 - i);
        r[bitpos / 64] |= (uint64_t)in[i] << (bitpos % 64);
    }
}

/* Writes the low len <= 40 bytes of an element big-endian. */
static void sa_fe_store_be(uint8_t *out, size_t len, const struct sa_fe *a) {
    for (size_t i = 0; i < len; i++) {
        size_t bitpos = 8 * (len - 1 - i);
        out[i] = (uint8_t)(a->v[bitpos / 64] >> (bitpos % 64));
    }
}

/* Loads a 33-byte share value; returns 0 if it is < p, -1 otherwise (computed without a
 * value-dependent branch; the caller fails on -1). */
static int sa_fe_load_share(struct sa_fe *out, const uint8_t y[FL__SA_SHARE_Y_BYTES]) {
    uint64_t borrow = 0;
    sa_fe_load_be(out->v, y, FL__SA_SHARE_Y_BYTES);
    for (int i = 0; i < FL__SA_FE_LIMBS; i++) {
        fl__sa_u128 d = (fl__sa_u128)out->v[i] - sa_p[i] - borrow;
        borrow = (uint64_t)(d >> 64) & 1u;
    }
    return (int)borrow - 1; /* borrow 1 (y < p) -> 0, else -1 */
}

/* Uniform field element from 64 random bytes (bias < 2^-255). */
static int sa_fe_random(struct sa_fe *out, const struct fl__sa_crypto *crypto) {
    uint8_t buf[64];
    uint64_t t[10] = {0};
    int rc = -1;
    if (crypto->random(buf, sizeof(buf)) != 0)
        goto out_wipe;
    for (int i = 0; i < 8; i++) {
        uint64_t w = 0;
        for (int j = 0; j < 8; j++)
            w |= (uint64_t)buf[8 * i + j] << (8 * j);
        t[i] = w;
    }
    sa_fe_reduce_wide(out, t);
    rc = 0;
out_wipe:
    fl_memzero(buf, sizeof(buf));
    fl_memzero(t, sizeof(t));
    return rc;
}

/* ---- public-index checks ---- */

/* 0 if all n indices are nonzero and pairwise distinct. Indices are public. */
static int sa_check_xs(const uint32_t *xs, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (xs[i] == 0)
            return -1;
        for (size_t j = 0; j < i; j++)
            if (xs[i] == xs[j])
                return -1;
    }
    return 0;
}

static int sa_check_share_xs(const struct fl__sa_share *shares, size_t k) {
    for (size_t i = 0; i < k; i++) {
        if (shares[i].x == 0)
            return -1;
        for (size_t j = 0; j < i; j++)
            if (shares[i].x == shares[j].x)
                return -1;
    }
    return 0;
}

/* ---- split and combine ---- */

/* Evaluates f(x) = secret + c1 x + ... + c_{t-1} x^{t-1} at every xs[i] by Horner's rule,
 * drawing one coefficient at a time (highest first) so no coefficient array is needed: the
 * running values live in out[i].y. Cost: n*t multiplications by the (small, public) x. */
int fl__sa_shamir_split(struct fl__sa_share *out, const uint32_t *xs, size_t n, size_t t,
                        const uint8_t secret[32], const struct fl__sa_crypto *crypto) {
    struct sa_fe coeff, acc;
    int rc = -1;

    if (!out || !xs || !secret || !crypto || !crypto->random || n == 0 || t == 0 || t > n)
        return -1;
    if (sa_check_xs(xs, n) != 0)
        return -1;

    for (size_t i = 0; i < n; i++) {
        out[i].x = xs[i];
        memset(out[i].y, 0, sizeof(out[i].y));
    }
    for (size_t j = t; j-- > 0;) {
        if (j == 0) {
            sa_fe_load_be(coeff.v, secret, 32); /* < 2^256 < p: already reduced */
        } else if (sa_fe_random(&coeff, crypto) != 0) {
            goto out_wipe;
        }
        for (size_t i = 0; i < n; i++) {
            sa_fe_load_be(acc.v, out[i].y, FL__SA_SHARE_Y_BYTES);
            sa_fe_mul_small(&acc, &acc, out[i].x);
            sa_fe_add(&acc, &acc, &coeff);
            sa_fe_store_be(out[i].y, FL__SA_SHARE_Y_BYTES, &acc);
        }
    }
    rc = 0;
out_wipe:
    if (rc != 0) {
        for (size_t i = 0; i < n; i++)
            fl_memzero(out[i].y, sizeof(out[i].y));
    }
    fl_memzero(&coeff, sizeof(coeff));
    fl_memzero(&acc, sizeof(acc));
    return rc;
}

/* ---- combine: Lagrange interpolation at 0, batched inversions ----
 *
 * secret = sum_i y_i L_i(0), L_i(0) = prod_{j != i} x_j / (x_j - x_i) = P / D_i with
 * P = prod_j x_j and D_i = x_i prod_{j != i} (x_j - x_i). The D_i depend only on the public
 * indices and are products of 32-bit integers, so they cost cheap small multiplications; all
 * the D_i of a window of shares (of one or several jobs) are inverted together with
 * Montgomery's trick (prefix products, one Fermat inversion, a backward pass): 3
 * multiplications per share plus one inversion per window instead of one inversion (~260
 * multiplications) per share. Only the sum over y_i touches secrets, with constant-time
 * field operations; every branch depends on x, k or the window position. */

/* Multiplies *d by the public factor f (< 2^32), gathering factors into the 64-bit *pend
 * until the next one would overflow it: one field multiplication per 64 bits of factors
 * (indices of a 1000-client round are 10-bit numbers, so ~6 factors per multiplication). */
static inline void sa_gather(struct sa_fe *d, uint64_t *pend, uint64_t f) {
    uint64_t prod;
    if (__builtin_mul_overflow(*pend, f, &prod)) {
        sa_fe_mul_small(d, d, *pend);
        prod = f;
    }
    *pend = prod;
}

/* D = x_i * prod_{j != i} (x_j - x_i) mod p, from public indices (distinct, nonzero). */
static void sa_lagrange_den(struct sa_fe *d, const struct fl__sa_share *sh, size_t k, size_t i) {
    uint64_t xi = sh[i].x, pend = xi;
    int neg = 0;
    sa_fe_from_u32(d, 1);
    for (size_t j = 0; j < k; j++) {
        if (j == i)
            continue;
        uint64_t xj = sh[j].x;
        neg ^= xj < xi;
        sa_gather(d, &pend, xj > xi ? xj - xi : xi - xj);
    }
    sa_fe_mul_small(d, d, pend);
    if (neg) {
        struct sa_fe zero = {{0}};
        sa_fe_sub(d, &zero, d);
    }
}

/* P = prod_j x_j mod p. */
static void sa_lagrange_num(struct sa_fe *pr, const struct fl__sa_share *sh, size_t k) {
    uint64_t pend = 1;
    sa_fe_from_u32(pr, 1);
    for (size_t j = 0; j < k; j++)
        sa_gather(pr, &pend, sh[j].x);
    sa_fe_mul_small(pr, pr, pend);
}

/* In place: d[i] = d[i]^-1 for i < m (all nonzero, public), with pre as scratch. */
static void sa_fe_batch_inv(struct sa_fe *d, struct sa_fe *pre, size_t m) {
    struct sa_fe inv, t;
    pre[0] = d[0];
    for (size_t i = 1; i < m; i++)
        sa_fe_mul(&pre[i], &pre[i - 1], &d[i]);
    sa_fe_inv(&inv, &pre[m - 1]);
    for (size_t i = m - 1; i > 0; i--) {
        sa_fe_mul(&t, &inv, &pre[i - 1]); /* (d_0 .. d_i)^-1 * (d_0 .. d_{i-1}) = d_i^-1 */
        sa_fe_mul(&inv, &inv, &d[i]);     /* (d_0 .. d_{i-1})^-1 */
        d[i] = t;
    }
    d[0] = inv;
}

/* Bytes of combine scratch per share of window (see FL__SA_SHAMIR_SCRATCH_PER_SHARE). */
_Static_assert(2 * sizeof(struct sa_fe) <= FL__SA_SHAMIR_SCRATCH_PER_SHARE,
               "FL__SA_SHAMIR_SCRATCH_PER_SHARE too small");

/* Window on the stack when the caller gives no scratch. */
#define SA_STACK_WINDOW 32

/* Finishes job j: secret = P * acc if every share was < p and the result fits 32 bytes. */
static void sa_job_finish(struct fl__sa_combine_job *job, struct sa_fe *acc, int bad) {
    struct sa_fe pr;
    sa_lagrange_num(&pr, job->shares, job->k);
    sa_fe_mul(acc, acc, &pr);
    /* A share >= p is malformed; a result >= 2^256 cannot be a 32-byte secret. */
    if (bad != 0 || acc->v[4] != 0) {
        fl_memzero(job->secret, 32);
        job->rc = -1;
    } else {
        sa_fe_store_be(job->secret, 32, acc);
        job->rc = 0;
    }
    memset(acc, 0, sizeof(*acc));
}

void fl__sa_shamir_combine_many(struct fl__sa_combine_job *jobs, size_t m, void *scratch,
                                size_t scratch_len) {
    struct sa_fe stack_den[SA_STACK_WINDOW], stack_pre[SA_STACK_WINDOW];
    struct sa_fe *den = stack_den, *pre = stack_pre;
    size_t win = SA_STACK_WINDOW;
    struct sa_fe acc = {{0}}, y, tmp;
    int bad = 0;

    if (scratch && scratch_len / FL__SA_SHAMIR_SCRATCH_PER_SHARE > SA_STACK_WINDOW) {
        win = scratch_len / FL__SA_SHAMIR_SCRATCH_PER_SHARE;
        den = scratch;
        pre = den + win;
    }
    /* Invalid jobs fail up front and take no part in the windows. */
    for (size_t j = 0; j < m; j++) {
        struct fl__sa_combine_job *job = &jobs[j];
        job->rc = -1;
        if (!job->secret)
            continue;
        if (!job->shares || job->k == 0 || sa_check_share_xs(job->shares, job->k) != 0) {
            fl_memzero(job->secret, 32);
            continue;
        }
        job->rc = 1; /* pending */
    }
    /* Stream the (job, share) pairs in order through windows of `win` denominators; the
     * window's pairs are consumed in the same order, so one running sum suffices. */
    size_t j0 = 0, i0 = 0; /* first pair of the current window */
    while (j0 < m) {
        if (jobs[j0].rc != 1) {
            j0++;
            i0 = 0;
            continue;
        }
        size_t c = 0, j = j0, i = i0;
        while (j < m && c < win) {
            if (jobs[j].rc != 1) {
                j++;
                continue;
            }
            sa_lagrange_den(&den[c++], jobs[j].shares, jobs[j].k, i);
            if (++i == jobs[j].k) {
                j++;
                i = 0;
            }
        }
        sa_fe_batch_inv(den, pre, c);
        c = 0;
        while (j0 < j || (j0 == j && i0 < i)) {
            struct fl__sa_combine_job *job = &jobs[j0];
            if (job->rc != 1) {
                j0++;
                continue;
            }
            bad |= sa_fe_load_share(&y, job->shares[i0].y);
            sa_fe_mul(&tmp, &y, &den[c++]);
            sa_fe_add(&acc, &acc, &tmp);
            if (++i0 == job->k) {
                sa_job_finish(job, &acc, bad);
                bad = 0;
                j0++;
                i0 = 0;
            }
        }
    }
    fl_memzero(&acc, sizeof(acc));
    fl_memzero(&y, sizeof(y));
    fl_memzero(&tmp, sizeof(tmp));
}

int fl__sa_shamir_combine(uint8_t secret[32], const struct fl__sa_share *shares, size_t k) {
    struct fl__sa_combine_job job = {secret, shares, k, -1};
    if (!secret)
        return -1;
    fl__sa_shamir_combine_many(&job, 1, NULL, 0);
    return job.rc;
}
