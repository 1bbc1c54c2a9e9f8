/* Norm proofs for secagg inputs: each client proves, in zero knowledge, that the vector it
 * masks has small centred coordinates and an L2 norm under a public bound, and the server
 * checks after unmasking that the sum is the sum of the proven vectors.
 *
 * Composition of textbook parts over ristretto255 (libsodium), made non-interactive with one
 * Fiat-Shamir challenge (docs/secagg.md "Norm proofs" has the statement and the argument):
 *  - Pedersen commitments, H = the standard base point, G and G_j hashed to the group;
 *  - a vector commitment V = H^rho prod_j G_j^{z_j} whose randomness rho travels, cut into
 *    limbs, inside the masked vector, so that the server learns only sum(rho);
 *  - per-coordinate range proofs by bit decomposition, each bit with a Cramer-Damgard-
 *    Schoenmakers OR proof that its commitment opens to 0 or 1;
 *  - a Schnorr-style proof that V and the bit commitments hold the same z_j and that S commits
 *    to sum z_j^2; a bit-decomposition range proof that bound2 - sum z_j^2 >= 0.
 * Costs are linear in d * m (one OR proof per bit); see the norm benchmark. */

#include <string.h>

#include "secagg_internal.h"

#define NP_SC 32  /* scalar bytes */
#define NP_PT 32  /* point bytes */
#define NP_BIT 96 /* e0 || z0 || z1 */

static uint32_t np_bound_bits(uint64_t b2) {
    uint32_t k = 0;
    while (k < 64 && (b2 >> k) != 0)
        k++;
    return k ? k : 1;
}

static uint32_t np_limb_bits(const fl_secagg_config *c) {
    return c->bits - fl_secagg_headroom_bits(c->num_clients);
}

size_t fl__sa_norm_limbs(const fl_secagg_config *c) {
    if (!c->norm_bits)
        return 0;
    uint32_t w = np_limb_bits(c);
    return w ? (253 + w - 1) / w : 0;
}

size_t fl__sa_vec_len(const fl_secagg_config *c) {
    return (size_t)c->dim + fl__sa_norm_limbs(c);
}

/* Bits per side of a tail coordinate's range [1, tail_max]: z - 1 and tail_max - z. */
static uint32_t np_tail_bits(uint32_t tail_max) {
    uint32_t k = 0;
    while (k < 32 && ((uint64_t)(tail_max - 1) >> k) != 0)
        k++;
    return k ? k : 1;
}

/* Proven bits of the coordinates: m for each, or 2 * tail bits for each tail coordinate. */
static uint64_t np_coord_bits(const fl_secagg_config *c) {
    uint64_t tail = c->dim - c->norm_dim;
    uint64_t per_tail = c->norm_tail_max ? 2u * np_tail_bits(c->norm_tail_max) : c->norm_bits;
    return (uint64_t)c->norm_dim * c->norm_bits + tail * per_tail;
}

size_t fl__sa_norm_proof_bytes(const fl_secagg_config *c) {
    if (!c->norm_bits)
        return 0;
    size_t d = c->dim, nb = (size_t)np_coord_bits(c) + np_bound_bits(c->norm_bound2);
    /* V, S, e, zc, zf; a commitment and an OR proof per bit; za_j, zb_j. */
    return 5 * NP_PT + nb * (NP_PT + NP_BIT) + 2 * d * NP_SC;
}

fl_status fl__sa_norm_config_check(const fl_secagg_config *c, struct fl__err *err) {
    if (!c->norm_bits) {
        if (c->norm_dim || c->norm_bound2 || c->norm_tail_max)
            return fl__err_set(err, FL_ERR_MISUSE,
                               "config.norm_dim/norm_bound2/norm_tail_max: set without "
                               "norm_bits");
        return FL_OK;
    }
    uint32_t head = fl_secagg_headroom_bits(c->num_clients);
    if (c->norm_bits < 2 || c->norm_bits + head > c->bits)
        return fl__err_set(err, FL_ERR_MISUSE,
                           "config.norm_bits: %u not in 2..%u (bits - ceil(log2 n), so the sum "
                           "of n proven inputs cannot wrap)",
                           c->norm_bits, c->bits > head ? c->bits - head : 0);
    if (c->norm_dim > c->dim)
        return fl__err_set(err, FL_ERR_MISUSE, "config.norm_dim: %u over dim %u", c->norm_dim,
                           c->dim);
    /* n tail values of at most tail_max must not reach 2^(b-1) either. */
    if (c->norm_tail_max &&
        (uint64_t)c->norm_tail_max * c->num_clients >= ((uint64_t)1 << (c->bits - 1)))
        return fl__err_set(err, FL_ERR_MISUSE,
                           "config.norm_tail_max: %u x %u clients reaches 2^%u", c->norm_tail_max,
                           c->num_clients, c->bits - 1);
    uint64_t nb = np_coord_bits(c) + np_bound_bits(c->norm_bound2);
    if (nb > FL__SA_NORM_MAX_BITS)
        return fl__err_set(err, FL_ERR_MISUSE,
                           "config.norm_bits: dim * norm_bits = %llu proven bits, over %u "
                           "(each costs %u bytes of proof)",
                           (unsigned long long)nb, (unsigned)FL__SA_NORM_MAX_BITS,
                           (unsigned)(NP_PT + NP_BIT));
#if defined(FL_CRYPTO_MBEDTLS_ONLY)
    return fl__err_set(err, FL_ERR_UNSUPPORTED,
                       "config.norm_bits: norm proofs need libsodium (not in this build)");
#else
    return FL_OK;
#endif
}

