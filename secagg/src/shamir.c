/* Shamir secret sharing over the prime field p = 2^256 + 297 (crypto.h contract).
 *
 * Field elements are five 64-bit limbs, little-endian, always fully reduced (< p, so the top
 * limb is 0 or 1). Arithmetic on values is branch-free and uses no secret-dependent indices:
 * the only branches depend on public data (share indices x, counts, the fixed exponent p-2).
 *
 * Reduction uses 2^256 == -297 (mod p): a wide value H*2^256 + L is congruent to L - 297*H.
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

/* r = r - p if r >= p, in constant time. r is a 320-bit value < 2^320. */
static void sa_fe_cond_sub_p(uint64_t r[FL__SA_FE_LIMBS]) {
    uint64_t s[FL__SA_FE_LIMBS];
    uint64_t borrow = 0;
    for (int i = 0; i < FL__SA_FE_LIMBS; i++) {
        fl__sa_u128 d = (fl__sa_u128)r[i] - sa_p[i] - borrow;
        s[i] = (uint64_t)d;
        borrow = (uint64_t)(d >> 64) & 1u;
    }
    /* borrow == 1 means r < p: keep r. */
    uint64_t keep = (uint64_t)0 - borrow;
    for (int i = 0; i < FL__SA_FE_LIMBS; i++)
        r[i] = (r[i] & keep) | (s[i] & ~keep);
}

/* out = t mod p for a wide value t (10 limbs) with t < 2^514 (any product of two reduced
 * elements, or 512 random bits). */
static void sa_fe_reduce_wide(struct sa_fe *out, const uint64_t t[10]) {
    uint64_t c[FL__SA_FE_LIMBS + 1];
    uint64_t r[FL__SA_FE_LIMBS];
    uint64_t carry = 0;

    /* c = 297 * H, H = t[4..9] < 2^258, so c < 2^267: c[4] < 2^11 and c[5] = 0. */
    for (int i = 0; i < 6; i++) {
        fl__sa_u128 m = (fl__sa_u128)t[4 + i] * 297u + carry;
        c[i] = (uint64_t)m;
        carry = (uint64_t)(m >> 64);
    }

    /* r = L - c[0..3] (two's complement over 320 bits). */
    uint64_t borrow = 0;
    for (int i = 0; i < 4; i++) {
        fl__sa_u128 d = (fl__sa_u128)t[i] - c[i] - borrow;
        r[i] = (uint64_t)d;
        borrow = (uint64_t)(d >> 64) & 1u;
    }
    r[4] = (uint64_t)0 - borrow;

    /* r += 297 * (c[4] + 2^64 c[5]) (c[4]*2^256 == -297*c[4]; with the sign of L - c this
     * gives L - 297 H). c[5] is 0 by the bound above; it is folded in for safety. */
    fl__sa_u128 add = (fl__sa_u128)c[4] * 297u;
    uint64_t add_hi = c[5] * 297u + (uint64_t)(add >> 64);
    carry = 0;
    for (int i = 0; i < FL__SA_FE_LIMBS; i++) {
        uint64_t a = i == 0 ? (uint64_t)add : (i == 1 ? add_hi : 0u);
        fl__sa_u128 s = (fl__sa_u128)r[i] + a + carry;
        r[i] = (uint64_t)s;
        carry = (uint64_t)(s >> 64);
    }

    /* r is now in (-2^256, 2^256 + 2^21): add p to make it nonnegative (< 3p), then
     * subtract p at most twice. */
    carry = 0;
    for (int i = 0; i < FL__SA_FE_LIMBS; i++) {
        fl__sa_u128 s = (fl__sa_u128)r[i] + sa_p[i] + carry;
        r[i] = (uint64_t)s;
        carry = (uint64_t)(s >> 64);
    }
    sa_fe_cond_sub_p(r);
    sa_fe_cond_sub_p(r);
    memcpy(out->v, r, sizeof(r));
    fl_memzero(r, sizeof(r));
    fl_memzero(c, sizeof(c));
}

