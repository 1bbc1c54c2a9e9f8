/* Fuzz target: differential Ed25519 verification. Every input is verified on both secagg
 * crypto backends (crypto.h: sodium-openssl, whose verify is libsodium 1.0.18's
 * crypto_sign_verify_detached, the reference policy; and mbedtls, ed25519_mbedtls.c), and
 * the harness traps when their decisions differ. Random bytes are rejected by both almost
 * always, so the input first picks a mode that builds structured cases:
 *
 *   byte 0 % 3 = 0  raw:     pk[32] sig[64] msg...          (bytes 1, 33, 97)
 *   byte 0 % 3 = 1  signed:  seed[32] mut p0 p1 extra[32] msg...  (bytes 1, 33-35, 36, 68)
 *   byte 0 % 3 = 2  crafted: seed[32] r[32] ti tj flags msg...    (bytes 1, 33, 65-67, 68)
 *
 * A short input reads as if zero-padded to its mode's header; the message is the rest
 * (at most FZ_MSG_MAX bytes).
 *
 * signed: a key pair and a signature from both backends (keys and signatures must be
 * byte-identical, the honest signature must verify on both), then one mutation, mut % 12:
 * 0 none, 1-3 flip bit p0 of R / S / A, 4 flip bit (p0 | p1 << 8) of the message, 5 S + k L
 * (k = 1 + p0 % 16, mod 2^256: non-canonical S while it fits), 6 S = extra, 7 / 8 A / R =
 * one of the special encodings (small order, y = p, y = p + 1; sign bit p1 & 1), 9 / 10 A /
 * R = y + p for y = p0 % 19 (non-canonical; y = 0, 1 are y = p, p + 1), 11 A + T for T =
 * [p0 % 8]T8 of order dividing 8, re-signed by both backends with sk = seed || (A + T).
 *
 * crafted: a signature with a chosen nonce and torsion in A and R, made here with
 * libsodium's group arithmetic: A' = [a]B + [tj]T8, R = [r]B + [ti]T8, S = r + k a mod L,
 * k = SHA-512(R || A' || M) mod L. [S]B - [k]A' = [r]B - [k tj]T8, so libsodium's
 * cofactorless check accepts iff ti = -k tj mod 8; the harness checks the reference against
 * that model too. flags & 1 searches ti for an accepted case (k depends on R, so 1 in 8
 * candidates matches on average); flags & 2 adds L to S (must then be rejected).
 *
 * Harness failures that mean a broken harness, not a backend disagreement, also trap. */
#include <sodium.h>
#include <stdint.h>
#include <string.h>

#include "crypto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FZ_MSG_MAX 1024

/* The points [i]T8, i = 0..7, for a point T8 of order 8 (as test_ed25519_mbedtls.c lists
 * them): [k][i]T8 = [k i mod 8]T8, so torsion arithmetic is index arithmetic mod 8. */
static const uint8_t fz_torsion[8][32] = {
    {0x01},
    {0xc7, 0x17, 0x6a, 0x70, 0x3d, 0x4d, 0xd8, 0x4f, 0xba, 0x3c, 0x0b,
     0x76, 0x0d, 0x10, 0x67, 0x0f, 0x2a, 0x20, 0x53, 0xfa, 0x2c, 0x39,
     0xcc, 0xc6, 0x4e, 0xc7, 0xfd, 0x77, 0x92, 0xac, 0x03, 0x7a},
    {[31] = 0x80},
    {0x26, 0xe8, 0x95, 0x8f, 0xc2, 0xb2, 0x27, 0xb0, 0x45, 0xc3, 0xf4,
     0x89, 0xf2, 0xef, 0x98, 0xf0, 0xd5, 0xdf, 0xac, 0x05, 0xd3, 0xc6,
     0x33, 0x39, 0xb1, 0x38, 0x02, 0x88, 0x6d, 0x53, 0xfc, 0x05},
    {0xec, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
     0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
     0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f},
    {0x26, 0xe8, 0x95, 0x8f, 0xc2, 0xb2, 0x27, 0xb0, 0x45, 0xc3, 0xf4,
     0x89, 0xf2, 0xef, 0x98, 0xf0, 0xd5, 0xdf, 0xac, 0x05, 0xd3, 0xc6,
     0x33, 0x39, 0xb1, 0x38, 0x02, 0x88, 0x6d, 0x53, 0xfc, 0x85},
    {0},
    {0xc7, 0x17, 0x6a, 0x70, 0x3d, 0x4d, 0xd8, 0x4f, 0xba, 0x3c, 0x0b,
     0x76, 0x0d, 0x10, 0x67, 0x0f, 0x2a, 0x20, 0x53, 0xfa, 0x2c, 0x39,
     0xcc, 0xc6, 0x4e, 0xc7, 0xfd, 0x77, 0x92, 0xac, 0x03, 0xfa},
};

/* L = 2^252 + 27742317777372353535851937790883648493, little-endian. */
static const uint8_t fz_l[32] = {0xed, 0xd3, 0xf5, 0x5c, 0x1a, 0x63, 0x12, 0x58, 0xd6, 0x9c, 0xf7,
                                 0xa2, 0xde, 0xf9, 0xde, 0x14, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
                                 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10};