#if defined(FL_CRYPTO_MBEDTLS_ONLY)

fl_status fl__sa_norm_prove(uint8_t *proof, uint32_t *limbs, const fl_secagg_config *cfg,
                            uint64_t round_id, uint32_t index, const uint32_t *x,
                            const fl_allocator *a, struct fl__err *err) {
    (void)proof, (void)limbs, (void)cfg, (void)round_id, (void)index, (void)x, (void)a;
    return fl__err_set(err, FL_ERR_UNSUPPORTED, "norm proofs need libsodium");
}

fl_status fl__sa_norm_verify(const fl_secagg_config *cfg, uint64_t round_id, uint32_t index,
                             const uint8_t *proof, size_t len, const fl_allocator *a,
                             struct fl__err *err) {
    (void)cfg, (void)round_id, (void)index, (void)proof, (void)len, (void)a;
    return fl__err_set(err, FL_ERR_UNSUPPORTED, "norm proofs need libsodium");
}

int fl__sa_norm_fold(uint8_t acc[32], const uint8_t *proof) {
    (void)acc, (void)proof;
    return -1;
}

int fl__sa_norm_link_part(uint8_t out[32], const fl_secagg_config *c, const uint32_t *sum,
                          size_t lo, size_t hi) {
    (void)out, (void)c, (void)sum, (void)lo, (void)hi;
    return -1;
}

fl_status fl__sa_norm_link_check(const fl_secagg_config *c, const uint32_t *sum,
                                 const uint8_t part[32], const uint8_t vsum[32],
                                 struct fl__err *err) {
    (void)c, (void)sum, (void)part, (void)vsum;
    return fl__err_set(err, FL_ERR_UNSUPPORTED, "norm proofs need libsodium");
}

#else

#include <sodium.h>

/* The group order l = 2^252 + 27742317777372353535851937790883648493, little-endian. */
static const uint8_t NP_L[32] = {0xed, 0xd3, 0xf5, 0x5c, 0x1a, 0x63, 0x12, 0x58,
                                 0xd6, 0x9c, 0xf7, 0xa2, 0xde, 0xf9, 0xde, 0x14,
                                 0,    0,    0,    0,    0,    0,    0,    0,
                                 0,    0,    0,    0,    0,    0,    0,    0x10};

/* A scalar on the wire must be reduced (< l), so that every proof has one encoding. Public
 * data: not constant time. */
static int sc_canonical(const uint8_t s[32]) {
    for (int i = 31; i >= 0; i--) {
        if (s[i] < NP_L[i])
            return 1;
        if (s[i] > NP_L[i])
            return 0;
    }
    return 0;
}

static void cmov(uint8_t *dst, const uint8_t *src, size_t n, uint8_t flag) {
    uint8_t m = (uint8_t)(0u - (flag & 1u));
    for (size_t i = 0; i < n; i++)
        dst[i] ^= (uint8_t)(m & (dst[i] ^ src[i]));
}

static void sc_from_u64(uint8_t out[32], uint64_t v) {
    memset(out, 0, 32);
    for (int i = 0; i < 8; i++)
        out[i] = (uint8_t)(v >> (8 * i));
}

/* Scalar of a signed value, without a branch on its sign (the prover's values are secret). */
static void sc_from_i64(uint8_t out[32], int64_t v) {
    uint64_t neg = (uint64_t)(v >> 63) & 1u;
    uint64_t mag = ((uint64_t)v ^ (0u - neg)) + neg;
    uint8_t n[32];
    sc_from_u64(out, mag);
    crypto_core_ristretto255_scalar_negate(n, out);
    cmov(out, n, 32, (uint8_t)neg);
    sodium_memzero(n, sizeof(n));
}

