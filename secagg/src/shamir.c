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

/* out = r, a limb at a time. A memcpy here became two 16-byte loads of r, which had just
 * been written 8 bytes at a time: the loads could not be forwarded from those stores and
 * stalled, ~4% of combine's time (docs/secagg.md, "Server per-client work"). */
static inline void sa_fe_put(struct sa_fe *out, const uint64_t r[FL__SA_FE_LIMBS]) {
    FL__SA_UNROLL
    for (int i = 0; i < FL__SA_FE_LIMBS; i++)
        out->v[i] = r[i];
}

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
    sa_fe_put(out, r);
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

/* out = t mod p for t < 2^323 (six limbs): sa_fe_reduce_wide with H = t >> 256 < 2^67, so
 * c = 297 H has two limbs and L - c + p lies in (0, 2p): one conditional subtraction, which
 * `full` = 0 leaves out (out is then congruent to t and below 2p, not reduced; a < 2p times
 * a 64-bit word plus c <= p is still below 2^323). `full` is a compile-time constant at
 * every call. */
static inline void sa_fe_reduce_narrow_to(struct sa_fe *out, const uint64_t t[6], int full) {
    uint64_t r[FL__SA_FE_LIMBS];
    fl__sa_u128 m = (fl__sa_u128)t[4] * 297u;
    uint64_t c0 = (uint64_t)m;
    uint64_t c1 = t[5] * 297u + (uint64_t)(m >> 64); /* t[5] < 8: no overflow */
    uint64_t borrow = 0, carry = 0;
    r[0] = sa_sbb(t[0], c0, &borrow);
    r[1] = sa_sbb(t[1], c1, &borrow);
    r[2] = sa_sbb(t[2], 0, &borrow);
    r[3] = sa_sbb(t[3], 0, &borrow);
    r[4] = (uint64_t)0 - borrow;
    r[0] = sa_adc(r[0], 297u, &carry); /* + p = + 297 + 2^256 */
    FL__SA_UNROLL
    for (int i = 1; i < 4; i++)
        r[i] = sa_adc(r[i], 0, &carry);
    r[4] += carry + 1u;
    if (full)
        sa_fe_cond_sub_p(r);
    sa_fe_put(out, r);
}

/* out = a * m + c for a public 64-bit multiplier m (a product of share indices or index
 * differences), a < 2p and c <= p (NULL: 0): 5 limb products instead of 16, one reduction,
 * which is partial (out < 2p) when full is 0. */
static inline void sa_fe_mul_small_add_to(struct sa_fe *out, const struct sa_fe *a, uint64_t m,
                                          const struct sa_fe *c, int full) {
    uint64_t t[6];
    uint64_t carry = 0;
    FL__SA_UNROLL
    for (int i = 0; i < FL__SA_FE_LIMBS; i++) {
        fl__sa_u128 x = (fl__sa_u128)a->v[i] * m + carry;
        t[i] = (uint64_t)x;
        carry = (uint64_t)(x >> 64);
    }
    t[FL__SA_FE_LIMBS] = carry; /* a m < 2^322 */
    if (c) {
        uint64_t k = 0;
        FL__SA_UNROLL
        for (int i = 0; i < FL__SA_FE_LIMBS; i++)
            t[i] = sa_adc(t[i], c->v[i], &k);
        t[5] += k; /* a < 2p, c <= p: < 2^322 + 2^257 */
    }
    sa_fe_reduce_narrow_to(out, t, full);
}

static inline void sa_fe_mul_small_add(struct sa_fe *out, const struct sa_fe *a, uint64_t m,
                                       const struct sa_fe *c) {
    sa_fe_mul_small_add_to(out, a, m, c, 1);
}

static inline void sa_fe_mul_small(struct sa_fe *out, const struct sa_fe *a, uint64_t m) {
    sa_fe_mul_small_add(out, a, m, NULL);
}