struct fz_pair {
    const struct fl__sa_crypto *s; /* sodium-openssl: the reference */
    const struct fl__sa_crypto *m; /* mbedtls */
};

/* Verifies on both backends; traps on different decisions (or a return other than 0/-1). */
static int fz_verify(const struct fz_pair *b, const uint8_t sig[64], const uint8_t *msg, size_t len,
                     const uint8_t pk[32]) {
    int rs = b->s->ed25519_verify(sig, len ? msg : NULL, len, pk);
    int rm = b->m->ed25519_verify(sig, len ? msg : NULL, len, pk);
    if (rs != rm || (rs != 0 && rs != -1))
        __builtin_trap();
    return rs;
}

/* z = x + y mod 2^256 (little-endian): S + k L wraps only when it no longer fits. */
static void fz_add256(uint8_t z[32], const uint8_t x[32], const uint8_t y[32]) {
    unsigned carry = 0;
    for (int i = 0; i < 32; i++) {
        carry += (unsigned)x[i] + y[i];
        z[i] = (uint8_t)carry;
        carry >>= 8;
    }
}

/* The special encodings of mutations 7 and 8: the eight small-order points (their y, so
 * with the sign bit they also give x = 0 with the sign bit set), y = p and y = p + 1. */
static void fz_special(uint8_t out[32], unsigned which, int sign) {
    if (which < 8) {
        memcpy(out, fz_torsion[which], 32);
    } else {
        memset(out, 0xff, 32);
        out[0] = which == 8 ? 0xed : 0xee;
        out[31] = 0x7f;
    }
    out[31] = (uint8_t)((out[31] & 0x7f) | (sign ? 0x80 : 0));
}

/* y + p for a small y (< 19, so it stays below 2^255), with the given sign bit. */
static void fz_noncanonical(uint8_t out[32], unsigned y, int sign) {
    memset(out, 0xff, 32);
    out[0] = (uint8_t)(0xed + y);
    out[31] = (uint8_t)(0x7f | (sign ? 0x80 : 0));
}

/* k = SHA-512(r || a || msg) mod L; returns k mod 8 (k[0] & 7). */
static unsigned fz_challenge(uint8_t k[32], const uint8_t r[32], const uint8_t a[32],
                             const uint8_t *msg, size_t len) {
    crypto_hash_sha512_state h;
    uint8_t dig[64];
    crypto_hash_sha512_init(&h);
    crypto_hash_sha512_update(&h, r, 32);
    crypto_hash_sha512_update(&h, a, 32);
    crypto_hash_sha512_update(&h, msg, len);
    crypto_hash_sha512_final(&h, dig);
    crypto_core_ed25519_scalar_reduce(k, dig);
    return k[0] & 7u;
}

/* ---- the three modes ---- */

static void fz_raw(const struct fz_pair *b, const uint8_t *hdr, const uint8_t *msg, size_t len) {
    (void)fz_verify(b, hdr + 33, msg, len, hdr + 1);
}

static void fz_signed(const struct fz_pair *b, const uint8_t *hdr, const uint8_t *msg_in,
                      size_t len) {
    static uint8_t msg[FZ_MSG_MAX + 1];
    const uint8_t *seed = hdr + 1, *extra = hdr + 36;
    unsigned mut = hdr[33] % 12u, p0 = hdr[34], p1 = hdr[35];
    uint8_t pk[32], sk[64], pk2[32], sk2[64], sig[64], sig2[64], kl[32] = {0};
    memcpy(msg, msg_in, len);
    if (b->s->ed25519_keypair(pk, sk, seed) != 0 || b->m->ed25519_keypair(pk2, sk2, seed) != 0 ||
        memcmp(pk, pk2, 32) != 0 || memcmp(sk, sk2, 64) != 0)
        __builtin_trap();
    if (b->s->ed25519_sign(sig, msg, len, sk) != 0 || b->m->ed25519_sign(sig2, msg, len, sk) != 0 ||
        memcmp(sig, sig2, 64) != 0)
        __builtin_trap();
    if (fz_verify(b, sig, msg, len, pk) != 0)
        __builtin_trap(); /* an honest signature must verify */
    switch (mut) {
    case 0:
        return;
    case 1:
    case 2:
        sig[(mut - 1) * 32 + (p0 >> 3)] ^= (uint8_t)(1u << (p0 & 7));
        break;
    case 3:
        pk[p0 >> 3] ^= (uint8_t)(1u << (p0 & 7));
        break;
    case 4:
        if (len == 0) {
            msg[0] = (uint8_t)p0; /* an empty message signed, a 1-byte one checked */
            len = 1;
        } else {
            size_t bit = (p0 | (p1 << 8)) % (8 * len);
            msg[bit >> 3] ^= (uint8_t)(1u << (bit & 7));
        }
        break;
    case 5:
        /* S + k L: k L = L added k times (k <= 16; wraps mod 2^256 past ~15 L). */
        for (unsigned i = 0; i <= p0 % 16u; i++)
            fz_add256(kl, kl, fz_l);
        fz_add256(sig + 32, sig + 32, kl);
        break;
    case 6:
        memcpy(sig + 32, extra, 32);
        break;
    case 7:
    case 8:
        fz_special(mut == 7 ? pk : sig, p0 % 10u, (int)(p1 & 1));
        break;
    case 9:
    case 10:
        fz_noncanonical(mut == 9 ? pk : sig, p0 % 19u, (int)(p1 & 1));
        break;
    default: {
        /* Mixed-order key A + T, signed by both backends with it (sign hashes sk[32..64]
         * as given): accepted iff [k]T = O, k = SHA-512(R || A + T || M) mod L. */
        uint8_t k[32];
        unsigned j = p0 % 8u;
        memcpy(sk2, sk, 32);
        if (crypto_core_ed25519_add(sk2 + 32, pk, fz_torsion[j]) != 0)
            __builtin_trap();
        if (b->s->ed25519_sign(sig, msg, len, sk2) != 0 ||
            b->m->ed25519_sign(sig2, msg, len, sk2) != 0 || memcmp(sig, sig2, 64) != 0)
            __builtin_trap();
        memcpy(pk, sk2 + 32, 32);
        int want = (fz_challenge(k, sig, pk, msg, len) * j) % 8u == 0 ? 0 : -1;
        if (fz_verify(b, sig, msg, len, pk) != want)
            __builtin_trap(); /* the reference left the model */
        return;
    }
    }
    (void)fz_verify(b, sig, msg, len, pk);
}