/* out = s * P; the identity (all-zero encoding) when s = 0 or P is the identity, for which
 * libsodium returns -1 after computing in constant time. P is valid (checked on parse). */
static void pmul(uint8_t out[32], const uint8_t s[32], const uint8_t P[32]) {
    if (crypto_scalarmult_ristretto255(out, s, P) != 0)
        memset(out, 0, 32);
}

/* pmul for a secret scalar: no branch on the result (libsodium already leaves the identity's
 * all-zero encoding in out when it returns -1). */
static void pmul_ct(uint8_t out[32], const uint8_t s[32], const uint8_t P[32]) {
    int rc = crypto_scalarmult_ristretto255(out, s, P);
    (void)rc;
}

static void bmul(uint8_t out[32], const uint8_t s[32]) {
    if (crypto_scalarmult_ristretto255_base(out, s) != 0)
        memset(out, 0, 32);
}

/* Sums of valid encodings cannot fail; a failure would be a libsodium bug, reported. */
static int padd(uint8_t out[32], const uint8_t P[32], const uint8_t Q[32]) {
    return crypto_core_ristretto255_add(out, P, Q);
}

static int psub(uint8_t out[32], const uint8_t P[32], const uint8_t Q[32]) {
    return crypto_core_ristretto255_sub(out, P, Q);
}

/* Generator `label`[j]: SHA-512 of a domain string hashed to the group (nobody knows a
 * discrete-log relation between it, the base point and the other generators). */
static void gen(uint8_t out[32], const char *label, uint32_t j) {
    static const char dom[] = "flotilla-secagg-norm-v1 generator ";
    crypto_hash_sha512_state h;
    uint8_t jb[4], dig[64];
    fl__put_u32le(jb, j);
    crypto_hash_sha512_init(&h);
    crypto_hash_sha512_update(&h, (const uint8_t *)dom, sizeof(dom) - 1);
    crypto_hash_sha512_update(&h, (const uint8_t *)label, strlen(label) + 1);
    crypto_hash_sha512_update(&h, jb, 4);
    crypto_hash_sha512_final(&h, dig);
    crypto_core_ristretto255_from_hash(out, dig);
}

/* Centred value of a word x < 2^b. */
static int64_t centred(uint32_t x, uint32_t bits) {
    uint64_t mod = (uint64_t)1 << bits;
    return (uint64_t)x >= (mod >> 1) ? (int64_t)x - (int64_t)mod : (int64_t)x;
}

/* The statement: everything public the proof is about, in a fixed order. */
static void absorb_statement(crypto_hash_sha512_state *h, const fl_secagg_config *c,
                             uint64_t round_id, uint32_t index, const uint8_t *proof) {
    static const char dom[] = "flotilla-secagg-norm-v1 statement";
    uint8_t hdr[8 + 4 * 6 + 8 + 4];
    fl__put_u64le(hdr, round_id);
    fl__put_u32le(hdr + 8, index);
    fl__put_u32le(hdr + 12, c->num_clients);
    fl__put_u32le(hdr + 16, c->bits);
    fl__put_u32le(hdr + 20, c->dim);
    fl__put_u32le(hdr + 24, c->norm_bits);
    fl__put_u32le(hdr + 28, c->norm_dim);
    fl__put_u64le(hdr + 32, c->norm_bound2);
    fl__put_u32le(hdr + 40, c->norm_tail_max);
    size_t nb = (size_t)np_coord_bits(c) + np_bound_bits(c->norm_bound2);
    crypto_hash_sha512_init(h);
    crypto_hash_sha512_update(h, (const uint8_t *)dom, sizeof(dom) - 1);
    /* Not the context: a semi-honest server does not know the devices' context, and the
     * round id already makes a proof useless in any other round. */
    crypto_hash_sha512_update(h, hdr, sizeof(hdr));
    /* V, S, then every bit commitment. */
    crypto_hash_sha512_update(h, proof, 2 * NP_PT + nb * NP_PT);
}

/* Offsets into the proof: V | S | coordinate bits, then E (K) | e | per bit (e0 z0 z1) |
 * za (d) | zb (d) | zc | zf. The bits of coordinate j start at cbase(j): m bits of z + 2^(m-1)
 * (j < nd, or every j without a tail range), else kt bits of z - 1 then kt of tail - z. */
struct np_layout {
    size_t d, m, nd, K, nb, kt, tail, dbits;
    size_t V, S, X, e, bits, za, zb, zc, zf, total;
};