static void sa_fe_add(struct sa_fe *out, const struct sa_fe *a, const struct sa_fe *b) {
    uint64_t r[FL__SA_FE_LIMBS];
    uint64_t carry = 0;
    FL__SA_UNROLL
    for (int i = 0; i < FL__SA_FE_LIMBS; i++)
        r[i] = sa_adc(a->v[i], b->v[i], &carry);
    sa_fe_cond_sub_p(r); /* a + b < 2p */
    sa_fe_put(out, r);
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
    sa_fe_put(out, r);
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

static inline uint64_t sa_be64(const uint8_t *p) {
    uint64_t w = 0;
    for (int i = 0; i < 8; i++)
        w = (w << 8) | p[i]; /* gcc and clang turn this into one load and a bswap */
    return w;
}

static inline void sa_put_be64(uint8_t *p, uint64_t w) {
    for (int i = 7; i >= 0; i--, w >>= 8)
        p[i] = (uint8_t)w;
}

/* The 33-byte share value y (top byte, then four big-endian limbs): a word at a time, as
 * sa_fe_load_be / sa_fe_store_be with len 33 do a byte at a time (split runs them n t
 * times). */
static inline void sa_fe_load_y(uint64_t r[FL__SA_FE_LIMBS],
                                const uint8_t y[FL__SA_SHARE_Y_BYTES]) {
    r[4] = y[0];
    r[3] = sa_be64(y + 1);
    r[2] = sa_be64(y + 9);
    r[1] = sa_be64(y + 17);
    r[0] = sa_be64(y + 25);
}

static inline void sa_fe_store_y(uint8_t y[FL__SA_SHARE_Y_BYTES], const struct sa_fe *a) {
    y[0] = (uint8_t)a->v[4];
    sa_put_be64(y + 1, a->v[3]);
    sa_put_be64(y + 9, a->v[2]);
    sa_put_be64(y + 17, a->v[1]);
    sa_put_be64(y + 25, a->v[0]);
}

/* Loads a 33-byte share value; returns 0 if it is < p, -1 otherwise (computed without a
 * value-dependent branch; the caller fails on -1). */
static int sa_fe_load_share(struct sa_fe *out, const uint8_t y[FL__SA_SHARE_Y_BYTES]) {
    uint64_t borrow = 0;
    sa_fe_load_y(out->v, y);
    for (int i = 0; i < FL__SA_FE_LIMBS; i++) {
        fl__sa_u128 d = (fl__sa_u128)out->v[i] - sa_p[i] - borrow;
        borrow = (uint64_t)(d >> 64) & 1u;
    }
    return (int)borrow - 1; /* borrow 1 (y < p) -> 0, else -1 */
}

/* Uniform field element from 64 random bytes (bias < 2^-255). */
static void sa_fe_from_random(struct sa_fe *out, const uint8_t buf[64]) {
    uint64_t t[10] = {0};
    for (int i = 0; i < 8; i++) {
        uint64_t w = 0;
        for (int j = 0; j < 8; j++)
            w |= (uint64_t)buf[8 * i + j] << (8 * j);
        t[i] = w;
    }
    sa_fe_reduce_wide(out, t);
    fl_memzero(t, sizeof(t));
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

/* Coefficients drawn per call of crypto->random (one system call for up to 16). */
#define SA_RAND_BATCH 16

/* Evaluates f(x) = secret + c1 x + ... + c_{t-1} x^{t-1} at every xs[i] by Horner's rule,
 * drawing the coefficients highest first (SA_RAND_BATCH at a time) so no coefficient array
 * is needed: the running values live in out[i].y. Cost: n*t multiplications by the (small,
 * public) x. */
int fl__sa_shamir_split(struct fl__sa_share *out, const uint32_t *xs, size_t n, size_t t,
                        const uint8_t secret[32], const struct fl__sa_crypto *crypto) {
    uint8_t rnd[SA_RAND_BATCH * 64];
    size_t have = 0, used = 0; /* draws in rnd, and taken (in order, as one stream) */
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
        } else {
            if (used == have) {
                have = j < SA_RAND_BATCH ? j : SA_RAND_BATCH;
                used = 0;
                if (crypto->random(rnd, have * 64) != 0)
                    goto out_wipe;
            }
            sa_fe_from_random(&coeff, rnd + 64 * used++);
        }
        for (size_t i = 0; i < n; i++) {
            sa_fe_load_y(acc.v, out[i].y);
            sa_fe_mul_small_add(&acc, &acc, out[i].x, &coeff);
            sa_fe_store_y(out[i].y, &acc);
        }
    }
    rc = 0;
out_wipe:
    if (rc != 0) {
        for (size_t i = 0; i < n; i++)
            fl_memzero(out[i].y, sizeof(out[i].y));
    }
    fl_memzero(rnd, sizeof(rnd));
    fl_memzero(&coeff, sizeof(coeff));
    fl_memzero(&acc, sizeof(acc));
    return rc;
}

/* ---- combine: Lagrange interpolation at 0, one batched inversion per window ----
 *
 * secret = sum_i y_i L_i(0), L_i(0) = prod_{j != i} x_j / (x_j - x_i) = P / D_i with
 * P = prod_j x_j and D_i = x_i prod_{j != i} (x_j - x_i) = s_i |D_i|, s_i = +-1. Both depend
 * only on the public indices. The sum is kept as one fraction N / Q and each share added
 * in Horner form:
 *
 *     N <- N |D_i| + s_i y_i Q,    Q <- Q |D_i|,
 *
 * so a share costs one full multiplication (y_i Q) and the products of N and Q by the
 * 32-bit factors of |D_i|, gathered into 64-bit words (indices of a 1000-client round are
 * 10-bit numbers: ~6 factors per word, two small multiplications each). The Q of all the
 * jobs of a window are inverted together with Montgomery's trick (three multiplications
 * per job and one Fermat inversion per window); secret = P N / Q. Only N touches secrets,
 * with constant-time field operations; every branch depends on x, k or the window
 * position. */