static void sa_fe_mul(struct sa_fe *out, const struct sa_fe *a, const struct sa_fe *b) {
    uint64_t t[10] = {0};
    for (int i = 0; i < FL__SA_FE_LIMBS; i++) {
        uint64_t carry = 0;
        for (int j = 0; j < FL__SA_FE_LIMBS; j++) {
            fl__sa_u128 m = (fl__sa_u128)a->v[i] * b->v[j] + t[i + j] + carry;
            t[i + j] = (uint64_t)m;
            carry = (uint64_t)(m >> 64);
        }
        t[i + FL__SA_FE_LIMBS] = carry;
    }
    sa_fe_reduce_wide(out, t);
    fl_memzero(t, sizeof(t));
}

static void sa_fe_add(struct sa_fe *out, const struct sa_fe *a, const struct sa_fe *b) {
    uint64_t r[FL__SA_FE_LIMBS];
    uint64_t carry = 0;
    for (int i = 0; i < FL__SA_FE_LIMBS; i++) {
        fl__sa_u128 s = (fl__sa_u128)a->v[i] + b->v[i] + carry;
        r[i] = (uint64_t)s;
        carry = (uint64_t)(s >> 64);
    }
    sa_fe_cond_sub_p(r); /* a + b < 2p */
    memcpy(out->v, r, sizeof(r));
}

/* out = a - b = (a + p) - b, which lies in (0, 2p). */
static void sa_fe_sub(struct sa_fe *out, const struct sa_fe *a, const struct sa_fe *b) {
    uint64_t r[FL__SA_FE_LIMBS];
    uint64_t carry = 0, borrow = 0;
    for (int i = 0; i < FL__SA_FE_LIMBS; i++) {
        fl__sa_u128 s = (fl__sa_u128)a->v[i] + sa_p[i] + carry;
        carry = (uint64_t)(s >> 64);
        fl__sa_u128 d = (fl__sa_u128)(uint64_t)s - b->v[i] - borrow;
        r[i] = (uint64_t)d;
        borrow = (uint64_t)(d >> 64) & 1u;
    }
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
 * running values live in out[i].y. Cost: n*t multiplications. */
int fl__sa_shamir_split(struct fl__sa_share *out, const uint32_t *xs, size_t n, size_t t,
                        const uint8_t secret[32], const struct fl__sa_crypto *crypto) {
    struct sa_fe coeff, acc, x;
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
            sa_fe_from_u32(&x, out[i].x);
            sa_fe_mul(&acc, &acc, &x);
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

/* secret = sum_i y_i * L_i(0), L_i(0) = prod_{j != i} x_j / (x_j - x_i). The Lagrange
 * weights depend only on the public indices; one Fermat inversion per share keeps this
 * allocation-free (k inversions of ~260 multiplications each). */
int fl__sa_shamir_combine(uint8_t secret[32], const struct fl__sa_share *shares, size_t k) {
    struct sa_fe s = {{0}}, y, num, den, xi, xj, tmp;
    int rc = -1;
    int bad = 0;

    if (!secret || !shares || k == 0)
        return -1;
    if (sa_check_share_xs(shares, k) != 0)
        return -1;

    for (size_t i = 0; i < k; i++) {
        bad |= sa_fe_load_share(&y, shares[i].y);
        sa_fe_from_u32(&num, 1);
        sa_fe_from_u32(&den, 1);
        sa_fe_from_u32(&xi, shares[i].x);
        for (size_t j = 0; j < k; j++) {
            if (j == i)
                continue;
            sa_fe_from_u32(&xj, shares[j].x);
            sa_fe_mul(&num, &num, &xj);
            sa_fe_sub(&tmp, &xj, &xi);
            sa_fe_mul(&den, &den, &tmp);
        }
        sa_fe_inv(&den, &den);
        sa_fe_mul(&num, &num, &den); /* L_i(0) */
        sa_fe_mul(&tmp, &y, &num);
        sa_fe_add(&s, &s, &tmp);
    }
    /* A share >= p is malformed; a result >= 2^256 cannot be a 32-byte secret. */
    if (bad != 0 || s.v[4] != 0)
        goto out_wipe;
    sa_fe_store_be(secret, 32, &s);
    rc = 0;
out_wipe:
    if (rc != 0)
        fl_memzero(secret, 32);
    fl_memzero(&s, sizeof(s));
    fl_memzero(&y, sizeof(y));
    fl_memzero(&tmp, sizeof(tmp));
    return rc;
}