static void layout(struct np_layout *L, const fl_secagg_config *c) {
    L->d = c->dim;
    L->m = c->norm_bits;
    L->nd = c->norm_dim;
    L->tail = c->norm_tail_max;
    L->kt = L->tail ? np_tail_bits(c->norm_tail_max) : 0;
    L->K = np_bound_bits(c->norm_bound2);
    L->dbits = (size_t)np_coord_bits(c);
    L->nb = L->dbits + L->K;
    L->V = 0;
    L->S = NP_PT;
    L->X = 2 * NP_PT;
    L->e = L->X + L->nb * NP_PT;
    L->bits = L->e + NP_SC;
    L->za = L->bits + L->nb * NP_BIT;
    L->zb = L->za + L->d * NP_SC;
    L->zc = L->zb + L->d * NP_SC;
    L->zf = L->zc + NP_SC;
    L->total = L->zf + NP_SC;
}

/* Whether coordinate j has the [1, tail] range, and the index of its first bit. */
static int is_tail(const struct np_layout *L, size_t j) { return L->tail && j >= L->nd; }

static size_t cbase(const struct np_layout *L, size_t j) {
    return j < L->nd || !L->tail ? j * L->m : L->nd * L->m + (j - L->nd) * 2 * L->kt;
}

/* ---- prover ---- */

struct np_bit {
    uint8_t r[32];  /* opening of the bit commitment */
    uint8_t t[32];  /* nonce of the real branch */
    uint8_t es[32]; /* challenge of the simulated branch */
    uint8_t zs[32]; /* response of the simulated branch */
    uint8_t beta;   /* the bit */
};

/* Commits to the n low bits of val: B[k].beta, and X + 32k = G^beta H^r_k. With fixed NULL
 * the openings are random and sum receives sum_k 2^k r_k; else they are chosen so that this
 * sum is *fixed (the last group's randomness is then forced, the others stay uniform). The
 * same operations whatever the bits. Returns nonzero if a group operation failed. */
static int commit_bits(uint8_t *X, struct np_bit *B, size_t n, uint64_t val, uint8_t sum[32],
                       const uint8_t *fixed, const uint8_t G[32]) {
    uint8_t s1[32], s2[32], P[32];
    int bad = 0;
    if (fixed)
        memcpy(s2, fixed, 32);
    else
        memset(sum, 0, 32);
    for (size_t k = 0; k < n; k++) {
        B[k].beta = (uint8_t)((val >> k) & 1u);
        if (fixed && k == 0)
            continue;
        crypto_core_ristretto255_scalar_random(B[k].r);
        sc_from_u64(s1, (uint64_t)1 << k);
        crypto_core_ristretto255_scalar_mul(P, s1, B[k].r);
        if (fixed)
            crypto_core_ristretto255_scalar_sub(s2, s2, P);
        else
            crypto_core_ristretto255_scalar_add(sum, sum, P);
    }
    if (fixed)
        memcpy(B[0].r, s2, 32);
    for (size_t k = 0; k < n; k++) {
        uint8_t *D = X + k * NP_PT;
        bmul(D, B[k].r);
        bad |= padd(P, D, G);
        cmov(D, P, 32, B[k].beta);
    }
    sodium_memzero(s1, sizeof(s1));
    sodium_memzero(s2, sizeof(s2));
    sodium_memzero(P, sizeof(P));
    return bad;
}

/* out = sum_k 2^k X_k over n >= 1 points (Horner, from the top). */
static int horner(uint8_t out[32], const uint8_t *X, size_t n) {
    int bad = 0;
    memcpy(out, X + (n - 1) * NP_PT, 32);
    for (size_t k = n - 1; k-- > 0;) {
        bad |= padd(out, out, out);
        bad |= padd(out, out, X + k * NP_PT);
    }
    return bad;
}

struct np_coord {
    uint8_t z[32]; /* centred value as a scalar */
    uint8_t r[32]; /* opening of Q_j = G^z H^r */
    uint8_t a[32], b[32];
    uint8_t Q[32];
};