static void fz_crafted(const struct fz_pair *b, const uint8_t *hdr, const uint8_t *msg,
                       size_t len) {
    const uint8_t *seed = hdr + 1;
    unsigned ti = hdr[65] % 8u, tj = hdr[66] % 8u, flags = hdr[67];
    uint8_t h[64], wide[64] = {0}, a[32], r[32], rb[32], pk[32], sk[64], apk[32], k[32];
    uint8_t ka[32], sig[64];
    /* a = the clamped secret scalar of seed, mod L; [a]B is the seed's public key. */
    crypto_hash_sha512(h, seed, 32);
    h[0] &= 248;
    h[31] &= 127;
    h[31] |= 64;
    memcpy(wide, h, 32);
    crypto_core_ed25519_scalar_reduce(a, wide);
    memcpy(wide, hdr + 33, 32);
    crypto_core_ed25519_scalar_reduce(r, wide);
    if (sodium_is_zero(r, 32))
        r[0] = 1; /* [0]B + T would be small-order: rejected before any arithmetic */
    if (b->s->ed25519_keypair(pk, sk, seed) != 0 ||
        crypto_scalarmult_ed25519_base_noclamp(rb, r) != 0 ||
        crypto_core_ed25519_add(apk, pk, fz_torsion[tj]) != 0)
        __builtin_trap();
    if (flags & 1) {
        for (unsigned i = 0; i < 8; i++) {
            if (crypto_core_ed25519_add(sig, rb, fz_torsion[i]) != 0)
                __builtin_trap();
            if ((8u - fz_challenge(k, sig, apk, msg, len) * tj % 8u) % 8u == i) {
                ti = i;
                break;
            }
        }
    }
    if (crypto_core_ed25519_add(sig, rb, fz_torsion[ti]) != 0)
        __builtin_trap();
    unsigned k8 = fz_challenge(k, sig, apk, msg, len);
    crypto_core_ed25519_scalar_mul(ka, k, a);
    crypto_core_ed25519_scalar_add(sig + 32, r, ka);
    int want = (8u - k8 * tj % 8u) % 8u == ti ? 0 : -1;
    if (flags & 2) {
        fz_add256(sig + 32, sig + 32, fz_l); /* S + L < 2^254: fits, and must be rejected */
        want = -1;
    }
    if (fz_verify(b, sig, msg, len, apk) != want)
        __builtin_trap(); /* the reference left the model */
    sodium_memzero(h, sizeof(h));
    sodium_memzero(wide, sizeof(wide));
    sodium_memzero(sk, sizeof(sk));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const size_t hdr_len[3] = {97, 68, 68};
    struct fz_pair b = {fl__sa_crypto_get(FL__SA_BACKEND_SODIUM),
                        fl__sa_crypto_get(FL__SA_BACKEND_MBEDTLS)};
    uint8_t hdr[97] = {0};
    if (size == 0 || !b.s || !b.m)
        return 0; /* nothing to compare in a build with one backend */
    unsigned mode = data[0] % 3u;
    size_t n = size < hdr_len[mode] ? size : hdr_len[mode];
    memcpy(hdr, data, n);
    const uint8_t *msg = data + n;
    size_t len = size - n;
    if (len > FZ_MSG_MAX)
        len = FZ_MSG_MAX;
    if (mode == 0)
        fz_raw(&b, hdr, msg, len);
    else if (mode == 1)
        fz_signed(&b, hdr, msg, len);
    else
        fz_crafted(&b, hdr, msg, len);
    return 0;
}