/* Words of factors applied to N and Q one by one (two small multiplications each); a
 * |D_i| of more words is built as a field element first and applied with two full
 * multiplications (~3 small ones each), as wide indices (large n) need. */
#define SA_DEN_WORDS 6

struct sa_den {
    uint64_t w[SA_DEN_WORDS];
    size_t nw;
    int fe; /* 1: the words so far are folded into d */
    struct sa_fe d;
};

static void sa_den_word(struct sa_den *dd, uint64_t word) {
    if (!dd->fe && dd->nw < SA_DEN_WORDS) {
        dd->w[dd->nw++] = word;
        return;
    }
    if (!dd->fe) {
        sa_fe_from_u32(&dd->d, 1);
        for (size_t i = 0; i < dd->nw; i++)
            sa_fe_mul_small(&dd->d, &dd->d, dd->w[i]);
        dd->fe = 1;
    }
    sa_fe_mul_small(&dd->d, &dd->d, word);
}

/* n = n |D_i| + s_i t, q *= |D_i| (D_i = s_i |D_i|: s_i = -1 if an odd number of x_j < x_i),
 * both reduced; t < p. Factors (< 2^32) are gathered into 64-bit words; between the words
 * of one D_i the products stay partially reduced (below 2p), and s_i t rides on the last
 * word's product (as p - t when s_i = -1, which the public s_i selects). */
static void sa_scale_den_add(struct sa_fe *n, struct sa_fe *q, const struct sa_fe *t,
                             const struct fl__sa_share *sh, size_t k, size_t i) {
    struct sa_den dd;
    uint64_t xi = sh[i].x, pa = xi, pb = 1, prod;
    int neg = 0;
    dd.nw = 0;
    dd.fe = 0;
    /* Two products in turn (even and odd j), so that two multiplications are in flight:
     * one chain of k multiplications was most of this function's time. The factor of
     * j == i is |x_i - x_i| = 0 (indices are distinct), made 1. */
    size_t j = 0;
    for (; j + 1 < k; j += 2) {
        uint64_t xa = sh[j].x, xb = sh[j + 1].x;
        uint64_t fa = xa > xi ? xa - xi : xi - xa, fb = xb > xi ? xb - xi : xi - xb;
        fa += fa == 0;
        fb += fb == 0;
        neg ^= (xa < xi) ^ (xb < xi);
        if (__builtin_mul_overflow(pa, fa, &prod)) {
            sa_den_word(&dd, pa);
            prod = fa;
        }
        pa = prod;
        if (__builtin_mul_overflow(pb, fb, &prod)) {
            sa_den_word(&dd, pb);
            prod = fb;
        }
        pb = prod;
    }
    if (j < k) {
        uint64_t xa = sh[j].x, fa = xa > xi ? xa - xi : xi - xa;
        fa += fa == 0;
        neg ^= xa < xi;
        if (__builtin_mul_overflow(pa, fa, &prod)) {
            sa_den_word(&dd, pa);
            prod = fa;
        }
        pa = prod;
    }
    if (__builtin_mul_overflow(pa, pb, &prod)) {
        sa_den_word(&dd, pa);
        prod = pb;
    }
    sa_den_word(&dd, prod);
    if (dd.fe) {
        sa_fe_mul(n, n, &dd.d);
        sa_fe_mul(q, q, &dd.d);
        if (neg)
            sa_fe_sub(n, n, t);
        else
            sa_fe_add(n, n, t);
        return;
    }
    struct sa_fe c;
    if (neg) { /* c = p - t, in (0, p] */
        uint64_t borrow = 0;
        FL__SA_UNROLL
        for (int l = 0; l < FL__SA_FE_LIMBS; l++)
            c.v[l] = sa_sbb(sa_p[l], t->v[l], &borrow);
    } else {
        c = *t;
    }
    for (size_t w = 0; w + 1 < dd.nw; w++) {
        sa_fe_mul_small_add_to(n, n, dd.w[w], NULL, 0);
        sa_fe_mul_small_add_to(q, q, dd.w[w], NULL, 0);
    }
    sa_fe_mul_small_add_to(n, n, dd.w[dd.nw - 1], &c, 1);
    sa_fe_mul_small_add_to(q, q, dd.w[dd.nw - 1], NULL, 1);
    fl_memzero(&c, sizeof(c));
}