fl_status fl__sa_norm_prove(uint8_t *proof, uint32_t *limbs, const fl_secagg_config *c,
                            uint64_t round_id, uint32_t index, const uint32_t *x,
                            const fl_allocator *al, struct fl__err *err) {
    struct np_layout L;
    layout(&L, c);
    if (sodium_init() < 0)
        return fl__err_set(err, FL_ERR_CRYPTO, "norm proof: libsodium failed to initialise");
    int64_t lo = -((int64_t)1 << (c->norm_bits - 1)), hi = (int64_t)1 << (c->norm_bits - 1);
    uint64_t v = 0;
    for (size_t j = 0; j < L.d; j++) {
        int64_t z = centred(x[j], c->bits);
        if (is_tail(&L, j) && (z < 1 || z > (int64_t)L.tail))
            return fl__err_set(err, FL_ERR_RANGE,
                               "norm proof: input %zu is %lld, outside [1, %zu]", j,
                               (long long)z, L.tail);
        if (!is_tail(&L, j) && (z < lo || z >= hi))
            return fl__err_set(err, FL_ERR_RANGE,
                               "norm proof: input %zu is %lld, outside [%lld, %lld)", j,
                               (long long)z, (long long)lo, (long long)hi);
        if (j < L.nd) {
            uint64_t sq = (uint64_t)(z * z);
            if (sq > c->norm_bound2 - v || v > c->norm_bound2)
                return fl__err_set(err, FL_ERR_RANGE,
                                   "norm proof: the squared norm of the first %zu inputs "
                                   "exceeds the bound %llu",
                                   L.nd, (unsigned long long)c->norm_bound2);
            v += sq;
        }
    }
    struct np_bit *B = fl__calloc(al, L.nb, sizeof(*B));
    struct np_coord *C = fl__calloc(al, L.d, sizeof(*C));
    if (!B || !C) {
        fl__free(al, B, B ? L.nb * sizeof(*B) : 0);
        fl__free(al, C, C ? L.d * sizeof(*C) : 0);
        return fl__err_set(err, FL_ERR_NOMEM, "norm proof: out of memory");
    }
    fl_status st = FL_OK;
    uint8_t G[32], Gj[32], P[32], T[32], s1[32], s2[32];
    uint8_t rho[32], tau[32], sigma[32], cc[32], ff[32], e[32], dig[64];
    gen(G, "G", 0);
    int bad = 0;

    /* V = H^rho prod_j G_j^{z_j}. */
    crypto_core_ristretto255_scalar_random(rho);
    bmul(proof + L.V, rho);
    for (size_t j = 0; j < L.d; j++) {
        sc_from_i64(C[j].z, centred(x[j], c->bits));
        gen(Gj, "Gj", (uint32_t)j);
        pmul_ct(P, C[j].z, Gj);
        bad |= padd(proof + L.V, proof + L.V, P);
    }
    /* Bit commitments D_jk = G^beta H^r_jk, with r_j = sum_k 2^k r_jk; Q_j = G^{z_j} H^{r_j}
     * is what the verifier rebuilds from them (minus the offset 2^(m-1), or plus 1 for a
     * tail coordinate, whose second group commits to tail - z with openings summing to
     * -r_j, so that it adds up to G^tail / Q_j). */
    for (size_t j = 0; j < L.d; j++) {
        int64_t z = centred(x[j], c->bits);
        size_t i0 = cbase(&L, j);
        uint8_t *X = proof + L.X + i0 * NP_PT;
        if (is_tail(&L, j))
            bad |= commit_bits(X, &B[i0], L.kt, (uint64_t)(z - 1), C[j].r, NULL, G);
        else
            bad |= commit_bits(X, &B[i0], L.m, (uint64_t)(z - lo), C[j].r, NULL, G);
        pmul_ct(C[j].Q, C[j].z, G);
        bmul(P, C[j].r);
        bad |= padd(C[j].Q, C[j].Q, P);
        if (is_tail(&L, j)) {
            crypto_core_ristretto255_scalar_negate(s1, C[j].r);
            bad |= commit_bits(X + L.kt * NP_PT, &B[i0 + L.kt], L.kt,
                               (uint64_t)((int64_t)L.tail - z), s2, s1, G);
        }
    }
    /* S = prod_{j<nd} Q_j^{z_j} H^tau commits to v = sum z_j^2 with sigma = tau + sum z_j r_j. */
    crypto_core_ristretto255_scalar_random(tau);
    bmul(proof + L.S, tau);
    memcpy(sigma, tau, 32);
    for (size_t j = 0; j < L.nd; j++) {
        pmul_ct(P, C[j].z, C[j].Q);
        bad |= padd(proof + L.S, proof + L.S, P);
        crypto_core_ristretto255_scalar_mul(s1, C[j].z, C[j].r);
        crypto_core_ristretto255_scalar_add(sigma, sigma, s1);
    }
    /* E_k = G^gamma_k H^u_k for the bits of bound2 - v, with sum_k 2^k u_k = -sigma so that
     * their weighted sum is G^bound2 / S. */
    crypto_core_ristretto255_scalar_negate(s1, sigma);
    bad |= commit_bits(proof + L.X + L.dbits * NP_PT, &B[L.dbits], L.K, c->norm_bound2 - v, s2,
                       s1, G);

    crypto_hash_sha512_state h;
    absorb_statement(&h, c, round_id, index, proof);
    /* OR proofs, first messages: the real branch is H^t; the other is simulated from a
     * chosen challenge and response. Same operations whatever the bit. */
    for (size_t i = 0; i < L.nb; i++) {
        struct np_bit *b = &B[i];
        const uint8_t *X = proof + L.X + i * NP_PT;
        uint8_t X1[32], Xs[32], Ar[32], As[32];
        bad |= psub(X1, X, G);
        memcpy(Xs, X1, 32);
        cmov(Xs, X, 32, b->beta); /* simulated branch: 1 - beta */
        crypto_core_ristretto255_scalar_random(b->t);
        crypto_core_ristretto255_scalar_random(b->es);
        crypto_core_ristretto255_scalar_random(b->zs);
        bmul(Ar, b->t);
        bmul(As, b->zs);
        pmul_ct(P, b->es, Xs);
        bad |= psub(As, As, P);
        memcpy(s1, Ar, 32); /* A0 */
        cmov(s1, As, 32, b->beta);
        memcpy(s2, As, 32); /* A1 */
        cmov(s2, Ar, 32, b->beta);
        crypto_hash_sha512_update(&h, s1, 32);
        crypto_hash_sha512_update(&h, s2, 32);
    }
    /* Link proof, first messages. */
    for (size_t j = 0; j < L.d; j++) {
        crypto_core_ristretto255_scalar_random(C[j].a);
        crypto_core_ristretto255_scalar_random(C[j].b);
        pmul_ct(T, C[j].a, G);
        bmul(P, C[j].b);
        bad |= padd(T, T, P);
        crypto_hash_sha512_update(&h, T, 32);
    }
    crypto_core_ristretto255_scalar_random(cc);
    bmul(T, cc);
    for (size_t j = 0; j < L.d; j++) {
        gen(Gj, "Gj", (uint32_t)j);
        pmul_ct(P, C[j].a, Gj);
        bad |= padd(T, T, P);
    }
    crypto_hash_sha512_update(&h, T, 32);
    crypto_core_ristretto255_scalar_random(ff);
    bmul(T, ff);
    for (size_t j = 0; j < L.nd; j++) {
        pmul_ct(P, C[j].a, C[j].Q);
        bad |= padd(T, T, P);
    }
    crypto_hash_sha512_update(&h, T, 32);
    crypto_hash_sha512_final(&h, dig);
    crypto_core_ristretto255_scalar_reduce(e, dig);
    memcpy(proof + L.e, e, 32);

    /* Responses. */
    for (size_t i = 0; i < L.nb; i++) {
        struct np_bit *b = &B[i];
        uint8_t er[32], zr[32], *o = proof + L.bits + i * NP_BIT;
        crypto_core_ristretto255_scalar_sub(er, e, b->es);
        crypto_core_ristretto255_scalar_mul(zr, er, b->r);
        crypto_core_ristretto255_scalar_add(zr, zr, b->t);
        memcpy(o, er, 32); /* e0 */
        cmov(o, b->es, 32, b->beta);
        memcpy(o + 32, zr, 32); /* z0 */
        cmov(o + 32, b->zs, 32, b->beta);
        memcpy(o + 64, b->zs, 32); /* z1 */
        cmov(o + 64, zr, 32, b->beta);
        sodium_memzero(er, sizeof(er));
        sodium_memzero(zr, sizeof(zr));
    }
    for (size_t j = 0; j < L.d; j++) {
        crypto_core_ristretto255_scalar_mul(s1, e, C[j].z);
        crypto_core_ristretto255_scalar_add(proof + L.za + j * NP_SC, C[j].a, s1);
        crypto_core_ristretto255_scalar_mul(s1, e, C[j].r);
        crypto_core_ristretto255_scalar_add(proof + L.zb + j * NP_SC, C[j].b, s1);
    }
    crypto_core_ristretto255_scalar_mul(s1, e, rho);
    crypto_core_ristretto255_scalar_add(proof + L.zc, cc, s1);
    crypto_core_ristretto255_scalar_mul(s1, e, tau);
    crypto_core_ristretto255_scalar_add(proof + L.zf, ff, s1);

    /* rho in limbs of w bits; their sum over n clients cannot wrap mod 2^b. */
    uint32_t w = np_limb_bits(c);
    size_t nl = fl__sa_norm_limbs(c);
    for (size_t k = 0; k < nl; k++) {
        uint32_t limb = 0;
        for (uint32_t i = 0; i < w; i++) {
            size_t bit = k * w + i;
            if (bit < 256)
                limb |= (uint32_t)((rho[bit / 8] >> (bit % 8)) & 1u) << i;
        }
        limbs[k] = limb;
    }
    if (bad)
        st = fl__err_set(err, FL_ERR_CRYPTO, "norm proof: a group operation failed");

    sodium_memzero(B, L.nb * sizeof(*B));
    sodium_memzero(C, L.d * sizeof(*C));
    fl__free(al, B, L.nb * sizeof(*B));
    fl__free(al, C, L.d * sizeof(*C));
    sodium_memzero(rho, sizeof(rho));
    sodium_memzero(tau, sizeof(tau));
    sodium_memzero(sigma, sizeof(sigma));
    sodium_memzero(cc, sizeof(cc));
    sodium_memzero(ff, sizeof(ff));
    sodium_memzero(s1, sizeof(s1));
    sodium_memzero(s2, sizeof(s2));
    sodium_memzero(P, sizeof(P));
    sodium_memzero(T, sizeof(T));
    if (st != FL_OK)
        sodium_memzero(proof, L.total);
    return st;
}

/* ---- verifier ---- */

fl_status fl__sa_norm_verify(const fl_secagg_config *c, uint64_t round_id, uint32_t index,
                             const uint8_t *proof, size_t len, const fl_allocator *al,
                             struct fl__err *err) {
    struct np_layout L;
    layout(&L, c);
    if (sodium_init() < 0)
        return fl__err_set(err, FL_ERR_CRYPTO, "norm proof: libsodium failed to initialise");
    if (len != L.total)
        return fl__err_set(err, FL_ERR_FORMAT, "norm proof: %zu bytes, expected %zu", len,
                           L.total);
    for (size_t i = 0; i < 2 + L.nb; i++)
        if (!crypto_core_ristretto255_is_valid_point(proof + i * NP_PT))
            return fl__err_set(err, FL_ERR_FORMAT, "norm proof: point %zu is not a valid "
                               "ristretto255 encoding", i);
    for (size_t o = L.e; o < L.total; o += NP_SC)
        if (!sc_canonical(proof + o))
            return fl__err_set(err, FL_ERR_FORMAT, "norm proof: scalar at byte %zu is not "
                               "reduced", o);
    uint8_t (*Q)[32] = fl__alloc_array(al, L.d, 32);
    if (!Q)
        return fl__err_set(err, FL_ERR_NOMEM, "norm proof: out of memory");
    uint8_t G[32], Gj[32], P[32], T[32], s1[32], e[32], dig[64];
    int bad = 0;
    gen(G, "G", 0);
    const uint8_t *e_in = proof + L.e;
    memcpy(e, e_in, 32);
    /* Q_j = (sum_k 2^k D_jk) / G^(2^(m-1)); for a tail coordinate (sum_k 2^k D_jk) G, and
     * its second group must add up to G^tail / Q_j. */
    uint8_t off[32], Gt[32];
    sc_from_u64(s1, (uint64_t)1 << (L.m - 1));
    pmul(off, s1, G);
    sc_from_u64(s1, L.tail);
    pmul(Gt, s1, G);
    int bound_ok = 1;
    for (size_t j = 0; j < L.d; j++) {
        const uint8_t *D = proof + L.X + cbase(&L, j) * NP_PT;
        if (is_tail(&L, j)) {
            bad |= horner(P, D, L.kt);
            bad |= padd(Q[j], P, G);
            bad |= horner(P, D + L.kt * NP_PT, L.kt);
            bad |= psub(T, Gt, Q[j]);
            bound_ok &= memcmp(P, T, 32) == 0;
        } else {
            bad |= horner(P, D, L.m);
            bad |= psub(Q[j], P, off);
        }
    }
    /* sum_k 2^k E_k must be G^bound2 / S. */
    bad |= horner(P, proof + L.X + L.dbits * NP_PT, L.K);
    sc_from_u64(s1, c->norm_bound2);
    pmul(T, s1, G);
    bad |= psub(T, T, proof + L.S);
    bound_ok &= memcmp(P, T, 32) == 0;

    crypto_hash_sha512_state h;
    absorb_statement(&h, c, round_id, index, proof);
    for (size_t i = 0; i < L.nb; i++) {
        const uint8_t *X = proof + L.X + i * NP_PT, *b = proof + L.bits + i * NP_BIT;
        uint8_t e1[32], X1[32], A[32];
        crypto_core_ristretto255_scalar_sub(e1, e, b);
        bmul(A, b + 32); /* A0 = H^z0 / X^e0 */
        pmul(P, b, X);
        bad |= psub(A, A, P);
        crypto_hash_sha512_update(&h, A, 32);
        bad |= psub(X1, X, G); /* A1 = H^z1 / (X/G)^e1 */
        bmul(A, b + 64);
        pmul(P, e1, X1);
        bad |= psub(A, A, P);
        crypto_hash_sha512_update(&h, A, 32);
    }
    for (size_t j = 0; j < L.d; j++) { /* T_j = G^za H^zb / Q_j^e */
        pmul(T, proof + L.za + j * NP_SC, G);
        bmul(P, proof + L.zb + j * NP_SC);
        bad |= padd(T, T, P);
        pmul(P, e, Q[j]);
        bad |= psub(T, T, P);
        crypto_hash_sha512_update(&h, T, 32);
    }
    bmul(T, proof + L.zc); /* T_V = H^zc prod G_j^za / V^e */
    for (size_t j = 0; j < L.d; j++) {
        gen(Gj, "Gj", (uint32_t)j);
        pmul(P, proof + L.za + j * NP_SC, Gj);
        bad |= padd(T, T, P);
    }
    pmul(P, e, proof + L.V);
    bad |= psub(T, T, P);
    crypto_hash_sha512_update(&h, T, 32);
    bmul(T, proof + L.zf); /* T_S = H^zf prod_{j<nd} Q_j^za / S^e */
    for (size_t j = 0; j < L.nd; j++) {
        pmul(P, proof + L.za + j * NP_SC, Q[j]);
        bad |= padd(T, T, P);
    }
    pmul(P, e, proof + L.S);
    bad |= psub(T, T, P);
    crypto_hash_sha512_update(&h, T, 32);
    crypto_hash_sha512_final(&h, dig);
    crypto_core_ristretto255_scalar_reduce(s1, dig);
    fl__free(al, Q, L.d * 32);
    if (bad)
        return fl__err_set(err, FL_ERR_CRYPTO, "norm proof: a group operation failed");
    if (!bound_ok)
        return fl__err_set(err, FL_ERR_CRYPTO, "norm proof: the slack commitments do not add "
                           "up to the bound (or a tail coordinate's to its range)");
    if (memcmp(s1, e, 32) != 0)
        return fl__err_set(err, FL_ERR_CRYPTO, "norm proof: does not verify");
    return FL_OK;
}