/* P = prod_j x_j mod p. */
static void sa_lagrange_num(struct sa_fe *pr, const struct fl__sa_share *sh, size_t k) {
    uint64_t pend = 1, prod;
    sa_fe_from_u32(pr, 1);
    for (size_t j = 0; j < k; j++) {
        if (__builtin_mul_overflow(pend, (uint64_t)sh[j].x, &prod)) {
            sa_fe_mul_small(pr, pr, pend);
            prod = sh[j].x;
        }
        pend = prod;
    }
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

/* The window's three arrays (Q, N, prefix products) take this much per job. */
#define SA_JOB_SCRATCH (3 * sizeof(struct sa_fe))
_Static_assert(SA_JOB_SCRATCH <= 2 * FL__SA_SHAMIR_SCRATCH_PER_SHARE,
               "a scratch of two shares must hold one job");

/* Window on the stack when the caller gives no scratch (jobs). */
#define SA_STACK_WINDOW 16

/* N / Q for one job: the sum of y_i / D_i. Returns nonzero if a share is >= p. */
static int sa_job_fraction(const struct fl__sa_combine_job *job, struct sa_fe *n, struct sa_fe *q) {
    struct sa_fe y, t;
    int bad = 0;
    memset(n, 0, sizeof(*n));
    sa_fe_from_u32(q, 1);
    for (size_t i = 0; i < job->k; i++) {
        bad |= sa_fe_load_share(&y, job->shares[i].y);
        sa_fe_mul(&t, &y, q);
        sa_scale_den_add(n, q, &t, job->shares, job->k, i);
    }
    fl_memzero(&y, sizeof(y));
    fl_memzero(&t, sizeof(t));
    return bad;
}

/* Finishes a job: secret = P N Q^-1 (qinv given) if every share was < p and the result
 * fits 32 bytes. */
static void sa_job_finish(struct fl__sa_combine_job *job, struct sa_fe *n, const struct sa_fe *qinv,
                          int bad) {
    struct sa_fe pr;
    sa_lagrange_num(&pr, job->shares, job->k);
    sa_fe_mul(n, n, qinv);
    sa_fe_mul(n, n, &pr);
    /* A share >= p is malformed; a result >= 2^256 cannot be a 32-byte secret. */
    if (bad != 0 || n->v[4] != 0) {
        fl_memzero(job->secret, 32);
        job->rc = -1;
    } else {
        sa_fe_store_be(job->secret, 32, n);
        job->rc = 0;
    }
    fl_memzero(n, sizeof(*n));
}

void fl__sa_shamir_combine_many(struct fl__sa_combine_job *jobs, size_t m, void *scratch,
                                size_t scratch_len) {
    struct sa_fe stack_area[3 * SA_STACK_WINDOW];
    struct sa_fe *area = stack_area;
    size_t win = SA_STACK_WINDOW;
    uint8_t bad[256]; /* caps the window: one inversion per 256 jobs is cheap enough */
    size_t used = 0;

    if (scratch && scratch_len / SA_JOB_SCRATCH > SA_STACK_WINDOW) {
        win = scratch_len / SA_JOB_SCRATCH;
        area = scratch;
    }
    if (win > sizeof(bad))
        win = sizeof(bad);
    struct sa_fe *den = area, *num = area + win, *pre = area + 2 * win;
    size_t j = 0;
    while (j < m) {
        /* Gather up to win valid jobs; invalid ones fail here and take no part. */
        size_t c = 0, first = j;
        for (; j < m && c < win; j++) {
            struct fl__sa_combine_job *job = &jobs[j];
            job->rc = -1;
            if (!job->secret)
                continue;
            if (!job->shares || job->k == 0 || sa_check_share_xs(job->shares, job->k) != 0) {
                fl_memzero(job->secret, 32);
                continue;
            }
            bad[c] = (uint8_t)sa_job_fraction(job, &num[c], &den[c]);
            job->rc = 1; /* pending */
            c++;
        }
        if (c == 0)
            continue;
        used = c > used ? c : used;
        sa_fe_batch_inv(den, pre, c);
        c = 0;
        for (size_t q = first; q < j; q++)
            if (jobs[q].rc == 1) {
                sa_job_finish(&jobs[q], &num[c], &den[c], bad[c]);
                c++;
            }
    }
    /* N is secret; Q and the prefixes are not but share the rows. */
    fl_memzero(den, used * sizeof(struct sa_fe));
    fl_memzero(num, used * sizeof(struct sa_fe));
    fl_memzero(pre, used * sizeof(struct sa_fe));
}

int fl__sa_shamir_combine(uint8_t secret[32], const struct fl__sa_share *shares, size_t k) {
    struct fl__sa_combine_job job = {secret, shares, k, -1};
    if (!secret)
        return -1;
    fl__sa_shamir_combine_many(&job, 1, NULL, 0);
    return job.rc;
}