int fl__sa_norm_fold(uint8_t acc[32], const uint8_t *proof) {
    return padd(acc, acc, proof);
}

/* After unmasking: H^R prod_j G_j^{s_j} must equal the product of the folded commitments,
 * where s_j is the centred sum and R the sum of the clients' rho, rebuilt from the limbs.
 * The product over j is cut into parts (the server's mask jobs compute one each). */
int fl__sa_norm_link_part(uint8_t out[32], const fl_secagg_config *c, const uint32_t *sum,
                          size_t lo, size_t hi) {
    uint32_t mask = fl__sa_bitmask(c->bits);
    uint8_t s1[32], P[32], Gj[32];
    int bad = 0;
    memset(out, 0, 32);
    for (size_t j = lo; j < hi && j < c->dim; j++) {
        sc_from_i64(s1, centred(sum[j] & mask, c->bits));
        gen(Gj, "Gj", (uint32_t)j);
        pmul(P, s1, Gj);
        bad |= padd(out, out, P);
    }
    return bad;
}

fl_status fl__sa_norm_link_check(const fl_secagg_config *c, const uint32_t *sum,
                                 const uint8_t part[32], const uint8_t vsum[32],
                                 struct fl__err *err) {
    uint32_t mask = fl__sa_bitmask(c->bits), w = np_limb_bits(c);
    size_t nl = fl__sa_norm_limbs(c);
    uint8_t R[32], s1[32], s2[32], T[32];
    memset(R, 0, 32);
    for (size_t k = 0; k < nl; k++) {
        sc_from_u64(s1, sum[c->dim + k] & mask);
        memset(s2, 0, 32);
        s2[(k * w) / 8] = (uint8_t)(1u << ((k * w) % 8));
        crypto_core_ristretto255_scalar_mul(s1, s1, s2);
        crypto_core_ristretto255_scalar_add(R, R, s1);
    }
    bmul(T, R);
    if (padd(T, T, part) != 0)
        return fl__err_set(err, FL_ERR_CRYPTO, "norm link: a group operation failed");
    if (memcmp(T, vsum, 32) != 0)
        return fl__err_set(err, FL_ERR_PROTOCOL,
                           "norm link: the sum is not the sum of the proven inputs (a client "
                           "masked another vector than the one it proved)");
    return FL_OK;
}

#endif
